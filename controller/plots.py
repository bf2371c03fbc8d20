"""PNG plots of a run log (matplotlib, Agg backend; no display needed).

``plot_run(log_dir, out_dir)`` writes:

* ``tracking.png``  -- reference and measured position per controller axis;
* ``error.png``     -- tracking error per axis;
* ``torque.png``    -- controller output, commanded and measured torque per actuator;
* ``timing.png``    -- histograms of cycle lateness and compute time.

In task space the measured pose is ``ref_pos - err`` (the logged error is
``ref - measured``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from dynamics.errors import ConfigError

from .telemetry import read_log, read_meta

__all__ = ["plot_run"]


def _axis_names(meta: dict, dim: int, space: str) -> list[str]:
    if space == "task":
        return {3: ["x [m]", "y [m]", "phi [rad]"],
                6: ["x [m]", "y [m]", "z [m]", "alpha [rad]", "beta [rad]", "gamma [rad]"]}.get(
                    dim, [f"X{i}" for i in range(dim)])
    names = meta.get("joint_names") or [f"q{i}" for i in range(dim)]
    return [str(n) for n in names][:dim]


def plot_run(log_path, out_dir=None) -> list[Path]:
    """Plot a run directory (or its log.npy); returns the written PNG paths."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as err:
        raise ConfigError("plotting needs matplotlib (pip install 'torqueloop[plot]')") from err
    log_path = Path(log_path)
    run_dir = log_path if log_path.is_dir() else log_path.parent
    log = read_log(log_path)
    try:
        meta = read_meta(log_path)
    except Exception:  # noqa: BLE001 - plots work without metadata
        meta = {}
    out = Path(out_dir) if out_dir is not None else run_dir
    out.mkdir(parents=True, exist_ok=True)
    if log.shape[0] == 0:
        raise ConfigError(f"{log_path}: the log has no rows to plot")
    t = log["t"]
    ref = np.atleast_2d(log["ref_pos"].T).T if log["ref_pos"].ndim == 1 else log["ref_pos"]
    err = log["err"] if log["err"].ndim == 2 else log["err"][:, None]
    dim = ref.shape[1]
    space = meta.get("space", "joint")
    names = _axis_names(meta, dim, space)
    title = meta.get("run", run_dir.name)
    written = []

    fig, axes = plt.subplots(dim, 1, figsize=(9, 2.2 * dim), sharex=True, squeeze=False)
    for i in range(dim):
        ax = axes[i, 0]
        ax.plot(t, ref[:, i], "k--", lw=1.0, label="reference")
        ax.plot(t, ref[:, i] - err[:, i], lw=1.2, label="measured")
        ax.set_ylabel(names[i])
        ax.grid(alpha=0.3)
    axes[0, 0].legend(loc="upper right")
    axes[-1, 0].set_xlabel("t [s]")
    fig.suptitle(f"{title}: tracking ({space} space)")
    fig.tight_layout()
    written.append(out / "tracking.png")
    fig.savefig(written[-1], dpi=110)
    plt.close(fig)

    fig, axes = plt.subplots(dim, 1, figsize=(9, 2.0 * dim), sharex=True, squeeze=False)
    for i in range(dim):
        ax = axes[i, 0]
        ax.plot(t, err[:, i], lw=1.0)
        rms = float(np.sqrt(np.mean(err[:, i] ** 2)))
        ax.set_ylabel(names[i])
        ax.set_title(f"RMS {rms:.3g}", fontsize=8, loc="right")
        ax.grid(alpha=0.3)
    axes[-1, 0].set_xlabel("t [s]")
    fig.suptitle(f"{title}: tracking error (reference - measured)")
    fig.tight_layout()
    written.append(out / "error.png")
    fig.savefig(written[-1], dpi=110)
    plt.close(fig)

    tau_c = log["tau_cmd"] if log["tau_cmd"].ndim == 2 else log["tau_cmd"][:, None]
    tau_u = log["tau_ctrl"] if log["tau_ctrl"].ndim == 2 else log["tau_ctrl"][:, None]
    tau_m = log["tau_meas"] if log["tau_meas"].ndim == 2 else log["tau_meas"][:, None]
    n = tau_c.shape[1]
    jn = meta.get("joint_names") or [f"q{i}" for i in range(n)]
    fig, axes = plt.subplots(n, 1, figsize=(9, 2.0 * n), sharex=True, squeeze=False)
    for j in range(n):
        ax = axes[j, 0]
        ax.plot(t, tau_u[:, j], lw=0.8, alpha=0.6, label="controller")
        ax.plot(t, tau_c[:, j], lw=1.0, label="commanded")
        ax.plot(t, tau_m[:, j], lw=0.8, alpha=0.8, label="measured")
        ax.set_ylabel(f"{jn[j]} [N m]")
        ax.grid(alpha=0.3)
    axes[0, 0].legend(loc="upper right", fontsize=8)
    axes[-1, 0].set_xlabel("t [s]")
    fig.suptitle(f"{title}: actuator torques")
    fig.tight_layout()
    written.append(out / "torque.png")
    fig.savefig(written[-1], dpi=110)
    plt.close(fig)

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.5))
    late_us = log["lateness_s"] * 1e6
    comp_us = log["compute_s"] * 1e6
    axes[0].hist(late_us, bins=60, color="tab:orange")
    axes[0].set_xlabel("cycle lateness [us]")
    axes[0].set_ylabel("cycles")
    axes[0].set_yscale("log")
    axes[1].hist(comp_us, bins=60, color="tab:blue")
    axes[1].set_xlabel("compute time [us]")
    axes[1].set_yscale("log")
    for ax in axes:
        ax.grid(alpha=0.3)
    fig.suptitle(f"{title}: timing (p99 lateness {np.percentile(late_us, 99):.1f} us, "
                 f"p99 compute {np.percentile(comp_us, 99):.1f} us)")
    fig.tight_layout()
    written.append(out / "timing.png")
    fig.savefig(written[-1], dpi=110)
    plt.close(fig)
    return written
