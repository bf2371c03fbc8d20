"""The ODrive ASCII driver's per-cycle fast path against its reference path.

A cycle's requests are formatted as bytes directly (:meth:`OdriveAsciiDriver._request`, for a
command of finite float64 torques without gains) and the ``f`` answers read off the bytes
(:func:`drivers.odrive._pos_vel`); the reference is :meth:`OdriveAsciiDriver.make_commands` (taken
for any other command) and :func:`drivers.odrive._pos_vel_text` (the decoded line, as before).
Compared here: the bytes over random torques (clamped, saturated, tiny, huge, negative zero),
the readings over random and garbled lines, and whole seeded sessions against the emulated
ODrive with faults (garbled, corrupted and missing replies, a device error, bad commands): the
same bytes on the wire and the same feedback, cycle by cycle.
"""

from __future__ import annotations

import numpy as np
import pytest

import drivers.odrive as od
from drivers.base import Command
from dynamics.errors import DriverError
from tests.test_odrive_ascii import driver_on, make


def _reference_request(drv, command):
    return [line.encode("ascii") + ask for line, ask in zip(drv.make_commands(command), drv._ask_f)]


def _torques(rng, n):
    kind = rng.integers(0, 6)
    if kind == 0:
        return rng.normal(0.0, 1.0, n)
    if kind == 1:
        return rng.normal(0.0, 200.0, n)               # past the 2 N m clamp of axis 0
    if kind == 2:
        return rng.normal(0.0, 1.0, n) * 10.0 ** rng.integers(-30, 30, n)
    if kind == 3:
        return np.array([-0.0, 0.0][:n])
    if kind == 4:
        return np.round(rng.normal(0.0, 5.0, n), int(rng.integers(0, 8)))
    return rng.uniform(-40.0, 40.0, n)


def test_request_bytes_are_make_commands_bytes():
    clk, plant, emu = make()
    drv = driver_on(emu, clk, emu.inline_port(timeout_s=0.01, wire_time="count"))
    rng = np.random.default_rng(38)
    sat_seen = 0
    for _ in range(20000):
        tau = _torques(rng, 2)
        got = drv._request(Command(tau.copy()))
        sat = drv.last_saturated
        assert got == _reference_request(drv, Command(tau.copy())), tau
        assert sat == drv.last_saturated
        sat_seen += sat
    assert sat_seen > 1000                                # the clamp was exercised
    # anything but finite float64 torques of the right shape: the reference path, its errors
    for bad in (Command(np.array([np.nan, 0.0])), Command(np.array([0.0, np.inf])), Command(np.zeros(3)),
                Command(np.zeros(2), kp_nm_per_rad=np.ones(2))):
        with pytest.raises(DriverError):
            drv._request(bad)
    for other in (Command([0.25, -1.5]), Command(np.array([0.25, -1.5], dtype=np.float32)),
                  Command(np.array([0.25, -1.5]), kp_nm_per_rad=np.zeros(2), kd_nm_s_per_rad=np.zeros(2))):
        assert drv._request(other) == _reference_request(drv, other)
    drv.close()
    emu.close()


def test_a_torque_that_overflows_on_the_motor_side_is_refused_on_both_paths():
    """A finite joint torque that is not finite on the motor side (a gear ratio times efficiency
    below 1, no torque limit): "c <axis> inf" would be a full-current command; both paths raise
    and nothing is formatted."""
    from drivers.base import JointMapping
    from tests.test_odrive_ascii import OdriveAsciiDriver

    clk, plant, emu = make()
    maps = [JointMapping(gear_ratio=0.5, efficiency=0.9), JointMapping()]
    drv = OdriveAsciiDriver(emu.inline_port(timeout_s=0.01, wire_time="count"), [0, 1], maps, now=clk.now,
                            reply_timeout_s=0.01, error_property="error",
                            limits=[{"current_limit_a": 40.0, "velocity_limit_rad_s": None, "torque_limit_nm": None}] * 2)
    for tau in (np.array([1.0e308, 0.0]), np.array([-1.0e308, 0.0])):
        with pytest.raises(DriverError, match="motor side"):
            drv._request(Command(tau))
        with pytest.raises(DriverError, match="motor side"):
            drv.make_commands(Command(tau))
    assert drv._request(Command(np.array([1.0, 0.0])))[0].startswith(b"c 0 2.2222")
    drv.close()
    emu.close()


