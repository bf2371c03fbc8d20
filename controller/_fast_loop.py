"""The compiled offline loop: whole control cycles in one kernel, no Python per cycle.

Each ``*_seg`` entry runs cycles ``k0 .. k_end - 1`` of :class:`controller.loop.ControlLoop`
under one control law against the in-process simulated plant
(:class:`drivers.sim.direct.DirectPlantDriver` on the lock-step clock), calling the same
compiled functions the Python loop calls:

* the law: the kernel of :mod:`controller._law_kernels` that the law's Python class runs
  for its model (the entries below), through a short per-cycle function that reads and writes
  the law's state vector;
* the safety rules: :func:`controller._safety_rules.evaluate` (its inlined body,
  :func:`~controller._safety_rules.evaluate_inline`) and, for the 3RRR, the periodic
  singularity check with the model's own kernels (what ``SafetySupervisor.check`` runs on a
  clean cycle);
* the plant step: :func:`drivers.sim._plant_kernels.rrr_advance_ws` or
  :func:`~drivers.sim._plant_kernels.serial_advance_ws` (what ``SimulatedPlant.advance_to``
  runs) and the encoder quantisation of ``SimulatedPlant.measure``.

The segments allocate nothing: their work arrays come from the caller (:func:`segment_work`,
the plant's work in its arguments), and :func:`rrr_task_computed_torque_seg` runs without
numba's reference counting (``_nrt=False``; the other entries' law kernels allocate).

The Gough-Stewart platform's entries are in :mod:`controller._fast_loop_stewart` (the same
:func:`_cycles` with its laws, plant step and singularity check), apart so that no other
robot's run loads the Stewart kernels.

The entries, one per law kernel of :mod:`controller._law_kernels` (and the Python class that
runs it): :func:`rrr_task_computed_torque_seg` (``TaskComputedTorque``),
:func:`rrr_task_pd_gravity_seg` (``TaskPDGravity``), :func:`rrr_pd_gravity_seg` (``PDGravity``)
for the 3RRR with ``rrr_advance``; :func:`serial_computed_torque_seg` (``ComputedTorque``),
:func:`serial_pd_gravity_seg` (``PDGravity``), :func:`pid_seg` (``PID``) for a serial chain
with ``serial_advance``.

The cycle is written once, in :func:`_cycles`, which numba inlines into every entry
(``inline="always"``) with the entry's law and plant step: each entry is its own small
cached function, so numba's disk cache serves it in every later process (a law passed in
from Python as a function argument would make it miss).  :data:`SEGMENTS` names each entry
and the constant arguments of its law.

A cycle is committed only when it is *clean*: the law and the plant report no
model status, every safety rule passes and the singularity margin (when checked)
is regular and above its minimum.  At the first cycle that is not, the kernel
stops without changing any state and returns its index: the Python loop runs that
cycle (which records the fault, clips, brakes...), so every rule and reaction
exists once, in Python, and the compiled loop only accelerates the clean cycles.
The results are bit-identical to the Python loop (``tests/test_fast_loop.py``,
``tests/test_fast_loop_serial.py``, ``tests/test_fast_loop_laws.py``,
``tests/test_fast_loop_stewart.py``).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from dynamics._kernel_cache import stamp_package_caches
from dynamics._planar3rrr_kernels import WS_SIZE, regular_margin_ws
from drivers.sim._plant_kernels import rrr_advance_ws, serial_advance_ws

from ._law_kernels import (RRR_TCT_WS, pid, rrr_pd_gravity, rrr_task_computed_torque_ws, rrr_task_pd_gravity,
                           serial_computed_torque, serial_pd_gravity)
from ._safety_rules import (_all_finite, count_saturated, evaluate_inline, implausible, predicted_margin,
                            singularity_code)
from .telemetry import _write_row

#: the law's workspace in :func:`_cycles`'s work [floats] (the largest a law cycle takes:
#: :func:`_rrr_task_computed_torque_cycle`'s)
LAW_WS = RRR_TCT_WS
#: the singularity check's workspace in :func:`_cycles`'s work [floats]: the model's
#: (WS_SIZE,) and the measures (8,)
CHECK_WS = WS_SIZE + 8


def segment_work(n: int, dim: int, n_state: int, n_pose: int, nx: int):
    """The work arrays of a segment (``work`` of :func:`_cycles`), made once by the caller.

    The segments' own work comes from here, so :func:`_cycles` allocates nothing.  The 3RRR
    computed-torque segment runs without numba's reference counting (``_nrt=False``: no
    atomic increment and decrement of an array's count wherever a kernel passes, slices or
    unpacks an array, which took about a fifth of its cycle), so nothing it reaches may
    allocate; the other segments' law kernels still allocate their own small arrays and
    keep the reference counting.

    Parameters
    ----------
    n, dim : actuators and the reference's dimension; n_state : the law's state length;
    n_pose : the singularity check's pose length (3, 6, or that of its placeholder);
    nx : the plant's extra state (the pose X: 3, 6 or 0).

    Returns
    -------
    (fault (n,) int64, flags (3 n,) bool, floats (1-D)) : ``_cycles`` sets the first two
        at its start and overwrites the rest; their contents carry nothing between calls.
    """
    floats = 3 * n + dim + n_state + n_pose + (3 * n + nx) + LAW_WS + CHECK_WS
    return np.zeros(n, dtype=np.int64), np.ones(3 * n, dtype=np.bool_), np.empty(floats)


# numba takes a function's cache locator when it is decorated: the kernel files' stamp first
stamp_package_caches()


@njit(cache=True, error_model="numpy", _nrt=False)
def _read_state(fq, fqd, q, qd):
    """The measured state the law reads (copies of the feedback); whether it is finite."""
    for j in range(q.shape[0]):
        q[j] = fq[j]
        qd[j] = fqd[j]
    return _all_finite(q) and _all_finite(qd)


@njit(cache=True, error_model="numpy")
def _since(t, t_last):
    """Time since the integrator's last commit [s] (0 before the first: ``t_last`` NaN)."""
    return 0.0 if t_last != t_last else max(t - t_last, 0.0)


