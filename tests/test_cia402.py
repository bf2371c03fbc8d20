"""CiA 402 cyclic synchronous torque: codec vs the canopen stack, driver vs emulator, faults, and
canopen's own BaseNode402 as an independent client of the emulated drive."""

from __future__ import annotations

import math
import re
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.integrate import solve_ivp

import canopen
from canopen.profiles.p402 import BaseNode402, State402

from controller.app.run import build_run, load_run
from drivers.base import Command
from drivers.busload import BusSpec, cia402_budget, cia402_flows
from drivers.cia402 import FAULT_HEARTBEAT_LOST, eds_path
from drivers.codecs import cia402 as codec
from drivers.codecs.cia402 import Cia402Units, State
from drivers.registry import build_driver
from drivers.sim.cia402_emulator import Cia402DriveConfig, Cia402Emulator
from drivers.sim.emulators import EmulatorHost
from drivers.sim.plant import SimulatedPlant
from dynamics import load_model
from dynamics.config import Section
from dynamics.errors import CommsTimeoutError, DecodeError, DeviceFaultError, DriverError

ROOT = Path(__file__).resolve().parents[1]
ROBOT_2R = ROOT / "hil_configs" / "robots" / "seed003_2r.toml"
RUN = ROOT / "hil_configs" / "runs" / "3rrr_circle_cia402.toml"
EDS = eds_path(None)
UNITS = Cia402Units(counts_per_rev=1 << 20, rated_torque_nm=0.5)
GEAR = 6.0


# ---------------------------------------------------------------------------
# codec against canopen's own PDO maps, state table, EMCY parser
# ---------------------------------------------------------------------------
_OD = {}


def _canopen_map(kind: str, layout):
    key = (kind, layout)
    if key in _OD:
        return _OD[key]
    node = canopen.RemoteNode(5, canopen.import_od(EDS, 5))
    canopen.Network().add_node(node)
    maps = node.rpdo if kind == "rpdo" else node.tpdo
    maps.read(from_od=True)
    pm = maps[1]
    pm.clear()
    for idx, sub, bits in layout:
        pm.add_variable(idx, sub, bits)
    _OD[key] = pm
    return pm


@settings(max_examples=200, deadline=None)
@given(cw=st.integers(0, 0xFFFF), tq=st.integers(-0x8000, 0x7FFF))
def test_rpdo1_bytes_equal_canopens_encoding(cw, tq):
    pm = _canopen_map("rpdo", codec.RPDO1_MAP)
    pm[0x6040].raw = cw
    pm[0x6071].raw = tq
    assert codec.encode_rpdo1(cw, tq) == bytes(pm.data)
    assert codec.decode_rpdo1(bytes(pm.data)) == (cw, tq)


@settings(max_examples=200, deadline=None)
@given(data1=st.binary(min_size=8, max_size=8), data2=st.binary(min_size=5, max_size=5))
def test_tpdo_decoding_equals_canopens(data1, data2):
    pm1 = _canopen_map("tpdo", codec.TPDO1_MAP)
    pm1.on_message(pm1.cob_id, bytearray(data1), 0.0)
    sw, pos, tq = codec.decode_tpdo1(data1)
    assert (sw, pos, tq) == (pm1[0x6041].raw, pm1[0x6064].raw, pm1[0x6077].raw)
    assert codec.encode_tpdo1(sw, pos, tq) == data1
    pm2 = _canopen_map("tpdo", codec.TPDO2_MAP)
    pm2.on_message(pm2.cob_id, bytearray(data2), 0.0)
    vel, mode = codec.decode_tpdo2(data2)
    assert (vel, mode) == (pm2[0x606C].raw, pm2[0x6061].raw)
    assert codec.encode_tpdo2(vel, mode) == data2


def test_every_statusword_decodes_as_canopens_state_table():
    names = {s: s.name.replace("_", " ") for s in State}
    for sw in range(0x10000):
        ours = codec.decode_state(sw)
        theirs = next((n for n, (m, v) in State402.SW_MASK.items() if sw & m == v), "UNKNOWN")
        assert names[ours] == theirs, hex(sw)
    for s in State:
        if s != State.UNKNOWN:
            assert codec.decode_state(codec.statusword_for(s)) == s


def test_controlword_commands_match_canopens_table():
    assert codec.controlword_command(State402.CW_SHUTDOWN) == "shutdown"
    assert codec.controlword_command(State402.CW_SWITCH_ON) == "switch_on"
    assert codec.controlword_command(State402.CW_OPERATION_ENABLED) == "enable_operation"
    assert codec.controlword_command(State402.CW_QUICK_STOP) == "quick_stop"
    assert codec.controlword_command(State402.CW_DISABLE_VOLTAGE) == "disable_voltage"
    assert codec.controlword_command(State402.CW_SWITCH_ON_DISABLED) == "fault_reset"


@given(code=st.integers(0, 0xFFFF), reg=st.integers(0, 0xFF), vendor=st.binary(max_size=5))
def test_emcy_matches_canopens_consumer(code, reg, vendor):
    data = codec.encode_emcy(code, reg, vendor)
    cons = canopen.emcy.EmcyConsumer()
    cons.on_emcy(0x85, data, 0.0)
    err = cons.log[-1]
    em = codec.decode_emcy(data)
    assert (em.code, em.register, em.vendor) == (err.code, err.register, err.data)


def test_codec_refuses_bad_values():
    with pytest.raises(DriverError):
        codec.encode_rpdo1(0x10000, 0)
    with pytest.raises(DriverError):
        codec.encode_rpdo1(0, 0x8000)
    with pytest.raises(DecodeError):
        codec.decode_tpdo1(b"\0" * 7)
    with pytest.raises(DriverError):
        UNITS.torque_permille(math.nan)
    with pytest.raises(DriverError):
        Cia402Units(0, 1.0)


def test_units_convert_counts_and_per_mille():
    u = Cia402Units(counts_per_rev=4096, rated_torque_nm=2.0)
    assert u.position_rad(4096) == pytest.approx(2 * math.pi)
    assert u.position_counts(-2 * math.pi) == -4096
    assert u.velocity_rad_s(2048) == pytest.approx(math.pi)
    assert u.torque_nm(500) == pytest.approx(1.0)
    assert u.torque_permille(1.0) == (500, False)
    assert u.torque_permille(5.0, 2000) == (2000, True)
    assert u.rated_torque_mnm == 2000


# ---------------------------------------------------------------------------
# driver against the emulated drives (lock-step clock, served inline)
# ---------------------------------------------------------------------------
class _Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def _driver_section(n=2, **extra):
    joints = [{"node_id": j + 1, "counts_per_rev": UNITS.counts_per_rev, "rated_torque_nm": UNITS.rated_torque_nm,
               "gear_ratio": GEAR, "torque_limit_nm": 1.0, "name": f"j{j}"} for j in range(n)]
    data = {"type": "sim_cia402_can", "reply_timeout_s": 0.5, "bus": {"interface": "virtual", "channel": "x"},
            "emulator": {"serve": "inline", "brake_kd_nm_s_per_rad": 50.0}, "joints": joints,
            "plant": {"viscous": 0.0, "coulomb": 0.0, "q0": [0.3, -0.4]}}
    data.update(extra)
    return Section(data, None, "driver")


