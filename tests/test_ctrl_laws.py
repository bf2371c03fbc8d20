"""Control laws on closed-form models (simulated with drivers.sim.plant.SimulatedPlant)."""

from __future__ import annotations

import numpy as np
import pytest

from controller.gains import ct_gains
from controller.laws import (PID, ComputedTorque, PDGravity, Ref, Saturation, State, TaskComputedTorque,
                             TaskPDGravity, euler_rotation, gravity_feedforward, rotation_error, task_error)
from drivers.sim.plant import SimulatedPlant
from dynamics.errors import ModelError

try:
    from tests.test_ctrl_models import Arm2, Arm2Task, Pend, SineTraj
except ImportError:  # pragma: no cover - rootdir not on sys.path
    from test_ctrl_models import Arm2, Arm2Task, Pend, SineTraj

DT = 1e-3


def simulate(ctrl, plant_model, q0, ref_fn, T, dt=DT, qd0=None, torque_limit=None):
    """Sample-and-hold simulation: measure at t_k, hold tau over [t_k, t_k+1]."""
    plant = SimulatedPlant(plant_model, q0=q0, qd0=qd0, torque_limit_nm=torque_limit)
    ctrl.reset()
    N = int(round(T / dt)) + 1
    ts, qs, es, taus = np.zeros(N), np.zeros((N, plant_model.dof)), [], np.zeros((N, plant_model.dof))
    for k in range(N):
        t = k * dt
        plant.advance_to(t)
        _, q, qd, _ = plant.measure()
        ref = ref_fn(t)
        tau = ctrl.compute(t, ref, State(t, q, qd))
        plant.set_torque(tau)
        ts[k], qs[k], taus[k] = t, q, tau
        es.append(ctrl.last_error.copy())
    return ts, qs, np.array(es), taus


def test_ct_matched_setpoint_follows_chosen_poles():
    """e'' + kd e' + kp e = 0: the simulated error equals the analytic solution of the chosen poles."""
    m = Pend()
    wn, zeta = 12.0, 0.6
    d = ct_gains(wn, zeta, n=1)
    ctrl = ComputedTorque(m, d.kp, d.kd)
    qd_ = 0.5
    ts, qs, es, _ = simulate(ctrl, m, [0.3], lambda t: Ref.setpoint([qd_]), 1.0)
    e = es[:, 0]
    # analytic: e(0) = 0.2, e'(0) = 0
    p = d.axes[0].poles            # python-control's closed-loop poles
    assert np.allclose(sorted(p.real), [-zeta * wn] * 2) and np.isclose(abs(p[0]), wn)
    wd = wn * np.sqrt(1 - zeta ** 2)
    e_an = 0.2 * np.exp(-zeta * wn * ts) * (np.cos(wd * ts) + zeta * wn / wd * np.sin(wd * ts))
    assert np.max(np.abs(e - e_an)) < 0.2 * 0.02   # ZOH at 1 kHz: ~1 % of the initial error


def test_ct_decay_rate_equals_slow_pole():
    m = Arm2()
    d = ct_gains([8.0, 10.0], 1.5)
    ctrl = ComputedTorque(m, d.kp, d.kd)
    q_d = np.array([0.4, 0.9])
    ts, qs, es, _ = simulate(ctrl, m, [0.3, 1.0], lambda t: Ref.setpoint(q_d), 2.0)
    for i in range(2):
        slow = max(d.axes[i].poles.real)  # closest to the imaginary axis
        i1, i2 = int(1.0 / DT), int(2.0 / DT)
        rate = np.log(abs(es[i2, i]) / abs(es[i1, i])) / (ts[i2] - ts[i1])
        assert rate == pytest.approx(slow, rel=0.01)


