"""Per-call cost of the Stewart platform dynamics, against Pinocchio's RNEA on a 6-DOF serial arm.

``run(quick)`` returns rows ``{case, median_us, p99_us, ref, ref_median_us, ratio, note}``
(protocol of ``benchmarks/run.py``).  The reference is ``pinocchio.rnea`` on a 6-DOF
revolute arm built with Pinocchio's API in the same process, timed interleaved with
our calls (:func:`benchmarks._timing.time_calls`); the target is ``ratio <= 3`` for
the one-state task inverse and forward dynamics and for every per-cycle call of the
simulated plant and the controllers in leg coordinates with a pose hint (mass
matrix, bias, gravity, inverse/forward dynamics, energies, Jacobians, warm-started
forward kinematics); the singularity report (an SVD, every ``singularity_every``
cycles), the Coriolis matrix (complex-step dM/dt) and the simulated plant's compiled step
for one 1 kHz cycle (two RK4 steps, what ``stewart_motion_direct.toml`` runs a cycle; the
whole run's real-time factor is in ``bench_loop``) are reported without a target.
Times are per call from Python, including argument checks and the allocation of
the result.

Run alone: ``.venv/bin/python -m benchmarks.bench_stewart [--quick]`` or through
``.venv/bin/python benchmarks/run.py --only bench_stewart``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

from benchmarks._timing import time_call, time_calls

ROOT = Path(__file__).resolve().parents[1]
ROBOT = ROOT / "hil_configs" / "robots" / "stewart.toml"
TARGET_RATIO = 3.0


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

    from dynamics import load_model

    repeat, number = (15, 500) if quick else (60, 2000)
    rng = np.random.default_rng(0)
    pm, pd = _pinocchio_arm()
    q = rng.uniform(-1, 1, 6)
    v = rng.normal(size=6)
    a = rng.normal(size=6)

    m = load_model(ROBOT)
    X = m.home_pose + np.array([0.02, -0.01, 0.03, 0.05, -0.04, 0.1])
    Xd = rng.normal(size=6) * 0.1
    Xdd = rng.normal(size=6)
    W = rng.normal(size=6) * 10
    F = m.task_inverse_dynamics(X, Xd, Xdd, W)
    kin = m.leg_kinematics(X, Xd, Xdd)
    L, Ld, Ldd = kin.lengths, kin.rates, kin.accelerations
    F0 = m.task_inverse_dynamics(X, Xd, Xdd)
    # the plant's implicit friction step evaluates M at the new leg lengths from the previous pose
    Lnext = L + 1e-3 * Ld
    Xb = X + 0.01 * rng.normal(size=(100, 6))
    Xdb, Xddb = np.tile(Xd, (100, 1)), np.tile(Xdd, (100, 1))

    # the simulated plant's compiled step, one 1 kHz cycle: two RK4 steps of 0.5 ms (lag, viscous and
    # Coulomb friction, saturation: the flags of stewart_motion_direct.toml's plant)
    from drivers.sim._stewart_plant_kernel import STEWART_WORK, stewart_advance_ws

    cmd = np.zeros((5, 6))
    cmd[0] = F0
    par = np.stack([np.full(6, 250.0), np.full(6, 30.0), np.full(6, 5000.0)])
    step_out, step_work = np.empty(24), np.empty(STEWART_WORK)
    step_args = (m._params, L, Ld, X, F0 + 10.0, cmd, par, 3e-4, 11, 5e-4, 2, step_out, step_work)

    ref_name = "pinocchio.rnea 6-DOF arm"
    calls = {
        "ref": (pin.rnea, (pm, pd, q, v, a)),
        "aba": (pin.aba, (pm, pd, q, v, a)),
        "stewart.task_inverse_dynamics": (m.task_inverse_dynamics, (X, Xd, Xdd)),
        "stewart.task_inverse_dynamics+wrench": (m.task_inverse_dynamics, (X, Xd, Xdd, W)),
        "stewart.forward_dynamics_task": (m.forward_dynamics_task, (X, Xd, F)),
        "stewart.inverse_dynamics(q, pose=)": (lambda: m.inverse_dynamics(L, Ld, Ldd, pose=X), ()),
        "stewart.forward_dynamics(q, pose=)": (lambda: m.forward_dynamics(L, Ld, F0, pose=X), ()),
        "stewart.mass_matrix(q, pose=)": (lambda: m.mass_matrix(L, pose=X), ()),
        "stewart.mass_matrix(q moved, pose=)": (lambda: m.mass_matrix(Lnext, pose=X), ()),
        "stewart.bias(q, pose=)": (lambda: m.bias(L, Ld, pose=X), ()),
        "stewart.gravity(q, pose=)": (lambda: m.gravity(L, pose=X), ()),
        "stewart.kinetic_energy(q, pose=)": (lambda: m.kinetic_energy(L, Ld, pose=X), ()),
        "stewart.potential_energy(q, pose=)": (lambda: m.potential_energy(L, pose=X), ()),
        "stewart.task_jacobian(q, X)": (lambda: m.task_jacobian(L, X), ()),
        "stewart.jacobian(q, pose=)": (lambda: m.jacobian(L, pose=X), ()),
        "stewart.forward_kinematics_task(q moved, guess=)": (lambda: m.forward_kinematics_task(Lnext, guess=X), ()),
        "stewart.singularity(q, X)": (lambda: m.singularity(L, X), ()),
        "stewart.coriolis_matrix(q, pose=)": (lambda: m.coriolis_matrix(L, Ld, pose=X), ()),
        "plant step, one 1 kHz cycle (2 RK4 steps)": (stewart_advance_ws, step_args),
    }
    res = time_calls(calls, repeat=repeat, number=number)
    ref_med, ref_p99 = res["ref"]
    notes = {
        "stewart.task_inverse_dynamics": "formulation (b) Kane/Newton-Euler, numba, one state",
        "stewart.task_inverse_dynamics+wrench": "with an external wrench",
        "stewart.forward_dynamics_task": f"platform accelerations from leg forces "
                                         f"(pinocchio.aba on the arm: {res['aba'][0]:.2f} us)",
        "stewart.inverse_dynamics(q, pose=)": "leg coordinates with a pose hint (Newton check + twist conversion)",
        "stewart.forward_dynamics(q, pose=)": "leg coordinates with a pose hint",
        "stewart.mass_matrix(q, pose=)": "J^-T M_twist J^-1 + armature, conditioning bound",
        "stewart.mass_matrix(q moved, pose=)": "plant friction step: Newton from the previous pose",
        "stewart.bias(q, pose=)": "C qd + g (inverse dynamics at zero leg acceleration)",
        "stewart.gravity(q, pose=)": "g",
        "stewart.kinetic_energy(q, pose=)": "1/2 qd^T M qd",
        "stewart.potential_energy(q, pose=)": "platform and legs",
        "stewart.task_jacobian(q, X)": "J_e^-1 (controller, every cycle)",
        "stewart.jacobian(q, pose=)": "geometric J^-1",
        "stewart.forward_kinematics_task(q moved, guess=)": "Newton, warm-started (1-2 steps)",
        "stewart.singularity(q, X)": "SVD condition number + det + report (safety, every N cycles)",
        "stewart.coriolis_matrix(q, pose=)": "complex-step dM/dt + bias - gravity, numba",
        "plant step, one 1 kHz cycle (2 RK4 steps)":
            "drivers.sim._stewart_plant_kernel.stewart_advance_ws: 8 forward dynamics (FK from the step's "
            "start pose each), 2 mass matrices and 2 poses (the plant of stewart_motion_direct.toml)",
    }
    targeted = {"stewart.task_inverse_dynamics", "stewart.task_inverse_dynamics+wrench",
                "stewart.forward_dynamics_task", "stewart.inverse_dynamics(q, pose=)",
                "stewart.forward_dynamics(q, pose=)", "stewart.mass_matrix(q, pose=)",
                "stewart.mass_matrix(q moved, pose=)", "stewart.bias(q, pose=)", "stewart.gravity(q, pose=)",
                "stewart.kinetic_energy(q, pose=)", "stewart.potential_energy(q, pose=)",
                "stewart.task_jacobian(q, X)", "stewart.jacobian(q, pose=)",
                "stewart.forward_kinematics_task(q moved, guess=)"}
    rows = [{"case": ref_name + " (reference)", "median_us": ref_med, "p99_us": ref_p99, "note": "same process"}]
    for name, note in notes.items():
        med, p99 = res[name]
        rows.append({"case": name, "median_us": med, "p99_us": p99, "ref": ref_name,
                     "ref_median_us": ref_med, "ratio": med / ref_med,
                     "note": note + (f"; target ratio <= {TARGET_RATIO:g}" if name in targeted else "")})
    med, p99 = time_call(m.task_inverse_dynamics, Xb, Xdb, Xddb, repeat=repeat, number=max(number // 50, 10))
    rows.append({"case": "stewart.task_inverse_dynamics[batch 100], per state", "median_us": med / 100,
                 "p99_us": p99 / 100, "ref": ref_name, "ref_median_us": ref_med, "ratio": med / 100 / ref_med,
                 "note": "one call on (100, 6) arrays, divided by 100"})
    if not quick:
        med, p99 = _time_slow(lambda: m.task_inverse_dynamics_lagrange(X, Xd, Xdd))
        rows.append({"case": "stewart.task_inverse_dynamics_lagrange", "median_us": med, "p99_us": p99,
                     "ref": ref_name, "ref_median_us": ref_med, "ratio": med / ref_med,
                     "note": "formulation (a) reference (complex-step numpy), not a hot path"})
    return rows


def _time_slow(fn) -> tuple[float, float]:
    ts = []
    for _ in range(20):
        t0 = time.perf_counter()
        fn()
        ts.append((time.perf_counter() - t0) * 1e6)
    return float(np.median(ts)), float(np.percentile(ts, 99))


if __name__ == "__main__":  # pragma: no cover - manual use: python -m benchmarks.bench_stewart [--quick] [--json FILE]
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from benchmarks.run import main

    sys.exit(main(["--only", "bench_stewart", *sys.argv[1:]]))
