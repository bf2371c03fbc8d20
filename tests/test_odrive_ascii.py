"""The emulated ODrive on the ASCII protocol (drivers/sim/odrive_ascii_emulator.py) against the
firmware's source, our OdriveAsciiDriver against it, and the faults the driver must survive.

The expected replies are the firmware's, read from its source at tag ``fw-v0.5.6`` of the
vendor's repository (read, not copied; line numbers of that tag):

* ``Firmware/communication/ascii_protocol.cpp``: ``respond`` (l. 44-66: ``snprintf`` into a
  64-byte buffer, then ``"*%u\\r\\n"`` with the XOR of the reply when the request had a checksum,
  else ``"\\r\\n"``); ``process_line`` (l. 72-127: ``;`` comment, ``*`` checksum checked with
  ``%u``, a mismatch dropped silently, the switch on the first byte, ``unknown command``);
  ``cmd_set_torque`` (l. 207-221: ``"c %u %f"``, ``invalid command format``, ``invalid motor
  %u``, feeds the watchdog); ``cmd_get_feedback`` (l. 275-288: ``"%f %f"``); ``cmd_help``
  (l. 294-311); ``cmd_info_dump`` (l. 317-324); ``cmd_system_ctrl`` (l. 330-339);
  ``cmd_read_property`` (l. 345-361: a 10-byte value buffer, ``invalid property``);
  ``cmd_write_property`` (l. 367-385: no answer on success, ``not implemented``);
  ``cmd_encoder`` (l. 227-247: ``esl``, ``encoder set to %u``); ``on_read_finished``
  (l. 412-449: ``\\r``, ``\\n`` and ``!`` end a line, an empty line is processed, a full
  256-byte buffer is reset and the rest of its line ignored);
* ``Firmware/fibre-cpp/protocol.hpp`` l. 183-233 (``to_string``: ``%f`` for floats, ``%u``/``%d``
  for integers, ``1``/``0`` for bools; ``from_string`` with ``sscanf``);
  ``include/fibre/introspection.hpp`` l. 157-210 (a read-only property has no ``set_string``:
  ``not implemented``);
* ``Firmware/MotorControl/axis.cpp`` l. 166-182 (the watchdog counts control ticks, sets
  ``WATCHDOG_TIMER_EXPIRED``), l. 455-601 (the state machine: a request clears
  ``INVALID_STATE``, closed loop feeds the watchdog, an invalid state sets ``INVALID_STATE``);
  ``main.cpp`` l. 236-249 (``clear_errors``), l. 410-421 (the checks disarm the motor);
  ``controller.cpp`` l. 137-141 and 388-405 (``limitVel``, then the torque limit).
"""

from __future__ import annotations

import math
import os

import numpy as np
import pytest

from drivers.base import Command, JointMapping
from drivers.odrive import OdriveAsciiDriver
from drivers.serial_port import SerialTransport
from drivers.sim.odrive_ascii_emulator import (INVALID_STATE, WATCHDOG_TIMER_EXPIRED, OdriveAsciiAxisConfig,
                                               OdriveAsciiEmulator, respond_bytes, scanf)
from drivers.sim.plant import SimulatedPlant
from dynamics import load_model
from dynamics.errors import CommsError

ROBOT = os.path.join(os.path.dirname(__file__), "..", "hil_configs", "robots", "seed003_2r.toml")
MAPS = [JointMapping(gear_ratio=20.0, torque_constant_nm_per_a=0.083),
        JointMapping(gear_ratio=10.0, sign=-1, offset_rad=0.1, torque_constant_nm_per_a=0.083, efficiency=0.9)]


class Clock:
    def __init__(self):
        self.t = 0.0

    def now(self) -> float:
        return self.t


