"""Lagrange-Euler (trace) formulation vs the fast Newton-Euler model, closed forms and seed 004.

``dynamics.lagrange_euler`` is built independently of ``dynamics.serial`` (own DH
reader, own transforms, 4x4 trace formulas), so agreement to ~1e-15 on random
states checks both.  Tolerance: 1e-9 relative to the largest magnitude of the
compared quantity over the batch (with a floor for quantities that vanish
identically, e.g. gravity normal to a planar arm's plane).
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pytest

from dynamics import load_model
from dynamics.lagrange_euler import LagrangeEulerChain, from_robot_file, pseudo_inertia
from test_serial_seeds import M_PRINTED, Q004, T5_PRINTED

ROBOTS = Path(__file__).resolve().parents[1] / "hil_configs" / "robots"
RTOL = 1e-9
N_STATES = 40

# a modified-DH (Craig) chain: prismatic joints (one with a fixed theta and an
# offset), non-diagonal inertias, point masses, drive armature, a rotated base,
# a tool, and gravity along no axis
MODIFIED_RP = """
name = "le_modified_rp"
type = "serial"
convention = "modified"
gravity = [1.2, -2.3, -9.1]
base = { xyz = [0.1, -0.2, 0.3], rpy_deg = [10.0, -20.0, 35.0] }
tool = { xyz = [0.0, 0.02, 0.07], rpy = [0.1, 0.2, 0.3] }

[[joints]]
name = "j1"
type = "revolute"
a = 0.0
alpha = 0.0
d = 0.12
offset_deg = 15.0
mass = 2.5
com = [0.03, -0.02, 0.08]
inertia = [0.021, 0.024, 0.013, 0.0012, -0.0021, 0.0009]
rotor_inertia = 2e-5
gear_ratio = 80.0
position_min = -3.0
position_max = 3.0
viscous = 0.3

[[joints]]
name = "j2"
type = "prismatic"
a = 0.15
alpha_deg = -90.0
d = 0.05
theta_deg = 30.0
offset = 0.04
mass = 1.7
com = [0.01, 0.04, -0.1]
inertia = [0.012, 0.011, 0.004, -0.0007, 0.0011, 0.0004]
point_masses = [{ mass = 0.3, position = [0.05, 0.0, 0.02] }]
rotor_inertia = 1e-5
gear_ratio = 30.0
coulomb = 2.0

[[joints]]
name = "j3"
type = "revolute"
a = 0.3
alpha = 1.1
d = -0.04
offset = 0.2
mass = 1.3
com = [0.12, 0.01, 0.02]
inertia = [0.004, 0.009, 0.008, 0.0005, -0.0004, 0.0006]

[[joints]]
name = "j4"
type = "prismatic"
a = 0.02
alpha_deg = 70.0
d = 0.0
mass = 0.6
com = [0.0, 0.01, 0.05]
inertia = [0.002, 0.0021, 0.0009, 0.0001, 0.0002, -0.0001]
point_masses = [{ mass = 0.2, position = [0.0, 0.03, 0.12] }, { mass = 0.1, position = [0.02, 0.0, 0.0] }]

