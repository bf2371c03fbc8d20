"""Maggi's equations (redundant coordinates, seed 000) vs the fast Newton-Euler model.

``dynamics.maggi`` is derived from the paper's geometry alone (eq. 19 centres of
mass, body angular velocities, the redundant-coordinate Lagrangian eq. 21 and
Maggi's projection eq. 18, with the ERRATA "000" corrections), independently of
``dynamics.serial``.  Agreement to 1e-9 relative (per state, infinity norm) on
random states checks both.  Two parameter sets: Table 2 (``seed000_arm.toml``)
and a variant with ``l2 != l3`` and unequal masses/inertias/g, which exposes
misprints that Table 2 hides (``l2 = l3``).

The last tests transcribe the printed eqs. 20 and 22 and show that each misprint
listed in ERRATA.md changes the torques, while the transcription with all
corrections applied reproduces the package model.
"""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

import numpy as np
import pytest

from dynamics import load_model
from dynamics.maggi import REDUNDANT_NAMES, TABLE2, Seed000Maggi, table2_from_robot_file

ROBOTS = Path(__file__).resolve().parents[1] / "hil_configs" / "robots"
SEED000 = ROBOTS / "seed000_arm.toml"
G = 9.81
RTOL = 1e-9
N_STATES = 200

VARIANT = dict(Jz1=2.2, m2=2.5, l2=0.8, Jx2=0.30, Jy2=0.05, Jz2=0.27,
               m3=1.7, l3=1.3, Jx3=0.41, Jy3=0.09, Jz3=0.45, m4=0.6, g=9.80665)


def _variant_toml(p: dict, com3_frac: float = 0.5) -> str:
    """A robot file laid out like seed000_arm.toml with the parameters ``p``.

    ``com3_frac``: body 3's centre of mass at ``com3_frac * l3`` from its tip (0.5: eq. 19).
    """
    return textwrap.dedent(f"""
        name = "seed000_variant"
        type = "serial"
        convention = "standard"
        gravity = [0.0, 0.0, {-p['g']!r}]

        [[joints]]
        name = "gamma1"
        a = 0.0
        alpha_deg = 90.0
        d = 0.0
        offset_deg = 90.0
        mass = 5.0
        com = [0.0, 0.0, 0.0]
        inertia = [1.5, {p['Jz1']!r}, 1.5, 0.0, 0.0, 0.0]

        [[joints]]
        name = "alpha2"
        a = {p['l2']!r}
        alpha = 0.0
        d = 0.0
        mass = {p['m2']!r}
        com = [{-p['l2'] / 2!r}, 0.0, 0.0]
        inertia = [{p['Jy2']!r}, {p['Jz2']!r}, {p['Jx2']!r}, 0.0, 0.0, 0.0]

        [[joints]]
        name = "alpha3"
        a = {p['l3']!r}
        alpha = 0.0
        d = 0.0
        mass = {p['m3']!r}
        com = [{-p['l3'] * com3_frac!r}, 0.0, 0.0]
        inertia = [{p['Jy3']!r}, {p['Jz3']!r}, {p['Jx3']!r}, 0.0, 0.0, 0.0]
        point_masses = [{{ mass = {p['m4']!r}, position = [0.0, 0.0, 0.0] }}]
        """)


@pytest.fixture(scope="module")
def variant_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("maggi") / "seed000_variant.toml"
    path.write_text(_variant_toml(VARIANT))
    return path


@pytest.fixture(scope="module", params=["table2", "variant"])
def pair(request, variant_file):
    """(Maggi model, package model) built from the same robot file."""
    path = SEED000 if request.param == "table2" else variant_file
    return Seed000Maggi.from_robot_file(path), load_model(path)


def _states(seed: int, n: int = N_STATES):
    rng = np.random.default_rng(seed)
    return (rng.uniform(-np.pi, np.pi, (n, 3)), rng.uniform(-4.0, 4.0, (n, 3)),
            rng.uniform(-8.0, 8.0, (n, 3)))


def _rel(a, b) -> float:
    """Infinity-norm difference relative to the reference's infinity norm."""
    a, b = np.asarray(a), np.asarray(b)
    return float(np.abs(a - b).max() / np.abs(b).max())


