"""The emulated CiA 402 drives' compiled SYNC (``Cia402Emulator._sync_fast``,
:mod:`drivers.sim._cia402_kernel`) against their Python path (``Cia402Emulator._sync``, the
reference).

Two emulators of the same drives on two equal plants get the same frames: one takes the
compiled SYNC where it applies, the other always the Python path.  Over seeded random sessions
(the state machine walked, random target torques beyond the max torque, max torques changed by
SDO, the plant's joints moved anywhere: positions that wrap the 32-bit counter, speeds and
torques beyond their fields, values half a count apart; and faults: injected drive faults,
fault resets, quick stops, a disconnected drive, a short RPDO, an unknown controlword, mode
changes, NMT stop / reset, a stuck joint, non-finite plant values) every answer (the frames'
bytes, or the error raised), the plant's held command, the drives' state, counters, object
dictionaries and PDO buffers must be equal after every frame.

The batch path of a cycle (``Cia402Emulator.on_batch``: the RPDOs' bytes in, the TPDOs' bytes out,
what decides it kept behind ``_generation``) is compared the same way, and the driver with its
batch exchange (``Cia402Driver`` -> ``CanTransport.serve_batch`` -> ``on_batch``) against the same
driver sending and reading frame by frame, over a seeded session with faults.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from drivers.base import JointMapping
from drivers.codecs import cia402 as codec
from drivers.codecs.cia402 import Cia402Units, State
from drivers.sim import cia402_emulator as ce
from drivers.sim.cia402_emulator import Cia402DriveConfig, Cia402Emulator
from drivers.sim.plant import SimulatedPlant
from dynamics import load_model
from test_cia402 import write_pdo_map     # a master's SDO writes of a PDO map

ROOT = Path(__file__).resolve().parents[1]
ROBOT_2R = ROOT / "hil_configs" / "robots" / "seed003_2r.toml"
UNITS = (Cia402Units(counts_per_rev=1 << 20, rated_torque_nm=0.5),
         Cia402Units(counts_per_rev=131072, rated_torque_nm=1.0, velocity_counts_per_rev_s=1000.0))
MAPS = (JointMapping(gear_ratio=6.0, sign=-1, offset_rad=0.1, efficiency=0.9), JointMapping(gear_ratio=9.0))


class _PythonOnly(Cia402Emulator):
    """The reference: every SYNC through the Python path."""

    def _sync_fast(self, t_s):
        return False


class _Counted(Cia402Emulator):
    """The emulator under test, counting the SYNCs its compiled path served."""

    fast_syncs = 0

    def _sync_fast(self, t_s):
        done = super()._sync_fast(t_s)
        self.fast_syncs += done
        return done


def _pair():
    model = load_model(ROBOT_2R)
    out = []
    for cls in (_Counted, _PythonOnly):
        plant = SimulatedPlant(model, q0=np.array([0.3, -0.4]), viscous=0.01, coulomb=0.0, t0_s=0.0,
                               encoder_counts_per_rev=16384)
        emu = cls([Cia402DriveConfig(n + 1, n, UNITS[n], MAPS[n], brake_kd_nm_s_per_rad=2.0, max_brake_s=0.02) for n in range(2)],
                  t0_s=0.0)
        emu.bind(plant)
        out.append((emu, plant))
    return out


def _state(emu: Cia402Emulator, plant) -> tuple:
    if emu._owed:
        emu._settle()           # what on_batch left to write (anything but on_batch does it first)
    drives = []
    for d in emu._drives.values():
        node = d.node
        drives.append((int(d.state), d.cw, d.limit_active, d.commands, d.sync_count, d.error_code,
                       d.error_register, d.reaction, d.brake_released, node.nmt._state,
                       {k: dict(v) for k, v in node.data_store.items()},
                       [bytes(p.pm.data) for p in d.tx_plans],
                       [(p.pm.is_received, bytes(p.pm.data), p.pm.timestamp, p.pm.period) for p in d.rx_plans]))
    out = [m if type(m) is tuple else (m.arbitration_id, bytes(m.data), m.is_remote_frame) for m in emu._out.frames]
    return (plant._cmd.tobytes(), plant._tau_max.tobytes(), drives, out)


def _answer(emu, arb, data, t, fields):
    try:
        if fields:
            r = emu.on_fields(arb, data, None, t)
        else:
            import can
            r = emu.on_frame(can.Message(arbitration_id=arb, data=data, is_extended_id=False), t)
            r = None if r is None else [(m.arbitration_id, bytes(m.data)) for m in r]
        return ("ok", r)
    except Exception as err:  # noqa: BLE001 - the two paths must raise the same error
        return ("raised", type(err).__name__, str(err))


def _map(emus, node_id, index, entries, cob_id, trans):
    """Write a PDO map into the emulators' drive (what a master's SDO writes do)."""
    for emu in emus:
        write_pdo_map(emu.local_node(node_id), index, entries, cob_id, trans)


def _session(seed: int, batch: bool | str = False, every_sync: bool = False) -> int:
    """One random session; returns the number of SYNCs the compiled path served (``batch``: the
    number of cycles ``on_fields_batch``, or ``on_batch``, served).

    ``batch``: each cycle's RPDOs and its SYNC go to the emulator under test in one
    ``on_fields_batch`` call (``"on_batch"``: one ``on_batch`` call, the RPDOs' payloads in an
    array as the driver's encoder writes them) (one by one where it declines), to the reference
    one by one.
    ``every_sync``: every TPDO is sent at every SYNC (transmission type 1: the compiled SYNC packs
    all drives' TPDOs at once), else node 2's second TPDO every other SYNC."""
    rng = np.random.default_rng(seed)
    (fast, pf), (ref, pr) = _pair()
    t = 0.0
    step = 0
    pending = []            # batch: the cycle's frames, sent at its SYNC
    batched = 0

    def both(arb, data=b""):
        nonlocal step, batched
        step += 1
        if batch and (0x201 <= arb <= 0x57F or arb == codec.SYNC_ID):
            pending.append((arb, data, None))
            if arb != codec.SYNC_ID:
                return None
            frames = list(pending)
            pending.clear()
            a = (_answer_on_batch if batch == "on_batch" else _answer_batch)(fast, frames, t)
            if a[0] == "batch":
                batched += 1
                a = ("ok", a[1])
            b = []
            for f_arb, f_data, _ in frames:
                r = _answer(ref, f_arb, f_data, t, True)
                if r[0] != "ok":
                    b = r
                    break
                b.extend(r[1] or [])
            else:
                b = ("ok", b)
            assert a == b, (seed, step, frames, a, b)
            assert _state(fast, pf) == _state(ref, pr), (seed, step, frames)
            return a
        fields = bool(rng.integers(0, 4))           # mostly the inline host's fields path
        a = _answer(fast, arb, data, t, fields)
        b = _answer(ref, arb, data, t, fields)
        assert a == b, (seed, step, hex(arb), data, a, b)
        assert _state(fast, pf) == _state(ref, pr), (seed, step, hex(arb), data)
        return a

    def timers():
        pf.advance_to(t)
        pr.advance_to(t)
        while True:
            te = fast.next_timer_s()
            assert te == ref.next_timer_s(), (seed, step)
            if te > t:
                return
            a = [(m.arbitration_id, bytes(m.data)) for m in fast.on_timer(t)]
            b = [(m.arbitration_id, bytes(m.data)) for m in ref.on_timer(t)]
            assert a == b, (seed, step)

    def sdo_write(node_id, index, sub, raw):
        for emu in (fast, ref):
            try:
                emu.local_node(node_id).set_data(index, sub, raw)
            except Exception:  # noqa: BLE001 - an abort on both (compared below)
                pass
        assert _state(fast, pf) == _state(ref, pr), (seed, step, "sdo", hex(index))

    timers()
    for node, tx in ((1, [codec.TPDO1_MAP, codec.TPDO2_MAP]),
                     # node 2: every object the compiled SYNC packs, one TPDO every other SYNC
                     # (every_sync: at every SYNC)
                     (2, [((0x6041, 0, 16), (0x6074, 0, 16), (0x6064, 0, 32)),
                          ((0x606C, 0, 32), (0x6061, 0, 8), (0x603F, 0, 16), (0x1001, 0, 8))])):
        _map((fast, ref), node, 0x1600, codec.RPDO1_MAP, codec.rpdo_id(node, 1), 1)
        for k, entries in enumerate(tx):
            _map((fast, ref), node, 0x1A00 + k, entries, codec.tpdo_id(node, k + 1),
                 1 if every_sync else 1 + k * (node - 1))
    for node in (1, 2):
        sdo_write(node, 0x6060, 0, bytes([codec.MODE_CST]))
        sdo_write(node, 0x6072, 0, int(rng.integers(200, 3000)).to_bytes(2, "little"))
        sdo_write(node, 0x1017, 0, (20).to_bytes(2, "little"))
    both(0, bytes([1, 0]))                          # NMT start every node
    cws = {1: codec.CW_SHUTDOWN, 2: codec.CW_SHUTDOWN}
    for k in range(400):
        t += 0.002
        timers()
        r = rng.random()
        # faults and other events (about one every 12 SYNCs)
        r = rng.random() * 2
        node = int(rng.integers(1, 3))
        if r < 0.02:
            code, persistent = int(rng.choice([0x2310, 0x4310, 0x8130])), bool(rng.random() < 0.3)
            for emu in (fast, ref):
                emu.inject_fault(node, code, persistent=persistent)
        elif r < 0.03:
            for emu in (fast, ref):
                emu.clear_fault_cause(node)
        elif r < 0.04:
            for emu in (fast, ref):
                emu.set_silent(node, True)
        elif r < 0.05:
            sdo_write(node, 0x6072, 0, int(rng.integers(0, 4000)).to_bytes(2, "little"))
        elif r < 0.055:
            sdo_write(node, 0x6060, 0, bytes([int(rng.choice([0, codec.MODE_CST]))]))
        elif r < 0.06:
            both(0, bytes([int(rng.choice([0x01, 0x02, 0x80, 0x81, 0x82])), int(rng.choice([0, node]))]))
        elif r < 0.065:
            for p in (pf, pr):
                p.set_stuck(node - 1, True)
        elif rng.random() < 0.3:                    # a disconnected drive or a stuck joint comes back,
            for emu, p in ((fast, pf), (ref, pr)):  # the master starts a stopped one, sets CST again
                emu.set_silent(node, False)
                p.set_stuck(node - 1, False)
            if fast.nmt_state(node) != "OPERATIONAL":
                both(0, bytes([1, node]))
            if fast.local_node(node).data_store[0x6060][0] != bytes([codec.MODE_CST]):
                sdo_write(node, 0x6060, 0, bytes([codec.MODE_CST]))
        # the controlwords: the walk to OPERATION ENABLED, mostly 'enable operation'
        for n in (1, 2):
            s = fast.state(n)
            if s == State.FAULT:
                cws[n] = codec.CW_FAULT_RESET if cws[n] != codec.CW_FAULT_RESET else codec.CW_DISABLE_VOLTAGE
            elif s == State.SWITCH_ON_DISABLED:
                cws[n] = codec.CW_SHUTDOWN
            elif s == State.READY_TO_SWITCH_ON:
                cws[n] = codec.CW_SWITCH_ON
            else:
                cws[n] = codec.CW_ENABLE_OPERATION
            x = rng.random()
            cw = cws[n]
            if x < 0.005:
                cw = codec.CW_QUICK_STOP
            elif x < 0.01:
                cw = int(rng.integers(0, 0x10000))
            elif x < 0.015:
                cw = codec.CW_SHUTDOWN
            elif x < 0.02:
                cw = codec.CW_SWITCH_ON             # 'disable operation' in OPERATION ENABLED
            tq = int(rng.integers(-0x8000, 0x8000)) if rng.random() < 0.2 else int(rng.normal(0, 800))
            tq = max(-0x8000, min(0x7FFF, tq))
            data = codec.pack_rpdo1(cw, tq)
            if rng.random() < 0.005:
                data = data[:3]                    # shorter than its mapping: EMCY 0x8210
            if rng.random() < 0.95:
                both(codec.rpdo_id(n, 1), data)
        # the plant's measured state anywhere at this SYNC, now and then (both plants alike; put
        # back afterwards, so the physics goes on from finite values)
        saved = [(p, p._q.copy(), p._qd.copy(), p._tau_applied.copy()) for p in (pf, pr)]
        r = rng.random()
        j = int(rng.integers(0, 2))
        if r < 0.1:
            which = int(rng.integers(0, 6))
            q = [rng.normal(0, 3), rng.normal(0, 1e6), (int(rng.integers(-50, 50)) + 0.5) * 2 * math.pi / 16384,
                 rng.normal(0, 1e9), 0.0, -0.0][which]
            qd = rng.normal(0, 10) if rng.random() < 0.8 else rng.normal(0, 1e12)
            tau = rng.normal(0, 3) if rng.random() < 0.8 else rng.normal(0, 1e5)
            for p in (pf, pr):
                p._q[j], p._qd[j], p._tau_applied[j] = q, qd, tau
        elif r < 0.12:
            bad = [math.nan, math.inf, -math.inf][int(rng.integers(0, 3))]
            arr = int(rng.integers(0, 3))
            for p in (pf, pr):
                [p._q, p._qd, p._tau_applied][arr][j] = bad
        both(codec.SYNC_ID)
        for p, q, qd, tau in saved:
            p._q[:], p._qd[:], p._tau_applied[:] = q, qd, tau
    return batched if batch else fast.fast_syncs


def _answer_batch(emu, frames, t):
    """A cycle's frames to ``emu`` in one ``on_fields_batch`` call, one by one where it declines:
    ``("batch" or "ok", the answers of all, in order)``, or the error raised."""
    try:
        r = emu.on_fields_batch(frames, t)
    except Exception as err:  # noqa: BLE001 - the two paths must raise the same error
        return ("raised", type(err).__name__, str(err))
    return ("batch", r) if r is not None else _one_by_one(emu, frames, t)


def _answer_on_batch(emu, frames, t):
    """A cycle's frames to ``emu`` in one ``on_batch`` call where they are 4-byte RPDOs then the
    SYNC, else (or where it declines) one by one: as :func:`_answer_batch`."""
    if len(frames) < 2 or any(len(d) != 4 for _, d, _ in frames[:-1]):
        return _one_by_one(emu, frames, t)
    arbs = tuple(a for a, _, _ in frames)
    payloads = np.frombuffer(b"".join(d for _, d, _ in frames[:-1]), dtype=np.uint8).reshape(-1, 4).copy()
    out_arb = np.full(8, -7, dtype=np.int64)
    out = np.full((8, 9), 0xEE, dtype=np.uint8)
    before = (out_arb.copy(), out.copy())
    try:
        r = emu.on_batch(arbs, payloads, t, out_arb, out)
    except Exception as err:  # noqa: BLE001 - the two paths must raise the same error
        return ("raised", type(err).__name__, str(err))
    if r is None:
        assert (out_arb == before[0]).all() and (out == before[1]).all()     # nothing written
        return _one_by_one(emu, frames, t)
    return ("batch", [(int(out_arb[k]), bytes(out[k, 1:1 + out[k, 0]])) for k in range(r)])


def _one_by_one(emu, frames, t):
    try:
        out = []
        for arb, data, _ in frames:
            out.extend(emu.on_fields(arb, data, None, t) or [])
        return ("ok", out)
    except Exception as err:  # noqa: BLE001 - the two paths must raise the same error
        return ("raised", type(err).__name__, str(err))


def test_a_cycle_served_by_on_batch_equals_its_frames_one_by_one():
    """``Cia402Emulator.on_batch`` (the driver's RPDO bytes in, the TPDOs' bytes written to its
    reply buffer, what decides it kept until ``_generation`` moves) against the frames served one
    by one, over a random session with faults, SDO writes of the max torque and the mode, NMT
    commands, disconnected drives and stuck joints: the same answers and the same drives' state
    (object dictionary, PDO buffers, counters) after every cycle."""
    served = _session(300, batch="on_batch", every_sync=True)
    assert served > 150, f"on_batch served only {served} cycles: the comparison saw too little of it"


@pytest.mark.parametrize("seed", range(4))
def test_a_cycle_served_in_one_call_equals_its_frames_one_by_one(seed):
    """``Cia402Emulator.on_fields_batch`` (an inline host's cycle: the RPDOs then the SYNC in one
    call) against the frames served one by one, over the random sessions with faults: the same
    answers and the same drives' state after every cycle."""
    served = _session(100 + seed, batch=True)
    assert served > 200, f"on_fields_batch served only {served} cycles: the comparison saw too little of it"


@pytest.mark.parametrize("batch", (False, True))
def test_every_tpdo_packed_at_once_equals_the_python_path(batch):
    """Every drive's TPDOs sent at every SYNC: the compiled SYNC packs them all with one struct
    (the layout ``_layout`` gives the compiled SYNC); the same frames and PDO buffers as the Python path, over a random session
    with faults (each cycle in one ``on_fields_batch`` call, or frame by frame)."""
    served = _session(200 + batch, batch=batch, every_sync=True)
    assert served > 100, f"only {served} SYNCs or cycles served fast: the comparison saw too little of it"


def test_a_cycle_in_one_call_declines_what_is_not_a_cycle():
    """Not RPDOs then one SYNC, or an RPDO canopen's network must deliver: None, nothing changed."""
    (fast, pf), (ref, pr) = _pair()
    fast.on_timer(0.0)
    ref.on_timer(0.0)
    for emu in (fast, ref):
        _map([emu], 1, 0x1600, codec.RPDO1_MAP, codec.rpdo_id(1, 1), 1)
        _map([emu], 1, 0x1A00, codec.TPDO1_MAP, codec.tpdo_id(1, 1), 1)
        emu.on_fields(0, bytes([1, 0]), None, 0.0)
    rpdo = (codec.rpdo_id(1, 1), codec.pack_rpdo1(codec.CW_SHUTDOWN, 0), None)
    sync = (codec.SYNC_ID, b"", None)
    sdo = (0x601, bytes([0x40, 0x41, 0x60, 0, 0, 0, 0, 0]), None)
    for frames in ([rpdo], [sync, rpdo], [rpdo, sdo, sync], [rpdo, (codec.SYNC_ID, b"", 0)], [sync, sync]):
        assert fast.on_fields_batch(frames, 0.0) is None, frames
        assert _state(fast, pf) == _state(ref, pr), frames
    # another subscriber of the RPDO's COB-ID (canopen's network delivers it): one by one
    fast.network.subscribe(rpdo[0], lambda *a: None)
    ref.network.subscribe(rpdo[0], lambda *a: None)
    assert fast.on_fields_batch([rpdo, sync], 0.0) is None
    assert _state(fast, pf) == _state(ref, pr)
    # a cycle: served, the same as one by one
    fast2, ref2 = _pair()
    for emu, _p in (fast2, ref2):
        emu.on_timer(0.0)
        for node in (1, 2):
            _map([emu], node, 0x1600, codec.RPDO1_MAP, codec.rpdo_id(node, 1), 1)
            _map([emu], node, 0x1A00, codec.TPDO1_MAP, codec.tpdo_id(node, 1), 1)
        emu.on_fields(0, bytes([1, 0]), None, 0.0)
    a = fast2[0].on_fields_batch([rpdo, (codec.rpdo_id(5, 1), b"\x00\x00\x00\x00", None), sync], 0.002)
    b = (ref2[0].on_fields(*rpdo, 0.002) or []) + (ref2[0].on_fields(codec.rpdo_id(5, 1), b"\x00" * 4, None, 0.002) or []) \
        + (ref2[0].on_fields(*sync, 0.002) or [])
    assert a == b and a
    assert _state(*fast2) == _state(*ref2)
    # a message left in the outbox before the call (the drives' timed events run, not taken):
    # handed over first, as a pair, as one by one, also by the compiled SYNC
    t = 0.002
    for emu, _p in (fast2, ref2):
        for node in (1, 2):
            emu.local_node(node).set_data(0x6060, 0, bytes([codec.MODE_CST]))
        emu.local_node(1).set_data(0x1017, 0, (20).to_bytes(2, "little"))      # heartbeats every 20 ms
    for cw in (codec.CW_SHUTDOWN, codec.CW_SWITCH_ON, codec.CW_ENABLE_OPERATION, codec.CW_ENABLE_OPERATION):
        t += 0.002
        frames = [(codec.rpdo_id(node, 1), codec.pack_rpdo1(cw, 100), None) for node in (1, 2)] + [sync]
        assert fast2[0].on_fields_batch(frames, t) == ref2[0].on_fields_batch(frames, t)
    assert fast2[0].state(1) == State.OPERATION_ENABLED and fast2[0].fast_syncs == 1
    t = 0.05
    for emu, p in (fast2, ref2):
        p.advance_to(t)
        emu._timers(t)
        assert any(type(m) is not tuple for m in emu._out.frames)
    frames = [(codec.rpdo_id(node, 1), codec.pack_rpdo1(codec.CW_ENABLE_OPERATION, -50), None) for node in (1, 2)]
    frames.append(sync)
    a = fast2[0].on_fields_batch(frames, t)
    b = [m for f in frames for m in ref2[0].on_fields(*f, t) or []]
    assert a == b and len(a) > 1 and all(type(m) is tuple for m in a), (a, b)
    assert fast2[0].fast_syncs == 2
    assert _state(*fast2) == _state(*ref2)


@pytest.mark.parametrize("seed", range(6))
def test_compiled_sync_equals_the_python_path(seed):
    served = _session(seed)
    assert served > 100, f"the compiled SYNC served only {served} SYNCs: the comparison saw too little of it"


def test_the_compiled_path_declines_what_it_does_not_cover():
    """A drive in another state, a mapping it does not know, a plant with sensor noise: the
    Python path (and the same bytes)."""
    (fast, pf), _ = _pair()
    assert all(d.fast is None for d in fast._drives.values())       # not OPERATIONAL yet
    model = load_model(ROBOT_2R)
    noisy = SimulatedPlant(model, q0=np.array([0.3, -0.4]), position_noise_std_rad=1e-4,
                           rng=np.random.default_rng(1))
    emu = Cia402Emulator([Cia402DriveConfig(1, 0, UNITS[0], MAPS[0])])
    emu.bind(noisy)
    emu.on_timer(0.0)
    _map([emu], 1, 0x1600, codec.RPDO1_MAP, codec.rpdo_id(1, 1), 1)
    _map([emu], 1, 0x1A00, codec.TPDO1_MAP, codec.tpdo_id(1, 1), 1)
    emu.on_fields(0, bytes([1, 1]), None, 0.0)
    assert emu._drives[1].fast is not None and emu._drives[1].fast.quantum is None
    assert emu._sync_fast(0.0) is False


# ---------------------------------------------------------------------------------------------
# the driver: the batch exchange (CanTransport.serve_batch -> Cia402Emulator.on_batch) against
# the frames sent and read one by one
# ---------------------------------------------------------------------------------------------
def _fb(fb):
    info = {k: (np.asarray(v).tobytes() if isinstance(v, np.ndarray) else v) for k, v in fb.info.items()}
    return (fb.t_s, fb.position_rad.tobytes(), fb.velocity_rad_s.tobytes(), fb.torque_nm.tobytes(),
            np.asarray(fb.fault).tobytes(), np.asarray(fb.fresh).tobytes(), np.asarray(fb.enabled).tobytes(),
            sorted(info.items()))


def _call(f):
    try:
        return ("ok", f())
    except Exception as err:  # noqa: BLE001 - both paths must raise the same error
        return ("error", type(err).__name__, str(err))


def _driver_session(batch: bool, seed: int, served: list) -> list:
    """A seeded session of cycles of a CiA 402 driver and its emulated drives (inline, lock-step
    clock) with faults: drive faults and fault resets, a drive disconnected for a while, a
    drive's late or foreign TPDO waiting on the bus, torques beyond the max torque, a non-finite
    torque, a max torque changed by SDO; every Feedback or error, the plant and the drives."""
    from controller.clock import LockstepClock
    from drivers.base import Command
    from drivers.registry import build_driver
    from dynamics.config import Section
    from test_cia402 import _driver_section

    clock = LockstepClock()
    sec = _driver_section(reply_timeout_s=0.001, emulator={"serve": "inline", "brake_kd_nm_s_per_rad": 50.0,
                                                            "max_brake_s": 0.02})
    # mappings whose every constant shows in the values (offsets, a sign, an efficiency)
    joints = [{**js, "offset_rad": off, "sign": sign, "efficiency": eff} for js, off, sign, eff
              in zip(sec.data["joints"], (0.25, -1.5), (-1, 1), (0.9, 1.0))]
    d = build_driver(Section({**sec.data, "joints": joints}, None, "driver"), now=clock.now, model=load_model(ROBOT_2R))
    drv, emu = d.inner, d.emulators[0]
    assert drv._off == [0.25, -1.5]
    if not batch:
        drv._batch_arbs = None
    orig = emu.on_batch

    def counted(arbs, payloads, t_s, out_arb, out):
        r = orig(arbs, payloads, t_s, out_arb, out)
        served[0] += r is not None
        if r is not None and served[0] % 5 == 0:
            # now and then the TPDOs in another order (the same frames, as the Python path
            # handles them): the driver reads them frame by frame
            out_arb[:r] = out_arb[:r][::-1].copy()
            out[:r] = out[:r][::-1].copy()
        return r
    emu.on_batch = counted
    decoded = drv._batch_struct

    class _Counted:
        def unpack(self, raw):
            served[1] += 1
            return decoded.unpack(raw)
    drv._batch_struct = _Counted()
    rng = np.random.default_rng(seed)
    plant = emu.plant
    out = [_call(lambda: _fb(d.enable()))]
    try:
        for k in range(250):
            clock.advance(0.002)
            r = rng.random()
            node = int(rng.integers(1, 3))
            if r < 0.02:
                emu.inject_fault(node, int(rng.choice([0x2310, 0x4310])))
            elif r < 0.04:
                emu.set_silent(node, True)
            elif r < 0.14:
                emu.set_silent(node, False)
            elif r < 0.16:
                # a TPDO of ours (late, or another node's) waiting on the bus
                drv._buses[0]._bus.device_end.deliver(codec.tpdo_id(node, int(rng.integers(1, 3))),
                                                      bytes(rng.integers(0, 256, 8, dtype=np.uint8)))
            elif r < 0.17:
                out.append(("sdo", _call(lambda: drv.nodes[node - 1].sdo.download(
                    0x6072, 0, int(rng.integers(100, 3000)).to_bytes(2, "little")))))
            # (read directly: the emulator's accessors would settle what the batch path owes)
            states = [dd.state for dd in emu._drives.values()]
            if (any(s != State.OPERATION_ENABLED for s in states) and State.FAULT_REACTION_ACTIVE not in states
                    and rng.random() < 0.2):
                # (a fault reset waits on the wall clock: not while a fault reaction runs)
                for n in (1, 2):            # reconnected first (an enable waits for every drive)
                    emu.set_silent(n, False)
                out.append(("reset", _call(lambda: _fb(d.fault_reset()))))
                out.append(("enable", _call(lambda: _fb(d.enable()))))
                continue
            tau = rng.normal(0.0, 0.6, 2)
            if rng.random() < 0.01:
                tau[int(rng.integers(0, 2))] = math.nan
            out.append(_call(lambda: _fb(d.cycle(Command(tau)))))
            # the drives every 4th cycle (what the batch path owes them meanwhile: several cycles')
            out.append((plant._cmd.tobytes(), plant._q.tobytes(), plant.t_s, drv._buses[0].frames_sent,
                        drv._buses[0].frames_received, _state(emu, plant) if k % 4 == 3 else None))
    finally:
        d.close()
    return out


def test_the_drivers_batch_exchange_equals_frame_by_frame():
    """``Cia402Driver`` with the batch exchange (one call a cycle: the RPDOs' bytes the encoder
    wrote handed to ``Cia402Emulator.on_batch``, the TPDOs written to the driver's reply buffer)
    against the same driver sending and reading frame by frame, over a seeded session with
    faults: the same Feedbacks and errors, the same plant, drives and bus counters, and most
    cycles served by the batch."""
    served = [0, 0]
    ref = _driver_session(False, 7, [0, 0])
    got = _driver_session(True, 7, served)
    assert len(ref) == len(got)
    for i, (a, b) in enumerate(zip(ref, got)):
        assert repr(a) == repr(b), f"step {i}"
    # cycles the batch served, and how many of them the driver decoded in one pass (the others:
    # replies in another order, read frame by frame)
    assert served[0] > 100 and 0.6 * served[0] < served[1] < served[0], served