@njit(cache=True, error_model="numpy")
def _steps(span, h_max):
    """Plant steps of a span [s] as ``SimulatedPlant.advance_to`` splits it: (count, length)."""
    n_steps = max(1, math.ceil(span / h_max - 1e-9))
    return n_steps, span / n_steps


@njit(cache=True, error_model="numpy")
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


# --- the plant steps: ``step(plant, h, n_steps, out) -> failed`` ------------------------------

@njit(inline="always", error_model="numpy")
def _rrr_step(plant, h, n_steps, out):
    """``n_steps`` RK4 steps of length ``h`` [s] of the 3RRR plant (:func:`rrr_advance_ws`) into
    ``out`` (12,) = q, qd, X, applied torque; True when a step failed."""
    P, q, qd, X, ta, t, cmd, par, lag, flags, h_max, has_quant, quantum, work = plant
    st, done = rrr_advance_ws(P, q, qd, X, ta, cmd, par, lag, flags, h, n_steps, out, work)
    return st != 0 or done < n_steps


@njit(inline="always", error_model="numpy")
def _serial_step(plant, h, n_steps, out):
    """:func:`_rrr_step` for a serial chain (:func:`serial_advance_ws`; ``out`` (3 n,) = q, qd,
    applied torque)."""
    P, q, qd, X, ta, t, cmd, par, lag, flags, h_max, has_quant, quantum, work = plant
    st, done = serial_advance_ws(P, q, qd, ta, cmd, par, lag, flags, h, n_steps, out, work)
    return st != 0 or done < n_steps


# --- the singularity checks: ``check(sing, q, tau, tau_max, t, Xs, ws) -> (clean, margin)`` ----
#
# ws (CHECK_WS,): work the check may overwrite (kept by :func:`_cycles` for the segment).

#: the check's parameters (``sing[2]``) when the run has no singularity check: numba types the
#: check even when ``sing[0]`` is False, so they have the type the module's checks take (the
#: 3RRR's packed parameters (4, 13); a serial chain's check reads nothing)
NO_CHECK_PARAMS = np.zeros((0, 0))

@njit(inline="always", error_model="numpy")
def _rrr_singularity(sing, q, tau, tau_max, t, Xs, ws):
    """The 3RRR's singularity check of the cycle at time ``t`` [s] (``SafetySupervisor.check``):
    the pose ``Xs`` (3,) by FK warm-started at the last checked one, the margin and its
    prediction over the horizon against the minimum.  Returns (clean, margin).

    The pose and margin are :func:`~dynamics._planar3rrr_kernels.regular_margin_ws`'s, the
    body the supervisor's compiled check shares (``sing_entry``'s measures, what
    ``Planar3RRR.singularity`` reports)."""
    sing_on, sing_every, P, tol_sing, pose_s, margin_prev, m_min, horizon_s = sing
    sout = ws[WS_SIZE:WS_SIZE + 8]
    if regular_margin_ws(P, q, pose_s, tol_sing, Xs, ws, sout) != 0:
        return False, 0.0
    return _margin_clean(sout[4], t, margin_prev, m_min, horizon_s, tau, tau_max)


@njit(inline="always", error_model="numpy")
def _margin_clean(m, t, margin_prev, m_min, horizon_s, tau, tau_max):
    """Whether the singularity check at time ``t`` [s] with margin ``m`` passes, as
    ``SafetySupervisor.check`` decides (:func:`singularity_code` on the margin, its prediction
    from the last checked margin ``margin_prev`` = [have, t, margin] and the cycle's torques
    ``tau`` (n,) against ``tau_max`` (n,)).  Returns (clean, m)."""
    predicted = predicted_margin(m, t, margin_prev[0] != 0.0, margin_prev[1], margin_prev[2], horizon_s)
    return singularity_code(m, predicted, m_min, tau, tau_max) == 0, m


@njit(inline="always", error_model="numpy")
def _no_singularity(sing, q, tau, tau_max, t, Xs, ws):
    """A serial chain has no singularity check (``sing[0]`` is False: never called)."""
    return True, 0.0


# --- the laws: ``law(consts, q, qd, pos, vel, acc, t, s, s_new, e, tau, mask, ws) -> status`` ----
#
# consts: the law's constant arguments (the ``SEGMENTS`` keys of its ``compiled_args``, in
# order); q, qd (n,) the measured state; pos, vel, acc (dim,) the reference of the cycle;
# t [s] the cycle's time; s (ns,) the law's state after the last committed cycle (the layout of
# the law's ``compiled_state``), s_new (ns,) written: the state after this cycle; e (dim,),
# tau (n,), mask (n,) written: error, torques, saturated actuators; ws (LAW_WS,): work the law
# may overwrite (kept by :func:`_cycles` for the segment).  Status 0: clean.

