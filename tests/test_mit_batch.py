"""The MIT batch exchange (one compiled call per bus per cycle) equals the frame-by-frame path.

* :meth:`MitEmulator.on_batch` (one call of :func:`drivers.sim._mit_kernel.mit_command_batch`)
  against :meth:`MitEmulator.on_frame` of each frame in turn: twin emulators on twin plants,
  random sessions of commands (torques, gains, first bytes of 0xFF), special frames, unknown
  ids, watchdog expiries, injected and device faults (latched errors, limp, frozen, scheduled),
  silent and rebooted motors, stuck actuators, non-finite temperatures; the replies, the plant's
  held command and every motor's state equal after every step, and the batch path is taken
  for most steps.
* :class:`~drivers.mit.MitCanDriver` over an :class:`~drivers.sim.emulators.InlineBus` on a
  lock-step clock with the batch exchange (:meth:`drivers.transport.CanTransport.serve_batch`)
  against the same driver with it off: seeded sessions of cycles with the same faults, commands
  with gains (the Python encoder), frames of another node on the bus (late and duplicated
  replies, spoofed replies, foreign commands), a reply id that is one of our motor ids, a
  reply variant the driver does not accept; every Feedback (values, faults, freshness, counters),
  every error, the plant and the emulators equal.
* The batch is declined where it is not exactly the frame-by-frame path: a wall clock, a
  transport whose receive was replaced (a tap), a threaded host.
"""

from __future__ import annotations

import can
import numpy as np
import pytest

from controller.clock import LockstepClock
from drivers.base import Command, JointMapping
from drivers.codecs import mit as mitc
from drivers.mit import MitCanDriver, MitJoint
from drivers.sim import _mit_kernel as mk
from drivers.sim.emulators import EmulatorHost, InlineBus
from drivers.sim.mit_emulator import MitEmulator, MitMotorConfig
from drivers.sim.plant import SimulatedPlant
from drivers.transport import CanTransport
from dynamics.errors import TorqueloopError
from dynamics.toy_models import PlanarTwoLink

MAPPINGS = (JointMapping(), JointMapping(gear_ratio=9.0, sign=-1, offset_rad=0.3, efficiency=0.9))


# ---------------------------------------------------------------------------------------------
# the emulator: on_batch against on_frame
# ---------------------------------------------------------------------------------------------
def _twin_emulators(variant, watchdog):
    out = []
    for _ in range(2):
        plant = SimulatedPlant(PlanarTwoLink(g=0.0), q0=[0.1, -0.2], encoder_counts_per_rev=16384)
        emu = MitEmulator([MitMotorConfig(1, 1, "AK80-9", MAPPINGS[1], variant),
                           MitMotorConfig(2, 0, "AK60-6", MAPPINGS[0], variant, temperature_c=41.6)],
                          watchdog_timeout_s=watchdog)
        emu.bind(plant)
        out.append((plant, emu))
    return out


def _emu_state(plant, emu):
    """Everything of the plant and the motors a frame may change, as text (repr is exact for
    floats, and a NaN equals itself)."""
    motors = [(st.motor_mode, st.fault, st.zero_m, st.temperature_c, st.received, st.commands, st.armed,
               st.last_cmd_t, st.last_reply, st.device_fault, st.scheduled, st.silent) for st in emu._states]
    return repr((plant._cmd.tobytes(), plant._pd, plant._h_pd, plant.t_s, plant._q.tobytes(), plant._qd.tobytes(),
                 plant._tau_applied.tobytes(), np.asarray(plant.brakes_engaged).tobytes(),
                 emu.next_timer_s(), motors))


def _frame_by_frame(emu, frames, t):
    out = []
    for arb, data in frames:
        r = emu.on_frame(can.Message(arbitration_id=arb, data=data, is_extended_id=False), t)
        out.extend((m.arbitration_id, bytes(m.data)) for m in (r or []))
    return out


def _batched(emu, frames, t):
    """on_batch, or frame by frame where it declines; (replies, whether the batch was taken)."""
    m = len(frames)
    arbs = tuple(a for a, _ in frames)
    payloads = np.array([np.frombuffer(d, dtype=np.uint8) for _, d in frames], dtype=np.uint8).reshape(m, 8)
    out_arb = np.zeros(m, dtype=np.int64)
    out = np.zeros((m, 9), dtype=np.uint8)
    r = emu.on_batch(arbs, payloads, t, out_arb, out)
    if r is None:
        return _frame_by_frame(emu, frames, t), False
    return [(int(out_arb[i]), bytes(out[i, 1:1 + out[i, 0]])) for i in range(r)], True


