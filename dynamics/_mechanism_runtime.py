"""Compiled entry kernels of a mechanism model, compiled once for every mechanism.

A mechanism's generated module (:mod:`dynamics._mechanism_derive`) holds its generated
functions (``kin_w``, ``tkin_w``, ``dyn_w``, ``task_gamma_w``: the fused forms, layouts below).
The entry kernels here call them as first-class function values made from their numba entry
points, which the model passes in an int64 array ``P`` (:func:`addresses`), and read the sizes
of the mechanism from its model array ``D`` (the last five entries): nothing of a particular
mechanism is compiled in.  So the entry kernels are compiled once per machine, with explicit
signatures, when this module is first imported (then loaded from numba's cache), and a new
mechanism compiles only its generated functions.  ``P`` holds addresses of this process: a
model makes it when it is built (a pickled model is built again, see
:meth:`dynamics.mechanism.MechanismModel.__reduce__`).

Names the generated module defines::

    N_Z, N_C, N_A, N_T, N_P      full coordinates, closure equations, actuated coordinates,
                                 task coordinates, inertial parameters
    T_WRAP                       (N_T,) tuple: 1.0 for a task coordinate that is an Euler
                                 angle (atan2, in (-pi, pi]), else 0.0: its inverse-kinematics
                                 residual and continuation step are wrapped to (-pi, pi], so that
                                 a target near +-pi is reached the short way (``D``'s ``twrap``)
    kin_w(z, out), tkin_w(z, out), dyn_w(z, zd, p, out), task_gamma_w(z, zd, out)
                                 fused forms: one pass of common subexpressions for what a
                                 Newton iteration or a dynamics call needs (each sine and
                                 cosine once): kin = [phi (N_C), phi_z (N_C, N_Z)], tkin =
                                 [task (N_T), task_z (N_T, N_Z)], dyn = [gamma (N_C),
                                 M (N_Z, N_Z), b (N_Z), Lc (N_Z, N_C)]
    _kernel                      the decorator (numba.njit(cache=True, error_model="numpy"))

``D`` is the model's one array (:func:`dynamics.mechanism._model_array`), so that a call from
Python passes few arguments; offsets ``O_*`` of :class:`Layout`::

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
    twrap (N_T,)      T_WRAP
    N_Z, N_C, N_A, N_T, N_P      the sizes, as floats (the last five entries)

Dense solves: LU with partial pivoting (:func:`_lu`); an exactly zero pivot is numpy's
``LinAlgError``.  The sign of a determinant is read off the LU of the last Newton iteration
(the configuration then differs from the returned one by less than the tolerance).

Status codes: 0 ok; 1 no configuration in the home assembly mode (forward kinematics);
2 pose not reached in the home working mode (inverse kinematics); 3 type-2 singularity
(singular B where the velocities are mapped); 4 singular multiplier block or reduced mass
matrix; 5 an input is not finite.
"""

from __future__ import annotations

import math
import warnings
import weakref
from collections import namedtuple
from pathlib import Path
from types import ModuleType

import numba
import numpy as np
from numba import njit, types
from numba.core import cgutils
from numba.core.errors import NumbaExperimentalFeatureWarning
from numba.extending import intrinsic

from ._kernel_cache import CompileGate, stamp_package_caches

# numba takes a function's cache locator when it is decorated: the kernel files' stamp first
stamp_package_caches()
#: one process at a time compiles this module's kernels (released at the end of the module)
_gate = CompileGate(__file__)

_kernel = njit(cache=True, error_model="numpy")
# the small helpers: inlined into their callers (numba IR), so that the arrays they take cost
# no reference counting at each call
_inline = njit(cache=True, error_model="numpy", inline="always")
# the kernels that allocate nothing: compiled without reference counting of their arrays
_noref = njit(cache=True, error_model="numpy", _nrt=False)

ST_OK = 0
ST_NOFK = 1
ST_NOIK = 2
ST_TYPE2 = 3
ST_SINGULAR = 4
ST_BADINPUT = 5

#: the offsets and sizes of a mechanism (the module docstring); ``*_SIZE`` of the fused forms'
#: outputs and of :func:`state`'s arrays
Layout = namedtuple("Layout", [
    "N_Z", "N_C", "N_A", "N_T", "N_P", "O_ACT", "O_PAS", "O_STEPA", "O_STEPT", "O_ARM", "O_SIGN2",
    "O_SIGN1", "O_TOL", "O_ITER", "O_HOME", "O_WARM", "O_WARMIK", "O_WARMG", "O_TWRAP", "D_SIZE",
    "KIN_SIZE", "TKIN_SIZE", "O_DY_M", "O_DY_B", "O_DY_L", "DYN_SIZE", "STATE_SIZE"])


