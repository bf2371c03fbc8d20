"""Stewart platform dynamics: two formulations, energy balance, M/C properties, FD/ID consistency, singularity."""

from pathlib import Path

import numpy as np
import pytest

from dynamics import DriveParams, JointLimits, load_model
from dynamics import _stewart_lagrange as LG
from dynamics.errors import ModelError, SingularityError
from dynamics.stewart import StewartPlatform, euler_rate_matrix

ROBOT = Path(__file__).resolve().parents[1] / "hil_configs" / "robots" / "stewart.toml"
SPREAD = np.array([0.08, 0.08, 0.08, 0.15, 0.15, 0.15])


def random_inertia(rng, scale):
    """A random physically valid inertia tensor (full 3x3, triangle inequality holds)."""
    d = scale * rng.uniform(0.5, 1.0, 3)
    d[2] = min(d[2], d[0] + d[1])
    Q, _ = np.linalg.qr(rng.normal(size=(3, 3)))
    return Q @ np.diag(d) @ Q.T


def general_model(seed=0, armature=4.0):
    """Asymmetric platform: full leg and platform inertias, COM offset, tilted universal-joint axes."""
    rng = np.random.default_rng(seed)
    ab = np.deg2rad([15, 105, 135, 225, 255, 345]) + rng.uniform(-0.05, 0.05, 6)
    ap = np.deg2rad([45, 75, 165, 195, 285, 315]) + rng.uniform(-0.05, 0.05, 6)
    b = np.column_stack([np.cos(ab), np.sin(ab), rng.uniform(-0.02, 0.02, 6)])
    p = np.column_stack([0.5 * np.cos(ap), 0.5 * np.sin(ap), rng.uniform(-0.02, 0.02, 6)])
    home = np.array([0.0, 0.0, 0.9, 0.0, 0.0, 0.0])
    u = home[:3] + p - b
    a = np.cross([0.0, 0.0, 1.0], u) + rng.normal(scale=0.3, size=(6, 3))   # spin terms are active
    return StewartPlatform(
        base_joints=b, platform_joints=p, ujoint_axes=a,
        lower_mass=rng.uniform(2, 4, 6), lower_com=rng.uniform(0.2, 0.3, 6),
        lower_inertia=np.array([random_inertia(rng, 0.05) for _ in range(6)]),
        upper_mass=rng.uniform(1, 2, 6), upper_com=rng.uniform(0.25, 0.35, 6),
        upper_inertia=np.array([random_inertia(rng, 0.03) for _ in range(6)]),
        platform_mass=20.0, platform_com=[0.02, -0.01, 0.05], platform_inertia=random_inertia(rng, 2.0),
        gravity=[0.3, -0.2, -9.81], limits=JointLimits.unbounded(6),
        drive=DriveParams(np.full(6, armature), np.zeros(6), np.zeros(6)), home_pose=home, name="general")


@pytest.fixture(scope="module")
def model():
    return load_model(ROBOT)


@pytest.fixture(scope="module")
def gmodel():
    return general_model()


def random_state(m, rng):
    X = m.home_pose + SPREAD * rng.uniform(-1, 1, 6)
    return X, rng.normal(size=6), rng.normal(size=6) * 3, rng.normal(size=6) * 20


def trajectory(X0, t):
    A = np.array([0.05, -0.04, 0.03, 0.12, -0.1, 0.2])
    w = np.array([1.3, 0.7, 1.9, 1.1, 2.3, 0.9])
    ph = np.array([0.1, 0.5, -0.3, 0.9, 0.2, -0.7])
    return (X0 + A * np.sin(w * t + ph), A * w * np.cos(w * t + ph), -A * w ** 2 * np.sin(w * t + ph))


def relerr(a, b):
    return np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300)


