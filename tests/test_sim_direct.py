"""DirectPlantDriver: the in-process Driver on the simulated plant."""

from __future__ import annotations

import numpy as np
import pytest

from dynamics.errors import DriverError
from drivers.base import Command, Driver
from drivers.sim.direct import DirectPlantDriver
from drivers.sim.plant import SimulatedPlant
from dynamics.toy_models import Pendulum, PlanarTwoLink


class Clock:
    def __init__(self, t=0.0):
        self.t = t

    def __call__(self):
        return self.t


def _driver(**plant_kw):
    clock = Clock()
    plant = SimulatedPlant(PlanarTwoLink(), q0=[0.1, -0.2], **plant_kw)
    return DirectPlantDriver(plant, now=clock), plant, clock


def test_is_a_driver_and_reports_first_feedback():
    drv, plant, clock = _driver()
    assert isinstance(drv, Driver)
    assert drv.n_joints == 2
    fb = drv.enable()
    assert fb.t_s == 0.0
    np.testing.assert_array_equal(fb.position_rad, [0.1, -0.2])
    assert fb.enabled.all() and fb.fresh.all() and (fb.fault == 0).all()
    assert fb.info["joint_names"] == ("q0", "q1")


def test_cycle_applies_torque_zero_order_hold_and_feedback_time():
    drv, plant, clock = _driver()
    ref = SimulatedPlant(PlanarTwoLink(), q0=[0.1, -0.2])
    drv.enable()
    rng = np.random.default_rng(0)
    for k in range(1, 51):
        tau = rng.uniform(-1, 1, 2)
        clock.t = k * 1e-3
        fb = drv.cycle(Command(tau))
        ref.advance_to(clock.t)
        assert fb.t_s == clock.t
        np.testing.assert_array_equal(fb.position_rad, ref.state.q)
        ref.set_torque(tau)
    np.testing.assert_array_equal(plant.state.q, ref.state.q)


def test_drive_side_pd_matches_the_plant_pd():
    """Parity test (the direct driver's drive-side PD against the plant's own PD command); the
    PD's values are checked independently in
    ``test_sim_plant.py::test_stiff_drive_pd_stays_stable_and_settles`` (the hand-computed
    equilibrium ``q_ref - m g l cos(q_ref) / kp`` of a pendulum)."""
    drv, plant, clock = _driver()
    ref = SimulatedPlant(PlanarTwoLink(), q0=[0.1, -0.2])
    drv.enable()
    kp, kd = np.array([30.0, 20.0]), np.array([1.0, 0.5])
    target = np.array([0.5, 0.3])
    for k in range(1, 301):
        clock.t = k * 1e-3
        drv.cycle(Command(np.zeros(2), position_rad=target, velocity_rad_s=np.zeros(2),
                          kp_nm_per_rad=kp, kd_nm_s_per_rad=kd))
        ref.advance_to(clock.t)
        ref.set_command(np.zeros(2), kp, kd, target, np.zeros(2))
    np.testing.assert_array_equal(plant.state.q, ref.state.q)
    # PD pulls towards the target (gravity leaves an offset)
    assert np.all(np.abs(plant.state.q - target) < np.abs(np.array([0.1, -0.2]) - target))


def test_disabled_ignores_commands():
    drv, plant, clock = _driver()
    drv.enable()
    clock.t = 0.01
    drv.cycle(Command(np.array([1.0, 1.0])))
    drv.disable()
    assert not drv.enabled
    clock.t = 0.02
    fb = drv.cycle(Command(np.array([5.0, 5.0])))
    assert not fb.enabled.any()
    clock.t = 0.03
    fb = drv.cycle(Command(np.array([5.0, 5.0])))
    np.testing.assert_array_equal(fb.torque_nm, [0.0, 0.0])
    np.testing.assert_array_equal(plant.applied_torque_nm, [0.0, 0.0])


@pytest.mark.parametrize("cmd", [
    Command(np.array([np.nan, 0.0])),
    Command(np.array([0.0, np.inf])),
    Command(np.zeros(3)),
    Command(np.zeros(2), kp_nm_per_rad=np.array([1.0, 1.0])),  # kp without a position
    Command(np.zeros(2), position_rad=np.array([0.0, np.nan]), kp_nm_per_rad=np.ones(2)),
])
def test_refuses_bad_commands_without_applying(cmd):
    drv, plant, clock = _driver()
    drv.enable()
    clock.t = 0.01
    drv.cycle(Command(np.array([0.5, 0.5])))
    clock.t = 0.02
    with pytest.raises(DriverError):
        drv.cycle(cmd)
    assert plant.t_s == pytest.approx(0.01)
    clock.t = 0.03
    fb = drv.cycle(Command(np.array([0.5, 0.5])))
    np.testing.assert_array_equal(fb.torque_nm, [0.5, 0.5])


def test_close_is_idempotent_and_final():
    drv, plant, clock = _driver()
    with drv:
        drv.enable()
        clock.t = 0.01
        drv.cycle(Command(np.ones(2)))
    drv.close()
    clock.t = 0.02
    plant.advance_to(clock.t)
    np.testing.assert_array_equal(plant.applied_torque_nm, [0.0, 0.0])
    with pytest.raises(DriverError):
        drv.cycle(Command(np.zeros(2)))
    with pytest.raises(DriverError):
        drv.enable()


def test_noisy_run_is_deterministic():
    def run():
        clock = Clock()
        plant = SimulatedPlant(Pendulum(coulomb=0.1, viscous=0.01), q0=[0.2], current_lag_s=5e-4,
                               encoder_counts_per_rev=2 ** 14, position_noise_std_rad=1e-4,
                               velocity_noise_std_rad_s=1e-3, rng=np.random.default_rng(11))
        drv = DirectPlantDriver(plant, now=clock)
        drv.enable()
        out = []
        q_prev = 0.2
        for k in range(1, 200):
            clock.t = k * 1e-3
            fb = drv.cycle(Command(np.array([-3.0 * (q_prev - 0.5)])))
            q_prev = fb.position_rad[0]
            out.append(fb.position_rad[0])
        return np.array(out)

    np.testing.assert_array_equal(run(), run())