def test_ct_matched_tracks_sine_exactly_and_mismatch_does_not():
    m = Arm2()
    traj = SineTraj([0.3, 0.8], [0.4, -0.3], 3.0, 3.0)
    d = ct_gains(20.0, 1.0, n=2)
    ctrl = ComputedTorque(m, d.kp, d.kd)
    q0 = traj.sample(0.0).pos
    qd0 = traj.sample(0.0).vel
    ts, qs, es, _ = simulate(ctrl, m, q0, traj.sample, 3.0, qd0=qd0)
    late = ts > 1.0
    err_matched = np.max(np.abs(es[late]))
    assert err_matched < 2e-4
    ctrl_bad = ComputedTorque(m.scaled(1.3), d.kp, d.kd)
    _, _, es2, _ = simulate(ctrl_bad, m, q0, traj.sample, 3.0, qd0=qd0)
    assert np.max(np.abs(es2[late])) > 10 * err_matched


def test_ct_integral_removes_model_error_offset_and_anti_windup():
    m = Pend()
    plant_model = m.scaled(1.2)       # controller underestimates gravity -> steady offset without Ki
    d = ct_gains(10.0, 1.0, n=1)
    ref = lambda t: Ref.setpoint([0.4])
    _, _, es, _ = simulate(ComputedTorque(m, d.kp, d.kd), plant_model, [0.4], ref, 3.0)
    assert abs(es[-1, 0]) > 1e-3
    ctrl = ComputedTorque(m, d.kp, d.kd, ki=200.0)
    _, _, es_i, _ = simulate(ctrl, plant_model, [0.4], ref, 3.0)
    assert abs(es_i[-1, 0]) < 1e-4
    # saturated: the integrator freezes while saturated and respects integral_limit
    ctrl_s = ComputedTorque(m, d.kp, d.kd, ki=200.0, integral_limit=0.05, saturation=Saturation(2.0, 1))
    _, _, _, taus = simulate(ctrl_s, plant_model, [-0.5], lambda t: Ref.setpoint([1.0]), 1.0)
    assert np.all(np.abs(taus) <= 2.0 + 1e-12)
    assert abs(ctrl_s.integral[0]) <= 0.05 + 1e-12


def test_pd_gravity_converges_to_setpoint():
    m = Arm2()
    ctrl = PDGravity(m, [60.0, 30.0], [6.0, 3.0])
    q_d = np.array([0.8, -0.5])
    ts, qs, es, _ = simulate(ctrl, m, [0.0, 0.0], lambda t: Ref.setpoint(q_d), 3.0, dt=2e-3)
    assert np.max(np.abs(qs[-1] - q_d)) < 1e-3
    # without gravity compensation there is an offset
    ctrl0 = PDGravity(Arm2(m1=1e-9, m2=1e-9, Jr=(1e-9, 1e-9)), [60.0, 30.0], [6.0, 3.0])
    _, qs0, _, _ = simulate(ctrl0, m, [0.0, 0.0], lambda t: Ref.setpoint(q_d), 3.0, dt=2e-3)
    assert np.max(np.abs(qs0[-1] - q_d)) > 0.05


@pytest.mark.parametrize("mode", ["clamp", "back_calculation"])
def test_pid_anti_windup_bounded(mode):
    m = Pend()
    lim = 6.0
    ref = lambda t: Ref.setpoint([1.0])
    kw = dict(kp=40.0, ki=60.0, kd=4.0, feedforward=None, saturation=Saturation(lim, 1))
    pid = PID(**kw, anti_windup=mode)
    ts, qs, es, taus = simulate(pid, m, [-1.0], ref, 6.0)
    assert np.all(np.abs(taus) <= lim + 1e-12)
    # the integral term stays bounded by what is needed to hold against gravity (plus the limit)
    assert abs(pid.integral_nm[0]) <= lim + 1e-9
    # and the set-point is reached without the huge overshoot of a wound-up integrator
    assert abs(qs[-1, 0] - 1.0) < 5e-3

    class NoAW(PID):   # reference: same PID whose integrator ignores saturation
        def compute(self, t_s, ref, state):
            sat = self.saturation
            self.saturation = None
            try:
                u = super().compute(t_s, ref, state)
            finally:
                self.saturation = sat
            return np.clip(u, -lim, lim)

    pid_w = NoAW(**kw)
    _, qw, _, _ = simulate(pid_w, m, [-1.0], ref, 6.0)
    os_aw = np.max(qs[:, 0]) - 1.0
    os_w = np.max(qw[:, 0]) - 1.0
    assert os_w > 2 * max(os_aw, 0.01)
    assert abs(pid_w.integral_nm[0]) > 2 * lim


