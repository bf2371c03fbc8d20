"""Safety supervisor: unit checks, and every fault case through the loop ends safe with the log on disk."""

from __future__ import annotations

import os
import signal
import types

import numpy as np
import pytest

from controller.clock import LockstepClock
from controller.laws import ComputedTorque, Ref, State
from controller.loop import ControlLoop
from controller.safety import (BRAKING, CLIPPED, DISABLED, FAULT, HOLDING, SOFT_LIMIT, SafetyConfig,
                               SafetySupervisor)
from controller.telemetry import TelemetryWriter, read_log, read_meta
from drivers.base import Feedback
from drivers.sim.direct import DirectPlantDriver
from drivers.sim.plant import SimulatedPlant
from dynamics.config import Section
from dynamics.errors import ConfigError, SafetyError

try:
    from tests.test_ctrl_models import Arm2, Arm2Task, FaultyDriver, SineTraj, replace_fb
except ImportError:  # pragma: no cover
    from test_ctrl_models import Arm2, Arm2Task, FaultyDriver, SineTraj, replace_fb

P = 1e-3


def fb_ok(q, qd=None, n=2, **kw):
    d = dict(t_s=0.0, position_rad=np.asarray(q, float), velocity_rad_s=np.zeros(n) if qd is None else np.asarray(qd, float),
             torque_nm=np.zeros(n), fault=np.zeros(n, int), fresh=np.ones(n, bool), enabled=np.ones(n, bool))
    d.update(kw)
    return Feedback(**d)


def sup(with_model=True, **kw):
    """A supervisor of the 2R arm (``with_model=False``: without its model, so a brake is the
    damping alone: no gravity, no load observer)."""
    m = Arm2(tau_max=(10.0, 5.0))
    return SafetySupervisor(SafetyConfig(**kw), m.limits, model=m if with_model else None)


def check(s, q, qd, tau, ref=None, fb=None, t=0.0):
    q, qd = np.asarray(q, float), np.asarray(qd, float)
    ref = Ref.setpoint(q) if ref is None else ref
    fb = fb_ok(q, qd) if fb is None else fb
    return s.check(t, State(t, q, qd), fb, ref, np.asarray(tau, float))


# ---------------------------------------------------------------- unit checks
def test_clip_and_soft_limit():
    s = sup(position_margin_rad=0.1, soft_kd_nm_s_per_rad=2.0)
    cmd, st = check(s, [0.0, 0.0], [0.0, 0.0], [20.0, -1.0])
    assert np.allclose(cmd, [10.0, -1.0]) and st.code == CLIPPED and st.saturated.tolist() == [True, False]
    assert st.action == "run" and not s.latched
    # joint 0 in the soft zone near +3 rad moving up: push removed, damping added
    cmd, st = check(s, [2.95, 0.0], [1.0, 0.0], [3.0, 1.0])
    assert st.code & SOFT_LIMIT and cmd[0] == pytest.approx(-2.0) and cmd[1] == 1.0
    # moving away from the limit: untouched
    cmd, st = check(s, [2.95, 0.0], [-1.0, 0.0], [3.0, 1.0])
    assert st.code == 0 and np.allclose(cmd, [3.0, 1.0])


@pytest.mark.parametrize("case,cause", [
    ("nan_tau", "nonfinite"), ("nan_q", "nonfinite"), ("nan_ref", "nonfinite"), ("hard_limit", "position_limit"),
    ("velocity", "velocity_limit"), ("tracking", "tracking_error"), ("device", "device_fault"),
    ("disabled", "drive_disabled"), ("signal", "signal")])
