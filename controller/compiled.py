"""The compiled offline loop as the control loop uses it.

:class:`CompiledCycles` owns nothing: it reads the state of the controller, the
safety supervisor and the simulated plant, runs the clean cycles in the law's segment of
:mod:`controller._fast_loop`, and hands the state back, so the
Python loop (:class:`controller.loop.ControlLoop`) goes on at the first cycle that
needs it (a fault, a clip, a soft limit, a brake, a stop request) exactly as if
it had run every cycle itself.  The per-cycle rules are the compiled functions the
Python objects call (see :mod:`controller._fast_loop`), so the log, the metrics
and the result are bit-identical; only the timing columns differ (``compute_s``
of a compiled cycle is the mean wall time of its segment).

It applies where nothing in Python has to run per cycle: the lock-step clock,
:class:`drivers.sim.direct.DirectPlantDriver` with a plant the compiled step
covers (:meth:`drivers.sim.plant.SimulatedPlant.compiled_step_args`), a law with a
compiled form (``compiled_args``) for the same kind of robot (:data:`LAW_KERNELS`: for
the 3RRR :class:`~controller.laws.TaskComputedTorque`, :class:`~controller.laws.TaskPDGravity`
and :class:`~controller.laws.PDGravity`; for a serial chain
:class:`~controller.laws.ComputedTorque`, :class:`~controller.laws.PDGravity` and
:class:`~controller.laws.PID`; for the Gough-Stewart platform
:class:`~controller.laws.TaskComputedTorque` and :class:`~controller.laws.TaskPDGravity`),
the loop's velocity from the feedback and a trajectory on the loop's grid.  ``torqueloop run``
reports in the result's messages how many cycles ran compiled.

The Stewart platform's segments are in :mod:`controller._fast_loop_stewart`, imported only
for a Stewart run (its kernels take ~0.3 s to load).

:class:`CompiledCycle` serves every other driver (a real or emulated bus, any clock): the cycle
between two ``driver.cycle`` calls (feedback plausibility, law, safety rules, saturation count,
metrics row, log row) in one compiled call when it is clean, the Python cycle otherwise
(``tests/test_loop_compiled_cycle.py``).
"""

from __future__ import annotations

import importlib
import operator
import time

import numpy as np
from numba.core.errors import NumbaError

from dynamics import exact_model_kind
from dynamics._numba_entry import entry_for

from .clock import LockstepClock
from .laws import PID, ComputedTorque, PDGravity, TaskComputedTorque, TaskPDGravity
from . import _fast_loop

__all__ = ["CompiledCycles", "CompiledCycle", "LAW_KERNELS"]

#: the law kernel (a key of :data:`controller._fast_loop.SEGMENTS`) of each law class with a
#: compiled form, by (class, robot kind of its ``compiled_args``)
LAW_KERNELS = {
    (TaskComputedTorque, "rrr"): "rrr_task_computed_torque",
    (TaskPDGravity, "rrr"): "rrr_task_pd_gravity",
    (PDGravity, "rrr"): "rrr_pd_gravity",
    (ComputedTorque, "serial"): "serial_computed_torque",
    (PDGravity, "serial"): "serial_pd_gravity",
    (PID, "serial"): "pid",
    (TaskComputedTorque, "stewart"): "stewart_task_computed_torque",
    (TaskPDGravity, "stewart"): "stewart_task_pd_gravity",
}

#: the module holding the segments of a robot kind, when not :mod:`controller._fast_loop`
_SEGMENT_MODULES = {"stewart": "controller._fast_loop_stewart"}

#: the robot kinds whose segments check the singularity of their model (exactly its class)
_SINGULARITY_KINDS = ("rrr", "stewart")


def _segment_module(kind: str):
    """The module holding the segments of robot ``kind`` (imported on first use): its
    ``SEGMENTS`` table and ``NO_CHECK_PARAMS``."""
    name = _SEGMENT_MODULES.get(kind)
    return _fast_loop if name is None else importlib.import_module(name)


