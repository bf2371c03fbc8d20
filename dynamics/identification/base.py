"""Base (identifiable) parameters by QR decomposition with column pivoting.

The columns of the stacked regressor ``W`` (samples x standard parameters) are
linearly dependent: some parameters have no effect (zero columns), others act
only in fixed combinations.  On ``W`` built from random states (the method of
Gautier, "Numerical calculation of the base inertial parameters of robots",
1991) a QR decomposition with column pivoting ``W P = Q R`` gives the rank
``r`` (diagonal of ``R`` above a tolerance), the independent columns ``P1``
(the first ``r`` pivots) and, with ``R = [[R1, R2], [0, ~0]]``,
``beta = R1^-1 R2`` such that ``W_P2 = W_P1 beta``.  Hence::

    W pi = W_P1 (pi_P1 + beta pi_P2) = W_b pi_b,     pi_b = K pi

``K`` (r x p) is the map from standard to base parameters.  Each base
parameter is named by its leading standard parameter and carries the
combination in :attr:`BaseParameters.expressions`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.linalg

from ..base import Model
from ..errors import ModelError
from .regressor import ParameterSet, parameter_set, stacked_regressor

__all__ = ["BaseParameters", "base_parameters", "random_states"]


@dataclass(frozen=True)
class BaseParameters:
    """The standard -> base parameter map of a model.

    Attributes
    ----------
    pset : ParameterSet
        Layout of the standard parameters (p entries).
    independent : ndarray of int, shape (r,)
        Standard parameters whose regressor columns form the base regressor.
    dependent : ndarray of int, shape (p - r,)
        The others (zero columns or combinations of independent ones).
    beta : ndarray, shape (r, p - r)
        ``W[:, dependent] = W[:, independent] @ beta`` (entries below 1e-10 zeroed).
    K : ndarray, shape (r, p)
        ``pi_base = K @ pi_standard``.
    """

    pset: ParameterSet
    independent: np.ndarray
    dependent: np.ndarray
    beta: np.ndarray
    K: np.ndarray

    @property
    def rank(self) -> int:
        """Number of base parameters r."""
        return len(self.independent)

    @property
    def names(self) -> tuple:
        """One name per base parameter: its leading standard parameter."""
        return tuple(self.pset.names[i] for i in self.independent)

    @property
    def expressions(self) -> tuple:
        """Each base parameter as a readable combination of standard parameters."""
        out = []
        for r in range(self.rank):
            terms = [self.pset.names[self.independent[r]]]
            for c, j in enumerate(self.dependent):
                b = self.beta[r, c]
                if b != 0.0:
                    terms.append(f"{'+' if b > 0 else '-'} {abs(b):.6g} {self.pset.names[j]}")
            out.append(" ".join(terms))
        return tuple(out)

    def base(self, pi: np.ndarray) -> np.ndarray:
        """Base parameters ``K pi``, shape (r,) (or (..., r))."""
        return np.asarray(pi, dtype=float) @ self.K.T

    def columns(self, Y: np.ndarray) -> np.ndarray:
        """Base regressor: the independent columns of a regressor ``Y`` (..., p) -> (..., r)."""
        return np.asarray(Y)[..., self.independent]

    def report(self) -> str:
        """What is and is not identifiable, one line per standard parameter."""
        lines = [f"{self.rank} base parameters out of {self.pset.size} standard parameters"]
        for r, expr in enumerate(self.expressions):
            lines.append(f"  b{r + 1:<3d} = {expr}")
        none = [self.pset.names[j] for c, j in enumerate(self.dependent) if not np.any(self.beta[:, c])]
        grouped = [self.pset.names[j] for c, j in enumerate(self.dependent) if np.any(self.beta[:, c])]
        alone = [self.pset.names[i] for r, i in enumerate(self.independent) if not np.any(self.beta[r])]
        lines.append("identifiable on their own: " + (", ".join(alone) or "none"))
        lines.append("identifiable only in the combinations above: " + (", ".join(grouped) or "none"))
        lines.append("no effect on the torques (not identifiable): " + (", ".join(none) or "none"))
        return "\n".join(lines)


def random_states(model: Model, n_samples: int, rng: np.random.Generator, *,
                  velocity_scale: float = 2.0, acceleration_scale: float = 5.0):
    """Random joint states (q, qd, qdd, poses), each (N, n) (poses (N, 3) for the 3RRR, else None).

    Serial arms: q uniform in the position limits (``[-pi, pi]`` where unbounded).
    3RRR: platform poses uniform in a box around the home pose (+-30 % of the
    platform-joint radius, +-0.3 rad), mapped by inverse kinematics, singular
    poses skipped.
    Mechanisms: actuated coordinates uniform within +-0.3 rad (+-0.3 ``length_scale``
    for prismatic joints) of the home configuration, clipped to the position limits,
    kept where forward kinematics solves (home assembly mode) and the pose is regular.
    """
    n = model.dof
    qd = rng.normal(scale=velocity_scale, size=(n_samples, n))
    qdd = rng.normal(scale=acceleration_scale, size=(n_samples, n))
    if hasattr(model, "platform_joints"):
        home = model.home_pose
        r = float(np.mean(np.linalg.norm(model.platform_joints, axis=1)))
        q, poses = [], []
        while len(q) < n_samples:
            X = home + rng.uniform(-1.0, 1.0, 3) * np.array([0.3 * r, 0.3 * r, 0.3])
            try:
                th = model.inverse_kinematics(X)
                if model.singularity(th, X).kind != "regular":
                    continue
            except ModelError:
                continue
            q.append(th)
            poses.append(X)
        return np.array(q), qd, qdd, np.array(poses)
    if model.family == "mechanism":
        step = np.where(np.array(model.joint_types) == "prismatic", 0.3 * model.spec.length_scale, 0.3)
        q = []
        tries = 0
        while len(q) < n_samples:
            tries += 1
            if tries > 50 * n_samples:
                raise ModelError(f"{model.name}: fewer than {n_samples} regular configurations near home")
            th = np.clip(model.home_q + rng.uniform(-1.0, 1.0, n) * step, model.limits.position_min,
                         model.limits.position_max)
            try:
                if model.singularity(th).kind != "regular":
                    continue
            except ModelError:
                continue
            q.append(th)
        return np.array(q), qd, qdd, None
    lo = np.where(np.isfinite(model.limits.position_min), model.limits.position_min, -np.pi)
    hi = np.where(np.isfinite(model.limits.position_max), model.limits.position_max, np.pi)
    q = rng.uniform(np.maximum(lo, -np.pi), np.minimum(hi, np.pi), size=(n_samples, n))
    return q, qd, qdd, None


def base_parameters(model: Model, *, offset: bool = False, n_samples: int = 200, seed: int = 0,
                    tol: float = 1e-8) -> BaseParameters:
    """Compute the base parameters of ``model`` (module docstring).

    Parameters
    ----------
    model : SerialModel or Planar3RRR
    offset : bool
        Include per-joint torque offsets among the standard parameters.
    n_samples : int
        Random states stacked into W (each adds n rows).
    seed : int
        Seed of the random states (the result does not depend on it beyond round-off).
    tol : float
        Rank tolerance relative to the largest diagonal entry of R.
    """
    ps = parameter_set(model, offset=offset)
    rng = np.random.default_rng(seed)
    q, qd, qdd, poses = random_states(model, n_samples, rng)
    W = stacked_regressor(model, q, qd, qdd, offset=offset, poses=poses)
    _, R, piv = scipy.linalg.qr(W, mode="economic", pivoting=True)
    d = np.abs(np.diag(R))
    r = int(np.sum(d > tol * d[0]))
    ind, dep = piv[:r], piv[r:]
    beta = scipy.linalg.solve_triangular(R[:r, :r], R[:r, r:]) if dep.size else np.zeros((r, 0))
    beta[np.abs(beta) < 1e-10] = 0.0
    # keep the natural order of the independent parameters (readable reports)
    order = np.argsort(ind)
    ind, beta = ind[order], beta[order]
    order_d = np.argsort(dep)
    dep, beta = dep[order_d], beta[:, order_d]
    K = np.zeros((r, ps.size))
    K[np.arange(r), ind] = 1.0
    K[:, dep] = beta
    return BaseParameters(ps, ind, dep, beta, K)
