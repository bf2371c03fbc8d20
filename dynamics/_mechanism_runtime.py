"""Compiled entry kernels of a mechanism model: the text of this file below its template mark
is copied into every generated mechanism module (:mod:`dynamics._mechanism_derive`), after the
generated functions, and compiled there with numba (``_kernel``: ``njit(cache=True)``).  This
file is never imported to run (its names ``N_Z``, ``phi_w``... are the generated module's).

Why a copy and not an import: numba's on-disk cache checks a cached function against its own
source file only (see :mod:`dynamics._kernel_cache`).  With the entry kernels and the generated
functions they call in ONE file, that file is the whole source of every cache entry it has, and
the sha256 of this text is part of the generated file's digest (its name): a change of this
file makes a new generated file, never a stale cache entry.

Names the generated module defines before this text::

    N_Z, N_C, N_A, N_T, N_P      full coordinates, closure equations, actuated coordinates,
                                 task coordinates, inertial parameters
    T_WRAP                       (N_T,) tuple: 1.0 for a task coordinate that is an Euler
                                 angle (atan2, in (-pi, pi]), else 0.0: its inverse-kinematics
                                 residual and continuation step are wrapped to (-pi, pi], so that
                                 a target near +-pi is reached the short way
    kin_w(z, out), tkin_w(z, out), dyn_w(z, zd, p, out)
                                 fused forms (layouts below): one pass of common
                                 subexpressions for what a Newton iteration or a dynamics
                                 call needs (each sine and cosine once)
    _kernel                      the decorator (numba.njit(cache=True, error_model="numpy"))

``D`` is the model's one array (:func:`dynamics.mechanism._model_array`), so that a call from
Python passes few arguments; offsets ``O_*`` below::

    p (N_P,)          inertial parameters (first: the generated functions read D as p)
    act (N_A,), pas (N_C,)      indices of the actuated and passive coordinates, as floats
    step_a (N_A,), step_t (N_T,)  continuation steps: 0.1 rad or 0.01 m per coordinate
    arm (N_Z,)        armature added to the mass matrix diagonal
    sign2, sign1      home signs of det(B) (type-2 matrix) and det(K) (type-1 matrix)
    tol, iters        Newton tolerance [m] and iteration limit
    home (N_Z,)       home configuration
    warm (N_Z,), warm_ik (N_Z,)  the last forward / inverse kinematics solutions (updated)
    warm_g (N_Z, N_A) the velocity map G at warm when :func:`state` computed it there, else
                      zeros: the first-order predictor of the next forward kinematics' start

Dense solves: LU with partial pivoting (:func:`_lu`); an exactly zero pivot is numpy's
``LinAlgError``.  The sign of a determinant is read off the LU of the last Newton iteration
(the configuration then differs from the returned one by less than the tolerance).

Status codes: 0 ok; 1 no configuration in the home assembly mode (forward kinematics);
2 pose not reached in the home working mode (inverse kinematics); 3 type-2 singularity
(singular B where the velocities are mapped); 4 singular multiplier block or reduced mass
matrix; 5 an input is not finite.
"""
# ---- template start (everything below is copied into the generated module)

# the small helpers: inlined into their callers (numba IR), so that the arrays they take cost
# no reference counting at each call
_inline = njit(cache=True, error_model="numpy", inline="always")  # noqa: F821
# the kernels that allocate nothing: compiled without reference counting of their arrays
_noref = njit(cache=True, error_model="numpy", _nrt=False)  # noqa: F821

ST_OK = 0
ST_NOFK = 1
ST_NOIK = 2
ST_TYPE2 = 3
ST_SINGULAR = 4
ST_BADINPUT = 5