def test_pid_gravity_feedforward_and_shapes():
    m = Arm2()
    pid = PID([20.0, 10.0], 0.0, [3.0, 1.0], feedforward=gravity_feedforward(m))
    q = np.array([0.1, 0.2])
    tau = pid.compute(0.0, Ref.setpoint(q), State(0.0, q, np.zeros(2)))
    assert np.allclose(tau, m.gravity(q))
    with pytest.raises(ModelError):
        PID(1.0, 1.0, 1.0)              # n unknown
    with pytest.raises(ModelError):
        PID([1.0, 2.0], 1.0, 1.0, anti_windup="magic")


def test_saturation_and_gain_shapes():
    s = Saturation([1.0, 2.0])
    tau, mask = s.apply(np.array([1.5, -1.0]))
    assert np.allclose(tau, [1.0, -1.0]) and mask.tolist() == [True, False]
    with pytest.raises(ModelError):
        Saturation([1.0, -1.0])
    with pytest.raises(ModelError):
        ComputedTorque(Arm2(), [1.0, 2.0, 3.0], 1.0)
    ctrl = ComputedTorque(Arm2(), np.array([[4.0, 1.0], [1.0, 4.0]]), 2.0)
    assert ctrl.kp[0, 1] == 1.0


def test_rotation_error_is_geodesic():
    rot = euler_rotation("zyx")
    rng = np.random.default_rng(3)
    for _ in range(5):
        a = rng.uniform(-1, 1, 3)
        axis = rng.normal(size=3)
        axis /= np.linalg.norm(axis)
        th = rng.uniform(0.1, 3.0)
        K = np.array([[0, -axis[2], axis[1]], [axis[2], 0, -axis[0]], [-axis[1], axis[0], 0]])
        Rd_rel = np.eye(3) + np.sin(th) * K + (1 - np.cos(th)) * K @ K
        R = rot(a)
        assert np.allclose(rotation_error(Rd_rel @ R, R), th * axis, atol=1e-9)
    # near pi
    Rpi = np.diag([1.0, -1.0, -1.0])
    assert np.allclose(np.abs(rotation_error(Rpi, np.eye(3))), [np.pi, 0, 0], atol=1e-6)


def test_task_error_planar_wraps_and_spatial_small_error_matches_difference():
    e = task_error([0.0, 0.0, np.pi - 0.1], [0.0, 0.0, -np.pi + 0.1])
    assert e[2] == pytest.approx(-0.2)
    rot = euler_rotation("zyx")
    X = np.array([0.1, 0.0, 0.5, 0.2, -0.3, 0.4])
    dX = np.array([1e-3, -2e-3, 0.0, 1e-5, 2e-5, -1e-5])
    assert np.allclose(task_error(X + dX, X, rot), dX, atol=1e-9)
    # large error: the SO(3) error is not the Euler difference, but it is a true rotation of that size
    Xd = X.copy()
    Xd[3:] += [1.5, 0.0, 1.5]
    e = task_error(Xd, X, rot)
    assert not np.allclose(e[3:], [1.5, 0, 1.5], atol=0.05)


