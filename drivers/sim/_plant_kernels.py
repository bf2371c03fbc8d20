"""Compiled fast paths of :class:`drivers.sim.plant.SimulatedPlant` for the planar 3RRR model
(:func:`rrr_advance`) and for serial chains (:func:`serial_advance`): one plant step,
:func:`_rk4_advance`, with each robot's dynamics passed in as compiled functions (the
Gough-Stewart platform's, ``stewart_advance``, is in :mod:`._stewart_plant_kernel`).

One call integrates ``n_steps`` RK4 steps of the plant exactly as the Python
reference ``SimulatedPlant._step`` does (same operations in the same order:
held command with optional drive PD and saturation, exponential current lag
inside the stages, viscous friction, forward dynamics with the start-of-step
pose as the Newton hint, implicit Coulomb step, pose update), using the 3RRR
model's own kernels.  It never raises: on any non-zero model status it stops
and reports how many steps were completed, and the caller re-runs the failing
step on the Python path (which raises the proper error).

Flags (bit mask): 1 viscous, 2 Coulomb, 4 drive PD, 8 saturation.

What runs every control cycle (the plant's ``advance_to``, the compiled offline loop) is the
``*_ws`` form, :func:`rrr_advance_ws` or :func:`serial_advance_ws`: the caller's work array and
no reference counting (``_nrt=False``, as the model helpers it calls), so nothing it reaches
may allocate; :func:`rrr_advance` and :func:`serial_advance` allocate the work themselves.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from dynamics._kernel_cache import CompileGate, stamp_package_caches
from dynamics._planar3rrr_kernels import fd_hint_ws, fk_newton_memo_ws, reduced_hint_ws, WS_SIZE
from dynamics._serial_core import NW, _crba_core, _fd_core

from ._friction_kernel import coulomb_pgs_into

F_VISCOUS = 1
F_COULOMB = 2
F_PD = 4
F_SATURATE = 8
#: status of a step whose state became non-finite (either robot)
ST_NOT_FINITE = 41


# numba takes a function's cache locator when it is decorated: the kernel files' stamp first
stamp_package_caches()
#: one process at a time compiles this module's kernels (released at the end of the module)
_gate = CompileGate(__file__)


@njit(cache=True, error_model="numpy")
def _rk4_stage(cq, cqd, c, kv, kq_prev, kq, qs):
    """Next RK4 stage point: ``kq = qd + c kv`` (stage velocity), ``qs = q + c kq_prev``."""
    for i in range(cq.shape[0]):
        kq[i] = cqd[i] + c * kv[i]
        qs[i] = cq[i] + c * kq_prev[i]


@njit(cache=True, error_model="numpy")
def _rk4_combine(cq, cqd, h6, k2q, k3q, k4q, k1v, k2v, k3v, k4v, qn, qdn):
    """RK4 step result (qn, qdn) from the four stages (``k1q = qd``), ``h6 = h / 6``."""
    for i in range(cq.shape[0]):
        qn[i] = cq[i] + h6 * (cqd[i] + 2.0 * k2q[i] + 2.0 * k3q[i] + k4q[i])
        qdn[i] = cqd[i] + h6 * (k1v[i] + 2.0 * k2v[i] + 2.0 * k3v[i] + k4v[i])


@njit(cache=True, error_model="numpy", _nrt=False)
def _coulomb_update(M, imp, hh, cq, cqd, qn, qdn, v):
    """Implicit Coulomb step on the RK4 result (qn, qdn), as ``SimulatedPlant._step``: the
    velocity is projected (exact friction impulse) into v (n,) (work, no allocation), the
    position corrected by hh (v - v*), and a joint at rest before and after the step keeps
    its position."""
    coulomb_pgs_into(M, qdn, imp, 1e-10, 100, v)
    for i in range(qn.shape[0]):
        qn[i] = qn[i] + hh * (v[i] - qdn[i])
        if v[i] == 0.0 and cqd[i] == 0.0:
            qn[i] = cq[i]
        qdn[i] = v[i]


@njit(cache=True, error_model="numpy")
def _finite_state(qn, qdn):
    for i in range(qn.shape[0]):
        v0 = qn[i]
        v1 = qdn[i]
        if not (v0 == v0) or v0 > 1e308 or v0 < -1e308 or not (v1 == v1) or v1 > 1e308 or v1 < -1e308:
            return False
    return True


@njit(cache=True, error_model="numpy")
def _held_torques(cmd, par, cq, cqd, cta, pd, sat, lag, e_mid, e_end, tc, t0, tm, th_):
    """The held command at the start of a step (drive PD, saturation) into tc, and the applied
    torque through the current-loop lag at the step's start, middle and end into t0, tm, th_."""
    for i in range(tc.shape[0]):
        t = cmd[0, i]
        if pd:
            t = t + cmd[1, i] * (cmd[3, i] - cq[i]) + cmd[2, i] * (cmd[4, i] - cqd[i])
        if sat:
            lim = par[2, i]
            if t < -lim:
                t = -lim
            if t > lim:
                t = lim
        tc[i] = t
        if lag > 0.0:
            diff = cta[i] - t
            t0[i] = t + diff * 1.0
            tm[i] = t + diff * e_mid
            th_[i] = t + diff * e_end
        else:
            t0[i] = t
            tm[i] = t
            th_[i] = t


