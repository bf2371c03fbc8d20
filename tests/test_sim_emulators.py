"""Device emulators at protocol level (frames built with the codecs, no driver)."""

from __future__ import annotations

import time
import uuid

import can
import numpy as np
import pytest

from dynamics.errors import CommsError, ConfigError
from drivers.base import JointMapping
from drivers.codecs import mit as mitc
from drivers.codecs import odrive as odc
from drivers.sim.emulators import EmulatorHost
from drivers.sim.mit_emulator import MitEmulator, MitMotorConfig
from drivers.sim.odrive_emulator import OdriveAxisConfig, OdriveEmulator
from drivers.sim.plant import SimulatedPlant
from dynamics.toy_models import PlanarTwoLink

LIM = mitc.MIT_MODELS["AK80-9"]
MAP1 = JointMapping(gear_ratio=6.0, sign=-1, offset_rad=0.2, efficiency=0.9)


class Clock:
    def __init__(self, t=0.0):
        self.t = t

    def __call__(self):
        return self.t


class NullBus:
    """Stand-in bus for single-threaded use of EmulatorHost.handle()."""

    def send(self, msg, timeout=None):
        raise AssertionError("not used")

    def recv(self, timeout=None):
        return None

    def shutdown(self):
        pass


def _frame(arb, data=b"", rtr=False):
    if rtr:
        return can.Message(arbitration_id=arb, is_remote_frame=True, dlc=8, is_extended_id=False)
    return can.Message(arbitration_id=arb, data=data, is_extended_id=False)


def _plant():
    return SimulatedPlant(PlanarTwoLink(), q0=[0.3, -0.4])


def _mit_setup(**kw):
    clock = Clock()
    plant = _plant()
    emu = MitEmulator([MitMotorConfig(1, 0, LIM, MAP1),
                       MitMotorConfig(2, 1, LIM, JointMapping(), variant="cubemars8")], **kw)
    host = EmulatorHost(NullBus(), [emu], plant, clock, start=False)
    return clock, plant, emu, host


# ---------------------------------------------------------------------------
# MIT
# ---------------------------------------------------------------------------
def test_mit_replies_to_every_frame_with_quantised_state():
    clock, plant, emu, host = _mit_setup()
    out = host.handle(_frame(1, mitc.ENTER_MOTOR_MODE))
    assert len(out) == 1 and out[0].arbitration_id == 0 and len(out[0].data) == 6
    r = mitc.decode_reply(out[0].data, LIM)
    assert r.motor_id == 1
    q_from_motor = MAP1.motor_to_joint_position(r.p_rad)
    assert q_from_motor == pytest.approx(0.3, abs=25.0 / 65535 / 6 + 1e-12)
    out = host.handle(_frame(2, mitc.ENTER_MOTOR_MODE))
    r2 = mitc.decode_reply(out[0].data, LIM)
    assert len(out[0].data) == 8 and r2.motor_id == 2 and r2.error == 0 and r2.temperature_c == 35
    assert emu.motor_mode(1) and emu.motor_mode(2)


def test_mit_commands_ignored_outside_motor_mode():
    clock, plant, emu, host = _mit_setup()
    clock.t = 0.01
    out = host.handle(_frame(1, mitc.encode_command(0, 0, 0, 0, 5.0, LIM)))
    assert len(out) == 1  # still answers
    assert emu.commands_applied(1) == 0
    clock.t = 0.02
    host.handle(None)
    np.testing.assert_array_equal(plant.applied_torque_nm, [0.0, 0.0])


def test_mit_torque_and_pd_map_to_joint_side():
    clock, plant, emu, host = _mit_setup()
    ref = _plant()
    host.handle(_frame(1, mitc.ENTER_MOTOR_MODE))
    host.handle(_frame(2, mitc.ENTER_MOTOR_MODE))
    rng = np.random.default_rng(1)
    g = MAP1.gear_ratio
    for k in range(1, 41):
        clock.t = k * 1e-3
        data1 = mitc.encode_command(rng.uniform(-1, 1), rng.uniform(-1, 1), 2.0, 0.05,
                                    rng.uniform(-1, 1), LIM)
        data2 = mitc.encode_command(0.0, 0.0, 0.0, 0.0, rng.uniform(-2, 2), LIM)
        host.handle(_frame(1, data1))
        host.handle(_frame(2, data2))
        ref.advance_to(clock.t)
        c1 = mitc.decode_command(data1, LIM)
        c2 = mitc.decode_command(data2, LIM)
        s = MAP1.sign
        ref.set_command([s * g * 0.9 * c1.t_nm, c2.t_nm],
                        kp=[c1.kp * g * g * 0.9, 0.0], kd=[c1.kd * g * g * 0.9, 0.0],
                        q_ref=[s * c1.p_rad / g + 0.2, 0.0], qd_ref=[s * c1.v_rad_s / g, 0.0])
    clock.t = 0.05
    host.handle(None)
    ref.advance_to(0.05)
    np.testing.assert_array_equal(plant.state.q, ref.state.q)
    assert emu.commands_applied(1) == 40 and emu.commands_applied(2) == 40