def test_each_fault_latches_and_zero_disables(case, cause):
    s = sup(tracking_error_max=0.1)
    q, qd, tau = np.array([0.1, 0.2]), np.zeros(2), np.array([1.0, 1.0])
    ref, fb = Ref.setpoint(q), fb_ok(q)
    if case == "nan_tau":
        tau = np.array([np.nan, 1.0])
    elif case == "nan_q":
        q = np.array([0.1, np.inf])
    elif case == "nan_ref":
        ref = Ref(q, np.array([0.0, np.nan]), np.zeros(2))
    elif case == "hard_limit":
        q = np.array([3.2, 0.0])
        ref = Ref.setpoint(q)
    elif case == "velocity":
        qd = np.array([0.0, -25.0])
    elif case == "tracking":
        ref = Ref.setpoint(q + [0.0, 0.2])
    elif case == "device":
        fb = fb_ok(q, fault=np.array([0, 7]))
    elif case == "disabled":
        fb = fb_ok(q, enabled=np.array([True, False]))
    elif case == "signal":
        s.request_stop("SIGINT")
    cmd, st = s.check(0.5, State(0.5, q, qd), fb, ref, tau)
    assert np.all(cmd == 0.0) and st.action == "disable" and st.code == FAULT | DISABLED
    assert s.latched and s.faults[0].cause == cause and s.faults[0].t_s == 0.5
    # latched until reset, even when everything is fine again
    cmd, st = check(s, [0.1, 0.2], [0, 0], [1.0, 1.0])
    assert st.action == "disable" and np.all(cmd == 0)
    s.reset()
    cmd, st = check(s, [0.1, 0.2], [0, 0], [1.0, 1.0])
    assert st.action == "run" and np.allclose(cmd, [1.0, 1.0])


def test_stale_feedback_after_n_cycles():
    s = sup(stale_cycles=3)
    q = np.array([0.1, 0.2])
    stale = fb_ok(q, fresh=np.array([True, False]))
    for k in range(2):
        _, st = check(s, q, [0, 0], [0, 0], fb=stale)
        assert st.action == "run"
    _, st = check(s, q, [0, 0], [0, 0], fb=stale)
    assert st.action == "disable" and s.faults[0].cause == "stale_feedback" and s.faults[0].joint == 1


def test_brake_and_hold_reactions():
    s = sup(False, stop_reaction="brake_disable", brake_time_s=0.2, brake_ramp_s=0.05,
            brake_kd_nm_s_per_rad=[3.0, 100.0])
    s.request_stop()
    # the brake ramps from zero: no step to the torque limit in the fault's cycle
    cmd, st = check(s, [0.1, 0.2], [1.0, 0.5], [0, 0], t=1.0)
    assert st.action == "brake" and st.code == FAULT | BRAKING and np.all(cmd == 0.0)
    cmd, st = check(s, [0.1, 0.2], [1.0, 0.5], [0, 0], t=1.025)   # half-way up the ramp: limits 5, 2.5
    assert np.allclose(cmd, [-3.0, -2.5]) and st.saturated.tolist() == [False, True]
    cmd, st = check(s, [0.1, 0.2], [1.0, 0.5], [0, 0], t=1.06)    # full limits 10, 5
    assert np.allclose(cmd, [-3.0, -5.0]) and st.saturated.tolist() == [False, True]
    cmd, st = check(s, [0.1, 0.2], [1.0, 0.5], [0, 0], t=1.21)
    assert st.action == "disable" and np.all(cmd == 0)
    # a joint with a non-finite reading gets no brake torque; the others brake
    s2 = sup(False, stop_reaction="brake_disable", brake_ramp_s=0.01)
    s2.request_stop()
    check(s2, [0.1, 0.2], [1.0, 0.5], [0, 0], t=0.0)
    cmd, st = check(s2, [0.1, np.nan], [1.0, 0.5], [0, 0], t=0.05)
    assert st.action == "brake" and cmd[0] == pytest.approx(-1.0) and cmd[1] == 0.0
    cmd, st = check(s2, [np.nan, np.nan], [1.0, 0.5], [0, 0], t=0.06)
    assert st.action == "disable" and np.all(cmd == 0)
    # hold: gravity + PD towards the position at the fault
    m = Arm2(tau_max=(10.0, 5.0))
    s3 = sup(stop_reaction="hold", hold_time_s=0.1, hold_kp_nm_per_rad=10.0, hold_kd_nm_s_per_rad=1.0)
    s3.request_stop()
    q = np.array([0.1, 0.2])
    cmd, st = check(s3, q, [0, 0], [0, 0], t=0.0)
    assert st.action == "hold" and st.code == FAULT | HOLDING and np.allclose(cmd, m.gravity(q))
    cmd, st = check(s3, q + [0.01, 0.0], [0.2, 0], [0, 0], t=0.05)
    assert np.allclose(cmd, m.gravity(q + [0.01, 0]) + [-0.1 - 0.2, 0.0])
    cmd, st = check(s3, q, [0, 0], [0, 0], t=0.1)
    assert st.action == "disable"


