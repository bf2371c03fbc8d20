"""Start-up check with feedback missing at enable: the refusal names the joints without fresh
feedback (and the driver's hint), instead of failing inside the task-space error of the NaN
positions (found on a loaded machine in the Stewart rehearsal)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from controller.app.run import build_run, load_run
from dynamics.errors import SafetyError

RUNS = Path(__file__).resolve().parents[1] / "hil_configs" / "runs"


class _LateFirstFeedback:
    """Driver proxy whose enable() feedback lacks joints 1 and 4 (not fresh, NaN position)."""

    def __init__(self, inner):
        self.inner = inner

    def enable(self):
        fb = self.inner.enable()
        q = np.array(fb.position_rad, dtype=float)
        fresh = np.array(fb.fresh, dtype=bool)
        q[[1, 4]] = np.nan
        fresh[[1, 4]] = False
        return dataclasses.replace(fb, position_rad=q, fresh=fresh, info={"hint": "the driver's hint"})

    def __getattr__(self, name):
        return getattr(self.inner, name)


@pytest.mark.parametrize("config", ["stewart_motion.toml", "stewart_motion_direct.toml"])
def test_missing_first_feedback_is_named_not_a_kinematics_error(tmp_path, config):
    spec = load_run(RUNS / config, duration_s=0.1)
    run = build_run(spec, out_dir=tmp_path / "run")
    try:
        run.loop.driver = _LateFirstFeedback(run.loop.driver)
        with pytest.raises(SafetyError) as ei:
            run.loop.run()
    finally:
        run.close()
    msg = str(ei.value)
    assert "no fresh feedback from joint(s) [1, 4] (the driver's hint)" in msg, msg
    assert "non-finite position from joint(s) [1, 4]" in msg and "cannot evaluate" not in msg
