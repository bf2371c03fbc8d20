"""The fixed-period control loop.

Cycle ``k`` has the absolute deadline ``t0 + k period_s`` on the loop's clock;
``t = k period_s`` is the time since start used for the trajectory, the
controller and the log.  One cycle::

    lateness = clock.wait_until(t0 + t)
    feedback = the previous cycle's driver.cycle() result (first: driver.enable())
    qd       = feedback velocity, or a filtered finite difference where it is NaN
    ref      = trajectory.sample(t)
    tau      = controller.compute(t, ref, State(t, q, qd))   (exception -> fault)
    cmd, s   = safety.check(t, state, feedback, ref, tau)  (limits, watchdogs, stop reactions)
    feedback = driver.cycle(Command(cmd))                  (CommsError -> fault)
    telemetry.record(...)

Stop: when the safety supervisor's action is ``"disable"`` (the end of every
stop reaction) the loop sends one zero-torque command, disables the driver,
writes the row and ends; for ``zero_disable`` this happens in the same cycle
that sees the cause (the cause arrives with the feedback of the previous
cycle's command, so within 2 cycles of it).  An error from the driver (any
exception from ``driver.cycle`` or ``driver.enable``: CommsError -> cause
``"comms"``, any other type (DriverError, a simulated plant's ModelError, an
OverflowError...) -> ``"driver"``) disables the drives at once (best effort).
Any other exception between enable and the end of the run, of any type, ends
it the same way: one zero-torque command, disable (each failure recorded), the
log and ``meta.json`` closed, and the run returned as a fault with cause
``"internal"`` naming the error (a ``BaseException`` such as KeyboardInterrupt
outside the main thread is raised again after the stop).  Every signal that would end
the process (SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1/2, SIGALRM...; see
:func:`terminating_signals`) is turned into a ``"signal"`` fault (safe stop,
status ``"stopped"``) while :meth:`ControlLoop.run` runs (only when called from
the main thread); a second signal during the stop reaction ends it at once
(zero torque, disable).  The previous handlers are restored afterwards.  The log is flushed and closed in every case.

Start-up: the first feedback must pass :meth:`SafetySupervisor.startup_check`
(feedback present, drives enabled, no device fault, state within tolerance of
the trajectory start), otherwise the drives are disabled and
:class:`~dynamics.errors.SafetyError` is raised before any torque is sent.

At the end of a completed run the drives are commanded zero torque and
disabled.
"""

from __future__ import annotations

import array
import math
import signal
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Mapping

import numpy as np

from drivers.base import Command, Driver
from dynamics.errors import CommsError, ConfigError, ForeignTrafficError, SafetyError, TorqueloopError
from trajectories.base import GridCache, Trajectory

from .clock import Clock
from .estimation import FilteredDifference
from .laws import Controller, State
from .metrics import MetricsAccumulator
from .plausibility import FeedbackPlausibility
from .safety import DISABLED, FAULT, OK, Fault, SafetyState, SafetySupervisor
from .telemetry import TelemetryWriter

__all__ = ["ControlLoop", "RunResult", "TimingStats", "terminating_signals", "ignored_stop_signals",
           "handled_signals",
           "ALWAYS_HANDLED"]


#: signals whose default action ends the process (where the platform has them)
_TERMINATING = ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGALRM",
                "SIGVTALRM", "SIGPROF", "SIGXCPU", "SIGXFSZ", "SIGPWR", "SIGSTKFLT", "SIGIO", "SIGPIPE")


def terminating_signals() -> list[signal.Signals]:
    """The signals that would end the process now: default (or Python's SIGINT) disposition.

    SIGKILL and SIGSTOP cannot be caught; a signal currently ignored
    (``SIG_IGN``, e.g. SIGPIPE in CPython or SIGHUP under ``nohup``) does not end
    the process and is left alone.
    """
    out = []
    for name in _TERMINATING:
        sig = getattr(signal, name, None)
        if sig is None:
            continue
        try:
            h = signal.getsignal(sig)
        except (OSError, ValueError):  # pragma: no cover
            continue
        if h is signal.SIG_DFL or h is signal.default_int_handler:
            out.append(sig)
    return out


#: stop signals the loop handles even when the process inherited them ignored: a shell runs a
#: background job (``cmd &`` in a script) with SIGINT and SIGQUIT ignored, so Ctrl-C would not
#: stop the robot; a stop request is always taken
ALWAYS_HANDLED = ("SIGINT", "SIGTERM", "SIGQUIT")


