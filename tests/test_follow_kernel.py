"""The compiled torque-only follow check (drivers._follow_kernels via TorqueFollow.check) against
the plain-Python formulation it replaced (kept here as the reference): the same monitor state,
codes, residuals and faults every cycle, on seeded random sequences with NaN and infinite
values, missing replies, joints already faulted, saturated, limp and frozen drives, resets."""

from __future__ import annotations

import math
import sys

import numpy as np
import pytest

from drivers.base import Feedback
from drivers.follow import (FAULT_FROZEN, FAULT_NOT_FOLLOWING, HOST_FAULT_OFFSET, MI_BAD, MI_CODE, MI_HAS_LAST,
                            MI_SAME, FollowConfig, TorqueFollow)
from dynamics.errors import DriverError


def reference_check(tf: TorqueFollow, tau_cmd_nm, feedback) -> None:
    """TorqueFollow.check as it was before the kernel: per-joint Python, the replies' identity
    a hash of (position, velocity, torque), the rule through FollowMonitor.step (plain Python)."""
    mon = tf.monitor
    if not mon.config.enabled:
        return
    n = mon.n
    ok, rep, raw = np.zeros(n, dtype=bool), np.zeros((3, n)), np.zeros(n, dtype=np.int64)
    cmd = np.zeros((5, n))
    for j in range(n):
        t = float(feedback.torque_nm[j])
        if feedback.fresh[j] and math.isfinite(t):
            p = float(feedback.position_rad[j])
            v = float(feedback.velocity_rad_s[j])
            if not math.isfinite(v):
                v = 0.0 if v != v else math.copysign(sys.float_info.max, v)
            ok[j] = True
            rep[:, j] = p, v, t
            raw[j] = hash((p, v, t))
    cmd[4] = tau_cmd_nm
    mon.step(float(feedback.t_s), ok, rep, raw, cmd)
    for j, c in enumerate(mon._i[MI_CODE].tolist()):
        if c and feedback.fault[j] == 0:
            feedback.fault[j] = HOST_FAULT_OFFSET + c


def _feedback(t_s, q, qd, tau, fresh, fault):
    n = len(q)
    return Feedback(t_s=t_s, position_rad=np.array(q, dtype=float), velocity_rad_s=np.array(qd, dtype=float),
                    torque_nm=np.array(tau, dtype=float), fault=np.array(fault, dtype=np.int64),
                    fresh=np.array(fresh, dtype=bool), enabled=np.ones(n, dtype=bool))


#: per-joint behaviours of the random drive
FOLLOW, LIMP, SATURATED, FROZEN, MISSING, NAN_TAU, BAD_VEL, FAULTED = range(8)


def _sequence(rng, n, steps, tmax):
    """(t_s, tau_cmd, q, qd, tau, fresh, fault, reset) per cycle: each joint switches between the
    behaviours above in runs of a few cycles (long enough to reach the windows)."""
    mode = rng.integers(0, 8, n)
    left = rng.integers(1, 12, n)
    q = rng.normal(size=n)
    last = [None] * n
    prev_cmd = np.zeros(n)
    t = 0.0
    out = []
    for _ in range(steps):
        t += float(rng.choice([1e-3, 1e-3, 2e-3, 0.0, 5e-4]))
        cmd = rng.normal(0.0, 0.6, n) * tmax
        cmd[rng.random(n) < 0.1] = 0.0
        q = q + rng.normal(0.0, 0.01, n)
        qd = rng.normal(size=n)
        tau = prev_cmd + rng.normal(0.0, 1e-3, n) * tmax
        fresh = np.ones(n, dtype=bool)
        fault = np.zeros(n, dtype=np.int64)
        for j in range(n):
            left[j] -= 1
            if left[j] <= 0:
                mode[j], left[j] = rng.integers(0, 8), rng.integers(1, 40)
            m = mode[j]
            if m == LIMP:
                tau[j] = 0.0
            elif m == SATURATED:
                tau[j] = float(np.clip(prev_cmd[j], -0.3 * tmax[j], 0.3 * tmax[j]))
            elif m == FROZEN and last[j] is not None:
                q[j], qd[j], tau[j] = last[j]
                if qd[j] == 0.0 and rng.random() < 0.5:
                    qd[j] = -qd[j]               # -0.0 and 0.0: the same reply
            elif m == FROZEN:
                qd[j] = 0.0
            elif m == MISSING:
                fresh[j] = False
            elif m == NAN_TAU:
                tau[j] = np.nan
            elif m == BAD_VEL:
                qd[j] = rng.choice([np.nan, np.inf, -np.inf])
            elif m == FAULTED:
                fault[j] = int(rng.integers(1, 1 << 20))
            if rng.random() < 0.02:
                fresh[j] = False
            last[j] = (q[j], qd[j], tau[j])
        prev_cmd = cmd
        out.append((t, cmd, q.copy(), qd, tau, fresh, fault, rng.random() < 0.01))
    return out


