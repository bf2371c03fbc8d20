"""The recovery path (controller.app.run.Run.recover, `torqueloop run --recover`): after a comms
fault or a drive that stopped (a CAN bus-off, a drive that rebooted, a latched drive fault), the
operator confirms, the drives' faults are cleared, the drives re-enabled and the robot held, in
the same process, and meta.json's events show every step.  Table-driven: fault x protocol, the
faults injected through drivers/sim (FaultInjectingBus.fail_now/restore, the emulators' reboot and
fault injection), on the bring-up suite's arm (tests/test_bringup.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from controller.app.run import build_run
from controller.telemetry import read_meta
from dynamics.errors import CommsError, SafetyError

try:
    from tests.test_bringup import _data, _spec
except ImportError:  # pragma: no cover - rootdir not on sys.path
    from test_bringup import _data, _spec

#: driver cycle at which the fault is injected
K = 200


def _bus_off(drv):
    for b in drv.fault_buses:
        b.fail_now()


def _device(drv, joint):
    inner = drv.inner
    if hasattr(inner, "servos"):
        return drv.emulators[0], inner.servos[joint].dxl_id
    if hasattr(inner, "axes"):
        return drv.emulators[0], inner.axes[joint].node_id
    return drv.emulators[0], inner.joints[joint].can_id


def _reboot(drv):
    emu, did = _device(drv, 1)
    emu.reboot(did)


def _latched_fault(drv):
    emu, did = _device(drv, 1)
    (emu.inject_hardware_error if hasattr(emu, "inject_hardware_error") else emu.inject_fault)(did)


#: (fault, protocol) -> (injection, the run's fault cause)
CELLS = {
    ("bus_off", "mit"): (_bus_off, "comms"),
    ("bus_off", "odrive_can"): (_bus_off, "comms"),
    ("bus_off", "cia402"): (_bus_off, "comms"),
    ("drive_reboot", "mit"): (_reboot, "device_fault"),
    ("drive_reboot", "odrive_can"): (_reboot, "drive_disabled"),
    ("drive_reboot", "cia402"): (_reboot, "drive_disabled"),
    ("drive_reboot", "dynamixel"): (_reboot, "device_fault"),
    ("latched_fault", "cia402"): (_latched_fault, "device_fault"),
    ("latched_fault", "dynamixel"): (_latched_fault, "device_fault"),
}
#: what a device fault's message says in each protocol's own words
NAMED = {("drive_reboot", "mit"): "rebooted out of motor mode?) (the driver's check",
         ("latched_fault", "cia402"): "EMCY 0x2310 (continuous over-current)",
         ("latched_fault", "dynamixel"): "overload (0x20)", ("drive_reboot", "dynamixel"): "torque found off (0x200)"}
EVENTS = ["recovery_asked", "recovery_confirmed", "faults_cleared", "re_enabled", "hold_done"]


def _faulted_run(protocol, inject, tmp_path):
    data = _data(protocol, "clean", tmp_path)
    if protocol != "dynamixel":
        data["driver"]["faults"] = {"seed": 1}       # a FaultInjectingBus that passes everything
    if protocol in ("mit", "odrive_can"):
        # a dead bus leaves a drive on its last command unless its watchdog is on (README)
        data["driver"]["emulator"] = {"watchdog_timeout_s": 0.05}
    spec = _spec(data, tmp_path)
    run = build_run(spec, out_dir=tmp_path / "out")
    drv, cycle, calls = run.driver, run.driver.cycle, [0]

    def hooked(command):
        calls[0] += 1
        if calls[0] == K:
            inject(drv)
        return cycle(command)

    drv.cycle = hooked
    return run, run.loop.run()


@pytest.mark.parametrize("fault,protocol", [
    pytest.param(f, p, marks=pytest.mark.exclusive) if p == "dynamixel" else (f, p) for f, p in CELLS])
def test_recovery_after_fault(fault, protocol, tmp_path):
    inject, cause = CELLS[(fault, protocol)]
    run, res = _faulted_run(protocol, inject, tmp_path)
    try:
        assert res.status == "fault" and res.faults[0].cause == cause, res.faults
        if cause == "device_fault":     # named as the protocol names it (Driver.fault_text)
            assert NAMED[fault, protocol] in res.faults[0].message, res.faults[0].message
        if fault == "bus_off":
            with pytest.raises(CommsError):           # the bus is still off: nothing to clear yet
                run.recover(res, lambda msg: True, hold_s=0.5)
            assert run.events[-1]["event"] == "recovery_failed"
            for b in run.driver.fault_buses:
                b.restore()                           # the adapter restarted (restart-ms)
            run.events.clear()
        asked = []
        hold = run.recover(res, lambda msg: asked.append(msg) or True, hold_s=0.5)
    finally:
        run.close()
    assert cause in asked[0] and "Clear the drives' faults" in asked[0]
    assert hold.status == "completed" and hold.n_cycles > 0, hold.faults
    assert [e["event"] for e in run.events] == EVENTS
    q_held = np.asarray(run.events[3]["position_rad"])
    assert np.all(np.isfinite(q_held))
    meta = read_meta(tmp_path / "out")
    assert [e["event"] for e in meta["events"]][-5:] == EVENTS
    assert meta["events"][-1]["status"] == "completed"


def test_recovery_needs_the_operators_yes(tmp_path):
    run, res = _faulted_run("mit", _reboot, tmp_path)
    try:
        with pytest.raises(SafetyError, match="not confirmed"):
            run.recover(res, lambda msg: False)
    finally:
        run.close()
    assert [e["event"] for e in run.events] == ["recovery_asked", "recovery_refused"]
    assert [e["event"] for e in read_meta(tmp_path / "out")["events"]] == ["recovery_asked", "recovery_refused"]


def test_cli_run_recover_after_bus_off(tmp_path, capsys):
    """`torqueloop run --yes-recover`: a bus that goes off after 800 frames and whose adapter
    restarts 0.5 s later ([driver.faults] bus_error_after, bus_restart_s): the run ends on the
    comms fault (exit 1), the recovery clears, re-enables and holds; meta.json has the events."""
    from controller.app.cli import main
    from dynamics.config import write_toml

    data = _data("mit", "clean", tmp_path)
    data["driver"]["faults"] = {"seed": 1, "bus_error_after": 800, "bus_restart_s": 0.5}
    data["driver"]["emulator"] = {"watchdog_timeout_s": 0.05}
    cfg = tmp_path / "busoff.toml"
    write_toml(cfg, data)
    out = tmp_path / "out"
    code = main(["run", str(cfg), "-o", str(out), "--no-plots", "--no-progress", "--yes-recover", "--hold-s", "0.5"])
    text = capsys.readouterr()
    assert code == 1
    assert "comms" in text.out and "recovery: faults cleared, drives re-enabled, hold COMPLETED" in text.out
    assert "Clear the drives' faults" in text.err
    assert [e["event"] for e in read_meta(out)["events"]] == EVENTS
    # without --recover the same run just stops
    code = main(["run", str(cfg), "-o", str(tmp_path / "out2"), "--no-plots", "--no-progress"])
    assert code == 1 and "recovery" not in capsys.readouterr().out
    assert "events" not in read_meta(tmp_path / "out2")
