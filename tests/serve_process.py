"""Test helper: run ``python -m drivers.sim.serve CONFIG`` in a subprocess for the duration of a test."""

from __future__ import annotations

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
    watch = CpuWatch()
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


class CpuWatch:
    """CPU time the *other* processes of the machine took since this object was made.

    From the machine's busy time (``/proc/stat``: user, nice, system, irq, softirq and steal,
    all CPUs) minus this process's and its waited-for children's (``os.times()``): a server and
    a CLI run started by the test and waited for are the test's own.  Unlike the load average
    (a 1-minute mean that lags a burst of other work by tens of seconds), it covers exactly
    the test's window.  ``others_cores()`` is None where ``/proc/stat`` is missing.
    """

    def __init__(self):
        self.t0 = time.monotonic()
        self.busy0 = self._busy_s()
        self.own0 = self._own_s()

    @staticmethod
    def _busy_s() -> float | None:
        try:
            with open("/proc/stat") as f:
                v = [int(x) for x in f.readline().split()[1:]]
        except (OSError, ValueError):
            return None
        busy = v[0] + v[1] + v[2] + v[5] + v[6] + (v[7] if len(v) > 7 else 0)
        return busy / os.sysconf("SC_CLK_TCK")

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


#: other processes' mean CPU use [cores] during a test above which it counts as interfered with
INTERFERENCE_CORES = 0.25
#: a wall-clock run may miss at most this fraction of its deadlines (``loop.miss_fraction`` late)
MISSED_FRACTION_MAX = 0.01


def wall_clock_verdict(returncode: int, out: Path, watch: CpuWatch, what: str = "wall-clock run",
                       detail: str = "", late: bool = False,
                       missed_fraction_max: float = MISSED_FRACTION_MAX) -> None:
    """Fail a wall-clock run that failed or missed its deadlines; skip it only for interference.

    The run is bad when it did not exit 0, when more than ``missed_fraction_max`` of its cycles
    missed their deadline, or when the caller saw another sign of lateness (``late``: feedback
    that never came fresh).  A bad run is a skip only when other processes, measured by
    ``watch`` over the test (their CPU time, not the load average, which counts the suite's own
    processes), kept at least :data:`INTERFERENCE_CORES` busy; the skip reason starts with
    ``interference:`` and is counted in the run's summary (``tests/conftest.py``).  Otherwise the
    test fails, naming the run's timing: the product missed its deadlines on a quiet machine.
    """
    import json

    meta_path = Path(out) / "meta.json"
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
    timing = meta.get("result", {}).get("timing") or {}
    n = max(1, meta.get("result", {}).get("n_cycles", 1))
    missed = int(timing.get("missed_deadlines") or 0)
    bad = []
    if returncode != 0:
        bad.append(f"exit {returncode}")
    if missed > missed_fraction_max * n:
        bad.append(f"{missed} of {n} cycles missed their deadline (at most {missed_fraction_max:.0%})")
    if late:
        bad.append("late feedback")
    if not bad:
        return
    why = f"{what}: {'; '.join(bad)} {detail}".rstrip()
    others = interfered(watch, why)
    lat = (timing.get("lateness") or {})
    pytest.fail(f"{why}; other processes {others if others is None else round(others, 2)} cores during the "
                f"test; lateness p99 {lat.get('p99')} max {lat.get('max')} s")


def interfered(watch: CpuWatch, why: str) -> float | None:
    """Skip the test (reason ``interference: ...``) when other processes kept at least
    :data:`INTERFERENCE_CORES` busy since ``watch`` was made; else return their mean use
    [cores] (None where it cannot be measured) for the caller's failure message."""
    others = watch.others_cores()
    if others is not None and others >= INTERFERENCE_CORES:
        pytest.skip(f"{INTERFERENCE} other processes kept {others:.2f} cores busy during the test; {why}")
    return others