def test_startup_checks():
    s = sup(startup_tolerance=0.05)
    q = np.array([0.1, 0.2])
    s.startup_check(fb_ok(q), np.zeros(2))
    for fb, err, word in [(fb_ok(q, enabled=np.array([True, False])), np.zeros(2), "not enabled"),
                          (fb_ok(q, fresh=np.array([False, True])), np.zeros(2), "fresh"),
                          (fb_ok(q, fault=np.array([3, 0])), np.zeros(2), "code 3"),
                          (fb_ok(q), np.array([0.0, 0.2]), "trajectory start"),
                          (fb_ok([3.5, 0.0]), np.zeros(2), "outside position limits")]:
        with pytest.raises(SafetyError, match=word):
            s.startup_check(fb, err)
    with pytest.raises(SafetyError):
        s.startup_check(None, np.zeros(2))


def test_config_from_section_names_fields():
    sec = Section({"stop_reaction": "brake_disable", "torque_max": [1.0, 2.0], "tracking_error_max": 0.2,
                   "stale_cycles": 5, "singularity_margin_min": 0.01}, file="run.toml", path="safety")
    c = SafetyConfig.from_section(sec)
    assert c.stop_reaction == "brake_disable" and c.stale_cycles == 5 and np.allclose(c.torque_max, [1, 2])
    with pytest.raises(ConfigError, match=r"run.toml.*safety\.stop_reaction"):
        SafetyConfig.from_section(Section({"stop_reaction": "explode"}, file="run.toml", path="safety"))
    with pytest.raises(ConfigError, match=r"safety\.bogus"):
        SafetyConfig.from_section(Section({"bogus": 1}, file="run.toml", path="safety"))
    with pytest.raises(ConfigError, match=r"safety\.stale_cycles"):
        SafetyConfig.from_section(Section({"stale_cycles": 0}, file="run.toml", path="safety"))
    with pytest.raises(ConfigError, match=r"safety\.velocity_max"):
        SafetyConfig.from_section(Section({"velocity_max": [1.0, -2.0]}, file="run.toml", path="safety"))
    with pytest.raises(ConfigError, match="torque_max"):
        SafetySupervisor(SafetyConfig(torque_max=[1.0, 2.0, 3.0]), Arm2().limits)


def test_singularity_margin_check():
    m = Arm2Task()
    s = SafetySupervisor(SafetyConfig(singularity_margin_min=0.05, singularity_every=2), m.limits, model=m)
    q_ok = np.array([0.3, 1.2])
    _, st = check(s, q_ok, [0, 0], [0, 0])
    assert st.action == "run" and 0.05 < s.last_margin <= 1
    q_sing = np.array([0.3, 1e-4])   # arm stretched: J singular
    _, st = check(s, q_sing, [0, 0], [0, 0])     # cycle 2: not checked
    assert st.action == "run"
    _, st = check(s, q_sing, [0, 0], [0, 0])     # cycle 3: checked
    assert st.action == "disable" and s.faults[0].cause == "singularity"


# ------------------------------------------------------- fault cases through the loop
class NaNAfter(ComputedTorque):
    """A model failure: NaN torque from cycle time t_bad on."""

    def __init__(self, *a, t_bad, exc=False, **k):
        super().__init__(*a, **k)
        self.t_bad, self.exc = t_bad, exc

    def compute(self, t_s, ref, state):
        tau = super().compute(t_s, ref, state)
        if t_s >= self.t_bad - 1e-12:
            if self.exc:
                raise np.linalg.LinAlgError("singular matrix (injected)")
            return tau * np.nan
        return tau