[[joints]]
name = "j5"
type = "revolute"
a = 0.0
alpha_deg = -90.0
d = 0.08
mass = 0.4
com = [0.0, 0.0, 0.03]
inertia = [0.0011, 0.0009, 0.0005, 0.0001, 0.0, 0.00005]
"""

FILES = ["seed000_arm.toml", "seed004_5link.toml", "seed004_5link_gravity_normal.toml",
         "arm6_demo.toml", "seed003_2r.toml"]


@pytest.fixture(params=FILES + ["modified_rp", "standard_rp"])
def robot_file(request, tmp_path) -> Path:
    if request.param in FILES:
        return ROBOTS / request.param
    text = MODIFIED_RP
    if request.param == "standard_rp":      # the same rows read as standard DH
        text = text.replace('convention = "modified"', 'convention = "standard"')
    path = tmp_path / f"{request.param}.toml"
    path.write_text(textwrap.dedent(text))
    return path


def _states(n: int, seed: int):
    rng = np.random.default_rng(seed)
    Q = rng.uniform(-np.pi, np.pi, (N_STATES, n))
    QD = rng.uniform(-2.0, 2.0, (N_STATES, n))
    QDD = rng.uniform(-5.0, 5.0, (N_STATES, n))
    return Q, QD, QDD


def _rel(a, ref, floor: float = 0.0) -> float:
    """max |a - ref| over the whole batch / max(max |ref|, floor)."""
    a, ref = np.asarray(a, dtype=float), np.asarray(ref, dtype=float)
    return float(np.max(np.abs(a - ref)) / max(float(np.max(np.abs(ref))), floor, 1e-300))


def test_agrees_with_fast_model(robot_file):
    fast = load_model(robot_file)
    le = from_robot_file(robot_file)
    assert le.dof == fast.dof
    Q, QD, QDD = _states(le.dof, seed=len(robot_file.name))
    tau_fast = fast.inverse_dynamics(Q, QD, QDD)
    tau_scale = float(np.max(np.abs(tau_fast)))
    ke_fast = fast.kinetic_energy(Q, QD)
    pe_fast = fast.potential_energy(Q)
    errs = {
        "M": _rel(le.mass_matrix(Q), fast.mass_matrix(Q)),
        "bias": _rel(le.bias(Q, QD), fast.bias(Q, QD), floor=1e-3 * tau_scale),
        "gravity": _rel(le.gravity(Q), fast.gravity(Q), floor=1e-3 * tau_scale),
        "inverse_dynamics": _rel(le.inverse_dynamics(Q, QD, QDD), tau_fast),
        "kinetic_energy": _rel(le.kinetic_energy(Q, QD), ke_fast),
        # potential energies may differ by a constant: compare differences between states
        "potential_energy": _rel(np.diff(le.potential_energy(Q)), np.diff(pe_fast),
                                 floor=1e-3 * float(np.max(ke_fast))),
        "forward_kinematics": _rel(le.forward_kinematics(Q[0]), fast.forward_kinematics(Q[0])),
    }
    bad = {k: v for k, v in errs.items() if not v <= RTOL}
    assert not bad, f"{robot_file.name}: relative differences above {RTOL}: {bad} (all: {errs})"


def test_batch_equals_single_states():
    le = from_robot_file(ROBOTS / "arm6_demo.toml")
    Q, QD, QDD = _states(le.dof, seed=7)
    tau = le.inverse_dynamics(Q[:3], QD[:3], QDD[:3])
    assert tau.shape == (3, 6)
    for k in range(3):
        np.testing.assert_array_equal(tau[k], le.inverse_dynamics(Q[k], QD[k], QDD[k]))
    assert le.mass_matrix(Q[:3]).shape == (3, 6, 6)


def test_seed004_printed_T5_and_M():
    """Eq. 3.51 of seed 004 (and its T_5^0) at the paper's configuration, to 4 decimals."""
    for fname in ("seed004_5link.toml", "seed004_5link_gravity_normal.toml"):
        le = from_robot_file(ROBOTS / fname)
        np.testing.assert_array_equal(np.round(le.forward_kinematics(Q004), 4), T5_PRINTED)
        np.testing.assert_array_equal(np.round(le.mass_matrix(Q004), 4), M_PRINTED)


def test_potential_energy_gradient_is_gravity(robot_file):
    le = from_robot_file(robot_file)
    Q, _, _ = _states(le.dof, seed=11)
    eps = 1e-6
    scale = max(1.0, float(np.max(np.abs(le.mass_matrix(Q[0])))) * 9.81)
    for q in Q[:10]:
        grad = np.empty(le.dof)
        for i in range(le.dof):
            e = np.zeros(le.dof)
            e[i] = eps
            grad[i] = (le.potential_energy(q + e) - le.potential_energy(q - e)) / (2 * eps)
        g = le.gravity(q)
        np.testing.assert_allclose(g, grad, rtol=1e-6, atol=1e-7 * scale)


def test_velocity_terms_are_christoffel_of_M(robot_file):
    """h_ikm from the second derivatives U_jkm equals the Christoffel symbols of M
    (finite differences of the LE mass matrix), and K = 1/2 qd^T M qd."""
    le = from_robot_file(robot_file)
    Q, QD, _ = _states(le.dof, seed=13)
    n, eps = le.dof, 1e-6
    for q, qd in zip(Q[:4], QD[:4]):
        dM = np.empty((n, n, n))                 # dM[m] = dM/dq_m
        for m in range(n):
            e = np.zeros(n)
            e[m] = eps
            dM[m] = (le.mass_matrix(q + e) - le.mass_matrix(q - e)) / (2 * eps)
        # h_i = sum_km (dM_ik/dq_m - 1/2 dM_km/dq_i) qd_k qd_m
        h_ref = np.einsum("mik,k,m->i", dM, qd, qd) - 0.5 * np.einsum("ikm,k,m->i", dM, qd, qd)
        scale = float(np.max(np.abs(le.mass_matrix(q)))) * float(qd @ qd)
        np.testing.assert_allclose(le.velocity_terms(q, qd), h_ref, rtol=0, atol=1e-7 * scale)
        H = le.velocity_coefficients(q)
        np.testing.assert_allclose(H, H.transpose(0, 2, 1), rtol=0, atol=1e-12 * np.abs(H).max())
        M = le.mass_matrix(q)
        assert le.kinetic_energy(q, qd) == pytest.approx(0.5 * qd @ M @ qd, rel=1e-12)


