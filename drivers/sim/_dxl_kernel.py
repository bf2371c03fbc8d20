"""Compiled firmware of :class:`drivers.sim.dynamixel_emulator.DynamixelBusEmulator` for the
common healthy case of a cycle: a Sync Write of Goal Current, a Fast Sync Read or a Sync Read,
or a Sync Write then a read, to servos whose state needs none of the Python path's side effects.

The bus keeps its servos' state in arrays (one column per servo, the control tables as rows of
``T``; :class:`~drivers.sim.dynamixel_emulator.EmulatedServo` reads and writes them through
properties), and the two calls here do what the Python path does with those packets, the same
operations in the same order, so the same tables, plant commands and status bytes:

* :func:`check` (before the plant is advanced): the bytes are one or two whole packets (no
  partial packet, no noise, valid CRCs, nothing stuffed): a broadcast Sync Write of Goal
  Current (102, 2 bytes a servo), a (Fast) Sync Read, or a Sync Write then a read; no servo's
  Bus Watchdog is due at the packets' time; no servo taking part would turn its torque off on
  a hardware error (Shutdown) or change its holding brake; the supply voltage and temperature
  are finite.
* :func:`serve` (after the plant was advanced to the packet's time, for the packets asked): the
  Sync Write per servo (instruction count, present values refreshed from the plant, the write's
  checks: tripped watchdog, Data Limit; the goal written, the plant joint's command), the read
  per servo (refresh, read, Access Error, Alert bit) and its status: one packet with the running
  CRC of every segment (Fast Sync Read), or one stuffed packet per servo whose Status Return
  Level answers it (Sync Read).

A refresh is :meth:`~drivers.sim.dynamixel_emulator.EmulatedServo._refresh_present` (the
plant's measurement without noise, its encoder step, the present block, the input voltage and
temperature when they changed, the realtime tick, the hardware error status).  Neither call
raises: anything else is reported (and :func:`serve` writes nothing then), and the bus takes
the Python path, which stays the reference (``tests/test_dxl_kernels.py`` compares both over
random sessions with faults).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, types

from dynamics._kernel_cache import CompileGate, stamp_package_caches

from .._dxl_kernels import (BYTES, POSITION_RAD_PER_PULSE, VELOCITY_RAD_S_PER_LSB, broadcast_header, crc16,
                            frame_body, le_int, round_half_even)

#: rows of the servos' float state F (float64, (F_ROWS, n)): supply voltage [V], temperature
#: [degC], the voltage and temperature last written to the table, the last instruction's loop
#: time [s], the time of power on [s]; the mapping (sign, gear ratio, offset [rad], efficiency),
#: the torque constant [N m/A] and the current per LSB [A]
(F_VOLTS, F_TEMP, F_ENV_V, F_ENV_T, F_LAST_T, F_T0, F_SIGN, F_GEAR, F_OFF, F_EFF, F_KT, F_ALSB) = range(12)
F_ROWS = 12
#: rows of the servos' int state I (int64, (I_ROWS, n)): the plant joint, the injected hardware
#: error bits, silent (1), the table's voltage and temperature written (1), what the plant's brake
#: was last told (-1 nothing yet, 0 engaged, 1 released), instructions executed
(I_JOINT, I_INJECTED, I_SILENT, I_ENV_SET, I_BRAKE, I_INSTR) = range(6)
I_ROWS = 6

TABLE_END = 148
_ID, _OP_MODE, _HOMING, _TEMP_LIMIT, _MAX_V, _MIN_V, _CUR_LIMIT = 7, 11, 20, 31, 32, 34, 38
_SHUTDOWN, _TORQUE, _HW, _WATCHDOG, _GOAL_CURRENT, _TICK = 63, 64, 70, 98, 102, 120
_PRESENT, _VOLTAGE, _TEMPERATURE = 126, 144, 146
_WATCHDOG_S_PER_LSB = 0.020
_TIME_EPS_S = 1e-9
_SYNC_WRITE, _FAST_SYNC_READ, _SYNC_READ = 0x83, 0x8A, 0x82
_STATUS_LEVEL = 68

#: layout of the scratch P (int64) :func:`check` fills and :func:`serve` reads: the number of
#: packets, then per packet its start, length and instruction
P_COUNT = 0
P_SIZE = 7

#: :func:`check` / :func:`serve` results
OK = 0
DECLINED = -1

# numba takes a function's cache locator when it is decorated: the kernel files' stamp first
stamp_package_caches()
#: one process at a time compiles this module's kernels (released at the end of the module)
_gate = CompileGate(__file__)


@njit(cache=True, inline="always", error_model="numpy")
def _u16(T, s, a):
    return np.int64(T[s, a]) | (np.int64(T[s, a + 1]) << 8)


@njit(cache=True, inline="always", error_model="numpy")
def _put(T, s, a, v, size):
    for k in range(size):
        T[s, a + k] = (v >> (8 * k)) & 0xFF


@njit(cache=True, error_model="numpy")
def _hw_bits(T, F, I, s):
    """The Hardware Error Status ``_check_hardware`` would write for slot ``s``."""
    bits = I[I_INJECTED, s]
    v = F[F_VOLTS, s] * 10.0
    if v > _u16(T, s, _MAX_V) or v < _u16(T, s, _MIN_V):
        bits |= 0x01
    if F[F_TEMP, s] > T[s, _TEMP_LIMIT]:
        bits |= 0x04
    return bits | (np.int64(T[s, _HW]) & np.int64(T[s, _SHUTDOWN]))


@njit(cache=True, error_model="numpy")
def _servo_ok(T, F, I, s):
    """Whether a refresh and a goal write of slot ``s`` need nothing of the Python path."""
    if not (math.isfinite(F[F_VOLTS, s]) and math.isfinite(F[F_TEMP, s])):
        return False
    on = T[s, _TORQUE] == 1
    if I[I_BRAKE, s] != (1 if on else 0):
        return False              # the brake would be told (the plant's Python API)
    if on and _hw_bits(T, F, I, s) & T[s, _SHUTDOWN]:
        return False              # a shutdown: torque off
    return True


@njit(types.int64(BYTES, types.uint8[:, ::1], types.float64[:, ::1], types.int64[:, ::1],
                  types.int64[::1], types.float64, types.int64[::1]), cache=True, error_model="numpy")
def check(data, T, F, I, slot_of, t, P):
    """Whether the bytes ``data`` written at loop time ``t`` [s] are served here (see the module
    docstring); fills ``P`` (the packets found).  Returns :data:`OK` or :data:`DECLINED`."""
    n_data = data.shape[0]
    pos = 0
    n_pk = 0
    while pos < n_data:
        if n_pk == 2 or n_data - pos < 10:
            return DECLINED
        if data[pos] != 0xFF or data[pos + 1] != 0xFF or data[pos + 2] != 0xFD or data[pos + 3] != 0 \
                or data[pos + 4] != 0xFE:
            return DECLINED
        length = np.int64(data[pos + 5]) | (np.int64(data[pos + 6]) << 8)
        total = 7 + length
        if length < 7 or length > 1024 or pos + total > n_data:
            return DECLINED
        end = pos + total
        if crc16(data, pos, end - 2, 0) != (np.int64(data[end - 2]) | (np.int64(data[end - 1]) << 8)):
            return DECLINED
        for k in range(pos + 9, end - 2):
            if data[k] == 0xFD and data[k - 1] == 0xFF and data[k - 2] == 0xFF:
                return DECLINED     # stuffed: the Python path unstuffs it
        inst = data[pos + 7]
        addr = np.int64(data[pos + 8]) | (np.int64(data[pos + 9]) << 8)
        size = np.int64(data[pos + 10]) | (np.int64(data[pos + 11]) << 8)
        n_rest = length - 7
        if inst == _SYNC_WRITE:
            if addr != _GOAL_CURRENT or size != 2 or n_rest % 3:
                return DECLINED
            for k in range(pos + 12, end - 2, 3):
                s = slot_of[data[k]]
                if s >= 0 and I[I_SILENT, s] == 0 and not _servo_ok(T, F, I, s):
                    return DECLINED
        elif inst == _FAST_SYNC_READ or inst == _SYNC_READ:
            for k in range(pos + 12, end - 2):
                s = slot_of[data[k]]
                if s < 0 or I[I_SILENT, s] != 0:
                    if inst == _FAST_SYNC_READ:
                        break           # the chain of segments stops at a missing device
                    continue
                if not _servo_ok(T, F, I, s):
                    return DECLINED
        else:
            return DECLINED
        if n_pk == 1 and (P[3] != _SYNC_WRITE or inst == _SYNC_WRITE):
            return DECLINED         # two packets: a Sync Write, then the read (replies from the last only)
        P[1 + 3 * n_pk] = pos
        P[2 + 3 * n_pk] = total
        P[3 + 3 * n_pk] = inst
        n_pk += 1
        pos = end
    if n_pk == 0:
        return DECLINED
    # no Bus Watchdog due: the Python path would run its expiry first
    for s in range(T.shape[0]):
        wd = T[s, _WATCHDOG]
        if wd != 0 and wd < 0x80 and T[s, _TORQUE] == 1:
            if F[F_LAST_T, s] + wd * _WATCHDOG_S_PER_LSB <= t + _TIME_EPS_S:
                return DECLINED
    P[P_COUNT] = n_pk
    return OK


@njit(cache=True, error_model="numpy")
def _measured_ok(F, I, s, pq, pqd, pta):
    j = I[I_JOINT, s]
    return math.isfinite(pq[j]) and math.isfinite(pqd[j]) and math.isfinite(pta[j])


@njit(cache=True, error_model="numpy")
def _refresh(T, F, I, s, t, pq, pqd, pta, quant, has_quant):
    """``EmulatedServo._refresh_present`` of slot ``s`` at loop time ``t`` (finite state)."""
    j = I[I_JOINT, s]
    q = pq[j]
    if has_quant:
        step = quant[j]
        x = q / step
        q = math.copysign(round_half_even(x), x) * step
    sign = F[F_SIGN, s]
    gear = F[F_GEAR, s]
    pos = sign * (q - F[F_OFF, s]) * gear / POSITION_RAD_PER_PULSE + le_int(T[s], _HOMING, 4)
    vel = sign * pqd[j] * gear / VELOCITY_RAD_S_PER_LSB
    cur = sign * pta[j] / (gear * F[F_EFF, s]) / F[F_KT, s]
    c = round_half_even(cur / F[F_ALSB, s])
    v = round_half_even(vel)
    p = math.floor(pos + 0.5)
    c = -32768.0 if c < -32768.0 else 32767.0 if c > 32767.0 else c
    v = -2147483648.0 if v < -2147483648.0 else 2147483647.0 if v > 2147483647.0 else v
    p = -2147483648.0 if p < -2147483648.0 else 2147483647.0 if p > 2147483647.0 else p
    _put(T, s, _PRESENT, np.int64(c), 2)
    _put(T, s, _PRESENT + 2, np.int64(v), 4)
    _put(T, s, _PRESENT + 6, np.int64(p), 4)
    volts = F[F_VOLTS, s]
    temp = F[F_TEMP, s]
    if I[I_ENV_SET, s] == 0 or volts != F[F_ENV_V, s] or temp != F[F_ENV_T, s]:
        I[I_ENV_SET, s] = 1
        F[F_ENV_V, s] = volts
        F[F_ENV_T, s] = temp
        vv = round_half_even(volts * 10.0)
        vv = 0.0 if vv < 0.0 else 65535.0 if vv > 65535.0 else vv
        _put(T, s, _VOLTAGE, np.int64(vv), 2)
        tt = round_half_even(temp)
        tt = 0.0 if tt < 0.0 else 255.0 if tt > 255.0 else tt
        T[s, _TEMPERATURE] = np.int64(tt)
    tick = np.int64(math.trunc((t - F[F_T0, s]) * 1000.0)) % 32768
    if tick < 0:
        tick += 32768
    _put(T, s, _TICK, tick, 2)
    T[s, _HW] = _hw_bits(T, F, I, s)


@njit(cache=True, inline="always", error_model="numpy")
def _instruction(T, F, I, s, t, pq, pqd, pta, quant, has_quant):
    """What every instruction does to slot ``s`` first: counted, its time kept, the present
    values refreshed."""
    I[I_INSTR, s] += 1
    F[F_LAST_T, s] = t
    _refresh(T, F, I, s, t, pq, pqd, pta, quant, has_quant)


@njit(cache=True, error_model="numpy")
def _read_segment(T, s, addr, size, out, o, gap):
    """The error field (Access Error for a range beyond the table, the Alert bit) of a read of
    slot ``s`` at ``out[o]`` and its data (zeros for an error) ``gap`` bytes after it."""
    e = 0
    bad = size < 1 or addr + size > TABLE_END
    if bad:
        e = 0x07
    if T[s, _HW] != 0:
        e |= 0x80
    out[o] = e
    for m in range(size):
        out[o + 1 + gap + m] = 0 if bad else T[s, addr + m]


@njit(types.int64(
    BYTES, types.int64[::1], types.int64, types.uint8[:, ::1], types.float64[:, ::1],
    types.int64[:, ::1], types.int64[::1], types.float64, types.float64,
    types.float64[::1], types.float64[::1], types.float64[::1], types.float64[:, ::1],
    types.float64[::1], types.boolean, types.uint8[::1], types.int64[::1]), cache=True, error_model="numpy")
def serve(data, P, which, T, F, I, slot_of, t1, t2, pq, pqd, pta, cmd, quant, has_quant, out, R):
    """Serve the packets :func:`check` found whose bit is set in ``which`` (bit k: packet k, at
    loop time ``t1`` for the first, ``t2`` for the second), the plant advanced to that time.

    Parameters
    ----------
    data, P : the bytes and what :func:`check` found in them.
    which : int
    T, F, I, slot_of : the bus's servo state.
    t1, t2 : float
    pq, pqd, pta : ndarray
        The plant's joint positions, velocities and applied torques (read).
    cmd : ndarray, shape (5, n_joints)
        The plant's held command (torque, kp, kd, q_ref, qd_ref): a written servo's joint column.
    quant : ndarray
        The plant's encoder step per joint (with ``has_quant``).
    out : ndarray of uint8
        The status packets' buffer.
    R : ndarray of int64
        Written: per status packet, the slot of the servo that starts it and its start and end
        in ``out`` (the last packet's replies: the one of a Fast Sync Read, one per answering
        servo of a Sync Read).

    Returns
    -------
    int
        The number of status packets; :data:`DECLINED` with nothing written when a servo's
        measured state is not finite or the replies do not fit ``out`` or ``R``.
    """
    n_pk = P[P_COUNT]
    # every measurement and the replies' size first: nothing is written when one is not finite
    # or the replies do not fit
    for k in range(n_pk):
        if not (which >> k) & 1:
            continue
        pos = P[1 + 3 * k]
        end = pos + P[2 + 3 * k]
        inst = P[3 + 3 * k]
        stride = 3 if inst == _SYNC_WRITE else 1
        n_seg = 0
        n_ans = 0
        for b in range(pos + 12, end - 2, stride):
            s = slot_of[data[b]]
            if s < 0 or I[I_SILENT, s] != 0:
                if inst == _FAST_SYNC_READ:
                    break
                continue
            if not _measured_ok(F, I, s, pq, pqd, pta):
                return DECLINED
            n_seg += 1
            if T[s, _STATUS_LEVEL] >= 1:
                n_ans += 1
        size = np.int64(data[pos + 10]) | (np.int64(data[pos + 11]) << 8)
        if inst == _FAST_SYNC_READ and (8 + n_seg * (4 + size) > out.shape[0] or R.shape[0] < 3):
            return DECLINED
        if inst == _SYNC_READ and (n_ans * (11 + 2 * (2 + size)) > out.shape[0] or 3 * n_ans > R.shape[0]):
            return DECLINED                         # (stuffing doubles a body at most)
    n_rep = 0
    for k in range(n_pk):
        if not (which >> k) & 1:
            continue
        t = t1 if k == 0 else t2
        pos = P[1 + 3 * k]
        end = pos + P[2 + 3 * k]
        inst = P[3 + 3 * k]
        if inst == _SYNC_WRITE:
            for b in range(pos + 12, end - 2, 3):
                s = slot_of[data[b]]
                if s < 0 or I[I_SILENT, s] != 0:
                    continue
                _instruction(T, F, I, s, t, pq, pqd, pta, quant, has_quant)
                goal = np.int64(data[b + 1]) | (np.int64(data[b + 2]) << 8)
                if goal >= 0x8000:
                    goal -= 0x10000
                if T[s, _WATCHDOG] >= 0x80:
                    continue                        # Data Range Error: the watchdog tripped
                if abs(goal) > _u16(T, s, _CUR_LIMIT):
                    continue                        # Data Limit Error
                T[s, _GOAL_CURRENT] = data[b + 1]
                T[s, _GOAL_CURRENT + 1] = data[b + 2]
                cur = 0.0
                if T[s, _TORQUE] == 1 and T[s, _OP_MODE] == 0 and T[s, _WATCHDOG] < 0x80:
                    cur = goal * F[F_ALSB, s]
                j = I[I_JOINT, s]
                cmd[0, j] = F[F_SIGN, s] * (cur * F[F_KT, s]) * F[F_GEAR, s] * F[F_EFF, s]
                cmd[1, j] = 0.0
                cmd[2, j] = 0.0
                cmd[3, j] = 0.0
                cmd[4, j] = 0.0
            continue
        addr = np.int64(data[pos + 8]) | (np.int64(data[pos + 9]) << 8)
        size = np.int64(data[pos + 10]) | (np.int64(data[pos + 11]) << 8)
        if inst == _SYNC_READ:              # one status packet per answering servo, in list order
            o = 0
            for b in range(pos + 12, end - 2):
                s = slot_of[data[b]]
                if s < 0 or I[I_SILENT, s] != 0:
                    continue
                _instruction(T, F, I, s, t, pq, pqd, pta, quant, has_quant)
                if T[s, _STATUS_LEVEL] < 1:
                    continue
                broadcast_header(out[o:])
                out[o + 4] = T[s, _ID]
                out[o + 7] = 0x55
                _read_segment(T, s, addr, size, out, o + 8, 0)
                total = frame_body(out, o, 2 + size)
                R[3 * n_rep] = s
                R[3 * n_rep + 1] = o
                R[3 * n_rep + 2] = o + total
                n_rep += 1
                o += total
            continue
        n_seg = 0
        for b in range(pos + 12, end - 2):
            s = slot_of[data[b]]
            if s < 0 or I[I_SILENT, s] != 0:
                break
            n_seg += 1
        if n_seg == 0:
            continue
        length = 1 + n_seg * (4 + size)
        o = 8
        broadcast_header(out)
        out[5] = length & 0xFF
        out[6] = (length >> 8) & 0xFF
        out[7] = 0x55
        crc = 0
        start = 0
        for b in range(pos + 12, pos + 12 + n_seg):
            s = slot_of[data[b]]
            if n_rep == 0:
                R[0] = s
                n_rep = 1
            _instruction(T, F, I, s, t, pq, pqd, pta, quant, has_quant)
            _read_segment(T, s, addr, size, out, o, 1)
            out[o + 1] = T[s, _ID]
            o += 2 + size
            crc = crc16(out, start, o, crc)
            start = o
            out[o] = crc & 0xFF
            out[o + 1] = crc >> 8
            o += 2
        R[1] = 0
        R[2] = o
    return n_rep


_gate.release()
