"""The ODrive CAN driver's compiled encoder (:mod:`drivers._odrive_kernels`) against the codec.

A command of torques only is encoded for every axis by one compiled call; the frames must be
the ones :func:`drivers.codecs.odrive.encode_set_input_torque` makes from the driver's mapping
and clamp (``t_m = sign * tau / (gear * efficiency)``, clamped to ``torque_limit_nm``), byte
for byte, with the same saturation count; a command the codec refuses raises the same error
and sends nothing.  The reference here is the codec's float32 packing (``struct``), and the
same command with zero gains, which takes the driver's per-axis Python path.

These are parity tests (compiled path against the codec and the driver's Python path). The
independent checks of the same bytes: ``test_odrive_references.py::test_codec_both_directions_against_the_dbc``
(the codec against ODrive's DBC file through cantools) and
``test_odrive_references.py::test_our_driver_against_a_dbc_strict_peer`` (the driver's frames).
"""

from __future__ import annotations

import math
import re
from collections import deque

import numpy as np
import pytest

from dynamics.errors import DriverError
from drivers.base import Command, JointMapping
from drivers.codecs import odrive as odc
from drivers.odrive import OdriveAxis, OdriveCanDriver
from drivers.transport import CanTransport

F32_MAX = float(np.finfo(np.float32).max)


class _Bus:
    """A bus that records what is sent and never answers."""

    def __init__(self):
        self.sent = []
        self.q = deque()

    def send(self, msg, timeout=None):
        self.sent.append(msg)

    def recv(self, timeout=None):
        return None

    def shutdown(self):
        pass


MAPPINGS = [JointMapping(), JointMapping(gear_ratio=628.3185307179587),
            JointMapping(gear_ratio=9.0, sign=-1, offset_rad=0.3, efficiency=0.9),
            JointMapping(gear_ratio=1.0, sign=-1, efficiency=0.5)]


def _driver(limits):
    bus = _Bus()
    t = CanTransport.from_bus(bus, name="k")
    axes = [OdriveAxis(t, i, MAPPINGS[i % len(MAPPINGS)], f"a{i}", torque_limit_nm=lim)
            for i, lim in enumerate(limits)]
    return OdriveCanDriver(axes, now=lambda: 0.0, torque_feedback="none"), bus


def _codec_frames(drv, tau):
    """Each axis' frame by the codec, from the driver's mapping and clamp (the reference)."""
    out, sat = [], 0
    for j, ax in enumerate(drv.axes):
        m = ax.mapping
        t_m = m.sign * float(tau[j]) / (m.gear_ratio * m.efficiency)
        if ax.torque_limit_nm is not None and abs(t_m) > ax.torque_limit_nm:
            t_m = math.copysign(ax.torque_limit_nm, t_m)
            sat += 1
        out.append((odc.arbitration_id(ax.node_id, odc.Cmd.SET_INPUT_TORQUE), odc.encode_set_input_torque(t_m)))
    return out, sat


def test_torque_only_frames_equal_the_codecs_byte_for_byte(monkeypatch):
    import drivers.odrive as od

    drv, _ = _driver([None, 2.5, 0.75, None, 1e38, 3.0])
    used = []
    fast = od._ok.encode_set_input_torque
    monkeypatch.setattr(od._ok, "encode_set_input_torque", lambda *a: used.append(1) or fast(*a))
    rng = np.random.default_rng(38)
    taus = [rng.normal(0, s, 6) for s in (1e-3, 1.0, 30.0, 3e3) for _ in range(250)]
    # float32 rounding ties and neighbours, subnormals, signed zeros, the float32 edge
    f32 = rng.normal(0, 1, 200).astype(np.float32).astype(np.float64)
    taus += [np.full(6, x) * s for x in (np.nextafter(f32, 2.0) + f32) / 2 for s in (1.0,)][:200]
    taus += [np.array([5e-324, -5e-324, 1e-45, -1e-39, 0.0, -0.0]),
             np.array([3e38, -3e38, 1e300, -1e300, 3.4e38, -3.4e38]),
             np.array([F32_MAX, -F32_MAX, 2.0, -2.0, 1e38 * 9.0, 0.0])]
    zeros = np.zeros(6)
    refused = 0
    for tau in taus:
        try:
            want, want_sat = _codec_frames(drv, tau)
        except DriverError as err:           # the codec refuses: so does the driver, with its words
            with pytest.raises(DriverError, match=re.escape(str(err))):
                drv._request(Command(tau))
            refused += 1
            continue
        got = drv._request(Command(tau))
        assert got == want
        assert drv.last_saturated == want_sat and type(drv.last_saturated) is int
        general = drv._request(Command(tau, kp_nm_per_rad=zeros, kd_nm_s_per_rad=zeros))
        assert general == want and drv.last_saturated == want_sat
        assert [(f.arbitration_id, f.data) for f in drv.make_commands(Command(tau))] == want
    assert len(used) >= len(taus) and 0 < refused < 5


