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
``30`` Newton did not converge; ``31`` non-finite value during Newton;
``40`` an input does not have 3 entries; ``41`` an input is not finite.

Notation (per leg): u = (cos th, sin th), n = (-sin th, cos th), B = A + a u,
rho = R(phi) c, rho_p = (-rho_y, rho_x), C = P + rho, d = C - B.
Constraint h_i = |d_i|^2 - b_i^2.  A = dh/dtheta = diag(-2 a d.n);
B row i = 2 [d_x, d_y, d.rho_p].

Implementation: flat float64 workspaces (one allocation per call, 1-D views; the
``*_hint_ws`` kernels take the caller's workspace instead), 3x3 and 6x6 matrices
stored row-major; no LAPACK.  Workspace layout
(``WS_SIZE``)::

    g   0:24   per leg i at 8 i: ux, uy, nx, ny, rhox, rhoy, dx, dy
    Ad  24:27  diagonal of A
    B   27:36  B, row-major          Bi 36:45  B^{-1}
    gam 45:48  gamma_i = zd^T H_i zd
    Mf  48:84  6x6 KE Hessian        Cf 84:120  6x6 Coriolis matrix
    gf  120:126 dV/dq                Xd 126:129
    F   130:136 generalised forces   Xdd 136:139  lam 139:142
    (142:160 unused)
    red 160:184 reduced dynamics: M 160:169, h 169:172, g 172:175, J_x 175:184
    h   184:187 constraint values (Newton)
Hot kernels index the workspace with these fixed offsets rather than slicing
it (each numba array view costs reference-count traffic).  Mf, Cf and gf are
formed as matrices only where a caller needs them (:func:`reduced` with the
Coriolis matrix): the reduced dynamics and the inverse dynamics' forces take
their nonzero entries from :func:`_leg_terms` / :func:`_platform_terms` and
leave the structural zeros out of their sums (in the dense products' order,
so the results are the dense form's to the bit).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from ._kernel_cache import CompileGate, stamp_package_caches

NL = 13
NG = 5

OK = 0
ST_UNREACH = 1
ST_TYPE1 = 10
ST_TYPE2 = 20
ST_NOCONV = 30
ST_NONFINITE = 31
ST_BADSHAPE = 40
ST_BADINPUT = 41

WS_SIZE = 192


# numba takes a function's cache locator when it is decorated: the kernel files' stamp first
stamp_package_caches()
#: one process at a time compiles this module's kernels (released at the end of the module)
_gate = CompileGate(__file__)


@njit(cache=True, error_model="numpy")
def geometry(L, th, X, g):
    """Fill g (24,): per leg u, n, rho, d (see module docstring)."""
    joint_geometry(th, g)
    pose_geometry(L, X, g)


@njit(cache=True, error_model="numpy")
def joint_geometry(th, g):
    """The part of :func:`geometry` that depends on the joint angles th (3,) [rad] only:
    u = (cos th, sin th) and n = (-sin th, cos th) of every leg into g (24,)."""
    for i in range(3):
        ct = math.cos(th[i])
        st = math.sin(th[i])
        k = 8 * i
        g[k] = ct
        g[k + 1] = st
        g[k + 2] = -st
        g[k + 3] = ct


@njit(cache=True, error_model="numpy")
def pose_geometry(L, X, g):
    """The rest of :func:`geometry`: rho and d of every leg at the pose X (3,) = (x [m], y [m],
    phi [rad]) into g (24,), which already holds u and n (:func:`joint_geometry`)."""
    pose_geometry_cs(L, X, math.cos(X[2]), math.sin(X[2]), g)


@njit(cache=True, inline="always", error_model="numpy")
def pose_geometry_cs(L, X, c, s, g):
    """:func:`pose_geometry` with c = cos X[2], s = sin X[2] given."""
    for i in range(3):
        k = 8 * i
        ct = g[k]
        st = g[k + 1]
        rx = c * L[i, 2] - s * L[i, 3]
        ry = s * L[i, 2] + c * L[i, 3]
        g[k + 4] = rx
        g[k + 5] = ry
        g[k + 6] = X[0] + rx - L[i, 0] - L[i, 4] * ct
        g[k + 7] = X[1] + ry - L[i, 1] - L[i, 4] * st


@njit(cache=True, error_model="numpy")
def jacobians(L, ws):
    """A (diagonal) into ws[24:27] and B (row-major) into ws[27:36] from the geometry in ws[0:24]."""
    for i in range(3):
        k = 8 * i
        dx = ws[k + 6]
        dy = ws[k + 7]
        ws[24 + i] = -2.0 * L[i, 4] * (dx * ws[k + 2] + dy * ws[k + 3])
        ws[27 + 3 * i] = 2.0 * dx
        ws[28 + 3 * i] = 2.0 * dy
        ws[29 + 3 * i] = 2.0 * (-dx * ws[k + 5] + dy * ws[k + 4])


@njit(cache=True, error_model="numpy")
def det3(M):
    return (M[0] * (M[4] * M[8] - M[5] * M[7])
            - M[1] * (M[3] * M[8] - M[5] * M[6])
            + M[2] * (M[3] * M[7] - M[4] * M[6]))


@njit(cache=True, error_model="numpy")
def inv3_ws(ws, src, dst):
    """ws[dst:dst+9] = inverse of the row-major 3x3 ws[src:src+9]; returns the determinant (0: not done)."""
    a, b, c = ws[src], ws[src + 1], ws[src + 2]
    d, e, f = ws[src + 3], ws[src + 4], ws[src + 5]
    g, h, k = ws[src + 6], ws[src + 7], ws[src + 8]
    A0 = e * k - f * h
    A1 = -(d * k - f * g)
    A2 = d * h - e * g
    det = a * A0 + b * A1 + c * A2
    if det == 0.0:
        return 0.0
    r = 1.0 / det
    ws[dst] = A0 * r
    ws[dst + 3] = A1 * r
    ws[dst + 6] = A2 * r
    ws[dst + 1] = -(b * k - c * h) * r
    ws[dst + 4] = (a * k - c * g) * r
    ws[dst + 7] = -(a * h - b * g) * r
    ws[dst + 2] = (b * f - c * e) * r
    ws[dst + 5] = -(a * f - c * d) * r
    ws[dst + 8] = (a * e - b * d) * r
    return det


@njit(cache=True, error_model="numpy")
def normalised_measures(L, G, Ad, B):
    """(min_i |A_ii|/(2 a_i b_i), det of B with rows / (2 b_i) and phi column / lc).

    The first is |sin| of the angle between proximal and distal link of the
    worst leg (0 at a type-1 singularity); the second is a dimensionless
    determinant of rows of norm ~1 (0 at a type-2 singularity).  B row-major (9,).
    """
    m1 = 1e300
    for i in range(3):
        v = abs(Ad[i]) / (2.0 * L[i, 4] * L[i, 5])
        if v < m1:
            m1 = v
    scale = 8.0 * L[0, 5] * L[1, 5] * L[2, 5] * G[4]
    return m1, det3(B) / scale


@njit(cache=True, error_model="numpy")
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


@njit(cache=True, error_model="numpy")
def check_singular_ws(L, G, ws, tol):
    """check_singular on A = ws[24:27], B = ws[27:36]."""
    m1 = 1e300
    worst = 0
    for i in range(3):
        v = abs(ws[24 + i]) / (2.0 * L[i, 4] * L[i, 5])
        if v < m1:
            m1 = v
            worst = i
    if m1 < tol:
        return ST_TYPE1 + worst
    det = (ws[27] * (ws[31] * ws[35] - ws[32] * ws[34])
           - ws[28] * (ws[30] * ws[35] - ws[32] * ws[33])
           + ws[29] * (ws[30] * ws[34] - ws[31] * ws[33]))
    if abs(det) < tol * 8.0 * L[0, 5] * L[1, 5] * L[2, 5] * G[4]:
        return ST_TYPE2
    return OK


@njit(cache=True, error_model="numpy")
def valid3(a):
    """0 if a has 3 finite entries, else a status code."""
    if a.shape[0] != 3:
        return ST_BADSHAPE
    for j in range(3):
        v = a[j]
        if not (v == v) or v > 1e308 or v < -1e308:
            return ST_BADINPUT
    return OK


@njit(cache=True, error_model="numpy")
def _combine(s1, s2, s3, s4, s5):
    if s1 == ST_BADSHAPE or s2 == ST_BADSHAPE or s3 == ST_BADSHAPE or s4 == ST_BADSHAPE \
            or s5 == ST_BADSHAPE:
        return ST_BADSHAPE
    if s1 or s2 or s3 or s4 or s5:
        return ST_BADINPUT
    return OK


@njit(cache=True, error_model="numpy")
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


@njit(cache=True, error_model="numpy")
def constraint_values(L, th, X, h):
    g = np.empty(24)
    geometry(L, th, X, g)
    for i in range(3):
        dx = g[8 * i + 6]
        dy = g[8 * i + 7]
        h[i] = dx * dx + dy * dy - L[i, 5] * L[i, 5]


@njit(cache=True, error_model="numpy", _nrt=False)
def fk_newton_ws(L, th, X0, tol, max_iter, X, ws):
    """Newton on h(th, X) = 0 for X from X0.  Returns (status, iterations).

    Converged when max_i |h_i| / (2 b_i) <= tol (a length error in metres); one
    extra (polishing) Newton step is then taken unless the error is already
    below 1e-15 m, and kept only if it reduced the residual.  On success
    ws[0:24] holds the geometry at the returned X.
    """
    return _fk_newton(L, th, X0, math.cos(X0[2]), math.sin(X0[2]), tol, max_iter, X, ws)


@njit(cache=True, inline="always", error_model="numpy")
def cos_sin_memo(x, memo):
    """(cos x, sin x) through the caller's memo (3,) = [x', cos x', sin x']: the stored pair
    when x is x' (the same bits: equal, and the same sign if zero), else computed and stored.
    A NaN x' (how a memo starts) never matches."""
    m = memo[0]
    if m == x and (x != 0.0 or math.copysign(1.0, x) == math.copysign(1.0, m)):
        return memo[1], memo[2]
    c = math.cos(x)
    s = math.sin(x)
    memo[0] = x
    memo[1] = c
    memo[2] = s
    return c, s


@njit(cache=True, error_model="numpy", _nrt=False)
def fk_newton_memo_ws(L, th, X0, memo, tol, max_iter, X, ws):
    """:func:`fk_newton_ws` with cos X0[2], sin X0[2] through ``memo`` (:func:`cos_sin_memo`):
    the plant's solves of one step all start from the step's pose."""
    c0, s0 = cos_sin_memo(X0[2], memo)
    return _fk_newton(L, th, X0, c0, s0, tol, max_iter, X, ws)


@njit(cache=True, inline="always", error_model="numpy")
def _fk_newton(L, th, X0, c0, s0, tol, max_iter, X, ws):
    """:func:`fk_newton_ws` with c0 = cos X0[2], s0 = sin X0[2] given (its first iterate's)."""
    for j in range(3):
        X[j] = X0[j]
    polished = False
    err_p = 0.0
    xs0 = 0.0
    xs1 = 0.0
    xs2 = 0.0
    joint_geometry(th, ws)       # th is fixed: u, n once, rho and d at every iterate
    for it in range(max_iter + 1):
        if it == 0:
            pose_geometry_cs(L, X, c0, s0, ws)
        else:
            pose_geometry(L, X, ws)
        err = 0.0
        finite = True
        for i in range(3):
            dx = ws[8 * i + 6]
            dy = ws[8 * i + 7]
            hv = dx * dx + dy * dy - L[i, 5] * L[i, 5]
            ws[184 + i] = hv
            e = abs(hv) / (2.0 * L[i, 5])
            if not (e == e) or e > 1e300:
                finite = False
            elif e > err:
                err = e
        if polished:
            # keep the polished pose only if it improved the residual (near a
            # type-2 singularity B^{-1} h can be a large, useless step)
            if not finite or not (err <= err_p):
                X[0] = xs0
                X[1] = xs1
                X[2] = xs2
                pose_geometry(L, X, ws)   # on return the geometry always matches X
            return OK, it
        if not finite:
            return ST_NONFINITE, it
        if err <= tol:
            # one polishing step (quadratic convergence: ~machine precision after it)
            if err <= 1e-15 or it == max_iter:
                return OK, it
            polished = True
            err_p = err
            xs0 = X[0]
            xs1 = X[1]
            xs2 = X[2]
        elif it == max_iter:
            break
        jacobians(L, ws)
        det = inv3_ws(ws, 27, 36)
        if det == 0.0:
            return ST_TYPE2, it
        h0 = ws[184]
        h1 = ws[185]
        h2 = ws[186]
        for j in range(3):
            X[j] -= ws[36 + 3 * j] * h0 + ws[37 + 3 * j] * h1 + ws[38 + 3 * j] * h2
    return ST_NOCONV, max_iter


@njit(cache=True, error_model="numpy")
def fk_newton(L, th, X0, tol, max_iter, X):
    ws = np.empty(WS_SIZE)
    return fk_newton_ws(L, th, X0, tol, max_iter, X, ws)


@njit(cache=True, inline="always", error_model="numpy")
def _leg_terms(L, ws, i, thdi, phid, gx, gy):
    """Leg i's entries of the redundant-coordinate dynamics, from the geometry in ws[0:24].

    The only place these entries are written: the full 6x6 matrices
    (:func:`_full_mass`, :func:`_full_coriolis`, :func:`_full_gravity`) and the reduced
    dynamics (:func:`_reduced_ws`, which skips their structural zeros) are built from it.
    ``thdi`` [rad/s] the leg's joint rate, ``phid`` [rad/s] the platform's angular rate,
    ``gx, gy`` [m/s^2] gravity.  Returns (Mf[i, i], Mf[i, 3], Mf[i, 4], Mf[i, 5] (= the
    column entries Mf[3:6, i]), Cf[i, 5], Cf[3, i], Cf[4, i], Cf[5, i], gf[i], mCC,
    rho_p = (rpx, rpy), dJ_C/dt of the phi column (jcdx, jcdy)); the other entries of
    row and column i are zero (q = (th1, th2, th3, x, y, phi)).
    """
    k = 8 * i
    a = L[i, 4]
    mBB = L[i, 8]
    mBC = L[i, 9]
    ux = ws[k]
    uy = ws[k + 1]
    nx = ws[k + 2]
    ny = ws[k + 3]
    rx = ws[k + 4]
    ry = ws[k + 5]
    mii = L[i, 6] + mBB * a * a
    # J_B (th_i column) = a n ; J_C = [[1, 0, -rho_y], [0, 1, rho_x]]
    jbx = a * nx
    jby = a * ny
    rpx = -ry
    rpy = rx
    v3 = mBC * jbx
    v4 = mBC * jby
    v5 = mBC * (jbx * rpx + jby * rpy)
    # dJ_B/dt (th_i column) = -a thd u ; dJ_C/dt (phi column) = -phid rho
    jbdx = -a * thdi * ux
    jbdy = -a * thdi * uy
    jcdx = -phid * rx
    jcdy = -phid * ry
    # row th_i: a n . (mBB dJ_B + mBC dJ_C); the mBB part is a n . u = 0
    ci5 = a * mBC * (nx * jcdx + ny * jcdy)
    # rows x, y, phi: J_C^T (mBC dJ_B + mCC dJ_C) (the mCC part: _platform_terms)
    c3i = mBC * jbdx
    c4i = mBC * jbdy
    c5i = mBC * (rpx * jbdx + rpy * jbdy)
    gfi = -(L[i, 7] + L[i, 11] * a) * (gx * nx + gy * ny)
    return mii, v3, v4, v5, ci5, c3i, c4i, c5i, gfi, L[i, 10], rpx, rpy, jcdx, jcdy


@njit(cache=True, inline="always", error_model="numpy")
def _platform_terms(L, G, l0, l1, l2):
    """The platform block of the redundant-coordinate dynamics from the three legs' terms
    (:func:`_leg_terms`): (Mf[3, 3] = Mf[4, 4], Mf[3, 5], Mf[4, 5], Mf[5, 5], Cf[3, 5],
    Cf[4, 5], Cf[5, 5], gf[3], gf[4], gf[5]); Mf[3, 4] and Cf[3:5, 3:5] are zero."""
    gx = G[2]
    gy = G[3]
    m33 = G[0]
    m35 = 0.0
    m45 = 0.0
    m55 = G[1]
    c35 = 0.0
    c45 = 0.0
    c55 = 0.0
    gf3 = -G[0] * gx
    gf4 = -G[0] * gy
    gf5 = 0.0
    for i in range(3):
        t = l0 if i == 0 else (l1 if i == 1 else l2)
        mCC = t[9]
        rpx = t[10]
        rpy = t[11]
        jcdx = t[12]
        jcdy = t[13]
        m33 += mCC
        m35 += mCC * rpx
        m45 += mCC * rpy
        m55 += mCC * (rpx * rpx + rpy * rpy)
        c35 += mCC * jcdx
        c45 += mCC * jcdy
        c55 += mCC * (rpx * jcdx + rpy * jcdy)
        mC = L[i, 12]
        gf3 -= mC * gx
        gf4 -= mC * gy
        gf5 -= mC * (gx * rpx + gy * rpy)
    return m33, m35, m45, m55, c35, c45, c55, gf3, gf4, gf5


@njit(cache=True, inline="always", error_model="numpy")
def _all_terms(L, G, ws, thd0, thd1, thd2, phid):
    """:func:`_leg_terms` of the three legs (joint rates thd0..2, platform rate phid [rad/s])
    and :func:`_platform_terms`."""
    l0 = _leg_terms(L, ws, 0, thd0, phid, G[2], G[3])
    l1 = _leg_terms(L, ws, 1, thd1, phid, G[2], G[3])
    l2 = _leg_terms(L, ws, 2, thd2, phid, G[2], G[3])
    return l0, l1, l2, _platform_terms(L, G, l0, l1, l2)


@njit(cache=True, error_model="numpy")
def _full_mass(L, G, ws):
    """KE Hessian d^2T/dqd^2 in q = (th1, th2, th3, x, y, phi), row-major into ws[48:84]."""
    for r in range(48, 84):
        ws[r] = 0.0
    l0, l1, l2, pf = _all_terms(L, G, ws, 0.0, 0.0, 0.0, 0.0)
    for i in range(3):
        t = l0 if i == 0 else (l1 if i == 1 else l2)
        ws[48 + 7 * i] = t[0]
        for j in range(3):
            ws[48 + 6 * i + 3 + j] = t[1 + j]
            ws[48 + 6 * (3 + j) + i] = t[1 + j]
    ws[48 + 21] = pf[0]
    ws[48 + 28] = pf[0]
    ws[48 + 23] = pf[1]
    ws[48 + 33] = pf[1]
    ws[48 + 29] = pf[2]
    ws[48 + 34] = pf[2]
    ws[48 + 35] = pf[3]


@njit(cache=True, error_model="numpy")
def _full_coriolis(L, G, ws, thd, phid):
    """C_full(q, qd) = sum m_jk J_j^T dJ_k/dt (C_full qd = Mdot qd - dT/dq), row-major into ws[84:120]."""
    for r in range(84, 120):
        ws[r] = 0.0
    l0, l1, l2, pf = _all_terms(L, G, ws, thd[0], thd[1], thd[2], phid)
    for i in range(3):
        t = l0 if i == 0 else (l1 if i == 1 else l2)
        ws[84 + 6 * i + 5] = t[4]
        for j in range(3):
            ws[84 + 6 * (3 + j) + i] = t[5 + j]
    ws[84 + 23] = pf[4]
    ws[84 + 29] = pf[5]
    ws[84 + 35] = pf[6]


@njit(cache=True, error_model="numpy")
def _full_gravity(L, G, ws):
    """dV/dq in redundant coordinates, V = -sum m g.p, into ws[120:126]."""
    l0, l1, l2, pf = _all_terms(L, G, ws, 0.0, 0.0, 0.0, 0.0)
    ws[120] = l0[8]
    ws[121] = l1[8]
    ws[122] = l2[8]
    ws[123] = pf[7]
    ws[124] = pf[8]
    ws[125] = pf[9]


@njit(cache=True, error_model="numpy")
def gamma(L, ws, thd, Xd):
    """gamma_i = zd^T H_i zd (velocity-product part of d^2 h_i / dt^2) into ws[45:48]."""
    for i in range(3):
        k = 8 * i
        a = L[i, 4]
        vbx = -a * thd[i] * ws[k + 1]
        vby = a * thd[i] * ws[k]
        vcx = Xd[0] - Xd[2] * ws[k + 5]
        vcy = Xd[1] + Xd[2] * ws[k + 4]
        wx = vcx - vbx
        wy = vcy - vby
        qx = -Xd[2] * Xd[2] * ws[k + 4] + a * thd[i] * thd[i] * ws[k]
        qy = -Xd[2] * Xd[2] * ws[k + 5] + a * thd[i] * thd[i] * ws[k + 1]
        ws[45 + i] = 2.0 * (wx * wx + wy * wy) + 2.0 * (ws[k + 6] * qx + ws[k + 7] * qy)


@njit(cache=True, error_model="numpy")
def _inverse_jacobians(L, G, th, X, tol, ws, have_geo):
    """The geometry at (th, X) (unless ``have_geo``), A and B, the singularity test with ``tol``
    and B^{-1} (ws[36:45]) into the workspace.  Returns a status code."""
    if not have_geo:
        geometry(L, th, X, ws)
    jacobians(L, ws)
    st = check_singular_ws(L, G, ws, tol)
    if st != OK:
        return st
    det = inv3_ws(ws, 27, 36)
    if det == 0.0:
        return ST_TYPE2
    return OK


# The two forms of the preparation each write only the rate they compute (a kernel that
# writes an argument in any branch cannot take a read-only array there: numba types every
# branch), so a caller's read-only array is accepted where it is an input.
@njit(cache=True, error_model="numpy", _nrt=False)
def prepare_thd(L, G, th, X, thd, Xd, tol, ws, have_geo=False):
    """What the dynamics needs at a consistent (th, X) besides the legs' terms
    (:func:`_all_terms`, formed where they are used), into the workspace: A, B, B^{-1}
    (:func:`_inverse_jacobians`, with the singularity test) and gamma, from the joint
    rates: thd (3,) given (read), Xd = -B^{-1} A thd computed into the array Xd (3,).
    ``have_geo``: ws[0:24] already holds the geometry at (th, X) (e.g. right after
    fk_newton_ws).  Returns a status code.
    """
    st = _inverse_jacobians(L, G, th, X, tol, ws, have_geo)
    if st != OK:
        return st
    for r in range(3):
        Xd[r] = -(ws[36 + 3 * r] * ws[24] * thd[0] + ws[37 + 3 * r] * ws[25] * thd[1]
                  + ws[38 + 3 * r] * ws[26] * thd[2])
    gamma(L, ws, thd, Xd)
    return OK


@njit(cache=True, error_model="numpy", _nrt=False)
def prepare_xd(L, G, th, X, thd, Xd, tol, ws, have_geo=False):
    """:func:`prepare_thd` from the platform rates: Xd (3,) given (read), thd = -A^{-1} B Xd
    computed into the array thd (3,).  Returns a status code."""
    st = _inverse_jacobians(L, G, th, X, tol, ws, have_geo)
    if st != OK:
        return st
    for i in range(3):
        thd[i] = -(ws[27 + 3 * i] * Xd[0] + ws[28 + 3 * i] * Xd[1] + ws[29 + 3 * i] * Xd[2]) / ws[24 + i]
    gamma(L, ws, thd, Xd)
    return OK


@njit(cache=True, error_model="numpy")
def _forces(L, G, ws, thd, Xd, thdd, Xdd, W):
    """F = Mf qdd + Cf qd + gf - [0; W] into ws[130:136], from a prepared workspace
    (the geometry, and the rates thd, Xd (3,) [rad/s, m/s, rad/s]) and the accelerations
    thdd, Xdd (3,); W (3,) the wrench on the platform [N, N, N m].

    Row r is summed over c = 0, 1, 2 as ``(Mf[r, c] thdd_c + Cf[r, c] thd_c) +
    (Mf[r, 3 + c] Xdd_c + Cf[r, 3 + c] Xd_c)`` with the entries of :func:`_all_terms`
    and their structural zeros left out: the dense product's result to the bit.
    """
    phid = Xd[2]
    l0, l1, l2, pf = _all_terms(L, G, ws, thd[0], thd[1], thd[2], phid)
    m33, m35, m45, m55, c35, c45, c55, gf3, gf4, gf5 = pf
    for r in range(3):
        t = l0 if r == 0 else (l1 if r == 1 else l2)
        acc = t[8]
        for c in range(3):
            if r == c:
                acc += t[0] * thdd[c]
            if c == 2:
                acc += t[3] * Xdd[2] + t[4] * phid
            else:
                acc += t[1 + c] * Xdd[c]
        ws[130 + r] = acc
    F3 = gf3 + (l0[1] * thdd[0] + l0[5] * thd[0])
    F3 += m33 * Xdd[0]
    F3 += l1[1] * thdd[1] + l1[5] * thd[1]
    F3 += l2[1] * thdd[2] + l2[5] * thd[2]
    F3 += m35 * Xdd[2] + c35 * phid
    F4 = gf4 + (l0[2] * thdd[0] + l0[6] * thd[0])
    F4 += l1[2] * thdd[1] + l1[6] * thd[1]
    F4 += m33 * Xdd[1]
    F4 += l2[2] * thdd[2] + l2[6] * thd[2]
    F4 += m45 * Xdd[2] + c45 * phid
    F5 = gf5 + (l0[3] * thdd[0] + l0[7] * thd[0])
    F5 += m35 * Xdd[0]
    F5 += l1[3] * thdd[1] + l1[7] * thd[1]
    F5 += m45 * Xdd[1]
    F5 += l2[3] * thdd[2] + l2[7] * thd[2]
    F5 += m55 * Xdd[2] + c55 * phid
    ws[133] = F3 - W[0]
    ws[134] = F4 - W[1]
    ws[135] = F5 - W[2]


@njit(cache=True, error_model="numpy")
def _torques(ws, tau):
    """lam = B^{-T} F_X (ws[139:142]), tau = F_th - A lam (virtual work over admissible displacements)."""
    for i in range(3):
        lam = ws[36 + i] * ws[133] + ws[39 + i] * ws[134] + ws[42 + i] * ws[135]
        ws[139 + i] = lam
        tau[i] = ws[130 + i] - ws[24 + i] * lam


@njit(cache=True, error_model="numpy")
def task_inverse_dynamics(L, G, X, Xd, Xdd, W, branch, tol, tau, lam, th, thd, thdd):
    """Lagrange-D'Alembert inverse dynamics for a platform motion.

    Fills tau (3,), the multipliers lam (3,) and the joint motion th, thd, thdd;
    returns a status code.
    """
    st = _combine(valid3(X), valid3(Xd), valid3(Xdd), valid3(W), OK)
    if st != OK:
        return st
    st = ik(L, X, branch, th)
    if st != OK:
        return st
    ws = np.empty(WS_SIZE)
    st = prepare_xd(L, G, th, X, thd, Xd, tol, ws)
    if st != OK:
        return st
    for i in range(3):
        thdd[i] = -(ws[27 + 3 * i] * Xdd[0] + ws[28 + 3 * i] * Xdd[1] + ws[29 + 3 * i] * Xdd[2]
                    + ws[45 + i]) / ws[24 + i]
    _forces(L, G, ws, thd, Xd, thdd, Xdd, W)
    _torques(ws, tau)
    for i in range(3):
        lam[i] = ws[139 + i]
    return OK


@njit(cache=True, inline="always", error_model="numpy")
def _task_jacobian(ws):
    """J_x = -B^{-1} A (3x3, row-major as a 9-tuple) from B^{-1} (ws[36:45]) and A (ws[24:27])."""
    A0 = ws[24]
    A1 = ws[25]
    A2 = ws[26]
    return (-ws[36] * A0, -ws[37] * A1, -ws[38] * A2,
            -ws[39] * A0, -ws[40] * A1, -ws[41] * A2,
            -ws[42] * A0, -ws[43] * A1, -ws[44] * A2)


@njit(cache=True, inline="always", error_model="numpy")
def _reduced_inertia(l0, l1, l2, pf, J, ws):
    """M = G^T Mf G, G = [I; J_x], into ws[160:169] (row-major) and J_x into ws[175:184],
    from the legs' and the platform's terms (:func:`_all_terms`) and J (:func:`_task_jacobian`).

    Mf G is formed row by row as ``Mf[r, c] + Mf[r, 3] J[0, c] + Mf[r, 4] J[1, c] +
    Mf[r, 5] J[2, c]`` with the structurally zero products left out (adding an exact
    zero does not change a sum), then M[r, c] = (Mf G)[r, c] + sum_k J[k, r] (Mf G)[3 + k, c].
    """
    J00, J01, J02, J10, J11, J12, J20, J21, J22 = J
    m33 = pf[0]
    m35 = pf[1]
    m45 = pf[2]
    m55 = pf[3]
    for c in range(3):
        t = l0 if c == 0 else (l1 if c == 1 else l2)
        j0 = J[c]
        j1 = J[3 + c]
        j2 = J[6 + c]
        # rows x, y, phi of Mf G (Mf[3, 4] = 0)
        p3 = (t[1] + m33 * j0) + m35 * j2
        p4 = (t[2] + m33 * j1) + m45 * j2
        p5 = t[3] + m35 * j0 + m45 * j1 + m55 * j2
        # rows th_r of Mf G (Mf[r, c] = 0 for r != c)
        for r in range(3):
            u = l0 if r == 0 else (l1 if r == 1 else l2)
            q = u[1] * j0
            if r == c:
                q = u[0] + q
            q = q + u[2] * j1 + u[3] * j2
            ws[160 + 3 * r + c] = q + J[r] * p3 + J[3 + r] * p4 + J[6 + r] * p5
    ws[175] = J00
    ws[176] = J01
    ws[177] = J02
    ws[178] = J10
    ws[179] = J11
    ws[180] = J12
    ws[181] = J20
    ws[182] = J21
    ws[183] = J22


@njit(cache=True, error_model="numpy", _nrt=False)
def _reduced_ws(L, G, th, X, thd, tol, ws, have_geo=False):
    """Reduced dynamics into ws[160:184]: M (row-major), h, g, J_x (row-major).

    M = G^T Mf G, h = G^T (Mf Gdot thd + Cf qd + gf), g = G^T gf, J_x = -B^{-1} A,
    G = [I; J_x].  Also leaves Xd in ws[126:129], gamma in ws[45:48] and xb = -B^{-1} gamma
    (the X part of Gdot thd) in ws[136:139].  Mf, Cf and gf are not formed as matrices
    (ws[48:126] is not written: :func:`_full_mass` and :func:`_full_coriolis` do that):
    the products take the nonzero entries from :func:`_all_terms`, in the order of the
    dense products, so the result is the dense form's to the bit.
    """
    st = _inverse_jacobians(L, G, th, X, tol, ws, have_geo)
    if st != OK:
        return st
    Xd = ws[126:129]
    for r in range(3):
        Xd[r] = -(ws[36 + 3 * r] * ws[24] * thd[0] + ws[37 + 3 * r] * ws[25] * thd[1]
                  + ws[38 + 3 * r] * ws[26] * thd[2])
    gamma(L, ws, thd, Xd)
    th0 = thd[0]
    th1 = thd[1]
    th2 = thd[2]
    phid = Xd[2]
    l0, l1, l2, pf = _all_terms(L, G, ws, th0, th1, th2, phid)
    m33, m35, m45, m55, c35, c45, c55, gf3, gf4, gf5 = pf
    g0 = ws[45]
    g1 = ws[46]
    g2 = ws[47]
    xb0 = -(ws[36] * g0 + ws[37] * g1 + ws[38] * g2)
    xb1 = -(ws[39] * g0 + ws[40] * g1 + ws[41] * g2)
    xb2 = -(ws[42] * g0 + ws[43] * g1 + ws[44] * g2)
    ws[136] = xb0
    ws[137] = xb1
    ws[138] = xb2
    J = _task_jacobian(ws)
    # Fv = Mf [0; xb] + Cf qd + gf, row r summed over c as (Mf[r, 3 + c] xb_c + Cf[r, c] thd_c)
    # + Cf[r, 3 + c] Xd_c, structural zeros left out
    F3 = gf3 + (m33 * xb0 + l0[5] * th0)
    F3 = F3 + l1[5] * th1
    F3 = F3 + (m35 * xb2 + l2[5] * th2 + c35 * phid)
    F4 = gf4 + l0[6] * th0
    F4 = F4 + (m33 * xb1 + l1[6] * th1)
    F4 = F4 + (m45 * xb2 + l2[6] * th2 + c45 * phid)
    F5 = gf5 + (m35 * xb0 + l0[7] * th0)
    F5 = F5 + (m45 * xb1 + l1[7] * th1)
    F5 = F5 + (m55 * xb2 + l2[7] * th2 + c55 * phid)
    for r in range(3):
        t = l0 if r == 0 else (l1 if r == 1 else l2)
        Fr = t[8] + t[1] * xb0
        Fr = Fr + t[2] * xb1
        Fr = Fr + (t[3] * xb2 + t[4] * phid)
        j0 = J[r]
        j1 = J[3 + r]
        j2 = J[6 + r]
        ws[169 + r] = Fr + j0 * F3 + j1 * F4 + j2 * F5
        ws[172 + r] = t[8] + j0 * gf3 + j1 * gf4 + j2 * gf5
    _reduced_inertia(l0, l1, l2, pf, J, ws)
    return OK


@njit(cache=True, error_model="numpy", _nrt=False)
def _reduced_mass_ws(L, G, th, X, tol, ws, have_geo=False):
    """The M of :func:`_reduced_ws` alone (the same operations and status), into ws[160:169]."""
    st = _inverse_jacobians(L, G, th, X, tol, ws, have_geo)
    if st != OK:
        return st
    l0, l1, l2, pf = _all_terms(L, G, ws, 0.0, 0.0, 0.0, 0.0)
    _reduced_inertia(l0, l1, l2, pf, _task_jacobian(ws), ws)
    return OK


@njit(cache=True, error_model="numpy")
def reduced(L, G, th, X, thd, tol, Mr, hr, Cr, gr, Jx, want_c):
    """Reduced dynamics in the actuated coordinates at a consistent (th, X).

    Mr = G^T Mf G, hr = G^T (Mf Gdot thd + Cf qd + gf), gr = G^T gf,
    Cr = G^T Mf Gdot + G^T Cf G (only if want_c), Jx = -B^{-1} A, with
    G = [I; Jx].  Matrices (3, 3) C-contiguous.  Returns a status code.
    """
    st = _combine(valid3(th), valid3(X), valid3(thd), OK, OK)
    if st != OK:
        return st
    ws = np.empty(WS_SIZE)
    st = _reduced_ws(L, G, th, X, thd, tol, ws)
    if st != OK:
        return st
    for r in range(3):
        hr[r] = ws[169 + r]
        gr[r] = ws[172 + r]
        for c in range(3):
            Mr[r, c] = ws[160 + 3 * r + c]
            Jx[r, c] = ws[175 + 3 * r + c]
    if not want_c:
        return OK
    Xd = ws[126:129]
    _full_mass(L, G, ws)
    _full_coriolis(L, G, ws, thd, Xd[2])
    # Jxdot = -B^{-1} (Adot + Bdot Jx)
    Adot = np.empty(3)
    Bdot = np.empty((3, 3))
    for i in range(3):
        k = 8 * i
        a = L[i, 4]
        ux, uy, nx, ny = ws[k], ws[k + 1], ws[k + 2], ws[k + 3]
        rx, ry, dx, dy = ws[k + 4], ws[k + 5], ws[k + 6], ws[k + 7]
        vbx = -a * thd[i] * uy
        vby = a * thd[i] * ux
        ddx = Xd[0] - Xd[2] * ry - vbx
        ddy = Xd[1] + Xd[2] * rx - vby
        # n dot = -thd u
        Adot[i] = -2.0 * a * (ddx * nx + ddy * ny - thd[i] * (dx * ux + dy * uy))
        Bdot[i, 0] = 2.0 * ddx
        Bdot[i, 1] = 2.0 * ddy
        # d/dt (d . rho_p) = ddot . rho_p + d . (-phid rho)
        Bdot[i, 2] = 2.0 * (-ddx * ry + ddy * rx - Xd[2] * (dx * rx + dy * ry))
    T3 = np.empty((3, 3))
    for r in range(3):
        for c in range(3):
            acc = Bdot[r, 0] * Jx[0, c] + Bdot[r, 1] * Jx[1, c] + Bdot[r, 2] * Jx[2, c]
            if r == c:
                acc += Adot[r]
            T3[r, c] = acc
    Gm = np.zeros((6, 3))
    Gd = np.zeros((6, 3))
    for i in range(3):
        Gm[i, i] = 1.0
        for c in range(3):
            Gm[3 + i, c] = Jx[i, c]
            Gd[3 + i, c] = -(ws[36 + 3 * i] * T3[0, c] + ws[37 + 3 * i] * T3[1, c] + ws[38 + 3 * i] * T3[2, c])
    # K = Mf Gd + Cf G  (6x3); Cr = G^T K
    K = np.empty((6, 3))
    for r in range(6):
        for c in range(3):
            acc = 0.0
            for k in range(6):
                acc += ws[48 + 6 * r + k] * Gd[k, c] + ws[84 + 6 * r + k] * Gm[k, c]
            K[r, c] = acc
    for r in range(3):
        for c in range(3):
            acc = 0.0
            for k in range(6):
                acc += Gm[k, r] * K[k, c]
            Cr[r, c] = acc
    return OK


@njit(cache=True, error_model="numpy", _nrt=False)
def _fd_ws(L, G, th, X, thd, tau, W, tol, thdd, Xdd, ws, have_geo=False):
    """Forward dynamics at a consistent (th, X): M thdd = tau - h + J_x^T W (Cramer), Xdd."""
    st = _reduced_ws(L, G, th, X, thd, tol, ws, have_geo)
    if st != OK:
        return st
    x0 = tau[0] - ws[169] + ws[175] * W[0] + ws[178] * W[1] + ws[181] * W[2]
    x1 = tau[1] - ws[170] + ws[176] * W[0] + ws[179] * W[1] + ws[182] * W[2]
    x2 = tau[2] - ws[171] + ws[177] * W[0] + ws[180] * W[1] + ws[183] * W[2]
    a, b, c = ws[160], ws[161], ws[162]
    d, e, f = ws[163], ws[164], ws[165]
    g, h, k = ws[166], ws[167], ws[168]
    det = a * (e * k - f * h) - b * (d * k - f * g) + c * (d * h - e * g)
    if det == 0.0:
        return ST_TYPE2
    r = 1.0 / det
    thdd[0] = ((e * k - f * h) * x0 - (b * k - c * h) * x1 + (b * f - c * e) * x2) * r
    thdd[1] = (-(d * k - f * g) * x0 + (a * k - c * g) * x1 - (a * f - c * d) * x2) * r
    thdd[2] = ((d * h - e * g) * x0 - (a * h - b * g) * x1 + (a * e - b * d) * x2) * r
    # Xdd = J_x thdd + xb
    for i in range(3):
        Xdd[i] = (ws[175 + 3 * i] * thdd[0] + ws[176 + 3 * i] * thdd[1] + ws[177 + 3 * i] * thdd[2]
                  + ws[136 + i])
    return OK


@njit(cache=True, error_model="numpy")
def forward_dynamics(L, G, th, X, thd, tau, W, tol, thdd, Xdd):
    """thdd from M thdd = tau - h + Jx^T W; Xdd = Jx thdd - B^{-1} gamma, at a consistent (th, X)."""
    st = _combine(valid3(th), valid3(X), valid3(thd), valid3(tau), valid3(W))
    if st != OK:
        return st
    ws = np.empty(WS_SIZE)
    return _fd_ws(L, G, th, X, thd, tau, W, tol, thdd, Xdd, ws)


@njit(cache=True, error_model="numpy")
def rk4_step(L, G, th, thd, X, tau, W, dt, tol, fk_tol, max_iter, out):
    """One RK4 step of (th, thd) with X recovered from the constraints at every stage.

    Newton for X is warm-started from the start-of-step pose.  out (9,):
    th [0:3], thd [3:6], X [6:9] at the end of the step.  Returns a status code.
    """
    st = _combine(valid3(th), valid3(thd), valid3(X), valid3(tau), valid3(W))
    if st != OK:
        return st
    ws = np.empty(WS_SIZE)
    buf = np.empty(39)
    k_th = buf[0:12]
    k_thd = buf[12:24]
    ths = buf[24:27]
    thds = buf[27:30]
    Xs = buf[30:33]
    thdd = buf[33:36]
    Xdd = buf[36:39]
    for s in range(4):
        cf = 0.0 if s == 0 else (1.0 if s == 3 else 0.5)
        for j in range(3):
            if s == 0:
                ths[j] = th[j]
                thds[j] = thd[j]
            else:
                ths[j] = th[j] + cf * dt * k_th[3 * (s - 1) + j]
                thds[j] = thd[j] + cf * dt * k_thd[3 * (s - 1) + j]
        st, it = fk_newton_ws(L, ths, X, fk_tol, max_iter, Xs, ws)
        if st != OK:
            return st
        st = _fd_ws(L, G, ths, Xs, thds, tau, W, tol, thdd, Xdd, ws, True)
        if st != OK:
            return st
        for j in range(3):
            k_th[3 * s + j] = thds[j]
            k_thd[3 * s + j] = thdd[j]
    for j in range(3):
        out[j] = th[j] + dt / 6.0 * (k_th[j] + 2 * k_th[3 + j] + 2 * k_th[6 + j] + k_th[9 + j])
        out[3 + j] = thd[j] + dt / 6.0 * (k_thd[j] + 2 * k_thd[3 + j] + 2 * k_thd[6 + j] + k_thd[9 + j])
    st, it = fk_newton_ws(L, out[0:3], X, fk_tol, max_iter, out[6:9], ws)
    return st


@njit(cache=True, error_model="numpy")
def fk_continuation(L, th_home, X_home, th, tol, max_iter, step_rad, X):
    """FK by continuation from the home configuration along the straight joint path.

    The joint path th(s) = th_home + s * wrap(th - th_home), s in [0, 1], is cut in
    steps of at most ``step_rad``; each step is a Newton solve warm-started with
    the previous pose, so the assembly mode of the home pose is tracked.
    Returns (status, total iterations).
    """
    st = _combine(valid3(th), OK, OK, OK, OK)
    if st != OK:
        return st, 0
    ws = np.empty(WS_SIZE)
    tmp = np.empty(9)
    dth = tmp[0:3]
    Xg = tmp[3:6]
    ths = tmp[6:9]
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
    for j in range(3):
        Xg[j] = X_home[j]
    total = 0
    for k in range(1, nsteps + 1):
        s = k / nsteps
        for j in range(3):
            ths[j] = th_home[j] + s * dth[j]
        # intermediate steps need only a loose tolerance
        t = tol if k == nsteps else 1e-9
        st, it = fk_newton_ws(L, ths, Xg, t, max_iter, X, ws)
        total += it
        if st != OK:
            return st, total
        for j in range(3):
            Xg[j] = X[j]
    # exact end point (th itself; th_home + dth differs from it by multiples of 2 pi only)
    st, it = fk_newton_ws(L, th, Xg, tol, max_iter, X, ws)
    return st, total + it


# ---------------------------------------------------------------------------
# Fast entry points: few arguments (numba dispatch costs ~50 ns per argument)
# and one allocation.  P = packed parameters, shape (4, NL): rows 0-2 = L,
# row 3 = [G..., tol].
# ---------------------------------------------------------------------------
@njit(cache=True, error_model="numpy")
def id_entry(P, th, thd, thdd, Xh, W, tau):
    """Reduced inverse dynamics with a pose hint, fused: FK refine + D'Alembert torques.

    Xdd = J_x thdd - B^{-1} gamma; F = Mf qdd + Cf qd + gf - [0; W];
    tau = F_th - A B^{-T} F_X (= G^T F).
    """
    G = P[3]
    st = _combine(valid3(th), valid3(thd), valid3(thdd), valid3(Xh), valid3(W))
    if st != OK:
        return st
    ws = np.empty(WS_SIZE + 9)
    X = ws[WS_SIZE:WS_SIZE + 3]
    Xd = ws[WS_SIZE + 3:WS_SIZE + 6]
    Xdd = ws[WS_SIZE + 6:WS_SIZE + 9]
    st, it = fk_newton_ws(P, th, Xh, 1e-12, 50, X, ws)
    if st != OK:
        return st
    st = prepare_thd(P, G, th, X, thd, Xd, G[5], ws, True)
    if st != OK:
        return st
    for r in range(3):
        acc = 0.0
        for c in range(3):
            acc -= ws[36 + 3 * r + c] * (ws[24 + c] * thdd[c] + ws[45 + c])
        Xdd[r] = acc
    _forces(P, G, ws, thd, Xd, thdd, Xdd, W)
    _torques(ws, tau)
    return OK


@njit(cache=True, error_model="numpy")
def fd_entry(P, th, thd, tau, Xh, W, thdd):
    """Forward dynamics with a pose hint, joint accelerations only."""
    ws = np.empty(WS_SIZE + 9)
    memo = ws[WS_SIZE + 6:WS_SIZE + 9]
    memo[0] = np.nan
    return fd_hint_ws(P, th, thd, tau, Xh, W, thdd, ws, memo)


# fd_hint_ws, _hinted_pose and reduced_hint_ws are inlined into their callers (numba IR), the
# same operations in the same order (the runs are bit-identical): rrr_advance of two plant
# steps called from Python 5.8 -> 4.0 us; inside the compiled loop's segment, where the
# calls cost less, 7.78 -> 7.60 us a cycle; a cold first run takes no longer to compile
@njit(cache=True, inline="always", error_model="numpy")
def fd_hint_ws(P, th, thd, tau, Xh, W, thdd, ws, memo):
    """:func:`fd_entry` in the caller's workspace ws (WS_SIZE + 6,), no allocation.

    Validates the inputs (th [rad], thd [rad/s], tau [N m], the pose hint Xh, the
    platform wrench W: (3,) each), solves the pose X by Newton from Xh
    (:func:`_hinted_pose`; ``memo`` (3,) the caller's :func:`cos_sin_memo`, NaN-started)
    and writes the joint accelerations thdd (3,) [rad/s^2].  Returns a status code.
    """
    G = P[3]
    st = _hinted_pose(P, th, Xh, _combine(valid3(th), valid3(thd), valid3(tau), valid3(Xh), valid3(W)), ws,
                      memo)
    if st != OK:
        return st
    return _fd_ws(P, G, th, ws[WS_SIZE:WS_SIZE + 3], thd, tau, W, G[5], thdd, ws[WS_SIZE + 3:WS_SIZE + 6],
                  ws, True)


@njit(cache=True, inline="always", error_model="numpy")
def _hinted_pose(P, th, Xh, st, ws, memo):
    """The pose X (3,) of the joint angles th (3,) by Newton from the hint Xh (tolerance
    1e-12 m, 50 iterations; cos and sin of Xh[2] through ``memo``, :func:`fk_newton_memo_ws`)
    into ws[WS_SIZE:WS_SIZE + 3], its geometry in ws[0:24]; nothing when the inputs' status
    ``st`` (:func:`_combine`) is not OK.  Returns a status code."""
    if st != OK:
        return st
    st, it = fk_newton_memo_ws(P, th, Xh, memo, 1e-12, 50, ws[WS_SIZE:WS_SIZE + 3], ws)
    return st


@njit(cache=True, error_model="numpy")
def fd_task_entry(P, th, thd, tau, Xh, W, out):
    """Forward dynamics with a pose hint; out (9,) = thdd, Xdd, refined X."""
    G = P[3]
    st = _combine(valid3(th), valid3(thd), valid3(tau), valid3(Xh), valid3(W))
    if st != OK:
        return st
    ws = np.empty(WS_SIZE)
    X = out[6:9]
    st, it = fk_newton_ws(P, th, Xh, 1e-12, 50, X, ws)
    if st != OK:
        return st
    return _fd_ws(P, G, th, X, thd, tau, W, G[5], out[0:3], out[3:6], ws, True)


@njit(cache=True, error_model="numpy")
def tid_entry(P, X, Xd, Xdd, W, branch, tau):
    """Task-space inverse dynamics, torques only."""
    return tid_ws(P, X, Xd, Xdd, W, branch, tau, np.empty(WS_SIZE + 9))


@njit(cache=True, error_model="numpy", _nrt=False)
def tid_ws(P, X, Xd, Xdd, W, branch, tau, ws):
    """:func:`tid_entry` in the caller's workspace ``ws`` (>= WS_SIZE + 9,): no allocation.

    X, Xd, Xdd (3,) platform pose, rate, acceleration; W (3,) wrench on the platform;
    branch (3,) elbow branches; tau (3,) actuator torques [N m] out.  Returns a status.
    """
    G = P[3]
    st = _combine(valid3(X), valid3(Xd), valid3(Xdd), valid3(W), OK)
    if st != OK:
        return st
    th = ws[WS_SIZE:WS_SIZE + 3]
    thd = ws[WS_SIZE + 3:WS_SIZE + 6]
    thdd = ws[WS_SIZE + 6:WS_SIZE + 9]
    st = ik(P, X, branch, th)
    if st != OK:
        return st
    st = prepare_xd(P, G, th, X, thd, Xd, G[5], ws)
    if st != OK:
        return st
    for i in range(3):
        thdd[i] = -(ws[27 + 3 * i] * Xdd[0] + ws[28 + 3 * i] * Xdd[1] + ws[29 + 3 * i] * Xdd[2]
                    + ws[45 + i]) / ws[24 + i]
    _forces(P, G, ws, thd, Xd, thdd, Xdd, W)
    _torques(ws, tau)
    return OK


@njit(cache=True, error_model="numpy")
def reduced_entry(P, th, thd, Xh, out):
    """M (row-major, out[0:9]), h (out[9:12]) and g (out[12:15]) with a pose hint."""
    ws = np.empty(WS_SIZE + 6)
    memo = ws[WS_SIZE + 3:WS_SIZE + 6]
    memo[0] = np.nan
    return reduced_hint_ws(P, th, thd, Xh, True, out, ws, memo)


@njit(cache=True, inline="always", error_model="numpy")
def reduced_hint_ws(P, th, thd, Xh, full, out, ws, memo):
    """:func:`reduced_entry` in the caller's workspace ws (WS_SIZE + 3,), no allocation.

    th (3,) [rad], thd (3,) [rad/s], the pose hint Xh (3,).  With ``full`` True, out (15,)
    as :func:`reduced_entry`; with ``full`` False only the reduced inertia M [kg m^2]
    (row-major into out[0:9]): the same validation (thd included), pose
    (:func:`_hinted_pose`), operations on M and status, without the velocity and gravity
    terms; ``memo`` (3,) as :func:`fd_hint_ws`'s.  Returns a status code.
    """
    G = P[3]
    st = _hinted_pose(P, th, Xh, _combine(valid3(th), valid3(thd), valid3(Xh), OK, OK), ws, memo)
    if st != OK:
        return st
    X = ws[WS_SIZE:WS_SIZE + 3]
    if full:
        st = _reduced_ws(P, G, th, X, thd, G[5], ws, True)
    else:
        st = _reduced_mass_ws(P, G, th, X, G[5], ws, True)
    if st != OK:
        return st
    for j in range(15 if full else 9):
        out[j] = ws[160 + j]
    return OK


@njit(cache=True, error_model="numpy")
def _geometry_checked(P, th, X, ws):
    """Finite-input check, then geometry and the constraint Jacobians of (th, X) into ws."""
    st = _combine(valid3(th), valid3(X), OK, OK, OK)
    if st != OK:
        return st
    geometry(P, th, X, ws)
    jacobians(P, ws)
    return OK


@njit(cache=True, error_model="numpy")
def jx_entry(P, th, X, Jx):
    """Task Jacobian J_x = -B^{-1} A (row-major into Jx (9,)) at a consistent (th, X).

    Same singularity test as ``check_singular`` (status ST_TYPE1 + i / ST_TYPE2).
    """
    ws = np.empty(WS_SIZE)
    st = _geometry_checked(P, th, X, ws)
    if st != OK:
        return st
    return _jx_from_jacobians(P, ws, Jx)


@njit(cache=True, error_model="numpy", _nrt=False)
def jx_geo_ws(P, ws, Jx):
    """:func:`jx_entry` from the geometry already in ``ws[0:24]`` (e.g. right after a
    successful :func:`fk_newton_ws`, which leaves the geometry of its pose there): the
    constraint Jacobians, the singularity test, J_x (9,) row-major.  Returns a status."""
    jacobians(P, ws)
    return _jx_from_jacobians(P, ws, Jx)


@njit(cache=True, error_model="numpy")
def _jx_from_jacobians(P, ws, Jx):
    """The singularity test and J_x = -B^{-1} A (9,) from A, B in ``ws[24:36]``."""
    G = P[3]
    st = check_singular(P, G, ws[24:27], ws[27:36], G[5])
    if st != OK:
        return st
    if inv3_ws(ws, 27, 36) == 0.0:
        return ST_TYPE2
    for r in range(3):
        for c in range(3):
            Jx[3 * r + c] = -(ws[36 + 3 * r + c] * ws[24 + c])
    return OK


@njit(cache=True, error_model="numpy")
def sv_extremes3(A):
    """Largest and smallest singular value of a 3x3 matrix, by one-sided Jacobi (Hestenes).

    ``A`` (9,) row-major is overwritten (its columns are rotated until mutually orthogonal;
    the singular values are then their norms).  Jacobi rotations give every singular value
    to high relative accuracy (as good as LAPACK's for the smallest), without allocation.
    Returns ``(s_max, s_min)``.
    """
    for _ in range(30):
        rotated = False
        for p in range(2):
            for q in range(p + 1, 3):
                al = A[p] * A[p] + A[3 + p] * A[3 + p] + A[6 + p] * A[6 + p]
                be = A[q] * A[q] + A[3 + q] * A[3 + q] + A[6 + q] * A[6 + q]
                ga = A[p] * A[q] + A[3 + p] * A[3 + q] + A[6 + p] * A[6 + q]
                if abs(ga) <= 1e-16 * math.sqrt(al * be):        # already orthogonal
                    continue
                rotated = True
                ze = (be - al) / (2.0 * ga)
                t = (1.0 if ze >= 0.0 else -1.0) / (abs(ze) + math.sqrt(1.0 + ze * ze))
                c = 1.0 / math.sqrt(1.0 + t * t)
                sn = c * t
                for r in range(3):
                    x = A[3 * r + p]
                    y = A[3 * r + q]
                    A[3 * r + p] = c * x - sn * y
                    A[3 * r + q] = sn * x + c * y
        if not rotated:
            break
    smax = 0.0
    smin = 1e308
    for k in range(3):
        v = math.sqrt(A[k] * A[k] + A[3 + k] * A[3 + k] + A[6 + k] * A[6 + k])
        if v > smax:
            smax = v
        if v < smin:
            smin = v
    return smax, smin


@njit(cache=True, error_model="numpy")
def sing_entry(P, th, X, out):
    """Singularity measures at (th, X) into out (8,).

    out = [type1 measure m1, type2 measure det(B normalised), cond_a, cond_b,
    margin (-1: not computed, the caller decides regularity), det_a, det_b,
    worst leg].  ``margin`` is 1/cond of J_x with its phi row scaled by lc,
    computed only when the pose is regular (both measures >= tol).
    """
    G = P[3]
    ws = np.empty(WS_SIZE)
    st = _geometry_checked(P, th, X, ws)
    if st != OK:
        return st
    m1, db = normalised_measures(P, G, ws[24:27], ws[27:36])
    lc = G[4]
    amin = 1e300
    amax = 0.0
    worst = 0
    for i in range(3):
        v = abs(ws[24 + i] / (2.0 * P[i, 4] * P[i, 5]))
        if v < amin:
            amin = v
            worst = i
        if v > amax:
            amax = v
    M = ws[160:169]                      # the reduced-dynamics block, unused here
    for i in range(3):
        s2 = 2.0 * P[i, 5]
        M[3 * i] = ws[27 + 3 * i] / s2
        M[3 * i + 1] = ws[28 + 3 * i] / s2
        M[3 * i + 2] = ws[29 + 3 * i] / s2 / lc
    smax, smin = sv_extremes3(M)
    out[0] = m1
    out[1] = db
    out[2] = amax / amin if amin > 0 else np.inf
    out[3] = smax / smin if smin > 0 else np.inf
    out[4] = _regular_margin(P, ws, m1, db)
    out[5] = ws[24] * ws[25] * ws[26]
    out[6] = det3(ws[27:36])
    out[7] = worst
    return OK


@njit(cache=True, error_model="numpy", _nrt=False)
def _regular_margin(P, ws, m1, db):
    """The ``margin`` of :func:`sing_entry` from A, B in ``ws[24:36]`` and their normalised
    measures ``m1``, ``db`` (:func:`normalised_measures`): 1/cond of J_x with its phi row scaled
    by lc when both measures are >= tol and B is invertible, else -1.  Overwrites ws[36:45]
    (B^{-1}) and ws[160:169]."""
    G = P[3]
    lc = G[4]
    tol = G[5]
    if not (m1 < tol) and not (abs(db) < tol):
        det = inv3_ws(ws, 27, 36)
        if det != 0.0:
            M = ws[160:169]
            for r in range(3):
                for c in range(3):
                    M[3 * r + c] = -(ws[36 + 3 * r + c] * ws[24 + c])
            for c in range(3):
                M[6 + c] *= lc
            smax, smin = sv_extremes3(M)
            return smin / smax if smax > 0 else 0.0
    return -1.0


@njit(cache=True, error_model="numpy", _nrt=False)
def sing_margin_ws(P, th, X, ws, out):
    """The measures of :func:`sing_entry` that decide a singularity check, from the geometry of
    (th, X) already in ``ws[0:24]`` (e.g. right after a successful :func:`fk_newton_ws` to X,
    which leaves it there): out[0] m1, out[1] the type-2 measure, out[4] the margin (-1: not
    computed), bit-identical to :func:`sing_entry`'s; the other entries of out (8,) are not
    written (the condition numbers cost a second singular-value decomposition).  ``ws``
    (WS_SIZE,) is overwritten beyond the geometry; no allocation.  Returns a status code (the
    input check of :func:`sing_entry`)."""
    st = _combine(valid3(th), valid3(X), OK, OK, OK)
    if st != OK:
        return st
    jacobians(P, ws)
    m1, db = normalised_measures(P, P[3], ws[24:27], ws[27:36])
    out[0] = m1
    out[1] = db
    out[4] = _regular_margin(P, ws, m1, db)
    return OK


@njit(cache=True, error_model="numpy", _nrt=False)
def regular_margin_ws(P, th, guess, tol_sing, X, ws, out):
    """The pose and singularity margin of a singularity check at a regular pose, the body the
    safety supervisor and the compiled loop share: the pose ``X`` (3,) by Newton from ``guess``
    at the joint angles ``th`` (tolerance 1e-12 m, 50 iterations; what
    ``Planar3RRR.forward_kinematics_task(th, guess)`` finds), then :func:`sing_margin_ws` into
    ``out`` (8,) (margin ``out[4]``).  Returns OK when both succeed and the pose is regular
    (``out[0]`` and ``|out[1]|`` at least ``tol_sing``, a margin >= 0); otherwise the failing
    status, ST_TYPE1 / ST_TYPE2 below the tolerance, ST_BADINPUT for no margin (the caller
    then asks the model, or stops: it decides nothing here)."""
    st, it = fk_newton_ws(P, th, guess, 1e-12, 50, X, ws)
    if st != OK:
        return st
    st = sing_margin_ws(P, th, X, ws, out)
    if st != OK:
        return st
    if not (out[4] >= 0.0):
        return ST_BADINPUT
    if out[0] < tol_sing:
        return ST_TYPE1
    if abs(out[1]) < tol_sing:
        return ST_TYPE2
    return OK


_gate.release()
