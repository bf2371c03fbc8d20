"""Mapping task-space trajectories to actuator (joint) space.

Positions come from inverse kinematics; velocities and accelerations are
mapped *analytically* through the Jacobians (not by differencing positions):

Parallel robots (:class:`~dynamics.base.ParallelModel`, ``Xd = J_x qd``)::

    q   = IK(X)
    qd  = J_x^-1 Xd
    qdd = J_x^-1 (Xdd - Jdot_x qd)

``J_x`` is ``model.task_jacobian(q, X)``.  When the model has analytic maps
``joint_velocity(q, X, Xd)`` / ``joint_acceleration(q, X, Xd, Xdd)`` (the 3RRR:
``qdd = -A^-1 (B Xdd + gamma)``, gamma from the constraint Hessians) or
``leg_kinematics(X, Xd, Xdd)`` (the Stewart platform) they are used; otherwise
the term ``Jdot_x qd`` is the directional derivative of ``J_x`` along the
motion, ``(J_x(q + e qd, X + e Xd) - J_x(q - e qd, X - e Xd)) / (2 e)``, a central
difference of the *Jacobian* (error ~1e-10 relative), not of positions.

Serial arms (:class:`SerialIKTrajectory`): the task is a selection of tool
coordinates (position components and at most one planar rotation angle).
Positions by damped-least-squares Newton iterations (Levenberg-Marquardt),
warm-started from a continuation along a time grid.  Redundancy (n > m) is
resolved by an *augmented task*: the extra ``n - m`` equations
``Z0^T W (q - q_rest) = 0``, with ``Z0`` a basis of the null space of the task
Jacobian at the rest posture and ``W`` diagonal weights, are the first-order
optimality conditions of "stay as close as possible to the rest posture in
the W-norm" linearised at the rest posture.  The augmented map is square and
smooth, so::

    A = [J; Z0^T W],   A qd = [xd; 0],   A qdd = [xdd - Jdot qd; 0]

Jerk of mapped trajectories is the central difference of the analytic
acceleration (step ``jerk_step_s``), documented as approximate.

For hard real-time loops use :class:`Tabulated` to precompute a trajectory on a
grid and interpolate it with quintic Hermite polynomials (C2, matching the
analytic position, velocity and acceleration at every node).
"""

from __future__ import annotations

from abc import abstractmethod

import numpy as np
from scipy.linalg import null_space

from dynamics.base import Model, ParallelModel
from dynamics.errors import (KinematicsError, ModelError, SingularityError,
                             TrajectoryError, UnreachableError)

from .base import Sample, TimeScaled, Trajectory, check_duration

__all__ = ["JointSpaceTrajectory", "SerialIKTrajectory", "TaskSelection", "Tabulated",
           "default_rest_pose", "map_parallel"]


# -- parallel robots -------------------------------------------------------------

def _batch_call(fn, *args):
    """Call a model method on a batch; fall back to a per-row loop if the batch form fails
    with a non-kinematic error (kinematic errors propagate)."""
    try:
        return np.asarray(fn(*args), dtype=float)
    except KinematicsError:
        raise
    except (ModelError, ValueError, TypeError, IndexError):
        rows = [np.asarray(fn(*(a[i] for a in args)), dtype=float) for i in range(args[0].shape[0])]
        return np.stack(rows)


def _solve(A, b, what: str):
    try:
        x = np.linalg.solve(A, b[..., None])[..., 0]
    except np.linalg.LinAlgError as err:
        raise SingularityError(f"singular {what}") from err
    if not np.all(np.isfinite(x)):
        raise SingularityError(f"singular {what} (non-finite solution)")
    return x


def _rows(fn, *arrays):
    """Apply a single-state model method row by row, shape (N, k)."""
    return np.stack([np.asarray(fn(*(a[i] for a in arrays)), dtype=float) for i in range(arrays[0].shape[0])])