O_ACT = N_P  # noqa: F821
O_PAS = O_ACT + N_A  # noqa: F821
O_STEPA = O_PAS + N_C  # noqa: F821
O_STEPT = O_STEPA + N_A  # noqa: F821
O_ARM = O_STEPT + N_T  # noqa: F821
O_SIGN2 = O_ARM + N_Z  # noqa: F821
O_SIGN1 = O_SIGN2 + 1
O_TOL = O_SIGN1 + 1
O_ITER = O_TOL + 1
O_HOME = O_ITER + 1
O_WARM = O_HOME + N_Z  # noqa: F821
O_WARMIK = O_WARM + N_Z  # noqa: F821
O_WARMG = O_WARMIK + N_Z  # noqa: F821
D_SIZE = O_WARMG + N_Z * N_A  # noqa: F821
# the fused generated forms: kin = [phi (N_C), phi_z (N_C, N_Z)], tkin = [task (N_T),
# task_z (N_T, N_Z)], dyn = [gamma (N_C), M (N_Z, N_Z), b (N_Z), Lc (N_Z, N_C)]
KIN_SIZE = N_C + N_C * N_Z  # noqa: F821
TKIN_SIZE = N_T + N_T * N_Z  # noqa: F821
O_DY_M = N_C  # noqa: F821
O_DY_B = O_DY_M + N_Z * N_Z  # noqa: F821
O_DY_L = O_DY_B + N_Z  # noqa: F821
DYN_SIZE = O_DY_L + N_Z * N_C  # noqa: F821
STATE_SIZE = 3 * N_Z + N_Z * N_A + DYN_SIZE  # noqa: F821   z, zd, g0, G, DY


@_inline  # noqa: F821
def _lu(A, k, perm):
    """In-place LU with partial pivoting of the leading k x k block of A, the row permutation
    into perm (int64, (k,) or longer); returns (sign of det, ok).  ok is False at an exactly zero
    pivot (numpy's LinAlgError)."""
    for i in range(k):
        perm[i] = i
    sgn = 1.0
    for c in range(k):
        piv = c
        big = abs(A[c, c])
        for r in range(c + 1, k):
            v = abs(A[r, c])
            if v > big:
                big = v
                piv = r
        if big == 0.0 or not math.isfinite(big):  # noqa: F821
            return 0.0, False
        if piv != c:
            for j in range(k):
                t = A[c, j]
                A[c, j] = A[piv, j]
                A[piv, j] = t
            t2 = perm[c]
            perm[c] = perm[piv]
            perm[piv] = t2
            sgn = -sgn
        if A[c, c] < 0.0:
            sgn = -sgn
        inv = 1.0 / A[c, c]
        for r in range(c + 1, k):
            f = A[r, c] * inv
            A[r, c] = f
            if f != 0.0:
                for j in range(c + 1, k):
                    A[r, j] -= f * A[c, j]
    return sgn, True


@_inline  # noqa: F821
def _lu_solve(A, perm, k, b, x):
    """x = A^-1 b with the LU of :func:`_lu` (b, x: (k,); may not alias)."""
    for i in range(k):
        s = b[perm[i]]
        for j in range(i):
            s -= A[i, j] * x[j]
        x[i] = s
    for i in range(k - 1, -1, -1):
        s = x[i]
        for j in range(i + 1, k):
            s -= A[i, j] * x[j]
        x[i] = s / A[i, i]


@_inline  # noqa: F821
def _task_diff(target, value, i):
    """target - value of task coordinate i, wrapped to (-pi, pi] where T_WRAP[i] (an Euler
    angle: equal angles modulo 2 pi are one pose)."""
    d = target - value
    if T_WRAP[i] != 0.0:  # noqa: F821
        d = math.atan2(math.sin(d), math.cos(d))  # noqa: F821
    return d


@_inline  # noqa: F821
def _maxabs(r, k):
    """max |r[:k]|, NaN-propagating."""
    m = 0.0
    for i in range(k):
        a = abs(r[i])
        if not a <= m:
            m = a
    return m


@_inline  # noqa: F821
def _kin_lu(z, D, KP, B, perm):
    """KP = kin(z); B = the passive columns of phi_z, LU-factored (row permutation into perm):
    (sign, ok)."""
    kin_w(z, KP)  # noqa: F821
    for i in range(N_C):  # noqa: F821
        for j in range(N_C):  # noqa: F821
            B[i, j] = KP[N_C + i * N_Z + int(D[O_PAS + j])]  # noqa: F821
    return _lu(B, N_C, perm)  # noqa: F821


@_inline  # noqa: F821
def _finite(x, k):
    """Whether x has k entries, all finite."""
    if x.shape[0] != k:
        return False
    for i in range(k):
        if not math.isfinite(x[i]):  # noqa: F821
            return False
    return True


@_inline  # noqa: F821
def _residual_lu(kind, z, target, D, r, A, KP, TK, perm):
    """kind 0: r = phi(z) (N_C,) and A = B, the passive columns of phi_z; kind 1: r = [phi(z);
    task(z) - target] (N_Z,) and A = K = [phi_z; task_z]; A LU-factored (row permutation into
    perm), KP = kin(z) (and kind 1: TK = tkin(z)): (sign, ok)."""
    if kind == 1:
        return _ik_lu(z, target, A, r, KP, TK, perm)
    sgn, ok = _kin_lu(z, D, KP, A, perm)
    for i in range(N_C):  # noqa: F821
        r[i] = KP[i]
    return sgn, ok


