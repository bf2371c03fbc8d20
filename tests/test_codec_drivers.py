"""MIT and ODrive drivers against tiny scripted responders (in-process fake buses and a virtual bus).

The full driver <-> emulator sessions with a simulated plant live in the sim tests; here the
responders are scripted in the test so that every reply is known exactly.
"""

import math
import os
import select
import struct
import threading
import time
import uuid
from collections import deque

import can
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from dynamics.config import Section
from dynamics.errors import CommsError, CommsTimeoutError, ConfigError, DeviceFaultError, DriverError
from drivers import busload
from drivers.base import Command, JointMapping
from drivers.codecs import mit as mc
from drivers.codecs import odrive as oc
from drivers.mit import MitCanDriver, MitJoint
from drivers.mit_health import FollowConfig
from drivers.odrive import OdriveAxis, OdriveCanDriver
from drivers.registry import DRIVER_TYPES, build_driver
from drivers.transport import CanTransport

LIM = mc.MIT_MODELS["AK80-9"]


class FakeBus:
    """A BusLike whose replies are produced synchronously by ``handler(msg) -> list[can.Message]``."""

    def __init__(self, handler):
        self.handler = handler
        self.inbox = deque()
        self.sent = []
        self.shut = 0
        self.fail_send = False

    def send(self, msg, timeout=None):
        if self.fail_send:
            raise can.CanOperationError("bus off")
        self.sent.append(msg)
        self.inbox.extend(self.handler(msg))

    def recv(self, timeout=None):
        return self.inbox.popleft() if self.inbox else None

    def shutdown(self):
        self.shut += 1


class MitMotors:
    """Scripted MIT drives: echo the commanded position/velocity, report torque = commanded torque."""

    def __init__(self, ids, variant="classic6", silent=(), corrupt=(), duplicate=(), error=0):
        self.state = {i: dict(p=0.0, v=0.0, t=0.0, mode=False) for i in ids}
        self.variant, self.silent, self.corrupt, self.duplicate, self.error = variant, set(silent), set(corrupt), set(duplicate), error
        self.log = []

    def __call__(self, msg):
        mid = msg.arbitration_id
        if mid not in self.state:
            return []
        st = self.state[mid]
        kind = mc.classify_command(bytes(msg.data))
        self.log.append((mid, kind))
        if kind == "enter":
            st["mode"] = True
        elif kind == "exit":
            st["mode"] = False
        elif kind == "command":
            cmd = mc.decode_command(bytes(msg.data), LIM)
            st.update(p=cmd.p_rad, v=cmd.v_rad_s, t=cmd.t_nm if st["mode"] else 0.0)
        if mid in self.silent:
            return []
        data = mc.encode_reply(mid, st["p"], st["v"], st["t"], LIM, variant=self.variant, temperature_c=35,
                               error=self.error)
        if mid in self.corrupt:
            data = data[:5]
        out = [can.Message(arbitration_id=0, data=data, is_extended_id=False)]
        if mid in self.duplicate:
            out.append(out[0])
        return out


def mit_driver(motors, n=3, mapping=None, two_buses=False, **kw):
    buses = [FakeBus(motors)]
    if two_buses:
        buses.append(FakeBus(motors))
    ts = [CanTransport.from_bus(b, name=f"fake{i}") for i, b in enumerate(buses)]
    joints = [MitJoint(ts[i % len(ts)] if two_buses else ts[0], i + 1, LIM,
                       mapping or JointMapping(), f"j{i}") for i in range(n)]
    clock = [0.0]
    kw.setdefault("reply_timeout_s", 0.005)
    drv = MitCanDriver(joints, now=lambda: clock[0], **kw)
    return drv, buses, clock


def test_mit_make_commands_never_sends_a_special_frame():
    """Every field at its maximum: a torque that would make the payload ENTER / EXIT / ZERO
    (0xFF x 7, then 0xFC..0xFE) is lowered by 3 LSB; 0xFF x 8 is an ordinary command (the
    firmware compares the last byte with the three special values only) and is sent as it is."""
    drv, buses, _ = mit_driver(MitMotors([1]), n=1)
    step = 2 * LIM.t_max_nm / 4095
    seen = set()
    for k in range(0, 9):
        t_field = 0xFFF - k
        tau = -LIM.t_max_nm + (t_field + 0.25) * step if k else 1e3      # truncation-safe inside the step
        cmd = Command(np.array([tau]), position_rad=np.array([LIM.p_max_rad]), velocity_rad_s=np.array([1e3]),
                      kp_nm_per_rad=np.array([1e4]), kd_nm_s_per_rad=np.array([1e4]))
        data = drv.make_commands(cmd)[0].data
        assert mc.classify_command(data) == "command"
        assert data[:7] == b"\xff" * 7
        want = t_field - 3 if 0xFFC <= t_field <= 0xFFE else t_field
        assert data[7] == want & 0xFF, (hex(t_field), data.hex())
        seen.add(data[7])
    assert {0xFF, 0xFB, 0xFA, 0xF9} <= seen and not seen & {0xFC, 0xFD, 0xFE}


