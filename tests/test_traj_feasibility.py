"""Feasibility reports and time scaling (trajectories.feasibility)."""

from pathlib import Path

import numpy as np
import pytest

from dynamics import load_model
from dynamics.errors import InfeasibleTrajectoryError, TrajectoryError
from trajectories import paths as P
from trajectories.base import TimeScaled
from trajectories.feasibility import check_feasibility, time_scale_to_limits
from trajectories.mapping import JointSpaceTrajectory
from trajectories.profiles import point_to_point

ROBOTS = Path(__file__).resolve().parents[1] / "hil_configs" / "robots"
Q_004 = np.deg2rad([70.0, -30.0, 15.0, -40.0, 2.5])


def arm5(torque_max=3000.0, velocity_max=1.0, gravity=(0.0, -9.81, 0.0)):
    joints = [{"name": f"j{i + 1}", "a": a, "alpha": 0.0, "d": 0.0, "mass": m, "com": [-a / 2, 0.0, 0.0],
               "inertia": [0.0, m * a * a / 12, m * a * a / 12, 0.0, 0.0, 0.0],
               "position_min_deg": -lim, "position_max_deg": lim,
               "velocity_max": velocity_max, "torque_max": torque_max}
              for i, (a, m, lim) in enumerate(zip([0.8, 0.7, 0.7, 0.52, 0.3], [40.0, 20, 30, 20, 20],
                                                  [180.0, 120, 120, 150, 150]))]
    return load_model({"name": "arm5", "type": "serial", "convention": "standard",
                       "gravity": list(gravity), "joints": joints}, file="<test>")


@pytest.fixture(scope="module")
def rrr():
    return load_model(ROBOTS / "3rrr_horizontal.toml")


def test_velocity_violation_names_first_time_and_axis():
    model = arm5(torque_max=1e6)
    T = 2.0
    delta = np.array([0.1, 0.3, 1.5, -2.0, 0.0])   # quintic peak speed 15/8 * |delta| / T
    tr = point_to_point(Q_004, Q_004 + delta, "quintic", duration_s=T)
    dt = 1e-3
    rep = check_feasibility(tr, model, dt_s=dt)
    assert not rep.ok
    first = rep.first
    assert first.quantity == "velocity" and first.axis == 3 and first.axis_name == "j4"
    # first crossing of |v| = 1 by 30 tau^2 (1 - tau)^2 * 2 / 2 (analytic), then the next grid point
    tau = np.linspace(0, 0.5, 2_000_001)
    tc = T * tau[np.argmax(30 * tau**2 * (1 - tau) ** 2 * 2.0 / T > 1.0)]
    assert tc <= first.t_s < tc + dt + 1e-12
    assert first.value < -1.0 and first.limit == -1.0
    # axis 2 crosses later (smaller displacement) and is listed too
    axes = {(v.quantity, v.axis) for v in rep.violations}
    assert ("velocity", 2) in axes and ("velocity", 1) not in axes
    assert rep.peak_ratio["velocity"][3] == pytest.approx(15 / 8 * 2.0 / T, rel=1e-4)
    with pytest.raises(InfeasibleTrajectoryError, match="velocity"):
        rep.raise_if_infeasible()


def test_acceleration_and_torque_checks():
    model = arm5(torque_max=1500.0, velocity_max=10.0)
    tr = point_to_point(Q_004, Q_004 + [0.5, -0.5, 0.5, 0.0, 0.0], "cycloidal", duration_s=1.0)
    rep = check_feasibility(tr, model, dt_s=0.01, acceleration_max=2.0)
    kinds = {v.quantity for v in rep.violations}
    assert "acceleration" in kinds and "torque" in kinds
    tau = model.inverse_dynamics(*(x for x in list(tr.sample(tr.time_grid(0.01)))[:3]))
    k = np.argmax(np.any(np.abs(tau) > 1500.0, axis=1))
    tv = [v for v in rep.violations if v.quantity == "torque"]
    assert min(v.t_s for v in tv) == pytest.approx(k * 0.01)
    ok = check_feasibility(tr, model, dt_s=0.01, check_torque=False)
    assert ok.ok and ok.first is None