@_noref  # noqa: F821
def _newton(kind, target, z0, D, z, WK):
    """Newton from z0 into z: kind 0 on phi(z) = 0 over the passive coordinates with z[act] =
    target (actuated coordinates); kind 1 on [phi(z); task(z) - target] = 0 over every
    coordinate (target: task coordinates).  ``WK``: the workspace (:func:`_work`).  Returns
    (sign of det(B) (kind 0) or det(K) (kind 1) at the solution, 0.0 when Newton failed;
    fresh): fresh is True when WK's kin, tkin and LU-factored matrix are those of the returned z
    (the last step changed no coordinate: the usual case, the step being ~ tol squared)."""
    r, A, dx, KP, TK, perm = WK[0], WK[1], WK[2], WK[3], WK[4], WK[5]
    k = N_C if kind == 0 else N_Z  # noqa: F821
    tol = D[O_TOL]
    for i in range(N_Z):  # noqa: F821
        z[i] = z0[i]
    if kind == 0:
        for a in range(N_A):  # noqa: F821
            z[int(D[O_ACT + a])] = target[a]
    for _ in range(int(D[O_ITER])):
        sgn, ok = _residual_lu(kind, z, target, D, r, A, KP, TK, perm)
        err = _maxabs(r, k)
        if not math.isfinite(err) or not ok:  # noqa: F821
            return 0.0, False
        _lu_solve(A, perm, k, r, dx)
        same = True
        for j in range(k):
            i = int(D[O_PAS + j]) if kind == 0 else j
            old = z[i]
            z[i] = old - dx[j]
            if z[i] != old:
                same = False
        if err <= tol:       # one step past the tolerance: the error is then ~ its square
            return sgn, same
    sgn, ok = _residual_lu(kind, z, target, D, r, A, KP, TK, perm)
    if not _maxabs(r, k) <= tol or not ok:
        return 0.0, False
    return sgn, True


@_inline  # noqa: F821
def _work(kind):
    """Workspace of :func:`_newton` and :func:`_continue` for ``kind``: (r (k,), A (k, k),
    dx (k,), KP (KIN_SIZE,), TK (TKIN_SIZE,), perm (k,) int64, zp (N_Z,), zc (N_Z,),
    sx (2 N_Z,)), k = N_C (kind 0) or N_Z (kind 1): views of one float and one int array."""
    k = N_C if kind == 0 else N_Z  # noqa: F821
    f = np.empty(3 * k + k * k + KIN_SIZE + TKIN_SIZE + 4 * N_Z)  # noqa: F821
    o = 3 * k + k * k
    o2 = o + KIN_SIZE  # noqa: F821
    o3 = o2 + TKIN_SIZE  # noqa: F821
    return (f[0:k], f[3 * k:o].reshape((k, k)), f[k:2 * k], f[o:o2], f[o2:o3],
            np.empty(k, np.int64), f[o3:o3 + N_Z], f[o3 + N_Z:o3 + 2 * N_Z],  # noqa: F821
            f[o3 + 2 * N_Z:o3 + 4 * N_Z])  # noqa: F821


@_kernel  # noqa: F821
def newton_passive(qa, z0, D, z):
    """:func:`_newton` on the closures for the actuated qa (kind 0)."""
    return _newton(0, qa, z0, D, z, _work(0))[0]


@_kernel  # noqa: F821
def newton_ik(X, z0, D, z):
    """:func:`_newton` on the closures and the task for the task pose X (kind 1)."""
    return _newton(1, X, z0, D, z, _work(1))[0]