@njit(inline="always", error_model="numpy")
def _rrr_task_computed_torque_cycle(c, q, qd, pos, vel, acc, t, s, s_new, e, tau, mask, ws):
    """:func:`~controller._law_kernels.rrr_task_computed_torque` (in ``ws``:
    :func:`~controller._law_kernels.rrr_task_computed_torque_ws`); state (7,): FK pose (3,),
    integrator z (3,), t_last [s] (NaN before the first commit; it advances only with integral
    action)."""
    st = rrr_task_computed_torque_ws(c[0], c[1], q, qd, s[0:3], pos, vel, acc, c[2], c[3], c[4], c[5],
                                     s[3:6], _since(t, s[6]), c[6], c[7], c[8], c[9], c[10],
                                     s_new[0:3], e, tau, mask, s_new[3:6], ws)
    s_new[6] = t if c[5] else s[6]
    return st


@njit(inline="always", error_model="numpy")
def _rrr_task_pd_gravity_cycle(c, q, qd, pos, vel, acc, t, s, s_new, e, tau, mask, ws):
    """:func:`rrr_task_pd_gravity`; state (3,): the FK pose."""
    return rrr_task_pd_gravity(c[0], q, qd, s, pos, vel, c[1], c[2], c[3], c[4], c[5], c[6], s_new, e, tau, mask)


@njit(inline="always", error_model="numpy")
def _rrr_pd_gravity_cycle(c, q, qd, pos, vel, acc, t, s, s_new, e, tau, mask, ws):
    """:func:`rrr_pd_gravity`; state (3,): the FK pose hint."""
    return rrr_pd_gravity(c[0], q, qd, s, pos, vel, c[1], c[2], c[3], c[4], c[5], c[6], s_new, e, tau, mask)


@njit(inline="always", error_model="numpy")
def _serial_computed_torque_cycle(c, q, qd, pos, vel, acc, t, s, s_new, e, tau, mask, ws):
    """:func:`serial_computed_torque`; state (n + 1,): integrator z (n,), t_last [s] (NaN
    before the first commit)."""
    n = q.shape[0]
    st = serial_computed_torque(c[0], q, qd, pos, vel, acc, c[1], c[2], c[3], c[4], s[0:n], _since(t, s[n]),
                                c[5], c[6], c[7], c[8], c[9], e, tau, mask, s_new[0:n])
    s_new[n] = t
    return st


@njit(inline="always", error_model="numpy")
def _serial_pd_gravity_cycle(c, q, qd, pos, vel, acc, t, s, s_new, e, tau, mask, ws):
    """:func:`serial_pd_gravity`; no state (0,)."""
    return serial_pd_gravity(c[0], q, qd, pos, vel, c[1], c[2], c[3], c[4], c[5], c[6], e, tau, mask)


@njit(inline="always", error_model="numpy")
def _pid_cycle(c, q, qd, pos, vel, acc, t, s, s_new, e, tau, mask, ws):
    """:func:`pid`; state (2 n + 1,): integral (n,) [N m], back-calculation term (n,), time of
    the last step [s] (NaN before the first)."""
    n = q.shape[0]
    st = pid(c[0], c[1], q, qd, pos, vel, _since(t, s[2 * n]), c[2], c[3], c[4], c[5], c[6], c[7], c[8], c[9],
             s[0:n], s[n:2 * n], e, tau, mask, s_new[0:n], s_new[n:2 * n])
    s_new[2 * n] = t
    return st


