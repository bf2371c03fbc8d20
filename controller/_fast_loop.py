"""The compiled offline loop: whole control cycles in one kernel, no Python per cycle.

:func:`rrr_segment` runs cycles ``k0 .. k_end - 1`` of :class:`controller.loop.ControlLoop`
for the 3RRR with task-space computed torque, :func:`serial_segment` for a serial chain with
joint-space computed torque, against the in-process simulated plant
(:class:`drivers.sim.direct.DirectPlantDriver` on the lock-step clock), calling the same
compiled functions the Python loop calls:

* the law: :func:`controller._law_kernels.rrr_task_computed_torque` (what
  :meth:`controller.laws.TaskComputedTorque.compute` runs for this model);
* the safety rules: :func:`controller._safety_rules.evaluate` and the periodic
  singularity check with the model's own kernels (what ``SafetySupervisor.check``
  runs on a clean cycle);
* the plant step: :func:`drivers.sim._plant_kernels.rrr_advance` (what
  ``SimulatedPlant.advance_to`` runs) and the encoder quantisation of
  ``SimulatedPlant.measure``.

A cycle is committed only when it is *clean*: the law and the plant report no
model status, every safety rule passes and the singularity margin (when checked)
is regular and above its minimum.  At the first cycle that is not, the kernel
stops without changing any state and returns its index: the Python loop runs that
cycle (which records the fault, clips, brakes...), so every rule and reaction
exists once, in Python, and the compiled loop only accelerates the clean cycles.
The results are bit-identical to the Python loop (``tests/test_fast_loop.py``).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from dynamics._planar3rrr_kernels import WS_SIZE, fk_newton_ws, sing_entry
from drivers.sim._plant_kernels import rrr_advance, serial_advance

from ._law_kernels import rrr_task_computed_torque, serial_computed_torque
from ._safety_rules import _all_finite, evaluate


@njit(cache=True)
def _read_state(fq, fqd, q, qd):
    """The measured state the law reads (copies of the feedback); whether it is finite."""
    for j in range(q.shape[0]):
        q[j] = fq[j]
        qd[j] = fqd[j]
    return _all_finite(q) and _all_finite(qd)


@njit(cache=True)
def _since(t, t_last):
    """Time since the integrator's last commit [s] (0 before the first: ``t_last`` NaN)."""
    return 0.0 if t_last != t_last else max(t - t_last, 0.0)


@njit(cache=True)
def _steps(span, h_max):
    """Plant steps of a span [s] as ``SimulatedPlant.advance_to`` splits it: (count, length)."""
    n_steps = max(1, math.ceil(span / h_max - 1e-9))
    return n_steps, span / n_steps


@njit(cache=True)
def _commit(i, q, qd, e, tau, mask, pq, pqd, pta, pcmd, has_quant, quantum, fq, fqd, ftau,
            o_q, o_qd, o_err, o_tau, o_taum, last_mask):
    """Commit cycle ``i``: its log row, the held command, and the sensors the next cycle reads
    (encoder quantisation as ``SimulatedPlant.measure``)."""
    for j in range(q.shape[0]):
        o_q[i, j] = q[j]
        o_qd[i, j] = qd[j]
        o_tau[i, j] = tau[j]
        o_taum[i, j] = ftau[j]
        pcmd[0, j] = tau[j]
        last_mask[j] = mask[j]
        if has_quant:
            fq[j] = np.round(pq[j] / quantum[j]) * quantum[j]
        else:
            fq[j] = pq[j]
        fqd[j] = pqd[j]
        ftau[j] = pta[j]
    for j in range(e.shape[0]):
        o_err[i, j] = e[j]