def _checks_singularity_of(kind: str, model) -> bool:
    """Whether the segments of robot ``kind`` check the singularity of ``model`` (its exact
    class: :func:`dynamics.exact_model_kind`)."""
    return kind in _SINGULARITY_KINDS and exact_model_kind(model) == kind


def _law_why_not(loop, traj, estimator) -> str:
    """Why the law, the velocities, the reference or the safety rules of ``loop`` have no compiled
    form (the reference sampled by ``traj``, the velocities estimated by ``estimator`` or None), or
    "" when they have."""
    from trajectories.base import GridCache

    c = loop.controller
    ca = getattr(c, "compiled_args", None)
    if ca is None or (type(c), ca["kind"]) not in LAW_KERNELS:
        return "the control law has no compiled form for this model"
    if estimator is not None:
        return "velocities are estimated in Python"
    if not isinstance(traj, GridCache):
        return "the trajectory is not sampled on the loop's grid"
    if traj.period_s != loop.period_s:
        # the compiled cycle reads the grid's row k for cycle k: a grid of another step would
        # feed the law a time-warped reference (GridCache.sample(t) off its grid is still right)
        return "the trajectory's grid step is not the loop's period"
    s = loop.safety
    if s._sing and not _checks_singularity_of(ca["kind"], s.model):
        return "the singularity check has no compiled form for this model"
    if s.err_max.reshape(-1).shape[0] not in (1, c.dim):
        return "tracking_error_max does not match the controller's dimension"
    return ""


