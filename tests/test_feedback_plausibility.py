"""Feedback plausibility (issue 37 item 2): a sample the robot's limits make impossible is not used.

One bit flipped in the velocity field of an MIT reply (after the CAN CRC: a drive's or a
gateway's corruption) used to be taken as fresh: on the 3RRR demo bits 7-9 commanded the
15 N m limit, bits 5-6 4.6-9.1 N m (the demo's own peak is 0.33 N m), bits 10-11 stopped the
run for the velocity limit.  Now a flip the robot's limits make impossible is rejected
(not fresh, last good values, counted) and the run goes on; a run of them is a fault (the
fault x protocol rows in :mod:`tests.fault_matrix`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from controller.app.run import build_run, load_run
from controller.plausibility import FeedbackPlausibility
from controller.telemetry import read_log
from drivers.base import Feedback
from dynamics.errors import ConfigError

try:
    from tests.test_integration_faults import _Hooked
except ImportError:  # pragma: no cover - rootdir not on sys.path
    from test_integration_faults import _Hooked

DEMO = Path(__file__).resolve().parents[1] / "hil_configs" / "runs" / "3rrr_circle.toml"
K = 150
#: the AK80-9's velocity field: 12 bits over +-50 rad/s (the demo's motors, gear ratio 1)
V_LSB = 100.0 / 4095


def _flip_velocity_bit_once(transport, can_id: int, bit: int):
    """The next reply of motor ``can_id`` gets bit ``bit`` (0 = least significant) of its 12-bit
    velocity field flipped (bits 11..4 are byte 3, bits 3..0 the high nibble of byte 4)."""
    orig = transport.recv_fields
    done = []

    def recv_fields(timeout_s=0.0):
        f = orig(timeout_s)
        if f is not None and not done and len(f[1]) >= 6 and f[1][0] == can_id:
            d = bytearray(f[1])
            if bit >= 4:
                d[3] ^= 1 << (bit - 4)
            else:
                d[4] ^= 1 << (4 + bit)
            done.append(True)
            f = (f[0], bytes(d)) + tuple(f[2:])
        return f

    transport.recv_fields = recv_fields


def _run(out, bit=None):
    spec = load_run(DEMO, duration_s=0.3)
    r = build_run(spec, out_dir=out)
    try:
        hooks = {} if bit is None else {K: lambda: _flip_velocity_bit_once(r.driver.inner.transports[0], 2, bit)}
        r.loop.driver = _Hooked(r.driver, hooks)
        res = r.loop.run()
        tau_max = float(r.loop.safety.tau_max[1])
    finally:
        r.close()
    return res, read_log(out), tau_max


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    return _run(tmp_path_factory.mktemp("clean") / "run")


@pytest.mark.parametrize("bit", range(12))
def test_one_flipped_velocity_bit_commands_no_torque_spike(tmp_path, clean, bit):
    res0, ref, tau_max = clean
    res, log, _ = _run(tmp_path / "run", bit)
    assert res.status == "completed", [str(f) for f in res.faults]
    dev = float(np.abs(log["tau_cmd"] - ref["tau_cmd"]).max())
    jump = V_LSB * 2 ** bit        # rad/s, the flip's change of the reading
    note = [m for m in res.messages if "implausible" in m]
    if jump > 0.7:
        # an acceleration of 700 rad/s^2 and more: beyond what 15 N m give the 3RRR's inertia at
        # this pose (about 250 rad/s^2, twice that accepted): not used, counted, and the torque
        # differs from the clean run's by what one cycle without fresh feedback gives
        assert note and "joint 1: 1 implausible" in note[0], res.messages
        assert dev < 0.05 * tau_max, dev
    # no flip, plausible or not, commands a spike: the largest (bit 4, 0.39 rad/s, a reading the
    # torque limits allow) moves the torque by 2.3 N m against 15 N m on the unchecked path
    assert dev < 0.2 * tau_max, dev


def _fb(t, q, qd, fresh=True):
    n = len(q)
    return Feedback(t, np.array(q, float), np.array(qd, float), np.zeros(n), np.zeros(n, dtype=np.int64),
                    np.full(n, fresh), np.ones(n, dtype=bool))


def test_a_physical_motion_passes_and_each_impossible_sample_is_rejected():
    """A sinusoid within the limits (quantised as an MIT drive reports it) is never rejected; a
    position jump, a velocity jump and a velocity that disagrees with the position each are,
    keep the last good values, and three in a row are reported for the fault."""
    P = 0.001
    A, w = 0.5, 2 * np.pi * 3.0                # peak velocity 9.4 rad/s, acceleration 178 rad/s^2
    chk = FeedbackPlausibility(v_plausible=[30.0], a_plausible=[250.0], run_max=3)
    q_lsb = 25.0 / 65535

    def sample(t):
        return (np.round(A * np.sin(w * t) / q_lsb) * q_lsb, np.round(A * w * np.cos(w * t) / V_LSB) * V_LSB)

    chk.accept(0.0, _fb(0.0, *[[x] for x in sample(0.0)]))
    for k in range(1, 2000):
        q, qd = sample(k * P)
        out, bad, run_bad = chk.check(k * P, _fb(k * P, [q], [qd]))
        assert bad.size == 0 and out.fresh[0], (k, q, qd)
    t = 2000 * P
    q, qd = sample(t)
    for what, (qx, qdx) in {"position jump": (q + 0.05, qd), "velocity jump": (q, qd + 2.0),
                            "disagreement": (q + 0.004, qd)}.items():
        out, bad, _ = chk.check(t, _fb(t, [qx], [qdx]))
        assert bad.tolist() == [0] and not out.fresh[0], what
        assert out.position_rad[0] == pytest.approx(sample(1999 * P)[0]), what
    assert chk.rejected[0] == 3
    _, _, run_bad = chk.check(t, _fb(t, [q + 1.0], [qd]))
    assert run_bad.tolist() == [0]
    out, bad, run_bad = chk.check(t + P, _fb(t + P, *[[x] for x in sample(t + P)]))
    assert bad.size == 0 and run_bad.size == 0 and out.fresh[0]


def test_a_stale_sample_is_not_checked_and_keeps_its_values():
    chk = FeedbackPlausibility([30.0], [250.0], 3)
    chk.accept(0.0, _fb(0.0, [0.0], [0.0]))
    fb = _fb(0.001, [5.0], [99.0], fresh=False)
    out, bad, _ = chk.check(0.001, fb)
    assert out is fb and bad.size == 0


@pytest.mark.parametrize("bad", [0.0, -1.0, 1e300, float("inf")])
def test_the_plausible_acceleration_cannot_switch_the_check_off(bad):
    with pytest.raises(ConfigError, match="feedback_accel_max"):
        load_run(DEMO, overrides={"safety.feedback_accel_max": bad})


class _VectorCheck:
    """The plausibility rules in numpy's vector form (as the check was written before it was
    compiled, issue 38): the reference of the compiled check's parity test."""

    def __init__(self, v, a, run_max):
        n = len(v)
        self.v, self.a, self.run_max = np.asarray(v, float), np.asarray(a, float), run_max
        self.q, self.qd, self.t = np.full(n, np.nan), np.full(n, np.nan), np.full(n, np.nan)
        self.run = np.zeros(n, dtype=np.int64)

    def check(self, t_s, q, qd, fresh):
        from controller.plausibility import POSITION_TOL, VELOCITY_TOL
        dt = np.maximum(t_s - self.t, 0.0)
        with np.errstate(invalid="ignore"):
            dq = q - self.q
            bad = np.abs(dq) > self.v * dt + POSITION_TOL
            has_v = np.isfinite(qd) & np.isfinite(self.qd)
            a_dt = self.a * dt
            bad |= has_v & (np.abs(qd - self.qd) > a_dt + VELOCITY_TOL)
            bad |= has_v & (np.abs(dq - 0.5 * dt * (qd + self.qd)) > 0.5 * a_dt * dt + POSITION_TOL)
        bad &= fresh & np.isfinite(dt)
        good = fresh & ~bad & np.isfinite(q)
        self.q, self.qd = np.where(good, q, self.q), np.where(good, qd, self.qd)
        self.t = np.where(good, t_s, self.t)
        self.run = np.where(bad, self.run + 1, np.where(good, 0, self.run))
        return bad