def layout_of(N_Z, N_C, N_A, N_T, N_P):
    """The :class:`Layout` of a mechanism of these sizes (plain Python; compiled as
    :func:`_layout_of`)."""
    O_ACT = N_P
    O_PAS = O_ACT + N_A
    O_STEPA = O_PAS + N_C
    O_STEPT = O_STEPA + N_A
    O_ARM = O_STEPT + N_T
    O_SIGN2 = O_ARM + N_Z
    O_SIGN1 = O_SIGN2 + 1
    O_TOL = O_SIGN1 + 1
    O_ITER = O_TOL + 1
    O_HOME = O_ITER + 1
    O_WARM = O_HOME + N_Z
    O_WARMIK = O_WARM + N_Z
    O_WARMG = O_WARMIK + N_Z
    O_TWRAP = O_WARMG + N_Z * N_A
    D_SIZE = O_TWRAP + N_T + 5
    KIN_SIZE = N_C + N_C * N_Z
    TKIN_SIZE = N_T + N_T * N_Z
    O_DY_M = N_C
    O_DY_B = O_DY_M + N_Z * N_Z
    O_DY_L = O_DY_B + N_Z
    DYN_SIZE = O_DY_L + N_Z * N_C
    STATE_SIZE = 3 * N_Z + N_Z * N_A + DYN_SIZE      # z, zd, g0, G, DY
    return Layout(N_Z, N_C, N_A, N_T, N_P, O_ACT, O_PAS, O_STEPA, O_STEPT, O_ARM, O_SIGN2, O_SIGN1,
                  O_TOL, O_ITER, O_HOME, O_WARM, O_WARMIK, O_WARMG, O_TWRAP, D_SIZE, KIN_SIZE, TKIN_SIZE,
                  O_DY_M, O_DY_B, O_DY_L, DYN_SIZE, STATE_SIZE)


_layout_of = _inline(layout_of)


@_inline
def _layout(D):
    """The :class:`Layout` of the model array ``D`` (its sizes: the last five entries)."""
    n = D.shape[0]
    return _layout_of(int(D[n - 5]), int(D[n - 4]), int(D[n - 3]), int(D[n - 2]), int(D[n - 1]))


# --- the entry kernels' types: the generated functions as first-class function values ---------

_A1 = types.float64[::1]
_A2 = types.float64[:, ::1]
#: the types of the generated functions: kin_w and tkin_w (z, out), dyn_w (z, zd, p, out),
#: task_gamma_w (z, zd, out)
KIN = types.FunctionType(types.none(_A1, _A1))
DYN = types.FunctionType(types.none(_A1, _A1, _A1, _A1))
TGAM = types.FunctionType(types.none(_A1, _A1, _A1))
#: (numba warns that first-class function types are experimental, at each use of them in a type
#: or a compilation: here and where the entry kernels are compiled, the uses the tests run)
_I64, _F64, _B = types.int64, types.float64, types.boolean
_P = types.int64[::1]

#: the entry kernels and their signatures, compiled at the end of the module (:func:`_entry`)
_ENTRIES: list = []


def _entry(ret, *arrays):
    """An entry kernel for ``P`` (the generated functions' addresses: :func:`addresses`), then
    ``arrays``: compiled for that signature at the end of the module (once every function it
    calls is defined), and for no other."""
    def decorate(fn):
        kernel = _kernel(fn)
        _ENTRIES.append((kernel, ret(_P, *arrays)))
        return kernel
    return decorate


def _function_at(fntype):
    """An intrinsic ``at(addr)``: the generated function whose numba entry point is at ``addr``
    (int64, :func:`addresses`) as a first-class function value of type ``fntype`` (what numba
    builds when it casts a jit function to its ``FunctionType``, the address taken at run time:
    nothing of a particular mechanism is compiled in)."""

    @intrinsic
    def at(typingctx, addr):
        if addr != types.int64:
            return None

        def codegen(context, builder, signature, args):
            toty = fntype.get_precise()
            voidptr = context.get_value_type(types.voidptr)
            fn = cgutils.create_struct_proxy(toty)(context, builder)
            fn.c_addr = cgutils.get_null_value(voidptr)
            fn.py_addr = cgutils.get_null_value(voidptr)
            fn.jit_addr = builder.inttoptr(args[0], voidptr)
            return fn._getvalue()
        return fntype(types.int64), codegen

    return at


#: whether this module's kernels are plain Python (numba's JIT was disabled when it was run)
_PLAIN = bool(numba.config.DISABLE_JIT)

if _PLAIN:
    #: (plain Python: the generated functions by the ids :func:`addresses` gives them, while they live)
    _BY_ID = weakref.WeakValueDictionary()

    def _kin_at(addr):
        return _BY_ID[int(addr)]

    _dyn_at = _tgam_at = _kin_at
else:
    _kin_at, _dyn_at, _tgam_at = _function_at(KIN), _function_at(DYN), _function_at(TGAM)


def addresses(generated) -> np.ndarray:
    """``P``, the entry kernels' first argument, for the generated module ``generated``: the numba
    entry points of its ``kin_w``, ``tkin_w``, ``dyn_w`` and ``task_gamma_w`` (compiled for their
    types :data:`KIN`, :data:`DYN`, :data:`TGAM` first), then its sizes ``N_Z, N_C, N_A, N_T, N_P``
    (int64 (9,)); the entry kernels refuse a model array ``D`` of other sizes (status 5, or False /
    0.0).  Valid in this process only, while the functions live (a model keeps its generated
    module).  While numba's JIT is disabled: ids of the plain functions, which this (plain) module
    keeps while they live."""
    g = generated
    fns = (g.kin_w, g.tkin_w, g.dyn_w, g.task_gamma_w)
    out = np.empty(9, dtype=np.int64)
    out[4:] = (g.N_Z, g.N_C, g.N_A, g.N_T, g.N_P)
    if _PLAIN:
        for i, f in enumerate(fns):
            _BY_ID[id(f)] = f
            out[i] = id(f)
        return out
    for i, (f, ft) in enumerate(zip(fns, (KIN, KIN, DYN, TGAM))):
        cres = f.get_compile_result(ft.signature)
        out[i] = cres.library.get_pointer_to_function(cres.fndesc.llvm_func_name)
    return out