@pytest.fixture
def sim():
    clock = _Clock()
    model = load_model(ROBOT_2R)
    d = build_driver(_driver_section(), now=clock, model=model)
    yield d, clock, model
    d.close()


def test_enable_configures_the_drive_by_sdo_and_reaches_operation_enabled(sim):
    d, clock, _ = sim
    fb = d.enable()
    assert fb.enabled.all() and fb.fresh.all() and not fb.fault.any()
    assert np.allclose(fb.position_rad, [0.3, -0.4], atol=1e-5)
    emu = d.emulators[0]
    for node_id in (1, 2):
        assert emu.state(node_id) == State.OPERATION_ENABLED
        assert emu.nmt_state(node_id) == "OPERATIONAL"
        ds = emu.local_node(node_id).data_store
        # what canopen's SDO client wrote, as canopen's SDO server stored it
        assert ds[0x6060][0] == bytes([10])
        assert int.from_bytes(ds[0x6072][0], "little") == 2000         # 1 N m of 0.5 N m rated
        assert int.from_bytes(ds[0x1017][0], "little") == 50
        assert int.from_bytes(ds[0x1016][1], "little") == (127 << 16) | 150
        assert ds[0x1600][0] == bytes([2]) and ds[0x1A00][0] == bytes([3]) and ds[0x1A01][0] == bytes([2])
        assert int.from_bytes(ds[0x1600][1], "little") == 0x60400010
        assert int.from_bytes(ds[0x1600][2], "little") == 0x60710010
        assert int.from_bytes(ds[0x1A00][2], "little") == 0x60640020
        assert int.from_bytes(ds[0x1A01][2], "little") == 0x60610008
        assert int.from_bytes(ds[0x1401][1], "little") & 0x80000000          # RPDO2 disabled
        assert int.from_bytes(ds[0x1800][2], "little") == 1                   # TPDO1 on every SYNC


def test_constant_torque_motion_matches_an_independent_integration(sim):
    """1 s of constant joint torques through the PDOs: positions and velocities read back through
    the TPDOs equal a scipy solve_ivp integration of the model (no friction) to 1e-4."""
    d, clock, model = sim
    d.enable()
    tau = np.array([0.6, -0.25])
    fb = None
    for k in range(500):
        clock.t += 0.002
        fb = d.cycle(Command(tau))
    assert fb.fresh.all() and fb.enabled.all() and not fb.fault.any()
    # the torque actually applied is the per-mille quantised one
    per_mille = np.round(tau / (GEAR * UNITS.nm_per_permille))
    tau_q = per_mille * GEAR * UNITS.nm_per_permille
    assert np.allclose(fb.torque_nm, tau_q, atol=1e-12)
    # zero torque (gravity only) until the first cycle's SYNC at t = 0.002 s, then tau_q
    def f(tq):
        return lambda t, x: np.concatenate([x[2:], model.forward_dynamics(x[:2], x[2:], tq)])
    x1 = solve_ivp(f(np.zeros(2)), (0.0, 0.002), [0.3, -0.4, 0.0, 0.0], rtol=1e-10, atol=1e-12).y[:, -1]
    sol = solve_ivp(f(tau_q), (0.002, clock.t), x1, rtol=1e-10, atol=1e-12)
    q_ref, qd_ref = sol.y[:2, -1], sol.y[2:, -1]
    assert np.abs(q_ref - [0.3, -0.4]).max() > 0.05          # it moved
    assert np.allclose(fb.position_rad, q_ref, atol=1e-4)
    assert np.allclose(fb.velocity_rad_s, qd_ref, atol=1e-3)


def test_torque_is_clamped_to_the_drives_max_torque(sim):
    d, clock, _ = sim
    d.enable()
    for _ in range(2):          # torque actual values are sampled at the SYNC, before the new target
        clock.t += 0.001
        fb = d.cycle(Command(np.array([100.0, -100.0])))
    assert fb.info["saturated"] == 2
    assert np.allclose(fb.torque_nm, [6.0, -6.0])            # 2000 per mille * 0.5 N m * gear 6


def test_non_finite_or_gains_are_refused_before_anything_is_sent(sim):
    d, clock, _ = sim
    d.enable()
    with pytest.raises(DriverError):
        d.cycle(Command(np.array([np.nan, 0.0])))
    with pytest.raises(DriverError):
        d.cycle(Command(np.zeros(2), kp_nm_per_rad=np.ones(2), position_rad=np.zeros(2)))


def _run(d, clock, n, tau=(0.0, 0.0), dt=0.002):
    fb = None
    for _ in range(n):
        clock.t += dt
        fb = d.cycle(Command(np.asarray(tau, dtype=float)))
    return fb


def test_drive_fault_with_emcy_brakes_and_reports_the_code(sim):
    d, clock, _ = sim
    d.enable()
    fb = _run(d, clock, 150, (0.6, 0.0))
    v0 = abs(fb.velocity_rad_s[0])
    assert v0 > 0.1
    d.emulators[0].inject_fault(1, 0x2310)
    fb = _run(d, clock, 1, (0.6, 0.0))
    assert fb.fault[0] == 0x2310 and fb.fault[1] == 0
    assert not fb.enabled[0] and fb.enabled[1]
    assert fb.info["emcy"] == 1 and fb.info["state"][0] == State.FAULT_REACTION_ACTIVE
    # the drive's own fault reaction (0x605E = 2) brakes the joint, then FAULT
    fb = _run(d, clock, 600, (0.6, 0.0))
    assert State(fb.info["state"][0]) == State.FAULT
    assert d.plant._tau_ff[0] == 0.0 and d.plant._kd[0] == 0.0     # power stage off after the reaction
    # enable refuses a faulted drive; fault_reset acknowledges, then enable works
    with pytest.raises(DeviceFaultError, match="0x2310"):
        d.enable()
    d.fault_reset()
    assert d.emulators[0].state(1) == State.SWITCH_ON_DISABLED
    fb = d.enable()
    assert fb.enabled.all() and not fb.fault.any()


def test_fault_reset_is_refused_while_the_cause_persists(sim):
    d, clock, _ = sim
    d.enable()
    d.emulators[0].inject_fault(2, 0x4210, persistent=True)
    _run(d, clock, 5)
    with pytest.raises(DeviceFaultError):
        d.fault_reset(timeout_s=0.05)
    d.emulators[0].clear_fault_cause(2)
    d.fault_reset()
    assert d.emulators[0].state(2) == State.SWITCH_ON_DISABLED


def test_missing_drive_heartbeat_is_a_fault(sim):
    d, clock, _ = sim
    d.enable()
    fb = _run(d, clock, 100)
    assert not fb.fault.any() and (fb.info["heartbeat_age_s"] <= 0.05 + 1e-9).all()
    d.emulators[0].set_silent(2)
    d.inner.reply_timeout_s = 0.002
    fb = _run(d, clock, 100)                                  # 0.2 s > 3 heartbeat periods
    assert fb.fault[1] == FAULT_HEARTBEAT_LOST and fb.fault[0] == 0
    assert not fb.fresh[1]