def test_mit_make_commands_mapping_and_refusals():
    m = JointMapping(gear_ratio=2.0, sign=-1, offset_rad=0.5, efficiency=0.8)
    drv, buses, _ = mit_driver(MitMotors([1, 2]), n=2, mapping=m)
    cmd = Command(torque_nm=np.array([1.6, 0.0]), position_rad=np.array([1.5, 0.5]),
                  velocity_rad_s=np.array([1.0, 0.0]), kp_nm_per_rad=np.array([32.0, 0.0]),
                  kd_nm_s_per_rad=np.array([3.2, 0.0]))
    f = drv.make_commands(cmd)
    assert [x.arbitration_id for x in f] == [1, 2]
    dec = mc.decode_command(f[0].data, LIM)
    # p_m = -1*(1.5-0.5)*2 = -2; v_m = -2; t_m = -1.6/(2*0.8) = -1; kp_m = 32/(4*0.8) = 10; kd_m = 1
    q = (25 / 65535, 100 / 4095, 500 / 4095, 5 / 4095, 36 / 4095)
    for got, want, lsb in zip((dec.p_rad, dec.v_rad_s, dec.kp, dec.kd, dec.t_nm), (-2, -2, 10, 1, -1), q):
        assert abs(got - want) <= lsb
    assert buses[0].sent == []  # pure: nothing sent
    bad = [Command(np.array([math.nan, 0.0])), Command(np.zeros(3)),
           Command(np.zeros(2), kp_nm_per_rad=np.array([1.0, 0.0])),            # kp without position
           Command(np.zeros(2), position_rad=np.zeros(2), kp_nm_per_rad=np.array([-1.0, 0.0])),
           Command(np.zeros(2), position_rad=np.array([100.0, 0.0]), kp_nm_per_rad=np.array([1.0, 0.0])),
           Command(np.zeros(2), velocity_rad_s=np.array([0.0, math.inf]))]
    for c in bad:
        with pytest.raises(DriverError):
            drv.make_commands(c)
    # saturation is clamping, counted
    drv.make_commands(Command(np.array([1e3, -1e3])))
    assert drv.last_saturated == 2


@pytest.mark.parametrize("quantization", ["nearest", "truncate"])
@pytest.mark.parametrize("mapping", [JointMapping(), JointMapping(gear_ratio=9.0, sign=-1, offset_rad=0.3, efficiency=0.9),
                                     JointMapping(gear_ratio=1.0, sign=-1, efficiency=0.5)])
def test_mit_torque_only_commands_equal_the_general_path(monkeypatch, quantization, mapping):
    """A command with only torques is encoded by the compiled encoder in ``cycle`` (every other
    field fixed); the same command with zero gains and velocities takes the general path
    (``make_commands``): same frames, saturation count and errors. Parity test; the frames'
    independent check is ``test_mit_thirdparty.py::test_driver_cycle_frames_and_feedback_vs_tmotor_can_mit_mode``."""
    import drivers.mit as mit_module

    drv, buses, _ = mit_driver(MitMotors([1, 2, 3]), n=3, mapping=mapping, quantization=quantization)
    assert drv._torque_path
    used = []
    fast = mit_module._k.encode_torque
    monkeypatch.setattr(mit_module._k, "encode_torque", lambda *a: used.append(1) or fast(*a))
    drv.enable()
    rng = np.random.default_rng(21)
    tmax = LIM.t_max_nm * mapping.gear_ratio * mapping.efficiency
    step = 2 * tmax / 4095
    taus = [rng.uniform(-1.3, 1.3, 3) * tmax for _ in range(300)]
    taus += [(-tmax + step * rng.integers(0, 4096, 3) + d).astype(float) for d in (0.0, step / 2) for _ in range(200)]
    taus += [np.array([0.0, -0.0, tmax]), np.array([-tmax, 1e300, -1e300]), np.array([5e-324, -5e-324, 0.0])]
    taus += [[0.5, -0.25, 1], np.array([1, -2, 0])]            # a list, integers: converted, same frames
    zeros = np.zeros(3)
    for tau in taus:
        drv.cycle(Command(tau))
        sat_a = drv.last_saturated
        want = drv.make_commands(Command(tau, velocity_rad_s=zeros, kp_nm_per_rad=zeros, kd_nm_s_per_rad=zeros))
        assert [bytes(m.data) for m in buses[0].sent[-3:]] == [f.data for f in want]
        assert sat_a == drv.last_saturated and type(sat_a) is type(drv.last_saturated) is int
        assert [f.data for f in drv.make_commands(Command(tau))] == [f.data for f in want]
    assert len(used) == len(taus)
    n_sent = len(buses[0].sent)
    for bad in (np.array([1e308, 0.0, 0.0]), np.array([0.0, math.nan, 0.0]), np.zeros(2), ["a", 0.0, 0.0]):
        errors = []
        for cmd in (Command(bad), Command(bad, velocity_rad_s=zeros, kp_nm_per_rad=zeros, kd_nm_s_per_rad=zeros)):
            try:
                drv.cycle(cmd)
            except DriverError as err:
                errors.append(str(err))
        assert len(errors) in (0, 2) and len(set(errors)) <= 1, errors
        if errors:
            assert len(buses[0].sent) == n_sent        # nothing sent
        n_sent = len(buses[0].sent)