def test_mit_set_zero_moves_the_motor_zero():
    clock, plant, emu, host = _mit_setup()
    out = host.handle(_frame(2, mitc.SET_ZERO))
    assert mitc.decode_reply(out[0].data, LIM).p_rad == pytest.approx(0.0, abs=25.0 / 65535)
    host.handle(_frame(2, mitc.ENTER_MOTOR_MODE))
    # hold position 0 (= the zeroed pose) with a stiff PD: joint 1 stays near -0.4
    for k in range(1, 200):
        clock.t = k * 1e-3
        host.handle(_frame(2, mitc.encode_command(0.0, 0.0, 200.0, 2.0, 0.0, LIM)))
    assert plant.state.q[1] == pytest.approx(-0.4, abs=0.02)


def test_mit_watchdog_zeroes_torque_at_the_exact_time():
    clock, plant, emu, host = _mit_setup(watchdog_timeout_s=0.05)
    ref = _plant()
    host.handle(_frame(1, mitc.ENTER_MOTOR_MODE))
    clock.t = 0.01
    data = mitc.encode_command(0, 0, 0, 0, 1.0, LIM)
    host.handle(_frame(1, data))
    tau = MAP1.motor_to_joint_torque(mitc.decode_command(data, LIM).t_nm)
    clock.t = 0.2            # the loop went silent; the host only polls
    host.handle(None)
    ref.advance_to(0.01)
    ref.set_torque([tau, 0.0])
    ref.advance_to(0.06)
    ref.set_torque([0.0, 0.0])
    ref.advance_to(0.2)
    np.testing.assert_array_equal(plant.state.q, ref.state.q)
    assert emu.motor_mode(1)  # the watchdog zeroes the output, it does not leave motor mode


def test_mit_fault_injection_and_clear():
    clock, plant, emu, host = _mit_setup()
    host.handle(_frame(2, mitc.ENTER_MOTOR_MODE))
    clock.t = 0.01
    host.handle(_frame(2, mitc.encode_command(0, 0, 0, 0, 1.0, LIM)))
    emu.inject_fault(2, 1, temperature_c=95)
    clock.t = 0.02
    out = host.handle(_frame(2, mitc.encode_command(0, 0, 0, 0, 1.0, LIM)))
    r = mitc.decode_reply(out[0].data, LIM)
    assert r.error == 1 and r.temperature_c == 95
    assert not emu.motor_mode(2)
    assert emu.commands_applied(2) == 1
    clock.t = 0.03
    host.handle(None)
    assert plant.applied_torque_nm[1] == 0.0
    # entering motor mode is refused while the fault is latched
    host.handle(_frame(2, mitc.ENTER_MOTOR_MODE))
    assert not emu.motor_mode(2)
    out = host.handle(_frame(2, mitc.EXIT_MOTOR_MODE))
    assert mitc.decode_reply(out[0].data, LIM).error == 0
    host.handle(_frame(2, mitc.ENTER_MOTOR_MODE))
    assert emu.motor_mode(2)


def test_mit_silent_and_malformed_frames_do_nothing():
    clock, plant, emu, host = _mit_setup()
    host.handle(_frame(1, mitc.ENTER_MOTOR_MODE))
    clock.t = 0.01
    assert host.handle(_frame(1, mitc.encode_command(0, 0, 0, 0, 1.0, LIM)[:7])) == []
    emu.set_silent(1)
    assert host.handle(_frame(1, mitc.encode_command(0, 0, 0, 0, 1.0, LIM))) == []
    assert emu.commands_applied(1) == 0
    emu.set_silent(1, False)
    assert len(host.handle(_frame(1, mitc.encode_command(0, 0, 0, 0, 1.0, LIM)))) == 1
    assert emu.commands_applied(1) == 1
    assert host.handle(_frame(7, mitc.ENTER_MOTOR_MODE)) == []  # nobody has id 7


