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

from dynamics._kernel_cache import stamp_package_caches

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
    c0 = s * t_m * g * K[K_EFF]
    c1 = kp_m * g2e
    c2 = kd_m * g2e
    c3 = s * (p_m + zero_m) / g + off
    c4 = s * v_m / g
    total = c0 + c1 + c2 + c3 + c4
    if not total - total == 0.0:
        return ST_BAD_COMMAND, 0
    cmd[0, j] = c0
    cmd[1, j] = c1
    cmd[2, j] = c2
    cmd[3, j] = c3
    cmd[4, j] = c4
    status = ST_GAINS if (c1 != 0.0 or c2 != 0.0) else ST_OK
    qj = q[j]
    if quantum > 0.0:
        x = qj / quantum
        qj = math.copysign(np.rint(x), x) * quantum
    fp = _field(s * (qj - off) * g - zero_m, p_lo, p_max, 0xFFFF)
    fv = _field(s * qd[j] * g, v_lo, v_max, 0xFFF)
    ft = _field(s * tau[j] / K[K_GE], t_lo, t_max, 0xFFF)
    if fp < 0 or fv < 0 or ft < 0:
        return status | ST_BAD_MEASUREMENT, 0
    return status, (fp << 24) | (fv << 12) | ft
