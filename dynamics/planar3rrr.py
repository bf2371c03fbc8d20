"""Planar 3RRR parallel manipulator (seed 001, Abo-Shanab 2020).

Geometry and coordinates
------------------------
Three legs i = 0, 1, 2 (named "leg 1".."leg 3" in messages).  Leg i has an
actuated revolute joint at the fixed base point ``A_i``, a proximal link of
length ``a_i`` to the elbow ``B_i = A_i + a_i (cos th_i, sin th_i)``, and a
distal link of length ``b_i`` to the platform joint
``C_i = P + R(phi) c_i`` (``c_i`` given in the platform frame).

* actuated coordinates ``q = theta = (th_1, th_2, th_3)`` [rad], measured
  from the base x-axis (counter-clockwise), wrapped to (-pi, pi] by IK;
* task coordinates ``X = (x, y, phi)``: platform centre P [m] in the base
  frame and platform rotation phi [rad] about the base z-axis;
* passive angles ``psi_i``: absolute angle of the distal link B_i -> C_i.

Constraints (App. A of seed 001, in vector form)::

    h_i(theta, X) = |C_i(X) - B_i(th_i)|^2 - b_i^2 = 0          [m^2]

``A = dh/dtheta`` (diagonal), ``B = dh/dX`` (3x3); velocity map
``Xd = -B^{-1} A thetad`` (:meth:`Planar3RRR.task_jacobian`); the
acceleration maps add ``gamma_i = qd^T H_i qd`` with ``H_i`` the 6x6 Hessian
of ``h_i`` in ``(theta, X)``.

Elbow branch
------------
For a given platform joint C_i, IK has two solutions
``th_i = atan2(C_i - A_i) + branch_i * acos((r^2 + a^2 - b^2) / (2 a r))``.
``branch_i = +1`` puts the elbow counter-clockwise of the line A_i -> C_i;
equivalently ``sign(A_ii) = branch_i`` (``A_ii = 2 a_i b_i sin(psi_i - th_i)``
up to sign conventions, see :meth:`Planar3RRR.constraint_jacobians`).

Dynamics
--------
Bodies: proximal link (mass m_a, centre of mass at distance r_a from A_i
along the link, Izz_a about its centre of mass, plus the drive armature),
distal link (m_b, r_b from B_i, Izz_b), platform (m_p at P, Izz_p about P).
Because the distal centre of mass is ``(1 - k) B + k C`` with ``k = r_b/b``
and its angular rate is ``|vC - vB| / b``, its kinetic energy is the
quadratic form ``1/2 (mBB |vB|^2 + 2 mBC vB.vC + mCC |vC|^2)`` with
``mBB = m_b (1-k)^2 + I_b/b^2``, ``mBC = m_b k (1-k) - I_b/b^2``,
``mCC = m_b k^2 + I_b/b^2`` (for a uniform rod: m_b/3, m_b/6, m_b/3, the
form of seed 001 App. B).  The kinetic energy is thereby a function of the
redundant coordinates ``(theta, X)`` and their rates only.

Two independent inverse-dynamics formulations are implemented:

1. :meth:`Planar3RRR.task_inverse_dynamics` (Lagrange-D'Alembert, numba):
   the 6x6 inertia matrix is the Hessian ``d^2T/dqd^2`` of the kinetic
   energy in ``q = (theta, X)``, the velocity terms are
   ``C(q, qd) qd = Mdot qd - dT/dq``; with ``F = M qdd + C qd + dV/dq - Q_ext``
   the torques are ``tau = F_theta - A^T B^{-T} F_X`` (virtual work over
   the constraint-compatible displacements).  Joint rates come from the
   constraint Jacobians and Hessians.
2. :meth:`Planar3RRR.task_inverse_dynamics_multipliers` (Lagrange's
   equations of the first kind, App. B with the ERRATA fixes, generalised to
   arbitrary link parameters and gravity): the three platform equations
   (B.3)-(B.5) give the multipliers, the three joint equations (B.6)-(B.8)
   the torques.  Joint rates come from the loop closure with the passive
   angles (per-leg 2x2 solves), not from the constraint Jacobians.

Reduced dynamics in ``theta`` (the :class:`~dynamics.base.Model` interface):
with ``G = [I; J_x]`` (``qd = G thetad``),
``M(theta) = G^T M_full G``, ``h = G^T (M_full Gdot thetad + C_full qd + dV/dq)``
and ``C = G^T M_full Gdot + G^T C_full G`` (``Mdot - 2C`` is skew).  These
methods take ``theta`` and solve the forward kinematics internally; pass the
pose you track as ``pose=`` (it is used as the Newton start and is refined to
the solver tolerance, zero iterations when already consistent).

Assembly modes: for given ``theta`` the platform has up to 6 poses.  With a
``pose=`` hint, Newton converges to the pose near the hint; without one, the
forward kinematics continues from the home configuration along the straight
joint-space path (steps <= 0.1 rad), i.e. it returns the pose in the home's
assembly mode (the sign of det B is that of the home pose).  Callers that
track X should always pass it.

Performance: ``inverse_dynamics``, ``forward_dynamics``, ``mass_matrix`` and
``bias`` with a ``pose=`` hint, and ``task_inverse_dynamics`` without wrench or
branch, take a fast path (single numba kernel, float64 ndarray inputs; the
kernel validates shapes and finiteness): about 1.2-1.5 us per call, 2.4-2.9x
``pinocchio.rnea`` on a 3-DOF arm (``benchmarks/bench_parallel.py``).

Simulation without drift (:meth:`Planar3RRR.rk4_step`): the state is the
minimal set ``(theta, thetad)``; at every RK4 stage ``X`` is recovered from
``h(theta, X) = 0`` by Newton (warm-started from the previous pose), so the
constraint residual stays at the Newton tolerance by construction.

External wrench on the platform: ``(fx, fy, mz)`` [N, N, N m] in the base
frame, moment about the platform centre P.  A 6-vector
``[fx, fy, fz, mx, my, mz]`` is accepted too; ``fz, mx, my`` are carried by
the joint bearings (out of the plane of motion) and do not load the drives.

Robot file (TOML), ``type = "planar_3rrr"``::

    name = "3rrr_horizontal"
    type = "planar_3rrr"
    gravity = [0.0, 0.0]                 # in-plane gravity [m/s^2]
    home_pose = [0.0, 0.0, 0.0]          # [x m, y m, phi rad], non-singular
    elbow_branch = [1, 1, 1]             # +1 / -1 per leg
    joint_names = ["theta1", "theta2", "theta3"]          # optional
    base_joints = [[x, y], [x, y], [x, y]]                 # m, or:
    base_radius = 0.5                                      # m
    base_angles_deg = [90.0, 210.0, 330.0]
    platform_joints = [[x, y], ...]      # platform frame, m, or:
    platform_radius = 0.1
    platform_angles_deg = [90.0, 210.0, 330.0]
    singularity_tolerance = 1e-6         # optional, see Planar3RRR

    [proximal]      # every value: a number (shared) or a list of 3 (per leg)
    length = 0.3    # m
    mass = 0.5      # kg
    com = 0.15      # m, centre of mass from the base joint along the link
    inertia = 0.00375   # kg m^2, Izz about the centre of mass

    [distal]        # same keys; com measured from the elbow B_i
    ...
    [platform]
    mass = 1.0      # kg, centre of mass at the platform centre P
    inertia = 0.005 # kg m^2, Izz about P

    [actuators]     # optional; number or list of 3
    position_min = -3.1416   # rad
    position_max = 3.1416
    velocity_max = 10.0      # rad/s
    torque_max = 20.0        # N m

    [drive]         # optional; number or list of 3, joint side
    rotor_inertia = 1e-5     # kg m^2 (motor side)
    gear_ratio = 10.0        # armature = rotor_inertia * gear_ratio^2
    viscous = 0.01           # N m s/rad
    coulomb = 0.05           # N m
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import _planar3rrr_kernels as K
from .base import (GEAR_RATIO_RANGE, POSE_HINT_METHODS, DriveParams, JointLimits, ParallelModel, SingularityReport,
                   xyz)
from .config import Section
from .errors import (ConfigError, ConvergenceError, KinematicsError, ModelError,
                     SingularityError, UnreachableError)

__all__ = ["Planar3RRR", "load_3rrr", "LinkParams"]

_F64 = np.float64
_ND = np.ndarray


@dataclass(frozen=True)
class LinkParams:
    """Per-leg parameters of one link type; arrays of shape (3,).

    ``length`` [m], ``mass`` [kg], ``com`` [m] (distance of the centre of mass
    from the link's first joint along the link), ``inertia`` [kg m^2] (Izz
    about the centre of mass).
    """

    length: np.ndarray
    mass: np.ndarray
    com: np.ndarray
    inertia: np.ndarray


def _ro(a) -> np.ndarray:
    a = np.array(a, dtype=float)
    a.setflags(write=False)
    return a


def _leg_name(i: int) -> str:
    return f"leg {i + 1} (theta{i + 1})"


class Planar3RRR(ParallelModel):
    """Rigid-body model of a planar 3RRR parallel robot (see the module docstring).

    Parameters
    ----------
    base_joints : array_like, shape (3, 2)
        Actuated joints A_i in the base frame [m].
    platform_joints : array_like, shape (3, 2)
        Platform joints c_i in the platform frame [m].
    proximal, distal : LinkParams
        Link parameters per leg.
    platform_mass : float
        [kg], centre of mass at the platform centre.
    platform_inertia : float
        Izz about the platform centre [kg m^2].
    gravity : array_like, shape (2,)
        In-plane gravity [m/s^2] (``[0, 0]`` for a horizontal robot).
    elbow_branch : array_like of +1/-1, shape (3,)
        Default IK branch per leg.
    home_pose : array_like, shape (3,)
        Reference pose (x [m], y [m], phi [rad]); must be reachable and non-singular.
    limits : JointLimits, optional
    drive : DriveParams, optional
        ``drive.armature`` is added to the proximal inertia about the base joint.
    name : str
    source : str, optional
    joint_names : sequence of str, optional
    singularity_tolerance : float
        A configuration is treated as singular (SingularityError) when
        min_i |sin(psi_i - th_i)| (type 1) or |det B_n| (type 2, B with rows
        divided by 2 b_i and the phi column divided by the mean platform
        radius) falls below this value.

    Raises
    ------
    ModelError
        For inconsistent shapes or non-physical values.
    KinematicsError
        If the home pose is unreachable or singular.
    """

    family = "rrr"
    pose_hint_methods = POSE_HINT_METHODS

    def __init__(self, base_joints, platform_joints, proximal: LinkParams, distal: LinkParams,
                 platform_mass: float, platform_inertia: float, gravity=(0.0, 0.0),
                 elbow_branch=(1, 1, 1), home_pose=(0.0, 0.0, 0.0), limits: JointLimits | None = None,
                 drive: DriveParams | None = None, name: str = "3rrr", source: str | None = None,
                 joint_names=None, singularity_tolerance: float = 1e-6):
        A = np.asarray(base_joints, dtype=float)
        c = np.asarray(platform_joints, dtype=float)
        if A.shape != (3, 2) or c.shape != (3, 2):
            raise ModelError("base_joints and platform_joints must have shape (3, 2)")
        for lp, nm in ((proximal, "proximal"), (distal, "distal")):
            for f in ("length", "mass", "com", "inertia"):
                v = np.asarray(getattr(lp, f), dtype=float)
                if v.shape != (3,) or not np.all(np.isfinite(v)):
                    raise ModelError(f"{nm}.{f} must be 3 finite numbers")
            if np.any(np.asarray(lp.length) <= 0) or np.any(np.asarray(lp.mass) < 0) \
                    or np.any(np.asarray(lp.inertia) < 0):
                raise ModelError(f"{nm}: lengths must be > 0, masses and inertias >= 0")
        if not (0 <= platform_mass < math.inf and 0 <= platform_inertia < math.inf):
            raise ModelError("platform mass and inertia must be finite and >= 0")
        if not (0 < singularity_tolerance < 1):
            raise ModelError("singularity_tolerance must be in (0, 1)")
        br = np.asarray(elbow_branch, dtype=float)
        if br.shape != (3,) or not np.all(np.abs(br) == 1):
            raise ModelError("elbow_branch must be 3 values of +1 or -1")
        g = np.asarray(gravity, dtype=float)
        if g.shape != (2,) or not np.all(np.isfinite(g)):
            raise ModelError("gravity must be 2 finite numbers")
        self.name = name
        self.source = source
        self._A = _ro(A)
        self._c = _ro(c)
        self._prox = LinkParams(*(_ro(getattr(proximal, f)) for f in ("length", "mass", "com", "inertia")))
        self._dist = LinkParams(*(_ro(getattr(distal, f)) for f in ("length", "mass", "com", "inertia")))
        self._mp = float(platform_mass)
        self._Ip = float(platform_inertia)
        self._g = _ro(g)
        self._branch = _ro(br)
        self._branch_k = br.copy()
        self._limits = limits if limits is not None else JointLimits.unbounded(3)
        self._drive = drive if drive is not None else DriveParams.none(3)
        self._names = tuple(joint_names) if joint_names is not None else ("theta1", "theta2", "theta3")
        if len(self._names) != 3:
            raise ModelError("joint_names must have 3 entries")
        self._tol_sing = float(singularity_tolerance)
        self._zero3 = np.zeros(3)  # writeable on purpose (fast numba dispatch); never modified
        self._pack()
        hp = np.asarray(home_pose, dtype=float)
        if hp.shape != (3,) or not np.all(np.isfinite(hp)):
            raise ModelError("home_pose must be 3 finite numbers")
        self._home = _ro(hp)
        th = self.inverse_kinematics(hp)  # UnreachableError naming the leg
        rep = self.singularity(th, hp)
        if rep.kind != "regular" or rep.extra["type1_measure"] < self._tol_sing \
                or abs(rep.extra["type2_measure"]) < self._tol_sing:
            raise SingularityError(f"{self.name}: home pose {hp.tolist()} is singular ({rep.kind}; "
                                   f"type-1 measure {rep.extra['type1_measure']:.3g}, "
                                   f"type-2 measure {rep.extra['type2_measure']:.3g})")
        self._home_q = _ro(th)
        self._home_q_k = th.copy()   # writeable copies for the kernels
        self._home_k = hp.copy()
        self._fk_step = 0.1
        M = self.mass_matrix(th, pose=hp)
        if np.min(np.linalg.eigvalsh(M)) <= 0:
            raise ModelError(f"{self.name}: mass matrix is not positive definite at the home pose "
                             "(all inertias zero?)")

    # ------------------------------------------------------------------ packing
    def _pack(self) -> None:
        L = np.zeros((3, K.NL))
        p, d = self._prox, self._dist
        arm = np.asarray(self._drive.armature, dtype=float)
        for i in range(3):
            b = d.length[i]
            k = d.com[i] / b
            mb, Ib = d.mass[i], d.inertia[i]
            L[i, 0:2] = self._A[i]
            L[i, 2:4] = self._c[i]
            L[i, 4] = p.length[i]
            L[i, 5] = b
            L[i, 6] = p.inertia[i] + p.mass[i] * p.com[i] ** 2 + arm[i]
            L[i, 7] = p.mass[i] * p.com[i]
            L[i, 8] = mb * (1 - k) ** 2 + Ib / b ** 2
            L[i, 9] = mb * k * (1 - k) - Ib / b ** 2
            L[i, 10] = mb * k ** 2 + Ib / b ** 2
            L[i, 11] = mb * (1 - k)
            L[i, 12] = mb * k
        lc = float(np.mean(np.linalg.norm(self._c, axis=1)))
        if lc <= 0:
            lc = 1.0
        G = np.array([self._mp, self._Ip, self._g[0], self._g[1], lc])
        # kernel inputs stay writeable (numba dispatch of read-only arrays costs ~1 us
        # per call); they are private and never handed out, so the model stays immutable
        self._L = L
        self._G = G
        P = np.zeros((4, K.NL))
        P[:3] = L
        P[3, :5] = G
        P[3, 5] = self._tol_sing
        self._P = P

    # -------------------------------------------------------------- description
    @property
    def dof(self) -> int:
        return 3

    @property
    def task_dof(self) -> int:
        return 3

    @property
    def joint_names(self) -> tuple[str, ...]:
        return self._names

    @property
    def limits(self) -> JointLimits:
        return self._limits

    @property
    def drive(self) -> DriveParams:
        return self._drive

    @property
    def gravity_vector(self) -> np.ndarray:
        """Gravity [m/s^2] in the base frame, shape (3,), z component 0."""
        return np.array([self._g[0], self._g[1], 0.0])

    @property
    def home_pose(self) -> np.ndarray:
        """Reference pose (x [m], y [m], phi [rad]), shape (3,)."""
        return self._home.copy()

    @property
    def home_q(self) -> np.ndarray:
        """Actuated angles at the home pose with the default branch, shape (3,)."""
        return self._home_q.copy()

    @property
    def elbow_branch(self) -> np.ndarray:
        return self._branch.copy()

    @property
    def base_joints(self) -> np.ndarray:
        return self._A.copy()

    @property
    def platform_joints(self) -> np.ndarray:
        return self._c.copy()

    @property
    def proximal(self) -> LinkParams:
        return self._prox

    @property
    def distal(self) -> LinkParams:
        return self._dist

    @property
    def platform_mass(self) -> float:
        return self._mp

    @property
    def platform_inertia(self) -> float:
        return self._Ip

    @property
    def singularity_tolerance(self) -> float:
        return self._tol_sing

    def summary(self) -> str:
        s = super().summary()
        return s + (f"\n  home pose [m, m, rad]: {np.array2string(self._home, precision=4)}"
                    f"\n  elbow branch: {self._branch.astype(int).tolist()}")

    # ------------------------------------------------------------------ helpers
    def _v3(self, x, what: str) -> np.ndarray:
        if type(x) is np.ndarray and x.dtype == _F64 and x.shape == (3,) and x.flags.c_contiguous:
            if not all(map(math.isfinite, x.tolist())):     # (a numpy reduction costs more on 3 values)
                raise ModelError(f"{self.name}: {what} must be finite, got {x}")
            return x
        a = np.ascontiguousarray(x, dtype=float)
        if a.shape != (3,):
            raise ModelError(f"{self.name}: {what} must have shape (3,), got {a.shape}")
        if not np.isfinite(a).all():
            raise ModelError(f"{self.name}: {what} must be finite, got {a}")
        return a

    def _wrench3(self, w) -> np.ndarray:
        if w is None:
            return np.zeros(3)
        a = np.asarray(w, dtype=float)
        if a.shape == (6,):
            a = a[[0, 1, 5]]
        elif a.shape != (3,):
            raise ModelError(f"{self.name}: wrench must be (fx, fy, mz) shape (3,) or a 6-vector, "
                             f"got shape {a.shape}")
        if not np.isfinite(a).all():
            raise ModelError(f"{self.name}: wrench must be finite")
        return np.ascontiguousarray(a)

    def _branch_arr(self, branch) -> np.ndarray:
        if branch is None:
            return self._branch_k
        b = np.asarray(branch, dtype=float)
        if b.shape == ():
            b = np.full(3, float(b))
        if b.shape != (3,) or not np.all(np.abs(b) == 1):
            raise ModelError(f"{self.name}: branch must be +1/-1 per leg, got {branch!r}")
        return b

    def _raise(self, st: int, what: str, q=None, X=None):
        where = ""
        if q is not None:
            where += f" theta={np.asarray(q).tolist()}"
        if X is not None:
            where += f" X={np.asarray(X).tolist()}"
        if K.ST_UNREACH <= st < K.ST_UNREACH + 3:
            i = st - K.ST_UNREACH
            raise UnreachableError(f"{self.name}: {what}: {_leg_name(i)} cannot reach its platform "
                                   f"joint at{where}")
        if K.ST_TYPE1 <= st < K.ST_TYPE1 + 3:
            i = st - K.ST_TYPE1
            raise SingularityError(f"{self.name}: {what}: type-1 (serial) singularity, "
                                   f"{_leg_name(i)} is fully stretched or folded at{where}")
        if st == K.ST_TYPE2:
            raise SingularityError(f"{self.name}: {what}: type-2 (parallel) singularity, "
                                   f"det B ~ 0 at{where}")
        if st == K.ST_NOCONV:
            raise ConvergenceError(f"{self.name}: {what}: Newton did not converge at{where}")
        if st == K.ST_BADSHAPE:
            raise ModelError(f"{self.name}: {what}: every input must have shape (3,)")
        if st == K.ST_BADINPUT:
            raise ModelError(f"{self.name}: {what}: inputs must be finite")
        if st == K.ST_NONFINITE:
            raise ConvergenceError(f"{self.name}: {what}: Newton diverged (non-finite) at{where}")
        raise ModelError(f"{self.name}: {what}: internal status {st}")  # pragma: no cover

    def _batch(self, fn, *arrays, pose=None, out_shape=()):
        """Apply ``fn(*rows, pose=row_pose)`` over a batch of rows."""
        arrs = [np.asarray(a, dtype=float) for a in arrays]
        N = arrs[0].shape[0]
        for a in arrs:
            if a.ndim != 2 or a.shape[0] != N:
                raise ModelError(f"{self.name}: batch inputs must all have shape (N, 3)")
        P = None if pose is None else np.asarray(pose, dtype=float)
        if P is not None and P.shape != (N, 3):
            raise ModelError(f"{self.name}: pose must have shape (N, 3) for a batch")
        out = np.empty((N,) + out_shape)
        for j in range(N):
            out[j] = fn(*(a[j] for a in arrs), pose=None if P is None else P[j])
        return out

    # ------------------------------------------------------------- kinematics
    def inverse_kinematics(self, X, branch=None) -> np.ndarray:
        """Actuated angles for a platform pose.

        Parameters
        ----------
        X : array_like, shape (3,) or (N, 3)
            Platform pose (x [m], y [m], phi [rad]).
        branch : +1/-1 or array_like (3,), optional
            Elbow branch per leg (default: the robot file's ``elbow_branch``).

        Returns
        -------
        theta : ndarray, shape like X [rad], wrapped to (-pi, pi].

        Raises
        ------
        UnreachableError
            Naming the first leg that cannot reach its platform joint.
        """
        Xa = np.asarray(X, dtype=float)
        if Xa.ndim == 2:
            return np.array([self.inverse_kinematics(x, branch) for x in Xa]).reshape(-1, 3)
        Xa = self._v3(Xa, "X")
        th = np.empty(3)
        st = K.ik(self._L, Xa, self._branch_arr(branch), th)
        if st:
            self._raise(st, "inverse kinematics", X=Xa)
        return th

    def platform_joint_positions(self, X) -> np.ndarray:
        """Platform joints C_i in the base frame, shape (3, 2) [m]."""
        X = self._v3(X, "X")
        c, s = math.cos(X[2]), math.sin(X[2])
        R = np.array([[c, -s], [s, c]])
        return X[:2] + self._c @ R.T

    def stick_figure(self, q, pose=None):
        """The three legs (base joint, elbow, platform joint) and the platform triangle at the
        pose found by forward kinematics from ``pose`` (see :meth:`dynamics.base.Model.stick_figure`)."""
        X = self.forward_kinematics_task(q, guess=pose)
        A, B, C = self.base_joints, self.elbow_positions(q), self.platform_joint_positions(X)
        legs = [xyz(np.vstack([A[i], B[i], C[i]])) for i in range(3)]
        return legs + [xyz(np.vstack([C, C[:1]]))], xyz(X[:2]), X

    def elbow_positions(self, q) -> np.ndarray:
        """Elbows B_i in the base frame, shape (3, 2) [m]."""
        q = self._v3(q, "theta")
        return self._A + self._prox.length[:, None] * np.stack([np.cos(q), np.sin(q)], axis=1)

    def passive_angles_at(self, q, X) -> np.ndarray:
        """Absolute distal-link angles psi_i (direction B_i -> C_i) at (q, X), shape (3,) [rad]."""
        d = self.platform_joint_positions(X) - self.elbow_positions(q)
        return np.arctan2(d[:, 1], d[:, 0])

    def passive_angles(self, X, branch=None) -> np.ndarray:
        """Absolute distal-link angles psi_i for the IK solution of X on ``branch``, shape (3,)."""
        return self.passive_angles_at(self.inverse_kinematics(X, branch), X)

    def forward_kinematics_task(self, q, guess=None, tol: float = 1e-12, max_iter: int = 50) -> np.ndarray:
        """Platform pose X for actuated angles q, by Newton on h(q, X) = 0.

        Parameters
        ----------
        q : array_like, shape (3,) or (N, 3)
            Actuated angles [rad].
        guess : array_like, shape (3,) or (N, 3), optional
            Newton start; the assembly mode found is the one this start
            converges to.  Default: continuation from the home configuration
            along the straight joint-space path (steps of at most 0.1 rad, one
            warm-started Newton solve each), i.e. the assembly mode of the home
            pose (unless the path crosses a type-2 singularity).
        tol : float
            Convergence when max_i |h_i| / (2 b_i) <= tol [m].
        max_iter : int

        Returns
        -------
        X : ndarray, shape like q.

        Raises
        ------
        ConvergenceError
            When Newton does not converge (q outside the workspace, or a far start).
        SingularityError
            When Newton meets an exactly singular B.
        """
        qa = np.asarray(q, dtype=float)
        if qa.ndim == 2:
            gs = None if guess is None else np.broadcast_to(np.asarray(guess, dtype=float), qa.shape)
            return np.array([self.forward_kinematics_task(qa[j], None if gs is None else gs[j], tol, max_iter)
                             for j in range(qa.shape[0])]).reshape(-1, 3)
        qa = self._v3(qa, "theta")
        X = np.empty(3)
        if guess is None:
            st, _ = K.fk_continuation(self._L, self._home_q_k, self._home_k, qa, float(tol),
                                      int(max_iter), self._fk_step, X)
        else:
            st, _ = K.fk_newton(self._L, qa, self._v3(guess, "guess"), float(tol), int(max_iter), X)
        if st:
            self._raise(st, "forward kinematics", q=qa)
        return X

    def _pose(self, q, pose):
        """Consistent pose for q: Newton from ``pose``, or continuation from home; tol 1e-12 m."""
        X = np.empty(3)
        if pose is None:
            st, _ = K.fk_continuation(self._L, self._home_q_k, self._home_k, q, 1e-12, 50,
                                      self._fk_step, X)
        else:
            st, _ = K.fk_newton(self._L, q, self._v3(pose, "pose"), 1e-12, 50, X)
        if st:
            self._raise(st, "forward kinematics", q=q)
        return X

    def forward_kinematics(self, q, pose=None) -> np.ndarray:
        """T_base_platform, shape (4, 4) or (N, 4, 4): z up, rotation phi about z, origin at P."""
        qa = np.asarray(q, dtype=float)
        if qa.ndim == 2:
            return self._batch(self.forward_kinematics, qa, pose=pose, out_shape=(4, 4))
        qa = self._v3(qa, "theta")
        X = self._pose(qa, pose)
        c, s = math.cos(X[2]), math.sin(X[2])
        T = np.eye(4)
        T[0, 0], T[0, 1], T[1, 0], T[1, 1] = c, -s, s, c
        T[0, 3], T[1, 3] = X[0], X[1]
        return T

    def constraints(self, q, X) -> np.ndarray:
        """h_i(q, X) = |C_i - B_i|^2 - b_i^2, shape (3,) [m^2]."""
        h = np.empty(3)
        K.constraint_values(self._L, self._v3(q, "theta"), self._v3(X, "X"), h)
        return h

    def _geom(self, q, X):
        """u, n, rho, d, each (3, 2) (module notation), computed with numpy."""
        u = np.stack([np.cos(q), np.sin(q)], axis=1)
        n = np.stack([-u[:, 1], u[:, 0]], axis=1)
        c, s = math.cos(X[2]), math.sin(X[2])
        rho = self._c @ np.array([[c, s], [-s, c]])
        d = X[:2] + rho - self._A - self._prox.length[:, None] * u
        return u, n, rho, d

    def _jac(self, n, rho, d):
        Ad = -2.0 * self._prox.length * np.sum(d * n, axis=1)
        B = 2.0 * np.stack([d[:, 0], d[:, 1], -d[:, 0] * rho[:, 1] + d[:, 1] * rho[:, 0]], axis=1)
        return Ad, B

    def _gamma(self, q, u, rho, d, qd, Xd):
        a = self._prox.length
        vB = (a * qd)[:, None] * np.stack([-u[:, 1], u[:, 0]], axis=1)
        vC = Xd[:2] + Xd[2] * np.stack([-rho[:, 1], rho[:, 0]], axis=1)
        w = vC - vB
        acc = -Xd[2] ** 2 * rho + (a * qd ** 2)[:, None] * u
        return 2.0 * np.sum(w * w, axis=1) + 2.0 * np.sum(d * acc, axis=1)

    def constraint_jacobians(self, q, X) -> tuple[np.ndarray, np.ndarray]:
        """A = dh/dq (3x3 diagonal) and B = dh/dX (3x3) at (q, X).

        ``A_ii = -2 a_i d_i.n_i``, ``B_i = 2 [d_x, d_y, d.(R(phi) c_i)^perp]``
        with ``d_i = C_i - B_i``.
        """
        q = self._v3(q, "theta"); X = self._v3(X, "X")
        u, n, rho, d = self._geom(q, X)
        Ad, B = self._jac(n, rho, d)
        return np.diag(Ad), B

    def constraint_hessians(self, q, X) -> np.ndarray:
        """Hessians H_i = d^2 h_i / dz^2 with z = (th1, th2, th3, x, y, phi), shape (3, 6, 6)."""
        q = self._v3(q, "theta"); X = self._v3(X, "X")
        u, n, rho, d = self._geom(q, X)
        H = np.zeros((3, 6, 6))
        for i in range(3):
            a = self._L[i, 4]
            # Jd = d(d_i)/dz, 2x6
            Jd = np.zeros((2, 6))
            Jd[:, i] = -a * n[i]
            Jd[:, 3] = (1.0, 0.0)
            Jd[:, 4] = (0.0, 1.0)
            Jd[:, 5] = (-rho[i, 1], rho[i, 0])
            Hi = 2.0 * Jd.T @ Jd
            # second derivatives of d: d2d/dth_i^2 = a u ; d2d/dphi^2 = -rho
            Hi[i, i] += 2.0 * a * (d[i] @ u[i])
            Hi[5, 5] += 2.0 * (d[i] @ (-rho[i]))
            H[i] = Hi
        return H

    def _AB(self, q, X, what):
        q = self._v3(q, "theta"); X = self._v3(X, "X")
        u, n, rho, d = self._geom(q, X)
        Ad, B = self._jac(n, rho, d)
        st = K.check_singular(self._L, self._G, Ad, B.ravel(), self._tol_sing)
        if st:
            self._raise(st, what, q=q, X=X)
        return q, X, u, rho, d, Ad, B

    def task_jacobian(self, q, X) -> np.ndarray:
        """J_x = -B^{-1} A (3x3): Xd = J_x qd at the consistent pair (q, X).

        Raises SingularityError at (or numerically near) a type-1 or type-2 singularity.
        """
        if type(q) is _ND and type(X) is _ND and q.ndim == 1 and X.ndim == 1:
            # fast path (one kernel call); any problem is reported by the checked path below
            out = np.empty(9)
            if K.jx_entry(self._P, q, X, out) == 0:
                return out.reshape(3, 3)
        q, X, u, rho, d, Ad, B = self._AB(q, X, "task_jacobian")
        return -np.linalg.solve(B, np.diag(Ad))

    def inverse_task_jacobian(self, q, X) -> np.ndarray:
        """-A^{-1} B (3x3): qd = (-A^{-1} B) Xd."""
        q, X, u, rho, d, Ad, B = self._AB(q, X, "inverse_task_jacobian")
        return -B / Ad[:, None]

    def joint_velocity(self, q, X, Xd) -> np.ndarray:
        """qd = -A^{-1} B Xd, shape (3,) [rad/s]."""
        return self.inverse_task_jacobian(q, X) @ self._v3(Xd, "Xd")

    def task_velocity(self, q, X, qd) -> np.ndarray:
        """Xd = -B^{-1} A qd, shape (3,)."""
        return self.task_jacobian(q, X) @ self._v3(qd, "qd")

    def constraint_gamma(self, q, X, qd, Xd) -> np.ndarray:
        """gamma_i = zd^T H_i zd, z = (q, X): the velocity-product part of d^2h/dt^2, shape (3,)."""
        q = self._v3(q, "theta"); X = self._v3(X, "X")
        u, n, rho, d = self._geom(q, X)
        return self._gamma(q, u, rho, d, self._v3(qd, "qd"), self._v3(Xd, "Xd"))

    def task_acceleration(self, q, X, qd, qdd) -> np.ndarray:
        """Xdd = -B^{-1} (A qdd + gamma), gamma_i = zd^T H_i zd; shape (3,)."""
        q, X, u, rho, d, Ad, B = self._AB(q, X, "task_acceleration")
        qd = self._v3(qd, "qd"); qdd = self._v3(qdd, "qdd")
        Xd = -np.linalg.solve(B, Ad * qd)
        g = self._gamma(q, u, rho, d, qd, Xd)
        return -np.linalg.solve(B, Ad * qdd + g)

    def joint_acceleration(self, q, X, Xd, Xdd) -> np.ndarray:
        """qdd = -A^{-1} (B Xdd + gamma); shape (3,)."""
        q, X, u, rho, d, Ad, B = self._AB(q, X, "joint_acceleration")
        Xd = self._v3(Xd, "Xd"); Xdd = self._v3(Xdd, "Xdd")
        qd = -(B @ Xd) / Ad
        g = self._gamma(q, u, rho, d, qd, Xd)
        return -(B @ Xdd + g) / Ad

    def _geom_batch(self, q, X):
        """:meth:`_geom` and :meth:`_jac` of N states (N, 3) at once, as the single-state methods
        compute them; None when a state is not finite or the singularity check of :meth:`_AB`
        rejects it (the caller then lets the single-state methods raise their own error)."""
        N = q.shape[0]
        if not (np.isfinite(q).all() and np.isfinite(X).all()):
            return None
        u = np.stack([np.cos(q), np.sin(q)], axis=2)                      # (N, 3, 2)
        n = np.stack([-u[:, :, 1], u[:, :, 0]], axis=2)
        c = np.fromiter(map(math.cos, X[:, 2]), float, N)             # as math.cos per state
        s = np.fromiter(map(math.sin, X[:, 2]), float, N)
        R = np.stack([np.stack([c, s], axis=1), np.stack([-s, c], axis=1)], axis=1)   # (N, 2, 2)
        rho = self._c @ R
        d = X[:, None, :2] + rho - self._A - self._prox.length[:, None] * u
        Ad = -2.0 * self._prox.length * np.sum(d * n, axis=2)                # (N, 3)
        B = 2.0 * np.stack([d[:, :, 0], d[:, :, 1], -d[:, :, 0] * rho[:, :, 1] + d[:, :, 1] * rho[:, :, 0]],
                           axis=2)                                           # (N, 3, 3)
        Bf = B.reshape(N, 9)
        for i in range(N):
            if K.check_singular(self._L, self._G, Ad[i], Bf[i], self._tol_sing):
                return None
        return u, rho, d, Ad, B

    def _gamma_batch(self, u, rho, d, qd, Xd):
        """:meth:`_gamma` of N states: u, rho, d (N, 3, 2), qd, Xd (N, 3)."""
        a = self._prox.length
        vB = (a * qd)[:, :, None] * np.stack([-u[:, :, 1], u[:, :, 0]], axis=2)
        vC = Xd[:, None, :2] + Xd[:, None, 2:3] * np.stack([-rho[:, :, 1], rho[:, :, 0]], axis=2)
        w = vC - vB
        # the single-state method squares the scalar phi rate with pow() (libm), not x * x
        phid2 = np.fromiter((v ** 2 for v in Xd[:, 2].tolist()), float, qd.shape[0])
        acc = -phid2[:, None, None] * rho + (a * qd ** 2)[:, :, None] * u
        return 2.0 * np.sum(w * w, axis=2) + 2.0 * np.sum(d * acc, axis=2)

    @staticmethod
    def _rows(*arrays):
        return tuple(np.ascontiguousarray(a, dtype=float).reshape(-1, 3) for a in arrays)

    def joint_rates_batch(self, q, X, Xd, Xdd):
        """:meth:`joint_velocity` and :meth:`joint_acceleration` of N states at once.

        The same operations as the single-state methods, on stacked arrays (per state the
        same numbers: ``tests/test_3rrr_kinematics.py``), so a trajectory of N samples is
        mapped without N Python calls.  Any state the single-state methods would reject
        (not finite, at or near a singularity) makes the whole batch fall back to them,
        so the error raised is theirs.

        Parameters
        ----------
        q, X, Xd, Xdd : array_like, shape (N, 3)
            Joint angles [rad] and the consistent platform pose (x, y [m], phi [rad]) with
            its rate and acceleration.

        Returns
        -------
        qd, qdd : ndarray, shape (N, 3)
            Joint rates [rad/s] and accelerations [rad/s^2].
        """
        q, X, Xd, Xdd = self._rows(q, X, Xd, Xdd)
        N = q.shape[0]
        geom = self._geom_batch(q, X) if (np.isfinite(Xd).all() and np.isfinite(Xdd).all()) else None
        if geom is None:
            return (np.stack([self.joint_velocity(q[i], X[i], Xd[i]) for i in range(N)]),
                    np.stack([self.joint_acceleration(q[i], X[i], Xd[i], Xdd[i]) for i in range(N)]))
        u, rho, d, Ad, B = geom
        qd = ((-B / Ad[:, :, None]) @ Xd[:, :, None])[:, :, 0]
        # joint_acceleration: its own qd, then gamma (_gamma) and qdd
        qd_a = -(B @ Xd[:, :, None])[:, :, 0] / Ad
        g = self._gamma_batch(u, rho, d, qd_a, Xd)
        qdd = -((B @ Xdd[:, :, None])[:, :, 0] + g) / Ad
        return qd, qdd

    def task_acceleration_batch(self, q, X, qd, qdd) -> np.ndarray:
        """:meth:`task_acceleration` of N states at once (per state the same numbers).

        As :meth:`joint_rates_batch`: a state the single-state method would reject makes
        the batch fall back to it, so the error raised is its own.

        Parameters
        ----------
        q, X, qd, qdd : array_like, shape (N, 3)
            Joint angles [rad], the consistent platform pose (x, y [m], phi [rad]), joint
            rates [rad/s] and accelerations [rad/s^2].

        Returns
        -------
        Xdd : ndarray, shape (N, 3)
            Platform acceleration (m/s^2, m/s^2, rad/s^2).
        """
        q, X, qd, qdd = self._rows(q, X, qd, qdd)
        N = q.shape[0]
        geom = self._geom_batch(q, X) if (np.isfinite(qd).all() and np.isfinite(qdd).all()) else None
        if geom is None:
            return np.stack([self.task_acceleration(q[i], X[i], qd[i], qdd[i]) for i in range(N)]).reshape(N, 3)
        u, rho, d, Ad, B = geom
        Xd = -np.linalg.solve(B, (Ad * qd)[:, :, None])[:, :, 0]
        g = self._gamma_batch(u, rho, d, qd, Xd)
        return -np.linalg.solve(B, (Ad * qdd + g)[:, :, None])[:, :, 0]

    def singularity(self, q, X) -> SingularityReport:
        """Singularity measures at (q, X).

        ``kind`` is decided with ``singularity_tolerance`` on the normalised
        measures (``extra['type1_measure']`` = min_i |sin(psi_i - th_i)|,
        ``extra['type2_measure']`` = det of the normalised B).  ``det_a``,
        ``det_b`` are the raw determinants [m^6]; ``cond_a``, ``cond_b`` the
        2-norm condition numbers of the normalised A and B; ``margin`` is
        1/cond of the velocity map with its phi row scaled by the mean platform
        radius (0 when singular).
        """
        q = self._v3(q, "theta"); X = self._v3(X, "X")
        out = np.empty(8)
        if K.sing_entry(self._P, q, X, out) == 0 and (out[4] >= 0.0 or out[4] == -1.0):
            # fast path (one kernel call, same measures)
            m1, db = float(out[0]), float(out[1])
            t1 = m1 < self._tol_sing
            t2 = abs(db) < self._tol_sing
            kind = "both" if (t1 and t2) else "type1" if t1 else "type2" if t2 else "regular"
            margin = float(out[4]) if kind == "regular" else 0.0
            if margin >= 0.0:
                return SingularityReport(kind=kind, det_a=float(out[5]), det_b=float(out[6]),
                                         cond_a=float(out[2]), cond_b=float(out[3]), margin=margin,
                                         extra={"type1_measure": m1, "type2_measure": db,
                                                "worst_leg": int(out[7])})
        u, n, rho, d = self._geom(q, X)
        Ad, B = self._jac(n, rho, d)
        m1, db = K.normalised_measures(self._L, self._G, Ad, np.ascontiguousarray(B.ravel()))
        lc = self._G[4]
        An = Ad / (2 * self._L[:, 4] * self._L[:, 5])
        Bn = B / (2 * self._L[:, 5])[:, None]
        Bn[:, 2] /= lc
        t1 = m1 < self._tol_sing
        t2 = abs(db) < self._tol_sing
        kind = "both" if (t1 and t2) else "type1" if t1 else "type2" if t2 else "regular"

        def cond(M):
            s = np.linalg.svd(M, compute_uv=False)
            return float(s[0] / s[-1]) if s[-1] > 0 else math.inf

        cond_a = float(np.max(np.abs(An)) / np.min(np.abs(An))) if np.min(np.abs(An)) > 0 else math.inf
        cond_b = cond(Bn)
        margin = 0.0
        if kind == "regular":
            Jx = -np.linalg.solve(B, np.diag(Ad))
            Jx[2, :] *= lc
            s = np.linalg.svd(Jx, compute_uv=False)
            margin = float(s[-1] / s[0]) if s[0] > 0 else 0.0
        return SingularityReport(kind=kind, det_a=float(np.prod(Ad)), det_b=float(np.linalg.det(B)),
                                 cond_a=cond_a, cond_b=cond_b, margin=margin,
                                 extra={"type1_measure": float(m1), "type2_measure": float(db),
                                        "worst_leg": int(np.argmin(np.abs(An)))})

    # -------------------------------------------------------- inverse dynamics
    def task_inverse_dynamics(self, X, Xd, Xdd, wrench=None, branch=None, *, full: bool = False):
        """Actuator torques for a platform motion (Lagrange-D'Alembert formulation).

        Parameters
        ----------
        X, Xd, Xdd : array_like, shape (3,) or (N, 3)
            Platform pose (x, y [m], phi [rad]), its rate and acceleration.
        wrench : array_like, shape (3,) or (6,), optional
            Wrench applied by the environment on the platform, base frame,
            moment about P (see the module docstring).
        branch : optional
            Elbow branches (default: the robot file's).
        full : bool
            Also return the multipliers and the joint motion.

        Returns
        -------
        tau : ndarray, shape (3,) or (N, 3) [N m]
            Or, if ``full``, a dict with ``tau``, ``lam`` (multipliers [N/m]),
            ``q``, ``qd``, ``qdd``.

        Raises
        ------
        UnreachableError, SingularityError
        """
        if (type(X) is _ND and type(Xd) is _ND and type(Xdd) is _ND and wrench is None and branch is None
                and not full and X.ndim == 1):
            # fast path: the kernel validates shapes and finiteness
            tau = np.empty(3)
            st = K.tid_entry(self._P, X, Xd, Xdd, self._zero3, self._branch_k, tau)
            if st:
                self._raise(st, "task_inverse_dynamics", X=X)
            return tau
        Xa = np.asarray(X, dtype=float)
        if Xa.ndim == 2:
            if full:
                raise ModelError("full=True is for a single state")
            Xd = np.asarray(Xd, dtype=float); Xdd = np.asarray(Xdd, dtype=float)
            W = None if wrench is None else np.broadcast_to(np.asarray(wrench, dtype=float),
                                                           (Xa.shape[0],) + np.shape(wrench)[-1:])
            return np.array([self.task_inverse_dynamics(Xa[j], Xd[j], Xdd[j],
                                                        None if W is None else W[j], branch)
                             for j in range(Xa.shape[0])]).reshape(-1, 3)
        Xa = self._v3(Xa, "X")
        Xd = self._v3(Xd, "Xd")
        Xdd = self._v3(Xdd, "Xdd")
        W = self._wrench3(wrench)
        tau = np.empty(3); lam = np.empty(3); q = np.empty(3); qd = np.empty(3); qdd = np.empty(3)
        st = K.task_inverse_dynamics(self._L, self._G, Xa, Xd, Xdd, W, self._branch_arr(branch),
                                     self._tol_sing, tau, lam, q, qd, qdd)
        if st:
            self._raise(st, "task_inverse_dynamics", X=Xa)
        if full:
            return {"tau": tau, "lam": lam, "q": q, "qd": qd, "qdd": qdd}
        return tau

    def task_inverse_dynamics_multipliers(self, X, Xd, Xdd, wrench=None, branch=None):
        """Actuator torques and Lagrange multipliers by Lagrange's equations of the first kind.

        Seed 001 App. B (with the ERRATA fixes), generalised to arbitrary link
        parameters and in-plane gravity.  Coordinates ``(x, y, phi, th_1..3)``;
        multipliers ``lam_i`` of the constraints ``h_i`` (sign as in (B.1):
        ``sum_i lam_i dh_i/dq_j = d/dt dL/dqd_j - dL/dq_j - Q_j``).  Joint rates
        are obtained from the leg loop closures ``C_i = A_i + a u(th_i) + b u(psi_i)``.
        Implemented independently of :meth:`task_inverse_dynamics` (plain
        numpy, scalar equations) so the two can check each other.

        Parameters
        ----------
        X, Xd, Xdd : array_like, shape (3,)
        wrench : array_like, shape (3,) or (6,), optional
        branch : optional

        Returns
        -------
        tau : ndarray, shape (3,) [N m]
        lam : ndarray, shape (3,) [N/m]
        """
        X = self._v3(X, "X"); Xd = self._v3(Xd, "Xd"); Xdd = self._v3(Xdd, "Xdd")
        Fp = self._wrench3(wrench)
        th = self.inverse_kinematics(X, branch)
        x, y, phi = X
        xd, yd, phid = Xd
        xdd, ydd, phidd = Xdd
        gx, gy = self._g
        Ax, Ay = self._A[:, 0], self._A[:, 1]
        l = np.hypot(self._c[:, 0], self._c[:, 1])           # platform joint radius
        beta = np.arctan2(self._c[:, 1], self._c[:, 0])       # its angle in the platform frame
        gam = beta + phi                                      # outward angle (paper: alpha = gam + pi)
        a, b = self._prox.length, self._dist.length
        k = self._dist.com / b
        mb, Ib = self._dist.mass, self._dist.inertia
        mBB = mb * (1 - k) ** 2 + Ib / b ** 2
        mBC = mb * k * (1 - k) - Ib / b ** 2
        mCC = mb * k ** 2 + Ib / b ** 2
        Jth = self._prox.inertia + self._prox.mass * self._prox.com ** 2 + self._drive.armature
        mra = self._prox.mass * self._prox.com
        st, ct = np.sin(th), np.cos(th)
        sg, cg = np.sin(gam), np.cos(gam)
        # platform joint, its velocity and acceleration
        Cx, Cy = x + l * cg, y + l * sg
        vCx, vCy = xd - l * sg * phid, yd + l * cg * phid
        aCx = xdd - l * sg * phidd - l * cg * phid ** 2
        aCy = ydd + l * cg * phidd - l * sg * phid ** 2
        # passive angle and loop-closure rates
        Bx, By = Ax + a * ct, Ay + a * st
        psi = np.arctan2(Cy - By, Cx - Bx)
        sp, cp = np.sin(psi), np.cos(psi)
        s_pt = np.sin(psi - th)
        if np.any(np.abs(s_pt) < self._tol_sing):
            i = int(np.argmin(np.abs(s_pt)))
            raise SingularityError(f"{self.name}: task_inverse_dynamics_multipliers: type-1 singularity, "
                                   f"{_leg_name(i)} stretched or folded at X={X.tolist()}")
        thd = (cp * vCx + sp * vCy) / (a * s_pt)
        psid = (ct * vCx + st * vCy) / (b * np.sin(th - psi))
        thdd = (cp * aCx + sp * aCy + a * thd ** 2 * np.cos(th - psi) + b * psid ** 2) / (a * s_pt)
        # elbow acceleration
        aBx = -a * st * thdd - a * ct * thd ** 2
        aBy = a * ct * thdd - a * st * thd ** 2
        # constraint gradients (dh_i/dx, dh_i/dy, dh_i/dphi, dh_i/dth_i)
        dx = x - Ax - a * ct + l * cg
        dy = y - Ay - a * st + l * sg
        hx, hy = 2 * dx, 2 * dy
        hphi = 2 * l * (-dx * sg + dy * cg)
        hth = 2 * a * (dx * st - dy * ct)
        # (B.3)-(B.5): platform equations -> multipliers
        mC = mb * k
        rx = (self._mp + mCC.sum()) * xdd - np.sum(mCC * l * (sg * phidd + cg * phid ** 2)) \
            + np.sum(mBC * aBx) - (self._mp + mC.sum()) * gx - Fp[0]
        ry = (self._mp + mCC.sum()) * ydd + np.sum(mCC * l * (cg * phidd - sg * phid ** 2)) \
            + np.sum(mBC * aBy) - (self._mp + mC.sum()) * gy - Fp[1]
        rphi = (self._Ip + np.sum(mCC * l ** 2)) * phidd \
            + np.sum(mCC * l * (-sg * xdd + cg * ydd)) \
            + np.sum(mBC * a * l * (np.cos(gam - th) * thdd + np.sin(gam - th) * thd ** 2)) \
            - np.sum(mC * l * (-sg * gx + cg * gy)) - Fp[2]
        Bm = np.array([hx, hy, hphi])   # Bm[j, i] = dh_i / dX_j
        try:
            lam = np.linalg.solve(Bm, np.array([rx, ry, rphi]))
        except np.linalg.LinAlgError as err:
            raise SingularityError(f"{self.name}: task_inverse_dynamics_multipliers: type-2 "
                                   f"singularity at X={X.tolist()}") from err
        # (B.6)-(B.8): joint equations -> torques
        n_aC = -st * aCx + ct * aCy
        tau = (Jth + mBB * a ** 2) * thdd + mBC * a * n_aC \
            - (mra + mb * (1 - k) * a) * (-st * gx + ct * gy) - lam * hth
        return tau, lam

    # -------------------------------------------------------- reduced dynamics
    def _reduced(self, q, qd, pose, want_c=False):
        q = self._v3(q, "theta")
        qd = self._v3(qd, "thetad")
        X = self._pose(q, pose)
        Mr = np.empty((3, 3)); hr = np.empty(3); Cr = np.empty((3, 3)); gr = np.empty(3); Jx = np.empty((3, 3))
        st = K.reduced(self._L, self._G, q, X, qd, self._tol_sing, Mr, hr, Cr, gr, Jx, want_c)
        if st:
            self._raise(st, "reduced dynamics", q=q, X=X)
        return Mr, hr, Cr, gr, Jx, X

    def mass_matrix(self, q, pose=None) -> np.ndarray:
        """Reduced inertia M(theta) = G^T M_full G, shape (3, 3) or (N, 3, 3) [kg m^2].

        ``pose``: optional platform pose hint (Newton start for X), shape (3,) or (N, 3).
        """
        if type(q) is _ND and type(pose) is _ND and q.ndim == 1:
            out = np.empty(15)
            st = K.reduced_entry(self._P, q, self._zero3, pose, out)
            if st:
                self._raise(st, "mass_matrix", q=q)
            return out[:9].reshape(3, 3)
        qa = np.asarray(q, dtype=float)
        if qa.ndim == 2:
            return self._batch(lambda q, pose: self.mass_matrix(q, pose), qa, pose=pose, out_shape=(3, 3))
        return self._reduced(qa, np.zeros(3), pose)[0]

    def bias(self, q, qd, pose=None) -> np.ndarray:
        """h(theta, thetad) = C thetad + g, shape like q [N m]."""
        if type(q) is _ND and type(qd) is _ND and type(pose) is _ND and q.ndim == 1:
            out = np.empty(15)
            st = K.reduced_entry(self._P, q, qd, pose, out)
            if st:
                self._raise(st, "bias", q=q)
            return out[9:12]
        qa = np.asarray(q, dtype=float)
        if qa.ndim == 2:
            return self._batch(lambda q, qd, pose: self.bias(q, qd, pose), qa, qd, pose=pose, out_shape=(3,))
        return self._reduced(qa, qd, pose)[1]

    def gravity(self, q, pose=None) -> np.ndarray:
        """Gravity torques g(theta) = G^T dV/dq, shape like q [N m]."""
        if type(q) is _ND and type(pose) is _ND and q.ndim == 1:
            out = np.empty(15)
            st = K.reduced_entry(self._P, q, self._zero3, pose, out)
            if st:
                self._raise(st, "gravity", q=q)
            return out[12:15]
        qa = np.asarray(q, dtype=float)
        if qa.ndim == 2:
            return self._batch(lambda q, pose: self.gravity(q, pose), qa, pose=pose, out_shape=(3,))
        return self._reduced(qa, np.zeros(3), pose)[3]

    def coriolis_matrix(self, q, qd, pose=None) -> np.ndarray:
        """C(theta, thetad), shape (3, 3) or (N, 3, 3), with dM/dt - 2C skew and C thetad + g = h."""
        qa = np.asarray(q, dtype=float)
        if qa.ndim == 2:
            return self._batch(lambda q, qd, pose: self.coriolis_matrix(q, qd, pose), qa, qd, pose=pose,
                               out_shape=(3, 3))
        return self._reduced(qa, qd, pose, want_c=True)[2]

    def inverse_dynamics(self, q, qd, qdd, wrench=None, pose=None) -> np.ndarray:
        """tau = M thetadd + h - J_x^T w, shape like q [N m].

        ``wrench``: (fx, fy, mz) or a 6-vector on the platform (module docstring);
        ``pose``: optional pose hint.
        """
        if (type(q) is _ND and type(qd) is _ND and type(qdd) is _ND and type(pose) is _ND and wrench is None
                and q.ndim == 1):
            # fast path: the kernel validates shapes and finiteness
            tau = np.empty(3)
            st = K.id_entry(self._P, q, qd, qdd, pose, self._zero3, tau)
            if st:
                self._raise(st, "inverse_dynamics", q=q)
            return tau
        qa = np.asarray(q, dtype=float)
        if qa.ndim == 2:
            W = None if wrench is None else np.broadcast_to(np.asarray(wrench, dtype=float),
                                                           (qa.shape[0],) + np.shape(wrench)[-1:])
            P = None if pose is None else np.asarray(pose, dtype=float)
            qd = np.asarray(qd, dtype=float); qdd = np.asarray(qdd, dtype=float)
            return np.array([self.inverse_dynamics(qa[j], qd[j], qdd[j], None if W is None else W[j],
                                                   None if P is None else P[j])
                             for j in range(qa.shape[0])]).reshape(-1, 3)
        if type(q) is np.ndarray and type(qd) is np.ndarray and type(qdd) is np.ndarray:
            W = self._zero3 if wrench is None else self._wrench3(wrench)
            Xh = self._pose(self._v3(q, "theta"), None) if pose is None else pose
            if type(Xh) is not np.ndarray:
                Xh = self._v3(Xh, "pose")
            tau = np.empty(3)
            st = K.id_entry(self._P, q, qd, qdd, Xh, W, tau)
            if st:
                self._raise(st, "inverse_dynamics", q=q)
            return tau
        return self.inverse_dynamics(self._v3(q, "theta"), self._v3(qd, "thetad"), self._v3(qdd, "thetadd"),
                                     wrench, pose)

    def forward_dynamics_task(self, q, qd, tau, wrench=None, pose=None):
        """Joint and platform accelerations for applied torques (no friction).

        Returns
        -------
        qdd : ndarray (3,) [rad/s^2]
        Xdd : ndarray (3,) [m/s^2, m/s^2, rad/s^2]
        X : ndarray (3,), the consistent pose used
        """
        q = self._v3(q, "theta")
        qd = self._v3(qd, "thetad")
        tau = self._v3(tau, "tau")
        Xh = self._pose(q, None) if pose is None else self._v3(pose, "pose")
        out = np.empty(9)
        st = K.fd_task_entry(self._P, q, qd, tau, Xh, self._wrench3(wrench), out)
        if st:
            self._raise(st, "forward dynamics", q=q, X=Xh)
        return out[0:3], out[3:6], out[6:9]

    def forward_dynamics(self, q, qd, tau, wrench=None, pose=None) -> np.ndarray:
        """thetadd solving M thetadd = tau - h + J_x^T w, shape like q [rad/s^2]."""
        if (type(q) is _ND and type(qd) is _ND and type(tau) is _ND and type(pose) is _ND and wrench is None
                and q.ndim == 1):
            # fast path: the kernel validates shapes and finiteness
            qdd = np.empty(3)
            st = K.fd_entry(self._P, q, qd, tau, pose, self._zero3, qdd)
            if st:
                self._raise(st, "forward_dynamics", q=q)
            return qdd
        qa = np.asarray(q, dtype=float)
        if qa.ndim == 2:
            W = None if wrench is None else np.broadcast_to(np.asarray(wrench, dtype=float),
                                                           (qa.shape[0],) + np.shape(wrench)[-1:])
            P = None if pose is None else np.asarray(pose, dtype=float)
            qd = np.asarray(qd, dtype=float); tau = np.asarray(tau, dtype=float)
            return np.array([self.forward_dynamics(qa[j], qd[j], tau[j], None if W is None else W[j],
                                                   None if P is None else P[j])
                             for j in range(qa.shape[0])]).reshape(-1, 3)
        if type(q) is np.ndarray and type(qd) is np.ndarray and type(tau) is np.ndarray:
            W = self._zero3 if wrench is None else self._wrench3(wrench)
            Xh = self._pose(self._v3(q, "theta"), None) if pose is None else pose
            if type(Xh) is not np.ndarray:
                Xh = self._v3(Xh, "pose")
            qdd = np.empty(3)
            st = K.fd_entry(self._P, q, qd, tau, Xh, W, qdd)
            if st:
                self._raise(st, "forward_dynamics", q=q)
            return qdd
        return self.forward_dynamics_task(qa, qd, tau, wrench, pose)[0]

    def rk4_step(self, q, qd, tau, dt: float, pose, wrench=None, fk_tol: float = 1e-12):
        """One RK4 step in the minimal coordinates, with X re-solved from the constraints.

        Parameters
        ----------
        q, qd : array_like (3,)
            Actuated angles [rad] and rates [rad/s] at the start of the step.
        tau : array_like (3,)
            Torque held constant over the step [N m] (add friction yourself).
        dt : float
            Step [s].
        pose : array_like (3,)
            Pose consistent with q (or close: it is the Newton start).
        wrench : optional
            Platform wrench held constant over the step.
        fk_tol : float
            Newton tolerance [m] for X at each stage.

        Returns
        -------
        q, qd, X : ndarrays (3,) at the end of the step; ``h(q, X)`` is at ``fk_tol``.
        """
        q = self._v3(q, "theta"); qd = self._v3(qd, "thetad"); tau = self._v3(tau, "tau")
        X = self._v3(pose, "pose")
        out = np.empty(9)
        st = K.rk4_step(self._L, self._G, q, qd, X, tau, self._wrench3(wrench), float(dt),
                        self._tol_sing, float(fk_tol), 50, out)
        if st:
            self._raise(st, "rk4_step", q=q, X=X)
        return out[0:3], out[3:6], out[6:9]

    # ------------------------------------------------------------- energies
    def kinetic_energy(self, q, qd, pose=None) -> np.ndarray:
        """Kinetic energy [J] of links, platform and armature (from the body velocities)."""
        qa = np.asarray(q, dtype=float)
        if qa.ndim == 2:
            return self._batch(lambda q, qd, pose: self.kinetic_energy(q, qd, pose), qa, qd, pose=pose)
        q = self._v3(qa, "theta"); qd = self._v3(qd, "thetad")
        X = self._pose(q, pose)
        Xd = self.task_velocity(q, X, qd)
        return self._kinetic(q, X, qd, Xd)

    def _kinetic(self, q, X, qd, Xd) -> float:
        L = self._L
        u, n, rho, d = self._geom(q, X)
        T = 0.5 * self._mp * (Xd[0] ** 2 + Xd[1] ** 2) + 0.5 * self._Ip * Xd[2] ** 2
        for i in range(3):
            vB = L[i, 4] * qd[i] * n[i]
            vC = Xd[:2] + Xd[2] * np.array([-rho[i, 1], rho[i, 0]])
            T += 0.5 * L[i, 6] * qd[i] ** 2
            # distal link as a rigid body: centre-of-mass velocity and angular rate
            k = self._dist.com[i] / self._dist.length[i]
            vG = (1 - k) * vB + k * vC
            omega = (d[i, 0] * (vC - vB)[1] - d[i, 1] * (vC - vB)[0]) / self._dist.length[i] ** 2
            T += 0.5 * self._dist.mass[i] * (vG @ vG) + 0.5 * self._dist.inertia[i] * omega ** 2
        return float(T)

    def potential_energy(self, q, pose=None) -> np.ndarray:
        """Gravitational potential energy V = -sum m g.p_com [J] (zero at the base origin)."""
        qa = np.asarray(q, dtype=float)
        if qa.ndim == 2:
            return self._batch(lambda q, pose: self.potential_energy(q, pose), qa, pose=pose)
        q = self._v3(qa, "theta")
        X = self._pose(q, pose)
        return self._potential(q, X)

    def _potential(self, q, X) -> float:
        g = self._g
        Bp = self.elbow_positions(q)
        Cp = self.platform_joint_positions(X)
        u = np.stack([np.cos(q), np.sin(q)], axis=1)
        V = -self._mp * (g @ X[:2])
        for i in range(3):
            pa = self._A[i] + self._prox.com[i] * u[i]
            k = self._dist.com[i] / self._dist.length[i]
            pb = (1 - k) * Bp[i] + k * Cp[i]
            V -= self._prox.mass[i] * (g @ pa) + self._dist.mass[i] * (g @ pb)
        return float(V)

    def task_energy(self, X, Xd, branch=None) -> tuple[float, float]:
        """(T, V) [J] for a platform state (IK on ``branch``)."""
        X = self._v3(X, "X"); Xd = self._v3(Xd, "Xd")
        q = self.inverse_kinematics(X, branch)
        qd = self.joint_velocity(q, X, Xd)
        return self._kinetic(q, X, qd, Xd), self._potential(q, X)

    # ------------------------------------------------------------ jacobian
    def jacobian(self, q, pose=None) -> np.ndarray:
        """Geometric Jacobian of the platform frame (origin P), shape (6, 3) or (N, 6, 3).

        Rows [vx, vy, vz, wx, wy, wz] in the base frame: rows 0, 1, 5 are J_x, rows 2-4 zero.
        """
        qa = np.asarray(q, dtype=float)
        if qa.ndim == 2:
            return self._batch(lambda q, pose: self.jacobian(q, pose), qa, pose=pose, out_shape=(6, 3))
        q = self._v3(qa, "theta")
        X = self._pose(q, pose)
        Jx = self.task_jacobian(q, X)
        J = np.zeros((6, 3))
        J[0], J[1], J[5] = Jx[0], Jx[1], Jx[2]
        return J

    # ------------------------------------------------------------- variants
    def to_mjcf(self, q0=None):
        """This robot as MJCF (:func:`dynamics.mjcf.rrr_mjcf`), assembled at ``q0``; returns a
        :class:`dynamics.mjcf.MjcfRobot`."""
        from .mjcf import rrr_mjcf
        return rrr_mjcf(self, q0)

    def scaled(self, mass_factor: float = 1.0, inertia_factor: float | None = None) -> "Planar3RRR":
        """Copy with all link/platform masses times ``mass_factor`` and all Izz times
        ``inertia_factor`` (default ``mass_factor``).  The drive armature (a motor
        property) is not scaled."""
        if inertia_factor is None:
            inertia_factor = mass_factor
        if not (mass_factor >= 0 and inertia_factor >= 0 and math.isfinite(mass_factor)
                and math.isfinite(inertia_factor)):
            raise ModelError("scale factors must be finite and >= 0")
        p, d = self._prox, self._dist
        return Planar3RRR(self._A, self._c,
                          LinkParams(p.length, p.mass * mass_factor, p.com, p.inertia * inertia_factor),
                          LinkParams(d.length, d.mass * mass_factor, d.com, d.inertia * inertia_factor),
                          self._mp * mass_factor, self._Ip * inertia_factor, self._g, self._branch,
                          self._home, self._limits, self._drive, self.name, self.source, self._names,
                          self._tol_sing)


    def with_payload(self, mass_kg: float) -> "Planar3RRR":
        """Copy with a point mass of ``mass_kg`` [kg] at the platform's centre (the platform's
        mass grows by it; its inertia about the centre does not change)."""
        if not (math.isfinite(mass_kg) and mass_kg >= 0):
            raise ModelError(f"payload mass must be finite and >= 0, got {mass_kg!r}")
        return Planar3RRR(self._A, self._c, self._prox, self._dist, self._mp + mass_kg, self._Ip, self._g,
                          self._branch, self._home, self._limits, self._drive, self.name, self.source,
                          self._names, self._tol_sing)


# ---------------------------------------------------------------------- loader
def _per_leg(sec: Section, key: str, default=None, *, minimum=None, strict=False, maximum=None) -> np.ndarray:
    """A number (shared by the legs) or a list of 3 numbers -> array (3,) (:meth:`Section.numbers`)."""
    return sec.numbers(key, 3, *(() if default is None else (default,)), minimum=minimum, strict_min=strict,
                       maximum=maximum)


def _points(root: Section, list_key: str, radius_key: str, angles_key: str) -> np.ndarray:
    if root.has(list_key):
        for k in (radius_key, angles_key):
            if root.has(k):
                raise root.error(k, f"give either '{list_key}' or '{radius_key}' + '{angles_key}', not both")
        pts = root.matrix(list_key, (3, 2))
        fld = list_key
    else:
        if not root.has(radius_key) and not root.has(angles_key):
            raise root.error(list_key, f"required: '{list_key}' or '{radius_key}' + '{angles_key}'")
        r = root.float(radius_key, minimum=0.0)
        ang = np.radians(root.vector(angles_key, 3))
        pts = r * np.stack([np.cos(ang), np.sin(ang)], axis=1)
        fld = angles_key
    for i in range(3):
        for j in range(i + 1, 3):
            if np.linalg.norm(pts[i] - pts[j]) < 1e-9:
                raise root.error(fld, f"joints {i + 1} and {j + 1} coincide")
    return pts


def _links(sec: Section) -> LinkParams:
    length = _per_leg(sec, "length", minimum=0.0, strict=True)
    mass = _per_leg(sec, "mass", minimum=0.0)
    com = _per_leg(sec, "com")
    inertia = _per_leg(sec, "inertia", minimum=0.0)
    sec.finish()
    return LinkParams(length, mass, com, inertia)


def load_3rrr(root: Section, base_dir: str | Path | None = None) -> Planar3RRR:
    """Build a :class:`Planar3RRR` from a robot file (format in the module docstring).

    Parameters
    ----------
    root : Section
        Root table of the robot file (``type`` already read by ``load_model``).
    base_dir : path, optional
        Unused (no external files).

    Raises
    ------
    ConfigError
        Naming the file and field for any invalid value, an unreachable home
        pose (naming the leg) or a singular home pose.
    """
    root.raw("type")
    name = root.str("name", "3rrr")
    gravity = root.vector("gravity", 2)
    home = root.vector("home_pose", 3)
    branch = root.vector("elbow_branch", 3, [1, 1, 1])
    if not np.all(np.abs(branch) == 1):
        raise root.error("elbow_branch", f"each entry must be +1 or -1, got {branch.tolist()}")
    names = root.raw("joint_names", None)
    if names is not None:
        if not (isinstance(names, list) and len(names) == 3 and all(isinstance(s, str) for s in names)):
            raise root.error("joint_names", f"expected a list of 3 strings, got {names!r}")
        if len(set(names)) != 3:
            raise root.error("joint_names", "names must be distinct")
    tol = root.float("singularity_tolerance", 1e-6, minimum=0.0, strict_min=True, maximum=0.5)
    A = _points(root, "base_joints", "base_radius", "base_angles_deg")
    c = _points(root, "platform_joints", "platform_radius", "platform_angles_deg")
    prox = _links(root.section("proximal"))
    dist = _links(root.section("distal"))
    plat = root.section("platform")
    mp = plat.float("mass", minimum=0.0)
    Ip = plat.float("inertia", minimum=0.0)
    plat.finish()

    act = root.section("actuators", {})
    inf = math.inf
    pmin = _per_leg(act, "position_min", -inf) if act.has("position_min") else np.full(3, -inf)
    pmax = _per_leg(act, "position_max", inf) if act.has("position_max") else np.full(3, inf)
    vmax = _per_leg(act, "velocity_max", minimum=0.0, strict=True) if act.has("velocity_max") else np.full(3, inf)
    tmax = _per_leg(act, "torque_max", minimum=0.0, strict=True) if act.has("torque_max") else np.full(3, inf)
    act.finish()
    if np.any(pmin >= pmax):
        raise act.error("position_max", f"must exceed position_min ({pmin.tolist()} vs {pmax.tolist()})")
    limits = JointLimits(pmin, pmax, vmax, tmax)

    drv = root.section("drive", {})
    has_rotor = drv.has("rotor_inertia") or drv.has("gear_ratio")
    if has_rotor:
        rotor = _per_leg(drv, "rotor_inertia", minimum=0.0)
        gear = _per_leg(drv, "gear_ratio", minimum=GEAR_RATIO_RANGE[0], maximum=GEAR_RATIO_RANGE[1])
        armature = rotor * gear ** 2
    else:
        armature = np.zeros(3)
    viscous = _per_leg(drv, "viscous", minimum=0.0) if drv.has("viscous") else np.zeros(3)
    coulomb = _per_leg(drv, "coulomb", minimum=0.0) if drv.has("coulomb") else np.zeros(3)
    drv.finish()
    drive = DriveParams(armature, viscous, coulomb)

    try:
        model = Planar3RRR(A, c, prox, dist, mp, Ip, gravity, branch, home, limits, drive, name,
                           root.file, names, tol)
    except UnreachableError as err:
        raise ConfigError(f"home pose unreachable: {err}", root.file, "home_pose") from err
    except SingularityError as err:
        raise ConfigError(f"home pose is singular: {err}", root.file, "home_pose") from err
    except KinematicsError as err:
        raise ConfigError(f"home pose: {err}", root.file, "home_pose") from err
    except ModelError as err:
        raise ConfigError(str(err), root.file, None) from err
    q0 = model.home_q
    for i in range(3):
        if not (pmin[i] <= q0[i] <= pmax[i]):
            raise ConfigError(f"home pose needs theta{i + 1} = {q0[i]:.4f} rad, outside "
                              f"[{pmin[i]:.4f}, {pmax[i]:.4f}]", root.file, "actuators.position_min")
    return model
