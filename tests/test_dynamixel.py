"""Dynamixel driver and emulated servos, on a pseudo-terminal and inline.

The emulator is checked with the official ``dynamixel_sdk`` as an independent client (its
PortHandler opens the pty like a real U2D2, its PacketHandler / GroupSyncWrite / GroupSyncRead
talk to the emulated firmware); our driver runs against the same emulator, and the protocol
faults (hardware error, CRC errors, bus watchdog, the port disappearing) end in the safe stop.
Served inline (no pseudo-terminal, no thread), the emulator carries the same bytes as on the
pty (our driver's traffic and feedback compared byte for byte and bit for bit), models the same
wire schedule (waited in wall-clock time, or counted against the read deadlines) and keeps its
behaviour (the bus watchdog without packets, the adapter disappearing, an error in the serving
kept for ``check()``); the shipped run serves inline on the lock-step clock and logs what the
threaded emulator logs.
"""

from __future__ import annotations

import time
from pathlib import Path

import dynamixel_sdk as sdk
import numpy as np
import pytest

from drivers.base import Command, JointMapping
from drivers.busload import dynamixel_budget, dynamixel_cycle_bytes
from drivers.codecs import dynamixel as dx
from drivers.dynamixel import FAULT_WATCHDOG, DynamixelDriver, DynamixelServo
from drivers.serial_port import SerialTransport
from drivers.sim.dynamixel_emulator import DynamixelBusEmulator, InlineDynamixelPort, ServoConfig
from drivers.sim.plant import SimulatedPlant
from dynamics import load_model
from dynamics.config import Section
from dynamics.errors import CommsError, CommsTimeoutError, ConfigError, DeviceFaultError, DriverError

try:
    from tests.conftest import Recorder
    from tests.serve_process import CpuWatch, interfered
except ImportError:  # pragma: no cover - rootdir not on sys.path
    from conftest import Recorder
    from serve_process import CpuWatch, interfered

ROOT = Path(__file__).resolve().parents[1]
ROBOT = ROOT / "hil_configs" / "robots" / "dxl_3dof_arm.toml"
RUN = ROOT / "hil_configs" / "runs" / "dxl_3dof_arm.toml"
MODELS = ("XM430-W350", "XM540-W270", "XM430-W350")


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


#: servos behind a pseudo-terminal, answered by a thread against wall-clock timeouts (the SDK's
#: and the driver's): no other test of the suite at once (tests/conftest.py)
pytestmark = pytest.mark.exclusive

@pytest.fixture(scope="module")
def model():
    return load_model(ROBOT)


@pytest.fixture
def bus(model):
    clock = Clock()
    plant = SimulatedPlant(model, q0=np.array([0.1, -0.2, 0.3]), t0_s=0.0)
    cfgs = [ServoConfig(i + 1, i, m, JointMapping(torque_constant_nm_per_a=dx.DXL_MODELS[m].torque_constant_nm_per_a))
            for i, m in enumerate(MODELS)]
    emu = DynamixelBusEmulator(cfgs, plant, clock, baudrate=1_000_000)
    yield emu, plant, clock
    emu.close()


#: the SDK's USB latency timer [ms] in these tests.  Its packet timeout is twice that plus the
#: wire time (34 ms for a status packet at the SDK's default 16 ms), the time the emulator's
#: thread has to answer through the pseudo-terminal; a loaded machine can hold a thread off for
#: longer (the suite saw COMM_RX_TIMEOUT on an answered packet).  The setting a user raises for
#: a slow adapter; an unanswered packet costs twice this.
SDK_LATENCY_TIMER_MS = 100


@pytest.fixture
def sdk_port(bus, monkeypatch):
    monkeypatch.setattr(sdk.port_handler, "LATENCY_TIMER", SDK_LATENCY_TIMER_MS)
    emu = bus[0]
    port = sdk.PortHandler(emu.port_path)
    assert port.openPort() and port.setBaudRate(1_000_000)
    yield port, sdk.PacketHandler(2.0)
    port.closePort()


