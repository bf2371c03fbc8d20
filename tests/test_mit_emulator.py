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


def test_per_drive_codec_path_gives_the_plain_codecs_frames_and_commands():
    """The emulator's per-frame path (per-drive field encoders, the command decoded from one
    integer, the reply packed as one) against the plain codec: every reply byte for byte
    (``encode_reply`` of the measured joint) and every command held by the plant bit for bit
    (``decode_command_values`` mapped to the joint side), for both reply variants, a gear,
    sign, offset and efficiency, clamped fields, a moved zero, latched faults and device faults
    (the usual frame, a command to a healthy drive in motor mode, takes a shorter path than
    the others: the counters and the held command are checked on both)."""
    from dynamics.errors import DriverError
    from dynamics.toy_models import PlanarTwoLink

    plant = SimulatedPlant(PlanarTwoLink(), q0=[0.3, -0.5], current_lag_s=0.0004,
                           encoder_counts_per_rev=16384)
    maps = {1: JointMapping(sign=-1, gear_ratio=9.0, offset_rad=0.25, efficiency=0.9),
            7: JointMapping(gear_ratio=6.0)}
    motors = [MitMotorConfig(1, 0, "AK80-9", maps[1], "cubemars8", 41.6),
              MitMotorConfig(7, 1, "AK60-6", maps[7], "classic6")]
    emu = MitEmulator(motors, reply_id=0)
    emu.bind(plant)
    rng = np.random.default_rng(5)
    t = 0.0
    n_cmd = 0
    for k in range(3000):
        cfg = motors[int(rng.integers(2))]
        lim = mitc.MIT_MODELS[cfg.limits]
        u = rng.random()
        if u < 0.03:
            data = mitc.ENTER_MOTOR_MODE
        elif u < 0.04:
            data = mitc.EXIT_MOTOR_MODE
        elif u < 0.05:
            data = mitc.SET_ZERO
        elif u < 0.06:
            emu.inject_fault(cfg.can_id, int(rng.integers(1, 256)), temperature_c=float(rng.uniform(-20, 300)))
            data = mitc.EXIT_MOTOR_MODE if rng.random() < 0.5 else mitc.ENTER_MOTOR_MODE
        elif u < 0.07:
            emu.set_device_fault(cfg.can_id, [None, None, "limp", "frozen"][int(rng.integers(4))])
            data = bytes(rng.integers(0, 256, 8).tolist())
        elif u < 0.3:
            data = bytes(rng.integers(0, 256, 8).tolist())           # anything, extremes included
        else:
            data = mitc.encode_command(rng.normal(0, 3), rng.normal(0, 10), rng.uniform(0, 20), rng.uniform(0, 2),
                                       rng.normal(0, 8), lim)
        t += float(rng.uniform(0.0, 0.003))
        plant.advance_to(t)
        j = cfg.joint
        before = plant._cmd[:, j].copy()
        st = emu._state(cfg.can_id)
        applied = emu.commands_applied(cfg.can_id)
        received = emu.commands_received(cfg.can_id)
        is_cmd = mitc.classify_command(data) == "command"
        mode = emu.motor_mode(cfg.can_id)
        dev = emu.device_fault(cfg.can_id)
        last = st.last_reply
        out = emu.on_frame(_f(data, arb=cfg.can_id), t)
        assert emu.commands_received(cfg.can_id) == received + (is_cmd and mode)
        assert emu.commands_applied(cfg.can_id) == applied + (is_cmd and mode and dev is None)
        assert len(out) == 1 and out[0].arbitration_id == 0 and not out[0].is_extended_id
        if emu.commands_applied(cfg.can_id) > applied:
            n_cmd += 1
            s, g, off, eff = (float(cfg.mapping.sign), cfg.mapping.gear_ratio, cfg.mapping.offset_rad,
                              cfg.mapping.efficiency)
            p_m, v_m, kp_m, kd_m, t_m = mitc.decode_command_values(data, lim)
            want = [s * t_m * g * eff, kp_m * (g * g * eff), kd_m * (g * g * eff),
                    s * (p_m + st.zero_m) / g + off, s * v_m / g]
            assert plant._cmd[:, j].tolist() == want
        elif is_cmd and mode and dev == "limp":
            assert plant._cmd[:, j].tolist() == [0.0] * 5
        elif is_cmd:
            assert plant._cmd[:, j].tolist() == before.tolist()
        if dev == "frozen" and last is not None:
            assert bytes(out[0].data) == last
            continue
        q, qd, tau = plant.measure_joint(j)
        m = cfg.mapping
        p = float(m.sign) * (q - m.offset_rad) * m.gear_ratio - st.zero_m
        v = float(m.sign) * qd * m.gear_ratio
        tq = float(m.sign) * tau / (m.gear_ratio * m.efficiency)
        assert bytes(out[0].data) == mitc.encode_reply(cfg.can_id, p, v, tq, lim, variant=cfg.variant,
                                                       temperature_c=st.temperature_c, error=st.fault)
    assert n_cmd > 300
    # a temperature the plain encoder refuses is refused with the same error
    emu.inject_fault(1, 3, temperature_c=float("nan"))
    with pytest.raises(DriverError, match="refusing to encode non-finite temperature nan"):
        emu.on_frame(_f(mitc.SET_ZERO, arb=1), t)
