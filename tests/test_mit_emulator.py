"""The MIT emulator behaves like the firmware: clamps, ignores what it must, never stops serving."""

from __future__ import annotations

import can
import numpy as np
import pytest

from drivers.base import JointMapping
from drivers.codecs import mit as mitc
from drivers.sim.mit_emulator import MitEmulator, MitMotorConfig
from drivers.sim.mit_fuzz import fuzz_mit_emulator
from drivers.sim.plant import SimulatedPlant
from dynamics.toy_models import Pendulum


def test_fuzz_20000_random_frames():
    c = fuzz_mit_emulator(20_000, seed=11)
    assert c["frames"] == 20_000
    # the fuzz reached the interesting paths, not only rejections
    assert c["replies"] > 3000 and c["commands_applied"] > 1000


def _one(model="AK60-6", **kw):
    plant = SimulatedPlant(Pendulum(g=0.0, inertia_kgm2=0.01), q0=[0.0])
    emu = MitEmulator([MitMotorConfig(1, 0, model, JointMapping())], **kw)
    emu.bind(plant)
    return plant, emu


def _f(data, arb=1, **kw):
    return can.Message(arbitration_id=arb, data=data, is_extended_id=False, **kw)


def test_huge_and_extreme_commands_are_clamped_to_the_model():
    plant, emu = _one("AK60-6")
    L = mitc.MIT_MODELS["AK60-6"]
    emu.on_frame(_f(mitc.ENTER_MOTOR_MODE), 0.0)
    # the most a frame can say: every field at its top (torque 3 LSB below, not a special frame)
    top = bytes([0xFF] * 7 + [0xF9])
    assert mitc.classify_command(top) == "command"
    emu.on_frame(_f(top), 0.0)
    plant.advance_to(0.001)
    assert abs(plant.applied_torque_nm[0]) <= L.t_max_nm + 1e-9
    cmd = mitc.decode_command(top, L)
    assert cmd.v_rad_s == L.v_max_rad_s == 45.0


def test_frames_the_firmware_does_not_take_change_nothing():
    plant, emu = _one()
    emu.on_frame(_f(mitc.ENTER_MOTOR_MODE), 0.0)
    cmd = mitc.encode_command(0, 0, 0, 0, 5.0, mitc.MIT_MODELS["AK60-6"])
    for msg in (_f(cmd[:7]), _f(b""), _f(cmd, arb=2),
                can.Message(arbitration_id=1, data=cmd, is_extended_id=True),
                can.Message(arbitration_id=1, is_remote_frame=True, dlc=8, is_extended_id=False),
                can.Message(arbitration_id=1, data=cmd, is_error_frame=True, is_extended_id=False)):
        out = emu.on_frame(msg, 0.0) if emu.accepts(msg) else None
        assert not out
    assert emu.commands_received(1) == 0
    plant.advance_to(0.01)
    assert plant.applied_torque_nm[0] == 0.0


def test_no_watchdog_by_default_mini_cheetah_timeout_when_set():
    plant, emu = _one()
    L = mitc.MIT_MODELS["AK60-6"]
    emu.on_frame(_f(mitc.ENTER_MOTOR_MODE), 0.0)
    emu.on_frame(_f(mitc.encode_command(0, 0, 0, 0, 1.0, L, nearest=True)), 0.0)
    assert emu.next_timer_s() == np.inf                    # CubeMars: none documented
    plant.advance_to(1.0)
    assert plant.applied_torque_nm[0] == pytest.approx(1.0, abs=L.t_max_nm / 4095)
    plant, emu = _one(watchdog_timeout_s=0.05)
    emu.on_frame(_f(mitc.ENTER_MOTOR_MODE), 0.0)
    emu.on_frame(_f(mitc.encode_command(0, 0, 0, 0, 1.0, L)), 0.0)
    assert emu.next_timer_s() == pytest.approx(0.05)


def test_special_frames_answered_zero_moves_the_zero():
    plant, emu = _one()
    L = mitc.MIT_MODELS["AK60-6"]
    plant.advance_to(0.0)
    for special in (mitc.ENTER_MOTOR_MODE, mitc.SET_ZERO, mitc.EXIT_MOTOR_MODE):
        out = emu.on_frame(_f(special), 0.0)
        assert len(out) == 1 and mitc.decode_reply(bytes(out[0].data), L).motor_id == 1
    assert not emu.motor_mode(1)


def test_limp_and_frozen_device_faults():
    plant, emu = _one()
    L = mitc.MIT_MODELS["AK60-6"]
    emu.on_frame(_f(mitc.ENTER_MOTOR_MODE), 0.0)
    emu.schedule_device_fault(1, "limp", 0.01)
    emu.on_frame(_f(mitc.encode_command(0, 0, 0, 0, 2.0, L)), 0.005)
    assert emu.device_fault(1) is None
    plant.advance_to(0.01)
    emu.on_frame(_f(mitc.encode_command(0, 0, 0, 0, 2.0, L)), 0.01)
    assert emu.device_fault(1) == "limp" and emu.commands_received(1) == 2 and emu.commands_applied(1) == 1
    plant.advance_to(0.02)
    assert plant.applied_torque_nm[0] == 0.0
    emu.set_device_fault(1, "frozen")
    a = emu.on_frame(_f(mitc.encode_command(0, 0, 0, 0, 5.0, L)), 0.02)
    plant.advance_to(0.05)
    b = emu.on_frame(_f(mitc.encode_command(0, 0, 0, 0, -5.0, L)), 0.05)
    assert bytes(a[0].data) == bytes(b[0].data)
    with pytest.raises(Exception):
        emu.set_device_fault(1, "melted")