@pytest.mark.parametrize("bad", [np.array([0.0, math.nan, 0, 0, 0, 0]), np.array([math.inf, 0, 0, 0, 0, 0]),
                                 np.array([1e300, 0, 0, 0, 0, 0]), np.zeros(5), np.zeros(6, dtype=np.float32)])
def test_refused_commands_raise_as_the_per_axis_path_and_send_nothing(bad):
    # axis 0 unclamped on a 1:1 mapping: 1e300 N m is past float32 and refused by the codec
    drv, bus = _driver([None] * 6)
    drv._enabled_cmd = True
    errors = []
    for cmd in (Command(bad), Command(bad, kp_nm_per_rad=np.zeros(6), kd_nm_s_per_rad=np.zeros(6))):
        try:
            drv._request(cmd)
        except DriverError as err:
            errors.append(str(err))
    if bad.dtype == np.float32:      # a float32 vector is a valid command: the per-axis path encodes it
        assert errors == []
        assert drv._request(Command(bad)) == _codec_frames(drv, bad)[0]
        return
    assert len(errors) == 2 and errors[0] == errors[1]
    with pytest.raises(DriverError):
        drv.cycle(Command(bad))
    assert bus.sent == []


def _estimate_payloads(rng):
    """Get_Encoder_Estimates payloads: random, extreme and non-finite float32, cut short, longer."""
    f = np.concatenate([rng.normal(0, 3, 100), rng.normal(0, 1e6, 30), [0.0, -0.0, 1e-45, -1e-45, 1e-40, F32_MAX,
                                                                          -F32_MAX, np.inf, -np.inf, np.nan]])
    out = [np.array([a, b], dtype=np.float32).tobytes() for a, b in zip(f, np.roll(f, 7))]
    out += [p + bytes([1, 2]) for p in out[:10]] + [out[0][:k] for k in range(8)]
    out += [bytes(rng.integers(0, 256, 8, dtype=np.uint8)) for _ in range(200)]     # NaN payloads among them
    return out


def test_compiled_estimates_decoding_equals_the_codecs():
    """The driver's compiled decoding of Get_Encoder_Estimates gives the codec path's joint values
    to the bit (both sides' mappings), and a frame the codec refuses is counted corrupt with the
    feedback unchanged, as on the Python path."""
    import drivers.odrive as od

    drv, _ = _driver([None] * 4)
    rng = np.random.default_rng(4)
    n_ok = n_bad = 0
    for data in _estimate_payloads(rng):
        j = int(rng.integers(0, 4))
        arb = odc.arbitration_id(j, odc.Cmd.GET_ENCODER_ESTIMATES)
        drv._q[j] = drv._qd[j] = 7.0
        drv._stats = drv._new_stats()
        drv._handle_fields(0, (arb, data, 0.0, False, False, False, None))
        got = (drv._q[j], drv._qd[j], drv._stats["corrupt"])
        try:
            est = odc.decode_encoder_estimates(data)
        except od.DecodeError:
            assert got == (7.0, 7.0, 1)
            n_bad += 1
            continue
        m = drv.axes[j].mapping
        want_q = m.sign * 2 * math.pi * est.pos_rev / m.gear_ratio + m.offset_rad
        want_qd = m.sign * 2 * math.pi * est.vel_rev_s / m.gear_ratio
        assert np.array([got[0], got[1]]).tobytes() == np.array([want_q, want_qd]).tobytes(), data
        assert got[2] == 0 and drv._fresh[j]
        n_ok += 1
    assert n_ok > 150 and n_bad > 10


