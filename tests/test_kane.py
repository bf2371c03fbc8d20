"""Kane's method (dynamics.kane) vs the fast Newton-Euler model, seed 003's 2R arm, power balance.

``dynamics.kane.KaneChain`` reads only the parameters of a SerialModel and builds
its own kinematics, partial velocities and accelerations, so agreement to
rounding on random states cross-checks both.  Tolerance: 1e-9 relative, per
state, to the largest magnitude of the compared quantity at that state (floored
at 1e-6 of the batch maximum, for states where it nearly vanishes).

Seed 003 (Purushotham & Anjeneyulu, 2R arm by Kane with an auxiliary speed u3)
with the geometry and mass matrix of shared/seeds/ERRATA.md: the closed form's
torques are checked against the package model of hil_configs/robots/seed003_2r.toml,
its mass matrix against the ERRATA matrix, and its constraint torque Tc (about
a1, the axis of u3) against (a) a hand-written Newton-Euler evaluation on the two
rods and (b) the package's Newton-Euler and KaneChain on an augmented 3-joint
chain in which u3 is a real joint about a1, locked at q3 = qd3 = qdd3 = 0.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import dynamics._serial_kernels as serial_kernels
from dynamics import load_model
from dynamics.kane import (SEED003_L, SEED003_M, KaneChain, seed003_2r_inverse_dynamics,
                           seed003_2r_mass_matrix)
from dynamics.serial import SerialModel

ROBOTS = Path(__file__).resolve().parents[1] / "hil_configs" / "robots"
RTOL = 1e-9
N_STATES = 400

# a chain with prismatic joints (one with a fixed theta and an offset), modified
# DH, non-diagonal inertias, point masses, armature, a rotated base and gravity
# along no axis: exercises the prismatic partial velocities
PRISMATIC_RP = {
    "name": "kane_prismatic", "type": "serial", "convention": "modified",
    "gravity": [1.2, -2.3, -9.1],
    "base": {"xyz": [0.1, -0.2, 0.3], "rpy_deg": [10.0, -20.0, 35.0]},
    "joints": [
        {"name": "j1", "type": "revolute", "a": 0.0, "alpha": 0.0, "d": 0.1, "mass": 2.0,
         "com": [0.02, 0.01, 0.05], "inertia": [0.02, 0.03, 0.025, 0.001, -0.002, 0.0015],
         "rotor_inertia": 2e-5, "gear_ratio": 50.0},
        {"name": "j2", "type": "prismatic", "a": 0.2, "alpha_deg": 90.0, "d": 0.05,
         "theta_deg": 30.0, "offset": 0.1, "mass": 1.5, "com": [0.0, 0.03, -0.1],
         "inertia": [0.01, 0.012, 0.004, -0.0005, 0.0003, 0.0002],
         "rotor_inertia": 1e-5, "gear_ratio": 30.0},
        {"name": "j3", "type": "revolute", "a": 0.3, "alpha_deg": -60.0, "d": 0.02,
         "offset_deg": 15.0, "mass": 1.0, "com": [0.1, -0.02, 0.01],
         "inertia": [0.004, 0.006, 0.005, 0.0002, -0.0004, 0.0001],
         "point_masses": [{"mass": 0.3, "position": [0.2, 0.0, 0.0]}]},
        {"name": "j4", "type": "prismatic", "a": 0.05, "alpha_deg": 45.0, "d": 0.0,
         "mass": 0.6, "com": [0.01, 0.0, 0.04], "inertia": [0.001, 0.0012, 0.0008, 0.0, 0.0001, 0.0]},
    ],
}

ROBOT_FILES = ["seed000_arm.toml", "arm6_demo.toml", "seed004_5link.toml", "seed003_2r.toml"]


def _model(name):
    if name == "prismatic":
        return load_model(PRISMATIC_RP, file="kane_prismatic")
    return load_model(ROBOTS / name)


@pytest.fixture(scope="module", params=ROBOT_FILES + ["prismatic"])
def robot(request):
    model = _model(request.param)
    return request.param, model, KaneChain.from_model(model)


def _states(model, n_states, seed):
    rng = np.random.default_rng(seed)
    n = model.dof
    pris = np.array([t == "prismatic" for t in model.joint_types])
    q = np.where(pris, rng.uniform(-0.5, 0.5, (n_states, n)), rng.uniform(-np.pi, np.pi, (n_states, n)))
    qd = rng.normal(0.0, 2.0, (n_states, n))
    qdd = rng.normal(0.0, 5.0, (n_states, n))
    return q, qd, qdd


def _max_rel(a, b):
    """Largest per-state error relative to the state's max |b| (floored), over the batch."""
    a, b = np.asarray(a), np.asarray(b)
    N = b.shape[0]
    err = np.abs(a - b).reshape(N, -1).max(axis=1)
    scale = np.abs(b).reshape(N, -1).max(axis=1)
    scale = np.maximum(scale, 1e-6 * scale.max())
    return float((err / scale).max())