@njit(inline="always", error_model="numpy")
def _rk4_advance(qdd, mass, post, P, q, qd, x, ta, cmd, par, lag, flags, h, n_steps, out, wk, M, buf):
    """The plant step shared by every robot: ``n_steps`` RK4 steps of length ``h`` [s].

    The same operations in the same order as ``SimulatedPlant._step``: the held
    command (drive PD, saturation), the current-loop lag inside the stages, viscous
    friction, forward dynamics, the implicit Coulomb step, the post-step update of the
    robot's extra state ``x`` (the 3RRR's platform pose), the finiteness check.  What
    differs between robots is passed in as compiled functions (numba specialises this
    function for each):

    * ``qdd(P, q, qd, tau, visc, has_visc, x, wk, rhs, out) -> status``: joint
      accelerations at the stage point (``x``: the extra state at the start of the step);
    * ``mass(P, q, x, wk, M) -> status``: the mass matrix (n, n) at the step's end;
    * ``post(P, q, x, wk, xn) -> status``: the extra state after the step into ``xn``.

    ``out`` (3 n + len(x),) holds q, qd, x, ta after the last completed step; ``wk``
    is the robot's workspace (a tuple), ``M`` (n, n) and ``buf`` (17 n + len(x),) work.
    Returns ``(status, steps)``.
    """
    n = q.shape[0]
    nx = x.shape[0]
    has_visc = (flags & F_VISCOUS) != 0
    has_coul = (flags & F_COULOMB) != 0
    pd = (flags & F_PD) != 0
    sat = (flags & F_SATURATE) != 0
    tc = buf[0:n]
    t0 = buf[n:2 * n]
    tm = buf[2 * n:3 * n]
    th_ = buf[3 * n:4 * n]
    k1v = buf[4 * n:5 * n]
    k2v = buf[5 * n:6 * n]
    k3v = buf[6 * n:7 * n]
    k4v = buf[7 * n:8 * n]
    k2q = buf[8 * n:9 * n]
    k3q = buf[9 * n:10 * n]
    k4q = buf[10 * n:11 * n]
    qs = buf[11 * n:12 * n]
    rhs = buf[12 * n:13 * n]
    qn = buf[13 * n:14 * n]
    qdn = buf[14 * n:15 * n]
    imp = buf[15 * n:16 * n]
    vc = buf[16 * n:17 * n]
    xn = buf[17 * n:17 * n + nx]
    for i in range(n):
        out[i] = q[i]
        out[n + i] = qd[i]
        out[2 * n + nx + i] = ta[i]
    for i in range(nx):
        out[2 * n + i] = x[i]
    cq = out[0:n]
    cqd = out[n:2 * n]
    cx = out[2 * n:2 * n + nx]
    cta = out[2 * n + nx:3 * n + nx]
    e_mid = math.exp(-(0.5 * h) / lag) if lag > 0.0 else 0.0
    e_end = math.exp(-h / lag) if lag > 0.0 else 0.0
    hh = 0.5 * h
    h6 = h / 6.0
    visc = par[0]
    for k in range(n_steps):
        _held_torques(cmd, par, cq, cqd, cta, pd, sat, lag, e_mid, e_end, tc, t0, tm, th_)
        st = qdd(P, cq, cqd, t0, visc, has_visc, cx, wk, rhs, k1v)
        if st != 0:
            return st, k
        _rk4_stage(cq, cqd, hh, k1v, cqd, k2q, qs)
        st = qdd(P, qs, k2q, tm, visc, has_visc, cx, wk, rhs, k2v)
        if st != 0:
            return st, k
        _rk4_stage(cq, cqd, hh, k2v, k2q, k3q, qs)
        st = qdd(P, qs, k3q, tm, visc, has_visc, cx, wk, rhs, k3v)
        if st != 0:
            return st, k
        _rk4_stage(cq, cqd, h, k3v, k3q, k4q, qs)
        st = qdd(P, qs, k4q, th_, visc, has_visc, cx, wk, rhs, k4v)
        if st != 0:
            return st, k
        _rk4_combine(cq, cqd, h6, k2q, k3q, k4q, k1v, k2v, k3v, k4v, qn, qdn)
        if has_coul:
            st = mass(P, qn, cx, wk, M)
            if st != 0:
                return st, k
            for r in range(n):
                imp[r] = h * par[1, r]
            _coulomb_update(M, imp, hh, cq, cqd, qn, qdn, vc)
        st = post(P, qn, cx, wk, xn)
        if st != 0:
            return st, k
        if not _finite_state(qn, qdn):
            return ST_NOT_FINITE, k
        for i in range(n):
            cq[i] = qn[i]
            cqd[i] = qdn[i]
            cta[i] = th_[i] if lag > 0.0 else tc[i]
        for i in range(nx):
            cx[i] = xn[i]
    return 0, n_steps