# ---------------------------------------------------------------------------
# parameters
# ---------------------------------------------------------------------------

def test_robot_file_reads_table2():
    assert table2_from_robot_file(SEED000) == TABLE2
    assert Seed000Maggi().params == TABLE2
    assert Seed000Maggi.from_robot_file(SEED000).params == TABLE2


def test_robot_file_reader_variant_and_rejects_other_layouts(variant_file, tmp_path):
    assert table2_from_robot_file(variant_file) == pytest.approx(VARIANT, rel=0, abs=0)
    bad = tmp_path / "bad.toml"
    # centre of mass of body 3 not at mid-link: the Maggi geometry (eq. 19) no longer applies
    bad.write_text(_variant_toml(VARIANT, com3_frac=0.4))
    with pytest.raises(ValueError, match="mid-link"):
        table2_from_robot_file(bad)


# ---------------------------------------------------------------------------
# Maggi vs the package model
# ---------------------------------------------------------------------------

def test_inverse_dynamics_matches_package(pair):
    maggi, fast = pair
    Q, QD, QDD = _states(10)
    tau_fast = fast.inverse_dynamics(Q, QD, QDD)
    worst = max(_rel(maggi.inverse_dynamics(q, qd, qdd), t)
                for q, qd, qdd, t in zip(Q, QD, QDD, tau_fast))
    assert worst < RTOL, worst


def test_mass_matrix_matches_package(pair):
    maggi, fast = pair
    Q, _, _ = _states(11)
    M_fast = fast.mass_matrix(Q)
    worst = 0.0
    for q, Mf in zip(Q, M_fast):
        Mm = maggi.mass_matrix(q)
        np.testing.assert_array_equal(Mm, Mm.T)
        worst = max(worst, _rel(Mm, Mf))
    assert worst < RTOL, worst


def test_bias_and_gravity_match_package(pair):
    maggi, fast = pair
    Q, QD, _ = _states(12)
    H, Gq = fast.bias(Q, QD), fast.gravity(Q)
    worst_h = max(_rel(maggi.bias(q, qd), h) for q, qd, h in zip(Q, QD, H))
    worst_g = max(np.abs(maggi.gravity(q) - g).max() / max(np.abs(g).max(), 1.0)
                  for q, g in zip(Q, Gq))
    assert worst_h < RTOL, worst_h
    assert worst_g < RTOL, worst_g


def test_kinetic_energy_matches_package(pair):
    maggi, fast = pair
    Q, QD, _ = _states(13, 50)
    T_fast = fast.kinetic_energy(Q, QD)
    for q, qd, t in zip(Q, QD, T_fast):
        assert maggi.kinetic_energy(q, qd) == pytest.approx(t, rel=RTOL, abs=0)
        assert maggi.kinetic_energy(q, qd) == pytest.approx(0.5 * qd @ maggi.mass_matrix(q) @ qd,
                                                            rel=1e-12, abs=0)


def test_holding_torque_at_zero():
    maggi = Seed000Maggi.from_robot_file(SEED000)
    z = np.zeros(3)
    expected = [0.0, 8 * G, 2.5 * G]
    np.testing.assert_allclose(maggi.gravity(z), expected, rtol=0, atol=1e-12)
    np.testing.assert_allclose(maggi.inverse_dynamics(z, z, z), expected, rtol=0, atol=1e-12)
    np.testing.assert_allclose(maggi.bias(z, z), expected, rtol=0, atol=1e-12)
    # gamma1 does not change the holding torque (cylindrical symmetry)
    np.testing.assert_allclose(maggi.gravity([1.234, 0.0, 0.0]), expected, rtol=0, atol=1e-12)


# ---------------------------------------------------------------------------
# the redundant coordinates and the constraint matrix
# ---------------------------------------------------------------------------