# ---------------------------------------------------------------------------
# general Kane vs the package model
# ---------------------------------------------------------------------------

def test_kane_kinematics_match_model(robot):
    name, model, kane = robot
    q, _, _ = _states(model, 50, 1)
    np.testing.assert_allclose(kane.joint_frames(q), model.joint_poses(q), rtol=0, atol=1e-12)


def test_kane_inverse_dynamics_matches_model(robot):
    name, model, kane = robot
    q, qd, qdd = _states(model, N_STATES, 2)
    rel = _max_rel(kane.inverse_dynamics(q, qd, qdd), model.inverse_dynamics(q, qd, qdd))
    assert rel < RTOL, f"{name}: Kane vs Newton-Euler inverse dynamics, max rel diff {rel:.3e}"
    # single-state call path too
    t1 = kane.inverse_dynamics(q[0], qd[0], qdd[0])
    assert t1.shape == (model.dof,)
    assert _max_rel(t1[None], model.inverse_dynamics(q[0], qd[0], qdd[0])[None]) < RTOL


def test_kane_mass_matrix_matches_model(robot):
    name, model, kane = robot
    q, _, _ = _states(model, N_STATES, 3)
    M = kane.mass_matrix(q)
    rel = _max_rel(M, model.mass_matrix(q))
    assert rel < RTOL, f"{name}: Kane vs CRBA mass matrix, max rel diff {rel:.3e}"
    np.testing.assert_allclose(M, np.swapaxes(M, -1, -2), rtol=0, atol=1e-12 * np.abs(M).max())


def test_kane_bias_and_gravity_match_model(robot):
    name, model, kane = robot
    q, qd, _ = _states(model, N_STATES, 4)
    rel = _max_rel(kane.bias(q, qd), model.bias(q, qd))
    assert rel < RTOL, f"{name}: Kane vs Newton-Euler bias, max rel diff {rel:.3e}"
    g_ref = model.gravity(q)
    g_kane = kane.gravity_torque(q)
    if np.abs(g_ref).max() > 0:
        assert _max_rel(g_kane, g_ref) < RTOL
    np.testing.assert_allclose(g_kane, kane.bias(q, np.zeros_like(q)), rtol=0,
                               atol=1e-12 * max(1.0, np.abs(g_ref).max()))


def test_kane_tau_is_M_qdd_plus_h(robot):
    """Kane's torques are linear in qdd with the Kane mass matrix as the coefficient."""
    name, model, kane = robot
    q, qd, qdd = _states(model, 100, 5)
    tau = kane.inverse_dynamics(q, qd, qdd)
    rebuilt = np.einsum("...rs,...s->...r", kane.mass_matrix(q), qdd) + kane.bias(q, qd)
    assert _max_rel(rebuilt, tau) < RTOL
    np.testing.assert_allclose(kane.forward_dynamics(q, qd, tau), qdd, rtol=0, atol=1e-8)


def test_kane_energy_matches_model(robot):
    name, model, kane = robot
    q, qd, _ = _states(model, 100, 6)
    ke = kane.kinetic_energy(q, qd)
    assert _max_rel(ke[:, None], model.kinetic_energy(q, qd)[:, None]) < RTOL
    pe_ref = model.potential_energy(q)
    np.testing.assert_allclose(kane.potential_energy(q), pe_ref, rtol=0,
                               atol=RTOL * max(1.0, np.abs(pe_ref).max()))


def test_kane_uses_no_model_dynamics(monkeypatch):
    """After reading the parameters Kane needs nothing from SerialModel's dynamics or kernels."""
    model = load_model(ROBOTS / "arm6_demo.toml")
    q, qd, qdd = _states(model, 20, 7)
    ref_tau, ref_M = model.inverse_dynamics(q, qd, qdd), model.mass_matrix(q)

    def boom(*args, **kwargs):
        raise AssertionError("Kane called the package model's dynamics")

    for meth in ("inverse_dynamics", "mass_matrix", "bias", "gravity", "jacobian", "coriolis_matrix",
                 "coriolis_torque", "forward_dynamics", "kinetic_energy", "potential_energy",
                 "joint_poses", "link_poses", "forward_kinematics"):
        monkeypatch.setattr(SerialModel, meth, boom)
    for nm in dir(serial_kernels):
        if nm != "pack" and callable(getattr(serial_kernels, nm)) and hasattr(getattr(serial_kernels, nm), "py_func"):
            monkeypatch.setattr(serial_kernels, nm, boom)
    kane = KaneChain.from_model(model)
    assert _max_rel(kane.inverse_dynamics(q, qd, qdd), ref_tau) < RTOL
    assert _max_rel(kane.mass_matrix(q), ref_M) < RTOL


