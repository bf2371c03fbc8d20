"""The parse caches of a sweep (``parse_run``'s ``model_cache``, the memoised joint start).

The runs of a gain search share the robot model loaded from one file: it is reused only for
the same path with the same bytes, a rollout leaves it as it was, and each Monte-Carlo draw
still simulates its own perturbed plant.
"""

from __future__ import annotations

import pickle
import shutil
from pathlib import Path

import numpy as np

from controller.app.run import _joint_start, _start_reference, build_run, parse_run, run_offline_metrics
from dynamics.config import apply_overrides, read_toml

ROOT = Path(__file__).resolve().parents[1]
TUNE = ROOT / "hil_configs" / "runs" / "3rrr_circle_tune.toml"
#: wall-clock figures: not results
TIMING = ("timing", "wall_time_s", "real_time_factor")


def _data(**over) -> dict:
    data = {k: v for k, v in read_toml(TUNE).items() if k != "tune"}
    return apply_overrides(data, {"loop.duration_s": 0.6, **over}, file=str(TUNE))


def _results(m: dict) -> dict:
    return {k: v for k, v in m.items() if k not in TIMING}


def test_a_cached_model_is_reused_and_a_rollout_leaves_it_unchanged():
    cache = {}
    a = parse_run(_data(), file=str(TUNE), base_dir=TUNE.parent, model_cache=cache)
    before = pickle.dumps(a.model.__dict__)
    m1 = run_offline_metrics(_data(**{"controller.wn_rad_s": 30.0}), file=str(TUNE), model_cache=cache)
    m2 = run_offline_metrics(_data(**{"driver.plant.mass_factor": 1.2}), file=str(TUNE), model_cache=cache)
    assert m1["status"] == m2["status"] == "completed"
    assert len(cache) == 1 and next(iter(cache.values())) is a.model
    assert pickle.dumps(a.model.__dict__) == before
    b = parse_run(_data(), file=str(TUNE), base_dir=TUNE.parent, model_cache=cache)
    assert b.model is a.model
    # the same figures as runs that load their own model
    fresh = run_offline_metrics(_data(**{"driver.plant.mass_factor": 1.2}), file=str(TUNE))
    assert _results(m2) == _results(fresh)
    # the scaled plant model the draw shares is left unchanged by a rollout too
    from drivers.sim.build import _scaled
    plant_model = _scaled(a.model, 1.2, None)
    before = pickle.dumps(plant_model.__dict__)
    again = run_offline_metrics(_data(**{"driver.plant.mass_factor": 1.2}), file=str(TUNE), model_cache=cache)
    assert pickle.dumps(plant_model.__dict__) == before and _results(again) == _results(m2)


def test_a_different_or_edited_robot_file_is_loaded_again(tmp_path):
    robot = read_toml(TUNE)["robot"]["file"]
    src = (TUNE.parent / robot).resolve()
    copy = tmp_path / "robot.toml"
    shutil.copy(src, copy)
    cache = {}
    a = parse_run(_data(), file=str(TUNE), base_dir=TUNE.parent, model_cache=cache)
    b = parse_run(_data(**{"robot.file": str(copy)}), file=str(TUNE), base_dir=TUNE.parent, model_cache=cache)
    assert b.model is not a.model and b.model.source == str(copy)
    # the same path with other bytes: the edit is seen
    text = copy.read_text()
    assert "[platform]\nmass = 0.5\n" in text
    copy.write_text(text.replace("[platform]\nmass = 0.5\n", "[platform]\nmass = 0.75\n"))
    c = parse_run(_data(**{"robot.file": str(copy)}), file=str(TUNE), base_dir=TUNE.parent, model_cache=cache)
    assert c.model is not b.model and c.model._mp == 0.75 and b.model._mp != 0.75
    assert parse_run(_data(), file=str(TUNE), base_dir=TUNE.parent, model_cache=cache).model is a.model


