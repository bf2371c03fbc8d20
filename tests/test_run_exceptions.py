"""Every exception between enable and the end of a run, of any type, goes through the safe stop.

Issue 37 item 5: ``driver.reply_timeout_s = 1e300`` made python-can's receive raise an
OverflowError after ENTER_MOTOR_MODE; the loop caught only torqueloop errors, so no
EXIT_MOTOR_MODE was sent, nothing was printed and the run ended in a traceback.  Here the
demo's stack (``3rrr_circle.toml``: the real MIT driver, emulated AK80-9 on a virtual CAN bus)
meets errors of several types in the middle of the run and must end as a fault naming the
error, with every emulated motor out of motor mode (the EXIT frames reached them), the log on
disk up to the error and ``meta.json`` holding the result.  Such timeouts are refused where
they are set (the driver's attribute) and in the config (exit 2 naming the field).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from controller.app.run import build_run, load_run
from controller.telemetry import read_log, read_meta
from dynamics.errors import CommsError, ConfigError, DriverError

try:
    from tests.test_integration_faults import _Hooked
except ImportError:  # pragma: no cover - rootdir not on sys.path
    from test_integration_faults import _Hooked

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "hil_configs" / "runs" / "3rrr_circle.toml"
K = 60


def _overflowing_receive(transport, exc_type):
    """From now on a receive that waits (timeout > 0 or None) raises ``exc_type``, as python-can's
    does for a timeout the OS cannot represent; a poll (timeout 0) still works."""
    orig = transport.recv_fields

    def recv_fields(timeout_s=0.0):
        if timeout_s is None or timeout_s > 0:
            raise exc_type("timeout value is too large")
        return orig(timeout_s)

    transport.recv_fields = recv_fields


class _Run:
    def __init__(self, tmp_path, hook_at_k):
        self.spec = load_run(DEMO, overrides={"safety.stop_reaction": "zero_disable"}, duration_s=0.3)
        self.out = tmp_path / "run"
        self.run = build_run(self.spec, out_dir=self.out)
        self.close_error = None
        try:
            self.driver = self.run.driver
            self.hooked = _Hooked(self.driver, {K: lambda: hook_at_k(self)})
            self.run.loop.driver = self.hooked
            self.result = self.run.loop.run()
            self.driver.sync()
            self.emulators = list(self.driver.emulators)
        finally:
            try:
                self.run.close()
            except CommsError as err:
                self.close_error = err
        self.log = read_log(self.out)
        self.meta = read_meta(self.out)

    def motors_in_motor_mode(self) -> list[int]:
        return [i for emu in self.emulators for i in emu.can_ids if emu.motor_mode(i)]


@pytest.mark.parametrize("exc_type", [OverflowError, ZeroDivisionError, KeyError, RuntimeError])
def test_an_error_of_any_type_in_the_exchange_stops_the_drives(tmp_path, exc_type):
    """The receive fails with a non-torqueloop error from cycle K on (and keeps failing, also in
    the stop): the run ends as a fault naming it, EXIT_MOTOR_MODE still reaches every motor."""
    c = _Run(tmp_path, lambda r: _overflowing_receive(r.driver.inner.transports[0], exc_type))
    assert c.result.status == "fault"
    first = c.result.faults[0]
    assert first.cause == "driver" and exc_type.__name__ in first.message, [str(f) for f in c.result.faults]
    assert c.motors_in_motor_mode() == [], "a motor was left in motor mode"
    # the log is on disk up to the failed exchange, meta.json has the result
    assert len(c.log) == c.result.n_cycles == c.meta["result"]["n_cycles"] == K + 1
    assert c.meta["result"]["status"] == "fault"
    assert np.all(np.isfinite(c.log["tau_cmd"]))


def test_an_error_outside_the_driver_stops_the_drives_and_keeps_the_log(tmp_path):
    """A bug in the loop's own path (here the metrics raising a TypeError at cycle K) ends the
    run as an ``internal`` fault after a zero command and the disable, with the log kept."""
    def hook(r):
        def broken(*a, **k):
            raise TypeError("unsupported operand")
        r.run.loop._record = broken

    c = _Run(tmp_path, hook)
    assert c.result.status == "fault"
    assert c.result.faults[0].cause == "internal" and "TypeError" in c.result.faults[0].message
    assert c.motors_in_motor_mode() == []
    # the zero command went out after the error: the last command the driver got is zero
    assert np.all(c.hooked.sent[-1] == 0.0)
    assert len(c.log) == c.meta["result"]["n_cycles"] == c.result.n_cycles >= K
    assert c.meta["result"]["status"] == "fault"


def test_a_timeout_the_os_cannot_represent_is_refused_where_it_is_set(tmp_path):
    spec = load_run(DEMO, duration_s=0.05)
    run = build_run(spec, out_dir=tmp_path / "run")
    try:
        drv = run.driver.inner
        for name in ("reply_timeout_s", "enable_timeout_s"):
            before = getattr(drv, name)
            for bad in (1e300, float("inf"), float("nan"), 0.0, -1.0, 61.0):
                with pytest.raises(DriverError, match=name):
                    setattr(drv, name, bad)
            assert getattr(drv, name) == before
    finally:
        run.close()
    for key, bad in (("driver.reply_timeout_s", 1e300), ("driver.reply_timeout_s", 2.0),
                     ("driver.enable_timeout_s", 1e300)):
        with pytest.raises(ConfigError, match=key.split(".")[1]):
            build_run(load_run(DEMO, overrides={key: bad}, duration_s=0.05), out_dir=tmp_path / "x")


def test_the_command_line_refuses_the_timeout_with_exit_2_naming_the_field(tmp_path):
    r = subprocess.run([sys.executable, "-m", "controller.app.cli", "run", str(DEMO), "--duration", "0.05",
                        "--no-plots", "-o", str(tmp_path / "o"), "--set", "driver.reply_timeout_s=1e300"],
                       cwd=ROOT, capture_output=True, text=True, timeout=300,
                       env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "reply_timeout_s" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.exclusive
def test_a_freeze_longer_than_the_drives_watchdog_is_a_stop(tmp_path):
    """The process freezes 80 ms in cycle 100 (wall clock, 200 Hz): longer than the emulated drives'
    50 ms watchdog (which zeroed their torque meanwhile), shorter than lateness_max_s (0.1 s).
    The next cycle is the stop (zero torque), cause overrun naming the watchdog; before, the run
    resumed and commanded the error accumulated in the freeze at once (a 15x torque spike)."""
    import time

    from tests.serve_process import CpuWatch, interfered

    spec = load_run(DEMO, overrides={"safety.stop_reaction": "zero_disable", "loop.clock": "wall",
                                     "driver.emulator.watchdog_timeout_s": 0.05,
                                     "safety.overrun_fraction_max": 0.9, "loop.rate_hz": 200.0},
                    duration_s=1.0)
    r = build_run(spec, out_dir=tmp_path / "run")
    watch = CpuWatch()
    try:
        assert r.driver.watchdog_s == 0.05
        hooked = _Hooked(r.driver, {100: lambda: time.sleep(0.08)})
        hooked.watchdog_s = r.driver.watchdog_s
        r.loop.driver = hooked
        res = r.loop.run()
    finally:
        r.close()
    log = read_log(tmp_path / "run")
    first = res.faults[0] if res.faults else None
    if first is not None and first.t_s < 0.5:       # a stall before the freeze: the load, not the test
        interfered(watch, f"wall-clock freeze test stopped before the freeze: {first}")
    assert first is not None and first.cause == "overrun" and "watchdog" in first.message, [str(f) for f in res.faults]
    assert res.status == "fault" and len(log) == 102        # rows 0..100, the stop in row 101
    assert np.all(log["tau_cmd"][-1] == 0.0)


def test_an_output_folder_deleted_mid_run_stops_it_and_restores_the_log(tmp_path):
    """``rm -rf`` of the run's folder at cycle 1000 of the demo: the next flush finds its log file
    unlinked, makes the folder again with the rows written so far, and the run stops (telemetry
    fault, exit 1) with every row up to the stop and meta.json in the folder.  Before, the rows
    went into the deleted file: exit 0 and nothing left."""
    import shutil

    from controller.app.commands import exit_code

    spec = load_run(DEMO, overrides={"safety.stop_reaction": "zero_disable"}, duration_s=2.0)
    out = tmp_path / "run"
    r = build_run(spec, out_dir=out)
    try:
        r.loop.driver = _Hooked(r.driver, {1000: lambda: shutil.rmtree(out)})
        res = r.loop.run()
    finally:
        r.close()
    assert exit_code(res) == 1 and res.status == "fault"
    first = res.faults[0]
    assert first.cause == "telemetry" and "deleted" in first.message, [str(f) for f in res.faults]
    log = read_log(out)
    meta = read_meta(out)
    assert len(log) == res.n_cycles == meta["result"]["n_cycles"] > 1000
    assert np.allclose(log["t"], np.arange(len(log)) * spec.period_s)
    assert "deleted" in meta["log_incomplete"]["error"]
