"""Stewart platform kinematics: IK (seed 002 eq. 2), velocity/acceleration maps, Jacobians, FK."""

from pathlib import Path

import numpy as np
import pytest

from dynamics import load_model
from dynamics.errors import ConvergenceError, ModelError, SingularityError, UnreachableError
from dynamics.stewart import euler_rate_matrix, rotation_matrix

ROBOT = Path(__file__).resolve().parents[1] / "hil_configs" / "robots" / "stewart.toml"
SPREAD = np.array([0.08, 0.08, 0.08, 0.15, 0.15, 0.15])


@pytest.fixture(scope="module")
def model():
    return load_model(ROBOT)


def random_pose(model, rng, scale=1.0):
    return model.home_pose + scale * SPREAD * rng.uniform(-1, 1, 6)


def trajectory(X0, t):
    """A smooth pose trajectory and its first two derivatives (analytic)."""
    A = np.array([0.05, -0.04, 0.03, 0.12, -0.1, 0.2])
    w = np.array([1.3, 0.7, 1.9, 1.1, 2.3, 0.9])
    ph = np.array([0.1, 0.5, -0.3, 0.9, 0.2, -0.7])
    X = X0 + A * np.sin(w * t + ph)
    Xd = A * w * np.cos(w * t + ph)
    Xdd = -A * w ** 2 * np.sin(w * t + ph)
    return X, Xd, Xdd


def test_ik_matches_paper_eq2(model):
    rng = np.random.default_rng(1)
    b, p = model.base_joints, model.platform_joints
    for _ in range(5):
        X = random_pose(model, rng)
        x, y, z, a, be, g = X
        ca, sa, cb, sb, cg, sg = np.cos(a), np.sin(a), np.cos(be), np.sin(be), np.cos(g), np.sin(g)
        r = [[cg * cb, cg * sb * sa - sg * ca, cg * sb * ca + sg * sa],
             [sg * cb, sg * sb * sa + cg * ca, sg * sb * ca - cg * sa],
             [-sb, cb * sa, cb * ca]]
        L = [np.sqrt((x + r[0][0] * p[i, 0] + r[0][1] * p[i, 1] + r[0][2] * p[i, 2] - b[i, 0]) ** 2
                     + (y + r[1][0] * p[i, 0] + r[1][1] * p[i, 1] + r[1][2] * p[i, 2] - b[i, 1]) ** 2
                     + (z + r[2][0] * p[i, 0] + r[2][1] * p[i, 1] + r[2][2] * p[i, 2] - b[i, 2]) ** 2)
             for i in range(6)]
        np.testing.assert_allclose(model.inverse_kinematics(X), L, rtol=1e-14)
        kin = model.leg_kinematics(X)
        np.testing.assert_allclose(np.linalg.norm(kin.units, axis=1), 1.0, rtol=1e-14)
        np.testing.assert_allclose(kin.vectors, kin.lengths[:, None] * kin.units, atol=1e-15)


def test_euler_rate_matrix_is_angular_velocity():
    """omega from dR/dt R^T (finite differences) equals E e'."""
    rng = np.random.default_rng(2)
    for _ in range(5):
        e = rng.uniform(-1, 1, 3)
        ed = rng.normal(size=3)
        h = 1e-6
        Rd = (rotation_matrix(e + h * ed) - rotation_matrix(e - h * ed)) / (2 * h)
        W = Rd @ rotation_matrix(e).T
        om = np.array([W[2, 1], W[0, 2], W[1, 0]])
        np.testing.assert_allclose(W, -W.T, atol=1e-8)
        np.testing.assert_allclose(om, euler_rate_matrix(e) @ ed, atol=1e-8)
        # the rates are not the angular velocity (ERRATA 002)
        assert np.linalg.norm(om - ed) > 1e-3


