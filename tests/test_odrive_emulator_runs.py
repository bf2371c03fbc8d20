"""The ODrive emulator's compiled run of frames equals its frame-by-frame Python path.

``OdriveEmulator.on_fields_batch`` (one call of :func:`drivers.sim._odrive_kernel.serve_frames`
for a run of frames at one loop time) against ``OdriveEmulator.on_fields`` of each frame in turn
(the reference): two emulators on two identical plants get the same seeded random sequences of
runs -- a cycle's frames (Set_Input_Torque, requests of the estimates) and everything else
(requests of other messages, states, modes, limits, gains, offsets, errors, e-stops, reboots,
unknown nodes, torques cut short, non-finite or past float32, silent axes, injected faults,
watchdog expiries, stuck actuators, extreme plant states) -- and after every run the answers, every
axis' state, the plant's held command, the dropped-frame count and the next timed event must be
equal.  The run declines (``None``) whatever it does not serve as the reference does; then the
frames are served one by one there too.

The host's side: :meth:`drivers.sim.emulators.EmulatorHost.serve_fields` serves a run in one
call only on a clock that stood still while a call's frames were served (a lock-step clock);
the shipped runs' logs are compared by the benchmark notes, not here.
"""

from __future__ import annotations

import math
import struct

import numpy as np
import pytest

from drivers.base import JointMapping
from drivers.codecs import odrive as odc
from drivers.sim.emulators import EmulatorHost, InlineBus
from drivers.sim.odrive_emulator import OdriveAxisConfig, OdriveEmulator
from drivers.sim.plant import SimulatedPlant
from dynamics.toy_models import PlanarTwoLink

C = odc.Cmd
F32_MAX = float(np.finfo(np.float32).max)
NODES = (3, 7)
_SLOTS = ("node_id", "state", "control_mode", "input_mode", "input_torque", "axis_error", "procedure_result",
          "last_feed_t", "silent", "commands", "current_limit_a", "vel_limit_rev_s",
          "params", "pos_offset_rev", "setpoint_nm")


def _pair(firmware, counts):
    """Two emulators on two identical plants; the second one's compiled paths switched off (its
    estimates, applied torques and broadcasts made by the codec and the Python arithmetic: the
    reference)."""
    out = []
    for _ in range(2):
        plant = SimulatedPlant(PlanarTwoLink(g=0.0), q0=[0.1, -0.2], encoder_counts_per_rev=counts)
        emu = OdriveEmulator([
            OdriveAxisConfig(NODES[0], 0, JointMapping(gear_ratio=9.0, sign=-1, offset_rad=0.3, efficiency=0.9,
                                                       torque_constant_nm_per_a=0.08),
                             heartbeat_period_s=0.01, encoder_period_s=0.002, watchdog_timeout_s=0.005,
                             current_limit_a=20.0, iq_period_s=0.002,
                             torques_period_s=0.004 if firmware == "0.6" else None),
            OdriveAxisConfig(NODES[1], 1, JointMapping(gear_ratio=628.3185307179587, offset_rad=-1.25),
                             heartbeat_period_s=None, encoder_period_s=None, torque_limit_nm=0.5,
                             iq_period_s=0.003)], firmware=firmware)
        emu.bind(plant)
        out.append((plant, emu))
    _python_only(out[1][1])
    return out


def _python_only(emu):
    """Switch an emulator's compiled paths off (what it does on a big-endian machine)."""
    emu._est_f32 = None
    for ax in emu._axes.values():
        ax.quantum = None
    emu._P_ok = False


def _torque_payload(rng):
    r = rng.random()
    if r < 0.75:
        return struct.pack("<f", float(rng.normal(0.0, 3.0))) + bytes(4)
    if r < 0.8:
        return b""
    if r < 0.85:
        return bytes(rng.integers(0, 256, int(rng.integers(1, 4)), dtype=np.uint8))
    v = float(rng.choice([np.nan, np.inf, -np.inf, 1e30, -1e30, F32_MAX, 0.0, -0.0, 1e-40]))
    return struct.pack("<f", np.float32(v)) + bytes(int(rng.integers(0, 5)))


