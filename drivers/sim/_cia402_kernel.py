"""Compiled SYNC of :class:`drivers.sim.cia402_emulator.Cia402Emulator`: every drive of a bus in
OPERATION ENABLED, cyclic synchronous torque, on a plant without sensor noise, in one call.

:func:`cia402_sync` does, for all those drives at once, the numbers the emulator's Python path
(``Cia402Emulator._sync``) computes for them at a SYNC, with the same operations in the same
order, so the plant's held command and every TPDO value are equal to the last bit
(``tests/test_sim_cia402_kernel.py`` compares the two paths over random and fault sequences):

1. each drive's joint measured (``Plant.measure_joint`` of a plant without noise: the position
   rounded to the encoder's quantum, half to even, the sign of a zero kept);
2. the demand (``Cia402Emulator._demand_nm``): the target torque 0x6071 clamped to the max
   torque 0x6072 (internal limit active when it was clamped), times the rated torque's per mille;
3. the joint command, ``sign * demand * gear ratio * efficiency`` (``_output``);
4. the actual values of the TPDOs: position 0x6064 (nearest count, wrapped to INT32), velocity
   0x606C (nearest, clamped to INT32), torque actual 0x6077 and torque demand 0x6074 (per mille,
   nearest, clamped to +-0x7FFF), as the emulator's readers compute them;
5. the TPDOs' bytes (each object little endian, back to back, as its map packs it), written
   where the caller says: the emulator's own buffer, or the driver's reply buffer of a cycle
   served in one call (``Cia402Emulator.on_batch``), the RPDOs read from the driver's bytes.

Everything is computed and checked before anything is written: a value the Python path would
refuse or raise on (a non-finite measurement or command, a count beyond the int64 range) makes
the call return :data:`ST_FALLBACK` with the plant untouched, and the caller takes the Python
path for the whole bus, which raises the proper error.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from dynamics._kernel_cache import CompileGate, stamp_package_caches

#: status of :func:`cia402_sync`
ST_OK = 0
ST_FALLBACK = 1

#: layout of the per-drive constants K (float64)
K_SIGN, K_GEAR, K_EFF, K_OFFSET, K_RAD_PER_COUNT, K_RAD_S_PER_COUNT_S, K_NM_PER_PERMILLE, K_QUANTUM = range(8)
K_SIZE = 8
#: columns of the per-drive results (int64)
R_LIMIT, R_POSITION, R_VELOCITY, R_TORQUE, R_DEMAND, R_CW = range(6)
R_SIZE = 6
#: columns of the per-drive inputs tl (int64)
T_ROW, T_TARGET, T_LIMIT = range(3)
T_SIZE = 3
#: columns of a TPDO's row of the layout (int64): COB-ID, drive, length, number of objects,
#: then (place, size) of each of at most 8 objects
L_COB, L_DRIVE, L_BYTES, L_COUNT, L_FIELDS = range(5)
L_SIZE = L_FIELDS + 16

_I32_MIN = -0x80000000
_I32_MAX = 0x7FFFFFFF
#: |x| below this rounds to an int64 without overflow
_I64_SAFE = 9.0e18

stamp_package_caches()
#: one process at a time compiles this module's kernels (released at the end of the module)
_gate = CompileGate(__file__)


@njit(cache=True, inline="always", error_model="numpy")
def _permille(t_m, npp):
    """``max(-0x7FFF, min(0x7FFF, int(round(t_m / npp))))``; the second value False for a
    quotient that is not finite (Python's ``round`` raises on it)."""
    x = t_m / npp
    if not x - x == 0.0:
        return 0, False
    if x >= _I64_SAFE:
        return 0x7FFF, True
    if x <= -_I64_SAFE:
        return -0x7FFF, True
    p = int(np.rint(x))
    if p > 0x7FFF:
        p = 0x7FFF
    elif p < -0x7FFF:
        p = -0x7FFF
    return p, True


@njit(cache=True, error_model="numpy", inline="always")
def _put(out, k, off, v, size):
    """``v`` (two's complement) little endian in ``size`` bytes at ``out[k, off:]``."""
    for b in range(size):
        out[k, off + b] = (v >> (8 * b)) & 0xFF


@njit("i8(f8[:, ::1], i8[::1], u1[:, ::1], i8[:, ::1], i8[:, ::1], i8[:, ::1], i8, i8, i8, "
      "f8[:, ::1], f8[::1], f8[::1], f8[::1], i8[:, ::1], f8[::1], i8[::1], u1[:, ::1])",
      cache=True, error_model="numpy")
def cia402_sync(K, joints, rx, tl, errs, lay, sw0, sw1, mode, cmd, q, qd, tau, res, tau_cmd, out_arb, out):
    """The SYNC of ``n`` drives in OPERATION ENABLED, CST (see the module docstring), their
    TPDOs' bytes written to ``out``.

    Parameters
    ----------
    K : ndarray, shape (n, K_SIZE)
        Per drive: sign, gear ratio, efficiency, offset [rad] of its mapping; rad per count,
        rad/s per count/s and N m per per mille of its units; its joint encoder's step [rad]
        (0: none).
    joints : ndarray of int64, shape (n,)
        Each drive's plant joint.
    rx : ndarray of uint8, shape (m_rx, 4)
        RPDO payloads as the drives receive them: controlword 0x6040 then target torque 0x6071
        (little endian).
    tl : ndarray of int64, shape (n, T_SIZE)
        Per drive: the row of ``rx`` its RPDO is (-1: none came, the target torque is
        ``tl[i, T_TARGET]`` and the controlword is not checked), the target torque 0x6071 (INT16)
        when none came, the max torque 0x6072 (UINT16) [per mille].  A received controlword
        whose command is not 'enable operation' (bits 0-3 and 7 not 0b0_1111) makes the call
        return :data:`ST_FALLBACK`.
    errs : ndarray of int64, shape (n, 2)
        Each drive's error code 0x603F and error register 0x1001.
    lay : ndarray of int64, shape (m, L_SIZE)
        The TPDOs to write, one row each: COB-ID, drive, length [bytes], number of objects, then
        per object its place among the SYNC's values (statusword, position, velocity, torque
        actual, torque demand, mode display, error code, error register) and its size [bytes],
        back to back from byte 0.
    sw0, sw1 : int
        The statusword in OPERATION ENABLED, CST, without and with the internal limit active.
    mode : int
        The modes of operation display.
    cmd : ndarray, shape (5, n_joints)
        The plant's held command (rows tau_ff [N m], kp, kd, q_ref, qd_ref); the drives'
        columns are written (torque, zero gains and references) when the call succeeds.
    q, qd, tau : ndarray, shape (n_joints,)
        The plant's joint positions [rad], velocities [rad/s] and applied torques [N m].
    res : ndarray of int64, shape (n, R_SIZE)
        Out: internal limit active (0/1), position 0x6064, velocity 0x606C, torque actual
        0x6077, torque demand 0x6074, the controlword received (-1: none).
    tau_cmd : ndarray, shape (n,)
        Out: each drive's joint command [N m].
    out_arb : ndarray of int64, shape (>= m,)
        Out: each TPDO's COB-ID.
    out : ndarray of uint8, shape (>= m, >= 9)
        Out: each TPDO's length, then its bytes.

    Returns
    -------
    int
        :data:`ST_OK`, or :data:`ST_FALLBACK` (nothing written to ``cmd``, ``out_arb``, ``out``;
        also for an RPDO row beyond ``rx`` or buffers too small for ``lay``).
    """
    n = joints.shape[0]
    m = lay.shape[0]
    if out_arb.shape[0] < m or out.shape[0] < m or (m and out.shape[1] < 9) or rx.shape[1] < 4:
        return ST_FALLBACK
    for i in range(n):
        j = joints[i]
        s = K[i, K_SIGN]
        g = K[i, K_GEAR]
        eff = K[i, K_EFF]
        npp = K[i, K_NM_PER_PERMILLE]
        # the RPDO: controlword and target torque
        row = tl[i, T_ROW]
        if row >= rx.shape[0]:
            return ST_FALLBACK
        if row >= 0:
            cw = np.int64(rx[row, 0]) | (np.int64(rx[row, 1]) << 8)
            if cw & 0x8F != 0x0F:
                return ST_FALLBACK
            tg = np.int64(rx[row, 2]) | (np.int64(rx[row, 3]) << 8)
            if tg >= 0x8000:
                tg -= 0x10000
            res[i, R_CW] = cw
        else:
            tg = tl[i, T_TARGET]
            res[i, R_CW] = -1
        # the demand and the joint command
        lim = tl[i, T_LIMIT]
        res[i, R_LIMIT] = 1 if abs(tg) > lim else 0
        if tg > lim:
            tg = lim
        elif tg < -lim:
            tg = -lim
        t_m = tg * npp
        c = s * t_m * g * eff
        if not c - c == 0.0:
            return ST_FALLBACK
        tau_cmd[i] = c
        dem, ok = _permille(t_m, npp)
        if not ok:
            return ST_FALLBACK
        res[i, R_DEMAND] = dem
        # the measurement
        qj = q[j]
        step = K[i, K_QUANTUM]
        if step > 0.0:
            x = qj / step
            if not x - x == 0.0:
                return ST_FALLBACK
            qj = math.copysign(np.rint(x), x) * step
        # position: nearest count, wrapped to INT32
        x = s * (qj - K[i, K_OFFSET]) * g / K[i, K_RAD_PER_COUNT]
        if not (x - x == 0.0 and abs(x) < _I64_SAFE):
            return ST_FALLBACK
        p = int(np.rint(x))
        res[i, R_POSITION] = ((p + 0x80000000) & 0xFFFFFFFF) - 0x80000000
        # velocity: nearest, clamped to INT32
        x = s * qd[j] * g / K[i, K_RAD_S_PER_COUNT_S]
        if not x - x == 0.0:
            return ST_FALLBACK
        if x >= _I64_SAFE:
            v = _I32_MAX
        elif x <= -_I64_SAFE:
            v = _I32_MIN
        else:
            v = int(np.rint(x))
            if v > _I32_MAX:
                v = _I32_MAX
            elif v < _I32_MIN:
                v = _I32_MIN
        res[i, R_VELOCITY] = v
        # torque actual: per mille of the motor torque
        tq, ok = _permille(s * tau[j] / (g * eff), npp)
        if not ok:
            return ST_FALLBACK
        res[i, R_TORQUE] = tq
    for i in range(n):
        j = joints[i]
        cmd[0, j] = tau_cmd[i]
        cmd[1, j] = 0.0
        cmd[2, j] = 0.0
        cmd[3, j] = 0.0
        cmd[4, j] = 0.0
    # the TPDOs
    for k in range(m):
        i = lay[k, L_DRIVE]
        out_arb[k] = lay[k, L_COB]
        out[k, 0] = lay[k, L_BYTES]
        off = 1
        for f in range(lay[k, L_COUNT]):
            place = lay[k, L_FIELDS + 2 * f]
            size = lay[k, L_FIELDS + 2 * f + 1]
            if place == 0:
                v = sw1 if res[i, R_LIMIT] else sw0
            elif place == 5:
                v = mode
            elif place == 6:
                v = errs[i, 0]
            elif place == 7:
                v = errs[i, 1]
            else:
                v = res[i, place]       # R_POSITION .. R_DEMAND are places 1 .. 4
            _put(out, k, off, v, size)
            off += size
    return ST_OK


_gate.release()