class CompiledCycles:
    """Run the clean cycles of a :class:`~controller.loop.ControlLoop` compiled.

    Build with :meth:`for_loop`; :meth:`run` is called by the loop.
    """

    #: cycles of the first segment (the loop checks for signals between segments)
    first_segment = 1000
    #: wall time a later segment is sized to take [s], from the mean cycle of the segments
    #: run so far (each segment call costs a fixed ~0.1-0.4 ms of Python: hand-over, metrics,
    #: feedback), within [min_segment, max_segment] cycles
    segment_s = 0.05
    min_segment = 100
    max_segment = 20000

    def __init__(self, loop, traj):
        self.loop = loop
        self.traj = traj
        self.next_k = 0          # do not try again before this cycle
        self._backoff = 1
        self.cycles = 0          # cycles run compiled
        self.wall_s = 0.0        # their wall time in the segment kernel [s]
        self.limit = self.first_segment      # cycles of the next segment at most
        #: why the segment kernel could not be compiled (every cycle then runs in Python), or None
        self.unavailable: str | None = None
        c = self._c = loop.controller.compiled_args
        self.kind = c["kind"]      # the robot: "rrr", "serial" or "stewart"
        module = _segment_module(c["kind"])
        self._segment, keys = module.SEGMENTS[LAW_KERNELS[type(loop.controller), c["kind"]]]
        self._consts = tuple(c[key] for key in keys)
        s = loop.safety
        self._sing = bool(s._sing)
        if self._sing and self.kind == "stewart":
            self._Ps, self._tol = s.model._params, 0.0       # the margin is the model's 1 / cond
        elif self._sing:
            m = s.model
            self._Ps, self._tol = m._P, float(m._tol_sing)
        else:
            self._Ps, self._tol = module.NO_CHECK_PARAMS, 0.0      # no check (never read)
        self._em = np.ascontiguousarray(s.err_max.reshape(-1), dtype=float)

    @staticmethod
    def may_apply(loop) -> bool:
        """Whether the compiled offline loop may apply to ``loop`` (its clock and driver; the rest
        is known once the drives are enabled: :meth:`for_loop`)."""
        from drivers.sim.direct import DirectPlantDriver

        return type(loop.clock) is LockstepClock and type(loop.driver) is DirectPlantDriver

    @classmethod
    def for_loop(cls, loop, traj, estimator):
        """``(CompiledCycles, "")`` when the compiled loop applies to ``loop``, else ``(None, why)``."""
        from drivers.sim.direct import DirectPlantDriver

        if type(loop.clock) is not LockstepClock:
            return None, "the clock is not the lock-step clock"
        if type(loop.driver) is not DirectPlantDriver:
            return None, "the driver is not the in-process plant (sim_direct)"
        why = _law_why_not(loop, traj, estimator)
        if why:
            return None, why
        c = loop.controller
        args, why = loop.driver.plant.compiled_step_args()
        if args is None:
            return None, why
        if args["kind"] != c.compiled_args["kind"] or args["q"].shape != (c.n,):
            return None, "the plant and the controller model are different robots"
        return cls(loop, traj), ""

    def ready(self, k: int) -> bool:
        """Whether cycle ``k`` may start a compiled segment (nothing pending in Python)."""
        s = self.loop.safety
        return (self.unavailable is None and k >= self.next_k and not s.latched and s.stop_reason is None and not s._pending
                and not s._stale_any and self.loop.driver.enabled)

    def run(self, k: int, k_end: int, t0: float, fb, tel, metrics, series):
        """Run cycles ``k .. < k_end`` while they are clean (at most :attr:`limit`: the first
        segment :attr:`first_segment` cycles, the later ones :attr:`segment_s` of wall time at
        the mean cycle so far).

        The kernel runs in chunks that end where the telemetry buffer is full, so each
        flush happens after the same cycle as in the Python loop (a failed write is a
        fault of that cycle, and nothing after it runs compiled).

        Returns ``(k_next, feedback)``: the first cycle not run and the feedback it reads.
        Telemetry rows, metrics and timing series are recorded as the Python loop does.
        """
        loop = self.loop
        if loop.controller.compiled_args is not self._c:
            self._missed(k)        # the law's model or gains were replaced: Python from here
            return k, fb
        k_end = min(k_end, k + self.limit)
        plant = loop.driver.plant
        pa, why = plant.compiled_step_args()
        rows = self.traj.rows(k, k_end - k) if k_end > k else None
        if pa is None or rows is None or k_end <= k:
            self._missed(k)
            return k, fb
        ref_pos, ref_vel, ref_acc = rows
        ctrl, s = loop.controller, loop.safety
        n = ctrl.n
        N = k_end - k
        feedback = (np.array(fb.position_rad, dtype=float), np.array(fb.velocity_rad_s, dtype=float),
                    np.array(fb.torque_nm, dtype=float))
        state, s_k, safety, pose_s, margin_prev, sing, plant_args, logs, work = self._arguments(pa, N)
        o_q, o_qd, o_err, o_tau, o_taum, mask = logs
        per = np.empty(N)
        P = loop.period_s
        ts = np.arange(k, k_end) * P
        k_new = k
        while k_new < k_end:
            # a chunk: up to the next telemetry flush
            k_chunk = k_end if tel is None or loop._tel_failed else min(k_end, k_new + tel.room)
            a, b = k_new - k, k_chunk - k
            w0 = time.perf_counter()
            try:
                k_stop = self._segment(k_new, k_chunk, P, t0, self._consts, state, safety, sing, plant_args,
                                       feedback, (ref_pos[a:b], ref_vel[a:b], ref_acc[a:b]),
                                       (o_q[a:b], o_qd[a:b], o_err[a:b], o_tau[a:b], o_taum[a:b], mask), work)
            except NumbaError as err:
                # numba could not compile the segment for these arguments (a bug of ours): nothing
                # of the chunk ran (typing comes first), so the Python loop goes on from here with
                # the same state and the same results; the run's messages say why
                self._unavailable(err)
                break
            wall = time.perf_counter() - w0
            if k_stop == k_new:
                break
            self.wall_s += wall
            b = k_stop - k
            per[a:b] = wall / (k_stop - k_new)
            k_new = k_stop
            if tel is not None and not loop._tel_failed:
                try:
                    tel.record_rows(t=ts[a:b], q=o_q[a:b], qd=o_qd[a:b], ref_pos=ref_pos[a:b],
                                    ref_vel=ref_vel[a:b], ref_acc=ref_acc[a:b], err=o_err[a:b], tau_ctrl=o_tau[a:b],
                                    tau_cmd=o_tau[a:b], tau_meas=o_taum[a:b], safety=0, sat=False, lateness_s=0.0,
                                    compute_s=per[a:b], fresh=True, fault=0, enabled=True)
                except OSError as exc:
                    s.fault(float(ts[b - 1]),
                            "telemetry", f"log write failed, rows kept in memory: {type(exc).__name__}: {exc}")
                    break
                except ValueError as exc:
                    loop._tel_failed = True
                    s.fault(float(ts[b - 1]), "telemetry", f"{type(exc).__name__}: {exc}")
                    break
            if k_stop < k_chunk:
                break
        done = k_new - k
        if done == 0:
            self._missed(k)
            return k, fb
        self._backoff = 1
        # the cycle that stopped the kernel runs in Python; after a segment that ran to its
        # end the next one may start at once
        self.next_k = k_new + 1 if k_new < k_end else k_new
        self.cycles += done
        if self.wall_s > 0.0:
            per_cycle = self.wall_s / self.cycles
            self.limit = int(min(max(self.segment_s / per_cycle, self.min_segment), self.max_segment))
        # hand the state back
        plant.set_compiled_state(pa["q"], pa["qd"], pa["X"], pa["ta"], float(pa["t"][0]), pa["cmd"][0])
        ctrl.last_error = o_err[done - 1].copy()
        ctrl.last_saturated = mask
        ctrl.set_compiled_state(state)
        s._k = int(s_k[0])
        if self._sing and margin_prev[0] != 0.0:
            s.pose = pose_s
            s._margin_prev = (float(margin_prev[1]), float(margin_prev[2]))
            s.last_margin = float(margin_prev[2])
        ts = ts[:done]
        loop.clock.wait_until(t0 + ts[-1])
        lat, starts, comp, cyc = series
        lat.extend(np.zeros(done))
        starts.extend(t0 + ts)
        comp.extend(per[:done])
        cyc.extend(per[:done])
        metrics.add_rows(o_err[:done], o_tau[:done], o_qd[:done], np.zeros((done, n), dtype=bool), 0.0)
        return k_new, loop.driver.feedback()

    def _arguments(self, pa, N: int):
        """The segment's arguments from the law, the supervisor and the plant (``pa``, its
        :meth:`~drivers.sim.plant.SimulatedPlant.compiled_step_args`) for ``N`` cycles:
        ``(state, s_k, safety, pose_s, margin_prev, sing, plant_args, logs, work)``, the arrays
        :meth:`run` reads back after the call and the segment's work."""
        ctrl, s = self.loop.controller, self.loop.safety
        n, dim = ctrl.n, ctrl.dim
        state = ctrl.compiled_state()
        s_k = np.array([s._k], dtype=np.int64)
        eb = s._ebits if s._ebits.shape[0] == dim else np.zeros(dim, dtype=np.int64)
        s._ebits = eb
        safety = (s_k, s._limits, self._em, s._jbits, eb)
        cfg = s.config
        pose_s = np.array(s.pose if self._sing else np.zeros(3), dtype=float)    # (3,) | (6,)
        mp = s._margin_prev
        margin_prev = np.array([0.0, 0.0, 0.0] if mp is None else [1.0, mp[0], mp[1]])
        sing = (self._sing, int(cfg.singularity_every), self._Ps, self._tol, pose_s, margin_prev,
                float(cfg.singularity_margin_min) if self._sing else 0.0, float(cfg.singularity_horizon_s))
        plant_args = (pa["P"], pa["q"], pa["qd"], pa["X"], pa["ta"], pa["t"], pa["cmd"], pa["par"], pa["lag"],
                      pa["flags"], pa["h_max"], pa["has_quant"], pa["quantum"], pa["work"])
        o_q, o_qd, o_tau, o_taum = (np.empty((N, n)) for _ in range(4))
        logs = (o_q, o_qd, np.empty((N, dim)), o_tau, o_taum, np.zeros(n, dtype=np.bool_))
        work = _fast_loop.segment_work(n, dim, state.shape[0], pose_s.shape[0], pa["X"].shape[0])
        return state, s_k, safety, pose_s, margin_prev, sing, plant_args, logs, work

    def load(self) -> None:
        """Load the segment's machine code now (numba's cache, or a compile on a cold cache) by
        a call of zero cycles, which changes nothing: the loop calls it before its first cycle,
        so that the first segment's timing columns (``compute_s``, ``cycle``) hold its cycles
        only, not the loading (about 30 ms from the cache, seconds for a compile)."""
        pa, _ = self.loop.driver.plant.compiled_step_args()
        rows = self.traj.rows(0, 1)
        if pa is None or rows is None or self.unavailable is not None:
            return      # run() finds the same and runs the cycles in Python
        state, s_k, safety, pose_s, margin_prev, sing, plant_args, logs, work = self._arguments(pa, 0)
        n = self.loop.controller.n
        try:
            self._segment(0, 0, self.loop.period_s, 0.0, self._consts, state, safety, sing, plant_args,
                          (np.zeros(n), np.zeros(n), np.zeros(n)), tuple(r[0:0] for r in rows), logs, work)
        except NumbaError as err:
            self._unavailable(err)

    def _unavailable(self, err) -> None:
        """numba could not compile the segment: every cycle runs in Python (the run's messages say why)."""
        self.unavailable = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"

    def _missed(self, k):
        """Nothing ran: try again later (doubling the wait while it keeps failing)."""
        self.next_k = k + self._backoff
        self._backoff = min(2 * self._backoff, 256)


