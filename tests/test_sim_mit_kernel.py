"""The MIT emulator's compiled per-frame path equals its Python path to the bit.

``MitEmulator._command`` (one call of :func:`drivers.sim._mit_kernel.mit_command_frame`)
against ``MitEmulator._apply`` then ``MitEmulator._reply`` (the codec's per-drive decoders
and encoders, ``SimulatedPlant.set_joint_command`` and ``measure_joint``): two emulators
on two plants in the same state, one frame each; the held command, the reply's bytes and
the drive's bookkeeping must be equal.  Payloads: random, every value of each field, the
extremes; states: random, beyond the field ranges (clamped), on the encoder's half steps,
signed zeros; every drive model, both reply variants, mappings with sign, gear, offset and
efficiency, with and without an encoder.

These are parity tests. The emulator's answers are checked independently by third-party
clients: ``test_mit_thirdparty.py::test_tmotorcancontrol_client_enables_and_moves_the_emulated_motor``
and ``test_mit_thirdparty.py::test_tmotor_can_mit_mode_client_enables_and_moves_the_emulated_motor``;
its watchdog (``next_timer_s``) by ``test_mit_emulator.py::test_no_watchdog_by_default_mini_cheetah_timeout_when_set``.
"""

from __future__ import annotations

import math

import can
import numpy as np
import pytest

from drivers.base import JointMapping
from drivers.codecs import mit as mitc
from drivers.sim import _mit_kernel as mk
from drivers.sim.emulators import EmulatorHost, InlineBus
from drivers.sim.mit_emulator import MitEmulator, MitMotorConfig
from drivers.sim.plant import SimulatedPlant
from dynamics.errors import DriverError
from dynamics.toy_models import PlanarTwoLink

MAPPINGS = (JointMapping(), JointMapping(gear_ratio=9.0, sign=-1, offset_rad=0.3, efficiency=0.9),
            JointMapping(gear_ratio=6.0, sign=1, offset_rad=-1.25, efficiency=0.85))


def _pair(model="AK80-9", mapping=JointMapping(), variant="classic6", counts=16384, **plant_kw):
    """Two (plant, emulator) pairs, motors 1 and 2 on joints 1 and 0, in motor mode."""
    out = []
    for _ in range(2):
        plant = SimulatedPlant(PlanarTwoLink(g=0.0), q0=[0.1, -0.2], encoder_counts_per_rev=counts, **plant_kw)
        emu = MitEmulator([MitMotorConfig(1, 1, model, mapping, variant),
                           MitMotorConfig(2, 0, model, mapping, variant, temperature_c=41.6)])
        emu.bind(plant)
        for cid in (1, 2):
            emu.on_frame(can.Message(arbitration_id=cid, data=mitc.ENTER_MOTOR_MODE, is_extended_id=False), 0.0)
        out.append((plant, emu))
    return out


def _set(pairs, q, qd, ta):
    for plant, _ in pairs:
        plant.set_compiled_state(q, qd, None, ta, 0.0, np.zeros(2))


def _both(pairs, data, cid=1, t_s=0.5):
    """The Python path on the first pair, the compiled one on the second; both outcomes."""
    res = []
    for k, (plant, emu) in enumerate(pairs):
        st = emu._by_id[cid]
        try:
            if k == 0:
                emu._apply(st, data, t_s)
                r = emu._reply(st)
            else:
                assert st.quantum is not None          # the compiled path is taken
                r = emu._command(st, data, t_s)
        except DriverError as err:
            r = ("error", str(err))
        res.append((r, plant._cmd.copy(), plant._pd, plant._h_pd, st.last_cmd_t, st.armed, st.commands))
    return res


def _equal(a, b):
    assert a[0] == b[0]
    assert a[1].tobytes() == b[1].tobytes()          # the held command, to the bit (signed zeros too)
    assert a[2:] == b[2:] or (math.isnan(a[3]) and math.isnan(b[3]))


def _payload(rng):
    while True:
        data = rng.integers(0, 256, 8, dtype=np.uint8).tobytes()
        if data[0] != 0xFF:
            return data


@pytest.mark.parametrize("model", sorted(mitc.MIT_MODELS))
@pytest.mark.parametrize("variant", ["classic6", "cubemars8"])
def test_random_payloads_and_states_every_model(model, variant):
    rng = np.random.default_rng(abs(hash((model, variant))) % 2**32)
    L = mitc.MIT_MODELS[model]
    for mapping in MAPPINGS:
        pairs = _pair(model, mapping, variant)
        for _ in range(40):
            g = mapping.gear_ratio
            # inside and beyond the ranges the reply can say (clamped), motor side / gear
            q = rng.uniform(-1.3, 1.3, 2) * L.p_max_rad / g
            qd = rng.uniform(-1.3, 1.3, 2) * L.v_max_rad_s / g
            ta = rng.uniform(-1.3, 1.3, 2) * L.t_max_nm * g
            _set(pairs, q, qd, ta)
            _equal(*_both(pairs, _payload(rng), cid=int(rng.integers(1, 3))))