@_noref  # noqa: F821
def _continue(kind, target, z0, D, z, WK, pred):
    """:func:`_newton` continued from z0 to ``target`` in steps of at most step_a (kind 0) or
    step_t (kind 1), each keeping the home sign of det(B) (kind 0: the assembly mode) or det(K)
    (kind 1: the working mode); into z: (True on success, fresh of the last :func:`_newton`).
    ``pred`` (kind 0, z0 = warm): a single step starts from the first-order prediction
    z0 + warm_g (target - z0[act]) (two Newton iterations instead of three on a control
    cycle's step; with warm_g zero, z0 itself)."""
    k_n = N_A if kind == 0 else N_T  # noqa: F821
    start = WK[8]
    xs = WK[8][N_Z:]  # noqa: F821   (the steps' targets; first the whole move)
    if kind == 0:
        for a in range(N_A):  # noqa: F821
            start[a] = z0[int(D[O_ACT + a])]
            xs[a] = target[a] - start[a]
        o_step, sign = O_STEPA, D[O_SIGN2]
    else:
        TK = WK[4]
        tkin_w(z0, TK)  # noqa: F821
        for i in range(N_T):  # noqa: F821
            start[i] = TK[i]
            xs[i] = _task_diff(target[i], TK[i], i)   # (an Euler angle: the short way)
        o_step, sign = O_STEPT, D[O_SIGN1]
    big = 0.0
    for i in range(k_n):
        v = abs(xs[i]) / D[o_step + i]
        if v > big:
            big = v
    k = max(1, int(math.ceil(big)))  # noqa: F821
    if k == 1:              # (the usual case: a control cycle's step)
        if pred:
            zp = WK[6]
            for i in range(N_Z):  # noqa: F821
                s = z0[i]
                for a in range(N_A):  # noqa: F821
                    s += D[O_WARMG + i * N_A + a] * (target[a] - start[a])  # noqa: F821
                zp[i] = s
            sg, fresh = _newton(kind, target, zp, D, z, WK)
        else:
            sg, fresh = _newton(kind, target, z0, D, z, WK)
        return sg == sign, fresh
    zc = WK[7]
    dx = WK[6]      # (the whole move; WK[6] is free here: the predictor is not used)
    for i in range(k_n):
        dx[i] = xs[i]
    for i in range(N_Z):  # noqa: F821
        zc[i] = z0[i]
    fresh = False
    for s in range(1, k + 1):
        for i in range(k_n):
            xs[i] = start[i] + dx[i] * s / k
        sg, fresh = _newton(kind, xs, zc, D, z, WK)
        if sg != sign:
            return False, False
        for i in range(N_Z):  # noqa: F821
            zc[i] = z[i]
    return True, fresh


@_noref  # noqa: F821
def _solve_ws(kind, D, target, z, WK):
    """Full configuration z for ``target`` (kind 0: actuated coordinates; 1: task coordinates):
    :func:`_continue` from the last solution (warm or warm_ik, updated), then from the home
    configuration, in the workspace WK (:func:`_work`); (status, fresh of :func:`_newton`)."""
    if not _finite(target, N_A if kind == 0 else N_T):  # noqa: F821
        return ST_BADINPUT, False
    o_warm = O_WARM if kind == 0 else O_WARMIK
    ok, fresh = _continue(kind, target, D[o_warm:o_warm + N_Z], D, z, WK, kind == 0)  # noqa: F821
    if not ok:
        ok, fresh = _continue(kind, target, D[O_HOME:O_HOME + N_Z], D, z, WK, False)  # noqa: F821
        if not ok:
            return (ST_NOFK if kind == 0 else ST_NOIK), False
    for i in range(N_Z):  # noqa: F821
        D[o_warm + i] = z[i]
    if kind == 0:           # warm_g no longer the map at warm (state() sets it again)
        for i in range(N_Z * N_A):  # noqa: F821
            D[O_WARMG + i] = 0.0  # noqa: F821
    return ST_OK, fresh


@_kernel  # noqa: F821
def _solve(kind, D, target, z):
    """:func:`_solve_ws` in a new workspace; status."""
    return _solve_ws(kind, D, target, z, _work(kind))[0]


@_kernel  # noqa: F821
def configuration(D, qa, z):
    """Full configuration z for the actuated qa in the home assembly mode; status."""
    return _solve(0, D, qa, z)


@_kernel  # noqa: F821
def inverse_configuration(D, X, z):
    """Full configuration z for the task pose X in the home working mode; status."""
    return _solve(1, D, X, z)


@_kernel  # noqa: F821
def _task_at(D, qa, z, TK):
    """z: the configuration at the actuated qa (:func:`configuration`), TK = tkin(z); status."""
    st = configuration(D, qa, z)
    if st == ST_OK:
        tkin_w(z, TK)  # noqa: F821
    return st