def test_task_error_follows_the_layout_not_the_size():
    """A point task (x, y, z) is three positions: z is not wrapped as the 3RRR's angle is; an
    orientation task (alpha, beta, gamma) is three angles: each wraps (no convention given), or
    with the convention the error is the rotation between the two orientations."""
    e = task_error([0.0, 0.0, 4.0], [0.0, 0.0, 0.0], layout="point")
    assert e.tolist() == [0.0, 0.0, 4.0]                 # [m]: 4 - 2 pi would be the old answer
    e = task_error([np.pi - 0.01, 0.2, np.pi - 0.02], [-np.pi + 0.01, 0.1, -np.pi + 0.03],
                   layout="orientation")
    assert np.allclose(e, [-0.02, 0.1, -0.05], atol=1e-12)
    rot = euler_rotation("zyx")
    A = np.array([0.3, -0.2, 0.5])
    dA = np.array([1e-5, -2e-5, 3e-5])
    assert np.allclose(task_error(A + dA, A, rot, layout="orientation"), dA, atol=1e-9)
    # the same orientation written with alpha and gamma 2 pi apart: no error
    assert np.allclose(task_error(A + [2 * np.pi, 0, -2 * np.pi], A, rot, layout="orientation"), 0.0, atol=1e-9)
    # a large error: the rotation between them (the spatial layout's angle part), not the difference
    Ad = A + [1.5, 0.0, 1.5]
    e6 = task_error(np.r_[0, 0, 0, Ad], np.r_[0, 0, 0, A], rot)
    eo = task_error(Ad, A, rot, layout="orientation")
    assert np.allclose(eo, e6[3:], atol=1e-12) and not np.allclose(eo, [1.5, 0, 1.5], atol=0.05)
    R_err = rot(Ad) @ rot(A).T
    angle = np.arccos(np.clip((np.trace(R_err) - 1) / 2, -1, 1))
    from controller.laws import _euler_rate_matrix
    assert np.linalg.norm(_euler_rate_matrix(rot, A) @ eo) == pytest.approx(angle, rel=1e-6)


def test_task_ct_and_task_pd_on_closed_form_model():
    m = Arm2Task()
    d = ct_gains(15.0, 0.8, n=2)
    ctrl = TaskComputedTorque(m, d.kp, d.kd)
    q0 = np.array([0.3, 1.2])
    X0 = m.tool(q0)
    Xg = X0 + np.array([0.05, -0.04])
    ts, qs, es, _ = simulate(ctrl, m, q0, lambda t: Ref.setpoint(Xg), 1.0)
    wd = 15 * np.sqrt(1 - 0.64)
    e_an = np.outer(np.exp(-0.8 * 15 * ts) * (np.cos(wd * ts) + 0.8 * 15 / wd * np.sin(wd * ts)), Xg - X0)
    assert np.max(np.abs(es - e_an)) < 0.02 * 0.05
    assert ctrl.space == "task" and ctrl.dim == 2
    pd = TaskPDGravity(m, 400.0, 40.0)
    _, qs2, es2, _ = simulate(pd, m, q0, lambda t: Ref.setpoint(Xg), 4.0)
    assert np.max(np.abs(es2[-1])) < 1e-4


def test_joint_ct_on_parallel_model_passes_pose_hint():
    m = Arm2Task()
    ctrl = ComputedTorque(m, 100.0, 20.0)
    q = np.array([0.3, 1.2])
    m.hints.clear()
    ctrl.compute(0.0, Ref.setpoint(q), State(0.0, q, np.zeros(2)))
    assert len(m.hints) == 1 and np.allclose(m.hints[0], m.tool(q))


def test_task_ct_on_real_3rrr_tracks_exactly_without_delay():
    """Matched model, no measurement delay, frictionless plant: task error at solver precision."""
    from pathlib import Path
    from dynamics import load_model
    m = load_model(Path(__file__).resolve().parents[1] / "hil_configs" / "robots" / "3rrr_horizontal.toml")
    X0 = np.asarray(m.home_pose, float)
    traj = SineTraj(X0, [0.02, -0.015, 0.05], 6.0, 0.2)
    s0 = traj.sample(0.0)
    q0 = m.inverse_kinematics(s0.pos)
    qd0 = np.linalg.solve(m.task_jacobian(q0, s0.pos), s0.vel)
    worst = []
    for ctrl, fr in [(TaskComputedTorque(m, 900.0, 60.0), 0.0),          # frictionless plant
                     (TaskComputedTorque(m, 900.0, 60.0), None),         # plant with the model's friction
                     (TaskComputedTorque(m, 900.0, 60.0, friction="measured"), None)]:
        plant = SimulatedPlant(m, q0=q0, qd0=qd0, viscous=fr, coulomb=fr)
        ctrl.reset()
        err = []
        for k in range(201):
            t = k * DT
            plant.advance_to(t)
            _, q, qd, _ = plant.measure()
            plant.set_torque(ctrl.compute(t, traj.sample(t), State(t, q, qd)))
            err.append(ctrl.last_error)
        worst.append(np.max(np.abs(err)))
    assert worst[0] < 2e-5
    # friction compensation (sampled Coulomb term) removes most of the friction-induced error
    assert worst[2] < 0.5 * worst[1]


