"""Compiled pieces of the control laws, on plain arrays.

Each piece of a law is written once here and called from two places: the
Python controllers of :mod:`controller.laws` (hardware loop, lock-step loop,
any driver) and the compiled offline loop of :mod:`controller._fast_loop`.
The two paths therefore compute the same numbers to the last bit.

* :func:`wrap_angle`, :func:`planar_task_error`: the 3-DOF task error
  ``(x_d - x, y_d - y, wrap(phi_d - phi))``;
* :func:`rotation_vector`, :func:`solve3`, :func:`orientation_error`: the orientation part of
  the 6-DOF task error (rotation vector of ``R_d R^T`` mapped to angle rates by ``E^-1``),
  what :func:`controller.laws.rotation_error` and :func:`controller.laws.task_error` compute
  for every convention and the Stewart-platform laws of
  :mod:`controller._stewart_law_kernels` compute for theirs;
* :func:`matvec`, :func:`pd_acceleration`, :func:`add_matvec`: the commanded
  acceleration ``a = acc_d + Kd (vel_d - vel) + Kp e`` (+ ``Ki z``) with explicit
  summation order (numpy's ``@`` may use BLAS kernels with another order);
* :func:`clip`, :func:`integrator_candidate`, :func:`saturate`, :func:`limit_torque`,
  :func:`add_friction`, :func:`compensate_friction`, :func:`serial_gravity`;
* :func:`serial_computed_torque`: the joint-space computed-torque law of
  :class:`controller.laws.ComputedTorque` for an exact :class:`dynamics.serial.SerialModel`
  (mass matrix and bias by the model's own kernels, friction, saturation, conditional
  integration);
* :func:`rrr_task_computed_torque`: the whole task-space computed-torque law of
  :class:`controller.laws.TaskComputedTorque` for an exact
  :class:`dynamics.planar3rrr.Planar3RRR` controller model (FK warm start, task
  Jacobian, error, acceleration, inverse dynamics, friction, saturation,
  conditional integration);
* :func:`serial_pd_gravity`, :func:`rrr_pd_gravity`: :class:`controller.laws.PDGravity`
  for a serial chain (gravity by the model's kernels) and for the 3RRR (bias at zero
  joint rate with the FK pose hint);
* :func:`rrr_task_pd_gravity`: :class:`controller.laws.TaskPDGravity` for the 3RRR;
* :func:`pid`: :class:`controller.laws.PID` without a feed-forward or with the gravity
  of a serial chain;
* :func:`task_torque_with_integrator`: the conditional integration of the task-space
  computed-torque laws (3RRR here, Gough-Stewart platform in
  :mod:`controller._stewart_law_kernels`, which imports the Stewart kernels and is loaded
  only for a Stewart model).

The laws return a status; on any non-zero status the Python law takes its checked
path, which raises the model's own error (or returns what it returns for a
non-finite input).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from dynamics._kernel_cache import stamp_package_caches
from dynamics._planar3rrr_kernels import fk_newton_ws, jx_geo_ws, reduced_entry, tid_ws, WS_SIZE
from dynamics._serial_core import NW, _crba_core, _rnea_core

#: friction compensation modes of the compiled laws
FRICTION_NONE = 0
FRICTION_MEASURED = 1
FRICTION_DESIRED = 2
#: status of a law for a non-finite input (the Python path then reports it)
ST_NONFINITE_INPUT = 1
#: status of :func:`solve3` / :func:`orientation_error` for an exactly singular matrix
ST_SINGULAR = 1
#: the workspace of :func:`rrr_task_computed_torque_ws` [floats]: the model's (WS_SIZE + 12,),
#: then J_x (9,), Xd, a, a2, zc, tau_raw (3,) each
RRR_TCT_WS = WS_SIZE + 36


# numba takes a function's cache locator when it is decorated: the kernel files' stamp first
stamp_package_caches()


@njit(cache=True, error_model="numpy")
def wrap_angle(x):
    """Angle wrapped to (-pi, pi] [rad] (NaN stays NaN)."""
    return math.atan2(math.sin(x), math.cos(x))


@njit(cache=True, error_model="numpy")
def planar_task_error(X_d, X, e):
    """Planar pose error into ``e`` (3,): position difference, wrapped angle difference."""
    e[0] = X_d[0] - X[0]
    e[1] = X_d[1] - X[1]
    e[2] = wrap_angle(X_d[2] - X[2])


@njit(cache=True, error_model="numpy")
def rotation_vector(R_d, R, w):
    """Rotation vector ``theta * axis`` (base frame) of ``R_d R^T`` into ``w`` (3,) [rad].

    ``R_d``, ``R`` (3, 3) rotation matrices.  Exact for any error up to pi (the geodesic on
    SO(3)): ``w = theta / (2 sin theta) * vee(Re - Re^T)``; below 1e-6 rad ``vee(Re - Re^T) / 2``;
    within 1e-6 rad of pi the axis from the symmetric part ``(Re + I) / 2 ~ a a^T``.
    """
    Re = np.empty((3, 3))
    for i in range(3):
        for j in range(3):
            s = 0.0
            for k in range(3):
                s += R_d[i, k] * R[j, k]
            Re[i, j] = s
    c = clip(((Re[0, 0] + Re[1, 1] + Re[2, 2]) - 1.0) / 2.0, 1.0)
    theta = math.acos(c)
    w0 = Re[2, 1] - Re[1, 2]
    w1 = Re[0, 2] - Re[2, 0]
    w2 = Re[1, 0] - Re[0, 1]
    if theta < 1e-6:
        w[0], w[1], w[2] = 0.5 * w0, 0.5 * w1, 0.5 * w2
    elif math.pi - theta < 1e-6:
        i = 0                          # the largest diagonal entry of (Re + I) / 2 (first of ties)
        for k in range(1, 3):
            if (Re[k, k] + 1.0) / 2.0 > (Re[i, i] + 1.0) / 2.0:
                i = k
        d = math.sqrt(max((Re[i, i] + 1.0) / 2.0, 1e-300))
        for k in range(3):
            w[k] = theta * (((Re[k, i] + (1.0 if k == i else 0.0)) / 2.0) / d)
    else:
        f = theta / (2.0 * math.sin(theta))
        w[0], w[1], w[2] = f * w0, f * w1, f * w2


@njit(cache=True, error_model="numpy")
def solve3(A, b, x):
    """``x = A^-1 b`` (3, 3) by Gaussian elimination with partial pivoting; ``A``, ``b`` are
    not changed.  Returns :data:`ST_SINGULAR` when a pivot is exactly zero (as LAPACK's
    ``gesv``), else 0."""
    M = np.empty((3, 4))
    for i in range(3):
        for j in range(3):
            M[i, j] = A[i, j]
        M[i, 3] = b[i]
    for c in range(3):
        p = c
        for r in range(c + 1, 3):
            if abs(M[r, c]) > abs(M[p, c]):
                p = r
        if M[p, c] == 0.0:
            return ST_SINGULAR
        if p != c:
            for j in range(c, 4):
                t = M[c, j]
                M[c, j] = M[p, j]
                M[p, j] = t
        for r in range(c + 1, 3):
            f = M[r, c] / M[c, c]
            for j in range(c, 4):
                M[r, j] -= f * M[c, j]
    for i in range(2, -1, -1):
        s = M[i, 3]
        for j in range(i + 1, 3):
            s -= M[i, j] * x[j]
        x[i] = s / M[i, i]
    return 0


@njit(cache=True, error_model="numpy")
def orientation_error(R_d, R, E, out):
    """Orientation part of the 6-DOF task error into ``out`` (3,) [rad]: the rotation vector
    of ``R_d R^T`` (:func:`rotation_vector`) mapped to angle coordinates, ``out = E^-1 w``
    with ``E`` (3, 3) the Euler-rate matrix at the measured angles (``omega = E angles_dot``).
    Returns :data:`ST_SINGULAR` when ``E`` is singular, else 0."""
    w = np.empty(3)
    rotation_vector(R_d, R, w)
    return solve3(E, w, out)


@njit(cache=True, error_model="numpy")
def matvec(A, x, out):
    """``out = A x`` (row by row, left to right)."""
    for i in range(A.shape[0]):
        s = 0.0
        for j in range(A.shape[1]):
            s += A[i, j] * x[j]
        out[i] = s


@njit(cache=True, error_model="numpy")
def pd_acceleration(acc, vel, v_meas, e, kp, kd, a):
    """``a = acc + Kd (vel - v_meas) + Kp e`` (shapes (m,), gains (m, m))."""
    m = a.shape[0]
    for i in range(m):
        sd = 0.0
        sp = 0.0
        for j in range(m):
            sd += kd[i, j] * (vel[j] - v_meas[j])
            sp += kp[i, j] * e[j]
        a[i] = acc[i] + sd + sp


@njit(cache=True, error_model="numpy")
def add_matvec(a, K, z, out):
    """``out = a + K z``."""
    for i in range(a.shape[0]):
        s = 0.0
        for j in range(z.shape[0]):
            s += K[i, j] * z[j]
        out[i] = a[i] + s


@njit(cache=True, error_model="numpy")
def clip(v, lim):
    """``v`` clipped to ``[-lim, lim]`` (``np.clip``; ``lim`` inf: no bound; NaN propagates)."""
    if v < -lim:
        v = -lim
    if v > lim:
        v = lim
    return v


@njit(cache=True, error_model="numpy")
def integrator_candidate(z, e, dt, limit, out):
    """``out = clip(z + e dt, -limit, limit)`` (``limit`` inf: no bound; NaN propagates)."""
    for i in range(z.shape[0]):
        out[i] = clip(z[i] + e[i] * dt, limit[i])


@njit(cache=True, error_model="numpy")
def saturate(tau, limit, out, mask):
    """``out = clip(tau, -limit, limit)``, ``mask = |tau| > limit``; returns whether any is set."""
    anyset = False
    for i in range(tau.shape[0]):
        t = tau[i]
        lim = limit[i]
        s = abs(t) > lim
        mask[i] = s
        anyset = anyset or s
        out[i] = clip(t, lim)
    return anyset


@njit(cache=True, error_model="numpy", _nrt=False)
def limit_torque(tau_raw, has_sat, sat_lim, tau, mask):
    """The controller's own saturation, when it has one (``has_sat``), of ``tau_raw`` into ``tau``.

    Without one ``tau = tau_raw`` and ``mask`` is all False.  Returns whether any actuator
    saturated.
    """
    if has_sat:
        return saturate(tau_raw, sat_lim, tau, mask)
    for i in range(tau.shape[0]):
        tau[i] = tau_raw[i]
        mask[i] = False
    return False


@njit(cache=True, error_model="numpy")
def _finite(x):
    """Whether every entry of ``x`` is finite."""
    for i in range(x.shape[0]):
        v = x[i]
        if not (v == v) or v > 1e308 or v < -1e308:
            return False
    return True


@njit(cache=True, error_model="numpy")
def _sign(x):
    if x > 0.0:
        return 1.0
    if x < 0.0:
        return -1.0
    if x == 0.0:
        return 0.0
    return x        # NaN


@njit(cache=True, error_model="numpy")
def add_friction(tau, viscous, coulomb, v):
    """``tau += viscous v + coulomb sign(v)`` in place (``Model.friction_torque``)."""
    for i in range(tau.shape[0]):
        tau[i] = tau[i] + (viscous[i] * v[i] + coulomb[i] * _sign(v[i]))


@njit(cache=True, error_model="numpy", _nrt=False)
def compensate_friction(tau, fric, fmode, v_meas, v_des):
    """``tau +=`` the model's friction (``fric`` (2, n): viscous, Coulomb) at the measured
    velocity ``v_meas`` (``fmode`` FRICTION_MEASURED) or the desired one ``v_des``
    (FRICTION_DESIRED); nothing for FRICTION_NONE."""
    if fmode == FRICTION_MEASURED:
        add_friction(tau, fric[0], fric[1], v_meas)
    elif fmode == FRICTION_DESIRED:
        add_friction(tau, fric[0], fric[1], v_des)


@njit(inline="always", error_model="numpy")
def _rrr_torque(P, X, Xd, a, branch, fric, fmode, qd, has_sat, sat_lim, tau_raw, tau, mask, ws):
    """tau = sat(ID(X, Xd, a) + friction); returns (status, any saturated).  ``ws``
    (>= WS_SIZE + 12,) work: the inverse dynamics' workspace and a zero wrench."""
    zero3 = ws[WS_SIZE + 9:WS_SIZE + 12]
    for i in range(3):
        zero3[i] = 0.0
    st = tid_ws(P, X, Xd, a, zero3, branch, tau_raw, ws)
    if st != 0:
        return st, False
    compensate_friction(tau_raw, fric, fmode, qd, qd)
    return 0, limit_torque(tau_raw, has_sat, sat_lim, tau, mask)