def test_every_value_of_every_field():
    pairs = _pair("AK70-10", MAPPINGS[1], "cubemars8")
    _set(pairs, [0.2, -0.4], [1.5, -2.0], [3.0, -4.0])
    base = [0x7FFF, 0x7FF, 0x000, 0x000, 0x7FF]
    widths = (16, 12, 12, 12, 12)
    for field, bits in enumerate(widths):
        for u in range(1 << bits):
            f = list(base)
            f[field] = u
            data = mitc.pack_command(*f)
            if data[0] == 0xFF:
                continue
            _equal(*_both(pairs, data))


def test_extreme_payloads():
    pairs = _pair("AK10-9", MAPPINGS[2])
    _set(pairs, [0.0, 0.0], [0.0, 0.0], [0.0, 0.0])
    for data in (bytes(8), bytes([0xFE] + [0xFF] * 7), bytes([0x7F] + [0xFF] * 7), bytes([0x80] + [0] * 7),
                 bytes([0xFF] * 7 + [0xF9])[1:] + b"\x00", bytes([0x12, 0x34, 0x56, 0x78, 0x9A, 0xBC, 0xDE, 0xF0])):
        _equal(*_both(pairs, data))


def test_encoder_half_steps_and_signed_zeros():
    counts = 4096
    step = 2.0 * math.pi / counts
    pairs = _pair("AK60-6", JointMapping(), counts=counts)
    data = mitc.pack_command(0x8000, 0x800, 0, 0, 0x800)
    for k in (-3, -2, -1, 0, 1, 2, 5, 1000):
        for q in ((k + 0.5) * step, (k - 0.5) * step, k * step, -0.0, 0.0, -1e-300, 1e-300, -0.49 * step):
            _set(pairs, [q, -q], [-0.0, 0.0], [-0.0, 0.0])
            _equal(*_both(pairs, data))
            _equal(*_both(pairs, data, cid=2))


def test_without_an_encoder():
    pairs = _pair("AK80-9", MAPPINGS[1], counts=None)
    rng = np.random.default_rng(3)
    for _ in range(50):
        _set(pairs, rng.normal(0, 1, 2), rng.normal(0, 3, 2), rng.normal(0, 5, 2))
        _equal(*_both(pairs, _payload(rng)))


def test_gains_in_the_command_update_the_plants_step_limit():
    pairs = _pair("AK80-9", MAPPINGS[1])
    _set(pairs, [0.3, -0.2], [0.0, 0.0], [0.0, 0.0])
    with_gains = mitc.pack_command(0x8100, 0x800, 0x400, 0x200, 0x800)
    res = _both(pairs, with_gains)
    _equal(*res)
    assert res[1][2] and math.isfinite(res[1][3])      # PD on, a finite step limit
    res = _both(pairs, mitc.pack_command(0x8100, 0x800, 0, 0, 0x800))
    _equal(*res)
    assert not res[1][2] and res[1][3] == math.inf     # off again


@pytest.mark.parametrize("where", ["q", "qd", "ta"])
def test_a_measurement_that_cannot_be_encoded_raises_the_same_error(where):
    pairs = _pair("AK80-9", MAPPINGS[0])
    vals = {"q": [0.1, 0.2], "qd": [0.0, 0.0], "ta": [0.0, 0.0]}
    vals[where] = [0.1, math.inf]
    _set(pairs, vals["q"], vals["qd"], vals["ta"])
    res = _both(pairs, mitc.pack_command(0x8000, 0x800, 0, 0, 0x900))
    assert res[0][0][0] == "error" and "non-finite" in res[0][0][1]
    _equal(*res)                                        # the command was held both ways


def test_kernel_refuses_a_non_finite_command_and_writes_nothing():
    K = np.zeros(mk.K_SIZE)
    K[[mk.K_P_MAX, mk.K_V_MAX, mk.K_KP_MAX, mk.K_KD_MAX, mk.K_T_MAX]] = 12.5, 50.0, 500.0, 5.0, 18.0
    K[[mk.K_SIGN, mk.K_GEAR, mk.K_OFFSET, mk.K_EFF, mk.K_G2E, mk.K_GE]] = 1.0, 0.0, 0.0, 1.0, 0.0, 0.0
    cmd = np.full((5, 1), 7.0)
    z = np.zeros(1)
    st, _ = mk.mit_command_frame(K, cmd, z, z, z, 0, 0x80008000, 0x00800800, 0.0, 0.0)   # gear 0: / 0
    assert st == mk.ST_BAD_COMMAND and np.all(cmd == 7.0)