@pytest.mark.parametrize("which", ["file", "general"])
def test_lagrange_and_kane_agree(which, model, gmodel):
    m = model if which == "file" else gmodel
    rng = np.random.default_rng(10)
    for _ in range(12):
        X, Xd, Xdd, W = random_state(m, rng)
        Fa = m.task_inverse_dynamics_lagrange(X, Xd, Xdd, W)
        Fb = m.task_inverse_dynamics(X, Xd, Xdd, W)
        assert relerr(Fb, Fa) < 1e-9
        # without wrench and at rest too
        assert relerr(m.task_inverse_dynamics(X, Xd, Xdd), m.task_inverse_dynamics_lagrange(X, Xd, Xdd)) < 1e-9
    z = np.zeros(6)
    assert relerr(m.task_inverse_dynamics(X, z, z), m.task_inverse_dynamics_lagrange(X, z, z)) < 1e-9


def test_euler_rates_matter(gmodel):
    """Treating Euler rates as omega (the seed's error) changes the forces noticeably."""
    rng = np.random.default_rng(11)
    X, Xd, Xdd, _ = random_state(gmodel, rng)
    X[3:5] = [0.2, -0.25]
    F = gmodel.task_inverse_dynamics(X, Xd, Xdd)
    E = euler_rate_matrix(X[3:])
    # pass "omega = e'" by converting the wrong twist back into Euler rates
    Xd_wrong = np.concatenate([Xd[:3], np.linalg.solve(E, Xd[3:])])
    assert relerr(gmodel.task_inverse_dynamics(X, Xd_wrong, Xdd), F) > 1e-3


def test_batch_matches_single(gmodel):
    rng = np.random.default_rng(12)
    states = [random_state(gmodel, rng) for _ in range(5)]
    X, Xd, Xdd, W = (np.array(s) for s in zip(*states))
    Fb = gmodel.task_inverse_dynamics(X, Xd, Xdd, W)
    assert Fb.shape == (5, 6)
    for n in range(5):
        np.testing.assert_allclose(Fb[n], gmodel.task_inverse_dynamics(X[n], Xd[n], Xdd[n], W[n]), rtol=1e-14)
    Xa = gmodel.forward_dynamics_task(X, Xd, Fb, W)
    np.testing.assert_allclose(Xa, Xdd, rtol=1e-9, atol=1e-9)


def test_power_balance_complex_step(gmodel):
    """sum F_i L'_i = d(T + V)/dt along a trajectory; dT/dt exact by complex step in t."""
    m = gmodel
    legs, plat = m.packed_parameters
    X0 = m.home_pose
    h = 1e-30
    for t in np.linspace(0.0, 3.0, 7):
        X, Xd, Xdd = trajectory(X0, t)
        F = m.task_inverse_dynamics(X, Xd, Xdd)
        Ld = m.leg_kinematics(X, Xd).rates
        Xc, Xdc, _ = trajectory(X0, t + 1j * h)
        dE = (LG.kinetic_energy(Xc, Xdc, legs, plat) + LG.potential_energy(Xc, legs, plat)).imag / h
        power = F @ Ld
        assert abs(power - dE) <= 1e-9 * max(abs(power), np.sum(np.abs(F * Ld)))


def test_power_balance_numeric(model):
    """Same balance with central differences of the public energy methods (1e-6)."""
    X0 = model.home_pose
    h = 1e-5
    for t in (0.3, 1.7):
        X, Xd, Xdd = trajectory(X0, t)
        F = model.task_inverse_dynamics(X, Xd, Xdd)
        Ld = model.leg_kinematics(X, Xd).rates

        def energy(tt):
            Xt, Xdt, _ = trajectory(X0, tt)
            return model.task_kinetic_energy(Xt, Xdt) + model.task_potential_energy(Xt)

        dE = (energy(t + h) - energy(t - h)) / (2 * h)
        assert abs(F @ Ld - dE) <= 1e-6 * np.sum(np.abs(F * Ld))


