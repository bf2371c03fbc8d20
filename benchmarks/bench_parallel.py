"""Per-call cost of the planar 3RRR dynamics, against Pinocchio's RNEA on a 3-DOF serial arm.

``run(quick)`` returns rows ``{case, median_us, p99_us, ref, ref_median_us, ratio, note}``
(protocol of ``benchmarks/run.py``).  The reference is ``pinocchio.rnea`` on a 3-DOF
revolute arm (z, y, y axes; 0.3 m links) built with Pinocchio's API in the same
process, timed interleaved with our calls (:func:`benchmarks._timing.time_calls`) so
that machine load hits both alike.  Target: ``ratio <= 3`` for ``inverse_dynamics``
(reduced, with the pose hint), ``task_inverse_dynamics`` and ``forward_dynamics``
(with the pose hint).  Times are per call from Python, including input validation,
the refinement of the pose hint (one constraint evaluation when it is consistent)
and the allocation of the result.  The Stewart platform has its own module
(``bench_stewart``).

Run alone: ``.venv/bin/python -m benchmarks.bench_parallel [--quick]`` or through
``.venv/bin/python benchmarks/run.py --only bench_parallel``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from benchmarks._timing import time_call, time_calls

ROOT = Path(__file__).resolve().parents[1]
ROBOT = ROOT / "hil_configs" / "robots" / "3rrr_vertical.toml"
TARGET_RATIO = 3.0


def _pinocchio_arm3():
    """A 3-DOF revolute arm (z, y, y axes; 0.3 m links, ~1 kg bodies) built with Pinocchio's API."""
    import pinocchio as pin

    model = pin.Model()
    joints = [pin.JointModelRZ(), pin.JointModelRY(), pin.JointModelRY()]
    parent = 0
    for k, jm in enumerate(joints):
        placement = pin.SE3(np.eye(3), np.array([0.0, 0.0, 0.3 if k else 0.1]))
        parent = model.addJoint(parent, jm, placement, f"j{k + 1}")
        inertia = pin.Inertia(1.0 - 0.2 * k, np.array([0.0, 0.0, 0.15]), np.diag([0.008, 0.008, 0.001]))
        model.appendBodyToJoint(parent, inertia, pin.SE3.Identity())
    return model, model.createData()


def run(quick: bool = False) -> list[dict]:
    import pinocchio as pin

    from dynamics import load_model

    repeat, number = (15, 500) if quick else (60, 2000)
    rng = np.random.default_rng(0)
    pm, pd = _pinocchio_arm3()
    q3 = rng.uniform(-1, 1, 3)
    v3 = rng.normal(size=3)
    a3 = rng.normal(size=3)

    m = load_model(ROBOT)
    X = m.home_pose + np.array([0.02, -0.01, 0.1])
    Xd = np.array([0.1, -0.2, 0.5])
    Xdd = np.array([1.0, 0.5, -2.0])
    full = m.task_inverse_dynamics(X, Xd, Xdd, full=True)
    q, qd, qdd, tau = full["q"], full["qd"], full["qdd"], full["tau"]

    timed = time_calls({
        "ref": (pin.rnea, (pm, pd, q3, v3, a3)),
        "inverse_dynamics": (lambda: m.inverse_dynamics(q, qd, qdd, pose=X), ()),
        "task_inverse_dynamics": (lambda: m.task_inverse_dynamics(X, Xd, Xdd), ()),
        "forward_dynamics": (lambda: m.forward_dynamics(q, qd, tau, pose=X), ()),
        "mass_matrix": (lambda: m.mass_matrix(q, pose=X), ()),
        "bias": (lambda: m.bias(q, qd, pose=X), ()),
    }, repeat=repeat, number=number)
    ref_med = timed["ref"][0]
    ref_name = "pinocchio.rnea 3-DOF arm"
    rows = [{"case": "pinocchio.rnea (3-DOF serial arm)", "median_us": ref_med, "p99_us": timed["ref"][1],
             "note": "reference, same process, interleaved"}]
    targets = {"inverse_dynamics", "task_inverse_dynamics", "forward_dynamics"}
    notes = {
        "inverse_dynamics": "reduced M qdd + h via D'Alembert, pose hint",
        "task_inverse_dynamics": "IK + Lagrange-D'Alembert, (x, y, phi) motion",
        "forward_dynamics": "M thetadd = tau - h, pose hint",
        "mass_matrix": "G^T M_full G, pose hint",
        "bias": "C thetad + g, pose hint",
    }
    for name in ("inverse_dynamics", "task_inverse_dynamics", "forward_dynamics", "mass_matrix", "bias"):
        med, p99 = timed[name]
        ratio = med / ref_med
        note = notes[name]
        if name in targets:
            note += f"; target ratio <= {TARGET_RATIO:g}: {'met' if ratio <= TARGET_RATIO else 'MISSED'}"
        rows.append({"case": f"3rrr {name}", "median_us": med, "p99_us": p99, "ref": ref_name,
                     "ref_median_us": ref_med, "ratio": ratio, "note": note})

    # slower paths, for information (no pose hint: FK by continuation from home; multipliers form)
    slow = [
        ("3rrr inverse_dynamics, no pose hint", lambda: m.inverse_dynamics(q, qd, qdd),
         "FK by continuation from the home pose each call"),
        ("3rrr task_inverse_dynamics_multipliers", lambda: m.task_inverse_dynamics_multipliers(X, Xd, Xdd),
         "App. B multipliers form, numpy (cross-check, not a hot path)"),
        ("3rrr rk4_step (1 ms)", lambda: m.rk4_step(q, qd, tau, 1e-3, X),
         "4 stages, each: Newton for X + forward dynamics"),
        ("3rrr forward_kinematics_task, guess", lambda: m.forward_kinematics_task(q, guess=X + 1e-3),
         "Newton from a 1 mm / 1 mrad off guess"),
    ]
    r_slow, n_slow = (7, 100) if quick else (25, 300)
    for case, fn, note in slow:
        med, p99 = time_call(fn, repeat=r_slow, number=n_slow)
        rows.append({"case": case, "median_us": med, "p99_us": p99, "ref": ref_name, "ref_median_us": ref_med,
                     "ratio": med / ref_med, "note": note})
    return rows


if __name__ == "__main__":  # pragma: no cover - manual use: python -m benchmarks.bench_parallel [--quick] [--json FILE]
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from benchmarks.run import main

    sys.exit(main(["--only", "bench_parallel", *sys.argv[1:]]))
