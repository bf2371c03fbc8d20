"""Task -> actuator mapping (trajectories.mapping): IK round trips and analytic rates vs finite differences."""

from pathlib import Path
import re
import types

import numpy as np
import pytest

from dynamics import load_model
from dynamics.errors import TrajectoryError, UnreachableError
from trajectories import paths as P
from trajectories.mapping import (JointSpaceTrajectory, SerialIKTrajectory, Tabulated, TaskSelection,
                                  _parallel_velocity_acceleration)


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
LINKS_004 = [0.8, 0.7, 0.7, 0.52, 0.3]
MASSES_004 = [40.0, 20.0, 30.0, 20.0, 20.0]
Q_004 = np.deg2rad([70.0, -30.0, 15.0, -40.0, 2.5])


@pytest.fixture(scope="module")
def rrr():
    return load_model(ROBOTS / "3rrr_horizontal.toml")


@pytest.fixture(scope="module")
def stewart():
    return load_model(ROBOTS / "stewart.toml")


@pytest.fixture(scope="module")
def arm5():
    """The seed-004 5-link planar arm (uniform rods), built in memory so the test
    does not depend on the robot file's choices."""
    joints = [{"a": a, "alpha": 0.0, "d": 0.0, "mass": m, "com": [-a / 2, 0.0, 0.0],
               "inertia": [0.0, m * a * a / 12, m * a * a / 12, 0.0, 0.0, 0.0]}
              for a, m in zip(LINKS_004, MASSES_004)]
    return load_model({"name": "arm5", "type": "serial", "convention": "standard",
                       "gravity": [0.0, -9.81, 0.0], "joints": joints}, file="<test>")


def test_3rrr_round_trip_and_rates(rrr):
    task = P.planar_circle_pose([0.01, -0.01], 0.04, 4.0, phi0=0.05, phi_amplitude=0.2, ramp_s=0.5)
    js = JointSpaceTrajectory(task, rrr)
    t = interior_times(js, avoid=[0.5, 3.5], gap=1e-3)
    jsm, ts = js.sample_with_task(t)
    for i in range(0, len(t), 15):
        X = rrr.forward_kinematics_task(jsm.pos[i], guess=ts.pos[i])
        np.testing.assert_allclose(X, ts.pos[i], atol=1e-11)
        np.testing.assert_allclose(rrr.constraints(jsm.pos[i], ts.pos[i]), 0, atol=1e-13)
        # mapped rates back to the task
        np.testing.assert_allclose(rrr.task_velocity(jsm.pos[i], ts.pos[i], jsm.vel[i]), ts.vel[i], atol=1e-12)
        np.testing.assert_allclose(rrr.task_acceleration(jsm.pos[i], ts.pos[i], jsm.vel[i], jsm.acc[i]),
                                   ts.acc[i], atol=1e-11)
    ev, ea, ej = fd_errors(js, t, h=1e-6)
    assert ev < 1e-7 and ea < 1e-5 and ej < 1e-2


def test_3rrr_generic_jacobian_route_matches_hessian_route(rrr):
    task = P.pose_move([0.0, 0.0, 0.0], [0.03, -0.02, 0.25], 1.0)
    t = np.linspace(0.05, 0.95, 25)
    js = JointSpaceTrajectory(task, rrr)
    s, ts = js.sample_with_task(t)
    generic = types.SimpleNamespace(task_jacobian=rrr.task_jacobian, name="generic")
    qd, qdd = _parallel_velocity_acceleration(generic, s.pos, ts.pos, ts.vel, ts.acc)
    np.testing.assert_allclose(qd, s.vel, atol=1e-12)
    np.testing.assert_allclose(qdd, s.acc, atol=1e-8)


def test_3rrr_angles_unwrapped_continuously(rrr):
    # theta3 starts at -2.82 rad and passes -pi on this move: it must not jump by 2 pi
    js = JointSpaceTrajectory(P.pose_move([0.0, 0.0, 0.0], [0.0, 0.05, 0.6], 1.0), rrr)
    q = js.sample(np.linspace(0, 1, 2001)).pos
    assert q[-1, 2] < -np.pi
    assert np.max(np.abs(np.diff(q, axis=0))) < 1e-2


