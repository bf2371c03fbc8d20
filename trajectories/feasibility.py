"""Feasibility of a trajectory for a model, and uniform time scaling to the limits.

:func:`check_feasibility` samples a trajectory on a time grid and checks, in
this order at each time: reachability (inverse kinematics), singularity
proximity (parallel robots, ``SingularityReport.margin``), actuator position,
velocity, acceleration and torque limits (torques from the model's inverse
dynamics: ``task_inverse_dynamics`` for parallel robots when task states are
known, ``inverse_dynamics`` otherwise; friction is not included).  The report
names the first violation (time, axis, quantity, value, limit) and holds the
first violation of every (quantity, axis) pair and the peak usage ratios.

:func:`time_scale_to_limits` finds the smallest uniform time-scaling factor
``k >= 1`` (``y(t) = x(t / k)``) that satisfies velocity, acceleration and
torque limits.  For rigid-body dynamics the torque of the scaled trajectory at
the same path point is exactly ``tau_s + (tau_1 - tau_s) / k^2`` where
``tau_s`` is the static torque (gravity and external wrench) and ``tau_1`` the
torque of the unscaled motion, so ``k`` is computed in closed form per sample
and axis (no search needed); position, reachability and singularity
violations cannot be fixed by scaling and raise
:class:`~dynamics.errors.InfeasibleTrajectoryError`, as do static torques
above the limits.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from dynamics.base import Model, ParallelModel
from dynamics.errors import InfeasibleTrajectoryError, KinematicsError, SingularityError, TrajectoryError

from .base import Trajectory, TimeScaled, check_duration
from .mapping import JointSpaceTrajectory, Tabulated, _Mapped, map_parallel

__all__ = ["Violation", "FeasibilityReport", "check_feasibility", "time_scale_to_limits",
           "QUANTITIES"]

#: checked quantities, in the order used to break ties at the same time
QUANTITIES = ("reachability", "singularity", "position", "velocity", "acceleration", "torque")


@dataclass(frozen=True)
class Violation:
    """One limit violation.

    Attributes
    ----------
    t_s : float
        Time of the (first) violation [s].
    quantity : str
        One of :data:`QUANTITIES`.
    axis : int or None
        Actuator index (None for whole-robot checks: reachability, singularity).
    axis_name : str or None
    value, limit : float
        Offending value and the bound it crosses (signed value; for
        singularity the margin and the threshold).
    message : str
    """

    t_s: float
    quantity: str
    axis: int | None
    axis_name: str | None
    value: float
    limit: float
    message: str = ""

    def __str__(self) -> str:
        where = f" axis {self.axis_name}" if self.axis_name is not None else ""
        return f"t = {self.t_s:.4f} s:{where} {self.quantity} {self.message}"


@dataclass(frozen=True)
class FeasibilityReport:
    """Result of :func:`check_feasibility`.

    Attributes
    ----------
    ok : bool
        True when nothing is violated.
    first : Violation or None
        The earliest violation (ties broken by :data:`QUANTITIES` order, then axis).
    violations : tuple of Violation
        The first violation of each (quantity, axis) pair, sorted by time.
    peak_ratio : dict
        Quantity -> array (n,) of max |value| / limit over the samples (0 where
        unbounded; position: max over both bounds of the distance into the
        range, as a fraction of the limit's magnitude is not meaningful, so the
        entry is the largest overshoot [rad|m], 0 when inside).
    times_s : ndarray
        Sample times checked.
    min_singularity_margin : float or None
        Smallest ``SingularityReport.margin`` seen (parallel robots).
    """

    ok: bool
    first: Violation | None
    violations: tuple
    peak_ratio: dict = field(default_factory=dict)
    times_s: np.ndarray = field(default_factory=lambda: np.zeros(0))
    min_singularity_margin: float | None = None

    def __str__(self) -> str:
        if self.ok:
            return f"feasible ({len(self.times_s)} samples)"
        return f"infeasible, first violation at {self.first}"

    def raise_if_infeasible(self) -> None:
        """Raise :class:`InfeasibleTrajectoryError` describing the first violation."""
        if not self.ok:
            raise InfeasibleTrajectoryError(f"trajectory infeasible: {self.first}")


def _vector_or_none(x, n, name):
    if x is None:
        return None
    a = np.broadcast_to(np.asarray(x, dtype=float), (n,)).copy()
    if np.any(~(a > 0)):
        raise TrajectoryError(f"{name} must be > 0 (inf for unbounded), got {x!r}")
    return a


def _states(traj: Trajectory, model: Model, t: np.ndarray, space: str):
    """q, qd, qdd (N', n), task states or None, and a reachability violation or None.

    When a pose is unreachable at sample k, only samples [0, k) are returned.
    """
    task = None
    base = getattr(traj, "base", None)
    if isinstance(traj, Tabulated) and (isinstance(base, _Mapped) or
                                        (isinstance(base, TimeScaled) and isinstance(base.base, _Mapped))):
        # a table of a mapped trajectory: check the analytic mapping it was built from (equal at the
        # nodes, O(dt^6) apart between them) so the task states are available
        return _states(base, model, t, space)
    if isinstance(traj, TimeScaled):
        k = traj.factor
        q, qd, qdd, task, viol = _states(traj.base, model, np.clip(t / k, 0.0, traj.base.duration_s), space)
        if task is not None:
            task = (task[0], task[1] / k, task[2] / k**2)
        if viol is not None:
            viol = Violation(viol.t_s * k, viol.quantity, viol.axis, viol.axis_name, viol.value, viol.limit,
                             viol.message)
        return q, qd / k, qdd / k**2, task, viol
    if isinstance(traj, _Mapped):
        if traj.model is not model and traj.model.dof != model.dof:
            raise TrajectoryError("the mapped trajectory belongs to a model with a different dof")
        mapper = lambda idx: traj._map(*(x[idx] for x in task_s), t[idx])  # noqa: E731
        task_s = tuple(traj.task.sample(t))[:3]
        task = task_s
    elif space == "task":
        if not isinstance(model, ParallelModel):
            raise TrajectoryError("space='task' needs a ParallelModel; map serial tasks with SerialIKTrajectory")
        if traj.dim != model.task_dof:
            raise TrajectoryError(f"task trajectory has dim {traj.dim}, expected {model.task_dof}")
        try:   # the mapped trajectory unwraps joint angles continuously
            return _states(JointSpaceTrajectory(traj, model), model, t, "joint")
        except KinematicsError:
            pass
        task_s = tuple(traj.sample(t))[:3]
        task = task_s
        mapper = lambda idx: map_parallel(model, *(x[idx] for x in task_s))  # noqa: E731
    elif space == "joint":
        if traj.dim != model.dof:
            raise TrajectoryError(f"joint trajectory has dim {traj.dim}, {model.name} has {model.dof} joints")
        s = traj.sample(t)
        return s.pos, s.vel, s.acc, None, None
    else:
        raise TrajectoryError(f"space must be 'joint' or 'task', got {space!r}")

    idx = np.arange(len(t))
    try:
        q, qd, qdd = mapper(idx)
        return q, qd, qdd, task, None
    except KinematicsError:
        pass
    # find the first failing sample: map in chunks, then one by one in the failing chunk
    good = []
    k0 = 0
    chunk = max(len(t) // 32, 1)
    while k0 < len(t):
        sl = idx[k0:k0 + chunk]
        try:
            good.append(mapper(sl))
            k0 += len(sl)
            continue
        except KinematicsError:
            pass
        for k in sl:
            try:
                good.append(mapper(np.array([k])))
            except KinematicsError as err:
                n_ok = k
                if isinstance(err, SingularityError):
                    viol = Violation(float(t[k]), "singularity", None, None, 0.0, np.nan,
                                     f"singular configuration: {err}")
                else:
                    viol = Violation(float(t[k]), "reachability", None, None, np.nan, np.nan,
                                     f"pose not reachable: {err}")
                if good:
                    q, qd, qdd = (np.concatenate([g[i] for g in good]) for i in range(3))
                else:
                    q = qd = qdd = np.zeros((0, model.dof))
                return q, qd, qdd, tuple(x[:n_ok] for x in task), viol
    raise AssertionError("unreachable")  # pragma: no cover


def _torques(model, q, qd, qdd, task, wrench, static: bool):
    if len(q) == 0:
        return np.zeros((0, model.dof))
    if static:
        qd = np.zeros_like(qd)
        qdd = np.zeros_like(qdd)
    if task is not None and isinstance(model, ParallelModel):
        X, Xd, Xdd = task
        if static:
            Xd, Xdd = np.zeros_like(Xd), np.zeros_like(Xdd)
        W = None if wrench is None else np.broadcast_to(np.asarray(wrench, dtype=float), (len(X),) + np.shape(wrench)[-1:])
        try:
            return np.asarray(model.task_inverse_dynamics(X, Xd, Xdd, W), dtype=float)
        except (ValueError, TypeError, IndexError):
            return np.stack([np.asarray(model.task_inverse_dynamics(X[i], Xd[i], Xdd[i],
                                                                    None if W is None else W[i]), dtype=float)
                             for i in range(len(X))])
    W = None if wrench is None else np.broadcast_to(np.asarray(wrench, dtype=float), (len(q), 6))
    return np.asarray(model.inverse_dynamics(q, qd, qdd, W), dtype=float)


def _singularity(model, q, task, traj_t):
    """Margins (N',) for parallel models (X from the task, or forward kinematics)."""
    if not isinstance(model, ParallelModel) or len(q) == 0:
        return None
    if task is not None:
        X = task[0]
    else:
        X = np.empty((len(q), model.task_dof))
        guess = None
        for i in range(len(q)):
            X[i] = model.forward_kinematics_task(q[i], guess)
            guess = X[i]
    return np.array([model.singularity(q[i], X[i]).margin for i in range(len(q))])


def check_feasibility(traj: Trajectory, model: Model, *, dt_s: float, space: str = "joint",
                      acceleration_max=None, velocity_max=None, torque_max=None, check_torque: bool = True,
                      singularity_margin: float = 1e-3, wrench=None, position_tol: float = 0.0,
                      position_min=None, position_max=None) -> FeasibilityReport:
    """Check a trajectory against a model's limits on a time grid.

    Parameters
    ----------
    traj : Trajectory
        A joint/actuator trajectory (dim ``model.dof``), a mapped trajectory
        (:class:`~trajectories.mapping.JointSpaceTrajectory`,
        :class:`~trajectories.mapping.SerialIKTrajectory`; checked in actuator
        space and, for parallel robots, with the task states), or with
        ``space="task"`` a platform trajectory of a parallel robot.
    model : Model
    dt_s : float
        Sampling step [s] (the end time is always included).
    space : {"joint", "task"}
        Space of ``traj`` when it is not a mapped trajectory.
    acceleration_max : float or array (n,), optional
        |qdd| bounds (the model's JointLimits have none); None: not checked.
    velocity_max, torque_max : float or array (n,), optional
        Override the model's ``limits.velocity_max`` / ``limits.torque_max``.
    check_torque : bool
        Evaluate inverse dynamics and check torque limits.
    singularity_margin : float
        Parallel robots: a ``SingularityReport.margin`` below this is a violation.
    wrench : array_like (6,) or (N, 6), optional
        External wrench passed to the inverse dynamics.
    position_tol : float
        Tolerance on the position limits [rad|m].
    position_min, position_max : float or array (n,), optional
        Override the model's ``limits.position_min`` / ``limits.position_max`` [rad|m] (e.g.
        narrowed to what a drive's position field can carry).

    Returns
    -------
    FeasibilityReport
    """
    dt = check_duration(dt_s, "dt_s")
    t = traj.time_grid(dt)
    n = model.dof
    names = list(model.joint_names)
    lim = model.limits
    vmax = _vector_or_none(velocity_max, n, "velocity_max")
    vmax = np.asarray(lim.velocity_max, dtype=float) if vmax is None else vmax
    tmax = _vector_or_none(torque_max, n, "torque_max")
    tmax = np.asarray(lim.torque_max, dtype=float) if tmax is None else tmax
    amax = _vector_or_none(acceleration_max, n, "acceleration_max")
    q, qd, qdd, task, reach = _states(traj, model, t, space)
    found: list[Violation] = []
    if reach is not None:
        found.append(reach)
    tt = t[:len(q)]
    peak = {}

    margins = _singularity(model, q, task, tt)
    min_margin = None
    if margins is not None and len(margins):
        min_margin = float(np.min(margins))
        bad = np.nonzero(margins < singularity_margin)[0]
        if bad.size:
            k = bad[0]
            found.append(Violation(float(tt[k]), "singularity", None, None, float(margins[k]),
                                   float(singularity_margin),
                                   f"margin {margins[k]:.3g} below {singularity_margin:.3g}"))

    def scan(quantity, values, upper, lower=None, unit=""):
        for j in range(n):
            v = values[:, j]
            over = np.abs(v) > upper[j] if lower is None else (v > upper[j]) | (v < lower[j])
            idx = np.nonzero(over)[0]
            if idx.size:
                k = idx[0]
                if lower is None:
                    bound = float(np.copysign(upper[j], v[k]))
                else:
                    bound = float(upper[j] if v[k] > upper[j] else lower[j])
                found.append(Violation(float(tt[k]), quantity, j, names[j], float(v[k]), bound,
                                       f"{v[k]:.6g}{unit} beyond limit {bound:.6g}{unit}"))

    if len(q):
        lo = np.broadcast_to(np.asarray(lim.position_min if position_min is None else position_min,
                                        dtype=float), (n,)) - position_tol
        hi = np.broadcast_to(np.asarray(lim.position_max if position_max is None else position_max,
                                        dtype=float), (n,)) + position_tol
        scan("position", q, hi, lo)
        peak["position"] = np.maximum(np.max(q - hi, axis=0), np.max(lo - q, axis=0)).clip(min=0.0)
        scan("velocity", qd, vmax)
        peak["velocity"] = np.max(np.abs(qd), axis=0) / vmax
        if amax is not None:
            scan("acceleration", qdd, amax)
            peak["acceleration"] = np.max(np.abs(qdd), axis=0) / amax
        if check_torque:
            tau = _torques(model, q, qd, qdd, task, wrench, static=False)
            scan("torque", tau, tmax)
            peak["torque"] = np.max(np.abs(tau), axis=0) / tmax

    order = {q_: i for i, q_ in enumerate(QUANTITIES)}
    found.sort(key=lambda v: (v.t_s, order[v.quantity], -1 if v.axis is None else v.axis))
    return FeasibilityReport(ok=not found, first=found[0] if found else None, violations=tuple(found),
                             peak_ratio=peak, times_s=t, min_singularity_margin=min_margin)


def time_scale_to_limits(traj: Trajectory, model: Model, *, dt_s: float, space: str = "joint",
                         acceleration_max=None, velocity_max=None, torque_max=None,
                         check_torque: bool = True, singularity_margin: float = 1e-3, wrench=None,
                         position_tol: float = 0.0, k_max: float = 1e3) -> TimeScaled:
    """Stretch ``traj`` uniformly by the smallest factor ``k >= 1`` that meets the limits.

    Parameters are those of :func:`check_feasibility`; the grid ``dt_s`` is in
    the time of the *unscaled* trajectory (the scaled one is checked at the
    same path points, i.e. with step ``k * dt_s``).

    Returns
    -------
    TimeScaled
        ``factor`` is k (1.0 when ``traj`` already satisfies the limits).

    Raises
    ------
    InfeasibleTrajectoryError
        Position, reachability or singularity violations, static torques
        (gravity, wrench) beyond the limits, or ``k > k_max``.
    """
    rep = check_feasibility(traj, model, dt_s=dt_s, space=space, acceleration_max=acceleration_max,
                            velocity_max=velocity_max, torque_max=torque_max, check_torque=False,
                            singularity_margin=singularity_margin, position_tol=position_tol)
    fixed = [v for v in rep.violations if v.quantity in ("reachability", "singularity", "position")]
    if fixed:
        raise InfeasibleTrajectoryError(f"time scaling cannot fix: {fixed[0]}")
    n = model.dof
    lim = model.limits
    t = traj.time_grid(check_duration(dt_s, "dt_s"))
    q, qd, qdd, task, _ = _states(traj, model, t, space)
    vmax = _vector_or_none(velocity_max, n, "velocity_max")
    vmax = np.asarray(lim.velocity_max, dtype=float) if vmax is None else vmax
    amax = _vector_or_none(acceleration_max, n, "acceleration_max")
    tmax = _vector_or_none(torque_max, n, "torque_max")
    tmax = np.asarray(lim.torque_max, dtype=float) if tmax is None else tmax
    k = 1.0
    with np.errstate(divide="ignore", invalid="ignore"):
        k = max(k, float(np.max(np.abs(qd) / vmax)))
        if amax is not None:
            k = max(k, float(np.sqrt(np.max(np.abs(qdd) / amax))))
        if check_torque:
            tau1 = _torques(model, q, qd, qdd, task, wrench, static=False)
            tau0 = _torques(model, q, qd, qdd, task, wrench, static=True)
            over = np.abs(tau0) > tmax
            if np.any(over):
                i, j = np.argwhere(over)[0]
                raise InfeasibleTrajectoryError(
                    f"static torque (gravity/wrench) {tau0[i, j]:.4g} on axis {model.joint_names[j]} at "
                    f"t = {t[i]:.4f} s exceeds the limit {tmax[j]:.4g}: no time scaling helps")
            d = tau1 - tau0
            room = np.where(d > 0, tmax - tau0, tmax + tau0)      # > 0 by the check above
            k2 = np.where(np.abs(d) > 0, np.abs(d) / room, 0.0)
            k = max(k, float(np.sqrt(np.max(k2))))
    if not np.isfinite(k) or k > k_max:
        raise InfeasibleTrajectoryError(f"required time-scaling factor {k:.4g} exceeds k_max = {k_max}")
    if k > 1.0:
        k *= 1.0 + 1e-9
    return TimeScaled(traj, k)
