"""Compiled cycle of :class:`drivers.follow.TorqueFollow` (the torque-only drives' follow check).

:func:`torque_check` does in one compiled call what the check did per joint in Python: take
the cycle's feedback vectors and the torques sent, keep the fresh replies with a finite torque
(their velocity as :func:`numpy.nan_to_num` would give it), tell whether each reply repeats the
last one kept, run the rule (:func:`follow_step`, compiled from :func:`drivers._follow_rule.follow_step`,
its one source) and write the latched codes into the feedback's fault vector.

Imported by :class:`~drivers.follow.TorqueFollow` when one is built, not by the driver
modules: importing a torque-only driver loads no numba (``tests/test_layering.py``).
"""

from __future__ import annotations

import math
import sys

from numba import njit, types

from dynamics._kernel_cache import stamp_package_caches

from . import _follow_rule
from ._follow_rule import HOST_FAULT_OFFSET, MI_CODE, MI_LAST

#: rows of the scratch array W (float64, (W_ROWS, n)): the step's replies (position, velocity,
#: torque), the commands it is given (p_des, v_des, kp, kd, t_ff: only t_ff is not zero), the
#: reply kept last (position, velocity, torque) for the "same reply" test
W_P, W_V, W_T, W_CMD, W_LP, W_LV, W_LT = 0, 1, 2, 3, 8, 9, 10
W_ROWS = 11

_FMAX = sys.float_info.max

#: the feedback's vectors and the torques as the caller gives them: any layout, read-only or not
_F1 = types.Array(types.float64, 1, "A", readonly=True)
_B1 = types.Array(types.boolean, 1, "A", readonly=True)

# numba takes a function's cache locator when it is decorated: the kernel files' stamp first
stamp_package_caches()

#: the rule (drivers.follow.follow_step), compiled for this module's kernel
follow_step = njit(cache=True, error_model="numpy")(_follow_rule.follow_step)


@njit(types.boolean(types.float64[:, ::1], types.int64[:, ::1], types.float64[:, ::1], types.int64[::1],
                 types.boolean[::1], types.float64, types.float64, types.int64, types.int64,
                 _F1, _B1, _F1, _F1, _F1, types.int64[::1]), cache=True, error_model="numpy")
def torque_check(M, MI, W, raw, ok, a, rel_tol, window, frozen, tau, fresh, q, qd, tau_cmd, fault):
    """One cycle of :meth:`drivers.follow.TorqueFollow.check`.

    Parameters
    ----------
    M, MI : ndarray
        The monitor's state (:class:`drivers.follow.FollowMonitor`'s ``_f`` and ``_i``).
    W : ndarray, shape (W_ROWS, n)
        Scratch and the reply kept last (rows ``W_*``).
    raw : ndarray of int64, shape (n,)
        Scratch: each reply's identity for the rule's "same reply" test: ``MI[MI_LAST]`` when
        the reply equals the one kept last (position, velocity and torque equal, a NaN position
        equal to a NaN one), another value otherwise.
    ok : ndarray of bool, shape (n,)
        Scratch: fresh replies with a finite torque.
    a : float
        The current loop's filter gain for this cycle (:meth:`~drivers.follow.FollowMonitor.gain`).
    rel_tol : float
    window, frozen : int
    tau, fresh, q, qd : ndarray, shape (n,)
        The feedback's torque, fresh flags, position and velocity (joint side).
    tau_cmd : ndarray, shape (n,)
        The joint torques sent.
    fault : ndarray of int64, shape (n,)
        The feedback's faults: a joint with none gets ``HOST_FAULT_OFFSET + code``.

    Returns
    -------
    bool
        False (and nothing done) when a vector is not of the monitor's length.
    """
    n = M.shape[1]
    if tau.shape[0] != n or fresh.shape[0] != n or q.shape[0] != n or qd.shape[0] != n \
            or tau_cmd.shape[0] != n or fault.shape[0] != n:
        return False
    for j in range(n):
        t = tau[j]
        W[W_CMD + 4, j] = tau_cmd[j]
        if fresh[j] and math.isfinite(t):
            p = q[j]
            v = qd[j]
            if not math.isfinite(v):                  # as numpy.nan_to_num: NaN 0, inf the largest
                v = 0.0 if v != v else math.copysign(_FMAX, v)
            ok[j] = True
            W[W_P, j] = p
            W[W_V, j] = v
            W[W_T, j] = t
            lp = W[W_LP, j]
            if (p == lp or (p != p and lp != lp)) and v == W[W_LV, j] and t == W[W_LT, j]:
                raw[j] = MI[MI_LAST, j]
            else:
                raw[j] = MI[MI_LAST, j] + 1
                W[W_LP, j] = p
                W[W_LV, j] = v
                W[W_LT, j] = t
        else:
            ok[j] = False
            W[W_P, j] = 0.0
            W[W_V, j] = 0.0
            W[W_T, j] = 0.0
            raw[j] = 0
    follow_step(M, MI, a, ok, W[W_P], W[W_V], W[W_T], raw, W[W_CMD:W_CMD + 5], rel_tol, window, frozen)
    for j in range(n):
        c = MI[MI_CODE, j]
        if c != 0 and fault[j] == 0:
            fault[j] = HOST_FAULT_OFFSET + c
    return True