@njit(inline="always", error_model="numpy")
def _rrr_torque_of(args, a, tau, mask):
    """:func:`_rrr_torque` for the commanded task acceleration ``a`` (the torque function of
    :func:`task_torque_with_integrator`; ``args`` its other arguments)."""
    P, X, Xd, branch, fric, fmode, qd, has_sat, sat_lim, tau_raw, ws = args
    return _rrr_torque(P, X, Xd, a, branch, fric, fmode, qd, has_sat, sat_lim, tau_raw, tau, mask, ws)


@njit(inline="always", error_model="numpy")
def task_torque_with_integrator(torque, args, a, e, ki, has_ki, z, dt, z_limit, tau, mask, z_out, a2, zc):
    """The torques of a task-space computed-torque law with optional integral action and
    conditional integration (:class:`controller.laws.TaskComputedTorque`).

    ``torque(args, a, tau, mask) -> (status, any saturated)`` gives the saturated torques for
    a commanded task acceleration.  Without integral action ``tau = torque(a)``; with it the
    candidate ``zc = clip(z + e dt, z_limit)`` gives ``tau = torque(a + Ki zc)``, unless an
    actuator saturates: then ``tau = torque(a + Ki z)`` and the integrator keeps ``z``.

    Parameters
    ----------
    a, e : (m,) commanded task acceleration and task error; ki : (m, m); has_ki : integral on.
    z : (m,) integrator state [m s | rad s]; dt [s] since its last commit; z_limit : (m,).
    tau, mask : (n,) written: torques and saturated actuators; z_out : (m,) written: the state
        to commit; a2, zc : (m,) work.

    Returns
    -------
    int
        0, or the status of ``torque`` (nothing is valid then).
    """
    m = z.shape[0]
    if not has_ki:
        st, anys = torque(args, a, tau, mask)
        for i in range(m):
            z_out[i] = z[i]
        return st
    integrator_candidate(z, e, dt, z_limit, zc)
    add_matvec(a, ki, zc, a2)
    st, anys = torque(args, a2, tau, mask)
    if st != 0:
        return st
    if anys:
        # conditional integration: the integrator keeps its value while saturated
        add_matvec(a, ki, z, a2)
        st, anys = torque(args, a2, tau, mask)
        for i in range(m):
            z_out[i] = z[i]
        return st
    for i in range(m):
        z_out[i] = zc[i]
    return 0