def test_mit_torque_limit_reaches_the_plant():
    clock, plant, emu, host = _mit_setup()
    np.testing.assert_allclose(plant.torque_limit_nm, [LIM.t_max_nm * 6 * 0.9, LIM.t_max_nm])


@pytest.mark.parametrize("motors,field", [
    ([MitMotorConfig(1, 0), MitMotorConfig(1, 1)], "motors[1].can_id"),
    ([MitMotorConfig(1, 0), MitMotorConfig(2, 0)], "motors[1].joint"),
    ([MitMotorConfig(300, 0)], "motors[0].can_id"),
    ([MitMotorConfig(1, 0, limits="AK99")], "motors[0].limits"),
    ([MitMotorConfig(1, 0, variant="x")], "motors[0].variant"),
])
def test_mit_config_errors(motors, field):
    with pytest.raises(ConfigError) as ei:
        MitEmulator(motors)
    assert ei.value.field == field


# ---------------------------------------------------------------------------
# ODrive
# ---------------------------------------------------------------------------
def _od_setup(**axis_kw):
    clock = Clock()
    plant = _plant()
    emu = OdriveEmulator([OdriveAxisConfig(3, 0, MAP1, **axis_kw),
                          OdriveAxisConfig(4, 1, heartbeat_period_s=None, encoder_period_s=None)])
    host = EmulatorHost(NullBus(), [emu], plant, clock, start=False)
    first = host.handle(None)  # cyclic messages start at t0 = 0
    assert [m.arbitration_id for m in first] == [
        odc.arbitration_id(3, c) for c in (odc.Cmd.HEARTBEAT, odc.Cmd.GET_ENCODER_ESTIMATES)
        if (c == odc.Cmd.HEARTBEAT and axis_kw.get("heartbeat_period_s", 0.1))
        or (c == odc.Cmd.GET_ENCODER_ESTIMATES and axis_kw.get("encoder_period_s", 0.01))]
    return clock, plant, emu, host


def _closed_loop(host, node):
    host.handle(_frame(odc.arbitration_id(node, odc.Cmd.SET_CONTROLLER_MODE),
                       odc.encode_set_controller_mode(odc.ControlMode.TORQUE_CONTROL,
                                                      odc.InputMode.PASSTHROUGH)))
    host.handle(_frame(odc.arbitration_id(node, odc.Cmd.SET_AXIS_STATE),
                       odc.encode_set_axis_state(odc.AxisState.CLOSED_LOOP_CONTROL)))


def _torque(host, node, t):
    return host.handle(_frame(odc.arbitration_id(node, odc.Cmd.SET_INPUT_TORQUE),
                              odc.encode_set_input_torque(t)))


def test_odrive_torque_only_in_closed_loop_torque_mode():
    clock, plant, emu, host = _od_setup()
    clock.t = 0.001
    _torque(host, 4, 1.0)
    assert emu.commands_applied(4) == 0 and emu.axis_state(4) == odc.AxisState.IDLE
    _closed_loop(host, 4)
    _torque(host, 4, 1.0)
    clock.t = 0.002
    _torque(host, 3, 1.0)  # axis 3 still idle
    host.handle(None)
    np.testing.assert_array_equal(plant.applied_torque_nm, [0.0, 1.0])
    _closed_loop(host, 3)
    _torque(host, 3, 1.0)
    clock.t = 0.003
    host.handle(None)
    np.testing.assert_allclose(plant.applied_torque_nm, [-6 * 0.9, 1.0])
    # velocity control mode: the emulator applies no torque (only torque mode is emulated)
    host.handle(_frame(odc.arbitration_id(4, odc.Cmd.SET_CONTROLLER_MODE),
                       odc.encode_set_controller_mode(odc.ControlMode.VELOCITY_CONTROL,
                                                      odc.InputMode.PASSTHROUGH)))
    clock.t = 0.004
    host.handle(None)
    assert plant.applied_torque_nm[1] == 0.0


def test_odrive_broadcasts_at_their_due_times_with_the_state_then():
    clock, plant, emu, host = _od_setup(heartbeat_period_s=0.1, encoder_period_s=0.05)
    ref = _plant()
    _closed_loop(host, 3)
    _torque(host, 3, 0.5)
    ref.set_torque([MAP1.motor_to_joint_torque(0.5), 0.0])
    clock.t = 0.33
    out = host.handle(None)
    kinds = [m.arbitration_id & 0x1F for m in out]
    assert kinds.count(odc.Cmd.HEARTBEAT) == 3
    assert kinds.count(odc.Cmd.GET_ENCODER_ESTIMATES) == 6
    enc = [odc.decode_encoder_estimates(m.data) for m in out
           if m.arbitration_id == odc.arbitration_id(3, odc.Cmd.GET_ENCODER_ESTIMATES)]
    for k, e in enumerate(enc, start=1):
        ref.advance_to(0.05 * k)
        q = ref.state.q[0]
        assert MAP1.motor_to_joint_position(2 * np.pi * e.pos_rev) == pytest.approx(q, abs=1e-6)
    hb = odc.decode_heartbeat(out[kinds.index(odc.Cmd.HEARTBEAT)].data)
    assert hb.axis_state == odc.AxisState.CLOSED_LOOP_CONTROL and hb.axis_error == 0


