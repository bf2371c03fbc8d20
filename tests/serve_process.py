"""Test helper: run ``python -m drivers.sim.serve CONFIG`` in a subprocess for the duration of a test."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

try:
    from tests.conftest import INTERFERENCE
except ImportError:  # pragma: no cover - rootdir not on sys.path
    from conftest import INTERFERENCE

REPO = Path(__file__).resolve().parents[1]

#: the timing protections of :class:`controller.safety.SafetyConfig` (stale feedback, overruns,
#: lateness)
TIMING_FIELDS = ("stale_cycles", "stale_fraction_max", "stale_window_cycles", "overrun_fraction_max",
                 "overrun_window_cycles", "lateness_max_s")


def loosest_timing() -> dict[str, float]:
    """The loosest timing protections accepted (each field's upper bound in
    :data:`controller.safety.SAFETY_RANGES`), for the wall-clock tests whose subject is not
    deadlines (accounting, what loads when): a starved machine's late cycles are then counted,
    not stopped.  Holding deadlines is what :func:`wall_clock_verdict`'s tests check."""
    from controller.safety import SAFETY_RANGES

    return {f: SAFETY_RANGES[f][1] for f in TIMING_FIELDS}


def loosest_timing_sets() -> list[str]:
    """:func:`loosest_timing` as ``torqueloop run`` arguments (``--set safety.<field>=<value>``)."""
    out = []
    for k, v in loosest_timing().items():
        out += ["--set", f"safety.{k}={v!r}"]
    return out


def rehearsal_pair(tmp_path: Path, stem: str, robot: str, name: str) -> tuple[Path, Path]:
    """A copy of the shipped rehearsal pair ``hil_configs/rehearsal/<stem>_{server,run}.toml`` in
    ``tmp_path`` with the robot file's absolute path and a rehearsal ``name`` of its own (its bus:
    tests running beside it never share it).  Returns ``(server config, run config)``."""
    import re

    reh = REPO / "hil_configs" / "rehearsal"
    rob = (REPO / "hil_configs" / "robots" / robot).as_posix()
    own = f'rehearsal = "{name}"'
    srv = tmp_path / "server.toml"
    srv.write_text(re.sub(r'rehearsal = "[^"]+"', own, (reh / f"{stem}_server.toml").read_text()
                          .replace(f'robot = "../robots/{robot}"', f'robot = "{rob}"')))
    run = tmp_path / "run.toml"
    run.write_text(re.sub(r'rehearsal = "[^"]+"', own, (reh / f"{stem}_run.toml").read_text()
                          .replace(f'file = "../robots/{robot}"', f'file = "{rob}"')))
    return srv, run