# ---------------------------------------------------------------------------
# power balance: tau . qd = dE/dt along a trajectory
# ---------------------------------------------------------------------------

def _trajectory(n, t, seed):
    """Smooth joint trajectory q(t) = q0 + A sin(w t + phi) with exact qd, qdd; t shape (N,)."""
    rng = np.random.default_rng(seed)
    q0, A = rng.uniform(-1.0, 1.0, n), rng.uniform(0.2, 0.8, n)
    w, phi = rng.uniform(1.0, 4.0, n), rng.uniform(-np.pi, np.pi, n)
    arg = w * t[:, None] + phi
    return q0 + A * np.sin(arg), A * w * np.cos(arg), -A * w * w * np.sin(arg)


def test_kane_power_balance_integrated(robot):
    """int_0^T tau . qd dt = E(T) - E(0) (Gauss-Legendre quadrature, exact to rounding)."""
    name, model, kane = robot
    T = 0.6
    x, wts = np.polynomial.legendre.leggauss(40)
    t = 0.5 * T * (x + 1.0)
    q, qd, qdd = _trajectory(model.dof, t, 11)
    power = np.einsum("...r,...r->...", kane.inverse_dynamics(q, qd, qdd), qd)
    work = 0.5 * T * float(wts @ power)
    q_end, qd_end, _ = _trajectory(model.dof, np.array([0.0, T]), 11)
    E = kane.energy(q_end, qd_end)
    dE = float(E[1] - E[0])
    scale = 0.5 * T * float(wts @ np.abs(power))
    assert abs(work - dE) < RTOL * scale, f"{name}: work {work!r} vs energy change {dE!r}"


def test_kane_power_balance_pointwise(robot):
    """tau . qd = dE/dt at sample times (dE/dt by a 5-point central difference, O(h^4))."""
    name, model, kane = robot
    t = np.linspace(0.05, 0.55, 7)
    h = 1e-3
    q, qd, qdd = _trajectory(model.dof, t, 12)
    power = np.einsum("...r,...r->...", kane.inverse_dynamics(q, qd, qdd), qd)

    def E(tt):
        qq, qqd, _ = _trajectory(model.dof, tt, 12)
        return kane.energy(qq, qqd)

    dEdt = (E(t - 2 * h) - 8 * E(t - h) + 8 * E(t + h) - E(t + 2 * h)) / (12 * h)
    scale = np.abs(power).max()
    np.testing.assert_allclose(power, dEdt, rtol=0, atol=1e-7 * scale)


# ---------------------------------------------------------------------------
# seed 003: the 2R arm by Kane with the auxiliary speed u3
# ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def seed003():
    model = load_model(ROBOTS / "seed003_2r.toml")
    g = -float(model.gravity_vector[2])
    assert np.allclose(model.gravity_vector[:2], 0.0)
    return model, g


def _errata_M(q, m, L):
    s2, c2 = np.sin(q[..., 1]), np.cos(q[..., 1])
    return m * L ** 2 * np.stack([np.stack([80 / 3 + 4 / 3 * s2 ** 2, 4 * c2], -1),
                                  np.stack([4 * c2, np.full_like(c2, 4 / 3)], -1)], -2)


def test_seed003_parameters_match_robot_file(seed003):
    """The robot file encodes rod A (2m, 4L) and rod B (m, 2L) with m = 5 kg, L = 1.25 m."""
    model, _ = seed003
    mass, com, _ = model.link_inertias
    np.testing.assert_allclose(mass, [2 * SEED003_M, SEED003_M])
    assert np.linalg.norm(com[0]) == pytest.approx(2 * SEED003_L)
    # tip P of rod A is 4L from O; B's free end is 2L from P
    # (standard DH: joint 2's frame sits at O on the roll axis a3 = z1; P = O - 4L a3)
    rng = np.random.default_rng(20)
    for q in rng.uniform(-np.pi, np.pi, (5, 2)):
        T = model.link_poses(q)
        O, a3 = T[1, :3, 3], T[1, :3, 2]
        P = O - 4 * SEED003_L * a3
        tip = T[2, :3, 3]
        assert np.linalg.norm(O) < 1e-12
        assert np.linalg.norm(tip - P) == pytest.approx(2 * SEED003_L)
        assert abs((tip - P) @ a3) < 1e-12                       # B is perpendicular to A
        np.testing.assert_allclose(T[1, :3, 1], [0.0, 1.0, 0.0], atol=1e-12)   # a2 = n2
        np.testing.assert_allclose(a3, [np.sin(q[0]), 0.0, np.cos(q[0])], atol=1e-12)
        a1 = T[1, :3, 0]
        np.testing.assert_allclose((tip - P) / (2 * SEED003_L), -np.sin(q[1]) * a1 + np.cos(q[1]) * T[1, :3, 1],
                                   atol=1e-12)