def _torque_payload(rng):
    while True:
        f = (int(rng.integers(0, 0x10000)), int(rng.integers(0, 0x1000)), 0, 0, int(rng.integers(0, 0x1000)))
        data = mitc.pack_command(*f)
        if data[0] != 0xFF:
            return data


def _random_frames(rng):
    kind = rng.random()
    ids = [1, 2] if rng.random() < 0.8 else [2, 1]
    if rng.random() < 0.1:
        ids = [1, 2, 1]                                   # a motor twice in one run of frames
    frames = [(i, _torque_payload(rng)) for i in ids]
    if kind < 0.05:
        frames[0] = (frames[0][0], mitc.pack_command(0x8000, 0x800, 0x123, 0x045, 0x800))   # gains
    elif kind < 0.08:
        frames[-1] = (frames[-1][0], b"\xff" + frames[-1][1][1:])                        # 0xFF first
    elif kind < 0.14:
        frames[0] = (frames[0][0], [mitc.ENTER_MOTOR_MODE, mitc.EXIT_MOTOR_MODE, mitc.SET_ZERO][int(rng.integers(0, 3))])
    elif kind < 0.16:
        frames.append((7, _torque_payload(rng)))                                          # not ours
    return frames


def _heal(plant, emu, t, ids):
    """Every fault healed: the drives' latches cleared (EXIT, ENTER), connected, without device
    faults, the actuators free."""
    for c in ids:
        emu.set_device_fault(c, None)
        emu.set_silent(c, False)
        plant.set_stuck(emu._by_id[c].joint, False)
        for data in (mitc.EXIT_MOTOR_MODE, mitc.ENTER_MOTOR_MODE):
            emu.on_frame(can.Message(arbitration_id=c, data=data, is_extended_id=False), t)


def _random_fault(rng, plant, emu, t, ids=(1, 2), nan_temperature=True):
    """A fault, or (as often) every fault healed (:func:`_heal`).  ``nan_temperature``: a
    temperature the reply cannot carry (the emulator raises: its host stops serving)."""
    cid = ids[int(rng.integers(0, 2))]
    r = rng.random()
    if r < 0.08:
        emu.inject_fault(cid, int(rng.integers(1, 8)))
    elif r < 0.16:
        emu.set_silent(cid, not emu._by_id[cid].silent)
    elif r < 0.24:
        emu.set_device_fault(cid, ["limp", "frozen"][int(rng.integers(0, 2))])
    elif r < 0.32:
        emu.schedule_device_fault(cid, ["limp", "frozen"][int(rng.integers(0, 2))],
                                  t + float(rng.choice([0.0, 0.002, 0.01])))
    elif r < 0.38:
        emu.reboot(cid)
    elif r < 0.46:
        emu.set_temperature(cid, float(rng.uniform(20.0, 300.0)))
    elif r < 0.5:
        if nan_temperature:
            emu.inject_fault(cid, 3, temperature_c=float("nan"))    # the reply cannot be encoded
    elif r < 0.56:
        j = emu._by_id[cid].joint
        plant.set_stuck(j, j not in plant._stuck)
    else:
        _heal(plant, emu, t, ids)


@pytest.mark.parametrize("variant, watchdog, seed", [("classic6", None, 1), ("cubemars8", 0.004, 2),
                                                     ("cubemars8", None, 3), ("classic6", 0.002, 4)])
