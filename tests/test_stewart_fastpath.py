"""Stewart platform one-state fast paths (numba ``*_one`` kernels) against the checked paths.

Every per-cycle call in leg coordinates with a pose hint takes a compiled fast path when its
arguments are 1-D float64 arrays; lists (or batches) take the checked numpy path.  Both must give
the same result (to 1e-10), the same errors, and fall back correctly when the cheap conditioning
bound of the fast path is not conclusive.
"""

from pathlib import Path

import numpy as np
import pytest

from dynamics import load_model
from dynamics import _stewart_kernels as K
from dynamics import _stewart_lagrange as LG
from dynamics.errors import ConvergenceError, ModelError, SingularityError
from dynamics.stewart import StewartPlatform

from test_stewart_dynamics import SPREAD, general_model

ROBOT = Path(__file__).resolve().parents[1] / "hil_configs" / "robots" / "stewart.toml"


@pytest.fixture(scope="module")
def models():
    return {"file": load_model(ROBOT), "general": general_model(seed=3)}


def with_condition(m: StewartPlatform, cond: float) -> StewartPlatform:
    """The same model with another ``singular_condition``."""
    legs, plat = m.packed_parameters
    return StewartPlatform(
        base_joints=legs[:, K.LEG_B], platform_joints=legs[:, K.LEG_P], ujoint_axes=legs[:, K.LEG_A],
        lower_mass=legs[:, K.LEG_M1], lower_com=legs[:, K.LEG_S1], lower_inertia=legs[:, K.LEG_I1].reshape(6, 3, 3),
        upper_mass=legs[:, K.LEG_M2], upper_com=legs[:, K.LEG_S2], upper_inertia=legs[:, K.LEG_I2].reshape(6, 3, 3),
        platform_mass=plat[K.PL_M], platform_com=plat[K.PL_C], platform_inertia=plat[K.PL_I].reshape(3, 3),
        gravity=plat[K.PL_G], limits=m.limits, drive=m.drive, home_pose=m.home_pose, name=m.name,
        singular_condition=cond)


