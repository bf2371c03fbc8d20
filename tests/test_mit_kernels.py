"""The MIT driver's compiled cycle (:mod:`drivers._mit_kernels`) against the codec's plain
functions and the follow rule written out in Python, to the bit.

* :func:`encode_torque` (a command of torques only) against the driver's general Python path
  (:meth:`MitCanDriver.make_commands` with zero gains and velocities: the codec's field encoders)
  and :func:`drivers.codecs.mit.decode_command_values` of the frames;
* :func:`after_collect` (the replies kept) against :func:`drivers.codecs.mit.decode_reply_values`
  and the joint mapping written out;
* :func:`follow_step` against the rule of :mod:`drivers.mit_health` written out in Python
  (lists, as the monitor was before it was compiled), over random cycles with faults.

These are parity tests (two implementations kept equal on purpose; the follow rule's Python
form is a transcription). The independent checks of the same values:
``test_mit_thirdparty.py::test_driver_cycle_frames_and_feedback_vs_tmotor_can_mit_mode`` (the
driver's frames and reported values against tmotor-can-mit-mode),
``test_mit_thirdparty.py::test_command_packing_byte_exact_vs_tmotor_can_mit_mode`` and
``test_codec_mit.py::test_encode_command_byte_exact`` (the codec), and for the follow rule
``test_mit_faults.py::test_limp_motor_fault_after_window_cycles``,
``test_mit_faults.py::test_limp_motor_below_the_tolerance_is_not_flagged`` and
``test_mit_faults.py::test_frozen_replies_fault_after_frozen_cycles`` (emulated motors).
"""

from __future__ import annotations

import math
import struct

import numpy as np
import pytest

from drivers import _mit_kernels as k
from drivers.base import Command, JointMapping
from drivers.codecs import mit as mc
from drivers.mit_health import FAULT_FROZEN, FAULT_NOT_FOLLOWING, FollowConfig, FollowMonitor
from dynamics.errors import DriverError
from tests.test_codec_drivers import LIM, MitMotors, mit_driver

MAPPINGS = (JointMapping(), JointMapping(gear_ratio=9.0, sign=-1, offset_rad=0.3, efficiency=0.9),
            JointMapping(gear_ratio=1.0, sign=-1, efficiency=0.5))


def _bits(values) -> bytes:
    return struct.pack(f"<{len(values)}d", *values)


@pytest.mark.parametrize("quantization", ["nearest", "truncate"])
@pytest.mark.parametrize("mapping", MAPPINGS)
def test_encode_torque_equals_the_general_path(quantization, mapping):
    drv, buses, _ = mit_driver(MitMotors([1, 2, 3]), n=3, mapping=mapping, quantization=quantization)
    rng = np.random.default_rng(5)
    tmax = LIM.t_max_nm * mapping.gear_ratio * mapping.efficiency
    step = 2 * tmax / 4095
    taus = [rng.uniform(-1.3, 1.3, 3) * tmax for _ in range(300)]
    # on the quantisation steps and half steps, at and beyond the ends, signed zeros, subnormals
    taus += [(-tmax + step * rng.integers(0, 4096, 3) + d).astype(float) for d in (0.0, step / 2) for _ in range(200)]
    taus += [np.array([0.0, -0.0, tmax]), np.array([-tmax, 1e300, -1e300]), np.array([5e-324, -5e-324, 0.0]),
             np.array([tmax + step, -tmax - step, tmax - step / 2])]
    zeros = np.zeros(3)
    for tau in taus:
        sat = k.encode_torque(tau, drv._C, drv._fixed, drv._tx, drv._S, drv._half)
        frames = drv.make_commands(Command(tau, velocity_rad_s=zeros, kp_nm_per_rad=zeros, kd_nm_s_per_rad=zeros))
        assert sat == drv.last_saturated
        assert [bytes(drv._tx[j]) for j in range(3)] == [f.data for f in frames]
        for j, f in enumerate(frames):
            assert _bits(drv._S[k.S_CP:k.S_CT + 1, j]) == _bits(mc.decode_command_values(f.data, LIM))
    # a non-finite torque, or one whose motor-side value is not finite: -1, and the driver's
    # Python path raises its error (nothing sent)
    for bad in (np.array([math.nan, 0.0, 0.0]), np.array([0.0, math.inf, 0.0]), np.array([0.0, 0.0, 1.7e308])):
        assert k.encode_torque(bad, drv._C, drv._fixed, drv._tx, drv._S, drv._half) == (
            -1 if mapping.efficiency * mapping.gear_ratio < 1 or not np.isfinite(bad).all() else 1)
    drv.enable()
    n_sent = len(buses[0].sent)
    with pytest.raises(DriverError, match="non-finite"):
        drv.cycle(Command(np.array([0.0, math.nan, 0.0])))
    assert len(buses[0].sent) == n_sent