def test_stewart_round_trip_and_rates(stewart):
    h = stewart.home_pose
    task = P.pose_move(h, h + np.array([0.05, -0.03, 0.1, 0.1, -0.15, 0.2]), 2.0)
    js = JointSpaceTrajectory(task, stewart)
    t = interior_times(js, n=60)
    s, ts = js.sample_with_task(t)
    Xfk = stewart.forward_kinematics_task(s.pos, guess=ts.pos)
    np.testing.assert_allclose(Xfk, ts.pos, atol=1e-10)
    ev, ea, ej = fd_errors(js, t, h=1e-6)
    assert ev < 1e-8 and ea < 1e-6
    # independent route: Jacobian inverse and the directional derivative of the Jacobian
    generic = types.SimpleNamespace(task_jacobian=stewart.task_jacobian, name="generic")
    qd, qdd = _parallel_velocity_acceleration(generic, s.pos, ts.pos, ts.vel, ts.acc)
    np.testing.assert_allclose(qd, s.vel, atol=1e-12)
    np.testing.assert_allclose(qdd, s.acc, atol=1e-8)


def test_parallel_unreachable_raises(rrr, stewart):
    with pytest.raises(UnreachableError):
        JointSpaceTrajectory(P.pose_move([0.0, 0.0, 0.0], [0.6, 0.0, 0.0], 1.0), rrr)
    h = stewart.home_pose
    with pytest.raises(UnreachableError):
        JointSpaceTrajectory(P.pose_move(h, h + [0, 0, 1.0, 0, 0, 0], 1.0), stewart)
    with pytest.raises(TrajectoryError):
        JointSpaceTrajectory(P.line([0, 0], [1, 1], 1.0), rrr)


def test_serial_redundant_square_dls(arm5):
    sq = P.square([2.0, 2.0], 0.4, 20.0, first_direction=(-1.0, 0.0), corners="blend", blend_radius=0.05,
                  ramp_s=2.0)
    ik = SerialIKTrajectory(sq, arm5, "xy", q_rest=Q_004)
    sl = sq.law.sample(np.linspace(0, 20, 20001)).pos[:, 0]
    avoid = np.interp(sq.curve.breakpoints_u, sl, np.linspace(0, 20, 20001))
    t = interior_times(ik, n=80, avoid=list(avoid) + [2.0, 18.0], gap=2e-3)
    s = ik.sample(t)
    # round trip
    np.testing.assert_allclose(arm5.forward_kinematics(s.pos)[:, :2, 3], sq.sample(t).pos, atol=1e-10)
    # redundancy resolution: the augmented equations hold
    np.testing.assert_allclose((ik.C @ (s.pos - Q_004).T).T, 0, atol=1e-10)
    # analytic rates: task velocity reproduced, and FD of positions
    J = arm5.jacobian(s.pos)[:, :2, :]
    np.testing.assert_allclose(np.einsum("nij,nj->ni", J, s.vel), sq.sample(t).vel, atol=1e-12)
    ev, ea, _ = fd_errors(ik, t, h=1e-5)
    assert ev < 1e-7 and ea < 1e-7
    # at the start of the square the arm is in its rest posture (paper's initial angles, to the
    # paper's 4-decimal rounding of the start point (2, 2))
    np.testing.assert_allclose(ik.sample(0.0).pos, Q_004, atol=2e-3)


def test_serial_redundant_stays_closer_to_rest_than_plain_newton(arm5):
    x0 = arm5.forward_kinematics(Q_004)[:2, 3]
    line = P.line(x0, x0 + [-0.3, -0.3], 2.0)
    ik = SerialIKTrajectory(line, arm5, "xy", q_rest=Q_004)
    q_end = ik.sample(2.0).pos
    # compare with the minimum-norm displacement solution from the rest posture (Gauss-Newton, no null space)
    q = Q_004.copy()
    for _ in range(50):
        e = line.end - arm5.forward_kinematics(q)[:2, 3]
        J = arm5.jacobian(q)[:2]
        q = q + np.linalg.pinv(J) @ e
    np.testing.assert_allclose(arm5.forward_kinematics(q)[:2, 3], line.end, atol=1e-12)
    # both reach the point; the null-space objective keeps the W-distance to rest no larger (to 1 %)
    assert np.linalg.norm(q_end - Q_004) <= 1.01 * np.linalg.norm(q - Q_004)