def _parallel_velocity_acceleration(model: ParallelModel, q, X, Xd, Xdd):
    """qd and qdd for batches (N, n) / (N, m).

    Uses the model's analytic maps when it has them: ``joint_rates_batch(q, X, Xd, Xdd)``
    (both maps on all rows at once), or ``joint_velocity(q, X, Xd)``
    and ``joint_acceleration(q, X, Xd, Xdd)`` (e.g. the 3RRR: ``qdd = -A^-1 (B Xdd + gamma)``
    with the constraint Hessian terms ``gamma``), or ``leg_kinematics(X, Xd, Xdd)``
    (the Stewart platform: leg rates and accelerations from the platform
    twist and its derivative).  Otherwise ``qd = J_x^-1 Xd``
    and ``qdd = J_x^-1 (Xdd - Jdot_x qd)`` with ``Jdot_x qd`` the directional
    derivative of ``model.task_jacobian`` along the motion (central difference
    of the Jacobian, step 1e-6 / max|qd|).
    """
    jb = getattr(model, "joint_rates_batch", None)
    if callable(jb):    # the two maps below on all rows at once (the same numbers)
        qd, qdd = jb(q, X, Xd, Xdd)
        return np.asarray(qd, dtype=float), np.asarray(qdd, dtype=float)
    jv = getattr(model, "joint_velocity", None)
    ja = getattr(model, "joint_acceleration", None)
    if callable(jv) and callable(ja):
        qd = _rows(jv, q, X, Xd)
        qdd = _rows(ja, q, X, Xd, Xdd)
        return qd, qdd
    lk = getattr(model, "leg_kinematics", None)
    if callable(lk):    # Stewart: L' = u.v_P, L'' = u.a_P + (|v_P|^2 - L'^2)/L, analytic
        qd = np.empty_like(q)
        qdd = np.empty_like(q)
        for i in range(q.shape[0]):
            k = lk(X[i], Xd[i], Xdd[i])
            qd[i], qdd[i] = k.rates, k.accelerations
        return qd, qdd
    J = _batch_call(model.task_jacobian, q, X)
    qd = _solve(J, Xd, f"{model.name}: task Jacobian")
    scale = np.maximum(np.max(np.abs(qd), axis=-1, keepdims=True), 1e-12)
    eps = 1e-6 / scale
    Jp = _batch_call(model.task_jacobian, q + eps * qd, X + eps * Xd)
    Jm = _batch_call(model.task_jacobian, q - eps * qd, X - eps * Xd)
    Jdot_qd = np.einsum("...ij,...j->...i", (Jp - Jm), qd) / (2 * eps)
    qdd = _solve(J, Xdd - Jdot_qd, f"{model.name}: task Jacobian")
    return qd, qdd


def map_parallel(model: ParallelModel, X, Xd, Xdd):
    """Map task states (N, m) to actuated (q, qd, qdd), each (N, n).

    Raises
    ------
    UnreachableError, SingularityError
        From the model's IK or a singular Jacobian.
    """
    X = np.atleast_2d(np.asarray(X, dtype=float))
    Xd = np.atleast_2d(np.asarray(Xd, dtype=float))
    Xdd = np.atleast_2d(np.asarray(Xdd, dtype=float))
    q = _batch_call(model.inverse_kinematics, X)
    qd, qdd = _parallel_velocity_acceleration(model, q, X, Xd, Xdd)
    return q, qd, qdd


class _Mapped(Trajectory):
    """Common part of trajectories mapped from a task trajectory to joint space."""

    task: Trajectory
    model: Model
    jerk_step_s: float

    @property
    def duration_s(self) -> float:
        return self.task.duration_s

    @property
    def dim(self) -> int:
        return self.model.dof

    @abstractmethod
    def _map(self, X, Xd, Xdd, t):
        """Map task states (N, m) at times t (N,) to joint (q, qd, qdd), each (N, n)."""

    def _eval_noj(self, t):
        ts = self.task.sample(t)
        return self._map(ts.pos, ts.vel, ts.acc, t)

    def _eval(self, t):
        q, qd, qdd = self._eval_noj(t)
        h = self.jerk_step_s
        if h > 0:
            T = self.duration_s
            tp = np.minimum(t + h, T)
            tm = np.maximum(t - h, 0.0)
            span = tp - tm
            ok = span > 0
            jerk = np.zeros_like(qdd)
            if np.any(ok):
                ap = self._eval_noj(tp[ok])[2]
                am = self._eval_noj(tm[ok])[2]
                jerk[ok] = (ap - am) / span[ok, None]
        else:
            jerk = np.full_like(qdd, np.nan)
        return q, qd, qdd, jerk

    def sample_with_task(self, t) -> tuple[Sample, Sample]:
        """``(joint sample, task sample)`` at ``t`` (jerk of the joint sample set to NaN)."""
        from .base import as_time
        tt, scalar = as_time(t)
        ts = self.task.sample(tt)
        q, qd, qdd = self._map(ts.pos, ts.vel, ts.acc, np.clip(tt, 0, self.duration_s))
        js = Sample(q, qd, qdd, np.full_like(qdd, np.nan))
        if scalar:
            return Sample(*(x[0] for x in js)), Sample(*(x[0] for x in ts))
        return js, ts


