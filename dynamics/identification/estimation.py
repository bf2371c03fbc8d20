"""Parameter estimation from measured joint positions and torques.

Pipeline (:func:`identify`):

1. :func:`prepare`: zero-phase Butterworth low-pass (``scipy.signal.filtfilt``)
   of the measured positions, central differences of the filtered signal for
   velocity and acceleration, the *same* filter on the measured torques
   (parallel filtering keeps them in phase with the regressor), then edge
   trimming, decimation (every k-th sample of the already low-passed signals)
   and removal of the samples where a joint is nearly at rest (Coulomb
   friction is set-valued there: stiction).
2. Ordinary least squares on the base regressor; the residual of each joint
   gives its noise level sigma_j; weighted least squares with rows scaled by
   1/sigma_j; covariance ``(W^T S^-1 W)^-1`` and standard deviations of the
   base parameters.
3. A physically consistent estimate of the *standard* parameters: per serial
   link the 4x4 pseudo-inertia ``J = [[Sigma, h], [h^T, m]]``
   (``Sigma = tr(I)/2 E - I``) as ``L L^T`` with a lower-triangular ``L``
   whose diagonal is ``exp`` of a free parameter (the log-Cholesky
   parametrisation of Rucker and Wensing, "Smooth parameterization of rigid-body
   inertia", 2022); per 3RRR link the planar ``[[ZZ, MX], [MX, M]]`` the same
   way, the platform ``ZZ, M`` as ``exp``; drive terms (armature, viscous,
   Coulomb) >= 0 as squares; offsets free.  Solved with
   ``scipy.optimize.least_squares`` on the whitened residuals plus a weak
   prior towards the nominal parameters, which only decides the directions
   the data do not see (non-identifiable parameters keep their nominal
   values; the identifiable combinations follow the data).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import scipy.optimize
import scipy.signal

from ..base import Model
from ..errors import ModelError
from .base import BaseParameters
from .regressor import ParameterSet, regressor

__all__ = ["Samples", "prepare", "estimate_delay", "data_regressor", "Estimate", "identify", "physical_parameters", "log_cholesky",
           "torque_prediction_errors"]


@dataclass
class Samples:
    """Processed identification data; arrays of shape (N, n) (t: (N,)).

    ``poses`` (N, 3) are platform poses for the 3RRR (measured or None).
    ``coulomb`` (N, n), when given, replaces ``sign(qd)`` in the regressor's
    Coulomb columns: the sign of the unfiltered velocity passed through the
    same filter as the torques, so the filtered torque step at a velocity
    reversal is matched by the same filtered step in the regressor.
    """

    t: np.ndarray
    q: np.ndarray
    qd: np.ndarray
    qdd: np.ndarray
    tau: np.ndarray
    poses: np.ndarray | None = None
    coulomb: np.ndarray | None = None
    #: samples kept at each step of :func:`prepare`: ``window`` (after trimming), ``decimated``
    #: (every ``decimate``-th of those), ``moving`` (of those, every |qd| >= ``velocity_min``),
    #: and the ``decimate`` used; None when the samples did not come from :func:`prepare`
    counts: dict | None = None


def prepare(t, q, tau, *, cutoff_hz: float = 5.0, order: int = 4, decimate: int | None = None,
            trim_s: float = 0.2, velocity_min: float = 0.0, poses=None, delay_s: float = 0.0) -> Samples:
    """Filter, differentiate, decimate a log (module docstring, step 1).

    Parameters
    ----------
    t : array_like, shape (N,)
        Sample times [s], uniform.
    q, tau : array_like, shape (N, n)
        Measured positions [rad|m] and torques [N m|N].
    cutoff_hz : float
        Low-pass cut-off [Hz] (several times the excitation's highest harmonic).
    order : int
        Butterworth order (applied forwards and backwards: twice the order, no phase).
    decimate : int, optional
        Keep every k-th sample.  Default: ``round(fs / (2.5 cutoff))``, about
        the correlation length of the filtered residual, so that the rows of
        the regression are nearly independent and the stated standard
        deviations hold.
    trim_s : float
        Drop this much at both ends (filter edge effects) [s].
    velocity_min : float
        Drop samples where any |qd| is below this [rad/s] (stiction).
    poses : array_like, shape (N, 3), optional
        Platform pose hints (3RRR), decimated alongside.
    delay_s : float
        How much the torque signal lags the positions [s] (see :func:`estimate_delay`):
        the torques are read at ``t + delay_s`` (linear interpolation).
    """
    t = np.asarray(t, dtype=float)
    q = np.asarray(q, dtype=float)
    tau = np.asarray(tau, dtype=float)
    if t.ndim != 1 or q.shape != tau.shape or q.ndim != 2 or q.shape[0] != t.size:
        raise ModelError(f"prepare: t (N,), q and tau (N, n) expected, got {t.shape}, {q.shape}, {tau.shape}")
    if not (np.all(np.isfinite(q)) and np.all(np.isfinite(tau)) and np.all(np.isfinite(t))):
        raise ModelError("prepare: the log has non-finite positions, torques or times")
    dt = np.diff(t)
    h = float(np.median(dt))
    if h <= 0 or np.max(np.abs(dt - h)) > 0.01 * h:
        raise ModelError("prepare: the samples are not uniformly spaced in time")
    wn = cutoff_hz * 2.0 * h
    if not 0.0 < wn < 1.0:
        raise ModelError(f"prepare: cut-off {cutoff_hz} Hz must be below the Nyquist frequency {0.5 / h} Hz")
    if delay_s:
        tau = np.stack([np.interp(t + delay_s, t, tau[:, j]) for j in range(tau.shape[1])], axis=1)
    sos = scipy.signal.butter(order, wn, output="sos")
    qf = scipy.signal.sosfiltfilt(sos, q, axis=0)
    tf = scipy.signal.sosfiltfilt(sos, tau, axis=0)
    qd = np.gradient(qf, h, axis=0)
    qdd = np.gradient(qd, h, axis=0)
    # Coulomb column: the sign of the (lightly smoothed) velocity, then the torques' filter
    sos_v = scipy.signal.butter(order, min(4.0 * wn, 0.5), output="sos")
    v_raw = np.gradient(scipy.signal.sosfiltfilt(sos_v, q, axis=0), h, axis=0)
    fc = scipy.signal.sosfiltfilt(sos, np.sign(v_raw), axis=0)
    k = int(round(trim_s / h))
    if decimate is None:
        decimate = max(1, int(round(1.0 / (2.5 * cutoff_hz * h))))
    sel = np.arange(k, t.size - k, max(int(decimate), 1))
    counts = {"window": max(t.size - 2 * k, 0), "decimate": int(decimate), "decimated": int(sel.size)}
    if velocity_min > 0:
        sel = sel[np.all(np.abs(qd[sel]) >= velocity_min, axis=1)]
    counts["moving"] = int(sel.size)
    if sel.size == 0:
        raise ModelError("prepare: no samples left after trimming and the velocity threshold")
    P = None if poses is None else np.asarray(poses, dtype=float)[sel]
    return Samples(t[sel], qf[sel], qd[sel], qdd[sel], tf[sel], P, fc[sel], counts)


def estimate_delay(model: Model, t, q, tau, base: BaseParameters, *, max_delay_s: float = 0.004,
                   offset: bool = False, **prepare_kw) -> float:
    """Lag of the measured torques behind the measured positions [s] (negative: a lead), by least squares.

    A torque read at the end of a control period is the one that acted over
    that period (zero-order hold), plus any current-loop and bus delay: it
    lags the positions by about one period.  Uncorrected, a lag ``d`` adds
    ``-d dtau/dt``, whose inertial part ``-d M qddd`` is nearly
    ``+d w^2 M qd`` on a Fourier excitation: a bias on the viscous
    friction.  The delay minimising the ordinary least-squares residual of the
    base regression over a grid in ``[-max_delay_s, max_delay_s]`` (steps of a
    quarter sample, refined by a parabola through the best three) is returned.
    A lead happens when a drive reports the torque it was just commanded.
    """
    t = np.asarray(t, dtype=float)
    h = float(np.median(np.diff(t)))
    grid = np.arange(-max_delay_s, max_delay_s + 1e-12, 0.25 * h)
    cost = []
    for d in grid:
        data = prepare(t, q, tau, delay_s=float(d), **prepare_kw)
        Y = base.columns(data_regressor(model, data, offset=offset)).reshape(-1, base.rank)
        y = data.tau.reshape(-1)
        x, *_ = np.linalg.lstsq(Y, y, rcond=None)
        cost.append(float(np.sum((y - Y @ x) ** 2)))
    k = int(np.argmin(cost))
    if 0 < k < len(grid) - 1:
        c0, c1, c2 = cost[k - 1], cost[k], cost[k + 1]
        den = c0 - 2 * c1 + c2
        if den > 0:
            return float(grid[k] + 0.5 * (c0 - c2) / den * (grid[1] - grid[0]))
    return float(grid[k])


def data_regressor(model: Model, data: Samples, *, offset: bool = False) -> np.ndarray:
    """Regressor (N, n, p) of processed samples, with their filtered Coulomb columns."""
    Y = regressor(model, data.q, data.qd, data.qdd, offset=offset, poses=data.poses)
    if data.coulomb is not None:
        from .regressor import parameter_set
        ps = parameter_set(model, offset=offset)
        for j in range(ps.dof):
            Y[:, j, ps.drive_index(j, "Fc")] = data.coulomb[:, j]
    return Y


# ---------------------------------------------------------------------------
# physically consistent parametrisation
# ---------------------------------------------------------------------------
def _pseudo(m, h, I):
    S = 0.5 * np.trace(I) * np.eye(3) - I
    J = np.zeros((4, 4))
    J[:3, :3], J[:3, 3], J[3, :3], J[3, 3] = S, h, h, m
    return J


def _chol_params(J: np.ndarray) -> np.ndarray:
    """Lower-triangular Cholesky factor of J, diagonal logged, as a flat vector."""
    k = J.shape[0]
    w, V = np.linalg.eigh(J)
    floor = 1e-6 * max(float(w.max()), 1e-9)
    J = (V * np.maximum(w, floor)) @ V.T
    L = np.linalg.cholesky(J)
    out = []
    for i in range(k):
        for j in range(i + 1):
            out.append(np.log(L[i, j]) if i == j else L[i, j])
    return np.array(out)


def _chol_matrix(x: np.ndarray, k: int) -> np.ndarray:
    L = np.zeros((k, k))
    c = 0
    for i in range(k):
        for j in range(i + 1):
            L[i, j] = np.exp(x[c]) if i == j else x[c]
            c += 1
    return L @ L.T


def log_cholesky(pset: ParameterSet, pi: np.ndarray) -> np.ndarray:
    """Free parameters theta (log-Cholesky, squares) of a standard parameter vector pi.

    Pseudo-inertias that are not positive definite are lifted to a small positive floor.
    """
    pi = np.asarray(pi, dtype=float)
    out = []
    for b, size in enumerate(pset.body_size):
        p = pi[pset.body_slice(b)]
        if size == 10:
            m, h = p[0], p[1:4]
            I = np.array([[p[4], p[5], p[7]], [p[5], p[6], p[8]], [p[7], p[8], p[9]]])
            out.append(_chol_params(_pseudo(m, h, I)))
        elif size == 3:
            out.append(_chol_params(np.array([[p[0], p[1]], [p[1], p[2]]])))
        else:
            out.append(np.log(np.maximum(p, 1e-9)))
    d = pi[pset.n_inertial:].reshape(pset.dof, pset.drive_size)
    # floored away from 0, where the square's derivative vanishes (no gradient to leave it)
    drv = np.sqrt(np.maximum(d[:, :3], 1e-4))
    out.append(np.concatenate([drv, d[:, 3:]], axis=1).ravel())
    return np.concatenate(out)


def physical_parameters(pset: ParameterSet, theta: np.ndarray) -> np.ndarray:
    """Standard parameters pi of the free parameters theta (inverse of :func:`log_cholesky`)."""
    theta = np.asarray(theta, dtype=float)
    pi = np.empty(pset.size)
    c = 0
    for b, size in enumerate(pset.body_size):
        sl = pset.body_slice(b)
        if size == 10:
            J = _chol_matrix(theta[c:c + 10], 4)
            c += 10
            S, h, m = J[:3, :3], J[:3, 3], J[3, 3]
            I = np.trace(S) * np.eye(3) - S
            pi[sl] = [m, *h, I[0, 0], I[0, 1], I[1, 1], I[0, 2], I[1, 2], I[2, 2]]
        elif size == 3:
            J = _chol_matrix(theta[c:c + 3], 2)
            c += 3
            pi[sl] = [J[0, 0], J[0, 1], J[1, 1]]
        else:
            pi[sl] = np.exp(theta[c:c + size])
            c += size
    ds = pset.drive_size
    d = theta[c:c + pset.dof * ds].reshape(pset.dof, ds)
    drv = np.concatenate([d[:, :3] ** 2, d[:, 3:]], axis=1)
    pi[pset.n_inertial:] = drv.ravel()
    return pi


# ---------------------------------------------------------------------------
# estimation
# ---------------------------------------------------------------------------
@dataclass
class Estimate:
    """Result of :func:`identify`.

    Attributes
    ----------
    base : BaseParameters
    base_ls : ndarray, shape (r,)
        Weighted least-squares base parameters.
    base_std : ndarray, shape (r,)
        Their standard deviations (from the weighted residual).
    sigma : ndarray, shape (n,)
        Per-joint torque residual standard deviation of the OLS fit [N m].
    pi : ndarray, shape (p,)
        Physically consistent standard parameters.
    base_pc : ndarray, shape (r,)
        ``K pi``: the base parameters of the consistent estimate.
    n_samples : int
    cond : float
        Condition number of the (column-normalised) base regressor of the data.
    """

    base: BaseParameters
    base_ls: np.ndarray
    base_std: np.ndarray
    sigma: np.ndarray
    pi: np.ndarray
    base_pc: np.ndarray
    n_samples: int
    cond: float
    info: dict = field(default_factory=dict)


def identify(model: Model, data: Samples, base: BaseParameters, *, offset: bool = False,
             prior=None, prior_weight: float = 1e-3) -> Estimate:
    """Estimate base and physically consistent standard parameters (module docstring).

    Parameters
    ----------
    model : SerialModel or Planar3RRR
        Nominal model: geometry for the regressor; its parameters are the prior.
    data : Samples
        From :func:`prepare`.
    base : BaseParameters
        Of the same model and ``offset`` flag.
    prior : array_like, shape (p,), optional
        Prior standard parameters (default: the model's).
    prior_weight : float
        Weight of the prior residuals ``(pi - prior) / scale`` relative to one whitened torque sample.
    """
    from .regressor import standard_parameters

    Y = data_regressor(model, data, offset=offset)         # (N, n, p)
    N, n, p = Y.shape
    Wb = base.columns(Y)                                   # (N, n, r)
    r = Wb.shape[-1]
    if N * n <= r:
        raise ModelError(f"identify: {N * n} torque samples cannot determine {r} base parameters")
    tau = data.tau
    A = Wb.reshape(-1, r)
    y = tau.reshape(-1)
    x_ols, *_ = np.linalg.lstsq(A, y, rcond=None)
    res = (y - A @ x_ols).reshape(N, n)
    dof_j = max(N - r / n, 1.0)
    sigma = np.sqrt(np.sum(res ** 2, axis=0) / dof_j)
    sigma = np.maximum(sigma, 1e-12 * max(float(np.abs(tau).max()), 1.0))
    w = np.tile(1.0 / sigma, N)
    Aw = A * w[:, None]
    yw = y * w
    x_wls, *_ = np.linalg.lstsq(Aw, yw, rcond=None)
    resw = yw - Aw @ x_wls
    s2 = float(resw @ resw) / max(N * n - r, 1)
    cov = s2 * np.linalg.pinv(Aw.T @ Aw)
    std = np.sqrt(np.maximum(np.diag(cov), 0.0))
    norms = np.linalg.norm(A, axis=0)
    sv = np.linalg.svd(A / np.where(norms > 0, norms, 1.0), compute_uv=False)
    cond = float(sv[0] / sv[-1]) if sv[-1] > 0 else np.inf
    # physically consistent standard parameters
    pset = base.pset
    pi0 = standard_parameters(model, offset=offset) if prior is None else np.asarray(prior, dtype=float)
    scale = _prior_scale(pset, pi0)
    Ws = Y.reshape(-1, p) * w[:, None]
    sw = np.sqrt(prior_weight)
    # the data residual is linear in pi: with Ws = Q R, |Ws pi - yw|^2 = |R pi - Q^T yw|^2 + const,
    # so the fit works on p rows instead of N n
    Qs, Rs = np.linalg.qr(Ws)
    ys = Qs.T @ yw
    Ws, yw_s = Rs, ys

    def fun(theta):
        pi = physical_parameters(pset, theta)
        return np.concatenate([Ws @ pi - yw_s, sw * (pi - pi0) / scale])

    def jac(theta):
        # chain rule through the cheap map theta -> pi (central differences of that map only)
        D = np.empty((p, theta.size))
        for k in range(theta.size):
            e = np.zeros_like(theta)
            e[k] = 1e-6 * max(1.0, abs(theta[k]))
            D[:, k] = (physical_parameters(pset, theta + e) - physical_parameters(pset, theta - e)) / (2 * e[k])
        return np.vstack([Ws @ D, sw * D / scale[:, None]])

    theta0 = log_cholesky(pset, pi0)
    sol = scipy.optimize.least_squares(fun, theta0, jac=jac, method="trf", max_nfev=300)
    pi = physical_parameters(pset, sol.x)
    return Estimate(base, x_wls, std, sigma, pi, base.base(pi), N, cond,
                    {"ls_status": int(sol.status), "ls_cost": float(sol.cost), "s2": s2})


def _prior_scale(pset: ParameterSet, pi0: np.ndarray) -> np.ndarray:
    """Per-parameter prior scale: |pi0|, floored by 10 % of the largest value of the same unit."""
    units = np.array(pset.units)
    out = np.abs(pi0).astype(float)
    for u in set(pset.units):
        sel = units == u
        top = float(np.max(np.abs(pi0[sel]))) if np.any(sel) else 0.0
        out[sel] = np.maximum(out[sel], 0.1 * top if top > 0 else 1e-3)
    return out


def torque_prediction_errors(tau_meas: np.ndarray, tau_pred: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-joint RMS error [N m] and NRMSE (RMS error / RMS of the measured torque), each (n,)."""
    e = np.asarray(tau_pred, float) - np.asarray(tau_meas, float)
    rms = np.sqrt(np.mean(e ** 2, axis=0))
    ref = np.sqrt(np.mean(np.asarray(tau_meas, float) ** 2, axis=0))
    return rms, rms / np.where(ref > 0, ref, np.inf)