def test_a_rebooted_drive_reads_off_and_a_fault_reset_names_it(sim):
    """Node 2 power-cycles mid-run: the cycle after its boot-up message reads it not enabled (its
    TPDOs stop: PRE-OPERATIONAL); a fault reset without starting it again times out naming it and
    its NMT state; clear_faults configures and starts it, and enable brings it back."""
    d, clock, _ = sim
    d.enable()
    _run(d, clock, 10)
    d.emulators[0].reboot(2)
    fb = _run(d, clock, 1)
    assert fb.enabled.tolist() == [True, False] and fb.info["nmt_state"][1] == 0     # BOOT-UP
    with pytest.raises(CommsTimeoutError, match=r"fault reset: no TPDO from j1 \(NMT BOOT-UP\) within 0.05 s"):
        d.inner.fault_reset(timeout_s=0.05)
    d.clear_faults()
    fb = d.enable()
    assert fb.enabled.all() and fb.fresh.all() and d.emulators[0].nmt_state(2) == "OPERATIONAL"


def test_one_tpdo_lost_makes_only_its_drive_not_fresh(sim):
    """A cycle in which one TPDO of one drive does not arrive (TPDO2 of node 2 lost on the bus):
    that drive is not fresh, the other is, one TPDO is counted missing; the next whole cycle is
    fresh again."""
    d, clock, _ = sim
    d.enable()
    emu = d.emulators[0]
    lost = codec.tpdo_id(2, 2)
    drop = [True]
    batch, one = emu.on_fields_batch, emu.on_fields

    def keep(r):
        return r if r is None or not drop[0] else [p for p in r if p[0] != lost]

    emu.on_fields_batch = lambda frames, t: keep(batch(frames, t))
    emu.on_fields = lambda arb, data, remote, t: keep(one(arb, data, remote, t))
    d.inner.reply_timeout_s = 0.001
    fb = _run(d, clock, 3)
    assert fb.fresh.tolist() == [True, False] and fb.info["missing"] == 1
    drop[0] = False
    fb = _run(d, clock, 1)
    assert fb.fresh.all() and fb.info["missing"] == 0


def test_enable_rides_out_a_lost_nmt_start_and_a_lost_sdo_response(sim):
    """Neither NMT nor a lost SDO response is acknowledged on the bus: node 2 does not hear its
    Start Remote Node (it stays pre-operational, without PDOs), and the response to its first
    write of the mode of operation (0x6060) is lost.  The enable used to fail on either ("No SDO
    response received"; "not OPERATION ENABLED ... (no TPDO)"); the SDO request is now sent again
    and so is the NMT start, while the drive stays silent in the walk."""
    d, clock, _ = sim
    emu = d.emulators[0]
    batch, one = emu.on_fields_batch, emu.on_fields
    lost = {"nmt": 0, "sdo": 0}

    def deliver(frames):
        out = []
        for arb, data, *rest in frames:
            if arb == 0 and bytes(data[:2]) == b"\x01\x02" and not lost["nmt"]:
                lost["nmt"] += 1            # node 2 does not hear it
                continue
            out.append((arb, data, *rest))
        return out

    def keep(frames, r):
        if r is None:
            return r
        wrote_mode = any(arb == 0x602 and bytes(data[1:4]) == b"\x60\x60\x00" and data[0] & 0xE0 == 0x20
                         for arb, data, *_ in frames)
        if wrote_mode and not lost["sdo"]:
            lost["sdo"] += 1
            return [p for p in r if p[0] != 0x582]
        return r

    def on_batch(frames, t):
        frames = deliver(frames)
        return keep(frames, batch(frames, t))

    def on_one(arb, data, remote, t):
        if not deliver([(arb, data)]):
            return None
        return keep([(arb, data)], one(arb, data, remote, t))

    emu.on_fields_batch, emu.on_fields = on_batch, on_one
    d.inner.reply_timeout_s = 0.001
    fb = d.enable()
    assert lost == {"nmt": 1, "sdo": 1}
    assert fb.enabled.all() and fb.fresh.all()
    assert emu.nmt_state(2) == "OPERATIONAL" and emu.state(2) == State.OPERATION_ENABLED


def test_lost_master_heartbeat_makes_the_drive_run_its_fault_reaction(sim):
    """The drives consume the master's heartbeat (0x1016): when the host stops cycling, they
    brake and go to FAULT with EMCY 0x8130 on their own."""
    d, clock, _ = sim
    d.enable()
    _run(d, clock, 200, (0.6, -0.25))
    emu = d.emulators[0]
    host = d.hosts[0]
    clock.t += 0.2                                            # the master is silent for 200 ms
    host.pump()
    assert emu.state(1) in (State.FAULT, State.FAULT_REACTION_ACTIVE)
    assert emu.error_code(1) == codec.EMCY_HEARTBEAT
    fb = _run(d, clock, 1)
    assert (fb.fault == codec.EMCY_HEARTBEAT).all() and not fb.enabled.any()


def test_quick_stop_brakes_to_switch_on_disabled(sim):
    d, clock, _ = sim
    d.enable()
    fb = _run(d, clock, 150, (0.6, 0.0))
    v0 = abs(fb.velocity_rad_s[0])
    assert v0 > 0.1
    fb = d.quick_stop()
    assert State(fb.info["state"][0]) == State.QUICK_STOP_ACTIVE
    vmax = 0.0
    for _ in range(600):
        clock.t += 0.002
        fb = d._controlword_cycle(codec.CW_QUICK_STOP)
        if State(fb.info["state"][0]) == State.QUICK_STOP_ACTIVE:
            vmax = max(vmax, abs(fb.velocity_rad_s[0]))
    assert State(fb.info["state"][0]) == State.SWITCH_ON_DISABLED
    assert vmax > 0.0


def test_disable_switches_off_and_leaves_operational(sim):
    d, clock, _ = sim
    d.enable()
    _run(d, clock, 10, (0.3, 0.3))
    d.disable()
    emu = d.emulators[0]
    assert d.disable_unconfirmed == []
    for n in (1, 2):
        assert emu.state(n) == State.READY_TO_SWITCH_ON
        assert emu.nmt_state(n) == "PRE-OPERATIONAL"
    assert np.all(d.plant._tau_ff == 0.0)


def test_config_mismatch_with_the_drive_is_refused():
    clock = _Clock()
    model = load_model(ROBOT_2R)
    d = build_driver(_driver_section(), now=clock, model=model)
    try:
        # the drive says 0.8 N m rated, the configuration 0.5 N m
        d.emulators[0].local_node(1).data_store[0x6076][0] = (800).to_bytes(4, "little")
        with pytest.raises(DriverError, match="rated torque"):
            d.enable()
    finally:
        d.close()