class JointSpaceTrajectory(_Mapped):
    """Actuator-space trajectory of a parallel robot driven by a task trajectory.

    Parameters
    ----------
    task : Trajectory
        Platform pose trajectory X(t), dim ``model.task_dof``.
    model : ParallelModel
    jerk_step_s : float
        Step of the central difference used for the jerk (0: jerk is NaN).
    angular_joints : array_like of bool, shape (n,), optional
        Actuated joints that are angles wrapped by the IK: they are unwrapped
        continuously in time (2 pi multiples chosen to follow an IK
        continuation on a grid of step ``grid_dt_s``, default T/200).  Default:
        all joints of a :class:`~dynamics.planar3rrr.Planar3RRR`, none otherwise.

    Notes
    -----
    ``sample(t)`` returns actuated q, qd, qdd (mapped analytically, see module
    docstring); ``sample_with_task(t)`` returns both spaces.  Raises
    :class:`UnreachableError` / :class:`SingularityError` at construction if a
    pose of the continuation grid is not reachable (or singular), and when
    sampled at such a pose.
    """

    def __init__(self, task: Trajectory, model: ParallelModel, jerk_step_s: float = 1e-4, *,
                 angular_joints=None, grid_dt_s: float | None = None):
        if not isinstance(model, ParallelModel):
            raise TrajectoryError(f"JointSpaceTrajectory needs a ParallelModel, got {type(model).__name__}")
        if task.dim != model.task_dof:
            raise TrajectoryError(f"task trajectory has dim {task.dim}, {model.name} has "
                                  f"{model.task_dof} task coordinates")
        self.task, self.model = task, model
        self.jerk_step_s = float(jerk_step_s)
        self.names = model.joint_names
        if angular_joints is None:
            angular_joints = _default_angular_joints(model)
        self.angular_joints = np.asarray(angular_joints, dtype=bool).reshape(model.dof)
        # reference branch of the angles: IK on a grid, unwrapped in time
        T = task.duration_s
        ng = max(int(np.ceil(T / (T / 200 if grid_dt_s is None else check_duration(grid_dt_s, "grid_dt_s")))), 1)
        self._grid_t = np.linspace(0.0, T, ng + 1)
        qg = _batch_call(model.inverse_kinematics, task.sample(self._grid_t).pos)
        if np.any(self.angular_joints):
            qg[:, self.angular_joints] = np.unwrap(qg[:, self.angular_joints], axis=0)
        self._grid_q = qg

    def _map(self, X, Xd, Xdd, t):
        q, qd, qdd = map_parallel(self.model, X, Xd, Xdd)
        if np.any(self.angular_joints):
            j = self.angular_joints
            ref = np.stack([np.interp(t, self._grid_t, self._grid_q[:, k]) for k in np.nonzero(j)[0]], axis=1)
            q[:, j] += 2 * np.pi * np.round((ref - q[:, j]) / (2 * np.pi))
        return q, qd, qdd


def _default_angular_joints(model) -> np.ndarray:
    """Revolute actuated joints whose IK angles are wrapped (3RRR: all three)."""
    explicit = getattr(model, "angular_joints", None)
    if explicit is not None:
        return np.asarray(explicit, dtype=bool)
    try:
        from dynamics.planar3rrr import Planar3RRR
    except ImportError:  # pragma: no cover - module always present in the package
        return np.zeros(model.dof, dtype=bool)
    return np.full(model.dof, isinstance(model, Planar3RRR))


# -- serial arms -------------------------------------------------------------------

_AXES = {"x": 0, "y": 1, "z": 2, "rx": 3, "ry": 4, "rz": 5}