def test_odrive_rtr_answers():
    clock, plant, emu, host = _od_setup()
    for cmd in (odc.Cmd.HEARTBEAT, odc.Cmd.GET_ENCODER_ESTIMATES, odc.Cmd.GET_TORQUES,
                odc.Cmd.GET_ERROR, odc.Cmd.GET_BUS_VOLTAGE_CURRENT):
        out = host.handle(_frame(odc.arbitration_id(4, cmd), rtr=True))
        assert len(out) == 1 and out[0].arbitration_id == odc.arbitration_id(4, cmd)
    e = odc.decode_encoder_estimates(host.handle(
        _frame(odc.arbitration_id(4, odc.Cmd.GET_ENCODER_ESTIMATES), rtr=True))[0].data)
    assert e.pos_rev == pytest.approx(-0.4 / (2 * np.pi), rel=1e-6)


def test_odrive_watchdog_sets_error_and_idles_at_the_exact_time():
    clock, plant, emu, host = _od_setup(watchdog_timeout_s=0.02, heartbeat_period_s=None,
                                        encoder_period_s=None)
    ref = _plant()
    _closed_loop(host, 3)
    clock.t = 0.01
    _torque(host, 3, 0.5)
    clock.t = 0.1
    host.handle(None)
    assert emu.axis_state(3) == odc.AxisState.IDLE
    assert odc.axis_error_names(emu.axis_error(3)) == ["WATCHDOG_TIMER_EXPIRED"]
    ref.advance_to(0.01)
    ref.set_torque([MAP1.motor_to_joint_torque(0.5), 0.0])
    ref.advance_to(0.03)
    ref.set_torque([0.0, 0.0])
    ref.advance_to(0.1)
    np.testing.assert_array_equal(plant.state.q, ref.state.q)
    # closed loop is refused until the error is cleared
    _closed_loop(host, 3)
    assert emu.axis_state(3) == odc.AxisState.IDLE
    host.handle(_frame(odc.arbitration_id(3, odc.Cmd.CLEAR_ERRORS), odc.encode_clear_errors()))
    _closed_loop(host, 3)
    assert emu.axis_state(3) == odc.AxisState.CLOSED_LOOP_CONTROL and emu.axis_error(3) == 0


def test_odrive_injected_error_disarms_and_is_reported():
    clock, plant, emu, host = _od_setup()
    _closed_loop(host, 4)
    _torque(host, 4, 1.0)
    emu.inject_error(4, 0x2000)
    assert emu.axis_state(4) == odc.AxisState.IDLE
    hb = odc.decode_heartbeat(host.handle(
        _frame(odc.arbitration_id(4, odc.Cmd.HEARTBEAT), rtr=True))[0].data)
    assert hb.axis_error == 0x2000 and hb.axis_state == odc.AxisState.IDLE
    clock.t = 0.01
    host.handle(None)
    assert plant.applied_torque_nm[1] == 0.0


def test_odrive_malformed_and_silent():
    clock, plant, emu, host = _od_setup()
    _closed_loop(host, 4)
    assert host.handle(_frame(odc.arbitration_id(4, odc.Cmd.SET_INPUT_TORQUE), b"\x00\x00")) == []
    assert emu.commands_applied(4) == 0
    emu.set_silent(4)
    assert host.handle(_frame(odc.arbitration_id(4, odc.Cmd.HEARTBEAT), rtr=True)) == []
    _torque(host, 4, 1.0)
    assert emu.commands_applied(4) == 0


