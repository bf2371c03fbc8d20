"""Compiled per-cycle work of :class:`drivers.mit.MitCanDriver` and the rule of
:class:`drivers.mit_health.FollowMonitor`, on plain arrays.

The driver keeps its per-joint state in the arrays below and does only the frame I/O in
Python (python-can's interface: a ``Message`` per frame); what happens to the values of a
cycle is here, in compiled code, once:

* :func:`encode_torque`: a command of torques only (no position, velocity or gains) to its
  8-byte MIT frames, with the same operations as :func:`drivers.codecs.mit.encode_command_fields`
  after the driver's joint -> motor mapping (``t_m = sign * tau / (gear * efficiency)``), and
  the values the frames carry (what :func:`drivers.codecs.mit.command_values` decodes);
* :func:`after_collect`: the replies a cycle collected (raw payloads) decoded as
  :func:`drivers.codecs.mit.decode_reply_values` decodes them, mapped to the joint side and
  kept; the follow checks (:func:`follow_step`, the only copy of the rule: the monitor's
  Python API calls it too); the Feedback's vectors.

Bit-for-bit equality with the codec's plain functions is tested
(``tests/test_mit_kernels.py``): same operands, same operations, same order.
No function here raises: a value the kernel would refuse (a non-finite torque) is reported
by the return value and the caller takes the Python path, which raises the proper error.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, types

from dynamics._kernel_cache import CompileGate, stamp_package_caches

# ---------------------------------------------------------------------------
# layouts
# ---------------------------------------------------------------------------
#: rows of the per-joint constants C (float64, (C_ROWS, n))
(C_SIGN, C_GEAR, C_OFF, C_EFF, C_GE, C_TMAX, C_T_LO, C_T_SPAN, C_P_LO, C_P_SPAN, C_V_LO, C_V_SPAN,
 C_P_HALF, C_V_HALF, C_T_HALF, C_FIX_P, C_FIX_V, C_FIX_KP, C_FIX_KD) = range(19)
C_ROWS = 19

#: rows of the driver's float state S (float64, (S_ROWS, n)): joint side values of the last
#: good reply, the reported temperature [degC] (NaN before one), the joint side torque
#: residual; the motor side values of the last reply (p, v, t); this cycle's command values,
#: motor side (p_des, v_des, kp, kd, t_ff)
(S_Q, S_QD, S_TAU, S_TEMP, S_RESID, S_PM, S_VM, S_TM, S_CP, S_CV, S_CKP, S_CKD, S_CT) = range(13)
S_ROWS = 13

#: rows of the driver's int state I (int64, (I_ROWS, n)): the drive's error byte (8-byte
#: replies), the fault the driver detected itself (latched), whether a reply was ever kept,
#: the last reply's raw fields (bytes 1..5 as a 40-bit integer)
I_FAULT, I_DETECTED, I_HAS_REP, I_RAW = range(4)
I_ROWS = 4

#: rows of the monitor's float state M (float64, (M_ROWS, n)) and int state MI (int64): drivers.follow
from .follow import (M_ROWS, M_RESID, M_TMAX, M_TOL, M_U, M_X, M_XHI, M_XLO, MI_BAD, MI_CODE,  # noqa: E402,F401
                     MI_HAS_LAST, MI_LAST, MI_ROWS, MI_SAME, FAULT_FROZEN, FAULT_NOT_FOLLOWING)
from . import follow as _follow  # noqa: E402

#: bytes per joint of the receive buffer: the payload's length (0: no reply this cycle), then
#: the payload (8 bytes; a 6-byte reply leaves the last two as they were)
RX_STRIDE = 9

#: :func:`after_collect` modes
MODE_STORE, MODE_FOLLOW, MODE_FEEDBACK = 1, 2, 4

#: reported driver temperature above ``temperature_max_c`` (8-byte replies)
FAULT_OVER_TEMPERATURE = 0x102


# ---------------------------------------------------------------------------
# commands
# ---------------------------------------------------------------------------
#: the torques as the caller gives them: any layout, read-only or not (a mutable array matches)
_TAU = types.Array(types.float64, 1, "A", readonly=True)


# numba takes a function's cache locator when it is decorated: the kernel files' stamp first
stamp_package_caches()
#: one process at a time compiles this module's kernels (released at the end of the module)
_gate = CompileGate(__file__)


@njit(types.int64(_TAU, types.float64[:, ::1], types.uint8[:, ::1], types.uint8[:, ::1], types.float64[:, ::1],
                  types.float64), cache=True, error_model="numpy")
def encode_torque(tau, C, fixed, tx, S, half):
    """Encode a command of torques only; write the frames and the values they carry.

    Parameters
    ----------
    tau : ndarray, shape (n,)
        Joint torques [N m].
    C : ndarray, shape (C_ROWS, n)
        Per-joint constants (mapping, field ranges, the fixed fields' values).
    fixed : ndarray of uint8, shape (n, 8)
        Each joint's payload with a zero torque field (position, velocity and gains of zero).
    tx : ndarray of uint8, shape (n, 8)
        Out: the payloads.
    S : ndarray, shape (S_ROWS, n)
        Out: rows ``S_CP .. S_CT``, the commands' values (motor side).
    half : float
        0.5 to round to the nearest integer, 0.0 to truncate (the driver's ``quantization``).

    Returns
    -------
    int
        Number of torques clamped to the drive's range, or -1 (nothing valid written) when a
        torque or its motor-side value is not finite.
    """
    n = tau.shape[0]
    for j in range(n):
        t_m = C[C_SIGN, j] * tau[j] / C[C_GE, j]
        if not (tau[j] - tau[j] == 0.0 and t_m - t_m == 0.0):
            return -1
    saturated = 0
    for j in range(n):
        t_m = C[C_SIGN, j] * tau[j] / C[C_GE, j]
        t_max = C[C_TMAX, j]
        if abs(t_m) > t_max:
            saturated += 1
        lo = C[C_T_LO, j]
        span = C[C_T_SPAN, j]
        x = t_m
        if not lo <= x <= t_max:
            x = lo if x < lo else t_max
        u = int(math.trunc((x - lo) * 4095 / span + half))
        if u > 4095:
            u = 4095
        for b in range(6):
            tx[j, b] = fixed[j, b]
        tx[j, 6] = fixed[j, 6] | (u >> 8)
        tx[j, 7] = u & 0xFF
        S[S_CP, j] = C[C_FIX_P, j]
        S[S_CV, j] = C[C_FIX_V, j]
        S[S_CKP, j] = C[C_FIX_KP, j]
        S[S_CKD, j] = C[C_FIX_KD, j]
        S[S_CT, j] = u * span / 4095 + lo
    return saturated


# ---------------------------------------------------------------------------
# the follow checks (drivers.mit_health)
# ---------------------------------------------------------------------------
#: the rule's one source is drivers.follow.follow_step (plain Python, used as such by the
#: torque-only drives' check); compiled here for the MIT driver's cycle
follow_step = njit(cache=True, error_model="numpy")(_follow.follow_step)


# ---------------------------------------------------------------------------
# replies
# ---------------------------------------------------------------------------
@njit("i8(u1[::1], f8[:, ::1], f8[:, ::1], i8[:, ::1], f8[:, ::1], i8[:, ::1], i8, b1, f8, f8, f8, i8, i8,"
      " f8[::1], i8[::1], b1[::1])", cache=True, error_model="numpy")
def after_collect(rx, C, S, I, M, MI, mode, centered, temperature_max_c, a, rel_tol, window, frozen,
                  out_f, out_fault, out_fresh):
    """Keep a cycle's replies, run the follow checks, write the Feedback's vectors.

    Parameters
    ----------
    rx : ndarray of uint8, shape (n * RX_STRIDE,)
        Per joint: the reply's length (0: none this cycle; else 6 or 8, checked by the
        caller, as the joint from byte 0), then its payload.
    C, S, I : ndarray
        The driver's constants and state (layouts above).
    M, MI : ndarray
        The follow monitor's state (read and written only with ``MODE_FOLLOW``).
    mode : int
        Sum of ``MODE_STORE`` (decode and keep the replies: values, error byte, temperature),
        ``MODE_FOLLOW`` (the follow checks, then the detected faults and the residual) and
        ``MODE_FEEDBACK`` (write ``out_*``).
    centered : bool
        Decode to the middle of the quantisation step (the driver's ``reply_centered``).
    temperature_max_c : float
        Above it a reported temperature is a detected fault [degC].
    a, rel_tol, window, frozen
        :func:`follow_step`'s.
    out_f : ndarray, shape (5 n,)
        Out: q, qd, tau, temperature, torque residual (joint side).
    out_fault : ndarray of int64, shape (n,)
        Out: the error byte where it is non-zero, else the detected fault.
    out_fresh : ndarray of bool, shape (n,)
        Out: whether joint j answered this cycle.

    Returns
    -------
    int
        The number of joints without a reply this cycle.
    """
    n = C.shape[1]
    missing = 0
    for j in range(n):
        k = j * RX_STRIDE
        length = rx[k]
        out_fresh[j] = length != 0
        if length == 0:
            missing += 1
            continue
        if mode & MODE_STORE:
            b1, b2, b3, b4, b5 = rx[k + 2], rx[k + 3], rx[k + 4], rx[k + 5], rx[k + 6]
            pu = (np.int64(b1) << 8) | b2
            vu = (np.int64(b3) << 4) | (b4 >> 4)
            tu = (np.int64(b4 & 0xF) << 8) | b5
            x_p = pu * C[C_P_SPAN, j] / 65535 + C[C_P_LO, j]
            x_v = vu * C[C_V_SPAN, j] / 4095 + C[C_V_LO, j]
            x_t = tu * C[C_T_SPAN, j] / 4095 + C[C_T_LO, j]
            if centered:
                if pu != 0xFFFF:
                    x_p = x_p + C[C_P_HALF, j]
                if vu != 0xFFF:
                    x_v = x_v + C[C_V_HALF, j]
                if tu != 0xFFF:
                    x_t = x_t + C[C_T_HALF, j]
            S[S_PM, j] = x_p
            S[S_VM, j] = x_v
            S[S_TM, j] = x_t
            I[I_RAW, j] = (np.int64(b1) << 32) | (np.int64(b2) << 24) | (np.int64(b3) << 16) | (np.int64(b4) << 8) | b5
            I[I_HAS_REP, j] = 1
            s, g, off = C[C_SIGN, j], C[C_GEAR, j], C[C_OFF, j]
            S[S_Q, j] = s * x_p / g + off
            S[S_QD, j] = s * x_v / g
            S[S_TAU, j] = s * x_t * g * C[C_EFF, j]
            if length == 8:
                I[I_FAULT, j] = rx[k + 8]
                temperature = rx[k + 7]
                S[S_TEMP, j] = temperature
                if temperature > temperature_max_c and I[I_DETECTED, j] == 0:
                    I[I_DETECTED, j] = FAULT_OVER_TEMPERATURE
    if mode & MODE_FOLLOW:
        follow_step(M, MI, a, out_fresh, S[S_PM], S[S_VM], S[S_TM], I[I_RAW], S[S_CP:S_CT + 1], rel_tol,
                    window, frozen)
        for j in range(n):
            code = MI[MI_CODE, j]
            if code != 0 and I[I_DETECTED, j] == 0:
                I[I_DETECTED, j] = code
            S[S_RESID, j] = C[C_SIGN, j] * M[M_RESID, j] * C[C_GE, j]
    if mode & MODE_FEEDBACK:
        for j in range(n):
            out_f[j] = S[S_Q, j]
            out_f[n + j] = S[S_QD, j]
            out_f[2 * n + j] = S[S_TAU, j]
            out_f[3 * n + j] = S[S_TEMP, j]
            out_f[4 * n + j] = S[S_RESID, j]
            f = I[I_FAULT, j]
            out_fault[j] = f if f != 0 else I[I_DETECTED, j]
    return missing


@njit("i8(i8, i8[::1], u1[:, ::1], i8[::1], b1[::1], u1[::1])", cache=True, error_model="numpy")
def take_replies(r, arb, rep, id_joint, len_ok, rx):
    """The replies of a batch exchange (:meth:`drivers.transport.CanTransport.serve_batch`: one
    command frame per joint, in joint order, on one bus) put in the receive buffer as the
    driver's ``_collect`` puts them, when they are the ordinary ones: one per joint, in that
    order, each a reply of an accepted length from that joint's motor, none on an id of ours.

    Parameters
    ----------
    r : int
        Number of replies.
    arb : ndarray of int64, shape (>= r,)
        Their arbitration ids.
    rep : ndarray of uint8, shape (>= r, RX_STRIDE)
        Per reply its length, then its payload.
    id_joint : ndarray of int64, shape (256,)
        The joint of each motor id (-1: none of ours).
    len_ok : ndarray of bool, shape (9,)
        The reply lengths accepted (the driver's ``reply_variant``).
    rx : ndarray of uint8, shape (n * RX_STRIDE,)
        Out: the receive buffer (:func:`after_collect`'s ``rx``).

    Returns
    -------
    int
        The last reply's length, or 0, nothing written, when they are not the ordinary replies
        (the caller reads them frame by frame).
    """
    n = rx.shape[0] // RX_STRIDE
    if r != n:
        return 0
    for i in range(n):
        a = arb[i]
        if 0 <= a < 256 and id_joint[a] >= 0:
            return 0            # a command frame's id: screened frame by frame
        length = rep[i, 0]
        if length > 8 or not len_ok[length]:
            return 0
        if id_joint[rep[i, 1]] != i:
            return 0
    for i in range(n):
        k = i * RX_STRIDE
        length = rep[i, 0]
        rx[k] = length
        for b in range(length):
            rx[k + 1 + b] = rep[i, 1 + b]
    return rep[n - 1, 0]


_gate.release()