def _plain_feedback(drv, fresh):
    """The Feedback's vectors from the driver's state (drivers._mit_kernels' layouts), by numpy."""
    from drivers import _mit_kernels as mk
    S, I = drv._S, drv._I
    fault = np.where(I[mk.I_FAULT] != 0, I[mk.I_FAULT], I[mk.I_DETECTED])
    return (S[mk.S_Q].copy(), S[mk.S_QD].copy(), S[mk.S_TAU].copy(), fault, np.array(fresh, dtype=bool),
            np.array([drv._enabled] * len(fresh), dtype=bool), S[mk.S_TEMP].copy(), S[mk.S_RESID].copy())


@pytest.mark.parametrize("variant, kw, codes", [
    ("cubemars8", {"temperature_max_c": 34.0}, {3, 0x102}),          # the drive's error byte wins
    ("classic6", {"follow": FollowConfig(window_cycles=2, lag_s=0.0)}, {0, 0x100})])
def test_parity_mit_feedback_and_follow_values_equal_the_plain_construction(monkeypatch, variant, kw, codes):
    """Parity test (the compiled cycle against a numpy construction from the same kept state,
    not against an independent expectation). The independent checks of the same values:
    ``test_mit_thirdparty.py::test_driver_cycle_frames_and_feedback_vs_tmotor_can_mit_mode``
    (position, velocity, torque against tmotor-can-mit-mode's ``unpack_reply``),
    ``test_mit_missing_corrupt_duplicate_and_faults`` below (fresh, kept values, the drive's
    error byte), ``test_mit_faults.py::test_cubemars8_error_byte_and_temperature_reach_the_feedback``
    (temperature, detected fault codes), ``test_mit_faults.py::test_limp_motor_fault_after_window_cycles``
    (the follow rule's fault) and, in this test, the gear ratio and sign checked against the
    emulated motors' own state (below). The Feedback of every
    cycle (missing replies, error bytes, detected faults, disabled) is the driver's kept state,
    each Feedback has arrays of its own, and the follow check gets what decoding the sent
    frames gives, bit for bit (compiled encoder and Python path)."""
    from drivers import _mit_kernels as mk
    motors = MitMotors([1, 2, 3], variant=variant)
    drv, buses, clock = mit_driver(motors, mapping=JointMapping(gear_ratio=6.0, sign=-1, efficiency=0.9), **kw)
    checked = []
    sent_values = []
    step = drv._after_collect

    def spy(mode, a=0.0):
        if mode & mk.MODE_FOLLOW:
            frames = buses[0].sent[-3:]
            want = [mc.decode_command_values(bytes(m.data), LIM) for m in frames]
            got = drv._S[mk.S_CP:mk.S_CT + 1].T.tolist()
            sent_values.append([struct.pack("<5d", *c) for c in got] == [struct.pack("<5d", *c) for c in want])
        return step(mode, a)

    monkeypatch.setattr(drv, "_after_collect", spy)

    def check(fb):
        want = _plain_feedback(drv, fb.fresh.tolist())
        got = (fb.position_rad, fb.velocity_rad_s, fb.torque_nm, fb.fault, fb.fresh, fb.enabled,
               fb.info["temperature_c"], fb.info["torque_residual_nm"])
        for x, y in zip(got, want):
            assert x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes()
        assert fb.info["missing"] == int((~fb.fresh).sum())
        checked.append((tuple(fb.fault.tolist()), bool(fb.fresh.all()), bool(fb.enabled.all())))

    check(drv.enable())
    moved = 0
    rng = np.random.default_rng(4)
    for k in range(80):
        clock[0] += 1e-3
        motors.silent = {2} if k % 7 == 3 else {1, 2, 3} if k == 40 else set()
        motors.error = 3 if 20 <= k < 24 else 0
        tau = rng.uniform(-20, 20, 3)
        if k % 3:
            cmd = Command(tau)
        else:
            cmd = Command(tau, position_rad=rng.uniform(-1, 1, 3), velocity_rad_s=rng.uniform(-1, 1, 3),
                          kp_nm_per_rad=rng.uniform(0, 50, 3), kd_nm_s_per_rad=rng.uniform(0, 2, 3))
        fb = drv.cycle(cmd)
        check(fb)
        assert fb.fresh.tolist() == [j + 1 not in motors.silent for j in range(3)]
        # independent of the driver's state: each fresh joint's values are its motor's (the
        # scripted drive's own p, v, t on the motor side) through the mapping as documented,
        # q = sign p / gear, qd = sign v / gear, tau = sign t gear efficiency (sign -1, gear 6,
        # efficiency 0.9), within one reply LSB (16-bit position, 12-bit velocity and torque)
        for j in np.flatnonzero(fb.fresh):
            st_j = motors.state[j + 1]
            assert abs(fb.position_rad[j] - (-st_j["p"] / 6.0)) <= 2 * LIM.p_max_rad / 65535 / 6.0
            assert abs(fb.velocity_rad_s[j] - (-st_j["v"] / 6.0)) <= 2 * LIM.v_max_rad_s / 4095 / 6.0
            assert abs(fb.torque_nm[j] - (-st_j["t"] * 6.0 * 0.9)) <= 2 * LIM.t_max_nm / 4095 * 6.0 * 0.9
            moved += abs(st_j["p"]) > 0.1
        fb.fresh[:] = False                     # a caller writing into its Feedback changes no other one
        fb.fault[:] = 7
        fb.enabled[:] = False
    assert len(checked) == 81 and len(sent_values) == 80 and all(sent_values)
    assert moved > 20                     # the mapping check saw joints away from zero
    assert codes <= {f for fault, _, _ in checked for f in fault}
    assert {fresh for _, fresh, _ in checked} == {True, False}
    drv.disable()
    check(drv._feedback(drv._new_stats()))                        # disabled
    assert checked[-1][2] is False
    # every Feedback has arrays of its own
    drv, _, _ = mit_driver(MitMotors([1, 2, 3]), follow=FollowConfig(enabled=False))
    fbs = [drv.enable()] + [drv.cycle(Command(np.zeros(3))) for _ in range(3)]
    drv.disable()
    fbs.append(drv._feedback(drv._new_stats()))
    arrays = [a for fb in fbs for a in (fb.position_rad, fb.velocity_rad_s, fb.torque_nm, fb.fault, fb.fresh,
                                        fb.enabled, fb.info["temperature_c"], fb.info["torque_residual_nm"])]
    arrays += [drv._all_true, drv._all_false, drv._S, drv._I, drv._rx]
    assert not any(np.shares_memory(a, b) for i, a in enumerate(arrays) for b in arrays[i + 1:]
                   if a.base is None or b.base is None or a.base is not b.base)