def test_emulator_refuses_what_the_firmware_refuses(sim):
    d, clock, _ = sim
    d.enable()
    node = d.inner.nodes[0]
    with pytest.raises(canopen.SdoAbortedError) as e:
        node.sdo[0x6060].raw = 8                              # CSP: not supported here
    assert e.value.code == 0x06090030
    node.sdo[0x1A02][0].raw = 0
    with pytest.raises(canopen.SdoAbortedError) as e:
        node.sdo[0x1A02][1].raw = 0x60410010                  # statusword: mappable, accepted
        node.sdo[0x1A02][2].raw = 0x605A0010                  # quick stop option code: not mappable
    assert e.value.code == 0x06040041


def test_run_config_runs_and_the_budget_is_listed(tmp_path):
    spec = load_run(RUN, duration_s=0.5)
    run = build_run(spec, out_dir=tmp_path / "run")
    try:
        res = run.loop.run()
    finally:
        run.close()
    assert res.status == "completed"
    from controller.app.run import bus_budget_text
    text = bus_budget_text(spec)
    assert "bus-load budget at 500 Hz: OK" in text


# ---------------------------------------------------------------------------
# bus budget
# ---------------------------------------------------------------------------
def test_cia402_bus_budget_figures():
    # per cycle: SYNC (0 B) + n * (RPDO1 4 B + TPDO1 8 B + TPDO2 5 B), worst-case stuffing
    bits = {0: 47 + 8, 4: 47 + 32 + 16, 8: 47 + 64 + 24, 5: 47 + 40 + 18}
    for n in (3, 6):
        rep = cia402_budget(n, 1000.0, heartbeat_rate_hz=0, master_heartbeat_rate_hz=0)
        want = 1000.0 * (bits[0] + n * (bits[4] + bits[8] + bits[5])) / 1e6
        assert rep.loads[0].utilisation == pytest.approx(want, rel=1e-9)
    flows = cia402_flows(6, 1000.0)
    assert {f.name for f in flows} >= {"CiA 402 SYNC", "CiA 402 drive heartbeat"}
    # 335 bits per drive and cycle: at 1 kHz on 1 Mbit/s two drives fit, three do not
    assert cia402_budget(2, 1000.0, bus=BusSpec(bitrate_bit_s=1e6)).verdict == "tight"
    assert cia402_budget(3, 1000.0, bus=BusSpec(bitrate_bit_s=1e6)).verdict == "over"
    assert cia402_budget(3, 500.0, bus=BusSpec(bitrate_bit_s=1e6)).verdict == "ok"


# ---------------------------------------------------------------------------
# canopen's own BaseNode402 drives the emulated drive (independent client)
# ---------------------------------------------------------------------------
def test_canopens_basenode402_drives_the_emulated_drive():
    """A second CANopen stack we did not write (canopen's RemoteNode/BaseNode402 with its own
    SYNC producer and periodic RPDO, on its own python-can notifier thread) takes the emulated
    drive to OPERATION ENABLED in CST, commands a torque, reads position/velocity, and the motion
    equals a solve_ivp integration of the model.  The plant's clock is advanced by the test, so
    the physics is exact whatever the thread timing."""
    import can

    model = load_model(ROBOT_2R)
    clock = _Clock()
    plant = SimulatedPlant(model, q0=np.array([0.3, -0.4]), viscous=0.0, coulomb=0.0, t0_s=0.0)
    cfg = Cia402DriveConfig(4, 0, UNITS, mapping=__import__("drivers.base", fromlist=["JointMapping"])
                            .JointMapping(gear_ratio=GEAR))
    emu = Cia402Emulator([cfg], t0_s=0.0)
    chan = f"cia402-indep-{time.monotonic_ns()}"
    host = EmulatorHost(can.Bus(interface="virtual", channel=chan), [emu], plant, clock, own_bus=True)
    net = canopen.Network()
    net.connect(interface="virtual", channel=chan)
    try:
        node = BaseNode402(4, EDS)
        net.add_node(node)
        # canopen's waits (0.2-0.8 s) ten times longer: its notifier thread and our serving thread
        # share two cores with the rest of the suite (a load of 4 timed a TPDO wait out once); the
        # physics is on the test's clock, so this changes no result
        for name in ("TIMEOUT_RESET_FAULT", "TIMEOUT_SWITCH_OP_MODE", "TIMEOUT_SWITCH_STATE_FINAL",
                     "TIMEOUT_SWITCH_STATE_SINGLE", "TIMEOUT_CHECK_TPDO"):
            setattr(node, name, 10 * getattr(BaseNode402, name))
        node.sdo.RESPONSE_TIMEOUT = 10 * node.sdo.RESPONSE_TIMEOUT
        node.nmt.state = "PRE-OPERATIONAL"
        # PDO mapping with canopen's own API (written by its SDO client)
        node.tpdo.read()
        node.rpdo.read()
        node.rpdo[1].clear()
        node.rpdo[1].add_variable(0x6040)
        node.rpdo[1].add_variable(0x6071)
        node.rpdo[1].trans_type = 1
        node.rpdo[1].enabled = True
        node.tpdo[1].clear()
        node.tpdo[1].add_variable(0x6041)
        node.tpdo[1].add_variable(0x6064)
        node.tpdo[1].trans_type = 1
        node.tpdo[1].enabled = True
        node.tpdo[2].clear()
        node.tpdo[2].add_variable(0x606C)
        node.tpdo[2].add_variable(0x6061)
        node.tpdo[2].add_variable(0x6077)
        node.tpdo[2].trans_type = 1
        node.tpdo[2].enabled = True
        node.rpdo.save()
        node.tpdo.save()
        node.sdo[0x1017].raw = 20
        node.setup_402_state_machine(read_pdos=False)
        node.nmt.state = "OPERATIONAL"
        net.sync.start(0.005)
        node.rpdo[1].period = 0.005
        node.rpdo[1][0x6071].raw = 0
        node.rpdo[1][0x6040].raw = State402.CW_DISABLE_VOLTAGE
        node.rpdo[1].start()
        node.op_mode = "CYCLIC SYNCHRONOUS TORQUE"
        assert node.op_mode == "CYCLIC SYNCHRONOUS TORQUE"
        node.state = "OPERATION ENABLED"
        assert node.state == "OPERATION ENABLED"
        assert emu.state(4) == State.OPERATION_ENABLED
        # torque: 300 per mille of 0.5 N m = 0.15 N m motor, 0.9 N m at the joint
        node.rpdo[1][0x6071].raw = 300
        node.rpdo[1].update()
        deadline = time.monotonic() + 2.0
        while emu.local_node(4).data_store.get(0x6071, {}).get(0) != (300).to_bytes(2, "little", signed=True):
            assert time.monotonic() < deadline, "target torque never applied"
            time.sleep(0.005)
        host.sync()
        t_start = clock.t
        clock.t = 0.4                                            # 0.4 s of plant time
        host.sync()
        node.tpdo[2].wait_for_reception(1.0)
        node.tpdo[2].wait_for_reception(1.0)                    # TPDOs sampled after the step
        pos, vel = node.tpdo_values[0x6064], node.tpdo_values[0x606C]
        tq = node.tpdo_values[0x6077]
        q = UNITS.position_rad(pos) / GEAR
        qd = UNITS.velocity_rad_s(vel) / GEAR
        tau = np.array([300 * UNITS.nm_per_permille * GEAR, 0.0])
        sol = solve_ivp(lambda t, x: np.concatenate([x[2:], model.forward_dynamics(x[:2], x[2:], tau)]),
                        (t_start, clock.t), [0.3, -0.4, 0.0, 0.0], rtol=1e-10, atol=1e-12)
        assert tq == 300
        assert q == pytest.approx(sol.y[0, -1], abs=1e-4)
        assert qd == pytest.approx(sol.y[2, -1], abs=1e-3)
        assert abs(q - 0.3) > 0.02
        # SDO reads through canopen's client agree with the TPDO values
        assert node.sdo[0x6064].raw == pos
        # and back: quick stop, then disable voltage
        node.state = "QUICK STOP ACTIVE"
        assert emu.state(4) in (State.QUICK_STOP_ACTIVE, State.SWITCH_ON_DISABLED)
        node.state = "SWITCH ON DISABLED"
        assert emu.state(4) == State.SWITCH_ON_DISABLED
        # EMCY -> FAULT, seen by canopen's EMCY consumer and statusword; fault reset
        emu.inject_fault(4, 0x2310)
        err = node.emcy.wait(0x2310, timeout=1.0)
        assert err is not None and err.code == 0x2310
        node.tpdo[1].wait_for_reception(1.0)
        node.tpdo[1].wait_for_reception(1.0)
        assert node.is_faulted()
        node.rpdo[1][0x6040].raw = State402.CW_DISABLE_VOLTAGE
        node.rpdo[1].update()
        time.sleep(0.03)
        node.rpdo[1][0x6040].raw = State402.CW_SWITCH_ON_DISABLED
        node.rpdo[1].update()
        deadline = time.monotonic() + 1.0
        while emu.state(4) != State.SWITCH_ON_DISABLED:
            assert time.monotonic() < deadline, "fault reset not applied"
            time.sleep(0.005)
    finally:
        net.sync.stop()
        for pm in node.rpdo.values():
            pm.stop()
        net.disconnect()
        host.close()


