"""Compiled per-cycle work of :class:`drivers.cia402.Cia402Driver`, on plain arrays.

* :func:`encode_torques`: a cycle's joint torques to every drive's RPDO1 payload (controlword,
  target torque in per mille of the rated torque), with the operations of the driver's Python
  encoder (``Cia402Driver._rpdos``) in the same order: ``x = tau / ktau``, clamped to the
  drive's max torque 0x6072 (counted as saturated), else rounded to the nearest integer (half
  to even, as Python's ``round``), packed as ``codec.pack_rpdo1`` packs (``<Hh``).

Bit-for-bit equality with the Python encoder is tested (``tests/test_cia402.py``).  Nothing
here raises: a value the Python path refuses (a non-finite torque, a per mille value outside
INT16) is reported by the return value and the caller takes the Python path, which raises
the proper error.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from dynamics._kernel_cache import stamp_package_caches

stamp_package_caches()


@njit("i8(f8[::1], f8[::1], i8[::1], i8, u1[:, ::1])", cache=True, error_model="numpy")
def encode_torques(tau, ktau, limit, controlword, tx):
    """Every drive's RPDO1 payload of a command of torques.

    Parameters
    ----------
    tau : ndarray, shape (n,)
        Joint torques [N m].
    ktau : ndarray, shape (n,)
        Joint torque per per mille of each drive (sign x N m per per mille x gear x efficiency).
    limit : ndarray of int64, shape (n,)
        Each drive's max torque 0x6072 [per mille].
    controlword : int
        0..0xFFFF.
    tx : ndarray of uint8, shape (n, 4)
        Out: the payloads (controlword, target torque; little endian).

    Returns
    -------
    int
        The number of torques clamped to the max torque, or -1 (what was written is not valid)
        for a torque that is not finite or a target torque outside INT16.
    """
    n = tau.shape[0]
    sat = 0
    for j in range(n):
        t = tau[j]
        if not t - t == 0.0:
            return -1
        x = t / ktau[j]
        lim = limit[j]
        if x > lim:
            p = lim
            sat += 1
        elif x < -lim:
            p = -lim
            sat += 1
        else:
            p = int(np.rint(x))
        if not -0x8000 <= p <= 0x7FFF:
            return -1
        u = p & 0xFFFF
        tx[j, 0] = controlword & 0xFF
        tx[j, 1] = (controlword >> 8) & 0xFF
        tx[j, 2] = u & 0xFF
        tx[j, 3] = u >> 8
    return sat