@njit(inline="always", error_model="numpy")
def _rrr_measure(P, q, qd, pose_prev, X, Jx, Xd, ws):
    """Measured pose ``X`` (3,) by FK warm-started at ``pose_prev``, task Jacobian ``Jx`` (9,)
    row-major and pose rate ``Xd = J_x qd`` (3,); ``ws`` (>= WS_SIZE,) workspace.
    Returns the model status."""
    st, it = fk_newton_ws(P, q, pose_prev, 1e-12, 50, X, ws)
    if st != 0:
        return st
    st = jx_geo_ws(P, ws, Jx)             # the geometry at X is in ws after the solve
    if st != 0:
        return st
    for r in range(3):
        Xd[r] = Jx[3 * r] * qd[0] + Jx[3 * r + 1] * qd[1] + Jx[3 * r + 2] * qd[2]
    return 0


@njit(cache=True, error_model="numpy")
def rrr_task_computed_torque(P, branch, q, qd, pose_prev, ref_pos, ref_vel, ref_acc, kp, kd, ki, has_ki,
                             z, dt, z_limit, fric, fmode, has_sat, sat_lim,
                             X, e, tau, mask, z_out):
    """One step of :class:`controller.laws.TaskComputedTorque` for a 3RRR model.

    Parameters
    ----------
    P : (4, NL) packed model parameters (``Planar3RRR._P``); branch : (3,) elbow branches.
    q, qd : (3,) measured joint angles [rad] and rates [rad/s].
    pose_prev : (3,) FK warm start (the previous pose).
    ref_pos, ref_vel, ref_acc : (3,) task reference (x, y [m], phi [rad] and rates).
    kp, kd, ki : (3, 3) gains; has_ki : integral action on.
    z : (3,) integrator state; dt : time since its last commit [s] (0 at the first step);
    z_limit : (3,) bound on the integrator (inf: none).
    fric : (2, 3) viscous, Coulomb coefficients of the model; fmode : FRICTION_*.
    has_sat, sat_lim : the controller's own saturation and its limits (3,).

    Outputs (written): X (3,) pose, e (3,) task error, tau (3,) torques [N m],
    mask (3,) saturated actuators, z_out (3,) integrator state to commit
    (equal to ``z`` when the integrator is frozen or off).

    Returns
    -------
    int
        0, or the model status of the step that failed (nothing is valid then).
    """
    return rrr_task_computed_torque_ws(P, branch, q, qd, pose_prev, ref_pos, ref_vel, ref_acc, kp, kd, ki, has_ki,
                                       z, dt, z_limit, fric, fmode, has_sat, sat_lim, X, e, tau, mask, z_out,
                                       np.empty(RRR_TCT_WS))


