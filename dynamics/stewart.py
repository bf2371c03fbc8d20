"""Gough-Stewart platform (6-UPS hexapod): kinematics and dynamics (seed 002, corrected).

Coordinates and conventions
---------------------------
* Actuated coordinates ``q`` = the six leg lengths ``L_i`` [m] (base joint centre to
  platform joint centre).
* Task pose ``X = (x, y, z, alpha, beta, gamma)``: position [m] of the platform
  reference point (origin of the platform frame) in the base frame, and Euler
  angles [rad] with ``R = Rz(gamma) Ry(beta) Rx(alpha)`` (platform -> base).
* Twist ``nu = [v; omega]`` (base frame): ``v`` velocity of the reference point,
  ``omega`` angular velocity.  Euler rates are *not* ``omega``:
  ``omega = E(X) e'`` and ``omega' = E e'' + E' e'`` with
  ``E = [[cg cb, -sg, 0], [sg cb, cg, 0], [-sb, 0, 1]]`` (``det E = cos beta``).
* Leg Jacobians: ``L' = J nu`` with rows ``[u_i^T, (R p_i x u_i)^T]``
  (seed 002 eq. 3, called J^{-1} there) and ``L' = J_e X'`` with
  ``J_e = J diag(I, E)``.  :meth:`StewartPlatform.task_jacobian` returns
  ``J_e^{-1}`` (``X' = J_x q'`` as the ParallelModel contract requires);
  :meth:`StewartPlatform.jacobian` returns the geometric ``J^{-1}``
  (``nu = J^{-1} q'``).
* Wrench ``[f; m]`` applied *by the environment on the platform*, base frame,
  moment about the platform reference point.
* Leg forces ``F`` [N] are positive when they push the platform away from the
  base (extend the leg); they include the armature (reflected rotor mass) term
  ``armature * L''`` but not friction (see :meth:`Model.friction_torque`).

Model
-----
Rigid platform plus six two-body legs (lower cylinder on a base universal joint,
upper piston on a platform ball joint).  The universal joint's base-fixed axis
``a_i`` fixes the leg's orientation about its own axis, so each leg is a
holonomic rigid-body pair with a general inertia tensor; its angular velocity
includes the spin about the leg axis imposed by the universal joint (zero when
``a_i`` is perpendicular to the leg, as it is at the home pose with the default
axes).  Two independent inverse dynamics formulations are provided:

(a) :meth:`StewartPlatform.task_inverse_dynamics_lagrange`: the Lagrange form of
    seed 002 with the ERRATA fixes (slow reference, :mod:`dynamics._stewart_lagrange`);
(b) :meth:`StewartPlatform.task_inverse_dynamics`: Kane's method per leg with
    Newton-Euler for the platform, compiled with numba (fast path,
    :mod:`dynamics._stewart_kernels`).

Singular configurations: maps that invert the leg Jacobian (``task_jacobian``,
``jacobian``, ``mass_matrix``, the Lagrange reference) raise
:class:`SingularityError` when the condition number of the dimensionless leg
Jacobian exceeds ``singular_condition`` (robot file, default 1e9); the compiled
dynamics kernels raise it when a 6x6 elimination meets a pivot below 1e-13 of the
largest entry (so they return, large, forces closer to the singularity).  The
task-space forward dynamics stays defined at a parallel singularity (the platform
inertia is regular); joint-space maps do not.

Simulation integrates the task state ``(X, X')`` with
:meth:`StewartPlatform.task_state_derivative` (Euler coordinates; singular only at
``cos beta = 0``); joint-space quantities follow from IK.  Methods in actuated
coordinates need the pose: they accept ``pose=`` (a pose hint, e.g. the previous
state of a tracker; Newton then takes zero or one step), else forward kinematics
starts from the home pose.

Fast paths
----------
The per-cycle calls of a plant or controller on one state -- ``mass_matrix``,
``bias``, ``gravity``, ``inverse_dynamics``, ``forward_dynamics``,
``coriolis_matrix``, ``mass_matrix_derivative``, ``kinetic_energy``,
``potential_energy``, ``jacobian`` (leg lengths with a pose hint, or the home
pose), ``task_jacobian``, ``singularity``, ``forward_kinematics_task``,
``leg_kinematics``, ``leg_lengths``, :func:`rotation_matrix`,
:func:`euler_rate_matrix` and the task-space dynamics -- first call a one-state
numba kernel (``*_one`` in :mod:`dynamics._stewart_kernels`) when every array
argument is a 1-D ``numpy.ndarray``.  The kernels take only contiguous float64
vectors (TypeError otherwise), reject wrong lengths and non-finite inputs, and
accept a leg Jacobian only when the Frobenius bound ``|Jh|_F |Jh^-1|_F`` of its
condition number is within ``singular_condition``.  Any other outcome falls
through to the checked path below each fast path, which validates the input,
computes the exact condition number and raises the matching error, so the
results and errors are the same either way (to rounding).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import _stewart_kernels as K
from . import _stewart_lagrange as LG
from .base import POSE_HINT_METHODS, DriveParams, JointLimits, ParallelModel, SingularityReport
from .config import Section
from .errors import ConvergenceError, ModelError, SingularityError, UnreachableError

__all__ = ["StewartPlatform", "LegKinematics", "load_stewart", "rotation_matrix", "euler_rate_matrix"]

#: fields of a Stewart robot file with their own range (not the SI magnitude bound of
#: :data:`dynamics.ROBOT_MAGNITUDE_MAX`): the condition number beyond which a leg Jacobian is
#: singular is dimensionless, 1e9 by default; past 1e15 float64 cannot tell it from singular
FIELD_RANGES = {"singular_condition": (1.0, 1e15)}


def _angles_3x3(kernel, reference, angles) -> np.ndarray:
    """``kernel(angles, out)`` (compiled; float64 vectors only, else TypeError) when it applies,
    else the numpy ``reference`` (which also reports bad input)."""
    if type(angles) is np.ndarray:
        out = np.empty((3, 3))
        try:
            if kernel(angles, out) == K.OK:
                return out
        except TypeError:
            pass
    return reference(np.asarray(angles, dtype=float))


def rotation_matrix(angles) -> np.ndarray:
    """R = Rz(gamma) Ry(beta) Rx(alpha) for ``angles = (alpha, beta, gamma)`` [rad], shape (3, 3)."""
    return _angles_3x3(K.rotation_one, LG.rot, angles)


def euler_rate_matrix(angles) -> np.ndarray:
    """E (3, 3) with ``omega_world = E [alpha', beta', gamma']``."""
    return _angles_3x3(K.euler_rate_one, LG.euler_E, angles)


@dataclass(frozen=True)
class LegKinematics:
    """Inverse kinematics of the six legs at one state (base frame).

    Attributes
    ----------
    vectors : ndarray (6, 3)
        Leg vectors ``l_i = r + R p_i - b_i`` [m].
    lengths : ndarray (6,)
        ``L_i = |l_i|`` [m].
    units : ndarray (6, 3)
        Unit vectors ``u_i = l_i / L_i``.
    platform_joints : ndarray (6, 3)
        ``R p_i`` [m], platform joints relative to the reference point, base frame.
    rates, accelerations : ndarray (6,) or None
        ``L'`` [m/s] and ``L''`` [m/s^2] when velocities/accelerations were given.
    """

    vectors: np.ndarray
    lengths: np.ndarray
    units: np.ndarray
    platform_joints: np.ndarray
    rates: np.ndarray | None = None
    accelerations: np.ndarray | None = None


_STATUS_TEXT = {
    K.SINGULAR: "singular configuration (the leg Jacobian or mass matrix cannot be inverted)",
    K.UJOINT_SINGULAR: "a base universal joint is singular (leg parallel to its first axis)",
    K.EULER_SINGULAR: "Euler-angle rate map is singular (cos(beta) = 0)",
}


def _ro(a: np.ndarray) -> np.ndarray:
    a = np.array(a, dtype=float)
    a.setflags(write=False)
    return a


class StewartPlatform(ParallelModel):
    """A 6-UPS Gough-Stewart platform model (immutable).

    Build it with :func:`load_stewart` (robot file) or directly.

    Parameters
    ----------
    base_joints : array_like (6, 3)
        Base joint centres b_i, base frame [m].
    platform_joints : array_like (6, 3)
        Platform joint centres p_i, platform frame [m].
    ujoint_axes : array_like (6, 3)
        Unit first axes a_i of the base universal joints, base frame.
    lower_mass, lower_com, upper_mass, upper_com : array_like (6,)
        Leg part masses [kg]; lower COM distance from the base joint and upper
        COM distance from the platform joint [m].
    lower_inertia, upper_inertia : array_like (6, 3, 3)
        Leg part inertias about their COMs in the leg frame [kg m^2].
    platform_mass : float
    platform_com : array_like (3,)
        Platform frame [m].
    platform_inertia : array_like (3, 3)
        About the COM, platform frame [kg m^2].
    gravity : array_like (3,)
        Base frame [m/s^2].
    limits : JointLimits
    drive : DriveParams
        ``armature`` is a reflected mass [kg] on the leg length.
    home_pose : array_like (6,)
    name : str
    singular_condition : float
        Maps whose dimensionless leg Jacobian has a condition number above this
        raise :class:`SingularityError`.
    """

    family = "stewart"
    pose_hint_methods = POSE_HINT_METHODS

    def task_rotation(self):
        """:func:`rotation_matrix`: the platform angles' convention (Rz Ry Rx)."""
        return rotation_matrix

    def task_rate_matrix(self):
        """:func:`euler_rate_matrix`, the closed form of that convention."""
        return euler_rate_matrix

    def __init__(self, *, base_joints, platform_joints, ujoint_axes, lower_mass, lower_com, lower_inertia,
                 upper_mass, upper_com, upper_inertia, platform_mass, platform_com, platform_inertia,
                 gravity=(0.0, 0.0, -9.81), limits: JointLimits | None = None,
                 drive: DriveParams | None = None, home_pose=(0.0, 0.0, 1.0, 0.0, 0.0, 0.0),
                 name: str = "stewart", source: str | None = None, singular_condition: float = 1e9):
        b = np.asarray(base_joints, dtype=float)
        p = np.asarray(platform_joints, dtype=float)
        a = np.asarray(ujoint_axes, dtype=float)
        for nm, arr in (("base_joints", b), ("platform_joints", p), ("ujoint_axes", a)):
            if arr.shape != (6, 3) or not np.all(np.isfinite(arr)):
                raise ModelError(f"{nm} must be a finite (6, 3) array, got shape {arr.shape}")
        a = a / np.linalg.norm(a, axis=1, keepdims=True)
        self.name = name
        self.source = source
        self._limits = limits if limits is not None else JointLimits.unbounded(6)
        self._drive = drive if drive is not None else DriveParams.none(6)
        legs = np.zeros((6, K.LEG_COLS))
        legs[:, K.LEG_B] = b
        legs[:, K.LEG_P] = p
        legs[:, K.LEG_A] = a
        legs[:, K.LEG_M1] = np.broadcast_to(np.asarray(lower_mass, dtype=float), (6,))
        legs[:, K.LEG_S1] = np.broadcast_to(np.asarray(lower_com, dtype=float), (6,))
        legs[:, K.LEG_I1] = np.broadcast_to(np.asarray(lower_inertia, dtype=float), (6, 3, 3)).reshape(6, 9)
        legs[:, K.LEG_M2] = np.broadcast_to(np.asarray(upper_mass, dtype=float), (6,))
        legs[:, K.LEG_S2] = np.broadcast_to(np.asarray(upper_com, dtype=float), (6,))
        legs[:, K.LEG_I2] = np.broadcast_to(np.asarray(upper_inertia, dtype=float), (6, 3, 3)).reshape(6, 9)
        legs[:, K.LEG_ARM] = np.asarray(self._drive.armature, dtype=float)
        plat = np.zeros(K.PL_COLS)
        plat[K.PL_M] = float(platform_mass)
        plat[K.PL_C] = np.asarray(platform_com, dtype=float)
        plat[K.PL_I] = np.asarray(platform_inertia, dtype=float).reshape(9)
        plat[K.PL_G] = np.asarray(gravity, dtype=float)
        if not (np.all(np.isfinite(legs)) and np.all(np.isfinite(plat))):
            raise ModelError("model parameters must be finite")
        if np.any(legs[:, [K.LEG_M1, K.LEG_S1, K.LEG_M2, K.LEG_S2, K.LEG_ARM]] < 0) or not plat[K.PL_M] > 0:
            raise ModelError("masses, COM distances and armature must be >= 0 and the platform mass > 0")
        self._legs = _ro(legs)
        self._plat = _ro(plat)
        self._home = _ro(np.asarray(home_pose, dtype=float))
        if not float(singular_condition) > 1.0:
            raise ModelError(f"singular_condition must be > 1, got {singular_condition!r}")
        self._singular_condition = float(singular_condition)
        # characteristic length making the leg Jacobian dimensionless (mean platform joint radius)
        self._char_len = float(np.mean(np.linalg.norm(p, axis=1))) or 1.0
        # private flat copies for the one-state kernels (the kernels' signatures take writable
        # arrays; never exposed or modified): parameters (layout in _stewart_kernels) and the home
        # pose as the default Newton guess
        self._params = np.concatenate([legs.ravel(), plat, [self._char_len, self._singular_condition]])
        self._home_guess = np.array(self._home)

    # -- description -----------------------------------------------------------------------------
    @property
    def dof(self) -> int:
        return 6

    @property
    def task_dof(self) -> int:
        return 6

    @property
    def joint_names(self) -> tuple[str, ...]:
        return tuple(f"leg{i + 1}" for i in range(6))

    @property
    def joint_types(self) -> tuple[str, ...]:
        """The six legs are prismatic actuators: lengths [m], forces [N]."""
        return ("prismatic",) * 6

    @property
    def limits(self) -> JointLimits:
        return self._limits

    @property
    def drive(self) -> DriveParams:
        return self._drive

    @property
    def gravity_vector(self) -> np.ndarray:
        return self._plat[K.PL_G].copy()

    @property
    def home_pose(self) -> np.ndarray:
        """Home pose X (6,): documented in the robot file, reachable and non-singular."""
        return self._home.copy()

    @property
    def base_joints(self) -> np.ndarray:
        """b_i (6, 3) [m], base frame."""
        return self._legs[:, K.LEG_B].copy()

    @property
    def platform_joints(self) -> np.ndarray:
        """p_i (6, 3) [m], platform frame."""
        return self._legs[:, K.LEG_P].copy()

    @property
    def ujoint_axes(self) -> np.ndarray:
        """a_i (6, 3), unit first axes of the base universal joints, base frame."""
        return self._legs[:, K.LEG_A].copy()

    @property
    def singular_condition(self) -> float:
        """Condition number of the dimensionless leg Jacobian above which maps raise SingularityError."""
        return self._singular_condition

    @property
    def packed_parameters(self) -> tuple[np.ndarray, np.ndarray]:
        """Read-only ``(legs (6, 32), platform (16,))`` arrays used by the kernels (layout in
        :mod:`dynamics._stewart_kernels`)."""
        return self._legs, self._plat

    # -- input helpers ---------------------------------------------------------------------------
    def _arr(self, x, what: str, width: int = 6) -> np.ndarray:
        a = np.asarray(x, dtype=float)
        if a.ndim not in (1, 2) or a.shape[-1] != width:
            raise ModelError(f"{self.name}: {what} must have shape ({width},) or (N, {width}), got {a.shape}")
        if not np.all(np.isfinite(a)):
            raise ModelError(f"{self.name}: {what} must be finite, got {a!r}")
        return a

    @staticmethod
    def _batch(*arrs):
        """Broadcast (6,)/(N, 6) inputs to 2-D C-contiguous arrays; return (arrays, single)."""
        single = all(a.ndim == 1 for a in arrs)
        n = max(a.shape[0] if a.ndim == 2 else 1 for a in arrs)
        out = []
        for a in arrs:
            a2 = np.atleast_2d(a)
            if a2.shape[0] not in (1, n):
                raise ModelError(f"batch sizes do not match: {[x.shape for x in arrs]}")
            out.append(np.ascontiguousarray(np.broadcast_to(a2, (n, a2.shape[1]))))
        return out, single

    def _raise(self, status: int, where: str, index: int | None = None):
        at = "" if index is None or index < 0 else f" (batch item {index})"
        raise SingularityError(f"{self.name}: {where}: {_STATUS_TEXT.get(status, 'failed')}{at}")

    # -- kinematics ------------------------------------------------------------------------------
    def leg_lengths(self, X) -> np.ndarray:
        """Leg lengths L (6,) or (N, 6) [m] for poses X, without limit checks."""
        if type(X) is np.ndarray and X.ndim == 1:  # fast path (module doc)
            L = np.empty(6)
            try:
                st = K.leg_lengths_one(X, self._params, L)
            except TypeError:
                st = K.BAD_INPUT
            if st == K.OK:
                return L
        X = self._arr(X, "X")
        (X2,), single = self._batch(X)
        L = np.empty_like(X2)
        K.ik_batch(X2, self._legs, L)
        return L[0] if single else L

    def check_leg_lengths(self, q) -> None:
        """Raise :class:`UnreachableError` naming the first leg whose length is outside its limits."""
        q = np.atleast_2d(self._arr(q, "q"))
        lo, hi = self._limits.position_min, self._limits.position_max
        bad = (q < lo) | (q > hi)
        if np.any(bad):
            n, i = np.argwhere(bad)[0]
            raise UnreachableError(
                f"{self.name}: {self.joint_names[i]} length {q[n, i]:.6g} m outside "
                f"[{lo[i]:.6g}, {hi[i]:.6g}] m" + (f" (batch item {n})" if q.shape[0] > 1 else ""))

    def inverse_kinematics(self, X, check_limits: bool = True) -> np.ndarray:
        """Leg lengths q (6,) or (N, 6) [m] for poses X (seed 002 eqs. 1-2).

        Raises
        ------
        UnreachableError
            Naming the leg, when ``check_limits`` and a length is outside its limits.
        """
        q = self.leg_lengths(X)
        if check_limits:
            self.check_leg_lengths(q)
        return q

    def leg_kinematics(self, X, Xd=None, Xdd=None) -> LegKinematics:
        """Leg vectors, lengths, unit vectors and (optionally) rates and accelerations at one state.

        ``L'_i = u_i . v_Pi`` and ``L''_i = u_i . a_Pi + (|v_Pi|^2 - L'_i^2) / L_i`` with
        ``v_Pi = v + omega x R p_i``, ``a_Pi = a + omega' x R p_i + omega x (omega x R p_i)``
        and ``omega = E e'``, ``omega' = E e'' + E' e'``.
        """
        if type(X) is np.ndarray and X.ndim == 1:  # fast path (module doc)
            order = 0 if Xd is None else (1 if Xdd is None else 2)
            out = np.empty(72)
            try:
                st = K.leg_kinematics_one(X, X if order < 1 else Xd, X if order < 2 else Xdd, order,
                                          self._params, out)
            except TypeError:
                st = K.BAD_INPUT
            if st == K.OK:   # contiguous views of one block
                return LegKinematics(out[0:18].reshape(6, 3), out[54:60], out[18:36].reshape(6, 3),
                                     out[36:54].reshape(6, 3), out[60:66] if order >= 1 else None,
                                     out[66:72] if order == 2 else None)
        X = self._arr(X, "X")
        if X.ndim != 1:
            raise ModelError(f"{self.name}: leg_kinematics takes one state, got shape {X.shape}")
        R = LG.rot(X[3:])
        rp = self._legs[:, K.LEG_P] @ R.T
        l = X[:3] + rp - self._legs[:, K.LEG_B]
        L = np.linalg.norm(l, axis=1)
        u = l / L[:, None]
        rates = acc = None
        if Xd is not None:
            Xd = self._arr(Xd, "Xd")
            Xdd_ = np.zeros(6) if Xdd is None else self._arr(Xdd, "Xdd")
            nu, nud = LG.twist_from_euler(X, Xd, Xdd_)
            v, om, a, omd = nu[:3], nu[3:], nud[:3], nud[3:]
            vP = v + np.cross(om, rp)
            rates = np.einsum("ij,ij->i", u, vP)
            if Xdd is not None:
                aP = a + np.cross(omd, rp) + np.cross(om, np.cross(om, rp))
                acc = np.einsum("ij,ij->i", u, aP) + (np.einsum("ij,ij->i", vP, vP) - rates ** 2) / L
        return LegKinematics(l, L, u, rp, rates, acc)

    def leg_jacobian(self, X, coordinates: str = "twist") -> np.ndarray:
        """Leg-rate Jacobian at pose X, shape (6, 6) or (N, 6, 6).

        ``coordinates="twist"``: ``L' = J nu`` (rows ``[u_i, R p_i x u_i]``, seed eq. 3);
        ``coordinates="euler"``: ``L' = J_e X'`` with ``J_e = J diag(I, E)``.
        """
        if coordinates not in ("twist", "euler"):
            raise ModelError(f"coordinates must be 'twist' or 'euler', got {coordinates!r}")
        X = self._arr(X, "X")
        (X2,), single = self._batch(X)
        out = np.empty((X2.shape[0], 6, 6))
        R = np.empty((3, 3))
        L = np.empty(6)
        U = np.empty((6, 3))
        for n in range(X2.shape[0]):
            K.leg_geometry(X2[n], self._legs, R, out[n], L, U)
            if coordinates == "euler":
                out[n, :, 3:] = out[n, :, 3:] @ LG.euler_E(X2[n, 3:])
        return out[0] if single else out

    def _check_cond(self, J: np.ndarray, where: str) -> None:
        Jh = J.copy()
        Jh[..., 3:] /= self._char_len
        c = np.linalg.cond(Jh)
        bad = ~(c <= self._singular_condition)
        if np.any(bad):
            idx = int(np.argmax(np.atleast_1d(bad))) if np.ndim(c) else None
            raise SingularityError(
                f"{self.name}: {where}: leg Jacobian condition number {np.atleast_1d(c)[idx or 0]:.3g} "
                f"exceeds {self._singular_condition:.3g}" + (f" (batch item {idx})" if idx is not None else ""))

    def task_jacobian(self, q, X) -> np.ndarray:
        """J_x = J_e^{-1} (6, 6) with ``X' = J_x q'`` (Euler-rate coordinates) at the consistent pair (q, X).

        Raises SingularityError near a parallel singularity or at cos(beta) = 0.
        """
        if type(q) is np.ndarray and type(X) is np.ndarray and X.ndim == 1:  # fast path (module doc)
            out = np.empty((6, 6))
            try:
                st = K.task_jacobian_one(q, X, self._params, out)
            except TypeError:
                st = K.BAD_INPUT
            if st == K.OK:
                return out
        self._arr(q, "q")
        Je = self.leg_jacobian(X, "euler")
        X = np.asarray(X, dtype=float)
        if np.any(np.abs(np.cos(X[..., 4])) < 1e-9):
            raise SingularityError(f"{self.name}: task_jacobian: Euler-angle rate map singular (cos beta = 0)")
        self._check_cond(self.leg_jacobian(X, "twist"), "task_jacobian")
        return np.linalg.inv(Je)

    def jacobian(self, q, pose=None) -> np.ndarray:
        """Geometric Jacobian J^{-1} (6, 6): ``[v; omega] = J^{-1} q'`` (base frame, v of the reference point)."""
        g = self._home_guess if pose is None else pose
        if type(q) is np.ndarray and type(g) is np.ndarray and q.ndim == g.ndim == 1:  # fast path (module doc)
            out = self._fast(K.jacobian_one, (6, 6), q, g)
            if out is not None:
                return out
        X = self.forward_kinematics_task(q, guess=pose)
        J = self.leg_jacobian(X, "twist")
        self._check_cond(J, "jacobian")
        return np.linalg.inv(J)

    def stick_figure(self, q, pose=None):
        """The six legs and the base and platform hexagons at the pose found by forward
        kinematics from ``pose`` (see :meth:`dynamics.base.Model.stick_figure`)."""
        X = self.forward_kinematics_task(q, guess=pose)
        T = self.forward_kinematics(q, pose=X)
        P = self.platform_joints @ T[:3, :3].T + T[:3, 3]
        b = self.base_joints
        legs = [np.vstack([b[i], P[i]]) for i in range(6)]
        return legs + [np.vstack([b, b[:1]]), np.vstack([P, P[:1]])], T[:3, 3].copy(), X

    def forward_kinematics_task(self, q, guess=None, *, tol: float = 1e-12, max_iter: int = 50) -> np.ndarray:
        """Pose X (6,) or (N, 6) with leg lengths q, by Newton from ``guess`` (default: home pose).

        Converged when every leg length matches to ``tol`` [m].

        Raises
        ------
        ConvergenceError
            If Newton does not converge in ``max_iter`` iterations or meets a singular Jacobian.
        """
        g = self._home_guess if guess is None else guess
        if (type(q) is np.ndarray and q.ndim == 1 and type(g) is np.ndarray and g.ndim == 1 and type(tol) is float
                and type(max_iter) is int):  # fast path (module doc)
            X = np.empty(6)
            try:
                st = K.fk_one(q, g, self._params, tol, max_iter, X)
            except TypeError:
                st = K.BAD_INPUT
            if st == K.OK:
                return X
        q = self._arr(q, "q")
        g = self._home if guess is None else self._arr(guess, "guess")
        (q2, g2), single = self._batch(q, g)
        X = np.empty_like(q2)
        for n in range(q2.shape[0]):
            st, it = K.fk_kernel(q2[n], g2[n], self._legs, tol, max_iter, X[n])
            if st != K.OK:
                why = "singular Jacobian" if st == K.SINGULAR else f"no convergence in {max_iter} iterations"
                raise ConvergenceError(f"{self.name}: forward kinematics failed ({why}) for q={q2[n]!r}"
                                       + (f" (batch item {n})" if not single else ""))
        return X[0] if single else X

    def forward_kinematics(self, q, pose=None) -> np.ndarray:
        """T_base_platform (4, 4) or (N, 4, 4) for leg lengths q (``pose`` = Newton guess)."""
        X = self.forward_kinematics_task(q, guess=pose)
        X2 = np.atleast_2d(X)
        T = np.zeros((X2.shape[0], 4, 4))
        for n in range(X2.shape[0]):
            T[n, :3, :3] = LG.rot(X2[n, 3:])
            T[n, :3, 3] = X2[n, :3]
            T[n, 3, 3] = 1.0
        return T[0] if X.ndim == 1 else T

    # -- task-space dynamics ---------------------------------------------------------------------
    def _wrench(self, wrench, n):
        if wrench is None:
            return np.zeros((n, 6)), False
        w = self._arr(wrench, "wrench")
        return np.ascontiguousarray(np.broadcast_to(np.atleast_2d(w), (n, 6))), True

    def task_inverse_dynamics(self, X, Xd, Xdd, wrench=None) -> np.ndarray:
        """Leg forces F (6,) or (N, 6) [N] for a platform motion in Euler coordinates (formulation b).

        Parameters
        ----------
        X, Xd, Xdd : array_like (6,) or (N, 6)
            Pose [m, rad], its rates and second rates (Euler-angle rates, not omega).
        wrench : array_like (6,) or (N, 6), optional
            ``[f; m]`` applied by the environment on the platform (base frame, moment about the
            reference point).

        Returns
        -------
        F : ndarray
            Leg forces including the armature term, excluding friction.
        """
        # fast path for one state (the control-loop case): the kernels take only contiguous float64
        # vectors (TypeError otherwise) and check lengths; any failure falls through to the checked
        # path below, which validates the input and raises the matching error
        # (a numba TypeError costs ~0.1 ms, so batches and lists skip the attempt)
        if type(X) is np.ndarray and X.ndim == 1:
            F = np.empty(6)
            try:
                if wrench is None:
                    st = K.task_id_one(X, Xd, Xdd, self._params, F)
                else:
                    st = K.task_id_one_w(X, Xd, Xdd, wrench, self._params, F)
            except TypeError:
                st = K.BAD_INPUT
            if st == K.OK:
                return F
        X, Xd, Xdd = self._arr(X, "X"), self._arr(Xd, "Xd"), self._arr(Xdd, "Xdd")
        (X2, Xd2, Xdd2), single = self._batch(X, Xd, Xdd)
        W, has_w = self._wrench(wrench, X2.shape[0])
        if wrench is not None and np.ndim(wrench) == 2:
            single = False
        F = np.empty_like(X2)
        st, idx = K.task_id_batch(X2, Xd2, Xdd2, W, has_w, self._legs, self._plat, F)
        if st != K.OK:
            self._raise(st, "task_inverse_dynamics", idx)
        return F[0] if single else F

    def task_inverse_dynamics_lagrange(self, X, Xd, Xdd, wrench=None) -> np.ndarray:
        """Leg forces by formulation (a): seed 002's Lagrange equations, corrected (slow reference).

        Same arguments and result as :meth:`task_inverse_dynamics`.
        """
        X, Xd, Xdd = self._arr(X, "X"), self._arr(Xd, "Xd"), self._arr(Xdd, "Xdd")
        (X2, Xd2, Xdd2), single = self._batch(X, Xd, Xdd)
        W, has_w = self._wrench(wrench, X2.shape[0])
        F = np.empty_like(X2)
        for n in range(X2.shape[0]):
            self._check_cond(self.leg_jacobian(X2[n]), "task_inverse_dynamics_lagrange")
            F[n] = LG.task_inverse_dynamics(X2[n], Xd2[n], Xdd2[n], W[n] if has_w else None,
                                            self._legs, self._plat)
        return F[0] if single else F

    def forward_dynamics_task(self, X, Xd, forces, wrench=None) -> np.ndarray:
        """Platform accelerations Xdd (Euler coordinates) for leg forces and an external wrench.

        Solves ``(M + J^T A J) nu' = J^T (F - A J' nu) + wrench - h(X, nu)`` (A = diag(armature)),
        then ``e'' = E^{-1} (omega' - E' e')``.  Friction is not applied (subtract
        :meth:`friction_torque` from ``forces`` to include it).
        """
        if wrench is None and type(X) is np.ndarray and X.ndim == 1:   # fast path, see task_inverse_dynamics
            out = np.empty(6)
            try:
                st = K.task_fd_one(X, Xd, forces, self._params, out)
            except TypeError:
                st = K.BAD_INPUT
            if st == K.OK:
                return out
        X, Xd, F = self._arr(X, "X"), self._arr(Xd, "Xd"), self._arr(forces, "forces")
        (X2, Xd2, F2), single = self._batch(X, Xd, F)
        W, has_w = self._wrench(wrench, X2.shape[0])
        out = np.empty_like(X2)
        st, idx = K.task_fd_batch(X2, Xd2, F2, W, has_w, self._legs, self._plat, out)
        if st != K.OK:
            self._raise(st, "forward_dynamics_task", idx)
        return out[0] if single else out

    def task_state_derivative(self, X, Xd, forces, wrench=None) -> tuple[np.ndarray, np.ndarray]:
        """``(X', X'')`` for integrating the platform state (X, X') under leg forces (simulation)."""
        return np.array(Xd, dtype=float), self.forward_dynamics_task(X, Xd, forces, wrench)

    def task_mass_matrix(self, X) -> np.ndarray:
        """Platform-plus-legs inertia in twist coordinates, ``M + J^T diag(armature) J``, (6, 6) or (N, 6, 6)."""
        X = self._arr(X, "X")
        (X2,), single = self._batch(X)
        M = np.empty((X2.shape[0], 6, 6))
        J = np.empty((6, 6))
        arm = self._legs[:, K.LEG_ARM]
        for n in range(X2.shape[0]):
            st = K.mass_twist(X2[n], self._legs, self._plat, M[n], J)
            if st != K.OK:
                self._raise(st, "task_mass_matrix", n)
            M[n] += J.T @ (arm[:, None] * J)
        return M[0] if single else M

    def task_kinetic_energy(self, X, Xd) -> np.ndarray:
        """Kinetic energy [J] of platform, legs and drives at (X, X')."""
        X, Xd = self._arr(X, "X"), self._arr(Xd, "Xd")
        (X2, Xd2), single = self._batch(X, Xd)
        T = np.array([LG.kinetic_energy(X2[n], Xd2[n], self._legs, self._plat) for n in range(X2.shape[0])])
        return T[0] if single else T

    def task_potential_energy(self, X) -> np.ndarray:
        """Gravitational potential energy [J] (zero with every body at the base-frame origin height)."""
        X = self._arr(X, "X")
        (X2,), single = self._batch(X)
        V = np.array([LG.potential_energy(X2[n], self._legs, self._plat) for n in range(X2.shape[0])])
        return V[0] if single else V

    # -- actuated-coordinate (Model) interface ----------------------------------------------------
    def _fast(self, kernel, shape, *args):
        """Run a single-state compiled kernel ``kernel(*args, params, out)``; None when it declines.

        The kernel declines (status other than OK, or argument types it was not compiled
        for) whenever the general path has something to say: a batch, a bad shape, a
        singular pose; that path then raises the precise error.
        """
        out = np.empty(shape)
        try:
            st = kernel(*args, self._params, out)
        except TypeError:
            # the kernels take writable C-contiguous float arrays: a read-only, strided or
            # integer array is copied to one (the same values, so the same result as the
            # caller's array as a float copy); a batch or a bad shape is still declined
            try:
                st = kernel(*(np.array(a, dtype=float) if isinstance(a, np.ndarray) else a for a in args),
                            self._params, out)
            except (TypeError, ValueError):
                return None
        return out if st == K.OK else None

    def _pose(self, q, pose):
        q = self._arr(q, "q")
        X = self.forward_kinematics_task(q, guess=pose)
        return q, X

    def mass_matrix(self, q, pose=None) -> np.ndarray:
        """M(q) = J^{-T} M_task J^{-1} + diag(armature), (6, 6) or (N, 6, 6) [kg]."""
        g = self._home_guess if pose is None else pose
        if type(q) is np.ndarray and type(g) is np.ndarray and q.ndim == g.ndim == 1:  # fast path (module doc)
            M = self._fast(K.mass_one, (6, 6), q, g)
            if M is not None:
                return M
        q, X = self._pose(q, pose)
        (X2,), single = self._batch(X)
        Mt = np.atleast_3d(self.task_mass_matrix(X2)).reshape(-1, 6, 6)
        J = self.leg_jacobian(X2).reshape(-1, 6, 6)
        self._check_cond(J, "mass_matrix")
        Ji = np.linalg.inv(J)
        # task_mass_matrix already holds J^T A J, so J^{-T} (.) J^{-1} gives the armature A
        M = np.einsum("nji,njk,nkl->nil", Ji, Mt, Ji)
        M = 0.5 * (M + np.swapaxes(M, 1, 2))
        return M[0] if single else M

    def inverse_dynamics(self, q, qd, qdd, wrench=None, pose=None) -> np.ndarray:
        """Leg forces tau (6,) or (N, 6) [N] = M qdd + h - J^{-T} wrench, computed by the fast kernel."""
        if wrench is None and pose is not None and type(q) is np.ndarray and q.ndim == 1:   # see task_inverse_dynamics
            F = np.empty(6)
            try:
                st = K.joint_id_one(q, qd, qdd, pose, self._params, F)
            except TypeError:
                st = K.BAD_INPUT
            if st == K.OK:
                return F
        q, X = self._pose(q, pose)
        qd, qdd = self._arr(qd, "qd"), self._arr(qdd, "qdd")
        (X2, qd2, qdd2), single = self._batch(X, qd, qdd)
        W, has_w = self._wrench(wrench, X2.shape[0])
        F = np.empty_like(X2)
        st, idx = K.joint_id_batch(X2, qd2, qdd2, W, has_w, self._legs, self._plat, F)
        if st != K.OK:
            self._raise(st, "inverse_dynamics", idx)
        return F[0] if single else F

    def bias(self, q, qd, pose=None) -> np.ndarray:
        """h(q, qd) = C qd + g [N]."""
        g = self._home_guess if pose is None else pose
        if type(q) is np.ndarray and type(g) is np.ndarray and q.ndim == g.ndim == 1:  # fast path (module doc)
            F = self._fast(K.bias_one, 6, q, qd, g)
            if F is not None:
                return F
        qd = self._arr(qd, "qd")
        return self.inverse_dynamics(q, qd, np.zeros_like(qd), pose=pose)

    def gravity(self, q, pose=None) -> np.ndarray:
        """g(q) [N]: leg forces holding the platform still against gravity."""
        g = self._home_guess if pose is None else pose
        if type(q) is np.ndarray and type(g) is np.ndarray and q.ndim == g.ndim == 1:  # fast path (module doc)
            F = self._fast(K.gravity_one, 6, q, g)
            if F is not None:
                return F
        q = self._arr(q, "q")
        return self.inverse_dynamics(q, np.zeros_like(q), np.zeros_like(q), pose=pose)

    def forward_dynamics(self, q, qd, tau, wrench=None, pose=None) -> np.ndarray:
        """Leg accelerations qdd (6,) or (N, 6) [m/s^2] for leg forces tau (no friction)."""
        if wrench is None and pose is not None and type(q) is np.ndarray and q.ndim == 1:   # see task_inverse_dynamics
            out = np.empty(6)
            try:
                st = K.joint_fd_one(q, qd, tau, pose, self._params, out)
            except TypeError:
                st = K.BAD_INPUT
            if st == K.OK:
                return out
        q, X = self._pose(q, pose)
        qd, tau = self._arr(qd, "qd"), self._arr(tau, "tau")
        (X2, qd2, tau2), single = self._batch(X, qd, tau)
        W, has_w = self._wrench(wrench, X2.shape[0])
        out = np.empty_like(X2)
        st, idx = K.joint_fd_batch(X2, qd2, tau2, W, has_w, self._legs, self._plat, out)
        if st != K.OK:
            self._raise(st, "forward_dynamics", idx)
        return out[0] if single else out

    def coriolis_matrix(self, q, qd, pose=None) -> np.ndarray:
        """C(q, qd) (6, 6) or (N, 6, 6) with ``C qd = h - g`` and ``dM/dt - 2C`` skew-symmetric.

        ``C = dM/dt / 2 + S`` with the skew matrix ``S = (w qd^T - qd w^T) / |qd|^2``,
        ``w = (h - g) - dM/dt qd / 2`` (``qd . w = 0`` by the power identity of Lagrangian
        systems).  ``dM/dt`` is the exact (complex-step) derivative of M along the motion.
        """
        g = self._home_guess if pose is None else pose
        if type(q) is np.ndarray and type(g) is np.ndarray and q.ndim == g.ndim == 1:  # fast path (module doc)
            out = self._fast(K.coriolis_one, (6, 6), q, qd, g)
            if out is not None:
                return out
        q, X = self._pose(q, pose)
        qd = self._arr(qd, "qd")
        (q2, X2, qd2), single = self._batch(q, X, qd)
        c = np.atleast_2d(self.bias(q2, qd2, pose=X2) - self.gravity(q2, pose=X2))
        Je = np.atleast_3d(self.leg_jacobian(X2, "euler")).reshape(-1, 6, 6)
        out = np.empty((X2.shape[0], 6, 6))
        h = 1e-30
        for n in range(X2.shape[0]):
            Xdot = np.linalg.solve(Je[n], qd2[n])
            Md = LG.mass_matrix_actuated(X2[n] + 1j * h * Xdot, self._legs, self._plat).imag / h
            Md = 0.5 * (Md + Md.T)
            w = c[n] - 0.5 * Md @ qd2[n]
            nn = qd2[n] @ qd2[n]
            S = (np.outer(w, qd2[n]) - np.outer(qd2[n], w)) / nn if nn > 0 else np.zeros((6, 6))
            out[n] = 0.5 * Md + S
        return out[0] if single else out

    def mass_matrix_derivative(self, q, qd, pose=None) -> np.ndarray:
        """dM/dt (6, 6) along the motion (q, qd), by complex step (exact to rounding)."""
        g = self._home_guess if pose is None else pose
        if type(q) is np.ndarray and type(g) is np.ndarray and q.ndim == g.ndim == 1:  # fast path (module doc)
            out = self._fast(K.mass_derivative_one, (6, 6), q, qd, g)
            if out is not None:
                return out
        q, X = self._pose(q, pose)
        qd = self._arr(qd, "qd")
        (X2, qd2), single = self._batch(X, qd)
        out = np.empty((X2.shape[0], 6, 6))
        for n in range(X2.shape[0]):
            Je = self.leg_jacobian(X2[n], "euler")
            Xdot = np.linalg.solve(Je, qd2[n])
            Md = LG.mass_matrix_actuated(X2[n] + 1e-30j * Xdot, self._legs, self._plat).imag / 1e-30
            out[n] = 0.5 * (Md + Md.T)
        return out[0] if single else out

    def kinetic_energy(self, q, qd, pose=None) -> np.ndarray:
        """1/2 qd^T M(q) qd [J] (platform, legs and drives)."""
        g = self._home_guess if pose is None else pose
        if type(q) is np.ndarray and type(g) is np.ndarray and q.ndim == g.ndim == 1:  # fast path (module doc)
            out = self._fast(K.kinetic_one, 1, q, qd, g)
            if out is not None:
                return out[0]
        qd = self._arr(qd, "qd")
        M = self.mass_matrix(q, pose=pose)
        return 0.5 * np.einsum("...i,...ij,...j->...", qd, M, qd)

    def potential_energy(self, q, pose=None) -> np.ndarray:
        """Gravitational potential energy [J]."""
        g = self._home_guess if pose is None else pose
        if type(q) is np.ndarray and type(g) is np.ndarray and q.ndim == g.ndim == 1:  # fast path (module doc)
            out = self._fast(K.potential_one, 1, q, g)
            if out is not None:
                return out[0]
        _, X = self._pose(q, pose)
        return self.task_potential_energy(X)

    # -- singularity -----------------------------------------------------------------------------
    def singularity(self, q, X) -> SingularityReport:
        """Singularity measures at one consistent pair (q, X).

        Conventions: with ``J q'``-form ``A q' = B nu`` the actuated matrix is A = I (the
        6-UPS has no serial singularity inside the leg limits): ``det_a = 1``, ``cond_a = 1``.
        ``det_b = det J`` of the *twist* leg Jacobian (rows ``[u_i, R p_i x u_i]``, seed eq. 3,
        units m^3); ``cond_b`` is the 2-norm condition number of J with its angular columns
        divided by the mean platform joint radius (dimensionless); ``margin = 1/cond_b``.
        ``extra``: ``det_euler = det J_e = det J * cos(beta)``, ``char_length_m``,
        ``ujoint_min_sin`` (smallest |u_i x a_i|).  ``kind`` is "type2" when
        ``cond_b > singular_condition``, else "regular".
        """
        if type(q) is np.ndarray and type(X) is np.ndarray and X.ndim == 1:  # fast path (module doc)
            out = np.empty(3)
            try:
                st = K.singularity_one(q, X, self._params, out)
            except TypeError:
                st = K.BAD_INPUT
            if st == K.OK:
                cond, det_b, us = float(out[0]), float(out[1]), float(out[2])
                return SingularityReport(
                    kind="type2" if not cond <= self._singular_condition else "regular", det_a=1.0,
                    det_b=det_b, cond_a=1.0, cond_b=cond, margin=0.0 if not np.isfinite(cond) else 1.0 / cond,
                    extra={"det_euler": det_b * math.cos(X[4]), "char_length_m": self._char_len,
                           "ujoint_min_sin": us})
        self._arr(q, "q")
        X = self._arr(X, "X")
        if X.ndim != 1:
            raise ModelError(f"{self.name}: singularity takes one state, got shape {X.shape}")
        J = self.leg_jacobian(X)
        Jh = J.copy()
        Jh[:, 3:] /= self._char_len
        sv = np.linalg.svd(Jh, compute_uv=False)
        cond = np.inf if sv[-1] == 0 else sv[0] / sv[-1]
        det_b = float(np.linalg.det(J))
        u = self.leg_kinematics(X).units
        us = np.linalg.norm(np.cross(u, self._legs[:, K.LEG_A]), axis=1)
        kind = "type2" if not cond <= self._singular_condition else "regular"
        return SingularityReport(kind=kind, det_a=1.0, det_b=det_b, cond_a=1.0, cond_b=float(cond),
                                 margin=float(0.0 if not np.isfinite(cond) else 1.0 / cond),
                                 extra={"det_euler": det_b * float(np.cos(X[4])),
                                        "char_length_m": self._char_len,
                                        "ujoint_min_sin": float(us.min())})

    # -- variants --------------------------------------------------------------------------------
    def to_mjcf(self, q0=None):
        """This robot as MJCF (:func:`dynamics.mjcf.stewart_mjcf`), assembled at ``q0``; returns a
        :class:`dynamics.mjcf.MjcfRobot`."""
        from .mjcf import stewart_mjcf
        return stewart_mjcf(self, q0, rotation_matrix=rotation_matrix)

    def scaled(self, mass_factor: float = 1.0, inertia_factor: float | None = None) -> "StewartPlatform":
        """Copy with every mass times ``mass_factor`` and every inertia tensor times ``inertia_factor``
        (default: ``mass_factor``).  Drive armature is unchanged."""
        if inertia_factor is None:
            inertia_factor = mass_factor
        for nm, f in (("mass_factor", mass_factor), ("inertia_factor", inertia_factor)):
            if not (np.isfinite(f) and f > 0):
                raise ModelError(f"{nm} must be a positive finite number, got {f!r}")
        L, P = self._legs, self._plat
        return StewartPlatform(
            base_joints=L[:, K.LEG_B], platform_joints=L[:, K.LEG_P], ujoint_axes=L[:, K.LEG_A],
            lower_mass=mass_factor * L[:, K.LEG_M1], lower_com=L[:, K.LEG_S1],
            lower_inertia=inertia_factor * L[:, K.LEG_I1].reshape(6, 3, 3),
            upper_mass=mass_factor * L[:, K.LEG_M2], upper_com=L[:, K.LEG_S2],
            upper_inertia=inertia_factor * L[:, K.LEG_I2].reshape(6, 3, 3),
            platform_mass=mass_factor * P[K.PL_M], platform_com=P[K.PL_C],
            platform_inertia=inertia_factor * P[K.PL_I].reshape(3, 3), gravity=P[K.PL_G],
            limits=self._limits, drive=self._drive, home_pose=self._home,
            name=f"{self.name} (x{mass_factor:g} mass, x{inertia_factor:g} inertia)", source=self.source,
            singular_condition=self._singular_condition)

    def summary(self) -> str:
        lines = [super().summary(),
                 f"  home pose [m, rad]: {np.array2string(self._home, precision=4)}",
                 f"  leg length limits [m]: {self._limits.position_min[0]:.4g} .. {self._limits.position_max[0]:.4g}",
                 f"  platform mass [kg]: {self._plat[K.PL_M]:.4g}"]
        return "\n".join(lines)


# -- loader -------------------------------------------------------------------------------------
def _inertia(sec: Section, key: str) -> np.ndarray:
    v = sec.raw(key)
    arr = sec.as_array(key, v, None)
    if arr.shape == (3,):
        arr = np.diag(arr)
    elif arr.shape != (3, 3):
        raise sec.error(key, f"expected a 3x3 matrix or 3 principal moments, got shape {arr.shape}")
    if not np.allclose(arr, arr.T, rtol=1e-12, atol=1e-12 * max(1.0, np.abs(arr).max())):
        raise sec.error(key, "inertia tensor must be symmetric")
    ev = np.linalg.eigvalsh(arr)
    tol = 1e-12 * max(1.0, ev.max())
    if ev.min() < -tol:
        raise sec.error(key, f"inertia tensor must be positive semi-definite, eigenvalues {ev}")
    if ev[0] + ev[1] < ev[2] - tol:
        raise sec.error(key, f"principal moments {ev} violate the triangle inequality")
    return arr


def _joints(sec: Section, kind: str) -> np.ndarray:
    if sec.has(f"{kind}_joints"):
        for k in (f"{kind}_radius", f"{kind}_angles_deg", f"{kind}_height"):
            if sec.has(k):
                raise sec.error(f"{kind}_joints",
                                f"give either {kind}_joints or {kind}_radius/{kind}_angles_deg, not both ({k})")
        return sec.matrix(f"{kind}_joints", (6, 3))
    r = sec.float(f"{kind}_radius", minimum=0.0, strict_min=True)
    ang = np.deg2rad(sec.vector(f"{kind}_angles_deg", 6))
    h = sec.float(f"{kind}_height", 0.0)
    return np.column_stack([r * np.cos(ang), r * np.sin(ang), np.full(6, h)])


def load_stewart(root: Section, base_dir: str | Path | None = None) -> StewartPlatform:
    """Build a :class:`StewartPlatform` from a robot-file root table (keys: see hil_configs/robots/stewart.toml).

    Raises
    ------
    ConfigError
        Naming the file and the dotted field for every missing, unknown or bad value, including an
        unreachable or singular ``home_pose``.
    """
    del base_dir  # no external files referenced
    name = root.str("name", "stewart")
    gravity = root.vector("gravity", 3, [0.0, 0.0, -9.81])
    home = root.vector("home_pose", 6)
    lo, hi = FIELD_RANGES["singular_condition"]
    cond_max = root.float("singular_condition", 1e9, minimum=lo, strict_min=True, maximum=hi)

    geo = root.section("geometry")
    b = _joints(geo, "base")
    p = _joints(geo, "platform")
    ua_given = geo.has("ujoint_axes")
    ua = geo.matrix("ujoint_axes", (6, 3)) if ua_given else None
    geo.finish()
    if ua_given:
        nrm = np.linalg.norm(ua, axis=1)
        if np.any(nrm < 1e-9):
            raise geo.error("ujoint_axes", "axes must be non-zero vectors")
        ua = ua / nrm[:, None]

    pl = root.section("platform")
    pm = pl.float("mass", minimum=0.0, strict_min=True)
    pc = pl.vector("com", 3, [0.0, 0.0, 0.0])
    pI = _inertia(pl, "inertia")
    pl.finish()

    leg = root.section("leg")
    lmin = leg.float("length_min", minimum=0.0, strict_min=True)
    lmax = leg.float("length_max", minimum=0.0, strict_min=True)
    if lmax <= lmin:
        raise leg.error("length_max", f"must be > length_min ({lmin}), got {lmax}")
    vmax = leg.float("velocity_max", minimum=0.0, strict_min=True)
    fmax = leg.float("force_max", minimum=0.0, strict_min=True)
    parts = {}
    for part in ("lower", "upper"):
        s = leg.section(part)
        m = s.float("mass", minimum=0.0)
        S = s.float("com_distance", minimum=0.0)
        if S > lmax:
            raise s.error("com_distance", f"must be <= leg.length_max ({lmax}), got {S}")
        parts[part] = (m, S, _inertia(s, "inertia"))
        s.finish()
    leg.finish()

    dr = root.section("drive", {})
    if dr.has("armature"):
        for k in ("rotor_inertia", "screw_lead"):
            if dr.has(k):
                raise dr.error("armature", f"give either armature or rotor_inertia + screw_lead, not both ({k})")
        arm = dr.float("armature", minimum=0.0)
    elif dr.has("rotor_inertia") or dr.has("screw_lead"):
        jr = dr.float("rotor_inertia", minimum=0.0)
        lead = dr.float("screw_lead", minimum=0.0, strict_min=True)
        try:
            arm = jr * (2.0 * np.pi / lead) ** 2
        except OverflowError:
            arm = float("inf")
        if not np.isfinite(arm):
            raise dr.error("screw_lead", f"rotor_inertia * (2 pi / screw_lead)^2 is not a finite armature "
                                         f"(screw_lead = {lead!r} m/rev)")
    else:
        arm = 0.0
    visc = dr.float("viscous", 0.0, minimum=0.0)
    coul = dr.float("coulomb", 0.0, minimum=0.0)
    dr.finish()

    limits = JointLimits(np.full(6, lmin), np.full(6, lmax), np.full(6, vmax), np.full(6, fmax))
    drive = DriveParams(np.full(6, arm), np.full(6, visc), np.full(6, coul))

    # default universal-joint axes: horizontal (w.r.t. gravity), perpendicular to the leg at home
    if ua is None:
        R = LG.rot(home[3:])
        u = home[:3] + p @ R.T - b
        nrm = np.linalg.norm(u, axis=1)
        if np.any(nrm < 1e-9):
            raise root.error("home_pose", "a leg has zero length at the home pose")
        u = u / nrm[:, None]
        up = -gravity / np.linalg.norm(gravity) if np.linalg.norm(gravity) > 0 else np.array([0.0, 0.0, 1.0])
        ua = np.cross(up, u)
        n_ua = np.linalg.norm(ua, axis=1)
        for i in np.nonzero(n_ua < 1e-6)[0]:  # vertical leg: use the tangent of the base circle
            t = np.cross(up, b[i])
            ua[i] = t if np.linalg.norm(t) > 1e-9 else np.cross(up, [1.0, 0.0, 0.0])
        ua = ua / np.linalg.norm(ua, axis=1)[:, None]

    model = StewartPlatform(
        base_joints=b, platform_joints=p, ujoint_axes=ua,
        lower_mass=parts["lower"][0], lower_com=parts["lower"][1], lower_inertia=parts["lower"][2],
        upper_mass=parts["upper"][0], upper_com=parts["upper"][1], upper_inertia=parts["upper"][2],
        platform_mass=pm, platform_com=pc, platform_inertia=pI, gravity=gravity,
        limits=limits, drive=drive, home_pose=home, name=name, source=root.file,
        singular_condition=cond_max)

    # validate the home pose: reachable, non-singular, universal joints fine
    try:
        model.inverse_kinematics(home)
    except UnreachableError as err:
        raise root.error("home_pose", f"not reachable: {err}") from err
    if abs(np.cos(home[4])) < 1e-3:
        raise root.error("home_pose", "beta = +-90 deg is singular for the Euler-angle convention")
    rep = model.singularity(model.leg_lengths(home), home)
    if not rep.cond_b < min(cond_max, 1e6):
        raise root.error("home_pose", f"pose is (near) singular: condition number {rep.cond_b:.3g}")
    if rep.extra["ujoint_min_sin"] < 1e-3:
        raise root.error("geometry.ujoint_axes" if ua_given else "home_pose",
                         "a leg is (nearly) parallel to its universal joint axis at the home pose")
    return model
