"""The source papers' serial arms (seeds 000, 003, 004) against their closed forms.

Each closed form is transcribed here independently of the model code; printed
misprints are corrected as listed in shared/seeds/ERRATA.md.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dynamics import load_model

ROBOTS = Path(__file__).resolve().parents[1] / "hil_configs" / "robots"
G = 9.81


# ---------------------------------------------------------------------------
# seed 000: Malvezzi et al., 3-DOF arm, Table 2
# ---------------------------------------------------------------------------

P000 = dict(Jz1=3.0, m2=3.0, l2=1.0, Jx2=0.36, Jy2=0.07, Jz2=0.36,
            m3=3.0, l3=1.0, Jx3=0.36, Jy3=0.07, Jz3=0.36, m4=1.0)


def _M_eq6(q, p=P000):
    """Eq. 6 of seed 000 (printed correctly, per ERRATA)."""
    _, a2, a3 = q
    m2, m3, m4, l2, l3 = p["m2"], p["m3"], p["m4"], p["l2"], p["l3"]
    c2, s2, c23, s23, c3 = np.cos(a2), np.sin(a2), np.cos(a2 + a3), np.sin(a2 + a3), np.cos(a3)
    M11 = (p["Jz1"] + m2 * l2**2 / 4 * c2**2 + p["Jy2"] * s2**2 + p["Jz2"] * c2**2
           + m3 * (l2**2 * c2**2 + l3**2 / 4 * c23**2 + l2 * l3 * c23 * c2)
           + p["Jy3"] * s23**2 + p["Jz3"] * c23**2
           + m4 * (l2**2 * c2**2 + 2 * l2 * l3 * c23 * c2 + l3**2 * c23**2))
    M22 = (m2 * l2**2 / 4 + p["Jx2"] + m3 * (l2**2 + l3**2 / 4 + l2 * l3 * c3) + p["Jx3"]
           + m4 * (l2**2 + l3**2 + 2 * l2 * l3 * c3))
    M23 = m3 * (l3**2 / 4 + l2 * l3 / 2 * c3) + p["Jx3"] + m4 * (l3**2 + l2 * l3 * c3)
    M33 = m3 * l3**2 / 4 + p["Jx3"] + m4 * l3**2
    return np.array([[M11, 0, 0], [0, M22, M23], [0, M23, M33]])


def _V_eq7_corrected(q, qd, p=P000):
    """Eq. 7 of seed 000 with the five ERRATA corrections applied."""
    _, a2, a3 = q
    gd, a2d, a3d = qd
    m2, m3, m4, l2, l3 = p["m2"], p["m3"], p["m4"], p["l2"], p["l3"]
    Jy2, Jz2, Jy3, Jz3 = p["Jy2"], p["Jz2"], p["Jy3"], p["Jz3"]
    c2, s2, c23, s23, s3 = np.cos(a2), np.sin(a2), np.cos(a2 + a3), np.sin(a2 + a3), np.sin(a3)
    s223 = np.sin(2 * a2 + a3)
    V1 = (-m2 * l2**2 / 2 * s2 * c2 * gd * a2d + 2 * (Jy2 - Jz2) * s2 * c2 * gd * a2d
          + 2 * Jy3 * s23 * c23 * (a2d + a3d) * gd - 2 * Jz3 * s23 * c23 * (a2d + a3d) * gd
          + m3 * (-2 * l2**2 * s2 * c2 * a2d - l3**2 / 2 * s23 * c23 * (a2d + a3d)
                  - l2 * l3 * s23 * (a2d + a3d) * c2
                  - l2 * l3 * c23 * s2 * a2d) * gd                   # (printed: extra (a2d+a3d))
          + m4 * (-2 * l2**2 * s2 * c2 * a2d
                  - 2 * l3**2 * s23 * c23 * (a2d + a3d)              # (printed: l2^2)
                  - 2 * l2 * l3 * s23 * (a2d + a3d) * c2 - 2 * l2 * l3 * c23 * s2 * a2d) * gd)
    V2 = (-m3 * (l2 * l3 * s3 * (a2d + a3d / 2) * a3d) - m4 * (l2 * l3 * s3 * (2 * a2d + a3d) * a3d)
          - (-m2 * l2**2 / 4 * s2 * c2 * gd**2 + (Jy2 - Jz2) * s2 * c2 * gd**2
             - m3 * (l2**2 * s2 * c2 + l3**2 / 4 * s23 * c23 + l2 * l3 / 2 * s223) * gd**2  # (halved)
             + (Jy3 - Jz3) * s23 * c23 * gd**2
             + m4 * (-l2**2 * s2 * c2 - l2 * l3 * s223 - l3**2 * s23 * c23) * gd**2)      # (sign)
          + m2 * G * l2 / 2 * c2 + m3 * G * (l2 * c2 + l3 / 2 * c23) + m4 * G * (l2 * c2 + l3 * c23))
    V3 = (-m3 * l2 * l3 / 2 * s3 * a2d * a3d - m4 * l2 * l3 * s3 * a2d * a3d
          - (-m3 * (l3**2 / 4 * s23 * c23 * gd**2 + l2 * l3 / 2 * s23 * c2 * gd**2
                    + l2 * l3 / 2 * s3 * (a2d + a3d) * a2d)                               # (halved)
             + (Jy3 - Jz3) * s23 * c23 * gd**2)
          - m4 * ((-l2 * l3 * s23 * c2 - l3**2 * s23 * c23) * gd**2 - l2 * l3 * s3 * (a2d + a3d) * a2d)
          + m3 * G * l3 / 2 * c23 + m4 * G * l3 * c23)
    return np.array([V1, V2, V3])


@pytest.fixture(scope="module")
def arm000():
    return load_model(ROBOTS / "seed000_arm.toml")


def test_seed000_mass_matrix_eq6(arm000):
    rng = np.random.default_rng(0)
    Q = rng.uniform(-np.pi, np.pi, (200, 3))
    M = arm000.mass_matrix(Q)
    for q, Mq in zip(Q, M):
        np.testing.assert_allclose(Mq, _M_eq6(q), rtol=0, atol=1e-12)


def test_seed000_holding_torque():
    model = load_model(ROBOTS / "seed000_arm.toml")
    np.testing.assert_allclose(model.gravity(np.zeros(3)), [0.0, 8 * G, 2.5 * G], atol=1e-12)
    # the paper's forward simulation starts from these static torques: no motion
    qdd = model.forward_dynamics(np.zeros(3), np.zeros(3), np.array([0.0, 8 * G, 2.5 * G]))
    np.testing.assert_allclose(qdd, 0.0, atol=1e-12)


def test_seed000_bias_matches_corrected_eq7(arm000):
    rng = np.random.default_rng(1)
    Q = rng.uniform(-np.pi, np.pi, (200, 3))
    QD = rng.uniform(-3, 3, (200, 3))
    H = arm000.bias(Q, QD)
    for q, qd, h in zip(Q, QD, H):
        np.testing.assert_allclose(h, _V_eq7_corrected(q, qd), rtol=0, atol=1e-11)


def test_seed000_tool_position_eq19(arm000):
    rng = np.random.default_rng(2)
    for q in rng.uniform(-np.pi, np.pi, (50, 3)):
        g1, a2, a3 = q
        r = np.cos(a2) + np.cos(a2 + a3)            # e4 = f4 = 1, l2 = l3 = 1
        ref = [-np.sin(g1) * r, np.cos(g1) * r, np.sin(a2) + np.sin(a2 + a3)]
        np.testing.assert_allclose(arm000.forward_kinematics(q)[:3, 3], ref, atol=1e-12)


# ---------------------------------------------------------------------------
# seed 003: Kane 2R arm, reading of ERRATA
# ---------------------------------------------------------------------------

def test_seed003_mass_matrix_and_gravity():
    model = load_model(ROBOTS / "seed003_2r.toml")
    m, L = 5.0, 1.25
    rng = np.random.default_rng(3)
    Q = rng.uniform(-np.pi, np.pi, (200, 2))
    M = model.mass_matrix(Q)
    g = model.gravity(Q)
    for q, Mq, gq in zip(Q, M, g):
        s1, c1, s2, c2 = np.sin(q[0]), np.cos(q[0]), np.sin(q[1]), np.cos(q[1])
        M_ref = m * L**2 * np.array([[80 / 3 + 4 / 3 * s2**2, 4 * c2], [4 * c2, 4 / 3]])
        np.testing.assert_allclose(Mq, M_ref, rtol=0, atol=1e-11)
        # generalized active forces F1, F2 of the paper are -g(q)
        g_ref = m * G * L * np.array([8 * s1 + s2 * c1, s1 * c2])
        np.testing.assert_allclose(gq, g_ref, rtol=0, atol=1e-11)
    # rod A hangs down at q1 = 0; rod B lies along n2 (world y) at q2 = 0
    T = model.forward_kinematics(np.zeros(2))
    np.testing.assert_allclose(T[:3, 3], [0.0, 2 * L, -4 * L], atol=1e-12)


# ---------------------------------------------------------------------------
# seed 004: 5-link planar arm, eq. 3.51
# ---------------------------------------------------------------------------

Q004 = np.radians([70.0, -30.0, 15.0, -40.0, 2.5])
T5_PRINTED = np.array([[0.9537, -0.3007, 0, 1.9997], [0.3007, 0.9537, 0, 1.9999],
                       [0, 0, 1.0, 0], [0, 0, 0, 1.0]])
M_PRINTED = np.array([
    [389.2631, 245.9620, 131.7287, 41.4152, 7.2257],
    [245.9620, 168.7943, 93.3589, 32.7960, 5.7647],
    [131.7287, 93.3589, 55.4902, 20.9589, 3.8246],
    [41.4152, 32.7960, 20.9589, 10.9277, 2.1585],
    [7.2257, 5.7647, 3.8246, 2.1585, 0.6000]])


@pytest.mark.parametrize("fname", ["seed004_5link.toml", "seed004_5link_gravity_normal.toml"])
def test_seed004_printed_T5_and_M(fname):
    model = load_model(ROBOTS / fname)
    np.testing.assert_array_equal(np.round(model.forward_kinematics(Q004), 4), T5_PRINTED)
    np.testing.assert_array_equal(np.round(model.mass_matrix(Q004), 4), M_PRINTED)


def test_seed004_gravity_in_plane_or_normal():
    inplane = load_model(ROBOTS / "seed004_5link.toml")
    normal = load_model(ROBOTS / "seed004_5link_gravity_normal.toml")
    np.testing.assert_allclose(inplane.gravity_vector, [0, -G, 0])
    np.testing.assert_allclose(normal.gravity_vector, [0, 0, -G])
    rng = np.random.default_rng(4)
    Q = rng.uniform(-np.pi, np.pi, (50, 5))
    np.testing.assert_allclose(normal.gravity(Q), 0.0, atol=1e-12)
    # in-plane: g_i = g * sum_{k>=i} m_k * (horizontal distance of COM k from joint i)
    m = np.array([40.0, 20, 30, 20, 20])
    a = np.array([0.8, 0.7, 0.7, 0.52, 0.3])
    for q, gq in zip(Q, inplane.gravity(Q)):
        th = np.cumsum(q)
        joints_x = np.concatenate([[0.0], np.cumsum(a * np.cos(th))])
        com_x = joints_x[:-1] + a / 2 * np.cos(th)
        ref = [G * np.sum(m[i:] * (com_x[i:] - joints_x[i])) for i in range(5)]
        np.testing.assert_allclose(gq, ref, rtol=0, atol=1e-10)
