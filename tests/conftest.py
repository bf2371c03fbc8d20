"""Suite-wide rules: timing-sensitive tests run alone, and every interference skip is counted.

**Exclusive tests.**  A test marked ``exclusive`` measures wall-clock behaviour (deadlines, a
drive's or an SDK's reply timeout, a rehearsal across processes).  Under ``pytest-xdist`` the
other workers of the same run would load the machine while it runs, which is the suite's own
load, not the product's fault nor a real machine's.  So an exclusive test waits until no other
test of this run is running and holds the others off until it ends: a reader-writer lock on
two files shared by the run's workers (``fcntl.flock``): every test takes the *gate*, then
the *room* shared (ordinary tests) or exclusive (exclusive tests), and an ordinary test lets the
gate go at once while an exclusive one keeps it, so that the tests queued behind it wait
instead of starving it.  Without xdist the lock is uncontended.

**Two sessions.**  The README's test command (``.ci/run``) runs the suite as two sessions: every
test but the exclusive ones on all workers (``-m 'not exclusive'``), then the exclusive ones in
one process.  In one session of several workers an exclusive test waits for the test each other
worker is running to end, and the gate keeps those workers idle meanwhile: in a clean clone's
run (2 workers) the exclusive tests and their waits took 330 s of a worker's time for 119 s of
their own.  The lock above still holds for anyone running them in one session.

**Interference.**  With the suite itself quiet, what an exclusive test still shares the
machine with is measured, not guessed: :class:`tests.serve_process.CpuWatch` counts the CPU
time other processes took during the test.  Only a measured interference may turn a failure
into a skip (``tests.serve_process.skip_if_interfered``); the skips are counted and printed
at the end of the run ("interference skips: N of M exclusive tests"), so a run that skipped
often says so.

**Kernel caches before the workers.**  Every ``pytest-xdist`` worker collects the whole suite,
and collecting imports the kernel modules, which compile their signatures when numba's cache
has none (a clean clone: about a minute of CPU, half of it :mod:`dynamics._stewart_kernels`).
The workers would each compile all of it at the same time.  So before the workers start, the
controller has one process per worker import the kernel modules in turns of the list (the
first from its start, the second from its end, ...): a module one of them is compiling, another
waits for (:class:`dynamics._kernel_cache.CompileGate`) and then loads from the cache.  With
warm caches this costs the imports alone (a few seconds, in parallel); a failed import is left
for the workers to report.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: no lock, tests run as scheduled
    fcntl = None

#: reason prefix of a skip for measured interference (tests.serve_process)
INTERFERENCE = "interference:"

try:
    from hypothesis import HealthCheck
    from hypothesis import settings as _hyp_settings
except ImportError:  # pragma: no cover - hypothesis is in the test extra
    pass
else:
    # Property tests check values, never time: no per-example deadline (Hypothesis' 200 ms fails
    # an example a stalled machine or a garbage collection happened to slow) and no health check
    # on how fast examples are made (the same stall fails it).  Each test's own @settings adds
    # to this profile.
    _hyp_settings.register_profile("torqueloop", deadline=None,
                                   suppress_health_check=[HealthCheck.too_slow])
    _hyp_settings.load_profile("torqueloop")


class Recorder:
    """A serial port that records what a driver writes and reads through it (``("w", bytes)``,
    ``("r", bytes)``, ``("timeout", n)``), for the tests of the serial drivers."""

    def __init__(self, port):
        self.port = port
        self.url = port.url
        self.log: list = []

    def write(self, data):
        self.log.append(("w", bytes(data)))
        self.port.write(data)

    def read(self, n, timeout_s=None):
        from dynamics.errors import CommsTimeoutError
        try:
            out = self.port.read(n, timeout_s)
        except CommsTimeoutError:
            self.log.append(("timeout", n))
            raise
        self.log.append(("r", out))
        return out

    def reset_input(self):
        self.port.reset_input()

    def close(self):
        self.port.close()


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "exclusive: timing-sensitive (wall clock, reply timeouts, another process); "
        "runs with no other test of the run at the same time (tests/conftest.py)")
    config._tl_skips = {"interference": [], "exclusive": 0}


def _lock_dir(config) -> Path | None:
    """The run's lock folder, None without xdist: the parent of the workers' temporary folders
    (``.../pytest-N/popen-gwK``), which is the run's own and goes with pytest's old runs."""
    if not os.environ.get("PYTEST_XDIST_WORKER") or fcntl is None:
        return None
    return config._tmp_path_factory.getbasetemp().parent


class _RunLock:
    """The gate/room reader-writer lock of the module docstring."""

    def __init__(self, folder: Path):
        self._gate = os.open(folder / "gate", os.O_RDWR | os.O_CREAT, 0o600)
        self._room = os.open(folder / "room", os.O_RDWR | os.O_CREAT, 0o600)

    def acquire(self, exclusive: bool) -> None:
        fcntl.flock(self._gate, fcntl.LOCK_EX)
        try:
            fcntl.flock(self._room, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        finally:
            if not exclusive:
                fcntl.flock(self._gate, fcntl.LOCK_UN)

    def release(self, exclusive: bool) -> None:
        fcntl.flock(self._room, fcntl.LOCK_UN)
        if exclusive:
            fcntl.flock(self._gate, fcntl.LOCK_UN)


_lock: _RunLock | None = None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    global _lock
    folder = _lock_dir(item.config)
    if folder is None:
        yield
        return
    if _lock is None:
        _lock = _RunLock(folder)
    exclusive = item.get_closest_marker("exclusive") is not None
    _lock.acquire(exclusive)
    try:
        yield
    finally:
        _lock.release(exclusive)


def pytest_runtest_logreport(report):
    # runs in the controller too (xdist sends the workers' reports there): count once, there
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return
    cfg = _config
    if cfg is None:
        return
    if "exclusive" not in report.keywords:
        return
    if report.when == "setup":
        cfg._tl_skips["exclusive"] += 1
    if report.skipped:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        if INTERFERENCE in reason:
            cfg._tl_skips["interference"].append((report.nodeid, reason))

_config = None


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session):
    global _config
    _config = session.config
    _warm_kernel_caches(session.config)


#: seconds the warming processes may take (a cold cache takes about a minute on two cores)
WARM_TIMEOUT_S = 900.0


def _warm_kernel_caches(config) -> None:
    """The module docstring's "kernel caches before the workers": in xdist's controller only
    (it starts the workers after this hook), with two workers or more."""
    n = getattr(config.option, "numprocesses", None)
    if os.environ.get("PYTEST_XDIST_WORKER") or not isinstance(n, int) or n < 2:
        return
    root = Path(__file__).resolve().parents[1]
    from dynamics._kernel_cache import KERNEL_FILES
    mods = [f[:-3].replace("/", ".") for f in KERNEL_FILES]
    m = min(n, 4)
    # process k goes through the list from its (k/m)-th element on, or (odd k) backwards from
    # just before its ((k+1)/m)-th: for two, one from the list's start and one from its end
    def turn(k):            # the list from its (k/m)-th element on, going round
        i = k * len(mods) // m % len(mods)
        return mods[i:] + mods[:i]
    orders = [turn(k) if k % 2 == 0 else turn(k + 1)[::-1] for k in range(m)]
    code = "import importlib, sys\nfor m in sys.argv[1:]:\n    importlib.import_module(m)\n"
    procs = [subprocess.Popen([sys.executable, "-c", code, *order], cwd=root, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL) for order in orders]
    # one deadline for all of them (each its own would hold the run up to m times as long); the
    # ones still running then (or when the controller is interrupted) are killed: the workers
    # compile instead
    deadline = time.monotonic() + WARM_TIMEOUT_S
    try:
        for p in procs:
            try:
                p.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                break
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return
    s = getattr(config, "_tl_skips", None)
    if not s or not s["exclusive"]:
        return
    n = len(s["interference"])
    terminalreporter.write_line(f"interference skips: {n} of {s['exclusive']} exclusive tests")
    for nodeid, reason in s["interference"]:
        terminalreporter.write_line(f"  {nodeid}: {reason}")
