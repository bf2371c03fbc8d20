"""The compiled cycle between two driver exchanges (controller.compiled.CompiledCycle) against the
Python cycle.

With a driver other than the in-process plant the loop runs each clean cycle's plausibility
check, law, safety rules, saturation count, metrics row and log row in one compiled call and
every other cycle in Python.  Over seeded random sequences of feedback disturbances (rejected
samples, stale joints, clipped torques, drive faults, non-finite readings, failed exchanges, stop
requests) the run must equal the all-Python run to the last bit: log, metrics, faults, status,
and the state the objects are left with.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from controller.telemetry import read_log
from dynamics.errors import CommsError

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "hil_configs" / "runs"


class _Relay:
    """A driver that passes another's exchanges through and disturbs the feedback of chosen
    cycles (``events``: cycle -> list of (kind, joint)).  Not the in-process plant's class, so the
    loop takes the compiled cycle, not the compiled offline loop."""

    def __init__(self, inner, events, safety):
        self._inner = inner
        self._events = events
        self._safety = safety
        self._k = 0
        #: per exchange: the command and the supervisor's state the cycle left
        self.seen = []

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def enable(self):
        return self._inner.enable()

    def disable(self):
        return self._inner.disable()

    def cycle(self, cmd):
        s = self._safety
        self.seen.append((cmd.torque_nm.tobytes(), s._k, s._clipped.tobytes(), s.latched))
        fb = self._inner.cycle(cmd)
        k = self._k
        self._k += 1
        ev = self._events.get(k, ())
        if not ev:
            return fb
        q, qd, tau = fb.position_rad.copy(), fb.velocity_rad_s.copy(), fb.torque_nm.copy()
        fault, fresh, enabled = fb.fault.copy(), fb.fresh.copy(), fb.enabled.copy()
        for kind, j in ev:
            if kind == "jump":          # implausible: rejected, stale for the rules
                q[j] += 0.3
            elif kind == "vjump":
                qd[j] += 40.0
            elif kind == "stale":
                fresh[j] = False
            elif kind == "fault":
                fault[j] = 7
            elif kind == "disabled":
                enabled[j] = False
            elif kind == "nan":
                qd[j] = np.nan
            elif kind == "stop":
                self._safety.request_stop("test")
            elif kind == "comms":
                raise CommsError("the test's bus is gone")
            elif kind == "strided":     # the same values in a strided view: another numba type
                q = np.repeat(q, 2)[::2]
            elif kind == "unaligned":   # the values at an odd address: another type
                u = np.empty(q.size * q.itemsize + 1, dtype=np.uint8)[1:].view(q.dtype)
                u[:] = q
                q = u
        return replace(fb, position_rad=q, velocity_rad_s=qd, torque_nm=tau, fault=fault, fresh=fresh,
                       enabled=enabled)


#: disturbances that do not stop the run, and those that do (latched faults, a stop request)
_MILD = ("jump", "vjump", "stale")
_STOPS = ("fault", "disabled", "nan", "stop", "comms")


def _events(seed: int, n_cycles: int, n: int) -> dict:
    rng = np.random.default_rng(seed)
    ev: dict = {}
    for k in rng.choice(np.arange(5, n_cycles - 5), size=rng.integers(5, 25), replace=False):
        ev.setdefault(int(k), []).append((str(rng.choice(_MILD)), int(rng.integers(n))))
        if rng.random() < 0.3:      # a jump held for a second sample (rejected again)
            ev.setdefault(int(k) + 1, []).append(ev[int(k)][-1])
        if rng.random() < 0.3:      # a run of stale samples (a fault after stale_cycles in a row)
            for d in range(1, int(rng.integers(2, 5))):
                ev.setdefault(int(k) + d, []).append(("stale", int(rng.integers(n))))
    if seed % 3:                    # two seeds of three end on a stop
        k = int(rng.integers(n_cycles // 2, n_cycles - 5))
        ev.setdefault(k, []).append((str(rng.choice(_STOPS)), int(rng.integers(n))))
    return ev


def _run(tmp_path, config, compiled, seed, overrides):
    from controller.app.run import build_run, load_run

    spec = load_run(RUNS / config, overrides=overrides)
    out = tmp_path / f"{config}-{seed}-{compiled}"
    run = build_run(spec, out_dir=out)
    loop = run.loop
    loop.compiled = compiled
    loop.handle_signals = False
    relay = loop.driver = _Relay(loop.driver, _events(seed, loop.n_planned, loop.driver.n_joints), loop.safety)
    res = run.execute()
    state = {"seen": relay.seen, "law": loop.controller.compiled_state(), "last_error": loop.controller.last_error,
             "k": loop.safety._k, "clipped": loop.safety._clipped.copy(), "pose": loop.safety.pose,
             "margin_prev": loop.safety._margin_prev, "last_margin": loop.safety.last_margin}
    return res, read_log(out), state


def _serial_run(out, compiled, events, late=None):
    """The serial arm's case of :data:`_CASES` behind a :class:`_Relay` disturbing ``events``,
    its clock late by ``late(period_s, lateness_max_s)`` (a :class:`_LateClock`'s table) when
    given: (result, log, loop)."""
    from controller.app.run import build_run, load_run

    config, overrides = _CASES[1]
    run = build_run(load_run(RUNS / config, overrides=overrides), out_dir=out)
    loop = run.loop
    loop.compiled = compiled
    loop.handle_signals = False
    loop.driver = _Relay(loop.driver, events, loop.safety)
    if late is not None:
        loop.clock = _LateClock(loop.clock, loop.period_s, late(loop.period_s, loop.safety.config.lateness_max_s))
    return run.execute(), read_log(out), loop


def _cycles(res) -> int:
    for m in res.messages:
        if m.startswith("compiled cycle:"):
            return int(m.split(":")[1].split()[0])
    return 0


def _assert_same(a, b):
    (ra, la, sa), (rb, lb, sb) = a, b
    assert ra.status == rb.status
    assert ra.n_cycles == rb.n_cycles
    assert [(f.t_s, f.cause, f.joint, f.message, f.values) for f in ra.faults] == \
        [(f.t_s, f.cause, f.joint, f.message, f.values) for f in rb.faults]
    assert ra.metrics == rb.metrics
    assert la.dtype == lb.dtype and la.shape == lb.shape
    for name in la.dtype.names:
        if name in ("compute_s", "lateness_s"):      # wall time
            continue
        assert np.array_equal(la[name], lb[name], equal_nan=la[name].dtype.kind == "f"), name
    for key in sa:
        x, y = sa[key], sb[key]
        if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
            assert np.array_equal(np.asarray(x), np.asarray(y), equal_nan=True), key
        else:
            assert x == y or (x != x and y != y), key


#: the 3RRR over the in-process plant behind the relay (task computed torque, singularity check
#: every 3rd cycle, torque limits that clip some cycles), and the serial Dynamixel arm (joint computed torque)
_CASES = [
    ("3rrr_circle_direct.toml", {"loop.duration_s": 0.8, "safety.singularity_every": 3,
                                 "safety.torque_max": [0.16, 0.16, 0.16]}),
    ("seed000_slow.toml", {"loop.duration_s": 0.8}),
]


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("config, overrides", _CASES, ids=["3rrr", "serial"])
def test_compiled_cycle_equals_python(tmp_path, config, overrides, seed):
    py = _run(tmp_path, config, False, seed, overrides)
    fast = _run(tmp_path, config, True, seed, overrides)
    _assert_same(py, fast)
    assert _cycles(py[0]) == 0
    # both paths ran: the clean cycles compiled, the disturbed ones (and a stop reaction) in Python
    assert 0 < _cycles(fast[0]) < fast[0].n_cycles
    if config.startswith("3rrr"):
        assert np.any(py[1]["sat"])     # some cycles clipped (Python), the others not


@pytest.mark.parametrize("kind", ["strided", "unaligned"])
def test_feedback_of_another_type_runs_in_python_without_compiling_mid_run(tmp_path, kind):
    """A driver whose feedback vectors come in another type for a while (a strided view of the
    same values, an unaligned copy): those cycles run in Python, the results equal
    the all-Python run's, and no machine code is compiled during the run (numba would compile a
    version for the new type instead of refusing it: a stall while the drives hold the last
    torque; the entry called without the dispatcher would read it as the type it was loaded for)."""
    from controller import _fast_loop

    events = {k: [(kind, 0)] for k in (40, 41, 42, 300)}

    def one(compiled, ev, tag):
        return _serial_run(tmp_path / tag, compiled, ev)[:2]

    one(True, {}, "warm")           # the entry's machine code loaded for this run's types
    sigs = {name: len(d.signatures) for name, d in _fast_loop.ONE_CYCLE.items()}
    rp, lp = one(False, events, "python")
    rf, lf = one(True, events, "compiled")
    assert {name: len(d.signatures) for name, d in _fast_loop.ONE_CYCLE.items()} == sigs
    assert rp.status == rf.status == "completed" and rp.n_cycles == rf.n_cycles
    # only the cycles after those feedbacks ran in Python: the entry was not tried on the new
    # type (typing it is a compile: a stall, then a TypingError that sent the rest to Python)
    assert not [m for m in rf.messages if "unavailable" in m], rf.messages
    assert rf.n_cycles // 2 < _cycles(rf) <= rf.n_cycles - 1 - 3
    for name in lp.dtype.names:
        if name not in ("compute_s", "lateness_s"):
            assert np.array_equal(lp[name], lf[name], equal_nan=lp[name].dtype.kind == "f"), name


def test_a_reference_grid_of_another_step_is_not_run_compiled(tmp_path):
    """The compiled cycles read the grid's row k for cycle k: a trajectory cached on a grid of
    another step than the loop's period (a user's GridCache) would feed the law a time-warped
    reference; such a loop runs its cycles in Python, which samples the base trajectory."""
    from controller.app.run import build_run, load_run
    from controller.compiled import CompiledCycle, CompiledCycles
    from trajectories.base import GridCache

    config, overrides = _CASES[1]
    run = build_run(load_run(RUNS / config, overrides=overrides), out_dir=tmp_path / "grid")
    try:
        loop = run.loop
        base = loop.trajectory.base if isinstance(loop.trajectory, GridCache) else loop.trajectory
        same = GridCache(base, loop.period_s)
        other = GridCache(base, loop.period_s / 2)
        assert CompiledCycle.for_loop(loop, same, None)[0] is not None
        for cls in (CompiledCycle, CompiledCycles):
            obj, why = cls.for_loop(loop, other, None)
            assert obj is None and "grid step" in why
    finally:
        run.close()


def test_the_entry_is_called_without_the_dispatcher_once_its_arguments_were_checked(tmp_path, monkeypatch):
    """The clean cycles call the entry's machine code directly (numba's ``entry_point``: the
    dispatcher's type matching of 49 arguments took about half the call), after one check of the
    array arguments' types per set of array objects; an array of another type there goes through
    the dispatcher; the run's log is the all-Python run's, bit for bit."""
    from controller import compiled as cc

    calls = {"checked": 0, "direct": 0, "odd": []}
    orig = cc.CompiledCycle._checked_entry

    def counted(self, rows, raw, m_rows, m_sat, m_late, safety):
        calls["checked"] += 1
        if len(self._entry.overloads) == 1 and not calls["odd"]:
            # the same call with the lateness block in float32 (its signature has float64)
            calls["odd"].append(orig(self, rows, raw, m_rows, m_sat, m_late.astype(np.float32), safety)
                                is self._entry and self._direct is None)
        e = orig(self, rows, raw, m_rows, m_sat, m_late, safety)
        calls["direct"] += e is not self._entry
        return e
    monkeypatch.setattr(cc.CompiledCycle, "_checked_entry", counted)
    config, overrides = _CASES[0]
    res, log, _ = _run(tmp_path, config, True, 0, overrides)
    assert _cycles(res) > 100
    assert calls["odd"] == [True]
    # the load (nothing compiled yet: the dispatcher), the first cycle, once per hand-back to Python
    assert calls["direct"] >= 1 and calls["checked"] < _cycles(res) // 4
    ref, log_ref, _ = _run(tmp_path, config, False, 0, overrides)
    for name in log.dtype.names:
        if name not in ("compute_s", "lateness_s"):
            assert np.array_equal(log[name], log_ref[name], equal_nan=log[name].dtype.kind == "f"), name


class _LateClock:
    """The run's lock-step clock, with the cycles of ``late`` (cycle -> seconds) starting that
    much after their deadline, as a stalled process's would on the wall clock."""

    def __init__(self, inner, period_s, late):
        self._inner = inner
        self._p = period_s
        self._late = late
        self._t0 = None

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def wait_until(self, t_s):
        if self._t0 is None:
            self._t0 = t_s
        return self._inner.wait_until(t_s) + self._late.get(round((t_s - self._t0) / self._p), 0.0)