@_kernel  # noqa: F821
def forward_task(D, qa, X):
    """Task coordinates X (N_T,) at the actuated qa (:func:`configuration`); status."""
    TK = np.empty(TKIN_SIZE)  # noqa: F821
    st = _task_at(D, qa, np.empty(N_Z), TK)  # noqa: F821
    if st == ST_OK:
        X[:] = TK[:N_T]  # noqa: F821
    return st


@_noref  # noqa: F821
def _ik_lu(z, X, K, r, KP, TK, perm):
    """r = [phi(z); task(z) - X] and K = [phi_z; task_z] (N_Z, N_Z) at z, LU-factored (row
    permutation into perm), KP = kin(z), TK = tkin(z): (sign, ok)."""
    kin_w(z, KP)  # noqa: F821
    tkin_w(z, TK)  # noqa: F821
    for i in range(N_C):  # noqa: F821
        r[i] = KP[i]
        for j in range(N_Z):  # noqa: F821
            K[i, j] = KP[N_C + i * N_Z + j]  # noqa: F821
    for i in range(N_T):  # noqa: F821
        r[N_C + i] = -_task_diff(X[i], TK[i], i)  # noqa: F821  task(z) - X
        for j in range(N_Z):  # noqa: F821
            K[N_C + i, j] = TK[N_T + i * N_Z + j]  # noqa: F821
    return _lu(K, N_Z, perm)  # noqa: F821


@_kernel  # noqa: F821
def inverse_q(D, X, q):
    """Actuated coordinates q (N_A,) for the task pose X (:func:`inverse_configuration`); status."""
    z = np.empty(N_Z)  # noqa: F821
    st = inverse_configuration(D, X, z)
    if st != ST_OK:
        return st
    for a in range(N_A):  # noqa: F821
        q[a] = z[int(D[O_ACT + a])]
    return ST_OK


@_inline  # noqa: F821
def _fill_g(D, KP, B, perm, G, col, x):
    """G (N_Z, N_A): identity rows on the actuated coordinates, -B^-1 A on the passive ones
    (B LU-factored; col, x: (N_C,) scratch)."""
    G[:, :] = 0.0
    for a in range(N_A):  # noqa: F821
        ia = int(D[O_ACT + a])
        G[ia, a] = 1.0
        for i in range(N_C):  # noqa: F821
            col[i] = KP[N_C + i * N_Z + ia]  # noqa: F821
        _lu_solve(B, perm, N_C, col, x)  # noqa: F821
        for j in range(N_C):  # noqa: F821
            G[int(D[O_PAS + j]), a] = -x[j]


@_kernel  # noqa: F821
def velocity_map(D, z, G):
    """G (N_Z, N_A) with zd = G qd at z; False at a singular B."""
    WK = _work(0)
    r, B, dx, KP, perm = WK[0], WK[1], WK[2], WK[3], WK[5]
    sgn, ok = _kin_lu(z, D, KP, B, perm)
    if not ok:
        return False
    _fill_g(D, KP, B, perm, G, r, dx)
    return True


@_kernel  # noqa: F821
def task_jacobian(D, qa, J):
    """J (N_T, N_A) with Xd = J qd: the task Jacobian task_z G at the configuration of qa; status."""
    z = np.empty(N_Z)  # noqa: F821
    TK = np.empty(TKIN_SIZE)  # noqa: F821
    st = _task_at(D, qa, z, TK)
    if st != ST_OK:
        return st
    G = np.empty((N_Z, N_A))  # noqa: F821
    if not velocity_map(D, z, G):
        return ST_TYPE2
    for i in range(N_T):  # noqa: F821
        for a in range(N_A):  # noqa: F821
            s = 0.0
            for k in range(N_Z):  # noqa: F821
                s += TK[N_T + i * N_Z + k] * G[k, a]  # noqa: F821
            J[i, a] = s
    return ST_OK


@_kernel  # noqa: F821
def state(D, qa, qda, z, zd, G, g0, DY):
    """z, zd = G qd, G, g0 (zdd = G qdd + g0) and DY = dyn(z, zd) at the actuated state; status."""
    return _state_ws(D, qa, qda, z, zd, G, g0, DY, _work(0))