# ---------------------------------------------------------------------------
# threaded host on a virtual bus
# ---------------------------------------------------------------------------
def test_host_thread_serves_virtual_bus_with_latency_and_closes():
    ch = "t-" + uuid.uuid4().hex
    clock = Clock()
    plant = _plant()
    emu = MitEmulator([MitMotorConfig(1, 0, LIM)])
    host = EmulatorHost(can.Bus(interface="virtual", channel=ch), [emu], plant, clock,
                        reply_latency_s=0.004, own_bus=True)
    bus = can.Bus(interface="virtual", channel=ch)
    try:
        assert host.running
        t0 = time.monotonic()
        bus.send(_frame(1, mitc.ENTER_MOTOR_MODE))
        msg = bus.recv(1.0)
        dt = time.monotonic() - t0
        assert msg is not None and msg.data[0] == 1
        assert dt >= 0.004
    finally:
        host.close()
        host.close()
        bus.shutdown()
    assert not host.running


class _FailingBus(NullBus):
    def recv(self, timeout=None):
        raise can.CanOperationError("adapter unplugged")


def test_host_thread_error_is_reraised():
    host = EmulatorHost(_FailingBus(), [MitEmulator([MitMotorConfig(1, 0)])], _plant(), Clock())
    deadline = time.monotonic() + 2.0
    while host.running and time.monotonic() < deadline:
        time.sleep(0.001)
    with pytest.raises(CommsError, match="unplugged"):
        host.close()


def test_reply_message_is_the_keyword_construction():
    """emulators._msg builds its can.Message by position: every slot is the keyword
    construction's (a python-can whose signature changed fails here)."""
    from drivers.sim.emulators import _msg

    for arb, data in ((0, b"\x01\x02\x03\x04\x05\x06"), (0x7FF, bytes(8)), (5, b""), (0x123, bytearray(b"\xff" * 8))):
        got = _msg(arb, data)
        want = can.Message(arbitration_id=arb, data=data, is_extended_id=False)
        assert type(got) is can.Message
        assert {s: getattr(got, s) for s in can.Message.__slots__} == {s: getattr(want, s) for s in can.Message.__slots__}


def test_one_device_timers_as_with_the_scan_over_devices():
    """A host serving one device finds its timers without the scan over devices: the same
    frames, watchdog expiries and plant as a host that also serves a timer-less device.
    Parity test; the expiry times themselves are checked in
    ``test_mit_watchdog_zeroes_torque_at_the_exact_time``."""
    from drivers.sim.emulators import EmulatedDevice

    runs = []
    for extra in ([], [EmulatedDevice()]):
        clock, plant, emu, _ = _mit_setup(watchdog_timeout_s=0.004)
        host = EmulatorHost(NullBus(), [emu] + extra, plant, clock, start=False)
        rng = np.random.default_rng(2)
        out = []
        for k in range(400):
            clock.t += float(rng.choice([0.0005, 0.001, 0.0045, 0.01]))
            arb = int(rng.integers(1, 3))
            u = rng.random()
            data = (mitc.ENTER_MOTOR_MODE if u < 0.05 else
                    mitc.encode_command(0.1, 0.0, 5.0 * rng.random(), 0.1, rng.normal(0, 2), LIM))
            msg = None if u > 0.9 else _frame(arb, data)
            out += [(m.arbitration_id, bytes(m.data)) for m in host.handle(msg)]
            out.append((plant.t_s, plant.state.q.tolist(), plant.applied_torque_nm.tolist(), emu.commands_applied(1)))
        runs.append(out)
    assert runs[0] == runs[1]