@njit(inline="always", error_model="numpy")
def _cycles(law, step, check, k0, k_end, period_s, t0, consts, state, safety, sing, plant, fb, refs, logs,
            work):
    """Run the clean cycles ``k0 <= k < k_end`` under ``law`` with the plant ``step``; return
    the first cycle not run.

    Parameters (all arrays are updated in place for every committed cycle)
    ----------
    law, step, check : the law's cycle function, the robot's plant step and singularity check
        (see above).
    k0, k_end : cycle indices; period_s [s]; t0 : the clock time of cycle 0 [s].
    consts : the law's constant arguments; state : (ns,) the law's state.
    safety : (s_k, limits, err_max, jbits, ebits): the supervisor's cycle counter (1,), limits
        (6, n) (rows q_min, q_max, v_max, soft_lo, soft_hi, tau_max, see :func:`evaluate_inline`),
        tracking-error limits (1,) or (dim,), rule bits (n,), (dim,).
    sing : (on, every, P, tol, pose (3,) | (6,), margin_prev (3,) = [have, t, margin],
        margin_min, horizon [s]): the singularity check of a parallel robot (``on`` False:
        none; the other entries are then placeholders).
    plant : (P, q, qd, X, ta, t, cmd, par, lag, flags, h_max, has_quant, quantum, work): the
        plant (:func:`rrr_advance_ws` / :func:`serial_advance_ws` / ``stewart_advance_ws``
        arguments; pose X (3,), (6,) or (0,)), its time ``t`` (1,) [s], step limit ``h_max``
        [s], encoder quantum (n,) and the step's work array.
    fb : (fq, fqd, ftau) (n,) the feedback read by the previous cycle (in/out).
    refs : (ref_pos, ref_vel, ref_acc) (k_end - k0, dim) reference rows of the cycles.
    logs : (o_q, o_qd, o_err, o_tau, o_taum, last_mask): log rows (k_end - k0, n) of the
        measured q, qd, (k_end - k0, dim) of the error, (k_end - k0, n) of the torque command
        and the measured torque; (n,) the law's saturation mask of the last cycle.
    work : (fault, flags, floats): the cycle's work arrays (:func:`segment_work`), overwritten.
    """
    s_k, limits, err_max, jbits, ebits = safety
    sing_on, sing_every, pose_s, margin_prev = sing[0], sing[1], sing[4], sing[5]
    pq, pqd, pX, pta, pt, pcmd = plant[1], plant[2], plant[3], plant[4], plant[5], plant[6]
    h_max, has_quant, quantum = plant[10], plant[11], plant[12]
    fq, fqd, ftau = fb
    ref_pos, ref_vel, ref_acc = refs
    o_q, o_qd, o_err, o_tau, o_taum, last_mask = logs
    n = pq.shape[0]
    nx = pX.shape[0]
    fault, flags, fw = work
    enabled = flags[0:n]
    fresh = flags[n:2 * n]
    mask = flags[2 * n:3 * n]
    for j in range(n):
        fault[j] = 0
        enabled[j] = True
        fresh[j] = True
    dim = o_err.shape[1]
    ns = state.shape[0]
    npose = pose_s.shape[0]
    q = fw[0:n]
    qd = fw[n:2 * n]
    tau = fw[2 * n:3 * n]
    e = fw[3 * n:3 * n + dim]
    o = 3 * n + dim
    state_new = fw[o:o + ns]
    o += ns
    Xs = fw[o:o + npose]
    o += npose
    out = fw[o:o + 3 * n + nx]
    o += 3 * n + nx
    law_ws = fw[o:o + LAW_WS]
    o += LAW_WS
    check_ws = fw[o:o + CHECK_WS]
    for k in range(k0, k_end):
        i = k - k0
        t = k * period_s
        if not _read_state(fq, fqd, q, qd):
            return k
        # --- the law ------------------------------------------------------------------
        if law(consts, q, qd, ref_pos[i], ref_vel[i], ref_acc[i], t, state, state_new, e, tau, mask, law_ws) != 0:
            return k
        # --- the safety rules -----------------------------------------------------------
        if evaluate_inline(q, qd, tau, ref_pos[i], ref_vel[i], ref_acc[i], e, err_max, fault, enabled, fresh,
                           limits, jbits, ebits) != 0:
            return k
        sk = s_k[0] + 1
        sing_now = sing_on and (sk - 1) % sing_every == 0
        m = 0.0
        if sing_now:
            clean, m = check(sing, q, tau, limits[5], t, Xs, check_ws)
            if not clean:
                return k
        # --- the driver cycle: plant to now, sensors, hold the command -------------------
        ts = t0 + t
        span = ts - pt[0]
        if span > 0.0:
            n_steps, h = _steps(span, h_max)
            if step(plant, h, n_steps, out):
                return k
            for j in range(n):
                pq[j] = out[j]
                pqd[j] = out[n + j]
                pta[j] = out[2 * n + nx + j]
            for j in range(nx):
                pX[j] = out[2 * n + j]
            pt[0] = ts
        # --- commit ---------------------------------------------------------------------
        _commit(i, q, qd, e, tau, mask, pq, pqd, pta, pcmd, has_quant, quantum, fq, fqd, ftau,
                o_q, o_qd, o_err, o_tau, o_taum, last_mask)
        for j in range(state.shape[0]):
            state[j] = state_new[j]
        s_k[0] = sk
        if sing_now:
            for j in range(Xs.shape[0]):
                pose_s[j] = Xs[j]
            margin_prev[0] = 1.0
            margin_prev[1] = t
            margin_prev[2] = m
    return k_end


# --- the entries: ``segment(k0, k_end, period_s, t0, consts, state, safety, sing, plant, fb, refs,
# logs, work) -> first cycle not run`` (arguments as :func:`_cycles`) ------------------------------

@njit(cache=True, nogil=True, error_model="numpy", _nrt=False)
def rrr_task_computed_torque_seg(k0, k_end, period_s, t0, consts, state, safety, sing, plant, fb, refs, logs, work):
    """:func:`_cycles` of a 3RRR under :class:`controller.laws.TaskComputedTorque`."""
    return _cycles(_rrr_task_computed_torque_cycle, _rrr_step, _rrr_singularity,
                   k0, k_end, period_s, t0, consts, state, safety, sing, plant, fb, refs, logs, work)


@njit(cache=True, nogil=True, error_model="numpy")
def rrr_task_pd_gravity_seg(k0, k_end, period_s, t0, consts, state, safety, sing, plant, fb, refs, logs, work):
    """:func:`_cycles` of a 3RRR under :class:`controller.laws.TaskPDGravity`."""
    return _cycles(_rrr_task_pd_gravity_cycle, _rrr_step, _rrr_singularity,
                   k0, k_end, period_s, t0, consts, state, safety, sing, plant, fb, refs, logs, work)


@njit(cache=True, nogil=True, error_model="numpy")
def rrr_pd_gravity_seg(k0, k_end, period_s, t0, consts, state, safety, sing, plant, fb, refs, logs, work):
    """:func:`_cycles` of a 3RRR under :class:`controller.laws.PDGravity`."""
    return _cycles(_rrr_pd_gravity_cycle, _rrr_step, _rrr_singularity,
                   k0, k_end, period_s, t0, consts, state, safety, sing, plant, fb, refs, logs, work)


