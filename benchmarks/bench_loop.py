"""Per-cycle cost of the control loop (offline, lock-step clock, in-process simulated plant).

``run(quick) -> list[dict]`` rows with ``case``, ``median_us``, ``p99_us``, ``note`` (protocol of
``benchmarks/run.py``).  Cases:

* full loop cycles (plant integration + control + safety + telemetry) for a 2-link arm with
  joint-space computed torque and for the 3RRR (``hil_configs/robots/3rrr_horizontal.toml``)
  with task-space computed torque; the note gives the offline real-time factor
  ``period / mean cycle`` (how much faster than real time an offline run goes);
* the control part alone (``compute`` column of the loop timing: velocity handling,
  controller, safety);
* one telemetry row: ``.npy`` block writer vs formatting the same row as CSV text.
"""

from __future__ import annotations

import io
import time
from pathlib import Path
import tempfile

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
PERIOD_S = 1e-3


def _loop_rows(name, model, ctrl, traj, q0, qd0, duration_s, tmp):
    from controller.clock import LockstepClock
    from controller.loop import ControlLoop
    from controller.safety import SafetyConfig, SafetySupervisor
    from controller.telemetry import TelemetryWriter
    from drivers.sim.direct import DirectPlantDriver
    from drivers.sim.plant import SimulatedPlant

    clock = LockstepClock()
    drv = DirectPlantDriver(SimulatedPlant(model, q0=q0, qd0=qd0), now=clock.now)
    safety = SafetySupervisor(SafetyConfig(), model.limits, model=model)
    tel = TelemetryWriter(tmp / name.replace(" ", "_"), model.dof, ctrl.dim)
    res = ControlLoop(drv, ctrl, traj, safety, clock, period_s=PERIOD_S, telemetry=tel,
                      duration_s=duration_s, handle_signals=False).run()
    if res.status != "completed":
        raise RuntimeError(f"benchmark run {name!r} ended with {res.status}: {res.faults[:1]}")
    cyc, comp = res.timing.cycle, res.timing.compute
    rtf = PERIOD_S * res.n_cycles / res.wall_time_s
    return [
        {"case": f"loop cycle, {name}", "median_us": cyc["p50"] * 1e6, "p99_us": cyc["p99"] * 1e6,
         "note": f"{res.n_cycles} cycles at 1 kHz, offline real-time factor {rtf:.2f}x; "
                 f"max {cyc['max'] * 1e6:.0f} us"},
        {"case": f"control+safety only, {name}", "median_us": comp["p50"] * 1e6, "p99_us": comp["p99"] * 1e6,
         "note": "velocity handling + controller.compute + safety.check"},
    ]


def _telemetry_rows(repeat):
    from controller.telemetry import TelemetryWriter

    n, dim = 6, 6
    z = np.zeros(n)
    args = (0.0, z + 0.1, z + 0.2, z + 0.3, z, z, z + 1e-4, z + 1.0, z + 1.0, z + 0.9, 0, np.zeros(n, bool),
            1e-6, 5e-5, np.ones(n, bool), np.zeros(n, int), np.ones(n, bool))
    out = []
    with tempfile.TemporaryDirectory() as d:
        w = TelemetryWriter(d, n, dim, buffer_rows=200)
        samples = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            for _ in range(200):
                w.record(*args)
            samples.append((time.perf_counter() - t0) / 200 * 1e6)
        w.close()
    out.append({"case": "telemetry row, .npy block writer (6 joints)", "median_us": float(np.median(samples)),
                "p99_us": float(np.percentile(samples, 99)), "note": "record() incl. amortised flush every 200 rows"})
    fields = np.concatenate([np.atleast_1d(np.asarray(a, float)).ravel() for a in args])
    buf = io.StringIO()
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(200):
            buf.write(",".join(repr(float(x)) for x in fields))
            buf.write("\n")
        samples.append((time.perf_counter() - t0) / 200 * 1e6)
        buf.seek(0)
        buf.truncate()
    out.append({"case": "telemetry row, CSV text (same row, to memory)", "median_us": float(np.median(samples)),
                "p99_us": float(np.percentile(samples, 99)), "note": f"{fields.size} numbers, repr (17 digits)"})
    return out


def run(quick: bool = False) -> list[dict]:
    from controller.gains import ct_gains
    from controller.laws import ComputedTorque, TaskComputedTorque
    from drivers.sim.toy_models import PlanarTwoLink
    from dynamics import load_model
    from trajectories.base import Hold

    duration = 0.5 if quick else 2.0
    rows = []
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        arm = PlanarTwoLink()
        q0 = np.array([0.3, 0.8])
        g = ct_gains(20.0, 1.0, n=2)
        rows += _loop_rows("2-link arm, joint CT", arm, ComputedTorque(arm, g.kp, g.kd), Hold(q0, duration),
                           q0, None, duration, tmp)
        m = load_model(ROOT / "hil_configs" / "robots" / "3rrr_horizontal.toml")
        X0 = np.asarray(m.home_pose, float)
        g3 = ct_gains(30.0, 1.0, n=3)
        rows += _loop_rows("3RRR, task-space CT", m, TaskComputedTorque(m, g3.kp, g3.kd, friction="measured"),
                           Hold(X0, duration), m.inverse_kinematics(X0), None, duration, tmp)
    rows += _telemetry_rows(20 if quick else 100)
    return rows


if __name__ == "__main__":  # pragma: no cover - manual use
    for r in run(quick=True):
        print(f"{r['case']:<55} {r['median_us']:9.1f} {r['p99_us']:9.1f}  {r.get('note', '')}")