def test_a_rebooted_drive_is_seen_rebooted_by_canopens_master():
    """A power-cycled drive (Cia402Emulator.reboot) as the firmware behaves, read by a CANopen stack
    we did not write (canopen's RemoteNode): its boot-up message (canopen's NMT master hears
    state 0 and takes it PRE-OPERATIONAL), what was written since power-on gone (the mode 0x6060 and
    the heartbeat time 0x1017 read back as the EDS has them), its power stage off (statusword
    SWITCH ON DISABLED) and no fault; a command RPDO does nothing before it is started again."""
    import can

    model = load_model(ROBOT_2R)
    clock = _Clock()
    plant = SimulatedPlant(model, q0=np.array([0.3, -0.4]), viscous=0.0, coulomb=0.0, t0_s=0.0)
    emu = Cia402Emulator([Cia402DriveConfig(4, 0, UNITS)], t0_s=0.0)
    chan = f"cia402-reboot-{time.monotonic_ns()}"
    host = EmulatorHost(can.Bus(interface="virtual", channel=chan), [emu], plant, clock, own_bus=True)
    net = canopen.Network()
    net.connect(interface="virtual", channel=chan)
    try:
        node = canopen.RemoteNode(4, EDS)
        net.add_node(node)
        node.sdo.RESPONSE_TIMEOUT = 10 * node.sdo.RESPONSE_TIMEOUT     # a loaded machine
        od = node.object_dictionary
        node.sdo[0x6060].raw = codec.MODE_CST
        node.sdo[0x1017].raw = 20
        assert node.sdo[0x6060].raw == codec.MODE_CST != od[0x6060].default
        node.nmt.state = "OPERATIONAL"
        host.sync()
        assert emu.nmt_state(4) == "OPERATIONAL"
        emu.inject_fault(4, 0x2310)
        assert emu.state(4) == State.FAULT
        heard = []
        node.nmt.add_heartbeat_callback(heard.append)
        emu.reboot(4)
        deadline = time.monotonic() + 10.0
        # (canopen calls the callbacks before it sets its state: both are waited for)
        while 0 not in heard or node.nmt.state != "PRE-OPERATIONAL":
            assert time.monotonic() < deadline, f"no boot-up message: {heard}, NMT {node.nmt.state}"
            host.sync()
            time.sleep(0.01)
        assert emu.nmt_state(4) == "PRE-OPERATIONAL"
        assert node.sdo[0x6060].raw == od[0x6060].default
        assert node.sdo[0x1017].raw == (od[0x1017].default or 0)
        mask, value = State402.SW_MASK["SWITCH ON DISABLED"]       # canopen's statusword table
        assert node.sdo[0x6041].raw & mask == value
        assert node.sdo[0x603F].raw == 0 and emu.error_code(4) == 0
        applied = emu.commands_applied(4)
        net.send_message(codec.rpdo_id(4, 1), codec.encode_rpdo1(codec.CW_ENABLE_OPERATION, 300))
        net.sync.transmit()
        host.sync()
        assert emu.commands_applied(4) == applied and emu.state(4) == State.SWITCH_ON_DISABLED
        assert plant.applied_torque_nm[0] == 0.0
    finally:
        net.disconnect()
        host.close()


def _eds_without(tmp_path, drop_sections, sub0: dict[str, int] | None = None):
    """The shipped EDS with some objects / sub-indices removed (a drive that lacks optional objects)."""
    import re
    from drivers.cia402 import eds_path
    text = Path(eds_path("cia402_generic.eds")).read_text()
    for sec in drop_sections:
        text = re.sub(rf"\n\[{sec}\]\n(?:[^\[\n].*\n)*", "\n", text)
    for sec, v in (sub0 or {}).items():
        text = re.sub(rf"(\[{sec}sub0\]\n(?:[^\[\n].*\n)*?DefaultValue=)\d+", rf"\g<1>{v}", text)
    p = tmp_path / "drive.eds"
    p.write_text(text)
    return p


def test_a_drive_without_the_optional_pdo_sub_indices_enables(tmp_path):
    """issue 36: inhibit time, event timer and SYNC start value (0x18xx:3/5/6) are optional in
    CiA 301; a drive that lacks them (0x18xx:0 = 2) is configured with :1 and :2 only."""
    drop = [f"18{k:02X}sub{s}" for k in range(4) for s in (3, 5, 6)]
    eds = _eds_without(tmp_path, drop, {f"18{k:02X}": 2 for k in range(4)})
    clock = _Clock()
    model = load_model(ROBOT_2R)
    d = build_driver(_driver_section(emulator={"serve": "inline", "brake_kd_nm_s_per_rad": 50.0,
                                               "eds": str(eds)}), now=clock, model=model)
    try:
        node = d.emulators[0].local_node(1)
        assert 3 not in node.object_dictionary[0x1800].subindices        # the drive has no inhibit time
        fb = d.enable()
        assert fb.enabled.all()
    finally:
        d.close()