# --- the official SDK against the emulated firmware -----------------------------------------------
def test_sdk_ping_read_write_and_firmware_rules(bus, sdk_port):
    emu, plant, clock = bus
    port, ph = sdk_port
    assert ph.ping(port, 2) == (1120, sdk.COMM_SUCCESS, 0)
    assert ph.ping(port, 9)[1] == sdk.COMM_RX_TIMEOUT                      # nobody has ID 9
    assert ph.read2ByteTxRx(port, 1, dx.Addr.CURRENT_LIMIT) == (1193, sdk.COMM_SUCCESS, 0)
    assert ph.write1ByteTxRx(port, 1, dx.Addr.OPERATING_MODE, 0) == (sdk.COMM_SUCCESS, 0)
    assert ph.write1ByteTxRx(port, 1, dx.Addr.TORQUE_ENABLE, 1) == (sdk.COMM_SUCCESS, 0)
    # EEPROM is locked while torque is on; read-only and partial items are refused
    assert ph.write1ByteTxRx(port, 1, dx.Addr.OPERATING_MODE, 3) == (sdk.COMM_SUCCESS, dx.StatusError.ACCESS)
    assert ph.write2ByteTxRx(port, 1, dx.Addr.PRESENT_CURRENT, 5)[1] == dx.StatusError.ACCESS
    assert ph.write1ByteTxRx(port, 1, dx.Addr.GOAL_CURRENT, 5)[1] == dx.StatusError.DATA_LENGTH
    # Goal Current beyond Current Limit: Data Limit Error, the old goal is kept
    assert ph.write2ByteTxRx(port, 1, dx.Addr.GOAL_CURRENT, 1194)[1] == dx.StatusError.DATA_LIMIT
    assert emu.servo(1).get(dx.Addr.GOAL_CURRENT) == 0
    # Present Position is the plant's position in pulses (multi-turn, signed)
    pos, res, _ = ph.read4ByteTxRx(port, 3, dx.Addr.PRESENT_POSITION)
    assert res == sdk.COMM_SUCCESS and pos == round(0.3 / dx.POSITION_RAD_PER_PULSE)


def test_sdk_group_sync_write_drives_the_plant_and_sync_reads_match(bus, sdk_port):
    emu, plant, clock = bus
    port, ph = sdk_port
    for i in (1, 2, 3):
        assert ph.write1ByteTxRx(port, i, dx.Addr.OPERATING_MODE, 0)[1] == 0
        assert ph.write1ByteTxRx(port, i, dx.Addr.TORQUE_ENABLE, 1)[1] == 0
    gsw = sdk.GroupSyncWrite(port, ph, dx.Addr.GOAL_CURRENT, 2)
    goals = {1: 100, 2: -200, 3: 50}
    for i, g in goals.items():
        gsw.addParam(i, list((g & 0xFFFF).to_bytes(2, "little")))
    assert gsw.txPacket() == sdk.COMM_SUCCESS
    clock.t = 0.002
    assert ph.ping(port, 1)[1] == sdk.COMM_SUCCESS, emu.check()   # the plant steps to the loop time
    assert [emu.servo(i).get(dx.Addr.GOAL_CURRENT) for i in goals] == list(goals.values())
    clock.t = 0.004
    gsr = sdk.GroupSyncRead(port, ph, dx.PRESENT_BLOCK_ADDR, dx.PRESENT_BLOCK_LEN)
    for i in goals:
        gsr.addParam(i)
    for read in (gsr.txRxPacket, gsr.fastSyncRead):
        assert read() == sdk.COMM_SUCCESS
        _, q, qd, tau = plant.measure()
        for i in goals:
            pos = gsr.getData(i, dx.Addr.PRESENT_POSITION, 4)
            pos -= (1 << 32) if pos >= 1 << 31 else 0
            assert pos == pytest.approx(q[i - 1] / dx.POSITION_RAD_PER_PULSE, abs=0.5)
            cur = gsr.getData(i, dx.Addr.PRESENT_CURRENT, 2)
            cur -= (1 << 16) if cur >= 1 << 15 else 0
            assert cur == goals[i]
    for i, g in goals.items():
        m = dx.DXL_MODELS[MODELS[i - 1]]
        assert plant.applied_torque_nm[i - 1] == pytest.approx(g * m.current_a_per_lsb * m.torque_constant_nm_per_a)


def test_crc_error_answered_only_when_addressed(bus, sdk_port):
    emu, _, _ = bus
    port, ph = sdk_port
    bad = bytearray(dx.encode_write(2, dx.Addr.LED, b"\x01"))
    bad[-1] ^= 0x5A
    port.clearPort()
    port.writePort(list(bad))
    port.setPacketTimeout(11)
    rx, res = ph.rxPacket(port, False)
    assert res == sdk.COMM_SUCCESS and rx[4] == 2 and rx[8] == dx.StatusError.CRC
    assert emu.servo(2).get(dx.Addr.LED) == 0                     # not executed
    bad = bytearray(dx.encode_sync_write(dx.Addr.LED, 1, [(2, b"\x01")]))
    bad[-2] ^= 0x01
    port.writePort(list(bad))
    port.setPacketTimeout(11)
    assert ph.rxPacket(port, False)[1] == sdk.COMM_RX_TIMEOUT      # broadcast: dropped silently
    assert emu.crc_errors_in == 2