@_inline
def _pair(P, D):
    """Whether the model array ``D`` has the sizes ``P`` was made for (:func:`addresses`): the
    generated functions of ``P`` write only within the layout of ``D``."""
    n = D.shape[0]
    if P.shape[0] != 9 or n < 5:
        return False
    for i in range(5):
        if D[n - 5 + i] != P[4 + i]:
            return False
    return True


@_inline
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
        if big == 0.0 or not math.isfinite(big):
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


@_inline
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


@_inline
def _task_diff(D, S, target, value, i):
    """target - value of task coordinate i, wrapped to (-pi, pi] where the task row is an Euler
    angle: equal angles modulo 2 pi are one pose)."""
    d = target - value
    if D[S.O_TWRAP + i] != 0.0:
        d = math.atan2(math.sin(d), math.cos(d))
    return d


@_inline
def _maxabs(r, k):
    """max |r[:k]|, NaN-propagating."""
    m = 0.0
    for i in range(k):
        a = abs(r[i])
        if not a <= m:
            m = a
    return m


@_inline
def _kin_lu(P, S, z, D, KP, B, perm):
    """KP = kin(z); B = the passive columns of phi_z, LU-factored (row permutation into perm):
    (sign, ok)."""
    _kin_at(P[0])(z, KP)
    for i in range(S.N_C):
        for j in range(S.N_C):
            B[i, j] = KP[S.N_C + i * S.N_Z + int(D[S.O_PAS + j])]
    return _lu(B, S.N_C, perm)


@_inline
def _finite(x, k):
    """Whether x has k entries, all finite."""
    if x.shape[0] != k:
        return False
    for i in range(k):
        if not math.isfinite(x[i]):
            return False
    return True


@_inline
def _residual_lu(P, S, kind, z, target, D, r, A, KP, TK, perm):
    """kind 0: r = phi(z) (N_C,) and A = B, the passive columns of phi_z; kind 1: r = [phi(z);
    task(z) - target] (N_Z,) and A = K = [phi_z; task_z]; A LU-factored (row permutation into
    perm), KP = kin(z) (and kind 1: TK = tkin(z)): (sign, ok)."""
    if kind == 1:
        return _ik_lu(P, S, D, z, target, A, r, KP, TK, perm)
    sgn, ok = _kin_lu(P, S, z, D, KP, A, perm)
    for i in range(S.N_C):
        r[i] = KP[i]
    return sgn, ok


@_noref
def _newton(P, kind, target, z0, D, z, WK):
    """Newton from z0 into z: kind 0 on phi(z) = 0 over the passive coordinates with z[act] =
    target (actuated coordinates); kind 1 on [phi(z); task(z) - target] = 0 over every
    coordinate (target: task coordinates).  ``WK``: the workspace (:func:`_work`).  Returns
    (sign of det(B) (kind 0) or det(K) (kind 1) at the solution, 0.0 when Newton failed;
    fresh): fresh is True when WK's kin, tkin and LU-factored matrix are those of the returned z
    (the last step changed no coordinate: the usual case, the step being ~ tol squared)."""
    S = _layout(D)
    r, A, dx, KP, TK, perm = WK[0], WK[1], WK[2], WK[3], WK[4], WK[5]
    k = S.N_C if kind == 0 else S.N_Z
    tol = D[S.O_TOL]
    for i in range(S.N_Z):
        z[i] = z0[i]
    if kind == 0:
        for a in range(S.N_A):
            z[int(D[S.O_ACT + a])] = target[a]
    for _ in range(int(D[S.O_ITER])):
        sgn, ok = _residual_lu(P, S, kind, z, target, D, r, A, KP, TK, perm)
        err = _maxabs(r, k)
        if not math.isfinite(err) or not ok:
            return 0.0, False
        _lu_solve(A, perm, k, r, dx)
        same = True
        for j in range(k):
            i = int(D[S.O_PAS + j]) if kind == 0 else j
            old = z[i]
            z[i] = old - dx[j]
            if z[i] != old:
                same = False
        if err <= tol:       # one step past the tolerance: the error is then ~ its square
            return sgn, same
    sgn, ok = _residual_lu(P, S, kind, z, target, D, r, A, KP, TK, perm)
    if not _maxabs(r, k) <= tol or not ok:
        return 0.0, False
    return sgn, True