def test_time_scaling_velocity_only_is_closed_form(rrr):
    task = P.planar_circle_pose([0.0, 0.0], 0.05, 0.3, phi_amplitude=0.2, ramp_s=0.1)
    js = JointSpaceTrajectory(task, rrr)
    kw = dict(check_torque=False, velocity_max=2.0)
    rep = check_feasibility(js, rrr, dt_s=1e-3, **kw)
    vpeak = np.max(rep.peak_ratio["velocity"])
    assert vpeak > 1.0 and not rep.ok
    scaled = time_scale_to_limits(js, rrr, dt_s=1e-3, **kw)
    assert isinstance(scaled, TimeScaled)
    assert scaled.factor == pytest.approx(vpeak, rel=1e-8)
    assert check_feasibility(scaled, rrr, dt_s=1e-3 * scaled.factor, **kw).ok
    assert not check_feasibility(TimeScaled(js, scaled.factor * 0.999), rrr, dt_s=1e-3 * scaled.factor, **kw).ok
    # acceleration limits scale with k^2
    acc = dict(kw, acceleration_max=50.0)
    scaled = time_scale_to_limits(js, rrr, dt_s=1e-3, **acc)
    apeak = np.max(check_feasibility(js, rrr, dt_s=1e-3, **acc).peak_ratio["acceleration"])
    assert scaled.factor == pytest.approx(max(vpeak, np.sqrt(apeak)), rel=1e-8)
    assert check_feasibility(scaled, rrr, dt_s=1e-3 * scaled.factor, **acc).ok


def test_time_scaling_torque_with_gravity_is_minimal():
    model = arm5(torque_max=1600.0, velocity_max=10.0)
    tr = point_to_point(Q_004, Q_004 + [0.6, -0.4, 0.3, 0.2, 0.1], "quintic", duration_s=0.8)
    dt = 2e-3
    assert not check_feasibility(tr, model, dt_s=dt).ok
    scaled = time_scale_to_limits(tr, model, dt_s=dt)
    k = scaled.factor
    assert k > 1.0
    assert check_feasibility(scaled, model, dt_s=dt * k).ok
    rep = check_feasibility(TimeScaled(tr, k * 0.995), model, dt_s=dt * k * 0.995)
    assert not rep.ok and rep.first.quantity == "torque"
    # already feasible: factor 1
    assert time_scale_to_limits(TimeScaled(tr, 2 * k), model, dt_s=dt).factor == 1.0


def test_time_scaling_cannot_fix_gravity_or_position():
    weak = arm5(torque_max=500.0, velocity_max=10.0)
    tr = point_to_point(Q_004, Q_004 + 0.1, "quintic", duration_s=1.0)
    with pytest.raises(InfeasibleTrajectoryError, match="static torque"):
        time_scale_to_limits(tr, weak, dt_s=0.01)
    model = arm5(torque_max=1e5, velocity_max=10.0)
    far = point_to_point(Q_004, Q_004 + [0.0, -2.0, 0.0, 0.0, 0.0], "quintic", duration_s=10.0)
    rep = check_feasibility(far, model, dt_s=0.01)
    assert rep.first.quantity == "position" and rep.first.axis == 1
    assert rep.first.limit == pytest.approx(np.deg2rad(-120.0))
    with pytest.raises(InfeasibleTrajectoryError, match="position"):
        time_scale_to_limits(far, model, dt_s=0.01)


def test_3rrr_position_limit_when_joint_passes_pi(rrr):
    js = JointSpaceTrajectory(P.pose_move([0.0, 0.0, 0.0], [0.0, 0.05, 0.6], 1.0), rrr)
    rep = check_feasibility(js, rrr, dt_s=1e-3)
    assert rep.first.quantity == "position" and rep.first.axis_name == "theta3"
    t = rep.first.t_s
    assert js.sample(t).pos[2] < -3.1416 <= js.sample(t - 1e-3).pos[2]