@njit(cache=True, nogil=True, error_model="numpy")
def serial_computed_torque_seg(k0, k_end, period_s, t0, consts, state, safety, sing, plant, fb, refs, logs, work):
    """:func:`_cycles` of a serial chain under :class:`controller.laws.ComputedTorque`."""
    return _cycles(_serial_computed_torque_cycle, _serial_step, _no_singularity,
                   k0, k_end, period_s, t0, consts, state, safety, sing, plant, fb, refs, logs, work)


@njit(cache=True, nogil=True, error_model="numpy")
def serial_pd_gravity_seg(k0, k_end, period_s, t0, consts, state, safety, sing, plant, fb, refs, logs, work):
    """:func:`_cycles` of a serial chain under :class:`controller.laws.PDGravity`."""
    return _cycles(_serial_pd_gravity_cycle, _serial_step, _no_singularity,
                   k0, k_end, period_s, t0, consts, state, safety, sing, plant, fb, refs, logs, work)


@njit(cache=True, nogil=True, error_model="numpy")
def pid_seg(k0, k_end, period_s, t0, consts, state, safety, sing, plant, fb, refs, logs, work):
    """:func:`_cycles` of a serial chain under :class:`controller.laws.PID`."""
    return _cycles(_pid_cycle, _serial_step, _no_singularity,
                   k0, k_end, period_s, t0, consts, state, safety, sing, plant, fb, refs, logs, work)


_PD = ("P", "kp", "kd", "fric", "fmode", "has_sat", "sat_lim")
_CT = ("kp", "kd", "ki", "has_ki", "z_limit", "fric", "fmode", "has_sat", "sat_lim")

#: the segment of each law kernel of :mod:`controller._law_kernels` (by name): the entry and
#: the keys of the law's ``compiled_args`` that make ``consts``, in the order its cycle reads them
SEGMENTS = {
    "rrr_task_computed_torque": (rrr_task_computed_torque_seg, ("P", "branch") + _CT),
    "rrr_task_pd_gravity": (rrr_task_pd_gravity_seg, _PD),
    "rrr_pd_gravity": (rrr_pd_gravity_seg, _PD),
    "serial_computed_torque": (serial_computed_torque_seg, ("P",) + _CT),
    "serial_pd_gravity": (serial_pd_gravity_seg, _PD),
    "pid": (pid_seg, ("P", "has_grav", "kp", "ki", "kd", "back_calc", "tt", "i_limit", "has_sat", "sat_lim")),
}


# --- one cycle between two exchanges of a driver ------------------------------------------------
#
# A loop with a real (or emulated) driver cannot hand a segment of cycles to a kernel: each
# cycle's command goes out through ``driver.cycle`` in Python.  What lies between two exchanges
# (the feedback plausibility, the law, the safety rules, the saturation count, the metrics row and
# the log row) is one call of a ``*_one`` entry below (:class:`controller.compiled.CompiledCycle`),
# committed only when the cycle is clean, as a segment's cycle is.

#: the statuses of :func:`_one_cycle` (0: the cycle is clean and committed; any other: nothing
#: was changed, and the Python loop runs the cycle)
ONE_CLEAN = 0
ONE_NO_REF = 1          # the cycle's reference is not in the rows given
ONE_SHAPE = 2           # the feedback or the rows do not have the run's lengths
ONE_IMPLAUSIBLE = 3     # some joint's feedback is implausible
ONE_NONFINITE = 4       # the measured state is not finite
ONE_LAW = 5             # the law reports a model status
ONE_RULES = 6           # some safety rule is set
ONE_SINGULARITY = 7     # the singularity check is not clean
ONE_LOG = 8             # the log row could not be written by the compiled writer


def one_layout(n: int, dim: int, n_state: int, n_pose: int) -> dict:
    """The float work array of :func:`_one_cycle`: ``{name: slice}`` of the command (n,), the
    law's state (n_state,), the last checked pose (n_pose,) and the last checked margin
    ``[have, t, margin]`` (3,), which the caller sets and reads, and ``"size"``: its length (the
    rest is scratch)."""
    out = {}
    o = 0
    for name, size in (("cmd", n), ("state", n_state), ("state_new", n_state), ("pose", n_pose),
                       ("Xs", n_pose), ("margin_prev", 3), ("ok_save", 3 * n), ("q", n), ("qd", n),
                       ("tau", n), ("e", dim), ("e_last", dim), ("law_ws", LAW_WS), ("check_ws", CHECK_WS)):
        out[name] = slice(o, o + size)
        o += size
    out["size"] = o
    return out


def one_work(n: int, dim: int, n_state: int, n_pose: int):
    """The work arrays of :func:`_one_cycle`: ``(floats (see :func:`one_layout`), ints (n,),
    bools (4 n,: the last committed cycle's saturation mask of the law in the last n), sizes
    (n_state, n_pose))``, made once by the caller."""
    size = one_layout(n, dim, n_state, n_pose)["size"]
    return (np.zeros(size), np.zeros(n, dtype=np.int64), np.zeros(4 * n, dtype=np.bool_),
            (int(n_state), int(n_pose)))