def test_serial_position_and_angle_task_seed000_arm():
    arm = load_model(ROBOTS / "seed000_arm.toml")
    q0 = np.array([0.1, 0.3, -0.4])
    x0 = arm.forward_kinematics(q0)[:3, 3]
    circle = P.circle(x0 + [0.0, -0.2, 0.0], 0.2, 3.0, normal=[0, 0, 1], start_angle=np.pi / 2, ramp_s=0.5)
    np.testing.assert_allclose(circle.start, x0, atol=1e-12)
    ik = SerialIKTrajectory(circle, arm, "xyz", q_guess=q0)
    t = interior_times(ik, n=40, avoid=[0.5, 2.5], gap=1e-3)
    s = ik.sample(t)
    np.testing.assert_allclose(arm.forward_kinematics(s.pos)[:, :3, 3], circle.sample(t).pos, atol=1e-10)
    ev, ea, _ = fd_errors(ik, t, h=1e-5)
    assert ev < 1e-7 and ea < 1e-6
    np.testing.assert_allclose(ik.sample(0.0).pos, q0, atol=1e-9)


def test_serial_planar_angle_component(arm5):
    T0 = arm5.forward_kinematics(Q_004)
    phi0 = np.arctan2(T0[1, 0], T0[0, 0])
    x0 = np.array([T0[0, 3], T0[1, 3], phi0])
    tr = P.line(x0, x0 + [-0.2, -0.1, 0.3], 2.0, profile="cycloidal")
    ik = SerialIKTrajectory(tr, arm5, "xy rz", q_rest=Q_004)
    t = interior_times(ik, n=30)
    s = ik.sample(t)
    sel = TaskSelection("xyrz")
    np.testing.assert_allclose(sel.value(arm5.forward_kinematics(s.pos)), tr.sample(t).pos, atol=1e-10)
    ev, ea, _ = fd_errors(ik, t, h=1e-5)
    assert ev < 1e-7 and ea < 1e-6


def test_serial_unreachable_and_bad_selection(arm5):
    far = P.line([2.0, 2.0], [3.5, 3.5], 1.0)
    with pytest.raises(UnreachableError, match="not reachable"):
        SerialIKTrajectory(far, arm5, "xy", q_rest=Q_004)
    with pytest.raises(TrajectoryError):
        TaskSelection("xw")
    with pytest.raises(TrajectoryError):
        TaskSelection("xyrzry")
    with pytest.raises(TrajectoryError):
        SerialIKTrajectory(P.line([2.0, 2.0, 0.0], [1.9, 2.0, 0.0], 1.0), arm5, "xy", q_rest=Q_004)


def test_tabulated_mapped_trajectory(rrr):
    task = P.planar_circle_pose([0.0, 0.0], 0.03, 2.0, phi_amplitude=0.1, ramp_s=0.4)
    js = JointSpaceTrajectory(task, rrr)
    tab = Tabulated(js, 0.01)
    t = interior_times(js, n=50)
    a, b = tab.sample(t), js.sample(t)
    assert np.max(np.abs(a.pos - b.pos)) < 1e-9
    assert np.max(np.abs(a.vel - b.vel)) < 1e-6
    assert np.max(np.abs(a.acc - b.acc)) < 1e-2


def test_tabulated_time_scaled_mapped_keeps_task(rrr):
    from trajectories.base import TimeScaled
    task = P.planar_circle_pose([0.0, 0.0], 0.03, 2.0, phi_amplitude=0.1, ramp_s=0.4)
    slow = TimeScaled(JointSpaceTrajectory(task, rrr), 1.5)
    np.testing.assert_allclose(slow.task.sample(1.5).vel, task.sample(1.0).vel / 1.5)
    tab = Tabulated(slow, 0.01)
    nodes = tab.nodes_s[::23]
    a, b = tab.sample(nodes), slow.sample(nodes)
    for x, y in zip(list(a)[:3], list(b)[:3]):
        np.testing.assert_allclose(x, y, atol=1e-12)
    assert tab.task.duration_s == pytest.approx(3.0)
    assert not hasattr(Tabulated(task, 0.1), "task")