class CompiledCycle:
    """One cycle of a :class:`~controller.loop.ControlLoop` between two driver exchanges, compiled.

    With a driver that is not the in-process plant (a real or emulated bus) every cycle's command
    goes out through ``driver.cycle`` in Python, so no segment of cycles can run in a kernel; what
    lies between two exchanges can: the feedback plausibility, the law, the safety rules, the
    saturation count, the metrics row and the log row are one call of the law's per-cycle entry
    (:data:`controller._fast_loop.ONE_CYCLE`, :func:`controller._fast_loop._one_cycle`), the same
    compiled functions the Python objects call.  A cycle is committed only when it is clean (as a
    segment's cycle); otherwise nothing changed and the loop runs it in Python, where every rule
    and reaction exists once.

    While it runs cycles it holds the law's state, the supervisor's last checked pose and margin
    (:meth:`acquire`); :meth:`release` hands them back before any cycle runs in Python and when
    the loop ends.  Build with :meth:`for_loop`.
    """

    def __init__(self, loop, traj):
        from ._fast_loop import one_layout, one_work

        self.loop, self.traj = loop, traj
        self.plaus = self.metrics = None     # attach() gives them
        self.cycles = 0          # cycles run compiled
        #: why the entry could not be compiled or called (every cycle then runs in Python), or None
        self.unavailable: str | None = None
        self.held = False
        ctrl, s = loop.controller, loop.safety
        c = self._c = ctrl.compiled_args
        # what the compiled arguments are built from (as the law compares them: by identity)
        self._key = ctrl._compiled_inputs()
        self.kind = c["kind"]
        module = _segment_module(c["kind"])
        name = LAW_KERNELS[type(ctrl), c["kind"]]
        self._entry = module.ONE_CYCLE[name]
        # the entry's machine code called without the dispatcher (:meth:`_call`): set when the
        # arguments' types were checked against its one signature, for the array objects in
        # ``_seen`` (the same objects cycle after cycle: the next row is an index into them)
        self._direct = None
        self._seen = ()
        consts = tuple(c[key] for key in module.SEGMENTS[name][1])
        self._consts = consts + (0,) * (11 - len(consts))     # the entries take c0 .. c10
        sing = bool(s._sing)
        if sing and self.kind == "stewart":
            P, tol = s.model._params, 0.0       # the margin is the model's 1 / cond
        elif sing:
            P, tol = s.model._P, float(s.model._tol_sing)
        else:
            P, tol = module.NO_CHECK_PARAMS, 0.0       # no check (never read)
        cfg = s.config
        self._sing = (sing, int(cfg.singularity_every), P, tol,
                      float(cfg.singularity_margin_min) if sing else 0.0, float(cfg.singularity_horizon_s))
        n, dim = ctrl.n, ctrl.dim
        ns = ctrl.compiled_state().shape[0]
        npose = np.asarray(s.pose).shape[0] if sing else 0
        self._work = one_work(n, dim, ns, npose)
        lay = one_layout(n, dim, ns, npose)
        fw = self._work[0]
        self._cmd, self._state, self._pose = fw[lay["cmd"]], fw[lay["state"]], fw[lay["pose"]]
        self._margin, self._e_last = fw[lay["margin_prev"]], fw[lay["e_last"]]
        self._mask_last = self._work[2][3 * n:4 * n]
        # the entry's arguments from its float work array to the singularity settings
        self._flat = (fw, self._work[1], self._work[2], ns, npose) + self._sing
        self._plaus = None
        self._safety = None
        self._tel = loop.telemetry
        self._no_log = (np.zeros((0, 1), dtype=np.uint8), -1)

    @classmethod
    def for_loop(cls, loop, traj, estimator):
        """``(CompiledCycle, "")`` when the compiled cycle may apply to ``loop`` (then
        :meth:`attach` decides, with the first feedback), else ``(None, why)``."""
        from .telemetry import TelemetryWriter

        why = _law_why_not(loop, traj, estimator)
        if why:
            return None, why
        tel = loop.telemetry
        if tel is not None and (type(tel) is not TelemetryWriter or tel.next_row() is None):
            return None, "the telemetry writer has no compiled row writer"
        return cls(loop, traj), ""

    #: the types of the feedback's vectors the entry is loaded for (:meth:`load`, :meth:`attach`)
    FEEDBACK_TYPES = (("position_rad", np.float64), ("velocity_rad_s", np.float64), ("torque_nm", np.float64),
                      ("fault", np.int64), ("fresh", np.bool_), ("enabled", np.bool_))

    def attach(self, fb, estimator, plaus, metrics) -> str:
        """Take the loop's feedback check ``plaus`` and metrics: "" when the compiled cycle applies
        to the run whose first feedback is ``fb`` (vectors of :data:`FEEDBACK_TYPES`) and velocity
        estimator ``estimator``, else why not."""
        from .plausibility import FeedbackPlausibility

        if estimator is not None:
            return "velocities are estimated in Python"
        if type(plaus) is not FeedbackPlausibility:
            return "the feedback check is not the compiled plausibility check"
        n = self.loop.controller.n
        for name, dtype in self.FEEDBACK_TYPES:
            a = getattr(fb, name, None)
            if not (type(a) is np.ndarray and a.dtype == dtype and a.shape == (n,) and a.flags.carray):
                return (f"the driver's feedback {name} is not a contiguous, aligned and writeable "
                        f"{np.dtype(dtype).name} vector")
        self.plaus, self.metrics = plaus, metrics
        self._plaus = (plaus._va, plaus._ok, plaus._run)
        return ""

    def load(self) -> None:
        """Load the entry's machine code now (numba's cache, or a compile on a cold cache) by a
        call that changes nothing (no reference row), with arguments of a cycle's types: before
        the clock starts and the drives are enabled, so no cycle waits for it."""
        from drivers.base import Feedback

        from .metrics import MetricsAccumulator

        ctrl = self.loop.controller
        n, dim = ctrl.n, ctrl.dim
        fb = Feedback(0.0, *(np.zeros(n, dtype=d) for _, d in self.FEEDBACK_TYPES))
        plaus, metrics = self._plaus, self.metrics
        self._plaus = (np.zeros((2, n)), np.zeros((3, n)), np.zeros(n, dtype=np.int64))
        self.metrics = MetricsAccumulator(n, dim, 1.0, block=1)
        self.acquire()
        try:
            self._call(0, 0.0, 0.0, fb, np.zeros((0, 4, dim)), -1)
        except (NumbaError, TypeError) as err:
            self.unavailable = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
        finally:
            self.release()
            self._plaus, self.metrics = plaus, metrics

    def ready(self) -> bool:
        """Whether the next cycle may run compiled (nothing pending in Python); acquires the
        state when it may."""
        s = self.loop.safety
        if (self.unavailable is not None or s.latched or s.stop_reason is not None or s._pending or s._stale_any
                or not s._clean_path or s._em_of is not s.err_max):
            return False
        ctrl = self.loop.controller
        if not all(map(operator.is_, ctrl._compiled_inputs(), self._key)) and ctrl.compiled_args is not self._c:
            return False        # the law's model, gains or limits were replaced: Python from here
        if not self.held:
            self.acquire()
        return True

    def acquire(self) -> None:
        """Take the law's state and the supervisor's last checked pose and margin from the Python
        objects (where the last cycles ran)."""
        ctrl, s = self.loop.controller, self.loop.safety
        self._state[:] = ctrl.compiled_state()
        if s._ebits.shape[0] != ctrl.dim:
            s._ebits = np.zeros(ctrl.dim, dtype=np.int64)
        self._safety = (s._limits, s._em, s._jbits, s._ebits, s._clipped)
        self._margin[:] = 0.0
        if self._sing[0]:
            self._pose[:] = s.pose
            mp = s._margin_prev
            if mp is not None:
                self._margin[:] = (1.0, mp[0], mp[1])
        self._committed = False
        self.held = True

    def release(self) -> None:
        """Hand the state back to the Python objects (nothing when not held)."""
        if not self.held:
            return
        self.held = False
        if not self._committed:
            return
        ctrl, s = self.loop.controller, self.loop.safety
        ctrl.set_compiled_state(self._state.copy())
        ctrl.last_error = self._e_last.copy()
        ctrl.last_saturated = self._mask_last.copy()
        if self._sing[0] and self._margin[0] != 0.0:
            s.pose = self._pose.copy()
            s._margin_prev = (float(self._margin[1]), float(self._margin[2]))
            s.last_margin = float(self._margin[2])

    def _call(self, k, t, late, fb, rows, j):
        m_rows, m_sat, m_late, mi = self.metrics.block()
        tel = self._tel
        raw, ri = self._no_log if tel is None or self.loop._tel_failed else tel.next_row()
        safety = self._safety
        seen = self._seen
        entry = self._direct
        if (entry is None or rows is not seen[0] or raw is not seen[1] or m_rows is not seen[2]
                or m_sat is not seen[3] or m_late is not seen[4] or safety is not seen[5]
                or self._plaus is not seen[6]):
            entry = self._checked_entry(rows, raw, m_rows, m_sat, m_late, safety)
        return entry(k, t, late, self.loop.safety._k, fb.t_s, fb.position_rad, fb.velocity_rad_s, fb.torque_nm,
                     fb.fault, fb.fresh, fb.enabled, rows, j, raw, ri, m_rows, m_sat, m_late, mi, *safety,
                     *self._plaus, *self._flat, *self._consts)

    #: positions of the entry's arguments :meth:`_call` passes (numba types checked once per set
    #: of array objects): rows, raw, the metrics block, the supervisor's arrays, then the rest
    _ARRAYS_AT = (11, 13, 15, 16, 17, 19, 20, 21, 22, 23)

    def _checked_entry(self, rows, raw, m_rows, m_sat, m_late, safety):
        """The entry to call with these array objects: its machine code without the dispatcher
        (numba's ``entry_point``: it unboxes the arguments as its signature says, with no type
        matching) when the entry has one compiled signature and every array argument that is not
        a cycle's feedback (checked in :meth:`cycle`) has exactly its type; else the dispatcher
        (which compiles for other types, as before).  The dispatcher's matching took about half
        the call's time (49 arguments)."""
        self._direct, self._seen = None, ()
        entry = self._entry
        fixed = (*self._plaus, *self._flat, *self._consts)
        base = 19 + len(safety)
        typed = [*zip(self._ARRAYS_AT, (rows, raw, m_rows, m_sat, m_late, *safety)),
                 *((base + i, a) for i, a in enumerate(fixed))]
        direct = entry_for(entry, base + len(fixed), typed)
        if direct is entry:
            return entry
        self._direct = direct
        self._seen = (rows, raw, m_rows, m_sat, m_late, safety, self._plaus)
        return self._direct

    def cycle(self, k: int, t: float, fb, late: float) -> bool:
        """Run cycle ``k`` (time ``t`` [s], ``late`` [s]) on the feedback ``fb``: True when it was
        clean and is committed (the command in :meth:`command`, its rows written: :meth:`record`
        takes them), False when the loop must run it in Python (nothing changed)."""
        traj = self.traj
        k0 = traj._k0
        # the feedback's vectors of the types the entry was loaded for: numba would compile a new
        # version for others, in the middle of the run (a stall while the drives hold the last
        # torque), not refuse them; such a cycle runs in Python
        if not isinstance(fb.t_s, float):
            return False
        # (C-contiguous, aligned and writeable: the entry may be called without the dispatcher,
        # which would compile another version for a read-only or unaligned vector; a dtype is
        # compared by identity first, numpy's dtype objects of the native types being shared)
        nd = np.ndarray
        for a, dt in zip(_FEEDBACK_VECTORS(fb), _FEEDBACK_DTYPES):
            if type(a) is not nd or (a.dtype is not dt and a.dtype != dt) or a.ndim != 1 or not a.flags.carray:
                return False
        try:
            st = self._call(k, t, late, fb, traj._rows, k - k0 if k0 >= 0 else -1)
        except (NumbaError, TypeError) as err:
            # the feedback's types changed to ones the entry cannot take: nothing ran (typing
            # comes first), the cycles from here on run in Python (the run's messages say why)
            self.unavailable = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
            return False
        if st != 0:
            return False
        self.loop.safety._k += 1
        self._committed = True
        self.cycles += 1
        return True

    def command(self) -> np.ndarray:
        """The torque command of the last committed cycle (a new array)."""
        return self._cmd.copy()

    def record(self, compute_s: float) -> None:
        """Take the committed cycle's metrics row and log row (its ``compute_s`` [s]), as the
        loop's ``_record`` takes them; a flush's error is raised as there."""
        self.metrics.advance()
        tel = self._tel
        if tel is not None and not self.loop._tel_failed:
            tel.take_row(compute_s)


#: the feedback's vectors :meth:`CompiledCycle.cycle` checks (one call) and their dtypes, in the
#: order of :attr:`CompiledCycle.FEEDBACK_TYPES`
_FEEDBACK_VECTORS = operator.attrgetter(*(name for name, _ in CompiledCycle.FEEDBACK_TYPES))
_FEEDBACK_DTYPES = tuple(np.dtype(d) for _, d in CompiledCycle.FEEDBACK_TYPES)