def run_loop(tmp_path, *, hook=None, comms_error_at=None, ctrl=None, traj=None, cfg=None, plant_model=None,
             q0=None, signal_at=None, drivers_out=None, writer=TelemetryWriter):
    m = Arm2()
    traj = traj or SineTraj([0.3, 0.8], [0.2, -0.2], 4.0, 0.5)
    clock = LockstepClock()
    s0 = traj.sample(0.0)
    plant = SimulatedPlant(plant_model or m, q0=s0.pos if q0 is None else q0, qd0=s0.vel)
    inner = DirectPlantDriver(plant, now=clock.now)
    if signal_at is not None:
        def hook(k, fb, _h=hook):
            if k == signal_at:
                os.kill(os.getpid(), signal.SIGINT)
            return fb if _h is None else _h(k, fb)
    drv = FaultyDriver(inner, hook=hook, comms_error_at=comms_error_at)
    if drivers_out is not None:
        drivers_out.append(drv)
    ctrl = ctrl or ComputedTorque(m, 400.0, 40.0)
    safety = SafetySupervisor(cfg or SafetyConfig(tracking_error_max=0.05), m.limits, model=m)
    tel = writer(tmp_path, 2, 2, buffer_rows=64)
    res = ControlLoop(drv, ctrl, traj, safety, clock, period_s=P, telemetry=tel).run()
    return res, drv, read_log(tmp_path), read_meta(tmp_path)


def assert_safe_stop(res, drv, log, cause, k_cause):
    """Fault caused by the feedback of command k_cause (or at cycle k_cause): zero/disable within 2 cycles."""
    assert res.status in ("fault", "stopped")
    assert res.faults[0].cause == cause
    assert drv.calls[-1] == "disable"
    # the last command sent is zero and it is sent no later than 2 cycles after the cause
    assert np.all(drv.sent[-1] == 0.0)
    assert len(drv.sent) <= k_cause + 2
    # log complete on disk: one row per command, the last one flagged
    assert log.shape[0] == len(drv.sent) == res.n_cycles
    assert log["safety"][-1] & FAULT and log["safety"][-1] & DISABLED
    assert np.all(log["tau_cmd"][-1] == 0.0)
    assert np.allclose(log["t"], np.arange(log.shape[0]) * P)


def test_loop_completes_and_disables(tmp_path):
    res, drv, log, meta = run_loop(tmp_path)
    # 501 control cycles, then one zero-torque cycle with the disable: a row of its own
    assert res.status == "completed" and res.faults == [] and res.n_cycles == 502
    assert drv.calls[0] == "enable" and drv.calls[-1] == "disable" and drv.calls.count("cycle") == 502
    assert log.shape == (502,) and meta["result"]["status"] == "completed" and meta["rows"] == 502
    assert log["safety"][-1] == DISABLED and np.all(log["tau_cmd"][-1] == 0.0)
    assert not np.any(log["safety"][:-1] & DISABLED)
    assert np.all(np.isfinite(log["err"]))


def test_fault_nan_from_model(tmp_path):
    m = Arm2()
    res, drv, log, _ = run_loop(tmp_path, ctrl=NaNAfter(m, 400.0, 40.0, t_bad=0.2))
    assert_safe_stop(res, drv, log, "nonfinite", 200)
    assert np.isnan(log["tau_ctrl"][-1]).all()


def test_fault_exception_from_model(tmp_path):
    m = Arm2()
    res, drv, log, _ = run_loop(tmp_path, ctrl=NaNAfter(m, 400.0, 40.0, t_bad=0.1, exc=True))
    assert_safe_stop(res, drv, log, "controller", 100)
    assert "LinAlgError" in res.faults[0].message


def test_fault_position_limit(tmp_path):
    # the trajectory drives joint 1 through its (config) limit of 0.9 rad
    cfg = SafetyConfig(position_max=[3.0, 0.9], position_margin_rad=0.0, tracking_error_max=0.05)
    res, drv, log, _ = run_loop(tmp_path, cfg=cfg, traj=SineTraj([0.3, 0.8], [0.0, 0.3], 4.0, 0.5))
    k = int(np.argmax(log["q"][:, 1] > 0.9))
    assert_safe_stop(res, drv, log, "position_limit", k)
    assert k == log.shape[0] - 1


def test_fault_stale_feedback(tmp_path):
    def hook(k, fb):
        if k >= 100:
            return replace_fb(fb, fresh=np.array([True, False]))
        return fb
    res, drv, log, _ = run_loop(tmp_path, hook=hook, cfg=SafetyConfig(stale_cycles=3))
    assert_safe_stop(res, drv, log, "stale_feedback", 102)
    assert log["fresh"][-1].tolist() == [True, False]