def make(serve="inline", watchdog_s=0.1, baudrate=921600):
    clk = Clock()
    plant = SimulatedPlant(load_model(ROBOT), q0=np.zeros(2), t0_s=0.0)
    emu = OdriveAsciiEmulator([OdriveAsciiAxisConfig(k, k, MAPS[k], watchdog_timeout_s=watchdog_s) for k in (0, 1)],
                              plant, clk.now, baudrate=baudrate, serve=serve)
    return clk, plant, emu


def ask(emu, clk, line: bytes) -> list[bytes]:
    return emu.process_line(line, clk.t)


@pytest.fixture
def rig():
    clk, plant, emu = make()
    yield clk, plant, emu
    emu.close()


# ---------------------------------------------------------------------------
# (a) the firmware's replies, byte for byte
# ---------------------------------------------------------------------------
def test_feedback_reply_and_checksums(rig):
    clk, plant, emu = rig
    assert ask(emu, clk, b"f 0") == [b"0.000000 0.000000\r\n"]
    # 'f'^' '^'0' = 118; the reply "0.000000 0.000000" XORs to 32
    assert ask(emu, clk, b"f 0*118") == [b"0.000000 0.000000*32\r\n"]
    assert ask(emu, clk, b"f 0*117") == []                  # a wrong checksum: dropped, no answer
    assert ask(emu, clk, b"f 0*x") == []                    # a checksum that is no number: dropped
    # '*' last: checksum_start == len, so no checksum at all (l. 99): "f 0*" is read as "f 0"
    assert ask(emu, clk, b"f 0*") == [b"0.000000 0.000000\r\n"]
    assert ask(emu, clk, b"f 0 ; a comment") == [b"0.000000 0.000000\r\n"]
    assert ask(emu, clk, b"r axis0.current_state*14") == [b"1*49\r\n"]


def test_errors_of_the_command_layer(rig):
    clk, plant, emu = rig
    # (line, the firmware's answer), in order (some lines change the state the next ones read)
    for line, want in [
        (b"x 0", [b"unknown command\r\n"]),
        (b"", [b"unknown command\r\n"]),  # an empty line is processed too
        (b"c 0", [b"invalid command format\r\n"]),
        (b"c 2 1.0", [b"invalid motor 2\r\n"]),
        (b"c -1 0", [b"invalid motor 4294967295\r\n"]),  # %u takes the sign, wraps
        (b"f", [b"invalid command format\r\n"]),
        (b"c 0 1.5", []),  # commands answer nothing
        (b"u 0", []),
        (b"e 0", [b"invalid command format\r\n"]),
        (b"esl 0 8192", [b"encoder set to 8192\r\n"]),
        (b"r axis0.encoder.pos_estimate", [b"1.000000\r\n"]),
        (b"esl 0 -1", [b"encoder set to 4294967295\r\n"]),
    ]:
        assert ask(emu, clk, line) == want, line


def test_properties_read_and_write(rig):
    clk, plant, emu = rig
    # (line, the firmware's answer), in order (some lines change the state the next ones read)
    for line, want in [
        (b"r axis0.current_state", [b"1\r\n"]),
        (b"r axis1.error", [b"0\r\n"]),
        (b"r axis0.motor.config.current_lim", [b"10.000000\r\n"]),
        (b"r axis0.config.enable_watchdog", [b"1\r\n"]),
        (b"r vbus_voltage", [b"24.000000\r\n"]),
        (b"r fw_version_minor", [b"5\r\n"]),
        (b"w axis0.motor.config.current_lim 100", []),
        (b"r axis0.motor.config.current_lim", [b"100.00000\r\n"]),  # 10-byte buffer: cut
        (b"r axis0.nonsense", [b"invalid property\r\n"]),
        (b"r axis0", [b"invalid property\r\n"]),
        (b"r axis2.error", [b"invalid property\r\n"]),
        (b"r", [b"invalid command format\r\n"]),
        (b"w axis0.current_state 8", [b"not implemented\r\n"]),  # read-only
        (b"w axis0.controller.input_torque abc", [b"not implemented\r\n"]),
        (b"w axis0.nonsense 1", [b"invalid property\r\n"]),
        (b"w axis0.requested_state 8", []),
        (b"r axis0.current_state", [b"8\r\n"]),
        (b"r axis0.requested_state", [b"0\r\n"]),  # consumed
        (b"r axis0.motor.is_armed", [b"1\r\n"]),
    ]:
        assert ask(emu, clk, line) == want, line


