"""Numba kernels of the Stewart platform (fast path, formulation (b): Kane / Newton-Euler per leg).

Parameter packing (shared with :mod:`dynamics._stewart_lagrange`)
-----------------------------------------------------------------
``legs`` : float array (6, 32), one row per leg:
    ``[b(3), p(3), a(3), m1, S1, I1(9), m2, S2, I2(9), armature]``
    b = base joint (base frame) [m]; p = platform joint (platform frame) [m];
    a = unit first axis of the base universal joint (base frame); m1, S1 =
    lower cylinder mass [kg] and COM distance from the base joint [m]; I1 = its
    inertia about its COM in the leg frame, row-major [kg m^2]; m2, S2, I2 =
    upper piston mass, COM distance from the *platform* joint, inertia;
    armature = reflected drive mass on the leg length [kg].
``plat`` : float array (16,): ``[m, c(3), Ic(9), g(3)]`` platform mass [kg], COM in
    the platform frame [m], inertia about the COM in the platform frame
    [kg m^2], gravity in the base frame [m/s^2].

``params`` : float array (210,) = ``concat(legs.ravel(), plat, [char_length,
    singular_condition])``, used by the one-state kernels (``*_one``) so that a
    call has few arguments: numba's dispatch cost grows with the argument count
    and dominates a ~1 us kernel.  ``char_length`` [m] divides the angular
    columns of the leg Jacobian (dimensionless condition number);
    ``singular_condition`` is the model's condition-number limit.

Status codes returned by kernels: 0 ok, 1 a linear system was singular
(actuation/type-2 singularity), 2 a universal joint is singular (leg parallel to
its first axis), 3 Newton did not converge, 4 Euler-angle map singular
(cos(beta) = 0), 5 a result is not finite (non-finite input), 6 an argument
has the wrong length or is not finite (one-state kernels; callers then take their
checked path), 7 the cheap Frobenius bound ``|Jh|_F |Jh^-1|_F`` of the leg
Jacobian's condition number exceeds ``singular_condition`` (one-state kernels of
maps that check conditioning; callers then take their checked path, which
computes the exact 2-norm condition number and raises or not).
The one-state kernels have explicit signatures (contiguous float64 vectors), so
any other argument type raises TypeError instead of compiling a new version.

All kernels are scalar code on tuples (no per-leg allocation) so one task
inverse dynamics call costs about a microsecond.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from ._kernel_cache import CompileGate, stamp_package_caches

LEG_B = slice(0, 3)
LEG_P = slice(3, 6)
LEG_A = slice(6, 9)
LEG_M1 = 9
LEG_S1 = 10
LEG_I1 = slice(11, 20)
LEG_M2 = 20
LEG_S2 = 21
LEG_I2 = slice(22, 31)
LEG_ARM = 31
LEG_COLS = 32

PL_M = 0
PL_C = slice(1, 4)
PL_I = slice(4, 13)
PL_G = slice(13, 16)
PL_COLS = 16

OK, SINGULAR, UJOINT_SINGULAR, NO_CONVERGENCE, EULER_SINGULAR, NOT_FINITE, BAD_INPUT, COND_LIMIT = \
    0, 1, 2, 3, 4, 5, 6, 7
#: index in ``params`` of the characteristic length [m] that makes the leg Jacobian dimensionless
P_CHAR = 6 * LEG_COLS + PL_COLS
#: index in ``params`` of the condition-number limit (``singular_condition``)
P_COND = P_CHAR + 1
#: length of the flat parameter vector
#: ``params = concat(legs.ravel(), plat, [char_length, singular_condition])`` of the one-state kernels
N_PARAMS = P_COND + 1

#: relative pivot size below which a 6x6 system is treated as singular
PIVOT_TOL = 1e-13
#: |u x a| below which a universal joint is treated as singular
UJOINT_TOL = 1e-9
#: the legs' unit vectors argument of :func:`fd_twist_ws` and :func:`mass_actuated_ws` when
#: they have none (never read)
J_NONE = np.zeros((6, 3))


# numba takes a function's cache locator when it is decorated: the kernel files' stamp first
stamp_package_caches()
#: one process at a time compiles this module's kernels (released at the end of the module)
_gate = CompileGate(__file__)


# -- 3-vector helpers on tuples -----------------------------------------------
@njit(cache=True, error_model="numpy")
def _add(a, b):
    return (a[0] + b[0], a[1] + b[1], a[2] + b[2])


@njit(cache=True, error_model="numpy")
def _sub(a, b):
    return (a[0] - b[0], a[1] - b[1], a[2] - b[2])


@njit(cache=True, error_model="numpy")
def _mul(s, a):
    return (s * a[0], s * a[1], s * a[2])


@njit(cache=True, error_model="numpy")
def _dot(a, b):
    return a[0] * b[0] + a[1] * b[1] + a[2] * b[2]


@njit(cache=True, error_model="numpy")
def _cross(a, b):
    return (a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0])


@njit(cache=True, error_model="numpy")
def _vec(arr, k):
    return (arr[k], arr[k + 1], arr[k + 2])


@njit(cache=True, error_model="numpy")
def _matvec(M, k, v):
    """(M v) with M stored row-major as 9 entries of array M starting at k."""
    return (M[k] * v[0] + M[k + 1] * v[1] + M[k + 2] * v[2],
            M[k + 3] * v[0] + M[k + 4] * v[1] + M[k + 5] * v[2],
            M[k + 6] * v[0] + M[k + 7] * v[1] + M[k + 8] * v[2])


@njit(cache=True, error_model="numpy", _nrt=False)
def rotation(e, R):
    """Fill R (3x3) = Rz(gamma) Ry(beta) Rx(alpha) for e = (alpha, beta, gamma)."""
    ca, sa = math.cos(e[0]), math.sin(e[0])
    cb, sb = math.cos(e[1]), math.sin(e[1])
    cg, sg = math.cos(e[2]), math.sin(e[2])
    R[0, 0] = cg * cb
    R[0, 1] = cg * sb * sa - sg * ca
    R[0, 2] = cg * sb * ca + sg * sa
    R[1, 0] = sg * cb
    R[1, 1] = sg * sb * sa + cg * ca
    R[1, 2] = sg * sb * ca - cg * sa
    R[2, 0] = -sb
    R[2, 1] = cb * sa
    R[2, 2] = cb * ca


@njit(cache=True, error_model="numpy")
def _rot9g(e0, e1, e2):
    """Row-major 9-tuple of R = Rz(e2) Ry(e1) Rx(e0), for float or complex angles (complex step)."""
    ca, sa = np.cos(e0), np.sin(e0)
    cb, sb = np.cos(e1), np.sin(e1)
    cg, sg = np.cos(e2), np.sin(e2)
    return (cg * cb, cg * sb * sa - sg * ca, cg * sb * ca + sg * sa,
            sg * cb, sg * sb * sa + cg * ca, sg * sb * ca - cg * sa,
            -sb, cb * sa, cb * ca)


@njit(cache=True, error_model="numpy")
def _rot9(e0, e1, e2):
    """Row-major 9-tuple of R = Rz(e2) Ry(e1) Rx(e0) (float angles)."""
    return _rot9g(e0, e1, e2)


@njit(cache=True, error_model="numpy")
def _rot9_of(R):
    """The row-major 9-tuple of a rotation matrix R (3, 3) (:func:`rotation`'s is :func:`_rot9`'s)."""
    return (R[0, 0], R[0, 1], R[0, 2], R[1, 0], R[1, 1], R[1, 2], R[2, 0], R[2, 1], R[2, 2])


@njit(cache=True, error_model="numpy")
def _rv(R, v):
    return (R[0, 0] * v[0] + R[0, 1] * v[1] + R[0, 2] * v[2],
            R[1, 0] * v[0] + R[1, 1] * v[1] + R[1, 2] * v[2],
            R[2, 0] * v[0] + R[2, 1] * v[1] + R[2, 2] * v[2])


@njit(cache=True, error_model="numpy")
def euler_to_twist(X, Xd, Xdd, nu, nud):
    """nu = [v; omega], nud = [a; omega_dot] from Euler coordinates (omega = E e', omega_dot = E e'' + E' e')."""
    cb, sb = math.cos(X[4]), math.sin(X[4])
    cg, sg = math.cos(X[5]), math.sin(X[5])
    ad, bd, gd = Xd[3], Xd[4], Xd[5]
    add, bdd, gdd = Xdd[3], Xdd[4], Xdd[5]
    for k in range(3):
        nu[k] = Xd[k]
        nud[k] = Xdd[k]
    nu[3] = cg * cb * ad - sg * bd
    nu[4] = sg * cb * ad + cg * bd
    nu[5] = -sb * ad + gd
    # E e''
    nud[3] = cg * cb * add - sg * bdd
    nud[4] = sg * cb * add + cg * bdd
    nud[5] = -sb * add + gdd
    # E' e'
    nud[3] += (-sg * cb * gd - cg * sb * bd) * ad - cg * gd * bd
    nud[4] += (cg * cb * gd - sg * sb * bd) * ad - sg * gd * bd
    nud[5] += -cb * bd * ad


@njit(cache=True, error_model="numpy")
def twist_to_euler_acc(X, Xd, nud, Xdd):
    """Xdd from the twist acceleration: e'' = E^{-1}(omega_dot - E' e'). Returns status."""
    cb, sb = math.cos(X[4]), math.sin(X[4])
    cg, sg = math.cos(X[5]), math.sin(X[5])
    if abs(cb) < 1e-12:
        return EULER_SINGULAR
    ad, bd, gd = Xd[3], Xd[4], Xd[5]
    w0 = nud[3] - ((-sg * cb * gd - cg * sb * bd) * ad - cg * gd * bd)
    w1 = nud[4] - ((cg * cb * gd - sg * sb * bd) * ad - sg * gd * bd)
    w2 = nud[5] - (-cb * bd * ad)
    # E^{-1}: alpha'' = (cg w0 + sg w1)/cb ; beta'' = -sg w0 + cg w1 ; gamma'' = w2 + sb alpha''
    a2 = (cg * w0 + sg * w1) / cb
    for k in range(3):
        Xdd[k] = nud[k]
    Xdd[3] = a2
    Xdd[4] = -sg * w0 + cg * w1
    Xdd[5] = w2 + sb * a2
    return OK


@njit(cache=True, error_model="numpy")
def _pivot_row(M, c):
    """Row r >= c of the largest |M[r, c]| and that magnitude (partial pivoting)."""
    piv = c
    best = abs(M[c, c])
    for r in range(c + 1, M.shape[0]):
        if abs(M[r, c]) > best:
            best = abs(M[r, c])
            piv = r
    return piv, best


@njit(cache=True, error_model="numpy")
def _swap_rows(M, a, b, j0):
    """Swap rows a and b of M from column j0 on."""
    for j in range(j0, M.shape[1]):
        t = M[a, j]
        M[a, j] = M[b, j]
        M[b, j] = t


@njit(cache=True, error_model="numpy")
def solve6(A, b, x):
    """Solve A x = b (6x6) by Gaussian elimination with partial pivoting; A, b are not modified.

    Returns SINGULAR if a pivot is below PIVOT_TOL times the largest |A_ij|.
    """
    return solve6_ws(A, b, x, np.empty((6, 6)), np.empty(6, np.int64))


@njit(cache=True, error_model="numpy", _nrt=False)
def solve6_ws(A, b, x, LU, perm):
    """:func:`solve6` in the caller's work: LU (6, 6) and the row order ``perm`` (6,) (integers,
    or floats holding them)."""
    st = lu6(A, LU, perm)
    if st != OK:
        return st
    lu_solve6(LU, perm, b, x)
    return OK


@njit(cache=True, error_model="numpy", _nrt=False)
def lu6(A, LU, perm):
    """LU factorisation with partial pivoting ``P A = L U`` (6x6) into LU (unit L below the diagonal).

    ``perm[i]`` is the row of A that became row i (an integer array, or floats holding the integers).  Same pivoting and singularity test as
    :func:`solve6` (SINGULAR if a pivot is below PIVOT_TOL times the largest |A_ij|).
    """
    scale = 0.0
    for i in range(6):
        perm[i] = i
        for j in range(6):
            LU[i, j] = A[i, j]
            if abs(A[i, j]) > scale:
                scale = abs(A[i, j])
    if not scale > 0.0:
        return SINGULAR
    for c in range(6):
        piv, best = _pivot_row(LU, c)
        if best <= PIVOT_TOL * scale:
            return SINGULAR
        if piv != c:
            _swap_rows(LU, c, piv, 0)
            k = perm[c]
            perm[c] = perm[piv]
            perm[piv] = k
        inv = 1.0 / LU[c, c]
        for r in range(c + 1, 6):
            f = LU[r, c] * inv
            LU[r, c] = f
            if f != 0.0:
                for j in range(c + 1, 6):
                    LU[r, j] -= f * LU[c, j]
    return OK


@njit(cache=True, error_model="numpy", _nrt=False)
def lu_solve6(LU, perm, b, x):
    """x = A^{-1} b from :func:`lu6` (x may not alias b)."""
    for i in range(6):
        s = b[int(perm[i])]
        for j in range(i):
            s -= LU[i, j] * x[j]
        x[i] = s
    for i in range(5, -1, -1):
        s = x[i]
        for j in range(i + 1, 6):
            s -= LU[i, j] * x[j]
        x[i] = s / LU[i, i]


@njit(cache=True, error_model="numpy", _nrt=False)
def lu_solve6_t(LU, perm, b, x, w):
    """x = A^{-T} b from :func:`lu6` (``A^T = U^T L^T P``); w is a 6-vector workspace."""
    for i in range(6):
        s = b[i]
        for j in range(i):
            s -= LU[j, i] * w[j]
        w[i] = s / LU[i, i]
    for i in range(5, -1, -1):
        s = w[i]
        for j in range(i + 1, 6):
            s -= LU[j, i] * w[j]
        w[i] = s
    for i in range(6):
        x[int(perm[i])] = w[i]


@njit(cache=True, error_model="numpy", _nrt=False)
def leg_geometry(X, legs, R, J, L, U):
    """Fill R, the twist Jacobian J (rows [u_i, R p_i x u_i]), lengths L and unit vectors U (6x3)."""
    rotation(X[3:6], R)
    r = (X[0], X[1], X[2])
    for i in range(6):
        leg = legs[i]
        rp = _rv(R, _vec(leg, 3))
        l = _sub(_add(r, rp), _vec(leg, 0))
        Li = math.sqrt(_dot(l, l))
        u = _mul(1.0 / Li, l)
        m = _cross(rp, u)
        L[i] = Li
        for k in range(3):
            U[i, k] = u[k]
            J[i, k] = u[k]
            J[i, 3 + k] = m[k]


@njit(cache=True, error_model="numpy", _nrt=False)
def twist_wrench(X, nu, nud, legs, plat, J, rhs, Ldd):
    """Generalized inertia + gravity forces of platform and legs in twist coordinates.

    Fills J (6x6, L' = J nu), rhs (6,) = sum over bodies of the wrench the
    actuators must supply (so that J^T F = rhs - external wrench), and Ldd (6,)
    the leg accelerations.  Kane's method per leg: the partial velocities of the
    two leg bodies with respect to the platform-joint velocity are
    ``V1 = S1 P / L``, ``V2 = u u^T + (L - S2)/L P`` and ``A / L`` (angular).
    Returns OK or UJOINT_SINGULAR.
    """
    return _twist_wrench(X, _rot9(X[3], X[4], X[5]), Ldd, J, False, nu, nud, legs, plat, J, rhs, Ldd)


@njit(inline="always", error_model="numpy")
def _leg_line(R9, r, leg, i, Lg, Ug, have):
    """Leg ``i``'s platform joint ``R p`` (base frame), length L and unit vector u at the pose
    (rotation R9, position r), or L and u from ``Lg`` (6,), ``Ug`` (6, 3) when ``have`` (the
    same numbers from :func:`leg_geometry`, e.g. the forward kinematics' last iterate)."""
    rp = _matvec(R9, 0, _vec(leg, 3))
    if have:
        return rp, Lg[i], (Ug[i, 0], Ug[i, 1], Ug[i, 2])
    l = _sub(_add(r, rp), _vec(leg, 0))
    L = np.sqrt(_dot(l, l))
    return rp, L, _mul(1.0 / L, l)


@njit(cache=True, error_model="numpy", _nrt=False)
def _twist_wrench(X, R9, Lg, Ug, have, nu, nud, legs, plat, J, rhs, Ldd):
    """:func:`twist_wrench` at the pose X with its rotation R9 (row-major 9-tuple) and, when
    ``have``, the legs' lengths and unit vectors ``Lg``, ``Ug`` (:func:`_leg_line`)."""
    r = (X[0], X[1], X[2])
    v = (nu[0], nu[1], nu[2])
    om = (nu[3], nu[4], nu[5])
    acc = (nud[0], nud[1], nud[2])
    omd = (nud[3], nud[4], nud[5])
    g = _vec(plat, 13)
    # platform (about its reference point O)
    m = plat[0]
    cw = _matvec(R9, 0, _vec(plat, 1))
    ac = _add(_add(acc, _cross(omd, cw)), _cross(om, _cross(om, cw)))
    fp = _mul(m, _sub(ac, g))
    # Ic_w w = R Ic R^T w
    Rtom = (R9[0] * om[0] + R9[3] * om[1] + R9[6] * om[2],
            R9[1] * om[0] + R9[4] * om[1] + R9[7] * om[2],
            R9[2] * om[0] + R9[5] * om[1] + R9[8] * om[2])
    Rtomd = (R9[0] * omd[0] + R9[3] * omd[1] + R9[6] * omd[2],
             R9[1] * omd[0] + R9[4] * omd[1] + R9[7] * omd[2],
             R9[2] * omd[0] + R9[5] * omd[1] + R9[8] * omd[2])
    Icom = _matvec(R9, 0, _matvec(plat, 4, Rtom))
    Icomd = _matvec(R9, 0, _matvec(plat, 4, Rtomd))
    np_ = _add(_add(Icomd, _cross(om, Icom)), _cross(cw, fp))
    for k in range(3):
        rhs[k] = fp[k]
        rhs[3 + k] = np_[k]
    for i in range(6):
        leg = legs[i]
        b = _vec(leg, 0)
        a = _vec(leg, 6)
        m1, S1, m2, S2 = leg[9], leg[10], leg[20], leg[21]
        rp, L, u = _leg_line(R9, r, leg, i, Lg, Ug, have)
        vP = _add(v, _cross(om, rp))
        aP = _add(_add(acc, _cross(omd, rp)), _cross(om, _cross(om, rp)))
        Ld = _dot(u, vP)
        ud = _mul(1.0 / L, _sub(vP, _mul(Ld, u)))
        Lddi = _dot(u, aP) + (_dot(vP, vP) - Ld * Ld) / L
        udd = _mul(1.0 / L, _sub(_sub(aP, _mul(Lddi, u)), _mul(2.0 * Ld, ud)))
        # leg frame from the universal joint
        ua = _cross(u, a)
        s = math.sqrt(_dot(ua, ua))
        if s < UJOINT_TOL:
            return UJOINT_SINGULAR
        xl = _mul(1.0 / s, ua)
        yl = _cross(u, xl)
        c = _dot(a, u)
        w = _dot(ud, xl)
        sig = -w * c / s
        omL = _add(_cross(u, ud), _mul(sig, u))
        xld = _cross(omL, xl)
        cd = _dot(a, ud)
        sd = -c * cd / s
        wd = _dot(udd, xl) + _dot(ud, xld)
        sigd = -(wd * c + w * cd) / s + w * c * sd / (s * s)
        alL = _add(_add(_cross(u, udd), _mul(sigd, u)), _mul(sig, ud))
        # I_w x = RL (I1 + I2) RL^T x, RL = [xl yl u]
        Ib = (leg[11] + leg[22], leg[12] + leg[23], leg[13] + leg[24],
              leg[14] + leg[25], leg[15] + leg[26], leg[16] + leg[27],
              leg[17] + leg[28], leg[18] + leg[29], leg[19] + leg[30])
        ob = (_dot(xl, omL), _dot(yl, omL), _dot(u, omL))
        ab = (_dot(xl, alL), _dot(yl, alL), _dot(u, alL))
        Iob = _matvec(Ib, 0, ob)
        Iab = _matvec(Ib, 0, ab)
        Iom = _add(_add(_mul(Iob[0], xl), _mul(Iob[1], yl)), _mul(Iob[2], u))
        Ial = _add(_add(_mul(Iab[0], xl), _mul(Iab[1], yl)), _mul(Iab[2], u))
        tau = _add(Ial, _cross(omL, Iom))
        # body accelerations and forces (inertia minus gravity)
        f1 = _mul(m1, _sub(_mul(S1, udd), g))
        a2 = _add(_add(_mul(Lddi, u), _mul(2.0 * Ld, ud)), _mul(L - S2, udd))
        f2 = _mul(m2, _sub(a2, g))
        uf1 = _dot(u, f1)
        uf2 = _dot(u, f2)
        q1 = _mul(S1 / L, _sub(f1, _mul(uf1, u)))
        q2 = _add(_mul(uf2, u), _mul((L - S2) / L, _sub(f2, _mul(uf2, u))))
        # A^T tau = -u x tau + k (u . tau), k = -(c/s) xl
        qr = _mul(1.0 / L, _add(_mul(-1.0, _cross(u, tau)), _mul(-(c / s) * _dot(u, tau), xl)))
        Q = _add(_add(q1, q2), qr)
        mQ = _cross(rp, Q)
        mu = _cross(rp, u)
        for k in range(3):
            rhs[k] += Q[k]
            rhs[3 + k] += mQ[k]
            J[i, k] = u[k]
            J[i, 3 + k] = mu[k]
        Ldd[i] = Lddi
    return OK


@njit(cache=True, error_model="numpy")
def id_twist(X, nu, nud, W, has_w, legs, plat, F):
    """Leg forces F (6,) for a twist-coordinate motion (nu, nud) and external wrench W. Returns a status."""
    wk = np.empty(48)
    J = wk[:36].reshape((6, 6))
    rhs = wk[36:42]
    Ldd = wk[42:48]
    st = twist_wrench(X, nu, nud, legs, plat, J, rhs, Ldd)
    if st != OK:
        return st
    if has_w:
        for k in range(6):
            rhs[k] -= W[k]
    st = solve6(J.T, rhs, F)
    if st != OK:
        return st
    for i in range(6):
        F[i] += legs[i, LEG_ARM] * Ldd[i]
    return OK


@njit(cache=True, error_model="numpy")
def task_id_kernel(X, Xd, Xdd, W, has_w, legs, plat, F):
    """Leg forces F (6,) for an Euler-coordinate motion and external wrench W. Returns a status."""
    wk = np.empty(12)
    nu = wk[:6]
    nud = wk[6:]
    euler_to_twist(X, Xd, Xdd, nu, nud)
    return id_twist(X, nu, nud, W, has_w, legs, plat, F)


@njit(cache=True, error_model="numpy", _nrt=False)
def _finite6(F):
    for i in range(6):
        if not math.isfinite(F[i]):
            return False
    return True


@njit(cache=True, error_model="numpy")
def _split(params):
    """(legs (6, 32), plat (16,)) views of the flat parameter vector."""
    return params[:6 * LEG_COLS].reshape((6, LEG_COLS)), params[6 * LEG_COLS:6 * LEG_COLS + PL_COLS]


_SIG5 = "int64(float64[::1], float64[::1], float64[::1], float64[::1], float64[::1])"
_SIG6 = "int64(float64[::1], float64[::1], float64[::1], float64[::1], float64[::1], float64[::1])"


@njit(_SIG5, cache=True, error_model="numpy")
def task_id_one(X, Xd, Xdd, params, F):
    """One-state task inverse dynamics without wrench (few-argument entry point). Returns a status."""
    if X.shape[0] != 6 or Xd.shape[0] != 6 or Xdd.shape[0] != 6 or F.shape[0] != 6 or params.shape[0] != N_PARAMS:
        return BAD_INPUT
    legs, plat = _split(params)
    st = task_id_kernel(X, Xd, Xdd, X, False, legs, plat, F)
    if st == OK and not _finite6(F):
        return NOT_FINITE
    return st


@njit(_SIG6, cache=True, error_model="numpy")
def task_id_one_w(X, Xd, Xdd, W, params, F):
    """One-state task inverse dynamics with an external wrench W. Returns a status."""
    if (X.shape[0] != 6 or Xd.shape[0] != 6 or Xdd.shape[0] != 6 or W.shape[0] != 6 or F.shape[0] != 6
            or params.shape[0] != N_PARAMS):
        return BAD_INPUT
    legs, plat = _split(params)
    st = task_id_kernel(X, Xd, Xdd, W, True, legs, plat, F)
    if st == OK and not _finite6(F):
        return NOT_FINITE
    return st


@njit(cache=True, error_model="numpy")
def task_id_batch(X, Xd, Xdd, W, has_w, legs, plat, F):
    """Batch of :func:`task_id_kernel` over the first axis; returns (status, index)."""
    for n in range(X.shape[0]):
        st = task_id_kernel(X[n], Xd[n], Xdd[n], W[n], has_w, legs, plat, F[n])
        if st != OK:
            return st, n
    return OK, -1


@njit(cache=True, error_model="numpy")
def twist_from_joint_geom(R, J, L, U, qd, qdd, legs, nu, nud):
    """nu = J^{-1} qd and nud = J^{-1} (qdd - J' nu) from the geometry (R, J, L, U) of the pose.

    ``(J' nu)_i = u_i . (omega x (omega x R p_i)) + (|v_Pi|^2 - L'_i^2) / L_i``.  Returns a status.
    """
    st = solve6(J, qd, nu)
    if st != OK:
        return st
    v = (nu[0], nu[1], nu[2])
    om = (nu[3], nu[4], nu[5])
    b = np.empty(6)
    for i in range(6):
        rp = _rv(R, _vec(legs[i], 3))
        u = (U[i, 0], U[i, 1], U[i, 2])
        vP = _add(v, _cross(om, rp))
        Ld = _dot(u, vP)
        b[i] = qdd[i] - (_dot(u, _cross(om, _cross(om, rp))) + (_dot(vP, vP) - Ld * Ld) / L[i])
    return solve6(J, b, nud)


@njit(cache=True, error_model="numpy")
def joint_to_twist(X, qd, qdd, legs, plat, nu, nud):
    """nu = J^{-1} qd and nud = J^{-1} (qdd - J' nu) at pose X (:func:`twist_from_joint_geom`)."""
    wk = np.empty(9 + 36 + 6 + 18)
    R = wk[:9].reshape((3, 3))
    J = wk[9:45].reshape((6, 6))
    L = wk[45:51]
    U = wk[51:69].reshape((6, 3))
    leg_geometry(X, legs, R, J, L, U)
    return twist_from_joint_geom(R, J, L, U, qd, qdd, legs, nu, nud)


@njit(cache=True, error_model="numpy")
def joint_id_batch(X, qd, qdd, W, has_w, legs, plat, F):
    """Leg forces for joint-space motion (q implied by the consistent poses X); returns (status, index)."""
    nu = np.empty(6)
    nud = np.empty(6)
    for n in range(X.shape[0]):
        st = joint_to_twist(X[n], qd[n], qdd[n], legs, plat, nu, nud)
        if st == OK:
            st = id_twist(X[n], nu, nud, W[n], has_w, legs, plat, F[n])
        if st != OK:
            return st, n
    return OK, -1


@njit(cache=True, error_model="numpy", _nrt=False)
def mass_twist(X, legs, plat, M, J):
    """Fill M (6x6) = M_pl + sum J_i^T M_Li J_i (no armature) and J (6x6). Returns a status.

    M_Li = m2 u u^T + m_eq (I - u u^T) + A^T I_w A / L^2 with, in the leg frame
    (x_l, y_l, u), ``RL^T A = [-y_l^T; x_l^T; k^T]`` so that
    ``A^T I_w A = sum_ab Ib_ab t_a t_b^T`` with ``t = (-y_l, x_l, k)``.

    Generic in the scalar type: a complex X (with complex M, J) gives the complex-step
    derivative of M along the imaginary part of X (see :func:`mass_derivative_one`).
    """
    return _mass_twist(X, _rot9g(X[3], X[4], X[5]), J[0], J, False, legs, plat, M, J)


@njit(cache=True, error_model="numpy", _nrt=False)
def _mass_twist(X, R, Lg, Ug, have, legs, plat, M, J):
    """:func:`mass_twist` at the pose X with its rotation R (row-major 9-tuple) and, when
    ``have``, the legs' lengths and unit vectors ``Lg``, ``Ug`` (float X only; :func:`_leg_line`)."""
    r = (X[0], X[1], X[2])
    m = plat[0]
    c = _matvec(R, 0, _vec(plat, 1))
    # platform: [[m I, -m [c]x], [m [c]x, I_O]], I_O = R Ic R^T + m (|c|^2 I - c c^T)
    cc = _dot(c, c)
    for i in range(3):
        ri = (R[3 * i], R[3 * i + 1], R[3 * i + 2])
        Ii = _matvec(plat, 4, ri)  # Ic R^T e_i in body coords, i.e. row i of R Ic
        for j in range(3):
            rj = (R[3 * j], R[3 * j + 1], R[3 * j + 2])
            M[3 + i, 3 + j] = _dot(Ii, rj) + m * ((cc if i == j else 0.0) - c[i] * c[j])
            M[i, j] = m if i == j else 0.0
    M[0, 4] = m * c[2]
    M[0, 5] = -m * c[1]
    M[1, 3] = -m * c[2]
    M[1, 5] = m * c[0]
    M[2, 3] = m * c[1]
    M[2, 4] = -m * c[0]
    M[0, 3] = M[1, 4] = M[2, 5] = 0.0
    for i in range(3):
        for j in range(3):
            M[3 + j, i] = M[i, 3 + j]
    for i in range(6):
        leg = legs[i]
        b = _vec(leg, 0)
        a = _vec(leg, 6)
        m1, S1, m2, S2 = leg[9], leg[10], leg[20], leg[21]
        rp, L, u = _leg_line(R, r, leg, i, Lg, Ug, have)
        ua = _cross(u, a)
        s = np.sqrt(_dot(ua, ua))
        if s.real < UJOINT_TOL:
            return UJOINT_SINGULAR
        xl = _mul(1.0 / s, ua)
        yl = _cross(u, xl)
        ca = _dot(a, u)
        mu = _cross(rp, u)
        for k in range(3):
            J[i, k] = u[k]
            J[i, 3 + k] = mu[k]
        meq = (m1 * S1 * S1 + m2 * (L - S2) * (L - S2)) / (L * L)
        t0 = _mul(-1.0, yl)
        t1 = xl
        t2 = _mul(-ca / s, xl)
        iL2 = 1.0 / (L * L)
        # M_L = (m2 - meq) u u^T + meq I + sum_b g_b t_b^T / L^2, g_b = sum_a Ib_ab t_a
        g0 = _add(_add(_mul((leg[11] + leg[22]) * iL2, t0), _mul((leg[14] + leg[25]) * iL2, t1)),
                  _mul((leg[17] + leg[28]) * iL2, t2))
        g1 = _add(_add(_mul((leg[12] + leg[23]) * iL2, t0), _mul((leg[15] + leg[26]) * iL2, t1)),
                  _mul((leg[18] + leg[29]) * iL2, t2))
        g2 = _add(_add(_mul((leg[13] + leg[24]) * iL2, t0), _mul((leg[16] + leg[27]) * iL2, t1)),
                  _mul((leg[19] + leg[30]) * iL2, t2))
        w = m2 - meq
        row0 = _add(_add(_add(_mul(w * u[0], u), (meq, 0.0, 0.0)), _mul(g0[0], t0)),
                    _add(_mul(g1[0], t1), _mul(g2[0], t2)))
        row1 = _add(_add(_add(_mul(w * u[1], u), (0.0, meq, 0.0)), _mul(g0[1], t0)),
                    _add(_mul(g1[1], t1), _mul(g2[1], t2)))
        row2 = _add(_add(_add(_mul(w * u[2], u), (0.0, 0.0, meq)), _mul(g0[2], t0)),
                    _add(_mul(g1[2], t1), _mul(g2[2], t2)))
        # J_i^T M_L J_i = [[M_L, -M_L S], [S M_L, -S M_L S]], S = [rp]x; rows of M_L S are ML_p x rp
        c0 = _cross(row0, rp)
        c1 = _cross(row1, rp)
        c2 = _cross(row2, rp)
        for q in range(3):
            M[0, q] += row0[q]
            M[1, q] += row1[q]
            M[2, q] += row2[q]
            M[0, 3 + q] -= c0[q]
            M[1, 3 + q] -= c1[q]
            M[2, 3 + q] -= c2[q]
            M[3 + q, 0] -= c0[q]
            M[3 + q, 1] -= c1[q]
            M[3 + q, 2] -= c2[q]
            # -S C: column q is (C e_q) x rp
            d = _cross((c0[q], c1[q], c2[q]), rp)
            M[3, 3 + q] += d[0]
            M[4, 3 + q] += d[1]
            M[5, 3 + q] += d[2]
    return OK


@njit(cache=True, error_model="numpy")
def fd_twist(X, nu, F, W, has_w, legs, plat, nud, Ldd):
    """Twist acceleration nud and leg accelerations Ldd for leg forces F and external wrench W.

    Solves ``(M + J^T diag(arm) J) nu' = J^T (F - arm * J' nu) + W - h(X, nu)``.
    Returns a status.
    """
    return fd_twist_ws(X, _rot9(X[3], X[4], X[5]), Ldd, J_NONE, False, nu, F, W, has_w, legs, plat, nud, Ldd,
                       np.empty(FD_WS))


#: size of :func:`fd_twist_ws`'s work [floats]
FD_WS = 96 + 36 + 6



@njit(cache=True, error_model="numpy", _nrt=False)
def fd_twist_ws(X, R9, Lg, Ug, have, nu, F, W, has_w, legs, plat, nud, Ldd, wk):
    """:func:`fd_twist` in the caller's work ``wk`` (:data:`FD_WS`,), with the pose's rotation R9
    (row-major 9-tuple) and, when ``have``, the legs' lengths and unit vectors ``Lg`` (6,),
    ``Ug`` (6, 3) (:func:`leg_geometry`'s at X)."""
    zero = wk[:6]
    zero[:] = 0.0
    J = wk[6:42].reshape((6, 6))
    M = wk[42:78].reshape((6, 6))
    h = wk[78:84]
    Ldd0 = wk[84:90]
    rhs = wk[90:96]
    st = _twist_wrench(X, R9, Lg, Ug, have, nu, zero, legs, plat, J, h, Ldd0)  # Ldd0 = J' nu
    if st != OK:
        return st
    st = _mass_twist(X, R9, Lg, Ug, have, legs, plat, M, J)
    if st != OK:
        return st
    for k in range(6):
        rhs[k] = -h[k] + (W[k] if has_w else 0.0)
    for i in range(6):
        arm = legs[i, LEG_ARM]
        fi = F[i] - arm * Ldd0[i]
        for p in range(6):
            rhs[p] += J[i, p] * fi
            if arm != 0.0:
                for q in range(6):
                    M[p, q] += arm * J[i, p] * J[i, q]
    st = solve6_ws(M, rhs, nud, wk[96:132].reshape((6, 6)), wk[132:138])
    if st != OK:
        return st
    for i in range(6):
        s = Ldd0[i]
        for p in range(6):
            s += J[i, p] * nud[p]
        Ldd[i] = s
    return OK


@njit(cache=True, error_model="numpy")
def task_fd_kernel(X, Xd, F, W, has_w, legs, plat, Xdd):
    """Platform accelerations Xdd (Euler coordinates): e'' = E^{-1}(omega' - E' e'). Returns a status."""
    wk = np.empty(24)
    nu = wk[:6]
    zero = wk[6:12]
    zero[:] = 0.0
    nud = wk[12:18]
    Ldd = wk[18:24]
    euler_to_twist(X, Xd, zero, nu, nud)
    st = fd_twist(X, nu, F, W, has_w, legs, plat, nud, Ldd)
    if st != OK:
        return st
    return twist_to_euler_acc(X, Xd, nud, Xdd)


@njit(_SIG5, cache=True, error_model="numpy")
def task_fd_one(X, Xd, F, params, Xdd):
    """One-state task forward dynamics without wrench (few-argument entry point). Returns a status."""
    if X.shape[0] != 6 or Xd.shape[0] != 6 or F.shape[0] != 6 or Xdd.shape[0] != 6 or params.shape[0] != N_PARAMS:
        return BAD_INPUT
    legs, plat = _split(params)
    st = task_fd_kernel(X, Xd, F, X, False, legs, plat, Xdd)
    if st == OK and not _finite6(Xdd):
        return NOT_FINITE
    return st


@njit(cache=True, error_model="numpy")
def task_fd_batch(X, Xd, F, W, has_w, legs, plat, Xdd):
    for n in range(X.shape[0]):
        st = task_fd_kernel(X[n], Xd[n], F[n], W[n], has_w, legs, plat, Xdd[n])
        if st != OK:
            return st, n
    return OK, -1


@njit(cache=True, error_model="numpy")
def joint_fd_batch(X, qd, F, W, has_w, legs, plat, qdd):
    """Leg accelerations qdd for leg forces F at the consistent poses X; returns (status, index)."""
    J = np.empty((6, 6))
    R = np.empty((3, 3))
    L = np.empty(6)
    U = np.empty((6, 3))
    nu = np.empty(6)
    nud = np.empty(6)
    for n in range(X.shape[0]):
        leg_geometry(X[n], legs, R, J, L, U)
        st = solve6(J, qd[n], nu)
        if st == OK:
            st = fd_twist(X[n], nu, F[n], W[n], has_w, legs, plat, nud, qdd[n])
        if st != OK:
            return st, n
    return OK, -1


@njit(cache=True, error_model="numpy")
def fk_geom(q, X0, legs, tol, maxit, X, R, J, L, U):
    """Forward kinematics by Newton: X with L(X) = q from the guess X0. Returns (status, iterations).

    Newton on f(X) = L(X) - q with the Euler-coordinate Jacobian J diag(I, E);
    steps are limited to 0.25 (m or rad) in max-norm.  On success R, the twist
    Jacobian J, the lengths L and unit vectors U are those of the returned X
    (:func:`leg_geometry`), so callers need not recompute them.
    """
    return fk_geom_ws(q, X0, legs, tol, maxit, X, R, J, L, U, np.empty(FK_WS))


#: size of :func:`fk_geom_ws`'s work [floats]: the residual, the step, the LU factors and row order
FK_WS = 6 + 6 + 36 + 6


@njit(cache=True, error_model="numpy", _nrt=False)
def fk_geom_ws(q, X0, legs, tol, maxit, X, R, J, L, U, wk):
    """:func:`fk_geom` in the caller's work ``wk`` (:data:`FK_WS`,)."""
    return fk_geom_cached(q, X0, legs, tol, maxit, X, R, J, L, U, wk, wk, False)


#: size of the start pose's cache of :func:`fk_geom_cached` [floats]: flag, X0, its R, J, L, U
#: (:func:`leg_geometry`), the LU factors and row order of its Euler-rate Jacobian, their status
FK_CACHE = 1 + 6 + 9 + 36 + 6 + 18 + 36 + 6 + 1
_C_X, _C_R, _C_J, _C_L, _C_U, _C_LU, _C_P, _C_ST = 1, 7, 16, 52, 58, 76, 112, 118


@njit(cache=True, error_model="numpy", _nrt=False)
def _euler_columns(J, X):
    """The Euler-rate Jacobian in place: J's angular columns times E(X)."""
    cb, sb = math.cos(X[4]), math.sin(X[4])
    cg, sg = math.cos(X[5]), math.sin(X[5])
    for i in range(6):
        m0, m1, m2 = J[i, 3], J[i, 4], J[i, 5]
        J[i, 3] = m0 * cg * cb + m1 * sg * cb - m2 * sb
        J[i, 4] = -m0 * sg + m1 * cg
        J[i, 5] = m2


@njit(cache=True, error_model="numpy", _nrt=False)
def _start_geometry(X0, legs, cache):
    """The cache of :func:`fk_geom_cached` at the start pose X0: :func:`leg_geometry` when the
    cache holds another pose (or none); the LU factors are then made on first need."""
    if cache[0] == 1.0:
        same = True
        for k in range(6):
            if cache[_C_X + k] != X0[k]:
                same = False
        if same:
            return
    for k in range(6):
        cache[_C_X + k] = X0[k]
    leg_geometry(X0, legs, cache[_C_R:_C_J].reshape((3, 3)), cache[_C_J:_C_L].reshape((6, 6)), cache[_C_L:_C_U],
                 cache[_C_U:_C_LU].reshape((6, 3)))
    cache[_C_ST] = 0.0
    cache[0] = 1.0


@njit(cache=True, error_model="numpy", _nrt=False)
def fk_geom_cached(q, X0, legs, tol, maxit, X, R, J, L, U, wk, cache, use_cache):
    """:func:`fk_geom_ws`; with ``use_cache`` its first iteration (at the guess X0) from ``cache``
    (:data:`FK_CACHE`,): the geometry at X0 and the LU factors of its Euler-rate Jacobian, made
    once for every solve from the same guess (the plant's RK4 stages, its mass matrix and pose
    all start at the step's start pose).  The same operations on the same numbers as without the
    cache, so the same results to the last bit.  The caller clears ``cache[0]`` when the
    parameters ``legs`` may have changed."""
    f = wk[0:6]
    dX = wk[6:12]
    LU = wk[12:48].reshape((6, 6))
    perm = wk[48:54]
    for k in range(6):
        X[k] = X0[k]
    for it in range(maxit + 1):
        first = use_cache and it == 0
        if first:
            _start_geometry(X0, legs, cache)
            Lg = cache[_C_L:_C_U]
        else:
            leg_geometry(X, legs, R, J, L, U)
            Lg = L
        err = 0.0
        for i in range(6):
            f[i] = q[i] - Lg[i]
            if abs(f[i]) > err:
                err = abs(f[i])
        if err <= tol:
            if first:
                for i in range(6):
                    L[i] = cache[_C_L + i]
                    for k in range(6):
                        J[i, k] = cache[_C_J + 6 * i + k]
                    for k in range(3):
                        U[i, k] = cache[_C_U + 3 * i + k]
                for i in range(3):
                    for k in range(3):
                        R[i, k] = cache[_C_R + 3 * i + k]
            return OK, it
        if it == maxit:
            break
        if first:
            LUc = cache[_C_LU:_C_P].reshape((6, 6))
            pc = cache[_C_P:_C_ST]
            if cache[_C_ST] == 0.0:
                JE = LU                       # scratch: the Euler-rate Jacobian at X0
                for i in range(6):
                    for k in range(6):
                        JE[i, k] = cache[_C_J + 6 * i + k]
                _euler_columns(JE, X0)
                cache[_C_ST] = 1.0 if lu6(JE, LUc, pc) == OK else 2.0
            if cache[_C_ST] != 1.0:
                return SINGULAR, it
            lu_solve6(LUc, pc, f, dX)
        else:
            # Euler-rate Jacobian: angular columns times E
            _euler_columns(J, X)
            st = solve6_ws(J, f, dX, LU, perm)
            if st != OK:
                return SINGULAR, it
        big = 0.0
        for k in range(6):
            if abs(dX[k]) > big:
                big = abs(dX[k])
        sc = 1.0 if big <= 0.25 else 0.25 / big
        for k in range(6):
            X[k] += sc * dX[k]
        if not _finite6(X):
            break
    return NO_CONVERGENCE, maxit


@njit(cache=True, error_model="numpy")
def fk_kernel(q, X0, legs, tol, maxit, X):
    """Forward kinematics by Newton from the guess X0 (:func:`fk_geom`). Returns (status, iterations)."""
    wk = np.empty(9 + 36 + 6 + 18)
    R = wk[:9].reshape((3, 3))
    J = wk[9:45].reshape((6, 6))
    L = wk[45:51]
    U = wk[51:69].reshape((6, 3))
    return fk_geom(q, X0, legs, tol, maxit, X, R, J, L, U)


@njit(cache=True, error_model="numpy")
def ik_batch(X, legs, L):
    """Leg lengths L (N, 6) for poses X (N, 6)."""
    R = np.empty((3, 3))
    J = np.empty((6, 6))
    U = np.empty((6, 3))
    for n in range(X.shape[0]):
        leg_geometry(X[n], legs, R, J, L[n], U)


@njit(cache=True, error_model="numpy", _nrt=False)
def _joint_args_ok(q, a, b, pose, params, out):
    """Sizes (6-vectors, N_PARAMS parameters) and finite inputs of a one-state joint-space kernel."""
    if (q.shape[0] != 6 or a.shape[0] != 6 or b.shape[0] != 6 or pose.shape[0] != 6 or out.shape[0] != 6
            or params.shape[0] != N_PARAMS):
        return False
    return _finite6(q) and _finite6(a) and _finite6(b) and _finite6(pose)


@njit(cache=True, error_model="numpy")
def _joint_geometry(q, pose, legs, extra):
    """Workspace of a one-state joint-space kernel and the platform geometry at leg lengths q.

    Forward kinematics by Newton from ``pose`` (1e-12 m).  Returns ``(status, X, nu, nud, R, J,
    L, U, work)``: pose, twist and twist-rate buffers, rotation, leg Jacobian, lengths, unit
    vectors, and ``extra`` more floats of scratch space for the caller.
    """
    wk = np.empty(87 + extra)
    X = wk[:6]
    nu = wk[6:12]
    nud = wk[12:18]
    R = wk[18:27].reshape((3, 3))
    J = wk[27:63].reshape((6, 6))
    L = wk[63:69]
    U = wk[69:87].reshape((6, 3))
    st, _ = fk_geom(q, pose, legs, 1e-12, 50, X, R, J, L, U)
    return st, X, nu, nud, R, J, L, U, wk[87:]


@njit(cache=True, error_model="numpy")
def _joint_id(q, qd, qdd, pose, params, F):
    """Body of :func:`joint_id_one` (shared with :func:`bias_one` and :func:`gravity_one`)."""
    if not _joint_args_ok(q, qd, qdd, pose, params, F):
        return BAD_INPUT
    legs, plat = _split(params)
    # one LU factorisation of the leg Jacobian serves nu = J^-1 qd, nud = J^-1 (qdd - J' nu) and
    # the force balance J^T F = rhs (see joint_to_twist and id_twist, the batch path)
    st, X, nu, nud, R, J, L, U, wk = _joint_geometry(q, pose, legs, 36 + 18 + 6)
    if st != OK:
        return st
    LU = wk[0:36].reshape((6, 6))
    b = wk[36:42]
    rhs = wk[42:48]
    Ldd = wk[48:54]
    tmp = wk[54:60]
    perm = np.empty(6, np.int64)
    st = lu6(J, LU, perm)
    if st != OK:
        return st
    lu_solve6(LU, perm, qd, nu)
    v = (nu[0], nu[1], nu[2])
    om = (nu[3], nu[4], nu[5])
    for i in range(6):
        rp = _rv(R, _vec(legs[i], 3))
        u = (U[i, 0], U[i, 1], U[i, 2])
        vP = _add(v, _cross(om, rp))
        Ld = _dot(u, vP)
        b[i] = qdd[i] - (_dot(u, _cross(om, _cross(om, rp))) + (_dot(vP, vP) - Ld * Ld) / L[i])
    lu_solve6(LU, perm, b, nud)
    st = twist_wrench(X, nu, nud, legs, plat, J, rhs, Ldd)
    if st != OK:
        return st
    lu_solve6_t(LU, perm, rhs, F, tmp)
    for i in range(6):
        F[i] += legs[i, LEG_ARM] * Ldd[i]
    if not _finite6(F):
        return NOT_FINITE
    return OK


@njit(_SIG6, cache=True, error_model="numpy")
def joint_id_one(q, qd, qdd, pose, params, F):
    """One-state inverse dynamics in leg coordinates: FK by Newton from ``pose`` (1e-12 m), then
    :func:`joint_to_twist` and :func:`id_twist` (no wrench). Returns a status."""
    return _joint_id(q, qd, qdd, pose, params, F)


# -- the one-state kernels in the caller's work (no allocation, no reference counting): what the
# simulated plant's compiled step calls at every RK4 stage (drivers/sim/_stewart_plant_kernel.py);
# the allocating entries above and below are these with work of their own, so both give the
# same numbers.

@njit(cache=True, error_model="numpy", _nrt=False)
def _split_ws(params):
    """:func:`_split` for callers without reference counting."""
    return params[:6 * LEG_COLS].reshape((6, LEG_COLS)), params[6 * LEG_COLS:6 * LEG_COLS + PL_COLS]


#: the pose geometry in a work array: X (6,), R (3, 3), J (6, 6), L (6,), U (6, 3)
_GEOM_WS = 6 + 9 + 36 + 6 + 18


@njit(cache=True, error_model="numpy", _nrt=False)
def _fk_in(q, guess, legs, wk, cache, use_cache):
    """Forward kinematics (1e-12 m, 50 iterations, :func:`fk_geom_cached`) into ``wk`` (>= _GEOM_WS +
    FK_WS,): returns (status, X, R, J, L, U) (views of ``wk``)."""
    X = wk[0:6]
    R = wk[6:15].reshape((3, 3))
    J = wk[15:51].reshape((6, 6))
    L = wk[51:57]
    U = wk[57:75].reshape((6, 3))
    st, _ = fk_geom_cached(q, guess, legs, 1e-12, 50, X, R, J, L, U, wk[_GEOM_WS:_GEOM_WS + FK_WS], cache,
                           use_cache)
    return st, X, R, J, L, U


#: size of :func:`joint_fd_ws`'s work [floats]
JFD_WS = _GEOM_WS + FK_WS + 12 + FD_WS


@njit(cache=True, error_model="numpy", _nrt=False)
def joint_fd_ws(q, qd, tau, pose, params, qdd, wk, cache, use_cache):
    """:func:`joint_fd_one` in the caller's work ``wk`` (:data:`JFD_WS`,); with ``use_cache`` the
    forward kinematics' first iteration from ``cache`` (:func:`fk_geom_cached`)."""
    if not _joint_args_ok(q, qd, tau, pose, params, qdd):
        return BAD_INPUT
    legs, plat = _split_ws(params)
    st, X, R, J, L, U = _fk_in(q, pose, legs, wk, cache, use_cache)
    if st != OK:
        return st
    o = _GEOM_WS + FK_WS
    nu = wk[o:o + 6]
    nud = wk[o + 6:o + 12]
    lw = wk[_GEOM_WS + 12:_GEOM_WS + FK_WS]     # the FK's LU work, free now
    st = solve6_ws(J, qd, nu, lw[0:36].reshape((6, 6)), lw[36:42])
    if st != OK:
        return st
    st = fd_twist_ws(X, _rot9_of(R), L, U, True, nu, tau, tau, False, legs, plat, nud, qdd, wk[o + 12:o + 12 + FD_WS])
    if st == OK and not _finite6(qdd):
        return NOT_FINITE
    return st


@njit(_SIG6, cache=True, error_model="numpy")
def joint_fd_one(q, qd, tau, pose, params, qdd):
    """One-state forward dynamics in leg coordinates (FK from ``pose``, no wrench). Returns a status."""
    wk = np.empty(JFD_WS)
    return joint_fd_ws(q, qd, tau, pose, params, qdd, wk, wk, False)


# -- one-state kernels of the actuated-coordinate maps (plant and controller hot paths) -------------
# Each takes contiguous float64 vectors (TypeError otherwise), returns a status and writes its
# result into the last argument.  Non-finite or wrongly sized inputs give BAD_INPUT; maps that
# invert the leg Jacobian give COND_LIMIT when the Frobenius bound of its condition number exceeds
# the model's limit: the Python caller then takes its checked path, which raises the matching error
# (or, between the exact condition number and the bound, returns the same result).

_SIG4 = "int64(float64[::1], float64[::1], float64[::1], float64[::1])"
_SIG4M = "int64(float64[::1], float64[::1], float64[::1], float64[:, ::1])"
_SIG5M = "int64(float64[::1], float64[::1], float64[::1], float64[::1], float64[:, ::1])"


@njit(cache=True, error_model="numpy")
def inv6(A, Ai):
    """Ai = A^{-1} (6x6) by Gauss-Jordan elimination with partial pivoting; A is not modified.

    Returns SINGULAR if a pivot is below PIVOT_TOL times the largest |A_ij|, else OK.
    Generic in the scalar type (float or complex A and Ai).
    """
    return inv6_ws(A, Ai, np.empty((6, 12), A.dtype))


@njit(cache=True, error_model="numpy", _nrt=False)
def inv6_ws(A, Ai, M):
    """:func:`inv6` in the caller's work ``M`` (6, 12) of A's scalar type."""
    scale = 0.0
    for i in range(6):
        for j in range(6):
            M[i, j] = A[i, j]
            M[i, 6 + j] = 1.0 if i == j else 0.0
            if abs(A[i, j]) > scale:
                scale = abs(A[i, j])
    if not scale > 0.0:
        return SINGULAR
    for c in range(6):
        piv, best = _pivot_row(M, c)
        if not best > PIVOT_TOL * scale:
            return SINGULAR
        if piv != c:
            _swap_rows(M, c, piv, c)
        inv = 1.0 / M[c, c]
        for j in range(c, 12):
            M[c, j] *= inv
        for r in range(6):
            if r != c:
                f = M[r, c]
                if f != 0.0:
                    for j in range(c, 12):
                        M[r, j] -= f * M[c, j]
    for i in range(6):
        for j in range(6):
            Ai[i, j] = M[i, 6 + j]
    return OK


@njit(cache=True, error_model="numpy")
def cond_bound_ok(J, Ji, char_len, limit):
    """True when ``|Jh|_F |Jh^{-1}|_F <= limit`` for ``Jh = J diag(1, 1, 1, 1/c, 1/c, 1/c)``.

    The product of Frobenius norms bounds the 2-norm condition number from above, so True
    guarantees ``cond_2(Jh) <= limit``.
    """
    a = 0.0
    b = 0.0
    for i in range(6):
        for j in range(3):
            a += J[i, j] * J[i, j] + J[i, 3 + j] * J[i, 3 + j] / (char_len * char_len)
            b += Ji[j, i] * Ji[j, i] + Ji[3 + j, i] * Ji[3 + j, i] * (char_len * char_len)
    bound = math.sqrt(a * b)
    return bound <= limit


@njit(cache=True, error_model="numpy", _nrt=False)
def _finite_mat(M):
    for i in range(M.shape[0]):
        for j in range(M.shape[1]):
            if not math.isfinite(M[i, j]):
                return False
    return True


@njit(cache=True, error_model="numpy")
def _pose_of(q, pose, legs, X):
    """Forward kinematics with the defaults of ``forward_kinematics_task`` (tol 1e-12 m, 50 iterations)."""
    st, _ = fk_kernel(q, pose, legs, 1e-12, 50, X)
    return st


@njit(cache=True, error_model="numpy")
def mass_actuated(X, params, M):
    """M (6x6) = J^{-T} M_twist J^{-1} + diag(armature), symmetrised, at the pose X. Returns a status."""
    return mass_actuated_ws(X, _rot9(X[3], X[4], X[5]), M[0], J_NONE, False, params, M, np.empty(MA_WS))


#: size of :func:`mass_actuated_ws`'s work [floats]
MA_WS = 144 + 72


@njit(cache=True, error_model="numpy", _nrt=False)
def mass_actuated_ws(X, R9, Lg, Ug, have, params, M, wk):
    """:func:`mass_actuated` in the caller's work ``wk`` (:data:`MA_WS`,), with the pose's rotation
    and, when ``have``, the legs' lengths and unit vectors (as :func:`fd_twist_ws`)."""
    legs, plat = _split_ws(params)
    Mt = wk[:36].reshape((6, 6))
    J = wk[36:72].reshape((6, 6))
    Ji = wk[72:108].reshape((6, 6))
    T = wk[108:144].reshape((6, 6))
    st = _mass_twist(X, R9, Lg, Ug, have, legs, plat, Mt, J)
    if st != OK:
        return st
    st = inv6_ws(J, Ji, wk[144:216].reshape((6, 12)))
    if st != OK:
        return st
    if not cond_bound_ok(J, Ji, params[P_CHAR], params[P_COND]):
        return COND_LIMIT
    for i in range(6):
        for j in range(6):
            s = 0.0
            for k in range(6):
                s += Mt[i, k] * Ji[k, j]
            T[i, j] = s
    for i in range(6):
        for j in range(6):
            s = 0.0
            for k in range(6):
                s += Ji[k, i] * T[k, j]
            M[i, j] = s
    for i in range(6):
        for j in range(i + 1, 6):
            s = 0.5 * (M[i, j] + M[j, i])
            M[i, j] = s
            M[j, i] = s
        M[i, i] += legs[i, LEG_ARM]
    if not _finite_mat(M):
        return NOT_FINITE
    return OK


#: size of :func:`mass_ws`'s work [floats]
MASS_WS = _GEOM_WS + max(FK_WS, MA_WS)


@njit(cache=True, error_model="numpy", _nrt=False)
def mass_ws(q, pose, params, M, wk, cache, use_cache):
    """:func:`mass_one` in the caller's work ``wk`` (:data:`MASS_WS`,) (``cache``, ``use_cache``:
    as :func:`joint_fd_ws`)."""
    if (q.shape[0] != 6 or pose.shape[0] != 6 or params.shape[0] != N_PARAMS or M.shape[0] != 6
            or M.shape[1] != 6):
        return BAD_INPUT
    if not (_finite6(q) and _finite6(pose)):
        return BAD_INPUT
    legs, _ = _split_ws(params)
    st, X, R, J, L, U = _fk_in(q, pose, legs, wk, cache, use_cache)
    if st != OK:
        return st
    return mass_actuated_ws(X, _rot9_of(R), L, U, True, params, M, wk[_GEOM_WS:_GEOM_WS + MA_WS])


@njit(_SIG4M, cache=True, error_model="numpy")
def mass_one(q, pose, params, M):
    """Joint-space mass matrix M (6x6) [kg] at leg lengths q, FK from the hint ``pose``. Returns a status."""
    wk = np.empty(MASS_WS)
    return mass_ws(q, pose, params, M, wk, wk, False)


@njit(_SIG5, cache=True, error_model="numpy")
def kinetic_one(q, qd, pose, params, out):
    """out[0] = 1/2 qd^T M(q) qd [J] (FK from ``pose``; same conditioning checks as :func:`mass_one`)."""
    if (q.shape[0] != 6 or qd.shape[0] != 6 or pose.shape[0] != 6 or params.shape[0] != N_PARAMS
            or out.shape[0] < 1):
        return BAD_INPUT
    if not (_finite6(q) and _finite6(qd) and _finite6(pose)):
        return BAD_INPUT
    legs, _ = _split(params)
    X = np.empty(6)
    st = _pose_of(q, pose, legs, X)
    if st != OK:
        return st
    M = np.empty((6, 6))
    st = mass_actuated(X, params, M)
    if st != OK:
        return st
    s = 0.0
    for i in range(6):
        r = 0.0
        for j in range(6):
            r += M[i, j] * qd[j]
        s += qd[i] * r
    out[0] = 0.5 * s
    return OK


@njit(cache=True, error_model="numpy")
def potential(X, legs, plat):
    """Gravitational potential energy [J] of platform and legs at pose X (as the Lagrange reference)."""
    R9 = _rot9(X[3], X[4], X[5])
    r = (X[0], X[1], X[2])
    g = _vec(plat, 13)
    V = -plat[PL_M] * _dot(g, _add(r, _matvec(R9, 0, _vec(plat, 1))))
    for i in range(6):
        leg = legs[i]
        b = _vec(leg, 0)
        l = _sub(_add(r, _matvec(R9, 0, _vec(leg, 3))), b)
        L = math.sqrt(_dot(l, l))
        gu = _dot(g, l) / L
        m1, S1, m2, S2 = leg[LEG_M1], leg[LEG_S1], leg[LEG_M2], leg[LEG_S2]
        V += -(m1 * S1 + m2 * (L - S2)) * gu - (m1 + m2) * _dot(g, b)
    return V


@njit(_SIG4, cache=True, error_model="numpy")
def potential_one(q, pose, params, out):
    """out[0] = gravitational potential energy [J] at leg lengths q (FK from ``pose``). Returns a status."""
    if q.shape[0] != 6 or pose.shape[0] != 6 or params.shape[0] != N_PARAMS or out.shape[0] < 1:
        return BAD_INPUT
    if not (_finite6(q) and _finite6(pose)):
        return BAD_INPUT
    legs, plat = _split(params)
    X = np.empty(6)
    st = _pose_of(q, pose, legs, X)
    if st != OK:
        return st
    out[0] = potential(X, legs, plat)
    if not math.isfinite(out[0]):
        return NOT_FINITE
    return OK


@njit(_SIG5, cache=True, error_model="numpy")
def bias_one(q, qd, pose, params, F):
    """h(q, qd) = C qd + g [N] (inverse dynamics at zero leg acceleration, FK from ``pose``)."""
    zero = np.zeros(6)
    return _joint_id(q, qd, zero, pose, params, F)


@njit(_SIG4, cache=True, error_model="numpy")
def gravity_one(q, pose, params, F):
    """g(q) [N] (inverse dynamics at rest, FK from ``pose``). Returns a status."""
    zero = np.zeros(6)
    return _joint_id(q, zero, zero, pose, params, F)


#: size of :func:`fk_ws`'s work [floats]
FKO_WS = _GEOM_WS + FK_WS


@njit(cache=True, error_model="numpy", _nrt=False)
def fk_ws(q, guess, params, tol, maxit, X, wk, cache, use_cache):
    """:func:`fk_one` in the caller's work ``wk`` (:data:`FKO_WS`,) (``cache``, ``use_cache``: as
    :func:`joint_fd_ws`)."""
    if q.shape[0] != 6 or guess.shape[0] != 6 or params.shape[0] != N_PARAMS or X.shape[0] != 6:
        return BAD_INPUT
    if not (_finite6(q) and _finite6(guess)):
        return BAD_INPUT
    legs, _ = _split_ws(params)
    R = wk[6:15].reshape((3, 3))
    J = wk[15:51].reshape((6, 6))
    L = wk[51:57]
    U = wk[57:75].reshape((6, 3))
    st, _ = fk_geom_cached(q, guess, legs, tol, maxit, X, R, J, L, U, wk[_GEOM_WS:_GEOM_WS + FK_WS], cache,
                           use_cache)
    return st


@njit("int64(float64[::1], float64[::1], float64[::1], float64, int64, float64[::1])",
      cache=True, error_model="numpy")
def fk_one(q, guess, params, tol, maxit, X):
    """Forward kinematics of one state (:func:`fk_kernel`) from the guess. Returns a status."""
    wk = np.empty(FKO_WS)
    return fk_ws(q, guess, params, tol, maxit, X, wk, wk, False)


@njit(cache=True, error_model="numpy")
def _jacobian_inverse(X, params, Ji):
    """Ji = J^{-1} (twist leg Jacobian) at pose X with the conditioning checks. Returns a status."""
    legs, _ = _split(params)
    R = np.empty((3, 3))
    J = np.empty((6, 6))
    L = np.empty(6)
    U = np.empty((6, 3))
    leg_geometry(X, legs, R, J, L, U)
    st = inv6(J, Ji)
    if st != OK:
        return st
    if not cond_bound_ok(J, Ji, params[P_CHAR], params[P_COND]):
        return COND_LIMIT
    if not _finite_mat(Ji):
        return NOT_FINITE
    return OK


@njit(_SIG4M, cache=True, error_model="numpy")
def task_jacobian_one(q, X, params, Jx):
    """J_x = J_e^{-1} = diag(I, E^{-1}) J^{-1} (6x6) at the consistent pair (q, X). Returns a status."""
    if (q.shape[0] != 6 or X.shape[0] != 6 or params.shape[0] != N_PARAMS or Jx.shape[0] != 6
            or Jx.shape[1] != 6):
        return BAD_INPUT
    if not (_finite6(q) and _finite6(X)):
        return BAD_INPUT
    cb, sb = math.cos(X[4]), math.sin(X[4])
    if abs(cb) < 1e-9:
        return EULER_SINGULAR
    st = _jacobian_inverse(X, params, Jx)
    if st != OK:
        return st
    cg, sg = math.cos(X[5]), math.sin(X[5])
    # E^{-1} = [[cg/cb, sg/cb, 0], [-sg, cg, 0], [cg sb/cb, sg sb/cb, 1]]
    for j in range(6):
        w0, w1, w2 = Jx[3, j], Jx[4, j], Jx[5, j]
        a = (cg * w0 + sg * w1) / cb
        Jx[3, j] = a
        Jx[4, j] = -sg * w0 + cg * w1
        Jx[5, j] = w2 + sb * a
    return OK


@njit(_SIG4M, cache=True, error_model="numpy")
def jacobian_one(q, pose, params, Jg):
    """Geometric Jacobian J^{-1} (6x6) at leg lengths q (FK from ``pose``). Returns a status."""
    if (q.shape[0] != 6 or pose.shape[0] != 6 or params.shape[0] != N_PARAMS or Jg.shape[0] != 6
            or Jg.shape[1] != 6):
        return BAD_INPUT
    if not (_finite6(q) and _finite6(pose)):
        return BAD_INPUT
    legs, _ = _split(params)
    X = np.empty(6)
    st = _pose_of(q, pose, legs, X)
    if st != OK:
        return st
    return _jacobian_inverse(X, params, Jg)


@njit(cache=True, error_model="numpy")
def det6(A):
    """det A (6x6) by Gaussian elimination with partial pivoting (0.0 at an exactly zero pivot)."""
    M = np.empty((6, 6))
    for i in range(6):
        for j in range(6):
            M[i, j] = A[i, j]
    d = 1.0
    for c in range(6):
        piv, best = _pivot_row(M, c)
        if best == 0.0:
            return 0.0
        if piv != c:
            d = -d
            _swap_rows(M, c, piv, c)
        d *= M[c, c]
        inv = 1.0 / M[c, c]
        for r in range(c + 1, 6):
            f = M[r, c] * inv
            if f != 0.0:
                for j in range(c, 6):
                    M[r, j] -= f * M[c, j]
    return d


@njit(cache=True, error_model="numpy")
def _cond2(A):
    """2-norm condition number by singular values (LAPACK); inf when the smallest is zero."""
    c = np.linalg.cond(A)
    if not c >= 0.0:   # 0/0
        return np.inf
    return c


@njit(_SIG4, cache=True, error_model="numpy")
def singularity_one(q, X, params, out):
    """Singularity measures at the consistent pair (q, X): ``out[:3] = (cond_b, det_b, ujoint_min_sin)``.

    ``cond_b`` is the 2-norm condition number of the leg Jacobian with its angular columns divided by
    the characteristic length, ``det_b = det J`` [m^3] and ``ujoint_min_sin = min_i |u_i x a_i|``.
    Returns a status.
    """
    if q.shape[0] != 6 or X.shape[0] != 6 or params.shape[0] != N_PARAMS or out.shape[0] < 3:
        return BAD_INPUT
    if not (_finite6(q) and _finite6(X)):
        return BAD_INPUT
    legs, _ = _split(params)
    R = np.empty((3, 3))
    J = np.empty((6, 6))
    L = np.empty(6)
    U = np.empty((6, 3))
    leg_geometry(X, legs, R, J, L, U)
    if not _finite_mat(J):
        return NOT_FINITE
    Jh = np.empty((6, 6))
    c = params[P_CHAR]
    for i in range(6):
        for j in range(3):
            Jh[i, j] = J[i, j]
            Jh[i, 3 + j] = J[i, 3 + j] / c
    out[0] = _cond2(Jh)
    out[1] = det6(J)
    smin = np.inf
    for i in range(6):
        w = _cross((U[i, 0], U[i, 1], U[i, 2]), _vec(legs[i], 6))
        sn = math.sqrt(_dot(w, w))
        if sn < smin:
            smin = sn
    out[2] = smin
    return OK


#: complex-step size of :func:`mass_derivative` (exact to rounding: no subtraction)
CSTEP = 1e-30


@njit(cache=True, error_model="numpy")
def mass_derivative(X, Xdot, params, Md):
    """dM/dt (6x6) of the joint-space mass matrix along the Euler-rate motion Xdot at X.

    Complex step: ``Im M(X + i h Xdot) / h`` with h = 1e-30 on the generic :func:`mass_twist`
    and :func:`inv6` (armature is constant), symmetrised.  Returns a status.
    """
    legs, plat = _split(params)
    Xc = np.empty(6, np.complex128)
    for k in range(6):
        Xc[k] = X[k] + 1j * (CSTEP * Xdot[k])
    Mt = np.empty((6, 6), np.complex128)
    J = np.empty((6, 6), np.complex128)
    Ji = np.empty((6, 6), np.complex128)
    T = np.empty((6, 6), np.complex128)
    st = mass_twist(Xc, legs, plat, Mt, J)
    if st != OK:
        return st
    st = inv6(J, Ji)
    if st != OK:
        return st
    for i in range(6):
        for j in range(6):
            s = 0.0j
            for k in range(6):
                s += Mt[i, k] * Ji[k, j]
            T[i, j] = s
    for i in range(6):
        for j in range(i, 6):
            sij = 0.0j
            sji = 0.0j
            for k in range(6):
                sij += Ji[k, i] * T[k, j]
                sji += Ji[k, j] * T[k, i]
            v = 0.5 * (sij.imag + sji.imag) / CSTEP
            Md[i, j] = v
            Md[j, i] = v
    return OK


@njit(cache=True, error_model="numpy")
def _motion_of(q, qd, pose, params, X, Xdot):
    """FK from ``pose`` into X, then the Euler rates Xdot = J_e^{-1} qd. Returns a status."""
    legs, _ = _split(params)
    st = _pose_of(q, pose, legs, X)
    if st != OK:
        return st
    cb, sb = math.cos(X[4]), math.sin(X[4])
    if abs(cb) < 1e-9:
        return EULER_SINGULAR
    R = np.empty((3, 3))
    J = np.empty((6, 6))
    L = np.empty(6)
    U = np.empty((6, 3))
    nu = np.empty(6)
    leg_geometry(X, legs, R, J, L, U)
    st = solve6(J, qd, nu)
    if st != OK:
        return st
    cg, sg = math.cos(X[5]), math.sin(X[5])
    for k in range(3):
        Xdot[k] = nu[k]
    a = (cg * nu[3] + sg * nu[4]) / cb
    Xdot[3] = a
    Xdot[4] = -sg * nu[3] + cg * nu[4]
    Xdot[5] = nu[5] + sb * a
    return OK


@njit(_SIG5M, cache=True, error_model="numpy")
def mass_derivative_one(q, qd, pose, params, Md):
    """dM/dt (6x6) along the motion (q, qd), FK from ``pose``. Returns a status."""
    if (q.shape[0] != 6 or qd.shape[0] != 6 or pose.shape[0] != 6 or params.shape[0] != N_PARAMS
            or Md.shape[0] != 6 or Md.shape[1] != 6):
        return BAD_INPUT
    if not (_finite6(q) and _finite6(qd) and _finite6(pose)):
        return BAD_INPUT
    X = np.empty(6)
    Xdot = np.empty(6)
    st = _motion_of(q, qd, pose, params, X, Xdot)
    if st != OK:
        return st
    st = mass_derivative(X, Xdot, params, Md)
    if st == OK and not _finite_mat(Md):
        return NOT_FINITE
    return st


@njit(_SIG5M, cache=True, error_model="numpy")
def coriolis_one(q, qd, pose, params, C):
    """Coriolis matrix C (6x6) with ``C qd = h - g`` and ``dM/dt - 2C`` skew, FK from ``pose``.

    ``C = dM/dt / 2 + (w qd^T - qd w^T) / |qd|^2`` with ``w = (h - g) - dM/dt qd / 2`` (see
    :meth:`dynamics.stewart.StewartPlatform.coriolis_matrix`). Returns a status.
    """
    if (q.shape[0] != 6 or qd.shape[0] != 6 or pose.shape[0] != 6 or params.shape[0] != N_PARAMS
            or C.shape[0] != 6 or C.shape[1] != 6):
        return BAD_INPUT
    if not (_finite6(q) and _finite6(qd) and _finite6(pose)):
        return BAD_INPUT
    wk = np.empty(30)
    X = wk[:6]
    Xdot = wk[6:12]
    zero = wk[12:18]
    zero[:] = 0.0
    hv = wk[18:24]
    gv = wk[24:30]
    st = _motion_of(q, qd, pose, params, X, Xdot)
    if st != OK:
        return st
    st = _joint_id(q, qd, zero, X, params, hv)
    if st != OK:
        return st
    st = _joint_id(q, zero, zero, X, params, gv)
    if st != OK:
        return st
    Md = np.empty((6, 6))
    st = mass_derivative(X, Xdot, params, Md)
    if st != OK:
        return st
    w = np.empty(6)
    nn = 0.0
    for i in range(6):
        s = 0.0
        for j in range(6):
            s += Md[i, j] * qd[j]
        w[i] = (hv[i] - gv[i]) - 0.5 * s
        nn += qd[i] * qd[i]
    for i in range(6):
        for j in range(6):
            C[i, j] = 0.5 * Md[i, j] + ((w[i] * qd[j] - qd[i] * w[j]) / nn if nn > 0.0 else 0.0)
    if not _finite_mat(C):
        return NOT_FINITE
    return OK


# -- small one-state helpers (public functions and leg kinematics of dynamics.stewart) --------------
@njit("int64(float64[::1], float64[:, ::1])",
      cache=True, error_model="numpy")
def rotation_one(e, R):
    """R (3x3) = Rz(e2) Ry(e1) Rx(e0) (:func:`rotation`). Returns a status."""
    if e.shape[0] != 3 or R.shape[0] != 3 or R.shape[1] != 3:
        return BAD_INPUT
    rotation(e, R)
    return OK


@njit("int64(float64[::1], float64[:, ::1])",
      cache=True, error_model="numpy")
def euler_rate_one(e, E):
    """E (3x3) with omega = E e' for e = (alpha, beta, gamma). Returns a status."""
    if e.shape[0] != 3 or E.shape[0] != 3 or E.shape[1] != 3:
        return BAD_INPUT
    cb, sb = math.cos(e[1]), math.sin(e[1])
    cg, sg = math.cos(e[2]), math.sin(e[2])
    E[0, 0] = cg * cb
    E[0, 1] = -sg
    E[0, 2] = 0.0
    E[1, 0] = sg * cb
    E[1, 1] = cg
    E[1, 2] = 0.0
    E[2, 0] = -sb
    E[2, 1] = 0.0
    E[2, 2] = 1.0
    return OK


@njit("int64(float64[::1], float64[::1], float64[::1], int64, float64[::1], float64[::1])",
      cache=True, error_model="numpy")
def leg_kinematics_one(X, Xd, Xdd, order, params, out):
    """Leg vectors, lengths, unit vectors, platform joints and (order >= 1) rates, (order 2) accelerations.

    ``out`` (72,) in contiguous blocks: ``l (6x3), u (6x3), R p (6x3), L (6), L' (6), L'' (6)``;
    ``Xd``/``Xdd`` are read only up to ``order`` (pass any 6-vector otherwise).  Returns a status
    (BAD_INPUT for wrong sizes or non-finite inputs).
    """
    if (X.shape[0] != 6 or Xd.shape[0] != 6 or Xdd.shape[0] != 6 or params.shape[0] != N_PARAMS
            or out.shape[0] != 72 or order < 0 or order > 2):
        return BAD_INPUT
    if not _finite6(X) or (order >= 1 and not _finite6(Xd)) or (order == 2 and not _finite6(Xdd)):
        return BAD_INPUT
    legs, _ = _split(params)
    wk = np.empty(18)
    nu = wk[:6]
    nud = wk[6:12]
    zero = wk[12:]
    zero[:] = 0.0
    if order >= 1:
        euler_to_twist(X, Xd, Xdd if order == 2 else zero, nu, nud)
    R9 = _rot9(X[3], X[4], X[5])
    r = (X[0], X[1], X[2])
    for i in range(6):
        leg = legs[i]
        rp = _matvec(R9, 0, _vec(leg, 3))
        l = _sub(_add(r, rp), _vec(leg, 0))
        L = math.sqrt(_dot(l, l))
        u = (l[0] / L, l[1] / L, l[2] / L)
        for k in range(3):
            out[3 * i + k] = l[k]
            out[18 + 3 * i + k] = u[k]
            out[36 + 3 * i + k] = rp[k]
        out[54 + i] = L
        out[60 + i] = 0.0
        out[66 + i] = 0.0
        if order >= 1:
            om = (nu[3], nu[4], nu[5])
            vP = _add((nu[0], nu[1], nu[2]), _cross(om, rp))
            Ld = _dot(u, vP)
            out[60 + i] = Ld
            if order == 2:
                aP = _add(_add((nud[0], nud[1], nud[2]), _cross((nud[3], nud[4], nud[5]), rp)),
                          _cross(om, _cross(om, rp)))
                out[66 + i] = _dot(u, aP) + (_dot(vP, vP) - Ld * Ld) / L
    return OK


@njit("int64(float64[::1], float64[::1], float64[::1])",
      cache=True, error_model="numpy")
def leg_lengths_one(X, params, L):
    """Leg lengths L (6,) [m] at pose X. Returns a status (BAD_INPUT for wrong sizes or non-finite X)."""
    if X.shape[0] != 6 or params.shape[0] != N_PARAMS or L.shape[0] != 6 or not _finite6(X):
        return BAD_INPUT
    legs, _ = _split(params)
    R9 = _rot9(X[3], X[4], X[5])
    r = (X[0], X[1], X[2])
    for i in range(6):
        leg = legs[i]
        l = _sub(_add(r, _matvec(R9, 0, _vec(leg, 3))), _vec(leg, 0))
        L[i] = math.sqrt(_dot(l, l))
    return OK


_gate.release()