class TaskSelection:
    """Which tool coordinates form the task of a serial arm.

    Parameters
    ----------
    components : str or sequence of str
        Position components ``"x"``, ``"y"``, ``"z"`` and at most one planar
        rotation angle ``"rx"``, ``"ry"``, ``"rz"`` (e.g. ``"xy"``, ``"xyz"``,
        ``("x", "y", "rz")``).  The angle is that of a rotation about the named
        base axis (``rz = atan2(R[1,0], R[0,0])``); its rate is the matching
        angular-velocity component, exact for planar motion about that axis.
    """

    def __init__(self, components):
        if isinstance(components, str):
            comps, s = [], components.replace(" ", "").replace(",", "")
            i = 0
            while i < len(s):
                if s[i] == "r" and i + 1 < len(s):
                    comps.append(s[i:i + 2])
                    i += 2
                else:
                    comps.append(s[i])
                    i += 1
        else:
            comps = list(components)
        bad = [c for c in comps if c not in _AXES]
        if bad or not comps or len(set(comps)) != len(comps):
            raise TrajectoryError(f"task components must be distinct names from {list(_AXES)}, got {components!r}")
        rots = [c for c in comps if c.startswith("r")]
        if len(rots) > 1:
            raise TrajectoryError("at most one planar rotation angle can be part of a serial task")
        self.components = tuple(comps)
        self.rows = np.array([_AXES[c] for c in comps])
        self._angle_pos = [i for i, c in enumerate(comps) if c.startswith("r")]

    @property
    def dim(self) -> int:
        return len(self.components)

    def value(self, T: np.ndarray) -> np.ndarray:
        """Task coordinates from tool poses (N, 4, 4) -> (N, m)."""
        out = np.empty(T.shape[:-2] + (self.dim,))
        for i, c in enumerate(self.components):
            if c in ("x", "y", "z"):
                out[..., i] = T[..., _AXES[c], 3]
            elif c == "rz":
                out[..., i] = np.arctan2(T[..., 1, 0], T[..., 0, 0])
            elif c == "ry":
                out[..., i] = np.arctan2(T[..., 0, 2], T[..., 2, 2])
            else:
                out[..., i] = np.arctan2(T[..., 2, 1], T[..., 1, 1])
        return out

    def error(self, target: np.ndarray, T: np.ndarray) -> np.ndarray:
        """target - value, angles wrapped to (-pi, pi]."""
        e = target - self.value(T)
        for i in self._angle_pos:
            e[..., i] = (e[..., i] + np.pi) % (2 * np.pi) - np.pi
        return e

    def jacobian(self, J6: np.ndarray) -> np.ndarray:
        return J6[..., self.rows, :]


def _task_conditioning(model: Model, sel: "TaskSelection", q: np.ndarray) -> np.ndarray:
    """Inverse condition number ``s_min / s_max`` of the task Jacobian at poses ``q`` (N, n) -> (N,)."""
    J = sel.jacobian(np.asarray(model.jacobian(q), dtype=float))
    s = np.linalg.svd(J, compute_uv=False)
    return s[..., -1] / np.maximum(s[..., 0], 1e-300)


#: Inverse condition number of the task Jacobian below which a default pose counts as singular.
WELL_CONDITIONED = 1e-2


def default_rest_pose(model: Model, components="xyz") -> np.ndarray:
    """A well-conditioned default posture of a serial arm for a task selection.

    The joint-limit midpoints (zero for a joint without finite limits); when
    the task Jacobian there is singular or ill-conditioned (inverse condition
    number ``s_min / s_max`` below :data:`WELL_CONDITIONED`, e.g. a SCARA or
    an elbow arm stretched out at zero), each joint is moved by
    ``-d, 0 or +d`` with ``d = min(range / 4, 0.5)`` (0.5 rad or m when
    unbounded) and the best-conditioned of these ``3^n`` poses is taken (one
    joint at a time beyond 8 joints).  Deterministic: the same model gives the
    same pose.

    Parameters
    ----------
    model : Model
        Serial arm (``jacobian``, ``limits``).
    components : str or sequence
        Task selection (see :class:`TaskSelection`).

    Returns
    -------
    ndarray, shape (n,)
        Joint positions [rad or m].
    """
    sel = components if isinstance(components, TaskSelection) else TaskSelection(components)
    lim = model.limits
    lo, hi = np.asarray(lim.position_min, float), np.asarray(lim.position_max, float)
    fin = np.isfinite(lo) & np.isfinite(hi)
    mid = np.where(fin, 0.5 * (np.where(fin, lo, 0.0) + np.where(fin, hi, 0.0)), 0.0)
    if _task_conditioning(model, sel, mid[None])[0] >= WELL_CONDITIONED:
        return mid
    n = model.dof
    d = np.where(fin, np.minimum(0.25 * (np.where(fin, hi, 0.0) - np.where(fin, lo, 0.0)), 0.5), 0.5)
    if n <= 8:
        steps = np.array(np.meshgrid(*([[-1.0, 0.0, 1.0]] * n), indexing="ij")).reshape(n, -1).T
    else:
        steps = np.concatenate([np.zeros((1, n)), np.eye(n), -np.eye(n)])
    cand = mid + steps * d
    c = _task_conditioning(model, sel, cand)
    # the best conditioned; among near-equals the fewest moved joints (first in this order)
    best = np.max(c)
    order = np.lexsort((np.abs(steps).sum(axis=1), ~(c >= best * (1 - 1e-9))))
    return cand[order[0]]