def test_help_info_and_reply_buffer(rig):
    clk, plant, emu = rig
    h = ask(emu, clk, b"h")
    assert len(h) == 15 and h[0] == b"Please see documentation for more details\r\n" and h[1] == b"\r\n"
    assert h[6] == b"Torque: c axis T\r\n" and h[-1] == b"Reboot: sr\r\n"
    assert ask(emu, clk, b"i") == [b"Hardware version: 3.6-56V\r\n", b"Firmware version: 0.5.6\r\n",
                                   b"Serial number: 2087377E3548\r\n"]
    # respond(): snprintf into 64 bytes keeps 63 and a NUL, and nothing is appended then
    assert respond_bytes("x" * 70, False) == b"x" * 63 + b"\0"
    assert respond_bytes("x" * 62, False) == b"x" * 62 + b"\r\0"
    assert respond_bytes("x" * 61, False) == b"x" * 61 + b"\r\n"
    assert respond_bytes("ab", True) == b"ab*3\r\n"


def test_scanf_as_c():
    assert scanf(b"c 0 1.5", "c %u %f") == (2, [0, 1.5])
    assert scanf(b"c0 -2e1", "c %u %f") == (2, [0, -20.0])
    assert scanf(b"c 0 x", "c %u %f") == (1, [0])
    assert scanf(b"c", "c %u %f") == (-1, [])
    assert scanf(b"w a.b", "w %255s %255s") == (1, [b"a.b"])
    assert scanf(b"c 0 1e39", "c %u %f")[1][1] == math.inf        # strtof: out of range -> inf
    assert scanf(b"l 0 0x10", "l %u %i") == (2, [0, 16])


def test_line_ends_and_overlong_lines(rig):
    clk, plant, emu = rig
    port = emu.inline_port(timeout_s=0.01, wire_time="count")
    port.write(b"f 0!f 1\r")
    assert port.read_line() == "0.000000 0.000000" and port.read_line() == "0.159155 -0.000000"
    port.write(b"f 0\r\n")                                 # the empty line between: unknown command
    assert port.read_line() == "0.000000 0.000000" and port.read_line() == "unknown command"
    port.write(b"f 0" + b" " * 300 + b"\nf 0\n")           # 256 bytes fill the buffer: that line is lost
    assert port.read_line() == "0.000000 0.000000"
    with pytest.raises(CommsError):
        port.read_line()


# ---------------------------------------------------------------------------
# the axes: states, torque, limits, the watchdog, errors
# ---------------------------------------------------------------------------
def test_torque_limits_and_states(rig):
    clk, plant, emu = rig
    ask(emu, clk, b"c 0 5")
    assert emu.applied_torque_nm(0) == 0.0                 # IDLE: no torque (input held)
    ask(emu, clk, b"w axis0.controller.config.vel_limit 1e30")
    ask(emu, clk, b"w axis0.requested_state 8")
    assert emu.axis_state(0) == 8
    assert emu.applied_torque_nm(0) == pytest.approx(10.0 * 0.083, rel=1e-6)   # current_lim x kt
    assert plant._tau_ff[0] == pytest.approx(10.0 * 0.083 * 20.0, rel=1e-6)
    ask(emu, clk, b"w axis0.motor.config.torque_lim 0.2")
    ask(emu, clk, b"c 0 -5")
    assert emu.applied_torque_nm(0) == pytest.approx(-0.2, rel=1e-6)
    # the torque-mode velocity limit of the firmware's default (2 turn/s) at rest: (2 - 0) / 6
    ask(emu, clk, b"w axis0.controller.config.vel_limit 2")
    ask(emu, clk, b"w axis0.motor.config.torque_lim 100")
    ask(emu, clk, b"c 0 5")
    assert emu.applied_torque_nm(0) == pytest.approx(2.0 / 6.0, rel=1e-6)
    ask(emu, clk, b"w axis0.requested_state 3")            # a calibration: not emulated, invalid state
    assert emu.axis_state(0) == 1 and emu.axis_error(0) == INVALID_STATE
    ask(emu, clk, b"w axis0.requested_state 8")            # a request clears INVALID_STATE first
    assert emu.axis_state(0) == 8 and emu.axis_error(0) == 0


