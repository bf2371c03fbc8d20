"""Numba kernels of the planar 3RRR model (private; see :mod:`dynamics.planar3rrr`).

Parameter packing
-----------------
``L`` : float64 array, shape (3, NL), one row per leg::

    0 Ax, 1 Ay      base (actuated) joint A_i in the base frame [m]
    2 cx, 3 cy      platform joint C_i in the platform frame [m]
    4 a             proximal length |A_i B_i| [m]
    5 b             distal length |B_i C_i| [m]
    6 Jth           inertia about the base joint: Izz_a + m_a r_a^2 + armature [kg m^2]
    7 mra           m_a r_a (first moment of the proximal link) [kg m]
    8 mBB, 9 mBC, 10 mCC
                    distal-link kinetic-energy coefficients:
                    T_b = 1/2 (mBB |vB|^2 + 2 mBC vB.vC + mCC |vC|^2)  [kg]
    11 mgB          m_b (1 - k), distal mass lumped at B for gravity [kg]
    12 mgC          m_b k, distal mass lumped at C for gravity [kg]

with k = r_b / b the distal centre-of-mass fraction.  ``G`` : float64 array,
shape (NG,)::

    0 m_p, 1 I_p, 2 gx, 3 gy, 4 lc (characteristic length for the phi column)

Status codes returned by the kernels
------------------------------------
``0`` ok; ``1 + i`` leg i unreachable (IK); ``10 + i`` leg i at a type-1
singularity; ``20`` type-2 singularity (det of the normalised B below tol);
``30`` Newton did not converge; ``31`` non-finite value during Newton.

Notation (per leg): u = (cos th, sin th), n = (-sin th, cos th), B = A + a u,
rho = R(phi) c, rho_p = (-rho_y, rho_x), C = P + rho, d = C - B.
Constraint h_i = |d_i|^2 - b_i^2.  A = dh/dtheta = diag(-2 a d.n);
B row i = 2 [d_x, d_y, d.rho_p].
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

NL = 13
NG = 5

OK = 0
ST_UNREACH = 1
ST_TYPE1 = 10
ST_TYPE2 = 20
ST_NOCONV = 30
ST_NONFINITE = 31


@njit(cache=True)
def geometry(L, G, th, X, u, n, rho, d):
    """Fill u, n, rho, d (each (3, 2)) for the pair (th, X)."""
    c = math.cos(X[2])
    s = math.sin(X[2])
    for i in range(3):
        ct = math.cos(th[i])
        st = math.sin(th[i])
        u[i, 0] = ct
        u[i, 1] = st
        n[i, 0] = -st
        n[i, 1] = ct
        rx = c * L[i, 2] - s * L[i, 3]
        ry = s * L[i, 2] + c * L[i, 3]
        rho[i, 0] = rx
        rho[i, 1] = ry
        d[i, 0] = X[0] + rx - L[i, 0] - L[i, 4] * ct
        d[i, 1] = X[1] + ry - L[i, 1] - L[i, 4] * st


@njit(cache=True)
def jacobians(L, n, rho, d, Ad, B):
    """A (diagonal, as (3,)) and B (3, 3) of the constraints."""
    for i in range(3):
        Ad[i] = -2.0 * L[i, 4] * (d[i, 0] * n[i, 0] + d[i, 1] * n[i, 1])
        B[i, 0] = 2.0 * d[i, 0]
        B[i, 1] = 2.0 * d[i, 1]
        B[i, 2] = 2.0 * (-d[i, 0] * rho[i, 1] + d[i, 1] * rho[i, 0])


@njit(cache=True)
def det3(M):
    return (M[0, 0] * (M[1, 1] * M[2, 2] - M[1, 2] * M[2, 1])
            - M[0, 1] * (M[1, 0] * M[2, 2] - M[1, 2] * M[2, 0])
            + M[0, 2] * (M[1, 0] * M[2, 1] - M[1, 1] * M[2, 0]))


@njit(cache=True)
def inv3(M, out):
    """Inverse of a 3x3 matrix by the adjugate; returns the determinant."""
    a, b, c = M[0, 0], M[0, 1], M[0, 2]
    d, e, f = M[1, 0], M[1, 1], M[1, 2]
    g, h, k = M[2, 0], M[2, 1], M[2, 2]
    A0 = e * k - f * h
    A1 = -(d * k - f * g)
    A2 = d * h - e * g
    det = a * A0 + b * A1 + c * A2
    if det == 0.0:
        return 0.0
    r = 1.0 / det
    out[0, 0] = A0 * r
    out[1, 0] = A1 * r
    out[2, 0] = A2 * r
    out[0, 1] = -(b * k - c * h) * r
    out[1, 1] = (a * k - c * g) * r
    out[2, 1] = -(a * h - b * g) * r
    out[0, 2] = (b * f - c * e) * r
    out[1, 2] = -(a * f - c * d) * r
    out[2, 2] = (a * e - b * d) * r
    return det


@njit(cache=True)
def normalised_measures(L, G, Ad, B):
    """(min_i |A_ii|/(2 a_i b_i), det of B with rows / (2 b_i) and phi column / lc).

    The first is |sin| of the angle between proximal and distal link of the
    worst leg (0 at a type-1 singularity); the second is a dimensionless
    determinant of unit-norm-ish rows (0 at a type-2 singularity).
    """
    m1 = 1e300
    for i in range(3):
        v = abs(Ad[i]) / (2.0 * L[i, 4] * L[i, 5])
        if v < m1:
            m1 = v
    Bn = np.empty((3, 3))
    for i in range(3):
        sc = 1.0 / (2.0 * L[i, 5])
        Bn[i, 0] = B[i, 0] * sc
        Bn[i, 1] = B[i, 1] * sc
        Bn[i, 2] = B[i, 2] * sc / G[4]
    return m1, det3(Bn)


@njit(cache=True)
def check_singular(L, G, Ad, B, tol):
    m1, db = normalised_measures(L, G, Ad, B)
    if m1 < tol:
        worst = 0
        wv = 1e300
        for i in range(3):
            v = abs(Ad[i]) / (2.0 * L[i, 4] * L[i, 5])
            if v < wv:
                wv = v
                worst = i
        return ST_TYPE1 + worst
    if abs(db) < tol:
        return ST_TYPE2
    return OK


@njit(cache=True)
def ik(L, X, branch, th):
    """Inverse kinematics; returns a status (1 + leg index if unreachable)."""
    c = math.cos(X[2])
    s = math.sin(X[2])
    for i in range(3):
        cxw = X[0] + c * L[i, 2] - s * L[i, 3]
        cyw = X[1] + s * L[i, 2] + c * L[i, 3]
        ex = cxw - L[i, 0]
        ey = cyw - L[i, 1]
        r = math.sqrt(ex * ex + ey * ey)
        a = L[i, 4]
        b = L[i, 5]
        if r == 0.0:
            return ST_UNREACH + i
        arg = (r * r + a * a - b * b) / (2.0 * a * r)
        if arg > 1.0:
            if arg > 1.0 + 1e-12:
                return ST_UNREACH + i
            arg = 1.0
        elif arg < -1.0:
            if arg < -1.0 - 1e-12:
                return ST_UNREACH + i
            arg = -1.0
        t = math.atan2(ey, ex) + branch[i] * math.acos(arg)
        # wrap to (-pi, pi]
        t = math.atan2(math.sin(t), math.cos(t))
        th[i] = t
    return OK


@njit(cache=True)
def constraint_values(L, G, th, X, h):
    u = np.empty((3, 2))
    n = np.empty((3, 2))
    rho = np.empty((3, 2))
    d = np.empty((3, 2))
    geometry(L, G, th, X, u, n, rho, d)
    for i in range(3):
        h[i] = d[i, 0] * d[i, 0] + d[i, 1] * d[i, 1] - L[i, 5] * L[i, 5]


@njit(cache=True)
def fk_newton(L, G, th, X0, tol, max_iter, X):
    """Newton on h(th, X) = 0 for X from X0.  Returns (status, iterations).

    Converged when max_i |h_i| / (2 b_i) <= tol (a length error in metres); one
    extra Newton step is then taken unless the error is already below 1e-4 tol.
    """
    u = np.empty((3, 2))
    n = np.empty((3, 2))
    rho = np.empty((3, 2))
    d = np.empty((3, 2))
    Ad = np.empty(3)
    B = np.empty((3, 3))
    Bi = np.empty((3, 3))
    h = np.empty(3)
    for j in range(3):
        X[j] = X0[j]
    polished = False
    for it in range(max_iter + 1):
        geometry(L, G, th, X, u, n, rho, d)
        err = 0.0
        for i in range(3):
            h[i] = d[i, 0] * d[i, 0] + d[i, 1] * d[i, 1] - L[i, 5] * L[i, 5]
            e = abs(h[i]) / (2.0 * L[i, 5])
            if not (e == e) or e > 1e300:
                return ST_NONFINITE, it
            if e > err:
                err = e
        if err <= tol:
            # one polishing step (quadratic convergence: ~machine precision after it)
            if polished or err <= 1e-4 * tol or it == max_iter:
                return OK, it
            polished = True
        elif it == max_iter:
            break
        jacobians(L, n, rho, d, Ad, B)
        det = inv3(B, Bi)
        if det == 0.0:
            return ST_TYPE2, it
        for j in range(3):
            X[j] -= Bi[j, 0] * h[0] + Bi[j, 1] * h[1] + Bi[j, 2] * h[2]
    return ST_NOCONV, max_iter


@njit(cache=True)
def _full_mass(L, G, n, rho, Mf):
    """KE Hessian d^2T/dqd^2 in redundant coordinates q = (th1, th2, th3, x, y, phi)."""
    for r in range(6):
        for c in range(6):
            Mf[r, c] = 0.0
    Mf[3, 3] = G[0]
    Mf[4, 4] = G[0]
    Mf[5, 5] = G[1]
    for i in range(3):
        a = L[i, 4]
        mBB = L[i, 8]
        mBC = L[i, 9]
        mCC = L[i, 10]
        Mf[i, i] = L[i, 6] + mBB * a * a
        # J_B (th_i column) = a n ; J_C = [[1, 0, -rho_y], [0, 1, rho_x]]
        jbx = a * n[i, 0]
        jby = a * n[i, 1]
        rpx = -rho[i, 1]
        rpy = rho[i, 0]
        Mf[i, 3] = mBC * jbx
        Mf[i, 4] = mBC * jby
        Mf[i, 5] = mBC * (jbx * rpx + jby * rpy)
        Mf[3, i] = Mf[i, 3]
        Mf[4, i] = Mf[i, 4]
        Mf[5, i] = Mf[i, 5]
        Mf[3, 3] += mCC
        Mf[4, 4] += mCC
        Mf[3, 5] += mCC * rpx
        Mf[4, 5] += mCC * rpy
        Mf[5, 5] += mCC * (rpx * rpx + rpy * rpy)
    Mf[5, 3] = Mf[3, 5]
    Mf[5, 4] = Mf[4, 5]


@njit(cache=True)
def _full_coriolis(L, u, rho, thd, phid, Cf):
    """C_full(q, qd) = sum m_jk J_j^T dJ_k/dt (so C_full qd = Mdot qd - dT/dq)."""
    for r in range(6):
        for c in range(6):
            Cf[r, c] = 0.0
    for i in range(3):
        a = L[i, 4]
        mBB = L[i, 8]
        mBC = L[i, 9]
        mCC = L[i, 10]
        # dJ_B/dt (th_i column) = -a thd u ; dJ_C/dt (phi column) = -phid rho
        jbdx = -a * thd[i] * u[i, 0]
        jbdy = -a * thd[i] * u[i, 1]
        jcdx = -phid * rho[i, 0]
        jcdy = -phid * rho[i, 1]
        nx = -u[i, 1]
        ny = u[i, 0]
        rpx = -rho[i, 1]
        rpy = rho[i, 0]
        # row th_i: a n . (mBB dJ_B + mBC dJ_C)
        Cf[i, i] += a * mBB * (nx * jbdx + ny * jbdy)
        Cf[i, 5] += a * mBC * (nx * jcdx + ny * jcdy)
        # rows x, y, phi: J_C^T (mBC dJ_B + mCC dJ_C)
        Cf[3, i] += mBC * jbdx
        Cf[4, i] += mBC * jbdy
        Cf[5, i] += mBC * (rpx * jbdx + rpy * jbdy)
        Cf[3, 5] += mCC * jcdx
        Cf[4, 5] += mCC * jcdy
        Cf[5, 5] += mCC * (rpx * jcdx + rpy * jcdy)


@njit(cache=True)
def _full_gravity(L, G, n, rho, gf):
    """dV/dq in redundant coordinates, V = -sum m g.p."""
    gx = G[2]
    gy = G[3]
    gf[3] = -G[0] * gx
    gf[4] = -G[0] * gy
    gf[5] = 0.0
    for i in range(3):
        a = L[i, 4]
        gf[i] = -(L[i, 7] + L[i, 11] * a) * (gx * n[i, 0] + gy * n[i, 1])
        mC = L[i, 12]
        gf[3] -= mC * gx
        gf[4] -= mC * gy
        gf[5] -= mC * (gx * (-rho[i, 1]) + gy * rho[i, 0])


@njit(cache=True)
def _gamma(L, u, rho, d, thd, Xd, gam):
    """gamma_i = qd^T H_i qd (velocity-product part of d^2 h_i / dt^2)."""
    for i in range(3):
        a = L[i, 4]
        vbx = -a * thd[i] * u[i, 1]
        vby = a * thd[i] * u[i, 0]
        vcx = Xd[0] - Xd[2] * rho[i, 1]
        vcy = Xd[1] + Xd[2] * rho[i, 0]
        wx = vcx - vbx
        wy = vcy - vby
        qx = -Xd[2] * Xd[2] * rho[i, 0] + a * thd[i] * thd[i] * u[i, 0]
        qy = -Xd[2] * Xd[2] * rho[i, 1] + a * thd[i] * thd[i] * u[i, 1]
        gam[i] = 2.0 * (wx * wx + wy * wy) + 2.0 * (d[i, 0] * qx + d[i, 1] * qy)


@njit(cache=True)
def task_inverse_dynamics(L, G, X, Xd, Xdd, W, branch, tol, tau, lam, th, thd, thdd):
    """Lagrange-D'Alembert inverse dynamics for a platform motion.

    Fills tau (3,), the multipliers lam (3,) and the joint motion th, thd, thdd;
    returns a status code.
    """
    st = ik(L, X, branch, th)
    if st != OK:
        return st
    u = np.empty((3, 2))
    n = np.empty((3, 2))
    rho = np.empty((3, 2))
    d = np.empty((3, 2))
    Ad = np.empty(3)
    B = np.empty((3, 3))
    Bi = np.empty((3, 3))
    geometry(L, G, th, X, u, n, rho, d)
    jacobians(L, n, rho, d, Ad, B)
    st = check_singular(L, G, Ad, B, tol)
    if st != OK:
        return st
    det = inv3(B, Bi)
    if det == 0.0:
        return ST_TYPE2
    gam = np.empty(3)
    for i in range(3):
        thd[i] = -(B[i, 0] * Xd[0] + B[i, 1] * Xd[1] + B[i, 2] * Xd[2]) / Ad[i]
    _gamma(L, u, rho, d, thd, Xd, gam)
    for i in range(3):
        thdd[i] = -(B[i, 0] * Xdd[0] + B[i, 1] * Xdd[1] + B[i, 2] * Xdd[2] + gam[i]) / Ad[i]
    Mf = np.empty((6, 6))
    Cf = np.empty((6, 6))
    gf = np.empty(6)
    _full_mass(L, G, n, rho, Mf)
    _full_coriolis(L, u, rho, thd, Xd[2], Cf)
    _full_gravity(L, G, n, rho, gf)
    qd = np.empty(6)
    qdd = np.empty(6)
    for i in range(3):
        qd[i] = thd[i]
        qd[3 + i] = Xd[i]
        qdd[i] = thdd[i]
        qdd[3 + i] = Xdd[i]
    F = np.empty(6)
    for r in range(6):
        acc = gf[r]
        for c in range(6):
            acc += Mf[r, c] * qdd[c] + Cf[r, c] * qd[c]
        F[r] = acc
    F[3] -= W[0]
    F[4] -= W[1]
    F[5] -= W[2]
    # B^T lam = F_X  ->  lam = B^{-T} F_X ; tau = F_th - A lam
    for i in range(3):
        lam[i] = Bi[0, i] * F[3] + Bi[1, i] * F[4] + Bi[2, i] * F[5]
    for i in range(3):
        tau[i] = F[i] - Ad[i] * lam[i]
    return OK


@njit(cache=True)
def reduced(L, G, th, X, thd, tol, Mr, hr, Cr, gr, Jx, want_c):
    """Reduced dynamics in the actuated coordinates at a consistent (th, X).

    Mr = G^T Mf G, hr = G^T (Mf Gdot thd + Cf qd + gf), gr = G^T gf,
    Cr = G^T Mf Gdot + G^T Cf G (only if want_c), Jx = -B^{-1} A, with
    G = [I; Jx].  Returns a status code.
    """
    u = np.empty((3, 2))
    n = np.empty((3, 2))
    rho = np.empty((3, 2))
    d = np.empty((3, 2))
    Ad = np.empty(3)
    B = np.empty((3, 3))
    Bi = np.empty((3, 3))
    geometry(L, G, th, X, u, n, rho, d)
    jacobians(L, n, rho, d, Ad, B)
    st = check_singular(L, G, Ad, B, tol)
    if st != OK:
        return st
    det = inv3(B, Bi)
    if det == 0.0:
        return ST_TYPE2
    for r in range(3):
        for c in range(3):
            Jx[r, c] = -Bi[r, c] * Ad[c]
    Xd = np.empty(3)
    for r in range(3):
        Xd[r] = Jx[r, 0] * thd[0] + Jx[r, 1] * thd[1] + Jx[r, 2] * thd[2]
    gam = np.empty(3)
    _gamma(L, u, rho, d, thd, Xd, gam)
    # Gdot thd = [0; -B^{-1} gam]
    xb = np.empty(3)
    for r in range(3):
        xb[r] = -(Bi[r, 0] * gam[0] + Bi[r, 1] * gam[1] + Bi[r, 2] * gam[2])
    Mf = np.empty((6, 6))
    Cf = np.empty((6, 6))
    gf = np.empty(6)
    _full_mass(L, G, n, rho, Mf)
    _full_coriolis(L, u, rho, thd, Xd[2], Cf)
    _full_gravity(L, G, n, rho, gf)
    Gm = np.zeros((6, 3))
    for i in range(3):
        Gm[i, i] = 1.0
        for c in range(3):
            Gm[3 + i, c] = Jx[i, c]
    qd = np.empty(6)
    for i in range(3):
        qd[i] = thd[i]
        qd[3 + i] = Xd[i]
    # full-space force of the velocity terms and gravity
    Fv = np.empty(6)
    for r in range(6):
        acc = gf[r]
        for c in range(3):
            acc += Mf[r, 3 + c] * xb[c]
        for c in range(6):
            acc += Cf[r, c] * qd[c]
        Fv[r] = acc
    MG = np.empty((6, 3))
    for r in range(6):
        for c in range(3):
            acc = 0.0
            for k in range(6):
                acc += Mf[r, k] * Gm[k, c]
            MG[r, c] = acc
    for r in range(3):
        for c in range(3):
            acc = 0.0
            for k in range(6):
                acc += Gm[k, r] * MG[k, c]
            Mr[r, c] = acc
        acc = 0.0
        acc2 = 0.0
        for k in range(6):
            acc += Gm[k, r] * Fv[k]
            acc2 += Gm[k, r] * gf[k]
        hr[r] = acc
        gr[r] = acc2
    if want_c:
        # Jxdot = -B^{-1} (Adot + Bdot Jx)
        Adot = np.empty(3)
        Bdot = np.empty((3, 3))
        for i in range(3):
            a = L[i, 4]
            vbx = -a * thd[i] * u[i, 1]
            vby = a * thd[i] * u[i, 0]
            ddx = Xd[0] - Xd[2] * rho[i, 1] - vbx
            ddy = Xd[1] + Xd[2] * rho[i, 0] - vby
            # n dot = -thd u
            Adot[i] = -2.0 * a * (ddx * n[i, 0] + ddy * n[i, 1]
                                  - thd[i] * (d[i, 0] * u[i, 0] + d[i, 1] * u[i, 1]))
            Bdot[i, 0] = 2.0 * ddx
            Bdot[i, 1] = 2.0 * ddy
            # d/dt (d . rho_p) = ddot . rho_p + d . (-phid rho)
            Bdot[i, 2] = 2.0 * (-ddx * rho[i, 1] + ddy * rho[i, 0]
                                - Xd[2] * (d[i, 0] * rho[i, 0] + d[i, 1] * rho[i, 1]))
        T3 = np.empty((3, 3))
        for r in range(3):
            for c in range(3):
                acc = Bdot[r, 0] * Jx[0, c] + Bdot[r, 1] * Jx[1, c] + Bdot[r, 2] * Jx[2, c]
                if r == c:
                    acc += Adot[r]
                T3[r, c] = acc
        Gd = np.zeros((6, 3))
        for r in range(3):
            for c in range(3):
                Gd[3 + r, c] = -(Bi[r, 0] * T3[0, c] + Bi[r, 1] * T3[1, c] + Bi[r, 2] * T3[2, c])
        # K = Mf Gd + Cf G  (6x3); Cr = G^T K
        K = np.empty((6, 3))
        for r in range(6):
            for c in range(3):
                acc = 0.0
                for k in range(6):
                    acc += Mf[r, k] * Gd[k, c] + Cf[r, k] * Gm[k, c]
                K[r, c] = acc
        for r in range(3):
            for c in range(3):
                acc = 0.0
                for k in range(6):
                    acc += Gm[k, r] * K[k, c]
                Cr[r, c] = acc
    return OK


@njit(cache=True)
def solve3(M, rhs, out):
    Mi = np.empty((3, 3))
    det = inv3(M, Mi)
    if det == 0.0:
        return False
    for r in range(3):
        out[r] = Mi[r, 0] * rhs[0] + Mi[r, 1] * rhs[1] + Mi[r, 2] * rhs[2]
    return True


@njit(cache=True)
def forward_dynamics(L, G, th, X, thd, tau, W, tol, thdd, Xdd):
    """thdd from M thdd = tau - h + Jx^T W; Xdd = Jx thdd - B^{-1} gamma."""
    Mr = np.empty((3, 3))
    hr = np.empty(3)
    Cr = np.empty((3, 3))
    gr = np.empty(3)
    Jx = np.empty((3, 3))
    st = reduced(L, G, th, X, thd, tol, Mr, hr, Cr, gr, Jx, False)
    if st != OK:
        return st
    rhs = np.empty(3)
    for r in range(3):
        rhs[r] = tau[r] - hr[r] + Jx[0, r] * W[0] + Jx[1, r] * W[1] + Jx[2, r] * W[2]
    if not solve3(Mr, rhs, thdd):
        return ST_TYPE2
    # task acceleration
    u = np.empty((3, 2))
    n = np.empty((3, 2))
    rho = np.empty((3, 2))
    d = np.empty((3, 2))
    Ad = np.empty(3)
    B = np.empty((3, 3))
    geometry(L, G, th, X, u, n, rho, d)
    jacobians(L, n, rho, d, Ad, B)
    Xd = np.empty(3)
    for r in range(3):
        Xd[r] = Jx[r, 0] * thd[0] + Jx[r, 1] * thd[1] + Jx[r, 2] * thd[2]
    gam = np.empty(3)
    _gamma(L, u, rho, d, thd, Xd, gam)
    rhs2 = np.empty(3)
    for i in range(3):
        rhs2[i] = -(Ad[i] * thdd[i] + gam[i])
    if not solve3(B, rhs2, Xdd):
        return ST_TYPE2
    return OK


@njit(cache=True)
def rk4_step(L, G, th, thd, X, tau, W, dt, tol, fk_tol, max_iter, th_out, thd_out, X_out):
    """One RK4 step of (th, thd) with X recovered from the constraints at every stage.

    Newton for X is warm-started from the previous stage's pose extrapolated
    with Xd dt; returns a status code.
    """
    k_th = np.empty((4, 3))
    k_thd = np.empty((4, 3))
    ths = np.empty(3)
    thds = np.empty(3)
    Xg = np.empty(3)
    Xs = np.empty(3)
    thdd = np.empty(3)
    Xdd = np.empty(3)
    Xcur = np.empty(3)
    for j in range(3):
        Xcur[j] = X[j]
    coef = (0.0, 0.5, 0.5, 1.0)
    for s in range(4):
        for j in range(3):
            if s == 0:
                ths[j] = th[j]
                thds[j] = thd[j]
            else:
                ths[j] = th[j] + coef[s] * dt * k_th[s - 1, j]
                thds[j] = thd[j] + coef[s] * dt * k_thd[s - 1, j]
        if s == 0:
            for j in range(3):
                Xs[j] = Xcur[j]
        else:
            for j in range(3):
                Xg[j] = Xcur[j]
            st, it = fk_newton(L, G, ths, Xg, fk_tol, max_iter, Xs)
            if st != OK:
                return st
        st = forward_dynamics(L, G, ths, Xs, thds, tau, W, tol, thdd, Xdd)
        if st != OK:
            return st
        for j in range(3):
            k_th[s, j] = thds[j]
            k_thd[s, j] = thdd[j]
    for j in range(3):
        th_out[j] = th[j] + dt / 6.0 * (k_th[0, j] + 2 * k_th[1, j] + 2 * k_th[2, j] + k_th[3, j])
        thd_out[j] = thd[j] + dt / 6.0 * (k_thd[0, j] + 2 * k_thd[1, j] + 2 * k_thd[2, j] + k_thd[3, j])
    st, it = fk_newton(L, G, th_out, Xcur, fk_tol, max_iter, X_out)
    return st


@njit(cache=True)
def fk_continuation(L, G, th_home, X_home, th, tol, max_iter, step_rad, X):
    """FK by continuation from the home configuration along the straight joint path.

    The joint path th(s) = th_home + s * wrap(th - th_home), s in [0, 1], is cut in
    steps of at most ``step_rad``; each step is a Newton solve warm-started with
    the previous pose, so the assembly mode of the home pose is tracked.
    Returns (status, total iterations).
    """
    dth = np.empty(3)
    big = 0.0
    for j in range(3):
        v = th[j] - th_home[j]
        v = math.atan2(math.sin(v), math.cos(v))
        dth[j] = v
        if abs(v) > big:
            big = abs(v)
    nsteps = int(math.ceil(big / step_rad))
    if nsteps < 1:
        nsteps = 1
    Xg = np.empty(3)
    ths = np.empty(3)
    for j in range(3):
        Xg[j] = X_home[j]
    total = 0
    for k in range(1, nsteps + 1):
        s = k / nsteps
        for j in range(3):
            ths[j] = th_home[j] + s * dth[j]
        # intermediate steps need only a loose tolerance
        t = tol if k == nsteps else 1e-9
        st, it = fk_newton(L, G, ths, Xg, t, max_iter, X)
        total += it
        if st != OK:
            return st, total
        for j in range(3):
            Xg[j] = X[j]
    if nsteps > 0:
        # exact end point (th itself, not th_home + dth, which differ by 2 pi multiples only)
        st, it = fk_newton(L, G, th, Xg, tol, max_iter, X)
        total += it
        return st, total
    return OK, total