def test_constraint_matrix_is_the_velocity_map(pair):
    """C u equals the finite-difference rate of the body coordinates (eq. 19), A C = 0."""
    maggi, _ = pair
    Q, QD, QDD = _states(20, 40)
    eps = 1e-6
    B = maggi.actuation_matrix()
    for q, u, ud in zip(Q, QD, QDD):
        C = maggi.constraint_matrix(q)
        assert C.shape == (13, 3) and len(REDUNDANT_NAMES) == 13
        qr = maggi.redundant_coordinates(q)
        np.testing.assert_allclose(maggi.constraint_residual(qr), 0.0, atol=1e-14)
        fd = (maggi.redundant_coordinates(q + eps * u) - maggi.redundant_coordinates(q - eps * u)) / (2 * eps)
        np.testing.assert_allclose(C @ u, fd, rtol=0, atol=1e-8)
        np.testing.assert_allclose(maggi.redundant_velocities(q, u), fd, rtol=0, atol=1e-8)
        # A = dh/dq_r (eqs. 14-16) by finite differences, and C is its orthogonal complement
        A = maggi.constraint_jacobian(q)
        assert A.shape == (10, 13)
        A_fd = np.column_stack([(maggi.constraint_residual(qr + eps * e)
                                 - maggi.constraint_residual(qr - eps * e)) / (2 * eps)
                                for e in np.eye(13)])
        np.testing.assert_allclose(A, A_fd, rtol=0, atol=1e-8)
        np.testing.assert_allclose(A @ C, 0.0, atol=1e-14)
        assert np.linalg.matrix_rank(C) == 3
        np.testing.assert_array_equal(C.T @ B, np.eye(3))
        # second derivative along q(t) = q + t u + t^2/2 ud: q_r'' = C ud + C' u
        # (central second difference, Richardson-extrapolated: error O(h^4))
        def d2(h):
            qr_p = maggi.redundant_coordinates(q + h * u + h * h / 2 * ud)
            qr_m = maggi.redundant_coordinates(q - h * u + h * h / 2 * ud)
            return (qr_p - 2 * qr + qr_m) / h**2
        acc_fd = (4 * d2(5e-4) - d2(1e-3)) / 3
        np.testing.assert_allclose(maggi.redundant_accelerations(q, u, ud), acc_fd, rtol=1e-7, atol=1e-7)


def test_eq19_positions():
    """Spot values of eq. 19: q = 0 puts the arm along +y; gamma1 = 90 deg along -x."""
    maggi = Seed000Maggi()
    np.testing.assert_allclose(maggi.com_positions([0, 0, 0]),
                               [[0, 0.5, 0], [0, 1.5, 0], [0, 2.0, 0]], atol=1e-15)
    np.testing.assert_allclose(maggi.com_positions([np.pi / 2, np.pi / 2, -np.pi / 2]),
                               [[0, 0, 0.5], [-0.5, 0, 1.0], [-1.0, 0, 1.0]], atol=1e-15)


# ---------------------------------------------------------------------------
# the printed (uncorrected) eqs. 20 and 22 do not reproduce the dynamics
# ---------------------------------------------------------------------------

MISPRINTS = ("gravity_sign", "Jy_plus_Jz", "dropped_Jz", "C_x_signs", "C_l2")


def _C_eq20(p, q, printed=()):
    """Eq. 20 as printed (13 x 3 stack of its per-body blocks), misprints in ``printed`` kept."""
    g1, a2, a3 = q
    chi = a2 + a3
    sg, cg = math.sin(g1), math.cos(g1)
    sx = -1.0 if "C_x_signs" in printed else 1.0
    lz = p["l2"] if "C_l2" in printed else p["l3"]
    rows = [[1, 0, 0], [0, 1, 0], [0, 0, 1], [0, 1, 1]]
    for e, f in ((0.5, 0.0), (1.0, 0.5), (1.0, 1.0)):
        rc = e * p["l2"] * math.cos(a2) + f * p["l3"] * math.cos(chi)
        rs = e * p["l2"] * math.sin(a2) + f * p["l3"] * math.sin(chi)
        rows += [[-cg * rc, sx * sg * rs, sx * f * p["l3"] * sg * math.sin(chi)],
                 [-sg * rc, -cg * rs, -f * p["l3"] * cg * math.sin(chi)],
                 [0.0, e * p["l2"] * math.cos(a2) + f * lz * math.cos(chi), f * p["l3"] * math.cos(chi)]]
    return np.array(rows, dtype=float)