@njit(cache=True, nogil=True)
def rrr_segment(k0, k_end, period_s, t0,
                Pc, branch, kp, kd, ki, has_ki, z, t_last, z_limit, fric, fmode, has_sat, sat_lim, pose_c,
                s_k, q_min, q_max, v_max, soft_lo, soft_hi, tau_max, err_max, jbits, ebits,
                sing_on, sing_every, Ps, tol_sing, pose_s, margin_prev, m_min, horizon_s,
                Pp, pq, pqd, pX, pta, pt, pcmd, ppar, lag, flags, h_max, has_quant, quantum,
                fq, fqd, ftau,
                ref_pos, ref_vel, ref_acc,
                o_q, o_qd, o_err, o_tau, o_taum, last_mask):
    """Run the clean cycles ``k0 <= k < k_end``; return the first cycle not run.

    Parameters (all arrays are updated in place for every committed cycle)
    ----------
    k0, k_end : cycle indices; period_s [s]; t0 : the clock time of cycle 0 [s].
    Pc ... pose_c : the controller (:meth:`TaskComputedTorque._compiled_args`), its
        integrator ``z`` (3,), ``t_last`` (1,) (NaN: never committed) and FK warm start.
    s_k ... horizon_s : the safety supervisor: cycle counter (1,), limits, rule bits,
        singularity check (on, every, model, tolerance, pose (3,),
        ``margin_prev`` (3,) = [have, t, margin], min margin, horizon [s]).
    Pp ... quantum : the plant (:func:`rrr_advance` arguments), its time ``pt`` (1,),
        step limit ``h_max`` and encoder quantum (3,).
    fq, fqd, ftau : (3,) the feedback read by the previous cycle (in/out).
    ref_pos, ref_vel, ref_acc : (k_end - k0, 3) reference rows of the cycles.
    o_q ... o_taum : (k_end - k0, 3) log rows (measured q, qd; task error; torque
        command; measured torque); last_mask : (3,) the law's saturation mask.
    """
    n = 3
    fault = np.zeros(n, dtype=np.int64)
    enabled = np.ones(n, dtype=np.bool_)
    fresh = np.ones(n, dtype=np.bool_)
    ws = np.empty(WS_SIZE)
    q = np.empty(n)
    qd = np.empty(n)
    Xc = np.empty(3)
    e = np.empty(3)
    tau = np.empty(n)
    mask = np.empty(n, dtype=np.bool_)
    zn = np.empty(3)
    Xs = np.empty(3)
    sout = np.empty(8)
    out = np.empty(12)
    for k in range(k0, k_end):
        i = k - k0
        t = k * period_s
        if not _read_state(fq, fqd, q, qd):
            return k
        # --- the law ------------------------------------------------------------------
        dt = _since(t, t_last[0])
        st = rrr_task_computed_torque(Pc, branch, q, qd, pose_c, ref_pos[i], ref_vel[i], ref_acc[i], kp, kd, ki,
                                      has_ki, z, dt, z_limit, fric, fmode, has_sat, sat_lim, Xc, e, tau, mask, zn)
        if st != 0:
            return k
        # --- the safety rules -----------------------------------------------------------
        if evaluate(q, qd, tau, ref_pos[i], ref_vel[i], ref_acc[i], e, err_max, fault, enabled, fresh,
                    q_min, q_max, v_max, soft_lo, soft_hi, tau_max, jbits, ebits) != 0:
            return k
        sk = s_k[0] + 1
        sing_now = sing_on and (sk - 1) % sing_every == 0
        m = 0.0
        if sing_now:
            st, it = fk_newton_ws(Ps, q, pose_s, 1e-12, 50, Xs, ws)
            if st != 0:
                return k
            if sing_entry(Ps, q, Xs, sout) != 0 or not (sout[4] >= 0.0):
                return k
            if sout[0] < tol_sing or abs(sout[1]) < tol_sing:
                return k
            m = sout[4]
            predicted = m
            if margin_prev[0] != 0.0 and horizon_s > 0:
                dtm = t - margin_prev[1]
                if dtm > 0:
                    predicted = m + min(0.0, (m - margin_prev[2]) / dtm) * horizon_s
            if not (m >= m_min) or not (predicted >= m_min):
                return k
        # --- the driver cycle: plant to now, sensors, hold the command -------------------
        ts = t0 + t
        span = ts - pt[0]
        if span > 0.0:
            n_steps, h = _steps(span, h_max)
            st, done = rrr_advance(Pp, pq, pqd, pX, pta, pcmd, ppar, lag, flags, h, n_steps, out)
            if st != 0 or done < n_steps:
                return k
            for j in range(n):
                pq[j] = out[j]
                pqd[j] = out[3 + j]
                pX[j] = out[6 + j]
                pta[j] = out[9 + j]
            pt[0] = ts
        # --- commit ---------------------------------------------------------------------
        _commit(i, q, qd, e, tau, mask, pq, pqd, pta, pcmd, has_quant, quantum, fq, fqd, ftau,
                o_q, o_qd, o_err, o_tau, o_taum, last_mask)
        for j in range(3):
            pose_c[j] = Xc[j]
        if has_ki:
            for j in range(3):
                z[j] = zn[j]
            t_last[0] = t
        s_k[0] = sk
        if sing_now:
            for j in range(3):
                pose_s[j] = Xs[j]
            margin_prev[0] = 1.0
            margin_prev[1] = t
            margin_prev[2] = m
    return k_end


