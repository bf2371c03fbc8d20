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
   nearest, clamped to +-0x7FFF), as the emulator's readers compute them.

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
R_LIMIT, R_POSITION, R_VELOCITY, R_TORQUE, R_DEMAND = range(5)
R_SIZE = 5

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


@njit("i8(f8[:, ::1], i8[::1], i8[::1], f8[:, ::1], f8[::1], f8[::1], f8[::1], i8[:, ::1], f8[::1])",
      cache=True, error_model="numpy")
def cia402_sync(K, joints, tl, cmd, q, qd, tau, res, tau_cmd):
    """The SYNC of ``n`` drives in OPERATION ENABLED, CST (see the module docstring).

    Parameters
    ----------
    K : ndarray, shape (n, K_SIZE)
        Per drive: sign, gear ratio, efficiency, offset [rad] of its mapping; rad per count,
        rad/s per count/s and N m per per mille of its units; its joint encoder's step [rad]
        (0: none).
    joints : ndarray of int64, shape (n,)
        Each drive's plant joint.
    tl : ndarray of int64, shape (2 n,)
        Each drive's target torque 0x6071 (INT16) and max torque 0x6072 (UINT16) [per mille],
        drive after drive.
    cmd : ndarray, shape (5, n_joints)
        The plant's held command (rows tau_ff [N m], kp, kd, q_ref, qd_ref); the drives'
        columns are written (torque, zero gains and references) when the call succeeds.
    q, qd, tau : ndarray, shape (n_joints,)
        The plant's joint positions [rad], velocities [rad/s] and applied torques [N m].
    res : ndarray of int64, shape (n, R_SIZE)
        Out: internal limit active (0/1), position 0x6064, velocity 0x606C, torque actual
        0x6077, torque demand 0x6074 (the order of the emulator's TPDO values, whose first is
        the statusword).
    tau_cmd : ndarray, shape (n,)
        Out: each drive's joint command [N m].

    Returns
    -------
    int
        :data:`ST_OK`, or :data:`ST_FALLBACK` (nothing written to ``cmd``).
    """
    n = joints.shape[0]
    for i in range(n):
        j = joints[i]
        s = K[i, K_SIGN]
        g = K[i, K_GEAR]
        eff = K[i, K_EFF]
        npp = K[i, K_NM_PER_PERMILLE]
        # the demand and the joint command
        tg = tl[2 * i]
        lim = tl[2 * i + 1]
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
    return ST_OK


_gate.release()