def test_fault_device(tmp_path):
    def hook(k, fb):
        return replace_fb(fb, fault=np.array([0, 0x21])) if k >= 50 else fb
    res, drv, log, _ = run_loop(tmp_path, hook=hook)
    assert_safe_stop(res, drv, log, "device_fault", 50)
    assert res.faults[0].joint == 1 and res.faults[0].values["code"] == 0x21


def test_fault_tracking_error(tmp_path):
    # plant 3x heavier than the model, low gains: the error grows past the limit
    res, drv, log, _ = run_loop(tmp_path, plant_model=Arm2().scaled(3.0),
                                ctrl=ComputedTorque(Arm2(), 25.0, 10.0), cfg=SafetyConfig(tracking_error_max=0.02))
    k = int(np.argmax(np.any(np.abs(log["err"]) > 0.02, axis=1)))
    assert_safe_stop(res, drv, log, "tracking_error", k)


def test_fault_comms_error(tmp_path):
    res, drv, log, _ = run_loop(tmp_path, comms_error_at=120)
    assert res.status == "fault" and res.faults[0].cause == "comms"
    assert drv.calls[-1] == "disable" and len(drv.sent) == 120 and log.shape[0] == 120
    assert log["safety"][-1] & FAULT


def test_sigint_is_a_safe_stop_and_handlers_restored(tmp_path):
    before = signal.getsignal(signal.SIGINT)
    res, drv, log, _ = run_loop(tmp_path, signal_at=80)
    assert signal.getsignal(signal.SIGINT) is before
    assert res.status == "stopped"
    assert_safe_stop(res, drv, log, "signal", 80)


def test_brake_disable_through_loop(tmp_path):
    cfg = SafetyConfig(stop_reaction="brake_disable", brake_time_s=0.02, brake_ramp_s=0.005,
                       brake_kd_nm_s_per_rad=2.0)
    res, drv, log, _ = run_loop(tmp_path, cfg=cfg, signal_at=80)
    codes = log["safety"]
    braking = np.flatnonzero(codes & BRAKING)
    assert braking.size >= 6 and braking[0] <= 81
    m = Arm2()
    b0 = braking[0]
    # the damping ramps from zero: the first brake command holds the model's gravity alone
    assert np.allclose(log["tau_cmd"][b0], m.gravity(log["q"][b0]))
    k = b0 + 6                                                # ramp complete (5 cycles)
    # then gravity and -kd qd, and the load observer's estimate (small: the plant is the model)
    g = m.gravity(log["q"][k])
    assert np.allclose(log["tau_cmd"][k], g - 2.0 * log["qd"][k], atol=0.02 * np.abs(g).max())
    assert drv.calls[-1] == "disable" and np.all(drv.sent[-1] == 0)
    assert log.shape[0] <= braking[0] + 22


def _brake_sup(**kw):
    s = sup(False, stop_reaction="brake_disable", brake_time_s=0.5, brake_ramp_s=0.01,
            brake_kd_nm_s_per_rad=10.0, **kw)
    s.request_stop()
    check(s, [0.1, 0.2], [0.5, 0.5], [0, 0], t=0.0)
    return s


@pytest.mark.parametrize("case", ["corrupt_sample", "stale", "both_stale", "limit_ramp"])
def test_brake_uses_only_fresh_plausible_feedback(case):
    """The brake never acts on the reading that caused the fault or on a frozen one."""
    s = _brake_sup()
    q = [0.1, 0.2]
    if case == "corrupt_sample":
        # joint 0 reads 1e3 rad/s (> 2 x velocity_max 20): zero torque on it, joint 1 brakes
        cmd, st = check(s, q, [1e3, 0.5], [0, 0], t=0.02)
        assert st.action == "brake" and cmd[0] == 0.0 and cmd[1] == pytest.approx(-5.0)
    elif case == "stale":
        fb = fb_ok(q, [0.5, 0.5], fresh=np.array([True, False]))
        cmd, st = check(s, q, [0.5, 0.5], [0, 0], fb=fb, t=0.02)
        assert st.action == "brake" and cmd[0] == pytest.approx(-5.0) and cmd[1] == 0.0
    elif case == "both_stale":
        fb = fb_ok(q, [0.5, 0.5], fresh=np.array([False, False]))
        cmd, st = check(s, q, [0.5, 0.5], [0, 0], fb=fb, t=0.02)
        assert st.action == "disable" and np.all(cmd == 0.0)
        assert any("no fresh, plausible" in f.message for f in s.faults)
    else:
        # brake torque never steps: |tau| <= tau_max * elapsed / ramp
        for t in np.arange(0.001, 0.012, 0.001):
            cmd, st = check(s, q, [15.0, 15.0], [0, 0], t=float(t))
            assert np.all(np.abs(cmd) <= np.array([10.0, 5.0]) * min(1.0, t / 0.01) + 1e-12)


