"""Serial-chain rigid-body dynamics: the entry points called from Python (private).

Each kernel here has explicit signatures (float64 contiguous arrays), so numba
compiles them (or loads them from its cache) as this module is imported, and a
call with anything else raises ``TypeError`` at once instead of compiling a new
specialisation: :mod:`dynamics.serial` relies on that for its fast path and
validates other input itself.  Only a serial model imports this module; the
plant and the control laws use the cores of :mod:`dynamics._serial_core`
directly (model layout, frames and packed parameters are described there).

Kernels raise ``ValueError`` on a wrong input length or non-finite input;
the Python layer (:mod:`dynamics.serial`) turns that into a ModelError with a
clear message.
"""

from __future__ import annotations

import numpy as np
from numba import njit, types

from ._kernel_cache import CompileGate, stamp_package_caches
from ._serial_core import (HDR, JB, NW, STACK_JOINTS, _coriolis_core, _crba_core, _energy_core, _fd_core, _finite1,
                           _finite2, _jac_core, _poses_core, _rnea_core, pack, stack_rows)

_V = types.float64[::1]
_M2 = types.float64[:, ::1]
_B = types.boolean
_F = types.float64

__all__ = ["HDR", "JB", "STACK_JOINTS", "pack"]


# ---------------------------------------------------------------------------
# recursive Newton-Euler
# ---------------------------------------------------------------------------


# numba takes a function's cache locator when it is decorated: the kernel files' stamp first
stamp_package_caches()
#: one process at a time compiles this module's kernels (released at the end of the module)
_gate = CompileGate(__file__)


@njit(inline="always", error_model="numpy")
def _rnea_checked(P, q, qd, qdd, out, Rl):
    """:func:`rnea` into ``out`` (n,) with the link work ``Rl`` (n, NW), after the checks."""
    n = int(P[0])
    if q.shape[0] != n or qd.shape[0] != n or qdd.shape[0] != n or out.shape[0] != n:
        raise ValueError("wrong input length")
    if not (_finite1(q) and _finite1(qd) and _finite1(qdd)):
        raise ValueError("non-finite input")
    _rnea_core(P, q, qd, qdd, True, 1.0, qdd, False, out, Rl)


# The ``*_into`` entry points are what ``SerialModel`` calls from Python for one state of a chain
# of at most STACK_JOINTS joints: into the caller's array (a caller-made array costs less than
# the array a kernel returns: numba's boxing of a new array), scratch on the stack, and without
# numba's reference counting (_nrt=False), which would otherwise wrap each array argument in a
# newly allocated record for the call.  A longer chain raises ValueError here (``SerialModel``
# does not call them for one).
@njit([(_V, _V, _V, _V, _V)], cache=True, error_model="numpy", _nrt=False)
def rnea_into(P, q, qd, qdd, out):
    """:func:`rnea` into ``out`` (n,), n <= STACK_JOINTS."""
    n = int(P[0])
    if n > STACK_JOINTS:
        raise ValueError("more joints than the stack path takes")
    _rnea_checked(P, q, qd, qdd, out, stack_rows(n, NW))


@njit([(_V, _V, _V, _V)], cache=True, error_model="numpy")
def rnea(P, q, qd, qdd):
    """Inverse dynamics, one state: tau (n,)."""
    n = int(P[0])
    out = np.empty(q.shape[0])
    _rnea_checked(P, q, qd, qdd, out, np.empty((n, NW)))
    return out


@njit([(_V, _V, _V, _V, _V, _B, _F)], cache=True, error_model="numpy")
def rnea_w(P, q, qd, qdd, wrench, use_qdd, grav):
    """Inverse dynamics with an external tool wrench (6,), one state."""
    n = int(P[0])
    if q.shape[0] != n or qd.shape[0] != n or qdd.shape[0] != n or wrench.shape[0] != 6:
        raise ValueError("wrong input length")
    if not (_finite1(q) and _finite1(qd) and _finite1(qdd) and _finite1(wrench)):
        raise ValueError("non-finite input")
    out = np.empty(n)
    Rl = np.empty((n, NW))
    _rnea_core(P, q, qd, qdd, use_qdd, grav, wrench, True, out, Rl)
    return out


