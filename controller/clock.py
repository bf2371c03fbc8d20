"""Clocks for the control loop: simulated lock-step time and paced wall time.

A clock gives the loop its notion of time (seconds, float) and waits for the
absolute deadline of each cycle:

* :class:`LockstepClock` -- simulated time.  ``wait_until(t)`` jumps to ``t``
  instantly, so an offline run (simulated plant) goes as fast as the CPU
  allows and is bit-for-bit deterministic.
* :class:`WallClock` -- soft real-time pacing on the monotonic clock
  (``time.perf_counter_ns``).  Deadlines are absolute (``t0 + k period``), so
  lateness does not accumulate; the clock sleeps until ``spin_s`` before the
  deadline and then busy-waits for the rest, but never busy-waits more than a
  quarter of the time between two deadlines (``SPIN_FRACTION_MAX``), so a fast loop
  still sleeps in every cycle: under SCHED_FIFO, Linux throttles a task that keeps a
  CPU busy (``/proc/sys/kernel/sched_rt_runtime_us``: 950 ms of every second by
  default), and a loop that never sleeps then stops for 50 ms once a second (measured:
  a 4 kHz 3RRR run with ``spin_s`` 200 us stalled 53 ms and stopped on the overrun
  rule).  Optional real-time settings
  (SCHED_FIFO priority, CPU affinity, freezing the garbage collector) are
  applied in :meth:`WallClock.start` where the OS permits and undone in
  :meth:`WallClock.stop`; what could not be applied is reported with
  ``warnings.warn(..., RealtimeWarning)`` and kept in ``clock.messages``.
"""

from __future__ import annotations

import time
import warnings
from typing import Protocol, runtime_checkable

from drivers.realtime import REALTIME_KEYS, apply_realtime, restore_realtime
from dynamics.errors import ConfigError

__all__ = ["Clock", "LockstepClock", "WallClock", "RealtimeWarning", "SPIN_FRACTION_MAX"]

#: the wall clock's busy-wait before a deadline is at most this fraction of the time since the
#: previous deadline (the loop's period), whatever ``spin_s`` says
SPIN_FRACTION_MAX = 0.25


class RealtimeWarning(RuntimeWarning):
    """A real-time setting (priority, affinity) could not be applied."""


@runtime_checkable
class Clock(Protocol):
    """What the control loop needs from a clock."""

    def now(self) -> float:
        """Current time [s]."""

    def wait_until(self, t_s: float) -> float:
        """Return at (or after) time ``t_s``; the result is the lateness [s] (>= 0)."""

    def start(self) -> list[str]:
        """Called when the loop starts; returns messages about settings not applied."""

    def stop(self) -> None:
        """Called when the loop ends (restore what ``start`` changed)."""


class LockstepClock:
    """Simulated time that advances only through :meth:`wait_until` / :meth:`advance`.

    Parameters
    ----------
    t0 : float
        Initial time [s].
    """

    #: time does not move while a caller waits: an emulated device served in the caller's thread
    #: cannot answer during a wait (drivers.sim.emulators.InlineBus does not sleep it out)
    frozen_while_waiting = True

    def __init__(self, t0: float = 0.0):
        self._t = float(t0)
        self.messages: list[str] = []

    def now(self) -> float:
        return self._t

    def wait_until(self, t_s: float) -> float:
        """Jump to ``t_s`` (never backwards); lateness is ``now - t_s`` if already past."""
        if t_s >= self._t:
            self._t = float(t_s)
            return 0.0
        return self._t - t_s

    def advance(self, dt_s: float) -> float:
        """Move time forward by ``dt_s`` (e.g. to model a computation delay); returns now."""
        if dt_s < 0:
            raise ValueError("cannot move a clock backwards")
        self._t += dt_s
        return self._t

    def start(self) -> list[str]:
        return []

    def stop(self) -> None:
        return None


class WallClock:
    """Monotonic wall-clock time with sleep-then-spin pacing.

    Parameters
    ----------
    spin_s : float
        Busy-wait window before each deadline [s] (absorbs sleep overshoot;
        0 sleeps only), at most :data:`SPIN_FRACTION_MAX` of the time since the
        previous deadline.
    realtime : dict, optional
        Keys: ``sched_fifo_priority`` (int 1..99, SCHED_FIFO), ``cpu`` (int or
        list of CPUs for affinity), ``freeze_gc`` (bool: ``gc.freeze()`` and
        ``gc.disable()`` while running).  Applied by :meth:`start`.
    """

    _KEYS = REALTIME_KEYS
    #: time moves while a caller waits (see :attr:`LockstepClock.frozen_while_waiting`)
    frozen_while_waiting = False

    def __init__(self, spin_s: float = 2e-4, realtime: dict | None = None):
        if not (spin_s >= 0.0):
            raise ConfigError(f"spin_s must be >= 0, got {spin_s!r}", field="spin_s")
        self.spin_s = float(spin_s)
        realtime = dict(realtime or {})
        unknown = set(realtime) - self._KEYS
        if unknown:
            raise ConfigError(f"unknown realtime setting(s) {sorted(unknown)}; allowed {sorted(self._KEYS)}",
                              field="realtime")
        self.realtime = realtime
        self.messages: list[str] = []
        self._t0_ns = time.perf_counter_ns()
        self._last_target_ns: int | None = None
        self._saved: dict = {}

    def now(self) -> float:
        return (time.perf_counter_ns() - self._t0_ns) * 1e-9

    def spin_ns(self, period_ns: int | None) -> int:
        """The busy-wait window before a deadline [ns]: ``spin_s``, at most
        :data:`SPIN_FRACTION_MAX` of ``period_ns`` (the time since the previous deadline; None
        before the first)."""
        spin_ns = int(self.spin_s * 1e9)
        if period_ns is not None and period_ns > 0:
            spin_ns = min(spin_ns, int(period_ns * SPIN_FRACTION_MAX))
        return spin_ns

    def wait_until(self, t_s: float) -> float:
        target_ns = self._t0_ns + int(round(t_s * 1e9))
        last, self._last_target_ns = self._last_target_ns, target_ns
        spin_ns = self.spin_ns(None if last is None else target_ns - last)
        remaining = target_ns - time.perf_counter_ns()
        if remaining > spin_ns:
            time.sleep((remaining - spin_ns) * 1e-9)
        while True:
            now = time.perf_counter_ns()
            if now >= target_ns:
                return (now - target_ns) * 1e-9

    # -- real-time settings ----------------------------------------------------
    def _note(self, msg: str) -> None:
        self.messages.append(msg)
        warnings.warn(msg, RealtimeWarning, stacklevel=3)

    def start(self) -> list[str]:
        """Apply the real-time settings; return the messages about what was not applied."""
        self.messages = []
        self._last_target_ns = None
        self._saved, messages = apply_realtime(self.realtime)
        for msg in messages:
            self._note(msg)
        return list(self.messages)

    def stop(self) -> None:
        """Undo :meth:`start` (scheduler, affinity, garbage collector)."""
        for msg in restore_realtime(self._saved):
            self._note(msg)