def test_bus_watchdog_stops_the_servo_and_locks_goals(bus, sdk_port):
    emu, plant, clock = bus
    port, ph = sdk_port
    ph.write1ByteTxRx(port, 1, dx.Addr.OPERATING_MODE, 0)
    ph.write1ByteTxRx(port, 1, dx.Addr.TORQUE_ENABLE, 1)
    ph.write2ByteTxRx(port, 1, dx.Addr.GOAL_CURRENT, 300)
    assert ph.write1ByteTxRx(port, 1, dx.Addr.BUS_WATCHDOG, 5)[1] == 0       # 100 ms
    clock.t = 0.09
    assert ph.ping(port, 1)[1] == sdk.COMM_SUCCESS                          # feeds it
    assert plant.applied_torque_nm[0] != 0
    clock.t = 0.25                                                          # 160 ms of silence
    wd, _, _ = ph.read1ByteTxRx(port, 1, dx.Addr.BUS_WATCHDOG)
    assert wd == 0xFF and plant.applied_torque_nm[0] == 0
    assert ph.write2ByteTxRx(port, 1, dx.Addr.GOAL_CURRENT, 10)[1] == dx.StatusError.DATA_RANGE
    assert ph.write1ByteTxRx(port, 1, dx.Addr.BUS_WATCHDOG, 0)[1] == 0       # clears the error
    assert ph.write2ByteTxRx(port, 1, dx.Addr.GOAL_CURRENT, 10)[1] == 0


def test_bus_watchdog_fires_without_any_packet(bus, sdk_port):
    """The servo's watchdog is its own timer: it cuts the torque when the controller stops sending
    (a paused or killed process), not when the next packet happens to arrive, and it still runs
    after the adapter is gone (loop time then passes through advance_to)."""
    emu, plant, clock = bus
    port, ph = sdk_port
    for dxl_id in (1, 2):
        ph.write1ByteTxRx(port, dxl_id, dx.Addr.OPERATING_MODE, 0)
        ph.write1ByteTxRx(port, dxl_id, dx.Addr.TORQUE_ENABLE, 1)
        ph.write2ByteTxRx(port, dxl_id, dx.Addr.GOAL_CURRENT, 300)
        assert ph.write1ByteTxRx(port, dxl_id, dx.Addr.BUS_WATCHDOG, 5)[1] == 0       # 100 ms
    clock.t = 0.09
    emu.sync()
    assert plant.applied_torque_nm[0] != 0 and plant.applied_torque_nm[1] != 0
    assert plant.t_s == pytest.approx(0.09)                 # idle polls advance the plant with time
    clock.t = 0.11                                          # 110 ms after the last packet: nothing sent
    emu.sync()
    assert plant.applied_torque_nm[0] == 0 and plant.applied_torque_nm[1] == 0
    assert emu.servo(1).get(dx.Addr.BUS_WATCHDOG) == -1     # 0xFF on the wire: the watchdog error
    # the adapter disappears: the servos keep their watchdogs
    ph.write1ByteTxRx(port, 1, dx.Addr.BUS_WATCHDOG, 0)
    ph.write2ByteTxRx(port, 1, dx.Addr.GOAL_CURRENT, 300)
    ph.write1ByteTxRx(port, 1, dx.Addr.BUS_WATCHDOG, 5)
    emu.disconnect()
    emu.advance_to(0.11 + 0.05)
    assert plant.applied_torque_nm[0] != 0
    emu.advance_to(0.11 + 0.099)
    assert plant.applied_torque_nm[0] != 0
    emu.advance_to(0.11 + 0.101)
    assert plant.applied_torque_nm[0] == 0 and plant.t_s == pytest.approx(0.211)