# -- URDF arms: a 6-DOF arm with a task in xyz (3 free directions), a SCARA-like arm ------------

DATA = Path(__file__).resolve().parent / "data"


@pytest.fixture(scope="module")
def arm6():
    return load_model(DATA / "arm6.urdf")


@pytest.fixture(scope="module")
def scara():
    return load_model(DATA / "scara4.urdf")


def _tool_xyz(model, q):
    return np.asarray(model.forward_kinematics(q))[..., :3, 3]


def test_redundant_urdf_arm_path_from_the_fk_of_the_guess(arm6):
    """The newcomer's case: a circle that starts at the forward kinematics of q_guess, on a 6-DOF
    URDF arm with a position task (3 free directions), no q_rest: it used to fail ("not reachable")."""
    q0 = np.array([0.3, -1.0, 1.2, -0.5, 0.8, 0.2])
    x0 = _tool_xyz(arm6, q0)
    circle = P.circle(x0 + [0.0, -0.1, 0.0], 0.1, 3.0, normal=[0, 0, 1], start_angle=np.pi / 2, ramp_s=0.5)
    np.testing.assert_allclose(circle.start, x0, atol=1e-12)
    ik = SerialIKTrajectory(circle, arm6, "xyz", q_guess=q0)
    np.testing.assert_allclose(ik.q_start, q0, atol=1e-9)        # the start pose is the guess itself
    t = interior_times(ik, n=40, avoid=[0.5, 2.5], gap=1e-3)
    s = ik.sample(t)
    # independent check: Pinocchio's forward kinematics of the IK result is the target
    np.testing.assert_allclose(_tool_xyz(arm6, s.pos), circle.sample(t).pos, atol=1e-10)
    ev, ea, _ = fd_errors(ik, t, h=1e-5)
    assert ev < 1e-7 and ea < 1e-6


def test_redundant_urdf_arm_path_with_no_guess_at_all(arm6):
    """No q_guess, no q_rest: the start pose is solved from the default posture (far from the path),
    and the free directions, held about the start pose, could not follow the whole circle (a
    failure at sample 61 of 401): they are then held about the posture half-way along the path."""
    q0 = np.array([0.3, -1.0, 1.2, -0.5, 0.8, 0.2])
    x0 = _tool_xyz(arm6, q0)
    circle = P.circle(x0 + [0.0, -0.1, 0.0], 0.1, 3.0, normal=[0, 0, 1], start_angle=np.pi / 2, ramp_s=0.5)
    ik = SerialIKTrajectory(circle, arm6, "xyz")
    t = interior_times(ik, n=40, avoid=[0.5, 2.5], gap=1e-3)
    s = ik.sample(t)
    np.testing.assert_allclose(_tool_xyz(arm6, s.pos), circle.sample(t).pos, atol=1e-10)
    np.testing.assert_allclose(_tool_xyz(arm6, ik.sample(0.0).pos), circle.start, atol=1e-10)
    np.testing.assert_allclose(ik.C @ (s.pos - ik.q_rest).T, 0.0, atol=1e-9)
    # velocities to 1.1 rad/s, accelerations to 4.7 rad/s^2 here: the differences' own error is
    # ~1e-7 (1e-7 at h = 1e-5 and at 1e-4), a wrong rate map is off by 1e-2 and more
    ev, ea, _ = fd_errors(ik, t, h=1e-5)
    assert ev < 5e-7 and ea < 5e-6