@njit(inline="always", error_model="numpy")
def _one_cycle(law, check, k, t, late, s_k, consts, sing, safety, plaus, fb, ref, rec, work):
    """Cycle ``k`` (time ``t`` [s], started ``late`` [s] after its deadline) of
    :class:`controller.loop.ControlLoop` between two driver exchanges, as the Python loop runs a
    clean one; returns :data:`ONE_CLEAN` when it was clean and is committed, else another status
    (nothing changed).

    Parameters
    ----------
    law, check : the law's cycle function and the robot's singularity check (as :func:`_cycles`).
    k : the cycle; t, late [s]; s_k : the supervisor's cycle counter before it (``_k``).
    consts : the law's constant arguments.
    sing : (on, every, P, tol, margin_min, horizon [s]): the singularity check's settings (its
        last pose and margin are in ``work``).
    safety : (limits (6, n), err_max (1,) | (dim,), jbits (n,), ebits (dim,), clipped (n,)): the
        supervisor's arrays; ``clipped`` (its saturation counter) and the rule bits are updated.
    plaus : (va (2, n), ok (3, n), run (n,)): the feedback plausibility's bounds, last accepted
        readings and rejection runs (updated as :func:`~controller._safety_rules.implausible` does).
    fb : (t_s [s], q, qd, tau, fault, fresh, enabled): the feedback the cycle reads (its time
        stamp ``t_s``, or ``t`` where that is not finite, is the plausibility's time).
    ref : (rows (R, 4, dim), j): the cycle's reference is ``rows[j]`` (pos, vel, acc, jerk).
    rec : (raw, ri, q_rows, m_sat, m_late, mi): the log buffer's bytes and the row to write
        (``ri`` < 0: no log), the metrics' block (:meth:`controller.metrics.MetricsAccumulator.block`)
        and its column.  The caller advances both after a committed cycle (and sets the row's
        ``compute_s``).
    work : :func:`one_work`'s arrays.
    """
    limits, err_max, jbits, ebits, clipped = safety
    va, ok, run = plaus
    t_fb, fq, fqd, ftau, ffault, ffresh, fen = fb
    t_meas = t_fb if math.isfinite(t_fb) else t     # the loop's _t_meas
    rows, j = ref
    raw, ri, q_rows, m_sat, m_late, mi = rec
    fw, iw, bw, sizes = work
    ns, npose = sizes
    n = limits.shape[1]
    dim = ebits.shape[0]
    if not 0 <= j < rows.shape[0]:
        return ONE_NO_REF
    if (fq.shape[0] != n or fqd.shape[0] != n or ftau.shape[0] != n or ffault.shape[0] != n
            or ffresh.shape[0] != n or fen.shape[0] != n or rows.shape[2] != dim or va.shape[1] != n
            or ok.shape[1] != n or run.shape[0] != n or jbits.shape[0] != n or clipped.shape[0] != n
            or not (err_max.shape[0] == 1 or err_max.shape[0] == dim)):
        return ONE_SHAPE
    cmd = fw[0:n]
    o = n
    state = fw[o:o + ns]
    o += ns
    state_new = fw[o:o + ns]
    o += ns
    pose_s = fw[o:o + npose]
    o += npose
    Xs = fw[o:o + npose]
    o += npose
    margin_prev = fw[o:o + 3]
    o += 3
    ok_save = fw[o:o + 3 * n]
    o += 3 * n
    q = fw[o:o + n]
    o += n
    qd = fw[o:o + n]
    o += n
    tau = fw[o:o + n]
    o += n
    e = fw[o:o + dim]
    o += dim
    e_last = fw[o:o + dim]
    o += dim
    law_ws = fw[o:o + LAW_WS]
    o += LAW_WS
    check_ws = fw[o:o + CHECK_WS]
    run_save = iw
    bad = bw[0:n]
    mask = bw[n:2 * n]
    no_sat = bw[2 * n:3 * n]
    mask_last = bw[3 * n:4 * n]
    # --- the feedback plausibility (the Python loop's ``plaus.check``, from the second cycle) ----
    if k > 0:
        for i in range(n):
            ok_save[i] = ok[0, i]
            ok_save[n + i] = ok[1, i]
            ok_save[2 * n + i] = ok[2, i]
            run_save[i] = run[i]
        if implausible(t_meas, fq, fqd, ffresh, va, ok, run, bad) != 0:
            _restore(ok, run, ok_save, run_save)
            return ONE_IMPLAUSIBLE
    status, checked, m = _one_rest(law, check, k, t, s_k, consts, sing, limits, err_max, jbits, ebits, fq, fqd,
                                   ffault, ffresh, fen, rows[j], state, state_new, pose_s, Xs, margin_prev, q, qd,
                                   tau, e, mask, law_ws, check_ws)
    if status == ONE_CLEAN and ri >= 0:
        if not _write_row(raw, ri, n, dim, t, q, qd, rows[j, 0], rows[j, 1], rows[j, 2], e, tau, tau, ftau, 0,
                          no_sat, late, 0.0, ffresh, ffault, fen):
            status = ONE_LOG
    if status != ONE_CLEAN:
        if k > 0:
            _restore(ok, run, ok_save, run_save)
        return status
    # --- commit ---------------------------------------------------------------------------------
    count_saturated(tau, limits, clipped)
    for i in range(n):
        cmd[i] = tau[i]
        q_rows[dim + i, mi] = tau[i]
        q_rows[dim + n + i, mi] = qd[i]
        m_sat[mi, i] = False
        mask_last[i] = mask[i]
    for i in range(dim):
        q_rows[i, mi] = e[i]
        e_last[i] = e[i]
    m_late[mi] = late
    for i in range(ns):
        state[i] = state_new[i]
    if checked:
        for i in range(npose):
            pose_s[i] = Xs[i]
        margin_prev[0] = 1.0
        margin_prev[1] = t
        margin_prev[2] = m
    return ONE_CLEAN