@_noref  # noqa: F821
def _state_ws(D, qa, qda, z, zd, G, g0, DY, WK):
    """:func:`state` in the workspace WK (:func:`_work`, kind 0)."""
    if not _finite(qda, N_A):  # noqa: F821
        return ST_BADINPUT
    st, fresh = _solve_ws(0, D, qa, z, WK)
    if st != ST_OK:
        return st
    r, B, x, KP, perm = WK[0], WK[1], WK[2], WK[3], WK[5]
    if not fresh:           # (else B's LU and kin are those of z: Newton's last ones)
        sgn, ok = _kin_lu(z, D, KP, B, perm)
        if not ok:
            return ST_TYPE2
    _fill_g(D, KP, B, perm, G, r, x)
    for i in range(N_Z):  # noqa: F821   (z is warm: the predictor of the next solve)
        for a in range(N_A):  # noqa: F821
            D[O_WARMG + i * N_A + a] = G[i, a]  # noqa: F821
    for i in range(N_Z):  # noqa: F821
        s = 0.0
        for a in range(N_A):  # noqa: F821
            s += G[i, a] * qda[a]
        zd[i] = s
    dyn_w(z, zd, D, DY)  # noqa: F821
    for i in range(N_Z):  # noqa: F821
        g0[i] = 0.0
    _lu_solve(B, perm, N_C, DY, x)  # noqa: F821  (DY[:N_C] = gamma)
    for j in range(N_C):  # noqa: F821
        g0[int(D[O_PAS + j])] = -x[j]
    return ST_OK


@_kernel  # noqa: F821
def _new_state(D, qa, qda):
    """(status, z, zd, G, g0, DY) of :func:`state`, views of one new array."""
    z, zd, G, g0, DY = _state_arrays(np.empty(STATE_SIZE))  # noqa: F821
    st = state(D, qa, qda, z, zd, G, g0, DY)
    return st, z, zd, G, g0, DY


@_inline  # noqa: F821
def _state_arrays(f):
    """(z, zd, G, g0, DY) of :func:`state`: views of f (STATE_SIZE,)."""
    o = 3 * N_Z + N_Z * N_A  # noqa: F821
    return (f[0:N_Z], f[N_Z:2 * N_Z], f[3 * N_Z:o].reshape((N_Z, N_A)),  # noqa: F821
            f[2 * N_Z:3 * N_Z], f[o:o + DYN_SIZE])  # noqa: F821


@_kernel  # noqa: F821
def reduced(D, qa, qda, Mr, h):
    """The actuated-space dynamics at (qa, qda): Mr (N_A, N_A) = G^T M G (armature included)
    and h (N_A,) = G^T (M g0 + b); status."""
    st, z, zd, G, g0, DY = _new_state(D, qa, qda)
    if st != ST_OK:
        return st
    MG = np.zeros((N_Z, N_A))  # noqa: F821
    f = np.empty(N_Z)  # noqa: F821   M g0 + b
    for i in range(N_Z):  # noqa: F821
        s = DY[O_DY_B + i]  # noqa: F821
        for k in range(N_Z):  # noqa: F821
            mik = DY[O_DY_M + i * N_Z + k]  # noqa: F821
            if i == k:
                mik += D[O_ARM + i]  # noqa: F821
            s += mik * g0[k]
            for a in range(N_A):  # noqa: F821
                MG[i, a] += mik * G[k, a]
        f[i] = s
    for a in range(N_A):  # noqa: F821
        s = 0.0
        for i in range(N_Z):  # noqa: F821
            s += G[i, a] * f[i]
        h[a] = s
        for c in range(N_A):  # noqa: F821
            s = 0.0
            for i in range(N_Z):  # noqa: F821
                s += G[i, a] * MG[i, c]
            Mr[a, c] = s
    return ST_OK


@_kernel  # noqa: F821
def _id_from(D, DY, zdd, wf, out):
    """out[:N_A] = tau, out[N_A:N_Z] = lam from dyn (DY) and the full acceleration zdd; status."""
    f = np.empty(N_Z + N_C * N_C + 2 * N_C)  # noqa: F821
    return _id_from_ws(D, DY, zdd, wf, out, f, np.empty(N_C, np.int64))  # noqa: F821


