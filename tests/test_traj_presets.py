"""Seed presets (trajectories.presets) and the [trajectory] config loader (trajectories.config)."""

import math
from pathlib import Path

import numpy as np
import pytest

from dynamics import load_model
from dynamics.config import Section
from dynamics.errors import ConfigError, InfeasibleTrajectoryError, TrajectoryError
from trajectories import load_trajectory, preset
from trajectories.feasibility import check_feasibility
from trajectories.mapping import JointSpaceTrajectory, SerialIKTrajectory, Tabulated
from trajectories.presets import SEED000_TARGET, SEED004_Q0


def fd_errors(traj, t, h=1e-5):
    """Max abs difference between analytic derivatives and central differences of the next lower one."""
    s, sp, sm = traj.sample(t), traj.sample(t + h), traj.sample(t - h)
    return (np.max(np.abs((sp.pos - sm.pos) / (2 * h) - s.vel)),
            np.max(np.abs((sp.vel - sm.vel) / (2 * h) - s.acc)),
            np.max(np.abs((sp.acc - sm.acc) / (2 * h) - s.jerk)))


def interior_times(traj, n=150, avoid=(), gap=1e-3, seed=0):
    """Random times inside (0, T), away from the given breakpoints."""
    rng = np.random.default_rng(seed)
    t = np.sort(rng.uniform(gap, traj.duration_s - gap, 4 * n))
    for b in avoid:
        t = t[np.abs(t - b) > gap]
    return t[:n]


ROBOTS = Path(__file__).resolve().parents[1] / "hil_configs" / "robots"


@pytest.fixture(scope="module")
def models():
    names = {"arm": "seed000_arm.toml", "arm5": "seed004_5link.toml", "rrr_h": "3rrr_horizontal.toml",
             "rrr_v": "3rrr_vertical.toml", "stewart": "stewart.toml"}
    return {k: load_model(ROBOTS / f) for k, f in names.items()}


def test_seed000_slow_and_fast(models):
    arm = models["arm"]
    slow, fast = preset("seed000_slow", arm), preset("seed000_fast", arm)
    assert slow.dim == 3 and slow.duration_s == pytest.approx(2.5 * fast.duration_s)
    t = np.linspace(0, slow.duration_s, 1101)
    s, f = slow.sample(t), fast.sample(t / 2.5)
    np.testing.assert_allclose(f.pos, s.pos, atol=1e-12)
    np.testing.assert_allclose(f.vel, 2.5 * s.vel, atol=1e-12)
    np.testing.assert_allclose(f.acc, 2.5**2 * s.acc, atol=1e-10)
    # extremes are inflection points: rest at start, target and end
    for tt in (0.0, 5.0, 6.0, 11.0):
        smp = slow.sample(tt)
        np.testing.assert_allclose(smp.vel, 0, atol=1e-12)
        np.testing.assert_allclose(smp.acc, 0, atol=1e-12)
    np.testing.assert_allclose(slow.sample(5.5).pos, SEED000_TARGET)
    # inertial effects grow with speed: the faster motion needs larger peak torques on every joint
    tau_s = arm.inverse_dynamics(*list(slow.sample(t))[:3])
    tau_f = arm.inverse_dynamics(*list(fast.sample(t / 2.5))[:3])
    assert np.all(np.max(np.abs(tau_f), axis=0) > np.max(np.abs(tau_s), axis=0))
    ev, ea, ej = fd_errors(slow, interior_times(slow, avoid=[5.0, 6.0]))
    assert ev < 1e-8 and ea < 1e-7 and ej < 1e-6
    with pytest.raises(TrajectoryError):
        preset("seed000_slow", models["arm5"])


def test_seed004_square_constant_speed_and_tracking(models):
    arm = models["arm5"]
    tr = preset("seed004_square", arm)
    assert isinstance(tr, SerialIKTrajectory) and tr.duration_s == 60.0
    t = np.linspace(3.0, 57.0, 400)
    task = tr.task.sample(t)
    speed = np.linalg.norm(task.vel, axis=1)
    np.testing.assert_allclose(speed, speed[0], rtol=1e-10)          # constant speed after the ramp
    q = tr.sample(t)
    np.testing.assert_allclose(arm.forward_kinematics(q.pos)[:, :2, 3], task.pos, atol=1e-10)
    np.testing.assert_allclose(tr.task.start, [2.0, 2.0])
    np.testing.assert_allclose(tr.sample(0.0).pos, SEED004_Q0, atol=2e-3)
    assert check_feasibility(tr, arm, dt_s=0.1).ok