def test_task_ct_on_real_stewart_tracks_and_fixes_large_orientation_error():
    """6-DOF: SO(3) orientation error; matched model without delay tracks, a 30 deg error converges."""
    from pathlib import Path
    from dynamics import load_model
    from dynamics.stewart import rotation_matrix
    m = load_model(Path(__file__).resolve().parents[1] / "hil_configs" / "robots" / "stewart.toml")
    X0 = np.asarray(m.home_pose, float)
    traj = SineTraj(X0, [0.01, -0.01, 0.01, 0.05, -0.04, 0.06], 5.0, 0.1)
    s0 = traj.sample(0.0)
    q0 = m.inverse_kinematics(s0.pos)
    qd0 = np.linalg.solve(m.task_jacobian(q0, s0.pos), s0.vel)
    ctrl = TaskComputedTorque(m, 900.0, 60.0)
    assert ctrl.rotation is rotation_matrix          # convention taken from the model's module
    from controller.laws import _euler_rate_matrix
    from dynamics.stewart import euler_rate_matrix
    a = np.array([0.3, -0.2, 0.5])                   # numerical E agrees with the model's closed form
    assert np.allclose(_euler_rate_matrix(rotation_matrix, a), euler_rate_matrix(a), atol=1e-8)
    plant = SimulatedPlant(m, q0=q0, qd0=qd0, viscous=0.0, coulomb=0.0)
    err = []
    for k in range(101):
        t = k * DT
        plant.advance_to(t)
        _, q, qd, _ = plant.measure()
        plant.set_torque(ctrl.compute(t, traj.sample(t), State(t, q, qd)))
        err.append(ctrl.last_error)
    assert np.max(np.abs(err)) < 2e-5
    # large orientation step: the geodesic angle decays like the chosen second-order error dynamics
    Xg = X0 + np.array([0.0, 0.0, 0.0, 0.3, -0.25, 0.4])
    plant = SimulatedPlant(m, q0=m.inverse_kinematics(X0), viscous=0.0, coulomb=0.0)
    ctrl.reset()
    angles = []
    for k in range(301):
        t = k * DT
        plant.advance_to(t)
        _, q, qd, _ = plant.measure()
        plant.set_torque(ctrl.compute(t, Ref.setpoint(Xg), State(t, q, qd)))
        angles.append(np.linalg.norm(rotation_error(rotation_matrix(Xg[3:]), rotation_matrix(ctrl.pose[3:]))))
    a0 = angles[0]
    assert a0 > 0.5
    # critically damped 30 rad/s: (1 + wn t) exp(-wn t) at t = 0.3 s is ~1e-3
    assert angles[-1] < 5e-3 * a0
    assert np.all(np.diff(angles[1:]) <= 1e-9)       # no overshoot in the geodesic angle


def test_joint_ct_and_pd_gravity_on_real_3rrr_vertical():
    """Reduced-model joint CT (pose hint) tracks exactly; joint and task PD+g reach a set-point under gravity."""
    from pathlib import Path
    from dynamics import load_model
    m = load_model(Path(__file__).resolve().parents[1] / "hil_configs" / "robots" / "3rrr_vertical.toml")
    assert np.any(m.gravity(m.home_q) != 0)
    qh = np.asarray(m.home_q, float)
    traj = SineTraj(qh, [0.05, -0.04, 0.03], 5.0, 0.1)
    s0 = traj.sample(0.0)
    ctrl = ComputedTorque(m, 900.0, 60.0)
    plant = SimulatedPlant(m, q0=s0.pos, qd0=s0.vel, viscous=0.0, coulomb=0.0)
    err = []
    for k in range(101):
        t = k * DT
        plant.advance_to(t)
        _, q, qd, _ = plant.measure()
        plant.set_torque(ctrl.compute(t, traj.sample(t), State(t, q, qd)))
        err.append(ctrl.last_error)
    assert np.max(np.abs(err)) < 2e-5
    assert np.allclose(ctrl.pose, m.forward_kinematics_task(q, guess=m.home_pose), atol=1e-9)
    # set-points: 0.05 rad away in joint space / 1 cm, 0.05 rad in task space
    X_goal = np.asarray(m.home_pose, float) + [0.01, -0.01, 0.05]
    q_goal = m.inverse_kinematics(X_goal)
    for ctrl, goal in [(PDGravity(m, 30.0, 1.5), q_goal), (TaskPDGravity(m, [3000.0, 3000.0, 60.0], [150.0, 150.0, 3.0]), X_goal)]:
        plant = SimulatedPlant(m, q0=qh, viscous=0.0, coulomb=0.0)
        ctrl.reset()
        for k in range(1501):
            t = k * 2 * DT
            plant.advance_to(t)
            _, q, qd, _ = plant.measure()
            plant.set_torque(ctrl.compute(t, Ref.setpoint(goal), State(t, q, qd)))
        assert np.max(np.abs(ctrl.last_error)) < 1e-4, type(ctrl).__name__


