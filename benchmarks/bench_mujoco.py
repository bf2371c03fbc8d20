"""The two plant engines side by side: numba (the model's own dynamics) and MuJoCo.

``run(quick) -> list[dict]`` rows with ``case``, ``median_us``, ``p99_us``, ``ref``,
``ref_median_us``, ``ratio``, ``note`` (protocol of ``benchmarks/run.py``).  In one process:

* ``plant 1 ms, <robot>, numba`` / ``mujoco``: one ``advance_to`` over a 1 ms period (two 0.5 ms
  RK4 steps, the held torque being gravity compensation) of the seed-000 arm, ``arm6_demo``, the
  3RRR and the Stewart platform on each engine; the numba row's ref is the MuJoCo row;
* ``plant 1 ms, <robot>, mujoco`` against ``mj_step x2``: the MuJoCo plant's cost over MuJoCo's
  own stepping of the same model and a copy of its data (``mujoco.mj_step(m, d, 2)``), timed
  interleaved with it (one call of each in turn, the order alternating, so that a busy machine
  slows both alike); ``ratio`` - 1 is the plant's overhead (the issue's target: at most 20 %);
* ``3rrr_circle.toml, <engine>``: the headline demo (emulated MIT drives, lock-step clock) on each
  engine, in process: the wall time of a simulated second and the real-time factor.
"""

from __future__ import annotations

import gc
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
ROBOTS = ROOT / "hil_configs" / "robots"
PERIOD_S = 1e-3


def _plants(name: str):
    from dynamics import load_model
    from drivers.sim.mujoco_plant import MujocoPlant
    from drivers.sim.plant import SimulatedPlant
    model = load_model(ROBOTS / name)
    if hasattr(model, "home_pose"):
        q0 = np.asarray(model.inverse_kinematics(model.home_pose), dtype=float)
    else:
        q0 = np.full(model.dof, 0.1)
    tau = np.asarray(model.gravity(q0), dtype=float)
    out = []
    for cls in (SimulatedPlant, MujocoPlant):
        p = cls(model, q0=q0)
        p.set_torque(tau)
        out.append(p)
    return out


def _interleaved(fns, n: int, warmup: int = 50):
    """Per-call wall times [s], shape (len(fns), n): one call of each function in turn, the order
    rotated every round (none always runs right after another, with that one's data in cache)."""
    for k in range(warmup):
        for f in fns:
            f()
    out = np.empty((len(fns), n))
    was = gc.isenabled()
    gc.disable()
    try:
        for i in range(n):
            for r in range(len(fns)):
                j = (i + r) % len(fns)
                t0 = time.perf_counter()
                fns[j]()
                out[j, i] = time.perf_counter() - t0
    finally:
        if was:
            gc.enable()
    return out


def run(quick: bool = False) -> list[dict]:
    import mujoco

    n = 300 if quick else 3000
    rows: list[dict] = []
    for name in ("seed000_arm.toml", "arm6_demo.toml", "3rrr_horizontal.toml", "stewart.toml"):
        numba_plant, mj_plant = _plants(name)
        # MuJoCo's own stepping of a copy of the plant's model and data (same state, same control)
        m = mj_plant.mj_model
        d = mujoco.MjData(m)
        mujoco.mj_copyData(d, m, mj_plant.mj_data)
        clocks = {"a": 0.0, "b": 0.0}

        def numba_step():
            clocks["a"] += PERIOD_S
            numba_plant.advance_to(clocks["a"])

        def mj_step():
            clocks["b"] += PERIOD_S
            mj_plant.advance_to(clocks["b"])

        def raw_step():
            mujoco.mj_step(m, d, 2)

        t = np.concatenate([_interleaved([numba_step], n), _interleaved([mj_step, raw_step], n)]) * 1e6
        med = np.median(t, axis=1)
        p99 = np.percentile(t, 99, axis=1)
        robot = name.removesuffix(".toml")
        rows.append({"case": f"plant 1 ms, {robot}, numba", "median_us": float(med[0]), "p99_us": float(p99[0]),
                     "ref": "mujoco plant", "ref_median_us": float(med[1]), "ratio": float(med[0] / med[1]),
                     "note": f"real-time factor {1e3 / np.mean(t[0]):.0f}x"})
        rows.append({"case": f"plant 1 ms, {robot}, mujoco", "median_us": float(med[1]), "p99_us": float(p99[1]),
                     "ref": "mj_step(m, d, 2)", "ref_median_us": float(med[2]), "ratio": float(med[1] / med[2]),
                     "note": f"overhead over MuJoCo's own stepping {100 * (med[1] / med[2] - 1):.0f} %; "
                             f"real-time factor {1e3 / np.mean(t[1]):.0f}x"})
    rows += _demo_rows(2.0 if quick else 8.0)
    return rows


def _demo_rows(duration_s: float) -> list[dict]:
    """The headline demo on each engine: wall time per simulated second, real-time factor."""
    from controller.app.run import build_run, load_run

    rows = []
    for engine in ("numba", "mujoco"):
        spec = load_run(ROOT / "hil_configs" / "runs" / "3rrr_circle.toml",
                        overrides={"driver.plant.engine": engine}, duration_s=duration_s)
        run = build_run(spec)
        t0 = time.perf_counter()
        res = run.execute()
        wall = time.perf_counter() - t0
        sim = res.n_cycles * spec.period_s
        rows.append({"case": f"3rrr_circle.toml, {engine}", "median_us": wall / res.n_cycles * 1e6,
                     "note": f"{res.status}; {sim:.1f} s simulated in {wall:.2f} s wall, real-time factor "
                             f"{sim / wall:.1f}x; position RMS {np.linalg.norm(res.metrics['rms_error'][:2]) * 1e3:.4f} mm"})
    return rows


if __name__ == "__main__":  # pragma: no cover - manual use: python -m benchmarks.bench_mujoco [--quick] [--json FILE]
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from benchmarks.run import main

    sys.exit(main(["--only", "bench_mujoco", *sys.argv[1:]]))
