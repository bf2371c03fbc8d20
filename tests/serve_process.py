"""Test helper: run ``python -m drivers.sim.serve CONFIG`` in a subprocess for the duration of a test."""

from __future__ import annotations

import os
import subprocess
import sys
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
    proc = subprocess.Popen([sys.executable, "-m", "drivers.sim.serve", str(config), *args], cwd=REPO,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
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


def skip_if_overloaded(returncode: int, out: Path, what: str = "wall-clock run", detail: str = "",
                       late: bool = False) -> None:
    """Skip a failed wall-clock test when most of its cycles missed their deadline (or ``late``:
    the caller saw another sign of lateness, such as feedback that never came fresh).

    Plain-Python processes on an overloaded shared machine miss their deadlines: the plant or
    the server runs ahead (tracking error, stale feedback) or the overrun protection stops the
    run, as it should; that says nothing about what the test checks.  Skipped only when the
    machine is loaded (1-minute load average at least the number of CPUs): a run that failed
    with its timing held, or missed its deadlines on an idle machine, fails the test.
    """
    import json

    meta_path = Path(out) / "meta.json"
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
    timing = meta.get("result", {}).get("timing") or {}
    n = max(1, meta.get("result", {}).get("n_cycles", 1))
    loaded = os.getloadavg()[0] >= (os.cpu_count() or 1)
    if returncode != 0 and loaded and (late or timing.get("missed_deadlines", 0) > 0.05 * n):
        pytest.skip(f"machine too loaded for a {what} (os.getloadavg() = {os.getloadavg()}): "
                    f"{timing.get('missed_deadlines')} of {n} cycles missed {detail}".rstrip())
