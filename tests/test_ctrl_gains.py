"""Gain design: the poles/margins/step figures reported through python-control are the analytic ones."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg

from controller.gains import ct_gains, ct_gains_lqr, ct_gains_place, pd_analysis, pd_gains_nominal
from dynamics.errors import ModelError


@pytest.mark.parametrize("wn,zeta", [(10.0, 0.5), (25.0, 1.0), (4.0, 1.8)])
def test_ct_gains_from_wn_zeta_give_reported_poles(wn, zeta):
    d = ct_gains(wn, zeta, n=3)
    assert np.allclose(d.kp, wn ** 2) and np.allclose(d.kd, 2 * zeta * wn)
    expected = np.sort_complex(np.roots([1.0, 2 * zeta * wn, wn ** 2]).astype(complex))
    for ax in d.axes:
        assert np.allclose(np.sort_complex(ax.poles), expected, atol=1e-6 * wn)
    if zeta < 1:
        assert d.axes[0].wn == pytest.approx(wn) and d.axes[0].zeta == pytest.approx(zeta)
        assert d.axes[0].step["overshoot_pct"] == pytest.approx(
            100 * np.exp(-np.pi * zeta / np.sqrt(1 - zeta ** 2)), rel=0.02)
    else:
        assert d.axes[0].step["overshoot_pct"] < 0.5
    assert d.poles.shape == (3, 2)
    assert "axis 0" in d.summary()


def test_ct_gains_place_and_lqr():
    d = ct_gains_place([-3.0, -4.0], n=2)
    assert np.allclose(d.kp, 12.0) and np.allclose(d.kd, 7.0)
    assert np.allclose(np.sort(d.axes[1].poles.real), [-4.0, -3.0])
    d2 = ct_gains_place([[-5 + 5j, -5 - 5j], [-2.0, -8.0]])
    assert np.allclose(d2.kp, [50.0, 16.0]) and np.allclose(d2.kd, [10.0, 10.0])
    # LQR: K = R^-1 B^T P with P from the continuous algebraic Riccati equation
    A = np.array([[0.0, 1.0], [0.0, 0.0]])
    B = np.array([[0.0], [1.0]])
    Q = np.diag([100.0, 1.0])
    P = scipy.linalg.solve_continuous_are(A, B, Q, np.eye(1))
    K = (B.T @ P)[0]
    d3 = ct_gains_lqr(100.0, 1.0, 1.0, n=2)
    assert np.allclose(d3.kp, K[0]) and np.allclose(d3.kd, K[1])
    assert np.all(d3.axes[0].poles.real < 0)
    with pytest.raises(ModelError):
        ct_gains_place([1.0, -2.0])
    with pytest.raises(ModelError):
        ct_gains(-1.0, 1.0, n=1)


def test_pd_analysis_margins_match_closed_form():
    J, kp, kd = 0.2, 40.0, 4.0
    d = pd_analysis(kp, kd, J)
    ax = d.axes[0]
    # |kd j w + kp| = J w^2 at the gain crossover; PM = atan(kd w / kp)
    w = np.sqrt((kd ** 2 + np.sqrt(kd ** 4 + 4 * J ** 2 * kp ** 2)) / (2 * J ** 2))
    assert ax.margins["w_gain_crossover"] == pytest.approx(w, rel=1e-4)
    assert ax.margins["phase_margin_deg"] == pytest.approx(np.degrees(np.arctan2(kd * w, kp)), rel=1e-4)
    assert np.isinf(ax.margins["gain_margin"])
    assert np.allclose(np.sort_complex(ax.poles), np.sort_complex(np.roots([J, kd, kp])))
    # with a delay the gain margin becomes finite
    dd = pd_analysis(kp, kd, J, delay_s=0.01)
    assert np.isfinite(dd.axes[0].margins["gain_margin"]) and dd.axes[0].margins["gain_margin"] > 1
    # PID: third-order closed loop J s^3 + kd s^2 + kp s + ki
    dp = pd_analysis(kp, kd, J, ki=20.0)
    assert np.allclose(np.sort_complex(dp.axes[0].poles), np.sort_complex(np.roots([J, kd, kp, 20.0])))


def test_pd_gains_nominal():
    d = pd_gains_nominal([0.5, 0.1], 20.0, 0.7)
    for ax, J in zip(d.axes, [0.5, 0.1]):
        assert ax.wn == pytest.approx(20.0) and ax.zeta == pytest.approx(0.7)
        assert ax.kp == pytest.approx(J * 400.0)


def test_pd_analysis_model_uses_mass_matrix_diagonal():
    from controller.gains import pd_analysis_model
    try:
        from tests.test_ctrl_models import Arm2
    except ImportError:  # pragma: no cover
        from test_ctrl_models import Arm2
    m = Arm2()
    q0 = np.array([0.2, 0.9])
    d = pd_analysis_model(m, q0, [60.0, 30.0], [6.0, 3.0], delay_s=1e-3)
    J = np.diag(m.mass_matrix(q0))
    ref = pd_analysis([60.0, 30.0], [6.0, 3.0], J, delay_s=1e-3)
    for a, b in zip(d.axes, ref.axes):
        assert np.allclose(a.poles, b.poles) and a.margins == b.margins