def test_an_sdo_abort_names_the_object(tmp_path):
    """A drive with two TPDOs only: configuring TPDO3 (0x1802) is aborted; the error names it."""
    eds = _eds_without(tmp_path, ["1802", "1803", "1A02", "1A03"]
                       + [f"1{a}0{k}sub{s}" for a in "8A" for k in (2, 3) for s in range(0, 9)])
    clock = _Clock()
    model = load_model(ROBOT_2R)
    d = build_driver(_driver_section(emulator={"serve": "inline", "brake_kd_nm_s_per_rad": 50.0,
                                               "eds": str(eds)}), now=clock, model=model)
    try:
        with pytest.raises(DeviceFaultError) as ei:
            d.enable()
        assert re.search(r"object 0x1[8A]0[23]:\d", str(ei.value)), str(ei.value)
        assert "aborted by the drive" in str(ei.value)
    finally:
        d.close()


def write_pdo_map(node, index, entries, cob_id, trans=1) -> None:
    """Write a PDO map (mapping ``index`` 0x1600.. / 0x1A00.., its communication parameters at
    ``index - 0x200``) into an emulated drive's object dictionary, as a master's SDO writes do."""
    node.set_data(index, 0, b"\x00")
    for s, (obj, sub, bits) in enumerate(entries, 1):
        node.set_data(index, s, ((obj << 16) | (sub << 8) | bits).to_bytes(4, "little"))
    node.set_data(index, 0, bytes([len(entries)]))
    com = index - 0x200
    node.set_data(com, 1, cob_id.to_bytes(4, "little"))
    node.set_data(com, 2, bytes([trans]))


def test_the_emulators_cyclic_pdo_path_gives_canopens_bytes():
    """The emulated drive's own PDO path (objects found once at OPERATIONAL, values packed
    directly) against canopen's: every TPDO equals what ``LocalNode.get_data`` and
    ``PdoVariable.set_data`` make of the same object dictionary at the same plant time, with a
    mapping of byte-aligned and unaligned entries; the RPDO's values reach the object dictionary
    and the controlword acts."""
    import can
    from drivers.base import JointMapping

    model = load_model(ROBOT_2R)
    plant = SimulatedPlant(model, q0=np.array([0.3, -0.4]), viscous=0.0, coulomb=0.0, t0_s=0.0)
    emu = Cia402Emulator([Cia402DriveConfig(1, 1, UNITS, JointMapping(gear_ratio=GEAR, sign=-1, offset_rad=0.1))])
    emu.bind(plant)
    emu.on_timer(0.0)                                       # boot-up: PRE-OPERATIONAL
    node = emu.local_node(1)

    def mapping(index, entries, cob_id, trans=1):
        write_pdo_map(node, index, entries, cob_id, trans)

    mapping(0x1600, [(0x6040, 0, 16), (0x6071, 0, 16)], 0x201)
    mapping(0x1A00, [(0x6041, 0, 16), (0x6061, 0, 8), (0x6064, 0, 32), (0x6077, 0, 8)], 0x181)
    mapping(0x1A01, [(0x6041, 0, 12), (0x606C, 0, 32), (0x6074, 0, 16)], 0x281)   # unaligned after 12 bits
    mapping(0x1A02, [(0x603F, 0, 16), (0x1001, 0, 8), (0x6072, 0, 16)], 0x381, trans=2)
    mapping(0x1A03, [], 0x481 | 0x80000000)
    node.set_data(0x6060, 0, bytes([codec.MODE_CST]))
    msg = lambda arb, data=b"": can.Message(arbitration_id=arb, data=data, is_extended_id=False)  # noqa: E731
    assert emu.on_frame(msg(0, bytes([1, 1])), 0.0) == []   # NMT start
    t = 0.0
    sent = 0
    for k, cw in enumerate([codec.CW_SHUTDOWN, codec.CW_SWITCH_ON] + [codec.CW_ENABLE_OPERATION] * 6):
        tq = 150 * k - 400
        assert emu.on_frame(msg(0x201, codec.encode_rpdo1(cw, tq)), t) == []
        t += 0.002
        plant.advance_to(t)
        frames = emu.on_frame(msg(codec.SYNC_ID), t)
        assert node.data_store[0x6071][0] == codec.encode_rpdo1(0, tq)[2:]
        assert node.data_store[0x6040][0] == codec.encode_rpdo1(cw, 0)[:2]
        by_id = {f.arbitration_id: bytes(f.data) for f in frames}
        assert set(by_id) == ({0x181, 0x281} if k % 2 == 0 else {0x181, 0x281, 0x381})
        for pm in (node.tpdo[1], node.tpdo[2], node.tpdo[3]):
            if pm.cob_id not in by_id:
                continue
            pm.data[:] = bytes(len(pm.data))
            for var in pm.map:
                var.set_data(node.get_data(var.index, var.subindex))     # canopen's path
            assert by_id[pm.cob_id] == bytes(pm.data), (k, hex(pm.cob_id))
            sent += 1
    assert sent == 20
    assert emu.state(1) == State.OPERATION_ENABLED and emu.commands_applied(1) == 6


def _recorded_enable(serve: str) -> tuple[list, object]:
    """Enable two emulated drives served ``serve`` ("inline": frames handed over as fields;
    "thread": python-can messages on a virtual bus); the frames the drives received, in order."""
    clock = _Clock()
    sec = _driver_section()
    sec = Section({**sec.data, "bus": {"interface": "virtual", "channel": f"rec-{serve}"},
                   "emulator": {**sec.data["emulator"], "serve": serve}}, None, "driver")
    d = build_driver(sec, now=clock, model=load_model(ROBOT_2R))
    emu = d.emulators[0]
    seen = []
    on_frame, on_fields = emu.on_frame, emu.on_fields
    emu.on_frame = lambda msg, t: seen.append((msg.arbitration_id, bytes(msg.data), msg.is_remote_frame)) or \
        on_frame(msg, t)
    emu.on_fields = lambda arb, data, remote, t: seen.append((arb, bytes(data), remote is not None)) or \
        on_fields(arb, data, remote, t)
    on_batch = emu.on_fields_batch

    def batch(frames, t):
        r = on_batch(frames, t)
        if r is not None:
            seen.extend((arb, bytes(data), remote is not None) for arb, data, remote in frames)
        return r
    emu.on_fields_batch = batch
    try:
        fb = d.enable()
        assert fb.enabled.all()
        d.sync()                # the serving thread has processed every frame sent
        return list(seen), d
    finally:
        d.close()


def test_the_enable_sends_the_same_frames_inline_and_on_a_virtual_bus():
    """The SDO configuration handed to an inline host as fields (``_SdoPumpBus`` through
    ``send_batch``) is the same frames, in the same order, as python-can messages on a virtual
    bus served by a thread: every SDO request, NMT command and the PDOs of the state machine walk."""
    inline, _ = _recorded_enable("inline")
    thread, _ = _recorded_enable("thread")
    sdo = [f for f in inline if 0x601 <= f[0] <= 0x67F]
    assert len(sdo) == 2 * 41                       # the configuration by SDO was seen
    assert inline == thread


