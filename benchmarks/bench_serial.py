"""Serial-arm dynamics: SerialModel's numba kernels next to Pinocchio on the same arm.

Rows: per-call median/p99 [us] of ``inverse_dynamics``, ``mass_matrix`` and
``forward_dynamics`` for the seed-000 arm (3-DOF) and ``arm6_demo`` (6-DOF), each
beside Pinocchio's ``rnea`` / ``crba`` / ``aba`` Python-binding call on the same
arm in the same process (samples interleaved; ``ratio`` = ours / Pinocchio), and
batch inverse dynamics over 100,000 states of the 6-DOF arm (states/s), next to a
Python loop of ``pinocchio.rnea``.

Notes: our calls return a new array; Pinocchio's return references into its
``Data`` (and ``crba`` fills only the upper triangle), so Pinocchio does less
work per call.  The Pinocchio model is built from the SerialModel's joint
placements and inertias and checked equal before timing.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from benchmarks._timing import time_call, time_calls

ROBOTS = Path(__file__).resolve().parents[1] / "hil_configs" / "robots"


def _pinocchio_twin(model):
    """A pinocchio.Model with the same joints, placements, inertias and armature."""
    import pinocchio as pin
    pm = pin.Model()
    pm.gravity = pin.Motion(model.gravity_vector, np.zeros(3))
    X = model.placements
    mass, com, inertia = model.link_inertias
    parent = 0
    for i, kind in enumerate(model.joint_types):
        jm = pin.JointModelRZ() if kind == "revolute" else pin.JointModelPZ()
        parent = pm.addJoint(parent, jm, pin.SE3(X[i][:3, :3], X[i][:3, 3]), model.joint_names[i])
        pm.appendBodyToJoint(parent, pin.Inertia(float(mass[i]), com[i], inertia[i]), pin.SE3.Identity())
    pm.armature = np.asarray(model.drive.armature, dtype=float)
    return pm


def _check_same(model, pm, pd, rng) -> None:
    import pinocchio as pin
    q, v, a = rng.uniform(-2, 2, (3, model.dof))
    ref = pin.rnea(pm, pd, q, v, a)
    if not np.allclose(model.inverse_dynamics(q, v, a), ref, rtol=1e-9, atol=1e-9):
        raise AssertionError(f"{model.name}: SerialModel and Pinocchio disagree; benchmark invalid")


def run(quick: bool = False) -> list[dict]:
    import pinocchio as pin

    from dynamics import load_model

    # short samples (a few hundred us) and many of them: on a shared machine a
    # sample is then rarely preempted, and the median reflects the code's speed
    repeat, number = (60, 100) if quick else (500, 200)
    rows: list[dict] = []
    rng = np.random.default_rng(0)
    for fname, label in (("seed000_arm.toml", "seed000 3-DOF"), ("arm6_demo.toml", "arm6 6-DOF")):
        model = load_model(ROBOTS / fname)
        pm = _pinocchio_twin(model)
        pd = pm.createData()
        _check_same(model, pm, pd, rng)
        n = model.dof
        q, v, a = (np.ascontiguousarray(x) for x in rng.uniform(-2, 2, (3, n)))
        pairs = [
            ("inverse_dynamics", (model.inverse_dynamics, (q, v, a)), "pinocchio.rnea",
             (pin.rnea, (pm, pd, q, v, a))),
            ("mass_matrix", (model.mass_matrix, (q,)), "pinocchio.crba", (pin.crba, (pm, pd, q))),
            ("forward_dynamics", (model.forward_dynamics, (q, v, a)), "pinocchio.aba",
             (pin.aba, (pm, pd, q, v, a))),
        ]
        for case, ours, ref_name, ref in pairs:
            res = time_calls({"ours": ours, "ref": ref}, repeat=repeat, number=number)
            (med, p99), (rmed, _) = res["ours"], res["ref"]
            rows.append({"case": f"{label} {case}", "median_us": med, "p99_us": p99,
                         "ref": ref_name, "ref_median_us": rmed, "ratio": med / rmed})
            if case == "inverse_dynamics":
                rnea_ref = rmed
        # inverse dynamics as the compiled loop calls it: the RNEA kernel inside a compiled loop
        # over states (no Python per call), per state, against pinocchio.rnea per call
        Nc = 4096
        Qc, Vc, Ac = (np.ascontiguousarray(x) for x in rng.uniform(-2, 2, (3, Nc, n)))
        med, p99 = time_call(model.inverse_dynamics, Qc, Vc, Ac, repeat=max(20, repeat // 5), number=1)
        rows.append({"case": f"{label} inverse_dynamics in a compiled loop, per state", "median_us": med / Nc,
                     "p99_us": p99 / Nc, "ref": "pinocchio.rnea (per call from Python, row above)",
                     "ref_median_us": rnea_ref, "ratio": med / Nc / rnea_ref,
                     "note": f"one call over {Nc} states (the kernel the compiled offline loop and the "
                             f"plant call), divided by {Nc}; Pinocchio's figure includes its Python call"})

    # batch inverse dynamics, 6-DOF, 100,000 states
    model = load_model(ROBOTS / "arm6_demo.toml")
    pm = _pinocchio_twin(model)
    pd = pm.createData()
    N = 100_000
    Q, V, A = rng.uniform(-2, 2, (3, N, model.dof))
    med, p99 = time_call(model.inverse_dynamics, Q, V, A, repeat=5 if quick else 15, number=1)
    rows.append({"case": f"arm6 6-DOF batch inverse_dynamics, {N} states", "median_us": med,
                 "p99_us": p99, "states_per_s": N / (med * 1e-6),
                 "note": "one call on (N, 6) arrays; numba loop over N (single thread)"})
    Nref = 10_000 if quick else 50_000

    def pin_loop():
        for k in range(Nref):
            pin.rnea(pm, pd, Q[k], V[k], A[k])

    rmed, _ = time_call(pin_loop, repeat=3 if quick else 5, number=1)
    rows[-1].update({"ref": f"python loop of pinocchio.rnea ({Nref} states)",
                     "ref_median_us": rmed * N / Nref, "ratio": med / (rmed * N / Nref)})
    return rows


if __name__ == "__main__":  # pragma: no cover - manual use: python -m benchmarks.bench_serial [--quick] [--json FILE]
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from benchmarks.run import main

    sys.exit(main(["--only", "bench_serial", *sys.argv[1:]]))
