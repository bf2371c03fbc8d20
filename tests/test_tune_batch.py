"""Batched rollouts (``[tune] engine = "batch"``): the rollouts a batch advances together give
the single runs' results.

The batch engine runs many candidate x plant-draw rollouts in one process at once; their clean
cycles run in the compiled offline loop with the GIL released, so they really overlap.  Nothing
may leak between them (shared trajectories, compiled code, the per-process caches): every
metric of every rollout equals the one of the same rollout run alone, to 1e-12, including
rollouts that fault part-way (their fault cycle runs in Python while the others run compiled)
and rollouts the compiled loop does not cover.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from controller.app.commands import _absolutise
from controller.app.engines import EXECUTORS, EngineReport
from controller.app.tune import ParamRange, TuneSpec, evaluate_task, make_tasks, random_streams, run_tune
from controller.app.tune import make_candidates, make_draws
from dynamics.config import read_toml

ROOT = Path(__file__).resolve().parents[1]
TUNE = ROOT / "hil_configs" / "runs" / "3rrr_circle_tune.toml"

#: wall-clock figures: not results
TIMING = {"wall_time_s", "real_time_factor", "timing", "timing_health"}


def _assert_same(a: dict, b: dict, where: str) -> None:
    assert a.keys() == b.keys(), where
    for key in a:
        if key in TIMING:
            continue
        x, y = a[key], b[key]
        if isinstance(x, (float, int, list, tuple, np.ndarray)) and not isinstance(x, bool) and not (
                isinstance(x, (list, tuple)) and x and isinstance(x[0], str)):
            x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
            assert x.shape == y.shape, (where, key)
            same_nan = np.isnan(x) == np.isnan(y)
            assert same_nan.all(), (where, key, x, y)
            ok = np.isclose(x, y, rtol=1e-12, atol=1e-12) | np.isnan(x)
            assert ok.all(), (where, key, x, y)
        else:
            assert x == y, (where, key, x, y)


def _tasks(duration_s: float = 0.8) -> list[tuple]:
    base = _absolutise(read_toml(TUNE), TUNE.parent)
    spec = TuneSpec(params={"controller.wn_rad_s": ParamRange(15.0, 90.0, log=True),
                            "controller.zeta": ParamRange(0.6, 1.4),
                            "controller.ki": ParamRange(1.0, 20000.0, log=True)},
                    uncertainty={"driver.plant.mass_factor": ParamRange(0.9, 1.25),
                                 "driver.plant.coulomb": ParamRange(0.03, 0.12),
                                 "driver.plant.current_lag_s": ParamRange(0.0002, 0.0008)},
                    method="random", candidates=3, monte_carlo=2, metric="rms_position_error_m",
                    duration_s=duration_s, seed=11)
    cand_rng, plant_rng = random_streams(spec.seed)
    tasks = make_tasks(spec, base, str(TUNE), make_candidates(spec, cand_rng), make_draws(spec, plant_rng))
    # a rollout that faults part-way (tracking error bound crossed while the others run compiled)
    ci, j, data, file, ov = tasks[4]
    tasks.append((90, 0, data, file, {**ov, "safety.tracking_error_max": [2e-4, 2e-4, 0.1]}))
    # a rollout the compiled loop does not cover (measurement noise): Python every cycle
    tasks.append((91, 0, data, file, {**ov, "driver.plant.position_noise_std_rad": 1e-5}))
    return tasks


def test_batched_rollouts_equal_the_single_runs():
    tasks = _tasks()
    single = [evaluate_task(t) for t in tasks]
    ci0, j0, data, file, _ = tasks[0]
    rows = EXECUTORS["batch"](evaluate_task, data, file, [(ci, j, ov) for ci, j, _, _, ov in tasks], len(tasks),
                              "", None, None, 0.1, EngineReport("batch"))
    batched = [(ci, j, m) for ci, j, m, _ in rows]
    assert [(ci, j) for ci, j, _ in batched] == [(ci, j) for ci, j, _ in single]
    statuses = [m["status"] for _, _, m in single]
    assert statuses.count("completed") >= len(tasks) - 1, statuses
    assert single[-2][2]["status"] == "fault" and any("tracking_error" in f for f in single[-2][2]["faults"])
    for (ci, j, a), (_, _, b) in zip(single, batched):
        _assert_same(a, b, f"candidate {ci} draw {j}")
        assert a["status"] != "error", a.get("error")


def test_batch_engine_ranks_like_the_process_pool():
    """The whole search (``run_tune``) on the batch engine gives the pool's scores, bit for bit."""
    base = _absolutise(read_toml(TUNE), TUNE.parent)
    spec = TuneSpec(params={"controller.wn_rad_s": ParamRange(15.0, 90.0, log=True)},
                    uncertainty={"driver.plant.mass_factor": ParamRange(0.9, 1.25)},
                    method="random", candidates=3, monte_carlo=2, metric="rms_position_error_m",
                    duration_s=0.5, seed=3)
    one = run_tune(spec, base, str(TUNE), workers=1, engine="local")
    batch = run_tune(spec, base, str(TUNE), workers=3, engine="batch")
    assert [c.index for c in one.ranked] == [c.index for c in batch.ranked]
    for a, b in zip(one.candidates, batch.candidates):
        assert a.values == b.values
        assert all(math.isfinite(s) for s in a.scores)
        assert a.scores == pytest.approx(b.scores, rel=1e-12, abs=0.0)


def test_batch_is_a_known_engine():
    from controller.app.tune_config import ENGINES

    assert "batch" in ENGINES and set(EXECUTORS) | {"auto"} == set(ENGINES)


def test_auto_engine_picks_batch_for_compiled_runs_and_the_pool_otherwise():
    """``engine = "auto"`` (the default) runs the first rollout here and takes ``batch`` when it
    went through the compiled offline loop, else the process pool; the scores do not depend on it."""
    base = _absolutise(read_toml(TUNE), TUNE.parent)
    spec = TuneSpec(params={"controller.wn_rad_s": ParamRange(15.0, 90.0, log=True)}, uncertainty={},
                    method="random", candidates=2, monte_carlo=1, metric="rms_position_error_m",
                    duration_s=0.3, seed=3)
    assert spec.engine == "auto"
    seen = []
    auto = run_tune(spec, base, str(TUNE), workers=2, progress=lambda d, t: seen.append((d, t)))
    assert auto.engine == "batch"
    assert seen[-1] == (2, 2) and [d for d, _ in seen] == sorted(d for d, _ in seen)
    one = run_tune(spec, base, str(TUNE), workers=1, engine="local")
    assert [c.scores for c in auto.candidates] == [c.scores for c in one.candidates]
    # measurement noise is drawn in Python every cycle: nothing runs compiled, the pool is faster
    noisy = dict(base, driver={**base["driver"], "plant": {**base["driver"]["plant"],
                                                            "position_noise_std_rad": 1e-5}})
    spec1 = TuneSpec(params=spec.params, uncertainty={}, method="random", candidates=1, monte_carlo=1,
                     metric="rms_position_error_m", duration_s=0.3, seed=3)
    assert run_tune(spec1, noisy, str(TUNE), workers=1).engine == "local"