def test_each_monte_carlo_draw_simulates_its_own_plant_with_a_shared_model():
    """The controller's model is the cached one; each plant-mass draw scales its own plant
    model (built once per model and factors, see ``drivers.sim.build._scaled``)."""
    cache = {}
    plants = []
    for mf in (0.9, 1.25, 0.9):
        spec = parse_run(_data(**{"driver.plant.mass_factor": mf}), file=str(TUNE), base_dir=TUNE.parent,
                         model_cache=cache)
        run = build_run(spec)
        try:
            plants.append((spec.model, run.plant.model))
        finally:
            run.close()
    (m1, p1), (m2, p2), (m3, p3) = plants
    assert m1 is m2 is m3                        # the controller's model is shared
    assert p1 is not m1 and p2 is not m1 and p1 is not p2
    assert p3 is p1                              # the same draw: the same (constant) plant model
    assert np.allclose(p1._prox.mass, 0.9 * m1._prox.mass) and np.allclose(p2._prox.mass, 1.25 * m1._prox.mass)
    assert p1._mp == 0.9 * m1._mp and p2._mp == 1.25 * m1._mp


def test_joint_start_is_computed_once_per_spec_and_handed_out_as_new_arrays():
    spec = parse_run(_data(), file=str(TUNE), base_dir=TUNE.parent)
    q0, X0 = _joint_start(spec)
    q1, X1 = _joint_start(spec)
    assert np.array_equal(q0, q1) and np.array_equal(X0, X1)
    assert q0 is not q1 and X0 is not X1
    q0 += 1.0                                    # a caller's edit does not reach the next one
    assert np.array_equal(_joint_start(spec)[0], q1)
    assert np.allclose(spec.model.inverse_kinematics(X1), q1)
    # another trajectory: the start is computed again
    other = parse_run(_data(**{"trajectory.options.radius_m": 0.03}), file=str(TUNE), base_dir=TUNE.parent)
    spec.trajectory = other.trajectory
    q2, X2 = _joint_start(spec)
    ref = other.trajectory.sample(0.0)
    assert np.array_equal(X2, np.asarray(ref.pos, dtype=float))


def test_start_reference_is_the_trajectory_sample_at_zero_as_new_arrays():
    spec = parse_run(_data(), file=str(TUNE), base_dir=TUNE.parent)
    ref = spec.trajectory.sample(0.0)
    a, b = _start_reference(spec), _start_reference(spec)
    for x, y, z in zip(a, b, ref):
        assert np.array_equal(x, z) and np.array_equal(y, z) and x is not y
    a.pos[:] = 9.0                               # a caller's edit does not reach the next one
    assert np.array_equal(_start_reference(spec).pos, ref.pos)
    build_run(spec).close()                      # the build's warm-up leaves the start as it was
    assert np.array_equal(_start_reference(spec).pos, ref.pos)
    assert np.array_equal(_joint_start(spec)[1], np.asarray(ref.pos, dtype=float))


def test_a_trajectory_mapped_through_an_edited_robot_file_is_built_again(tmp_path):
    """parse_run's trajectory cache is keyed by the robot file's bytes too: the 3RRR circle is
    mapped to joint space through the model, so an edit of the robot gives another trajectory."""
    robot = read_toml(TUNE)["robot"]["file"]
    copy = tmp_path / "robot.toml"
    shutil.copy((TUNE.parent / robot).resolve(), copy)
    trajectories = {}
    over = {"robot.file": str(copy)}
    a = parse_run(_data(**over), file=str(TUNE), base_dir=TUNE.parent, trajectory_cache=trajectories)
    b = parse_run(_data(**over), file=str(TUNE), base_dir=TUNE.parent, trajectory_cache=trajectories)
    assert b.trajectory is a.trajectory and len(trajectories) == 1
    text = copy.read_text()
    assert "[platform]\nmass = 0.5\n" in text
    copy.write_text(text.replace("[platform]\nmass = 0.5\n", "[platform]\nmass = 0.75\n"))
    c = parse_run(_data(**over), file=str(TUNE), base_dir=TUNE.parent, trajectory_cache=trajectories)
    assert c.trajectory is not a.trajectory and len(trajectories) == 2
