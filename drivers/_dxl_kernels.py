"""Compiled per-cycle encoding and decoding of :class:`drivers.dynamixel.DynamixelDriver`, and
the Protocol 2.0 CRC for compiled code.

:func:`encode_goal_current` does in one call what
:meth:`drivers.dynamixel.DynamixelDriver.make_commands` does per servo and then
:func:`drivers.codecs.dynamixel.encode_sync_write`: the joint -> servo mapping
(``t = sign * tau / (gear * efficiency)``), the current in LSB (``round(t / kt / a_per_lsb)``,
half to even, as Python's ``round``), the clamp to each servo's Current Limit (counted as
saturated), the Sync Write of Goal Current (102, 2 bytes) with byte stuffing and CRC, into a
preallocated buffer.  The same operands, operations and order, so the same bytes.

:func:`decode_fast_status` does what the driver's Python path does with a Fast Sync Read
status packet of the present block (:func:`drivers.codecs.dynamixel.decode_packet`,
:func:`~drivers.codecs.dynamixel.decode_fast_sync_status` with its inner CRCs,
:func:`~drivers.codecs.dynamixel.decode_present`, the servo -> joint mapping), writing the joint
values of the servos that answered without an error number, so the same values to the bit.

Neither raises: what the Python path would refuse or treat otherwise (a non-finite torque, a
damaged packet, an unknown or repeated ID...) is reported by the return value with nothing
written, and the caller takes the Python path, which stays the reference
(``tests/test_dxl_kernels.py`` compares both over random and damaged traffic).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, types

from dynamics._kernel_cache import CompileGate, stamp_package_caches

#: rows of the per-servo constants C (float64, (C_ROWS, n)): sign, gear ratio, offset [rad],
#: efficiency, gear ratio x efficiency, torque constant [N m/A], current per LSB [A]
C_SIGN, C_GEAR, C_OFF, C_EFF, C_GE, C_KT, C_ALSB = range(7)
C_ROWS = 7

#: one position pulse [rad] and one velocity LSB [rad/s] (drivers.codecs.dynamixel's values)
POSITION_RAD_PER_PULSE = 2.0 * math.pi / 4096.0
VELOCITY_RAD_S_PER_LSB = 0.229 * 2.0 * math.pi / 60.0


def _crc_table() -> np.ndarray:
    t = np.zeros(256, dtype=np.int64)
    for i in range(256):
        c = i << 8
        for _ in range(8):
            c = ((c << 1) ^ 0x8005) if c & 0x8000 else (c << 1)
        t[i] = c & 0xFFFF
    return t


#: the byte table of CRC-16/BUYPASS (poly 0x8005, MSB first)
CRC_TABLE = _crc_table()

_TAU = types.Array(types.float64, 1, "A", readonly=True)
#: bytes as received (np.frombuffer of bytes: read-only)
BYTES = types.Array(types.uint8, 1, "C", readonly=True)

# numba takes a function's cache locator when it is decorated: the kernel files' stamp first
stamp_package_caches()
#: one process at a time compiles this module's kernels (released at the end of the module)
_gate = CompileGate(__file__)


@njit(cache=True, inline="always", error_model="numpy")
def crc16(buf, start, end, crc):
    """CRC-16 of Protocol 2.0 over ``buf[start:end]``, continuing from ``crc``."""
    t = CRC_TABLE
    for k in range(start, end):
        crc = ((crc << 8) & 0xFFFF) ^ t[((crc >> 8) ^ buf[k]) & 0xFF]
    return crc


@njit(cache=True, inline="always", error_model="numpy")
def round_half_even(x):
    """Python's ``round(x)`` of a finite float as a float (half to even)."""
    r = math.floor(x)
    d = x - r
    if d > 0.5 or (d == 0.5 and r % 2.0 != 0.0):
        r += 1.0
    return r


@njit(cache=True, inline="always", error_model="numpy")
def le_int(buf, at, size):
    """The signed little-endian integer of ``size`` bytes (1, 2 or 4) at ``buf[at]``."""
    v = np.int64(0)
    for k in range(size - 1, -1, -1):
        v = (v << 8) | np.int64(buf[at + k])
    top = np.int64(1) << (8 * size - 1)
    return v - 2 * top if v >= top else v


