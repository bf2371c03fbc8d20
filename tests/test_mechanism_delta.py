"""The delta robot written as a mechanism file (hil_configs/robots/delta_pick.toml: 12 joint
coordinates, 9 closure equations, spatial), checked against what was not derived with it:

* its inverse kinematics against the delta's closed form (each arm angle from the sphere of
  the forearm around the platform's ball joint, written here from the file's dimensions);
* the task and closure Jacobians against finite differences of forward kinematics and of the
  closure residuals;
* the gravity torques against finite differences of the potential energy along the closed
  chain (virtual work), the inverse dynamics against forward dynamics, and energy/power
  balance along an RK4 trajectory of the forward dynamics;
* the MuJoCo plant (its own algorithms on the MJCF written from the file) is compared in
  tests/test_mujoco_plant.py.

The first load of the file derives and compiles its code (cold: about 25 s of derivation and
the numba compilation), hence ``slow``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dynamics import load_model
from dynamics.config import read_toml

try:
    from tests.test_mechanism import assert_passivity, rk4_energy_balance, run_shipped_task_run
except ImportError:  # pragma: no cover - rootdir not on sys.path
    from test_mechanism import assert_passivity, rk4_energy_balance, run_shipped_task_run

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
FILE = ROOT / "hil_configs" / "robots" / "delta_pick.toml"


@pytest.fixture(scope="module")
def delta():
    return load_model(FILE)


def _closed_form_ik(X, theta_near):
    """The arm angles (3,) [rad] of platform position ``X`` (3,) [m] by the textbook delta
    relation: the elbow E_i(theta) = B_i + a (cos theta u_i - sin theta z) lies on the sphere of
    radius L (the forearm) around the ball joint P_i = X + r u_i (u_i the arm's outward
    azimuth direction), i.e. A cos theta + B sin theta = C; of its two roots the one nearer
    ``theta_near`` (the assembly mode)."""
    d = read_toml(FILE)
    joints = {j["name"]: j for j in d["joints"]}
    loops = {lp["name"]: lp for lp in d["loops"]}
    out = np.empty(3)
    for i in range(3):
        base = np.array(joints[f"theta{i + 1}"]["origin"])
        R = np.linalg.norm(base)                                  # base radius
        u = base / R                                              # outward direction
        a = np.linalg.norm(joints[f"elbow{i + 1}_a"]["origin"])   # upper arm
        L = np.linalg.norm(loops[f"ball{i + 1}"]["point_a"])      # forearm
        r = np.linalg.norm(loops[f"ball{i + 1}"]["point_b"])      # platform radius
        P = np.asarray(X) + r * u - R * u                         # ball joint from the arm's pivot
        du, dz = P @ u, P[2]
        side = P - du * u - dz * np.array([0.0, 0.0, 1.0])        # off the arm's plane
        # |a (cos t u - sin t z) - P|^2 = L^2
        A, B = -2 * a * du, 2 * a * dz
        C = L * L - a * a - du * du - dz * dz - side @ side
        base_angle = np.arctan2(B, A)
        w = np.arccos(C / np.hypot(A, B))
        roots = np.array([base_angle + w, base_angle - w])
        roots = (roots + np.pi) % (2 * np.pi) - np.pi
        out[i] = roots[np.argmin(np.abs(roots - theta_near[i]))]
    return out


def _poses(delta, rng, k):
    X0 = delta.home_pose
    return [X0 + rng.uniform([-0.06, -0.06, -0.04], [0.06, 0.06, 0.04]) for _ in range(k)]


def test_delta_inverse_kinematics_matches_the_closed_form(delta):
    rng = np.random.default_rng(411)
    for X in _poses(delta, rng, 20):
        q = delta.inverse_kinematics(X)
        np.testing.assert_allclose(q, _closed_form_ik(X, delta.home_q), rtol=0, atol=1e-10)
        np.testing.assert_allclose(delta.forward_kinematics_task(q), X, rtol=0, atol=1e-12)
        np.testing.assert_allclose(delta.forward_kinematics(q)[:3, 3], X, rtol=0, atol=1e-12)
    # the home values in the file are the closed form's (to the file's 6 digits)
    np.testing.assert_allclose(delta.home_q, _closed_form_ik(delta.home_pose, delta.home_q), atol=1e-12)


def test_delta_jacobians_against_finite_differences(delta):
    rng = np.random.default_rng(412)
    h = 1e-6
    for X in _poses(delta, rng, 5):
        q = delta.inverse_kinematics(X)
        Jfd = np.stack([(delta.forward_kinematics_task(q + h * e) - delta.forward_kinematics_task(q - h * e))
                        / (2 * h) for e in np.eye(3)], axis=1)
        np.testing.assert_allclose(delta.task_jacobian(q, X), Jfd, rtol=0, atol=1e-8)
        J6 = delta.jacobian(q)
        np.testing.assert_allclose(J6[:3], Jfd, rtol=0, atol=1e-8)
        np.testing.assert_allclose(J6[3:], 0, atol=1e-12)      # the platform stays level
        z = delta.configuration(q)
        Pfd = np.stack([(delta.constraints(z + h * e) - delta.constraints(z - h * e)) / (2 * h)
                        for e in np.eye(z.size)], axis=1)
        np.testing.assert_allclose(delta.constraint_jacobian(z), Pfd, rtol=0, atol=1e-8)


def test_delta_gravity_is_the_gradient_of_the_potential_and_id_inverts_fd(delta):
    rng = np.random.default_rng(413)
    h = 1e-6
    for X in _poses(delta, rng, 5):
        q = delta.inverse_kinematics(X)
        dV = np.array([(delta.potential_energy(q + h * e) - delta.potential_energy(q - h * e)) / (2 * h)
                       for e in np.eye(3)])
        # virtual work: the torque holding the chain still is the potential's gradient
        np.testing.assert_allclose(delta.inverse_dynamics(q, np.zeros(3), np.zeros(3)), dV, rtol=0, atol=1e-8)
        assert np.max(np.abs(dV)) > 0.05         # the test has something to compare
        qd, qdd = rng.uniform(-2, 2, 3), rng.uniform(-20, 20, 3)
        tau = delta.inverse_dynamics(q, qd, qdd)
        np.testing.assert_allclose(delta.forward_dynamics(q, qd, tau), qdd, rtol=0, atol=1e-9)
        M = delta.mass_matrix(q)
        np.testing.assert_allclose(M, M.T, atol=1e-14)
        assert np.min(np.linalg.eigvalsh(M)) > 0
        np.testing.assert_allclose(M @ qdd + delta.bias(q, qd), tau, rtol=0, atol=1e-12)


def test_delta_energy_balance_along_a_simulated_trajectory(delta):
    """RK4 on the arm angles (closures re-solved at every stage): the change of T + V equals the
    drives' work to the integration error; dM/dt - 2C is skew."""
    dE, work, q, qd = rk4_energy_balance(delta, lambda t, g0: g0 + np.array(
        [0.3 * np.sin(9 * t), -0.25 * np.sin(7 * t + 0.5), 0.2 * np.sin(5 * t + 1.0)]))
    assert np.max(np.abs(qd)) > 0.3          # it moved
    assert abs(work) > 1e-3
    assert abs(dE - work) < 1e-7 * abs(work) + 1e-12, (dE, work)
    assert_passivity(delta, q, qd)


def test_delta_pick_and_place_run_tracks_in_x_y_z():
    """The shipped run (hil_configs/runs/delta_pick.toml: emulated MIT drives, +10 % plant)
    completes; its task axes are the platform's x, y, z [m] (no orientation: the 3RRR's
    (x, y, phi) is not assumed for a 3-coordinate task)."""
    metrics, rms = run_shipped_task_run("delta_pick.toml", [("x", "linear"), ("y", "linear"), ("z", "linear")])
    assert np.all(rms < 2e-3), rms                          # measured 0.40, 0.33, 0.35 mm
    assert metrics["rms_position_error_m"] == pytest.approx(np.sqrt(np.sum(rms ** 2)), rel=1e-9)
    assert "rms_orientation_error_rad" not in metrics