# -- the 3RRR: extra state the platform pose X, found by Newton from the step's start ----------
# One work array per call: the zero wrench W (3,) (also the zero rates of the mass matrix),
# the model's workspace ws (WS_SIZE + 6,) shared by every solve of a step, M (3, 3), the
# _rk4_advance buffer (17 n + 3,) and the memo of cos, sin of the step's platform angle (3,)
# (every solve of a step starts from the step's pose: one cos and sin a step, not six):
# offsets of the last four.
_RRR_WS = 3
_RRR_M = _RRR_WS + WS_SIZE + 6
_RRR_BUF = _RRR_M + 9
_RRR_MEMO = _RRR_BUF + 17 * 3 + 3
#: size of :func:`rrr_advance_ws`'s work array [floats]
RRR_WORK = _RRR_MEMO + 3


@njit(cache=True, error_model="numpy", _nrt=False)
def _rrr_qdd(P, q, qd, tau, visc, has_visc, X, wk, rhs, out):
    for i in range(3):
        rhs[i] = tau[i] - visc[i] * qd[i] if has_visc else tau[i]
    return fd_hint_ws(P, q, qd, rhs, X, wk[0], out, wk[1], wk[2])


@njit(cache=True, error_model="numpy", _nrt=False)
def _rrr_mass(P, q, X, wk, M):
    return reduced_hint_ws(P, q, wk[0], X, False, M.reshape(9), wk[1], wk[2])


@njit(cache=True, error_model="numpy", _nrt=False)
def _rrr_pose(P, q, X, wk, Xn):
    st, it = fk_newton_memo_ws(P, q, X, wk[2], 1e-12, 50, Xn, wk[1])
    return st


@njit(cache=True, error_model="numpy")
def rrr_advance(P, q, qd, X, ta, cmd, par, lag, flags, h, n_steps, out):
    """Integrate ``n_steps`` plant steps of length ``h`` [s] (3RRR, RK4).

    Parameters
    ----------
    P : (4, NL) packed 3RRR parameters (``Planar3RRR._P``).
    q, qd, X, ta : (3,) joint angles, rates, platform pose, applied torque at the start.
    cmd : (5, 3) rows tau_ff, kp, kd, q_ref, qd_ref (the held command).
    par : (3, 3) rows viscous, coulomb, torque limit.
    lag : current-loop time constant [s] (0 = none).
    flags : bit mask (module docstring).
    out : (12,) q, qd, X, ta after the last completed step.

    Returns
    -------
    (status, steps) : the model status of the failing step (0 if none) and the
        number of completed steps; ``out`` holds the state after them.
    """
    return rrr_advance_ws(P, q, qd, X, ta, cmd, par, lag, flags, h, n_steps, out, np.empty(RRR_WORK))