@pytest.mark.parametrize("form", ["read-only", "strided"])
def test_cycle_takes_the_compiled_encoder_for_torques_only_and_sends_the_same_frames(form):
    """The same torques as a float64 array (compiled encoder; also read-only or strided) and as
    a list (the Python path): the same frames on the bus, the same Feedback."""
    out = []
    for as_list in (False, True):
        drv, buses, clock = mit_driver(MitMotors([1, 2, 3]), mapping=MAPPINGS[1])
        drv.enable()
        rng = np.random.default_rng(2)
        fbs = []
        for c in range(60):
            clock[0] += 1e-3
            tau = rng.uniform(-60, 60, 3)
            arr = tau.copy()
            if form == "read-only":
                arr.setflags(write=False)
            else:
                arr = np.repeat(tau, 2)[::2]
            fb = drv.cycle(Command(tau.tolist() if as_list else arr))
            if not as_list:     # the compiled encoder wrote the frames sent
                assert [bytes(r) for r in drv._tx] == [bytes(m.data) for m in buses[0].sent[-3:]]
            fbs.append(_bits(np.concatenate([fb.position_rad, fb.velocity_rad_s, fb.torque_nm,
                                             fb.info["torque_residual_nm"]])) + fb.fault.tobytes())
        out.append(([bytes(m.data) for m in buses[0].sent], fbs, drv.last_saturated))
    assert out[0] == out[1]


@pytest.mark.parametrize("centered", [False, True])
@pytest.mark.parametrize("mapping", MAPPINGS)
def test_after_collect_keeps_what_the_codec_decodes(centered, mapping):
    drv, _, _ = mit_driver(MitMotors([1, 2, 3]), n=3, mapping=mapping, reply_centered=centered,
                           temperature_max_c=60.0)
    rng = np.random.default_rng(7)
    s, g, e, off = float(mapping.sign), mapping.gear_ratio, mapping.efficiency, mapping.offset_rad
    rx = drv._rx
    special = [bytes([1, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF]), bytes([1, 0, 0, 0, 0, 0]), bytes([1, 0x7F, 0xFF, 0x7F, 0xF7, 0xFF])]
    for c in range(400):
        replies = []
        for j in range(3):
            length = int(rng.choice([0, 6, 8]))
            data = bytes([j + 1]) + rng.integers(0, 256, 7, dtype=np.uint8).tobytes()
            if c < 3 and length:
                data = special[c][:6] + data[6:]
            replies.append(data[:length])
            rx[k.RX_STRIDE * j] = length
            rx[k.RX_STRIDE * j + 1:k.RX_STRIDE * j + 1 + length] = np.frombuffer(data[:length], np.uint8)
        before = drv._S.copy(), drv._I.copy()
        out_f, fault, fresh = np.empty(15), np.empty(3, np.int64), np.empty(3, bool)
        missing = k.after_collect(rx, drv._C, drv._S, drv._I, drv.monitor._f, drv.monitor._i,
                                  k.MODE_STORE | k.MODE_FEEDBACK, centered, 60.0, 0.0, 0.25, 10, 20, out_f, fault, fresh)
        assert missing == sum(not r for r in replies)
        assert fresh.tolist() == [bool(r) for r in replies]
        for j, data in enumerate(replies):
            S, I = drv._S[:, j], drv._I[:, j]
            if not data:       # nothing changes
                assert _bits(S) == _bits(before[0][:, j]) and (I == before[1][:, j]).all()
                continue
            _, p, v, t, temp, err = mc.decode_reply_values(data, LIM, centered)
            assert _bits(S[[k.S_PM, k.S_VM, k.S_TM]]) == _bits([p, v, t])
            assert _bits(S[[k.S_Q, k.S_QD, k.S_TAU]]) == _bits([s * p / g + off, s * v / g, s * t * g * e])
            assert I[k.I_RAW] == int.from_bytes(data[1:6], "big") and I[k.I_HAS_REP] == 1
            if len(data) == 8:
                assert S[k.S_TEMP] == temp and I[k.I_FAULT] == err
                if temp > 60.0 and before[1][k.I_DETECTED, j] == 0:
                    assert I[k.I_DETECTED] == 0x102
            else:
                assert _bits([S[k.S_TEMP]]) == _bits([before[0][k.S_TEMP, j]]) and I[k.I_FAULT] == before[1][k.I_FAULT, j]
        # the feedback vectors: the kept values, the error byte else the detected fault
        want = np.concatenate([drv._S[r] for r in (k.S_Q, k.S_QD, k.S_TAU, k.S_TEMP, k.S_RESID)])
        assert _bits(out_f) == _bits(want)
        assert fault.tolist() == [f if f else d for f, d in zip(drv._I[k.I_FAULT], drv._I[k.I_DETECTED])]
        if c % 50 == 0:
            drv._I[k.I_DETECTED] = 0        # let the over-temperature latch again