def test_enable_makes_the_unused_pdos_not_valid_with_one_write_each():
    """RPDO2-4 and TPDO3-4 are made not valid by their COB-ID alone (bit 31 set, the write
    canopen's ``save`` starts with): no transmission type or mapping written for them; the used
    PDOs get canopen's whole procedure (not valid, transmission type, count 0, entries, count,
    valid)."""
    seen, _ = _recorded_enable("inline")
    for node in (1, 2):
        writes = [(int.from_bytes(data[1:3], "little"), data[3], int.from_bytes(data[4:8], "little"))
                  for arb, data, _ in seen if arb == 0x600 + node and data[0] & 0xE0 == 0x20]
        for com in (0x1401, 0x1402, 0x1403, 0x1802, 0x1803):
            mine = [w for w in writes if w[0] in (com, com + 0x200)]
            assert len(mine) == 1 and mine[0][:2] == (com, 1) and mine[0][2] & 0x80000000, (hex(com), mine)
        for com, n in ((0x1400, 2), (0x1800, 3), (0x1801, 2)):
            mine = [w for w in writes if w[0] in (com, com + 0x200)]
            assert [w[:2] for w in mine] == ([(com, 1), (com, 2), (com + 0x200, 0)]
                                             + [(com + 0x200, s) for s in range(1, n + 1)]
                                             + [(com + 0x200, 0), (com, 1)])
            assert mine[0][2] & 0x80000000 and not mine[-1][2] & 0x80000000 and mine[-2][2] == n


def test_a_cycles_replies_decoded_in_one_pass_equal_the_frame_by_frame_handling():
    """``Cia402Driver._handle_replies`` (the TPDOs of a cycle, taken from the bus in one call)
    against ``_handle`` of each frame: random runs of TPDOs of every length, of unknown and
    other nodes, error, remote and extended frames, EMCYs and heartbeats: the same driver state."""
    rng = np.random.default_rng(5)
    drivers = []
    sec = _driver_section()
    # mappings whose every constant shows in the values (offsets, a sign, an efficiency)
    joints = [{**js, "offset_rad": off, "sign": sign, "efficiency": eff}
              for js, off, sign, eff in zip(sec.data["joints"], (0.25, -1.5), (-1, 1), (0.9, 1.0))]
    sec = Section({**sec.data, "joints": joints}, None, "driver")
    for _ in range(2):
        clock = _Clock()
        drivers.append(build_driver(sec, now=clock, model=load_model(ROBOT_2R)))
    try:
        a, b = (d.inner for d in drivers)

        def state(drv):
            return (list(drv._q), list(drv._qd), list(drv._tau), list(drv._sw), list(drv._state), list(drv._mode),
                    list(drv._emcy), list(drv._nmt), list(drv._hb_t), list(drv._got1), list(drv._got2),
                    drv._missing, dict(drv._stats))

        ids = [codec.tpdo_id(1, 1), codec.tpdo_id(2, 1), codec.tpdo_id(1, 2), codec.tpdo_id(2, 2),
               codec.tpdo_id(3, 1), codec.emcy_id(1), codec.heartbeat_id(2), 0x123]
        sws = [0x0237, 0x1637, 0x0250, 0x0218, 0x0231, 0x1233]
        for k in range(300):
            for drv in (a, b):
                drv._got1, drv._got2, drv._missing = [False] * 2, [False] * 2, 4
            frames = []
            for _ in range(int(rng.integers(0, 9))):
                arb = int(rng.choice(ids))
                n = int(rng.choice([8, 5, 5, 8, 7, 4, 0, 2]))
                data = bytes(rng.integers(0, 256, n, dtype=np.uint8))
                if arb == codec.emcy_id(1):
                    data = bytes(8) if rng.random() < 0.5 else data
                elif arb == codec.heartbeat_id(2):
                    data = bytes([0x05])
                elif n >= 2 and rng.random() < 0.7:        # mostly statuswords seen before
                    data = int(rng.choice(sws)).to_bytes(2, "little") + data[2:]
                flags = [rng.random() < 0.05 for _ in range(3)]
                frames.append((arb, data, 0.0, flags[0], flags[1], flags[2], 0 if flags[1] else None))
            a._handle_replies(0, frames)
            for f in frames:
                b._handle(0, f)
            assert state(a) == state(b), (k, frames)
    finally:
        for d in drivers:
            d.close()


def test_frames_taken_in_one_call_equal_the_frames_taken_one_by_one():
    """``CanTransport.recv_fields_upto`` over an ``InlineBus`` (the frames queued as fields and as
    messages, error frames among them) against ``recv_fields`` called until it returns None: the
    same frames in the same order, the same counters, at most ``n`` at a time; a ``recv_fields``
    hook set on the transport sees every frame."""
    import can
    from drivers.sim.emulators import InlineBus
    from drivers.transport import CanTransport

    rng = np.random.default_rng(3)

    def twin():
        bus = InlineBus("upto")
        return bus, CanTransport.from_bus(bus, name="upto")

    (ba, ta), (bb, tb) = twin(), twin()
    for _ in range(40):
        queued = []
        for _ in range(int(rng.integers(0, 7))):
            arb = int(rng.integers(0x80, 0x700))
            data = bytes(rng.integers(0, 256, int(rng.integers(0, 9)), dtype=np.uint8))
            queued.append((arb, data, rng.random() < 0.3, rng.random() < 0.1))
        for bus in (ba, bb):
            for arb, data, as_msg, error in queued:
                if as_msg or error:
                    bus.device_end.send(can.Message(arbitration_id=arb, data=data, is_extended_id=False,
                                                    is_error_frame=error))
                else:
                    bus.device_end.deliver(arb, data)
        n = int(rng.integers(1, 9))
        got = ta.recv_fields_upto(n)
        ref = []
        while len(ref) < n:
            f = tb.recv_fields(0.0)
            if f is None:
                break
            ref.append(f)
        strip = lambda fs: [f[:2] + f[3:] for f in fs]          # noqa: E731 - time stamps differ
        assert strip(got) == strip(ref) and len(got) <= n
        assert (ta.frames_received, ta.error_frames) == (tb.frames_received, tb.error_frames)
        ta.drain(), tb.drain()
    seen = []
    orig = ta.recv_fields
    ta.recv_fields = lambda timeout_s=0.0: (lambda f: (seen.append(f), f)[1])(orig(timeout_s))
    ba.device_end.deliver(0x181, bytes(8))
    assert len(ta.recv_fields_upto(4)) == 1 and seen[0][0] == 0x181
    ta.close()
    tb.close()


