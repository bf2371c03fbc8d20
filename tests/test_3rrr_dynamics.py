"""Dynamics of the planar 3RRR model: two inverse-dynamics formulations, the paper's App. B
(corrected), reduced dynamics, power balance, skew symmetry, forward dynamics, scaling, batches."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dynamics import load_model
from dynamics.errors import UnreachableError
from dynamics.planar3rrr import LinkParams, Planar3RRR

ROBOTS = Path(__file__).resolve().parents[1] / "hil_configs" / "robots"


@pytest.fixture(scope="module", params=["3rrr_vertical.toml", "3rrr_horizontal.toml"])
def model(request):
    return load_model(ROBOTS / request.param)


@pytest.fixture(scope="module")
def asym_model():
    """An asymmetric robot: per-leg parameters, off-centre masses, tilted gravity, armature."""
    A = np.array([[0.02, 0.55], [-0.45, -0.2], [0.5, -0.3]])
    c = np.array([[0.0, 0.12], [-0.09, -0.05], [0.1, -0.06]])
    prox = LinkParams(np.array([0.3, 0.32, 0.28]), np.array([0.4, 0.5, 0.35]),
                      np.array([0.1, 0.2, 0.14]), np.array([0.003, 0.004, 0.002]))
    dist = LinkParams(np.array([0.3, 0.29, 0.31]), np.array([0.3, 0.25, 0.35]),
                      np.array([0.12, 0.17, 0.2]), np.array([0.002, 0.0015, 0.003]))
    from dynamics.base import DriveParams
    drive = DriveParams(np.array([0.002, 0.003, 0.001]), np.zeros(3), np.zeros(3))
    return Planar3RRR(A, c, prox, dist, 0.6, 0.003, gravity=(1.2, -9.7), elbow_branch=(1, -1, 1),
                      home_pose=(0.01, 0.0, 0.05), drive=drive, name="asym")


def random_task_states(model, rng, n, margin=0.2):
    out = []
    while len(out) < n:
        X = model.home_pose + rng.uniform([-0.08, -0.08, -0.4], [0.08, 0.08, 0.4])
        try:
            q = model.inverse_kinematics(X)
        except UnreachableError:
            continue
        rep = model.singularity(q, X)
        if rep.extra["type1_measure"] > margin and abs(rep.extra["type2_measure"]) > margin:
            out.append((X, rng.normal(scale=0.5, size=3) * [1, 1, 3], rng.normal(scale=2.0, size=3) * [1, 1, 5],
                        rng.normal(size=3) * [5, 5, 0.5]))
    return out


def _rel(a, b):
    return np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-12)


@pytest.mark.parametrize("which", ["file", "asym"])
def test_two_formulations_agree(model, asym_model, which):
    m = model if which == "file" else asym_model
    rng = np.random.default_rng(10)
    for X, Xd, Xdd, W in random_task_states(m, rng, 40):
        r = m.task_inverse_dynamics(X, Xd, Xdd, W, full=True)
        tau2, lam2 = m.task_inverse_dynamics_multipliers(X, Xd, Xdd, W)
        assert _rel(r["tau"], tau2) < 1e-9
        assert _rel(r["lam"], lam2) < 1e-9
        # the other branch too
        br = -m.elbow_branch
        try:
            t1 = m.task_inverse_dynamics(X, Xd, Xdd, W, branch=br)
        except Exception:  # other branch may be singular/unreachable here; skip only that case
            continue
        t2, _ = m.task_inverse_dynamics_multipliers(X, Xd, Xdd, W, branch=br)
        assert _rel(t1, t2) < 1e-9


def test_matches_corrected_appendix_b():
    """Seed 001 App. B (B.3)-(B.8) with the ERRATA fixes, coded literally, for uniform rods."""
    a, bl, l = 0.25, 0.3, 0.1
    ma, mb, mp, Ip = 0.45, 0.3, 0.8, 0.004
    base_ang = np.radians([80.0, 200.0, 320.0])
    xB = 0.5 * np.cos(base_ang)
    yB = 0.5 * np.sin(base_ang)
    plat_ang = np.radians([100.0, 220.0, 340.0])
    m = Planar3RRR(np.stack([xB, yB], 1), l * np.stack([np.cos(plat_ang), np.sin(plat_ang)], 1),
                   LinkParams(np.full(3, a), np.full(3, ma), np.full(3, a / 2), np.full(3, ma * a ** 2 / 12)),
                   LinkParams(np.full(3, bl), np.full(3, mb), np.full(3, bl / 2), np.full(3, mb * bl ** 2 / 12)),
                   mp, Ip, gravity=(0.0, 0.0), elbow_branch=(1, 1, 1), home_pose=(0.0, 0.0, 0.0))
    alpha = plat_ang + np.pi  # measured from the platform joint towards the centre (ERRATA)
    rng = np.random.default_rng(11)
    for X, Xd, Xdd, F in random_task_states(m, rng, 20):
        x, y, phi = X
        xd, yd, phid = Xd
        xdd, ydd, phidd = Xdd
        th = m.inverse_kinematics(X)
        thd = m.joint_velocity(th, X, Xd)
        thdd = m.joint_acceleration(th, X, Xd, Xdd)
        s, c = np.sin(th), np.cos(th)
        ap = alpha + phi
        # coefficient rows of the multipliers in (B.3)-(B.5)
        r3 = 2 * (x - xB - a * c - l * np.cos(ap))
        r4 = 2 * (y - yB - a * s - l * np.sin(ap))
        r5 = 2 * l * ((x - xB) * np.sin(ap) - (y - yB) * np.cos(ap) - a * np.sin(ap - th))
        rhs3 = (mb + mp) * xdd * 1.0 + mb / 3 * np.sum(l * np.sin(ap) * phidd + l * np.cos(ap) * phid ** 2) \
            - a * mb / 6 * np.sum(s * thdd + c * thd ** 2) - F[0]
        rhs4 = (mb + mp) * ydd - mb / 3 * np.sum(l * np.cos(ap) * phidd - l * np.sin(ap) * phid ** 2) \
            + a * mb / 6 * np.sum(c * thdd - s * thd ** 2) - F[1]          # ERRATA: + not -
        rhs5 = (3 * l ** 2 * mb / 3 + Ip) * phidd \
            + mb / 3 * np.sum(l * np.sin(ap) * xdd - l * np.cos(ap) * ydd) \
            - a * mb / 6 * np.sum(l * (np.cos(ap - th) * thdd + np.sin(ap - th) * thd ** 2)) - F[2]  # ERRATA
        # (B.3)-(B.5) are written with (m_b + m_p) = platform + 3 * (m_b / 3)
        lam = np.linalg.solve(np.array([r3, r4, r5]), np.array([rhs3, rhs4, rhs5]))
        tau = (ma + mb) * a ** 2 / 3 * thdd \
            - a * mb / 6 * (xdd * s - ydd * c + l * np.cos(ap - th) * phidd) \
            + a * mb / 6 * l * np.sin(ap - th) * phid ** 2 \
            - 2 * lam * a * ((x - xB) * s - (y - yB) * c + l * np.sin(ap - th))
        tau1 = m.task_inverse_dynamics(X, Xd, Xdd, F)
        tau2, lam2 = m.task_inverse_dynamics_multipliers(X, Xd, Xdd, F)
        assert _rel(tau1, tau) < 1e-9
        assert _rel(tau2, tau) < 1e-9
        assert _rel(lam2, lam) < 1e-9


def test_reduced_dynamics_consistent_with_task_inverse_dynamics(model, asym_model):
    rng = np.random.default_rng(12)
    for m in (model, asym_model):
        for X, Xd, Xdd, W in random_task_states(m, rng, 20):
            r = m.task_inverse_dynamics(X, Xd, Xdd, W, full=True)
            q, qd, qdd = r["q"], r["qd"], r["qdd"]
            M = m.mass_matrix(q, pose=X)
            h = m.bias(q, qd, pose=X)
            J = m.jacobian(q, pose=X)
            W6 = np.array([W[0], W[1], 0.0, 0.0, 0.0, W[2]])
            np.testing.assert_allclose(M @ qdd + h - J.T @ W6, r["tau"], rtol=1e-9, atol=1e-9)
            np.testing.assert_allclose(m.inverse_dynamics(q, qd, qdd, W, pose=X), r["tau"], rtol=1e-9, atol=1e-9)
            np.testing.assert_allclose(m.inverse_dynamics(q, qd, qdd, W6, pose=X), r["tau"], rtol=1e-9,
                                       atol=1e-9)
            # without a pose hint: FK by continuation from home finds the home's assembly mode
            # (sign of det B); it is X itself when X lies in that mode
            home_sign = np.sign(m.singularity(m.home_q, m.home_pose).extra["type2_measure"])
            if np.sign(m.singularity(q, X).extra["type2_measure"]) == home_sign:
                np.testing.assert_allclose(m.inverse_dynamics(q, qd, qdd, W), r["tau"], rtol=1e-9, atol=1e-9)
                np.testing.assert_allclose(m.forward_kinematics_task(q), X, atol=1e-12)
            else:
                Xf = m.forward_kinematics_task(q)
                assert np.sign(m.singularity(q, Xf).extra["type2_measure"]) == home_sign
                assert np.max(np.abs(m.constraints(q, Xf))) < 1e-12
            # forward dynamics inverts inverse dynamics, and Xdd comes back too
            qdd2, Xdd2, X2 = m.forward_dynamics_task(q, qd, r["tau"], W, pose=X)
            np.testing.assert_allclose(qdd2, qdd, rtol=1e-8, atol=1e-8)
            np.testing.assert_allclose(Xdd2, Xdd, rtol=1e-8, atol=1e-8)
            np.testing.assert_allclose(X2, X, atol=1e-13)
            # M symmetric positive definite; C qd + g == h; gravity
            np.testing.assert_allclose(M, M.T, atol=1e-14)
            assert np.all(np.linalg.eigvalsh(M) > 0)
            C = m.coriolis_matrix(q, qd, pose=X)
            g = m.gravity(q, pose=X)
            np.testing.assert_allclose(C @ qd + g, h, rtol=1e-10, atol=1e-12)
            # T = 1/2 qd^T M qd (kinetic energy computed from the body velocities)
            np.testing.assert_allclose(m.kinetic_energy(q, qd, pose=X), 0.5 * qd @ M @ qd, rtol=1e-12)
            # g = dV/dq by finite differences
            e = 1e-5

            def V(dq):
                return m.potential_energy(q + dq, pose=X)

            gfd = np.array([(V(-2 * e * ek) - 8 * V(-e * ek) + 8 * V(e * ek) - V(2 * e * ek)) / (12 * e)
                            for ek in np.eye(3)])
            np.testing.assert_allclose(g, gfd, rtol=1e-7, atol=1e-7)


def test_mdot_minus_2c_is_skew(model, asym_model):
    rng = np.random.default_rng(13)
    for m in (model, asym_model):
        for X, Xd, _, _ in random_task_states(m, rng, 10):
            q = m.inverse_kinematics(X)
            qd = m.joint_velocity(q, X, Xd)
            e = 1e-5
            Mp = m.mass_matrix(q + e * qd, pose=X)
            Mm = m.mass_matrix(q - e * qd, pose=X)
            Mp2 = m.mass_matrix(q + 2 * e * qd, pose=X)
            Mm2 = m.mass_matrix(q - 2 * e * qd, pose=X)
            Mdot = (Mm2 - 8 * Mm + 8 * Mp - Mp2) / (12 * e)
            S = Mdot - 2 * m.coriolis_matrix(q, qd, pose=X)
            scale = np.max(np.abs(Mdot)) + 1e-12
            assert np.max(np.abs(S + S.T)) / scale < 1e-7
            # and not trivially zero
            assert np.max(np.abs(S)) / scale > 1e-3


def test_power_balance_along_a_trajectory(model, asym_model):
    """sum(tau * qd) + w . Xd = d(T + V)/dt along a smooth platform motion (numeric d/dt)."""
    for m in (model, asym_model):
        X0 = m.home_pose
        amp = np.array([0.03, 0.02, 0.2])
        w = np.array([2.0, 3.0, 1.5])
        W = np.array([1.0, -2.0, 0.1])

        def path(t):
            X = X0 + amp * np.sin(w * t)
            Xd = amp * w * np.cos(w * t)
            Xdd = -amp * w ** 2 * np.sin(w * t)
            return X, Xd, Xdd

        def energy(t):
            X, Xd, _ = path(t)
            T, V = m.task_energy(X, Xd)
            return T + V

        h = 1e-3
        for t in np.linspace(0.0, 3.0, 13):
            X, Xd, Xdd = path(t)
            r = m.task_inverse_dynamics(X, Xd, Xdd, W, full=True)
            power = r["tau"] @ r["qd"] + W @ Xd
            dE = (energy(t - 2 * h) - 8 * energy(t - h) + 8 * energy(t + h) - energy(t + 2 * h)) / (12 * h)
            scale = np.sum(np.abs(r["tau"] * r["qd"])) + np.sum(np.abs(W * Xd)) + 1e-3
            assert abs(power - dE) / scale < 1e-6, (t, power, dE)


def test_scaled_model(model):
    X = model.home_pose + np.array([0.02, 0.01, 0.1])
    Xd = np.array([0.1, -0.2, 0.5])
    Xdd = np.array([1.0, 0.5, -2.0])
    s = model.scaled(1.1)
    # without armature the torques would scale exactly; with it, compare the parts
    tau = model.task_inverse_dynamics(X, Xd, Xdd)
    tau_s = s.task_inverse_dynamics(X, Xd, Xdd)
    q = model.inverse_kinematics(X)
    qdd = model.joint_acceleration(q, X, Xd, Xdd)
    arm = model.drive.armature
    np.testing.assert_allclose(tau_s - arm * qdd, 1.1 * (tau - arm * qdd), rtol=1e-10, atol=1e-12)
    s2 = model.scaled(1.0, 2.0)
    assert s2.proximal.inertia[0] == 2 * model.proximal.inertia[0]
    assert s2.proximal.mass[0] == model.proximal.mass[0]
    assert s.name == model.name and s is not model
    # the model is immutable
    with pytest.raises(ValueError):
        model.proximal.mass[0] = 1.0


def test_batch_forms(model):
    rng = np.random.default_rng(14)
    states = random_task_states(model, rng, 4)
    X = np.array([s[0] for s in states])
    Xd = np.array([s[1] for s in states])
    Xdd = np.array([s[2] for s in states])
    tau = model.task_inverse_dynamics(X, Xd, Xdd)
    assert tau.shape == (4, 3)
    Q = model.inverse_kinematics(X)
    Qd = np.array([model.joint_velocity(Q[j], X[j], Xd[j]) for j in range(4)])
    Qdd = np.array([model.joint_acceleration(Q[j], X[j], Xd[j], Xdd[j]) for j in range(4)])
    np.testing.assert_allclose(model.inverse_dynamics(Q, Qd, Qdd, pose=X), tau, rtol=1e-9, atol=1e-10)
    M = model.mass_matrix(Q, pose=X)
    assert M.shape == (4, 3, 3)
    np.testing.assert_allclose(M[2], model.mass_matrix(Q[2], pose=X[2]))
    assert model.bias(Q, Qd, pose=X).shape == (4, 3)
    assert model.coriolis_matrix(Q, Qd, pose=X).shape == (4, 3, 3)
    assert model.gravity(Q, pose=X).shape == (4, 3)
    assert model.kinetic_energy(Q, Qd, pose=X).shape == (4,)
    assert model.potential_energy(Q, pose=X).shape == (4,)
    assert model.jacobian(Q, pose=X).shape == (4, 6, 3)
    np.testing.assert_allclose(model.forward_dynamics(Q, Qd, tau, pose=X), Qdd, rtol=1e-8, atol=1e-8)
    for j in range(4):
        assert model.task_inverse_dynamics(X[j], Xd[j], Xdd[j]) == pytest.approx(tau[j], rel=1e-14)


def test_gravity_holds_static_platform(model):
    """Static torques balance gravity: with Xd = Xdd = 0 the torques equal g(q)."""
    X = model.home_pose + np.array([0.01, -0.02, 0.05])
    q = model.inverse_kinematics(X)
    tau = model.task_inverse_dynamics(X, np.zeros(3), np.zeros(3))
    np.testing.assert_allclose(tau, model.gravity(q, pose=X), rtol=1e-10, atol=1e-12)
    if np.all(model.gravity_vector == 0):
        np.testing.assert_allclose(tau, 0.0, atol=1e-14)
    else:
        assert np.max(np.abs(tau)) > 0.1
    # a pure platform force is balanced by -J_x^T w in the static case
    W = np.array([3.0, -1.0, 0.2])
    tauW = model.task_inverse_dynamics(X, np.zeros(3), np.zeros(3), W)
    np.testing.assert_allclose(tauW - tau, -model.task_jacobian(q, X).T @ W, rtol=1e-10, atol=1e-12)


def test_cos_sin_memo_recomputes_unless_the_bits_match():
    """The plant's memo of cos/sin of the step's platform angle: a NaN-started memo computes,
    the same angle is served from it, +0.0 and -0.0 (equal but not the same bits) are not."""
    import math

    from dynamics._planar3rrr_kernels import cos_sin_memo

    memo = np.full(3, np.nan)
    assert cos_sin_memo(0.3, memo) == (math.cos(0.3), math.sin(0.3))
    memo[1:] = (7.0, 8.0)                   # a hit is served from the memo, not recomputed
    assert cos_sin_memo(0.3, memo) == (7.0, 8.0)
    assert cos_sin_memo(0.3000000000000001, memo) == (math.cos(0.3000000000000001), math.sin(0.3000000000000001))
    cos_sin_memo(0.0, memo)
    c, s = cos_sin_memo(-0.0, memo)
    assert math.copysign(1.0, s) == -1.0 and memo[0] == 0.0 and math.copysign(1.0, memo[0]) == -1.0
    memo[0] = np.nan
    assert cos_sin_memo(np.nan, memo)[0] != cos_sin_memo(np.nan, memo)[0]     # NaN never matches


def test_reduced_dynamics_skip_only_structural_zeros(model, asym_model):
    """The reduced dynamics and the inverse dynamics' forces multiply only the nonzero entries
    of the redundant-coordinate matrices (dynamics._planar3rrr_kernels._leg_terms); they equal
    the dense products G^T Mf G, G^T (Mf Gdot thd + Cf qd + gf), Mf qdd + Cf qd + gf formed here
    with numpy from the full 6x6 matrices (the entries written out, _full_mass/_coriolis/_gravity).
    Parity test (the sparse products against dense ones of the same kernels' matrices); the
    independent checks are ``test_matches_corrected_appendix_b`` and ``test_two_formulations_agree``."""
    from dynamics import _planar3rrr_kernels as K

    rng = np.random.default_rng(7)
    for m in (model, asym_model):
        P = m._P
        G = P[3]
        for X, Xd, Xdd, W in random_task_states(m, rng, 12):
            th = m.inverse_kinematics(X)
            thd = rng.normal(size=3) * 2.0
            ws = np.zeros(K.WS_SIZE + 8)
            assert K._reduced_ws(P, G, th, X, thd, G[5], ws) == 0
            Mr, hr, gr, Jx = ws[160:169].reshape(3, 3).copy(), ws[169:172].copy(), ws[172:175].copy(), \
                ws[175:184].reshape(3, 3).copy()
            Xd_ = ws[126:129].copy()
            xb = ws[136:139].copy()
            K._full_mass(P, G, ws)
            K._full_coriolis(P, G, ws, thd, Xd_[2])
            K._full_gravity(P, G, ws)
            Mf, Cf, gf = ws[48:84].reshape(6, 6), ws[84:120].reshape(6, 6), ws[120:126]
            Gm = np.vstack([np.eye(3), Jx])
            qd = np.concatenate([thd, Xd_])
            np.testing.assert_allclose(Jx @ thd, Xd_, rtol=1e-12, atol=1e-12)
            np.testing.assert_allclose(Mr, Gm.T @ Mf @ Gm, rtol=1e-12, atol=1e-12)
            np.testing.assert_allclose(gr, Gm.T @ gf, rtol=1e-12, atol=1e-12)
            np.testing.assert_allclose(hr, Gm.T @ (Mf @ np.concatenate([np.zeros(3), xb]) + Cf @ qd + gf),
                                       rtol=1e-12, atol=1e-12)
            # the inverse dynamics' forces at the same state (prepared from the platform rates)
            thd2 = np.empty(3)
            assert K.prepare_xd(P, G, th, X, thd2, Xd, G[5], ws) == 0
            thdd = rng.normal(size=3)
            K._forces(P, G, ws, thd2, Xd, thdd, Xdd, W)
            F = ws[130:136].copy()
            K._full_mass(P, G, ws)
            K._full_coriolis(P, G, ws, thd2, Xd[2])
            K._full_gravity(P, G, ws)
            Mf, Cf, gf = ws[48:84].reshape(6, 6), ws[84:120].reshape(6, 6), ws[120:126]
            ref = Mf @ np.concatenate([thdd, Xdd]) + Cf @ np.concatenate([thd2, Xd]) + gf
            ref[3:] -= W
            np.testing.assert_allclose(F, ref, rtol=1e-12, atol=1e-12)