@njit(inline="always", error_model="numpy")
def rrr_task_computed_torque_ws(P, branch, q, qd, pose_prev, ref_pos, ref_vel, ref_acc, kp, kd, ki, has_ki,
                                z, dt, z_limit, fric, fmode, has_sat, sat_lim, X, e, tau, mask, z_out, ws):
    """:func:`rrr_task_computed_torque` (same arguments, outputs and status) in the caller's
    workspace ``ws`` (>= :data:`RRR_TCT_WS`,), which it overwrites: no allocation.  Inlined
    into its callers (the compiled loop keeps one workspace per segment), so that its many
    array arguments are not passed through a call every cycle."""
    # ws[0:WS_SIZE + 12]: the model's work (_rrr_torque)
    Jx = ws[WS_SIZE + 12:WS_SIZE + 21]
    Xd = ws[WS_SIZE + 21:WS_SIZE + 24]
    a = ws[WS_SIZE + 24:WS_SIZE + 27]
    a2 = ws[WS_SIZE + 27:WS_SIZE + 30]
    zc = ws[WS_SIZE + 30:WS_SIZE + 33]
    tau_raw = ws[WS_SIZE + 33:WS_SIZE + 36]
    st = _rrr_measure(P, q, qd, pose_prev, X, Jx, Xd, ws)
    if st != 0:
        return st
    planar_task_error(ref_pos, X, e)
    pd_acceleration(ref_acc, ref_vel, Xd, e, kp, kd, a)
    return task_torque_with_integrator(_rrr_torque_of, (P, X, Xd, branch, fric, fmode, qd, has_sat, sat_lim,
                                                        tau_raw, ws),
                                       a, e, ki, has_ki, z, dt, z_limit, tau, mask, z_out, a2, zc)