def _other_frame(rng, firmware):
    node = int(rng.choice(NODES + (11,)))
    k = int(rng.integers(0, 12))
    rtr = lambda cmd: ((node << 5) | int(cmd), b"", 8)
    data = lambda cmd, payload: ((node << 5) | int(cmd), payload, None)
    if k == 0:
        return rtr(rng.choice([C.GET_IQ, C.HEARTBEAT, C.GET_BUS_VOLTAGE_CURRENT, C.GET_TORQUES, C.GET_ERROR]))
    if k in (1, 2):
        state = odc.AxisState.CLOSED_LOOP_CONTROL if rng.random() < 0.8 else odc.AxisState.IDLE
        return data(C.SET_AXIS_STATE, odc.encode_set_axis_state(state))
    if k == 3:
        vel = float(rng.choice([0.5, 3.0, 1e3, F32_MAX]))
        return data(C.SET_LIMITS, odc.encode_set_limits(vel, float(rng.choice([0.5, 5.0, 40.0]))))
    if k == 4:
        return data(C.SET_VEL_GAINS, struct.pack("<ff", float(rng.uniform(0.01, 2.0)), 0.0))
    if k == 5:
        return data(C.CLEAR_ERRORS, odc.encode_clear_errors(False, firmware))
    if k == 6:
        return data(C.ESTOP, b"")
    if k == 7:
        mode = odc.ControlMode.TORQUE_CONTROL if rng.random() < 0.7 else odc.ControlMode.VELOCITY_CONTROL
        return data(C.SET_CONTROLLER_MODE, odc.encode_set_controller_mode(mode, odc.InputMode.PASSTHROUGH))
    if k == 8:
        return data(C.SET_ABSOLUTE_POSITION if firmware == "0.6" else C.SET_INPUT_VEL,
                    struct.pack("<f", float(rng.normal(0.0, 10.0))) + bytes(4))
    if k == 9:
        return data(C.SET_INPUT_TORQUE, _torque_payload(rng)) if rng.random() < 0.5 else rtr(C.GET_ENCODER_ESTIMATES)
    if k == 10:
        return data(0x1E, bytes(8))                     # no command of either generation
    return data(C.REBOOT, bytes(1) if firmware == "0.6" else b"")


def _run(rng, firmware):
    """A cycle's frames (most often), sometimes with another frame in them."""
    frames = []
    for node in NODES:
        if rng.random() < 0.95:
            frames.append(((node << 5) | int(C.SET_INPUT_TORQUE), _torque_payload(rng), None))
    for node in NODES:
        if rng.random() < 0.95:
            frames.append(((node << 5) | int(C.GET_ENCODER_ESTIMATES), b"", 8))
    if rng.random() < 0.15:
        frames.insert(int(rng.integers(0, len(frames) + 1)), _other_frame(rng, firmware))
    if rng.random() < 0.1:              # an axis (re-)enabled, as a driver's enable() does
        node = int(rng.choice(NODES))
        frames[:0] = [((node << 5) | int(C.CLEAR_ERRORS), odc.encode_clear_errors(False, firmware), None),
                      ((node << 5) | int(C.SET_AXIS_STATE),
                       odc.encode_set_axis_state(odc.AxisState.CLOSED_LOOP_CONTROL), None)]
    if rng.random() < 0.1:
        rng.shuffle(frames)
    return frames


def _state(plant, emu):
    axes = {n: tuple(repr(getattr(ax, s)) for s in _SLOTS) for n, ax in emu._axes.items()}
    # the cyclic messages' schedule: each slot's time due and count, the order they go out in
    schedule = (repr(emu._due), repr(emu._cnt), repr(emu._order))
    return (axes, schedule, plant._cmd.tobytes(), plant._pd, emu.frames_ignored, repr(emu.next_timer_s()))


def _event(rng, pairs, t):
    k = int(rng.integers(0, 8))
    node = int(rng.choice(NODES))
    for plant, emu in pairs:
        if k == 0:
            emu.inject_error(node)
        elif k == 1:
            emu.reboot(node)
        elif k == 2:
            emu.set_silent(node, not emu._axes[node].silent)
        elif k == 3:
            plant.set_stuck(1, not plant._stuck)
        elif k == 4:
            _outcome(emu.on_timer_fields, t)
    return k


def _outcome(f, *args):
    """``f(*args)``, or the type of what it raised (a broadcast of a NaN state: the codec refuses it)."""
    try:
        return f(*args)
    except Exception as err:  # noqa: BLE001 - compared between the two paths
        return type(err)