def test_compiled_estimates_decoding_is_taken(monkeypatch):
    """The compiled call decodes the frame (the codec is not asked for a payload it accepts)."""
    import drivers.odrive as od

    drv, _ = _driver([None] * 2)
    monkeypatch.setattr(od.codec, "decode_encoder_estimates", lambda data: 1 / 0)
    data = np.array([1.5, -0.25], dtype=np.float32).tobytes()
    drv._handle_fields(0, (odc.arbitration_id(1, odc.Cmd.GET_ENCODER_ESTIMATES), data, 0.0, False, False, False,
                           None))
    m = drv.axes[1].mapping
    assert drv._q[1] == m.sign * 2 * math.pi * 1.5 / m.gear_ratio + m.offset_rad


@pytest.mark.parametrize("feedback", ["iq", "torques"])
def test_compiled_torque_feedback_decoding_equals_the_codecs(feedback):
    """The driver's compiled decoding of Get_Iq / Get_Torques gives the codec path's joint torque
    to the bit (``sign * iq_measured * kt * gear * efficiency``, ``sign * estimate * gear *
    efficiency``, the reference written here from the codec's fields), and a frame the codec
    refuses is counted corrupt with the torque unchanged."""
    import drivers.odrive as od

    bus = _Bus()
    t = CanTransport.from_bus(bus, name="k")
    maps = [JointMapping(torque_constant_nm_per_a=0.083), JointMapping(gear_ratio=628.3185307179587),
            JointMapping(gear_ratio=9.0, sign=-1, offset_rad=0.3, efficiency=0.9, torque_constant_nm_per_a=0.21),
            JointMapping(gear_ratio=1.0, sign=-1, efficiency=0.5, torque_constant_nm_per_a=1.7)]
    drv = OdriveCanDriver([OdriveAxis(t, i, m, f"a{i}") for i, m in enumerate(maps)], now=lambda: 0.0,
                          torque_feedback=feedback)
    cmd = odc.Cmd.GET_IQ if feedback == "iq" else odc.Cmd.GET_TORQUES
    rng = np.random.default_rng(5)
    n_ok = n_bad = 0
    for data in _estimate_payloads(rng):
        j = int(rng.integers(0, 4))
        drv._tau[j] = 7.0
        drv._stats = drv._new_stats()
        drv._handle_fields(0, (odc.arbitration_id(j, cmd), data, 0.0, False, False, False, None))
        got = (drv._tau[j], drv._stats["corrupt"])
        try:
            msg = odc.decode_iq(data) if feedback == "iq" else odc.decode_torques(data)
        except od.DecodeError:
            assert got == (7.0, 1)
            n_bad += 1
            continue
        m = maps[j]
        if feedback == "iq":
            want = m.sign * msg.iq_measured_a * m.torque_constant_nm_per_a * m.gear_ratio * m.efficiency
        else:
            want = m.sign * msg.torque_estimate_nm * m.gear_ratio * m.efficiency
        assert np.float64(got[0]).tobytes() == np.float64(want).tobytes(), data
        assert got[1] == 0
        n_ok += 1
    assert n_ok > 150 and n_bad > 10