@njit(cache=True, error_model="numpy")
def _serial_torque(M, a, h, has_sat, sat_lim, tau_raw, tau, mask):
    """tau = sat(M a + h); returns whether any actuator saturated."""
    n = a.shape[0]
    for i in range(n):
        s = 0.0
        for j in range(n):
            s += M[i, j] * a[j]
        tau_raw[i] = s + h[i]
    return limit_torque(tau_raw, has_sat, sat_lim, tau, mask)


@njit(cache=True, error_model="numpy")
def serial_computed_torque(P, q, qd, ref_pos, ref_vel, ref_acc, kp, kd, ki, has_ki, z, dt, z_limit,
                           fric, fmode, has_sat, sat_lim, e, tau, mask, z_out):
    """One step of :class:`controller.laws.ComputedTorque` for a serial chain.

    Parameters
    ----------
    P : packed serial parameters (``SerialModel._P``), n joints.
    q, qd : (n,) measured joint positions [rad | m] and rates.
    ref_pos, ref_vel, ref_acc : (n,) joint reference.
    kp, kd, ki : (n, n) gains; has_ki : integral action on.
    z : (n,) integrator state; dt : time since its last commit [s]; z_limit : (n,) bound (inf: none).
    fric : (2, n) viscous, Coulomb coefficients of the model; fmode : FRICTION_* (measured:
        at ``qd``, desired: at ``ref_vel``).
    has_sat, sat_lim : the controller's own saturation and its limits (n,).

    Outputs (written): e (n,) error, tau (n,) torques [N m | N], mask (n,) saturated
    actuators, z_out (n,) integrator state to commit.

    Returns
    -------
    int
        0, or :data:`ST_NONFINITE_INPUT` (nothing is valid then; the Python path reports it).
    """
    n = q.shape[0]
    if not (_finite(q) and _finite(qd) and _finite(ref_pos) and _finite(ref_vel) and _finite(ref_acc)):
        return ST_NONFINITE_INPUT
    M = np.empty((n, n))
    Rl = np.empty((n, NW))
    ws = np.empty(5 * n)
    h = ws[0:n]
    a = ws[n:2 * n]
    a2 = ws[2 * n:3 * n]
    zc = ws[3 * n:4 * n]
    tau_raw = ws[4 * n:5 * n]
    for i in range(n):
        e[i] = ref_pos[i] - q[i]
    _crba_core(P, q, M, Rl)
    _rnea_core(P, q, qd, qd, False, 1.0, qd, False, h, Rl)
    compensate_friction(h, fric, fmode, qd, ref_vel)
    pd_acceleration(ref_acc, ref_vel, qd, e, kp, kd, a)
    if not has_ki:
        _serial_torque(M, a, h, has_sat, sat_lim, tau_raw, tau, mask)
        for i in range(n):
            z_out[i] = z[i]
        return 0
    integrator_candidate(z, e, dt, z_limit, zc)
    add_matvec(a, ki, zc, a2)
    if _serial_torque(M, a2, h, has_sat, sat_lim, tau_raw, tau, mask):
        # conditional integration: the integrator keeps its value while saturated
        add_matvec(a, ki, z, a2)
        _serial_torque(M, a2, h, has_sat, sat_lim, tau_raw, tau, mask)
        for i in range(n):
            z_out[i] = z[i]
        return 0
    for i in range(n):
        z_out[i] = zc[i]
    return 0