def test_joint_space_consistency(gmodel):
    m = gmodel
    rng = np.random.default_rng(13)
    for _ in range(4):
        X, Xd, Xdd, W = random_state(m, rng)
        kin = m.leg_kinematics(X, Xd, Xdd)
        q, qd, qdd = kin.lengths, kin.rates, kin.accelerations
        Ft = m.task_inverse_dynamics(X, Xd, Xdd, W)
        Fq = m.inverse_dynamics(q, qd, qdd, W, pose=X)
        assert relerr(Fq, Ft) < 1e-9
        # without a pose hint (Newton from home) the same
        assert relerr(m.inverse_dynamics(q, qd, qdd, W), Ft) < 1e-9
        # one-state fast paths (no wrench, pose hint) equal the checked batch paths
        F0 = m.task_inverse_dynamics(X, Xd, Xdd)
        np.testing.assert_allclose(m.inverse_dynamics(q, qd, qdd, pose=X), F0, rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(m.inverse_dynamics(q[None], qd[None], qdd[None])[0], F0, rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(m.task_inverse_dynamics(list(X), list(Xd), list(Xdd)), F0, rtol=1e-14)
        np.testing.assert_allclose(m.forward_dynamics(q, qd, F0, pose=X), qdd, rtol=1e-8, atol=1e-8)
        np.testing.assert_allclose(m.forward_dynamics(q[None], qd[None], F0[None])[0], qdd, rtol=1e-8, atol=1e-8)
        np.testing.assert_allclose(m.forward_dynamics_task(X[None], Xd[None], F0[None])[0], Xdd,
                                   rtol=1e-8, atol=1e-8)
        M = m.mass_matrix(q, pose=X)
        np.testing.assert_allclose(M, M.T, atol=1e-12 * np.abs(M).max())
        assert np.all(np.linalg.eigvalsh(M) > 0)
        h = m.bias(q, qd, pose=X)
        Jg = m.jacobian(q, pose=X)
        assert relerr(M @ qdd + h - Jg.T @ W, Ft) < 1e-9
        np.testing.assert_allclose(m.forward_dynamics(q, qd, Ft, W, pose=X), qdd, rtol=1e-8, atol=1e-8)
        np.testing.assert_allclose(m.forward_dynamics_task(X, Xd, Ft, W), Xdd, rtol=1e-8, atol=1e-8)
        # kinetic energy: 1/2 qd^T M qd equals the Lagrangian's T
        assert relerr(np.atleast_1d(m.kinetic_energy(q, qd, pose=X)),
                      np.atleast_1d(m.task_kinetic_energy(X, Xd))) < 1e-12
        assert np.isclose(m.potential_energy(q, pose=X), m.task_potential_energy(X), rtol=1e-14)


def test_coriolis_matrix_skew(gmodel):
    m = gmodel
    rng = np.random.default_rng(14)
    for _ in range(3):
        X, Xd, _, _ = random_state(m, rng)
        kin = m.leg_kinematics(X, Xd)
        q, qd = kin.lengths, kin.rates
        C = m.coriolis_matrix(q, qd, pose=X)
        np.testing.assert_allclose(C @ qd, m.bias(q, qd, pose=X) - m.gravity(q, pose=X), rtol=1e-9, atol=1e-9)
        hstep = 1e-6
        Md_fd = (m.mass_matrix(q + hstep * qd, pose=X) - m.mass_matrix(q - hstep * qd, pose=X)) / (2 * hstep)
        Md = m.mass_matrix_derivative(q, qd, pose=X)
        scale = np.abs(Md).max()
        assert np.abs(Md - Md_fd).max() < 1e-6 * scale
        N = Md_fd - 2 * C
        assert np.abs(N + N.T).max() < 1e-6 * scale
        # C is not the trivial choice dM/dt / 2
        assert np.abs(C - 0.5 * Md).max() > 1e-6 * scale


def test_static_equilibrium_massless_legs():
    """With massless legs the leg forces hold exactly the platform weight (and its moment)."""
    m = general_model(seed=3, armature=0.0)
    legs, plat = m.packed_parameters
    mass = 20.0
    light = StewartPlatform(
        base_joints=m.base_joints, platform_joints=m.platform_joints, ujoint_axes=m.ujoint_axes,
        lower_mass=np.zeros(6), lower_com=np.zeros(6), lower_inertia=np.zeros((6, 3, 3)),
        upper_mass=np.zeros(6), upper_com=np.zeros(6), upper_inertia=np.zeros((6, 3, 3)),
        platform_mass=mass, platform_com=plat[1:4], platform_inertia=plat[4:13].reshape(3, 3),
        gravity=plat[13:16], home_pose=m.home_pose)
    X = m.home_pose + np.array([0.03, -0.02, 0.05, 0.1, -0.05, 0.2])
    z = np.zeros(6)
    F = light.task_inverse_dynamics(X, z, z)
    kin = light.leg_kinematics(X)
    total = F @ kin.units
    np.testing.assert_allclose(total, -mass * plat[13:16], rtol=1e-12)
    cw = kin.platform_joints  # R p_i
    moment = sum(F[i] * np.cross(cw[i], kin.units[i]) for i in range(6))
    c = m.forward_kinematics(light.leg_lengths(X), pose=X)[:3, :3] @ plat[1:4]
    np.testing.assert_allclose(moment, -mass * np.cross(c, plat[13:16]), rtol=1e-10, atol=1e-10)


def test_energy_conserved_in_free_fall_simulation(gmodel):
    """RK4 on task_state_derivative with zero leg forces conserves T + V (no friction)."""
    m = gmodel
    X = m.home_pose + np.array([0.01, 0.0, 0.0, 0.05, 0.0, 0.1])
    Xd = np.array([0.1, 0.0, -0.05, 0.2, 0.1, -0.3])
    F = np.zeros(6)

    def f(s):
        d1, d2 = m.task_state_derivative(s[:6], s[6:], F)
        return np.concatenate([d1, d2])

    s = np.concatenate([X, Xd])
    E0 = m.task_kinetic_energy(X, Xd) + m.task_potential_energy(X)
    dt = 1e-3
    for _ in range(100):
        k1 = f(s)
        k2 = f(s + 0.5 * dt * k1)
        k3 = f(s + 0.5 * dt * k2)
        k4 = f(s + dt * k3)
        s = s + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    E1 = m.task_kinetic_energy(s[:6], s[6:]) + m.task_potential_energy(s[:6])
    assert abs(s[2] - X[2]) > 1e-3           # it actually moved
    assert abs(E1 - E0) < 1e-8 * abs(m.task_potential_energy(X))


def test_forces_grow_toward_singularity(model):
    """Yawing the platform about z toward +90 deg (Fichter's singularity of this symmetric design)."""
    yaws = np.deg2rad([0.0, 30.0, 60.0, 80.0, 85.0, 88.0, 89.0, 89.9, 89.99])
    conds, fmax = [], []
    z = np.zeros(6)
    Xd = np.array([0.0, 0.0, 0.0, 0.0, 0.0, 0.2])
    for y in yaws:
        X = np.array([0.0, 0.0, 0.9, 0.0, 0.0, y])
        q = model.leg_lengths(X)
        rep = model.singularity(q, X)
        conds.append(rep.cond_b)
        fmax.append(np.abs(model.task_inverse_dynamics(X, Xd, z)).max())
        assert rep.kind == "regular"
    assert np.all(np.diff(conds) > 0)
    assert np.all(np.diff(fmax[2:]) > 0)
    assert fmax[-1] > 100 * fmax[0]
    X = np.array([0.0, 0.0, 0.9, 0.0, 0.0, np.pi / 2])
    q = model.leg_lengths(X)
    rep = model.singularity(q, X)
    assert rep.kind == "type2" and abs(rep.det_b) < 1e-12 and rep.margin < 1e-9
    with pytest.raises(SingularityError):
        model.task_inverse_dynamics(X, Xd, z)
    with pytest.raises(SingularityError):
        model.task_inverse_dynamics_lagrange(X, Xd, z)
    with pytest.raises(SingularityError):
        model.task_jacobian(q, X)
    # task-space forward dynamics stays defined (the platform inertia is regular); joint space is not
    assert np.all(np.isfinite(model.forward_dynamics_task(X, Xd, z)))
    with pytest.raises(SingularityError):
        model.forward_dynamics(q, z, z, pose=X)
    with pytest.raises(SingularityError):
        model.mass_matrix(q, pose=X)


def test_scaled_and_immutable(model):
    rng = np.random.default_rng(15)
    X, Xd, Xdd, _ = random_state(model, rng)
    heavy = model.scaled(1.1)
    arm = model.drive.armature
    Ldd = model.leg_kinematics(X, Xd, Xdd).accelerations
    # forces without armature scale linearly with mass when inertias scale the same
    f0 = model.task_inverse_dynamics(X, Xd, Xdd) - arm * Ldd
    f1 = heavy.task_inverse_dynamics(X, Xd, Xdd) - arm * Ldd
    np.testing.assert_allclose(f1, 1.1 * f0, rtol=1e-12)
    assert heavy.limits is model.limits
    legs, plat = model.packed_parameters
    with pytest.raises(ValueError):
        legs[0, 0] = 1.0
    with pytest.raises(ModelError):
        model.scaled(-1.0)


def test_bad_dynamic_input(model):
    X = model.home_pose
    with pytest.raises(ModelError):
        model.task_inverse_dynamics(X, np.zeros(6), np.full(6, np.nan))
    with pytest.raises(ModelError):
        model.task_inverse_dynamics(X, np.zeros(5), np.zeros(6))
    with pytest.raises(ModelError):
        model.task_inverse_dynamics(np.zeros((3, 6)) + X, np.zeros((2, 6)), np.zeros(6))
    with pytest.raises(ModelError):
        model.inverse_dynamics(model.leg_lengths(X), np.zeros(6), np.zeros(6), wrench=[1.0, 2.0])
    with pytest.raises(ModelError):
        model.inverse_dynamics(model.leg_lengths(X), np.zeros(6), np.zeros(7), pose=X)
    with pytest.raises(ModelError):
        model.forward_dynamics(model.leg_lengths(X), np.zeros(6), np.full(6, np.inf), pose=X)
    with pytest.raises(ModelError):
        model.forward_dynamics_task(X, np.zeros(6), np.zeros(4))
    # integer input is accepted (converted), not compiled for
    np.testing.assert_allclose(model.task_inverse_dynamics(np.array([0, 0, 1, 0, 0, 0]), np.zeros(6, int),
                                                           np.zeros(6, int)),
                               model.task_inverse_dynamics(np.array([0.0, 0, 1, 0, 0, 0]), np.zeros(6), np.zeros(6)))


def _leg_frames(m, X):
    """Leg unit vectors, lengths and universal-joint leg frames [x_l, y_l, u] (6, 3, 3) at pose X."""
    kin = m.leg_kinematics(X)
    u = kin.units
    xl = np.cross(u, m.ujoint_axes)
    xl /= np.linalg.norm(xl, axis=1)[:, None]
    yl = np.cross(u, xl)
    return kin.lengths, u, np.stack([xl, yl, u], axis=2)


def test_kinetic_energy_brute_force(gmodel):
    """T from the Lagrangian equals sum 1/2 m v^2 + 1/2 w^T I w with v, w by finite differences of every
    body's position and orientation (independent of the leg angular-velocity formula)."""
    m = gmodel
    legs, plat = m.packed_parameters
    X0 = m.home_pose
    h = 1e-6
    for t in (0.2, 1.4):
        X, Xd, _ = trajectory(X0, t)
        Xp, Xm = trajectory(X0, t + h)[0], trajectory(X0, t - h)[0]
        T = 0.0
        # platform
        Rp_, Rm_, R = (m.forward_kinematics(m.leg_lengths(x), pose=x)[:3, :3] for x in (Xp, Xm, X))
        cp, cm = Xp[:3] + Rp_ @ plat[1:4], Xm[:3] + Rm_ @ plat[1:4]
        W = (Rp_ - Rm_) / (2 * h) @ R.T
        w = np.array([W[2, 1], W[0, 2], W[1, 0]])
        v = (cp - cm) / (2 * h)
        T += 0.5 * plat[0] * v @ v + 0.5 * w @ (R @ plat[4:13].reshape(3, 3) @ R.T) @ w
        Lp, up, RLp = _leg_frames(m, Xp)
        Lm, um, RLm = _leg_frames(m, Xm)
        L0, u0, RL0 = _leg_frames(m, X)
        for i in range(6):
            b, m1, S1, m2, S2 = legs[i, 0:3], legs[i, 9], legs[i, 10], legs[i, 20], legs[i, 21]
            v1 = S1 * (up[i] - um[i]) / (2 * h)
            v2 = ((Lp[i] - S2) * up[i] - (Lm[i] - S2) * um[i]) / (2 * h)
            W = (RLp[i] - RLm[i]) / (2 * h) @ RL0[i].T
            w = np.array([W[2, 1], W[0, 2], W[1, 0]])
            I = RL0[i] @ (legs[i, 11:20] + legs[i, 22:31]).reshape(3, 3) @ RL0[i].T
            T += 0.5 * m1 * v1 @ v1 + 0.5 * m2 * v2 @ v2 + 0.5 * w @ I @ w
            Ld = (Lp[i] - Lm[i]) / (2 * h)
            T += 0.5 * legs[i, 31] * Ld ** 2
        assert abs(T - m.task_kinetic_energy(X, Xd)) < 1e-8 * T


def test_leg_mass_matches_errata_form_without_spin(model):
    """Where the universal joint axis is perpendicular to the leg (no spin), the leg inertia is the
    ERRATA form m2 u u^T - m_eq [u]x^2 - [u]x I_w [u]x / L^2 with m_eq = (m1 S1^2 + m2 (L - S2)^2) / L^2."""
    legs, _ = model.packed_parameters
    X = model.home_pose           # default axes are perpendicular to the legs here
    L, u, RL = _leg_frames(model, X)
    kin = model.leg_kinematics(X)
    for i in range(6):
        x = X[:3] + kin.platform_joints[i]
        m1, S1, m2, S2 = legs[i, 9], legs[i, 10], legs[i, 20], legs[i, 21]
        Sx = LG.skew(u[i])
        Iw = RL[i] @ (legs[i, 11:20] + legs[i, 22:31]).reshape(3, 3) @ RL[i].T
        meq = (m1 * S1 ** 2 + m2 * (L[i] - S2) ** 2) / L[i] ** 2
        expected = m2 * np.outer(u[i], u[i]) - meq * Sx @ Sx - Sx @ Iw @ Sx / L[i] ** 2
        np.testing.assert_allclose(LG.leg_mass(x, legs[i]), expected, rtol=1e-13, atol=1e-15)


def test_leg_gravity_is_potential_gradient(gmodel):
    """Corrected eq. 11/23: G_Li = dV_Li/dx_L (complex-step gradient of the leg potential)."""
    legs, plat = gmodel.packed_parameters
    g = plat[13:16]
    X = gmodel.home_pose + np.array([0.02, 0.03, -0.05, 0.1, -0.08, 0.3])
    kin = gmodel.leg_kinematics(X)
    for i in range(6):
        x = X[:3] + kin.platform_joints[i]
        grad = np.array([LG.leg_potential(x + 1e-30j * e, legs[i], g).imag / 1e-30 for e in np.eye(3)])
        np.testing.assert_allclose(LG.leg_gravity(x, legs[i], g), grad, rtol=1e-13, atol=1e-13)