def test_seed003_closed_form_torques_match_model(seed003):
    model, g = seed003
    q, qd, qdd = _states(model, N_STATES, 21)
    tau, _ = seed003_2r_inverse_dynamics(q, qd, qdd, SEED003_M, SEED003_L, g)
    rel = _max_rel(tau, model.inverse_dynamics(q, qd, qdd))
    assert rel < RTOL, f"seed 003 closed form vs Newton-Euler: max rel diff {rel:.3e}"
    # holding torques quoted in the robot file header: m g L [8 s1 + s2 c1, s1 c2]
    s1, c1, s2, c2 = np.sin(q[:, 0]), np.cos(q[:, 0]), np.sin(q[:, 1]), np.cos(q[:, 1])
    hold, _ = seed003_2r_inverse_dynamics(q, 0 * qd, 0 * qdd, SEED003_M, SEED003_L, g)
    np.testing.assert_allclose(hold, SEED003_M * g * SEED003_L * np.stack([8 * s1 + s2 * c1, s1 * c2], -1),
                               rtol=0, atol=1e-12 * SEED003_M * g * SEED003_L * 9)


def test_seed003_closed_form_mass_matrix_is_errata(seed003):
    model, g = seed003
    q, qd, _ = _states(model, N_STATES, 22)
    Me = _errata_M(q, SEED003_M, SEED003_L)
    # M read off the closed-form torques (linear in qdd)
    base, _ = seed003_2r_inverse_dynamics(q, qd, np.zeros_like(q), SEED003_M, SEED003_L, g)
    cols = [seed003_2r_inverse_dynamics(q, qd, np.broadcast_to(e, q.shape), SEED003_M, SEED003_L, g)[0] - base
            for e in np.eye(2)]
    M_tau = np.stack(cols, axis=-1)
    assert _max_rel(M_tau, Me) < RTOL
    assert _max_rel(seed003_2r_mass_matrix(q), Me) < RTOL
    assert _max_rel(model.mass_matrix(q), Me) < RTOL
    assert _max_rel(KaneChain.from_model(model).mass_matrix(q), Me) < RTOL


def _newton_euler_2r(q, qd, qdd, m, L, g):
    """Hand Newton-Euler on rods B then A, world vectors.  Returns (T1, T2, Tc, n_O)."""
    n1, n2, n3 = np.eye(3)
    s1, c1 = np.sin(q[:, :1]), np.cos(q[:, :1])
    s2, c2 = np.sin(q[:, 1:2]), np.cos(q[:, 1:2])
    u1, u2, du1, du2 = qd[:, :1], qd[:, 1:2], qdd[:, :1], qdd[:, 1:2]
    a2 = np.broadcast_to(n2, q.shape[:1] + (3,))
    a3 = s1 * n1 + c1 * n3
    a1 = np.cross(a2, a3)
    b = -s2 * a1 + c2 * a2
    gv = -g * n3
    mA, mB = 2 * m, m
    rA, rP = -2 * L * a3, -4 * L * a3
    rB = rP + L * b
    wA, alA = u1 * a2, du1 * a2
    aA = np.cross(alA, rA) + np.cross(wA, np.cross(wA, rA))
    aP = np.cross(alA, rP) + np.cross(wA, np.cross(wA, rP))
    wB = wA + u2 * a3
    alB = alA + du2 * a3 + np.cross(wA, u2 * a3)
    aB = aP + np.cross(alB, rB - rP) + np.cross(wB, np.cross(wB, rB - rP))
    eye = np.eye(3)
    IA = mA * (4 * L) ** 2 / 12 * (eye - np.einsum("ni,nj->nij", a3, a3))
    IB = mB * (2 * L) ** 2 / 12 * (eye - np.einsum("ni,nj->nij", b, b))

    def euler(I, w, al):
        return np.einsum("nij,nj->ni", I, al) + np.cross(w, np.einsum("nij,nj->ni", I, w))

    # rod B: force f_P and moment n_P (about P) that A exerts on B at P
    fP = mB * (aB - gv)
    nP = euler(IB, wB, alB) + np.cross(rB - rP, fP)
    # rod A: force f_O and moment n_O (about O) that the ground exerts on A at O
    fO = mA * (aA - gv) + fP
    nO = euler(IA, wA, alA) + np.cross(rA, mA * (aA - gv)) + nP + np.cross(rP, fP)
    dot = lambda x, y: np.einsum("ni,ni->n", x, y)  # noqa: E731
    return dot(nO, a2), dot(nP, a3), dot(nO, a1), nO