_ALPHABET = [b"0", b"1", b"7", b"9", b".", b"-", b"+", b"e", b"E", b"_", b"n", b"a", b"i", b"f", b" ", b" ",
             b"\t", b"\x0b", b"\x0c", b"\r", b"\x1c", b"\x1f", b"\x85", b"\xa0", b"\xff", b"x"]


def test_pos_vel_reads_as_the_text_reading():
    rng = np.random.default_rng(5)
    lines = [b"%f %f" % tuple(rng.normal(0.0, 10.0 ** rng.integers(-3, 6), 2)) for _ in range(3000)]
    lines += [b"".join(rng.choice(_ALPHABET, int(rng.integers(0, 14)))) for _ in range(30000)]
    lines += [b"1.0\x1c2.0", b"1.0 \x1c 2.0", b"\x1c1.0 2.0", b"1_0 2", b"nan 1", b"1 inf", b"1e999 0",
              b"0.5 0.25", b"\xa00.5 0.25", b"", b" ", b"1", b"1 2 3", b"invalid motor 3"]
    taken = 0
    for raw in lines:
        assert od._pos_vel(raw) == od._pos_vel_text(raw), raw
        taken += od._pos_vel(raw) is not None
    assert taken > 3000                                   # the well-formed ones, and a few others


def _session(seed: int, reference: bool, monkeypatch):
    """A seeded session against the emulated ODrive with faults; (bytes written per cycle,
    feedback per cycle)."""
    if reference:
        monkeypatch.setattr(od, "_pos_vel", od._pos_vel_text)
    clk, plant, emu = make()
    port = emu.inline_port(timeout_s=0.01, wire_time="count")
    sent: list[bytes] = []
    write = port.write
    port.write = lambda data: (sent.append(bytes(data)), write(data))[1]
    drv = driver_on(emu, clk, port, status_every=7)
    drv.enable()
    rng = np.random.default_rng(seed)
    out = []
    garbled = [b"0.12\xff45 0.0\r\n", b"0.1 0.2 0.3\r\n", b"nan 0.0\r\n", b"unknown command\r\n",
               b"1.0\x1c2.0\r\n", b"0.5 \x0b0.25\r\n", b"\r\n"]
    for k in range(300):
        clk.t += 0.005
        sent.clear()
        r = rng.random()
        if r < 0.05:
            emu.corrupt_replies(int(rng.integers(1, 3)))
        elif r < 0.10:
            emu.replace_replies([garbled[int(rng.integers(len(garbled)))]])
        elif r < 0.12:
            emu.set_silent(True)
        elif r < 0.13:
            emu.inject_error(int(rng.integers(0, 2)))
        tau = _torques(rng, 2) if rng.random() < 0.9 else np.array([np.nan, 1.0])
        cmd = Command(tau.tolist() if reference else tau)
        try:
            fb = drv.cycle(cmd)
        except DriverError as err:
            out.append(("refused", str(err), b"".join(sent)))
            continue
        finally:
            emu.set_silent(False)
        # enabled is the axes' last polled state, CLOSED_LOOP_CONTROL (8)
        assert fb.enabled.tolist() == [int(s) == 8 for s in fb.info["axis_state"]]
        out.append((b"".join(sent), fb.position_rad.tolist(), fb.velocity_rad_s.tolist(), fb.fresh.tolist(),
                    fb.fault.tolist(), fb.enabled.tolist(), {k: v.tolist() if hasattr(v, "tolist") else v
                                                            for k, v in fb.info.items()}, drv.last_saturated))
    drv.close()
    emu.close()
    return out


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_seeded_sessions_with_faults_match_the_reference_path(seed, monkeypatch):
    fast = _session(seed, False, monkeypatch)
    ref = _session(seed, True, monkeypatch)
    assert len(fast) == len(ref) == 300
    for k, (a, b) in enumerate(zip(fast, ref)):
        assert a == b, f"cycle {k}"
    # the faults happened: garbled and missing answers, refused commands, a device error
    assert sum(1 for x in fast if x[0] == "refused") > 5
    assert sum(x[6]["corrupt"] for x in fast if x[0] != "refused") > 5
    assert sum(x[6]["timeouts"] for x in fast if x[0] != "refused") > 2
    assert any(not all(x[5]) for x in fast if x[0] != "refused")      # an axis left closed loop
