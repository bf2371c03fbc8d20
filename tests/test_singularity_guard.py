"""The singularity guard acts on where the motion is going (issue 37, item 3).

A parallel robot is driven straight at a singular pose with the start-up validation bypassed
(``build_run`` without ``validate_run``, as a long or live-changed trajectory would be): the
Gough-Stewart platform yawing toward its singular yaw (+90 deg, Fichter's singularity of this
symmetric design) and the 3RRR toward a type-2 pose.  The guard must fire before any actuator
reaches its limit, and the brake must stop the plant before the singular pose.  Measured on the
plant (its own pose, by the model's ``singularity``), not on what the supervisor reports.

Before: the Stewart platform's legs sat at the 2000 N limit for 43 cycles, a velocity fault
came instead of the guard and the plant reached margin 1.4e-4; the 3RRR's platform coasted into
the singular pose (margin 2e-4) under the joint-space brake.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from controller.app.run import build_run, load_run

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "hil_configs" / "runs"

CASES = {
    "stewart": ("stewart_motion_direct.toml", {
        "trajectory": {"type": "point_to_point", "space": "task", "start": [0.0, 0.0, 0.65, 0.0, 0.0, 0.0],
                       "target": [0.0, 0.0, 0.65, 0.0, 0.0, np.pi / 2], "duration_s": 3.0},
        "loop.duration_s": 3.5}),
    # the straight line from home to 0.999 of the way to a type-2 pose (0, 0.12 m, -0.5996 rad)
    "3rrr": ("3rrr_circle_direct.toml", {
        "trajectory": {"type": "point_to_point", "space": "task", "start": [0.0, 0.0, 0.0],
                       "target": [0.0, 0.11988, -0.5989997], "duration_s": 2.0},
        "loop.duration_s": 2.5, "safety.brake_kd_nm_s_per_rad": 5.0}),
}


def _drive(case):
    cfg, ov = CASES[case]
    spec = load_run(RUNS / cfg, overrides=ov)
    run = build_run(spec)
    run.loop.compiled = False
    plant, saf, model = run.plant, run.loop.safety, spec.model
    inner = run.driver.cycle
    rec = []

    def cycle(cmd):
        fb = inner(cmd)
        try:
            m = model.singularity(np.array(plant.state.q), np.array(plant.pose)).margin
        except Exception:  # noqa: BLE001 - counted as singular
            m = 0.0
        rec.append((np.array(cmd.torque_nm), m, saf.latched))
        return fb

    run.driver.cycle = cycle
    res = run.execute()
    return res, rec, saf


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(CASES))
def test_guard_fires_before_the_torque_limit_and_the_plant_stops_short(case):
    res, rec, saf = _drive(case)
    assert res.faults and res.faults[0].cause == "singularity", [str(f) for f in res.faults[:2]]
    cmds = np.array([r[0] for r in rec])
    margins = np.array([r[1] for r in rec])
    k_fault = int(np.flatnonzero([r[2] for r in rec])[0])
    # before the guard fired no actuator was at its limit
    assert np.all(np.abs(cmds[:k_fault]) < saf.tau_max)
    # and the plant never came near the singular pose
    m_min = saf.config.singularity_margin_min
    assert margins.min() > max(m_min, 0.005), (margins.min(), m_min)