def test_hardware_errors_alert_shutdown_and_reboot(bus, sdk_port):
    emu, plant, clock = bus
    port, ph = sdk_port
    for i in (1, 2):
        ph.write1ByteTxRx(port, i, dx.Addr.OPERATING_MODE, 0)
        ph.write1ByteTxRx(port, i, dx.Addr.TORQUE_ENABLE, 1)
    emu.set_supply_voltage(17.0)            # above Max Voltage Limit: not a shutdown error by default
    _, _, err = ph.ping(port, 1)
    assert err & dx.ALERT_BIT
    assert ph.read1ByteTxRx(port, 1, dx.Addr.HARDWARE_ERROR_STATUS)[0] == 0x01
    assert ph.read1ByteTxRx(port, 1, dx.Addr.TORQUE_ENABLE)[0] == 1
    emu.set_supply_voltage(12.0)
    emu.set_temperature(2, 85.0)             # above Temperature Limit (80): shutdown
    assert ph.read1ByteTxRx(port, 2, dx.Addr.TORQUE_ENABLE)[:2] == (0, sdk.COMM_SUCCESS)
    assert ph.read1ByteTxRx(port, 2, dx.Addr.HARDWARE_ERROR_STATUS)[0] == 0x04
    assert ph.write1ByteTxRx(port, 2, dx.Addr.TORQUE_ENABLE, 1)[1] & 0x7F == dx.StatusError.RESULT_FAIL
    emu.set_temperature(2, 40.0)
    assert ph.reboot(port, 2)[0] == sdk.COMM_SUCCESS
    assert ph.read1ByteTxRx(port, 2, dx.Addr.HARDWARE_ERROR_STATUS) == (0, sdk.COMM_SUCCESS, 0)


def test_wire_time_and_return_delay_are_modelled(model):
    plant = SimulatedPlant(model, q0=np.zeros(3))
    baud = 57600
    watch = CpuWatch()
    with DynamixelBusEmulator([ServoConfig(1, 0)], plant, lambda: 0.0, baudrate=baud) as emu:
        port = SerialTransport(emu.port_path, baudrate=baud, timeout_s=1.0)
        try:
            for rd_lsb in (0, 250):                   # 0 and the factory 500 us
                emu.servo(1).write(dx.Addr.RETURN_DELAY_TIME, bytes((rd_lsb,)))
                req = dx.encode_read(1, dx.PRESENT_BLOCK_ADDR, 10)
                best = 1.0
                for _ in range(5):
                    t0 = time.perf_counter()
                    port.write(req)
                    ans = port.read(21, 1.0)
                    best = min(best, time.perf_counter() - t0)
                assert dx.decode_packet(ans).id == 1
                expect = (len(req) + 21) * 10 / baud + rd_lsb * 2e-6
                assert expect <= best
                if best >= expect + 0.01:
                    interfered(watch, f"best of 5 answers {best * 1e3:.1f} ms, expected {expect * 1e3:.1f} ms")
                    assert best < expect + 0.01
        finally:
            port.close()


# --- our driver against the emulator --------------------------------------------------------------
def _driver(emu, clock, **kw):
    servos = [DynamixelServo(i + 1, dx.DXL_MODELS[m], JointMapping(
        torque_constant_nm_per_a=dx.DXL_MODELS[m].torque_constant_nm_per_a)) for i, m in enumerate(MODELS)]
    port = SerialTransport(emu.port_path, baudrate=emu.baudrate, timeout_s=0.05)
    # the servos answer from the emulator's thread through a pseudo-terminal: a reply counts as
    # lost only after 0.25 s of wall time (a stalled machine is not what these tests are about)
    return DynamixelDriver(port, servos, now=clock, baudrate=emu.baudrate, reply_timeout_s=0.25, **kw)