@_noref  # noqa: F821
def _id_from_ws(D, DY, zdd, wf, out, f, perm):
    """:func:`_id_from` in the workspace f (N_Z + N_C N_C + 2 N_C,), perm (N_C,) int64."""
    F = f[0:N_Z]  # noqa: F821
    for i in range(N_Z):  # noqa: F821
        s = 0.0
        for j in range(N_Z):  # noqa: F821
            s += DY[O_DY_M + i * N_Z + j] * zdd[j]  # noqa: F821
        s += D[O_ARM + i] * zdd[i]
        F[i] = s + DY[O_DY_B + i] - wf[i]
    Lp = f[N_Z:N_Z + N_C * N_C].reshape((N_C, N_C))  # noqa: F821
    Fp = f[N_Z + N_C * N_C:N_Z + N_C * N_C + N_C]  # noqa: F821
    for i in range(N_C):  # noqa: F821
        ip = int(D[O_PAS + i])
        Fp[i] = -F[ip]
        for j in range(N_C):  # noqa: F821
            Lp[i, j] = DY[O_DY_L + ip * N_C + j]  # noqa: F821
    sgn, ok = _lu(Lp, N_C, perm)  # noqa: F821
    if not ok:
        return ST_SINGULAR
    lam = f[N_Z + N_C * N_C + N_C:N_Z + N_C * N_C + 2 * N_C]  # noqa: F821
    _lu_solve(Lp, perm, N_C, Fp, lam)  # noqa: F821
    for a in range(N_A):  # noqa: F821
        ia = int(D[O_ACT + a])
        s = F[ia]
        for j in range(N_C):  # noqa: F821
            s += DY[O_DY_L + ia * N_C + j] * lam[j]  # noqa: F821
        out[a] = s
    if out.shape[0] > N_A:  # noqa: F821
        for j in range(N_C):  # noqa: F821
            out[N_A + j] = lam[j]  # noqa: F821
    return ST_OK


@_kernel  # noqa: F821
def full_id(D, z, zd, zdd, wf, out):
    """out = [tau (N_A,), lam (N_C,)] for the full motion (z, zd, zdd) and the generalised force
    ``wf`` (N_Z,) of a wrench; status."""
    DY = np.empty(DYN_SIZE)  # noqa: F821
    dyn_w(z, zd, D, DY)  # noqa: F821
    return _id_from(D, DY, zdd, wf, out)


@_kernel  # noqa: F821
def task_id(D, X, Xd, Xdd, wf, out):
    """out = [tau (N_A,), lam (N_C,)] for the task motion (X, Xd, Xdd): the configuration by
    inverse kinematics, zd and zdd from ``[phi_z; task_z] zd = [0; Xd]`` and its time
    derivative, then :func:`_id_from`; status."""
    if not (_finite(Xd, N_T) and _finite(Xdd, N_T)):  # noqa: F821
        return ST_BADINPUT
    z = np.empty(N_Z)  # noqa: F821
    WK = _work(1)
    st, fresh = _solve_ws(1, D, X, z, WK)
    if st != ST_OK:
        return st
    r, K, KP, TK, perm = WK[0], WK[1], WK[3], WK[4], WK[5]
    if not fresh:           # (else K's LU is that of z: Newton's last one)
        sgn, ok = _ik_lu(z, X, K, r, KP, TK, perm)
        if not ok:
            return ST_SINGULAR
    b = np.zeros(N_Z)  # noqa: F821
    for i in range(N_T):  # noqa: F821
        b[N_C + i] = Xd[i]  # noqa: F821
    zd = np.empty(N_Z)  # noqa: F821
    _lu_solve(K, perm, N_Z, b, zd)  # noqa: F821
    DY = np.empty(DYN_SIZE)  # noqa: F821
    dyn_w(z, zd, D, DY)  # noqa: F821
    TG = np.empty(N_T)  # noqa: F821
    task_gamma_w(z, zd, TG)  # noqa: F821
    for i in range(N_C):  # noqa: F821
        b[i] = -DY[i]     # gamma = d/dt(phi_z) zd
    for i in range(N_T):  # noqa: F821
        b[N_C + i] = Xdd[i] - TG[i]  # noqa: F821
    zdd = np.empty(N_Z)  # noqa: F821
    _lu_solve(K, perm, N_Z, b, zdd)  # noqa: F821
    return _id_from(D, DY, zdd, wf, out)


@_kernel  # noqa: F821
def inverse_dynamics(D, qa, qda, qdda, wf, out):
    """out = tau (N_A,), or [tau (N_A,), lam (N_C,), z (N_Z,)], for the actuated motion; status.
    ``wf``: the generalised force of a wrench (N_Z,)."""
    if not _finite(qdda, N_A) or wf.shape[0] != N_Z or (  # noqa: F821
            out.shape[0] != N_A and out.shape[0] != N_A + N_C + N_Z):  # noqa: F821
        return ST_BADINPUT
    f = np.empty(STATE_SIZE + N_Z + N_C * N_C + 2 * N_C)  # noqa: F821
    return _id_ws(D, qa, qda, qdda, wf, out, f, _work(0))