@_inline
def _work(S, kind):
    """Workspace of :func:`_newton` and :func:`_continue` for ``kind``: (r (k,), A (k, k),
    dx (k,), KP (KIN_SIZE,), TK (TKIN_SIZE,), perm (k,) int64, zp (N_Z,), zc (N_Z,),
    sx (2 N_Z,)), k = N_C (kind 0) or N_Z (kind 1): views of one float and one int array."""
    k = S.N_C if kind == 0 else S.N_Z
    f = np.empty(3 * k + k * k + S.KIN_SIZE + S.TKIN_SIZE + 4 * S.N_Z)
    o = 3 * k + k * k
    o2 = o + S.KIN_SIZE
    o3 = o2 + S.TKIN_SIZE
    return (f[0:k], f[3 * k:o].reshape((k, k)), f[k:2 * k], f[o:o2], f[o2:o3],
            np.empty(k, np.int64), f[o3:o3 + S.N_Z], f[o3 + S.N_Z:o3 + 2 * S.N_Z],
            f[o3 + 2 * S.N_Z:o3 + 4 * S.N_Z])


@_entry(_F64, _A1, _A1, _A1, _A1)
def newton_passive(P, qa, z0, D, z):
    """:func:`_newton` on the closures for the actuated qa (kind 0)."""
    if not _pair(P, D):
        return 0.0
    return _newton(P, 0, qa, z0, D, z, _work(_layout(D), 0))[0]


@_entry(_F64, _A1, _A1, _A1, _A1)
def newton_ik(P, X, z0, D, z):
    """:func:`_newton` on the closures and the task for the task pose X (kind 1)."""
    if not _pair(P, D):
        return 0.0
    return _newton(P, 1, X, z0, D, z, _work(_layout(D), 1))[0]


@_noref
def _continue(P, kind, target, z0, D, z, WK, pred):
    """:func:`_newton` continued from z0 to ``target`` in steps of at most step_a (kind 0) or
    step_t (kind 1), each keeping the home sign of det(B) (kind 0: the assembly mode) or det(K)
    (kind 1: the working mode); into z: (True on success, fresh of the last :func:`_newton`).
    ``pred`` (kind 0, z0 = warm): a single step starts from the first-order prediction
    z0 + warm_g (target - z0[act]) (two Newton iterations instead of three on a control
    cycle's step; with warm_g zero, z0 itself)."""
    S = _layout(D)
    k_n = S.N_A if kind == 0 else S.N_T
    start = WK[8]
    xs = WK[8][S.N_Z:]  # (the steps' targets; first the whole move)
    if kind == 0:
        for a in range(S.N_A):
            start[a] = z0[int(D[S.O_ACT + a])]
            xs[a] = target[a] - start[a]
        o_step, sign = S.O_STEPA, D[S.O_SIGN2]
    else:
        TK = WK[4]
        _kin_at(P[1])(z0, TK)
        for i in range(S.N_T):
            start[i] = TK[i]
            xs[i] = _task_diff(D, S, target[i], TK[i], i)   # (an Euler angle: the short way)
        o_step, sign = S.O_STEPT, D[S.O_SIGN1]
    big = 0.0
    for i in range(k_n):
        v = abs(xs[i]) / D[o_step + i]
        if v > big:
            big = v
    k = max(1, int(math.ceil(big)))
    if k == 1:              # (the usual case: a control cycle's step)
        if pred:
            zp = WK[6]
            for i in range(S.N_Z):
                s = z0[i]
                for a in range(S.N_A):
                    s += D[S.O_WARMG + i * S.N_A + a] * (target[a] - start[a])
                zp[i] = s
            sg, fresh = _newton(P, kind, target, zp, D, z, WK)
        else:
            sg, fresh = _newton(P, kind, target, z0, D, z, WK)
        return sg == sign, fresh
    zc = WK[7]
    dx = WK[6]      # (the whole move; WK[6] is free here: the predictor is not used)
    for i in range(k_n):
        dx[i] = xs[i]
    for i in range(S.N_Z):
        zc[i] = z0[i]
    fresh = False
    for s in range(1, k + 1):
        for i in range(k_n):
            xs[i] = start[i] + dx[i] * s / k
        sg, fresh = _newton(P, kind, xs, zc, D, z, WK)
        if sg != sign:
            return False, False
        for i in range(S.N_Z):
            zc[i] = z[i]
    return True, fresh


@_noref
def _solve_ws(P, kind, D, target, z, WK):
    """Full configuration z for ``target`` (kind 0: actuated coordinates; 1: task coordinates):
    :func:`_continue` from the last solution (warm or warm_ik, updated), then from the home
    configuration, in the workspace WK (:func:`_work`); (status, fresh of :func:`_newton`)."""
    S = _layout(D)
    if not _finite(target, S.N_A if kind == 0 else S.N_T):
        return ST_BADINPUT, False
    o_warm = S.O_WARM if kind == 0 else S.O_WARMIK
    ok, fresh = _continue(P, kind, target, D[o_warm:o_warm + S.N_Z], D, z, WK, kind == 0)
    if not ok:
        ok, fresh = _continue(P, kind, target, D[S.O_HOME:S.O_HOME + S.N_Z], D, z, WK, False)
        if not ok:
            return (ST_NOFK if kind == 0 else ST_NOIK), False
    for i in range(S.N_Z):
        D[o_warm + i] = z[i]
    if kind == 0:           # warm_g no longer the map at warm (state() sets it again)
        for i in range(S.N_Z * S.N_A):
            D[S.O_WARMG + i] = 0.0
    return ST_OK, fresh


@_kernel
def _solve(P, kind, D, target, z):
    """:func:`_solve_ws` in a new workspace; status."""
    return _solve_ws(P, kind, D, target, z, _work(_layout(D), kind))[0]