def test_the_compiled_check_is_the_vector_rules_bit_for_bit():
    """Random samples that hit every rule (jumps of position and velocity, disagreement, NaN
    readings, stale joints, time going back, infinite bounds): the compiled check rejects the
    same joints, keeps the same last accepted values (bit for bit) and counts the same runs as
    the rules in numpy's vector form."""
    rng = np.random.default_rng(38)
    n = 4
    v, a = np.array([30.0, 5.0, np.inf, 30.0]), np.array([250.0, np.inf, 100.0, 40.0])
    chk, ref = FeedbackPlausibility(v, a, 3), _VectorCheck(v, a, 3)
    q, qd, t = np.zeros(n), np.zeros(n), 0.0
    seen = np.zeros(n, dtype=np.int64)
    for k in range(4000):
        t += rng.choice([0.001, 0.0, -0.0005, 0.002])
        q = q + 0.001 * qd + rng.normal(0.0, 1e-4, n)
        qd = qd + rng.normal(0.0, 0.05, n)
        qx, qdx = q.copy(), qd.copy()
        hit = rng.random(n)
        qx[hit < 0.03] += rng.normal(0.0, 0.05, n)[hit < 0.03]
        qdx[(hit > 0.03) & (hit < 0.06)] += rng.normal(0.0, 3.0, n)[(hit > 0.03) & (hit < 0.06)]
        qx[(hit > 0.06) & (hit < 0.07)] = np.nan
        qdx[(hit > 0.07) & (hit < 0.09)] = np.nan
        fresh = rng.random(n) > 0.05
        out, bad, run_bad = chk.check(t, _fb(t, qx, qdx, fresh))
        want = ref.check(t, qx, qdx, fresh)
        assert bad.tolist() == np.flatnonzero(want).tolist(), k
        # the runs are reported on a cycle that rejects something
        assert run_bad.tolist() == (np.flatnonzero(ref.run >= 3).tolist() if want.any() else []), k
        assert chk._run.tolist() == ref.run.tolist(), k
        for mine, theirs in ((chk._q, ref.q), (chk._qd, ref.qd), (chk._t, ref.t)):
            assert mine.tobytes() == theirs.tobytes(), k
        assert out.fresh.tolist() == (fresh & ~want).tolist(), k
        seen += want
    assert chk.rejected.tolist() == seen.tolist()
    assert seen.min() > 10, seen       # every joint's checks were hit