def test_watchdog_stops_the_torque(rig):
    clk, plant, emu = rig
    ask(emu, clk, b"w axis0.controller.config.vel_limit 1e30")
    ask(emu, clk, b"w axis0.requested_state 8")
    for _ in range(30):                                    # fed every 10 ms: stays in closed loop
        clk.t += 0.01
        ask(emu, clk, b"c 0 0.5")
    assert emu.axis_state(0) == 8 and emu.applied_torque_nm(0) == pytest.approx(0.5)
    t_fed = clk.t
    clk.t += 0.1                                           # 800 ticks: the counter is at 0, not past
    emu.advance_to(clk.t)
    assert emu.axis_state(0) == 8
    clk.t = t_fed + 0.1 + 2 / 8000.0
    emu.advance_to(clk.t)
    assert emu.axis_state(0) == 1 and emu.axis_error(0) == WATCHDOG_TIMER_EXPIRED
    assert emu.applied_torque_nm(0) == 0.0 and plant._tau_ff[0] == 0.0
    assert ask(emu, clk, b"r axis0.error") == [b"2048\r\n"]
    ask(emu, clk, b"w axis0.requested_state 8")            # refused while the error is set
    assert emu.axis_state(0) == 1
    ask(emu, clk, b"sc")
    ask(emu, clk, b"w axis0.requested_state 8")            # entering closed loop feeds the watchdog
    assert emu.axis_state(0) == 8 and emu.axis_error(0) == 0


def test_save_and_reboot(rig):
    clk, plant, emu = rig
    ask(emu, clk, b"w axis0.motor.config.current_lim 20")
    ask(emu, clk, b"sr")
    assert ask(emu, clk, b"r axis0.motor.config.current_lim") == [b"10.000000\r\n"]
    ask(emu, clk, b"w axis0.motor.config.current_lim 20")
    ask(emu, clk, b"ss")
    ask(emu, clk, b"w axis0.requested_state 8")
    ask(emu, clk, b"sr")
    assert ask(emu, clk, b"r axis0.motor.config.current_lim") == [b"20.000000\r\n"]
    assert emu.axis_state(0) == 1


# ---------------------------------------------------------------------------
# our driver against it
# ---------------------------------------------------------------------------
def driver_on(emu, clk, port, status_every=5):
    lims = [{"current_limit_a": 40.0, "velocity_limit_rad_s": None, "torque_limit_nm": 2.0},
            {"current_limit_a": 15.0, "velocity_limit_rad_s": 3.0, "torque_limit_nm": None}]
    return OdriveAsciiDriver(port, [0, 1], MAPS, now=clk.now, reply_timeout_s=0.01, status_every=status_every,
                             error_property="error", limits=lims)


def enabled(emu, clk, status_every=5):
    """Our driver on an inline port (wire time counted), enabled."""
    drv = driver_on(emu, clk, emu.inline_port(timeout_s=0.01, wire_time="count"), status_every)
    drv.enable()
    return drv