@pytest.mark.parametrize("read_mode", ["fast_sync", "sync"])
def test_driver_cycles_against_emulator(bus, read_mode):
    emu, plant, clock = bus
    with _driver(emu, clock, read_mode=read_mode, status_every=5) as drv:
        fb = drv.enable()
        assert fb.fresh.all() and fb.enabled.all() and not fb.fault.any()
        assert np.allclose(fb.position_rad, [0.1, -0.2, 0.3], atol=dx.POSITION_RAD_PER_PULSE)
        s = emu.servo(2)
        assert s.get(dx.Addr.OPERATING_MODE) == 0 and s.get(dx.Addr.RETURN_DELAY_TIME) == 0
        assert s.get(dx.Addr.BUS_WATCHDOG) == 5
        tau = np.array([0.2, -0.5, 0.1])
        for k in range(20):
            clock.t += 0.002
            fb = drv.cycle(Command(tau))
            assert fb.fresh.all(), fb.info
        step = [dx.DXL_MODELS[m].current_a_per_lsb * dx.DXL_MODELS[m].torque_constant_nm_per_a for m in MODELS]
        assert np.all(np.abs(plant.applied_torque_nm - tau) <= np.array(step) / 2 + 1e-12)
        assert np.all(np.abs(fb.torque_nm - tau) <= np.array(step) / 2 + 1e-12)
        _, q, qd, _ = plant.measure()
        assert np.allclose(fb.position_rad, q, atol=dx.POSITION_RAD_PER_PULSE)
        assert np.allclose(fb.velocity_rad_s, qd, atol=dx.VELOCITY_RAD_S_PER_LSB)
        # beyond the Current Limit: clamped by the driver (the firmware would refuse it)
        fb = drv.cycle(Command(np.array([100.0, 0.0, 0.0])))
        assert fb.info["saturated"] == 1 and emu.servo(1).get(dx.Addr.GOAL_CURRENT) == 1193
    deadline = time.monotonic() + 2.0                          # close() turns torque off
    while any(s.torque_on for s in emu.servos) and time.monotonic() < deadline:
        time.sleep(0.005)
    assert not any(s.torque_on for s in emu.servos)


def test_driver_refuses_wrong_model_and_hardware_error(bus):
    emu, _, clock = bus
    emu.inject_hardware_error(3, 0x20)
    with _driver(emu, clock) as drv:
        with pytest.raises(DeviceFaultError, match="overload"):
            drv.enable()
    servos = [DynamixelServo(1, dx.DXL_MODELS["XL330-M288"], JointMapping())]
    port = SerialTransport(emu.port_path, baudrate=emu.baudrate, timeout_s=0.05)
    with DynamixelDriver(port, servos, now=clock, reply_timeout_s=0.05) as drv:
        with pytest.raises(DeviceFaultError, match="XM430-W350"):
            drv.enable()


def test_driver_reports_overload_crc_errors_and_watchdog(bus):
    emu, plant, clock = bus
    with _driver(emu, clock, status_every=1) as drv:
        drv.enable()
        emu.inject_hardware_error(2, 0x20)                   # overload: shutdown by default
        clock.t += 0.002
        fb = drv.cycle(Command(np.zeros(3)))
        assert fb.fault[1] & 0x20 and fb.info["hardware_error"][1] == 0x20 and not fb.enabled[1]
        assert fb.fault[0] == 0 and fb.fault[2] == 0
        emu.corrupt_replies(1)
        clock.t += 0.002
        fb = drv.cycle(Command(np.zeros(3)))
        assert fb.info["corrupt"] >= 1 and not fb.fresh.all()
        clock.t += 0.5                                        # the host was silent for 500 ms
        fb = drv.cycle(Command(np.zeros(3)))
        assert fb.fault[0] & FAULT_WATCHDOG and fb.fault[2] & FAULT_WATCHDOG


def test_driver_port_disappears(bus):
    emu, _, clock = bus
    drv = _driver(emu, clock)
    drv.enable()
    emu.disconnect()
    with pytest.raises(CommsError):
        drv.cycle(Command(np.zeros(3)))
    with pytest.raises(CommsError):
        drv.close()
    drv.close()                                               # idempotent


# --- runs: tracking, and every protocol fault ends in the safe stop -------------------------------
def _run(fault=None, at_cycle=100):
    from controller.app.run import build_run, load_run

    spec = load_run(RUN)
    run = build_run(spec)
    emu = run.driver.hosts[0]
    inner_cycle = run.driver.cycle
    count = [0]

    def cycle(cmd):
        count[0] += 1
        if count[0] == at_cycle and fault is not None:
            fault(emu)
        return inner_cycle(cmd)

    run.driver.cycle = cycle
    try:
        return run.loop.run()
    finally:
        try:
            run.close()
        except CommsError:
            pass                  # closing a port that disappeared fails (Run.execute keeps the result too)


def test_run_config_tracks():
    res = _run()
    assert res.status == "completed", res.faults
    assert np.max(np.abs(res.metrics["max_abs_error"])) < 0.02


@pytest.mark.parametrize("fault,cause", [
    (lambda emu: emu.inject_hardware_error(2, 0x20), "device_fault"),        # overload
    (lambda emu: emu.set_temperature(3, 90.0), "device_fault"),             # overheating
    (lambda emu: emu.set_supply_voltage(17.0), "device_fault"),             # input voltage
    (lambda emu: emu.corrupt_replies(10), "stale_feedback"),                # CRC errors
    (lambda emu: emu.disconnect(), "comms"),                                 # the port disappears
])
def test_protocol_faults_end_in_safe_stop(fault, cause):
    res = _run(fault)
    assert res.status == "fault"
    assert res.faults[0].cause == cause, res.faults
    assert res.faults[0].t_s < 100 * 0.002 + 0.02