def ignored_stop_signals() -> list[signal.Signals]:
    """The stop signals (SIGINT, SIGTERM, SIGQUIT, SIGHUP) this process inherited ignored.

    The loop handles those of :data:`ALWAYS_HANDLED` anyway; an ignored SIGHUP (``nohup``) is
    left ignored (a run meant to outlive its terminal), and the command says so at start."""
    out = []
    for name in ALWAYS_HANDLED + ("SIGHUP",):
        sig = getattr(signal, name, None)
        if sig is None:
            continue
        try:
            if signal.getsignal(sig) is signal.SIG_IGN:
                out.append(sig)
        except (OSError, ValueError):  # pragma: no cover
            continue
    return out


def handled_signals() -> list[signal.Signals]:
    """The signals :class:`ControlLoop` routes through the safe stop in this process now.

    Those of :func:`terminating_signals`, plus those of :data:`ALWAYS_HANDLED` inherited
    ignored (a background job's SIGINT/SIGQUIT); an ignored SIGHUP (``nohup``) is not taken."""
    take = terminating_signals()
    take += [sig for sig in ignored_stop_signals() if sig.name in ALWAYS_HANDLED and sig not in take]
    return take


class _Series:
    """A growable series of floats (C doubles: amortised O(1) append, 8 bytes per sample).

    :meth:`append` is the bound ``append`` of an :class:`array.array` (no Python frame
    per sample).
    """

    def __init__(self):
        self.a = array.array("d")
        self.append = self.a.append

    def extend(self, x) -> None:
        """Append the values of an array (as many :meth:`append` calls)."""
        self.a.frombytes(np.ascontiguousarray(x, dtype=float).reshape(-1).tobytes())

    def values(self) -> np.ndarray:
        """The samples so far, shape (n,) (a copy)."""
        return np.array(self.a, dtype=float)


#: the percentiles of :class:`TimingStats` (the keys of :func:`_pct` but ``max``) as fractions,
#: formed as ``numpy.percentile`` forms them (99.9 / 100 is not the literal 0.999)
_PCT_KEYS = (("p50", 50 / 100), ("p99", 99 / 100), ("p99_9", 99.9 / 100))


def _pct(x: np.ndarray) -> dict:
    """p50, p99, p99.9 (``numpy.percentile``'s default linear interpolation: its index
    ``(n - 1) q`` and its two-sided lerp) and the maximum of x (n,) [s].

    One ``np.partition`` for every order statistic the four need: a run has four such
    series, and for 4002 samples ``np.percentile`` plus ``np.max`` took 47 us a series
    against 18 us here.  A NaN sample makes every entry NaN, as there."""
    n = x.size
    if n == 0:
        return {"p50": float("nan"), "p99": float("nan"), "p99_9": float("nan"), "max": float("nan")}
    pos = [q * (n - 1) for _, q in _PCT_KEYS]
    kth = sorted({min(int(p) + d, n - 1) for p in pos for d in (0, 1)} | {n - 1})
    s = np.partition(x, kth)
    if s[n - 1] != s[n - 1]:        # NaN sorts last
        return {"p50": float("nan"), "p99": float("nan"), "p99_9": float("nan"), "max": float("nan")}
    out = {}
    for (key, _), p in zip(_PCT_KEYS, pos):
        lo = int(p)
        a = float(s[lo])
        b = float(s[min(lo + 1, n - 1)])
        t = p - lo
        out[key] = b - (b - a) * (1.0 - t) if t >= 0.5 else a + (b - a) * t
    out["max"] = float(s[n - 1])
    return out


@dataclass
class TimingStats:
    """Per-cycle timing statistics [s] (percentiles p50/p99/p99.9 and max).

    ``lateness``: cycle start after its deadline; ``period_error``: the actual
    interval between cycle starts minus the period, in absolute value; ``compute``: estimate + control +
    safety time (real CPU time, also in lock-step runs); ``cycle``: the whole
    cycle including driver I/O and telemetry.  ``missed_deadlines``: cycles
    later than ``miss_threshold_fraction_of_period * period_s``.
    """

    n_cycles: int
    period_s: float
    lateness: dict
    period_error: dict
    compute: dict
    cycle: dict
    missed_deadlines: int
    miss_threshold_fraction_of_period: float

    @staticmethod
    def from_arrays(period_s, lateness, starts, compute, cycle, miss_threshold_fraction_of_period) -> "TimingStats":
        perr = np.abs(np.diff(starts) - period_s) if starts.size > 1 else np.zeros(0)
        frac = float(miss_threshold_fraction_of_period)
        return TimingStats(int(lateness.size), float(period_s), _pct(lateness), _pct(perr), _pct(compute),
                           _pct(cycle), int(np.sum(lateness > frac * period_s)), frac)

    def as_dict(self) -> dict:
        return asdict(self)

    @staticmethod
    def threshold_s(timing: Mapping) -> float:
        """The lateness counted as a missed deadline [s] of a timing dict (:meth:`as_dict`, a
        run's ``meta.json`` ``result.timing``); a run written before the threshold had its name
        holds it as ``miss_fraction``."""
        frac = timing.get("miss_threshold_fraction_of_period", timing.get("miss_fraction", 0.5))
        return float(frac) * float(timing.get("period_s", 0.0) or 0.0)