def test_driver_bytes_and_feedback(rig):
    clk, plant, emu = rig
    port = emu.inline_port(timeout_s=0.01, wire_time="count")
    sent = []
    write = port.write
    port.write = lambda data: (sent.append(bytes(data)), write(data))[1]
    drv = driver_on(emu, clk, port)
    fb = drv.enable()
    assert fb.enabled.all() and fb.fresh.all()
    # every enable line after both axes' watchdog feeds; each write followed by a read of its
    # property (the firmware answers a write only to refuse it)
    feed = b"u 0\nu 1\n"
    checked = [(b"axis0.motor.config.current_lim", b"40"), (b"axis0.controller.config.vel_limit", b"3.402823e+38"),
               (b"axis0.controller.config.control_mode", b"1"), (b"axis0.controller.config.input_mode", b"1")]
    assert sent[:4 + len(checked)] == (
        [feed + b"r axis%d.%s\n" % (a, p) for a in (0, 1) for p in (b"current_state", b"error")]
        + [feed + b"w %s %s\nr %s\n" % (p, v, p) for p, v in checked])
    assert sent[8:10] == [b"c 0 0\n", feed + b"w axis0.requested_state 8\nr axis0.requested_state\n"]
    sent.clear()
    clk.t += 0.005
    fb = drv.cycle(Command(np.array([10.0, 1.8])))
    # 10 / 20 = 0.5 N m at the motor; 1.8 x -1 / (10 x 0.9) = -0.2 N m
    assert b"".join(sent) == (b"c 0 0.5\nf 0\nc 1 -0.2\nf 1\n"       # then the status poll (cycle 0 of 5)
                              b"r axis0.current_state\nr axis0.error\nr axis1.current_state\nr axis1.error\n")
    assert emu.applied_torque_nm(0) == pytest.approx(0.5) and emu.applied_torque_nm(1) == pytest.approx(-0.2)
    assert fb.fresh.all() and fb.info["timeouts"] == 0 and fb.info["corrupt"] == 0
    # the joint positions are the plant's through the firmware's float32 turns and "%f"
    q_motor = [float(x.decode()) for x in ask(emu, clk, b"f 1")[0].split()]
    assert fb.position_rad[1] == pytest.approx(-2 * math.pi * q_motor[0] / 10.0 + 0.1, abs=1e-6)
    drv.close()


def test_garbled_replies_never_taken(rig):
    clk, plant, emu = rig
    drv = enabled(emu, clk, status_every=0)
    clk.t += 0.005
    good = drv.cycle(Command(np.zeros(2)))
    for bad in (b"0.12\xff45 0.0\r\n", b"0.1 0.2 0.3\r\n", b"nan 0.0\r\n", b"unknown command\r\n"):
        emu.replace_replies([bad])
        clk.t += 0.005
        fb = drv.cycle(Command(np.array([4.0, 0.0])))
        assert not fb.fresh[0] and fb.fresh[1] and fb.info["corrupt"] == 1
        assert fb.position_rad[0] == good.position_rad[0]   # the last good value kept
        assert emu.applied_torque_nm(0) == pytest.approx(0.2)   # the command itself went through
        clk.t += 0.005
        good = drv.cycle(Command(np.zeros(2)))
        assert good.fresh.all() and good.info["corrupt"] == 0   # no stale line taken for the next one
    # a corrupted torque line (a wrong checksum) never reaches the motor
    assert ask(emu, clk, b"c 0 1.0*7") == [] and emu.applied_torque_nm(0) == 0.0
    emu.set_silent(True)
    clk.t += 0.005
    fb = drv.cycle(Command(np.zeros(2)))
    assert not fb.fresh.any() and fb.info["timeouts"] == 2
    drv.close()


def test_driver_sees_the_watchdog_trip(rig):
    clk, plant, emu = rig
    drv = enabled(emu, clk, status_every=1)
    for _ in range(10):
        clk.t += 0.005
        fb = drv.cycle(Command(np.array([4.0, 1.0])))
    assert fb.enabled.all() and not fb.fault.any()
    clk.t += 0.3                                           # the loop stalls: nothing fed
    emu.advance_to(clk.t)
    assert emu.applied_torque_nm(0) == 0.0 and emu.applied_torque_nm(1) == 0.0
    fb = drv.cycle(Command(np.array([4.0, 1.0])))
    assert not fb.enabled.any() and (fb.fault == WATCHDOG_TIMER_EXPIRED).all()
    assert emu.applied_torque_nm(0) == 0.0                  # torque lines after the trip do nothing
    drv.close()