def test_on_batch_equals_on_frame_over_random_sessions(variant, watchdog, seed):
    rng = np.random.default_rng(seed)
    pairs = _twin_emulators(variant, watchdog)
    for plant, emu in pairs:
        for c in (1, 2):
            emu.on_frame(can.Message(arbitration_id=c, data=mitc.ENTER_MOTOR_MODE, is_extended_id=False), 0.0)
    t = 0.0
    taken = steps = 0
    for _ in range(1500):
        r = rng.random()
        if r < 0.06:
            # the same fault on both (the random draws repeated)
            state = rng.bit_generator.state
            for plant, emu in pairs:
                rng.bit_generator.state = state
                _random_fault(rng, plant, emu, t)
            continue
        if r < 0.25:
            t += float(rng.choice([0.001, 0.003, 0.006]))
            for plant, emu in pairs:
                while emu.next_timer_s() <= t:
                    te = emu.next_timer_s()
                    plant.advance_to(max(te, plant.t_s))
                    emu.on_timer(te)
                plant.advance_to(t)
            continue
        frames = _random_frames(rng)
        res = []
        for k, (plant, emu) in enumerate(pairs):
            try:
                if k == 0:
                    got = (_frame_by_frame(emu, frames, t), None)
                else:
                    got = _batched(emu, frames, t)
                    taken += got[1]
                    got = (got[0], None)
            except TorqueloopError as err:
                got = ("error", type(err).__name__, str(err))
            res.append(got)
        steps += 1
        assert repr(res[0]) == repr(res[1])
        assert _emu_state(*pairs[0]) == _emu_state(*pairs[1])
    # both paths were taken often (the batch for at least a tenth of the runs of frames)
    assert 0.1 * steps < taken < 0.9 * steps


def test_on_batch_declines_a_noisy_plant_and_changes_nothing():
    plant = SimulatedPlant(PlanarTwoLink(g=0.0), q0=[0.1, -0.2], rng=np.random.default_rng(0),
                           position_noise_std_rad=1e-4)
    emu = MitEmulator([MitMotorConfig(1, 0, "AK80-9")])
    emu.bind(plant)
    emu.on_frame(can.Message(arbitration_id=1, data=mitc.ENTER_MOTOR_MODE, is_extended_id=False), 0.0)
    before = _emu_state(plant, emu)
    payloads = np.frombuffer(mitc.pack_command(0x8000, 0x800, 0, 0, 0x900), dtype=np.uint8).reshape(1, 8).copy()
    assert emu.on_batch((1,), payloads, 0.0, np.zeros(1, dtype=np.int64), np.zeros((1, 9), dtype=np.uint8)) is None
    assert _emu_state(plant, emu) == before


# ---------------------------------------------------------------------------------------------
# the driver: the batch exchange against frame by frame
# ---------------------------------------------------------------------------------------------
def _rig(batch: bool, *, variant="cubemars8", reply_variant="auto", reply_id=0, watchdog=0.003):
    clock = LockstepClock()
    plant = SimulatedPlant(PlanarTwoLink(g=9.81), q0=[0.1, -0.2], encoder_counts_per_rev=16384)
    emu = MitEmulator([MitMotorConfig(3, 0, "AK80-9", MAPPINGS[1], variant),
                       MitMotorConfig(5, 1, "AK60-6", MAPPINGS[0], variant)],
                      watchdog_timeout_s=watchdog, reply_id=reply_id)
    bus = InlineBus(f"batch-{batch}")
    host = EmulatorHost(bus.device_end, [emu], plant, clock.now, serve="inline")
    bus.host = host
    tr = CanTransport(bus=bus, name="b")
    drv = MitCanDriver([MitJoint(tr, 3, mitc.MIT_MODELS["AK80-9"], MAPPINGS[1], "a"),
                        MitJoint(tr, 5, mitc.MIT_MODELS["AK60-6"], MAPPINGS[0], "b")],
                       now=clock.now, reply_variant=reply_variant)
    if not batch:
        drv._batch_ids = None
    return clock, plant, emu, bus, host, tr, drv


def _fb(fb):
    info = {k: (np.asarray(v).tobytes() if isinstance(v, np.ndarray) else v) for k, v in fb.info.items()}
    return (fb.t_s, fb.position_rad.tobytes(), fb.velocity_rad_s.tobytes(), fb.torque_nm.tobytes(),
            np.asarray(fb.fault).tobytes(), np.asarray(fb.fresh).tobytes(), np.asarray(fb.enabled).tobytes(),
            sorted(info.items()))


def _call(f, *a):
    try:
        return ("ok", f(*a))
    except TorqueloopError as err:
        return ("error", type(err).__name__, str(err))