@dataclass
class RunResult:
    """Outcome of :meth:`ControlLoop.run`.

    Attributes
    ----------
    status : str
        ``"completed"`` (trajectory finished), ``"stopped"`` (external stop
        request / signal) or ``"fault"``.
    faults : list of Fault
    n_cycles : int
        Cycles executed (commands sent, including stop-reaction cycles).
    timing : TimingStats
    metrics : dict
        See :mod:`controller.metrics`.
    log_dir : str or None
    messages : list of str
        Notes (real-time settings not applied, defaults chosen).
    wall_time_s : float
        Real elapsed time of the cycle loop [s].
    log_unwritten : ndarray or None
        Log rows the telemetry could not write (a full disk), kept in memory.
    compiled_cycles : int
        Cycles run in the compiled offline loop (:mod:`controller.compiled`).
    """

    status: str
    faults: list
    n_cycles: int
    timing: TimingStats
    metrics: dict
    log_dir: str | None = None
    messages: list = field(default_factory=list)
    wall_time_s: float = 0.0
    #: log rows that could not be written (disk full), else None
    log_unwritten: object = None
    compiled_cycles: int = 0
    #: the result of the recovery's hold (:meth:`controller.app.run.Run.recover`), if one ran
    recovery: "RunResult | None" = None

    def as_dict(self) -> dict:
        return {"status": self.status, "faults": [asdict(f) for f in self.faults], "n_cycles": self.n_cycles,
                "timing": self.timing.as_dict(), "metrics": self.metrics, "log_dir": self.log_dir,
                "messages": list(self.messages), "wall_time_s": self.wall_time_s}