def test_planar_rp_closed_form(tmp_path):
    """Hand-derived planar R-P arm (modified DH) against both formulations.

    Joint 1 turns about world z; joint 2 slides a point mass m2 along y1 (alpha = -90 deg),
    at distance r = q2 + d + offset from the axis.  Link 1: mass m1, COM at (c1, 0, 0),
    I_zz = Iz about its COM.  Gravity -g y (in the plane).
        M = [[Iz + m1 c1^2 + m2 r^2 + arm1, 0], [0, m2]]
        h = [2 m2 r q1' q2', -m2 r q1'^2]
        c = [m1 g c1 cos q1 - m2 g r sin q1, m2 g cos q1]
    """
    m1, c1, Iz, m2, g, d2, off2, arm1 = 3.0, 0.4, 0.05, 1.5, 9.81, 0.1, 0.2, 0.02
    path = tmp_path / "rp.toml"
    path.write_text(textwrap.dedent(f"""
        name = "rp"
        type = "serial"
        convention = "modified"
        gravity = [0.0, {-g}, 0.0]
        [[joints]]
        type = "revolute"
        a = 0.0
        alpha = 0.0
        d = 0.0
        mass = {m1}
        com = [{c1}, 0.0, 0.0]
        inertia = [0.01, {Iz}, {Iz}, 0.0, 0.0, 0.0]
        rotor_inertia = {arm1 / 4}
        gear_ratio = 2.0
        [[joints]]
        type = "prismatic"
        a = 0.0
        alpha_deg = -90.0
        d = {d2}
        offset = {off2}
        mass = {m2}
        inertia = [0.0, 0.0, 0.0, 0.0, 0.0, 0.0]
        """))
    le, fast = from_robot_file(path), load_model(path)
    rng = np.random.default_rng(17)
    for q, qd, qdd in rng.uniform(-2, 2, (20, 3, 2)):
        r = q[1] + d2 + off2
        M = np.array([[Iz + m1 * c1**2 + m2 * r**2 + arm1, 0.0], [0.0, m2]])
        h = np.array([2 * m2 * r * qd[0] * qd[1], -m2 * r * qd[0] ** 2])
        c = np.array([m1 * g * c1 * np.cos(q[0]) - m2 * g * r * np.sin(q[0]), m2 * g * np.cos(q[0])])
        for model in (le, fast):
            np.testing.assert_allclose(model.mass_matrix(q), M, rtol=0, atol=1e-12)
            np.testing.assert_allclose(model.gravity(q), c, rtol=0, atol=1e-12)
            np.testing.assert_allclose(model.bias(q, qd), h + c, rtol=0, atol=1e-12)
            np.testing.assert_allclose(model.inverse_dynamics(q, qd, qdd), M @ qdd + h + c,
                                       rtol=0, atol=1e-12)


def test_pseudo_inertia_of_uniform_rod():
    """Uniform rod of length L along x from the frame origin: J = int [r;1][r;1]^T dm."""
    m, L = 2.0, 0.6
    Ic = np.diag([0.0, m * L**2 / 12, m * L**2 / 12])
    J = pseudo_inertia(m, [L / 2, 0.0, 0.0], Ic)
    ref = np.zeros((4, 4))
    ref[0, 0] = m * L**2 / 3          # int x^2 dm
    ref[0, 3] = ref[3, 0] = m * L / 2
    ref[3, 3] = m
    np.testing.assert_allclose(J, ref, rtol=0, atol=1e-15)
    # a product of inertia: tensor entry Ixy = -int x y dm
    J2 = pseudo_inertia(1.0, [0, 0, 0], np.array([[2.0, -0.3, 0], [-0.3, 2.0, 0], [0, 0, 3.0]]))
    assert J2[0, 1] == pytest.approx(0.3) and J2[2, 2] == pytest.approx(0.5)


def test_chain_is_immutable():
    le = from_robot_file(ROBOTS / "seed003_2r.toml")
    with pytest.raises(ValueError):
        le.pseudo_inertias[0, 0, 0] = 1.0
    with pytest.raises(AttributeError):
        le.gravity_vector = np.zeros(3)
    assert isinstance(le, LagrangeEulerChain)