@_entry(_I64, _A1, _A1, _A1)
def configuration(P, D, qa, z):
    """Full configuration z for the actuated qa in the home assembly mode; status."""
    if not _pair(P, D):
        return ST_BADINPUT
    return _solve(P, 0, D, qa, z)


@_entry(_I64, _A1, _A1, _A1)
def inverse_configuration(P, D, X, z):
    """Full configuration z for the task pose X in the home working mode; status."""
    if not _pair(P, D):
        return ST_BADINPUT
    return _solve(P, 1, D, X, z)


@_kernel
def _task_at(P, D, qa, z, TK):
    """z: the configuration at the actuated qa (:func:`configuration`), TK = tkin(z); status."""
    st = configuration(P, D, qa, z)
    if st == ST_OK:
        _kin_at(P[1])(z, TK)
    return st


@_entry(_I64, _A1, _A1, _A1)
def forward_task(P, D, qa, X):
    """Task coordinates X (N_T,) at the actuated qa (:func:`configuration`); status."""
    if not _pair(P, D):
        return ST_BADINPUT
    S = _layout(D)
    TK = np.empty(S.TKIN_SIZE)
    st = _task_at(P, D, qa, np.empty(S.N_Z), TK)
    if st == ST_OK:
        X[:] = TK[:S.N_T]
    return st


@_noref
def _ik_lu(P, S, D, z, X, K, r, KP, TK, perm):
    """r = [phi(z); task(z) - X] and K = [phi_z; task_z] (N_Z, N_Z) at z, LU-factored (row
    permutation into perm), KP = kin(z), TK = tkin(z): (sign, ok)."""
    _kin_at(P[0])(z, KP)
    _kin_at(P[1])(z, TK)
    for i in range(S.N_C):
        r[i] = KP[i]
        for j in range(S.N_Z):
            K[i, j] = KP[S.N_C + i * S.N_Z + j]
    for i in range(S.N_T):
        r[S.N_C + i] = -_task_diff(D, S, X[i], TK[i], i)  # task(z) - X
        for j in range(S.N_Z):
            K[S.N_C + i, j] = TK[S.N_T + i * S.N_Z + j]
    return _lu(K, S.N_Z, perm)


@_entry(_I64, _A1, _A1, _A1)
def inverse_q(P, D, X, q):
    """Actuated coordinates q (N_A,) for the task pose X (:func:`inverse_configuration`); status."""
    if not _pair(P, D):
        return ST_BADINPUT
    S = _layout(D)
    z = np.empty(S.N_Z)
    st = inverse_configuration(P, D, X, z)
    if st != ST_OK:
        return st
    for a in range(S.N_A):
        q[a] = z[int(D[S.O_ACT + a])]
    return ST_OK


@_inline
def _fill_g(D, KP, B, perm, G, col, x):
    """G (N_Z, N_A): identity rows on the actuated coordinates, -B^-1 A on the passive ones
    (B LU-factored; col, x: (N_C,) scratch)."""
    S = _layout(D)
    G[:, :] = 0.0
    for a in range(S.N_A):
        ia = int(D[S.O_ACT + a])
        G[ia, a] = 1.0
        for i in range(S.N_C):
            col[i] = KP[S.N_C + i * S.N_Z + ia]
        _lu_solve(B, perm, S.N_C, col, x)
        for j in range(S.N_C):
            G[int(D[S.O_PAS + j]), a] = -x[j]


@_entry(_B, _A1, _A1, _A2)
def velocity_map(P, D, z, G):
    """G (N_Z, N_A) with zd = G qd at z; False at a singular B."""
    if not _pair(P, D):
        return False
    S = _layout(D)
    WK = _work(S, 0)
    r, B, dx, KP, perm = WK[0], WK[1], WK[2], WK[3], WK[5]
    sgn, ok = _kin_lu(P, S, z, D, KP, B, perm)
    if not ok:
        return False
    _fill_g(D, KP, B, perm, G, r, dx)
    return True


@_entry(_I64, _A1, _A1, _A2)
def task_jacobian(P, D, qa, J):
    """J (N_T, N_A) with Xd = J qd: the task Jacobian task_z G at the configuration of qa; status."""
    if not _pair(P, D):
        return ST_BADINPUT
    S = _layout(D)
    z = np.empty(S.N_Z)
    TK = np.empty(S.TKIN_SIZE)
    st = _task_at(P, D, qa, z, TK)
    if st != ST_OK:
        return st
    G = np.empty((S.N_Z, S.N_A))
    if not velocity_map(P, D, z, G):
        return ST_TYPE2
    for i in range(S.N_T):
        for a in range(S.N_A):
            s = 0.0
            for k in range(S.N_Z):
                s += TK[S.N_T + i * S.N_Z + k] * G[k, a]
            J[i, a] = s
    return ST_OK


@_entry(_I64, _A1, _A1, _A1, _A1, _A1, _A2, _A1, _A1)
def state(P, D, qa, qda, z, zd, G, g0, DY):
    """z, zd = G qd, G, g0 (zdd = G qdd + g0) and DY = dyn(z, zd) at the actuated state; status."""
    if not _pair(P, D):
        return ST_BADINPUT
    return _state_ws(P, D, qa, qda, z, zd, G, g0, DY, _work(_layout(D), 0))