@njit(cache=True, inline="always", error_model="numpy")
def broadcast_header(out):
    """The header and the broadcast ID (``FF FF FD 00 FE``) at the start of ``out``."""
    out[0] = 0xFF
    out[1] = 0xFF
    out[2] = 0xFD
    out[3] = 0x00
    out[4] = 0xFE


@njit(cache=True, error_model="numpy")
def frame_body(out, at, n_body):
    """The packet whose header and ID are at ``out[at:at + 5]`` and whose instruction and
    parameters are ``out[at + 7:at + 7 + n_body]``: the body stuffed in place (``FF FF FD`` ->
    ``FF FF FD FD``), the length field and the CRC written; returns the packet's length (0: it
    does not fit ``out``)."""
    b0 = at + 7
    # count the stuffed bytes, then move the body from its end
    extra = 0
    for k in range(b0 + 2, b0 + n_body):
        if out[k] == 0xFD and out[k - 1] == 0xFF and out[k - 2] == 0xFF:
            extra += 1
    total = 7 + n_body + extra + 2
    if at + total > out.shape[0]:
        return 0
    if extra:
        src = b0 + n_body - 1
        dst = src + extra
        while src >= b0:
            b = out[src]
            # a byte FD after FF FF in the original body gets its copy
            if b == 0xFD and src - 2 >= b0 and out[src - 1] == 0xFF and out[src - 2] == 0xFF:
                out[dst] = 0xFD
                dst -= 1
            out[dst] = b
            dst -= 1
            src -= 1
    length = n_body + extra + 2
    out[at + 5] = length & 0xFF
    out[at + 6] = length >> 8
    end = at + total
    c = crc16(out, at, end - 2, 0)
    out[end - 2] = c & 0xFF
    out[end - 1] = c >> 8
    return total


@njit(types.UniTuple(types.int64, 2)(_TAU, types.float64[:, ::1], types.int64[::1], types.int64[::1],
                                     types.uint8[::1]), cache=True, error_model="numpy")
def encode_goal_current(tau, C, lim, ids, out):
    """The Sync Write of Goal Current of joint torques ``tau`` into ``out``.

    Parameters
    ----------
    tau : ndarray, shape (n,)
        Joint torques [N m].
    C : ndarray, shape (C_ROWS, n)
        Per-servo constants (rows ``C_*``).
    lim : ndarray of int64, shape (n,)
        Each servo's Goal Current clamp [LSB].
    ids : ndarray of int64, shape (n,)
        The servos' IDs, in joint order.
    out : ndarray of uint8
        The packet's buffer (at least ``14 + 2 * (3n + 4)`` bytes).

    Returns
    -------
    (int, int)
        The packet's length in ``out`` and the servos saturated; ``(-1, 0)`` for a torque that
        is not finite or a vector of another length (nothing to trust in ``out``).
    """
    n = ids.shape[0]
    if tau.shape[0] != n:
        return -1, 0
    sat = 0
    broadcast_header(out)
    out[7] = 0x83
    out[8] = 102
    out[9] = 0
    out[10] = 2
    out[11] = 0
    k = 12
    for j in range(n):
        t = tau[j]
        if not math.isfinite(t):
            return -1, 0
        x = C[C_SIGN, j] * t / C[C_GE, j] / C[C_KT, j] / C[C_ALSB, j]
        if not math.isfinite(x):
            return -1, 0
        m = lim[j]
        if abs(x) > 2.0 * m + 2.0:            # beyond any rounding question: the clamp
            v = m if x > 0 else -m
            sat += 1
        else:
            v = int(round_half_even(x))
            if abs(v) > m:
                v = m if v > 0 else -m
                sat += 1
        u = v & 0xFFFF
        out[k] = ids[j]
        out[k + 1] = u & 0xFF
        out[k + 2] = u >> 8
        k += 3
    total = frame_body(out, 0, k - 7)
    if total == 0:
        return -1, 0
    return total, sat


