"""Compiled per-frame path of :class:`drivers.sim.mit_emulator.MitEmulator`: one command frame
to a healthy drive in motor mode, on a plant without sensor noise.

:func:`mit_command_frame` does, in one call, what the emulator's Python path does for that
frame (``MitEmulator._apply`` then ``MitEmulator._reply``), with the same operations in the
same order, so the plant's held command and the reply's bytes are equal to the last bit
(``tests/test_sim_mit_kernel.py`` compares them over random and extreme payloads, states,
mappings and drive models):

1. the payload's five fields to values, as :func:`drivers.codecs.mit.command_values`
   (``u * span / (2**bits - 1) + x_min``);
2. the motor-side command to the joint side, as the emulator's mapping (sign, gear ratio,
   offset, efficiency, the zero set by "set zero");
3. the plant's held command of the joint (``SimulatedPlant.set_joint_command``: refused
   when a value is not finite, nothing written then);
4. the joint's measurement (``SimulatedPlant.measure_joint`` of a plant without noise: the
   position rounded to the encoder's quantum, half to even, the sign of a zero kept);
5. the measurement to the motor side and its three reply fields, as
   :func:`drivers.codecs.mit.float_to_uint` (clamped to the range, truncated).

It never raises (numpy's error model: a division by zero gives inf or NaN): a value it would refuse (a non-finite command or measurement) is reported
by the status, and the caller takes the Python path, which raises the proper error.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from dynamics._kernel_cache import CompileGate, stamp_package_caches

#: status bits of :func:`mit_command_frame`
ST_OK = 0
ST_BAD_MEASUREMENT = 1      # the command was written; the reply could not be encoded
ST_BAD_COMMAND = 2          # nothing written (a non-finite joint-side value)
ST_GAINS = 4                # the command has a non-zero kp or kd (the plant must look at its gains)

#: layout of the per-motor constants K (float64): the drive's field ranges, then its mapping
K_P_MAX, K_V_MAX, K_KP_MAX, K_KD_MAX, K_T_MAX, K_SIGN, K_GEAR, K_OFFSET, K_EFF, K_G2E, K_GE = range(11)
K_SIZE = 11


# numba takes a function's cache locator when it is decorated: the kernel files' stamp first
stamp_package_caches()
#: one process at a time compiles this module's kernels (released at the end of the module)
_gate = CompileGate(__file__)


@njit(cache=True, inline="always", error_model="numpy")
def _field(x, lo, hi, top):
    """``float_to_uint(x, lo, hi, bits)`` (truncated), ``top = 2**bits - 1``; -1 for a
    non-finite ``x``."""
    if not lo <= x <= hi:
        if not x - x == 0.0:
            return -1
        x = lo if x < lo else hi
    u = int(math.trunc((x - lo) * top / (hi - lo) + 0.0))
    return top if u > top else u


@njit(cache=True, inline="always", error_model="numpy")
def _command_values(K, hi, lo, zero_m):
    """Steps 1 and 2: the payload's five fields (``hi``, ``lo``: its big-endian integer's upper and
    lower 32 bits) to the joint-side command ``(tau_ff, kp, kd, q_ref, qd_ref)`` of drive ``K``."""
    p_u = hi >> 16
    v_u = (hi >> 4) & 0xFFF
    kp_u = ((hi & 0xF) << 8) | (lo >> 24)
    kd_u = (lo >> 12) & 0xFFF
    t_u = lo & 0xFFF
    p_max = K[K_P_MAX]
    v_max = K[K_V_MAX]
    t_max = K[K_T_MAX]
    p_lo = -p_max
    v_lo = -v_max
    t_lo = -t_max
    p_m = p_u * (p_max - p_lo) / 0xFFFF + p_lo
    v_m = v_u * (v_max - v_lo) / 0xFFF + v_lo
    kp_m = kp_u * (K[K_KP_MAX] - 0.0) / 0xFFF + 0.0
    kd_m = kd_u * (K[K_KD_MAX] - 0.0) / 0xFFF + 0.0
    t_m = t_u * (t_max - t_lo) / 0xFFF + t_lo
    s = K[K_SIGN]
    g = K[K_GEAR]
    off = K[K_OFFSET]
    g2e = K[K_G2E]
    return (s * t_m * g * K[K_EFF], kp_m * g2e, kd_m * g2e, s * (p_m + zero_m) / g + off, s * v_m / g)


@njit(cache=True, inline="always", error_model="numpy")
def _reply_fields(K, qj, qdj, tauj, zero_m, quantum):
    """Steps 4 and 5: the reply's ``(p << 24) | (v << 12) | t`` of the joint's state ``qj, qdj,
    tauj`` (the position not yet quantised), or -1 when a value is not finite."""
    p_max = K[K_P_MAX]
    v_max = K[K_V_MAX]
    t_max = K[K_T_MAX]
    s = K[K_SIGN]
    g = K[K_GEAR]
    off = K[K_OFFSET]
    if quantum > 0.0:
        x = qj / quantum
        qj = math.copysign(np.rint(x), x) * quantum
    fp = _field(s * (qj - off) * g - zero_m, -p_max, p_max, 0xFFFF)
    fv = _field(s * qdj * g, -v_max, v_max, 0xFFF)
    ft = _field(s * tauj / K[K_GE], -t_max, t_max, 0xFFF)
    if fp < 0 or fv < 0 or ft < 0:
        return -1
    return (fp << 24) | (fv << 12) | ft


@njit("UniTuple(i8, 2)(f8[::1], f8[:, ::1], f8[::1], f8[::1], f8[::1], i8, i8, i8, f8, f8)", cache=True,
      error_model="numpy")
def mit_command_frame(K, cmd, q, qd, tau, j, hi, lo, zero_m, quantum):
    """Apply one MIT command payload to joint ``j`` and encode the reply fields.

    Parameters
    ----------
    K : ndarray, shape (K_SIZE,)
        The drive's constants: ``p_max_rad, v_max_rad_s, kp_max, kd_max, t_max_nm`` of its
        :class:`~drivers.codecs.mit.MitLimits`, then sign, gear ratio, offset [rad],
        efficiency, ``g**2 eff`` and ``g eff`` of its mapping.
    cmd : ndarray, shape (5, n)
        The plant's held command (rows tau_ff [N m], kp, kd, q_ref [rad], qd_ref [rad/s]);
        column ``j`` is written.
    q, qd, tau : ndarray, shape (n,)
        The plant's joint positions [rad], velocities [rad/s] and applied torques [N m].
    j : int
        The drive's joint.
    hi, lo : int
        The 8-byte payload as a big-endian integer ``x``: ``x >> 32`` and ``x & 0xFFFFFFFF``.
    zero_m : float
        The motor position the drive takes as zero [rad].
    quantum : float
        The joint encoder's step [rad]; 0 for none.

    Returns
    -------
    (status, fields) : int, int
        Bits of ``ST_*``; ``fields`` is the reply's ``(p << 24) | (v << 12) | t`` (40 bits)
        when the measurement could be encoded.
    """
    c0, c1, c2, c3, c4 = _command_values(K, hi, lo, zero_m)
    total = c0 + c1 + c2 + c3 + c4
    if not total - total == 0.0:
        return ST_BAD_COMMAND, 0
    cmd[0, j] = c0
    cmd[1, j] = c1
    cmd[2, j] = c2
    cmd[3, j] = c3
    cmd[4, j] = c4
    status = ST_GAINS if (c1 != 0.0 or c2 != 0.0) else ST_OK
    fields = _reply_fields(K, q[j], qd[j], tau[j], zero_m, quantum)
    if fields < 0:
        return status | ST_BAD_MEASUREMENT, 0
    return status, fields


# ---------------------------------------------------------------------------
# a run of command frames at one time (MitEmulator.on_batch)
# ---------------------------------------------------------------------------
#: rows of the emulator's per-motor float state V (float64, (motors, V_ROWS)): the zero set by
#: "set zero" (motor side) [rad], the joint encoder's step [rad] (0: none), the reported
#: temperature [degC], the last command's time (the watchdog's) [s]
V_ZERO, V_QUANTUM, V_TEMP, V_LAST_T = range(4)
V_ROWS = 4
#: rows of the per-motor int state W (int64, (motors, W_ROWS)): CAN id, reply length (6 or 8),
#: latched error byte, command frames received in motor mode, commands applied, watchdog armed,
#: plant joint, whether R holds the last reply (else the emulator's Python path kept it)
W_ID, W_LEN, W_FAULT, W_RECEIVED, W_COMMANDS, W_ARMED, W_JOINT, W_R_NEWER = range(8)
W_ROWS = 8
#: bytes per motor of the last reply R (uint8, (motors, R_STRIDE)): its length (0: none), then it
R_STRIDE = 9


@njit("i8(f8[:, ::1], f8[:, ::1], i8[:, ::1], u1[:, ::1], i8[::1], u1[:, ::1], f8, f8[:, ::1], f8[::1],"
      " f8[::1], f8[::1], i8, i8[::1], u1[:, ::1])", cache=True, error_model="numpy")
def mit_command_batch(K, V, W, R, idx, payloads, t_s, cmd, q, qd, tau, reply_id, out_arb, out):
    """Serve ``m`` command frames at one time, each to a healthy drive in motor mode on a plant
    without sensor noise and without drive-side gains held: what :func:`mit_command_frame` and the
    emulator's bookkeeping do frame by frame, or nothing.

    Parameters
    ----------
    K : ndarray, shape (motors, K_SIZE)
        Every motor's constants (:func:`mit_command_frame`'s ``K`` per row).
    V, W, R : ndarray
        The motors' float, int and last-reply state (layouts above); rows ``idx`` are read and,
        when the frames are served, written (``V_LAST_T``, ``W_RECEIVED``, ``W_COMMANDS``,
        ``W_ARMED``, ``W_R_NEWER``, ``R``).
    idx : ndarray of int64, shape (m,)
        The motor (row) of each frame, in the order the frames were sent.
    payloads : ndarray of uint8, shape (m, 8)
        The frames' payloads.
    t_s : float
        The loop time the frames are served at [s].
    cmd, q, qd, tau : ndarray
        The plant's held command and state (:func:`mit_command_frame`'s).
    reply_id : int
        The replies' arbitration id.
    out_arb : ndarray of int64, shape (m,)
        Out: per frame its reply's arbitration id.
    out : ndarray of uint8, shape (m, R_STRIDE)
        Out: per frame its reply's length, then the reply.

    Returns
    -------
    int
        ``m``, or -1 with nothing written but ``out`` when a frame is not a plain command (its
        first byte 0xFF: a special frame, or one the driver must tell from one), holds a
        non-zero kp or kd (the plant looks at its gains per frame), or a value the Python path
        must refuse (a non-finite command, measurement or temperature): the caller serves the
        frames one by one then.
    """
    m = idx.shape[0]
    cv = np.empty((m, 5))
    # first pass: every check, and the replies (the plant's state is not changed by a command)
    for i in range(m):
        r = idx[i]
        if payloads[i, 0] == 0xFF:
            return -1
        hi = (np.int64(payloads[i, 0]) << 24) | (np.int64(payloads[i, 1]) << 16) | \
            (np.int64(payloads[i, 2]) << 8) | np.int64(payloads[i, 3])
        lo = (np.int64(payloads[i, 4]) << 24) | (np.int64(payloads[i, 5]) << 16) | \
            (np.int64(payloads[i, 6]) << 8) | np.int64(payloads[i, 7])
        Kr = K[r]
        zero_m = V[r, V_ZERO]
        c0, c1, c2, c3, c4 = _command_values(Kr, hi, lo, zero_m)
        total = c0 + c1 + c2 + c3 + c4
        if not total - total == 0.0 or c1 != 0.0 or c2 != 0.0:
            return -1
        cv[i, 0] = c0
        cv[i, 1] = c1
        cv[i, 2] = c2
        cv[i, 3] = c3
        cv[i, 4] = c4
        j = W[r, W_JOINT]
        fields = _reply_fields(Kr, q[j], qd[j], tau[j], zero_m, V[r, V_QUANTUM])
        if fields < 0:
            return -1
        length = W[r, W_LEN]
        out[i, 0] = length
        out[i, 1] = W[r, W_ID]
        out[i, 2] = (fields >> 32) & 0xFF
        out[i, 3] = (fields >> 24) & 0xFF
        out[i, 4] = (fields >> 16) & 0xFF
        out[i, 5] = (fields >> 8) & 0xFF
        out[i, 6] = fields & 0xFF
        if length == 8:
            temp = V[r, V_TEMP]
            if not temp - temp == 0.0:
                return -1
            # min(255, max(0, int(round(temp)))): round half to even, as np.rint
            tr = np.rint(temp)
            out[i, 7] = 255 if tr > 255.0 else (0 if tr < 0.0 else np.int64(tr))
            out[i, 8] = W[r, W_FAULT]
    # second pass: the commands held, the bookkeeping, in the frames' order
    for i in range(m):
        r = idx[i]
        j = W[r, W_JOINT]
        cmd[0, j] = cv[i, 0]
        cmd[1, j] = cv[i, 1]
        cmd[2, j] = cv[i, 2]
        cmd[3, j] = cv[i, 3]
        cmd[4, j] = cv[i, 4]
        out_arb[i] = reply_id
        W[r, W_RECEIVED] += 1
        W[r, W_COMMANDS] += 1
        W[r, W_ARMED] = 1
        W[r, W_R_NEWER] = 1
        V[r, V_LAST_T] = t_s
        for b in range(R_STRIDE):
            R[r, b] = out[i, b]
    return m


_gate.release()
