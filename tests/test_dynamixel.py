"""Dynamixel driver and emulated servos on a pseudo-terminal.

The emulator is checked with the official ``dynamixel_sdk`` as an independent client (its
PortHandler opens the pty like a real U2D2, its PacketHandler / GroupSyncWrite / GroupSyncRead
talk to the emulated firmware); our driver runs against the same emulator, and the protocol
faults (hardware error, CRC errors, bus watchdog, the port disappearing) end in the safe stop.
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
from drivers.sim.dynamixel_emulator import DynamixelBusEmulator, ServoConfig
from drivers.sim.plant import SimulatedPlant
from dynamics import load_model
from dynamics.errors import CommsError, DeviceFaultError

try:
    from tests.serve_process import CpuWatch, interfered
except ImportError:  # pragma: no cover - rootdir not on sys.path
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
    return DynamixelDriver(port, servos, now=clock, baudrate=emu.baudrate, reply_timeout_s=0.05, **kw)


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