@_noref
def _state_ws(P, D, qa, qda, z, zd, G, g0, DY, WK):
    """:func:`state` in the workspace WK (:func:`_work`, kind 0)."""
    S = _layout(D)
    if not _finite(qda, S.N_A):
        return ST_BADINPUT
    st, fresh = _solve_ws(P, 0, D, qa, z, WK)
    if st != ST_OK:
        return st
    r, B, x, KP, perm = WK[0], WK[1], WK[2], WK[3], WK[5]
    if not fresh:           # (else B's LU and kin are those of z: Newton's last ones)
        sgn, ok = _kin_lu(P, S, z, D, KP, B, perm)
        if not ok:
            return ST_TYPE2
    _fill_g(D, KP, B, perm, G, r, x)
    for i in range(S.N_Z):  # (z is warm: the predictor of the next solve)
        for a in range(S.N_A):
            D[S.O_WARMG + i * S.N_A + a] = G[i, a]
    for i in range(S.N_Z):
        s = 0.0
        for a in range(S.N_A):
            s += G[i, a] * qda[a]
        zd[i] = s
    _dyn_at(P[2])(z, zd, D, DY)
    for i in range(S.N_Z):
        g0[i] = 0.0
    _lu_solve(B, perm, S.N_C, DY, x)  # (DY[:N_C] = gamma)
    for j in range(S.N_C):
        g0[int(D[S.O_PAS + j])] = -x[j]
    return ST_OK


@_kernel
def _new_state(P, D, qa, qda):
    """(status, z, zd, G, g0, DY) of :func:`state`, views of one new array."""
    S = _layout(D)
    z, zd, G, g0, DY = _state_arrays(S, np.empty(S.STATE_SIZE))
    st = state(P, D, qa, qda, z, zd, G, g0, DY)
    return st, z, zd, G, g0, DY


@_inline
def _state_arrays(S, f):
    """(z, zd, G, g0, DY) of :func:`state`: views of f (STATE_SIZE,)."""
    o = 3 * S.N_Z + S.N_Z * S.N_A
    return (f[0:S.N_Z], f[S.N_Z:2 * S.N_Z], f[3 * S.N_Z:o].reshape((S.N_Z, S.N_A)),
            f[2 * S.N_Z:3 * S.N_Z], f[o:o + S.DYN_SIZE])


@_entry(_I64, _A1, _A1, _A1, _A2, _A1)
def reduced(P, D, qa, qda, Mr, h):
    """The actuated-space dynamics at (qa, qda): Mr (N_A, N_A) = G^T M G (armature included)
    and h (N_A,) = G^T (M g0 + b); status."""
    if not _pair(P, D):
        return ST_BADINPUT
    S = _layout(D)
    st, z, zd, G, g0, DY = _new_state(P, D, qa, qda)
    if st != ST_OK:
        return st
    MG = np.zeros((S.N_Z, S.N_A))
    f = np.empty(S.N_Z)  # M g0 + b
    for i in range(S.N_Z):
        s = DY[S.O_DY_B + i]
        for k in range(S.N_Z):
            mik = DY[S.O_DY_M + i * S.N_Z + k]
            if i == k:
                mik += D[S.O_ARM + i]
            s += mik * g0[k]
            for a in range(S.N_A):
                MG[i, a] += mik * G[k, a]
        f[i] = s
    for a in range(S.N_A):
        s = 0.0
        for i in range(S.N_Z):
            s += G[i, a] * f[i]
        h[a] = s
        for c in range(S.N_A):
            s = 0.0
            for i in range(S.N_Z):
                s += G[i, a] * MG[i, c]
            Mr[a, c] = s
    return ST_OK


@_kernel
def _id_from(D, DY, zdd, wf, out):
    """out[:N_A] = tau, out[N_A:N_Z] = lam from dyn (DY) and the full acceleration zdd; status."""
    S = _layout(D)
    f = np.empty(S.N_Z + S.N_C * S.N_C + 2 * S.N_C)
    return _id_from_ws(D, DY, zdd, wf, out, f, np.empty(S.N_C, np.int64))


@_noref
def _id_from_ws(D, DY, zdd, wf, out, f, perm):
    """:func:`_id_from` in the workspace f (N_Z + N_C N_C + 2 N_C,), perm (N_C,) int64."""
    S = _layout(D)
    Fz = f[0:S.N_Z]
    for i in range(S.N_Z):
        s = 0.0
        for j in range(S.N_Z):
            s += DY[S.O_DY_M + i * S.N_Z + j] * zdd[j]
        s += D[S.O_ARM + i] * zdd[i]
        Fz[i] = s + DY[S.O_DY_B + i] - wf[i]
    Lp = f[S.N_Z:S.N_Z + S.N_C * S.N_C].reshape((S.N_C, S.N_C))
    Fp = f[S.N_Z + S.N_C * S.N_C:S.N_Z + S.N_C * S.N_C + S.N_C]
    for i in range(S.N_C):
        ip = int(D[S.O_PAS + i])
        Fp[i] = -Fz[ip]
        for j in range(S.N_C):
            Lp[i, j] = DY[S.O_DY_L + ip * S.N_C + j]
    sgn, ok = _lu(Lp, S.N_C, perm)
    if not ok:
        return ST_SINGULAR
    lam = f[S.N_Z + S.N_C * S.N_C + S.N_C:S.N_Z + S.N_C * S.N_C + 2 * S.N_C]
    _lu_solve(Lp, perm, S.N_C, Fp, lam)
    for a in range(S.N_A):
        ia = int(D[S.O_ACT + a])
        s = Fz[ia]
        for j in range(S.N_C):
            s += DY[S.O_DY_L + ia * S.N_C + j] * lam[j]
        out[a] = s
    if out.shape[0] > S.N_A:
        for j in range(S.N_C):
            out[S.N_A + j] = lam[j]
    return ST_OK