@pytest.mark.parametrize("which", ["rrr_h", "rrr_v"])
def test_rrr_circle_preset(models, which):
    m = models[which]
    tr = preset("rrr_circle", m)
    assert isinstance(tr, JointSpaceTrajectory)
    ends = tr.sample_with_task(np.array([0.0, tr.duration_s]))
    np.testing.assert_allclose(ends[1].pos, np.broadcast_to(m.home_pose, (2, 3)), atol=1e-12)
    np.testing.assert_allclose(ends[0].vel, 0, atol=1e-12)
    # velocity continuous through the segment junctions
    task = tr.task
    for tb in task.breakpoints_s[1:-1]:
        a, b = tr.sample(tb - 1e-7), tr.sample(tb + 1e-7)
        np.testing.assert_allclose(a.vel, b.vel, atol=1e-5)
    rep = check_feasibility(tr, m, dt_s=0.02, singularity_margin=0.05)
    assert rep.ok and rep.min_singularity_margin > 0.05
    # platform rotates during the circle
    phi = task.sample(np.linspace(0, tr.duration_s, 500)).pos[:, 2]
    assert np.ptp(phi) == pytest.approx(0.3, abs=1e-3)
    with pytest.raises(InfeasibleTrajectoryError):
        preset("rrr_circle", m, radius_m=0.3)
    with pytest.raises(TrajectoryError):
        preset("rrr_circle", models["stewart"])


def test_stewart_motion_preset(models):
    m = models["stewart"]
    tr = preset("stewart_motion", m)
    s, ts = tr.sample_with_task(np.linspace(0, tr.duration_s, 300))
    assert np.all(np.ptp(ts.pos, axis=0) > 0.05)             # every axis moves
    np.testing.assert_allclose(ts.pos[[0, -1]], np.broadcast_to(m.home_pose, (2, 6)), atol=1e-12)
    np.testing.assert_allclose(m.inverse_kinematics(ts.pos), s.pos, atol=1e-12)
    with pytest.raises(InfeasibleTrajectoryError):
        preset("stewart_motion", m, translation_m=0.5)
    with pytest.raises(TrajectoryError, match="unknown preset"):
        preset("nope", m)


def _sec(d):
    return Section(d, file="run.toml", path="trajectory")


def test_config_preset_and_options(models):
    tr = load_trajectory(_sec({"type": "preset", "name": "seed000_fast"}), models["arm"])
    assert tr.duration_s == pytest.approx(11.0 / 2.5)
    tr = load_trajectory(_sec({"type": "preset", "name": "rrr_circle", "tabulate_dt_s": 0.0,
                               "options": {"radius_m": 0.03, "turns": 1.0}}), models["rrr_v"])
    assert isinstance(tr, JointSpaceTrajectory)
    # by default mapped trajectories come tabulated (fast sampling), matching the analytic values at nodes
    tab = load_trajectory(_sec({"type": "preset", "name": "rrr_circle",
                                "options": {"radius_m": 0.03, "turns": 1.0}}), models["rrr_v"])
    assert isinstance(tab, Tabulated) and tab.base_type == "JointSpaceTrajectory"
    nodes = tab.nodes_s[::97]
    for a, b in zip(tab.sample(nodes), list(tr.sample(nodes))[:3]):
        np.testing.assert_allclose(a, b, atol=1e-12)
    assert tab.task is tr.task or np.allclose(tab.task.sample(nodes).pos, tr.task.sample(nodes).pos)
    with pytest.raises(ConfigError) as ei:
        load_trajectory(_sec({"type": "preset", "name": "rrr_circle", "options": {"radius": 0.03}}),
                        models["rrr_v"])
    assert ei.value.file == "run.toml" and ei.value.field == "trajectory.options.radius"
    with pytest.raises(ConfigError) as ei:
        load_trajectory(_sec({"type": "preset", "name": "rrr_circle", "options": {"radius_m": 0.4}}),
                        models["rrr_v"])
    assert ei.value.field == "trajectory" and "Infeasible" in str(ei.value)


