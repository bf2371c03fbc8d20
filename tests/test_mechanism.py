"""Mechanism files (``type = "mechanism"``, dynamics/mechanism.py): the derived models checked
against formulations written independently of them.

* the 3RRR written as a mechanism (hil_configs/robots/3rrr_mechanism.toml) against the
  hand-written Planar3RRR (hil_configs/robots/3rrr_horizontal.toml): IK, FK, inverse and
  forward dynamics, M, C, energies, task Jacobian, singularity margin, and the closure
  multipliers against the hand model's (Lagrange's equations of the first kind, App. B of seed
  001) through the pin-force relation;
* the five-bar leg (hil_configs/robots/fivebar_leg.toml) against a closed-chain formulation in
  numpy written here (two planar 2R chains in closed form, the pin force at the foot solved
  from the passive knees), energy/power balance along a simulated trajectory, and finite
  differences of its Jacobians;
* bad files: ConfigError naming the file and the field, exit 2 from ``torqueloop check``.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from dynamics import load_model
from dynamics.config import read_toml
from dynamics.errors import ConfigError, ModelError, SingularityError

ROOT = Path(__file__).resolve().parents[1]
ROBOTS = ROOT / "hil_configs" / "robots"
TOL = 1e-10


@pytest.fixture(scope="module")
def rrr():
    return load_model(ROBOTS / "3rrr_horizontal.toml"), load_model(ROBOTS / "3rrr_mechanism.toml")


@pytest.fixture(scope="module")
def fivebar():
    return load_model(ROBOTS / "fivebar_leg.toml")


def _rrr_states(hand, rng, k=12):
    for _ in range(k):
        X = hand.home_pose + rng.uniform([-0.06, -0.06, -0.25], [0.06, 0.06, 0.25])
        yield X, hand.inverse_kinematics(X)


# ------------------------------------------------------------------------------- 3RRR
def test_3rrr_mechanism_kinematics_match_the_hand_written_model(rrr):
    hand, mech = rrr
    rng = np.random.default_rng(41)
    for X, q in _rrr_states(hand, rng):
        np.testing.assert_allclose(mech.inverse_kinematics(X), q, rtol=0, atol=TOL)
        np.testing.assert_allclose(mech.forward_kinematics_task(q), hand.forward_kinematics_task(q, guess=X),
                                   rtol=0, atol=TOL)
        np.testing.assert_allclose(mech.task_jacobian(q, X), hand.task_jacobian(q, X), rtol=0, atol=TOL)
        np.testing.assert_allclose(mech.jacobian(q), hand.jacobian(q, pose=X), rtol=0, atol=TOL)
        # the same threshold rule: same kind, and the same margin (length_scale = the hand
        # model's mean platform radius)
        rh, rm = hand.singularity(q, X), mech.singularity(q, X)
        assert rh.kind == rm.kind == "regular"
        assert abs(rh.margin - rm.margin) < TOL


def test_3rrr_mechanism_dynamics_match_the_hand_written_model(rrr):
    hand, mech = rrr
    rng = np.random.default_rng(4101)
    for X, q in _rrr_states(hand, rng):
        qd, qdd, tau = rng.normal(size=3), 3 * rng.normal(size=3), rng.normal(size=3)
        np.testing.assert_allclose(mech.inverse_dynamics(q, qd, qdd), hand.inverse_dynamics(q, qd, qdd, pose=X),
                                   rtol=0, atol=TOL)
        np.testing.assert_allclose(mech.forward_dynamics(q, qd, tau), hand.forward_dynamics(q, qd, tau, pose=X),
                                   rtol=0, atol=TOL)
        np.testing.assert_allclose(mech.mass_matrix(q), hand.mass_matrix(q, pose=X), rtol=0, atol=TOL)
        np.testing.assert_allclose(mech.coriolis_matrix(q, qd), hand.coriolis_matrix(q, qd, pose=X),
                                   rtol=0, atol=TOL)
        assert abs(mech.kinetic_energy(q, qd) - hand.kinetic_energy(q, qd, pose=X)) < TOL
        w = rng.normal(size=3)
        np.testing.assert_allclose(mech.inverse_dynamics(q, qd, qdd, wrench=w),
                                   hand.inverse_dynamics(q, qd, qdd, wrench=w, pose=X), rtol=0, atol=TOL)


def test_3rrr_mechanism_dynamics_along_a_control_path_match_and_do_not_depend_on_history(rrr):
    """1 ms steps of a path, as a control loop calls: each forward kinematics is one continuation
    step from the last solution, started at the first-order prediction from the velocity map of
    the last dynamics call.  The results match the hand-written model, and a copy built afresh
    (continuing from its home configuration instead) gives the same to 1e-12."""
    hand, mech = rrr
    t = np.arange(60) * 1e-3
    w = 2 * np.pi
    for k in range(t.size):
        X = hand.home_pose + np.array([0.03 * np.cos(w * t[k]) - 0.03, 0.03 * np.sin(w * t[k]),
                                       0.2 * np.sin(w * t[k])])
        q = hand.inverse_kinematics(X)
        qd, qdd, tau = np.array([0.5, -0.2, 0.3]), np.array([2.0, 1.0, -3.0]), np.array([0.1, -0.2, 0.05])
        tau_m = mech.inverse_dynamics(q, qd, qdd)
        qdd_m = mech.forward_dynamics(q, qd, tau)
        np.testing.assert_allclose(tau_m, hand.inverse_dynamics(q, qd, qdd, pose=X), rtol=0, atol=TOL)
        np.testing.assert_allclose(qdd_m, hand.forward_dynamics(q, qd, tau, pose=X), rtol=0, atol=TOL)
        if k % 20 == 19:
            fresh = mech.scaled(1.0)
            np.testing.assert_allclose(fresh.inverse_dynamics(q, qd, qdd), tau_m, rtol=0, atol=1e-12)
            np.testing.assert_allclose(fresh.forward_dynamics(q, qd, tau), qdd_m, rtol=0, atol=1e-12)


def test_3rrr_mechanism_multipliers_match_the_hand_written_first_kind_equations(rrr):
    """The hand model eliminates the distal links (their kinetic energy in the elbow and
    platform-joint velocities) and constrains |C_i - B_i|^2 = b^2 with multipliers lam_i; the
    mechanism pins the distal link to the platform, its multipliers being the pin force on the
    platform.  The pin force is the force along the link, 2 lam_i (C_i - B_i), less the part of
    the distal link's inertia and weight the hand model lumps at C_i:
    ``f_i = 2 lam_i d_i - (mCC aC_i + mBC aB_i - m_b k g)`` (seed 001 App. B's mass terms)."""
    hand, mech = rrr
    rng = np.random.default_rng(4102)
    dist = hand.distal
    b, mb, Ib, k = dist.length, dist.mass, dist.inertia, dist.com / dist.length
    mBC = mb * k * (1 - k) - Ib / b ** 2
    mCC = mb * k ** 2 + Ib / b ** 2
    g = hand.gravity_vector[:2]
    a = hand.proximal.length
    for X, _ in _rrr_states(hand, rng):
        Xd, Xdd = 0.2 * rng.normal(size=3), rng.normal(size=3)
        tau_h, lam_h = hand.task_inverse_dynamics_multipliers(X, Xd, Xdd)
        r = mech.task_inverse_dynamics(X, Xd, Xdd, full=True)
        np.testing.assert_allclose(r["tau"], tau_h, rtol=0, atol=TOL)
        q, qd, qdd = r["q"], r["qd"], r["qdd"]
        np.testing.assert_allclose(q, hand.inverse_kinematics(X), rtol=0, atol=TOL)
        u = np.stack([np.cos(q), np.sin(q)], axis=1)
        n = np.stack([-u[:, 1], u[:, 0]], axis=1)
        aB = (a * qdd)[:, None] * n - (a * qd ** 2)[:, None] * u
        c, s = np.cos(X[2]), np.sin(X[2])
        rho = hand.platform_joints @ np.array([[c, s], [-s, c]])
        aC = Xdd[:2] + Xdd[2] * np.stack([-rho[:, 1], rho[:, 0]], axis=1) - Xd[2] ** 2 * rho
        d = hand.platform_joint_positions(X) - hand.elbow_positions(q)
        f = 2 * lam_h[:, None] * d - (mCC[:, None] * aC + mBC[:, None] * aB - (mb * k)[:, None] * g)
        np.testing.assert_allclose(r["lam"].reshape(3, 2), f, rtol=0, atol=TOL)


def test_mechanism_model_pickles_for_worker_processes(fivebar):
    import pickle

    b = pickle.loads(pickle.dumps(fivebar))
    q, qd, qdd = fivebar.home_q, np.array([0.4, -0.3]), np.array([2.0, 1.0])
    assert b.generated.from_cache and b.source == fivebar.source
    np.testing.assert_allclose(b.inverse_dynamics(q, qd, qdd), fivebar.inverse_dynamics(q, qd, qdd), rtol=0, atol=1e-14)
    s = pickle.loads(pickle.dumps(fivebar.scaled(1.1)))
    np.testing.assert_allclose(s.mass_matrix(q), fivebar.scaled(1.1).mass_matrix(q), rtol=0, atol=1e-15)
    assert not np.allclose(s.mass_matrix(q), fivebar.mass_matrix(q))


def test_kernels_are_compiled_at_build_and_other_arrays_take_the_checked_path(rrr):
    """The entry kernels are numba code, compiled (or loaded from numba's cache) when the model
    is built; a call with arrays of another kind (read-only, strided, a list) gets the same
    result through the checked path and compiles nothing in a control cycle."""
    hand, mech = rrr
    from dynamics import _mechanism_runtime as k
    names = ("inverse_dynamics", "forward_dynamics", "configuration", "forward_task", "inverse_q",
             "task_jacobian", "reduced", "task_id")
    sigs = {n: len(getattr(k, n).signatures) for n in names}
    assert sigs == dict.fromkeys(names, 1)
    q, qd, qdd = mech.home_q + 0.05, np.array([0.1, -0.2, 0.3]), np.array([1.0, 0.5, -2.0])
    tau = mech.inverse_dynamics(q, qd, qdd)
    np.testing.assert_allclose(tau, hand.inverse_dynamics(q, qd, qdd), rtol=0, atol=TOL)
    ro = q.copy()
    ro.setflags(write=False)
    strided = np.repeat(qd, 2)[::2]
    X = mech.forward_kinematics_task(q)
    Xro = X.copy()
    Xro.setflags(write=False)
    # (the Newton solves start from the last solution: equal to rounding, not to the bit)
    for slow, fast in ((mech.inverse_dynamics(ro, strided, list(qdd)), tau),
                       (mech.forward_dynamics(ro, strided, list(tau)), mech.forward_dynamics(q, qd, tau)),
                       (mech.forward_kinematics_task(ro), X),
                       (mech.inverse_kinematics(Xro), mech.inverse_kinematics(X)),
                       (mech.task_jacobian(ro, Xro), mech.task_jacobian(q, X)),
                       (mech.mass_matrix(ro), mech.mass_matrix(q)),
                       (mech.bias(ro, strided), mech.bias(q, qd)),
                       (mech.gravity(ro), mech.gravity(q)),
                       (mech.task_inverse_dynamics(Xro, list(qd), list(qdd)),
                        mech.task_inverse_dynamics(X, qd, qdd))):
        np.testing.assert_allclose(slow, fast, rtol=0, atol=1e-13)
    # and the compiled paths against the hand-written model
    Xd, Xdd = hand.task_velocity(q, X, qd), np.array([0.2, -0.1, 0.5])
    np.testing.assert_allclose(mech.task_jacobian(q, X), hand.task_jacobian(q, X), rtol=0, atol=TOL)
    np.testing.assert_allclose(mech.mass_matrix(q), hand.mass_matrix(q), rtol=0, atol=TOL)
    np.testing.assert_allclose(mech.bias(q, qd), hand.bias(q, qd), rtol=0, atol=TOL)
    np.testing.assert_allclose(mech.task_inverse_dynamics(X, Xd, Xdd), hand.task_inverse_dynamics(X, Xd, Xdd),
                               rtol=0, atol=TOL)
    assert {n: len(getattr(k, n).signatures) for n in names} == sigs
    for bad, what in ((np.array([1.0, np.nan, 0.0]), "qdd must be finite"), (np.ones(4), r"qdd must have shape \(3,\)")):
        with pytest.raises(ModelError, match=what):
            mech.inverse_dynamics(q, qd, bad)


def test_3rrr_mechanism_batch_forms(rrr):
    hand, mech = rrr
    rng = np.random.default_rng(4103)
    Xs, qs = zip(*_rrr_states(hand, rng, 4))
    qs, Xs = np.array(qs), np.array(Xs)
    qd = rng.normal(size=qs.shape)
    qdd = rng.normal(size=qs.shape)
    np.testing.assert_allclose(mech.inverse_dynamics(qs, qd, qdd), hand.inverse_dynamics(qs, qd, qdd, pose=Xs),
                               rtol=0, atol=TOL)
    np.testing.assert_allclose(mech.inverse_kinematics(Xs), qs, rtol=0, atol=TOL)
    assert mech.mass_matrix(qs).shape == (4, 3, 3)
    assert mech.forward_kinematics(qs).shape == (4, 4, 4)


# ------------------------------------------------------------------------------ five-bar
def _fivebar_params():
    """The five-bar's data as read directly from its file (not through the model)."""
    d = read_toml(ROBOTS / "fivebar_leg.toml")
    bodies = {b["name"]: b for b in d["bodies"]}
    joints = {j["name"]: j for j in d["joints"]}
    return d, bodies, joints


def _chain_id(hip, l1, l2, up, lo, arm, g, q, qd, qdd):
    """Planar 2R chain in closed form (textbook Lagrange): joint torques and the foot Jacobian."""
    m1, r1, I1 = up["mass"], up["com"][0], up["inertia"]
    m2, r2, I2 = lo["mass"], lo["com"][0], lo["inertia"]
    q1, q2 = q
    c2, s2 = np.cos(q2), np.sin(q2)
    M = np.array([[I1 + m1 * r1 ** 2 + I2 + m2 * (l1 ** 2 + r2 ** 2 + 2 * l1 * r2 * c2) + arm,
                   I2 + m2 * (r2 ** 2 + l1 * r2 * c2)],
                  [I2 + m2 * (r2 ** 2 + l1 * r2 * c2), I2 + m2 * r2 ** 2]])
    hc = m2 * l1 * r2 * s2
    cor = np.array([-hc * (2 * qd[0] * qd[1] + qd[1] ** 2), hc * qd[0] ** 2])
    n1 = np.array([-np.sin(q1), np.cos(q1)])
    n12 = np.array([-np.sin(q1 + q2), np.cos(q1 + q2)])
    grav = -np.array([m1 * g @ (r1 * n1) + m2 * g @ (l1 * n1 + r2 * n12), m2 * g @ (r2 * n12)])
    J = np.stack([l1 * n1 + l2 * n12, l2 * n12], axis=1)
    return M @ qdd + cor + grav, J


def _chain_ik(hip, l1, l2, knee_sign, X, Xd, Xdd):
    d = X - hip
    r2 = d @ d
    q2 = knee_sign * np.arccos((r2 - l1 ** 2 - l2 ** 2) / (2 * l1 * l2))
    q1 = np.arctan2(d[1], d[0]) - np.arctan2(l2 * np.sin(q2), l1 + l2 * np.cos(q2))
    u1, u12 = np.array([np.cos(q1), np.sin(q1)]), np.array([np.cos(q1 + q2), np.sin(q1 + q2)])
    n1, n12 = np.array([-u1[1], u1[0]]), np.array([-u12[1], u12[0]])
    J = np.stack([l1 * n1 + l2 * n12, l2 * n12], axis=1)
    qd = np.linalg.solve(J, Xd)
    cent = -l1 * u1 * qd[0] ** 2 - l2 * u12 * (qd[0] + qd[1]) ** 2
    qdd = np.linalg.solve(J, Xdd - cent)
    return np.array([q1, q2]), qd, qdd


def _fivebar_reference(X, Xd, Xdd):
    """Hip torques and the pin force at the foot (on the right lower link, from the left), from
    the two 2R chains joined at the foot: the passive knees carry no torque."""
    d, B, Jn = _fivebar_params()
    g = np.array(d["gravity"][:2])
    out = []
    for side, sign in (("left", 1.0), ("right", -1.0)):
        hip = np.array(Jn[f"hip_{side}"]["origin"][:2])
        l1 = Jn[f"knee_{side}"]["origin"][0]
        l2 = d["loops"][0]["point_a"][0]
        arm = Jn[f"hip_{side}"]["rotor_inertia"] * Jn[f"hip_{side}"]["gear_ratio"] ** 2
        q, qd, qdd = _chain_ik(hip, l1, l2, sign, X, Xd, Xdd)
        tau, J = _chain_id(hip, l1, l2, B[f"upper_{side}"], B[f"lower_{side}"], arm, g, q, qd, qdd)
        out.append((q, tau, J))
    (qL, tL, JL), (qR, tR, JR) = out
    # F: force on the right chain's foot from the left one (-F on the left):
    # knee rows: tL[1] + JL[:,1].F = 0 and tR[1] - JR[:,1].F = 0
    F = np.linalg.solve(np.array([JL[:, 1], -JR[:, 1]]), -np.array([tL[1], tR[1]]))
    tau = np.array([tL[0] + JL[:, 0] @ F, tR[0] - JR[:, 0] @ F])
    return tau, F, np.array([qL[0], qR[0]]), np.array([qL[1], qR[1]])


def test_fivebar_against_two_closed_form_2r_chains(fivebar):
    rng = np.random.default_rng(4104)
    X0 = fivebar.home_pose
    for _ in range(12):
        X = X0 + rng.uniform([-0.03, -0.01], [0.03, 0.05])     # inside the workspace
        Xd, Xdd = rng.normal(size=2), 10 * rng.normal(size=2)
        tau, F, hips, knees = _fivebar_reference(X, Xd, Xdd)
        r = fivebar.task_inverse_dynamics(X, Xd, Xdd, full=True)
        np.testing.assert_allclose(r["q"], hips, rtol=0, atol=TOL)
        np.testing.assert_allclose(r["z"][[1, 3]], knees, rtol=0, atol=TOL)
        np.testing.assert_allclose(r["tau"], tau, rtol=0, atol=TOL)
        np.testing.assert_allclose(r["lam"], F, rtol=0, atol=TOL)   # on body_b (right) from body_a
        # the actuator-space path (FK from the hips) agrees with the task-space one
        np.testing.assert_allclose(fivebar.inverse_dynamics(r["q"], r["qd"], r["qdd"]), tau, rtol=0, atol=TOL)
        np.testing.assert_allclose(fivebar.forward_dynamics(r["q"], r["qd"], tau), r["qdd"], rtol=0, atol=1e-8)


def rk4_energy_balance(model, tau_at, dt=1e-3, steps=300):
    """RK4 of the forward dynamics on the actuated state from rest at home (closures re-solved at
    every stage), the drives' work integrated with the state (dW/dt = tau . qd), torques
    ``tau_at(t, g0)`` (g0: the gravity torques at home).  Returns (change of T + V [J], work
    [J], q, qd at the end)."""
    q = model.home_q.copy()
    qd = np.zeros(model.dof)
    g0 = model.gravity(q)

    def f(t, q, qd):
        tau = tau_at(t, g0)
        return qd, model.forward_dynamics(q, qd, tau), tau @ qd

    E0 = model.kinetic_energy(q, qd) + model.potential_energy(q)
    work = 0.0
    for k in range(steps):
        t = k * dt
        k1 = f(t, q, qd)
        k2 = f(t + dt / 2, q + dt / 2 * k1[0], qd + dt / 2 * k1[1])
        k3 = f(t + dt / 2, q + dt / 2 * k2[0], qd + dt / 2 * k2[1])
        k4 = f(t + dt, q + dt * k3[0], qd + dt * k3[1])
        q = q + dt / 6 * (k1[0] + 2 * k2[0] + 2 * k3[0] + k4[0])
        qd = qd + dt / 6 * (k1[1] + 2 * k2[1] + 2 * k3[1] + k4[1])
        work += dt / 6 * (k1[2] + 2 * k2[2] + 2 * k3[2] + k4[2])
    return model.kinetic_energy(q, qd) + model.potential_energy(q) - E0, work, q, qd


def test_fivebar_energy_balance_along_a_simulated_trajectory(fivebar):
    """RK4 on the minimal state (closures re-solved at every stage): the change of T + V equals
    the work of the drives to the integration error, and the closures stay closed."""
    dE, work, q, qd = rk4_energy_balance(
        fivebar, lambda t, g0: g0 + np.array([0.03 * np.sin(9 * t), -0.025 * np.sin(7 * t + 0.5)]))
    assert np.max(np.abs(qd)) > 0.3          # it moved
    assert abs(work) > 1e-3
    assert abs(dE - work) < 1e-8 * abs(work) + 1e-12, (dE, work)
    z = fivebar.configuration(q)
    assert np.max(np.abs(fivebar.constraints(z))) < 1e-11
    assert_passivity(fivebar, q, qd)


def run_shipped_task_run(name, axes):
    """Execute hil_configs/runs/<name> (a task-space run of a mechanism file): its task axes are
    ``axes`` ((name, kind) pairs, as reports show them) and it completes.  Returns its metrics
    and their per-axis RMS error."""
    from controller.app.report import controller_quantities
    from controller.app.run import build_run, load_run

    spec = load_run(ROOT / "hil_configs" / "runs" / name)
    assert [(a.name, a.kind) for a in controller_quantities(spec.model, "task")] == list(axes)
    res = build_run(spec).execute()
    assert res.status == "completed", res.faults
    return res.metrics, np.asarray(res.metrics["rms_error"])


def assert_passivity(model, q, qd):
    """The passivity property the controllers rely on: dM/dt - 2C is skew (dM/dt by central
    differences along qd), and C qd + g = h."""
    h = 1e-6
    Md = (model.mass_matrix(q + h * qd) - model.mass_matrix(q - h * qd)) / (2 * h)
    S = Md - 2 * model.coriolis_matrix(q, qd)
    np.testing.assert_allclose(S + S.T, 0, atol=1e-7)
    np.testing.assert_allclose(model.coriolis_matrix(q, qd) @ qd + model.gravity(q), model.bias(q, qd),
                               rtol=0, atol=1e-12)


def test_fivebar_jacobians_against_finite_differences(fivebar):
    rng = np.random.default_rng(4105)
    h = 1e-6
    for _ in range(6):
        q = fivebar.home_q + rng.uniform(-0.15, 0.15, size=2)
        X = fivebar.forward_kinematics_task(q)
        Jfd = np.stack([(fivebar.forward_kinematics_task(q + h * e) - fivebar.forward_kinematics_task(q - h * e))
                        / (2 * h) for e in np.eye(2)], axis=1)
        np.testing.assert_allclose(fivebar.task_jacobian(q, X), Jfd, rtol=0, atol=1e-8)
        J6 = fivebar.jacobian(q)
        T = [fivebar.forward_kinematics(q + s * h * e) for e in np.eye(2) for s in (1, -1)]
        for i in range(2):
            Tp, Tm = T[2 * i], T[2 * i + 1]
            np.testing.assert_allclose(J6[:3, i], (Tp[:3, 3] - Tm[:3, 3]) / (2 * h), atol=1e-8)
            W = (Tp[:3, :3] - Tm[:3, :3]) / (2 * h) @ fivebar.forward_kinematics(q)[:3, :3].T
            np.testing.assert_allclose(J6[3:, i], [W[2, 1], W[0, 2], W[1, 0]], atol=1e-8)
        z = fivebar.configuration(q)
        Pfd = np.stack([(fivebar.constraints(z + h * e) - fivebar.constraints(z - h * e)) / (2 * h)
                        for e in np.eye(4)], axis=1)
        np.testing.assert_allclose(fivebar.constraint_jacobian(z), Pfd, rtol=0, atol=1e-8)


def test_fivebar_stretched_leg_is_a_type1_singularity(fivebar):
    """Left knee straight (upper and lower link collinear): the foot cannot move along the leg."""
    d, B, Jn = _fivebar_params()
    hipL, hipR = np.array(Jn["hip_left"]["origin"][:2]), np.array(Jn["hip_right"]["origin"][:2])
    q1 = -1.4
    foot = hipL + 0.28 * np.array([np.cos(q1), np.sin(q1)])
    qR, _, _ = _chain_ik(hipR, 0.1, 0.18, -1.0, foot, np.zeros(2), np.zeros(2))
    rep = fivebar.singularity(np.array([q1, qR[0]]))
    assert rep.kind == "type1" and rep.margin == 0.0
    assert fivebar.singularity(fivebar.home_q).kind == "regular"


def _singularity_loop(model, Q):
    """What a row-by-row loop of ``singularity`` gives: (margins, the error it stopped on)."""
    out = []
    for q in Q:
        try:
            rep = model.singularity(q)
        except ModelError as e:
            return out, e
        if rep.kind != "regular":
            return out, rep.kind
        out.append(rep.margin)
    return out, None


@pytest.mark.parametrize("case", ["regular", "through_type1", "out_of_reach", "nan", "nan_first", "empty"])
def test_fivebar_path_margins_in_one_pass_equal_the_row_by_row_reports(fivebar, case):
    """``singularity_margins`` (an excitation design checks thousands of paths) gives the
    margins of ``singularity`` row by row bit for bit, stops at the same row for the same
    reason, and leaves the forward kinematics' continuation (which later calls start from)
    where the loop leaves it."""
    d, B, Jn = _fivebar_params()
    hipL, hipR = np.array(Jn["hip_left"]["origin"][:2]), np.array(Jn["hip_right"]["origin"][:2])
    foot = hipL + 0.28 * np.array([np.cos(-1.4), np.sin(-1.4)])
    q_sing = np.array([-1.4, _chain_ik(hipR, 0.1, 0.18, -1.0, foot, np.zeros(2), np.zeros(2))[0][0]])
    t = np.linspace(0.0, 1.0, 40)[:, None]
    home = np.asarray(fivebar.home_q, dtype=float)
    end = {"regular": home + [0.4, -0.3], "through_type1": q_sing, "out_of_reach": np.array([0.4, -3.5]),
           "nan": home + [0.2, 0.2], "nan_first": home + [0.2, 0.2], "empty": home}[case]
    Q = home + t * (end - home)
    if case == "through_type1":
        Q = np.vstack([Q, Q[-2::-1]])     # to the stretched leg and back
    if case == "nan":
        Q[25, 1] = np.nan
    if case == "nan_first":         # the first row already fails: nothing to take margins of
        Q[0, 1] = np.nan
    if case == "empty":
        Q = Q[:0]
    D0 = fivebar._D.copy()
    want, stop = _singularity_loop(fivebar, Q)
    D_loop = fivebar._D.copy()
    fivebar._D[:] = D0
    if stop is None:
        got = fivebar.singularity_margins(Q)
        np.testing.assert_array_equal(got, want)
        assert (case == "regular" and got.min() > 0.05) or (case == "empty" and got.shape == (0,))
    else:
        with pytest.raises(ModelError) as ei:
            fivebar.singularity_margins(Q)
        if isinstance(stop, str):
            assert case == "through_type1" and stop == "type1" and isinstance(ei.value, SingularityError)
            assert f"row {len(want)} " in str(ei.value)
        else:
            assert type(ei.value) is type(stop) and str(ei.value) == str(stop)
    np.testing.assert_array_equal(fivebar._D, D_loop)
    fivebar._D[:] = D0


# ------------------------------------------------------------------------------ bad files
def _bad(mutate):
    data = copy.deepcopy(read_toml(ROBOTS / "fivebar_leg.toml"))
    mutate(data)
    with pytest.raises(ConfigError) as ei:
        load_model(data, file="leg.toml")
    assert ei.value.file == "leg.toml"
    return ei.value


def _set(path, value):
    def m(d):
        node = d
        for p in path[:-1]:
            node = node[p]
        node[path[-1]] = value
    return m


@pytest.mark.parametrize("mutate, field, words", [
    (_set(["joints", 1, "home"], 1.3), "loops[0]", "does not close"),
    (lambda d: (d["joints"][1].update(actuated=True), d["task"].update(coordinates=["x", "y", "phi"])),
     "joints", "mobility"),
    (_set(["task", "coordinates"], ["x"]), "task.coordinates", "actuated"),
    (_set(["bodies", 0, "inertia"], [1e-5, 1e-5, 5e-5, 0, 0, 0]), "bodies[0].inertia", "triangle"),
    (_set(["bodies", 0, "inertia"], [1e-5, 1e-5, 1e-5, 2e-5, 0, 0]), "bodies[0].inertia", "semi-definite"),
    (_set(["bodies", 1, "inertia"], -1e-4), "bodies[1].inertia", ">="),
    (lambda d: d["bodies"][0].update(mass=0.0), "bodies[0].inertia", "massless"),
    (_set(["joints", 0, "axis"], [1.0, 0.0, 0.0]), "joints[0].axis", "planar"),
    (_set(["joints", 2, "parent"], "lower_right"), "joints[2].parent", "earlier joint"),
    (_set(["loops", 0, "body_b"], "foot"), "loops[0].body_b", "not 'ground' or a body"),
    (_set(["joints", 0, "stiffness"], 1.0), "joints[0].stiffness", "unknown field"),
])
def test_bad_mechanism_files_name_the_field(mutate, field, words):
    err = _bad(mutate)
    assert err.field == field and words in str(err), str(err)


def test_bad_mechanism_file_exits_2_from_check(tmp_path):
    text = (ROBOTS / "fivebar_leg.toml").read_text().replace("home = 0.9842", "home = 1.3")
    p = tmp_path / "leg.toml"
    p.write_text(text)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-m", "controller.app.cli", "check", str(p)], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert str(p) in r.stderr and "loops[0]" in r.stderr and "Traceback" not in r.stderr


# ------------------------------------------------------------------------------ the code cache
def test_the_entry_kernels_are_compiled_once_for_every_mechanism(rrr, fivebar):
    """A generated file holds its own functions only: the Newton solves and dynamics are
    dynamics._mechanism_runtime's, compiled once for every mechanism (they call a model's
    generated functions through the addresses in its ``P``), so that a new geometry does not
    compile them again (~25 s each)."""
    from dynamics import _mechanism_runtime as rt

    mech = rrr[1]
    assert mech.generated.digest != fivebar.generated.digest
    for m in (mech, fivebar):
        src = Path(m.generated.kernels.__file__).read_text(encoding="utf-8")
        assert "def _newton(" not in src and "def _lu(" not in src and "_mechanism_runtime" not in src
        assert m._k is rt and m._P.dtype == np.int64 and m._P.shape == (9,)
    assert not np.array_equal(mech._P[:4], fivebar._P[:4])
    for name in rt.ENTRIES:
        kernel = getattr(rt, name)
        assert len(kernel.signatures) == 1 and kernel.signatures[0][0] == rt._P, name
    # the entry kernel called with the model's own P and D: the model's result
    q, qd, qdd = fivebar.home_q + 0.02, np.array([0.3, -0.2]), np.array([1.0, 0.5])
    tau = fivebar.inverse_dynamics(q, qd, qdd)
    out = np.empty(2)
    assert rt.inverse_dynamics(fivebar._P, fivebar._D, q, qd, qdd, np.zeros(fivebar._n), out) == 0
    np.testing.assert_allclose(out, tau, rtol=0, atol=1e-12)
    # one model's functions with another's array (other sizes): refused, nothing written
    out[:] = np.nan
    D = fivebar._D.copy()
    assert rt.inverse_dynamics(mech._P, D, q, qd, qdd, np.zeros(fivebar._n), out) == 5
    assert np.isnan(out).all() and np.array_equal(D, fivebar._D)
    assert rt.newton_passive(mech._P, q, fivebar._home_z.copy(), D, np.empty(fivebar._n)) == 0.0


def test_generated_code_is_cached_by_digest_and_a_damaged_entry_is_replaced(tmp_path, monkeypatch):
    import numba

    from dynamics import _mechanism_derive as D

    monkeypatch.setenv("TORQUELOOP_MECHANISM_CACHE", str(tmp_path))
    # the code cache under test, not numba's: the generated kernels run as plain Python here
    # (numba's cache of a file in a new folder starts empty: compiling them would take ~60 s)
    monkeypatch.setattr(numba.config, "DISABLE_JIT", True)
    a = load_model(ROBOTS / "fivebar_leg.toml")
    assert not a.generated.from_cache and a.derivation_seconds > 0
    files = list(tmp_path.glob("mechanism-*.py"))
    assert len(files) == 1 and not list(tmp_path.glob("*.tmp*"))
    b = load_model(ROBOTS / "fivebar_leg.toml")
    assert b.generated.from_cache and b.generated.digest == a.generated.digest
    # inertial values are parameters of the generated code: a scaled copy needs no derivation
    data = read_toml(ROBOTS / "fivebar_leg.toml")
    data["bodies"][0]["mass"] = 0.07
    assert load_model(data, file="x.toml").generated.from_cache
    files[0].write_text("def broken(:\n")
    c = load_model(ROBOTS / "fivebar_leg.toml")
    assert not c.generated.from_cache
    q, qd = a.home_q, np.array([0.3, -0.2])
    np.testing.assert_allclose(c.bias(q, qd), a.bias(q, qd), rtol=0, atol=1e-14)
    assert D.digest_of(a.spec.symbolic) == a.generated.digest


# ------------------------------------------------------------------------------ a serial arm
def _serial_as_mechanism(model, home):
    """A serial model's own parameters (placements, link inertias, tool, drives) written as a
    mechanism file: each body frame is the world-aligned frame at q = 0 (the mechanism format
    has no fixed rotations), so the joint axes, centres of mass and inertias are rotated into
    it; no loops, the task is the tool point (x, y, z)."""
    X = model.placements
    mass, com, Ic = model.link_inertias
    tool = model.tool_transform
    drive, lim = model.drive, model.limits
    W = np.eye(4)
    bodies, joints = [], []
    parent = "ground"
    for i in range(model.dof):
        Wi = W @ X[i]
        R = Wi[:3, :3]
        I = R @ Ic[i] @ R.T
        bodies.append({"name": f"link{i + 1}", "mass": float(mass[i]), "com": (R @ com[i]).tolist(),
                       "inertia": [I[0, 0], I[1, 1], I[2, 2], I[0, 1], I[1, 2], I[2, 0]]})
        joints.append({"name": model.joint_names[i], "type": model.joint_types[i], "parent": parent,
                       "child": f"link{i + 1}", "origin": (Wi[:3, 3] - W[:3, 3]).tolist(),
                       "axis": R[:, 2].tolist(), "home": float(home[i]), "actuated": True,
                       "rotor_inertia": float(drive.armature[i]), "gear_ratio": 1.0,
                       "viscous": float(drive.viscous[i]), "coulomb": float(drive.coulomb[i])})
        parent = f"link{i + 1}"
        W = Wi
    return {"name": model.name + "_mechanism", "type": "mechanism", "planar": False,
            "gravity": model.gravity_vector.tolist(), "bodies": bodies, "joints": joints,
            "task": {"body": parent, "point": (W[:3, :3] @ tool[:3, 3]).tolist(), "coordinates": ["x", "y", "z"]}}


def test_a_serial_arm_written_as_a_mechanism_reproduces_the_dh_model():
    """seed 000's 3-DOF spatial arm (DH rows; its dynamics are checked against Pinocchio in
    tests/test_serial_pinocchio.py) as a mechanism without loops: the spatial code path."""
    arm = load_model(ROBOTS / "seed000_arm.toml")
    home = np.array([0.3, 0.5, -1.0])
    mech = load_model(_serial_as_mechanism(arm, home), file="seed000_mechanism")
    rng = np.random.default_rng(4106)
    for _ in range(12):
        q = home + rng.uniform(-0.4, 0.4, size=3)
        qd, qdd, tau = rng.normal(size=3), 3 * rng.normal(size=3), 10 * rng.normal(size=3)
        np.testing.assert_allclose(mech.mass_matrix(q), arm.mass_matrix(q), rtol=0, atol=TOL)
        np.testing.assert_allclose(mech.inverse_dynamics(q, qd, qdd), arm.inverse_dynamics(q, qd, qdd),
                                   rtol=0, atol=TOL)
        np.testing.assert_allclose(mech.forward_dynamics(q, qd, tau), arm.forward_dynamics(q, qd, tau),
                                   rtol=0, atol=TOL)
        np.testing.assert_allclose(mech.coriolis_matrix(q, qd), arm.coriolis_matrix(q, qd), rtol=0, atol=TOL)
        assert abs(mech.kinetic_energy(q, qd) - arm.kinetic_energy(q, qd)) < TOL
        assert abs((mech.potential_energy(q) - mech.potential_energy(home))
                   - (arm.potential_energy(q) - arm.potential_energy(home))) < TOL
        T = arm.forward_kinematics(q)
        np.testing.assert_allclose(mech.forward_kinematics(q)[:3, 3], T[:3, 3], rtol=0, atol=TOL)
        np.testing.assert_allclose(mech.jacobian(q), arm.jacobian(q), rtol=0, atol=TOL)
        np.testing.assert_allclose(mech.inverse_kinematics(T[:3, 3]), q, rtol=0, atol=TOL)


def _zyx_angles(R) -> np.ndarray:
    """(alpha, beta, gamma) with R = Rz(gamma) Ry(beta) Rx(alpha), written out here (the inverse
    of dynamics.stewart.rotation_matrix away from beta = +-pi/2)."""
    return np.array([np.arctan2(R[2, 1], R[2, 2]), np.arctan2(-R[2, 0], np.hypot(R[0, 0], R[1, 0])),
                     np.arctan2(R[1, 0], R[0, 0])])


def _gantry_with_wrist(offset_rpy):
    """A 6-coordinate mechanism: a Cartesian gantry (three actuated prismatic joints along x, y,
    z) carrying an actuated spherical wrist (ZYX), the task the pose of a tool point 5 cm along
    the wrist body's x axis, the task frame turned by ``offset_rpy`` in the body."""
    def body(name, m):
        return {"name": name, "mass": m, "com": [0.0, 0.0, 0.0], "inertia": [1e-3, 1e-3, 1e-3, 0.0, 0.0, 0.0]}

    def slide(name, parent, child, axis, home):
        return {"name": name, "type": "prismatic", "parent": parent, "child": child, "origin": [0.0, 0.0, 0.0],
                "axis": axis, "home": home, "actuated": True}

    return {"name": "gantry_wrist", "type": "mechanism", "planar": False, "gravity": [0.0, 0.0, -9.81],
            "bodies": [body("carriage_x", 2.0), body("carriage_y", 1.5), body("quill", 1.0),
                       {"name": "tool", "mass": 0.4, "com": [0.03, 0.0, 0.0],
                        "inertia": [2e-4, 4e-4, 5e-4, 1e-5, 0.0, 0.0]}],
            "joints": [slide("x", "ground", "carriage_x", [1.0, 0.0, 0.0], 0.2),
                       slide("y", "carriage_x", "carriage_y", [0.0, 1.0, 0.0], -0.1),
                       slide("z", "carriage_y", "quill", [0.0, 0.0, 1.0], 0.3),
                       {"name": "wrist", "type": "spherical", "parent": "quill", "child": "tool",
                        "origin": [0.0, 0.0, -0.1], "home": [0.2, -0.3, 0.1], "actuated": True}],
            "task": {"body": "tool", "point": [0.05, 0.0, 0.0], "orientation": list(offset_rpy),
                     "coordinates": ["x", "y", "z", "alpha", "beta", "gamma"]}}


def test_a_six_coordinate_pose_task_is_the_spatial_layout():
    """Position and Euler angles of a task frame (x, y, z, alpha, beta, gamma): the ``spatial``
    layout with the Stewart platform's convention (and a task-space law takes it), the pose
    equal to the gantry's closed form (slides plus the wrist's rotation Rz Ry Rx applied to the
    tool point, the task frame R_wrist R_offset), the task Jacobian equal to central
    differences and to the tool's angular velocity through ``omega = E Xd``, IK returning q."""
    from controller.laws import TaskComputedTorque
    from dynamics.stewart import euler_rate_matrix, rotation_matrix

    off = np.array([0.1, -0.2, 0.3])
    mech = load_model(_gantry_with_wrist(off), file="gantry_wrist")
    assert mech.task_layout == "spatial" and mech.task_dof == 6 and mech.dof == 6
    assert mech.task_rotation() is rotation_matrix and mech.task_rate_matrix() is euler_rate_matrix
    assert TaskComputedTorque(mech, [100.0] * 6, [20.0] * 6).rotation is rotation_matrix
    R_off = rotation_matrix(off)
    rng = np.random.default_rng(4107)
    for _ in range(10):
        q = mech.home_q + rng.uniform(-0.3, 0.3, size=6)
        R = rotation_matrix(q[[5, 4, 3]])            # the wrist: Rz(q3) Ry(q4) Rx(q5)
        p = np.array([q[0], q[1], q[2] - 0.1]) + R @ [0.05, 0.0, 0.0]
        X = mech.forward_kinematics_task(q)
        np.testing.assert_allclose(X[:3], p, rtol=0, atol=1e-12)
        np.testing.assert_allclose(rotation_matrix(X[3:]), R @ R_off, rtol=0, atol=1e-12)
        np.testing.assert_allclose(X[3:], _zyx_angles(R @ R_off), rtol=0, atol=1e-12)
        J = mech.task_jacobian(q)
        h = 1e-6
        Jfd = np.column_stack([(mech.forward_kinematics_task(q + h * e) - mech.forward_kinematics_task(q - h * e))
                               / (2 * h) for e in np.eye(6)])
        np.testing.assert_allclose(J, Jfd, rtol=0, atol=1e-8)
        np.testing.assert_allclose(euler_rate_matrix(X[3:]) @ J[3:], mech.jacobian(q)[3:], rtol=0, atol=1e-12)
        np.testing.assert_allclose(mech.inverse_kinematics(X), q, rtol=0, atol=1e-10)