@njit([(_V, _V, _V, _F)], cache=True, error_model="numpy")
def bias(P, q, qd, grav):
    """h(q, qd) = C qd + grav * g(q), one state."""
    n = int(P[0])
    if q.shape[0] != n or qd.shape[0] != n:
        raise ValueError("wrong input length")
    if not (_finite1(q) and _finite1(qd)):
        raise ValueError("non-finite input")
    out = np.empty(n)
    Rl = np.empty((n, NW))
    _rnea_core(P, q, qd, qd, False, grav, qd, False, out, Rl)
    return out


@njit([(_V, _M2, _M2, _M2, _M2, _B, _F, _B)], cache=True, error_model="numpy")
def rnea_batch(P, Q, QD, QDD, Wr, use_qdd, grav, use_wrench):
    """Batch of :func:`rnea` over rows; Wr is (N, 6) (ignored unless use_wrench)."""
    n = int(P[0])
    N = Q.shape[0]
    if Q.shape[1] != n or QD.shape[1] != n or QDD.shape[1] != n or QD.shape[0] != N \
            or QDD.shape[0] != N:
        raise ValueError("wrong input shape")
    if use_wrench and (Wr.shape[0] != N or Wr.shape[1] != 6):
        raise ValueError("wrong wrench shape")
    if not (_finite2(Q) and _finite2(QD) and (_finite2(QDD) or not use_qdd)
            and (_finite2(Wr) or not use_wrench)):
        raise ValueError("non-finite input")
    out = np.empty((N, n))
    Rl = np.empty((n, NW))
    for k in range(N):
        if use_wrench:
            _rnea_core(P, Q[k], QD[k], QDD[k], use_qdd, grav, Wr[k], True, out[k], Rl)
        else:
            _rnea_core(P, Q[k], QD[k], QDD[k], use_qdd, grav, QDD[k], False, out[k], Rl)
    return out


# ---------------------------------------------------------------------------
# composite rigid body algorithm
# ---------------------------------------------------------------------------


@njit(inline="always", error_model="numpy")
def _crba_checked(P, q, M, Rl):
    """Mass matrix into ``M`` (n, n) with the link work ``Rl`` (n, NW), after the checks."""
    n = int(P[0])
    if q.shape[0] != n or M.shape[0] != n or M.shape[1] != n:
        raise ValueError("wrong input length")
    if not _finite1(q):
        raise ValueError("non-finite input")
    _crba_core(P, q, M, Rl)


@njit([(_V, _V, _M2)], cache=True, error_model="numpy", _nrt=False)
def crba_into(P, q, M):
    """Mass matrix into ``M`` (n, n), one state, n <= STACK_JOINTS (see :func:`rnea_into`)."""
    n = int(P[0])
    if n > STACK_JOINTS:
        raise ValueError("more joints than the stack path takes")
    _crba_checked(P, q, M, stack_rows(n, NW))


@njit([(_V, _V)], cache=True, error_model="numpy")
def crba(P, q):
    """Mass matrix (n, n), one state."""
    n = int(P[0])
    M = np.empty((q.shape[0], q.shape[0]))
    _crba_checked(P, q, M, np.empty((n, NW)))
    return M


@njit([(_V, _M2)], cache=True, error_model="numpy")
def crba_batch(P, Q):
    """Mass matrices (N, n, n)."""
    n = int(P[0])
    N = Q.shape[0]
    if Q.shape[1] != n:
        raise ValueError("wrong input shape")
    if not _finite2(Q):
        raise ValueError("non-finite input")
    out = np.empty((N, n, n))
    Rl = np.empty((n, NW))
    for k in range(N):
        _crba_core(P, Q[k], out[k], Rl)
    return out