# --- bus budget -----------------------------------------------------------------------------------
def test_bus_budget_figures():
    assert dynamixel_cycle_bytes(1) == (14 + 3 + 14 + 1, 8 + 14)
    b = dynamixel_budget(3, 1000.0)
    assert b.wire_time_s == pytest.approx((40 + 50) * 10 / 4e6)
    assert (b.max_servos_ok, b.max_servos_fit) == (13, 20)      # XM430s at 1 kHz on 4 Mbit/s, Fast Sync Read
    s = dynamixel_budget(3, 1000.0, read_mode="sync")
    assert (s.max_servos_ok, s.max_servos_fit) == (10, 14)
    assert dynamixel_budget(3, 1000.0, return_delay_s=500e-6, read_mode="sync").verdict == "over"


# --- served inline: the same bytes, firmware and wire schedule without a pty or a thread -------------
def _mapping(m: str) -> JointMapping:
    return JointMapping(torque_constant_nm_per_a=dx.DXL_MODELS[m].torque_constant_nm_per_a)


def _emulator(model, clock, *, serve: str, baud: int = 1_000_000) -> DynamixelBusEmulator:
    plant = SimulatedPlant(model, q0=np.array([0.1, -0.2, 0.3]), t0_s=0.0)
    cfgs = [ServoConfig(i + 1, i, m, _mapping(m)) for i, m in enumerate(MODELS)]
    return DynamixelBusEmulator(cfgs, plant, clock, baudrate=baud, serve=serve)


def _session(model, serve: str, read_mode: str):
    """Enable, 40 cycles with status polls, a hardware error, a corrupted reply and a saturated
    command, then close: the traffic, the feedback and the plant's state."""
    clock = Clock()
    emu = _emulator(model, clock, serve=serve)
    try:
        port = (emu.inline_port(timeout_s=0.25, wire_time="count") if serve == "inline"
                else SerialTransport(emu.port_path, baudrate=emu.baudrate, timeout_s=0.25))
        rec = Recorder(port)
        servos = [DynamixelServo(i + 1, dx.DXL_MODELS[m], _mapping(m)) for i, m in enumerate(MODELS)]
        fbs = []
        with DynamixelDriver(rec, servos, now=clock, baudrate=emu.baudrate, reply_timeout_s=0.25,
                             read_mode=read_mode, status_every=5) as drv:
            fbs.append(drv.enable())
            for k in range(40):
                clock.t += 0.002
                if k == 10:
                    emu.inject_hardware_error(2, 0x20)
                if k == 20:
                    emu.corrupt_replies(1)
                tau = np.array([0.3 * np.sin(0.2 * k), -0.6, 100.0 if k == 30 else 0.1 * k])
                fbs.append(drv.cycle(Command(tau)))
        emu.sync()
        _, q, qd, tau = emu.plant.measure()
        return rec.log, fbs, (q, qd, tau, emu.plant.t_s)
    finally:
        emu.close()


def _same_feedback(a, b) -> None:
    for name in ("t_s", "position_rad", "velocity_rad_s", "torque_nm", "fault", "fresh", "enabled"):
        x, y = np.asarray(getattr(a, name)), np.asarray(getattr(b, name))
        assert x.shape == y.shape and np.array_equal(x, y, equal_nan=True), name
    assert {k: np.asarray(v).tolist() for k, v in a.info.items()} == \
        {k: np.asarray(v).tolist() for k, v in b.info.items()}


@pytest.mark.parametrize("read_mode", ["fast_sync", "sync"])
def test_inline_carries_the_pty_traffic_byte_for_byte(model, read_mode):
    log_t, fb_t, plant_t = _session(model, "thread", read_mode)
    log_i, fb_i, plant_i = _session(model, "inline", read_mode)
    assert [w for w in log_i if w[0] == "w"] == [w for w in log_t if w[0] == "w"]
    assert log_i == log_t
    assert len(fb_i) == len(fb_t) == 41
    for a, b in zip(fb_t, fb_i):
        _same_feedback(a, b)
    # the session saw what it meant to: the overload, the corrupted reply, the saturation
    assert any(fb.fault[1] & 0x20 for fb in fb_i)
    assert sum(fb.info["corrupt"] for fb in fb_i) >= 1 and sum(fb.info["saturated"] for fb in fb_i) >= 1
    for x, y in zip(plant_t, plant_i):
        assert np.array_equal(x, y)