def _phi_eq22(p, q, qd, qr_dd, printed=()):
    """Eq. 22 as printed, without the T terms, misprints in ``printed`` kept.

    ``qr_dd`` (13,) are the accelerations of the redundant coordinates.
    """
    _, a2, a3 = q
    gd, a2d, a3d = qd
    chi, chid = a2 + a3, a2d + a3d
    sgn = -1.0 if "Jy_plus_Jz" in printed else 1.0
    d2, d3 = p["Jy2"] - sgn * p["Jz2"], p["Jy3"] - sgn * p["Jz3"]     # printed: Jy + Jz
    const = p["Jz1"] + (0.0 if "dropped_Jz" in printed else p["Jz2"] + p["Jz3"])
    gz = -p["g"] if "gravity_sign" in printed else p["g"]              # printed: z'' - g
    phi = np.zeros(13)
    phi[0] = ((d2 * math.sin(a2)**2 + d3 * math.sin(chi)**2 + const) * qr_dd[0]
              + d2 * math.sin(2 * a2) * gd * a2d + d3 * math.sin(2 * chi) * gd * chid)
    phi[1] = p["Jx2"] * qr_dd[1] - d2 * math.sin(a2) * math.cos(a2) * gd**2
    phi[3] = p["Jx3"] * qr_dd[3] - d3 * gd**2 * math.sin(chi) * math.cos(chi)
    for k, m in enumerate((p["m2"], p["m3"], p["m4"])):
        r = 4 + 3 * k
        phi[r], phi[r + 1], phi[r + 2] = m * qr_dd[r], m * qr_dd[r + 1], m * (qr_dd[r + 2] + gz)
    return phi


def _tau_printed(maggi, q, qd, qdd, printed):
    p = maggi.params
    qr_dd = maggi.redundant_accelerations(q, qd, qdd)   # true kinematics (checked above by FD)
    return _C_eq20(p, q, printed).T @ _phi_eq22(p, q, qd, qr_dd, printed)


def test_corrected_transcription_matches_package_and_maggi(pair):
    """With every ERRATA fix applied, the transcribed eqs. 20/22 give the package's torques."""
    maggi, fast = pair
    Q, QD, QDD = _states(30, 50)
    for q, qd, qdd in zip(Q, QD, QDD):
        np.testing.assert_allclose(_C_eq20(maggi.params, q), maggi.constraint_matrix(q),
                                   rtol=0, atol=1e-15)
        t = _tau_printed(maggi, q, qd, qdd, ())
        assert _rel(t, fast.inverse_dynamics(q, qd, qdd)) < RTOL


# smallest torque change [N m] each misprint must cause somewhere on the random states
THRESHOLD = 0.5


@pytest.mark.parametrize("misprint", MISPRINTS)
def test_each_printed_misprint_breaks_the_torques(misprint, variant_file):
    maggi = Seed000Maggi.from_robot_file(variant_file)    # l2 != l3: "C_l2" is visible
    fast = load_model(variant_file)
    Q, QD, QDD = _states(31, 50)
    diff = max(np.abs(_tau_printed(maggi, q, qd, qdd, (misprint,))
                      - fast.inverse_dynamics(q, qd, qdd)).max()
               for q, qd, qdd in zip(Q, QD, QDD))
    assert diff > THRESHOLD, (misprint, diff)


def test_printed_gravity_sign_reverses_the_holding_torque():
    maggi = Seed000Maggi()
    z = np.zeros(3)
    np.testing.assert_allclose(_tau_printed(maggi, z, z, z, ("gravity_sign",)),
                               [0.0, -8 * G, -2.5 * G], atol=1e-12)