def test_mit_session_enable_cycle_disable_close():
    motors = MitMotors([1, 2, 3], variant="cubemars8")
    drv, buses, clock = mit_driver(motors)
    with pytest.raises(DriverError):
        drv.cycle(Command.zero(3))
    fb = drv.enable()
    assert fb.fresh.all() and fb.enabled.all()
    assert [k for _, k in motors.log] == ["enter"] * 3
    clock[0] = 0.25
    fb = drv.cycle(Command(np.array([1.0, -2.0, 3.0]), position_rad=np.array([0.1, 0.2, 0.3]),
                           kp_nm_per_rad=np.zeros(3)))
    assert fb.t_s == 0.25 and fb.fresh.all() and fb.info["missing"] == 0
    np.testing.assert_allclose(fb.torque_nm, [1, -2, 3], atol=36 / 4095)
    np.testing.assert_allclose(fb.position_rad, [0.1, 0.2, 0.3], atol=25 / 65535)
    np.testing.assert_array_equal(fb.info["temperature_c"], [35, 35, 35])
    assert (fb.fault == 0).all()
    drv.close()
    kinds = [k for _, k in motors.log]
    assert kinds[-6:-3] == ["command"] * 3 and kinds[-3:] == ["exit"] * 3
    assert all(abs(mc.decode_command(m.data, LIM).t_nm) < 0.01 for m in buses[0].sent[-6:-3])
    assert buses[0].shut == 1
    drv.close()  # idempotent
    assert buses[0].shut == 1
    with pytest.raises(DriverError):
        drv.cycle(Command.zero(3))


def test_mit_missing_corrupt_duplicate_and_faults():
    motors = MitMotors([1, 2, 3], variant="cubemars8")
    drv, buses, _ = mit_driver(motors)
    drv.enable()
    fb1 = drv.cycle(Command(np.array([1.0, 1.0, 1.0])))
    motors.silent, motors.corrupt, motors.duplicate = {2}, {3}, {1}
    motors.error = 2
    fb2 = drv.cycle(Command(np.array([2.0, 2.0, 2.0])))
    assert fb2.fresh.tolist() == [True, False, False]
    assert fb2.info["missing"] == 2 and fb2.info["corrupt"] == 1 and fb2.info["duplicate"] == 1
    # last good values kept where stale
    assert fb2.torque_nm[1] == fb1.torque_nm[1] and fb2.torque_nm[2] == fb1.torque_nm[2]
    assert fb2.torque_nm[0] == pytest.approx(2.0, abs=0.01)
    assert fb2.fault.tolist() == [2, 0, 0]
    # a bus failure is the only thing that raises out of cycle
    buses[0].fail_send = True
    with pytest.raises(CommsError):
        drv.cycle(Command.zero(3))
    with pytest.raises(CommsError):
        drv.close()            # disable fails on the dead bus; transports still closed
    assert buses[0].shut == 1