def test_count_mode_checks_the_wire_time_against_the_deadline_without_waiting(model, monkeypatch):
    """At 57600 bit/s a Read of the present block and its 21-byte status take 6.1 ms on the
    wire, plus the Return Delay Time: a deadline shorter than that times out (the status arrives
    in the next read), a longer one gets it; no wall-clock time is spent on the wire (no sleep:
    a time measured around the calls would also count the machine's stalls)."""
    slept = []
    real_sleep = time.sleep
    monkeypatch.setattr(time, "sleep", lambda s: (slept.append(s), real_sleep(s))[1])
    clock = Clock()
    baud = 57600
    emu = _emulator(model, clock, serve="inline", baud=baud)
    with emu, emu.inline_port(timeout_s=1.0, wire_time="count") as port:
        emu.servo(1).write(dx.Addr.RETURN_DELAY_TIME, bytes((250,)))         # 500 us
        req = dx.encode_read(1, dx.PRESENT_BLOCK_ADDR, 10)
        wire = (len(req) + 21) * 10 / baud + 500e-6
        slept.clear()
        port.write(req)
        with pytest.raises(CommsTimeoutError):
            port.read(21, wire - 1e-4)
        assert dx.decode_packet(port.read(21, 2e-4)).id == 1                 # complete 0.1 ms later
        port.write(req)
        assert dx.decode_packet(port.read(21, wire + 1e-4)).id == 1
        assert slept == []                                                    # nothing was slept
        port.write(dx.encode_read(9, dx.PRESENT_BLOCK_ADDR, 10))              # nobody has ID 9
        with pytest.raises(CommsTimeoutError):
            port.read(21, 0.5)
        assert slept == []


def test_wait_mode_spends_the_wire_time(model):
    clock = Clock()
    baud = 57600
    emu = _emulator(model, clock, serve="inline", baud=baud)
    with emu, emu.inline_port(timeout_s=1.0, wire_time="wait") as port:
        req = dx.encode_read(1, dx.PRESENT_BLOCK_ADDR, 10)
        wire = (len(req) + 21) * 10 / baud                     # Return Delay Time 500 us (factory)
        t0 = time.perf_counter()
        port.write(req)
        try:
            first = port.read(21, wire / 2)
        except CommsTimeoutError:
            first = None                                       # the reply is still on the wire
        t_first = time.perf_counter() - t0
        if first is not None:
            # only a process held up past the reply's wire time (a loaded machine) may read it here
            assert t_first >= wire + 500e-6, t_first
        assert dx.decode_packet(port.read(21) if first is None else first).id == 1
        assert time.perf_counter() - t0 >= wire + 500e-6
        t0 = time.perf_counter()
        with pytest.raises(CommsTimeoutError):
            port.read(1, 0.02)                                 # nobody answers: the timeout is waited
        assert time.perf_counter() - t0 >= 0.02


def test_the_watchdog_runs_without_packets_and_after_the_adapter_is_gone(model):
    clock = Clock()
    emu = _emulator(model, clock, serve="inline")
    with emu, emu.inline_port(timeout_s=0.1, wire_time="count") as port:
        servos = [DynamixelServo(i + 1, dx.DXL_MODELS[m], _mapping(m)) for i, m in enumerate(MODELS)]
        drv = DynamixelDriver(port, servos, now=clock, reply_timeout_s=0.1, owns_port=False)
        drv.enable()
        clock.t = 0.002
        fb = drv.cycle(Command(np.array([0.2, -0.5, 0.1])))
        assert fb.fresh.all()
        clock.t = 0.09
        emu.sync()                                             # no packet: the plant follows the clock
        assert emu.plant.t_s == pytest.approx(0.09) and np.all(emu.plant.applied_torque_nm != 0)
        clock.t = 0.103                                        # 101 ms after the last packet
        emu.sync()
        assert np.all(emu.plant.applied_torque_nm == 0) and emu.servo(1).get(dx.Addr.BUS_WATCHDOG) == -1
        emu.disconnect()
        with pytest.raises(CommsError, match="disappeared"):
            drv.cycle(Command(np.zeros(3)))
        with pytest.raises(CommsError):
            drv.close()
        emu.advance_to(0.2)                                    # the servos still run without the adapter
        assert emu.plant.t_s == pytest.approx(0.2)