def test_leg_rates_and_accelerations_by_finite_differences(model):
    X0 = model.home_pose
    for t in (0.0, 0.37, 1.21):
        X, Xd, Xdd = trajectory(X0, t)
        kin = model.leg_kinematics(X, Xd, Xdd)
        h = 1e-5
        Lp = model.leg_lengths(trajectory(X0, t + h)[0])
        Lm = model.leg_lengths(trajectory(X0, t - h)[0])
        L0 = model.leg_lengths(X)
        np.testing.assert_allclose(kin.rates, (Lp - Lm) / (2 * h), rtol=1e-7, atol=1e-9)
        h = 1e-4
        Lp = model.leg_lengths(trajectory(X0, t + h)[0])
        Lm = model.leg_lengths(trajectory(X0, t - h)[0])
        np.testing.assert_allclose(kin.accelerations, (Lp - 2 * L0 + Lm) / h ** 2, rtol=1e-5, atol=1e-6)
        # rate in twist form equals Euler form
        E = euler_rate_matrix(X[3:])
        nu = np.concatenate([Xd[:3], E @ Xd[3:]])
        np.testing.assert_allclose(model.leg_jacobian(X) @ nu, kin.rates, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(model.leg_jacobian(X, "euler") @ Xd, kin.rates, rtol=1e-12, atol=1e-14)


def test_euler_jacobian_by_finite_differences(model):
    rng = np.random.default_rng(3)
    for _ in range(3):
        X = random_pose(model, rng)
        Je = model.leg_jacobian(X, "euler")
        h = 1e-6
        fd = np.column_stack([(model.leg_lengths(X + h * e) - model.leg_lengths(X - h * e)) / (2 * h)
                              for e in np.eye(6)])
        np.testing.assert_allclose(Je, fd, atol=1e-8)
        q = model.inverse_kinematics(X)
        Jx = model.task_jacobian(q, X)
        np.testing.assert_allclose(Jx @ Je, np.eye(6), atol=1e-12)
        # X' = J_x q': finite differences of forward kinematics
        fdx = np.column_stack([(model.forward_kinematics_task(q + h * e, guess=X)
                                - model.forward_kinematics_task(q - h * e, guess=X)) / (2 * h)
                               for e in np.eye(6)])
        np.testing.assert_allclose(Jx, fdx, atol=1e-7)


def test_geometric_jacobian_by_finite_differences(model):
    rng = np.random.default_rng(4)
    X = random_pose(model, rng)
    q = model.inverse_kinematics(X)
    Jg = model.jacobian(q, pose=X)
    h = 1e-6
    for k in range(6):
        dq = np.eye(6)[k]
        Tp = model.forward_kinematics(q + h * dq, pose=X)
        Tm = model.forward_kinematics(q - h * dq, pose=X)
        v = (Tp[:3, 3] - Tm[:3, 3]) / (2 * h)
        W = (Tp[:3, :3] - Tm[:3, :3]) / (2 * h) @ rotation_matrix(X[3:]).T
        np.testing.assert_allclose(Jg[:3, k], v, atol=1e-7)
        np.testing.assert_allclose(Jg[3:, k], [W[2, 1], W[0, 2], W[1, 0]], atol=1e-7)


def test_fk_round_trip_and_batch(model):
    rng = np.random.default_rng(5)
    Xs = np.array([random_pose(model, rng) for _ in range(20)])
    qs = model.inverse_kinematics(Xs)
    assert qs.shape == (20, 6)
    Xf = model.forward_kinematics_task(qs)          # Newton from the home pose
    np.testing.assert_allclose(Xf, Xs, atol=1e-10)
    T = model.forward_kinematics(qs[3])
    np.testing.assert_allclose(T[:3, 3], Xs[3, :3], atol=1e-10)
    np.testing.assert_allclose(T[:3, :3], rotation_matrix(Xs[3, 3:]), atol=1e-10)
    assert model.forward_kinematics(qs).shape == (20, 4, 4)
    # with a consistent hint Newton takes no step
    np.testing.assert_array_equal(model.forward_kinematics_task(qs[0], guess=Xs[0]), Xs[0])


def test_fk_failure_raises_convergence_error(model):
    with pytest.raises(ConvergenceError):
        model.forward_kinematics_task(np.array([1.0, 1.0, 1.0, 1.0, 1.0, 3.5]))
    with pytest.raises(ConvergenceError):
        model.forward_kinematics_task(model.inverse_kinematics(model.home_pose), max_iter=0,
                                      guess=model.home_pose + 0.01)


def test_unreachable_names_leg(model):
    X = model.home_pose.copy()
    X[5] = 1.3     # yaw stretches legs 1, 3, 5 only
    q = model.leg_lengths(X)
    assert np.count_nonzero(q > model.limits.position_max) == 3
    worst = int(np.argmax(q > model.limits.position_max))
    with pytest.raises(UnreachableError, match=f"leg{worst + 1}"):
        model.inverse_kinematics(X)
    np.testing.assert_array_equal(model.inverse_kinematics(X, check_limits=False), q)
    with pytest.raises(UnreachableError, match="leg3"):
        q2 = model.leg_lengths(model.home_pose)
        q2[2] = 0.5
        model.check_leg_lengths(q2)


def test_bad_kinematic_input(model):
    with pytest.raises(ModelError):
        model.inverse_kinematics(np.zeros(5))
    with pytest.raises(ModelError):
        model.inverse_kinematics([0, 0, np.nan, 0, 0, 0])
    with pytest.raises(ModelError):
        model.leg_jacobian(model.home_pose, coordinates="quaternion")
    X = model.home_pose.copy()
    X[4] = np.pi / 2
    with pytest.raises(SingularityError):
        model.task_jacobian(model.leg_lengths(X), X)