@njit(cache=True, error_model="numpy")
def _restore(ok, run, ok_save, run_save):
    """Put back the plausibility's last accepted readings and runs saved before the check."""
    n = run.shape[0]
    for i in range(n):
        ok[0, i] = ok_save[i]
        ok[1, i] = ok_save[n + i]
        ok[2, i] = ok_save[2 * n + i]
        run[i] = run_save[i]


@njit(inline="always", error_model="numpy")
def _one_rest(law, check, k, t, s_k, consts, sing, limits, err_max, jbits, ebits, fq, fqd, ffault, ffresh, fen,
              r, state, state_new, pose_s, Xs, margin_prev, q, qd, tau, e, mask, law_ws, check_ws):
    """The state read, the law, the safety rules and the singularity check of :func:`_one_cycle`
    (nothing committed): ``(status, checked, margin)``, ``checked`` when the check was due (its
    pose in ``Xs``)."""
    if not _read_state(fq, fqd, q, qd):
        return ONE_NONFINITE, False, 0.0
    pos, vel, acc = r[0], r[1], r[2]
    if law(consts, q, qd, pos, vel, acc, t, state, state_new, e, tau, mask, law_ws) != 0:
        return ONE_LAW, False, 0.0
    if evaluate_inline(q, qd, tau, pos, vel, acc, e, err_max, ffault, fen, ffresh, limits, jbits, ebits) != 0:
        return ONE_RULES, False, 0.0
    sing_on, sing_every, P, tol, m_min, horizon_s = sing
    if sing_on and s_k % sing_every == 0:
        clean, m = check((sing_on, sing_every, P, tol, pose_s, margin_prev, m_min, horizon_s), q, tau, limits[5], t,
                         Xs, check_ws)
        if not clean:
            return ONE_SINGULARITY, False, 0.0
        return ONE_CLEAN, True, m
    return ONE_CLEAN, False, 0.0


# --- the per-cycle entries: ``one(*ONE_ARGS, c0, .., c10) -> status`` --------------------------------
#
# The arguments one by one, arrays and scalars only (numba's dispatcher types those in C; a tuple
# argument is typed in Python, element by element: 28 us a call with the tuples of _one_cycle's
# signature against ~3 us flat; the entries build those tuples, a call of over 30 arguments
# being a call with ``*args`` in CPython's bytecode, which numba cannot inline).  ``c0 .. c10`` are the law's constant arguments (its SEGMENTS
# keys in order; the unused ones 0).

#: the arguments of a per-cycle entry before the law's constants, in order (see :func:`_one_cycle`)
ONE_ARGS = ("k", "t", "late", "s_k", "fb_t", "fq", "fqd", "ftau", "ffault", "ffresh", "fen", "rows", "j", "raw", "ri",
            "q_rows", "m_sat", "m_late", "mi", "limits", "err_max", "jbits", "ebits", "clipped", "va", "ok", "run",
            "fw", "iw", "bw", "ns", "npose", "sing_on", "sing_every", "P", "tol", "m_min", "horizon")


@njit(cache=True, error_model="numpy")
def rrr_task_computed_torque_one(k, t, late, s_k, fb_t, fq, fqd, ftau, ffault, ffresh, fen, rows, j, raw, ri, q_rows,
                                 m_sat, m_late, mi, limits, err_max, jbits, ebits, clipped, va, ok, run, fw, iw, bw,
                                 ns, npose, sing_on, sing_every, P, tol, m_min, horizon, c0, c1, c2, c3, c4, c5, c6,
                                 c7, c8, c9, c10):
    """:func:`_one_cycle` of a 3RRR under :class:`controller.laws.TaskComputedTorque`."""
    return _one_cycle(_rrr_task_computed_torque_cycle, _rrr_singularity, k, t, late, s_k, (c0, c1, c2, c3, c4, c5, c6, c7, c8, c9, c10),
                      (sing_on, sing_every, P, tol, m_min, horizon),
                      (limits, err_max, jbits, ebits, clipped), (va, ok, run),
                      (fb_t, fq, fqd, ftau, ffault, ffresh, fen), (rows, j), (raw, ri, q_rows, m_sat, m_late, mi),
                      (fw, iw, bw, (ns, npose)))


@njit(cache=True, error_model="numpy")
def rrr_task_pd_gravity_one(k, t, late, s_k, fb_t, fq, fqd, ftau, ffault, ffresh, fen, rows, j, raw, ri, q_rows,
                            m_sat, m_late, mi, limits, err_max, jbits, ebits, clipped, va, ok, run, fw, iw, bw, ns,
                            npose, sing_on, sing_every, P, tol, m_min, horizon, c0, c1, c2, c3, c4, c5, c6, c7, c8,
                            c9, c10):
    """:func:`_one_cycle` of a 3RRR under :class:`controller.laws.TaskPDGravity`."""
    return _one_cycle(_rrr_task_pd_gravity_cycle, _rrr_singularity, k, t, late, s_k, (c0, c1, c2, c3, c4, c5, c6),
                      (sing_on, sing_every, P, tol, m_min, horizon),
                      (limits, err_max, jbits, ebits, clipped), (va, ok, run),
                      (fb_t, fq, fqd, ftau, ffault, ffresh, fen), (rows, j), (raw, ri, q_rows, m_sat, m_late, mi),
                      (fw, iw, bw, (ns, npose)))


