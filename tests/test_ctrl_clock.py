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
        warnings.simplefilter("always")
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