def _session(rig, seed, counter):
    clock, plant, emu, bus, host, tr, drv = rig
    rng = np.random.default_rng(seed)
    out = [_call(lambda: _fb(drv.enable()))]
    failed = out[0][0] != "ok"
    for k in range(400):
        clock.advance(0.001)
        if failed:
            # the last cycle raised (foreign traffic, not enabled): healed and enabled again
            _heal(plant, emu, clock.now(), (3, 5))
            out.append(("disable", _call(drv.disable)))
            out.append(_call(lambda: _fb(drv.enable())))
            failed = out[-1][0] != "ok"
            continue
        if k % 40 == 39:
            _heal(plant, emu, clock.now(), (3, 5))      # the faults last a few tens of cycles
        if k in (100, 200) and drv.reply_variant == "classic6":
            # motor 5 switches its reply variant (a drive flashed meanwhile): the driver reads
            # the batch's replies frame by frame
            st = emu._by_id[5]
            st.reply8 = k == 100
            emu._W[st.index, mk.W_LEN] = 8 if st.reply8 else 6
        r = rng.random()
        if r < 0.03:
            _random_fault(rng, plant, emu, clock.now(), (3, 5), nan_temperature=False)
        elif r < 0.05:
            # another node's frames waiting on the bus: a reply of ours (late, or a duplicate of
            # the last one), a spoofed reply, a command to one of our motors
            which = int(rng.integers(0, 4))
            cid = [3, 5][int(rng.integers(0, 2))]
            data = bytes([cid]) + rng.integers(0, 256, 5, dtype=np.uint8).tobytes()
            if which == 0:
                drv._owed[drv._by_id[0][cid]] += 1
            elif which == 1:
                j = drv._by_id[0][cid]
                n = drv._rx_buf[9 * j]
                data = bytes(drv._rx_buf[9 * j + 1:9 * j + 1 + n]) if n else data
            if which == 3 and rng.random() < 0.3:
                bus.device_end.deliver(cid, _torque_payload(rng))
            elif which != 3:
                bus.device_end.deliver(0, data)
        elif r < 0.06:
            out.append(("host", _call(host.check)))
            out.append(("disable", _call(drv.disable)))
            out.append(_call(lambda: _fb(drv.enable())))
            continue
        tau = rng.uniform(-30.0, 30.0, 2)
        if rng.random() < 0.1:
            cmd = Command(tau, kp_nm_per_rad=rng.uniform(0, 5, 2), kd_nm_s_per_rad=rng.uniform(0, 0.5, 2),
                          position_rad=rng.uniform(-0.5, 0.5, 2))
        else:
            cmd = Command(tau)
        frames_in = host.frames_in
        res = _call(lambda: _fb(drv.cycle(cmd)))
        failed = res[0] != "ok"
        counter[0] += not failed
        out.append(res)
        out.append((plant._cmd.tobytes(), plant._q.tobytes(), plant._qd.tobytes(), plant.t_s,
                    host.frames_in - frames_in, host.frames_out, tr.frames_sent, tr.frames_received,
                    _emu_state(plant, emu), list(drv._owed), drv._reply_len, drv.cycles))
    out.append(("disable", _call(drv.disable), drv.exit_unconfirmed))
    drv.close()
    host.close()
    return out


@pytest.mark.parametrize("seed, kw", [(11, {}), (12, {"variant": "classic6"}), (13, {"watchdog": None}),
                                      # from cycle 100 to 200 motor 5 sends 8-byte replies, which
                                      # a driver set to classic6 counts as corrupt
                                      (14, {"variant": "classic6", "reply_variant": "classic6"})])
def test_driver_batch_exchange_equals_frame_by_frame(seed, kw, monkeypatch):
    calls = {"batch": 0, "served": 0}
    orig = CanTransport.serve_batch

    def counted(self, *a):
        calls["batch"] += 1
        r = orig(self, *a)
        calls["served"] += r is not None
        return r
    monkeypatch.setattr(CanTransport, "serve_batch", counted)
    import drivers.mit as dm
    taken = {0: 0, "regular": 0}
    orig_take = dm._k.take_replies

    def take(*a):
        r = orig_take(*a)
        taken[0 if r == 0 else "regular"] += 1
        return r
    monkeypatch.setattr(dm._k, "take_replies", take)
    counter = [0]
    ref = _session(_rig(False, **kw), seed, [0])
    assert calls["batch"] == 0                      # the reference never asked for it
    got = _session(_rig(True, **kw), seed, counter)
    assert len(ref) == len(got)
    for i, (a, b) in enumerate(zip(ref, got)):
        assert repr(a) == repr(b), f"step {i}"
    # the batch exchange served a good share of the cycles (the comparison covers it); with the
    # other reply variant, its replies were read frame by frame for a hundred cycles
    assert calls["served"] > 0.4 * counter[0]
    if seed == 14:
        assert taken[0] >= 20 and taken["regular"] >= 20
    else:
        assert taken["regular"] > 0.3 * counter[0]


