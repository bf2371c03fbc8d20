"""The model interface shared by every robot model (serial, 3RRR, Stewart).

Conventions
-----------
* SI units and radians everywhere.  ``q`` are the *actuated* generalized
  coordinates (joint angles [rad] or prismatic displacements [m]); for parallel
  robots these are the actuated joints (3RRR base angles, Stewart leg lengths).
* Every state-dependent method accepts a single state, shape ``(n,)``, or a
  batch, shape ``(N, n)``, and returns the matching shape (``(n,)`` /
  ``(N, n)`` for vectors, ``(n, n)`` / ``(N, n, n)`` for matrices).
* Models are immutable: parameters are fixed at construction, methods are pure
  functions of the state.  A perturbed copy (for plant/controller mismatch) is
  made with :meth:`Model.scaled`.
* Torques include the reflected rotor ("armature") inertia of the drives, but
  not friction; friction is given separately by :meth:`Model.friction_torque`
  so a plant can apply it and a controller can choose to compensate it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from .errors import ModelError

__all__ = ["JointLimits", "DriveParams", "Model", "ParallelModel", "SingularityReport", "GEAR_RATIO_RANGE"]

#: plausible gear ratios (motor turns per joint turn): a speed-up of 100 to a 10,000:1 reduction;
#: a value outside is a unit slip (driver tables use it too: ``drivers.registry``)
GEAR_RATIO_RANGE = (0.01, 10_000.0)


@dataclass(frozen=True)
class JointLimits:
    """Limits of the actuated joints; arrays of shape (n,).

    ``position_min``/``position_max`` in rad or m, ``velocity_max`` in rad/s or
    m/s, ``torque_max`` in N m or N (symmetric: |tau| <= torque_max).
    Unbounded entries are ``inf``.
    """

    position_min: np.ndarray
    position_max: np.ndarray
    velocity_max: np.ndarray
    torque_max: np.ndarray

    @staticmethod
    def unbounded(n: int) -> "JointLimits":
        inf = np.full(n, np.inf)
        return JointLimits(-inf.copy(), inf.copy(), inf.copy(), inf.copy())


@dataclass(frozen=True)
class DriveParams:
    """Per-joint drive data; arrays of shape (n,), joint side.

    ``armature`` is the reflected rotor inertia ``rotor_inertia * gear_ratio**2``
    [kg m^2 or kg]; ``viscous`` [N m s/rad]; ``coulomb`` [N m].
    """

    armature: np.ndarray
    viscous: np.ndarray
    coulomb: np.ndarray

    @staticmethod
    def none(n: int) -> "DriveParams":
        z = np.zeros(n)
        return DriveParams(z.copy(), z.copy(), z.copy())


@dataclass(frozen=True)
class SingularityReport:
    """Singularity measures at one configuration of a parallel robot.

    Attributes
    ----------
    kind : str
        ``"regular"``, ``"type1"`` (serial/inverse-kinematic singularity: loses a
        motion, det A = 0), ``"type2"`` (parallel/direct singularity: gains an
        uncontrollable motion, det B = 0) or ``"both"``.
    det_a, det_b : float
        Determinants of the actuated and passive/task constraint Jacobians.
    cond_a, cond_b : float
        2-norm condition numbers (``inf`` when singular).
    margin : float
        A scalar in [0, 1]: 1/condition number of the velocity map; the safety
        layer compares it with a threshold.
    """

    kind: str
    det_a: float
    det_b: float
    cond_a: float
    cond_b: float
    margin: float
    extra: dict = field(default_factory=dict)


#: the methods to which a plant may pass the task pose hint ``pose=`` (a parallel model's
#: forward kinematics warm start), where :attr:`Model.pose_hint_methods` names them
POSE_HINT_METHODS = frozenset({"forward_dynamics", "mass_matrix", "kinetic_energy", "potential_energy"})


class Model(ABC):
    """Rigid-body model of a robot in its actuated coordinates.

    Subclasses implement the abstract methods; batch forms are part of the
    contract (see module docstring).
    """

    #: human-readable name (from the robot file)
    name: str = "model"
    #: file the model was loaded from (or None)
    source: str | None = None
    #: the model family (``"serial"``, ``"rrr"``, ``"stewart"``, ``"mechanism"``; None for the
    #: others).  Inherited like any attribute; the plant, the laws, the supervisor and the
    #: compiled loop take a family's compiled forms only for the class that declares it
    #: (:func:`dynamics.exact_model_kind`), since a subclass's methods may differ from them.
    family: ClassVar[str | None] = None
    #: the methods among :data:`POSE_HINT_METHODS` that take the task pose hint ``pose=`` (the
    #: shipped parallel models: all of them); the plant passes the hint to these only
    pose_hint_methods: ClassVar[frozenset[str]] = frozenset()

    # -- description ---------------------------------------------------------
    @property
    @abstractmethod
    def dof(self) -> int:
        """Number of actuated generalized coordinates n."""

    @property
    def joint_names(self) -> tuple[str, ...]:
        return tuple(f"q{i}" for i in range(self.dof))

    @property
    def joint_types(self) -> tuple[str, ...]:
        """``"revolute"`` (angle [rad], torque [N m]) or ``"prismatic"`` (displacement [m], force [N])
        per actuated coordinate, length n; revolute unless the model says otherwise."""
        return ("revolute",) * self.dof

    @property
    def limits(self) -> JointLimits:
        return JointLimits.unbounded(self.dof)

    @property
    def drive(self) -> DriveParams:
        return DriveParams.none(self.dof)

    @property
    def gravity_vector(self) -> np.ndarray:
        """Gravity acceleration in the base frame, shape (3,) [m/s^2]."""
        return np.array([0.0, 0.0, -9.81])

    # -- dynamics ------------------------------------------------------------
    @abstractmethod
    def mass_matrix(self, q: np.ndarray) -> np.ndarray:
        """Joint-space inertia matrix M(q), shape (n, n) or (N, n, n) [kg m^2]."""

    @abstractmethod
    def bias(self, q: np.ndarray, qd: np.ndarray) -> np.ndarray:
        """Coriolis, centrifugal and gravity torques h(q, qd) = C(q, qd) qd + g(q)."""

    def gravity(self, q: np.ndarray) -> np.ndarray:
        """Gravity torques g(q), shape like q [N m]."""
        q = np.asarray(q, dtype=float)
        return self.bias(q, np.zeros_like(q))

    @abstractmethod
    def coriolis_matrix(self, q: np.ndarray, qd: np.ndarray) -> np.ndarray:
        """Coriolis matrix C(q, qd) with dM/dt - 2C skew-symmetric, shape (n, n)."""

    def inverse_dynamics(self, q, qd, qdd, wrench=None) -> np.ndarray:
        """Actuator torques tau = M qdd + h (+ the effect of an external wrench).

        Parameters
        ----------
        q, qd, qdd : array_like, shape (n,) or (N, n)
            Position [rad|m], velocity and acceleration.
        wrench : array_like, shape (6,) or (N, 6), optional
            External wrench applied *by the environment on the tool/platform*,
            [fx, fy, fz, mx, my, mz] in the base frame, moment about the tool
            frame origin.  (Planar models document their own reduced form.)

        Returns
        -------
        tau : ndarray, shape like q
        """
        q = np.asarray(q, dtype=float)
        M = self.mass_matrix(q)
        tau = np.einsum("...ij,...j->...i", M, np.asarray(qdd, dtype=float)) + self.bias(q, qd)
        if wrench is not None:
            J = self.jacobian(q)
            tau = tau - np.einsum("...ji,...j->...i", J, np.asarray(wrench, dtype=float))
        return tau

    def forward_dynamics(self, q, qd, tau, wrench=None) -> np.ndarray:
        """Joint accelerations qdd solving M qdd = tau - h (+ J^T wrench)."""
        q = np.asarray(q, dtype=float)
        rhs = np.asarray(tau, dtype=float) - self.bias(q, qd)
        if wrench is not None:
            J = self.jacobian(q)
            rhs = rhs + np.einsum("...ji,...j->...i", J, np.asarray(wrench, dtype=float))
        M = self.mass_matrix(q)
        try:
            return np.linalg.solve(M, rhs[..., None])[..., 0]
        except np.linalg.LinAlgError as err:
            raise ModelError(f"{self.name}: singular mass matrix") from err

    def friction_torque(self, qd: np.ndarray) -> np.ndarray:
        """Friction torque opposing motion: viscous*qd + coulomb*sign(qd) [N m]."""
        qd = np.asarray(qd, dtype=float)
        d = self.drive
        return d.viscous * qd + d.coulomb * np.sign(qd)

    # -- energies ------------------------------------------------------------
    @abstractmethod
    def kinetic_energy(self, q, qd) -> np.ndarray:
        """Kinetic energy [J] (including armature), scalar or shape (N,)."""

    @abstractmethod
    def potential_energy(self, q) -> np.ndarray:
        """Gravitational potential energy [J], scalar or shape (N,)."""

    # -- kinematics ----------------------------------------------------------
    @abstractmethod
    def forward_kinematics(self, q) -> np.ndarray:
        """Pose of the tool (serial) or platform (parallel) frame, T_base_tool, (4, 4) or (N, 4, 4)."""

    @abstractmethod
    def jacobian(self, q) -> np.ndarray:
        """Geometric Jacobian of the tool frame, shape (6, n) or (N, 6, n).

        Rows are [v; omega] in the base frame, v of the tool frame origin.
        """

    def stick_figure(self, q, pose=None) -> tuple[list[np.ndarray], np.ndarray, np.ndarray | None]:
        """The robot drawn as polylines through its joints at actuated positions ``q``
        (``torqueloop animate``): each family draws its own links, the application none.

        Parameters
        ----------
        q : array_like, shape (n,)
            Actuated joint positions [rad | m].
        pose : array_like, optional
            Parallel robots: a guess of the task pose for the forward kinematics.

        Returns
        -------
        lines : list of ndarray, each (k, 3) [m]
            Polylines in the base frame.
        tool : ndarray, shape (3,) [m]
            Tool (serial), platform or task point (parallel) origin.
        X : ndarray or None
            Parallel robots: the task pose found (to warm-start the next frame).

        Raises
        ------
        ModelError
            The model family has no stick figure (the default).
        """
        raise ModelError(f"no stick figure for a {type(self).__name__} model")

    # -- variants ------------------------------------------------------------
    @abstractmethod
    def scaled(self, mass_factor: float = 1.0, inertia_factor: float | None = None) -> "Model":
        """A copy with every mass times ``mass_factor`` and every inertia tensor
        times ``inertia_factor`` (default: same as mass), e.g. a plant with +10 %
        mass and inertia error is ``model.scaled(1.1)``."""

    def with_payload(self, mass_kg: float) -> "Model":
        """A copy carrying a point mass of ``mass_kg`` [kg] where the model's payload sits
        (the 3RRR: the platform's centre).  Models without a payload point raise.

        Raises
        ------
        ModelError
            This model family has no payload point, or ``mass_kg`` is negative or not finite.
        """
        raise ModelError(f"{type(self).__name__} has no payload point (a payload is supported on "
                         "the 3RRR platform)")

    def to_mjcf(self, q0=None):
        """This robot as MJCF for an independent plant (:mod:`dynamics.mjcf`), assembled at the
        actuated positions ``q0`` (n,) [rad | m]; returns a :class:`dynamics.mjcf.MjcfRobot`.

        Raises
        ------
        ModelError
            The model family has no MJCF writer (the default).
        """
        raise ModelError(f"{type(self).__name__} has no MJCF writer: give the plant an mjcf file")

    def summary(self) -> str:
        """Multi-line human-readable description (used by ``torqueloop check``)."""
        lim = self.limits
        lines = [f"{type(self).__name__} '{self.name}'" + (f" from {self.source}" if self.source else ""),
                 f"  dof: {self.dof}  joints: {', '.join(self.joint_names)}",
                 f"  gravity [m/s^2]: {np.array2string(self.gravity_vector, precision=3)}",
                 f"  torque limits: {np.array2string(lim.torque_max, precision=3)}"]
        return "\n".join(lines)

    def __repr__(self) -> str:  # pragma: no cover - cosmetic
        return f"<{type(self).__name__} {self.name!r} dof={self.dof}>"


def xyz(p) -> np.ndarray:
    """Points (..., 2) of the base xy plane or (..., 3) as (..., 3) [m] (z = 0 added)."""
    p = np.asarray(p, dtype=float)
    return p if p.shape[-1] == 3 else np.concatenate([p, np.zeros(p.shape[:-1] + (1,))], axis=-1)


class ParallelModel(Model):
    """A parallel robot: actuated coordinates q (theta) plus a task pose X.

    ``X`` is the platform pose in task coordinates: (x, y, phi) for the planar
    3RRR, (x, y, z, alpha, beta, gamma) for the Stewart platform (see the
    subclass for the angle convention).
    """

    @property
    @abstractmethod
    def task_dof(self) -> int:
        """Number of task coordinates m."""

    @property
    def task_layout(self) -> str | None:
        """What the task coordinates are, for reports and metrics: ``"planar"`` (x, y [m], phi
        [rad]), ``"point"`` (x, y, z [m]), ``"planar_point"`` (x, y [m]), ``"spatial"`` (x, y, z
        [m], three angles [rad]), ``"orientation"`` (three angles [rad]) or None (other).  The default goes by :attr:`task_dof` (3: planar, 6: spatial); a model
        whose coordinates differ says so."""
        return {3: "planar", 6: "spatial"}.get(self.task_dof)

    def task_rotation(self) -> Callable | None:
        """The function ``angles (3,) -> R (3, 3)`` of the orientation coordinates of a 6-DOF task
        pose or a three-angle ``"orientation"`` task (the model's angle convention), or None (the
        default: none declared)."""
        return None

    def task_rate_matrix(self) -> Callable | None:
        """The closed-form ``angles (3,) -> E (3, 3)`` with ``omega = E angles_dot`` of the
        convention of :meth:`task_rotation`, or None (the default: computed numerically)."""
        return None

    @property
    def home_pose(self) -> np.ndarray:
        """A documented, non-singular reference pose X, shape (m,)."""
        raise NotImplementedError

    @abstractmethod
    def inverse_kinematics(self, X) -> np.ndarray:
        """Actuated coordinates q for pose X (raises UnreachableError naming the leg)."""

    @abstractmethod
    def forward_kinematics_task(self, q, guess=None) -> np.ndarray:
        """Pose X for actuated q by Newton iteration from ``guess`` (default: home pose).

        Raises ConvergenceError when Newton does not converge.
        """

    @abstractmethod
    def task_jacobian(self, q, X) -> np.ndarray:
        """Matrix J_x (m, n) with Xd = J_x qd at the consistent pair (q, X)."""

    @abstractmethod
    def task_inverse_dynamics(self, X, Xd, Xdd, wrench=None) -> np.ndarray:
        """Actuator torques/forces for a platform motion (and external wrench on it)."""

    @abstractmethod
    def singularity(self, q, X) -> SingularityReport:
        """Singularity measures at (q, X)."""