def test_an_error_in_the_serving_is_kept_for_check(model):
    """As an error stops the emulator's thread, it stops the inline serving: the driver's reads
    time out, ``check()`` raises it, later packets go unanswered."""
    clock = Clock()
    emu = _emulator(model, clock, serve="inline")
    with emu, emu.inline_port(timeout_s=0.01, wire_time="count") as port:
        def broken(pkt, t_s):
            raise RuntimeError("firmware bug")

        emu.servo(1).execute = broken
        port.write(dx.encode_ping(1))
        with pytest.raises(CommsTimeoutError):
            port.read(14)
        with pytest.raises(CommsError, match="firmware bug"):
            emu.check()
        port.write(dx.encode_ping(2))                          # no longer served
        with pytest.raises(CommsTimeoutError):
            port.read(14)


def test_inline_port_needs_an_inline_emulator_and_a_known_wire_mode(model):
    clock = Clock()
    with _emulator(model, clock, serve="thread") as emu:
        with pytest.raises(DriverError, match="port_path"):
            emu.inline_port()
    with _emulator(model, clock, serve="inline") as emu:
        assert emu.port_path is None
        with pytest.raises(ConfigError):
            InlineDynamixelPort(emu, wire_time="sleep")
    with pytest.raises(ConfigError):
        _emulator(model, clock, serve="process")


def _sim_section(emulator: dict) -> Section:
    return Section({"type": "sim_dynamixel", "port": "/dev/null", "joints": [{"id": 1, "model": "XM430-W350"}],
                    "plant": {}, "emulator": emulator}, None, "driver")


def test_config_wire_time_needs_inline():
    from drivers.registry import build_driver
    from dynamics.toy_models import Pendulum

    with pytest.raises(ConfigError, match="wire_time"):
        build_driver(_sim_section({"serve": "thread", "wire_time": "count"}), now=lambda: 0.0,
                     model=Pendulum(), rng=None)
    drv = build_driver(_sim_section({"serve": "inline"}), now=lambda: 0.0, model=Pendulum(), rng=None)
    try:
        port = drv.inner.transports[0]
        assert isinstance(port, InlineDynamixelPort) and port.wire_time == "wait"   # the safe default
    finally:
        drv.close()


def test_lockstep_runs_serve_inline_and_count_the_wire():
    from controller.app.run import sim_driver_section

    base = {"type": "sim_dynamixel", "joints": [{"id": 1, "model": "XM430-W350"}]}
    emu = sim_driver_section(base, q0=[0.0], clock="lockstep", period_s=0.002).data["emulator"]
    assert emu == {"serve": "inline", "wire_time": "count"}
    emu = sim_driver_section(base | {"emulator": {"serve": "thread"}}, q0=[0.0], clock="lockstep",
                             period_s=0.002).data["emulator"]
    assert emu == {"serve": "thread"}
    emu = sim_driver_section(base | {"emulator": {"serve": "inline", "wire_time": "wait"}}, q0=[0.0],
                             clock="lockstep", period_s=0.002).data["emulator"]
    assert emu == {"serve": "inline", "wire_time": "wait"}
    assert "emulator" not in sim_driver_section(base, q0=[0.0], clock="wall", period_s=0.002).data


def _run_log(tmp_path, name: str, emulator: dict | None):
    from controller.app.run import build_run, load_run

    spec = load_run(RUN, overrides={f"driver.emulator.{k}": v for k, v in (emulator or {}).items()})
    run = build_run(spec, out_dir=tmp_path / name)
    host = run.driver.hosts[0]
    res = run.execute()
    assert res.status == "completed", res.faults
    return host.serve, np.load(tmp_path / name / "log.npy")


def test_shipped_run_is_inline_and_logs_what_the_threaded_emulator_logs(tmp_path):
    serve_i, log_i = _run_log(tmp_path, "inline", None)
    serve_t, log_t = _run_log(tmp_path, "thread", {"serve": "thread"})
    assert (serve_i, serve_t) == ("inline", "thread")
    assert log_i.dtype == log_t.dtype and log_i.shape == log_t.shape
    wall = {"compute_s"}                            # the computation's wall time, logged per cycle
    for f in log_i.dtype.names:
        if f not in wall:
            assert np.array_equal(log_i[f], log_t[f], equal_nan=True), f