@njit(cache=True, error_model="numpy", _nrt=False)
def rrr_advance_ws(P, q, qd, X, ta, cmd, par, lag, flags, h, n_steps, out, work):
    """:func:`rrr_advance` in the caller's work array ``work`` (:data:`RRR_WORK`,), which it
    overwrites: no allocation and no reference counting (what the simulated plant and the
    compiled loop call every cycle)."""
    W = work[0:_RRR_WS]
    W[:] = 0.0
    M = work[_RRR_M:_RRR_BUF].reshape((3, 3))
    memo = work[_RRR_MEMO:RRR_WORK]
    memo[0] = np.nan
    return _rk4_advance(_rrr_qdd, _rrr_mass, _rrr_pose, P, q, qd, X, ta, cmd, par, lag, flags, h, n_steps,
                        out, (W, work[_RRR_WS:_RRR_M], memo), M, work[_RRR_BUF:_RRR_MEMO])


# ---------------------------------------------------------------------------------------------
# serial chains (dynamics.serial.SerialModel)
# ---------------------------------------------------------------------------------------------
#: status of a serial step whose mass matrix was not positive definite
ST_SERIAL_NOT_PD = 1


@njit(cache=True, error_model="numpy")
def _serial_qdd(P, q, qd, tau, visc, has_visc, x, wk, rhs, out):
    n = q.shape[0]
    for i in range(n):
        rhs[i] = tau[i] - visc[i] * qd[i] if has_visc else tau[i]
    return 0 if _fd_core(P, q, qd, rhs, rhs, False, out, wk[0], wk[1]) else ST_SERIAL_NOT_PD


@njit(cache=True, error_model="numpy")
def _serial_mass(P, q, x, wk, M):
    _crba_core(P, q, M, wk[1])
    return 0


@njit(cache=True, error_model="numpy")
def _no_extra_state(P, q, x, wk, xn):
    return 0


@njit(cache=True, error_model="numpy")
def serial_advance(P, q, qd, ta, cmd, par, lag, flags, h, n_steps, out):
    """Integrate ``n_steps`` plant steps of length ``h`` [s] of a serial chain (RK4).

    The same operations in the same order as ``SimulatedPlant._step`` with the
    serial model's own kernels (``aba`` = ``_fd_core``, ``crba`` = ``_crba_core``),
    so the result equals the Python path to the last bit.

    Parameters
    ----------
    P : packed serial parameters (``SerialModel._P``), n joints.
    q, qd, ta : (n,) joint positions, rates and applied torque at the start.
    cmd : (5, n) rows tau_ff, kp, kd, q_ref, qd_ref (the held command).
    par : (3, n) rows viscous, coulomb, torque limit.
    lag : current-loop time constant [s] (0 = none).
    flags : bit mask (module docstring).
    out : (3 n,) q, qd, ta after the last completed step.

    Returns
    -------
    (status, steps) : 0 or :data:`ST_SERIAL_NOT_PD` / :data:`ST_NOT_FINITE` for the
        failing step, and the number of completed steps.
    """
    return serial_advance_ws(P, q, qd, ta, cmd, par, lag, flags, h, n_steps, out,
                             np.empty(serial_work_size(q.shape[0])))


@njit(cache=True, error_model="numpy")
def serial_work_size(n):
    """Size of :func:`serial_advance_ws`'s work array for ``n`` joints [floats]: M (n, n), the
    link work (n, NW), the step's buffer (17 n,) and the empty extra state."""
    return n * n + n * NW + 17 * n


@njit(cache=True, error_model="numpy", _nrt=False)
def serial_advance_ws(P, q, qd, ta, cmd, par, lag, flags, h, n_steps, out, work):
    """:func:`serial_advance` in the caller's work array ``work`` (:func:`serial_work_size`,),
    which it overwrites: no allocation and no reference counting."""
    n = q.shape[0]
    M = work[0:n * n].reshape((n, n))
    Rl = work[n * n:n * n + n * NW].reshape((n, NW))
    buf = work[n * n + n * NW:n * n + n * NW + 17 * n]
    return _rk4_advance(_serial_qdd, _serial_mass, _no_extra_state, P, q, qd, buf[0:0], ta, cmd, par, lag,
                        flags, h, n_steps, out, (M, Rl), M, buf)


_gate.release()