def test_dead_port_raises(rig):
    clk, plant, emu = rig
    drv = enabled(emu, clk)
    emu.disconnect()
    clk.t += 0.005
    with pytest.raises(CommsError):
        drv.cycle(Command(np.zeros(2)))


def test_pty_thread_gives_the_inline_bytes_and_feedback():
    """The driver on the pseudo-terminal (a thread answering) and inline (counted wire): the
    same bytes each way and the same feedback, on a lock-step clock."""
    runs = []
    for serve in ("thread", "inline"):
        clk, plant, emu = make(serve=serve)
        try:
            port = (SerialTransport(emu.port_path, baudrate=921600, timeout_s=0.5) if serve == "thread"
                    else emu.inline_port(timeout_s=0.5, wire_time="count"))
            sent = []
            write = port.write
            port.write = lambda data, w=write: (sent.append(bytes(data)), w(data))[1]
            drv = driver_on(emu, clk, port)
            drv.reply_timeout_s = 0.5
            fbs = [drv.enable()]
            rng = np.random.default_rng(3)
            for _ in range(25):
                clk.t += 0.005
                fbs.append(drv.cycle(Command(rng.normal(0, 20, 2))))
            drv.close()
            runs.append((b"".join(sent), np.array([np.r_[f.position_rad, f.velocity_rad_s, f.fresh, f.fault]
                                                   for f in fbs])))
        finally:
            emu.close()
    assert runs[0][0] == runs[1][0]
    assert np.array_equal(runs[0][1], runs[1][1])
    with pytest.raises(CommsError):                        # the pty gone: the port fails
        clk, plant, emu = make(serve="thread")
        port = SerialTransport(emu.port_path, baudrate=921600, timeout_s=0.05)
        emu.disconnect()
        port.write_line("f 0")
        port.read_line(0.05)


def test_shipped_run_completes(tmp_path):
    from controller.app.run import build_run, load_run
    path = os.path.join(os.path.dirname(__file__), "..", "hil_configs", "runs", "seed003_2r_odrive_ascii.toml")
    spec = load_run(path, duration_s=1.0)
    res = build_run(spec, out_dir=tmp_path / "run").execute()
    assert res.status == "completed"
    log = np.load(tmp_path / "run" / "log.npy")
    assert log["fresh[q1]"].all() and log["fresh[q2]"].all() and not log["fault[q1]"].any()


def test_setpoint_commands_set_modes_and_values(rig):
    clk, plant, emu = rig
    assert ask(emu, clk, b"q 0 1.5 3 0.3") == []
    assert ask(emu, clk, b"r axis0.controller.config.control_mode") == [b"3\r\n"]
    assert ask(emu, clk, b"r axis0.controller.config.vel_limit") == [b"3.000000\r\n"]
    assert ask(emu, clk, b"r axis0.motor.config.torque_lim") == [b"0.300000\r\n"]
    assert ask(emu, clk, b"r axis0.controller.input_pos") == [b"1.500000\r\n"]
    assert ask(emu, clk, b"t 0 2") == []
    assert ask(emu, clk, b"r axis0.controller.config.input_mode") == [b"5\r\n"]
    assert ask(emu, clk, b"v 0 1 0.2") == []
    assert ask(emu, clk, b"r axis0.controller.config.control_mode") == [b"2\r\n"]
    assert ask(emu, clk, b"r axis0.controller.input_torque") == [b"0.200000\r\n"]
    ask(emu, clk, b"w axis0.requested_state 8")
    assert emu.applied_torque_nm(0) == 0.0                 # velocity control is not emulated: no torque
    assert ask(emu, clk, b"p 0 1 2 0.1") == []
    assert ask(emu, clk, b"r axis0.controller.input_vel") == [b"2.000000\r\n"]
    assert ask(emu, clk, b"c 0 0.25") == [] and emu.applied_torque_nm(0) == pytest.approx(0.25)
    assert ask(emu, clk, b"r axis0.controller.config.control_mode") == [b"1\r\n"]
    assert ask(emu, clk, b"r axis0.motor.current_control.Iq_setpoint") == [b"3.012048\r\n"]   # 0.25 / 0.083


