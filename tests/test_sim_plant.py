"""Simulated plant: physics against the model, drive effects, determinism."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
from scipy.integrate import solve_ivp

from dynamics.base import POSE_HINT_METHODS, ParallelModel
from dynamics.errors import ConfigError, DriverError, ModelError
from drivers.sim.plant import SimulatedPlant
from dynamics.toy_models import Pendulum, PlanarTwoLink


def _energy_drift(integrator: str, substeps: int, t_end: float = 2.0) -> float:
    model = PlanarTwoLink()
    p = SimulatedPlant(model, q0=[0.3, 0.5], qd0=[1.0, -2.0], substeps=substeps, dt_max_s=0.02,
                       integrator=integrator)
    e0 = p.energy()
    err = 0.0
    for k in range(1, int(round(t_end / 0.02)) + 1):
        p.advance_to(k * 0.02)
        err = max(err, abs(p.energy() - e0))
    return err


def test_rk4_conserves_energy_to_fourth_order():
    errs = [_energy_drift("rk4", s, t_end=0.5) for s in (4, 8, 16)]
    ratios = [errs[i] / errs[i + 1] for i in range(2)]
    # halving h divides the energy error by ~2**4 (measured: 14.9, 15.4)
    assert all(13.0 < r < 18.0 for r in ratios), (errs, ratios)
    assert errs[-1] < 1e-7


def test_semi_implicit_euler_is_first_order():
    errs = [_energy_drift("semi_implicit_euler", s, t_end=1.0) for s in (16, 32, 64)]
    ratios = [errs[i] / errs[i + 1] for i in range(2)]
    assert all(1.7 < r < 2.3 for r in ratios), (errs, ratios)


def test_trajectory_matches_independent_ode_solution():
    model = PlanarTwoLink(viscous=[0.05, 0.02])
    tau = np.array([1.5, -0.4])
    q0, qd0 = np.array([-0.2, 0.9]), np.array([0.5, 0.0])
    p = SimulatedPlant(model, q0=q0, qd0=qd0, substeps=4)
    p.set_torque(tau)
    p.advance_to(1.0)

    def rhs(_t, y):
        q, qd = y[:2], y[2:]
        M = model.mass_matrix(q)
        h = model.coriolis_matrix(q, qd) @ qd + model.gravity(q)
        qdd = np.linalg.solve(M, tau - h - model.drive.viscous * qd)
        return np.concatenate([qd, qdd])

    ref = solve_ivp(rhs, (0.0, 1.0), np.concatenate([q0, qd0]), rtol=1e-11, atol=1e-12).y[:, -1]
    _, q, qd = p.state
    np.testing.assert_allclose(q, ref[:2], atol=1e-8)
    np.testing.assert_allclose(qd, ref[2:], atol=1e-8)


def test_zero_order_hold_and_current_lag_are_exact():
    inertia, tau, lag = 0.25, 2.0, 0.02
    model = Pendulum(mass_kg=1.0, com_m=0.5, g=0.0)  # I = m c^2 = 0.25, no gravity
    p = SimulatedPlant(model, q0=[0.0], current_lag_s=lag, substeps=4)
    p.set_torque([tau])
    for t in (0.003, 0.01, 0.05, 0.2):
        p.advance_to(t)
        _, _, _, applied = p.measure()
        assert applied[0] == pytest.approx(tau * (1 - np.exp(-t / lag)), abs=1e-12)
        q = p.state.q[0]
        q_exact = tau / inertia * (t ** 2 / 2 - lag * t + lag ** 2 * (1 - np.exp(-t / lag)))
        assert q == pytest.approx(q_exact, abs=1e-10)
    # without lag, a held torque gives the exact parabola (RK4 is exact for it)
    p2 = SimulatedPlant(model, q0=[0.1])
    p2.set_torque([tau])
    p2.advance_to(0.7)
    assert p2.state.q[0] == pytest.approx(0.1 + 0.5 * tau / inertia * 0.7 ** 2, abs=1e-12)
    assert p2.measure()[3][0] == tau


def test_torque_saturation():
    model = Pendulum(g=0.0, torque_max=1.5)
    p = SimulatedPlant(model, q0=[0.0])
    p.set_torque([10.0])
    p.advance_to(0.01)
    assert p.measure()[3][0] == 1.5
    p.set_torque([-10.0])
    p.advance_to(0.02)
    assert p.measure()[3][0] == -1.5
    # explicit limit overrides the model's
    p3 = SimulatedPlant(model, q0=[0.0], torque_limit_nm=0.5)
    p3.set_torque([1.0])
    p3.advance_to(0.01)
    assert p3.measure()[3][0] == 0.5


def test_encoder_quantisation_on_measurements_only():
    counts = 4096
    model = PlanarTwoLink()
    p = SimulatedPlant(model, q0=[0.123456, -0.654321], encoder_counts_per_rev=counts)
    q_ref = SimulatedPlant(model, q0=[0.123456, -0.654321])
    for t in np.linspace(0.01, 0.3, 7):
        p.advance_to(t)
        q_ref.advance_to(t)
        _, q_meas, qd_meas, _ = p.measure()
        quantum = 2 * np.pi / counts
        ticks = q_meas / quantum
        np.testing.assert_allclose(ticks, np.round(ticks), atol=1e-9)
        assert np.all(np.abs(q_meas - p.state.q) <= quantum / 2 + 1e-12)
        np.testing.assert_array_equal(qd_meas, p.state.qd)
        # the true state is not affected by the sensor model
        np.testing.assert_array_equal(p.state.q, q_ref.state.q)


def test_measurement_noise_seeded_and_calibrated():
    model = PlanarTwoLink()

    def run(seed):
        p = SimulatedPlant(model, q0=[0.2, 0.1], position_noise_std_rad=1e-3,
                           velocity_noise_std_rad_s=[0.01, 0.02], rng=np.random.default_rng(seed))
        out = []
        for k in range(1, 2001):
            if k % 10 == 0:
                p.advance_to(k * 1e-4)
            t, q, qd, _ = p.measure()
            out.append(np.concatenate([q - p.state.q, qd - p.state.qd]))
        return np.array(out), p.state

    a, sa = run(7)
    b, sb = run(7)
    c, _ = run(8)
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a, c)
    std = a.std(axis=0)
    np.testing.assert_allclose(std, [1e-3, 1e-3, 0.01, 0.02], rtol=0.08)
    np.testing.assert_allclose(a.mean(axis=0), 0.0, atol=4 * std.max() / np.sqrt(len(a)))
    # noise never feeds back into the true state
    p0 = SimulatedPlant(model, q0=[0.2, 0.1])
    for k in range(10, 2001, 10):
        p0.advance_to(k * 1e-4)
    np.testing.assert_array_equal(sa.q, p0.state.q)


def test_noise_requires_generator():
    with pytest.raises(ConfigError, match="rng"):
        SimulatedPlant(Pendulum(), q0=[0.0], position_noise_std_rad=1e-3)


def test_coulomb_stiction_holds_against_gravity():
    # gravity torque at q0: m g c cos(q0) = 1*9.81*0.5*cos(1.2) = 1.78 < coulomb 2.0
    p = SimulatedPlant(Pendulum(coulomb=2.0), q0=[1.2])
    p.advance_to(2.0)
    _, q, qd = p.state
    assert q[0] == pytest.approx(1.2, abs=1e-12)
    assert qd[0] == 0.0
    # a torque above the breakaway level moves it (net 3.0 - 1.78 + ... > 0)
    p.set_torque([5.0])
    p.advance_to(2.1)
    assert p.state.qd[0] > 0.05


def test_coulomb_sliding_stops_at_the_right_place():
    inertia, c, v0 = 0.25, 0.5, 2.0
    model = Pendulum(mass_kg=1.0, com_m=0.5, g=0.0, coulomb=c)
    p = SimulatedPlant(model, q0=[0.0], qd0=[v0])
    t_stop = v0 * inertia / c  # 1.0 s
    p.advance_to(0.5)
    assert p.state.qd[0] == pytest.approx(v0 - c / inertia * 0.5, abs=1e-9)
    p.advance_to(3.0)
    _, q, qd = p.state
    assert qd[0] == 0.0
    assert q[0] == pytest.approx(v0 ** 2 * inertia / (2 * c), abs=5e-4)
    # the coupled (2-link) PGS solve also sticks exactly when gravity is below friction
    p2 = SimulatedPlant(PlanarTwoLink(coulomb=[8.0, 3.0]), q0=[0.0, 0.0])
    p2.advance_to(1.0)
    np.testing.assert_allclose(p2.state.q, 0.0, atol=1e-12)
    assert t_stop == 1.0


def test_time_only_moves_forward():
    p = SimulatedPlant(Pendulum(), q0=[0.5], t0_s=1.0)
    assert p.t_s == 1.0
    p.advance_to(1.5)
    st = p.state
    assert p.advance_to(1.2) == 1.5
    np.testing.assert_array_equal(p.state.q, st.q)
    with pytest.raises(DriverError):
        p.advance_to(float("nan"))


def test_result_independent_of_query_pattern_to_integration_accuracy():
    model = PlanarTwoLink()
    a = SimulatedPlant(model, q0=[0.3, 0.2])
    b = SimulatedPlant(model, q0=[0.3, 0.2])
    a.set_torque([1.0, 0.2])
    b.set_torque([1.0, 0.2])
    a.advance_to(0.5)
    for t in np.sort(np.random.default_rng(3).uniform(0, 0.5, 137)):
        b.advance_to(t)
    b.advance_to(0.5)
    np.testing.assert_allclose(a.state.q, b.state.q, atol=1e-9)


def test_bad_commands_are_refused_without_change():
    p = SimulatedPlant(PlanarTwoLink(), q0=[0, 0])
    p.set_torque([1.0, 2.0])
    with pytest.raises(DriverError):
        p.set_torque([1.0, np.nan])
    with pytest.raises(DriverError):
        p.set_torque([1.0, 2.0, 3.0])
    with pytest.raises(DriverError):
        p.set_command([0, 0], kp=[1, np.inf], q_ref=[0, 0])
    with pytest.raises(DriverError):
        p.set_torque([1.0], joints=[5])
    p.advance_to(0.01)
    np.testing.assert_array_equal(p.measure()[3], [1.0, 2.0])
    # partial update of one joint
    p.set_torque([-3.0], joints=[1])
    p.advance_to(0.02)
    np.testing.assert_array_equal(p.measure()[3], [1.0, -3.0])


@pytest.mark.parametrize("bad", [dict(substeps=0), dict(dt_max_s=-1.0), dict(integrator="euler"),
                                 dict(coulomb=-1.0), dict(current_lag_s=np.nan),
                                 dict(encoder_counts_per_rev=0.5), dict(q0=[0.0, 1.0])])
def test_bad_parameters_name_the_field(bad):
    kw = dict(q0=[0.0])
    kw.update(bad)
    with pytest.raises(ConfigError) as ei:
        SimulatedPlant(Pendulum(), **kw)
    assert ei.value.field == next(iter(bad))


def test_stiff_drive_pd_stays_stable_and_settles():
    # kd/M * h_max = 1000/0.25 * 5e-4 = 2: the sampled loop would diverge at the
    # nominal step (2 sub-steps of 1 ms); the plant shortens the step for these gains.
    model = Pendulum(mass_kg=1.0, com_m=0.5)
    p = SimulatedPlant(model, q0=[0.0])
    assert p.step_s * 1000.0 / 0.25 >= 2.0
    kp, kd = 4.0e4, 1000.0
    p.set_command([0.0], kp=[kp], kd=[kd], q_ref=[0.4], qd_ref=[0.0])
    p.advance_to(0.5)
    _, q, qd = p.state
    g = 1.0 * 9.81 * 0.5 * np.cos(0.4)
    assert q[0] == pytest.approx(0.4 - g / kp, abs=1e-5)
    assert abs(qd[0]) < 1e-5


def test_divergence_raises_model_error():
    class Broken(Pendulum):
        def forward_dynamics(self, q, qd, tau, wrench=None):
            return np.full_like(np.asarray(q, float), np.nan)

    p = SimulatedPlant(Broken(), q0=[0.0])
    with pytest.raises(ModelError, match="non-finite"):
        p.advance_to(0.01)


def test_concurrent_access_is_safe():
    p = SimulatedPlant(PlanarTwoLink(), q0=[0.1, 0.1])
    errors = []

    def worker(offset):
        try:
            for k in range(200):
                p.advance_to((k + offset) * 1e-3)
                p.set_torque([0.1 * offset], joints=[offset % 2])
                p.measure()
        except Exception as err:  # collected and re-raised in the main thread
            errors.append(err)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(3)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors
    assert p.t_s == pytest.approx(201e-3)


class _TipPointModel(ParallelModel):
    """A pendulum seen as a 'parallel' model: task X = tip (x, y); records pose hints."""

    def __init__(self):
        self.inner = Pendulum(mass_kg=1.0, com_m=0.5)
        self.hints = []

    dof = 1
    task_dof = 2
    pose_hint_methods = POSE_HINT_METHODS

    @property
    def home_pose(self):
        return np.array([0.5, 0.0])

    def _check(self, q, pose):
        self.hints.append(None if pose is None else np.array(pose))
        if pose is not None:
            np.testing.assert_allclose(pose, self.forward_kinematics_task(q, guess=pose), atol=0.2)

    def mass_matrix(self, q, pose=None):
        return self.inner.mass_matrix(q)

    def bias(self, q, qd, pose=None):
        return self.inner.bias(q, qd)

    def coriolis_matrix(self, q, qd, pose=None):
        return self.inner.coriolis_matrix(q, qd)

    def forward_dynamics(self, q, qd, tau, wrench=None, pose=None):
        self._check(q, pose)
        return self.inner.forward_dynamics(q, qd, tau)

    def kinetic_energy(self, q, qd, pose=None):
        return self.inner.kinetic_energy(q, qd)

    def potential_energy(self, q, pose=None):
        return self.inner.potential_energy(q)

    def forward_kinematics(self, q):
        return self.inner.forward_kinematics(q)

    def jacobian(self, q):
        return self.inner.jacobian(q)

    def scaled(self, mass_factor=1.0, inertia_factor=None):
        return self

    def inverse_kinematics(self, X):
        return np.array([np.arctan2(X[1], X[0])])

    def forward_kinematics_task(self, q, guess=None):
        if guess is None:
            raise AssertionError("the plant must warm-start forward kinematics")
        return 0.5 * np.array([np.cos(q[0]), np.sin(q[0])])

    def task_jacobian(self, q, X):
        return 0.5 * np.array([[-np.sin(q[0])], [np.cos(q[0])]])

    def task_inverse_dynamics(self, X, Xd, Xdd, wrench=None):
        raise NotImplementedError

    def singularity(self, q, X):
        raise NotImplementedError


def test_parallel_model_pose_is_tracked_and_passed():
    model = _TipPointModel()
    p = SimulatedPlant(model, q0=[0.3])
    np.testing.assert_allclose(p.pose, 0.5 * np.array([np.cos(0.3), np.sin(0.3)]))
    p.advance_to(0.2)
    q = p.state.q[0]
    np.testing.assert_allclose(p.pose, 0.5 * np.array([np.cos(q), np.sin(q)]), atol=1e-12)
    assert model.hints and all(h is not None for h in model.hints)
    assert p.energy() == pytest.approx(model.inner.kinetic_energy(p.state.q, p.state.qd)
                                       + model.inner.potential_energy(p.state.q))


# ---------------------------------------------------------------------------
# the closed-form toy models the simulator tests rely on
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("model", [Pendulum(armature=0.01), PlanarTwoLink(armature=[0.01, 0.02])])
def test_toy_models_are_consistent(model):
    rng = np.random.default_rng(2)
    n = model.dof
    eps = 1e-6
    for _ in range(5):
        q, qd = rng.uniform(-2, 2, (2, n))
        # gravity is the gradient of the potential energy
        grad = np.array([(model.potential_energy(q + eps * e) - model.potential_energy(q - eps * e))
                         / (2 * eps) for e in np.eye(n)])
        np.testing.assert_allclose(model.gravity(q), grad, atol=1e-7)
        # dM/dt - 2C is skew-symmetric
        dM = (model.mass_matrix(q + eps * qd) - model.mass_matrix(q - eps * qd)) / (2 * eps)
        S = dM - 2 * model.coriolis_matrix(q, qd)
        np.testing.assert_allclose(S + S.T, 0.0, atol=1e-7)
        # the closed-form forward dynamics inverts the generic inverse dynamics
        tau = rng.normal(size=n)
        qdd = model.forward_dynamics(q, qd, tau)
        np.testing.assert_allclose(model.inverse_dynamics(q, qd, qdd), tau, atol=1e-10)
        assert model.kinetic_energy(q, qd) == pytest.approx(0.5 * qd @ model.mass_matrix(q) @ qd)
    batch = rng.uniform(-1, 1, (4, n))
    assert model.mass_matrix(batch).shape == (4, n, n)


def test_real_parallel_model_energy_and_pose():
    from dynamics import load_model
    model = load_model(Path(__file__).resolve().parents[1] / "hil_configs" / "robots" / "3rrr_vertical.toml")
    q0 = model.inverse_kinematics(model.home_pose)
    p = SimulatedPlant(model, q0=q0, viscous=0.0, coulomb=0.0, torque_limit_nm=np.inf)
    e0 = p.energy()
    err = 0.0
    for k in range(1, 41):
        p.advance_to(k * 5e-3)
        err = max(err, abs(p.energy() - e0))
    assert err < 1e-6 * max(1.0, abs(e0))
    assert np.linalg.norm(p.state.q - q0) > 0.05  # it did fall
    np.testing.assert_allclose(p.pose, model.forward_kinematics_task(p.state.q, guess=p.pose), atol=1e-10)


def test_implicit_coulomb_solution_satisfies_its_optimality_conditions():
    from drivers.sim.plant import _coulomb_implicit
    rng = np.random.default_rng(5)
    sliding = sticking = 0
    for _ in range(200):
        n = int(rng.integers(1, 7))
        A = rng.normal(size=(n, n))
        M = A @ A.T + n * np.eye(n)
        v_star = rng.normal(size=n) * rng.choice([1e-3, 1.0], size=n)
        impulse = rng.uniform(0, 2, n) * rng.choice([0.0, 1.0], size=n, p=[0.2, 0.8])
        v = _coulomb_implicit(M, v_star, impulse)
        # M (v - v*) + impulse * s = 0 with s = sign(v) where v != 0, |s| <= 1 where v = 0
        r = -(M @ (v - v_star))
        moving = v != 0
        np.testing.assert_allclose(r[moving], (impulse * np.sign(v))[moving], atol=1e-8)
        assert np.all(np.abs(r[~moving]) <= impulse[~moving] + 1e-8)
        sliding += int(moving.sum())
        sticking += int((~moving).sum())
    assert sliding > 50 and sticking > 50


def test_parity_compiled_coulomb_step_equals_python_reference():
    """Parity test: the compiled Coulomb step against the product's Python form of the same
    step. The independent checks are ``test_implicit_coulomb_solution_satisfies_its_optimality_conditions``
    (the compiled step's velocities satisfy the problem's optimality conditions) and
    ``test_coulomb_sliding_stops_at_the_right_place`` (against the hand-derived stopping point)."""
    from drivers.sim.plant import _coulomb_implicit, _coulomb_implicit_py

    rng = np.random.default_rng(42)
    for n in (1, 2, 3, 5, 6):
        for _ in range(40):
            A = rng.normal(size=(n, n))
            M = A @ A.T + n * np.eye(n) * rng.uniform(0.01, 1.0)
            v_star = rng.normal(size=n) * rng.choice([1e-3, 1.0])
            impulse = np.abs(rng.normal(size=n)) * rng.choice([1e-4, 1e-2, 1.0])
            np.testing.assert_allclose(_coulomb_implicit(M, v_star, impulse),
                                       _coulomb_implicit_py(M, v_star, impulse), rtol=0, atol=1e-12)


def test_coulomb_step_into_a_buffer_equals_the_allocating_one():
    """coulomb_pgs_into (the compiled plant step's, into a reused buffer) gives coulomb_pgs's
    velocities to the bit, sticking and sliding, whatever the buffer held before."""
    from drivers.sim._friction_kernel import coulomb_pgs, coulomb_pgs_into

    rng = np.random.default_rng(11)
    stuck = slid = 0
    for n in (1, 3, 6):
        buf = np.empty(n)
        for _ in range(60):
            A = rng.normal(size=(n, n))
            M = A @ A.T + n * np.eye(n)
            v_star = rng.normal(size=n) * rng.choice([1e-3, 1.0])
            impulse = np.abs(rng.normal(size=n)) * rng.choice([1e-2, 1.0, 10.0])
            buf[:] = rng.normal(size=n)          # stale values from an earlier step
            coulomb_pgs_into(M, v_star, impulse, 1e-10, 100, buf)
            v = coulomb_pgs(M, v_star, impulse, 1e-10, 100)
            assert buf.tobytes() == v.tobytes()
            stuck += int(not v.any())
            slid += int(v.any())
    assert stuck > 10 and slid > 10


def test_joint_accessors_are_the_array_ones():
    """set_joint_command holds what set_command holds for the joint and refuses what it refuses
    (finite values whose sum overflows are accepted); measure_joint reads what measure reads."""
    kw = dict(q0=[0.3, -0.5], current_lag_s=0.0004, encoder_counts_per_rev=4096)
    a, b = SimulatedPlant(PlanarTwoLink(), **kw), SimulatedPlant(PlanarTwoLink(), **kw)
    rng = np.random.default_rng(3)
    big = [1e308, 1.7e308, -1.7e308, 1e308, 1e308]
    for k in range(200):
        j = int(rng.integers(2))
        vals = big if k == 50 else rng.normal(0.0, 2.0, 5).tolist()
        vals[1:3] = [abs(vals[1]), abs(vals[2])] if k % 3 else [0.0, 0.0]
        if k == 50:
            vals[1:3] = [0.0, 0.0]
        a.set_joint_command(j, *vals)
        b.set_command([vals[0]], [vals[1]], [vals[2]], [vals[3]], [vals[4]], joints=[j])
        assert a._cmd.tolist() == b._cmd.tolist() and a._pd == b._pd and a._h_pd == b._h_pd
        if k == 50:
            a.set_joint_command(j, 0.0)
            b.set_command([0.0], joints=[j])
            continue
        dt = float(rng.uniform(0.0, 0.002))
        for plant in (a, b):
            plant.advance_to(plant.t_s + dt)
        _, q, qd, tau = a.measure()
        for i in range(2):
            assert a.measure_joint(i) == (float(q[i]), float(qd[i]), float(tau[i]))
    for bad in (float("nan"), float("inf"), -float("inf")):
        for pos in range(5):
            vals = [0.5] * 5
            vals[pos] = bad
            with pytest.raises(DriverError, match="non-finite command"):
                a.set_joint_command(0, *vals)


def test_plant_loads_its_compiled_step_when_made():
    """A new process: the compiled plant step's code (3RRR and serial) is loaded when the plant
    is made, not by its first ``advance_to`` (on the wall clock that is inside the first
    control cycle, which was 10-15 ms late), and loading it changes nothing of the state."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    code = (
        "import numpy as np\n"
        "from dynamics import load_model\n"
        "from drivers.sim import _plant_kernels as K\n"
        "from drivers.sim.plant import SimulatedPlant\n"
        "for f, step in (('3rrr_horizontal', K.rrr_advance_ws), ('seed000_arm', K.serial_advance_ws)):\n"
        "    m = load_model(f'hil_configs/robots/{f}.toml')\n"
        "    q0 = m.inverse_kinematics(m.home_pose) if hasattr(m, 'home_pose') else np.full(m.dof, 0.2)\n"
        "    assert step.signatures == [], f\n"
        "    p = SimulatedPlant(m, q0=q0, coulomb=0.05, viscous=0.02, current_lag_s=4e-4)\n"
        "    made = list(step.signatures)\n"
        "    assert len(made) == 1, (f, made)\n"
        "    s = p.state\n"
        "    assert s.t_s == 0.0 and np.array_equal(s.q, q0) and not s.qd.any(), f\n"
        "    p.set_command(np.full(m.dof, 0.01))\n"
        "    p.advance_to(0.003)\n"
        "    assert list(step.signatures) == made, (f, step.signatures)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]



def _new_buffers(plant):
    """Two new output buffers for the plant's compiled step (as the plant makes them)."""
    n, nx = plant.n_joints, 0 if plant._X is None else plant._X.size
    out = []
    for _ in range(2):
        b = np.zeros(3 * n + nx)
        out.append((b, (b[0:n], b[n:2 * n], b[2 * n:2 * n + nx] if nx else None, b[2 * n + nx:])))
    return out


@pytest.mark.parametrize("robot", ["3rrr_horizontal.toml", "seed000_arm.toml"])
def test_compiled_steps_alternate_buffers_and_equal_fresh_ones(robot):
    """The compiled step writes the buffer the state does not view: a step never changes the
    arrays it reads (a reference kept over one step keeps its values), and the states equal
    those of a plant whose every step writes into new arrays."""
    from dynamics import load_model

    model = load_model(Path(__file__).resolve().parents[1] / "hil_configs" / "robots" / robot)
    q0 = model.home_q if hasattr(model, "home_q") else np.full(model.dof, 0.3)
    plants = [SimulatedPlant(model, q0=q0, viscous=0.03, coulomb=0.08, current_lag_s=4e-4) for _ in range(2)]
    assert plants[0]._kernel is not None
    tau = 0.2 * np.sin(np.arange(model.dof) + 1.0)
    for k in range(1, 40):
        held = [plants[0]._q, plants[0]._qd, plants[0]._tau_applied]
        before = [a.copy() for a in held]
        for p in plants:
            p.set_command(tau * np.cos(0.1 * k))
        plants[0].advance_to(k * 1e-3)
        plants[1]._bufs = _new_buffers(plants[1])
        plants[1].advance_to(k * 1e-3)
        for a, b in zip(held, before):
            assert a.tobytes() == b.tobytes()
        s0, s1 = plants[0].state, plants[1].state
        assert s0.q.tobytes() == s1.q.tobytes() and s0.qd.tobytes() == s1.qd.tobytes()
        assert plants[0].applied_torque_nm.tobytes() == plants[1].applied_torque_nm.tobytes()