def test_hold_disables_on_stale_feedback():
    s = sup(stop_reaction="hold", hold_time_s=1.0, stale_cycles=2)
    s.request_stop()
    q = [0.1, 0.2]
    check(s, q, [0, 0], [0, 0], t=0.0)
    stale = fb_ok(q, fresh=np.array([True, False]))
    _, st = check(s, q, [0, 0], [0, 0], fb=stale, t=0.001)
    assert st.action == "hold"
    cmd, st = check(s, q, [0, 0], [0, 0], fb=stale, t=0.002)
    assert st.action == "disable" and np.all(cmd == 0.0)


def test_intermittent_stale_feedback_faults_on_the_window():
    """No gap reaches stale_cycles, but 40 % of the cycles are stale."""
    s = sup(stale_cycles=3, stale_fraction_max=0.2, stale_window_cycles=100)
    q = [0.1, 0.2]
    for k in range(200):
        fresh = np.array([True, (k % 5) >= 2])   # 2 stale cycles in every 5
        _, st = check(s, q, [0, 0], [0, 0], fb=fb_ok(q, fresh=fresh), t=k * P)
        if st.action != "run":
            break
    assert st.action == "disable"
    f = s.faults[0]
    assert f.cause == "stale_feedback" and f.values["window"] == 100 and f.values["stale"] == 21
    # the same pattern below the fraction passes
    s = sup(stale_cycles=3, stale_fraction_max=0.5, stale_window_cycles=100)
    for k in range(300):
        fresh = np.array([True, (k % 5) >= 2])
        _, st = check(s, q, [0, 0], [0, 0], fb=fb_ok(q, fresh=fresh), t=k * P)
        assert st.action == "run"


@pytest.mark.parametrize("late_s,every,expect", [(0.15, 1000, "ms late"), (0.002, 3, "missed their deadline"),
                                                 (0.002, 10, None)])
def test_overruns_fault(late_s, every, expect):
    s = sup(overrun_fraction_max=0.2, overrun_window_cycles=100, lateness_max_s=0.1)
    q = [0.1, 0.2]
    for k in range(1, 400):
        if k % every == 0 or (every == 1000 and k == 50):
            s.note_overrun(k * P, late_s)
        _, st = check(s, q, [0, 0], [0, 0], t=k * P)
        if st.action != "run":
            break
    if expect is None:
        assert st.action == "run" and not s.faults
    else:
        assert st.action == "disable" and s.faults[0].cause == "overrun" and expect in s.faults[0].message


def test_startup_refused_before_any_torque(tmp_path):
    out = []
    with pytest.raises(SafetyError, match="trajectory start"):
        run_loop(tmp_path, q0=np.array([0.3, 1.2]), drivers_out=out)
    # nothing was sent and the drives were disabled
    assert out[0].calls == ["enable", "disable"] and out[0].sent == []
    log = read_log(tmp_path)
    assert log.shape == (0,)
    assert read_meta(tmp_path)["result"]["status"] == "error"


def test_fault_telemetry_write_error(tmp_path):
    class FailingWriter(TelemetryWriter):
        def record(self, *a, **k):
            if self.rows_written + self._i >= 150:
                raise OSError(28, "No space left on device")
            super().record(*a, **k)

    res, drv, log, _ = run_loop(tmp_path, writer=FailingWriter)
    assert res.status == "fault" and res.faults[0].cause == "telemetry"
    assert drv.calls[-1] == "disable" and np.all(drv.sent[-1] == 0) and len(drv.sent) == 152
    assert log.shape[0] == 150