def test_mit_enable_timeout_names_the_silent_motor():
    drv, buses, _ = mit_driver(MitMotors([1, 2, 3], silent={2}), enable_timeout_s=0.002)
    with pytest.raises(CommsTimeoutError, match="j1"):
        drv.enable()
    assert sum(1 for m in buses[0].sent if bytes(m.data) == mc.ENTER_MOTOR_MODE and m.arbitration_id == 2) == 3


def test_mit_two_buses_and_budget():
    motors = MitMotors([1, 2, 3, 4])
    drv, buses, _ = mit_driver(motors, n=4, two_buses=True)
    drv.enable()
    fb = drv.cycle(Command(np.array([0.5, 0.5, 0.5, 0.5])))
    assert fb.fresh.all()
    assert [m.arbitration_id for m in buses[0].sent[-2:]] == [1, 3]
    assert [m.arbitration_id for m in buses[1].sent[-2:]] == [2, 4]
    rep = busload.driver_budget(drv, 1000.0)
    assert rep.verdict == "ok" and len(rep.loads) == 2
    assert rep.loads[0].utilisation == pytest.approx(2 * (135 + 115) * 1e-3)
    drv.close()


@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.lists(st.tuples(st.integers(0, 0x7FF), st.binary(max_size=8), st.booleans()), max_size=12))
def test_mit_cycle_survives_arbitrary_frames(junk):
    """Whatever arrives on the bus, cycle() returns Feedback; only real replies make a joint fresh."""
    motors = MitMotors([1, 2, 3])
    drv, buses, _ = mit_driver(motors, reply_timeout_s=0.5)  # all replies are queued: no real wait
    drv.enable()
    real = motors.__call__

    def noisy(msg):
        out = [can.Message(arbitration_id=a, data=d, is_extended_id=False, is_error_frame=e) for a, d, e in junk]
        return out + real(msg)

    buses[0].handler = noisy
    fb = drv.cycle(Command(np.array([1.0, 1.0, 1.0])))
    assert fb.position_rad.shape == (3,)
    info = fb.info
    # a junk frame that happens to be a valid 6/8-byte reply for id 1..3 may be taken as the reply;
    # otherwise every junk frame (queued three times, once per command sent) is counted and ignored
    if not any(len(d) in (6, 8) and d[0] in (1, 2, 3) and not e for _, d, e in junk):
        assert fb.fresh.all()
        np.testing.assert_allclose(fb.torque_nm, 1.0, atol=0.01)
        assert info["corrupt"] + info["unexpected"] + info["error_frames"] == 3 * len(junk)
    drv.close()


def test_mit_over_virtual_bus_with_thread_responder():
    ch = f"tl-mit-{uuid.uuid4().hex}"
    motors = MitMotors([1, 2, 3])
    stop = threading.Event()
    dev = can.Bus(interface="virtual", channel=ch)

    def serve():
        while not stop.is_set():
            msg = dev.recv(0.01)
            if msg is not None:
                for r in motors(msg):
                    dev.send(r)

    th = threading.Thread(target=serve, daemon=True)
    th.start()
    try:
        t = CanTransport("virtual", ch)
        joints = [MitJoint(t, i + 1, LIM, name=f"j{i}") for i in range(3)]
        with MitCanDriver(joints, now=lambda: 0.0, reply_timeout_s=0.5) as drv:
            assert drv.enable().fresh.all()
            for k in range(20):
                tau = np.full(3, 0.1 * k)
                fb = drv.cycle(Command(tau))
                assert fb.fresh.all()
                np.testing.assert_allclose(fb.torque_nm, tau, atol=0.01)
        assert t.closed
    finally:
        stop.set()
        th.join()
        dev.shutdown()