class _ListMonitor:
    """The follow rule written out in Python on lists (the monitor as it was before it was compiled)."""

    def __init__(self, tmax, cfg):
        n = len(tmax)
        self.cfg, self.tmax = cfg, list(tmax)
        self.tol = [cfg.tol_nm if cfg.tol_nm is not None else 0.01 * t for t in tmax]
        self.x, self.u, self.bad, self.same = [0.0] * n, [0.0] * n, [0] * n, [0] * n
        self.last, self.xlo, self.xhi = [None] * n, [0.0] * n, [0.0] * n
        self.codes, self.resid, self.t = [0] * n, [0.0] * n, None

    def gain(self, t_s):
        cfg = self.cfg
        dt = 0.0 if self.t is None else max(0.0, t_s - self.t)
        return 1.0 if cfg.lag_s == 0.0 else 1.0 - math.exp(-dt / cfg.lag_s) if dt > 0 else 0.0

    def update(self, t_s, fresh, replies, commands):
        a = self.gain(t_s)
        self.t = t_s
        cfg = self.cfg
        for j, tm in enumerate(self.tmax):
            x = self.x[j] + a * (self.u[j] - self.x[j])
            self.x[j] = x
            rep = replies[j] if fresh[j] else None
            p_des, v_des, kp, kd, t_ff = commands[j]
            if rep is None:
                u = t_ff
            else:
                p, v, t_meas, raw = rep
                u = t_ff + kp * (p_des - p) + kd * (v_des - v)
                if self.codes[j] == 0:
                    r = t_meas - x
                    self.resid[j] = r
                    if abs(r) > self.tol[j] + cfg.rel_tol * abs(x):
                        self.bad[j] += 1
                        if self.bad[j] >= cfg.window_cycles:
                            self.codes[j] = FAULT_NOT_FOLLOWING
                    else:
                        self.bad[j] = 0
                    if self.codes[j] == 0:
                        if raw == self.last[j]:
                            self.same[j] += 1
                            if x < self.xlo[j]:
                                self.xlo[j] = x
                            elif x > self.xhi[j]:
                                self.xhi[j] = x
                            if self.same[j] >= cfg.frozen_cycles and self.xhi[j] - self.xlo[j] > self.tol[j]:
                                self.codes[j] = FAULT_FROZEN
                        else:
                            self.last[j] = raw
                            self.same[j] = 1
                            self.xlo[j] = self.xhi[j] = x
            self.u[j] = tm if u > tm else -tm if u < -tm else u
        return self.codes


@pytest.mark.parametrize("cfg", [FollowConfig(), FollowConfig(lag_s=0.0, window_cycles=2, frozen_cycles=3),
                                 FollowConfig(tol_nm=0.5, rel_tol=0.0, window_cycles=5, frozen_cycles=4),
                                 FollowConfig(lag_s=0.1, rel_tol=0.9)])
def test_follow_monitor_equals_the_rule_written_in_python(cfg):
    tmax = [18.0, 9.0, 48.0]
    mon, ref = FollowMonitor(tmax, cfg), _ListMonitor(tmax, cfg)
    rng = np.random.default_rng(11)
    seen = set()
    t = 0.0
    for c in range(3000):
        if c % 700 == 0:
            m0 = rng.uniform(-5, 5, 3).tolist()
            mon.reset(m0)
            ref.__init__(tmax, cfg)
            ref.x, ref.u = list(m0), list(m0)
        t += float(rng.choice([1e-3, 0.0, 2e-3, -1e-3]))
        fresh = (rng.random(3) > 0.1).tolist()
        # joint 0: replies that follow the command exactly, frozen (repeating) in some blocks;
        # joints 1 and 2: noisy replies, far off in some blocks
        frozen = c % 200 > 120
        replies = []
        for j in range(3):
            if not fresh[j] and rng.random() < 0.5:
                replies.append(None)
                continue
            raw = 7 if frozen and j == 0 else int(rng.integers(0, 4))
            x = ref.x[j] + ref.gain(t) * (ref.u[j] - ref.x[j])        # what the monitor expects
            t_meas = x + (0.0 if j == 0 else float(rng.normal(0, 0.3 if c % 300 < 150 else 3.0)))
            replies.append((float(rng.uniform(-1, 1)), float(rng.uniform(-5, 5)), t_meas, raw))
        commands = [tuple(rng.uniform([-1, -5, 0, 0, -30], [1, 5, 50, 2, 30]).tolist()) for _ in range(3)]
        codes = mon.update(t, fresh, replies, commands)
        want = ref.update(t, fresh, replies, commands)
        assert codes == want
        assert _bits(mon.residual_nm) == _bits(ref.resid)
        assert _bits(mon._f[k.M_X]) == _bits(ref.x) and _bits(mon._f[k.M_U]) == _bits(ref.u)
        seen.update(codes)
    assert {0, FAULT_NOT_FOLLOWING, FAULT_FROZEN} <= seen or cfg.lag_s == 0.1


def test_follow_monitor_raw_bytes_compare_as_integers():
    mon = FollowMonitor([18.0], FollowConfig(lag_s=0.0, frozen_cycles=3))
    for c in range(6):
        codes = mon.update(c * 1e-3, [True], [(0.0, 0.0, 0.0, b"\x01\x02\x03\x04\x05")],
                           [(0.0, 0.0, 0.0, 0.0, 0.0 if c % 2 else 0.1)])
    # identical replies while the expected torque moves by less than the tolerance: no fault
    assert codes == [0] and mon._i[k.MI_LAST, 0] == 0x0102030405
