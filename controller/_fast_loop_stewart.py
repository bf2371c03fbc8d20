"""The compiled offline loop for the Gough-Stewart platform (see :mod:`controller._fast_loop`).

The cycle is :func:`controller._fast_loop._cycles` with the Stewart platform's pieces, the
compiled functions the Python loop calls:

* the law: :func:`controller._stewart_law_kernels.stewart_task_computed_torque`
  (``TaskComputedTorque``) or :func:`~controller._stewart_law_kernels.stewart_task_pd_gravity`
  (``TaskPDGravity``);
* the plant step: :func:`drivers.sim._stewart_plant_kernel.stewart_advance_ws` (what
  ``SimulatedPlant.advance_to`` runs for a Stewart plant);
* the periodic singularity check of ``SafetySupervisor.check``: the pose by
  ``forward_kinematics_task`` warm-started at the last checked pose (``fk_one``, 1e-12 m, 50
  iterations), the model's ``singularity`` report (``singularity_one``: the 2-norm condition
  number of the dimensionless leg Jacobian), the margin ``1 / cond`` (0 when not finite) and
  its prediction over the horizon against the minimum.  A check whose kernel declines (FK
  failure, non-finite...) is not clean: the Python loop runs that cycle and reports it.

It is its own module, imported by :mod:`controller.compiled` only for a Stewart run, so that
the runs of other robots do not load the Stewart kernels (~0.3 s).  The results are
bit-identical to the Python loop (``tests/test_fast_loop_stewart.py``).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from dynamics._kernel_cache import stamp_package_caches
from dynamics._stewart_kernels import OK, fk_one, singularity_one
from drivers.sim._stewart_plant_kernel import stewart_advance_ws

from ._fast_loop import _CT, _PD, _cycles, _margin_clean, _one_cycle, _since
from ._stewart_law_kernels import stewart_task_computed_torque, stewart_task_pd_gravity


# numba takes a function's cache locator when it is decorated: the kernel files' stamp first
stamp_package_caches()


@njit(inline="always", error_model="numpy")
def _stewart_step(plant, h, n_steps, out):
    """``n_steps`` RK4 steps of length ``h`` [s] of the Stewart plant (:func:`stewart_advance_ws`)
    into ``out`` (24,) = q, qd, X, applied force; True when a step failed."""
    P, q, qd, X, ta, t, cmd, par, lag, flags, h_max, has_quant, quantum, work = plant
    st, done = stewart_advance_ws(P, q, qd, X, ta, cmd, par, lag, flags, h, n_steps, out, work)
    return st != 0 or done < n_steps


#: the check's parameters without a singularity check (as :data:`controller._fast_loop.NO_CHECK_PARAMS`):
#: the type of ``StewartPlatform._params``
NO_CHECK_PARAMS = np.zeros(0)


@njit(inline="always", error_model="numpy")
def _stewart_singularity(sing, q, tau, tau_max, t, Xs, ws):
    """The Stewart platform's singularity check of the cycle at time ``t`` [s]
    (``SafetySupervisor.check``): the pose ``Xs`` (6,) by FK warm-started at the last checked
    one, the margin ``1 / cond_b`` and its prediction against the minimum.  Returns
    (clean, margin)."""
    sing_on, sing_every, P, tol_sing, pose_s, margin_prev, m_min, horizon_s = sing
    if fk_one(q, pose_s, P, 1e-12, 50, Xs) != OK:
        return False, 0.0
    rep = np.empty(3)
    if singularity_one(q, Xs, P, rep) != OK:
        return False, 0.0
    cond = rep[0]
    return _margin_clean(0.0 if not math.isfinite(cond) else 1.0 / cond, t, margin_prev, m_min, horizon_s, tau,
                         tau_max)


# --- the laws (``law(consts, q, qd, pos, vel, acc, t, s, s_new, e, tau, mask, ws) -> status``, see
# controller._fast_loop) -----------------------------------------------------------------------

@njit(inline="always", error_model="numpy")
def _stewart_task_computed_torque_cycle(c, q, qd, pos, vel, acc, t, s, s_new, e, tau, mask, ws):
    """:func:`stewart_task_computed_torque`; state (13,): FK pose (6,), integrator z (6,),
    t_last [s] (NaN before the first commit; it advances only with integral action)."""
    st = stewart_task_computed_torque(c[0], q, qd, s[0:6], pos, vel, acc, c[1], c[2], c[3], c[4], s[6:12],
                                      _since(t, s[12]), c[5], c[6], c[7], c[8], c[9],
                                      s_new[0:6], e, tau, mask, s_new[6:12])
    s_new[12] = t if c[4] else s[12]
    return st


@njit(inline="always", error_model="numpy")
def _stewart_task_pd_gravity_cycle(c, q, qd, pos, vel, acc, t, s, s_new, e, tau, mask, ws):
    """:func:`stewart_task_pd_gravity`; state (6,): the FK pose."""
    return stewart_task_pd_gravity(c[0], q, qd, s, pos, vel, c[1], c[2], c[3], c[4], c[5], c[6],
                                   s_new, e, tau, mask)


# --- the entries (arguments as controller._fast_loop._cycles) ----------------------------------

@njit(cache=True, nogil=True, error_model="numpy")
def stewart_task_computed_torque_seg(k0, k_end, period_s, t0, consts, state, safety, sing, plant, fb, refs, logs, work):
    """:func:`_cycles` of a Stewart platform under :class:`controller.laws.TaskComputedTorque`."""
    return _cycles(_stewart_task_computed_torque_cycle, _stewart_step, _stewart_singularity,
                   k0, k_end, period_s, t0, consts, state, safety, sing, plant, fb, refs, logs, work)


@njit(cache=True, nogil=True, error_model="numpy")
def stewart_task_pd_gravity_seg(k0, k_end, period_s, t0, consts, state, safety, sing, plant, fb, refs, logs, work):
    """:func:`_cycles` of a Stewart platform under :class:`controller.laws.TaskPDGravity`."""
    return _cycles(_stewart_task_pd_gravity_cycle, _stewart_step, _stewart_singularity,
                   k0, k_end, period_s, t0, consts, state, safety, sing, plant, fb, refs, logs, work)


#: the segment of each Stewart law kernel (as :data:`controller._fast_loop.SEGMENTS`)
SEGMENTS = {
    "stewart_task_computed_torque": (stewart_task_computed_torque_seg, ("P",) + _CT),
    "stewart_task_pd_gravity": (stewart_task_pd_gravity_seg, _PD),
}



@njit(cache=True, error_model="numpy")
def stewart_task_computed_torque_one(k, t, late, s_k, fb_t, fq, fqd, ftau, ffault, ffresh, fen, rows, j, raw, ri,
                                     q_rows, m_sat, m_late, mi, limits, err_max, jbits, ebits, clipped, va, ok, run,
                                     fw, iw, bw, ns, npose, sing_on, sing_every, P, tol, m_min, horizon, c0, c1, c2,
                                     c3, c4, c5, c6, c7, c8, c9, c10):
    """:func:`controller._fast_loop._one_cycle` of a Stewart platform under
    :class:`controller.laws.TaskComputedTorque` (arguments: ``controller._fast_loop.ONE_ARGS``)."""
    return _one_cycle(_stewart_task_computed_torque_cycle, _stewart_singularity, k, t, late, s_k, (c0, c1, c2, c3, c4, c5, c6, c7, c8, c9),
                      (sing_on, sing_every, P, tol, m_min, horizon),
                      (limits, err_max, jbits, ebits, clipped), (va, ok, run),
                      (fb_t, fq, fqd, ftau, ffault, ffresh, fen), (rows, j), (raw, ri, q_rows, m_sat, m_late, mi),
                      (fw, iw, bw, (ns, npose)))


@njit(cache=True, error_model="numpy")
def stewart_task_pd_gravity_one(k, t, late, s_k, fb_t, fq, fqd, ftau, ffault, ffresh, fen, rows, j, raw, ri, q_rows,
                                m_sat, m_late, mi, limits, err_max, jbits, ebits, clipped, va, ok, run, fw, iw, bw, ns,
                                npose, sing_on, sing_every, P, tol, m_min, horizon, c0, c1, c2, c3, c4, c5, c6, c7, c8,
                                c9, c10):
    """:func:`controller._fast_loop._one_cycle` of a Stewart platform under
    :class:`controller.laws.TaskPDGravity`."""
    return _one_cycle(_stewart_task_pd_gravity_cycle, _stewart_singularity, k, t, late, s_k, (c0, c1, c2, c3, c4, c5, c6),
                      (sing_on, sing_every, P, tol, m_min, horizon),
                      (limits, err_max, jbits, ebits, clipped), (va, ok, run),
                      (fb_t, fq, fqd, ftau, ffault, ffresh, fen), (rows, j), (raw, ri, q_rows, m_sat, m_late, mi),
                      (fw, iw, bw, (ns, npose)))


#: the per-cycle entry of each Stewart law kernel (as :data:`controller._fast_loop.ONE_CYCLE`)
ONE_CYCLE = {
    "stewart_task_computed_torque": stewart_task_computed_torque_one,
    "stewart_task_pd_gravity": stewart_task_pd_gravity_one,
}