def test_noisy_plant_takes_the_python_path_and_draws_the_same_noise():
    replies = []
    for compiled in (False, True):
        plant = SimulatedPlant(PlanarTwoLink(g=0.0), q0=[0.1, -0.2], encoder_counts_per_rev=16384,
                               position_noise_std_rad=1e-3, rng=np.random.default_rng(5))
        emu = MitEmulator([MitMotorConfig(1, 1, "AK80-9")])
        emu.bind(plant)
        emu.on_frame(can.Message(arbitration_id=1, data=mitc.ENTER_MOTOR_MODE, is_extended_id=False), 0.0)
        st = emu._by_id[1]
        assert st.quantum is None
        data = mitc.pack_command(0x8000, 0x800, 0, 0, 0x900)
        out = []
        for _ in range(5):
            if compiled:
                out.append(emu._command(st, data, 0.0))
            else:
                emu._apply(st, data, 0.0)
                out.append(emu._reply(st))
        replies.append(out)
    assert replies[0] == replies[1]


def test_plant_state_in_another_layout_takes_the_python_path():
    pairs = _pair("AK80-9", MAPPINGS[1])
    _set(pairs, [0.3, -0.2], [0.5, 0.1], [1.0, 2.0])
    plant = pairs[1][0]
    strided = np.zeros(4)
    strided[::2] = plant._q
    plant._q = strided[::2]                             # not contiguous: the kernel's signature refuses it
    _equal(*_both(pairs, mitc.pack_command(0x8100, 0x700, 0, 0, 0x900)))


def test_inline_bus_serves_a_sent_frame_at_once_or_queues_it():
    plant = SimulatedPlant(PlanarTwoLink(g=0.0), q0=[0.1, -0.2])
    emu = MitEmulator([MitMotorConfig(1, 0, "AK80-9")])
    bus = InlineBus("k")
    host = EmulatorHost(bus.device_end, [emu], plant, now=lambda: 0.0, serve="inline", start=False)
    bus.host = host
    enter = can.Message(arbitration_id=1, data=mitc.ENTER_MOTOR_MODE, is_extended_id=False)
    bus.send(enter)                                     # host not serving yet: the frame waits
    assert host.frames_in == 0 and bus.recv(0.0) is None
    host.start()
    assert bus.recv(0.0) is not None                    # served by the receive's pump
    assert host.frames_in == 1 and emu.motor_mode(1)
    bus.send(can.Message(arbitration_id=1, data=mitc.pack_command(0x8000, 0x800, 0, 0, 0x900),
                         is_extended_id=False))
    assert host.frames_in == 2 and emu.commands_applied(1) == 1
    reply = bus._rx.popleft()                           # the reply is queued when send returns
    assert reply.arbitration_id == 0 and reply.data[0] == 1 and reply.is_rx
    bus.send(can.Message(arbitration_id=1, data=mitc.pack_command(0x8000, 0x800, 0, 0, 0x900),
                         is_extended_id=True))          # not for the drive: no reply, nothing applied
    assert host.frames_in == 3 and not bus._rx and emu.commands_applied(1) == 1
    host.close()


def test_next_timer_is_the_earliest_armed_watchdog():
    """next_timer_s (the minimum of the kept due times) against the motors' own state, over
    random commands, special frames, timers and faults."""
    rng = np.random.default_rng(8)
    plant = SimulatedPlant(PlanarTwoLink(g=0.0), q0=[0.1, -0.2])
    emu = MitEmulator([MitMotorConfig(1, 0, "AK80-9"), MitMotorConfig(2, 1, "AK60-6")], watchdog_timeout_s=0.02)
    emu.bind(plant)
    frames = [mitc.ENTER_MOTOR_MODE, mitc.EXIT_MOTOR_MODE, mitc.pack_command(0x8000, 0x800, 0, 0, 0x900)]
    t = 0.0
    for _ in range(3000):
        t += float(rng.choice([0.0, 0.001, 0.015]))
        r = rng.random()
        if r < 0.05:
            emu.inject_fault(int(rng.integers(1, 3)), 2)
        elif r < 0.25:
            emu.on_timer(t)
        else:
            data = frames[2] if rng.random() < 0.8 else frames[int(rng.integers(0, 2))]
            emu.on_frame(can.Message(arbitration_id=int(rng.integers(1, 3)), data=data, is_extended_id=False), t)
        expect = min((st.last_cmd_t + 0.02 for st in emu._states if st.armed), default=math.inf)
        assert emu.next_timer_s() == expect