@_entry(_I64, _A1, _A1, _A1, _A1, _A1, _A1)
def full_id(P, D, z, zd, zdd, wf, out):
    """out = [tau (N_A,), lam (N_C,)] for the full motion (z, zd, zdd) and the generalised force
    ``wf`` (N_Z,) of a wrench; status."""
    if not _pair(P, D):
        return ST_BADINPUT
    DY = np.empty(_layout(D).DYN_SIZE)
    _dyn_at(P[2])(z, zd, D, DY)
    return _id_from(D, DY, zdd, wf, out)


@_entry(_I64, _A1, _A1, _A1, _A1, _A1, _A1)
def task_id(P, D, X, Xd, Xdd, wf, out):
    """out = [tau (N_A,), lam (N_C,)] for the task motion (X, Xd, Xdd): the configuration by
    inverse kinematics, zd and zdd from ``[phi_z; task_z] zd = [0; Xd]`` and its time
    derivative, then :func:`_id_from`; status."""
    if not _pair(P, D):
        return ST_BADINPUT
    S = _layout(D)
    if not (_finite(Xd, S.N_T) and _finite(Xdd, S.N_T)):
        return ST_BADINPUT
    z = np.empty(S.N_Z)
    WK = _work(S, 1)
    st, fresh = _solve_ws(P, 1, D, X, z, WK)
    if st != ST_OK:
        return st
    r, K, KP, TK, perm = WK[0], WK[1], WK[3], WK[4], WK[5]
    if not fresh:           # (else K's LU is that of z: Newton's last one)
        sgn, ok = _ik_lu(P, S, D, z, X, K, r, KP, TK, perm)
        if not ok:
            return ST_SINGULAR
    b = np.zeros(S.N_Z)
    for i in range(S.N_T):
        b[S.N_C + i] = Xd[i]
    zd = np.empty(S.N_Z)
    _lu_solve(K, perm, S.N_Z, b, zd)
    DY = np.empty(S.DYN_SIZE)
    _dyn_at(P[2])(z, zd, D, DY)
    TG = np.empty(S.N_T)
    _tgam_at(P[3])(z, zd, TG)
    for i in range(S.N_C):
        b[i] = -DY[i]     # gamma = d/dt(phi_z) zd
    for i in range(S.N_T):
        b[S.N_C + i] = Xdd[i] - TG[i]
    zdd = np.empty(S.N_Z)
    _lu_solve(K, perm, S.N_Z, b, zdd)
    return _id_from(D, DY, zdd, wf, out)


@_entry(_I64, _A1, _A1, _A1, _A1, _A1, _A1)
def inverse_dynamics(P, D, qa, qda, qdda, wf, out):
    """out = tau (N_A,), or [tau (N_A,), lam (N_C,), z (N_Z,)], for the actuated motion; status.
    ``wf``: the generalised force of a wrench (N_Z,)."""
    if not _pair(P, D):
        return ST_BADINPUT
    S = _layout(D)
    if not _finite(qdda, S.N_A) or wf.shape[0] != S.N_Z or (
            out.shape[0] != S.N_A and out.shape[0] != S.N_A + S.N_C + S.N_Z):
        return ST_BADINPUT
    f = np.empty(S.STATE_SIZE + S.N_Z + S.N_C * S.N_C + 2 * S.N_C)
    return _id_ws(P, D, qa, qda, qdda, wf, out, f, _work(S, 0))


@_noref
def _id_ws(P, D, qa, qda, qdda, wf, out, f, WK):
    """:func:`inverse_dynamics` in the workspaces f (STATE_SIZE + N_Z + N_C N_C + 2 N_C,) and WK
    (:func:`_work`, kind 0)."""
    S = _layout(D)
    z, zd, G, g0, DY = _state_arrays(S, f)
    st = _state_ws(P, D, qa, qda, z, zd, G, g0, DY, WK)
    if st != ST_OK:
        return st
    for i in range(S.N_Z):
        s = g0[i]
        for a in range(S.N_A):
            s += G[i, a] * qdda[a]
        g0[i] = s            # now zdd
    st = _id_from_ws(D, DY, g0, wf, out, f[S.STATE_SIZE:], WK[5])
    if out.shape[0] > S.N_A:
        for i in range(S.N_Z):
            out[S.N_Z + i] = z[i]
    return st