@njit(cache=True, error_model="numpy")
def serial_gravity(P, q, g):
    """``g`` (n,) = g(q) of a serial chain, what ``SerialModel.gravity`` computes
    (:func:`dynamics._serial_kernels.gravity`)."""
    n = q.shape[0]
    zero = np.zeros(n)
    _rnea_core(P, q, zero, zero, False, 1.0, zero, False, g, np.empty((n, NW)))


@njit(cache=True, error_model="numpy")
def _finite_inputs(q, qd, ref_pos, ref_vel):
    """Whether the measured state and the position and velocity reference are finite."""
    return _finite(q) and _finite(qd) and _finite(ref_pos) and _finite(ref_vel)


@njit(cache=True, error_model="numpy")
def _pd_gravity(g, q, qd, ref_pos, ref_vel, kp, kd, fric, fmode, has_sat, sat_lim, e, tau_raw, tau, mask):
    """Joint-space PD + gravity: ``e = ref_pos - q``, ``tau = sat(g + friction + Kd (ref_vel - qd)
    + Kp e)``; the friction is added to ``g`` in place."""
    for i in range(q.shape[0]):
        e[i] = ref_pos[i] - q[i]
    compensate_friction(g, fric, fmode, qd, ref_vel)
    pd_acceleration(g, ref_vel, qd, e, kp, kd, tau_raw)
    limit_torque(tau_raw, has_sat, sat_lim, tau, mask)


@njit(cache=True, error_model="numpy")
def serial_pd_gravity(P, q, qd, ref_pos, ref_vel, kp, kd, fric, fmode, has_sat, sat_lim, e, tau, mask):
    """One step of :class:`controller.laws.PDGravity` for a serial chain.

    Parameters
    ----------
    P : packed serial parameters (``SerialModel._P``), n joints.
    q, qd : (n,) measured joint positions [rad | m] and rates.
    ref_pos, ref_vel : (n,) joint reference.
    kp, kd : (n, n) gains [N m/rad], [N m s/rad].
    fric : (2, n) viscous, Coulomb coefficients of the model; fmode : FRICTION_* (measured:
        at ``qd``, desired: at ``ref_vel``).
    has_sat, sat_lim : the controller's own saturation and its limits (n,).

    Outputs (written): e (n,) error, tau (n,) torques [N m | N], mask (n,) saturated actuators.

    Returns
    -------
    int
        0, or :data:`ST_NONFINITE_INPUT` (nothing is valid then; the Python path reports it).
    """
    n = q.shape[0]
    if not _finite_inputs(q, qd, ref_pos, ref_vel):
        return ST_NONFINITE_INPUT
    ws = np.empty(2 * n)
    g = ws[0:n]
    tau_raw = ws[n:2 * n]
    serial_gravity(P, q, g)
    _pd_gravity(g, q, qd, ref_pos, ref_vel, kp, kd, fric, fmode, has_sat, sat_lim, e, tau_raw, tau, mask)
    return 0


