"""The compiled offline loop under PD + gravity, task-space PD + gravity and PID
(controller._fast_loop: serial_pd_gravity_seg, rrr_pd_gravity_seg, rrr_task_pd_gravity_seg,
pid_seg) against the Python loop: bit-identical logs, metrics, faults and results, also when a
fault or a clip hands the run back to Python part-way.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from controller.telemetry import read_log
from test_fast_loop import _assert_same, _compiled_cycles   # the comparison of two runs
from test_fast_loop_serial import _run                        # a shipped run with overrides

ROOT = Path(__file__).resolve().parents[1]
ARM = "seed003_2r.toml"                     # PD + gravity on the Kane 2R arm
RRR = "3rrr_circle_direct.toml"             # task-space computed torque on the 3RRR
TASK_PD = {"controller.kind": "task_pd_gravity"}
JOINT_PD = {"controller.kind": "pd_gravity"}
PID = {"controller.kind": "pid", "controller.ki": 200.0}


def _both(tmp_path, config, overrides, name="run"):
    """The run through the Python loop and through the compiled loop; asserts they agree."""
    py = _run(tmp_path, config, False, overrides, name)
    fast = _run(tmp_path, config, True, overrides, name)
    _assert_same(py, fast)
    assert _compiled_cycles(py[0]) == 0
    return py, fast


@pytest.mark.parametrize("config, overrides", [
    (ARM, {}),                                          # the shipped run, whole
    (ARM, {**PID, "loop.duration_s": 2.0}),
    (RRR, {**TASK_PD, "loop.duration_s": 2.5}),
    (RRR, {**JOINT_PD, "loop.duration_s": 2.5}),
])
def test_runs_are_bit_identical(tmp_path, config, overrides):
    py, fast = _both(tmp_path, config, overrides)
    assert py[0].status == "completed"
    assert _compiled_cycles(fast[0]) > 0.95 * fast[0].n_cycles


@pytest.mark.parametrize("config, overrides, cause", [
    (ARM, {"safety.tracking_error_max": 1e-3}, "tracking_error"),                   # at 0.31 s
    (ARM, {**PID, "safety.velocity_max": 0.6}, "velocity_limit"),                   # at 1.26 s
    (RRR, {**TASK_PD, "safety.tracking_error_max": [2e-4, 2e-4, 0.1]}, "tracking_error"),  # at 87 ms
    (RRR, {**TASK_PD, "safety.velocity_max": 0.3}, "velocity_limit"),               # at 0.48 s
    (RRR, {**JOINT_PD, "safety.singularity_margin_min": 0.74}, "singularity"),      # predicted, at 1.93 s
])
def test_fault_hands_back_to_python_identically(tmp_path, config, overrides, cause):
    py, fast = _both(tmp_path, config, {"loop.duration_s": 3.0, **overrides}, cause)
    assert py[0].status == "fault" and py[0].faults[0].cause == cause
    assert _compiled_cycles(fast[0]) > 50


@pytest.mark.parametrize("config, overrides", [
    (ARM, {"controller.wn_rad_s": 60.0, "safety.torque_max": [380.0, 28.0]}),
    (ARM, {**PID, "safety.torque_max": [330.0, 22.0]}),
    (RRR, {**TASK_PD, "controller.wn_rad_s": 60.0, "safety.torque_max": [0.15, 0.15, 0.15]}),
    (RRR, {**JOINT_PD, "controller.wn_rad_s": 60.0, "safety.torque_max": [0.15, 0.15, 0.15]}),
])
def test_clipping_cycles_identical(tmp_path, config, overrides):
    """A safety torque limit below the peaks: since the law saturates at the effective limit
    (robot file, [safety] and drive: drive capability), the limit acts in the law, so the
    commands sit at it in some cycles; both loops give the same run to the bit."""
    py, fast = _both(tmp_path, config, {"loop.duration_s": 1.5, **overrides}, "clip")
    limit = np.asarray(overrides["safety.torque_max"], dtype=float)
    assert np.any(np.abs(py[1]["tau_cmd"]) >= limit * (1 - 1e-12)), "the limit never acted"
    assert _compiled_cycles(fast[0]) > 100


@pytest.mark.parametrize("anti_windup", ["clamp", "back_calculation"])
def test_pid_saturation_and_anti_windup_identical(tmp_path, anti_windup):
    """PID with gravity feed-forward whose own saturation is active on part of the run, so the
    integral is clamped or pulled back (back-calculation) inside compiled segments."""
    from controller.clock import LockstepClock
    from controller.laws import PID as PIDLaw, Saturation, gravity_feedforward
    from controller.loop import ControlLoop
    from controller.safety import SafetyConfig, SafetySupervisor
    from controller.telemetry import TelemetryWriter
    from drivers.sim.direct import DirectPlantDriver
    from drivers.sim.plant import SimulatedPlant
    from dynamics import load_model
    from trajectories import point_to_point

    model = load_model(ROOT / "hil_configs" / "robots" / "seed003_2r.toml")
    traj = point_to_point(np.zeros(2), np.array([0.6, 1.0]), "quintic", duration_s=1.5)
    logs = []
    for compiled in (False, True):
        clock = LockstepClock()
        plant = SimulatedPlant(model.scaled(1.05), q0=np.zeros(2), viscous=0.5, encoder_counts_per_rev=65536)
        ctrl = PIDLaw(kp=[4000.0, 150.0], ki=[8000.0, 300.0], kd=[400.0, 15.0], feedforward=gravity_feedforward(model),
                      saturation=Saturation([320.0, 26.0]), anti_windup=anti_windup)
        safety = SafetySupervisor(SafetyConfig(), model.limits, model=model)
        tel = TelemetryWriter(tmp_path / f"pid-{anti_windup}-{compiled}", 2, 2)
        res = ControlLoop(DirectPlantDriver(plant, now=clock.now), ctrl, traj, safety, clock, period_s=1e-3,
                          telemetry=tel, handle_signals=False, compiled=compiled).run()
        logs.append((res, read_log(tmp_path / f"pid-{anti_windup}-{compiled}")))
        assert res.status == "completed"
    _assert_same(*logs)
    tau = logs[0][1]["tau_ctrl"]
    assert np.any(np.abs(tau) >= [320.0, 26.0])         # the law saturates on some cycles
    assert _compiled_cycles(logs[1][0]) > 1000