# ---------------------------------------------------------------------------
# forward dynamics: CRBA + RNEA bias + Cholesky
# ---------------------------------------------------------------------------


@njit(inline="always", error_model="numpy")
def _aba_checked(P, q, qd, tau, out, M, Rl):
    """Forward dynamics qdd into ``out`` (n,) with the work ``M`` (n, n), ``Rl`` (n, NW), after
    the checks."""
    n = int(P[0])
    if q.shape[0] != n or qd.shape[0] != n or tau.shape[0] != n or out.shape[0] != n:
        raise ValueError("wrong input length")
    if not (_finite1(q) and _finite1(qd) and _finite1(tau)):
        raise ValueError("non-finite input")
    if not _fd_core(P, q, qd, tau, tau, False, out, M, Rl):
        raise ZeroDivisionError("mass matrix is not positive definite")


@njit([(_V, _V, _V, _V, _V)], cache=True, error_model="numpy", _nrt=False)
def aba_into(P, q, qd, tau, out):
    """Forward dynamics qdd into ``out`` (n,), one state, no wrench, n <= STACK_JOINTS (see
    :func:`rnea_into`)."""
    n = int(P[0])
    if n > STACK_JOINTS:
        raise ValueError("more joints than the stack path takes")
    _aba_checked(P, q, qd, tau, out, stack_rows(n, n), stack_rows(n, NW))


@njit([(_V, _V, _V, _V)], cache=True, error_model="numpy")
def aba(P, q, qd, tau):
    """Forward dynamics qdd (n,), one state, no wrench."""
    n = int(P[0])
    out = np.empty(q.shape[0])
    _aba_checked(P, q, qd, tau, out, np.empty((n, n)), np.empty((n, NW)))
    return out


@njit([(_V, _M2, _M2, _M2, _M2, _B)], cache=True, error_model="numpy")
def aba_batch(P, Q, QD, TAU, Wr, use_wrench):
    """Forward dynamics over rows; Wr (N, 6) used if use_wrench."""
    n = int(P[0])
    N = Q.shape[0]
    if Q.shape[1] != n or QD.shape[1] != n or TAU.shape[1] != n or QD.shape[0] != N \
            or TAU.shape[0] != N:
        raise ValueError("wrong input shape")
    if use_wrench and (Wr.shape[0] != N or Wr.shape[1] != 6):
        raise ValueError("wrong wrench shape")
    out = np.empty((N, n))
    M = np.empty((n, n))
    Rl = np.empty((n, NW))
    if not (_finite2(Q) and _finite2(QD) and _finite2(TAU) and (_finite2(Wr) or not use_wrench)):
        raise ValueError("non-finite input")
    for k in range(N):
        if use_wrench:
            ok = _fd_core(P, Q[k], QD[k], TAU[k], Wr[k], True, out[k], M, Rl)
        else:
            ok = _fd_core(P, Q[k], QD[k], TAU[k], TAU[k], False, out[k], M, Rl)
        if not ok:
            raise ZeroDivisionError("mass matrix is not positive definite")
    return out


# ---------------------------------------------------------------------------
# kinematics
# ---------------------------------------------------------------------------


@njit([(_V, _V)], cache=True, error_model="numpy")
def poses(P, q):
    """(n+1, 4, 4): world poses of J_0..J_{n-1} and of the tool frame."""
    n = int(P[0])
    if q.shape[0] != n:
        raise ValueError("wrong input length")
    if not _finite1(q):
        raise ValueError("non-finite input")
    T = np.empty((n + 1, 4, 4))
    Rl = np.empty((n, NW))
    _poses_core(P, q, T, Rl)
    return T