def test_task_ct_integral_removes_the_offset_of_a_heavier_plant():
    """3RRR vertical (gravity in the plane), plant 20 % heavier: a set-point keeps an offset of
    about dg/Kp without ki and none with it; saturation freezes the integrator."""
    from pathlib import Path
    from dynamics import load_model
    robots = Path(__file__).resolve().parents[1] / "hil_configs" / "robots"
    m = load_model(robots / "3rrr_vertical.toml")
    heavy = m.scaled(1.2)
    X0 = np.asarray(m.home_pose, float)
    q0 = m.inverse_kinematics(X0)

    def final_error(ctrl, T=2.0):
        plant = SimulatedPlant(heavy, q0=q0, viscous=0.0, coulomb=0.0)
        ctrl.reset()
        for k in range(int(T / DT) + 1):
            t = k * DT
            plant.advance_to(t)
            _, q, qd, _ = plant.measure()
            plant.set_torque(ctrl.compute(t, Ref.setpoint(X0), State(t, q, qd)))
        return np.abs(ctrl.last_error), ctrl

    e_pd, _ = final_error(TaskComputedTorque(m, 400.0, 40.0))
    assert e_pd[1] > 1e-3                      # gravity along -y: offset ~ 0.2 g / kp ~ 5 mm
    e_pid, c = final_error(TaskComputedTorque(m, 400.0, 40.0, ki=2000.0))
    assert np.all(e_pid < 1e-5) and np.all(e_pid < 1e-2 * e_pd.max())
    assert abs(c.integral[1]) > 0
    # saturated: torques within limits, integrator bounded by integral_limit
    lim = Saturation(0.2 * np.abs(m.gravity(q0, pose=X0)).max() + 1e-3, 3)
    e_sat, cs = final_error(TaskComputedTorque(m, 400.0, 40.0, ki=2000.0, integral_limit=1e-3,
                                               saturation=lim), T=0.5)
    assert np.all(np.abs(cs.integral) <= 1e-3 + 1e-15)


def test_task_error_uses_the_models_closed_form_rate_matrix():
    """Stewart: the controller picks dynamics.stewart.euler_rate_matrix (same convention as its
    rotation) and the error equals the numerical-E error to the differencing accuracy."""
    from pathlib import Path
    from dynamics import load_model
    from dynamics.stewart import euler_rate_matrix, rotation_matrix
    m = load_model(Path(__file__).resolve().parents[1] / "hil_configs" / "robots" / "stewart.toml")
    c = TaskComputedTorque(m, 900.0, 60.0)
    assert c.rate_matrix is euler_rate_matrix
    assert TaskComputedTorque(m, 900.0, 60.0, rotation="zyx").rate_matrix is None  # other convention
    X = np.array([0.01, -0.02, 0.9, 0.3, -0.4, 0.5])
    Xd = X + np.array([0.001, 0.0, -0.002, 0.2, 0.1, -0.3])
    exact = task_error(Xd, X, rotation_matrix, euler_rate_matrix)
    numeric = task_error(Xd, X, rotation_matrix)
    np.testing.assert_allclose(exact, numeric, rtol=0, atol=1e-7)
