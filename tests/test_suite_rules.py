"""The suite's own rules (tests/conftest.py): exclusive tests run alone under xdist, and the
interference skips are counted in the run's summary."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent

#: twelve ordinary tests that each hold the machine for a while and one exclusive test; every
#: test writes its (start, end) to a file of its own
SPANS = '''
import json, os, time
from pathlib import Path

import pytest

OUT = Path(os.environ["SPANS_DIR"])


def _span(name, seconds):
    t0 = time.monotonic()
    time.sleep(seconds)
    (OUT / f"{name}.json").write_text(json.dumps([t0, time.monotonic()]))


@pytest.mark.parametrize("i", range(6))
def test_ordinary(i):
    _span(f"ordinary{i}", 0.4)


@pytest.mark.exclusive
def test_alone():
    _span("alone", 0.6)


@pytest.mark.parametrize("i", range(6, 12))
def test_ordinary_after(i):
    _span(f"ordinary{i}", 0.4)


@pytest.mark.exclusive
def test_interfered():
    pytest.skip("interference: a planted skip")
'''


def test_exclusive_tests_overlap_no_other_test_and_skips_are_counted(tmp_path):
    pytest.importorskip("xdist")
    suite = tmp_path / "suite"
    suite.mkdir()
    shutil.copy(HERE / "conftest.py", suite / "conftest.py")
    (suite / "test_spans.py").write_text(SPANS)
    spans = tmp_path / "spans"
    spans.mkdir()
    env = dict(os.environ, SPANS_DIR=str(spans))
    env.pop("PYTEST_XDIST_WORKER", None)
    env.pop("PYTEST_XDIST_TESTRUNUID", None)
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "2", "-p", "no:cacheprovider",
                        "--rootdir", str(suite), str(suite)], cwd=suite, env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    got = {p.stem: json.loads(p.read_text()) for p in spans.glob("*.json")}
    assert sorted(got) == sorted(["alone"] + [f"ordinary{i}" for i in range(12)])
    a0, a1 = got.pop("alone")
    for name, (t0, t1) in got.items():
        assert t1 <= a0 or t0 >= a1, f"{name} ran during the exclusive test"
    # and the ordinary ones did run side by side (two workers): the lock is not a global one
    spans_sorted = sorted(got.values())
    assert any(b0 < a1_ for (a0_, a1_), (b0, _) in zip(spans_sorted, spans_sorted[1:])), spans_sorted
    assert "interference skips: 1 of 2 exclusive tests" in r.stdout, r.stdout


# -- the wall-clock verdict (tests/serve_process.py) ------------------------------------------

try:
    from tests.serve_process import PROBE_PRIORITY, CpuWatch, merge_spans, stall_budget, wall_clock_verdict
except ImportError:  # pragma: no cover - rootdir not on sys.path
    from serve_process import PROBE_PRIORITY, CpuWatch, merge_spans, stall_budget, wall_clock_verdict


class _Watch:
    """A CpuWatch stand-in with given figures."""

    def __init__(self, others=0.0, events=0, stall_s=0.0, max_s=0.0, steal_s=0.0):
        self.others = others
        self.st = {"events": events, "stall_s": stall_s, "max_s": max_s, "steal_s": steal_s,
                   "window_s": 5.0, "probe": True}

    def others_cores(self):
        return self.others

    def stalls(self):
        return self.st

    def close(self):
        pass


def _meta(tmp_path, *, n=500, period_s=0.004, missed=0, late_p50=0.0, cycle_p50=0.001, faults=()):
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    timing = {"n_cycles": n, "period_s": period_s, "missed_deadlines": missed,
              "lateness": {"p50": late_p50, "p99": 0.01, "max": 0.02}, "cycle": {"p50": cycle_p50}}
    (out / "meta.json").write_text(json.dumps({"period_s": period_s, "result": {
        "n_cycles": n, "timing": timing, "faults": [{"t_s": 1.0, "cause": c} for c in faults]}}))
    return out


#: (case, run, machine, expected): run = meta.json figures and the exit code; machine = the watch
VERDICTS = [
    ("on time", dict(missed=2), dict(), "pass"),
    ("late on a quiet machine", dict(missed=30), dict(), "fail"),
    # 30 late cycles at 4 ms with a 1 ms median cycle: 90 ms of stalls explain them (30 x 3 ms)
    ("late after the machine stalled", dict(missed=30), dict(events=12, stall_s=0.06, max_s=0.011, steal_s=0.05),
     "skip"),
    ("more late cycles than the stalls explain", dict(missed=200), dict(events=12, stall_s=0.06, max_s=0.011,
                                                                         steal_s=0.05), "fail"),
    # a product slow in every cycle does not borrow the machine's stalls, however many
    ("late in the median cycle", dict(missed=480, late_p50=0.02, cycle_p50=0.02),
     dict(events=300, stall_s=3.0, max_s=0.05, steal_s=2.0), "fail"),
    ("median cycle over three quarters of a period", dict(missed=30, cycle_p50=0.0032),
     dict(events=12, stall_s=0.06, max_s=0.011, steal_s=0.05), "fail"),
    ("stopped on stale feedback after stalls", dict(missed=10, faults=("stale_feedback", "stop_reaction"), rc=1),
     dict(events=12, stall_s=0.06, max_s=0.011, steal_s=0.05), "skip"),
    ("stopped on another fault", dict(missed=10, faults=("tracking_error", "stop_reaction"), rc=1),
     dict(events=12, stall_s=0.06, max_s=0.011, steal_s=0.05), "fail"),
    ("other processes busy", dict(missed=300), dict(others=0.6), "skip"),
]


@pytest.mark.parametrize("case, run, machine, expected", VERDICTS, ids=[v[0] for v in VERDICTS])
def test_wall_clock_verdict(tmp_path, case, run, machine, expected):
    rc = run.pop("rc", 0)
    out = _meta(tmp_path, **run)
    watch = _Watch(**machine)
    try:
        wall_clock_verdict(rc, out, watch, "a run", stale_cycles=0)
        got = "pass"
    except pytest.skip.Exception as e:
        got = "skip"
        assert str(e).startswith("interference:"), str(e)
    except pytest.fail.Exception:
        got = "fail"
    assert got == expected, case


def test_stall_budget_counts_catch_up():
    # 30 ms stalled, 4 ms period, 1 ms cycles: each 3 ms of stall costs a late cycle, plus one per event
    assert stall_budget({"events": 2, "stall_s": 0.02, "steal_s": 0.01}, 0.004, 0.001) == 12
    # a slow cycle never makes the budget larger than two late cycles per period stalled
    assert stall_budget({"events": 0, "stall_s": 0.04, "steal_s": 0.0}, 0.004, 0.0039) == 20


def test_stall_probe_sees_a_planted_stall():
    """The probe processes report a stall they did not make: every probe stopped (SIGSTOP) for
    60 ms together, then the first alone for 60 ms: two stalls (the probes' taken together)."""
    import signal

    w = CpuWatch(probe=True)
    try:
        time.sleep(0.2)
        for pr in w._probes:
            os.kill(pr.pid, signal.SIGSTOP)
        time.sleep(0.06)
        for pr in w._probes:
            os.kill(pr.pid, signal.SIGCONT)
        time.sleep(0.1)
        os.kill(w._probes[0].pid, signal.SIGSTOP)
        time.sleep(0.06)
        os.kill(w._probes[0].pid, signal.SIGCONT)
        time.sleep(0.1)
    finally:
        st = w.stalls()
    assert st["probe"] and len(st["where"]) == len(w._probes) >= 1
    assert st["events"] >= 2 and st["max_s"] >= 0.05 and 0.1 <= st["stall_s"] < 0.2, st
    assert st["window_s"] >= 0.3
    w.close()       # idempotent
    assert w.stalls() is st


def test_the_kernel_caches_are_warmed_from_both_ends_before_the_workers(monkeypatch):
    """tests/conftest.py: with two workers or more, the controller runs one process per worker
    (at most four) importing every kernel module, the second from the list's end; never in a
    worker nor without xdist."""
    from types import SimpleNamespace

    import conftest
    from dynamics._kernel_cache import KERNEL_FILES

    started = []

    class Proc:
        def __init__(self, args, **kw):
            started.append(args[3:])

        def wait(self, timeout=None):
            return 0

        def poll(self):
            return 0

    monkeypatch.setattr(conftest.subprocess, "Popen", Proc)
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    mods = [f[:-3].replace("/", ".") for f in KERNEL_FILES]
    conftest._warm_kernel_caches(SimpleNamespace(option=SimpleNamespace(numprocesses=2)))
    assert started == [mods, mods[::-1]]
    started.clear()
    conftest._warm_kernel_caches(SimpleNamespace(option=SimpleNamespace(numprocesses=8)))
    assert len(started) == 4 and all(sorted(o) == sorted(mods) for o in started)
    assert len({o[0] for o in started}) == 4                 # four different starts
    started.clear()
    for n in (None, 0, 1):
        conftest._warm_kernel_caches(SimpleNamespace(option=SimpleNamespace(numprocesses=n)))
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")
    conftest._warm_kernel_caches(SimpleNamespace(option=SimpleNamespace(numprocesses=2)))
    assert started == []


def test_the_kernel_modules_importing_the_first_come_right_after_it():
    """The warming's second process goes through KERNEL_FILES from its end: a module there that
    imports the first (costliest) module would hold it at that module's gate from the start."""
    import re

    from dynamics._kernel_cache import KERNEL_FILES

    first = KERNEL_FILES[0][:-3].replace("/", ".")
    root = Path(__file__).resolve().parents[1]
    users = [i for i, f in enumerate(KERNEL_FILES)
             if re.search(rf"^\s*(from|import)\s+{re.escape(first)}\b", (root / f).read_text(), re.M)]
    assert users and users == list(range(1, len(users) + 1)), [KERNEL_FILES[i] for i in users]


def test_stuck_kernel_cache_warmers_hold_the_run_once_for_all(monkeypatch):
    """tests/conftest.py: the warming processes share one deadline (WARM_TIMEOUT_S) and are
    killed when it passes."""
    import subprocess
    import time
    from types import SimpleNamespace

    import conftest

    real, started = subprocess.Popen, []

    def popen(args, **kw):
        started.append(real([sys.executable, "-c", "import time; time.sleep(60)"], **kw))
        return started[-1]

    monkeypatch.setattr(conftest.subprocess, "Popen", popen)
    monkeypatch.setattr(conftest, "WARM_TIMEOUT_S", 0.5)
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    t0 = time.monotonic()
    conftest._warm_kernel_caches(SimpleNamespace(option=SimpleNamespace(numprocesses=4)))
    assert time.monotonic() - t0 < 1.5
    assert len(started) == 4 and all(p.poll() is not None for p in started)


def test_merge_spans():
    assert merge_spans([]) == []
    assert merge_spans([(3.0, 4.0), (1.0, 2.0), (1.5, 2.5), (2.5, 2.75), (5, 6)]) == [(1.0, 2.75), (3.0, 4.0),
                                                                                      (5.0, 6.0)]


#: a process busy on CPU 1 three times 60 ms, at a SCHED_FIFO priority: (case, priority, seen):
#: above the probes it is the machine taking the CPU (a hypervisor, the kernel) and must be seen;
#: at a real-time loop's priority (80, below the probes) it is the product's own work, which must
#: not be seen (it would let a slow product borrow its own time as the machine's stalls)
_BUSY = r"""
import os, sys, time
os.sched_setaffinity(0, {1})
os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(int(sys.argv[1])))
for _ in range(3):
    time.sleep(0.1)
    t = time.perf_counter()
    while time.perf_counter() - t < 0.06:
        pass
"""
_PROBED = [("the machine, above the probes", PROBE_PRIORITY + 5, True),
           ("a real-time loop's own work", 80, False)]


@pytest.mark.exclusive
@pytest.mark.parametrize("case, priority, seen", _PROBED, ids=[c[0] for c in _PROBED])
def test_the_stall_probe_on_a_loops_cpu_sees_the_machine_not_the_loop(case, priority, seen):
    """The probe on the CPU a real-time loop is pinned to (the wall-clock tests' CPU 1) sees a
    stall of that CPU, which a probe left to the scheduler missed (it runs on the CPU the loop
    leaves idle), and not the loop's own work."""
    probe = subprocess.run([sys.executable, "-c", "import os; os.sched_setaffinity(0, {1}); "
                            f"os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param({PROBE_PRIORITY + 5}))"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"environment: SCHED_FIFO on CPU 1 not available here: {probe.stderr.strip()[-200:]}")
    watch = CpuWatch(probe=True, cpus=(1,))
    time.sleep(0.2)             # the probe started
    subprocess.run([sys.executable, "-c", _BUSY, str(priority)], check=True, timeout=30)
    st = watch.stalls()
    assert st["where"] == [f"CPU 1, SCHED_FIFO {PROBE_PRIORITY}"]
    if seen:
        assert st["events"] >= 3 and st["stall_s"] >= 0.15, st
    else:
        assert st["stall_s"] < 0.05, st        # 180 ms busy; a few ms of the machine's own allowed