def test_reachability_and_singularity_reported_in_task_space(rrr):
    out = P.pose_move([0.0, 0.0, 0.0], [0.5, 0.0, 0.0], 1.0)
    rep = check_feasibility(out, rrr, dt_s=1e-3, space="task")
    # near the workspace boundary (type-1 singularity) the speeds and torques blow up first
    assert {"velocity", "torque", "reachability"} <= {v.quantity for v in rep.violations}
    rep = check_feasibility(out, rrr, dt_s=1e-3, space="task", check_torque=False, velocity_max=1e12,
                            singularity_margin=0.0)
    assert rep.first.quantity == "reachability" and "not reachable" in rep.first.message
    assert rep.first.axis is None
    t = rep.first.t_s
    with pytest.raises(Exception):
        rrr.inverse_kinematics(out.sample(t).pos)
    rrr.inverse_kinematics(out.sample(t - 1e-3).pos)
    tilt = P.pose_move([0.0, 0.0, 0.0], [0.0, 0.0, -0.6], 1.0)
    rep = check_feasibility(tilt, rrr, dt_s=1e-3, space="task", singularity_margin=0.1)
    assert rep.first.quantity == "singularity"
    assert rep.min_singularity_margin < 0.1
    assert check_feasibility(tilt, rrr, dt_s=1e-3, space="task", singularity_margin=0.01).ok


def test_bad_arguments(rrr):
    tr = point_to_point([0.0, 0.0, 0.0], [0.1, 0.1, 0.1], "quintic", duration_s=1.0)
    with pytest.raises(TrajectoryError):
        check_feasibility(tr, rrr, dt_s=-0.1)
    with pytest.raises(TrajectoryError):
        check_feasibility(tr, rrr, dt_s=0.1, space="cartesian")
    with pytest.raises(TrajectoryError):
        check_feasibility(point_to_point([0.0], [1.0], "quintic", duration_s=1.0), rrr, dt_s=0.1)
    with pytest.raises(TrajectoryError):
        check_feasibility(tr, rrr, dt_s=0.1, acceleration_max=-1.0)


def test_time_scaling_stewart_forces_through_task_dynamics():
    st = load_model(ROBOTS / "stewart.toml")
    h = st.home_pose
    fast = JointSpaceTrajectory(P.pose_move(h, h + [0.05, -0.05, 0.08, 0.1, -0.1, 0.15], 0.25), st)
    kw = dict(torque_max=150.0, velocity_max=10.0)
    rep = check_feasibility(fast, st, dt_s=2e-3, **kw)
    assert not rep.ok and rep.first.quantity == "torque"
    scaled = time_scale_to_limits(fast, st, dt_s=2e-3, **kw)
    k = scaled.factor
    assert k > 1.0
    assert check_feasibility(scaled, st, dt_s=2e-3 * k, **kw).ok
    assert not check_feasibility(TimeScaled(fast, 0.995 * k), st, dt_s=2e-3 * 0.995 * k, **kw).ok
    # the closed form used for k: tau(k) = tau_static + (tau(1) - tau_static) / k^2, checked directly
    t = np.array([0.05, 0.1, 0.2])
    s, ts = fast.sample_with_task(t)
    tau1 = st.task_inverse_dynamics(ts.pos, ts.vel, ts.acc)
    tau0 = st.task_inverse_dynamics(ts.pos, 0 * ts.vel, 0 * ts.acc)
    sk, tsk = scaled.base.sample_with_task(t)
    tauk = st.task_inverse_dynamics(tsk.pos, tsk.vel / k, tsk.acc / k**2)
    np.testing.assert_allclose(tauk, tau0 + (tau1 - tau0) / k**2, rtol=1e-9, atol=1e-9)


def test_tabulated_mapped_is_checked_with_task_states(rrr):
    from trajectories.mapping import Tabulated
    js = JointSpaceTrajectory(P.pose_move([0.0, 0.0, 0.0], [0.0, 0.05, 0.6], 1.0), rrr)
    a = check_feasibility(js, rrr, dt_s=1e-3)
    b = check_feasibility(Tabulated(js, 1e-3), rrr, dt_s=1e-3)
    assert b.first == a.first and b.min_singularity_margin == a.min_singularity_margin