@njit(cache=True, error_model="numpy")
def _rrr_gravity(P, q, X, g):
    """``g`` (3,) = the bias at zero joint rate with the pose hint ``X`` (what
    ``Planar3RRR.bias(q, 0, pose=X)`` computes); returns the model status."""
    out = np.zeros(18)
    st = reduced_entry(P, q, out[15:18], X, out[0:15])
    if st != 0:
        return st
    for i in range(3):
        g[i] = out[9 + i]
    return 0


@njit(cache=True, error_model="numpy")
def rrr_pd_gravity(P, q, qd, pose_prev, ref_pos, ref_vel, kp, kd, fric, fmode, has_sat, sat_lim, X, e, tau, mask):
    """One step of :class:`controller.laws.PDGravity` (joint space) for a 3RRR model.

    Parameters
    ----------
    P : (4, NL) packed model parameters (``Planar3RRR._P``).
    q, qd : (3,) measured joint angles [rad] and rates [rad/s].
    pose_prev : (3,) FK warm start (the previous pose hint).
    ref_pos, ref_vel, kp, kd, fric, fmode, has_sat, sat_lim : as :func:`serial_pd_gravity`.

    Outputs (written): X (3,) pose hint (FK of ``q``), e, tau, mask as :func:`serial_pd_gravity`.

    Returns
    -------
    int
        0, :data:`ST_NONFINITE_INPUT`, or the model status of the step that failed (nothing
        is valid then).
    """
    if not _finite_inputs(q, qd, ref_pos, ref_vel):
        return ST_NONFINITE_INPUT
    ws = np.empty(WS_SIZE + 6)
    g = ws[WS_SIZE:WS_SIZE + 3]
    tau_raw = ws[WS_SIZE + 3:WS_SIZE + 6]
    st, it = fk_newton_ws(P, q, pose_prev, 1e-12, 50, X, ws)
    if st != 0:
        return st
    st = _rrr_gravity(P, q, X, g)
    if st != 0:
        return st
    _pd_gravity(g, q, qd, ref_pos, ref_vel, kp, kd, fric, fmode, has_sat, sat_lim, e, tau_raw, tau, mask)
    return 0