def test_redundant_arm_with_orientation_task_and_q_rest(arm6):
    """xyz + one angle (2 free directions) with an explicit rest posture away from the start: the
    start pose is solved from q_rest, the path followed, the rest posture kept in the free directions."""
    q0 = np.array([0.3, -1.0, 1.2, -0.5, 0.8, 0.2])
    sel = TaskSelection("xyz rz")
    x0 = sel.value(np.asarray(arm6.forward_kinematics(q0)))
    line = P.line(x0, x0 + [0.05, 0.03, -0.04, 0.2], 2.0, profile="cycloidal")
    q_rest = q0 + np.array([0.05, -0.05, 0.05, 0.1, -0.1, 0.05])
    ik = SerialIKTrajectory(line, arm6, "xyz rz", q_rest=q_rest)
    t = interior_times(ik, n=30)
    s = ik.sample(t)
    np.testing.assert_allclose(sel.value(np.asarray(arm6.forward_kinematics(s.pos))), line.sample(t).pos,
                               atol=1e-10)
    np.testing.assert_allclose(ik.C @ (s.pos - q_rest).T, 0.0, atol=1e-9)


def test_scara_default_rest_pose_is_not_the_singular_midpoint(scara):
    from trajectories.mapping import default_rest_pose
    lim = scara.limits
    mid = 0.5 * (np.asarray(lim.position_min) + np.asarray(lim.position_max))
    np.testing.assert_allclose(mid, 0.0)                          # stretched out: singular in the plane
    assert np.linalg.matrix_rank(np.asarray(scara.jacobian(mid))[:2], tol=1e-9) < 2
    q = default_rest_pose(scara, "xy")
    sv = np.linalg.svd(np.asarray(scara.jacobian(q))[:2], compute_uv=False)
    assert sv[-1] / sv[0] > 0.1
    assert np.all(q >= lim.position_min) and np.all(q <= lim.position_max)
    # a path from no guess at all: the IK starts from that pose and follows the path
    line = P.line([0.3, 0.2], [0.4, 0.3], 2.0)
    ik = SerialIKTrajectory(line, scara, "xy")
    t = interior_times(ik, n=30)
    np.testing.assert_allclose(_tool_xyz(scara, ik.sample(t).pos)[:, :2], line.sample(t).pos, atol=1e-10)


def test_scara_singular_q_rest_names_the_key_and_a_posture_that_works(scara):
    from dynamics.errors import SingularityError
    line = P.line([0.3, 0.2], [0.4, 0.3], 2.0)
    with pytest.raises(SingularityError, match=r"rank deficient at q_rest \[0\., 0\., 0\., 0\.\]: set q_rest") as exc:
        SerialIKTrajectory(line, scara, "xy", q_rest=np.zeros(4))
    import re
    sug = re.search(r"e\.g\. \[([^\]]*)\]", str(exc.value)).group(1)
    q_rest = np.array([float(v) for v in sug.split(",")])
    ik = SerialIKTrajectory(line, scara, "xy", q_rest=q_rest)
    np.testing.assert_allclose(_tool_xyz(scara, ik.sample(1.0).pos)[:2], line.sample(1.0).pos, atol=1e-10)


def test_unreachable_sample_is_named_with_the_nearest_pose(scara):
    # the arm reaches 0.6 m at most: the line leaves the workspace part-way
    line = P.line([0.4, 0.0, 0.25, 0.0], [0.8, 0.0, 0.25, 0.0], 2.0)
    with pytest.raises(UnreachableError) as exc:
        SerialIKTrajectory(line, scara, "xyz rz")
    msg = str(exc.value)
    m = re.search(r"sample (\d+) of (\d+) \(t = ([0-9.e-]+) s\)", msg)
    assert m, msg
    k, count, t = int(m.group(1)), int(m.group(2)), float(m.group(3))
    assert 0 < k < count - 1
    # the named sample is the first one beyond the reach, on the task path itself
    x_k = line.sample(t).pos
    assert np.hypot(x_k[0], x_k[1]) > 0.6 - 1e-6
    assert np.hypot(*line.sample(t - 2.0 / (count - 1)).pos[:2]) <= 0.6 + 1e-9
    # the nearest pose found reaches the edge of the workspace, and the message names the keys to set
    reached = [float(v) for v in re.search(r"reaches \[([^\]]*)\]", msg).group(1).split(",")]
    assert abs(np.hypot(reached[0], reached[1]) - 0.6) < 1e-3
    assert "q_rest" in msg and "q_guess" in msg and "--explain trajectory" in msg
