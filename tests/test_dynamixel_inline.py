"""Emulated Dynamixel servos served inline (no pseudo-terminal, no thread).

The inline port carries the same bytes as the pseudo-terminal (our driver's traffic and
feedback compared byte for byte and bit for bit with the threaded emulator), models the same
wire schedule (waited in wall-clock time, or counted against the read deadlines), and keeps the
emulator's behaviour: the bus watchdog without packets, the adapter disappearing, an error in
the serving kept for ``check()``; the shipped run serves inline on the lock-step clock and logs
what the threaded emulator logs.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from drivers.base import Command, JointMapping
from drivers.codecs import dynamixel as dx
from drivers.dynamixel import DynamixelDriver, DynamixelServo
from drivers.serial_port import SerialTransport
from drivers.sim.dynamixel_emulator import DynamixelBusEmulator, InlineDynamixelPort, ServoConfig
from drivers.sim.plant import SimulatedPlant
from dynamics import load_model
from dynamics.config import Section
from dynamics.errors import CommsError, CommsTimeoutError, ConfigError, DriverError

ROOT = Path(__file__).resolve().parents[1]
ROBOT = ROOT / "hil_configs" / "robots" / "dxl_3dof_arm.toml"
RUN = ROOT / "hil_configs" / "runs" / "dxl_3dof_arm.toml"
MODELS = ("XM430-W350", "XM540-W270", "XM430-W350")


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


@pytest.fixture(scope="module")
def model():
    return load_model(ROBOT)


def _mapping(m: str) -> JointMapping:
    return JointMapping(torque_constant_nm_per_a=dx.DXL_MODELS[m].torque_constant_nm_per_a)


def _emulator(model, clock, *, serve: str, baud: int = 1_000_000) -> DynamixelBusEmulator:
    plant = SimulatedPlant(model, q0=np.array([0.1, -0.2, 0.3]), t0_s=0.0)
    cfgs = [ServoConfig(i + 1, i, m, _mapping(m)) for i, m in enumerate(MODELS)]
    return DynamixelBusEmulator(cfgs, plant, clock, baudrate=baud, serve=serve)


class Recorder:
    """A port that records what the driver writes and reads through it."""

    def __init__(self, port):
        self.port = port
        self.url = port.url
        self.log: list = []

    def write(self, data):
        self.log.append(("w", bytes(data)))
        self.port.write(data)

    def read(self, n, timeout_s=None):
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


@pytest.mark.exclusive          # the threaded side answers against the driver's wall-clock deadline
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


def test_count_mode_checks_the_wire_time_against_the_deadline_without_waiting(model):
    """At 57600 bit/s a Read of the present block and its 21-byte status take 6.1 ms on the
    wire, plus the Return Delay Time: a deadline shorter than that times out (the status arrives
    in the next read), a longer one gets it; no wall-clock time is spent on the wire."""
    clock = Clock()
    baud = 57600
    emu = _emulator(model, clock, serve="inline", baud=baud)
    with emu, emu.inline_port(timeout_s=1.0, wire_time="count") as port:
        emu.servo(1).write(dx.Addr.RETURN_DELAY_TIME, bytes((250,)))         # 500 us
        req = dx.encode_read(1, dx.PRESENT_BLOCK_ADDR, 10)
        wire = (len(req) + 21) * 10 / baud + 500e-6
        t0 = time.perf_counter()
        port.write(req)
        with pytest.raises(CommsTimeoutError):
            port.read(21, wire - 1e-4)
        assert dx.decode_packet(port.read(21, 2e-4)).id == 1                 # complete 0.1 ms later
        port.write(req)
        assert dx.decode_packet(port.read(21, wire + 1e-4)).id == 1
        assert time.perf_counter() - t0 < wire                                # nothing was slept
        port.write(dx.encode_read(9, dx.PRESENT_BLOCK_ADDR, 10))              # nobody has ID 9
        t0 = time.perf_counter()
        with pytest.raises(CommsTimeoutError):
            port.read(21, 0.5)
        assert time.perf_counter() - t0 < 0.05


@pytest.mark.exclusive          # wall-clock timing
def test_wait_mode_spends_the_wire_time(model):
    clock = Clock()
    baud = 57600
    emu = _emulator(model, clock, serve="inline", baud=baud)
    with emu, emu.inline_port(timeout_s=1.0, wire_time="wait") as port:
        req = dx.encode_read(1, dx.PRESENT_BLOCK_ADDR, 10)
        wire = (len(req) + 21) * 10 / baud                     # Return Delay Time 500 us (factory)
        t0 = time.perf_counter()
        port.write(req)
        with pytest.raises(CommsTimeoutError):
            port.read(21, wire / 2)
        assert dx.decode_packet(port.read(21)).id == 1
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


@pytest.mark.exclusive          # the threaded run answers against the driver's wall-clock deadline
def test_shipped_run_is_inline_and_logs_what_the_threaded_emulator_logs(tmp_path):
    serve_i, log_i = _run_log(tmp_path, "inline", None)
    serve_t, log_t = _run_log(tmp_path, "thread", {"serve": "thread"})
    assert (serve_i, serve_t) == ("inline", "thread")
    assert log_i.dtype == log_t.dtype and log_i.shape == log_t.shape
    wall = {"compute_s"}                            # the computation's wall time, logged per cycle
    for f in log_i.dtype.names:
        if f not in wall:
            assert np.array_equal(log_i[f], log_t[f], equal_nan=True), f