@njit(cache=True, error_model="numpy")
def rrr_pd_gravity_one(k, t, late, s_k, fb_t, fq, fqd, ftau, ffault, ffresh, fen, rows, j, raw, ri, q_rows, m_sat,
                       m_late, mi, limits, err_max, jbits, ebits, clipped, va, ok, run, fw, iw, bw, ns, npose,
                       sing_on, sing_every, P, tol, m_min, horizon, c0, c1, c2, c3, c4, c5, c6, c7, c8, c9, c10):
    """:func:`_one_cycle` of a 3RRR under :class:`controller.laws.PDGravity`."""
    return _one_cycle(_rrr_pd_gravity_cycle, _rrr_singularity, k, t, late, s_k, (c0, c1, c2, c3, c4, c5, c6),
                      (sing_on, sing_every, P, tol, m_min, horizon),
                      (limits, err_max, jbits, ebits, clipped), (va, ok, run),
                      (fb_t, fq, fqd, ftau, ffault, ffresh, fen), (rows, j), (raw, ri, q_rows, m_sat, m_late, mi),
                      (fw, iw, bw, (ns, npose)))


@njit(cache=True, error_model="numpy")
def serial_computed_torque_one(k, t, late, s_k, fb_t, fq, fqd, ftau, ffault, ffresh, fen, rows, j, raw, ri, q_rows,
                               m_sat, m_late, mi, limits, err_max, jbits, ebits, clipped, va, ok, run, fw, iw, bw, ns,
                               npose, sing_on, sing_every, P, tol, m_min, horizon, c0, c1, c2, c3, c4, c5, c6, c7, c8,
                               c9, c10):
    """:func:`_one_cycle` of a serial chain under :class:`controller.laws.ComputedTorque`."""
    return _one_cycle(_serial_computed_torque_cycle, _no_singularity, k, t, late, s_k,
                      (c0, c1, c2, c3, c4, c5, c6, c7, c8, c9), (sing_on, sing_every, P, tol, m_min, horizon),
                      (limits, err_max, jbits, ebits, clipped), (va, ok, run),
                      (fb_t, fq, fqd, ftau, ffault, ffresh, fen), (rows, j), (raw, ri, q_rows, m_sat, m_late, mi),
                      (fw, iw, bw, (ns, npose)))


@njit(cache=True, error_model="numpy")
def serial_pd_gravity_one(k, t, late, s_k, fb_t, fq, fqd, ftau, ffault, ffresh, fen, rows, j, raw, ri, q_rows, m_sat,
                          m_late, mi, limits, err_max, jbits, ebits, clipped, va, ok, run, fw, iw, bw, ns, npose,
                          sing_on, sing_every, P, tol, m_min, horizon, c0, c1, c2, c3, c4, c5, c6, c7, c8, c9, c10):
    """:func:`_one_cycle` of a serial chain under :class:`controller.laws.PDGravity`."""
    return _one_cycle(_serial_pd_gravity_cycle, _no_singularity, k, t, late, s_k, (c0, c1, c2, c3, c4, c5, c6),
                      (sing_on, sing_every, P, tol, m_min, horizon),
                      (limits, err_max, jbits, ebits, clipped), (va, ok, run),
                      (fb_t, fq, fqd, ftau, ffault, ffresh, fen), (rows, j), (raw, ri, q_rows, m_sat, m_late, mi),
                      (fw, iw, bw, (ns, npose)))


@njit(cache=True, error_model="numpy")
def pid_one(k, t, late, s_k, fb_t, fq, fqd, ftau, ffault, ffresh, fen, rows, j, raw, ri, q_rows, m_sat, m_late, mi,
            limits, err_max, jbits, ebits, clipped, va, ok, run, fw, iw, bw, ns, npose, sing_on, sing_every, P, tol,
            m_min, horizon, c0, c1, c2, c3, c4, c5, c6, c7, c8, c9, c10):
    """:func:`_one_cycle` of a serial chain under :class:`controller.laws.PID`."""
    return _one_cycle(_pid_cycle, _no_singularity, k, t, late, s_k, (c0, c1, c2, c3, c4, c5, c6, c7, c8, c9),
                      (sing_on, sing_every, P, tol, m_min, horizon),
                      (limits, err_max, jbits, ebits, clipped), (va, ok, run),
                      (fb_t, fq, fqd, ftau, ffault, ffresh, fen), (rows, j), (raw, ri, q_rows, m_sat, m_late, mi),
                      (fw, iw, bw, (ns, npose)))


#: the per-cycle entry of each law kernel (the keys of :data:`SEGMENTS`, whose ``consts`` keys
#: they take)
ONE_CYCLE = {
    "rrr_task_computed_torque": rrr_task_computed_torque_one,
    "rrr_task_pd_gravity": rrr_task_pd_gravity_one,
    "rrr_pd_gravity": rrr_pd_gravity_one,
    "serial_computed_torque": serial_computed_torque_one,
    "serial_pd_gravity": serial_pd_gravity_one,
    "pid": pid_one,
}