def test_all_printed_misprints_together_fail_on_table2():
    maggi = Seed000Maggi.from_robot_file(SEED000)
    fast = load_model(SEED000)
    Q, QD, QDD = _states(32, 50)
    rel = [_rel(_tau_printed(maggi, q, qd, qdd, MISPRINTS), fast.inverse_dynamics(q, qd, qdd))
           for q, qd, qdd in zip(Q, QD, QDD)]
    assert min(rel) > 0.05, min(rel)
    # with l2 = l3 (Table 2) the l2/l3 misprint of eq. 20 is invisible; the others are not
    for q, qd, qdd in zip(Q[:10], QD[:10], QDD[:10]):
        np.testing.assert_allclose(_tau_printed(maggi, q, qd, qdd, ("C_l2",)),
                                   fast.inverse_dynamics(q, qd, qdd), rtol=RTOL, atol=1e-9)


def test_printed_eq20_is_not_the_velocity_map():
    """The printed C (x-row signs) contradicts eq. 19 at gamma1 != 0."""
    maggi = Seed000Maggi(**{**TABLE2, "l3": 1.3})
    rng = np.random.default_rng(33)
    eps = 1e-6
    for misprint in ("C_x_signs", "C_l2"):
        worst = 0.0
        for q, u in zip(rng.uniform(-np.pi, np.pi, (20, 3)), rng.uniform(-2, 2, (20, 3))):
            fd = (maggi.redundant_coordinates(q + eps * u)
                  - maggi.redundant_coordinates(q - eps * u)) / (2 * eps)
            worst = max(worst, np.abs(_C_eq20(maggi.params, q, (misprint,)) @ u - fd).max())
        assert worst > 0.1, (misprint, worst)


def test_forward_simulation_from_the_static_torques_maggi_equals_newton_euler():
    """Seed 000's forward simulation: from rest at the reference configuration, the static
    torques plus a cycloidal variation.  Maggi's equations (own RK4) and the Newton-Euler model
    behind the simulated plant (same fixed step, same zero-order hold) give the same motion."""
    from drivers.sim.plant import SimulatedPlant
    from trajectories.presets import seed000_forward_torques

    model = load_model(SEED000)
    maggi = Seed000Maggi.from_robot_file(SEED000)
    tau_in = seed000_forward_torques(model, variation_nm=(0.5, -1.0, 0.5), rise_s=1.0)
    np.testing.assert_allclose(tau_in.sample(0.0).pos, [0.0, 8 * 9.81, 2.5 * 9.81], rtol=1e-12)
    plant = SimulatedPlant(model, q0=np.zeros(3), viscous=0.0, coulomb=0.0, substeps=2)
    q, qd = np.zeros(3), np.zeros(3)
    h = 0.5e-3
    worst = 0.0
    for k in range(2000):                       # 2 s at 1 kHz, torque held over each period
        tau = tau_in.sample(k * 1e-3).pos
        plant.set_torque(tau)
        plant.advance_to((k + 1) * 1e-3)
        for _ in range(2):                      # the plant's RK4 with 2 sub-steps, by Maggi
            f = maggi.forward_dynamics
            k1v = f(q, qd, tau)
            k2v = f(q + 0.5 * h * qd, qd + 0.5 * h * k1v, tau)
            k3v = f(q + 0.5 * h * (qd + 0.5 * h * k1v), qd + 0.5 * h * k2v, tau)
            k4v = f(q + h * (qd + 0.5 * h * k2v), qd + h * k3v, tau)
            q, qd = (q + h / 6 * (qd + 2 * (qd + 0.5 * h * k1v) + 2 * (qd + 0.5 * h * k2v) + (qd + h * k3v)),
                     qd + h / 6 * (k1v + 2 * k2v + 2 * k3v + k4v))
        worst = max(worst, float(np.max(np.abs(q - plant.state.q))))
    assert worst < 1e-9, worst
    assert np.max(np.abs(q)) > 0.05                # the arm really moved away from equilibrium
    # with no variation the arm stays at the reference configuration (static equilibrium)
    still = SimulatedPlant(model, q0=np.zeros(3), viscous=0.0, coulomb=0.0)
    still.set_torque(seed000_forward_torques(model, variation_nm=(0.0, 0.0, 0.0)).sample(0.0).pos)
    still.advance_to(1.0)
    assert np.max(np.abs(still.state.q)) < 1e-12
