"""Clocks: lock-step semantics, wall-clock ordering, real-time settings applied or reported and restored."""

from __future__ import annotations

import gc
import os
import time
import warnings

import pytest

from controller.clock import Clock, LockstepClock, RealtimeWarning, WallClock
from dynamics.errors import ConfigError


def test_lockstep_jumps_and_never_goes_back():
    c = LockstepClock(1.0)
    assert isinstance(c, Clock)
    assert c.now() == 1.0
    assert c.wait_until(1.5) == 0.0 and c.now() == 1.5
    c.advance(0.25)
    assert c.wait_until(1.7) == pytest.approx(0.05)   # already past: lateness reported, time kept
    assert c.now() == 1.75
    with pytest.raises(ValueError):
        c.advance(-1.0)
    t0 = time.perf_counter()
    for k in range(100000):
        c.wait_until(2.0 + k * 1e-3)
    assert time.perf_counter() - t0 < 5.0              # no real waiting
    assert c.start() == [] and c.stop() is None


@pytest.mark.exclusive
def test_wallclock_waits_until_deadline():
    c = WallClock(spin_s=1e-4)
    assert isinstance(c, Clock)
    t_prev = c.now()
    for k in range(1, 20):
        target = t_prev + 1e-3
        late = c.wait_until(target)
        now = c.now()
        assert late >= 0.0 and now >= target          # never early
        t_prev = now
    # a deadline in the past returns at once with its lateness
    late = c.wait_until(c.now() - 0.01)
    assert late >= 0.01
    with pytest.raises(ConfigError):
        WallClock(spin_s=-1.0)
    with pytest.raises(ConfigError):
        WallClock(realtime={"nice": 3})


def test_realtime_settings_applied_or_reported_then_restored():
    has_sched = hasattr(os, "sched_getscheduler")
    before_sched = os.sched_getscheduler(0) if has_sched else None
    before_aff = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    gc_before = gc.isenabled()
    cpu = min(before_aff) if before_aff else 0
    c = WallClock(realtime={"sched_fifo_priority": 10, "cpu": cpu, "freeze_gc": True})
    with warnings.catch_warnings(record=True) as w:
        # record RealtimeWarning only: start() with freeze_gc runs gc.collect(), which finalizes
        # garbage left by earlier tests in the same process (an xdist worker runs many files) and
        # so can emit their ResourceWarnings (unclosed files) here; those are not the clock's
        warnings.simplefilter("ignore")
        warnings.simplefilter("always", RealtimeWarning)
        msgs = c.start()
        try:
            assert not gc.isenabled()
            if has_sched:
                fifo = os.sched_getscheduler(0) == os.SCHED_FIFO
                # either applied, or a warning says why not
                assert fifo or any("SCHED_FIFO" in m for m in msgs)
                assert all(issubclass(x.category, RealtimeWarning) for x in w)
                assert len(w) == len(msgs)
            if before_aff:
                assert os.sched_getaffinity(0) == {cpu} or any("affinity" in m for m in msgs)
        finally:
            c.stop()
    assert gc.isenabled() == gc_before
    if has_sched:
        assert os.sched_getscheduler(0) == before_sched
    if before_aff:
        assert os.sched_getaffinity(0) == before_aff


class _FakeTime:
    """perf_counter_ns and sleep of a machine whose sleeps overshoot by ``overshoot_ns``; ``woke``
    is when the last sleep ended, ``sleeps`` how many there were."""

    def __init__(self, overshoot_ns: int):
        self.t = 10_000_000
        self.overshoot_ns = overshoot_ns
        self.sleeps = 0
        self.woke = None

    def perf_counter_ns(self):
        self.t += 1_000                 # each poll of the busy-wait costs 1 us
        return self.t

    def sleep(self, s):
        self.sleeps += 1
        self.t += int(s * 1e9) + self.overshoot_ns
        self.woke = self.t


@pytest.mark.parametrize("rate_hz, spin_s, expect_spin_us", [
    (1000.0, 2e-4, 200.0),      # the default at 1 kHz: spin_s as given
    (4000.0, 2e-4, 62.5),       # at 4 kHz a quarter of the 250-us period
    (20000.0, 2e-4, 12.5),
    (4000.0, 0.0, 0.0),         # 0: sleeps only
])
def test_wallclock_sleeps_every_cycle_and_spins_at_most_a_quarter_period(rate_hz, spin_s, expect_spin_us,
                                                                         monkeypatch):
    """A loop with time to spare sleeps in every cycle whatever ``spin_s`` says, so that under
    SCHED_FIFO the kernel's real-time throttling never stops it (a loop that never sleeps is
    stopped for 50 ms a second)."""
    import controller.clock as clock_mod

    fake = _FakeTime(overshoot_ns=20_000)
    monkeypatch.setattr(clock_mod.time, "perf_counter_ns", fake.perf_counter_ns)
    monkeypatch.setattr(clock_mod.time, "sleep", fake.sleep)
    c = WallClock(spin_s=spin_s)
    period = 1.0 / rate_hz
    assert c.spin_ns(None) == int(spin_s * 1e9)
    assert c.spin_ns(int(period * 1e9)) == pytest.approx(expect_spin_us * 1e3, abs=1)
    compute_ns = int(0.3 * period * 1e9)     # the cycle's work: 30 % of the period
    c.wait_until(0.0)                        # the first deadline: no period known yet
    for k in range(1, 200):
        fake.t += compute_ns
        s0 = fake.sleeps
        late = c.wait_until(k * period)
        assert late >= 0.0
        assert fake.sleeps == s0 + 1, f"cycle {k} did not sleep"
        # busy-waiting after the sleep: at most the window, and a poll
        assert fake.t - fake.woke <= expect_spin_us * 1e3 + 1_000
