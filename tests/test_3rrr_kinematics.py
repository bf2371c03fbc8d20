"""Kinematics of the planar 3RRR model: constraints, Jacobians, Hessians, maps, IK/FK, singularities."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dynamics import load_model
from dynamics.errors import (ConvergenceError, ModelError, SingularityError, TorqueloopError,
                             UnreachableError)

ROBOTS = Path(__file__).resolve().parents[1] / "hil_configs" / "robots"


@pytest.fixture(scope="module")
def model():
    return load_model(ROBOTS / "3rrr_vertical.toml")


def random_states(model, rng, n, margin=0.05):
    """n random reachable, well-conditioned (q, X) pairs near the home pose."""
    out = []
    while len(out) < n:
        X = model.home_pose + rng.uniform([-0.1, -0.1, -0.5], [0.1, 0.1, 0.5])
        try:
            q = model.inverse_kinematics(X)
        except UnreachableError:
            continue
        rep = model.singularity(q, X)
        if rep.extra["type1_measure"] > margin and abs(rep.extra["type2_measure"]) > margin:
            out.append((q, X))
    return out


def test_ik_satisfies_constraints_and_fk_round_trip(model):
    rng = np.random.default_rng(1)
    for q, X in random_states(model, rng, 30):
        h = model.constraints(q, X)
        assert np.max(np.abs(h) / (2 * model.distal.length)) < 1e-14
        # FK from a perturbed guess recovers the pose (same assembly mode)
        Xf = model.forward_kinematics_task(q, guess=X + rng.normal(scale=0.01, size=3))
        np.testing.assert_allclose(Xf, X, atol=1e-11)
        assert np.max(np.abs(model.constraints(q, Xf))) < 1e-12
        # IK of the FK result returns the same angles
        np.testing.assert_allclose(model.inverse_kinematics(Xf), q, atol=1e-10)


def test_fk_transform_and_batch(model):
    rng = np.random.default_rng(2)
    states = random_states(model, rng, 5)
    Q = np.array([s[0] for s in states])
    Xs = np.array([s[1] for s in states])
    T = model.forward_kinematics(Q, pose=Xs)
    assert T.shape == (5, 4, 4)
    for j in range(5):
        x, y, phi = Xs[j]
        np.testing.assert_allclose(T[j, :2, 3], [x, y], atol=1e-12)
        np.testing.assert_allclose(T[j, :2, :2], [[np.cos(phi), -np.sin(phi)], [np.sin(phi), np.cos(phi)]],
                                   atol=1e-12)
        assert T[j, 2, 2] == 1.0 and T[j, 3, 3] == 1.0 and T[j, 2, 3] == 0.0
    np.testing.assert_allclose(model.forward_kinematics_task(Q, guess=Xs), Xs, atol=1e-12)
    np.testing.assert_allclose(model.inverse_kinematics(Xs), Q, atol=1e-12)
    # default guess: the home pose
    np.testing.assert_allclose(model.forward_kinematics_task(model.home_q), model.home_pose, atol=1e-12)


def test_branches_give_different_angles_same_pose(model):
    X = model.home_pose + np.array([0.02, -0.01, 0.1])
    q_def = model.inverse_kinematics(X)
    for leg in range(3):
        br = model.elbow_branch.copy()
        br[leg] *= -1
        q = model.inverse_kinematics(X, branch=br)
        assert abs(q[leg] - q_def[leg]) > 0.1
        np.testing.assert_array_equal(np.delete(q, leg), np.delete(q_def, leg))
        assert np.max(np.abs(model.constraints(q, X))) < 1e-14
        # sign(A_ii) is the branch
        A, _ = model.constraint_jacobians(q, X)
        np.testing.assert_array_equal(np.sign(np.diag(A)), br)
        # FK started near this pose on the other branch gives back the same X
        np.testing.assert_allclose(model.forward_kinematics_task(q, guess=X + 0.005), X, atol=1e-11)
    # passive angles differ between branches but both close the loop
    psi1 = model.passive_angles(X)
    psi2 = model.passive_angles(X, branch=-model.elbow_branch)
    assert np.all(np.abs(np.angle(np.exp(1j * (psi1 - psi2)))) > 0.1)
    for br in (model.elbow_branch, -model.elbow_branch):
        q = model.inverse_kinematics(X, branch=br)
        psi = model.passive_angles(X, branch=br)
        Bp = model.elbow_positions(q)
        Cp = model.platform_joint_positions(X)
        np.testing.assert_allclose(Bp + model.distal.length[:, None] * np.stack([np.cos(psi), np.sin(psi)], 1),
                                   Cp, atol=1e-14)


def test_jacobians_and_hessians_by_finite_differences(model):
    rng = np.random.default_rng(3)
    e = 1e-6
    for q, X in random_states(model, rng, 10):
        # perturb away from the constraint manifold: A, B, H are defined everywhere
        q = q + rng.normal(scale=0.05, size=3)
        z = np.concatenate([q, X])

        def h(z):
            return model.constraints(z[:3], z[3:])

        def grad(z):
            A, B = model.constraint_jacobians(z[:3], z[3:])
            return np.hstack([A, B])

        Jfd = np.array([(h(z + e * np.eye(6)[k]) - h(z - e * np.eye(6)[k])) / (2 * e) for k in range(6)]).T
        np.testing.assert_allclose(grad(z), Jfd, atol=1e-9)
        H = model.constraint_hessians(q, X)
        Hfd = np.array([(grad(z + e * np.eye(6)[k]) - grad(z - e * np.eye(6)[k])) / (2 * e) for k in range(6)])
        # Hfd[k, i, j] = d/dz_k dh_i/dz_j
        np.testing.assert_allclose(H, np.transpose(Hfd, (1, 2, 0)), atol=1e-8)
        np.testing.assert_allclose(H, np.transpose(H, (0, 2, 1)), atol=0)
        # gamma = zd^T H zd
        zd = rng.normal(size=6)
        np.testing.assert_allclose(model.constraint_gamma(q, X, zd[:3], zd[3:]),
                                   np.einsum("j,ijk,k->i", zd, H, zd), rtol=1e-12, atol=1e-13)


def _path(X0, V, Acc, t):
    return X0 + V * t + 0.5 * Acc * t ** 2 + 0.1 * np.sin(3 * t) * Acc


def test_velocity_and_acceleration_maps_along_a_path(model):
    rng = np.random.default_rng(4)
    h = 1e-3
    for q0, X0 in random_states(model, rng, 8):
        V = rng.normal(scale=0.2, size=3)
        Acc = rng.normal(scale=0.5, size=3)
        t = 0.0
        Xs = [_path(X0, V, Acc, t + k * h) for k in (-2, -1, 0, 1, 2)]
        qs = [model.inverse_kinematics(x) for x in Xs]
        # 5-point stencils
        Xd = (Xs[0] - 8 * Xs[1] + 8 * Xs[3] - Xs[4]) / (12 * h)
        Xdd = (-Xs[0] + 16 * Xs[1] - 30 * Xs[2] + 16 * Xs[3] - Xs[4]) / (12 * h * h)
        qd_fd = (qs[0] - 8 * qs[1] + 8 * qs[3] - qs[4]) / (12 * h)
        qdd_fd = (-qs[0] + 16 * qs[1] - 30 * qs[2] + 16 * qs[3] - qs[4]) / (12 * h * h)
        q, X = qs[2], Xs[2]
        qd = model.joint_velocity(q, X, Xd)
        np.testing.assert_allclose(qd, qd_fd, rtol=1e-7, atol=1e-9)
        np.testing.assert_allclose(model.task_velocity(q, X, qd), Xd, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(model.task_jacobian(q, X) @ model.inverse_task_jacobian(q, X), np.eye(3),
                                   atol=1e-10)
        qdd = model.joint_acceleration(q, X, Xd, Xdd)
        np.testing.assert_allclose(qdd, qdd_fd, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(model.task_acceleration(q, X, qd, qdd), Xdd, rtol=1e-9, atol=1e-10)


def test_geometric_jacobian_matches_fk_differences(model):
    rng = np.random.default_rng(5)
    for q, X in random_states(model, rng, 5):
        J = model.jacobian(q, pose=X)
        assert J.shape == (6, 3)
        assert np.all(J[2:5] == 0)
        e = 1e-6
        for k in range(3):
            Xp = model.forward_kinematics_task(q + e * np.eye(3)[k], guess=X)
            Xm = model.forward_kinematics_task(q - e * np.eye(3)[k], guess=X)
            np.testing.assert_allclose(J[[0, 1, 5], k], (Xp - Xm) / (2 * e), rtol=1e-6, atol=1e-8)


def test_unreachable_pose_names_the_leg(model):
    # move the platform far towards the base joint of leg 1 (at 90 deg): the others cannot reach
    with pytest.raises(UnreachableError, match=r"leg 2"):
        model.inverse_kinematics([0.0, 0.5, 0.0])
    with pytest.raises(UnreachableError, match=r"leg \d"):
        model.task_inverse_dynamics([0.0, 2.0, 0.0], np.zeros(3), np.zeros(3))
    with pytest.raises(UnreachableError, match=r"leg 1"):
        model.task_inverse_dynamics_multipliers([0.0, -0.9, 0.0], np.zeros(3), np.zeros(3))
    # the error is part of the tree
    assert issubclass(UnreachableError, TorqueloopError)


def _stretched_pose(model, leg, phi=0.0):
    """Pose X on the workspace boundary of `leg` (|C - A| = a + b) by bisection along a ray."""
    A = model.base_joints[leg]
    Xh = model.home_pose.copy()
    Xh[2] = phi
    direction = -A / np.linalg.norm(A)
    lo, hi = 0.0, 1.0

    def reach(s):
        X = Xh + np.array([*(s * direction), 0.0])
        C = model.platform_joint_positions(X)[leg]
        return np.linalg.norm(C - A) - (model.proximal.length[leg] + model.distal.length[leg])

    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if reach(mid) < 0:
            lo = mid
        else:
            hi = mid
    return Xh + np.array([*(lo * direction), 0.0])


def test_batch_rate_maps_equal_the_single_state_maps(model):
    """joint_rates_batch (what a task trajectory's tabulation uses) gives, row for row, the
    numbers of joint_velocity / joint_acceleration to the last bit, and the same errors."""
    rng = np.random.default_rng(9)
    states = random_states(model, rng, 400)
    q = np.array([s[0] for s in states])
    X = np.array([s[1] for s in states])
    Xd = rng.normal(scale=2.0, size=X.shape)
    # phi rates whose square by pow() (the single-state method's) is not x * x (1 ulp apart
    # for about 1 in 1500 values with glibc), where a careless batch form would differ
    cand = rng.normal(scale=2.0, size=2_000_000).tolist()
    odd = [v for v in cand if v ** 2 != v * v][:400]
    Xd[:len(odd), 2] = odd
    Xdd = rng.normal(scale=20.0, size=X.shape)
    qd, qdd = model.joint_rates_batch(q, X, Xd, Xdd)
    assert qd.shape == qdd.shape == (400, 3)
    for i in range(400):
        assert np.array_equal(qd[i], model.joint_velocity(q[i], X[i], Xd[i])), i
        assert np.array_equal(qdd[i], model.joint_acceleration(q[i], X[i], Xd[i], Xdd[i])), i
    # a singular row: the single-state method's error (naming the map and the pose)
    Xs = _stretched_pose(model, 0)
    q2, X2 = np.vstack([q[:3], model.inverse_kinematics(Xs)]), np.vstack([X[:3], Xs])
    with pytest.raises(SingularityError, match="inverse_task_jacobian: type-1"):
        model.joint_rates_batch(q2, X2, Xd[:4], Xdd[:4])
    bad = Xd[:3].copy()
    bad[1, 2] = np.nan
    with pytest.raises(ModelError, match="Xd must be finite"):
        model.joint_rates_batch(q[:3], X[:3], bad, Xdd[:3])


def test_batch_task_acceleration_equals_the_single_state_map(model):
    """task_acceleration_batch (what the identification regressor uses) gives, row for row, the
    numbers of task_acceleration to the last bit, and the same errors."""
    rng = np.random.default_rng(11)
    states = random_states(model, rng, 3000)
    q = np.array([s[0] for s in states])
    X = np.array([s[1] for s in states])
    qd = rng.normal(scale=3.0, size=q.shape)
    qdd = rng.normal(scale=30.0, size=q.shape)
    Xdd = model.task_acceleration_batch(q, X, qd, qdd)
    assert Xdd.shape == (3000, 3)
    # the phi rate inside is squared with pow(): rows where that is not x * x are covered
    jac = [model.constraint_jacobians(q[i], X[i]) for i in range(3000)]
    phid = np.array([-np.linalg.solve(B, np.diag(A) * qd[i])[2] for i, (A, B) in enumerate(jac)])
    assert sum(v ** 2 != v * v for v in phid.tolist()) >= 1
    for i in range(3000):
        assert np.array_equal(Xdd[i], model.task_acceleration(q[i], X[i], qd[i], qdd[i])), i
    Xs = _stretched_pose(model, 0)
    q2, X2 = np.vstack([q[:3], model.inverse_kinematics(Xs)]), np.vstack([X[:3], Xs])
    with pytest.raises(SingularityError, match="task_acceleration: type-1"):
        model.task_acceleration_batch(q2, X2, qd[:4], qdd[:4])
    bad = qd[:3].copy()
    bad[2, 0] = np.inf
    with pytest.raises(ModelError, match="qd must be finite"):
        model.task_acceleration_batch(q[:3], X[:3], bad, qdd[:3])


def test_type1_singularity(model):
    X = _stretched_pose(model, 0)
    q = model.inverse_kinematics(X)
    rep = model.singularity(q, X)
    assert rep.kind in ("type1", "both")
    assert rep.extra["worst_leg"] == 0
    assert rep.margin == 0.0
    assert rep.extra["type1_measure"] < 1e-6
    with pytest.raises(SingularityError, match="type-1.*leg 1"):
        model.task_jacobian(q, X)
    with pytest.raises(SingularityError, match="type-1"):
        model.task_inverse_dynamics(X, np.zeros(3), np.zeros(3))
    with pytest.raises(SingularityError):
        model.task_inverse_dynamics_multipliers(X, np.zeros(3), np.zeros(3))
    # a regular pose reports regular with a positive margin
    rep0 = model.singularity(model.home_q, model.home_pose)
    assert rep0.kind == "regular" and 0 < rep0.margin <= 1 and np.isfinite(rep0.cond_b)


def test_type2_singularity(model):
    # at the centre, the symmetric robot has a type-2 singularity where the distal
    # lines meet at the platform centre (zero moment arm); find it by bisection in phi
    def meas(phi):
        X = np.array([0.0, 0.0, phi])
        return model.singularity(model.inverse_kinematics(X), X).extra["type2_measure"]

    phis = np.linspace(-1.0, 0.0, 101)
    vals = [meas(p) for p in phis]
    k = next(i for i in range(100) if np.sign(vals[i]) != np.sign(vals[i + 1]))
    lo, hi = phis[k], phis[k + 1]
    for _ in range(80):
        mid = 0.5 * (lo + hi)
        if np.sign(meas(mid)) == np.sign(meas(lo)):
            lo = mid
        else:
            hi = mid
    X = np.array([0.0, 0.0, lo])
    q = model.inverse_kinematics(X)
    rep = model.singularity(q, X)
    assert rep.kind == "type2"
    assert rep.cond_b > 1e8
    with pytest.raises(SingularityError, match="type-2"):
        model.task_jacobian(q, X)
    with pytest.raises(SingularityError, match="type-2"):
        model.task_inverse_dynamics(X, np.zeros(3), np.zeros(3))
    with pytest.raises(SingularityError, match="type-2"):
        model.mass_matrix(q, pose=X)


def test_fk_failure_is_convergence_error(model):
    # all proximal links pointing radially outwards: the platform cannot be assembled
    q = np.radians([90.0, 210.0, 330.0])
    with pytest.raises(ConvergenceError):
        model.forward_kinematics_task(q)
    with pytest.raises(ConvergenceError):
        model.mass_matrix(q)
    # max_iter too small for a far start
    q_ok = model.inverse_kinematics(model.home_pose + np.array([0.05, 0.05, 0.3]))
    with pytest.raises(ConvergenceError):
        model.forward_kinematics_task(q_ok, guess=model.home_pose, max_iter=1)


def test_bad_inputs(model):
    with pytest.raises(ModelError, match="shape"):
        model.inverse_kinematics([0.0, 0.0])
    with pytest.raises(ModelError, match="finite"):
        model.inverse_kinematics([np.nan, 0.0, 0.0])
    with pytest.raises(ModelError, match="branch"):
        model.inverse_kinematics(model.home_pose, branch=[1, 0, 1])
    with pytest.raises(ModelError, match="wrench"):
        model.task_inverse_dynamics(model.home_pose, np.zeros(3), np.zeros(3), wrench=[1.0, 2.0])
    # the fast (numba) paths validate too
    q, X = model.home_q, model.home_pose
    with pytest.raises(ModelError, match="shape"):
        model.inverse_dynamics(np.zeros(4), np.zeros(3), np.zeros(3), pose=X)
    with pytest.raises(ModelError, match="finite"):
        model.forward_dynamics(q, np.array([0.0, np.inf, 0.0]), np.zeros(3), pose=X)
    with pytest.raises(ModelError, match="finite"):
        model.task_inverse_dynamics(X, np.zeros(3), np.array([np.nan, 0.0, 0.0]))
    with pytest.raises(ModelError, match="shape"):
        model.mass_matrix(np.zeros(2), pose=X)
