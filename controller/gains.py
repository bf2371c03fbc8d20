"""Gain design for the control laws, with python-control analysis.

Computed torque (joint or task space)
-------------------------------------
With a matched model, computed torque turns every axis into the error
dynamics ``e'' + kd e' + kp e = 0``, i.e. a double integrator ``x' = A x + B u``
(``x = (e, e')``, ``A = [[0, 1], [0, 0]]``, ``B = [0, 1]^T``) under state feedback
``u = -K x`` with ``K = [kp, kd]``.  Gains can be chosen

* from a natural frequency and damping ratio: ``kp = wn^2``, ``kd = 2 zeta wn``
  (:func:`ct_gains`);
* by pole placement (:func:`ct_gains_place`, ``control.place``);
* by LQR (:func:`ct_gains_lqr`, ``control.lqr`` with weights on e and e').

The reported closed-loop poles are the eigenvalues of ``A - B K`` computed by
python-control.  The *nominal step response* is that of a set-point step
without feed-forward, ``T(s) = kp / (s^2 + kd s + kp)``.

PD + gravity and PID
--------------------
These act on the plant itself.  :func:`pd_analysis` linearises each axis
around a configuration as ``J s^2 + b s`` (``J`` the diagonal of ``M(q0)``
including armature, ``b`` the viscous friction) with gravity cancelled,
optionally with a ``delay_s`` (first-order Pade) for the loop's one-sample
delay, and reports for ``C(s) = kp + kd s + ki/s`` the closed-loop poles, gain
and phase margins (``control.stability_margins``) and the set-point step
response (rise time, settling time, overshoot; ``control.step_info``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from dynamics.errors import ModelError

__all__ = ["AxisDesign", "GainDesign", "ct_gains", "ct_gains_place", "ct_gains_lqr", "pd_analysis",
           "pd_analysis_model", "pd_gains_nominal"]

_A = np.array([[0.0, 1.0], [0.0, 0.0]])
_B = np.array([[0.0], [1.0]])


def _control():
    import control  # imported lazily: python-control is slow to import
    return control


@dataclass
class AxisDesign:
    """Design report of one axis.

    Attributes
    ----------
    kp, kd, ki : float
    poles : ndarray of complex
        Closed-loop poles [1/s] (as computed by python-control).
    wn, zeta : float
        Natural frequency [rad/s] and damping ratio of the dominant pole pair.
    step : dict
        ``rise_time_s``, ``settling_time_s`` (2 %), ``overshoot_pct``.
    margins : dict or None
        ``gain_margin``, ``phase_margin_deg``, ``w_gain_crossover``,
        ``w_phase_crossover`` (PD/PID analysis only).
    """

    kp: float
    kd: float
    ki: float
    poles: np.ndarray
    wn: float
    zeta: float
    step: dict
    margins: dict | None = None


@dataclass
class GainDesign:
    """Gains of every axis (vectors of shape (n,)) and the per-axis reports."""

    kp: np.ndarray
    kd: np.ndarray
    ki: np.ndarray | None
    axes: list = field(default_factory=list)

    @property
    def poles(self) -> np.ndarray:
        """Closed-loop poles of every axis, shape (n, order)."""
        return np.array([a.poles for a in self.axes])

    def summary(self) -> str:
        lines = []
        for i, a in enumerate(self.axes):
            p = ", ".join(f"{z.real:.4g}{z.imag:+.4g}j" for z in a.poles)
            line = (f"axis {i}: kp={a.kp:.4g} kd={a.kd:.4g}" + (f" ki={a.ki:.4g}" if a.ki else "")
                    + f" poles [{p}] wn={a.wn:.4g} zeta={a.zeta:.3g} rise={a.step['rise_time_s']:.4g}s"
                    f" settle={a.step['settling_time_s']:.4g}s overshoot={a.step['overshoot_pct']:.3g}%")
            if a.margins:
                line += (f" GM={a.margins['gain_margin']:.4g} PM={a.margins['phase_margin_deg']:.4g}deg")
            if not np.all(np.real(a.poles) < 0):
                line += "  UNSTABLE (a closed-loop pole has Re >= 0)"
            lines.append(line)
        return "\n".join(lines)


def _as_axes(x, n, name):
    a = np.atleast_1d(np.asarray(x, dtype=float))
    if a.size == 1 and n is not None:
        a = np.full(n, float(a[0]))
    if a.ndim != 1 or (n is not None and a.size != n):
        raise ModelError(f"{name}: expected a scalar or {n} values, got {x!r}")
    if not np.all(np.isfinite(a)):
        raise ModelError(f"{name} must be finite, got {x!r}")
    return a


def _dominant(poles):
    """(wn, zeta) of the slowest pole (pair)."""
    p = poles[np.argmin(np.abs(np.real(poles)))]
    wn = float(np.abs(p))
    zeta = float(-np.real(p) / wn) if wn > 0 else float("nan")
    return wn, zeta


def _step(ctl, sys) -> dict:
    info = ctl.step_info(sys, SettlingTimeThreshold=0.02)
    return {"rise_time_s": float(info["RiseTime"]), "settling_time_s": float(info["SettlingTime"]),
            "overshoot_pct": float(info["Overshoot"])}


def _ct_axis(kp, kd, ki=0.0) -> AxisDesign:
    """Error dynamics ``e'' + kd e' + kp e (+ ki int e) = 0`` of one computed-torque axis.

    The step response is the set-point response of the unit-inertia loop
    ``Y/R = (kp s + ki) / (s^3 + kd s^2 + kp s + ki)`` (second order without ki).
    """
    ctl = _control()
    if ki:
        cl = ctl.tf([kp, ki], [1.0, kd, kp, ki])
    else:
        K = np.array([[kp, kd]])
        cl = ctl.ss(_A - _B @ K, _B * kp, np.array([[1.0, 0.0]]), 0.0)  # set-point step, no feed-forward
    poles = np.sort_complex(np.asarray(ctl.poles(cl), dtype=complex))
    wn, zeta = _dominant(poles)
    if np.all(np.real(poles) < 0):
        step = _step(ctl, cl)
    else:  # the step response of an unstable loop has no settling time: say so, do not simulate
        step = {"rise_time_s": float("nan"), "settling_time_s": float("inf"), "overshoot_pct": float("inf")}
    return AxisDesign(float(kp), float(kd), float(ki), poles, wn, zeta, step)


def with_integral(design: GainDesign, ki) -> GainDesign:
    """``design`` with an integral gain per axis (float or (n,) [1/s^3]), poles and step redone.

    Stable (Routh-Hurwitz) when ``0 < ki < kp kd`` on every axis; the report shows
    the poles either way so that an unstable choice is visible before a run.
    """
    ki = _as_axes(ki, design.kp.size, "ki")
    if np.any(ki < 0):
        raise ModelError(f"ki must be >= 0, got {ki}")
    return GainDesign(design.kp, design.kd, ki,
                      [_ct_axis(a, b, c) for a, b, c in zip(design.kp, design.kd, ki)])


def _check_stable_ct(kp, kd):
    if np.any(kp <= 0) or np.any(kd <= 0):
        raise ModelError(f"computed-torque gains must be positive (kp={kp}, kd={kd})")


def ct_gains(wn, zeta=1.0, n: int | None = None) -> GainDesign:
    """Computed-torque gains ``kp = wn^2``, ``kd = 2 zeta wn`` per axis.

    Parameters
    ----------
    wn : float or (n,)
        Natural frequency [rad/s], > 0.
    zeta : float or (n,)
        Damping ratio, > 0.
    n : int, optional
        Number of axes (when both are scalars).
    """
    wn = _as_axes(wn, n, "wn")
    zeta = _as_axes(zeta, wn.size, "zeta")
    wn = _as_axes(wn, zeta.size, "wn")
    if np.any(wn <= 0) or np.any(zeta <= 0):
        raise ModelError(f"wn and zeta must be > 0, got wn={wn}, zeta={zeta}")
    kp, kd = wn ** 2, 2.0 * zeta * wn
    return GainDesign(kp, kd, None, [_ct_axis(a, b) for a, b in zip(kp, kd)])


def ct_gains_place(poles, n: int | None = None) -> GainDesign:
    """Computed-torque gains placing the error-dynamics poles (``control.place``).

    Parameters
    ----------
    poles : array_like, shape (2,) or (n, 2)
        Two poles per axis [1/s] (real, or a complex-conjugate pair), in the
        open left half plane; a single pair is used for every axis.
    """
    ctl = _control()
    P = np.asarray(poles, dtype=complex)
    if P.ndim == 1:
        P = np.tile(P, (n or 1, 1))
    if P.ndim != 2 or P.shape[1] != 2 or (n is not None and P.shape[0] != n):
        raise ModelError(f"poles: expected 2 per axis, got shape {P.shape}")
    if np.any(P.real >= 0):
        raise ModelError(f"poles must be in the open left half plane, got {P.tolist()}")
    kp, kd = np.empty(P.shape[0]), np.empty(P.shape[0])
    for i, pp in enumerate(P):
        K = np.asarray(ctl.place(_A, _B, pp))
        kp[i], kd[i] = K[0, 0], K[0, 1]
    _check_stable_ct(kp, kd)
    return GainDesign(kp, kd, None, [_ct_axis(a, b) for a, b in zip(kp, kd)])


def ct_gains_lqr(q_pos, q_vel, r=1.0, n: int | None = None) -> GainDesign:
    """Computed-torque gains by LQR on each axis' error dynamics (``control.lqr``).

    Minimises ``int q_pos e^2 + q_vel e'^2 + r v^2 dt`` per axis.
    """
    ctl = _control()
    qp = _as_axes(q_pos, n, "q_pos")
    qv = _as_axes(q_vel, qp.size, "q_vel")
    qp = _as_axes(qp, qv.size, "q_pos")
    rr = _as_axes(r, qp.size, "r")
    if np.any(qp <= 0) or np.any(qv < 0) or np.any(rr <= 0):
        raise ModelError("LQR weights: q_pos > 0, q_vel >= 0, r > 0 required")
    kp, kd = np.empty(qp.size), np.empty(qp.size)
    for i in range(qp.size):
        K, _, _ = ctl.lqr(_A, _B, np.diag([qp[i], qv[i]]), np.array([[rr[i]]]))
        K = np.asarray(K)
        kp[i], kd[i] = K[0, 0], K[0, 1]
    return GainDesign(kp, kd, None, [_ct_axis(a, b) for a, b in zip(kp, kd)])


def pd_analysis(kp, kd, inertia, ki=None, damping=0.0, delay_s: float | None = None) -> GainDesign:
    """Analyse PD/PID gains on the nominal linearised plant ``1 / (J s^2 + b s)`` per axis.

    Parameters
    ----------
    kp, kd : float or (n,)
        [N m/rad], [N m s/rad].
    inertia : float or (n,)
        Nominal inertia J per axis (e.g. the diagonal of ``M(q0)``) [kg m^2].
    ki : float or (n,), optional
        [N m/(rad s)].
    damping : float or (n,)
        Viscous friction b [N m s/rad].
    delay_s : float, optional
        Loop delay modelled by a first-order Pade approximation (e.g. one period).

    Returns
    -------
    GainDesign
        With closed-loop poles, margins and the set-point step response per axis.
    """
    ctl = _control()
    J = _as_axes(inertia, None, "inertia")
    n = J.size
    kp_, kd_ = _as_axes(kp, n, "kp"), _as_axes(kd, n, "kd")
    ki_ = _as_axes(0.0 if ki is None else ki, n, "ki")
    b = _as_axes(damping, n, "damping")
    if np.any(J <= 0):
        raise ModelError(f"inertia must be > 0, got {J}")
    axes = []
    for i in range(n):
        plant = ctl.tf([1.0], [J[i], b[i], 0.0])
        if ki_[i] != 0.0:
            C = ctl.tf([kd_[i], kp_[i], ki_[i]], [1.0, 0.0])
        else:
            C = ctl.tf([kd_[i], kp_[i]], [1.0])
        L = C * plant
        if delay_s:
            num, den = ctl.pade(float(delay_s), 1)
            L = L * ctl.tf(num, den)
        cl = ctl.feedback(L, 1)
        poles = np.sort_complex(np.asarray(ctl.poles(cl), dtype=complex))
        gm, pm, _sm, wpc, wgc, _wms = ctl.stability_margins(L)
        margins = {"gain_margin": float(gm), "phase_margin_deg": float(pm),
                   "w_gain_crossover": float(wgc), "w_phase_crossover": float(wpc)}
        wn, zeta = _dominant(poles)
        stable = bool(np.all(poles.real < 0))
        step = _step(ctl, cl) if stable else {"rise_time_s": float("nan"), "settling_time_s": float("inf"),
                                             "overshoot_pct": float("inf")}
        axes.append(AxisDesign(float(kp_[i]), float(kd_[i]), float(ki_[i]), poles, wn, zeta, step, margins))
    return GainDesign(kp_, kd_, None if ki is None else ki_, axes)


def pd_gains_nominal(inertia, wn, zeta=1.0, damping=0.0) -> GainDesign:
    """PD gains giving ``wn``, ``zeta`` on the nominal plant ``J s^2 + b s``.

    ``kp = J wn^2``, ``kd = 2 zeta wn J - b``; analysed with :func:`pd_analysis`.
    """
    J = _as_axes(inertia, None, "inertia")
    wn = _as_axes(wn, J.size, "wn")
    zeta = _as_axes(zeta, J.size, "zeta")
    b = _as_axes(damping, J.size, "damping")
    kp = J * wn ** 2
    kd = 2.0 * zeta * wn * J - b
    if np.any(kd <= 0):
        raise ModelError("the plant's damping already exceeds the requested damping")
    return pd_analysis(kp, kd, J, damping=b)


def pd_analysis_model(model, q0, kp, kd, ki=None, delay_s: float | None = None, **dyn_kw) -> GainDesign:
    """:func:`pd_analysis` on a model linearised at ``q0``.

    The nominal per-axis plant uses ``J_i = M(q0)[i, i]`` (armature included)
    and ``b_i = model.drive.viscous[i]``; gravity is assumed compensated (PD+g)
    or integrated away (PID).  ``dyn_kw`` is passed to ``mass_matrix`` (e.g.
    ``pose=`` for parallel models).  Coupling between axes is ignored.
    """
    q0 = np.asarray(q0, dtype=float)
    M = np.asarray(model.mass_matrix(q0, **dyn_kw), dtype=float)
    return pd_analysis(kp, kd, np.diag(M).copy(), ki=ki, damping=np.asarray(model.drive.viscous, float),
                       delay_s=delay_s)