#: late cycles that the rules let pass (0.7 periods: missed deadlines, no fault), and one later
#: than safety.lateness_max_s (a fault, the stop reaction in Python)
_LATE = {"missed": lambda p, lmax: {k: 0.7 * p for k in (120, 121, 122, 123, 124, 400)},
         "too_late": lambda p, lmax: {200: 0.7 * p, 201: 1.5 * lmax}}


@pytest.mark.parametrize("case", sorted(_LATE))
def test_late_cycles_are_counted_and_run_compiled(tmp_path, case):
    """A cycle that starts after its deadline is counted (missed deadlines, the overrun rules) and
    runs compiled unless that count raised a fault: the Python cycle is slower, and late cycles
    are the ones that must catch up (they all ran in Python before).  Faults, metrics and log
    equal the all-Python run's."""
    rp, lp, loop = _serial_run(tmp_path / "python", False, {}, _LATE[case])
    rf, lf, _ = _serial_run(tmp_path / "compiled", True, {}, _LATE[case])
    period_s = loop.period_s
    late = _LATE[case](period_s, loop.safety.config.lateness_max_s)
    for name in lp.dtype.names:
        if name != "compute_s":
            assert np.array_equal(lp[name], lf[name], equal_nan=lp[name].dtype.kind == "f"), name
    assert [(f.t_s, f.cause, f.message) for f in rp.faults] == [(f.t_s, f.cause, f.message) for f in rf.faults]
    assert rp.metrics == rf.metrics
    missed = int(np.sum(lf["lateness_s"] > 0.5 * period_s))
    if case == "missed":
        assert rf.status == "completed" and missed == len(late)
        assert _cycles(rf) == rf.n_cycles - 1          # every cycle compiled, the late ones too
    else:
        assert rf.status != "completed" and [f.cause for f in rf.faults][:1] == ["overrun"]
        assert _cycles(rf) == 201                      # the cycles before the fault's
