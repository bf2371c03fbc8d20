"""Test helper: run ``python -m drivers.sim.serve CONFIG`` in a subprocess for the duration of a test."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


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


def skip_if_overloaded(returncode: int, out: Path, what: str = "wall-clock run", detail: str = "",
                       late: bool = False, watch: CpuWatch | None = None) -> None:
    """Skip a failed wall-clock test when most of its cycles missed their deadline (or ``late``:
    the caller saw another sign of lateness, such as feedback that never came fresh).

    Plain-Python processes on an overloaded shared machine miss their deadlines: the plant or
    the server runs ahead (tracking error, stale feedback) or the overrun protection stops the
    run, as it should; that says nothing about what the test checks.  Skipped only when the
    machine is loaded (1-minute load average at least the number of CPUs, or ``watch``: other
    processes kept at least half a core busy during the test): a run that failed with its
    timing held, or missed its deadlines on an idle machine, fails the test.
    """
    import json

    meta_path = Path(out) / "meta.json"
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
    timing = meta.get("result", {}).get("timing") or {}
    n = max(1, meta.get("result", {}).get("n_cycles", 1))
    others = None if watch is None else watch.others_cores()
    loaded = os.getloadavg()[0] >= (os.cpu_count() or 1) or (others is not None and others >= 0.5)
    if returncode != 0 and loaded and (late or timing.get("missed_deadlines", 0) > 0.05 * n):
        busy = "" if others is None else f", other processes {others:.2f} cores during the test"
        pytest.skip(f"machine too loaded for a {what} (os.getloadavg() = {os.getloadavg()}{busy}): "
                    f"{timing.get('missed_deadlines')} of {n} cycles missed {detail}".rstrip())