class ControlLoop:
    """Run a controller against a driver along a trajectory (see module docstring).

    Parameters
    ----------
    driver : drivers.base.Driver
    controller : controller.laws.Controller
    trajectory : trajectories.base.Trajectory
        In the controller's space (``dim == controller.dim``).
    safety : SafetySupervisor
    clock : Clock
        :class:`~controller.clock.LockstepClock` for offline runs, WallClock for real time.
    period_s : float
        Control period [s].
    telemetry : TelemetryWriter, optional
        Closed by the loop at the end (with the result in meta.json).
    velocity_estimator : optional
        Object with ``reset()`` and ``update(t, q) -> qd``; used for joints whose
        feedback velocity is NaN (default: FilteredDifference with a cut-off of
        ``0.05 / period_s`` Hz, created when first needed).
    duration_s : float, optional
        Run length (default: the trajectory's duration); the last cycle is at
        ``t = duration_s``.
    miss_threshold_fraction_of_period : float
        Deadline-miss threshold as a fraction of the period.
    task_layout : {"planar", "point", "planar_point", "spatial", "orientation"}, optional
        For task-space metrics (default: the controller's model's
        :attr:`~dynamics.base.ParallelModel.task_layout`, else task dof 3 -> planar, 6 -> spatial).
    handle_signals : bool
        Install SIGINT/SIGTERM handlers during :meth:`run` (main thread only).
    compiled : bool
        Run the clean cycles in the compiled offline loop where it applies
        (:mod:`controller.compiled`: lock-step clock, in-process plant, a law with a
        compiled form), and with any other driver what lies between two of its exchanges
        (plausibility, law, safety rules, metrics and log row) in one compiled call per clean
        cycle (:class:`~controller.compiled.CompiledCycle`: a law with a compiled form, the
        reference on the loop's grid, the feedback's velocities measured); bit-identical
        results, only the timing columns differ.  ``False`` runs every cycle in Python.
    """

    def __init__(self, driver: Driver, controller: Controller, trajectory, safety: SafetySupervisor,
                 clock: Clock, *, period_s: float, telemetry: TelemetryWriter | None = None,
                 velocity_estimator=None, duration_s: float | None = None,
                 miss_threshold_fraction_of_period: float = 0.5,
                 task_layout: str | None = None, handle_signals: bool = True, compiled: bool = True):
        if not (period_s > 0 and np.isfinite(period_s)):
            raise ConfigError(f"must be finite and > 0, got {period_s!r}", field="period_s")
        n = driver.n_joints
        if controller.n != n:
            raise ConfigError(f"controller drives {controller.n} actuators but the driver has {n}")
        if trajectory.dim != controller.dim:
            raise ConfigError(f"trajectory has dim {trajectory.dim} but the controller expects {controller.dim}")
        if safety.n != n:
            raise ConfigError(f"safety supervisor is set up for {safety.n} joints, driver has {n}")
        self.driver, self.controller, self.trajectory = driver, controller, trajectory
        self.safety, self.clock = safety, clock
        if safety.fault_text is None:
            safety.fault_text = getattr(driver, "fault_text", None)     # names a device fault
        self.period_s = float(period_s)
        self.telemetry = telemetry
        self.velocity_estimator = velocity_estimator
        self.duration_s = float(trajectory.duration_s if duration_s is None else duration_s)
        if not (self.duration_s >= 0 and np.isfinite(self.duration_s)):
            raise ConfigError(f"must be finite and >= 0, got {duration_s!r}", field="duration_s")
        self.miss_threshold_fraction_of_period = float(miss_threshold_fraction_of_period)
        if task_layout is None and controller.space == "task":
            model = getattr(controller, "model", None)
            task_layout = (model.task_layout if hasattr(model, "task_layout")
                           else {3: "planar", 6: "spatial"}.get(controller.dim))
        self.task_layout = task_layout
        self.handle_signals = handle_signals
        self.compiled = bool(compiled)
        self.n_planned = int(np.floor(self.duration_s / self.period_s + 1e-9)) + 1

    # -- signals -------------------------------------------------------------------
    def _install_signals(self):
        """Route every signal that would end the process through the safe stop.

        The signals whose current disposition would terminate the process are
        taken, and SIGINT, SIGTERM and SIGQUIT even when inherited ignored (a
        background job's Ctrl-C); an ignored SIGHUP (``nohup``) stays ignored.  The first one requests a stop (the configured
        stop reaction runs); a second one during the stop reaction cuts it short:
        zero torque and disable in the next cycle.
        """
        if not self.handle_signals or threading.current_thread() is not threading.main_thread():
            return {}
        saved = {}

        def handler(signum, frame):
            self.safety.request_stop(signal.Signals(signum).name)

        for sig in handled_signals():
            try:
                saved[sig] = signal.signal(sig, handler)
            except (OSError, ValueError):  # pragma: no cover - not settable on this platform
                pass
        return saved

    @staticmethod
    def _restore_signals(saved):
        for sig, h in saved.items():
            signal.signal(sig, h)

    # -- run -----------------------------------------------------------------------
    def run(self) -> RunResult:
        """Run until the trajectory ends or a fault stops the robot; see module docstring.

        Raises
        ------
        SafetyError
            The start-up check failed (drives disabled, nothing was sent).
        """
        n, dim, P = self.driver.n_joints, self.controller.dim, self.period_s
        messages: list[str] = []
        lat, starts, comp, cyc = (_Series() for _ in range(4))
        metrics = MetricsAccumulator(n, dim, P, task_layout=self.task_layout,
                                     miss_threshold_fraction_of_period=self.miss_threshold_fraction_of_period,
                                     torque_limit=getattr(self.safety, "tau_max", None))
        status = "fault"
        k = 0
        enabled = False
        running = False     # past the start-up check: an error from here on ends the run as a fault
        wall0 = time.perf_counter()
        self.safety.reset()
        self.controller.reset()
        self._tel_failed = False
        one = None          # the compiled cycle, when it applies
        saved = self._install_signals()
        try:
            # what costs time once (the reference's grid table, loading compiled code) comes
            # before the drives are enabled: nothing holds the robot between enable and the
            # first cycle, and on the wall clock the first cycles would start late
            traj = _grid_sampler(self.trajectory, P, self.duration_s)
            ref0 = traj.sample(0.0)
            CompiledCycles = None
            if self.compiled:
                from .compiled import CompiledCycle, CompiledCycles
                # the compiled cycle's machine code, in case no compiled offline loop applies
                one, _why = CompiledCycle.for_loop(self, traj, self.velocity_estimator)
                if one is not None and not CompiledCycles.may_apply(self):
                    one.load()
            FeedbackPlausibility.load()
            messages.extend(self.clock.start())
            try:
                fb = self.driver.enable()
                enabled = True
            except Exception as err:  # noqa: BLE001 - of any type: some drives may be on already
                self.safety.fault(0.0, _driver_cause(err), f"enable failed: {type(err).__name__}: {err}")
                messages.extend(getattr(self.driver, "enable_notes", None) or ())
                self._disable(0.0)
                return self._finish("fault", 0, messages, lat, starts, comp, cyc, metrics, wall0)
            # what enable cleared on the drives (a stale trip it acknowledged): in the run's messages
            messages.extend(getattr(self.driver, "enable_notes", None) or ())
            est = self.velocity_estimator
            qd0 = np.asarray(fb.velocity_rad_s, dtype=float)
            if est is None and np.any(np.isnan(qd0)):
                cutoff = 0.05 / P
                est = FilteredDifference(n, cutoff)
                messages.append(f"feedback has no velocity; using a filtered finite difference ({cutoff:.4g} Hz)")
            if est is not None:
                est.reset()
            # start-up check
            state0 = State(0.0, np.asarray(fb.position_rad, float), np.where(np.isnan(qd0), 0.0, qd0))
            if np.all(np.isfinite(state0.q)):
                try:
                    err0 = self.controller.tracking_error(ref0, state0)
                except Exception as exc:  # noqa: BLE001 - re-raised as SafetyError
                    raise SafetyError(f"start-up check failed: cannot evaluate the start error: {exc}") from exc
            else:       # missing feedback: the check below names the joints (and the driver's hint)
                err0 = np.full(self.controller.dim, np.nan)
            self.safety.startup_check(fb, err0)
            self.controller.reset()
            running = True
            plaus, note = FeedbackPlausibility.for_supervisor(self.safety, state0.q,
                                                              self.safety.config.feedback_accel_max)
            if note:
                messages.append(note)
            plaus.accept(_t_meas(fb, 0.0), fb)

            zero = np.zeros(n)
            nan_dim = np.full(dim, np.nan)
            tel = self.telemetry
            miss_s = self.miss_threshold_fraction_of_period * P
            fast = None
            if CompiledCycles is not None:
                fast, _why = CompiledCycles.for_loop(self, traj, est)
                if fast is not None:
                    fast.load()     # its machine code, before the first cycle's timing
                    one = None
                elif one is not None and one.attach(fb, est, plaus, metrics):
                    one = None
            series = (lat, starts, comp, cyc)
            watchdog_s = getattr(self.driver, "watchdog_s", None)
            t0 = self.clock.now()
            while k < self.n_planned or self.safety.latched:
                if fast is not None and k < self.n_planned and fast.ready(k):
                    k, fb = fast.run(k, self.n_planned, t0, fb, tel, metrics, series)
                    plaus.accept(_t_meas(fb, k * P), fb)     # the in-process plant's exact state
                    continue
                t = k * P
                late = c0 = None
                noted = False
                if one is not None:
                    if k < self.n_planned and one.ready():
                        # the cycle between two exchanges in one compiled call, when it is clean
                        late = self.clock.wait_until(t0 + t)
                        if late > miss_s:
                            # a late cycle is counted here, and runs compiled unless the count
                            # raised a fault: the Python cycle is slower, and late cycles are the
                            # ones that must catch up (the Stewart platform on six ODrive axes,
                            # 15 ms stalls every 0.5 s: about 8 % fewer missed deadlines)
                            self._overran(t, late, watchdog_s)
                            noted = True
                        if late <= miss_s or one.ready():
                            c0 = time.perf_counter()
                            now = self.clock.now()
                            if one.cycle(k, t, fb, late):
                                c1 = time.perf_counter()
                                starts.append(now)
                                comp.append(c1 - c0)
                                lat.append(late)
                                fb_used = fb
                                try:
                                    fb = self.driver.cycle(Command(one.command()))
                                except Exception as exc:  # noqa: BLE001 - as in the Python cycle below
                                    one.release()
                                    # the cycle's values as the Python cycle has them (the law's
                                    # output is the command: the cycle was clean)
                                    cmd = one.command()
                                    state = State(t, np.asarray(fb_used.position_rad, dtype=float),
                                                  np.asarray(fb_used.velocity_rad_s, dtype=float))
                                    ss = SafetyState(OK, "run", np.zeros(n, dtype=bool))
                                    enabled = self._exchange_failed(t, exc, tel, metrics, state, traj.sample(t),
                                                          self.controller.last_error, cmd.copy(), cmd, fb_used, ss,
                                                          late, c1 - c0)
                                    cyc.append(time.perf_counter() - c0)
                                    k += 1
                                    break
                                self._record_compiled(one, t, c1 - c0)
                                cyc.append(time.perf_counter() - c0)
                                k += 1
                                continue
                    one.release()       # the Python cycle below uses the objects' state
                if k:
                    # the feedback of the last exchange, before anything uses it
                    fb, bad, run_bad = plaus.check(_t_meas(fb, t), fb)
                    for j in run_bad:
                        self.safety.fault(t, "implausible_feedback",
                                          f"{int(plaus._run[j])} implausible samples in a row (jumps or position "
                                          "and velocity that the robot's limits make impossible)", joint=int(j),
                                          q=float(fb.position_rad[j]), qd=float(fb.velocity_rad_s[j]))
                if late is None:
                    late = self.clock.wait_until(t0 + t)
                if late > miss_s and not noted:
                    self._overran(t, late, watchdog_s)
                if c0 is None:
                    c0 = time.perf_counter()
                starts.append(self.clock.now())
                q = np.asarray(fb.position_rad, dtype=float)
                qd = np.asarray(fb.velocity_rad_s, dtype=float)
                if est is not None:
                    v = est.update(_t_meas(fb, t), q)
                    qd = np.where(np.isnan(qd), v, qd)
                state = State(t, q, qd)
                try:
                    ref = traj.sample(t)
                except Exception as exc:  # noqa: BLE001 - a fault, recorded
                    self.safety.fault(t, "trajectory", repr(exc))
                    ref = _NanRef(dim)
                try:
                    tau = np.asarray(self.controller.compute(t, ref, state), dtype=float)
                    err = self.controller.last_error
                    if tau.shape != (n,):
                        raise TorqueloopError(f"controller returned shape {tau.shape}, expected ({n},)")
                except Exception as exc:  # noqa: BLE001 - controller/model failure is a fault
                    self.safety.fault(t, "controller", f"{type(exc).__name__}: {exc}")
                    tau = np.full(n, np.nan)
                    err = nan_dim
                cmd, ss = self.safety.check(t, state, fb, ref, tau, error=err)
                c1 = time.perf_counter()
                comp.append(c1 - c0)
                lat.append(late)
                if ss.action == "disable":
                    fb_used = fb
                    try:
                        self.driver.cycle(Command(zero.copy()))
                    except Exception as exc:  # noqa: BLE001 - recorded; the disable follows
                        self.safety.faults.append(Fault(t, _driver_cause(exc), None, {},
                                                        f"zero command failed: {type(exc).__name__}: {exc}"))
                    enabled = not self._disable(t)
                    self._record(tel, metrics, t, state, ref, err, tau, zero, fb_used, ss, late, c1 - c0)
                    cyc.append(time.perf_counter() - c0)
                    k += 1
                    break
                fb_used = fb
                try:
                    fb = self.driver.cycle(Command(cmd))
                except Exception as exc:  # noqa: BLE001 - any error of the exchange: safe stop
                    enabled = self._exchange_failed(t, exc, tel, metrics, state, ref, err, tau, cmd, fb_used, ss, late, c1 - c0)
                    cyc.append(time.perf_counter() - c0)
                    k += 1
                    break
                self._record(tel, metrics, t, state, ref, err, tau, cmd, fb_used, ss, late, c1 - c0)
                cyc.append(time.perf_counter() - c0)
                k += 1
            else:
                status = "completed"
            if one is not None:
                one.release()
                if one.cycles:
                    messages.append(f"compiled cycle: {one.cycles} of {k} cycles between the driver's exchanges")
                if one.unavailable:
                    messages.append(f"compiled cycle unavailable, the cycles from there on ran in Python "
                                    f"(same results): {one.unavailable}")
            if status == "completed":
                # the final disable is a cycle of its own in the log: zero torque, drives off
                t = k * P
                late = self.clock.wait_until(t0 + t)
                c0 = time.perf_counter()
                starts.append(self.clock.now())
                try:
                    fb_end = self.driver.cycle(Command(zero.copy()))
                except Exception as exc:  # noqa: BLE001 - recorded; the disable follows
                    self.safety.faults.append(Fault(t, _driver_cause(exc), None, {},
                                                    f"zero command failed: {type(exc).__name__}: {exc}"))
                    fb_end = fb
                enabled = not self._disable(t)
                q_end = np.asarray(fb_end.position_rad, dtype=float)
                qd_end = np.asarray(fb_end.velocity_rad_s, dtype=float)
                ref = traj.sample(min(t, self.duration_s))
                st_end = State(t, q_end, np.where(np.isnan(qd_end), 0.0, qd_end))
                try:
                    err_end = np.asarray(self.controller.tracking_error(ref, st_end), dtype=float)
                except Exception:  # noqa: BLE001 - the log row keeps NaN; the run is over
                    err_end = nan_dim
                ss = SafetyState(DISABLED, "disable", np.zeros(n, dtype=bool))
                self._record(tel, metrics, t, st_end, ref, err_end, zero, zero, fb_end, ss, late,
                             time.perf_counter() - c0)
                lat.append(late)
                comp.append(time.perf_counter() - c0)
                cyc.append(time.perf_counter() - c0)
                k += 1
            elif self.safety.faults and self.safety.faults[0].cause == "signal":
                status = "stopped"
            if plaus.rejected.any():
                messages.append("feedback plausibility: " + ", ".join(
                    f"joint {j}: {int(c)} implausible sample(s) not used" for j, c in enumerate(plaus.rejected) if c))
            if fast is not None and fast.cycles:
                messages.append(f"compiled offline loop: {fast.cycles} of {k} cycles "
                                "(timing columns of those cycles are segment means)")
            if fast is not None and fast.unavailable:
                messages.append(f"compiled offline loop unavailable, the cycles from there on ran in Python "
                                f"(same results): {fast.unavailable}")
            result = self._finish(status, k, messages, lat, starts, comp, cyc, metrics, wall0)
            result.compiled_cycles = fast.cycles if fast is not None else 0
            return result
        except BaseException as exc:
            if one is not None:
                one.release()
            # anything raised between enable and the end of the run, of any type (a bug, an
            # OverflowError, KeyboardInterrupt outside the main thread): the drives are stopped
            # (zero torque, disable: best effort, each failure recorded) before anything else
            if enabled and running:
                self._stop_drives(k * P)
            elif enabled:       # refused at start-up: no torque was ever sent, none is now
                self._disable(k * P)
            enabled = False
            if running and isinstance(exc, Exception):
                # ... and the run ends as a fault naming it, its log kept (exit code 1)
                self.safety.faults.append(Fault(k * P, "internal", None, {"error": repr(exc)},
                                                f"{type(exc).__name__}: {exc} (run stopped: zero torque "
                                                f"sent, drives disabled)"))
                return self._finish("fault", k, messages, lat, starts, comp, cyc, metrics, wall0)
            if self.telemetry is not None:
                self.telemetry.close({"status": "error", "n_cycles": k,
                                      "faults": [asdict(f) for f in self.safety.faults]})
            raise
        finally:
            self._restore_signals(saved)
            self.clock.stop()

    def _exchange_failed(self, t, exc, tel, metrics, state, ref, err, tau, cmd, fb_used, ss, late, compute_s):
        """The driver's exchange of cycle ``t`` [s] raised ``exc``: a fault, the drives disabled,
        the cycle's row recorded (flagged fault and disabled).  Returns whether the drives are still
        enabled (the disable failed)."""
        self.safety.fault(t, _driver_cause(exc), f"{type(exc).__name__}: {exc}")
        enabled = not self._disable(t)
        ss.code |= FAULT | DISABLED
        self._record(tel, metrics, t, state, ref, err, tau, cmd, fb_used, ss, late, compute_s)
        return enabled

    def _stop_drives(self, t) -> None:
        """One zero-torque command, then disable; every failure (of any type) is recorded as a fault."""
        try:
            self.driver.cycle(Command(np.zeros(self.driver.n_joints)))
        except Exception as exc:  # noqa: BLE001 - recorded; the disable follows
            self.safety.faults.append(Fault(t, _driver_cause(exc), None, {},
                                            f"zero command failed: {type(exc).__name__}: {exc}"))
        self._disable(t)

    def _disable(self, t) -> bool:
        """Disable the driver; a failure (of any type) is recorded as a fault.  Returns True when it
        succeeded."""
        try:
            self.driver.disable()
            return True
        except Exception as exc:  # noqa: BLE001 - recorded: the run is ending either way
            self.safety.faults.append(Fault(t, _driver_cause(exc), None, {},
                                            f"disable failed: {type(exc).__name__}: {exc}"))
            return False

    def _record(self, tel, metrics, t, state, ref, err, tau, cmd, fb, ss, late, compute_s):
        metrics.add(err, cmd, state.qd, ss.saturated, late)
        if tel is not None and not self._tel_failed:
            try:
                tel.record(t, state.q, state.qd, ref.pos, ref.vel, ref.acc, err, tau, cmd, fb.torque_nm,
                           ss.code, ss.saturated, late, compute_s, fb.fresh, fb.fault, fb.enabled)
            except (OSError, ValueError) as exc:
                self._log_failed(t, exc)

    def _overran(self, t, late, watchdog_s) -> None:
        """Count cycle ``t`` [s] that started ``late`` [s] after its deadline (the safety's overrun
        rules), and stop when the drives' own watchdog (``watchdog_s`` [s], None: none) ran out
        meanwhile."""
        self.safety.note_overrun(t, late)
        if watchdog_s is not None and late > watchdog_s and not self.safety.latched:
            # the drives' own timeout ran out meanwhile: their torque is off, the state has
            # moved on without control; resuming would command the whole error at once
            self.safety.fault(t, "overrun", f"the loop stalled {late * 1e3:.1f} ms, longer than the "
                              f"drives' watchdog ({watchdog_s * 1e3:g} ms): stopped, not resumed",
                              late_s=float(late), watchdog_s=watchdog_s)

    def _record_compiled(self, one, t, compute_s):
        """:meth:`_record` of a cycle the compiled cycle ran (its rows written by it)."""
        try:
            one.record(compute_s)
        except (OSError, ValueError) as exc:
            self._log_failed(t, exc)

    def _log_failed(self, t, exc):
        """A log write of cycle ``t`` [s] failed: a fault (safe stop at the next cycle)."""
        if isinstance(exc, OSError):
            # the disk is full or failing: the writer keeps the rows in memory (and
            # keeps taking them); stop the robot
            self.safety.fault(t, "telemetry", f"log write failed, rows kept in memory: "
                                              f"{type(exc).__name__}: {exc}")
        else:
            # cannot log any more: stop the robot
            self._tel_failed = True
            self.safety.fault(t, "telemetry", f"{type(exc).__name__}: {exc}")

    def _finish(self, status, k, messages, lat, starts, comp, cyc, metrics, wall0) -> RunResult:
        timing = TimingStats.from_arrays(self.period_s, lat.values(), starts.values(), comp.values(), cyc.values(),
                                         self.miss_threshold_fraction_of_period)
        res = RunResult(status, list(self.safety.faults), k, timing, metrics.result(),
                        None if self.telemetry is None else str(self.telemetry.directory), messages,
                        time.perf_counter() - wall0)
        if self.telemetry is not None:
            tel = self.telemetry
            try:
                tel.close(res.as_dict())
            except OSError as exc:
                res.messages.append(f"telemetry could not be closed cleanly (meta.json has no result): {exc}")
            res.messages.extend(getattr(tel, "notes", ()))
            if getattr(tel, "write_error", None) is not None:
                res.log_unwritten = tel.unwritten()
                res.messages.append(f"log incomplete: {tel.rows_written} rows on disk, "
                                    f"{res.log_unwritten.shape[0]} kept in memory only "
                                    f"(RunResult.log_unwritten): {tel.write_error}")
        return res


