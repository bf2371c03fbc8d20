"""The per-cycle rules of the safety supervisor, written once (compiled).

:func:`evaluate` tests every per-joint and per-axis rule of
:meth:`controller.safety.SafetySupervisor.check` on plain arrays and writes one
bit mask per joint (``J_*``) and per tracking-error axis (``E_*``).  The
supervisor uses the bits both ways: when nothing is set (and no stale counter
or singularity check is pending) the cycle is clean and the command goes out
unchanged; otherwise it turns the set bits into faults, soft-limit damping and
clipping.  No rule is restated anywhere else.

Comparisons follow IEEE rules: a NaN is never beyond a limit (it is reported by
the non-finite bits instead).
"""

from __future__ import annotations

import math

from numba import njit

from dynamics._kernel_cache import stamp_package_caches

__all__ = ["evaluate", "predicted_margin", "singularity_code", "TORQUE_RESERVE", "S_OK", "S_BELOW", "S_PREDICTED",
           "S_TORQUE", "J_Q_NONFINITE", "J_QD_NONFINITE", "J_TAU_NONFINITE", "J_DEVICE_FAULT",
           "J_DISABLED", "J_NOT_FRESH", "J_POSITION", "J_VELOCITY", "J_SOFT_LO", "J_SOFT_HI", "J_CLIP",
           "E_NONFINITE", "E_BEYOND", "G_REF_POS", "G_REF_VEL", "G_REF_ACC", "JOINT_SHIFT",
           "implausible", "POSITION_TOL", "VELOCITY_TOL", "count_saturated", "SATURATED_FRACTION"]

#: the feedback plausibility's tolerances beyond the limits' bounds (:func:`implausible`):
#: quantisation (an MIT position step is 0.38 mrad, a velocity step 24 mrad/s) and noise
#: [rad|m, rad/s|m/s]
POSITION_TOL = 1e-3
VELOCITY_TOL = 0.05

#: a torque at or beyond this fraction of its limit counts as saturated (:func:`count_saturated`)
SATURATED_FRACTION = 1.0 - 1e-9

# per joint
J_Q_NONFINITE = 1
J_QD_NONFINITE = 2
J_TAU_NONFINITE = 4
J_DEVICE_FAULT = 8          # the device reports a non-zero fault code
J_DISABLED = 16             # the drive says it is not enabled
J_NOT_FRESH = 32            # no fresh feedback this cycle
J_POSITION = 64             # outside [q_min, q_max]
J_VELOCITY = 128            # |qd| > v_max
J_SOFT_LO = 256             # in the lower soft zone, moving further in
J_SOFT_HI = 512             # in the upper soft zone, moving further in
J_CLIP = 1024               # |tau| > tau_max
# per tracking-error axis
E_NONFINITE = 1
E_BEYOND = 2                # |e| > its limit
# global (low bits of the return value); the OR of every joint's and axis' bits above them
G_REF_POS = 1
G_REF_VEL = 2
G_REF_ACC = 4
E_SHIFT = 3
JOINT_SHIFT = 5


# numba takes a function's cache locator when it is decorated: the kernel files' stamp first
stamp_package_caches()


#: singularity check results (:func:`singularity_code`)
S_OK = 0
S_BELOW = 1         # the margin is below its minimum
S_PREDICTED = 2     # it will be before the next check has acted
S_TORQUE = 3        # the torque it will take there is beyond TORQUE_RESERVE of a limit
#: the share of each torque limit the singularity guard leaves to the motion: the rest is the
#: brake's (a guard that fires at the limit leaves nothing to stop with)
TORQUE_RESERVE = 0.8
#: the torque rule acts only when the margin falls by at least this fraction before the next
#: check plus the horizon: then the forces' 1 / margin growth is what will drive the torque; a
#: margin that barely moves leaves a torque near its limit to the law (a saturated transient:
#: the 3RRR demo with its law held at the limit faulted at margin 0.948 without this)
TORQUE_FALL = 0.01


@njit(cache=True, error_model="numpy")
def predicted_margin(m, t_s, have_prev, t_prev, m_prev, horizon_s):
    """The singularity margin ``m`` of the check at time ``t_s`` [s], predicted from the last
    checked margin ``m_prev`` at ``t_prev`` [s] (``have_prev``: there is one) to the end of the
    next check interval plus ``horizon_s`` [s]: ``m + min(0, rate) (dt + horizon_s)`` with
    ``rate = (m - m_prev) / dt``, ``dt = t_s - t_prev`` (a check every ``dt`` acts on what it
    sees only at the next one, which must still find the motion stoppable), else ``m``.  The
    one form of the rule: ``SafetySupervisor`` calls it from Python, the compiled loop's checks
    call it (through :func:`singularity_code`).  Not inlined: inlined into the compiled loop's
    segment it made every cycle slower (3RRR segment 6.87 -> 7.57 us a cycle, timed on
    captured segment arguments), though it runs only on a check's cycles."""
    predicted = m
    if have_prev:
        dt = t_s - t_prev
        if dt > 0:
            rate = (m - m_prev) / dt
            # min(0.0, rate), a NaN rate included (0.0)
            predicted = m + (rate if rate < 0.0 else 0.0) * (dt + (horizon_s if horizon_s > 0.0 else 0.0))
    return predicted