@_noref  # noqa: F821
def _id_ws(D, qa, qda, qdda, wf, out, f, WK):
    """:func:`inverse_dynamics` in the workspaces f (STATE_SIZE + N_Z + N_C N_C + 2 N_C,) and WK
    (:func:`_work`, kind 0)."""
    z, zd, G, g0, DY = _state_arrays(f)
    st = _state_ws(D, qa, qda, z, zd, G, g0, DY, WK)
    if st != ST_OK:
        return st
    for i in range(N_Z):  # noqa: F821
        s = g0[i]
        for a in range(N_A):  # noqa: F821
            s += G[i, a] * qdda[a]
        g0[i] = s            # now zdd
    st = _id_from_ws(D, DY, g0, wf, out, f[STATE_SIZE:], WK[5])  # noqa: F821
    if out.shape[0] > N_A:  # noqa: F821
        for i in range(N_Z):  # noqa: F821
            out[N_Z + i] = z[i]  # noqa: F821
    return st


@_kernel  # noqa: F821
def forward_dynamics(D, qa, qda, taua, wf, qdd):
    """qdd (N_A,) solving G^T M G qdd = tau - G^T (M g0 + b) + G^T wf; status."""
    if not _finite(taua, N_A) or wf.shape[0] != N_Z or qdd.shape[0] != N_A:  # noqa: F821
        return ST_BADINPUT
    f = np.empty(STATE_SIZE + N_Z * N_Z + N_Z + N_Z * N_A + N_A * N_A + N_A)  # noqa: F821
    return _fd_ws(D, qa, qda, taua, wf, qdd, f, _work(0), np.empty(N_A, np.int64))  # noqa: F821


@_noref  # noqa: F821
def _fd_ws(D, qa, qda, taua, wf, qdd, f, WK, perm):
    """:func:`forward_dynamics` in the workspaces f (STATE_SIZE + N_Z N_Z + N_Z + N_Z N_A + N_A N_A
    + N_A,), WK (:func:`_work`, kind 0) and perm (N_A,) int64."""
    z, zd, G, g0, DY = _state_arrays(f)
    st = _state_ws(D, qa, qda, z, zd, G, g0, DY, WK)
    if st != ST_OK:
        return st
    o = STATE_SIZE  # noqa: F821
    M = f[o:o + N_Z * N_Z].reshape((N_Z, N_Z))  # noqa: F821
    o += N_Z * N_Z  # noqa: F821
    b = f[o:o + N_Z]  # noqa: F821
    o += N_Z  # noqa: F821
    for i in range(N_Z):  # noqa: F821
        for j in range(N_Z):  # noqa: F821
            M[i, j] = DY[O_DY_M + i * N_Z + j]  # noqa: F821
        M[i, i] += D[O_ARM + i]
    for i in range(N_Z):  # noqa: F821
        s = 0.0
        for j in range(N_Z):  # noqa: F821
            s += M[i, j] * g0[j]
        b[i] = DY[O_DY_B + i] + s - wf[i]
    MG = f[o:o + N_Z * N_A].reshape((N_Z, N_A))  # noqa: F821
    o += N_Z * N_A  # noqa: F821
    for i in range(N_Z):  # noqa: F821
        for a in range(N_A):  # noqa: F821
            s = 0.0
            for j in range(N_Z):  # noqa: F821
                s += M[i, j] * G[j, a]
            MG[i, a] = s
    Mr = f[o:o + N_A * N_A].reshape((N_A, N_A))  # noqa: F821
    rhs = f[o + N_A * N_A:o + N_A * N_A + N_A]  # noqa: F821
    for a in range(N_A):  # noqa: F821
        s = 0.0
        for i in range(N_Z):  # noqa: F821
            s += G[i, a] * b[i]
        rhs[a] = taua[a] - s
        for c in range(N_A):  # noqa: F821
            s = 0.0
            for i in range(N_Z):  # noqa: F821
                s += G[i, a] * MG[i, c]
            Mr[a, c] = s
    sgn, ok = _lu(Mr, N_A, perm)  # noqa: F821
    if not ok:
        return ST_SINGULAR
    _lu_solve(Mr, perm, N_A, rhs, qdd)  # noqa: F821
    return ST_OK
