"""Compiled per-cycle encoding and decoding of :class:`drivers.odrive.OdriveCanDriver`: one call
encodes every axis' ``Set_Input_Torque`` frame of a command of torques only; one call decodes a
received ``Get_Encoder_Estimates`` frame into the axis' joint position and velocity.

:func:`encode_set_input_torque` does, for all axes at once and on preallocated arrays, what
:meth:`drivers.odrive.OdriveCanDriver.make_commands` does per axis: the joint -> motor mapping
(``t_m = sign * tau / (gear * efficiency)``), the clamp to the axis' motor-side
``torque_limit_nm`` (counted as saturated), then :func:`drivers.codecs.odrive.encode_set_input_torque`
(little-endian float32, zero-padded to 8 bytes).  The same operands, operations and order, so
the same bytes (``tests/test_odrive_kernels.py`` compares them with the codec's, byte for
byte).  It never raises: a torque the codec would refuse (non-finite, or past float32's range
on the motor side) is reported by the return value, and the caller takes the Python path,
which raises the proper error.

:func:`decode_encoder_estimates` does what the driver's Python path does with such a frame
(:func:`drivers.codecs.odrive.decode_encoder_estimates`, then the motor -> joint mapping
``q = sign * 2 pi * pos / gear + offset``, ``qd = sign * 2 pi * vel / gear``), the same operations
in the same order, so the same values to the bit; a frame the codec refuses (shorter than 8
bytes, a non-finite value) is reported by the return value, nothing written, and the caller takes
the Python path (its DecodeError).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, types

from dynamics._kernel_cache import CompileGate, stamp_package_caches
from dynamics._numba_entry import direct_entry  # noqa: F401 (the driver calls it as _ok.direct_entry)

#: rows of the per-axis constants C (float64, (C_ROWS, n)): sign, gear ratio x efficiency,
#: motor-side torque limit [N m] (inf: none), gear ratio, offset [rad], torque constant [N m/A],
#: efficiency
C_SIGN, C_GE, C_LIM, C_GEAR, C_OFF, C_KT, C_EFF = range(7)
C_ROWS = 7

_TWO_PI = 2.0 * math.pi

#: the largest finite float32 (:data:`drivers.codecs.odrive._F32_MAX`)
F32_MAX = float(np.finfo(np.float32).max)

#: the torques as the caller gives them: any layout, read-only or not (a mutable array matches)
_TAU = types.Array(types.float64, 1, "A", readonly=True)

# numba takes a function's cache locator when it is decorated: the kernel files' stamp first
stamp_package_caches()
#: one process at a time compiles this module's kernels (released at the end of the module)
_gate = CompileGate(__file__)


@njit(types.int64(_TAU, types.float64[:, ::1], types.float32[:, ::1]), cache=True, error_model="numpy")
def encode_set_input_torque(tau, C, tx):
    """Encode every axis' ``Set_Input_Torque`` payload of joint torques ``tau``.

    Parameters
    ----------
    tau : ndarray, shape (n,)
        Joint torques [N m] (forces [N] on prismatic joints).
    C : ndarray, shape (C_ROWS, n)
        Per-axis constants (see the rows above).
    tx : ndarray of float32, shape (n, 2)
        Out: the payloads, as float32 pairs (a view of an (n, 8) uint8 buffer on a
        little-endian machine): the motor torque [N m], then 0.0 (the four zero pad bytes).

    Returns
    -------
    int
        The number of torques clamped to an axis' limit, or -1 (``tx`` is not to be used) when
        a torque, or its motor-side value, is not finite or past float32's range.
    """
    n = tau.shape[0]
    for j in range(n):
        t_m = C[C_SIGN, j] * tau[j] / C[C_GE, j]
        if not (t_m - t_m == 0.0):          # NaN or inf (a NaN torque gives NaN here too)
            return -1
    saturated = 0
    for j in range(n):
        t_m = C[C_SIGN, j] * tau[j] / C[C_GE, j]
        lim = C[C_LIM, j]
        if abs(t_m) > lim:
            t_m = lim if t_m > 0.0 else -lim        # math.copysign(lim, t_m): t_m is not 0 here
            saturated += 1
        if abs(t_m) > F32_MAX:
            return -1
        tx[j, 0] = np.float32(t_m)
        tx[j, 1] = np.float32(0.0)
    return saturated


#: a received payload as the transport gives it (``bytes``)
_PAYLOAD = types.Bytes(types.uint8, 1, "C", readonly=True)


@njit(cache=True, inline="always", error_model="numpy")
def _two_floats(data):
    """``(ok, a, b)``: the two little-endian float32 a feedback payload starts with, as float64;
    ``ok`` False (the codec raises DecodeError) when it is shorter than 8 bytes or either value is
    not finite."""
    if len(data) < 8:
        return False, 0.0, 0.0
    v = np.frombuffer(data, dtype=np.uint8)[:8].copy().view(np.float32)
    a = np.float64(v[0])
    b = np.float64(v[1])
    return a - a == 0.0 and b - b == 0.0, a, b


# an explicit signature: compiled (or loaded) at import, before any clock starts
@njit(types.boolean(_PAYLOAD, types.float64[:, ::1], types.int64, types.float64[::1], types.float64[::1]),
      cache=True, error_model="numpy")
def decode_encoder_estimates(data, C, j, q, qd):
    """Decode a ``Get_Encoder_Estimates`` payload of axis ``j`` into its joint's feedback.

    Parameters
    ----------
    data : bytes
        The frame's payload (8 bytes or more: two little-endian float32, position [turn] and
        velocity [turn/s]; longer frames are accepted, as by the codec).
    C : ndarray, shape (C_ROWS, n)
        Per-axis constants (see the rows above).
    j : int
        The axis.
    q, qd : ndarray, shape (n,)
        Out: element ``j`` gets the joint position [rad] (prismatic: [m]) and velocity.

    Returns
    -------
    bool
        Whether ``q[j]`` and ``qd[j]`` were written (False: shorter than 8 bytes or a
        non-finite value; nothing written).
    """
    ok, pos, vel = _two_floats(data)
    if not ok:
        return False
    s = C[C_SIGN, j]
    g = C[C_GEAR, j]
    q[j] = s * _TWO_PI * pos / g + C[C_OFF, j]
    qd[j] = s * _TWO_PI * vel / g
    return True


# an explicit signature: compiled (or loaded) at import, before any clock starts
@njit(types.boolean(_PAYLOAD, types.float64[:, ::1], types.int64, types.boolean, types.float64[::1]),
      cache=True, error_model="numpy")
def decode_torque_feedback(data, C, j, iq, tau):
    """Decode a ``Get_Iq`` (``iq``) or ``Get_Torques`` payload of axis ``j`` into its joint torque.

    What the driver's Python path does with such a frame (:func:`drivers.codecs.odrive.decode_iq`
    or :func:`~drivers.codecs.odrive.decode_torques`, then ``sign * iq_measured_a *
    torque_constant_nm_per_a * gear_ratio * efficiency``, or ``sign * torque_estimate_nm *
    gear_ratio * efficiency``): the same operations in the same order, the same value to the bit.

    Parameters
    ----------
    data : bytes
        The frame's payload (8 bytes or more: two little-endian float32; ``Get_Iq``: set-point
        and measured current [A]; ``Get_Torques``: torque target and estimate [N m], motor side).
    C : ndarray, shape (C_ROWS, n)
        Per-axis constants (see the rows above).
    j : int
        The axis.
    iq : bool
        ``Get_Iq`` (the measured current times the torque constant) or ``Get_Torques`` (the
        estimate).
    tau : ndarray, shape (n,)
        Out: element ``j`` gets the joint torque [N m] (prismatic: force [N]).

    Returns
    -------
    bool
        Whether ``tau[j]`` was written (False: shorter than 8 bytes or a non-finite value in
        either field; nothing written, the codec's path raises its DecodeError).
    """
    ok, _a, b = _two_floats(data)
    if not ok:
        return False
    t = C[C_SIGN, j] * b
    if iq:
        t = t * C[C_KT, j]
    tau[j] = t * C[C_GEAR, j] * C[C_EFF, j]
    return True


#: what a payload of :func:`decode_feedback_run` is: ``Get_Encoder_Estimates``, ``Get_Iq``,
#: ``Get_Torques``
KIND_ESTIMATES, KIND_IQ, KIND_TORQUES = 0, 1, 2


# an explicit signature: compiled (or loaded) at import, before any clock starts
@njit(types.int64(_PAYLOAD, types.int64[::1], types.int64[::1], types.float64[:, ::1], types.float64[::1],
                  types.float64[::1], types.float64[::1], types.boolean[::1], types.boolean[::1],
                  types.boolean[::1]), cache=True, error_model="numpy")
def decode_feedback_run(data, axes, kinds, C, q, qd, tau, seen, fresh, done):
    """:func:`decode_encoder_estimates` (``KIND_ESTIMATES``) and :func:`decode_torque_feedback`
    (``KIND_IQ``: a ``Get_Iq``, ``KIND_TORQUES``: a ``Get_Torques``) of a run of 8-byte payloads, in
    order (a later frame of an axis overwrites an earlier one of its kind), by one call: the same
    values.

    Parameters
    ----------
    data : bytes
        The payloads one after the other (8 bytes each).
    axes, kinds : ndarray of int, shape (m,)
        Each payload's axis and ``KIND_*``.
    C, q, qd :
        As for :func:`decode_encoder_estimates`.
    seen : ndarray of bool, shape (n,)
        Out: ``True`` for each payload's axis (a frame came from it, decoded or not).
    fresh : ndarray of bool, shape (n,)
        Out: ``True`` for each axis whose estimates were written.
    tau : ndarray, shape (n,)
        Out: the joint torque of each torque feedback decoded.
    done : ndarray of bool, shape (m,) or longer
        Out: whether each payload was decoded (False: not finite, nothing written for it).

    Returns
    -------
    int
        The number of payloads not decoded.
    """
    m = axes.shape[0]
    v = np.frombuffer(data, dtype=np.uint8)[:8 * m].copy().view(np.float32)
    declined = 0
    for k in range(m):
        j = axes[k]
        seen[j] = True
        a = np.float64(v[2 * k])
        b = np.float64(v[2 * k + 1])
        if not (a - a == 0.0 and b - b == 0.0):
            done[k] = False
            declined += 1
            continue
        done[k] = True
        kind = kinds[k]
        if kind == KIND_ESTIMATES:
            s = C[C_SIGN, j]
            g = C[C_GEAR, j]
            q[j] = s * _TWO_PI * a / g + C[C_OFF, j]
            qd[j] = s * _TWO_PI * b / g
            fresh[j] = True
        else:
            t = C[C_SIGN, j] * b
            if kind == KIND_IQ:
                t = t * C[C_KT, j]
            tau[j] = t * C[C_GEAR, j] * C[C_EFF, j]
    return declined


_gate.release()