def _grid_sampler(trajectory, period_s: float, horizon_s: float | None = None):
    """``trajectory`` behind a :class:`trajectories.base.GridCache` when that is exact.

    The loop samples at ``t = k * period_s`` up to its duration ``horizon_s``; a trajectory
    using the standard :meth:`Trajectory.sample` (vectorised, element-wise identical to scalar
    sampling) is then evaluated in blocks, its table up to the run's end only (a 2 s run of
    a 9.5 s trajectory evaluated all of it: most of the Stewart run's start).  Anything else is
    used as it is.
    """
    if isinstance(trajectory, Trajectory) and type(trajectory).sample is Trajectory.sample:
        return GridCache(trajectory, period_s, horizon_s=horizon_s)
    return trajectory


def _t_meas(fb, t: float) -> float:
    """The time of a feedback sample [s]: its time stamp, else the loop time ``t`` of its cycle."""
    return fb.t_s if math.isfinite(fb.t_s) else t


def _driver_cause(exc: BaseException) -> str:
    """Fault cause for an error raised by the driver: "foreign_traffic" for another node on our
    devices' ids, "comms" for other bus errors, else "driver"."""
    if isinstance(exc, ForeignTrafficError):
        return "foreign_traffic"
    return "comms" if isinstance(exc, CommsError) else "driver"


class _NanRef:
    """A reference of NaNs (used when the trajectory itself failed; the safety layer then stops)."""

    def __init__(self, dim):
        self.pos = np.full(dim, np.nan)
        self.vel = np.full(dim, np.nan)
        self.acc = np.full(dim, np.nan)