def _sequence(seed, firmware, counts, pairs=None):
    rng = np.random.default_rng(seed)
    erng = np.random.default_rng(seed + 1000)
    (pa, ea), (pb, eb) = pairs or _pair(firmware, counts)
    batched = declined = armed = 0
    compiled_timers = []
    timer = ea._timer_compiled
    ea._timer_compiled = lambda t: compiled_timers.append(r := timer(t)) or r
    t = 0.0
    for step in range(400):
        t += float(rng.choice([0.0, 0.001, 0.004]))
        if rng.random() < 0.3:
            q = rng.normal(0.0, 2.0, 2)
            qd = rng.normal(0.0, 50.0, 2)
            if rng.random() < 0.05:
                q[int(rng.integers(0, 2))] = float(rng.choice([np.nan, np.inf, 1e300]))
            for p in (pa, pb):
                p._q[:], p._qd[:] = q, qd
        for p in (pa, pb):
            p.advance_to(t) if math.isfinite(p._q.sum() + p._qd.sum()) else None
        if rng.random() < 0.08:
            _event(erng, ((pa, ea), (pb, eb)), t)
        if rng.random() < 0.2:
            assert _outcome(ea.on_timer_fields, t) == _outcome(eb.on_timer_fields, t)
            assert _state(pa, ea) == _state(pb, eb), step
        if rng.random() < 0.1:
            continue        # a quiet spell: no frames (a watchdog runs out at a timed event)
        frames = _run(rng, firmware)
        got = ea.on_fields_batch(frames, t)
        if got is None:
            declined += 1
            got = [r for arb, d, dlc in frames for r in (ea.on_fields(arb, d, dlc, t) or [])]
        else:
            batched += 1
            armed += any(ax.state == odc.AxisState.CLOSED_LOOP_CONTROL for ax in ea._axes.values())
        want = [r for arb, d, dlc in frames for r in (eb.on_fields(arb, d, dlc, t) or [])]
        assert got == want, (step, frames)
        assert _state(pa, ea) == _state(pb, eb), (step, frames)
    fast = sum(1 for r in compiled_timers if r)
    assert fast > 10 and len(compiled_timers) - fast > 5, (fast, len(compiled_timers))
    return batched, declined, armed


