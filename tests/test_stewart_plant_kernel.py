"""The Stewart platform's compiled plant step against an independent reference.

``tests/test_perf_fastpaths.py`` compares the compiled step with the Python step, but both call
the model's one-state kernels (:mod:`dynamics._stewart_kernels`), so a fault they share would
pass there.  Here the step of :func:`drivers.sim._stewart_plant_kernel.stewart_advance_ws`
(the step the plant and the compiled offline loop run) is checked, for random states, against
an RK4 step written out in numpy with the Lagrange formulation
(:mod:`dynamics._stewart_lagrange`: the mass matrix and the task inverse dynamics, from which
the forward dynamics follow by linearity in the acceleration), forward kinematics by a Newton
iteration on the leg lengths with complex-step Jacobians, the exponential current lag, viscous
friction and the implicit Coulomb step of :func:`drivers.sim.plant._coulomb_implicit_py`.
"""

from pathlib import Path

import numpy as np
import pytest

from dynamics import load_model
from dynamics import _stewart_lagrange as LG
from dynamics._stewart_kernels import LEG_B, LEG_P
from drivers.sim._stewart_plant_kernel import STEWART_WORK, stewart_advance_ws
from drivers.sim.plant import _coulomb_implicit_py

ROBOT = Path(__file__).resolve().parents[1] / "hil_configs" / "robots" / "stewart.toml"
SPREAD = np.array([0.05, 0.05, 0.05, 0.1, 0.1, 0.1])


def lengths(X, legs):
    """Leg lengths at pose X (complex safe: no abs)."""
    R = LG.rot(X[3:])
    d = X[:3] + (R @ legs[:, LEG_P].T).T - legs[:, LEG_B]
    return np.sqrt(np.sum(d * d, axis=1))


def euler_jacobian(X, legs):
    """dL/dX (6, 6) by complex steps (exact to rounding)."""
    J = np.empty((6, 6))
    for k in range(6):
        Xc = X.astype(complex)
        Xc[k] += 1e-40j
        J[:, k] = lengths(Xc, legs).imag / 1e-40
    return J


def fk(q, guess, legs):
    """The pose with leg lengths q, by Newton from ``guess``."""
    X = guess.copy()
    for _ in range(30):
        f = lengths(X, legs) - q
        if np.max(np.abs(f)) < 1e-15:
            break
        X = X - np.linalg.solve(euler_jacobian(X, legs), f)
    return X


def qdd_ref(m, q, qd, tau, guess):
    """Leg accelerations for leg forces ``tau`` by the Lagrange model: F(Xdd) is affine in Xdd."""
    legs, plat = m.packed_parameters
    X = fk(q, guess, legs)
    Xd = np.linalg.solve(euler_jacobian(X, legs), qd)
    zero = np.zeros(6)
    F0 = LG.task_inverse_dynamics(X, Xd, zero, zero, legs, plat)
    A = np.column_stack([LG.task_inverse_dynamics(X, Xd, e, zero, legs, plat) - F0 for e in np.eye(6)])
    Xdd = np.linalg.solve(A, tau - F0)
    return m.leg_kinematics(X, Xd, Xdd).accelerations


def step_ref(m, q, qd, X, ta, tau_c, visc, coul, lag, h):
    """One plant step (``SimulatedPlant._step``'s RK4, lag, viscous and Coulomb friction)."""
    legs, plat = m.packed_parameters

    def tau_at(s):
        return tau_c + (ta - tau_c) * np.exp(-s / lag) if lag > 0 else tau_c

    def acc(qs, qds, t):
        return qdd_ref(m, qs, qds, t - visc * qds, X)

    k1v = acc(q, qd, tau_at(0.0))
    k2q = qd + 0.5 * h * k1v
    k2v = acc(q + 0.5 * h * qd, k2q, tau_at(0.5 * h))
    k3q = qd + 0.5 * h * k2v
    k3v = acc(q + 0.5 * h * k2q, k3q, tau_at(0.5 * h))
    k4q = qd + h * k3v
    k4v = acc(q + h * k3q, k4q, tau_at(h))
    qn = q + h / 6 * (qd + 2 * k2q + 2 * k3q + k4q)
    qdn = qd + h / 6 * (k1v + 2 * k2v + 2 * k3v + k4v)
    if np.any(coul > 0):
        M = LG.mass_matrix_actuated(fk(qn, X, legs), legs, plat)
        v = _coulomb_implicit_py(M, qdn, h * coul)
        qn = qn + 0.5 * h * (v - qdn)
        stuck = (v == 0.0) & (qd == 0.0)
        qn[stuck] = q[stuck]
        qdn = v
    return qn, qdn, fk(qn, X, legs), tau_at(h)


@pytest.mark.parametrize("coulomb", [0.0, 30.0, 400.0])
def test_compiled_stewart_step_equals_an_independent_rk4_step(coulomb):
    m = load_model(ROBOT)
    legs, _ = m.packed_parameters
    P = m._params
    rng = np.random.default_rng(17 + int(coulomb))
    work = np.empty(STEWART_WORK)
    h, lag = 5e-4, 3e-4
    moved = 0.0
    for k in range(6):
        X = m.home_pose + SPREAD * rng.uniform(-1, 1, 6)
        q = lengths(X, legs)
        qd = 0.05 * rng.normal(size=6)
        if k % 2:
            qd[rng.integers(6)] = 0.0             # a leg at rest (sticks under Coulomb friction)
        g = m.gravity(q, pose=X)
        ta = g + 50.0 * rng.normal(size=6)
        cmd = np.zeros((5, 6))
        cmd[0] = g + 50.0 * rng.normal(size=6)
        visc = np.full(6, 250.0)
        coul = np.full(6, coulomb)
        par = np.stack([visc, coul, np.full(6, np.inf)])
        flags = 1 | (2 if coulomb > 0 else 0)
        out = np.full(24, np.nan)
        st, done = stewart_advance_ws(P, q, qd, X, ta, cmd, par, lag, flags, h, 1, out, work)
        assert (st, done) == (0, 1)
        qn, qdn, Xn, tan = step_ref(m, q, qd, X, ta, cmd[0], visc, coul, lag, h)
        # the two agree to ~2e-17 m/s, ~3e-16 m or rad (seeds 1-17): bounds 100-1000 times that,
        # 1e-11 of the step's velocity change (~1e-3 m/s)
        np.testing.assert_allclose(out[6:12], qdn, rtol=0, atol=1e-14)
        np.testing.assert_allclose(out[0:6], qn, rtol=0, atol=1e-15)
        np.testing.assert_allclose(out[12:18], Xn, rtol=0, atol=1e-13)
        np.testing.assert_allclose(out[18:24], tan, rtol=1e-14, atol=1e-10)
        moved = max(moved, float(np.max(np.abs(qdn - qd))))
    assert moved > 1e-4                           # the forces did accelerate the legs
