"""Per-call cost of the Stewart platform dynamics, against Pinocchio's RNEA on a 6-DOF serial arm.

``run(quick)`` returns rows ``{case, median_us, p99_us, ref, ref_median_us, ratio, note}``
(protocol of ``benchmarks/run.py``).  The reference is ``pinocchio.rnea`` on a 6-DOF
revolute arm built with Pinocchio's API in the same process; the target is
``ratio <= 3`` for the one-state task inverse and forward dynamics.

Run alone: ``.venv/bin/python -m benchmarks.bench_stewart [--quick]``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
ROBOT = ROOT / "hil_configs" / "robots" / "stewart.toml"
TARGET_RATIO = 3.0


def _time_us(fn, quick: bool) -> tuple[float, float]:
    """(median, p99) per-call time [us]: median of block means, p99 of single timed calls."""
    for _ in range(200):          # warm-up (numba dispatch caches, allocator)
        fn()
    blocks, per = (15, 200) if quick else (41, 500)
    means = []
    for _ in range(blocks):
        t0 = time.perf_counter()
        for _ in range(per):
            fn()
        means.append((time.perf_counter() - t0) / per * 1e6)
    singles = np.empty(2000 if quick else 10000)
    pc = time.perf_counter_ns
    for i in range(singles.size):
        t0 = pc()
        fn()
        singles[i] = (pc() - t0) * 1e-3
    return float(np.median(means)), float(np.percentile(singles, 99))


def _pinocchio_arm():
    """A 6-DOF revolute arm (z, y, y, x, y, x axes; 0.3 m links, 2 kg) built with Pinocchio's API."""
    import pinocchio as pin

    model = pin.Model()
    joints = [pin.JointModelRZ(), pin.JointModelRY(), pin.JointModelRY(),
              pin.JointModelRX(), pin.JointModelRY(), pin.JointModelRX()]
    parent = 0
    for k, jm in enumerate(joints):
        placement = pin.SE3(np.eye(3), np.array([0.0, 0.0, 0.3 if k else 0.1]))
        parent = model.addJoint(parent, jm, placement, f"j{k + 1}")
        inertia = pin.Inertia(2.0 - 0.2 * k, np.array([0.0, 0.0, 0.15]), np.diag([0.02, 0.02, 0.005]))
        model.appendBodyToJoint(parent, inertia, pin.SE3.Identity())
    return model, model.createData()


def run(quick: bool = False) -> list[dict]:
    import pinocchio as pin

    sys.path.insert(0, str(ROOT))
    from dynamics import load_model

    rng = np.random.default_rng(0)
    pm, pd = _pinocchio_arm()
    q = rng.uniform(-1, 1, 6)
    v = rng.normal(size=6)
    a = rng.normal(size=6)
    ref_med, ref_p99 = _time_us(lambda: pin.rnea(pm, pd, q, v, a), quick)
    aba_med, _ = _time_us(lambda: pin.aba(pm, pd, q, v, a), quick)

    m = load_model(ROBOT)
    X = m.home_pose + np.array([0.02, -0.01, 0.03, 0.05, -0.04, 0.1])
    Xd = rng.normal(size=6) * 0.1
    Xdd = rng.normal(size=6)
    W = rng.normal(size=6) * 10
    F = m.task_inverse_dynamics(X, Xd, Xdd, W)
    kin = m.leg_kinematics(X, Xd, Xdd)
    L, Ld, Ldd = kin.lengths, kin.rates, kin.accelerations
    Xb = X + 0.01 * rng.normal(size=(100, 6))
    Xdb, Xddb = np.tile(Xd, (100, 1)), np.tile(Xdd, (100, 1))

    cases = [
        ("stewart.task_inverse_dynamics", lambda: m.task_inverse_dynamics(X, Xd, Xdd), True,
         "formulation (b) Kane/NE, numba, one state"),
        ("stewart.task_inverse_dynamics+wrench", lambda: m.task_inverse_dynamics(X, Xd, Xdd, W), True,
         "with external wrench"),
        ("stewart.forward_dynamics_task", lambda: m.forward_dynamics_task(X, Xd, F), True,
         f"platform accelerations from leg forces (pinocchio aba on the arm: {aba_med:.2f} us)"),
        ("stewart.inverse_dynamics(q, pose=)", lambda: m.inverse_dynamics(L, Ld, Ldd, pose=X), False,
         "actuated coordinates with a pose hint (FK check + conversion)"),
        ("stewart.task_inverse_dynamics[batch100]/state",
         lambda: m.task_inverse_dynamics(Xb, Xdb, Xddb), False, "per call of 100 states; divide by 100"),
    ]
    if not quick:
        cases.append(("stewart.task_inverse_dynamics_lagrange", lambda: m.task_inverse_dynamics_lagrange(X, Xd, Xdd),
                      False, "formulation (a) reference, complex-step numpy, not a hot path"))
    rows = []
    for name, fn, targeted, note in cases:
        med, p99 = _time_us(fn, quick) if "lagrange" not in name else _time_slow(fn)
        if "batch100" in name:
            med, p99 = med / 100, p99 / 100
        row = {"case": name, "median_us": med, "p99_us": p99, "ref": "pinocchio.rnea 6-DOF arm",
               "ref_median_us": ref_med, "ratio": med / ref_med,
               "note": note + (f"; target ratio <= {TARGET_RATIO:g}" if targeted else "")}
        rows.append(row)
    rows.insert(0, {"case": "pinocchio.rnea 6-DOF arm (reference)", "median_us": ref_med, "p99_us": ref_p99,
                    "ref": "", "ref_median_us": ref_med, "ratio": 1.0, "note": "same process"})
    return rows


def _time_slow(fn) -> tuple[float, float]:
    ts = []
    for _ in range(20):
        t0 = time.perf_counter()
        fn()
        ts.append((time.perf_counter() - t0) * 1e6)
    return float(np.median(ts)), float(np.percentile(ts, 99))


if __name__ == "__main__":
    for r in run(quick="--quick" in sys.argv):
        print(f"{r['case']:48s} median {r['median_us']:9.2f} us  p99 {r['p99_us']:9.2f} us  "
              f"ratio {r['ratio']:6.2f}  {r['note']}")