def _fmt(v) -> str:
    return np.array2string(np.asarray(v, dtype=float), precision=4, separator=", ", suppress_small=True)


class SerialIKTrajectory(_Mapped):
    """Joint trajectory of a serial arm following a task trajectory (numerical IK).

    Positions follow the path by continuation: each point of a time grid is
    solved from the previous one's solution, and from the start pose when that
    fails.  The start pose is the solution of the first point from ``q_guess``.

    Parameters
    ----------
    task : Trajectory
        Task coordinates x(t), dim m = number of selected components.
    model : Model
        Serial arm (``forward_kinematics``, ``jacobian``).
    components : str or sequence, default "xyz"
        See :class:`TaskSelection`.
    q_rest : array_like, shape (n,), optional
        Rest posture of a redundant arm (n > m): the ``n - m`` free directions
        (the null space of the task Jacobian at ``q_rest``) stay at their
        values there (see the module docstring).  Default: the start pose, so
        a path that starts where the arm is needs no rest posture; when the
        path leaves what a condition linear about the start pose can hold, the
        posture half-way along the path (followed with the free directions
        free, each point from the previous one).  Set it
        (the run config's ``[trajectory] q_rest``) to hold the free directions
        at another posture (elbow up, a wrist angle).
    q_guess : array_like, shape (n,), optional
        Initial guess for the pose at t = 0.  Default ``q_rest`` when given,
        else :func:`default_rest_pose` (the joint-limit midpoints, or a
        well-conditioned pose near them when those are singular).
    weights : array_like, shape (n,), optional
        Diagonal W of the rest-posture metric (default ones).
    grid_dt_s : float, optional
        Step of the continuation grid used for warm starts (default T/400).
    tol : float
        Convergence tolerance on the task residual [m or rad].
    jerk_step_s : float
        Step of the central difference used for the jerk.

    Attributes
    ----------
    q_rest : ndarray, shape (n,)
        The rest posture used.
    q_start : ndarray, shape (n,)
        The pose at t = 0.

    Raises
    ------
    UnreachableError
        A task point cannot be reached; the message names the sample (index of
        the continuation grid and time), the target, the nearest pose found and
        the task coordinates it reaches, and what to set (``q_rest``, ``q_guess``).
    SingularityError
        The task Jacobian is rank deficient at the rest posture (the message
        names a well-conditioned posture to set as ``q_rest``).
    TrajectoryError
        Bad arguments (more task coordinates than joints, wrong dims).
    """

    def __init__(self, task: Trajectory, model: Model, components="xyz", *, q_rest=None, q_guess=None,
                 weights=None, grid_dt_s: float | None = None, tol: float = 1e-11,
                 jerk_step_s: float = 1e-4, max_iter: int = 100):
        self.sel = TaskSelection(components)
        n, m = model.dof, self.sel.dim
        if task.dim != m:
            raise TrajectoryError(f"task trajectory has dim {task.dim} but the task selection "
                                  f"{self.sel.components} has {m} components")
        if m > n:
            raise TrajectoryError(f"{m} task coordinates but only {n} joints")
        self.task, self.model = task, model
        self.jerk_step_s = float(jerk_step_s)
        self.tol = float(tol)
        self.max_iter = int(max_iter)
        self.names = model.joint_names
        w = np.ones(n) if weights is None else self._vec(weights, "weights", n)
        if np.any(w <= 0):
            raise TrajectoryError("weights must be > 0")
        self.weights = w
        self._rest_given = q_rest is not None
        if q_guess is not None:
            q_init = self._vec(q_guess, "q_guess", n)
        elif q_rest is not None:
            q_init = self._vec(q_rest, "q_rest", n)
        else:
            q_init = default_rest_pose(model, self.sel)
        # continuation grid for warm starts
        T = task.duration_s
        dt = T / 400 if grid_dt_s is None else check_duration(grid_dt_s, "grid_dt_s")
        ng = max(int(np.ceil(T / dt)), 1)
        self._grid_t = np.linspace(0.0, T, ng + 1)
        X = task.sample(self._grid_t).pos
        self.C = np.zeros((0, n))
        if q_rest is None:
            # the start pose: the first point solved from the guess with no posture term
            self.q_rest = q_init
            self.q_start = self._solve_one(X[0], q_init, self._grid_t[0], index=0, count=ng + 1)
            self.q_rest = self.q_start.copy()
        else:
            self.q_rest = self._vec(q_rest, "q_rest", n)
        if n > m:
            self._set_rest(self.q_rest)
        q0 = q_init if self._rest_given else self.q_start
        try:
            self._grid_q = self._continuation(X, q0)
        except UnreachableError:
            if self._rest_given or n == m:
                raise
            # the default rest posture (the start pose) holds the free directions by a condition
            # linear about it, which a long path can leave: hold them about the posture the
            # arm has half-way along the path instead (followed with the free directions free)
            free = self._continuation(X, self.q_start, C=np.zeros((0, n)))
            start = self.q_start
            self._set_rest(free[len(free) // 2])
            self._grid_q = self._continuation(X, start)

    def _set_rest(self, q_rest):
        """Hold the free directions of a redundant arm about ``q_rest`` (the rows ``C``)."""
        self.q_rest = np.asarray(q_rest, dtype=float).copy()
        J0 = self.sel.jacobian(np.asarray(self.model.jacobian(self.q_rest), dtype=float))
        Z0 = null_space(J0)
        if Z0.shape[1] != self.model.dof - self.sel.dim:
            which = "q_rest" if self._rest_given else "the start pose (q_guess)"
            raise SingularityError(
                f"{self.model.name}: the task Jacobian ({''.join(self.sel.components)}) is rank deficient at "
                f"{which} {_fmt(self.q_rest)}: set q_rest (the [trajectory] key of a run config) to a "
                f"well-conditioned posture, e.g. {_fmt(default_rest_pose(self.model, self.sel))}")
        self.C = Z0.T * self.weights[None, :]

    def _continuation(self, X, q, C=None):
        """Solutions on the grid, each from the previous one (or the start pose): (ng + 1, n)."""
        saved = self.C
        if C is not None:
            self.C = C
        try:
            qs = np.empty((len(X), self.model.dof))
            for k in range(len(X)):
                q = self._solve_one(X[k], q, self._grid_t[k], index=k, count=len(X))
                qs[k] = q
                if k == 0:
                    self.q_start = q.copy()
            return qs
        finally:
            self.C = saved

    @staticmethod
    def _vec(x, name, n):
        a = np.asarray(x, dtype=float)
        if a.shape != (n,) or not np.all(np.isfinite(a)):
            raise TrajectoryError(f"{name} must be a finite vector of shape ({n},), got {x!r}")
        return a

    def _residual(self, x, q, C=None):
        C = self.C if C is None else C
        T = np.asarray(self.model.forward_kinematics(q), dtype=float)
        e = self.sel.error(x, T)
        r = np.concatenate([e, -(C @ (q - self.q_rest).T).T], axis=-1) if C.size else e
        return r

    def _aug_jacobian(self, q, C=None):
        C = self.C if C is None else C
        J = self.sel.jacobian(np.asarray(self.model.jacobian(q), dtype=float))
        if C.size:
            C = np.broadcast_to(C, J.shape[:-2] + C.shape)
            return np.concatenate([J, C], axis=-2)
        return J

    def _lm(self, x, q0, C):
        """Levenberg-Marquardt on the task equations (and the posture rows ``C``): (q, |residual|)."""
        q = q0.copy()
        r = self._residual(x, q, C)
        cost = r @ r
        lam = 1e-6
        for _ in range(self.max_iter):
            if np.sqrt(cost) < self.tol:
                break
            A = self._aug_jacobian(q, C)
            H = A.T @ A
            g = A.T @ r
            while True:
                dq = np.linalg.solve(H + lam * (np.diag(np.diag(H)) + 1e-12 * np.eye(len(q))), g)
                qn = q + dq
                rn = self._residual(x, qn, C)
                cn = rn @ rn
                if cn < cost:
                    q, r, cost = qn, rn, cn
                    lam = max(lam / 10, 1e-12)
                    break
                lam *= 10
                if lam > 1e8:
                    break
            if lam > 1e8:
                break
        return q, float(np.sqrt(cost))

    def _solve_one(self, x, q0, t, index=None, count=None):
        """Solve one target from ``q0``, then from the start pose; a clear error when neither converges."""
        ok = max(self.tol, 1e-9)
        starts = [q0]
        start = getattr(self, "q_start", None)
        if start is not None and not np.array_equal(start, q0):
            starts.append(start)
        best, best_res = None, np.inf
        for qs in starts:
            q, res = self._lm(x, qs, self.C)
            if res < ok:
                return q
            if res < best_res:
                best, best_res = q, res
        self._unreachable(x, best, t, index, count)

    def _unreachable(self, x, q, t, index, count):
        sel, name = self.sel, self.model.name
        comps = "".join(sel.components)
        where = f"sample {index} of {count} (t = {t:.4g} s)" if index is not None else f"t = {t:.4g} s"
        reached = sel.value(np.asarray(self.model.forward_kinematics(q), dtype=float))
        task_res = float(np.linalg.norm(sel.error(x, np.asarray(self.model.forward_kinematics(q), dtype=float))))
        msg = (f"{name}: the task path's {where}, {comps} {_fmt(x)}, is not reachable from the previous sample "
               f"or the start pose; the nearest pose "
               f"found, q = {_fmt(q)}, reaches {_fmt(reached)} (task residual {task_res:.3g})")
        if self.C.size:
            # is it reachable at all, with the free directions left free?
            q_free, res_free = self._lm(x, q, np.zeros((0, self.model.dof)))
            if res_free < max(self.tol, 1e-9):
                raise UnreachableError(
                    msg + f". The point is reachable (q = {_fmt(q_free)}), but not with the arm's "
                    f"{self.model.dof - sel.dim} free direction(s) held at the rest posture q_rest = "
                    f"{_fmt(self.q_rest)} (held by a condition linear about q_rest, so a long path may need "
                    f"q_rest near its middle): set q_rest (the [trajectory] key of a run config) to a "
                    f"well-conditioned posture nearer this part of the path, or shorten the path")
        raise UnreachableError(
            msg + ". The point may lie outside the workspace; if not, set q_guess (the start pose's guess) "
            "or q_rest (the posture of the free directions), keys of [trajectory] in a run config "
            "(torqueloop check --explain trajectory)")

    def _positions(self, X, t):
        # warm start: interpolate the continuation grid, then batched Newton
        q = np.stack([np.interp(t, self._grid_t, self._grid_q[:, j]) for j in range(self.model.dof)], axis=1)
        done = np.zeros(len(t), dtype=bool)
        for _ in range(20):
            r = self._residual(X, q)
            err = np.max(np.abs(r), axis=-1)
            done = err < self.tol
            if np.all(done):
                return q
            A = self._aug_jacobian(q[~done])          # square (n, n): m task rows + n - m null-space rows
            try:
                dq = np.linalg.solve(A, r[~done][..., None])[..., 0]
            except np.linalg.LinAlgError:
                break                                   # singular somewhere: per-sample LM below
            q[~done] = q[~done] + dq
        r = self._residual(X, q)
        for i in np.nonzero(np.max(np.abs(r), axis=-1) >= self.tol)[0]:
            q[i] = self._solve_one(X[i], q[i] if np.all(np.isfinite(q[i])) else self._grid_q[0], t[i],
                                   index=i, count=len(t))
        return q

    def _map(self, X, Xd, Xdd, t):
        n, m = self.model.dof, self.sel.dim
        q = self._positions(X, t)
        A = self._aug_jacobian(q)
        pad = np.zeros((len(t), n - m))
        qd = _solve(A, np.concatenate([Xd, pad], axis=1), f"{self.model.name}: augmented task Jacobian")
        jd = getattr(self.model, "jacobian_dot", None)
        if callable(jd):
            Jdot_qd = np.einsum("...ij,...j->...i", self.sel.jacobian(np.asarray(jd(q, qd), dtype=float)), qd)
        else:
            scale = np.maximum(np.max(np.abs(qd), axis=-1, keepdims=True), 1e-12)
            eps = 1e-6 / scale
            Jp = self.sel.jacobian(np.asarray(self.model.jacobian(q + eps * qd), dtype=float))
            Jm = self.sel.jacobian(np.asarray(self.model.jacobian(q - eps * qd), dtype=float))
            Jdot_qd = np.einsum("...ij,...j->...i", Jp - Jm, qd) / (2 * eps)
        qdd = _solve(A, np.concatenate([Xdd - Jdot_qd, pad], axis=1),
                     f"{self.model.name}: augmented task Jacobian")
        return q, qd, qdd


# -- tabulation ------------------------------------------------------------------

class Tabulated(Trajectory):
    """A trajectory precomputed on a grid and interpolated by quintic Hermite polynomials.

    On each grid interval the quintic matches position, velocity and
    acceleration of ``base`` at both nodes, so the interpolant is C2 and its
    error between nodes is O(dt^6) times the sixth derivative.  Sampling costs
    no kinematics (a search and a Horner evaluation, tens of microseconds for
    one time): use it in real-time loops.  The jerk is that of the quintic
    (piecewise, discontinuous at the nodes).

    Parameters
    ----------
    base : Trajectory
    dt_s : float
        Grid step [s] (the last step may be shorter).

    Attributes
    ----------
    base : Trajectory
        The tabulated trajectory.
    task : Trajectory
        ``base.task`` when ``base`` is a mapped trajectory (the analytic task
        reference, cheap to sample); otherwise absent.
    """

    def __init__(self, base: Trajectory, dt_s: float):
        t = base.time_grid(dt_s)
        inner, k = base, 1.0
        if isinstance(base, TimeScaled) and isinstance(base.base, _Mapped):
            inner, k = base.base, base.factor
        if isinstance(inner, _Mapped):        # the jerk is not needed: skip its extra mappings
            p, v, a = inner._eval_noj(np.clip(t / k, 0.0, inner.duration_s))
            v, a = v / k, a / k**2
        else:
            smp = base.sample(t)
            p, v, a = smp.pos, smp.vel, smp.acc
        self.base = base
        task = getattr(base, "task", None)
        if task is not None:
            self.task = task
        self.base_type = type(base).__name__
        self.names = base.names
        self.nodes_s = t
        self._T = float(t[-1])
        self._dim = base.dim
        h = np.diff(t)[:, None]
        dp = p[1:] - p[:-1] - v[:-1] * h - a[:-1] * h**2 / 2
        dv = v[1:] - v[:-1] - a[:-1] * h
        da = a[1:] - a[:-1]
        c = np.empty((len(h), 6, self._dim))     # power basis in s = t - t_k
        c[:, 0], c[:, 1], c[:, 2] = p[:-1], v[:-1], a[:-1] / 2
        c[:, 3] = (20 * dp - 8 * dv * h + da * h**2) / (2 * h**3)
        c[:, 4] = (-30 * dp + 14 * dv * h - 2 * da * h**2) / (2 * h**4)
        c[:, 5] = (12 * dp - 6 * dv * h + da * h**2) / (2 * h**5)
        self._c = c

    @property
    def duration_s(self) -> float:
        return self._T

    @property
    def dim(self) -> int:
        return self._dim

    def _eval(self, t):
        k = np.clip(np.searchsorted(self.nodes_s, t, side="right") - 1, 0, len(self._c) - 1)
        s = (t - self.nodes_s[k])[:, None]
        c = self._c[k]
        c0, c1, c2, c3, c4, c5 = (c[:, i] for i in range(6))
        pos = c0 + s * (c1 + s * (c2 + s * (c3 + s * (c4 + s * c5))))
        vel = c1 + s * (2 * c2 + s * (3 * c3 + s * (4 * c4 + s * 5 * c5)))
        acc = 2 * c2 + s * (6 * c3 + s * (12 * c4 + s * 20 * c5))
        jerk = 6 * c3 + s * (24 * c4 + s * 60 * c5)
        return pos, vel, acc, jerk
