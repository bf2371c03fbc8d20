"""Drift-free forward simulation of the planar 3RRR: 60 s of RK4 at 1 ms in the minimal coordinates."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dynamics import load_model
from dynamics.errors import KinematicsError, ModelError

ROBOTS = Path(__file__).resolve().parents[1] / "hil_configs" / "robots"


def simulate(model, duration_s=60.0, dt=1e-3, kp=20.0, kd=0.5, seed=0):
    """Track a wandering platform reference with a PD + gravity law (zero-order hold).

    Returns a dict with the worst constraint residual (as a length [m]), the
    energy balance error E(t) - E(0) - W(t) (W: exact work of the held torques,
    tau_k . (q_{k+1} - q_k)), the total |work| for scale, and the platform range.
    """
    rng = np.random.default_rng(seed)
    w = rng.uniform(0.3, 1.5, size=3)
    ph = rng.uniform(0, 2 * np.pi, size=3)
    amp = np.array([0.03, 0.03, 0.12])
    X0 = model.home_pose
    q = model.home_q
    qd = np.zeros(3)
    X = X0.copy()
    E0 = model.kinetic_energy(q, qd, pose=X) + model.potential_energy(q, pose=X)
    work = 0.0
    abs_work = 0.0
    worst_h = 0.0
    worst_balance = 0.0
    two_b = 2 * model.distal.length
    n = int(round(duration_s / dt))
    Xmin, Xmax = X.copy(), X.copy()
    for k in range(n):
        t = k * dt
        Xr = X0 + amp * np.sin(w * t + ph) - amp * np.sin(ph)
        qr = model.inverse_kinematics(Xr)
        tau = model.gravity(qr, pose=Xr) + kp * (qr - q) - kd * qd
        q_new, qd_new, X = model.rk4_step(q, qd, tau, dt, X)
        dw = tau @ (q_new - q)
        work += dw
        abs_work += abs(dw)
        q, qd = q_new, qd_new
        worst_h = max(worst_h, float(np.max(np.abs(model.constraints(q, X)) / two_b)))
        Xmin, Xmax = np.minimum(Xmin, X), np.maximum(Xmax, X)
        if k % 1000 == 999:
            E = model.kinetic_energy(q, qd, pose=X) + model.potential_energy(q, pose=X)
            worst_balance = max(worst_balance, abs(E - E0 - work))
    return {"worst_h_m": worst_h, "worst_balance_J": worst_balance, "abs_work_J": abs_work,
            "range": Xmax - Xmin, "final_X": X, "final_Xref": Xr}


@pytest.mark.parametrize("name", ["3rrr_vertical.toml", "3rrr_horizontal.toml"])
def test_sixty_seconds_without_drift(name):
    model = load_model(ROBOTS / name)
    r = simulate(model)
    # the constraints hold at the Newton tolerance at every step, by construction
    assert r["worst_h_m"] < 1e-12
    # energy is consistent with the work of the (held) torques to RK4 accuracy
    assert r["worst_balance_J"] < 1e-7 * max(r["abs_work_J"], 1.0), r
    # the robot really moved and followed the reference
    assert r["range"][0] > 0.03 and r["range"][2] > 0.15
    assert np.max(np.abs(r["final_X"] - r["final_Xref"])) < 0.05


def test_rk4_step_matches_reference_and_fails_cleanly():
    """One rk4_step equals a hand-written RK4 on (q, qd) using forward_dynamics with FK."""
    model = load_model(ROBOTS / "3rrr_vertical.toml")
    q = model.inverse_kinematics(model.home_pose + np.array([0.02, -0.01, 0.1]))
    X = model.forward_kinematics_task(q)
    qd = np.array([0.3, -0.2, 0.5])
    tau = np.array([1.0, -2.0, 0.5])
    dt = 2e-3

    def f(qq, vv):
        return vv, model.forward_dynamics(qq, vv, tau, pose=X)

    k1 = f(q, qd)
    k2 = f(q + dt / 2 * k1[0], qd + dt / 2 * k1[1])
    k3 = f(q + dt / 2 * k2[0], qd + dt / 2 * k2[1])
    k4 = f(q + dt * k3[0], qd + dt * k3[1])
    q_ref = q + dt / 6 * (k1[0] + 2 * k2[0] + 2 * k3[0] + k4[0])
    qd_ref = qd + dt / 6 * (k1[1] + 2 * k2[1] + 2 * k3[1] + k4[1])
    q1, qd1, X1 = model.rk4_step(q, qd, tau, dt, X)
    np.testing.assert_allclose(q1, q_ref, atol=1e-13)
    np.testing.assert_allclose(qd1, qd_ref, atol=1e-10)
    np.testing.assert_allclose(X1, model.forward_kinematics_task(q1, guess=X), atol=1e-13)
    # bad inputs and impossible states give errors from the tree, not garbage
    with pytest.raises(ModelError, match="finite"):
        model.rk4_step(q, qd, np.array([np.nan, 0.0, 0.0]), dt, X)
    with pytest.raises(KinematicsError):
        # a huge torque for a long step throws the state out of the workspace
        model.rk4_step(q, qd, np.array([500.0, -500.0, 500.0]), 0.2, X)