@njit(cache=True, error_model="numpy")
def singularity_code(m, predicted, m_min, tau, tau_max):
    """The singularity guard's verdict on a check: the margin ``m``, its prediction
    ``predicted`` (:func:`predicted_margin`), the minimum ``m_min``, the cycle's torques ``tau``
    (n,) [N m|N] and their limits ``tau_max`` (n,).

    Near a parallel (type-2) singularity the actuator forces that hold and move the platform
    grow as ``1 / margin`` (they are ``J^-T`` of the platform's wrench), so the torque the
    motion will take at the predicted margin is ``|tau| m / predicted``: the guard fires when
    that is beyond :data:`TORQUE_RESERVE` of a limit while the margin falls by more than
    :data:`TORQUE_FALL` of itself, early enough that the brake still has torque to stop with.  Returns :data:`S_OK`,
    :data:`S_BELOW`, :data:`S_PREDICTED` or :data:`S_TORQUE` (NaNs never pass)."""
    if not (m >= m_min):
        return S_BELOW
    if not (predicted >= m_min):
        return S_PREDICTED
    if predicted < m * (1.0 - TORQUE_FALL):
        worst = 0.0
        for j in range(tau.shape[0]):
            r = abs(tau[j]) / tau_max[j]
            if r != r:
                r = math.inf        # a NaN torque never passes
            if r > worst:
                worst = r
        if not (worst * m <= TORQUE_RESERVE * predicted):
            return S_TORQUE
    return S_OK


@njit(cache=True, error_model="numpy")
def _all_finite(a) -> bool:
    """Whether every entry of ``a`` (any shape) is finite.  Iterates ``a.flat``: ``a.ravel()``
    makes a view (or a copy) per call, ~20 ns of a 3-vector's test."""
    for v in a.flat:
        if not math.isfinite(v):
            return False
    return True


@njit(cache=True, error_model="numpy")
def evaluate(q, qd, tau, pos, vel, acc, err, err_max, fault, enabled, fresh, limits, jbits, ebits):
    """Evaluate the rules of one cycle (:func:`evaluate_inline`, arguments and result)."""
    return evaluate_inline(q, qd, tau, pos, vel, acc, err, err_max, fault, enabled, fresh, limits, jbits, ebits)


@njit(inline="always", error_model="numpy")
def evaluate_inline(q, qd, tau, pos, vel, acc, err, err_max, fault, enabled, fresh, limits, jbits, ebits):
    """Evaluate the rules of one cycle.  Inlined into its callers: :func:`evaluate` (what
    Python calls) and the compiled loop's cycle, which saves passing its 13 arrays through a
    call every cycle.

    Parameters
    ----------
    q, qd, tau : (n,) measured positions [rad|m], velocities [rad/s|m/s], controller torques [N m|N].
    pos, vel, acc : reference sample (any shape; only finiteness is tested here).
    err : (m,) tracking error in controller space (m = 0: none).
    err_max : (1,) or (m,) its limits.
    fault, enabled, fresh : (n,) int64 / bool / bool from the driver's feedback, or (0,) without one.
    limits : (6, n) the per-joint limits, rows q_min, q_max, v_max, soft_lo, soft_hi, tau_max
        (one array: from Python, five arguments fewer to dispatch than six vectors).
    jbits : (n,) int64 out, ``J_*`` per joint.  ebits : (m,) int64 out, ``E_*`` per axis.

    Returns
    -------
    int
        ``G_*`` bits | (OR of ``ebits``) << E_SHIFT | (OR of ``jbits``) << JOINT_SHIFT;
        zero: nothing to do this cycle.
    """
    g = 0
    if not _all_finite(pos):
        g |= G_REF_POS
    if not _all_finite(vel):
        g |= G_REF_VEL
    if not _all_finite(acc):
        g |= G_REF_ACC
    has_fb = fault.shape[0] > 0
    jor = 0
    for j in range(q.shape[0]):
        b = 0
        qj = q[j]
        qdj = qd[j]
        tj = tau[j]
        if not math.isfinite(qj):
            b |= J_Q_NONFINITE
        if not math.isfinite(qdj):
            b |= J_QD_NONFINITE
        if not math.isfinite(tj):
            b |= J_TAU_NONFINITE
        if has_fb:
            if fault[j] != 0:
                b |= J_DEVICE_FAULT
            if not enabled[j]:
                b |= J_DISABLED
            if not fresh[j]:
                b |= J_NOT_FRESH
        if qj < limits[0, j] or qj > limits[1, j]:
            b |= J_POSITION
        if abs(qdj) > limits[2, j]:
            b |= J_VELOCITY
        if qj < limits[3, j] and qdj < 0.0:
            b |= J_SOFT_LO
        if qj > limits[4, j] and qdj > 0.0:
            b |= J_SOFT_HI
        if abs(tj) > limits[5, j]:
            b |= J_CLIP
        jbits[j] = b
        jor |= b
    eor = 0
    one = err_max.shape[0] == 1
    for i in range(err.shape[0]):
        e = err[i]
        lim = err_max[0] if one else err_max[i]
        b = 0
        if not math.isfinite(e):
            b = E_NONFINITE
        elif abs(e) > lim:
            b = E_BEYOND
        ebits[i] = b
        eor |= b
    return g | (eor << E_SHIFT) | (jor << JOINT_SHIFT)