def test_seed003_constraint_torque_newton_euler(seed003):
    """Tc equals the moment about a1 the ground bearing at O transmits (Newton-Euler, rods B then A)."""
    model, g = seed003
    q, qd, qdd = _states(model, N_STATES, 23)
    tau, Tc = seed003_2r_inverse_dynamics(q, qd, qdd, SEED003_M, SEED003_L, g)
    T1, T2, Tc_ne, _ = _newton_euler_2r(q, qd, qdd, SEED003_M, SEED003_L, g)
    assert _max_rel(np.stack([T1, T2], -1), tau) < RTOL
    assert _max_rel(Tc_ne[:, None], Tc[:, None]) < RTOL
    # the statics of the robot file's geometry: at q = 0 rod B sticks out along n2,
    # its weight m g at lever L twists the arm about a1 = n1, the bearing holds +m g L
    _, Tc0 = seed003_2r_inverse_dynamics(np.zeros(2), np.zeros(2), np.zeros(2), SEED003_M, SEED003_L, g)
    assert float(Tc0) == pytest.approx(SEED003_M * g * SEED003_L, rel=1e-14)
    # Tc is not the a3 component the paper printed (ERRATA)
    _, _, _, nO = _newton_euler_2r(q, qd, qdd, SEED003_M, SEED003_L, g)
    a3 = np.stack([np.sin(q[:, 0]), np.zeros(len(q)), np.cos(q[:, 0])], -1)
    assert np.abs(np.einsum("ni,ni->n", nO, a3) - Tc).max() > 1.0


def _augmented_seed003(model):
    """seed003_2r with u3 made a real joint about a1 at O: joints [q1, q3 (aux), q2].

    The first body is massless; rod A hangs on the auxiliary joint, rod B on q2.
    At q3 = 0 the chain coincides with the robot file's.
    """
    X = model.placements
    mass, com, Ic = model.link_inertias
    Ry = np.eye(4)
    Ry[:3, :3] = [[0.0, 0.0, 1.0], [0.0, 1.0, 0.0], [-1.0, 0.0, 0.0]]    # Ry(+90 deg): z -> x
    X_aux = X[1] @ Ry                    # z_aux = x of the A frame = a1, origin O
    assert np.allclose(X[1][:3, 0], X_aux[:3, 2])
    inv_aux = np.linalg.inv(X_aux)
    R = inv_aux[:3, :3]
    comA = R @ com[0] + inv_aux[:3, 3]
    IA = R @ Ic[0] @ R.T
    return SerialModel(joint_types=["revolute"] * 3, placements=[X[0], X_aux, Ry.T],
                       mass=[0.0, mass[0], mass[1]], com=[np.zeros(3), comA, com[1]],
                       inertia=[np.zeros((3, 3)), IA, Ic[1]], gravity=model.gravity_vector,
                       name="seed003_2r_aux")


def test_seed003_constraint_torque_auxiliary_joint(seed003):
    """Tc = the torque of a real joint about a1 held at q3 = qd3 = qdd3 = 0 (package NE and general Kane)."""
    model, g = seed003
    aug = _augmented_seed003(model)
    q, qd, qdd = _states(model, N_STATES, 24)
    z = np.zeros((len(q), 1))
    Q = np.hstack([q[:, :1], z, q[:, 1:]])
    QD = np.hstack([qd[:, :1], z, qd[:, 1:]])
    QDD = np.hstack([qdd[:, :1], z, qdd[:, 1:]])
    np.testing.assert_allclose(aug.joint_poses(Q)[:, [0, 2]], model.joint_poses(q), rtol=0, atol=1e-12)
    tau, Tc = seed003_2r_inverse_dynamics(q, qd, qdd, SEED003_M, SEED003_L, g)
    expect = np.stack([tau[:, 0], Tc, tau[:, 1]], -1)
    assert _max_rel(aug.inverse_dynamics(Q, QD, QDD), expect) < RTOL
    assert _max_rel(KaneChain.from_model(aug).inverse_dynamics(Q, QD, QDD), expect) < RTOL