class _UncachedOdrive(OdriveEmulator):
    """The reference: the axes' next timed event found by the scan at every call, and the
    changes not counted (the host asks at every frame and poll)."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.timer_epoch = None

    def _timers_changed(self):
        self._next_t = None

    def next_timer_s(self):
        self._next_t = None
        return super().next_timer_s()


class _Both:
    """Two emulators of one axis each, seen as one (the test's calls by node id)."""

    def __init__(self, devs):
        self._by = {n: d for d in devs for n in d.node_ids}

    def next_timer_s(self):
        return min(d.next_timer_s() for d in self._by.values())

    def __getattr__(self, name):
        return lambda node, *a: getattr(self._by[node], name)(node, *a)


def test_odrive_next_timer_kept_between_changes_equals_the_scan():
    """The kept next timed event of an ODrive emulator (asked at every send and empty receive of
    an inline host) is the scan's after every frame, timed event, injected error and reboot,
    and so is the host's (kept while no device counted a change): a host serving it gives the
    same frames, states and plant as one serving the scanning twin that counts nothing.  One
    device, and two (the host's scan over devices).  Parity test (kept against scanned); the
    due times themselves are checked against hand-set periods in
    ``test_odrive_broadcasts_at_their_due_times_with_the_state_then`` and
    ``test_odrive_watchdog_sets_error_and_idles_at_the_exact_time``."""
    runs = []
    for cls, split in ((OdriveEmulator, False), (_UncachedOdrive, False), (OdriveEmulator, True)):
        clock, plant = Clock(), _plant()
        cfgs = [OdriveAxisConfig(3, 0, MAP1, watchdog_timeout_s=0.004, encoder_period_s=0.003),
                OdriveAxisConfig(4, 1, heartbeat_period_s=0.007, encoder_period_s=None, watchdog_timeout_s=0.002)]
        devs = [cls(cfgs[:1]), cls(cfgs[1:])] if split else [cls(cfgs)]
        host = EmulatorHost(NullBus(), devs, plant, clock, start=False)
        assert host._counted is (cls is OdriveEmulator)
        emu = devs[0] if not split else _Both(devs)
        rng = np.random.default_rng(7)
        out = []
        for k in range(600):
            clock.t += float(rng.choice([0.0, 0.0005, 0.001, 0.0025, 0.006]))
            node = int(rng.choice([3, 4]))
            u = rng.random()
            if u < 0.1:
                out += [(m.arbitration_id, bytes(m.data)) for m in host.handle(_frame(
                    odc.arbitration_id(node, odc.Cmd.SET_CONTROLLER_MODE),
                    odc.encode_set_controller_mode(odc.ControlMode.TORQUE_CONTROL, odc.InputMode.PASSTHROUGH)))]
                msg = _frame(odc.arbitration_id(node, odc.Cmd.SET_AXIS_STATE),
                             odc.encode_set_axis_state(odc.AxisState.CLOSED_LOOP_CONTROL))
            elif u < 0.15:
                msg = _frame(odc.arbitration_id(node, odc.Cmd.CLEAR_ERRORS), odc.encode_clear_errors())
            elif u < 0.18:
                emu.inject_error(node)
                msg = None
            elif u < 0.2:
                emu.reboot(node)
                msg = None
            elif u < 0.3:
                msg = _frame(odc.arbitration_id(node, odc.Cmd.GET_ENCODER_ESTIMATES), rtr=True)
            elif u < 0.8:
                msg = _frame(odc.arbitration_id(node, odc.Cmd.SET_INPUT_TORQUE),
                             odc.encode_set_input_torque(float(rng.normal(0, 0.5))))
            else:
                msg = None
            out += [(m.arbitration_id, bytes(m.data)) for m in host.handle(msg)]
            kept = emu.next_timer_s()
            for d in devs:
                d._next_t = None
            assert emu.next_timer_s() == kept, k
            out.append((plant.t_s, plant.state.q.tolist(), plant.applied_torque_nm.tolist(),
                        emu.axis_state(3), emu.axis_state(4), emu.axis_error(3), emu.axis_error(4), kept))
        runs.append(out)
    assert runs[0] == runs[1] == runs[2]
    # the watchdogs fired on both axes at some point (the timers that a stale value would move)
    wd = odc.WATCHDOG_ERROR_BIT["0.6"]
    assert any(o[5] & wd and o[6] & wd for o in runs[0] if isinstance(o[0], float))


@pytest.mark.parametrize("mapping", [MAP1, JointMapping(), JointMapping(gear_ratio=628.3185307179587, sign=-1,
                                                                         offset_rad=-1.3)])
def test_odrive_estimates_are_the_joint_mappings_values(mapping):
    """The emulated estimates (the driver's feedback) are JointMapping's motor-side values of
    the plant's measurement, float32 as the firmware sends them, bit for bit."""
    clock, plant = Clock(), _plant()
    emu = OdriveEmulator([OdriveAxisConfig(3, 0, mapping, heartbeat_period_s=None, encoder_period_s=None)])
    host = EmulatorHost(NullBus(), [emu], plant, clock, start=False)
    rng = np.random.default_rng(3)
    values = np.concatenate([rng.normal(0, 5, 300), [0.0, -0.0, 1e-300, 1e30, -1e36]])
    for v in values:
        plant._q[0] = v
        plant._qd[0] = -3 * v
        out = host.handle(_frame(odc.arbitration_id(3, odc.Cmd.GET_ENCODER_ESTIMATES), rtr=True))
        f32 = float(np.finfo(np.float32).max)
        want = odc.encode_encoder_estimates(
            min(max(float(mapping.joint_to_motor_position(plant.measure()[1][0])) / (2 * np.pi)
                    + emu._axes[3].pos_offset_rev, -f32), f32),
            min(max(float(mapping.joint_to_motor_velocity(plant.measure()[2][0])) / (2 * np.pi), -f32), f32))
        assert bytes(out[0].data) == want


@pytest.mark.parametrize("firmware", ["0.6", "0.5"])
def test_odrive_on_frame_filters_what_accepts_refuses(firmware):
    """OdriveEmulator.on_frame_filters: the host calls on_frame without accepts(), so on_frame must
    return None and change nothing (the axes, the watchdog feed, the timers, the counters, the
    plant) for every frame accepts() refuses: extended and error frames, other nodes' ids."""
    import copy

    clock, plant = Clock(), _plant()
    emu = OdriveEmulator([OdriveAxisConfig(3, 0, MAP1, watchdog_timeout_s=0.004),
                          OdriveAxisConfig(4, 1, encoder_period_s=None)], firmware=firmware)
    EmulatorHost(NullBus(), [emu], plant, clock, start=False)
    assert emu.on_frame_filters
    rng = np.random.default_rng(9)
    refused = 0
    for k in range(400):
        arb = int(rng.choice([int(rng.integers(0, 0x800)), odc.arbitration_id(3, int(rng.integers(0, 32))),
                              odc.arbitration_id(int(rng.integers(5, 64)), odc.Cmd.SET_INPUT_TORQUE)]))
        ext = bool(rng.random() < 0.2)
        msg = can.Message(arbitration_id=arb | (0x10000 if ext and rng.random() < 0.5 else 0), is_extended_id=ext,
                          is_error_frame=bool(rng.random() < 0.1), is_remote_frame=bool(rng.random() < 0.3),
                          data=b"" if rng.random() < 0.3 else bytes(rng.integers(0, 256, 8, dtype=np.uint8)))
        if msg.is_remote_frame:
            msg.data = bytearray()
        if emu.accepts(msg):
            emu.on_frame(msg, 0.001 * k)        # an accepted frame changes what it changes
            continue
        before = (copy.deepcopy({n: {s: getattr(a, s) for s in a.__slots__ if s not in ("cfg", "K")}
                                 for n, a in emu._axes.items()}),
                  emu.timer_epoch, emu._next_t, emu.frames_ignored, plant._tau_ff.tolist())
        assert emu.on_frame(msg, 0.001 * k) is None
        after = ({n: {s: getattr(a, s) for s in a.__slots__ if s not in ("cfg", "K")} for n, a in emu._axes.items()},
                 emu.timer_epoch, emu._next_t, emu.frames_ignored, plant._tau_ff.tolist())
        assert after == before, msg
        refused += 1
    assert refused > 100


class _SentBus(NullBus):
    def __init__(self):
        self.sent = []

    def send(self, msg, timeout=None):
        self.sent.append(msg)


@pytest.mark.parametrize("late_s, tripped", [(0.04, False), (None, True), (5.0, True)])
def test_a_serving_thread_handles_a_frame_at_the_time_it_arrived(late_s, tripped, monkeypatch):
    """A serving thread the OS let wait (a loaded machine, the GIL) handles a frame queued on the
    bus at its arrival time (its timestamp), as firmware handles a frame when it comes: a drive
    fed in time keeps its watchdog.  No timestamp, or one older than ARRIVAL_LATE_MAX_S: now()."""
    from drivers.sim import emulators as em

    clock, plant = Clock(), _plant()
    emu = OdriveEmulator([OdriveAxisConfig(3, 0, MAP1, watchdog_timeout_s=0.03, heartbeat_period_s=None,
                                           encoder_period_s=None)])
    bus = _SentBus()
    host = EmulatorHost(bus, [emu], plant, clock, start=False, wall_rate=True)    # the test's clock stands for one
    wall = 1.0e9
    monkeypatch.setattr(em.time, "time", lambda: wall)     # the lateness exact, whatever the scheduling
    cl = _frame(odc.arbitration_id(3, odc.Cmd.SET_AXIS_STATE),
                odc.encode_set_axis_state(odc.AxisState.CLOSED_LOOP_CONTROL))
    clock.t = 0.03
    host._serve_frame(cl, bus)
    clock.t = 0.05
    host._serve_frame(_frame(odc.arbitration_id(3, odc.Cmd.SET_INPUT_TORQUE), odc.encode_set_input_torque(0.1)), bus)
    assert emu.axis_state(3) == odc.AxisState.CLOSED_LOOP_CONTROL and emu.axis_error(3) == 0
    feed = _frame(odc.arbitration_id(3, odc.Cmd.SET_INPUT_TORQUE), odc.encode_set_input_torque(0.2))
    feed.timestamp = 0.0 if late_s is None else wall - late_s
    clock.t = 0.1                       # the thread gets to the frame 40 ms after it came
    host._serve_frame(feed, bus)
    assert (emu.axis_error(3) != 0) == tripped
    assert plant.t_s <= 0.1
    if not tripped:
        assert plant.t_s < 0.065        # the plant was advanced to the arrival, then the command applied
        assert host._t_served == pytest.approx(0.06, abs=1e-6)
        clock.t = 0.2                   # nothing more came: the watchdog expires as it should
        host._serve_frame(None, bus)
        assert emu.axis_error(3) != 0
    assert em.ARRIVAL_LATE_MAX_S < 5.0


def test_inline_end_deliver_all_queues_what_deliver_queues():
    """``_InlineEnd.deliver_all`` of device frames: what ``deliver`` of each in turn queues for the
    driver (the same fields in the same order, each stamped in turn), nothing once the driver's end
    is shut down, and a closed device end raises as ``deliver`` does."""
    from drivers.sim.emulators import InlineBus

    pairs = [(0x29, bytes(range(8))), (0x2A, b"\x01\x02"), (0x49, b"")]
    got, want = InlineBus("all"), InlineBus("each")
    t0 = time.time()
    got.device_end.deliver_all(pairs)
    for arb, data in pairs:
        want.device_end.deliver(arb, data)
    a, b = list(got._rx), list(want._rx)
    assert [f[:2] + f[3:] for f in a] == [f[:2] + f[3:] for f in b] == [(arb, d, False, False, False, None)
                                                                         for arb, d in pairs]
    stamps = [f[2] for f in a]
    assert t0 <= stamps[0] <= stamps[1] <= stamps[2] <= time.time()
    got.shutdown()
    got.device_end.deliver_all(pairs)
    assert len(got._rx) == 3
    want.device_end.shutdown()
    with pytest.raises(can.CanOperationError):
        want.device_end.deliver_all(pairs)
    want.shutdown()


def test_a_starved_serving_thread_sends_no_burst_of_stale_broadcasts_and_never_goes_back(monkeypatch):
    """Frames handled at their arrival after a long stall of the serving thread: the broadcasts
    due before now() - STALE_BROADCAST_S are dropped (a real device's went into a queue nobody
    read), not sent as a burst ahead of the answers; no frame is handled before the plant's time;
    a clock that does not run at wall rate handles frames at now()."""
    from drivers.sim import emulators as em

    wall = [1.0e9]
    monkeypatch.setattr(em.time, "time", lambda: wall[0])
    clock, plant = Clock(), _plant()
    emu = OdriveEmulator([OdriveAxisConfig(3, 0, MAP1, heartbeat_period_s=None, encoder_period_s=0.001)])
    bus = _SentBus()
    host = EmulatorHost(bus, [emu], plant, clock, start=False, wall_rate=True)
    host._serve_frame(None, bus)
    n0 = len(bus.sent)
    # the thread stalls 300 ms while the driver sends a torque frame every 2 ms
    frames = []
    for k in range(150):
        f = _frame(odc.arbitration_id(3, odc.Cmd.SET_INPUT_TORQUE), odc.encode_set_input_torque(0.0))
        f.timestamp = wall[0] + 0.002 * k
        frames.append(f)
    clock.t = 0.3
    wall[0] += 0.3
    for f in frames:
        host._serve_frame(f, bus)
    enc = [m for m in bus.sent[n0:] if m.arbitration_id == odc.arbitration_id(3, odc.Cmd.GET_ENCODER_ESTIMATES)]
    assert len(enc) <= 1000 * em.STALE_BROADCAST_S + 5          # not the 300 due during the stall
    # a first frame late beyond the plant's start is handled at the plant's time, not before it
    clock2, plant2 = Clock(), _plant()
    host2 = EmulatorHost(_SentBus(), [OdriveEmulator([OdriveAxisConfig(3, 0, MAP1)])], plant2, clock2,
                         start=False, wall_rate=True)
    f = _frame(odc.arbitration_id(3, odc.Cmd.SET_INPUT_TORQUE), odc.encode_set_input_torque(0.0))
    f.timestamp = wall[0] - 0.3
    assert host2._arrival_t(f) == 0.0
    # a hand-driven clock (no wall rate): now()
    host3 = EmulatorHost(_SentBus(), [OdriveEmulator([OdriveAxisConfig(3, 0, MAP1)])], _plant(), Clock(0.5),
                         start=False)
    f.timestamp = wall[0] - 0.01
    assert host3._arrival_t(f) == 0.5