def test_enable_clears_a_stale_watchdog_trip_only(rig):
    """The 0.5.6 watchdog counts in every state: an axis configured with it trips while idle
    before anyone feeds it.  enable() clears that trip; any other error refuses, named with the
    0.5 firmware's error names."""
    from dynamics.errors import DeviceFaultError
    clk, plant, emu = rig
    clk.t += 0.5
    emu.advance_to(clk.t)
    assert emu.axis_error(0) == WATCHDOG_TIMER_EXPIRED and emu.axis_error(1) == WATCHDOG_TIMER_EXPIRED
    port = emu.inline_port(timeout_s=0.01, wire_time="count")
    drv = driver_on(emu, clk, port)
    assert drv.enable().enabled.all()
    drv.disable()
    emu.inject_error(1, 0x40)                              # MOTOR_FAILED
    with pytest.raises(DeviceFaultError, match="axis 1: MOTOR_FAILED"):
        drv.enable()
    drv.close()


def test_enable_records_the_cleared_trip_in_the_run(tmp_path):
    """The stale trip enable clears is listed in the driver's enable_notes and in the run's
    messages (and so in meta.json), one line per axis."""
    from controller.app.run import build_run, load_run
    path = os.path.join(os.path.dirname(__file__), "..", "hil_configs", "runs", "seed003_2r_odrive_ascii.toml")
    run = build_run(load_run(path, duration_s=0.05), out_dir=tmp_path / "run")
    (emu,) = run.driver.emulators
    for k in (0, 1):                     # idle axes whose watchdog tripped before anyone fed it
        emu.inject_error(k, WATCHDOG_TIMER_EXPIRED)
    res = run.execute()
    assert res.status == "completed"
    notes = [m for m in res.messages if "WATCHDOG_TIMER_EXPIRED" in m]
    assert len(notes) == 2 and "axis 0" in notes[0] and "w axis0.error 0" in notes[0] and "axis 1" in notes[1]
    assert emu.axis_error(0) == 0 and emu.axis_error(1) == 0


class StalledHost:
    """The driver's port on a host that stalls ``stall_s`` of loop time before each write."""

    def __init__(self, port, clk, stall_s):
        self.port, self.clk, self.stall_s, self.url = port, clk, stall_s, port.url

    def write(self, data):
        self.clk.t += self.stall_s
        self.port.write(data)

    def write_line(self, text):
        self.clk.t += self.stall_s
        self.port.write_line(text)

    def __getattr__(self, name):
        return getattr(self.port, name)


def test_enable_feeds_the_watchdog_while_it_works(rig):
    """A 0.1 s watchdog and a host that stalls 20 ms before each write: enable takes far longer
    than the watchdog, which it feeds (``u``) with every line, so no axis trips (the old enable
    fed nothing until its requests: the idle axes tripped while it set them up, and the
    request to closed loop was refused)."""
    clk, plant, emu = rig
    port = StalledHost(emu.inline_port(timeout_s=0.01, wire_time="count"), clk, 0.02)
    drv = driver_on(emu, clk, port)
    fb = drv.enable()
    assert clk.t > 0.3                                      # enable took three watchdog periods
    assert fb.enabled.all() and not fb.fault.any() and drv.enable_notes == []
    assert emu.axis_error(0) == 0 and emu.axis_error(1) == 0
    drv.close()