@njit(cache=True, error_model="numpy")
def rrr_task_pd_gravity(P, q, qd, pose_prev, ref_pos, ref_vel, kp, kd, fric, fmode, has_sat, sat_lim,
                        X, e, tau, mask):
    """One step of :class:`controller.laws.TaskPDGravity` for a 3RRR model.

    ``X = FK(q)`` warm-started at ``pose_prev``, ``Xd = J_x qd``, ``e = X_d (-) X`` (planar
    wrap), ``tau = sat(J_x^T (Kp e + Kd (Xd_d - Xd)) + g + friction(qd))`` with ``g`` the bias
    at zero joint rate at the pose ``X``.

    Parameters
    ----------
    P : (4, NL) packed model parameters (``Planar3RRR._P``).
    q, qd : (3,) measured joint angles [rad] and rates [rad/s].
    pose_prev : (3,) FK warm start (the previous pose).
    ref_pos, ref_vel : (3,) task reference (x, y [m], phi [rad] and rates).
    kp, kd : (3, 3) task gains [N/m], [N s/m] (phi row: [N m/rad], [N m s/rad]).
    fric : (2, 3) viscous, Coulomb coefficients of the model; fmode : FRICTION_NONE or
        FRICTION_MEASURED.
    has_sat, sat_lim : the controller's own saturation and its limits (3,).

    Outputs (written): X (3,) pose, e (3,) task error, tau (3,) torques [N m], mask (3,)
    saturated actuators.

    Returns
    -------
    int
        0, :data:`ST_NONFINITE_INPUT`, or the model status of the step that failed (nothing
        is valid then).
    """
    if not _finite_inputs(q, qd, ref_pos, ref_vel):
        return ST_NONFINITE_INPUT
    ws = np.zeros(WS_SIZE + 24)
    Jx = ws[WS_SIZE:WS_SIZE + 9]
    Xd = ws[WS_SIZE + 9:WS_SIZE + 12]
    F = ws[WS_SIZE + 12:WS_SIZE + 15]
    g = ws[WS_SIZE + 15:WS_SIZE + 18]
    tau_raw = ws[WS_SIZE + 18:WS_SIZE + 21]
    zero = ws[WS_SIZE + 21:WS_SIZE + 24]
    st = _rrr_measure(P, q, qd, pose_prev, X, Jx, Xd, ws)
    if st != 0:
        return st
    st = _rrr_gravity(P, q, X, g)
    if st != 0:
        return st
    planar_task_error(ref_pos, X, e)
    pd_acceleration(zero, ref_vel, Xd, e, kp, kd, F)          # the task wrench Kp e + Kd (Xd_d - Xd)
    add_matvec(g, Jx.reshape((3, 3)).T, F, tau_raw)           # J_x^T F + g
    compensate_friction(tau_raw, fric, fmode, qd, qd)
    limit_torque(tau_raw, has_sat, sat_lim, tau, mask)
    return 0


@njit(cache=True, error_model="numpy")
def pid(P, has_grav, q, qd, ref_pos, ref_vel, dt, kp, ki, kd, back_calc, tt, i_limit, has_sat, sat_lim,
        integral, aw, e, tau, mask, integral_out, aw_out):
    """One step of :class:`controller.laws.PID` (per-joint gains), without a feed-forward or
    with the gravity of a serial chain (:func:`controller.laws.gravity_feedforward`).

    Parameters
    ----------
    P : packed serial parameters (``SerialModel._P``) when ``has_grav``, else unused.
    q, qd : (n,) measured joint positions [rad | m] and rates.
    ref_pos, ref_vel : (n,) joint reference.
    dt : time since the previous step [s] (0 at the first).
    kp, ki, kd : (n,) gains [N m/rad], [N m/(rad s)], [N m s/rad].
    back_calc : back-calculation anti-windup with tracking times ``tt`` (n,) [s]; else clamping.
    i_limit : (n,) bound on the integral [N m] (inf: none).
    has_sat, sat_lim : the controller's own saturation and its limits (n,).
    integral, aw : (n,) the integral [N m] and the back-calculation term of the previous step.

    Outputs (written): e (n,) error, tau (n,) torques, mask (n,) saturated actuators,
    integral_out, aw_out (n,) the new integral and back-calculation term.

    Returns
    -------
    int
        0, or :data:`ST_NONFINITE_INPUT` (nothing is valid then; the Python path reports it).
    """
    n = q.shape[0]
    if not _finite_inputs(q, qd, ref_pos, ref_vel):
        return ST_NONFINITE_INPUT
    ws = np.zeros(2 * n)
    base = ws[0:n]
    tau_raw = ws[n:2 * n]
    if has_grav:
        serial_gravity(P, q, base)
    for i in range(n):
        e[i] = ref_pos[i] - q[i]
        base[i] = base[i] + kp[i] * e[i] + kd[i] * (ref_vel[i] - qd[i])
        if back_calc:
            v = clip(integral[i] + dt * (ki[i] * e[i] + aw[i]), i_limit[i])
        else:
            v = clip(integral[i] + dt * ki[i] * e[i], i_limit[i])
            u = base[i] + v
            if has_sat and abs(u) > sat_lim[i] and _sign(e[i]) == _sign(u):
                v = integral[i]        # clamping: no integration into the saturation
        integral_out[i] = v
        tau_raw[i] = base[i] + v
    limit_torque(tau_raw, has_sat, sat_lim, tau, mask)
    for i in range(n):
        aw_out[i] = (tau[i] - tau_raw[i]) / tt[i] if back_calc else aw[i]
    return 0