@njit(cache=True, nogil=True)
def serial_segment(k0, k_end, period_s, t0,
                   Pc, kp, kd, ki, has_ki, z, t_last, z_limit, fric, fmode, has_sat, sat_lim,
                   s_k, q_min, q_max, v_max, soft_lo, soft_hi, tau_max, err_max, jbits, ebits,
                   Pp, pq, pqd, pta, pt, pcmd, ppar, lag, flags, h_max, has_quant, quantum,
                   fq, fqd, ftau,
                   ref_pos, ref_vel, ref_acc,
                   o_q, o_qd, o_err, o_tau, o_taum, last_mask):
    """:func:`rrr_segment` for a serial chain under joint-space computed torque.

    The law is :func:`controller._law_kernels.serial_computed_torque` (what
    :meth:`controller.laws.ComputedTorque.compute` runs for an exact ``SerialModel``), the
    safety rules :func:`controller._safety_rules.evaluate` (no singularity check: a serial
    chain has none), the plant step :func:`drivers.sim._plant_kernels.serial_advance`.
    Arguments as :func:`rrr_segment` without the pose and singularity ones; all (n,)
    arrays, gains (n, n), rows (k_end - k0, n).
    """
    n = pq.shape[0]
    fault = np.zeros(n, dtype=np.int64)
    enabled = np.ones(n, dtype=np.bool_)
    fresh = np.ones(n, dtype=np.bool_)
    q = np.empty(n)
    qd = np.empty(n)
    e = np.empty(n)
    tau = np.empty(n)
    mask = np.empty(n, dtype=np.bool_)
    zn = np.empty(n)
    out = np.empty(3 * n)
    for k in range(k0, k_end):
        i = k - k0
        t = k * period_s
        if not _read_state(fq, fqd, q, qd):
            return k
        # --- the law ------------------------------------------------------------------
        dt = _since(t, t_last[0])
        if serial_computed_torque(Pc, q, qd, ref_pos[i], ref_vel[i], ref_acc[i], kp, kd, ki, has_ki, z, dt,
                                  z_limit, fric, fmode, has_sat, sat_lim, e, tau, mask, zn) != 0:
            return k
        # --- the safety rules -----------------------------------------------------------
        if evaluate(q, qd, tau, ref_pos[i], ref_vel[i], ref_acc[i], e, err_max, fault, enabled, fresh,
                    q_min, q_max, v_max, soft_lo, soft_hi, tau_max, jbits, ebits) != 0:
            return k
        # --- the driver cycle: plant to now, sensors, hold the command -------------------
        ts = t0 + t
        span = ts - pt[0]
        if span > 0.0:
            n_steps, h = _steps(span, h_max)
            st, done = serial_advance(Pp, pq, pqd, pta, pcmd, ppar, lag, flags, h, n_steps, out)
            if st != 0 or done < n_steps:
                return k
            for j in range(n):
                pq[j] = out[j]
                pqd[j] = out[n + j]
                pta[j] = out[2 * n + j]
            pt[0] = ts
        # --- commit ---------------------------------------------------------------------
        _commit(i, q, qd, e, tau, mask, pq, pqd, pta, pcmd, has_quant, quantum, fq, fqd, ftau,
                o_q, o_qd, o_err, o_tau, o_taum, last_mask)
        for j in range(n):
            z[j] = zn[j]
        t_last[0] = t
        s_k[0] = s_k[0] + 1
    return k_end