@njit(cache=True, error_model="numpy")
def implausible(t_s, q, qd, fresh, va, ok, run, bad):
    """The feedback plausibility check of one sample (the rules of
    :mod:`controller.plausibility`, written once): which fresh joints' readings the robot's
    limits make impossible, compared with the last accepted reading of each joint.

    Parameters
    ----------
    t_s : float
        The sample's time [s].
    q, qd : (n,) float64
        Its positions [rad|m] and velocities [rad/s|m/s] (NaN: none).
    fresh : (n,) bool
        Whether each joint's reading is new.
    va : (2, n) float64
        Rows: the plausible |velocity| and |acceleration| of each joint (inf: that check off).
    ok : (3, n) float64
        Rows: position, velocity and time of each joint's last accepted reading (NaN: none);
        updated with the readings accepted now (fresh, plausible, finite position).
    run : (n,) int64
        Rejections in a row per joint; updated (+1 where rejected, 0 where accepted).
    bad : (n,) bool
        Out: rejected now.

    Returns
    -------
    int
        The number of joints rejected now.

    Element by element as numpy's vector form computes it: ``dt = max(t_s - t_ok, 0)`` (NaN
    where nothing was accepted yet, 0 on the lock-step clock between the start-up feedback
    and the first cycle's) and a fresh joint is rejected when
    ``|dq| > v dt + POSITION_TOL``, or, with both velocities finite,
    ``|qd - qd_ok| > a dt + VELOCITY_TOL`` or
    ``|dq - 0.5 dt (qd + qd_ok)| > 0.5 (a dt) dt + POSITION_TOL`` (``dq = q - q_ok``; a NaN
    comparison never rejects; a NaN ``dt`` never does).
    """
    nbad = 0
    for j in range(q.shape[0]):
        qj = q[j]
        qdj = qd[j]
        dt = t_s - ok[2, j]
        if dt < 0.0:
            dt = 0.0
        qdk = ok[1, j]
        dq = qj - ok[0, j]
        b = abs(dq) > va[0, j] * dt + POSITION_TOL
        if math.isfinite(qdj) and math.isfinite(qdk):
            a_dt = va[1, j] * dt
            if abs(qdj - qdk) > a_dt + VELOCITY_TOL:
                b = True
            if abs(dq - 0.5 * dt * (qdj + qdk)) > 0.5 * a_dt * dt + POSITION_TOL:
                b = True
        b = b and fresh[j] and math.isfinite(dt)
        bad[j] = b
        if b:
            run[j] += 1
            nbad += 1
        elif fresh[j] and math.isfinite(qj):
            ok[0, j] = qj
            ok[1, j] = qdj
            ok[2, j] = t_s
            run[j] = 0
    return nbad


@njit(cache=True, error_model="numpy")
def count_saturated(tau, limits, clipped):
    """Count the cycles in a row each joint's torque is at its limit: ``clipped[j]`` (int64,
    updated) + 1 where ``|tau[j]| >= limits[5, j] * SATURATED_FRACTION``, else 0 (a NaN
    torque is not at its limit).  ``tau`` (n,) [N m|N]; ``limits`` the supervisor's (6, n)
    rows (row 5: the torque limits).  Returns whether some joint is at its limit."""
    at_any = False
    for j in range(tau.shape[0]):
        if abs(tau[j]) >= limits[5, j] * SATURATED_FRACTION:
            clipped[j] += 1
            at_any = True
        else:
            clipped[j] = 0
    return at_any
