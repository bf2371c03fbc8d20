"""The follow rule's step (:func:`follow_step`), its state's layout and its fault codes.

The rule is stated in :mod:`drivers.follow` (which re-exports all of this); it lives in its own
module because it is a kernel source: :mod:`drivers._mit_kernels` and :mod:`drivers._follow_kernels`
compile :func:`follow_step` and read these constants, so a change here must drop their cached
machine code (``dynamics._kernel_cache.COMPILED_SOURCES``), while a change of the plain-Python
rest of :mod:`drivers.follow` need not.
"""

from __future__ import annotations

#: rows of the monitor's float state M (float64, (M_ROWS, n)) and int state MI (int64)
M_X, M_U, M_XLO, M_XHI, M_RESID, M_TOL, M_TMAX = range(7)
M_ROWS = 7
MI_BAD, MI_SAME, MI_LAST, MI_HAS_LAST, MI_CODE = range(5)
MI_ROWS = 5

#: measured torque (current) does not follow the commanded torque
FAULT_NOT_FOLLOWING = 0x100
#: replies repeat while the command changes
FAULT_FROZEN = 0x101


def follow_step(M, MI, a, fresh, p, v, t_meas, raw, cmd, rel_tol, window, frozen):
    """One cycle of :class:`drivers.follow.FollowMonitor` (that module's docstring states the rule);
    plain Python, compiled as it is for the MIT driver's cycle (:data:`drivers._mit_kernels.follow_step`)
    and the torque-only drives' (:data:`drivers._follow_kernels.follow_step`).

    Parameters
    ----------
    M : ndarray, shape (M_ROWS, n)
        The monitor's float state (expected torque, last command's clamped torque, the range of
        the expectation over identical replies, the residual) and constants (tolerance, torque
        range), motor side [N m].
    MI : ndarray of int64, shape (MI_ROWS, n)
        Its counters, the last raw reply and the latched codes.
    a : float
        The current loop's filter gain for this cycle's time step.
    fresh : ndarray of bool, shape (n,)
        Whether motor j answered this cycle.
    p, v, t_meas : ndarray, shape (n,)
        This cycle's replies, motor side [rad, rad/s, N m] (read where fresh).
    raw : ndarray of int64, shape (n,)
        The replies' raw fields (compared for equality).
    cmd : ndarray, shape (5, n)
        The commands sent this cycle, motor side (p_des, v_des, kp, kd, t_ff).
    rel_tol : float
    window, frozen : int
    """
    n = M.shape[1]
    for j in range(n):
        # the reply to this cycle's command shows the current driven by the previous one
        x = M[M_X, j] + a * (M[M_U, j] - M[M_X, j])
        M[M_X, j] = x
        t_ff = cmd[4, j]
        if not fresh[j]:
            # no state to evaluate the drive's PD with: assume it sees the target
            u = t_ff
        else:
            u = t_ff + cmd[2, j] * (cmd[0, j] - p[j]) + cmd[3, j] * (cmd[1, j] - v[j])
            if MI[MI_CODE, j] == 0:
                tol = M[M_TOL, j]
                r = t_meas[j] - x
                M[M_RESID, j] = r
                if abs(r) > tol + rel_tol * abs(x):
                    MI[MI_BAD, j] += 1
                    if MI[MI_BAD, j] >= window:
                        MI[MI_CODE, j] = FAULT_NOT_FOLLOWING
                else:
                    MI[MI_BAD, j] = 0
                if MI[MI_CODE, j] == 0:
                    if MI[MI_HAS_LAST, j] != 0 and raw[j] == MI[MI_LAST, j]:
                        MI[MI_SAME, j] += 1
                        if x < M[M_XLO, j]:
                            M[M_XLO, j] = x
                        elif x > M[M_XHI, j]:
                            M[M_XHI, j] = x
                        if MI[MI_SAME, j] >= frozen and M[M_XHI, j] - M[M_XLO, j] > tol:
                            MI[MI_CODE, j] = FAULT_FROZEN
                    else:
                        MI[MI_LAST, j] = raw[j]
                        MI[MI_HAS_LAST, j] = 1
                        MI[MI_SAME, j] = 1
                        M[M_XLO, j] = x
                        M[M_XHI, j] = x
        tm = M[M_TMAX, j]
        M[M_U, j] = tm if u > tm else -tm if u < -tm else u


#: added to :data:`FAULT_NOT_FOLLOWING` / :data:`FAULT_FROZEN` in the fault word of a torque-only
#: drive (:class:`drivers.follow.TorqueFollow`): above every bit of the drives' own 32-bit error
#: words (an ODrive axis error 0x100 is DC_BUS_OVER_VOLTAGE), so a code is never read as the
#: drive's own
HOST_FAULT_OFFSET = 1 << 32