class OdriveAxes:
    """Scripted ODrives: state machine, RTR answers, estimates = integral of nothing (fixed pos)."""

    def __init__(self, nodes, broadcast=True, refuse=(), silent=()):
        self.st = {n: dict(state=oc.AxisState.IDLE, err=0, torque=0.0, mode=None, pos=0.25 * n, vel=-1.0)
                   for n in nodes}
        self.broadcast, self.refuse, self.silent = broadcast, set(refuse), set(silent)
        self.kt = 0.1

    def _msg(self, node, cmd, data):
        return can.Message(arbitration_id=oc.arbitration_id(node, cmd), data=data, is_extended_id=False)

    def _hb(self, node):
        s = self.st[node]
        return self._msg(node, oc.Cmd.HEARTBEAT, oc.encode_heartbeat(s["err"], s["state"]))

    def _answer(self, node, cmd):
        s = self.st[node]
        if cmd == oc.Cmd.HEARTBEAT:
            return self._hb(node)
        if cmd == oc.Cmd.GET_ENCODER_ESTIMATES:
            return self._msg(node, cmd, oc.encode_encoder_estimates(s["pos"], s["vel"]))
        if cmd == oc.Cmd.GET_IQ:
            return self._msg(node, cmd, oc.encode_iq(s["torque"] / self.kt, s["torque"] / self.kt))
        if cmd == oc.Cmd.GET_VERSION:      # firmware 0.6.10 (the driver checks it at enable())
            return self._msg(node, cmd, oc.encode_version(oc.Version(2, 4, 4, 58, 0, 6, 10, 0)))
        raise AssertionError(cmd)

    def __call__(self, msg):
        node, cmd = oc.split_id(msg.arbitration_id)
        if node not in self.st or node in self.silent:
            return []
        s = self.st[node]
        if msg.is_remote_frame:
            return [self._answer(node, cmd)]
        data = bytes(msg.data)
        if cmd == oc.Cmd.SET_CONTROLLER_MODE:
            s["mode"] = oc.decode_set_controller_mode(data)
        elif cmd == oc.Cmd.SET_AXIS_STATE:
            req = oc.decode_set_axis_state(data)
            if req == oc.AxisState.CLOSED_LOOP_CONTROL and node in self.refuse:
                s["err"], s["state"] = 0x20, oc.AxisState.IDLE   # DRV_FAULT
            else:
                s["state"] = req
            return [self._hb(node)]
        elif cmd == oc.Cmd.SET_INPUT_TORQUE:
            s["torque"] = oc.decode_set_input_torque(data) if s["state"] == oc.AxisState.CLOSED_LOOP_CONTROL else 0.0
            if self.broadcast:
                return [self._answer(node, oc.Cmd.GET_ENCODER_ESTIMATES), self._answer(node, oc.Cmd.GET_IQ)]
        return []


def odrive_driver(axes_sim, nodes=(3, 5), mapping=None, **kw):
    bus = FakeBus(axes_sim)
    t = CanTransport.from_bus(bus, name="odrv")
    axes = [OdriveAxis(t, n, mapping or JointMapping(torque_constant_nm_per_a=0.1), f"a{n}") for n in nodes]
    return OdriveCanDriver(axes, now=lambda: 1.0, reply_timeout_s=0.005, enable_timeout_s=0.05, **kw), bus


@pytest.mark.parametrize("mode", ["broadcast", "rtr"])
def test_odrive_session(mode):
    sim = OdriveAxes([3, 5], broadcast=(mode == "broadcast"))
    m = JointMapping(gear_ratio=2.0, sign=-1, offset_rad=0.1, torque_constant_nm_per_a=0.1)
    drv, bus = odrive_driver(sim, mapping=m, feedback=mode)
    with pytest.raises(DriverError):
        drv.cycle(Command.zero(2))
    fb = drv.enable()
    assert fb.enabled.all() and fb.fresh.all()
    assert sim.st[3]["mode"] == oc.ControllerMode(oc.ControlMode.TORQUE_CONTROL, oc.InputMode.PASSTHROUGH)
    fb = drv.cycle(Command(np.array([0.4, -0.8])))
    # motor torque = sign * tau / gear = -0.2, 0.4
    assert sim.st[3]["torque"] == pytest.approx(-0.2) and sim.st[5]["torque"] == pytest.approx(0.4)
    assert fb.fresh.all() and (fb.fault == 0).all()
    # joint position = -2 pi pos_rev / 2 + 0.1
    np.testing.assert_allclose(fb.position_rad, [-math.pi * 0.75 + 0.1, -math.pi * 1.25 + 0.1], rtol=1e-6)
    np.testing.assert_allclose(fb.velocity_rad_s, [math.pi, math.pi], rtol=1e-6)
    np.testing.assert_allclose(fb.torque_nm, [0.4, -0.8], rtol=1e-5)
    with pytest.raises(DriverError):
        drv.cycle(Command(np.zeros(2), position_rad=np.zeros(2), kp_nm_per_rad=np.ones(2)))
    sim.silent = {5}
    fb = drv.cycle(Command(np.zeros(2)))
    assert fb.fresh.tolist() == [True, False] and fb.info["missing"] == 1
    sim.silent = set()
    drv.close()
    assert sim.st[3]["state"] == oc.AxisState.IDLE and sim.st[3]["torque"] == 0.0
    drv.close()
    assert bus.shut == 1