@pytest.mark.parametrize("horizon_s", [0.0, 0.05])
def test_singularity_guard_is_predictive(horizon_s):
    """The elbow straightens at 2 rad/s: with a horizon the guard stops while the margin is
    still above its minimum (before the torque grows), without one only once it is below."""
    m = Arm2Task()
    s = SafetySupervisor(SafetyConfig(singularity_margin_min=0.05, singularity_every=1,
                                      singularity_horizon_s=horizon_s, velocity_max=50.0), m.limits, model=m)
    margins = []
    for k in range(2000):
        q = np.array([0.3, 1.2 - 2.0 * k * P])
        _, st = check(s, q, [0.0, -2.0], [0, 0], t=k * P)
        margins.append(s.last_margin)
        if st.action != "run":
            break
    f = s.faults[0]
    assert f.cause == "singularity"
    if horizon_s:
        assert "approaching" in f.message and f.values["margin"] > 0.05
        assert f.values["predicted"] < 0.05
        # the prediction is not premature: the margin does reach the minimum within about the horizon
        rate = (margins[-1] - margins[-2]) / P
        assert margins[-1] + rate * 2 * horizon_s < 0.05
    else:
        # no horizon: the prediction still covers the check interval (the next check would be
        # too late), so it fires one check before the margin is below the minimum
        assert "approaching" in f.message and f.values["margin"] >= 0.05
        rate = (margins[-1] - margins[-2]) / P
        assert margins[-1] + rate * P < 0.05


def test_rule_kernel_bits_match_the_rules_stated_plainly():
    """controller._safety_rules.evaluate (the one copy of the per-cycle rules) against the rules
    written out with numpy, on random states with NaN/inf, limits, soft zones and feedback.
    Parity test against a transcription of the rules; the independent checks of each rule's
    verdict are the scenario tests of this file (``test_singularity_margin_check`` and the
    limit, soft-zone, feedback and tracking-error tests around it)."""
    from controller import _safety_rules as R

    rng = np.random.default_rng(3)
    n, m = 3, 2
    q_min, q_max = np.array([-1.0, -2.0, -0.5]), np.array([1.0, 2.0, 0.5])
    soft_lo, soft_hi = q_min + 0.1, q_max - 0.1
    v_max, tau_max = np.array([2.0, 3.0, 1.0]), np.array([5.0, 5.0, 2.0])
    specials = np.array([np.nan, np.inf, -np.inf])
    seen = 0
    for _ in range(3000):
        def arr(k, scale):
            a = rng.normal(0.0, scale, k)
            a[rng.random(k) < 0.01] = rng.choice(specials)
            return a
        q, qd, tau = arr(n, 0.5), arr(n, 1.0), arr(n, 2.0)
        pos, vel, acc = arr(3, 1.0), arr(3, 1.0), arr(3, 1.0)
        err = arr(m, 0.03)
        em = np.array([0.05]) if rng.random() < 0.5 else np.array([0.02, 0.08])
        fb = rng.random() < 0.7
        fault = rng.integers(0, 2, n) * (rng.random(n) < 0.1) if fb else np.zeros(0, dtype=np.int64)
        enabled = rng.random(n) > 0.05 if fb else np.zeros(0, dtype=bool)
        fresh = rng.random(n) > 0.05 if fb else np.zeros(0, dtype=bool)
        jb, eb = np.zeros(n, dtype=np.int64), np.zeros(m, dtype=np.int64)
        g = R.evaluate(q, qd, tau, pos, vel, acc, err, em, fault.astype(np.int64), enabled, fresh,
                       np.stack([q_min, q_max, v_max, soft_lo, soft_hi, tau_max]), jb, eb)
        want = (~np.isfinite(q)) * R.J_Q_NONFINITE | (~np.isfinite(qd)) * R.J_QD_NONFINITE \
            | (~np.isfinite(tau)) * R.J_TAU_NONFINITE \
            | ((q < q_min) | (q > q_max)) * R.J_POSITION | (np.abs(qd) > v_max) * R.J_VELOCITY \
            | ((q < soft_lo) & (qd < 0)) * R.J_SOFT_LO | ((q > soft_hi) & (qd > 0)) * R.J_SOFT_HI \
            | (np.abs(tau) > tau_max) * R.J_CLIP
        if fb:
            want = want | (fault != 0) * R.J_DEVICE_FAULT | (~enabled) * R.J_DISABLED | (~fresh) * R.J_NOT_FRESH
        np.testing.assert_array_equal(jb, want)
        lim = np.broadcast_to(em, (m,))
        want_e = np.where(~np.isfinite(err), R.E_NONFINITE, np.where(np.abs(err) > lim, R.E_BEYOND, 0))
        np.testing.assert_array_equal(eb, want_e)
        want_g = (R.G_REF_POS * (not np.isfinite(pos).all()) | R.G_REF_VEL * (not np.isfinite(vel).all())
                  | R.G_REF_ACC * (not np.isfinite(acc).all()))
        assert g == want_g | (int(np.bitwise_or.reduce(want_e)) << R.E_SHIFT) \
            | (int(np.bitwise_or.reduce(want)) << R.JOINT_SHIFT)
        seen += g == 0
    assert 50 < seen < 2900        # clean and flagged cycles both occurred