@pytest.mark.parametrize("counts", [None, 4096])
@pytest.mark.parametrize("firmware", ["0.6", "0.5"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_compiled_run_of_frames_equals_the_frame_by_frame_path(seed, firmware, counts):
    batched, declined, armed = _sequence(seed, firmware, counts)
    # both ways taken, with axes in closed loop, over faults and odd frames
    assert batched > 40 and declined > 20 and armed > 30, (batched, declined, armed)


def test_a_noisy_plant_is_served_frame_by_frame():
    plant = SimulatedPlant(PlanarTwoLink(g=0.0), q0=[0.1, -0.2], position_noise_std_rad=1e-4,
                           rng=np.random.default_rng(0))
    emu = OdriveEmulator([OdriveAxisConfig(3, 0)])
    emu.bind(plant)
    assert emu.on_fields_batch([((3 << 5) | int(C.GET_ENCODER_ESTIMATES), b"", 8)] * 2, 0.0) is None


class _Counter:
    """A clock that moves at every reading (a wall clock, as serving sees it)."""

    def __init__(self, step):
        self.t, self.step = 0.0, step

    def __call__(self):
        self.t += self.step
        return self.t


@pytest.mark.parametrize("step, batched", [(0.0, True), (1e-6, False)])
def test_the_host_serves_a_run_in_one_call_only_on_a_clock_that_stands_still(step, batched):
    plant = SimulatedPlant(PlanarTwoLink(g=0.0), q0=[0.1, -0.2])
    emu = OdriveEmulator([OdriveAxisConfig(3, 0, heartbeat_period_s=None, encoder_period_s=None),
                          OdriveAxisConfig(4, 1, heartbeat_period_s=None, encoder_period_s=None)])
    runs = []
    orig = emu.on_fields_batch
    emu.on_fields_batch = lambda frames, t: runs.append(t) or orig(frames, t)
    bus = InlineBus("runs")
    host = EmulatorHost(bus.device_end, [emu], plant, _Counter(step), serve="inline")
    bus.host = host
    frames = [((n << 5) | int(C.SET_INPUT_TORQUE), struct.pack("<f", 0.5) + bytes(4), None) for n in (3, 4)]
    frames += [((n << 5) | int(C.GET_ENCODER_ESTIMATES), b"", 8) for n in (3, 4)]
    for _ in range(3):
        bus.send_fields(frames)
        got = [bus.recv_fields(0.0) for _ in range(3)]
        assert [f and f[0] for f in got] == [(3 << 5) | 9, (4 << 5) | 9, None]
    host.check()
    assert bool(runs) is batched and len(runs) == (2 if batched else 0)   # the first call only observes
    bus.shutdown()


def _drivers():
    from drivers.odrive import OdriveAxis, OdriveCanDriver
    from drivers.transport import CanTransport
    out = []
    for _ in range(2):
        buses = [InlineBus(f"dec{k}") for k in range(2)]
        ts = [CanTransport.from_bus(b, name=f"dec{k}") for k, b in enumerate(buses)]
        axes = [OdriveAxis(ts[0], 3, JointMapping(gear_ratio=9.0, sign=-1, offset_rad=0.3)),
                OdriveAxis(ts[1], 7, JointMapping(gear_ratio=628.3185307179587)),
                OdriveAxis(ts[0], 4)]
        out.append((OdriveCanDriver(axes, now=lambda: 0.0, feedback="rtr"), buses))
    return out


def _received(rng):
    """A pass of received frames as an InlineBus queues them (fields), of every kind."""
    frames = []
    for _ in range(int(rng.integers(0, 12))):
        node = int(rng.choice([3, 4, 7, 9]))
        cmd = int(rng.choice([C.GET_ENCODER_ESTIMATES] * 6 + [C.HEARTBEAT, C.GET_IQ, C.SET_INPUT_TORQUE]))
        r = rng.random()
        if r < 0.7:
            data = struct.pack("<ff", *rng.normal(0.0, 100.0, 2))
        elif r < 0.8:
            data = struct.pack("<ff", float(rng.choice([np.nan, np.inf, 1.0])), float(rng.choice([np.nan, -np.inf, 2.0])))
        elif r < 0.9:
            data = bytes(rng.integers(0, 256, int(rng.integers(0, 9)), dtype=np.uint8))
        else:
            data = struct.pack("<ff", 1.5, -2.5) + b"\x01"       # longer than 8 bytes: accepted
        error, remote, ext = rng.random() < 0.03, rng.random() < 0.03, rng.random() < 0.03
        frames.append((int(rng.integers(0, 2)), ((node << 5) | cmd, b"" if remote else data, 0.0, error, remote,
                                                 ext, 8 if remote else None)))
    return frames


@pytest.mark.parametrize("seed", [5, 6])
def test_compiled_decoding_of_a_pass_equals_the_frame_by_frame_path(seed):
    rng = np.random.default_rng(seed)
    (da, ba), (db, bb) = _drivers()
    n_est = 0
    for step in range(300):
        frames = _received(rng)
        for b, f in frames:
            ba[b]._rx.append(f)
        da._handle_queued()
        for b, f in frames:
            db._handle_fields(b, f)
        n_est += sum(1 for _, f in frames if f[0] & 0x1F == int(C.GET_ENCODER_ESTIMATES))
        for name in ("_meas", "_fresh", "_seen", "_axis_state", "_axis_error"):
            assert getattr(da, name).tobytes() == getattr(db, name).tobytes(), (step, name, frames)
        assert da._stats == db._stats, (step, frames)
        if rng.random() < 0.3:
            da._fresh[:] = db._fresh[:] = False
    assert n_est > 500
    for d, buses in ((da, ba), (db, bb)):
        d.close()


@pytest.mark.parametrize("firmware", ["0.5", "0.6"])
def test_cyclic_messages_go_out_under_a_new_node_id_at_once(firmware):
    """After Set_Axis_Node_ID (0.5) or Address (0.6) every cyclic message of the axis carries its
    new node id, also from the compiled broadcast plans made before (cached per due set)."""
    sent = []
    for python in (False, True):
        plant = SimulatedPlant(PlanarTwoLink(g=0.0), q0=[0.1, -0.2], encoder_counts_per_rev=16384)
        emu = OdriveEmulator([OdriveAxisConfig(3, 0, JointMapping(), heartbeat_period_s=0.004,
                                               encoder_period_s=0.002, iq_period_s=0.002)], firmware=firmware)
        emu.bind(plant)
        if python:
            _python_only(emu)
        out = []
        for _ in range(4):                 # due sets of three messages: the compiled plans
            t = emu.next_timer_s()
            out += emu.on_timer_fields(t)
        if firmware == "0.6":
            (addr,) = emu.on_fields((3 << 5) | int(C.ADDRESS), b"", 8, t)
            serial = odc.decode_address(addr[1])[1]
            emu.on_fields((3 << 5) | int(C.ADDRESS), odc.encode_address(12, serial), None, t)
        else:
            emu.on_fields((3 << 5) | int(odc.Cmd05.SET_AXIS_NODE_ID), odc.encode_set_axis_node_id(12), None, t)
        assert emu.node_ids == (12,)
        after = []
        for _ in range(4):
            t = emu.next_timer_s()
            after += emu.on_timer_fields(t)
        assert len(after) >= 8 and {arb >> 5 for arb, _ in after} == {12}, after
        sent.append([(arb, bytes(d)) for arb, d in out + after])
    assert sent[0] == sent[1]
