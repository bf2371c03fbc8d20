"""MIT faults the drive does not report: detected by the driver, stopped by the safety layer.

* :class:`drivers.mit_health.FollowMonitor` against emulated motors (healthy: never a
  fault; limp / frozen: a fault after the stated number of cycles);
* the 8-byte CubeMars reply's error byte and temperature reach ``Feedback.fault``;
* end to end through the loop on the demo (classic 6-byte replies, the shipped
  default): a motor that goes limp, or whose replies freeze, at a known cycle ends in
  a safe stop within a stated number of cycles (see ``LIMP_CYCLES``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from controller.app.run import build_run, load_run
from controller.safety import DISABLED, FAULT
from controller.telemetry import read_log
from dynamics.config import Section
from dynamics.errors import CommsTimeoutError
from drivers.base import Command
from drivers.mit_health import (FAULT_FROZEN, FAULT_NOT_FOLLOWING, FAULT_OVER_TEMPERATURE, FollowConfig,
                                FollowMonitor)
from drivers.registry import build_driver
from dynamics.toy_models import Pendulum

DEMO = Path(__file__).resolve().parents[1] / "hil_configs" / "runs" / "3rrr_circle.toml"


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def _driver(clock, *, variant="classic6", reply_variant=None, follow=None, lag_s=0.0004):
    cfg = {"type": "sim_mit_can", "reply_timeout_s": 0.25,
           "joints": [{"can_id": 1, "model": "AK80-9"}],
           "plant": {"q0": [0.0], "current_lag_s": lag_s},
           "emulator": {"serve": "inline", "variant": variant}}
    if reply_variant is not None:
        cfg["reply_variant"] = reply_variant
    if follow is not None:
        cfg["follow"] = follow
    return build_driver(Section(cfg, "test.toml", "driver"), now=clock,
                        model=Pendulum(mass_kg=1.0, com_m=0.1, inertia_kgm2=0.01, g=0.0),
                        rng=np.random.default_rng(0))


def _cycles(drv, clock, torques, dt=1e-3):
    codes = []
    for tau in torques:
        clock.t += dt
        fb = drv.cycle(Command(np.array([tau])))
        codes.append(int(fb.fault[0]))
    return codes


def test_healthy_motor_random_torque_steps_never_fault():
    clock = Clock()
    drv = _driver(clock)
    with drv:
        drv.enable()
        rng = np.random.default_rng(3)
        # steps up to the full range, every 1..20 cycles, through the 0.4 ms current loop
        taus = np.repeat(rng.uniform(-15, 15, 200), rng.integers(1, 20, 200))
        taus = np.concatenate([taus, -taus])   # come back (the pendulum moves freely)
        codes = _cycles(drv, clock, taus)
        assert not any(codes)
        assert max(abs(r) for r in drv.monitor.residual_nm) < drv.monitor.tol_nm[0]


@pytest.mark.parametrize("tau", [0.5, 3.0, -10.0])
def test_limp_motor_fault_after_window_cycles(tau):
    clock = Clock()
    drv = _driver(clock)
    win = drv.monitor.config.window_cycles
    with drv:
        drv.enable()
        assert not any(_cycles(drv, clock, [tau] * 30))
        drv.emulators[0].set_device_fault(1, "limp")
        codes = _cycles(drv, clock, [tau] * 30)
    first = codes.index(FAULT_NOT_FOLLOWING)
    # reply k shows the current of command k-1 (decayed through the lag): the first bad reply is
    # the one to the first command after the fault, then window_cycles of them
    assert first == win - 1
    assert set(codes[first:]) == {FAULT_NOT_FOLLOWING}      # latched


def test_limp_motor_below_the_tolerance_is_not_flagged():
    """What cannot be told from noise is not flagged: 0.1 N m asked of a limp AK80-9 (tol 0.18)."""
    clock = Clock()
    drv = _driver(clock)
    with drv:
        drv.enable()
        drv.emulators[0].set_device_fault(1, "limp")
        assert not any(_cycles(drv, clock, [0.1] * 50))


def test_frozen_replies_fault_after_frozen_cycles():
    clock = Clock()
    drv = _driver(clock, follow={"window_cycles": 1000})   # isolate the frozen-reply check
    n = drv.monitor.config.frozen_cycles
    with drv:
        drv.enable()
        _cycles(drv, clock, [1.0] * 10)
        drv.emulators[0].set_device_fault(1, "frozen")
        codes = _cycles(drv, clock, np.linspace(1.0, 3.0, 40))
    # the first frozen reply repeats the last healthy one: that one starts the run of n
    assert codes.index(FAULT_FROZEN) == n - 2


def test_constant_command_at_rest_repeats_replies_without_fault():
    """A motor at rest with a constant command legitimately repeats its reply."""
    clock = Clock()
    drv = _driver(clock, lag_s=0.0)
    with drv:
        drv.enable()
        assert not any(_cycles(drv, clock, [0.0] * 100))


def test_cubemars8_error_byte_and_temperature_reach_the_feedback():
    clock = Clock()
    drv = _driver(clock, variant="cubemars8", reply_variant="cubemars8")
    with drv:
        drv.enable()
        emu = drv.emulators[0]
        assert not any(_cycles(drv, clock, [0.5] * 5))
        emu.set_temperature(1, drv.temperature_max_c + 1)
        assert _cycles(drv, clock, [0.5])[0] == FAULT_OVER_TEMPERATURE
    clock = Clock()
    drv = _driver(clock, variant="cubemars8")
    with drv:
        drv.enable()
        drv.emulators[0].inject_fault(1, code=2)
        assert _cycles(drv, clock, [0.5])[0] == 2           # the drive's own code wins


def test_cubemars8_expected_but_6_byte_replies_refuse_to_enable():
    clock = Clock()
    drv = _driver(clock, variant="classic6", reply_variant="cubemars8")
    with drv:
        with pytest.raises(CommsTimeoutError):
            drv.enable()


def test_follow_config_refuses_values_that_switch_it_off():
    for bad in ({"rel_tol": 1.0}, {"window_cycles": 0}, {"lag_s": -1.0}, {"tol_nm": 0.0}):
        with pytest.raises(Exception):
            FollowConfig(**{**FollowConfig().__dict__, **bad})
    with pytest.raises(Exception):
        _driver(Clock(), follow={"window_cycles": 0})


def test_monitor_reset_clears_latches():
    m = FollowMonitor([18.0], FollowConfig(window_cycles=2, lag_s=0.0))
    for k in range(4):
        m.update(k * 1e-3, [True], [(0.0, 0.0, 0.0, k)], [(0.0, 0.0, 0.0, 0.0, 5.0)])
    assert m.codes == [FAULT_NOT_FOLLOWING]
    m.reset()
    assert m.codes == [0]


# ---------------------------------------------------------------------------
# end to end: the demo (classic 6-byte replies) through the loop
# ---------------------------------------------------------------------------
#: onset -> stop, in loop cycles, on the demo with its default [driver.follow] settings
LIMP_CYCLES = 16
FROZEN_CYCLES = 19


def _run(tmp_path, kind, ids, at_s, extra=None):
    ov = {"safety.stop_reaction": "zero_disable", "driver.faults.seed": 1,
          "driver.faults.device_fault": kind, "driver.faults.device_fault_ids": ids,
          "driver.faults.device_fault_at_s": at_s}
    ov.update(extra or {})
    spec = load_run(DEMO, overrides=ov, duration_s=0.8)
    run = build_run(spec, out_dir=tmp_path / "run")
    emu = run.driver.emulators[0]
    plant = run.plant
    res = run.execute()
    plant.advance_to(plant.t_s + 0.02)
    return spec, res, read_log(tmp_path / "run"), emu, plant


@pytest.mark.parametrize("kind,code,cycles,extra", [
    ("limp", FAULT_NOT_FOLLOWING, LIMP_CYCLES, None),
    # a tolerance set for this robot (healthy residual < 0.016 N m): window_cycles + 1
    ("limp", FAULT_NOT_FOLLOWING, 11, {"driver.follow.tol_nm": 0.05}),
    ("frozen", FAULT_FROZEN, FROZEN_CYCLES, None),
])
def test_unreported_device_fault_on_classic_reply_ends_in_safe_stop(tmp_path, kind, code, cycles, extra):
    at = 0.3
    spec, res, log, emu, plant = _run(tmp_path, kind, [2], at, extra)
    assert spec.driver_section.data.get("emulator", {}).get("variant", "classic6") == "classic6"
    onset = int(round(at / spec.period_s))       # the first frame the motor mishandles
    assert res.status == "fault"
    f = res.faults[0]
    assert (f.cause, f.joint, f.values["code"]) == ("device_fault", 1, code)
    last = len(log) - 1
    assert not log["fault"][:last].any() and log["fault"][last, 1] == code
    assert np.all(log["tau_cmd"][last] == 0.0)
    assert log["safety"][last] & (FAULT | DISABLED) == (FAULT | DISABLED)
    assert np.all(np.isfinite(log["tau_cmd"]))
    assert last - onset == cycles
    for cid in emu.can_ids:
        assert not emu.motor_mode(cid) or emu.device_fault(cid) == "frozen"
    if kind == "limp":
        np.testing.assert_allclose(plant.applied_torque_nm, 0.0, atol=1e-6)


def test_unconfirmed_exit_motor_mode_is_reported_not_silent(tmp_path):
    """Motor 2 disconnected after enable: the run stops (stale feedback) and the result the CLI
    prints says its EXIT_MOTOR_MODE was never confirmed."""
    ov = {"safety.stop_reaction": "zero_disable", "driver.faults.seed": 1,
          "driver.faults.silent_ids": [2], "driver.faults.during_enable": False}
    spec = load_run(DEMO, overrides=ov, duration_s=0.2)
    res = build_run(spec, out_dir=tmp_path / "run").execute()
    assert res.status == "fault" and res.faults[0].cause == "stale_feedback"
    warn = [m for m in res.messages if "never confirmed the exit from motor mode" in m]
    assert len(warn) == 1 and "[1]" in warn[0]
    from controller.app.commands import format_summary        # what the CLI prints
    assert warn[0] in format_summary(spec, res, res.metrics or {})


def test_confirmed_exit_adds_no_message(tmp_path):
    spec = load_run(DEMO, overrides={}, duration_s=0.05)
    res = build_run(spec, out_dir=tmp_path / "run").execute()
    assert res.status == "completed"
    assert not [m for m in res.messages if "motor mode" in m]
