"""Figures of a run log for a report (matplotlib, Agg backend; no display needed).

``plot_run(log_dir, out_dir)`` writes:

* ``tracking.png`` -- reference and measured position per controller axis [m | rad];
* ``error.png``    -- tracking error per axis in mm / mrad, its RMS marked (the same
  units as the console summary, :mod:`controller.app.report`);
* ``torque.png``   -- per actuator: commanded and measured torque [N m] or force [N]
  (prismatic joints, from the model's joint types) against the limit the safety
  layer clips to (``[safety] torque_max`` or the robot file's), and beside it the
  differences controller - commanded (what the safety layer took away) and
  measured - commanded one cycle before (what the drive did not deliver: the
  feedback of a cycle answers the previous cycle's command);
* ``path.png``     -- the end-effector path in its task plane, reference against
  measured, and the position error along it in mm with its RMS (task-space runs
  from the log; joint-space serial arms through the model's forward kinematics);
* ``timing.png``   -- compute time, and on the wall clock the lateness of each cycle
  against the deadline-miss threshold (on the lock-step clock lateness is zero by
  construction and not drawn).

:func:`run_figures` returns the same figures as objects (for tests and notebooks);
:func:`tune_figure` draws a gain search with the best candidate marked.

In task space the measured pose is ``ref_pos - err`` (the logged error is
``ref - measured``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from dynamics.errors import ConfigError, TorqueloopError

from .report import effort_word, joint_quantities, serial_tool_positions, task_quantities
from ..telemetry import read_log, read_meta

__all__ = ["RunData", "load_run_data", "run_figures", "plot_run", "tune_figure", "plot_tune", "end_effector_path",
           "robustness_figures", "plot_robustness"]

_DPI = 110


def _pyplot():
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as err:
        raise ConfigError("plotting needs matplotlib (pip install 'torqueloop[plot]')") from err
    return plt


def _cols(a: np.ndarray) -> np.ndarray:
    return a if a.ndim == 2 else a[:, None]


@dataclass
class RunData:
    """A run's log with what is needed to label it (see :func:`load_run_data`).

    Attributes
    ----------
    log : numpy structured array, shape (rows,)
        Grouped fields (:func:`controller.telemetry.read_log`).
    meta : dict
        ``meta.json`` (empty when missing).
    axes : list of Quantity
        The controller's axes (task coordinates or joints), length dim.
    joints : list of Quantity
        The actuated joints, length n (names and units from the model's joint types).
    torque_limit : ndarray, shape (n,), or None
        The limit the safety layer clipped to [N m | N].
    clock : str
        ``"lockstep"`` or ``"wall"``.
    """

    log: np.ndarray
    meta: dict
    axes: list
    joints: list
    torque_limit: np.ndarray | None
    clock: str
    title: str
    space: str
    run_dir: Path
    _model: object = field(default=None, repr=False)
    _model_error: str | None = field(default=None, repr=False)

    @property
    def model(self):
        """The run's robot model (from ``meta.json``), or None when its file cannot be read."""
        if self._model is None and self._model_error is None:
            try:
                self._model = _model_from_meta(self.meta)
            except (TorqueloopError, OSError) as err:
                self._model_error = str(err)
        return self._model


def _model_from_meta(meta: dict):
    from dynamics import load_model

    src = meta.get("robot_file")
    if not src:
        rel = (meta.get("config") or {}).get("robot", {}).get("file")
        if not rel:
            raise ConfigError("meta.json names no robot file")
        base = Path(meta["config_file"]).parent if meta.get("config_file") else Path(".")
        src = Path(rel) if Path(rel).is_absolute() else base / rel
    return load_model(src)


def load_run_data(log_path) -> RunData:
    """Read a run folder (or its ``log.npy``) and the labels of its axes and joints.

    Older logs without the joint types, limit and clock in ``meta.json`` take them
    from the robot model named there (and the clock from the lateness column).
    """
    log_path = Path(log_path)
    run_dir = log_path if log_path.is_dir() else log_path.parent
    log = read_log(log_path)
    if log.shape[0] == 0:
        raise ConfigError(f"{log_path}: the log has no rows to plot")
    try:
        meta = read_meta(log_path)
    except TorqueloopError:
        meta = {}
    n, dim = _cols(log["q"]).shape[1], _cols(log["err"]).shape[1]
    space = meta.get("space", "joint")
    data = RunData(log, meta, [], [], None, "", meta.get("run", run_dir.name), space, run_dir)
    names = meta.get("joint_names") or [f"q{i}" for i in range(n)]
    types = meta.get("joint_types")
    lim = meta.get("torque_limit")
    if (types is None or lim is None) and data.model is not None:
        types = types or list(data.model.joint_types)
        lim = lim if lim is not None else np.asarray(data.model.limits.torque_max, float).tolist()
    data.joints = joint_quantities(names[:n], (types or ["revolute"] * n)[:n])
    data.torque_limit = None if lim is None else np.asarray(lim, dtype=float)
    data.axes = task_quantities(dim, meta.get("task_layout")) if space == "task" else data.joints[:dim]
    data.clock = meta.get("clock") or ("wall" if np.any(log["lateness_s"] != 0.0) else "lockstep")
    return data


# -- end-effector path ------------------------------------------------------------
def end_effector_path(data: RunData) -> tuple[np.ndarray, np.ndarray, list[str]] | None:
    """Reference and measured tool/platform position, each (rows, 3) [m], with the axis names.

    Task-space runs: from the logged reference and error.  Joint-space serial
    arms: forward kinematics of the reference and measured joint positions.
    None when neither applies (a joint-space parallel robot, or no model).
    """
    log = data.log
    if data.space == "task":
        ref = _cols(log["ref_pos"])
        meas = ref - _cols(log["err"])
        k = [i for i, a in enumerate(data.axes) if a.kind == "linear"]
        pad = np.zeros((ref.shape[0], 3 - len(k)))
        return np.hstack([ref[:, k], pad]), np.hstack([meas[:, k], pad]), ["x", "y", "z"]
    model = data.model
    if model is None or hasattr(model, "task_dof"):
        return None
    q_ref, q = _cols(log["ref_pos"]), _cols(log["q"])
    if q_ref.shape[1] != model.dof:
        return None
    return (*serial_tool_positions(model, q_ref, q), ["x", "y", "z"])


def _spatial(ref: np.ndarray) -> bool:
    """Whether a path needs three axes: its smallest extent is more than 20 % of its largest
    (flatter paths are drawn in the plane of their two largest extents)."""
    span = np.ptp(ref, axis=0)
    return bool(span.max() > 0 and span.min() > 0.2 * span.max())


def _task_plane(ref: np.ndarray) -> list[int]:
    """The two base axes along which the reference path extends most (ties: x, y, z order)."""
    span = np.ptp(ref, axis=0)
    return sorted(np.argsort(-span, kind="stable")[:2].tolist())


# -- figures ---------------------------------------------------------------------
def _tracking(plt, d: RunData):
    t, ref, err = d.log["t"], _cols(d.log["ref_pos"]), _cols(d.log["err"])
    dim = ref.shape[1]
    fig, axes = plt.subplots(dim, 1, figsize=(9, 2.1 * dim), sharex=True, squeeze=False)
    for i, a in enumerate(d.axes):
        ax = axes[i, 0]
        # the measured curve wide and light, the reference dashed on top of it: where they agree
        # (the usual case) both stay visible
        ax.plot(t, ref[:, i] - err[:, i], lw=3.0, alpha=0.45, color="tab:blue", label="measured")
        ax.plot(t, ref[:, i], "k--", lw=1.0, zorder=3, label="reference")
        ax.set_ylabel(a.label)
        ax.grid(alpha=0.3)
    axes[0, 0].legend(loc="upper right", fontsize=8)
    axes[-1, 0].set_xlabel("t [s]")
    fig.suptitle(f"{d.title}: tracking ({d.space} space)")
    fig.tight_layout()
    return fig


def _error(plt, d: RunData):
    t, err = d.log["t"], _cols(d.log["err"])
    dim = err.shape[1]
    fig, axes = plt.subplots(dim, 1, figsize=(9, 2.0 * dim), sharex=True, squeeze=False)
    for i, a in enumerate(d.axes):
        ax = axes[i, 0]
        e = err[:, i] * a.error_scale
        rms = float(np.sqrt(np.mean(e ** 2)))
        ax.plot(t, e, lw=1.0, label="error")
        ax.axhline(rms, color="tab:red", ls="--", lw=0.9, label=f"RMS {rms:.3g} {a.error_unit}")
        ax.axhline(-rms, color="tab:red", ls="--", lw=0.9)
        ax.set_ylabel(f"{a.name} [{a.error_unit}]")
        ax.set_title(f"RMS {rms:.3g} {a.error_unit}, max |e| {np.max(np.abs(e)):.3g} {a.error_unit}",
                     fontsize=8, loc="right")
        ax.legend(loc="upper left", fontsize=7)
        ax.grid(alpha=0.3)
    axes[-1, 0].set_xlabel("t [s]")
    fig.suptitle(f"{d.title}: tracking error (reference - measured)")
    fig.tight_layout()
    return fig


def _torque(plt, d: RunData):
    t = d.log["t"]
    tau_u, tau_c, tau_m = (_cols(d.log[k]) for k in ("tau_ctrl", "tau_cmd", "tau_meas"))
    n = tau_c.shape[1]
    word = effort_word(["prismatic" if q.kind == "linear" else "revolute" for q in d.joints])
    fig, axes = plt.subplots(n, 2, figsize=(12, 2.0 * n + 0.6), sharex=True, squeeze=False,
                             gridspec_kw={"width_ratios": [3, 2]})
    for j, q in enumerate(d.joints):
        ax, dx = axes[j, 0], axes[j, 1]
        ax.plot(t, tau_c[:, j], lw=1.0, label="commanded")
        ax.plot(t, tau_m[:, j], lw=0.8, alpha=0.8, label="measured")
        clipped = tau_u[:, j] != tau_c[:, j]
        if clipped.any():
            ax.plot(t, np.where(clipped, tau_u[:, j], np.nan), lw=0.8, color="tab:purple",
                    label="controller (where clipped)")
        peak = float(np.max(np.abs(tau_c[:, j])))
        data_max = float(np.nanmax(np.abs(np.r_[tau_c[:, j], tau_m[:, j], tau_u[:, j]])))
        lim = None if d.torque_limit is None else float(d.torque_limit[j])
        view = _torque_view(data_max, lim)
        if lim is not None and np.isfinite(lim):
            if lim <= view:
                ax.axhline(lim, color="tab:red", ls="--", lw=0.9, label=f"limit {lim:.4g} {q.effort_unit}")
                ax.axhline(-lim, color="tab:red", ls="--", lw=0.9)
                where = ""
            else:
                where = f" (limit {lim:.4g} {q.effort_unit}, above this scale)"
            ax.set_title(f"peak {peak:.4g} {q.effort_unit} = {100 * peak / lim:.1f} % of the limit{where}",
                         fontsize=8, loc="right")
        else:
            ax.set_title(f"peak {peak:.4g} {q.effort_unit} (no limit)", fontsize=8, loc="right")
        ax.set_ylim(-view, view)
        ax.set_ylabel(f"{q.name} [{q.effort_unit}]")
        share = 100.0 * float(np.mean(clipped))
        dx.plot(t, tau_u[:, j] - tau_c[:, j], lw=0.9, color="tab:purple",
                label=f"controller - commanded (safety clipping, {share:.1f} % of cycles)")
        # the feedback of row k answers the command of row k - 1 (controller.loop)
        gap = tau_m[1:, j] - tau_c[:-1, j]
        seen = np.isfinite(gap)
        if seen.any():
            rms = float(np.sqrt(np.mean(gap[seen] ** 2)))
            what = f"measured - previous command (drive lag, quantisation; RMS {rms:.3g} {q.effort_unit})"
        else:       # a drive without torque feedback (ODrive's torque_feedback = "none"): NaN throughout
            what = "measured - previous command: no torque feedback"
        dx.plot(t[1:], gap, lw=0.8, color="tab:green", alpha=0.8, label=what)
        dx.set_ylabel(f"{q.name} diff. [{q.effort_unit}]")
        for a in (ax, dx):
            a.grid(alpha=0.3)
    axes[0, 0].legend(loc="upper left", fontsize=7)
    axes[0, 1].legend(loc="upper left", fontsize=6)
    axes[-1, 0].set_xlabel("t [s]")
    axes[-1, 1].set_xlabel("t [s]")
    fig.suptitle(f"{d.title}: actuator {word} (left) and its differences (right: safety clipping, drive lag)")
    fig.tight_layout()
    return fig


def _label_log_axis(axis, lo: float, hi: float) -> None:
    """Plain numbers on a log axis, and labelled 2 and 5 ticks between the decades when the axis
    spans less than two decades (matplotlib would label one tick, or none)."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    plain = FuncFormatter(lambda v, _: f"{v:g}")
    axis.set_major_formatter(plain)
    if lo > 0 and hi / lo < 100.0:
        axis.set_minor_locator(LogLocator(subs=(2.0, 5.0)))
        axis.set_minor_formatter(plain)
    else:
        axis.set_minor_formatter(NullFormatter())


def _torque_view(data_max: float, limit: float | None) -> float:
    """Half-height of a torque axis: the data with a margin, stretched to show the limit when
    the data come within 40 % of it (a limit far above the data would flatten them to a line)."""
    view = 1.2 * data_max if data_max > 0 else 1.0
    if limit is not None and np.isfinite(limit) and limit > 0 and limit <= 2.5 * view:
        view = max(view, 1.1 * limit)
    return view


def _timing(plt, d: RunData):
    comp_us = d.log["compute_s"] * 1e6
    if d.clock != "wall":
        fig, ax = plt.subplots(1, 1, figsize=(6, 3.5))
        ax.hist(comp_us, bins=60, color="tab:blue")
        ax.set_xlabel("compute time [us]")
        ax.set_ylabel("cycles [-]")
        ax.set_yscale("log")
        ax.grid(alpha=0.3)
        fig.suptitle(f"{d.title}: compute time (p99 {np.percentile(comp_us, 99):.0f} us); "
                     f"lock-step clock: no deadlines", fontsize=10)
        fig.tight_layout()
        return fig
    late_us = d.log["lateness_s"] * 1e6
    tm = (d.meta.get("result") or {}).get("timing") or {}
    period_s = float(d.meta.get("period_s") or tm.get("period_s") or 0.0)
    from ..loop import TimingStats
    thr_us = TimingStats.threshold_s(dict(tm, period_s=period_s)) * 1e6
    missed = int(np.sum(late_us > thr_us)) if period_s else 0
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.6))
    axes[0].hist(late_us, bins=60, color="tab:orange")
    if period_s:
        axes[0].axvline(thr_us, color="tab:red", ls="--", label=f"miss threshold {thr_us:.0f} us")
        axes[0].legend(fontsize=8)
    axes[0].set_xlabel("cycle start lateness [us]")
    axes[0].set_ylabel("cycles [-]")
    axes[1].hist(comp_us, bins=60, color="tab:blue")
    if period_s:
        axes[1].axvline(period_s * 1e6, color="tab:red", ls="--", label=f"period {period_s * 1e6:.0f} us")
        axes[1].legend(fontsize=8)
    axes[1].set_xlabel("compute time [us]")
    axes[1].set_ylabel("cycles [-]")
    for ax in axes:
        ax.set_yscale("log")
        ax.grid(alpha=0.3)
    fig.suptitle(f"{d.title}: wall-clock timing: {missed} of {late_us.size} cycles missed "
                 f"({100 * missed / late_us.size:.2f} %), p99 lateness {np.percentile(late_us, 99):.0f} us",
                 fontsize=10)
    fig.tight_layout()
    return fig


def _path(plt, d: RunData):
    p = end_effector_path(d)
    if p is None:
        return None
    ref, meas, names = p
    t = d.log["t"]
    dev_mm = np.linalg.norm(ref - meas, axis=1) * 1e3
    rms = float(np.sqrt(np.mean(dev_mm ** 2)))
    fig = plt.figure(figsize=(12, 5))
    grid = fig.add_gridspec(1, 2, width_ratios=[1, 1.3])
    if ref.shape[1] == 3 and _spatial(ref):
        ax = fig.add_subplot(grid[0, 0], projection="3d")
        ax.plot(*ref.T, "k--", lw=1.0, zorder=3, label="reference")
        ax.plot(*meas.T, lw=2.5, alpha=0.5, label="measured")
        ax.plot(*ref[0], "go", ms=6, label="start")
        ax.set_xlabel(f"{names[0]} [m]")
        ax.set_ylabel(f"{names[1]} [m]")
        ax.set_zlabel(f"{names[2]} [m]")
        ax.set_box_aspect(tuple(np.maximum(np.ptp(np.r_[ref, meas], axis=0), 1e-9)))   # metres alike
        ax.set_title("path in 3-D (axes to scale)", fontsize=9)
    else:
        i, k = _task_plane(ref)
        ax = fig.add_subplot(grid[0, 0])
        ax.plot(meas[:, i], meas[:, k], lw=2.5, alpha=0.5, label="measured")
        ax.plot(ref[:, i], ref[:, k], "k--", lw=1.0, zorder=3, label="reference")
        ax.plot(ref[0, i], ref[0, k], "go", ms=6, label="start")
        ax.set_xlabel(f"{names[i]} [m]")
        ax.set_ylabel(f"{names[k]} [m]")
        ax.set_aspect("equal", adjustable="datalim")
        ax.grid(alpha=0.3)
        ax.set_title(f"path in the {names[i]}{names[k]} plane", fontsize=9)
    ax.legend(fontsize=8)
    ex = fig.add_subplot(grid[0, 1])
    ex.plot(t, dev_mm, lw=1.0, label="|p_ref - p_meas|")
    ex.axhline(rms, color="tab:red", ls="--", lw=0.9, label=f"RMS {rms:.3g} mm")
    ex.set_xlabel("t [s]")
    ex.set_ylabel("position error [mm]")
    ex.set_title(f"RMS {rms:.3g} mm, max {np.max(dev_mm):.3g} mm", fontsize=9, loc="right")
    ex.legend(fontsize=8)
    ex.grid(alpha=0.3)
    fig.suptitle(f"{d.title}: end-effector path (reference vs measured)")
    fig.tight_layout()
    return fig


def run_figures(log_path) -> dict:
    """The figures of a run as matplotlib Figure objects, by file stem.

    Keys ``tracking``, ``error``, ``torque``, ``timing`` and, where an
    end-effector path can be formed (see :func:`end_effector_path`), ``path``.
    The caller closes them (``matplotlib.pyplot.close(fig)``).
    """
    plt = _pyplot()
    d = load_run_data(log_path)
    figs = {"tracking": _tracking(plt, d), "error": _error(plt, d), "torque": _torque(plt, d),
            "timing": _timing(plt, d)}
    path = _path(plt, d)
    if path is not None:
        figs["path"] = path
    return figs


def plot_run(log_path, out_dir=None) -> list[Path]:
    """Plot a run directory (or its log.npy) to PNG files; returns the written paths."""
    plt = _pyplot()
    log_path = Path(log_path)
    run_dir = log_path if log_path.is_dir() else log_path.parent
    out = Path(out_dir) if out_dir is not None else run_dir
    figs = run_figures(log_path)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, fig in figs.items():
        written.append(out / f"{name}.png")
        fig.savefig(written[-1], dpi=_DPI)
        plt.close(fig)
    return written


# -- gain search -----------------------------------------------------------------
def tune_figure(result):
    """Score against each searched parameter, one panel per parameter, the best candidate marked.

    Parameters
    ----------
    result : controller.app.tune.TuneResult
    """
    from .tune import metric_unit

    plt = _pyplot()
    names = list(result.spec.params)
    scores = np.array([c.score for c in result.candidates])
    ok = np.isfinite(scores)
    best = result.best
    unit = metric_unit(result.spec.metric)
    fig, axes = plt.subplots(1, len(names), figsize=(4.5 * len(names), 3.8), squeeze=False)
    for i, k in enumerate(names):
        x = np.array([c.values[k] for c in result.candidates])
        ax = axes[0, i]
        ax.scatter(x[ok], scores[ok], s=18, label="candidates")
        if np.any(~ok):
            ax.scatter(x[~ok], np.full((~ok).sum(), np.nanmax(scores[ok]) if ok.any() else 1.0),
                       marker="x", color="r", label="failed")
        if np.isfinite(best.score):
            ax.scatter([best.values[k]], [best.score], marker="*", s=220, color="gold", edgecolor="k",
                       zorder=5, label=f"best {best.values[k]:.4g}")
        rng = result.spec.params[k]
        for edge in (rng.low, rng.high):
            ax.axvline(edge, color="0.5", ls=":", lw=0.8)
        if rng.log:
            ax.set_xscale("log")
            _label_log_axis(ax.xaxis, *ax.get_xlim())
        ax.set_xlabel(f"{k} (search range dotted)")
        ax.set_ylabel(f"score [{unit}]")
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    fig.suptitle(f"gain search: score = {result.spec.metric} x (1 + penalties), best {best.score:.4g} {unit}",
                 fontsize=10)
    fig.tight_layout()
    return fig


def plot_tune(result, out_dir) -> Path:
    """Write ``tune.png`` (:func:`tune_figure`) into ``out_dir``; returns its path."""
    plt = _pyplot()
    fig = tune_figure(result)
    path = Path(out_dir) / "tune.png"
    fig.savefig(path, dpi=_DPI)
    plt.close(fig)
    return path


# -- robustness ------------------------------------------------------------------
def robustness_figures(result) -> dict:
    """The figures of a robustness report: ``{"robustness_hist": fig, "robustness_envelope": fig}``.

    ``robustness_hist``: a histogram per toleranced (or reported) metric over the completed
    runs, the bound drawn; ``robustness_envelope``: each run's largest tracking error per time
    bin (m or rad), its median, 5-95 % band and maximum over the runs, the worst runs drawn.

    Parameters
    ----------
    result : controller.app.robustness.RobustnessResult
    """
    from .tune_config import AT_LEAST, REPORTED
    from .tune import metric_unit

    plt = _pyplot()
    keys = [k for k in dict.fromkeys((*result.spec.tolerance, *REPORTED)) if np.isfinite(result.values(k)).any()]
    cols = min(3, max(len(keys), 1))
    rows = max(1, -(-len(keys) // cols))
    hist, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.2 * rows), squeeze=False)
    for ax, k in zip(axes.flat, keys):
        v = result.values(k)
        v = v[np.isfinite(v)]
        ax.hist(v, bins=min(30, max(5, len(v) // 4)), color="tab:blue", alpha=0.8)
        if k in result.spec.tolerance:
            b = result.spec.tolerance[k]
            label = f"{'min' if k in AT_LEAST else 'max'} {b:.4g}"
            lo, hi = float(v.min()), float(v.max())
            span = max(hi - lo, 1e-12 * max(abs(hi), 1.0))
            if lo - 0.5 * span <= b <= hi + 0.5 * span:        # near the runs: draw the bound
                ax.axvline(b, color="r", ls="--", label=label)
                ax.legend(fontsize=7)
            else:                                             # far: say where it is, keep the runs readable
                ax.set_title(f"{label} (off the axis)", fontsize=8, color="r")
        ax.set_xlabel(f"{k} [{metric_unit(k)}]")
        ax.set_ylabel("runs")
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(keys):]:
        ax.set_visible(False)
    hist.suptitle(f"robustness: {len(result.metrics)} runs, {100 * float(np.mean(result.within)):.1f} % within "
                  "tolerance", fontsize=10)
    hist.tight_layout()
    env, ax = plt.subplots(figsize=(8, 4))
    curves = [(np.asarray(m["_envelope_t"]), np.asarray(m["_envelope"])) for m in result.metrics
              if m.get("_envelope")]
    if curves:
        n = min(len(c[1]) for c in curves)
        t = curves[0][0][:n]
        E = np.array([c[1][:n] for c in curves])
        ax.fill_between(t, np.percentile(E, 5, axis=0), np.percentile(E, 95, axis=0), alpha=0.3,
                        label="5-95 % of runs")
        ax.plot(t, np.median(E, axis=0), lw=1.5, label="median")
        ax.plot(t, E.max(axis=0), "k:", lw=1, label="maximum")
        for r, i in enumerate(result.worst(), 1):
            m = result.metrics[i]
            if m.get("_envelope"):
                ax.plot(m["_envelope_t"], m["_envelope"], lw=0.8, label=f"worst {r} (run {i})")
    task = any(k.endswith("_m") for k in result.metrics[0]) if result.metrics else False
    ax.set_xlabel("t [s]")
    ax.set_ylabel("tracking error " + ("(position) [m]" if task else "norm [rad]"))
    ax.set_title("tracking error envelope over the runs (largest per time bin)", fontsize=10)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    env.tight_layout()
    return {"robustness_hist": hist, "robustness_envelope": env}


def plot_robustness(result, out_dir) -> list[Path]:
    """Write ``robustness_hist.png`` and ``robustness_envelope.png`` (:func:`robustness_figures`)."""
    plt = _pyplot()
    out = []
    for name, fig in robustness_figures(result).items():
        path = Path(out_dir) / f"{name}.png"
        fig.savefig(path, dpi=_DPI)
        plt.close(fig)
        out.append(path)
    return out