@pytest.mark.parametrize("prop, answer", [
    ("requested_state", "not implemented"),             # as 0.5.1-0.5.3 answered it (their release notes)
    ("controller.config.input_mode", "invalid property"),  # a firmware without the property
])
def test_enable_checks_what_the_firmware_answers_its_writes(rig, monkeypatch, prop, answer):
    """The firmware answers a ``w`` only to refuse it: enable names the refused write (the old
    enable ignored the answer, which the next status read then took for its own)."""
    from drivers.sim import odrive_ascii_emulator as oae
    from dynamics.errors import DeviceFaultError
    props = dict(oae._AXIS_PROPS)
    if answer == "not implemented":
        props[prop] = (props[prop][0], False)               # read-only: no set_string
    else:
        del props[prop]
    monkeypatch.setattr(oae, "_AXIS_PROPS", props)
    clk, plant, emu = rig
    drv = driver_on(emu, clk, emu.inline_port(timeout_s=0.01, wire_time="count"))
    with pytest.raises(DeviceFaultError, match=f"refused 'w axis0.{prop} [0-9]+': '{answer}'"):
        drv.enable()
    assert emu.axis_state(0) == 1 and emu.axis_state(1) == 1
    drv.close()


def test_enable_refuses_a_status_property_the_firmware_does_not_have(rig):
    """error_property "active_errors" (0.6) on a 0.5.6 ODrive: the firmware answers ``invalid
    property``, which the old driver took for a garbled reply, never seeing an axis error."""
    from dynamics.errors import DriverError
    clk, plant, emu = rig
    port = emu.inline_port(timeout_s=0.01, wire_time="count")
    drv = OdriveAsciiDriver(port, [0, 1], MAPS, now=clk.now, reply_timeout_s=0.01, error_property="active_errors")
    with pytest.raises(DriverError, match="'r axis0.active_errors'.*'invalid property'.*error_property"):
        drv.enable()
    assert emu.axis_state(0) == 1
    drv.close()


class _ScriptedPort:
    """A serial port answering a fixed script of lines (what a noisy UART can deliver)."""

    def __init__(self, answers):
        self.answers, self.sent = list(answers), []

    def write(self, data):
        self.sent.append(data)

    def write_line(self, line):
        self.sent.append(line)

    def read_line(self, timeout_s):
        from dynamics.errors import CommsTimeoutError
        if not self.answers:
            raise CommsTimeoutError("no answer")
        return self.answers.pop(0)

    def reset_input(self):
        pass

    def close(self):
        pass


def test_a_refusal_text_in_a_cycles_status_poll_is_counted_not_fatal():
    """In a run, a status read answered ``invalid property`` is a garbled line (enable already
    proved the property exists): counted as corrupt, the poll goes on; at enable (no cycle
    statistics) the same answer is the wrong property for the firmware and refuses."""
    from dynamics.errors import DriverError
    port = _ScriptedPort(["invalid property", "0", "8", "0"])
    drv = OdriveAsciiDriver(port, [0, 1], MAPS, now=lambda: 0.0, error_property="error")
    stats = {"timeouts": 0, "corrupt": 0}
    drv._poll_status(stats)
    assert stats == {"timeouts": 0, "corrupt": 1}
    port.answers = ["invalid property"]
    with pytest.raises(DriverError, match="invalid property"):
        drv._poll_status(None)


def test_a_failed_enable_disables_the_axes_it_configured():
    """A write refused halfway through enable (after other axes' writes were taken): enable
    sends zero torque and IDLE to every axis before it raises."""
    from dynamics.errors import DeviceFaultError
    # status poll: state, error for both axes (idle, no error); then the checked writes' read-backs
    port = _ScriptedPort(["1", "0", "1", "0"] + ["0"] * 4 + ["not implemented", "0"])
    drv = OdriveAsciiDriver(port, [0, 1], MAPS, now=lambda: 0.0, error_property="error")
    with pytest.raises(DeviceFaultError, match="not implemented"):
        drv.enable()
    tail = [s for s in port.sent if isinstance(s, str)][-4:]
    assert tail == ["c 0 0", "w axis0.requested_state 1", "c 1 0", "w axis1.requested_state 1"], tail