def test_odrive_enable_fault_and_timeout():
    drv, _ = odrive_driver(OdriveAxes([3, 5], refuse={5}))
    with pytest.raises(DeviceFaultError, match="DRV_FAULT"):
        drv.enable()
    drv2, _ = odrive_driver(OdriveAxes([3, 5], silent={3}))
    with pytest.raises(CommsTimeoutError, match="a3"):
        drv2.enable()


def _section(d, file="robot.toml"):
    return Section(d, file=file, path="driver")


def test_registry_builds_and_reports_config_errors():
    assert DRIVER_TYPES["mit_can"] == "drivers.mit:build"
    ch = f"tl-reg-{uuid.uuid4().hex}"
    cfg = {"type": "mit_can", "reply_timeout_s": 0.001,
           "bus": {"interface": "virtual", "channel": ch, "bitrate": 1000000},
           "joints": [{"can_id": 1, "model": "AK80-9", "gear_ratio": 1.0},
                      {"can_id": 2, "limits": {"p_max_rad": 12.5, "v_max_rad_s": 30, "kp_max": 500,
                                               "kd_max": 5, "t_max_nm": 9}, "sign": -1}]}
    drv = build_driver(_section(cfg), now=lambda: 0.0)
    try:
        assert drv.n_joints == 2 and drv.joints[1].limits.t_max_nm == 9
        assert drv.joints[1].mapping.sign == -1
    finally:
        drv.close()
    bad_cases = [
        ({**cfg, "type": "nope"}, "driver.type"),
        ({**cfg, "extra": 1}, "driver.extra"),
        ({**cfg, "joints": [{"can_id": 1}]}, "driver.joints[0].model"),
        ({**cfg, "joints": [{"can_id": 1, "model": "AK99"}]}, "driver.joints[0].model"),
        ({**cfg, "joints": [{"can_id": 1, "model": "AK80-9"}, {"can_id": 1, "model": "AK80-9"}]},
         "driver.joints[1].can_id"),
        ({**cfg, "joints": [{"can_id": 1, "model": "AK80-9", "sign": 2}]}, "driver.joints[0].sign"),
        ({**cfg, "joints": [{"can_id": 1, "model": "AK80-9", "limits": {"kp_max": -1}}]},
         "driver.joints[0].limits.kp_max"),
        ({k: v for k, v in cfg.items() if k != "bus"}, "driver.bus"),
    ]
    for d, field in bad_cases:
        with pytest.raises(ConfigError) as info:
            build_driver(_section(d), now=lambda: 0.0)
        assert info.value.field == field and info.value.file == "robot.toml", (field, info.value)
    with pytest.raises(CommsError, match="nosuchinterface"):
        build_driver(_section({**cfg, "bus": {"interface": "nosuchinterface", "channel": "x"}}), now=lambda: 0.0)


def test_registry_odrive_with_given_transports_and_two_buses():
    sim = OdriveAxes([1, 2])
    t = CanTransport.from_bus(FakeBus(sim), name="given")
    cfg = {"type": "odrive_can", "enable_timeout_s": 0.05, "feedback": "broadcast",
           "joints": [{"node_id": 1, "torque_constant_nm_per_a": 0.1}, {"node_id": 2, "torque_limit_nm": 0.5}]}
    drv = build_driver(_section(cfg), now=lambda: 0.0, transports={"default": t})
    try:
        assert drv.enable().enabled.all()
        drv.cycle(Command(np.array([0.0, 2.0])))
        assert sim.st[2]["torque"] == 0.5 and drv.last_saturated == 1
    finally:
        drv.close()
    assert t.closed
    two = {"type": "odrive_can", "buses": {"a": {"interface": "virtual", "channel": f"x{uuid.uuid4().hex}"},
                                           "b": {"interface": "virtual", "channel": f"y{uuid.uuid4().hex}"}},
           "joints": [{"node_id": 1, "bus": "a"}, {"node_id": 1}]}
    with pytest.raises(ConfigError) as info:
        build_driver(_section(two), now=lambda: 0.0)
    assert info.value.field == "driver.joints[1].bus"


