"""Excitation trajectories for dynamic parameter identification.

A finite Fourier series per coordinate (Swevers, Ganseman, Tukel, De Schutter
and Van Brussel, "Optimal robot excitation and identification", 1997)::

    x_i(t) = x0_i + sum_k  a_ik / (k wf) sin(k wf t) - b_ik / (k wf) (cos(k wf t) - 1)

with ``wf = 2 pi / period_s`` and k = 1..K.  ``x(0) = x0`` by construction;
the first harmonic's coefficients are eliminated so that the velocity and the
acceleration are zero at t = 0 (``sum_k a_ik = 0``, ``sum_k k b_ik = 0``), and
since the series is periodic it also ends at rest at ``x0`` after any whole
number of periods.

:func:`design_excitation` chooses the free coefficients to minimise the
condition number of the (column-normalised) base regressor sampled along one
period, or to maximise its log-determinant, under position (amplitude about
the start), velocity, acceleration and torque limits (torques from the
nominal model, friction included).  Serial arms are excited in joint space;
the planar 3RRR in task space (x, y, phi about the home pose), keeping the
singularity margin above a bound so the path stays in the singularity-free
workspace, mapped to the actuators by :class:`JointSpaceTrajectory`.

The optimiser is scipy's L-BFGS-B on a smooth penalty of the limit
violations; the result is then scaled (bisection on the amplitude) until a
check on a fine grid finds no violation, so the returned trajectory always
meets the limits it was given.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import scipy.optimize

from dynamics.base import Model, ParallelModel
from dynamics.errors import ModelError, TrajectoryError

from .base import Trajectory, check_duration
from .mapping import JointSpaceTrajectory

__all__ = ["FourierSeries", "ExcitationLimits", "design_excitation", "excitation_criterion"]


class FourierSeries(Trajectory):
    """A finite Fourier series that starts and ends at rest at ``start`` (module docstring).

    Parameters
    ----------
    start : array_like, shape (dim,)
        ``x0`` [rad|m].
    a, b : array_like, shape (dim, K - 1)
        Free sine/cosine coefficients of harmonics 2..K [unit/s]; harmonic 1 is
        fixed by the rest conditions.
    period_s : float
        Fundamental period [s].
    periods : int
        Number of periods in the trajectory (duration ``periods * period_s``).
    """

    def __init__(self, start, a, b, period_s: float, periods: int = 1, names=None):
        self.x0 = np.asarray(start, dtype=float).ravel()
        a = np.asarray(a, dtype=float)
        b = np.asarray(b, dtype=float)
        dim = self.x0.size
        if a.ndim != 2 or a.shape[0] != dim or b.shape != a.shape:
            raise TrajectoryError(f"coefficients must have shape ({dim}, K-1), got {a.shape} and {b.shape}")
        if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b)) and np.all(np.isfinite(self.x0))):
            raise TrajectoryError("Fourier coefficients and start must be finite")
        self.period_s = check_duration(period_s, "period_s")
        if int(periods) != periods or periods < 1:
            raise TrajectoryError(f"periods must be a whole number >= 1, got {periods!r}")
        self.periods = int(periods)
        k = np.arange(2, a.shape[1] + 2)
        self.a_free, self.b_free = a.copy(), b.copy()
        self.A = np.concatenate([-a.sum(axis=1, keepdims=True), a], axis=1)
        self.B = np.concatenate([-(b * k).sum(axis=1, keepdims=True), b], axis=1)
        self.wf = 2.0 * math.pi / self.period_s
        self._k = np.arange(1, a.shape[1] + 2) * self.wf
        self.names = names

    @property
    def duration_s(self) -> float:
        return self.periods * self.period_s

    @property
    def dim(self) -> int:
        return self.x0.size

    @property
    def harmonics(self) -> int:
        return self.A.shape[1]

    def _eval(self, t):
        w = self._k[None, :] * t[:, None]               # (N, K)
        s, c = np.sin(w), np.cos(w)
        A, B, k = self.A, self.B, self._k
        pos = self.x0 + s @ (A / k).T - (c - 1.0) @ (B / k).T
        vel = c @ A.T + s @ B.T
        acc = -s @ (A * k).T + c @ (B * k).T
        jerk = -c @ (A * k * k).T - s @ (B * k * k).T
        return pos, vel, acc, jerk

    def as_dict(self) -> dict:
        """The coefficients as a plain dict (for logs and ``type = "fourier"`` configs)."""
        return {"start": self.x0.tolist(), "a": self.a_free.tolist(), "b": self.b_free.tolist(),
                "period_s": self.period_s, "periods": self.periods}


@dataclass
class ExcitationLimits:
    """Bounds the excitation must respect; arrays of shape (dim,) or None (unchecked).

    ``amplitude`` bounds ``|x - x0|`` (joint space: rad|m; 3RRR task space:
    [m, m, rad]); ``velocity``, ``acceleration``, ``torque`` bound the actuator
    rates [rad/s, rad/s^2] and torques [N m]; ``position_min``/``max`` the
    actuator positions; ``singularity_margin`` (parallel robots) the minimum
    :attr:`SingularityReport.margin` along the path.
    """

    amplitude: np.ndarray
    velocity: np.ndarray | None = None
    acceleration: np.ndarray | None = None
    torque: np.ndarray | None = None
    position_min: np.ndarray | None = None
    position_max: np.ndarray | None = None
    singularity_margin: float = 0.0


def _relu_sq(x):
    return float(np.sum(np.maximum(x, 0.0) ** 2))


class _Problem:
    """Evaluate the criterion and limit violations of coefficient vectors."""

    def __init__(self, model: Model, x0, K, period_s, limits: ExcitationLimits, n_grid, basis,
                 criterion, task: bool):
        self.model, self.x0, self.K, self.period = model, np.asarray(x0, float), K, period_s
        self.lim, self.basis, self.criterion, self.task = limits, basis, criterion, task
        # a closed chain excited in joint space (a mechanism file): the singularity margin is
        # checked along the path as for the task-space excitation
        self.closed = isinstance(model, ParallelModel) and not task
        self.t = np.linspace(0.0, period_s, n_grid, endpoint=False)
        self.dim = self.x0.size

    def traj(self, z, scale=1.0):
        z = np.asarray(z, dtype=float) * scale
        h = self.dim * (self.K - 1)
        return FourierSeries(self.x0, z[:h].reshape(self.dim, -1), z[h:].reshape(self.dim, -1), self.period)

    def states(self, traj, t):
        s = traj.sample(t)
        m = self.model
        if self.closed:
            rows = getattr(m, "singularity_margins", None)
            if callable(rows):  # the same margins on all rows at once (a mechanism file)
                return s.pos, s.vel, s.acc, None, float(np.min(rows(s.pos), initial=np.inf))
            worst = np.inf
            for k in range(len(t)):
                rep = m.singularity(s.pos[k])
                if rep.kind != "regular":
                    raise ModelError("singular")
                worst = min(worst, rep.margin)
            return s.pos, s.vel, s.acc, None, worst
        if not self.task:
            return s.pos, s.vel, s.acc, None, 0.0
        q = np.empty_like(s.pos)
        worst = np.inf
        for k in range(len(t)):
            th = m.inverse_kinematics(s.pos[k])
            rep = m.singularity(th, s.pos[k])
            worst = min(worst, rep.margin if rep.kind == "regular" else 0.0)
            if rep.kind != "regular":
                raise ModelError("singular")
            q[k] = th
        batch = getattr(m, "joint_rates_batch", None)
        if callable(batch):     # the rate maps below on all rows at once (the same numbers)
            qd, qdd = batch(q, s.pos, s.vel, s.acc)
            return q, qd, qdd, s.pos, worst
        qd = np.empty_like(s.pos); qdd = np.empty_like(s.pos)
        for k in range(len(t)):
            qd[k] = m.joint_velocity(q[k], s.pos[k], s.vel[k])
            qdd[k] = m.joint_acceleration(q[k], s.pos[k], s.vel[k], s.acc[k])
        return q, qd, qdd, s.pos, worst

    def violation(self, traj, t):
        """(sum of squared relative violations, states) on the grid t."""
        lim = self.lim
        s = traj.sample(t)
        v = _relu_sq(np.abs(s.pos - self.x0) / lim.amplitude - 1.0)
        try:
            q, qd, qdd, poses, margin = self.states(traj, t)
        except ModelError:
            return 1e6, None
        if lim.velocity is not None:
            v += _relu_sq(np.abs(qd) / lim.velocity - 1.0)
        if lim.acceleration is not None:
            v += _relu_sq(np.abs(qdd) / lim.acceleration - 1.0)
        if lim.position_min is not None:
            span = np.where(np.isfinite(lim.position_max - lim.position_min),
                            lim.position_max - lim.position_min, 1.0)
            v += _relu_sq((lim.position_min - q) / span) + _relu_sq((q - lim.position_max) / span)
        if lim.singularity_margin > 0 and (self.task or self.closed):
            v += _relu_sq(1.0 - margin / lim.singularity_margin)
        Y = None
        if lim.torque is not None and np.any(np.isfinite(lim.torque)):
            try:        # a mechanism's regressor solves its closures again: may find none
                Y = self.basis.full(q, qd, qdd, poses)
            except ModelError:
                return 1e6, None
            tau = Y @ self.basis.pi
            v += _relu_sq(np.abs(tau) / lim.torque - 1.0)
        return v, (q, qd, qdd, poses, Y)

    def cost(self, z):
        traj = self.traj(z)
        v, st = self.violation(traj, self.t)
        if st is None:
            return 1e6
        try:
            W = self.basis.base_columns(*st)     # reuses the regressor of the torque check
        except ModelError:                       # (no torque limit: the first regressor call)
            return 1e6
        c = excitation_criterion(W, self.criterion)
        return (math.log(c) if self.criterion == "cond" else c) + 1e2 * v


class _Basis:
    def __init__(self, model, bp, pi):
        self.model, self.bp, self.pi = model, bp, pi

    def full(self, q, qd, qdd, poses):
        from dynamics.identification.regressor import regressor
        return regressor(self.model, q, qd, qdd, poses=poses)

    def base_columns(self, q, qd, qdd, poses, Y=None):
        Y = self.full(q, qd, qdd, poses) if Y is None else Y.copy()
        # a smooth Coulomb column keeps the criterion differentiable where a velocity
        # crosses zero on the grid (sign() jumps there: the line search would stall)
        ps = self.bp.pset
        for j in range(ps.dof):
            Y[:, j, ps.drive_index(j, "Fc")] = np.tanh(qd[:, j] / 0.02)
        return self.bp.columns(Y).reshape(-1, self.bp.rank)


def excitation_criterion(W: np.ndarray, criterion: str = "cond") -> float:
    """Criterion to minimise for a stacked base regressor W (rows x r).

    ``"cond"``: 2-norm condition number of W with unit-norm columns (independent
    of the parameter units); ``"logdet"``: ``-log det(Wn^T Wn)`` of the same
    normalised matrix (D-optimality).
    """
    norms = np.linalg.norm(W, axis=0)
    if np.any(norms <= 1e-12):
        return 1e6
    Wn = W / norms
    if criterion == "cond":
        s = np.linalg.svd(Wn, compute_uv=False)
        return float(min(s[0] / max(s[-1], 1e-300), 1e6))
    if criterion == "logdet":
        sign, ld = np.linalg.slogdet(Wn.T @ Wn)
        return float(-ld) if sign > 0 else 1e6
    raise TrajectoryError(f"unknown excitation criterion {criterion!r} (use 'cond' or 'logdet')")


def design_excitation(model: Model, limits: ExcitationLimits, *, start=None, harmonics: int = 5,
                      period_s: float = 10.0, periods: int = 1, iterations: int = 40, seed: int = 0,
                      criterion: str = "cond", n_grid: int = 80, check_dt_s: float = 0.01,
                      base=None, starts: int = 4):
    """Optimised excitation trajectory (module docstring).

    Parameters
    ----------
    model : SerialModel, Planar3RRR or MechanismModel
        Nominal model: geometry for the regressor, torques for the torque limit.
    limits : ExcitationLimits
        ``amplitude`` is required (dim: ``model.dof``, or the task dimension 3 for the 3RRR).
    start : array_like, optional
        Rest pose x0: joint positions (default zeros; mechanism files: the home
        configuration) or, for the 3RRR, the platform pose (default: the home pose).
    harmonics : int
        K >= 2.
    period_s, periods : float, int
        Fundamental period [s] and number of periods executed.
    iterations : int
        L-BFGS-B iterations (0: keep the seeded random start, scaled to the limits).
    seed : int
        Seed of the random initial coefficients.
    starts : int
        Random starts (drawn one after the other from ``seed``'s generator); the
        design with the best criterion is kept.  The criterion is far from convex:
        on the seed-000 arm single starts end between condition numbers 39 and 270.
    criterion : {"cond", "logdet"}
    n_grid : int
        Samples per period for the criterion and the penalty.
    check_dt_s : float
        Grid of the final limit check [s].
    base : BaseParameters, optional
        Precomputed base parameters of ``model``.

    Returns
    -------
    trajectory : FourierSeries (serial) or JointSpaceTrajectory (3RRR, ``.task`` the series)
    info : dict
        ``criterion`` value of the result, ``scale`` applied, ``iterations`` run.
    """
    from dynamics.identification.base import base_parameters
    from dynamics.identification.regressor import standard_parameters

    if harmonics < 2:
        raise TrajectoryError(f"harmonics must be >= 2, got {harmonics}")
    # mechanism files: joint-space excitation about the home configuration (singularity margin
    # checked along it); other parallel models: task space
    closed = model.family == "mechanism"
    task = isinstance(model, ParallelModel) and not closed
    if task and not hasattr(model, "joint_acceleration"):
        raise TrajectoryError(f"{model.name}: task-space excitation needs the 3RRR model")
    dim = 3 if task else model.dof
    home = model.home_pose if task else model.home_q if closed else np.zeros(dim)
    x0 = home if start is None else np.asarray(start, float)
    if x0.shape != (dim,):
        raise TrajectoryError(f"excitation start must have {dim} entries, got {x0.shape}")
    amp = np.broadcast_to(np.asarray(limits.amplitude, float), (dim,)).copy()
    if np.any(amp <= 0) or not np.all(np.isfinite(amp)):
        raise TrajectoryError("excitation amplitude bounds must be finite and > 0")
    limits.amplitude = amp
    bp = base if base is not None else base_parameters(model)
    prob = _Problem(model, x0, harmonics, period_s, limits, n_grid,
                    _Basis(model, bp, standard_parameters(model)), criterion, task)
    if int(starts) < 1:
        raise TrajectoryError(f"starts must be >= 1, got {starts}")
    rng = np.random.default_rng(seed)
    h = dim * (harmonics - 1)
    # random starts: harmonic amplitudes falling with k, position deviation ~ amplitude
    kk = np.tile(np.arange(2, harmonics + 1), dim).astype(float)
    wscale = np.repeat(amp, harmonics - 1) * prob.traj(np.zeros(2 * h)).wf
    fine = np.arange(0.0, period_s + 0.5 * check_dt_s, check_dt_s)
    dense = np.arange(0.0, period_s + 0.05 * check_dt_s, 0.1 * check_dt_s)
    best, failed = None, []
    for i in range(int(starts)):
        z0 = np.concatenate([rng.normal(size=h) * wscale / kk, rng.normal(size=h) * wscale])
        z0 *= 0.8 * _feasible_scale(prob, z0, prob.t)
        info = {"iterations": 0}
        if iterations > 0:
            res = scipy.optimize.minimize(prob.cost, z0, method="L-BFGS-B",
                                          options={"maxiter": int(iterations),
                                                   "maxfun": 40 * int(iterations) * 2 * h})
            z = res.x
            info["iterations"] = int(res.nit)
            info["message"] = str(res.message)
        else:
            z = z0
        sc = _feasible_scale(prob, z, fine)
        # between the check grid's points a limit can still be passed (by up to about the next
        # derivative's peak x dt^2 / 8): the scaled result checked again on a grid ten times
        # finer, and scaled down further where that finds a violation
        if prob.violation(prob.traj(z, sc), dense)[0] != 0.0:
            sc *= _feasible_scale(prob, z * sc, dense)
        z = z * sc
        traj = prob.traj(z)
        try:
            st = prob.states(traj, prob.t)
            info["criterion"] = excitation_criterion(prob.basis.base_columns(*st[:4]), criterion)
        except ModelError as err:   # (a mechanism: no configuration somewhere on the path)
            failed.append(f"start {i}: {err}")
            continue
        info["scale"] = sc
        info["start"] = i
        if best is None or info["criterion"] < best[1]["criterion"]:
            best = (traj, info)
    if best is None:
        raise TrajectoryError(f"{model.name}: no excitation design of {int(starts)} random start(s) "
                              f"(seed {seed}) can be evaluated along its path: {'; '.join(failed)}")
    traj, info = best
    info["starts"] = int(starts)
    out = FourierSeries(x0, traj.a_free, traj.b_free, period_s, periods,
                        names=None if task else tuple(model.joint_names))
    if task:
        out.names = ("x", "y", "phi")
        return JointSpaceTrajectory(out, model), info
    return out, info


def _feasible_scale(prob: _Problem, z, t) -> float:
    """Largest s in (0, 1] (bisection) with no limit violation of ``s z`` on grid t."""
    if prob.violation(prob.traj(z), t)[0] == 0.0:
        return 1.0
    lo, hi = 0.0, 1.0
    for _ in range(30):
        mid = 0.5 * (lo + hi)
        if prob.violation(prob.traj(z, mid), t)[0] == 0.0:
            lo = mid
        else:
            hi = mid
    if lo == 0.0:
        raise TrajectoryError("no excitation amplitude meets the limits (is the start pose inside them?)")
    return lo