@njit([(_V, _V)], cache=True, error_model="numpy")
def fk(P, q):
    """(4, 4): world pose of the tool frame."""
    n = int(P[0])
    if q.shape[0] != n:
        raise ValueError("wrong input length")
    if not _finite1(q):
        raise ValueError("non-finite input")
    T = np.empty((n + 1, 4, 4))
    Rl = np.empty((n, NW))
    _poses_core(P, q, T, Rl)
    return T[n].copy()


@njit([(_V, _V)], cache=True, error_model="numpy")
def gravity(P, q):
    """g(q) (n,), one state."""
    n = int(P[0])
    if q.shape[0] != n:
        raise ValueError("wrong input length")
    if not _finite1(q):
        raise ValueError("non-finite input")
    out = np.empty(n)
    z = np.zeros(n)
    Rl = np.empty((n, NW))
    _rnea_core(P, q, z, z, False, 1.0, z, False, out, Rl)
    return out


@njit([(_V, _M2)], cache=True, error_model="numpy")
def poses_batch(P, Q):
    n = int(P[0])
    N = Q.shape[0]
    if Q.shape[1] != n:
        raise ValueError("wrong input shape")
    T = np.empty((N, n + 1, 4, 4))
    Rl = np.empty((n, NW))
    for k in range(N):
        if not _finite1(Q[k]):
            raise ValueError("non-finite input")
        _poses_core(P, Q[k], T[k], Rl)
    return T


@njit([(_V, _V)], cache=True, error_model="numpy")
def jacobian(P, q):
    n = int(P[0])
    T = poses(P, q)
    J = np.empty((6, n))
    _jac_core(P, T, J)
    return J


@njit([(_V, _M2)], cache=True, error_model="numpy")
def jacobian_batch(P, Q):
    n = int(P[0])
    N = Q.shape[0]
    T = poses_batch(P, Q)
    J = np.empty((N, 6, n))
    for k in range(N):
        _jac_core(P, T[k], J[k])
    return J


# ---------------------------------------------------------------------------
# energies
# ---------------------------------------------------------------------------


@njit([(_V, _M2, _M2)], cache=True, error_model="numpy")
def energies(P, Q, QD):
    """Kinetic and potential energy over rows: two (N,) arrays."""
    n = int(P[0])
    N = Q.shape[0]
    if Q.shape[1] != n or QD.shape[1] != n or QD.shape[0] != N:
        raise ValueError("wrong input shape")
    ke = np.empty(N)
    pe = np.empty(N)
    T = np.empty((n + 1, 4, 4))
    Rl = np.empty((n, NW))
    for k in range(N):
        if not (_finite1(Q[k]) and _finite1(QD[k])):
            raise ValueError("non-finite input")
        a, b = _energy_core(P, Q[k], QD[k], T, Rl)
        ke[k] = a
        pe[k] = b
    return ke, pe


# ---------------------------------------------------------------------------
# Coriolis matrix (spatial, world frame)
# ---------------------------------------------------------------------------


@njit([(_V, _M2, _M2)], cache=True, error_model="numpy")
def coriolis(P, Q, QD):
    """Coriolis matrices over rows: (N, n, n)."""
    n = int(P[0])
    N = Q.shape[0]
    if Q.shape[1] != n or QD.shape[1] != n or QD.shape[0] != N:
        raise ValueError("wrong input shape")
    out = np.empty((N, n, n))
    T = np.empty((n + 1, 4, 4))
    Rl = np.empty((n, NW))
    S = np.empty((n, 6))
    Sd = np.empty((n, 6))
    V = np.empty((n, 6))
    Isp = np.empty((6, 6))
    IS = np.empty((n, 6))
    t6 = np.empty(6)
    u6 = np.empty(6)
    w6 = np.empty(6)
    Iv = np.empty(6)
    for k in range(N):
        if not (_finite1(Q[k]) and _finite1(QD[k])):
            raise ValueError("non-finite input")
        _coriolis_core(P, Q[k], QD[k], out[k], T, Rl, S, Sd, V, Isp, IS, t6, u6, w6, Iv)
    return out


_gate.release()