def test_the_batch_is_declined_on_a_wall_clock_a_tap_and_a_thread():
    clock, plant, emu, bus, host, tr, drv = _rig(True)
    drv.enable()
    clock.advance(0.001)
    args = (drv._batch_ids, drv._tx, drv._batch_arb, drv._batch_rep)
    assert tr.serve_batch(*args) == 2
    host._frozen_clock = False                      # a clock that moves while the driver waits
    assert tr.serve_batch(*args) is None
    host._frozen_clock = True
    tr.recv_fields = lambda timeout_s=0.0, _f=tr.recv_fields: _f(timeout_s)     # a tap on the receive
    assert tr.serve_batch(*args) is None
    del tr.recv_fields
    assert tr.serve_batch(*args) == 2
    bus.device_end.deliver(0, b"\x03" + bytes(5))   # a frame waiting for the driver: it reads it first
    assert tr.serve_batch(*args) is None
    drv.close()
    # a host serving from its thread (python-can's virtual bus): never
    vb = can.Bus(interface="virtual", channel="batch-thread", receive_own_messages=False)
    t2 = CanTransport(bus=vb, name="v")
    assert t2.serve_batch(*args) is None
    t2.close()


@pytest.mark.parametrize("tap", ["send", "send_fields", "recv", "recv_fields"])
def test_the_batch_is_declined_on_an_inline_bus_with_a_tap(tap):
    """A bus whose ``send``/``send_fields``/``recv``/``recv_fields`` was replaced on the instance
    (a test's or a user's recorder) sees every frame of every cycle: the batch must not bypass it."""
    clock, plant, emu, bus, host, tr, drv = _rig(True)
    drv.enable()
    clock.advance(0.001)
    args = (drv._batch_ids, drv._tx, drv._batch_arb, drv._batch_rep)
    assert bus.serve_batch(*args) == 2                           # untapped, it serves
    seen = [0]
    orig = getattr(bus, tap)

    def counted(*a, **k):
        seen[0] += 1
        return orig(*a, **k)
    setattr(bus, tap, counted)
    assert bus.serve_batch(*args) is None
    batches = [0]
    host_batch = host.serve_batch

    def host_counted(*a):
        batches[0] += 1
        return host_batch(*a)
    host.serve_batch = host_counted
    frames_in = host.frames_in
    for _ in range(3):
        clock.advance(0.001)
        fb = drv.cycle(Command(np.array([0.5, -0.5])))
        assert fb.fresh.all()
    assert batches[0] == 0                                       # the cycles went frame by frame
    assert host.frames_in - frames_in == 6
    if tap in ("send", "recv_fields"):                            # what the frame-by-frame path calls
        assert seen[0] >= 6
    del host.serve_batch
    delattr(bus, tap)
    assert bus.serve_batch(*args) == 2
    drv.close()


def test_the_shipped_run_takes_the_batch_exchange(tmp_path, monkeypatch):
    """3rrr_circle: every cycle but the enable/disable exchanges goes the batch path."""
    from pathlib import Path

    from controller.app.run import build_run, load_run

    served = [0]
    orig = CanTransport.serve_batch

    def counted(self, *a):
        r = orig(self, *a)
        served[0] += r is not None
        return r
    monkeypatch.setattr(CanTransport, "serve_batch", counted)
    root = Path(__file__).resolve().parents[1]
    run = build_run(load_run(root / "hil_configs" / "runs" / "3rrr_circle.toml", duration_s=0.2), out_dir=tmp_path / "r")
    res = run.execute()
    assert res.status == "completed"
    assert served[0] == res.n_cycles
