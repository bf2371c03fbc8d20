"""Task-space paths (trajectories.paths): exact chain-rule derivatives, geometry, orientation."""

import math

import numpy as np
import pytest
from scipy.spatial.transform import Rotation

from dynamics.errors import TrajectoryError
from trajectories import paths as P


def fd_errors(traj, t, h=1e-5):
    """Max abs difference between analytic derivatives and central differences of the next lower one."""
    s, sp, sm = traj.sample(t), traj.sample(t + h), traj.sample(t - h)
    return (np.max(np.abs((sp.pos - sm.pos) / (2 * h) - s.vel)),
            np.max(np.abs((sp.vel - sm.vel) / (2 * h) - s.acc)),
            np.max(np.abs((sp.acc - sm.acc) / (2 * h) - s.jerk)))


def interior_times(traj, n=150, avoid=(), gap=1e-3, seed=0):
    """Random times inside (0, T), away from the given breakpoints."""
    rng = np.random.default_rng(seed)
    t = np.sort(rng.uniform(gap, traj.duration_s - gap, 4 * n))
    for b in avoid:
        t = t[np.abs(t - b) > gap]
    return t[:n]


def _check_fd(tr, avoid=(), gap=1e-4, tol=(1e-7, 1e-6, 1e-4), h=1e-6):
    ev, ea, ej = fd_errors(tr, interior_times(tr, avoid=avoid, gap=gap), h=h)
    assert ev < tol[0], ev
    assert ea < tol[1], ea
    assert ej < tol[2], ej


def test_line_endpoints_and_derivatives():
    tr = P.line([0.0, 1.0, 2.0], [1.0, -1.0, 2.5], 2.0, profile="cycloidal")
    np.testing.assert_allclose(tr.start, [0, 1, 2])
    np.testing.assert_allclose(tr.end, [1, -1, 2.5])
    _check_fd(tr)


@pytest.mark.parametrize("center,normal", [([0.1, 0.2], None), ([0.1, 0.2, 0.3], [1.0, 1.0, 1.0])])
def test_circle_constant_speed_radius_and_derivatives(center, normal):
    r, T, ramp = 0.3, 4.0, 0.5
    tr = P.circle(center, r, T, normal=normal, ramp_s=ramp, turns=1.5)
    t = np.linspace(0, T, 801)
    s = tr.sample(t)
    np.testing.assert_allclose(np.linalg.norm(s.pos - np.asarray(center), axis=1), r, rtol=1e-12)
    cruise = (t > ramp + 1e-9) & (t < T - ramp - 1e-9)
    speed = np.linalg.norm(s.vel, axis=1)
    np.testing.assert_allclose(speed[cruise], 1.5 * 2 * math.pi * r / (T - ramp), rtol=1e-12)
    # centripetal acceleration during the cruise
    np.testing.assert_allclose(np.linalg.norm(s.acc[cruise], axis=1), speed[cruise] ** 2 / r, rtol=1e-9)
    np.testing.assert_allclose(s.vel[[0, -1]], 0, atol=1e-12)
    if normal is not None:
        n = np.asarray(normal) / np.linalg.norm(normal)
        np.testing.assert_allclose((s.pos - center) @ n, 0, atol=1e-13)
    _check_fd(tr, avoid=[ramp, T - ramp])


def test_polygon_stop_corners_rest_at_vertices():
    verts = np.array([[0.0, 0.0], [1.0, 0.0], [1.0, 0.5]])
    tr = P.polygon(verts, 6.0, corners="stop", profile="quintic")
    bps = tr.breakpoints_s
    np.testing.assert_allclose(bps, 6.0 * np.cumsum([0, 1, 0.5, math.hypot(1, 0.5)]) / (1.5 + math.hypot(1, 0.5)))
    s = tr.sample(bps)
    np.testing.assert_allclose(s.pos, np.vstack([verts, verts[:1]]), atol=1e-12)
    np.testing.assert_allclose(s.vel, 0, atol=1e-12)
    np.testing.assert_allclose(s.acc, 0, atol=1e-9)
    _check_fd(tr, avoid=bps)


def test_square_blended_corners_tangent_and_constant_speed():
    side, T, r, ramp = 0.4, 20.0, 0.05, 1.0
    tr = P.square([2.0, 2.0], side, T, first_direction=(-1.0, 0.0), corners="blend", blend_radius=r, ramp_s=ramp)
    np.testing.assert_allclose(tr.start, [2, 2], atol=1e-14)
    np.testing.assert_allclose(tr.end, [2, 2], atol=1e-12)
    t = np.linspace(0, T, 4001)
    s = tr.sample(t)
    cruise = (t > ramp) & (t < T - ramp)
    L = 4 * side - 3 * (2 * r - r * math.pi / 2)     # three blended corners
    assert tr.curve.length == pytest.approx(L)
    np.testing.assert_allclose(np.linalg.norm(s.vel[cruise], axis=1), L / (T - ramp), rtol=1e-10)
    # the path stays inside the square [1.6, 2] x [1.6, 2] and passes within r(sqrt2-1) of the corners
    assert np.all(s.pos >= 1.6 - 1e-12) and np.all(s.pos <= 2.0 + 1e-12)
    d_corner = np.min(np.linalg.norm(s.pos - [1.6, 1.6], axis=1))
    assert d_corner == pytest.approx(r * (math.sqrt(2) - 1), abs=2e-4)
    # velocity continuous everywhere (fillets are tangent)
    assert np.max(np.abs(np.diff(s.vel, axis=0))) < 10 * L / (T - ramp) * (t[1] - t[0]) / r
    u_b = tr.curve.breakpoints_u
    # fillet junction times (constant-speed part): invert s(t) numerically on the grid
    sl = tr.law.sample(t).pos[:, 0]
    avoid = np.interp(u_b, sl, t)
    _check_fd(tr, avoid=list(avoid) + [ramp, T - ramp], gap=2e-3)