def states(m, seed, n=6):
    """(X, q, qd, qdd, hint): a consistent state and a nearby pose hint (Newton takes steps)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        X = m.home_pose + SPREAD * rng.uniform(-1, 1, 6)
        kin = m.leg_kinematics(X, rng.normal(size=6) * 0.3, rng.normal(size=6) * 3)
        hint = X + 1e-3 * rng.normal(size=6)
        out.append((X, kin.lengths, kin.rates, kin.accelerations, hint))
    return out


def close(a, b, tol=1e-10):
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    assert a.shape == b.shape
    scale = max(float(np.max(np.abs(b))), 1e-300)
    assert float(np.max(np.abs(a - b))) <= tol * scale, (a, b)


@pytest.mark.parametrize("which", ["file", "general"])
def test_fast_equals_checked(models, which):
    """Parity test (the compiled paths against the checked ones, on the same model); the
    independent check is ``test_fast_matches_independent_references``."""
    m = models[which]
    for X, q, qd, qdd, hint in states(m, 1):
        L = list  # lists take the checked path
        close(m.forward_kinematics_task(q, guess=hint), X, 1e-9)   # leg lengths to 1e-12 m
        close(m.forward_kinematics_task(q, guess=hint), m.forward_kinematics_task(L(q), guess=L(hint)), 1e-14)
        close(m.forward_kinematics_task(q), m.forward_kinematics_task(L(q)), 1e-14)
        for pose in (hint, X, None):
            P = None if pose is None else L(pose)
            close(m.mass_matrix(q, pose=pose), m.mass_matrix(L(q), pose=P))
            close(m.bias(q, qd, pose=pose), m.bias(L(q), L(qd), pose=P))
            close(m.gravity(q, pose=pose), m.gravity(L(q), pose=P))
            close(m.inverse_dynamics(q, qd, qdd, pose=pose), m.inverse_dynamics(L(q), L(qd), L(qdd), pose=P))
            F = m.inverse_dynamics(q, qd, qdd, pose=pose)
            close(m.forward_dynamics(q, qd, F, pose=pose), m.forward_dynamics(L(q), L(qd), L(F), pose=P))
            close(m.kinetic_energy(q, qd, pose=pose), m.kinetic_energy(L(q), L(qd), pose=P))
            close(m.potential_energy(q, pose=pose), m.potential_energy(L(q), pose=P))
            close(m.jacobian(q, pose=pose), m.jacobian(L(q), pose=P))
            close(m.coriolis_matrix(q, qd, pose=pose), m.coriolis_matrix(L(q), L(qd), pose=P))
            close(m.mass_matrix_derivative(q, qd, pose=pose), m.mass_matrix_derivative(L(q), L(qd), pose=P))
        close(m.task_jacobian(q, X), m.task_jacobian(L(q), L(X)))
        r_fast, r_slow = m.singularity(q, X), m.singularity(L(q), L(X))
        assert r_fast.kind == r_slow.kind == "regular"
        for f in ("det_a", "det_b", "cond_a", "cond_b", "margin"):
            close(getattr(r_fast, f), getattr(r_slow, f))
        assert r_fast.extra.keys() == r_slow.extra.keys()
        for k in r_fast.extra:
            close(r_fast.extra[k], r_slow.extra[k])


def test_fast_kernels_take_regular_states(models):
    """The one-state kernels accept regular states themselves (the fast path is really taken)."""
    for m in models.values():
        p = m._params   # the model's private packed parameters, as the methods pass them
        for X, q, qd, qdd, hint in states(m, 6, n=3):
            v, M, one = np.empty(6), np.empty((6, 6)), np.empty(3)
            assert K.fk_one(q, hint, p, 1e-12, 50, v) == K.OK
            assert K.mass_one(q, hint, p, M) == K.OK
            assert K.bias_one(q, qd, hint, p, v) == K.OK
            assert K.gravity_one(q, hint, p, v) == K.OK
            assert K.joint_id_one(q, qd, qdd, hint, p, v) == K.OK
            assert K.joint_fd_one(q, qd, qdd, hint, p, v) == K.OK
            assert K.kinetic_one(q, qd, hint, p, one) == K.OK
            assert K.potential_one(q, hint, p, one) == K.OK
            assert K.jacobian_one(q, hint, p, M) == K.OK
            assert K.task_jacobian_one(q, X, p, M) == K.OK
            assert K.singularity_one(q, X, p, one) == K.OK
            assert K.coriolis_one(q, qd, hint, p, M) == K.OK
            assert K.mass_derivative_one(q, qd, hint, p, M) == K.OK
            with pytest.raises(TypeError):
                K.mass_one(q.astype(np.float32), hint, p, M)
            assert K.mass_one(q[:5].copy(), hint, p, M) == K.BAD_INPUT


@pytest.mark.parametrize("which", ["file", "general"])
def test_fast_matches_independent_references(models, which):
    """Results against the Lagrange reference and numpy, not against the same kernels."""
    m = models[which]
    legs, plat = m.packed_parameters
    for X, q, qd, qdd, hint in states(m, 2, n=4):
        M = m.mass_matrix(q, pose=hint)
        close(M, LG.mass_matrix_actuated(X, legs, plat), 1e-10)
        Xd = np.linalg.solve(m.leg_jacobian(X, "euler"), qd)
        close(m.kinetic_energy(q, qd, pose=hint), LG.kinetic_energy(X, Xd, legs, plat), 1e-10)
        close(m.potential_energy(q, pose=hint), LG.potential_energy(X, legs, plat), 1e-10)
        Je = m.leg_jacobian(X, "euler")
        close(m.task_jacobian(q, X), np.linalg.inv(Je), 1e-10)
        close(m.jacobian(q, pose=hint), np.linalg.inv(m.leg_jacobian(X)), 1e-10)
        # bias = inverse dynamics at zero acceleration through the task-space formulation
        close(m.bias(q, qd, pose=hint), m.task_inverse_dynamics(X, Xd, task_acc_at_zero_qdd(m, X, Xd)), 1e-9)
        close(m.gravity(q, pose=hint), m.task_inverse_dynamics(X, np.zeros(6), np.zeros(6)), 1e-10)
        # dM/dt by central differences of the fast mass matrix along the motion
        h = 1e-6
        Md_fd = (m.mass_matrix(q + h * qd, pose=X) - m.mass_matrix(q - h * qd, pose=X)) / (2 * h)
        close(m.mass_matrix_derivative(q, qd, pose=hint), Md_fd, 1e-6)
        C = m.coriolis_matrix(q, qd, pose=hint)
        close(C @ qd, m.bias(q, qd, pose=hint) - m.gravity(q, pose=hint), 1e-9)
        N = m.mass_matrix_derivative(q, qd, pose=hint) - 2 * C
        assert np.abs(N + N.T).max() <= 1e-10 * np.abs(C).max()
        Jh = m.leg_jacobian(X).copy()
        Jh[:, 3:] /= m.singularity(q, X).extra["char_length_m"]
        rep = m.singularity(q, X)
        close(rep.cond_b, np.linalg.cond(Jh), 1e-10)
        close(rep.det_b, np.linalg.det(m.leg_jacobian(X)), 1e-10)


def task_acc_at_zero_qdd(m, X, Xd):
    """Euler accelerations Xdd with zero leg accelerations at (X, Xd) (by the leg kinematics)."""
    Je = m.leg_jacobian(X, "euler")
    # L'' = Je Xdd + (L'' at Xdd = 0) = 0
    Ldd0 = m.leg_kinematics(X, Xd, np.zeros(6)).accelerations
    return np.linalg.solve(Je, -Ldd0)


def test_inputs_that_skip_or_fail_the_fast_path(models):
    m = models["file"]
    X, q, qd, qdd, hint = states(m, 4, n=1)[0]
    M = m.mass_matrix(q, pose=hint)
    # strided, read-only, integer-typed or batch arrays give the same results through the checked path
    qs = np.empty(12)
    qs[::2] = q
    close(m.mass_matrix(qs[::2], pose=hint), M, 1e-14)
    ro = np.array(hint)
    ro.setflags(write=False)
    close(m.mass_matrix(q, pose=ro), M, 1e-14)
    close(m.mass_matrix(q[None], pose=hint[None])[0], M, 1e-10)
    close(m.forward_kinematics_task(q, guess=hint, tol=np.float64(1e-12), max_iter=np.int64(50)), X, 1e-9)
    # non-finite inputs raise ModelError (the fast kernels reject them instead of ignoring them)
    bad = q.copy()
    bad[2] = np.nan
    for call in (lambda: m.mass_matrix(bad, pose=hint), lambda: m.bias(bad, qd, pose=hint),
                 lambda: m.gravity(bad, pose=hint), lambda: m.inverse_dynamics(bad, qd, qdd, pose=hint),
                 lambda: m.forward_dynamics(bad, qd, qd, pose=hint), lambda: m.kinetic_energy(bad, qd, pose=hint),
                 lambda: m.potential_energy(bad, pose=hint), lambda: m.jacobian(bad, pose=hint),
                 lambda: m.forward_kinematics_task(bad, guess=hint), lambda: m.task_jacobian(bad, X),
                 lambda: m.singularity(bad, X), lambda: m.coriolis_matrix(bad, qd, pose=hint),
                 lambda: m.mass_matrix(q, pose=np.full(6, np.nan))):
        with pytest.raises(ModelError):
            call()
    with pytest.raises(ModelError):
        m.mass_matrix(q[:5], pose=hint)
    # Newton failure is reported by the checked path
    with pytest.raises(ConvergenceError):
        m.forward_kinematics_task(q, guess=hint + 0.05, max_iter=0)
    with pytest.raises(ConvergenceError):
        m.mass_matrix(q * np.array([1, 1, 1, 1, 1, 10.0]), pose=hint)   # no pose has these lengths


def test_conditioning_fallback(models):
    """Between the exact condition number and its Frobenius bound the checked path decides."""
    m = models["general"]
    X, q, qd, qdd, hint = states(m, 5, n=1)[0]
    cond = m.singularity(q, X).cond_b
    J, Ji = m.leg_jacobian(X), np.linalg.inv(m.leg_jacobian(X))
    c = m.singularity(q, X).extra["char_length_m"]
    D = np.diag([1, 1, 1, 1 / c, 1 / c, 1 / c])
    bound = np.linalg.norm(J @ D) * np.linalg.norm(np.linalg.inv(D) @ Ji)
    assert bound > 1.05 * cond
    between = with_condition(m, 0.5 * (cond + bound))   # fast path inconclusive, map defined
    below = with_condition(m, 0.99 * cond)               # map must raise
    for mm, ok in ((between, True), (below, False)):
        calls = {"mass_matrix": (lambda: mm.mass_matrix(q, pose=hint), lambda: m.mass_matrix(q, pose=hint)),
                 "kinetic_energy": (lambda: mm.kinetic_energy(q, qd, pose=hint),
                                    lambda: m.kinetic_energy(q, qd, pose=hint)),
                 "jacobian": (lambda: mm.jacobian(q, pose=hint), lambda: m.jacobian(q, pose=hint)),
                 "task_jacobian": (lambda: mm.task_jacobian(q, X), lambda: m.task_jacobian(q, X))}
        for name, (got, want) in calls.items():
            if ok:
                close(got(), want())
            else:
                with pytest.raises(SingularityError, match="condition number"):
                    got()
        rep = mm.singularity(q, X)
        assert rep.kind == ("regular" if ok else "type2")
        # maps without a conditioning check are unaffected
        close(mm.bias(q, qd, pose=hint), m.bias(q, qd, pose=hint))
        close(mm.potential_energy(q, pose=hint), m.potential_energy(q, pose=hint))


def test_fast_paths_at_the_singularity(models):
    """Fichter's singularity (yaw 90 deg): the fast paths defer to the checked path's errors."""
    m = models["file"]
    X = np.array([0.0, 0.0, 0.9, 0.0, 0.0, np.pi / 2])
    q = m.leg_lengths(X)
    z = np.zeros(6)
    for call in (lambda: m.mass_matrix(q, pose=X), lambda: m.task_jacobian(q, X),
                 lambda: m.jacobian(q, pose=X), lambda: m.kinetic_energy(q, z, pose=X),
                 lambda: m.bias(q, z, pose=X), lambda: m.forward_dynamics(q, z, z, pose=X)):
        with pytest.raises(SingularityError):
            call()
    rep = m.singularity(q, X)
    slow = m.singularity(list(q), list(X))
    assert rep.kind == slow.kind == "type2" and rep.margin < 1e-9 and slow.margin < 1e-9
    # Euler-angle singularity: task_jacobian raises, jacobian (twist) does not care
    Xb = np.array([0.0, 0.0, 0.9, 0.0, np.pi / 2, 0.0])
    qb = m.leg_lengths(Xb)
    with pytest.raises(SingularityError, match="Euler"):
        m.task_jacobian(qb, Xb)


def test_kinematic_helpers_fast_equals_checked(models):
    """leg_kinematics, leg_lengths, rotation_matrix and euler_rate_matrix: compiled == numpy paths."""
    from dynamics.stewart import euler_rate_matrix, rotation_matrix

    rng = np.random.default_rng(7)
    for m in models.values():
        for X, q, qd, qdd, _ in states(m, 8, n=3):
            Xd, Xdd = rng.normal(size=6), rng.normal(size=6)
            close(m.leg_lengths(X), m.leg_lengths(list(X)), 1e-14)
            close(m.leg_lengths(X), q, 1e-14)
            for args in ((X,), (X, Xd), (X, Xd, Xdd)):
                fast = m.leg_kinematics(*args)
                slow = m.leg_kinematics(*(list(a) for a in args))
                for f in ("vectors", "lengths", "units", "platform_joints", "rates", "accelerations"):
                    a, b = getattr(fast, f), getattr(slow, f)
                    if b is None:
                        assert a is None
                    else:
                        close(a, b, 1e-12)
                        assert a.flags.c_contiguous   # usable by the other fast paths
            e = X[3:]
            close(rotation_matrix(e), LG.rot(e), 1e-15)
            close(euler_rate_matrix(e), LG.euler_E(e), 1e-15)
            close(rotation_matrix(e), rotation_matrix(list(e)), 1e-15)
    with pytest.raises(ModelError):
        models["file"].leg_kinematics(np.array([0, 0, np.nan, 0, 0, 0.0]))
    with pytest.raises(ModelError):
        models["file"].leg_lengths(np.array([0, 0, np.inf, 0, 0, 0.0]))