@contextmanager
def served(config: Path, *args: str):
    """Start the emulator server on ``config``; yield the process once it printed READY.

    Skips the test when the server cannot open its bus (exit code 3: no multicast on this
    machine), fails it on any other start-up error, and terminates the server afterwards.
    """
    env = dict(os.environ, PYTHONPATH=str(REPO))
    watch = CpuWatch(probe=True)
    proc = subprocess.Popen([sys.executable, "-m", "drivers.sim.serve", str(config), *args], cwd=REPO,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc.watch = watch      # the CPU other processes took while the server ran (skip_if_overloaded)
    try:
        line = proc.stdout.readline()
        if not line.startswith("READY"):
            proc.wait(timeout=10)
            err = proc.stderr.read()
            if proc.returncode == 3:
                pytest.skip(f"udp_multicast unavailable on this machine: {err.strip()}")
            pytest.fail(f"server failed (rc={proc.returncode}): {err}")
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        watch.close()       # the stall probe's window ends with the server


#: the stall probe: a process that waits 1 ms at a time on its stdin and reports, when stdin
#: closes, how often and how long the machine kept it from running on time, and when (its stalls'
#: intervals on the monotonic clock, which every process shares).  With a CPU and a priority
#: (argv 2 and 3) it runs on that CPU only at that SCHED_FIFO priority, where permitted, else it
#: runs anywhere at ordinary priority and says so.  No imports beyond the standard library: it
#: starts in tens of milliseconds and takes almost no CPU.
_PROBE = r"""
import json, os, select, sys, time
wait_s, min_s = 0.001, float(sys.argv[1])
where = "any CPU, ordinary priority"
if len(sys.argv) > 3:
    cpu, prio = int(sys.argv[2]), int(sys.argv[3])
    try:
        allowed = os.sched_getaffinity(0)
        os.sched_setaffinity(0, {cpu})
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(prio))
            where = f"CPU {cpu}, SCHED_FIFO {prio}"
        except (OSError, ValueError):
            # pinned at ordinary priority, a probe would wait behind the real-time work on its CPU
            # and report the product's own time as the machine's
            os.sched_setaffinity(0, allowed)
    except (OSError, ValueError):
        pass
n = 0; spans = []
while True:
    t0 = time.monotonic()
    if select.select([sys.stdin], [], [], wait_s)[0]:
        break
    t1 = time.monotonic()
    n += 1
    if t1 - t0 - wait_s > min_s:
        spans.append((t0 + wait_s, t1))
print(json.dumps({"waits": n, "where": where, "spans": spans[-100000:]}), flush=True)
"""

#: the probes' SCHED_FIFO priority where permitted: above the runs' real-time loops (80) and the
#: emulator servers (70), so that nothing the tests run delays a probe on its CPU: what does is
#: the machine (the hypervisor, the kernel)
PROBE_PRIORITY = 90


def merge_spans(spans) -> list[tuple[float, float]]:
    """The union of time intervals ``(start, end)`` as disjoint intervals, in order."""
    out: list[list[float]] = []
    for a, b in sorted((float(a), float(b)) for a, b in spans):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


#: a 1 ms wait of the probe that ends this much later counts as a stall of the machine
STALL_MIN_S = 0.002


class CpuWatch:
    """What the machine did besides the test since this object was made.

    * ``others_cores()``: CPU time the *other* processes took, from the machine's busy time
      (``/proc/stat``: user, nice, system, irq, softirq and steal, all CPUs) minus this
      process's and its waited-for children's (``os.times()``): a server and a CLI run started
      by the test and waited for are the test's own.  Unlike the load average (a 1-minute mean
      that lags a burst of other work by tens of seconds), it covers exactly the test's window.
      None where ``/proc/stat`` is missing.
    * ``stalls()``: how often and how long the machine itself kept an idle process from running
      on time (probe processes waiting 1 ms at a time, see :data:`_PROBE`), and the steal time
      the hypervisor reported.  On a virtual machine the host takes the virtual CPUs away for
      milliseconds several times a second (measured on the 2-core CI machines: a 1 ms sleep
      ended 4-11 ms late about three times a second on an otherwise idle machine, and the
      steal time was 2 % of each CPU): a wall-clock run cannot hold its deadlines through
      that, whatever the product does.  One probe runs on each of ``cpus`` (default: every CPU
      this process may use) at SCHED_FIFO :data:`PROBE_PRIORITY` where permitted, above the
      loops and servers the tests run, so that it sees a stall on that CPU (an ordinary probe
      runs on a CPU the real-time loop leaves idle, and missed a 15 ms stall of the loop's CPU,
      2026-11-30); where not permitted, one probe runs anywhere at ordinary priority.  A stall
      is the time during which at least one probe was kept waiting.  The probes are stopped by
      the first ``stalls()`` call or ``close()``.
    """

    def __init__(self, probe: bool = False, cpus=None):
        self.t0 = time.monotonic()
        self.busy0 = self._busy_s()
        self.steal0 = self._steal_s()
        self.own0 = self._own_s()
        self._stalls = None
        self._probes = []
        if probe:
            if cpus is None:
                try:
                    cpus = sorted(os.sched_getaffinity(0))
                except (AttributeError, OSError):
                    cpus = ()
            argv = [[str(c), str(PROBE_PRIORITY)] for c in cpus] or [[]]
            for extra in argv:
                try:
                    self._probes.append(subprocess.Popen([sys.executable, "-S", "-c", _PROBE, str(STALL_MIN_S),
                                                          *extra], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                                         text=True))
                except OSError:
                    pass

    @staticmethod
    def _stat() -> list[int] | None:
        try:
            with open("/proc/stat") as f:
                return [int(x) for x in f.readline().split()[1:]]
        except (OSError, ValueError):
            return None

    @classmethod
    def _busy_s(cls) -> float | None:
        v = cls._stat()
        if v is None:
            return None
        busy = v[0] + v[1] + v[2] + v[5] + v[6] + (v[7] if len(v) > 7 else 0)
        return busy / os.sysconf("SC_CLK_TCK")

    @classmethod
    def _steal_s(cls) -> float | None:
        v = cls._stat()
        if v is None or len(v) <= 7:
            return None
        return v[7] / os.sysconf("SC_CLK_TCK")

    @staticmethod
    def _own_s() -> float:
        t = os.times()
        return t.user + t.system + t.children_user + t.children_system

    def others_cores(self) -> float | None:
        """Mean number of cores the other processes kept busy over the window, or None."""
        busy = self._busy_s()
        if busy is None or self.busy0 is None:
            return None
        wall = max(time.monotonic() - self.t0, 1e-3)
        return max(0.0, (busy - self.busy0) - (self._own_s() - self.own0)) / wall

    def stalls(self) -> dict:
        """The machine's stalls over the window: ``events`` (the stalls: times during which a
        probe's wait ended more than :data:`STALL_MIN_S` late, the probes' taken together),
        ``stall_s`` (their length summed), ``max_s``, ``where`` (each probe's CPU and priority),
        ``steal_s`` (hypervisor steal time, all CPUs; None where not reported) and ``window_s``.
        Stops the probes; later calls return the same figures."""
        if self._stalls is None:
            got = {"events": 0, "stall_s": 0.0, "max_s": 0.0, "probe": False, "where": []}
            spans = []
            for proc in self._probes:
                try:
                    out, _ = proc.communicate(input="", timeout=10)
                    rep = json.loads(out)
                except (subprocess.TimeoutExpired, ValueError, OSError):
                    proc.kill()
                    proc.wait()
                    continue
                got["probe"] = True
                got["where"].append(rep["where"])
                spans += rep["spans"]
            merged = merge_spans(spans)
            lengths = [b - a for a, b in merged]
            got.update(events=len(merged), stall_s=sum(lengths, 0.0), max_s=max(lengths, default=0.0))
            steal = self._steal_s()
            got["steal_s"] = None if steal is None or self.steal0 is None else steal - self.steal0
            got["window_s"] = time.monotonic() - self.t0
            self._stalls = got
        return self._stalls

    def close(self) -> None:
        """Stop the probe (idempotent)."""
        self.stalls()


#: other processes' mean CPU use [cores] during a test above which it counts as interfered with
INTERFERENCE_CORES = 0.25
#: a wall-clock run may miss at most this fraction of its deadlines (``loop.miss_threshold_fraction_of_period`` late)
MISSED_FRACTION_MAX = 0.01
#: a run's late cycles can be the machine's only while its median cycle takes at most this
#: fraction of the period (and the median cycle starts on time)
ON_TIME_CYCLE_FRACTION = 0.75
#: fault causes a stalled machine produces by itself (and the stop reaction after them)
TIMING_FAULTS = {"stale_feedback", "overrun", "stop_reaction"}


def stall_budget(st: dict, period_s: float, cycle_s: float) -> int:
    """How many late cycles the machine's stalls ``st`` (:meth:`CpuWatch.stalls`) can explain
    in a loop with period ``period_s`` whose cycles take ``cycle_s`` (median).

    A stall of S seconds leaves the loop S late; it catches up ``period_s - cycle_s`` a cycle,
    so about ``S / (period_s - cycle_s)`` cycles start late, plus the one hit.  The stalled time
    is what the probes saw plus the steal time the hypervisor reported.  Only meaningful for a loop whose median cycle fits in half a period
    (:func:`wall_clock_verdict` checks that first): a slow product must not borrow the
    machine's stalls; the catch-up is taken as at least half a period, so the budget is at most
    two late cycles per period stalled.
    """
    catch_up = max(period_s - cycle_s, 0.5 * period_s)
    stalled = st.get("stall_s", 0.0) + (st.get("steal_s") or 0.0)
    return int(stalled / catch_up + st.get("events", 0))


def wall_clock_verdict(returncode: int, out: Path, watch: CpuWatch, what: str = "wall-clock run",
                       detail: str = "", late: bool = False,
                       missed_fraction_max: float = MISSED_FRACTION_MAX, stale_cycles: int = 0) -> None:
    """Fail a wall-clock run that failed or missed its deadlines; skip it only for interference.

    The run is bad when it did not exit 0, when more than ``missed_fraction_max`` of its cycles
    missed their deadline, or when the caller saw another sign of lateness (``late``: feedback
    that did not come fresh, ``stale_cycles`` cycles of it).  A bad run is a skip, with a reason
    that starts with ``interference:`` and is counted in the run's summary (``tests/conftest.py``),
    only when something outside the product is measured to explain it:

    * other processes kept at least :data:`INTERFERENCE_CORES` busy over the test (their CPU
      time, not the load average, which counts the suite's own processes); or
    * the machine's own stalls over the test (:meth:`CpuWatch.stalls`: a probe process that
      overslept, hypervisor steal) explain every late cycle and every cycle without fresh
      feedback (:func:`stall_budget`), the product itself was on time in the median cycle (its
      median cycle took at most :data:`ON_TIME_CYCLE_FRACTION` of a period and started on time:
      a product that is slow all the time fails whatever the machine did), and the run ended with exit 0
      or stopped only on the timing rules (stale feedback, overrun).

    Otherwise the test fails, naming the run's timing and the stalls: the product missed its
    deadlines on a machine that did not stop it.
    """
    import json

    meta_path = Path(out) / "meta.json"
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
    result = meta.get("result", {})
    timing = result.get("timing") or {}
    n = max(1, result.get("n_cycles", 1))
    missed = int(timing.get("missed_deadlines") or 0)
    bad = []
    if returncode != 0:
        bad.append(f"exit {returncode}")
    if missed > missed_fraction_max * n:
        bad.append(f"{missed} of {n} cycles missed their deadline (at most {missed_fraction_max:.0%})")
    if late:
        bad.append("late feedback")
    if not bad:
        watch.close()
        return
    why = f"{what}: {'; '.join(bad)} {detail}".rstrip()
    others = interfered(watch, why)
    st = watch.stalls()
    period = float(timing.get("period_s") or meta.get("period_s") or 0.0)
    cycle = float((timing.get("cycle") or {}).get("p50") or 0.0)
    lat = timing.get("lateness") or {}
    steal = "n/a" if st.get("steal_s") is None else f"{st['steal_s'] * 1e3:.0f} ms"
    seen = (f"the machine stalled idle probes ({'; '.join(st.get('where') or ['none ran'])}) {st['events']} times "
            f"({st['stall_s'] * 1e3:.0f} ms in all, longest {st['max_s'] * 1e3:.1f} ms; hypervisor steal {steal}) in "
            f"{st['window_s']:.1f} s")
    if period > 0 and st.get("probe"):
        budget = stall_budget(st, period, cycle)
        # the timing rules, and the stop reaction that follows a fault
        causes = {f.get("cause", "") if isinstance(f, dict) else "" for f in result.get("faults") or []}
        timing_only = returncode == 0 or (bool(causes) and causes <= TIMING_FAULTS)
        on_time = (cycle <= ON_TIME_CYCLE_FRACTION * period and float(lat.get("p50") or 0.0) <= 0.5 * period)
        if timing_only and on_time and missed <= budget and stale_cycles <= budget and st["events"] > 0:
            pytest.skip(f"{INTERFERENCE} {seen}: up to {budget} late cycles explained; the run had {missed} "
                        f"late, {stale_cycles} without fresh feedback; {why}")
    pytest.fail(f"{why}; other processes {others if others is None else round(others, 2)} cores during the "
                f"test; {seen}; lateness p99 {lat.get('p99')} max {lat.get('max')} s")


def interfered(watch: CpuWatch, why: str) -> float | None:
    """Skip the test (reason ``interference: ...``) when other processes kept at least
    :data:`INTERFERENCE_CORES` busy since ``watch`` was made; else return their mean use
    [cores] (None where it cannot be measured) for the caller's failure message."""
    others = watch.others_cores()
    if others is not None and others >= INTERFERENCE_CORES:
        watch.close()
        pytest.skip(f"{INTERFERENCE} other processes kept {others:.2f} cores busy during the test; {why}")
    return others