def test_compiled_torque_feedback_decoding_is_taken(monkeypatch):
    """The compiled call decodes Get_Iq (the codec is not asked for a payload it accepts)."""
    import drivers.odrive as od

    bus = _Bus()
    t = CanTransport.from_bus(bus, name="k")
    m = JointMapping(gear_ratio=9.0, sign=-1, efficiency=0.9, torque_constant_nm_per_a=0.21)
    drv = OdriveCanDriver([OdriveAxis(t, 3, m)], now=lambda: 0.0, torque_feedback="iq")
    monkeypatch.setattr(od.codec, "decode_iq", lambda data: 1 / 0)
    data = np.array([1.5, -2.25], dtype=np.float32).tobytes()
    drv._handle_fields(0, (odc.arbitration_id(3, odc.Cmd.GET_IQ), data, 0.0, False, False, False, None))
    assert drv._tau[0] == -1 * -2.25 * 0.21 * 9.0 * 0.9 and drv._stats["corrupt"] == 0


def test_direct_entry_only_for_the_compiled_types():
    """``direct_entry`` gives the machine code (numba's ``entry_point``) only for arguments of the
    kernel's one compiled signature, and it computes what the dispatcher computes; for an array of
    another dtype or layout, or a kernel without exactly one signature, the dispatcher itself."""
    from numba import njit

    from drivers import _odrive_kernels as ok

    n = 3
    C = np.ones((ok.C_ROWS, n))
    C[ok.C_GEAR] = [2.0, 3.0, 5.0]
    bufs = [np.zeros(n), np.zeros(n), np.zeros(n), np.zeros(n, dtype=bool), np.zeros(n, dtype=bool),
            np.zeros(4, dtype=bool)]
    payload = np.array([1.5, -0.25, 2.0, 4.0], dtype=np.float32).tobytes()
    axes, kinds = np.array([2, 0], dtype=np.int64), np.array([ok.KIND_ESTIMATES, ok.KIND_IQ], dtype=np.int64)
    f = ok.decode_feedback_run
    entry = ok.direct_entry(f, payload, axes, kinds, C, *bufs)
    assert entry is not f and entry is f.overloads[list(f.overloads)[0]].entry_point
    other = [b.copy() for b in bufs]
    assert entry(payload, axes, kinds, C, *bufs) == f(payload, axes, kinds, C, *other) == 0
    assert all(a.tobytes() == b.tobytes() for a, b in zip(bufs, other)) and bufs[0][2] != 0.0
    assert ok.direct_entry(f, payload, axes.astype(np.int32), kinds, C, *bufs) is f       # another dtype
    assert ok.direct_entry(f, payload, axes, kinds, np.asfortranarray(C), *bufs) is f    # another layout
    ro = bufs[0].copy()
    ro.flags.writeable = False
    assert ok.direct_entry(f, payload, axes, kinds, C, ro, *bufs[1:]) is f               # read-only
    assert ok.direct_entry(f, payload, axes, kinds, C, *bufs[:-1]) is f                  # an argument short

    @njit
    def twice(x):
        return 2 * x

    twice(1)
    twice(1.0)
    assert ok.direct_entry(twice, 1.0) is twice                                          # two signatures


def test_cycle_waits_only_while_an_axis_is_not_fresh_and_counts_the_missing(monkeypatch):
    """The cycle's test of every axis fresh (the bytes of ``_fresh``) and the feedback's count of
    missing axes (its bytes' ones) against ``ndarray.all`` and ``count_nonzero``, for every pattern
    of three axes: the wait (``_pump``) is asked exactly when one is not fresh."""
    import itertools

    drv, _ = _driver([None] * 3)
    for pattern in itertools.product([False, True], repeat=3):
        pumped = []
        monkeypatch.setattr(drv, "_handle_queued", lambda p=pattern: drv._fresh.__setitem__(slice(None), p))
        monkeypatch.setattr(drv, "_pump", lambda timeout_s, until: pumped.append(until()))
        fb = drv._exchange(drv._request(Command(np.zeros(3))))
        fresh = np.array(pattern)
        assert pumped == ([] if fresh.all() else [False]), pattern
        assert fb.info["missing"] == 3 - np.count_nonzero(fresh) and fb.fresh.tobytes() == fresh.tobytes()