def test_square_constant_speed_stop_corners_paper_case():
    # seed 004: square from (2, 2), constant speed, one minute
    tr = P.square([2.0, 2.0], 0.4, 60.0, first_direction=(-1.0, 0.0), corners="stop", profile="linear")
    t = np.linspace(0.1, 59.9, 500)
    speed = np.linalg.norm(tr.sample(t).vel, axis=1)
    np.testing.assert_allclose(speed, 1.6 / 60.0, rtol=1e-12)


def test_planar_circle_pose_phi_rotates_sinusoidally():
    tr = P.planar_circle_pose([0.0, 0.1], 0.05, 6.0, phi0=0.1, phi_amplitude=0.2, phi_cycles=2, ramp_s=1.0)
    assert tr.dim == 3
    s = tr.sample(np.linspace(0, 6, 601))
    np.testing.assert_allclose(np.linalg.norm(s.pos[:, :2] - [0, 0.1], axis=1), 0.05, rtol=1e-12)
    assert np.max(s.pos[:, 2]) == pytest.approx(0.3, abs=1e-4)
    assert np.min(s.pos[:, 2]) == pytest.approx(-0.1, abs=1e-4)
    np.testing.assert_allclose(s.vel[[0, -1]], 0, atol=1e-12)
    _check_fd(tr, avoid=[1.0, 5.0])


def _omega_fd(e_fn, t, h=1e-6):
    Rp = Rotation.from_matrix(P.euler_zyx_to_matrix(e_fn(t + h)))
    Rm = Rotation.from_matrix(P.euler_zyx_to_matrix(e_fn(t - h)))
    return (Rp * Rm.inv()).as_rotvec() / (2 * h)       # world-frame angular velocity


def test_euler_conventions_match_rz_ry_rx():
    a, b, g = 0.3, -0.4, 1.1
    Rx = Rotation.from_rotvec([a, 0, 0]).as_matrix()
    Ry = Rotation.from_rotvec([0, b, 0]).as_matrix()
    Rz = Rotation.from_rotvec([0, 0, g]).as_matrix()
    np.testing.assert_allclose(P.euler_zyx_to_matrix([a, b, g]), Rz @ Ry @ Rx, atol=1e-15)
    np.testing.assert_allclose(P.matrix_to_euler_zyx(Rz @ Ry @ Rx), [a, b, g], atol=1e-14)


def test_pose_move_6d_slerp_rates_consistent_with_angular_velocity():
    p0 = np.array([0.0, 0.0, 0.9, 0.1, -0.2, 0.3])
    p1 = np.array([0.1, -0.05, 1.0, -0.3, 0.25, 2.9])
    tr = P.pose_move(p0, p1, 3.0, profile="quintic")
    np.testing.assert_allclose(tr.start, p0, atol=1e-12)
    np.testing.assert_allclose(tr.end, p1, atol=1e-12)
    _check_fd(tr)
    t = np.linspace(0.2, 2.8, 40)
    s = tr.sample(t)
    omega = P.euler_rates_to_omega(s.pos[:, 3:], s.vel[:, 3:])
    omega_fd = _omega_fd(lambda tt: tr.sample(tt).pos[:, 3:], t)
    np.testing.assert_allclose(omega, omega_fd, atol=1e-8)
    # geodesic: the angular velocity keeps one direction
    axis = omega / np.linalg.norm(omega, axis=1, keepdims=True)
    np.testing.assert_allclose(axis, np.broadcast_to(axis[0], axis.shape), atol=1e-12)
    # the rates are not the angular velocity (ERRATA 002)
    assert np.max(np.abs(omega - s.vel[:, 3:])) > 1e-2


def test_pose_move_planar_and_bad_inputs():
    tr = P.pose_move([0, 0, 0], [0.1, 0.0, 0.5], 1.0)
    assert tr.names == ("x", "y", "phi")
    with pytest.raises(TrajectoryError):
        P.pose_move([0, 0, 0, 0], [0, 0, 0, 1], 1.0)
    with pytest.raises(TrajectoryError):
        P.circle([0, 0], -0.1, 1.0)
    with pytest.raises(TrajectoryError):
        P.circle([0, 0], 0.1, 1.0, turns=0)
    with pytest.raises(TrajectoryError):
        P.square([0, 0], 0.1, 1.0, corners="blend", blend_radius=0.2)
    with pytest.raises(TrajectoryError):
        P.polygon([[0, 0], [0, 0], [1, 1]], 1.0)
    with pytest.raises(TrajectoryError):
        P.polygon([[0, 0], [1, 0]], 1.0, corners="round")
    with pytest.raises(TrajectoryError):
        P.line([0, 0], [1, 1], -2.0)
    with pytest.raises(TrajectoryError, match="singular"):
        P.pose_move([0, 0, 1, 0, 0, 0], [0, 0, 1, 0, math.pi / 2, 0], 1.0).sample(1.0)