def _assert_same(new: TorqueFollow, ref: TorqueFollow, fb_new, fb_ref, k):
    assert new.monitor._f.tobytes() == ref.monitor._f.tobytes(), k
    rows = [MI_BAD, MI_SAME, MI_HAS_LAST, MI_CODE]     # MI_LAST: a hash there, a counter here
    assert np.array_equal(new.monitor._i[rows], ref.monitor._i[rows]), k
    assert np.array_equal(fb_new.fault, fb_ref.fault), k
    assert new.monitor._t == ref.monitor._t, k


CONFIGS = [FollowConfig(), FollowConfig(lag_s=0.0, window_cycles=6, frozen_cycles=3),
           FollowConfig(tol_nm=0.05, rel_tol=0.0, window_cycles=1, frozen_cycles=1),
           FollowConfig(lag_s=0.002, rel_tol=0.5, window_cycles=12, frozen_cycles=5)]


@pytest.mark.parametrize("n", [1, 3, 6])
@pytest.mark.parametrize("ci", range(len(CONFIGS)))
def test_compiled_check_matches_the_python_formulation(n, ci):
    rng = np.random.default_rng(1000 * n + ci)
    tmax = rng.uniform(0.5, 40.0, n)
    cfg = CONFIGS[ci]
    new, ref = TorqueFollow(tmax, cfg), TorqueFollow(tmax, cfg)
    seq = _sequence(rng, n, 3000, tmax)
    fb0 = _feedback(0.0, np.zeros(n), np.zeros(n), seq[0][4], np.ones(n), np.zeros(n))
    new.reset(fb0)
    ref.reset(fb0)
    seen = set()
    for k, (t, cmd, q, qd, tau, fresh, fault, reset) in enumerate(seq):
        fb_new = _feedback(t, q, qd, tau, fresh, fault)
        fb_ref = _feedback(t, q, qd, tau, fresh, fault)
        new.check(cmd, fb_new)
        reference_check(ref, cmd, fb_ref)
        _assert_same(new, ref, fb_new, fb_ref, k)
        seen.update(new.monitor._i[MI_CODE].tolist())
        if reset:
            new.reset(fb_new)
            ref.reset(fb_ref)
    # the sequences reach the faults (the test would not see a difference in a rule never run):
    # "frozen" first where it needs fewer cycles than "not following"
    assert FAULT_NOT_FOLLOWING in seen
    assert FAULT_FROZEN in seen or cfg.frozen_cycles >= cfg.window_cycles


def test_lists_views_and_other_dtypes_give_the_same_results():
    rng = np.random.default_rng(7)
    n = 3
    tmax = np.full(n, 5.0)
    cfg = FollowConfig(window_cycles=2, frozen_cycles=3)
    new, ref = TorqueFollow(tmax, cfg), TorqueFollow(tmax, cfg)
    for k, (t, cmd, q, qd, tau, fresh, fault, _) in enumerate(_sequence(rng, n, 400, tmax)):
        fb_new = Feedback(t_s=t, position_rad=np.repeat(q, 2)[::2], velocity_rad_s=list(qd),
                          torque_nm=tau.tolist(), fault=fault.tolist(), fresh=fresh.astype(np.int8),
                          enabled=np.ones(n, dtype=bool))
        fb_ref = _feedback(t, fb_new.position_rad, qd, tau, fresh, fault)
        new.check(cmd.tolist(), fb_new)
        reference_check(ref, cmd, fb_ref)
        assert new.monitor._f.tobytes() == ref.monitor._f.tobytes(), k
        assert fb_new.fault == fb_ref.fault.tolist(), k


def test_a_disabled_check_does_nothing():
    tf = TorqueFollow([1.0, 1.0], FollowConfig(enabled=False))
    fb = _feedback(0.0, [0.0, 0.0], [0.0, 0.0], [0.0, 0.0], [True, True], [0, 0])
    before = tf.monitor._f.copy(), tf.monitor._i.copy()
    for k in range(50):
        fb.t_s = k * 1e-3
        tf.check(np.array([1.0, -1.0]), fb)
    assert np.array_equal(tf.monitor._f, before[0]) and np.array_equal(tf.monitor._i, before[1])
    assert fb.fault.tolist() == [0, 0] and tf.monitor._t is None


def test_vectors_of_another_length_are_refused():
    tf = TorqueFollow([1.0, 1.0, 1.0])
    fb = _feedback(0.0, [0.0] * 3, [0.0] * 3, [0.0] * 3, [True] * 3, [0] * 3)
    with pytest.raises(DriverError, match="another length"):
        tf.check(np.zeros(2), fb)
    fb.fresh = np.ones(4, dtype=bool)
    with pytest.raises(DriverError, match="another length"):
        tf.check(np.zeros(3), fb)
    assert tf.monitor.codes == [0, 0, 0]