def test_config_point_to_point_joint_and_task(models):
    arm = models["arm"]
    tr = load_trajectory(_sec({"type": "point_to_point", "target": [0.1, 0.2, 0.3], "profile": "double_s",
                               "vmax": 1.0, "amax": [1.0, 2.0, 3.0], "jmax": 10.0}), arm)
    np.testing.assert_allclose(tr.end, [0.1, 0.2, 0.3])
    st = models["stewart"]
    h = st.home_pose
    tr = load_trajectory(_sec({"type": "point_to_point", "space": "task", "target": list(h + [0, 0, 0.05, 0, 0, 0.1]),
                               "duration_s": 2.0, "check": True}), st)
    assert isinstance(tr, Tabulated) and isinstance(tr.base, JointSpaceTrajectory)
    np.testing.assert_allclose(tr.task.start, h)
    tr = load_trajectory(_sec({"type": "point_to_point", "target": [1.0, 1.0, 1.0], "profile": "quintic",
                               "duration_s": 0.3, "scale_to_limits": True, "acceleration_max": 20.0,
                               "check_dt_s": 0.005}), arm)
    assert tr.duration_s > 0.3
    assert check_feasibility(tr, arm, dt_s=0.005 * tr.factor, acceleration_max=20.0).ok


def test_config_paths(models):
    sq = load_trajectory(_sec({"type": "square", "start": [2.0, 2.0], "side_m": 0.3, "duration_s": 30.0,
                               "first_direction": [-1.0, 0.0], "corners": "blend", "blend_radius_m": 0.02,
                               "q_rest": list(SEED004_Q0), "tabulate_dt_s": 0.01}), models["arm5"])
    assert isinstance(sq.base, SerialIKTrajectory) and sq.dim == 5 and sq.nodes_s[1] == 0.01
    m = models["rrr_h"]
    c = load_trajectory(_sec({"type": "circle", "center": [0.0, 0.0], "radius_m": 0.03, "duration_s": 4.0,
                              "phi_amplitude": 0.1, "tabulate_dt_s": 0.01}), m)
    assert c.task.dim == 3
    sqr = load_trajectory(_sec({"type": "square", "start": [0.0, 0.0], "side_m": 0.03, "duration_s": 4.0,
                               "tabulate_dt_s": 0.0}), m)
    np.testing.assert_allclose(sqr.task.sample(2.0).pos[2], m.home_pose[2])
    st = models["stewart"]
    c6 = load_trajectory(_sec({"type": "circle", "center": list(st.home_pose[:3]), "radius_m": 0.05,
                               "duration_s": 4.0, "start_angle": math.pi, "tabulate_dt_s": 0.01}), st)
    np.testing.assert_allclose(c6.task.sample(1.0).pos[3:], st.home_pose[3:])
    v = load_trajectory(_sec({"type": "via_points", "times_s": [0.0, 1.0, 2.0],
                              "points": [[0, 0, 0], [0.1, 0.2, -0.1], [0, 0, 0]]}), models["arm"])
    assert v.duration_s == 2.0
    h = load_trajectory(_sec({"type": "hold", "position": [0.0, 0.0, 0.0], "duration_s": 1.0}), models["arm"])
    assert h.duration_s == 1.0


@pytest.mark.parametrize("table,field", [
    ({"type": "spiral"}, "trajectory.type"),
    ({"type": "point_to_point", "target": [0.1, 0.2]}, "trajectory.target"),
    ({"type": "point_to_point", "target": [0.1, 0.2, 0.3], "duration_s": -1.0}, "trajectory.duration_s"),
    ({"type": "point_to_point", "target": [0.1, 0.2, 0.3], "duration_s": 1.0, "colour": "red"},
     "trajectory.colour"),
    ({"type": "point_to_point", "target": [0.1, 0.2, 0.3], "vmax": [1.0, -1.0, 1.0], "amax": 1.0,
      "profile": "trapezoidal"}, "trajectory.vmax"),
    ({"type": "point_to_point", "target": [0.1, 0.2, 0.3]}, "trajectory"),
    ({"type": "circle", "space": "joint", "center": [0, 0, 0], "radius_m": 0.1, "duration_s": 1.0},
     "trajectory.space"),
    ({"type": "via_points", "times_s": [0.0, 1.0], "points": [[0, 0], [1, 1]]}, "trajectory.points"),
    ({"type": "preset", "name": "bogus"}, "trajectory.name"),
    ({"type": "circle", "center": [5.0, 5.0, 0.0], "radius_m": 0.1, "duration_s": 1.0}, "trajectory"),
])
def test_config_errors_name_file_and_field(models, table, field):
    with pytest.raises(ConfigError) as ei:
        load_trajectory(_sec(table), models["arm"])
    assert ei.value.file == "run.toml"
    assert ei.value.field == field