class AsciiOdrive(threading.Thread):
    """A scripted ODrive speaking the ASCII protocol on the master side of a pty."""

    def __init__(self, fd, refuse=(), garble_f=False):
        super().__init__(daemon=True)
        self.fd, self.refuse, self.garble_f = fd, set(refuse), garble_f
        self.state = {0: 1, 1: 1}
        self.err = {0: 0, 1: 0}
        self.torque = {0: 0.0, 1: 0.0}
        self.lines = []
        self.stop = threading.Event()

    def reply(self, text):
        os.write(self.fd, (text + "\n").encode())

    def run(self):
        buf = b""
        while not self.stop.is_set():
            r, _, _ = select.select([self.fd], [], [], 0.01)
            if not r:
                continue
            try:
                buf += os.read(self.fd, 256)
            except OSError:
                return
            while b"\n" in buf:
                raw, buf = buf.split(b"\n", 1)
                line = raw.decode().strip()
                self.lines.append(line)
                p = line.split()
                if p[0] == "c":
                    a = int(p[1])
                    self.torque[a] = float(p[2]) if self.state[a] == 8 else 0.0
                elif p[0] == "f":
                    a = int(p[1])
                    self.reply("garbage" if self.garble_f and a == 1 else f"{0.5 + a} {-0.25}")
                elif p[0] == "w" and p[1].endswith("requested_state"):
                    a = int(p[1][4])
                    if int(p[2]) == 8 and a in self.refuse:
                        self.err[a] = 0x40
                    else:
                        self.state[a] = int(p[2])
                elif p[0] == "r":
                    a = int(p[1][4])
                    self.reply(str(self.state[a] if p[1].endswith("current_state") else self.err[a]))


def _ascii_session(**kw):
    from drivers.odrive import OdriveAsciiDriver
    from drivers.serial_port import SerialTransport
    master, slave = os.openpty()
    dev = AsciiOdrive(master, **kw)
    dev.start()
    port = SerialTransport(os.ttyname(slave), timeout_s=0.2)
    maps = [JointMapping(gear_ratio=2.0), JointMapping(sign=-1)]
    drv = OdriveAsciiDriver(port, [0, 1], maps, now=lambda: 2.0, reply_timeout_s=0.2, enable_timeout_s=0.3,
                            status_every=1)
    return drv, dev, (master, slave)


def _ascii_end(dev, fds):
    dev.stop.set()
    dev.join()
    for fd in fds:
        os.close(fd)


def test_odrive_ascii_session_over_pty():
    drv, dev, fds = _ascii_session()
    try:
        fb = drv.enable()
        assert fb.enabled.all() and fb.fresh.all()
        assert "w axis0.controller.config.control_mode 1" in dev.lines
        fb = drv.cycle(Command(np.array([1.0, 0.5])))
        assert dev.torque == {0: 0.5, 1: -0.5}
        np.testing.assert_allclose(fb.position_rad, [2 * math.pi * 0.5 / 2, -2 * math.pi * 1.5])
        np.testing.assert_allclose(fb.velocity_rad_s, [-math.pi / 4 * 2 / 2, math.pi / 2])
        assert np.isnan(fb.torque_nm).all()
        drv.close()
        deadline = time.monotonic() + 2.0   # the responder thread handles the last lines asynchronously
        while dev.state != {0: 1, 1: 1} and time.monotonic() < deadline:
            time.sleep(0.005)
        assert dev.state == {0: 1, 1: 1} and dev.torque == {0: 0.0, 1: 0.0}
        drv.close()
    finally:
        _ascii_end(dev, fds)


def test_odrive_ascii_fault_and_garbled_answer():
    drv, dev, fds = _ascii_session(refuse={1})
    try:
        with pytest.raises(DeviceFaultError, match="MISSING_INPUT"):
            drv.enable()
    finally:
        drv.close()
        _ascii_end(dev, fds)
    drv, dev, fds = _ascii_session(garble_f=True)
    try:
        drv.enable()
        fb = drv.cycle(Command(np.zeros(2)))
        assert fb.fresh.tolist() == [True, False] and fb.info["corrupt"] == 1
    finally:
        drv.close()
        _ascii_end(dev, fds)


def test_registry_odrive_ascii_config():
    from drivers.odrive import OdriveAsciiDriver
    cfg = {"type": "odrive_ascii", "port": "loop://", "reply_timeout_s": 0.01,
           "joints": [{"axis": 0, "gear_ratio": 3.0}, {"axis": 1, "sign": -1}]}
    drv = build_driver(_section(cfg), now=lambda: 0.0)
    try:
        assert isinstance(drv, OdriveAsciiDriver) and drv.n_joints == 2
        assert drv.make_commands(Command(np.array([3.0, 1.0]))) == ["c 0 1", "c 1 -1"]
    finally:
        drv.close()
    for d, field in [({k: v for k, v in cfg.items() if k != "port"}, "driver.port"),
                     ({**cfg, "joints": [{"axis": 0}, {"axis": 0}]}, "driver.joints[1].axis"),
                     ({**cfg, "joints": [{"axis": 2}]}, "driver.joints[0].axis")]:
        with pytest.raises(ConfigError) as info:
            build_driver(_section(d), now=lambda: 0.0)
        assert info.value.field == field
    # a port that cannot be opened: CommsError naming the file and the field
    with pytest.raises(CommsError) as info:
        build_driver(_section({**cfg, "port": "/nonexistent/ttyACM9"}), now=lambda: 0.0)
    assert "field 'driver.port'" in str(info.value) and "/nonexistent/ttyACM9" in str(info.value)