#: :func:`decode_fast_status` return codes besides the count of segments
DEC_DECLINED = -1


@njit(types.UniTuple(types.int64, 3)(BYTES, types.int64, types.int64[::1], types.float64[:, ::1],
                                     types.float64[::1], types.float64[::1], types.float64[::1],
                                     types.boolean[::1], types.int64[::1], types.int64[::1]),
      cache=True, error_model="numpy")
def decode_fast_status(raw, seg_data, slot_of, C, q, qd, tau, fresh, err, order):
    """Decode a Fast Sync Read status packet of ``seg_data`` bytes per servo.

    Parameters
    ----------
    raw : ndarray of uint8
        The packet, header to CRC (its length is the array's).
    seg_data : int
        Data bytes per segment (10: the present block).
    slot_of : ndarray of int64, shape (256,)
        The joint of each ID (-1: not ours).
    C : ndarray, shape (C_ROWS, n)
    q, qd, tau : ndarray, shape (n,)
        The driver's joint values: those of the servos that answered without an error number
        are written.
    fresh : ndarray of bool, shape (n,)
        Written: whether the joint got a value.
    err : ndarray of int64, shape (n,)
        Written: the segment's error field (-1: no segment).
    order : ndarray of int64, shape (n,)
        Written: the joints in the order of their segments.

    Returns
    -------
    (int, int, int)
        The number of segments, of status errors (a non-zero error number) and of alerts
        (bit 7 without an error number); ``(DEC_DECLINED, 0, 0)`` and nothing written when the
        packet is not a whole, valid Fast Sync Read status of known, distinct IDs.
    """
    n = q.shape[0]
    total = raw.shape[0]
    if seg_data != 10:
        return DEC_DECLINED, 0, 0
    seg = seg_data + 4
    if total < 8 + seg or raw[0] != 0xFF or raw[1] != 0xFF or raw[2] != 0xFD or raw[3] != 0 or raw[4] != 0xFE:
        return DEC_DECLINED, 0, 0
    if 7 + (raw[5] | (raw[6] << 8)) != total or raw[7] != 0x55 or (total - 8) % seg:
        return DEC_DECLINED, 0, 0
    if crc16(raw, 0, total - 2, 0) != (raw[total - 2] | (raw[total - 1] << 8)):
        return DEC_DECLINED, 0, 0
    k_seg = (total - 8) // seg
    if k_seg > n:
        return DEC_DECLINED, 0, 0
    # every inner CRC and ID first: nothing is written for a packet the Python path treats otherwise
    running = 0
    start = 0
    for k in range(k_seg):
        end = 8 + (k + 1) * seg
        running = crc16(raw, start, end - 2, running)
        if running != (raw[end - 2] | (raw[end - 1] << 8)):
            return DEC_DECLINED, 0, 0
        start = end - 2
        j = slot_of[raw[8 + k * seg + 1]]
        if j < 0:
            return DEC_DECLINED, 0, 0
        for m in range(k):
            if order[m] == j:
                return DEC_DECLINED, 0, 0
        order[k] = j
    for j in range(n):
        fresh[j] = False
        err[j] = -1
    n_err = 0
    n_alert = 0
    for k in range(k_seg):
        base = 8 + k * seg
        j = order[k]
        e = raw[base]
        err[j] = e
        if e & 0x7F:
            n_err += 1
            continue
        if e & 0x80:
            n_alert += 1
        d = base + 2
        c = le_int(raw, d, 2)
        v = le_int(raw, d + 2, 4)
        p = le_int(raw, d + 6, 4)
        sign = C[C_SIGN, j]
        gear = C[C_GEAR, j]
        q[j] = sign * (p * POSITION_RAD_PER_PULSE) / gear + C[C_OFF, j]
        qd[j] = sign * (v * VELOCITY_RAD_S_PER_LSB) / gear
        tau[j] = sign * (c * C[C_ALSB, j] * C[C_KT, j]) * gear * C[C_EFF, j]
        fresh[j] = True
    return k_seg, n_err, n_alert


_gate.release()