def test_a_cycles_compiled_rpdo_encoding_equals_the_python_encoder():
    """``Cia402Driver._request`` (a command of torques, one compiled call) against ``_rpdos``
    (the Python encoder, the reference) on random torques: within the max torque, beyond it,
    exactly half a per mille apart, signed zeros; drives of both signs, an efficiency, a max
    torque beyond INT16; non-finite torques, other dtypes, layouts and shapes, gains: the same
    payloads and saturation count, or the same error."""
    joints = [{"node_id": 1, "counts_per_rev": 4096, "rated_torque_nm": 0.5, "gear_ratio": 6.0,
               "torque_limit_nm": 1.0},
              {"node_id": 2, "counts_per_rev": 4096, "rated_torque_nm": 0.4, "gear_ratio": 9.0, "sign": -1,
               "efficiency": 0.9, "torque_limit_nm": 0.3},
              {"node_id": 3, "counts_per_rev": 4096, "rated_torque_nm": 0.1, "gear_ratio": 1.0,
               "torque_limit_nm": 4.0}]          # 40 000 per mille: beyond INT16 when clamped to it
    d = build_driver(_driver_section(joints=joints, plant={"viscous": 0.0, "coulomb": 0.0}),
                     now=_Clock(), model=load_model(ROOT / "hil_configs" / "robots" / "3rrr_horizontal.toml"))
    try:
        drv = d.inner
        ktau = np.array(drv._ktau)
        rng = np.random.default_rng(11)
        compiled = 0

        def both(command):
            out = []
            for f in (drv._request, lambda c: drv._rpdos(c, codec.CW_ENABLE_OPERATION)):
                drv.last_saturated = -7
                try:
                    out.append(("ok", f(command), drv.last_saturated))
                except DriverError as err:
                    out.append(("raised", str(err)))
            assert out[0] == out[1], (command, out)
            return out[0]

        for k in range(3000):
            kind = rng.integers(0, 6)
            if kind == 0:
                tau = rng.normal(0, 2, 3)
            elif kind == 1:
                tau = rng.normal(0, 200, 3)                             # beyond the max torques
            elif kind == 2:
                tau = (rng.integers(-3000, 3000, 3) + 0.5) * ktau       # half a per mille apart
            elif kind == 3:
                tau = rng.choice([0.0, -0.0, 1e-300, -1e300], 3)
            elif kind == 4:
                tau = rng.normal(0, 0.05, 3)
                tau[rng.integers(0, 3)] = rng.choice([math.nan, math.inf, -math.inf])
            else:
                tau = rng.normal(0, 0.3, 3) * [1.0, 1.0, 0.01]          # the third drive within INT16
            r = both(Command(tau))
            compiled += r[0] == "ok"
        for command in (Command(np.array([0.1, 0.2, 0.001], dtype=np.float32)), Command([0.1, 0.2, 0.001]),
                        Command(np.array([0.1, 9.0, 0.2, 9.0, 0.001, 9.0])[::2]), Command(np.zeros(2)),
                        Command(np.zeros(3), kp_nm_per_rad=np.ones(3)), Command(np.zeros(3), kp_nm_per_rad=np.zeros(3)),
                        Command(np.zeros((3, 1)))):
            both(command)
        assert compiled > 1500
    finally:
        d.close()


def test_a_cycle_exchanged_in_one_call_equals_send_then_receive():
    """``CanTransport.exchange_fields`` (the RPDOs and the SYNC sent, the first replies taken,
    in one call over an inline bus) against ``send_batch`` then ``recv_fields_upto``: two drivers
    of the same drives, one refused the exchange, over a random session with faults (drive
    faults and resets, a disconnected drive, TPDOs lost, a frame more than the replies, EMCYs,
    heartbeats queued by the drives' timers): the same feedback, driver state and counters after
    every cycle."""
    rng = np.random.default_rng(11)
    sec = _driver_section(reply_timeout_s=0.0005)
    runs = []
    for _ in range(2):
        clock = _Clock()
        runs.append((build_driver(sec, now=clock, model=load_model(ROBOT_2R)), clock))
    (a, ca), (b, cb) = runs
    used = []
    exchange = a.inner.transports[0].exchange_fields
    a.inner.transports[0].exchange_fields = lambda frames, n: used.append(exchange(frames, n)) or used[-1]
    b.inner.transports[0].exchange_fields = lambda frames, n: None
    tweak = {"drop": None, "extra": False}

    def tweaked(emu):
        batch = emu.on_fields_batch

        def on_batch(frames, t):
            r = batch(frames, t)
            if r is not None and tweak["drop"] is not None:
                r = [p for p in r if p[0] != tweak["drop"]]
            if r is not None and tweak["extra"]:
                r = r + [r[0]]                  # one frame more than the replies (stays queued)
            return r
        emu.on_fields_batch = on_batch

    def state(d):
        drv = d.inner
        t = drv.transports[0]
        return (list(drv._q), list(drv._qd), list(drv._tau), list(drv._sw), list(drv._state), list(drv._emcy),
                list(drv._nmt), list(drv._hb_t), drv._missing, t.frames_sent, t.frames_received, t.error_frames)

    def strip(fb):
        return (fb.t_s, fb.position_rad.tolist(), fb.velocity_rad_s.tolist(), fb.torque_nm.tolist(),
                fb.fault.tolist(), fb.fresh.tolist(), fb.enabled.tolist(),
                {k: v.tolist() if isinstance(v, np.ndarray) else v for k, v in fb.info.items()})
    try:
        for d, _ in runs:
            tweaked(d.emulators[0])
            d.enable()
        assert state(a) == state(b)
        for k in range(300):
            tweak["drop"] = codec.tpdo_id(int(rng.integers(1, 3)), int(rng.integers(1, 3))) \
                if rng.random() < 0.03 else None
            tweak["extra"] = rng.random() < 0.03
            r = rng.random()
            node = int(rng.integers(1, 3))
            code = int(rng.choice([0x2310, 0x4210]))
            for d, _ in runs:
                emu = d.emulators[0]
                if r < 0.02:
                    emu.inject_fault(node, code)
                elif r < 0.03:
                    emu.set_silent(node, True)
                elif r < 0.08:
                    emu.set_silent(node, False)
            tau = rng.normal(0, 0.3, 2)
            ca.t += 0.002
            cb.t += 0.002
            fa = a.cycle(Command(tau.copy()))
            fbb = b.cycle(Command(tau.copy()))
            assert strip(fa) == strip(fbb), k
            assert state(a) == state(b), k
            if k % 50 == 49 and (fa.fault.any() or not fa.enabled.all()):
                for d, c in runs:
                    for n in (1, 2):
                        d.emulators[0].clear_fault_cause(n)
                        d.emulators[0].set_silent(n, False)
                for _ in range(600):            # the drives' fault reactions end (the same in both)
                    if State.FAULT_REACTION_ACTIVE not in [d.emulators[0].state(n) for d, _ in runs for n in (1, 2)]:
                        break
                    ca.t += 0.002
                    cb.t += 0.002
                    assert strip(a.cycle(Command(np.zeros(2)))) == strip(b.cycle(Command(np.zeros(2)))), k
                for d, _ in runs:
                    if d.emulators[0].state(1) == State.FAULT or d.emulators[0].state(2) == State.FAULT:
                        d.fault_reset()
                    d.enable()
                assert state(a) == state(b), k
        taken = [u for u in used if u is not None]
        assert len(taken) > 200, (len(taken), len(used))
    finally:
        for d, _ in runs:
            d.close()