@_entry(_I64, _A1, _A1, _A1, _A1, _A1, _A1)
def forward_dynamics(P, D, qa, qda, taua, wf, qdd):
    """qdd (N_A,) solving G^T M G qdd = tau - G^T (M g0 + b) + G^T wf; status."""
    if not _pair(P, D):
        return ST_BADINPUT
    S = _layout(D)
    if not _finite(taua, S.N_A) or wf.shape[0] != S.N_Z or qdd.shape[0] != S.N_A:
        return ST_BADINPUT
    f = np.empty(S.STATE_SIZE + S.N_Z * S.N_Z + S.N_Z + S.N_Z * S.N_A + S.N_A * S.N_A + S.N_A)
    return _fd_ws(P, D, qa, qda, taua, wf, qdd, f, _work(S, 0), np.empty(S.N_A, np.int64))


@_noref
def _fd_ws(P, D, qa, qda, taua, wf, qdd, f, WK, perm):
    """:func:`forward_dynamics` in the workspaces f (STATE_SIZE + N_Z N_Z + N_Z + N_Z N_A + N_A N_A
    + N_A,), WK (:func:`_work`, kind 0) and perm (N_A,) int64."""
    S = _layout(D)
    z, zd, G, g0, DY = _state_arrays(S, f)
    st = _state_ws(P, D, qa, qda, z, zd, G, g0, DY, WK)
    if st != ST_OK:
        return st
    o = S.STATE_SIZE
    M = f[o:o + S.N_Z * S.N_Z].reshape((S.N_Z, S.N_Z))
    o += S.N_Z * S.N_Z
    b = f[o:o + S.N_Z]
    o += S.N_Z
    for i in range(S.N_Z):
        for j in range(S.N_Z):
            M[i, j] = DY[S.O_DY_M + i * S.N_Z + j]
        M[i, i] += D[S.O_ARM + i]
    for i in range(S.N_Z):
        s = 0.0
        for j in range(S.N_Z):
            s += M[i, j] * g0[j]
        b[i] = DY[S.O_DY_B + i] + s - wf[i]
    MG = f[o:o + S.N_Z * S.N_A].reshape((S.N_Z, S.N_A))
    o += S.N_Z * S.N_A
    for i in range(S.N_Z):
        for a in range(S.N_A):
            s = 0.0
            for j in range(S.N_Z):
                s += M[i, j] * G[j, a]
            MG[i, a] = s
    Mr = f[o:o + S.N_A * S.N_A].reshape((S.N_A, S.N_A))
    rhs = f[o + S.N_A * S.N_A:o + S.N_A * S.N_A + S.N_A]
    for a in range(S.N_A):
        s = 0.0
        for i in range(S.N_Z):
            s += G[i, a] * b[i]
        rhs[a] = taua[a] - s
        for c in range(S.N_A):
            s = 0.0
            for i in range(S.N_Z):
                s += G[i, a] * MG[i, c]
            Mr[a, c] = s
    sgn, ok = _lu(Mr, S.N_A, perm)
    if not ok:
        return ST_SINGULAR
    _lu_solve(Mr, perm, S.N_A, rhs, qdd)
    return ST_OK


#: the entry kernels a model calls (:class:`dynamics.mechanism.MechanismModel`) and their arguments
#: after ``P``
ENTRIES = {
    "newton_passive": "qa, z0, D, z", "newton_ik": "X, z0, D, z", "configuration": "D, qa, z",
    "inverse_configuration": "D, X, z", "forward_task": "D, qa, X", "inverse_q": "D, X, q",
    "velocity_map": "D, z, G", "task_jacobian": "D, qa, J", "state": "D, qa, qda, z, zd, G, g0, DY",
    "reduced": "D, qa, qda, Mr, h", "full_id": "D, z, zd, zdd, wf, out", "task_id": "D, X, Xd, Xdd, wf, out",
    "inverse_dynamics": "D, qa, qda, qdda, wf, out", "forward_dynamics": "D, qa, qda, taua, wf, qdd",
}


#: the plain-Python copy of this module (:func:`kernels`), made once per process when needed
_plain = None


def kernels(module, plain: bool):
    """This module (``module``) for a generated module whose functions are compiled (``plain``
    false): the module itself; for one whose functions are plain Python (loaded while numba's JIT
    was disabled: ``NUMBA_DISABLE_JIT``, ``numba.config.DISABLE_JIT``), a copy whose decorators
    did nothing, this file run again while the JIT is disabled (once per process), since this
    module's compiled kernels call only compiled functions.

    Raises
    ------
    RuntimeError
        Plain functions while the JIT is enabled and no plain copy was made before, or compiled
        functions while this module is plain (the JIT was disabled when it was imported).
    """
    global _plain
    if plain == module._PLAIN:
        return module
    if not plain:
        raise RuntimeError("a mechanism's generated functions are compiled, and the mechanism kernels were "
                           "imported while numba's JIT was disabled: run with the JIT enabled throughout")
    if _plain is None:
        if not numba.config.DISABLE_JIT:
            raise RuntimeError("a mechanism's generated functions are plain Python (loaded while numba's JIT "
                               "was disabled), and the JIT is enabled now: load the mechanism again")
        mod = ModuleType(__name__ + "_plain")
        mod.__file__, mod.__package__ = __file__, __package__
        exec(compile(Path(__file__).read_text(encoding="utf-8"), __file__, "exec"), mod.__dict__)
        _plain = mod
    return _plain


if not _PLAIN:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NumbaExperimentalFeatureWarning)
        for _k, _sig in _ENTRIES:
            _k.compile(_sig)
            _k.disable_compile()
    del _k, _sig

_gate.release()
