"""Compiled per-cycle encoding of :class:`drivers.odrive.OdriveCanDriver`: one call encodes
every axis' ``Set_Input_Torque`` frame of a command of torques only.

:func:`encode_set_input_torque` does, for all axes at once and on preallocated arrays, what
:meth:`drivers.odrive.OdriveCanDriver.make_commands` does per axis: the joint -> motor mapping
(``t_m = sign * tau / (gear * efficiency)``), the clamp to the axis' motor-side
``torque_limit_nm`` (counted as saturated), then :func:`drivers.codecs.odrive.encode_set_input_torque`
(little-endian float32, zero-padded to 8 bytes).  The same operands, operations and order, so
the same bytes (``tests/test_odrive_kernels.py`` compares them with the codec's, byte for
byte).  It never raises: a torque the codec would refuse (non-finite, or past float32's range
on the motor side) is reported by the return value, and the caller takes the Python path,
which raises the proper error.
"""

from __future__ import annotations

import numpy as np
from numba import njit, types

from dynamics._kernel_cache import stamp_package_caches

#: rows of the per-axis constants C (float64, (C_ROWS, n)): sign, gear ratio x efficiency,
#: motor-side torque limit [N m] (inf: none)
C_SIGN, C_GE, C_LIM = range(3)
C_ROWS = 3

#: the largest finite float32 (:data:`drivers.codecs.odrive._F32_MAX`)
F32_MAX = float(np.finfo(np.float32).max)

#: the torques as the caller gives them: any layout, read-only or not (a mutable array matches)
_TAU = types.Array(types.float64, 1, "A", readonly=True)

# numba takes a function's cache locator when it is decorated: the kernel files' stamp first
stamp_package_caches()


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