def test_limit_attributes_are_the_rules_limits():
    """q_min .. tau_max are views of the one limits array the rules read: an edit in place
    reaches the rules (also in a copied supervisor, which has its own array); replacing
    one is refused rather than silently not seen by the rules."""
    import copy

    from tests.test_ctrl_models import Arm2

    m = Arm2()
    sup = SafetySupervisor(SafetyConfig(tracking_error_max=0.05), m.limits)
    for name in ("q_min", "q_max", "v_max", "tau_max"):
        with pytest.raises(AttributeError):
            setattr(sup, name, np.zeros(2))
    dup = copy.deepcopy(sup)
    dup.v_max[1] = 1e-3                      # tight velocity limit on joint 1, in place
    fb = types.SimpleNamespace(fault=np.zeros(2, dtype=int), enabled=np.ones(2, dtype=bool),
                               fresh=np.ones(2, dtype=bool))
    ref = types.SimpleNamespace(pos=np.zeros(2), vel=np.zeros(2), acc=np.zeros(2))
    state = types.SimpleNamespace(q=np.zeros(2), qd=np.array([0.0, 0.01]))
    _, ss = dup.check(0.0, state, fb, ref, np.zeros(2), error=np.zeros(2))
    assert [f.cause for f in ss.new_faults] == ["velocity_limit"] and ss.new_faults[0].joint == 1
    _, ss = sup.check(0.0, state, fb, ref, np.zeros(2), error=np.zeros(2))
    assert ss.new_faults == () and sup.v_max[1] > 1e-3       # the original is untouched


def test_saturation_runs_are_counted_per_joint_as_the_vector_rule():
    """The cycles in a row each joint's torque is at its limit (``|tau| >= tau_max (1 - 1e-9)``,
    NaN never), counted by the compiled counter, equal the rule in numpy's vector form over
    random torques at, near, beyond and below the limits; the note names the joints that were
    at it for SATURATED_CYCLES cycles and only those."""
    from controller.safety import SATURATED_CYCLES

    s = sup(tracking_error_max=1.0)
    lim = s.tau_max.copy()
    rng = np.random.default_rng(38)
    want = np.zeros(2, dtype=np.int64)
    choices = np.array([0.0, 0.5, 1.0 - 2e-9, 1.0 - 5e-10, 1.0, 1.5, np.nan])
    for k in range(3000):
        pick = rng.choice(len(choices), 2, p=[0.05, 0.1, 0.05, 0.1, 0.35, 0.3, 0.05])
        tau = choices[pick] * lim * rng.choice([-1.0, 1.0], 2)
        s._count_saturated(tau)
        at = np.abs(tau) >= lim * (1.0 - 1e-9)
        want = np.where(at, want + 1, 0)
        assert s._clipped.tolist() == want.tolist(), k
        note = s.saturation_note()
        long = np.flatnonzero(want >= SATURATED_CYCLES)
        assert bool(note) == bool(long.size), k
        for j in range(2):
            assert (f"joint {j} at" in note) == (j in long), (k, note)
    s._count_saturated([1e9, 1e9])        # not a cycle's array: not counted
    assert s._clipped.tolist() == want.tolist()
