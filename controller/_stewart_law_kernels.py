"""Compiled task-space laws of the Gough-Stewart platform, on plain arrays.

The laws of :class:`controller.laws.TaskComputedTorque` and :class:`controller.laws.TaskPDGravity`
for an exact :class:`dynamics.stewart.StewartPlatform` controller model, built from the model's
own one-state kernels (:mod:`dynamics._stewart_kernels`: ``fk_one``, ``task_jacobian_one``,
``task_id_one``, ``bias_one``, ``rotation``, ``euler_rate_one``) and the law pieces of
:mod:`controller._law_kernels` (the orientation error, the PD acceleration, the conditional
integration, friction and saturation).  The Python law calls these kernels, and so does the
compiled offline loop (:mod:`controller._fast_loop_stewart`), so both compute the same numbers.

This module is apart from :mod:`controller._law_kernels` because importing the Stewart kernels
costs ~0.3 s (their explicit signatures compile or load at import): it is imported only when
a law gets a Stewart model.

Pose ``X = (x, y, z [m], alpha, beta, gamma [rad])`` with ``R = Rz(gamma) Ry(beta) Rx(alpha)``
(platform -> base), ``Xd`` its rates (Euler-angle rates, not the angular velocity); leg
lengths ``q`` [m], leg forces ``tau`` [N].  The laws return a status: 0, or non-zero for a
step they decline (a non-finite input, FK failure, a singular or badly conditioned pose...):
the Python law then takes its numpy path, which raises the model's own error.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from dynamics._kernel_cache import stamp_package_caches
from dynamics._stewart_kernels import bias_one, euler_rate_one, fk_one, rotation, task_id_one, task_jacobian_one

from ._law_kernels import (ST_NONFINITE_INPUT, _finite, _finite_inputs, add_matvec, compensate_friction,
                           limit_torque, matvec, orientation_error, pd_acceleration, task_torque_with_integrator)


# numba takes a function's cache locator when it is decorated: the kernel files' stamp first
stamp_package_caches()


@njit(cache=True, error_model="numpy")
def stewart_task_error(X_d, X, e, ws):
    """The 6-DOF task error ``X_d (-) X`` into ``e`` (6,) (:func:`controller.laws.task_error` with
    ``dynamics.stewart.rotation_matrix`` and its closed-form ``euler_rate_matrix``): position
    difference [m], orientation error ``E(X)^-1 w`` [rad] with ``w`` the rotation vector of
    ``R_d R^T``.  ``ws`` (>= 27,) work.  Returns the status of :func:`orientation_error`."""
    Rd = ws[0:9].reshape((3, 3))
    R = ws[9:18].reshape((3, 3))
    E = ws[18:27].reshape((3, 3))
    for i in range(3):
        e[i] = X_d[i] - X[i]
    rotation(X_d[3:6], Rd)
    rotation(X[3:6], R)
    euler_rate_one(np.ascontiguousarray(X[3:6]), E)
    return orientation_error(Rd, R, E, e[3:6])


@njit(cache=True, error_model="numpy")
def _stewart_measure(P, q, qd, pose_prev, X, Jx, Xd):
    """Measured pose ``X`` (6,) by FK warm-started at ``pose_prev`` (``fk_one``: 1e-12 m, 50
    iterations, as ``forward_kinematics_task``), task Jacobian ``Jx`` (6, 6) (``task_jacobian_one``)
    and pose rate ``Xd = J_x qd`` (6,).  Returns the model status."""
    st = fk_one(q, pose_prev, P, 1e-12, 50, X)
    if st != 0:
        return st
    st = task_jacobian_one(q, X, P, Jx)
    if st != 0:
        return st
    matvec(Jx, qd, Xd)
    return 0


@njit(cache=True, error_model="numpy")
def _stewart_torque_of(args, a, tau, mask):
    """Saturated leg forces for the commanded task acceleration ``a`` (6,): the model's task
    inverse dynamics at the measured pose and rate (``task_id_one``) plus friction at the
    measured leg rates.  Returns (status, any saturated)."""
    P, X, Xd, fric, fmode, qd, has_sat, sat_lim, tau_raw = args
    st = task_id_one(X, Xd, a, P, tau_raw)
    if st != 0:
        return st, False
    compensate_friction(tau_raw, fric, fmode, qd, qd)
    return 0, limit_torque(tau_raw, has_sat, sat_lim, tau, mask)


@njit(cache=True, error_model="numpy")
def stewart_task_computed_torque(P, q, qd, pose_prev, ref_pos, ref_vel, ref_acc, kp, kd, ki, has_ki,
                                 z, dt, z_limit, fric, fmode, has_sat, sat_lim, X, e, tau, mask, z_out):
    """One step of :class:`controller.laws.TaskComputedTorque` for a Stewart platform model.

    Parameters
    ----------
    P : (N_PARAMS,) packed model parameters (``StewartPlatform._params``).
    q, qd : (6,) measured leg lengths [m] and rates [m/s].
    pose_prev : (6,) FK warm start (the previous pose).
    ref_pos, ref_vel, ref_acc : (6,) task reference (pose, Euler rates, second rates).
    kp, kd, ki : (6, 6) gains [1/s^2], [1/s], [1/s^3]; has_ki : integral action on.
    z : (6,) integrator state [m s | rad s]; dt : time since its last commit [s] (0 at the
        first step); z_limit : (6,) bound on the integrator (inf: none).
    fric : (2, 6) viscous, Coulomb coefficients of the model; fmode : FRICTION_NONE or
        FRICTION_MEASURED.
    has_sat, sat_lim : the controller's own saturation and its limits (6,) [N].

    Outputs (written): X (6,) pose, e (6,) task error, tau (6,) leg forces [N], mask (6,)
    saturated actuators, z_out (6,) integrator state to commit (``z`` when frozen or off).

    Returns
    -------
    int
        0, :data:`~controller._law_kernels.ST_NONFINITE_INPUT`, or the status of the step
        that failed (nothing is valid then).
    """
    if not (_finite_inputs(q, qd, ref_pos, ref_vel) and _finite(ref_acc)):
        return ST_NONFINITE_INPUT
    ws = np.empty(36 + 6 * 5 + 27)
    Jx = ws[0:36].reshape((6, 6))
    Xd = ws[36:42]
    a = ws[42:48]
    a2 = ws[48:54]
    zc = ws[54:60]
    tau_raw = ws[60:66]
    st = _stewart_measure(P, q, qd, pose_prev, X, Jx, Xd)
    if st != 0:
        return st
    st = stewart_task_error(ref_pos, X, e, ws[66:93])
    if st != 0:
        return st
    pd_acceleration(ref_acc, ref_vel, Xd, e, kp, kd, a)
    return task_torque_with_integrator(_stewart_torque_of, (P, X, Xd, fric, fmode, qd, has_sat, sat_lim, tau_raw),
                                       a, e, ki, has_ki, z, dt, z_limit, tau, mask, z_out, a2, zc)


@njit(cache=True, error_model="numpy")
def stewart_task_pd_gravity(P, q, qd, pose_prev, ref_pos, ref_vel, kp, kd, fric, fmode, has_sat, sat_lim,
                            X, e, tau, mask):
    """One step of :class:`controller.laws.TaskPDGravity` for a Stewart platform model.

    ``X = FK(q)`` warm-started at ``pose_prev``, ``Xd = J_x qd``, ``e = X_d (-) X``
    (:func:`stewart_task_error`), ``tau = sat(J_x^T (Kp e + Kd (Xd_d - Xd)) + g + friction(qd))``
    with ``g`` the model's bias at zero leg rate with the pose hint ``X`` (``bias_one``).

    Parameters
    ----------
    P : (N_PARAMS,) packed model parameters (``StewartPlatform._params``).
    q, qd : (6,) measured leg lengths [m] and rates [m/s].
    pose_prev : (6,) FK warm start (the previous pose).
    ref_pos, ref_vel : (6,) task reference (pose and Euler rates).
    kp, kd : (6, 6) task gains (position rows [N/m], [N s/m]; angle rows [N m/rad], [N m s/rad]).
    fric : (2, 6) viscous, Coulomb coefficients; fmode : FRICTION_NONE or FRICTION_MEASURED.
    has_sat, sat_lim : the controller's own saturation and its limits (6,) [N].

    Outputs (written): X (6,) pose, e (6,) task error, tau (6,) leg forces [N], mask (6,)
    saturated actuators.

    Returns
    -------
    int
        0, :data:`~controller._law_kernels.ST_NONFINITE_INPUT`, or the status of the step
        that failed (nothing is valid then).
    """
    if not _finite_inputs(q, qd, ref_pos, ref_vel):
        return ST_NONFINITE_INPUT
    ws = np.zeros(36 + 6 * 5 + 27)
    Jx = ws[0:36].reshape((6, 6))
    Xd = ws[36:42]
    F = ws[42:48]
    g = ws[48:54]
    tau_raw = ws[54:60]
    zero = ws[60:66]
    st = _stewart_measure(P, q, qd, pose_prev, X, Jx, Xd)
    if st != 0:
        return st
    st = bias_one(q, zero, X, P, g)
    if st != 0:
        return st
    st = stewart_task_error(ref_pos, X, e, ws[66:93])
    if st != 0:
        return st
    pd_acceleration(zero, ref_vel, Xd, e, kp, kd, F)          # the task wrench Kp e + Kd (Xd_d - Xd)
    add_matvec(g, Jx.T, F, tau_raw)                            # J_x^T F + g
    compensate_friction(tau_raw, fric, fmode, qd, qd)
    limit_torque(tau_raw, has_sat, sat_lim, tau, mask)
    return 0
