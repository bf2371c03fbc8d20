"""Serial-chain robot arms: Denavit-Hartenberg robot files and fast rigid-body dynamics.

A :class:`SerialModel` is a chain of revolute/prismatic joints described by
fixed *joint placements* (see :mod:`dynamics._serial_core` for the frame
conventions).  Denavit-Hartenberg rows (robot files, :func:`load_serial`) and
URDF files (:func:`dynamics.urdf.load_urdf`) both compile to that form.

Dynamics run in numba kernels on one packed parameter vector: recursive
Newton-Euler for inverse dynamics and the bias, the composite-rigid-body
algorithm for M(q), CRBA + Cholesky for forward dynamics, and a spatial
construction of the Coriolis matrix such that dM/dt - 2C is skew-symmetric.

Robot file (TOML), ``type = "serial"``::

    name = "arm"
    type = "serial"
    description = "..."          # optional, free text
    convention = "standard"      # or "modified" (Craig)
    gravity = [0.0, 0.0, -9.81]  # world/base frame [m/s^2], default as shown
    base = { xyz = [0, 0, 0], rpy = [0, 0, 0] }   # optional: link frame 0 in the world
    tool = { xyz = [0, 0, 0.1], rpy_deg = [0, 0, 0] }  # optional: tool in the last link frame

    [[joints]]
    name = "shoulder"            # default "joint<i>"
    type = "revolute"            # or "prismatic"
    a = 0.0                      # [m]
    alpha = 1.5707963            # [rad]  (or alpha_deg)
    d = 0.1                      # [m]
    offset = 0.0                 # added to q: theta = q + offset [rad] (or offset_deg);
                                 # prismatic: displacement d + q + offset [m]
    theta = 0.0                  # prismatic only: fixed DH angle [rad] (or theta_deg)
    mass = 1.0                   # [kg]
    com = [0, 0, 0]              # centre of mass, link frame [m]
    inertia = [Ixx, Iyy, Izz, Ixy, Ixz, Iyz]   # about the COM, link-frame axes [kg m^2]
    point_masses = [{ mass = 0.5, position = [0.3, 0, 0] }]   # optional, lumped in
    position_min = -3.0          # optional limits (or position_min_deg / position_max_deg)
    position_max = 3.0
    velocity_max = 5.0           # [rad/s | m/s]
    torque_max = 50.0            # [N m | N]
    rotor_inertia = 1e-5         # optional drive: armature = rotor_inertia * gear_ratio**2
    gear_ratio = 50.0
    viscous = 0.1                # [N m s/rad]
    coulomb = 0.2                # [N m]

Conventions: standard DH link transform ``Rz(theta) Tz(d) Tx(a) Rx(alpha)``;
modified (Craig) ``Rx(alpha) Tx(a) Rz(theta) Tz(d)``, so in a modified row ``alpha``
and ``a`` are Craig's ``alpha_{i-1}``, ``a_{i-1}`` (the row's transform is applied
before its joint).  Link frame 0 is the ``base`` pose in the world.  ``rpy`` is URDF's
``R = Rz(yaw) Ry(pitch) Rx(roll)``.  ``inertia`` entries are tensor entries
(URDF convention: ``Ixy`` is the (0, 1) entry, i.e. minus the product-of-inertia
integral).  Inertias may be positive *semi*-definite (slender rods) but must
satisfy the triangle inequality of the principal moments.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from . import _serial_kernels as _k
from .base import GEAR_RATIO_RANGE, DriveParams, JointLimits, Model
from .config import Section
from .errors import ConfigError, ModelError

_empty = np.empty

__all__ = ["SerialModel", "load_serial", "dh_transform", "rpy_matrix", "check_inertia"]

_NO_W = np.zeros((1, 6))


# ---------------------------------------------------------------------------
# small geometry helpers
# ---------------------------------------------------------------------------

def _rx(t: float) -> np.ndarray:
    c, s = math.cos(t), math.sin(t)
    return np.array([[1, 0, 0, 0], [0, c, -s, 0], [0, s, c, 0], [0, 0, 0, 1.0]])


def _rz(t: float) -> np.ndarray:
    c, s = math.cos(t), math.sin(t)
    return np.array([[c, -s, 0, 0], [s, c, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1.0]])


def _tr(x: float, y: float, z: float) -> np.ndarray:
    T = np.eye(4)
    T[:3, 3] = (x, y, z)
    return T


def rpy_matrix(rpy: Sequence[float]) -> np.ndarray:
    """Rotation matrix (3, 3) ``Rz(yaw) Ry(pitch) Rx(roll)`` for ``rpy = [roll, pitch, yaw]`` [rad]."""
    r, p, y = (float(v) for v in rpy)
    cr, sr, cp, sp, cy, sy = math.cos(r), math.sin(r), math.cos(p), math.sin(p), math.cos(y), math.sin(y)
    return np.array([[cy * cp, cy * sp * sr - sy * cr, cy * sp * cr + sy * sr],
                     [sy * cp, sy * sp * sr + cy * cr, sy * sp * cr - cy * sr],
                     [-sp, cp * sr, cp * cr]])


def dh_transform(a: float, alpha: float, d: float, theta: float, convention: str = "standard") -> np.ndarray:
    """Homogeneous link transform (4, 4) of one DH row.

    ``standard``: ``Rz(theta) Tz(d) Tx(a) Rx(alpha)``; ``modified`` (Craig):
    ``Rx(alpha) Tx(a) Rz(theta) Tz(d)``.  Lengths in m, angles in rad.
    """
    if convention == "standard":
        return _rz(theta) @ _tr(0, 0, d) @ _tr(a, 0, 0) @ _rx(alpha)
    if convention == "modified":
        return _rx(alpha) @ _tr(a, 0, 0) @ _rz(theta) @ _tr(0, 0, d)
    raise ConfigError(f"unknown DH convention {convention!r} (use 'standard' or 'modified')")


def check_inertia(I: np.ndarray) -> str | None:
    """Return why a 3x3 inertia tensor about the COM is not physical, or None if it is.

    Accepts positive semi-definite tensors (slender rods: zero axial moment) whose
    principal moments satisfy the triangle inequality ``I1 + I2 >= I3``.
    """
    I = np.asarray(I, dtype=float)
    if not np.allclose(I, I.T, rtol=0, atol=1e-12 * max(1.0, np.abs(I).max())):
        return "inertia tensor is not symmetric"
    lam = np.linalg.eigvalsh(I)
    tol = 1e-9 * max(float(np.abs(lam).max()), 1e-300)
    if lam[0] < -tol:
        return f"inertia is not positive semi-definite (principal moments {lam.tolist()})"
    if lam[0] + lam[1] < lam[2] - tol:
        return (f"principal moments {lam.tolist()} violate the triangle inequality "
                "I1 + I2 >= I3 (no rigid body has this inertia)")
    return None


def _inertia_matrix(v: np.ndarray) -> np.ndarray:
    ixx, iyy, izz, ixy, ixz, iyz = v
    return np.array([[ixx, ixy, ixz], [ixy, iyy, iyz], [ixz, iyz, izz]])


def _combine(mass: float, com: np.ndarray, inertia: np.ndarray,
             points: list[tuple[float, np.ndarray]]) -> tuple[float, np.ndarray, np.ndarray]:
    """Lump point masses into a body: returns total mass, COM and inertia about the new COM."""
    bodies = [(mass, com, inertia)] + [(m, p, np.zeros((3, 3))) for m, p in points]
    mt = sum(b[0] for b in bodies)
    if mt <= 0.0:
        return 0.0, np.zeros(3), inertia.copy()
    c = sum(b[0] * b[1] for b in bodies) / mt
    It = np.zeros((3, 3))
    for m, p, Ib in bodies:
        r = p - c
        It += Ib + m * (r @ r * np.eye(3) - np.outer(r, r))
    return mt, c, It


# ---------------------------------------------------------------------------
# the model
# ---------------------------------------------------------------------------

class SerialModel(Model):
    """Rigid-body model of a serial chain of revolute and prismatic joints.

    Parameters
    ----------
    joint_types : sequence of str, length n
        ``"revolute"`` or ``"prismatic"``; every joint moves about/along the
        z axis of its joint frame.
    placements : array_like, shape (n, 4, 4)
        ``X_i``: pose of joint frame ``J_i`` at ``q_i = 0`` in the previous joint
        frame ``J_{i-1}`` (``J_{-1}`` is the world/base frame).  The joint then
        applies ``Rz(q_i)`` or ``Tz(q_i)``.
    mass : array_like, shape (n,)
        Link masses [kg] (>= 0).
    com : array_like, shape (n, 3)
        Centres of mass in the joint frames [m].
    inertia : array_like, shape (n, 3, 3)
        Rotational inertia about the COM in joint-frame axes [kg m^2].
    tool : array_like, shape (4, 4), optional
        Pose of the tool frame in the last joint frame (default identity).
    gravity : array_like, shape (3,)
        Gravity acceleration in the world frame [m/s^2].
    link_frames : array_like, shape (n, 4, 4), optional
        Pose of each link frame ``L_i`` in its joint frame ``J_i`` (DH link
        frames; identity for URDF).  Only used by :meth:`link_poses`.
    base_frame : array_like, shape (4, 4), optional
        Pose of link frame 0 in the world (used by :meth:`link_poses`).
    joint_names : sequence of str, optional
    limits : JointLimits, optional
    drive : DriveParams, optional
        ``armature`` enters M and the inverse dynamics; friction does not.
    name : str
    source : str, optional

    Notes
    -----
    The model is immutable.  All state methods accept one state ``(n,)`` or a
    batch ``(N, n)``; float64 C-contiguous 1-D inputs take a fast path with no
    conversion.  Wrenches are ``[fx, fy, fz, mx, my, mz]`` applied by the
    environment on the tool, world frame, moment about the tool-frame origin.
    """

    family = "serial"

    def __init__(self, *, joint_types: Sequence[str], placements, mass, com, inertia,
                 tool=None, gravity=(0.0, 0.0, -9.81), link_frames=None, base_frame=None,
                 joint_names: Sequence[str] | None = None, limits: JointLimits | None = None,
                 drive: DriveParams | None = None, name: str = "serial", source: str | None = None):
        jt = tuple(joint_types)
        n = len(jt)
        if n < 1:
            raise ModelError("a serial model needs at least one joint")
        for t in jt:
            if t not in ("revolute", "prismatic"):
                raise ModelError(f"joint type must be 'revolute' or 'prismatic', got {t!r}")
        X = self._arr(placements, (n, 4, 4), "placements")
        m = self._arr(mass, (n,), "mass")
        c = self._arr(com, (n, 3), "com")
        Ic = self._arr(inertia, (n, 3, 3), "inertia")
        T_tool = np.eye(4) if tool is None else self._arr(tool, (4, 4), "tool")
        g = self._arr(gravity, (3,), "gravity")
        LF = np.tile(np.eye(4), (n, 1, 1)) if link_frames is None else self._arr(link_frames, (n, 4, 4), "link_frames")
        BF = np.eye(4) if base_frame is None else self._arr(base_frame, (4, 4), "base_frame")
        if np.any(m < 0):
            raise ModelError(f"negative link mass: {m.tolist()}")
        for i in range(n):
            why = check_inertia(Ic[i])
            if why:
                raise ModelError(f"link {i}: {why}")
        for T, what in [(X[i], f"placements[{i}]") for i in range(n)] + [(T_tool, "tool")]:
            R = T[:3, :3]
            if not np.allclose(R @ R.T, np.eye(3), atol=1e-9) or np.linalg.det(R) < 0:
                raise ModelError(f"{what} is not a proper rigid transform")
        names = tuple(joint_names) if joint_names is not None else tuple(f"joint{i + 1}" for i in range(n))
        if len(names) != n:
            raise ModelError(f"expected {n} joint names, got {len(names)}")
        self._n = n
        self._types = jt
        self._X = X
        self._mass = m
        self._com = c
        self._Ic = Ic
        self._tool = T_tool
        self._g = g
        self._LF = LF
        self._BF = BF
        self._names = names
        self._limits = limits if limits is not None else JointLimits.unbounded(n)
        self._drive = drive if drive is not None else DriveParams.none(n)
        for arr in (X, m, c, Ic, T_tool, g, LF, BF):
            arr.setflags(write=False)
        for f in ("position_min", "position_max", "velocity_max", "torque_max"):
            if np.shape(getattr(self._limits, f)) != (n,):
                raise ModelError(f"limits.{f} must have shape ({n},)")
        for f in ("armature", "viscous", "coulomb"):
            if np.shape(getattr(self._drive, f)) != (n,):
                raise ModelError(f"drive.{f} must have shape ({n},)")
        self.name = name
        self.source = source
        h = m[:, None] * c
        Io = np.empty((n, 3, 3))
        for i in range(n):
            Io[i] = Ic[i] + m[i] * (c[i] @ c[i] * np.eye(3) - np.outer(c[i], c[i]))
        jtype = np.array([0 if t == "revolute" else 1 for t in jt])
        self._P = _k.pack(g, T_tool[:3, :3], T_tool[:3, 3], X[:, :3, :3], X[:, :3, 3], jtype,
                          m, h, Io, np.asarray(self._drive.armature, dtype=float))
        self._P.setflags(write=True)  # numba signatures use writable arrays; never written

    @staticmethod
    def _arr(v, shape, what) -> np.ndarray:
        try:
            a = np.array(v, dtype=float)
        except (TypeError, ValueError) as err:
            raise ModelError(f"{what}: expected numbers") from err
        if a.shape != shape:
            raise ModelError(f"{what}: expected shape {shape}, got {a.shape}")
        if not np.all(np.isfinite(a)):
            raise ModelError(f"{what}: non-finite values")
        return a

    # -- description ---------------------------------------------------------
    @property
    def dof(self) -> int:
        return self._n

    @property
    def joint_names(self) -> tuple[str, ...]:
        return self._names

    @property
    def joint_types(self) -> tuple[str, ...]:
        """``"revolute"`` / ``"prismatic"`` per joint."""
        return self._types

    @property
    def limits(self) -> JointLimits:
        return self._limits

    @property
    def drive(self) -> DriveParams:
        return self._drive

    @property
    def gravity_vector(self) -> np.ndarray:
        return self._g.copy()

    @property
    def link_masses(self) -> np.ndarray:
        """Link masses (n,) [kg], point masses included."""
        return self._mass.copy()

    @property
    def link_inertias(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(mass (n,), com (n, 3), inertia about COM (n, 3, 3))`` in the joint frames."""
        return self._mass.copy(), self._com.copy(), self._Ic.copy()

    @property
    def placements(self) -> np.ndarray:
        """Joint placements X_i (n, 4, 4) (see class docstring)."""
        return self._X.copy()

    @property
    def tool_transform(self) -> np.ndarray:
        """Pose (4, 4) of the tool frame in the last joint frame."""
        return self._tool.copy()

    @property
    def packed_parameters(self) -> np.ndarray:
        """Copy of the packed parameter vector the numba kernels use."""
        return self._P.copy()

    # -- input handling ------------------------------------------------------
    def _state(self, x, what: str) -> np.ndarray:
        """float64 C-contiguous writable (n,) or (N, n) array, else ModelError."""
        try:
            a = np.asarray(x, dtype=np.float64)
        except (TypeError, ValueError) as err:
            raise ModelError(f"{self.name}: {what} must be numbers of shape (n,) or (N, n)") from err
        if a.ndim not in (1, 2) or a.shape[-1] != self._n:
            raise ModelError(f"{self.name}: {what} must have shape ({self._n},) or (N, {self._n}), "
                             f"got {a.shape}")
        if not a.flags.c_contiguous or not a.flags.writeable:
            a = np.array(a, dtype=np.float64, order="C")
        return a

    def _states(self, names: Sequence[str], *xs):
        arrs = [self._state(x, nm) for x, nm in zip(xs, names)]
        nd = max(a.ndim for a in arrs)
        if nd == 2:
            N = max(a.shape[0] for a in arrs if a.ndim == 2)
            out = []
            for a, nm in zip(arrs, names):
                if a.ndim == 1:
                    a = np.ascontiguousarray(np.broadcast_to(a, (N, self._n)))
                elif a.shape[0] != N:
                    raise ModelError(f"{self.name}: {nm} has {a.shape[0]} rows, expected {N}")
                out.append(a)
            arrs = out
        return arrs, nd == 2

    def _call(self, fn, *args):
        """Run a kernel on validated arrays; kernel errors become ModelError."""
        try:
            return fn(self._P, *args)
        except ValueError as err:   # the kernels' finiteness/shape checks
            raise ModelError(f"{self.name}: {err} (states, torques and wrenches must be finite)") from err
        except ZeroDivisionError as err:
            raise ModelError(f"{self.name}: mass matrix is not positive definite at q") from err

    def _wrench(self, w, N: int | None) -> np.ndarray:
        try:
            a = np.asarray(w, dtype=np.float64)
        except (TypeError, ValueError) as err:
            raise ModelError(f"{self.name}: wrench must be numbers of shape (6,) or (N, 6)") from err
        if a.shape[-1:] != (6,) or a.ndim not in (1, 2) or (N is None and a.ndim != 1):
            raise ModelError(f"{self.name}: wrench must have shape (6,)"
                             + ("" if N is None else f" or ({N}, 6)") + f", got {a.shape}")
        if N is not None:
            if a.ndim == 1:
                a = np.broadcast_to(a, (N, 6))
            elif a.shape[0] != N:
                raise ModelError(f"{self.name}: wrench has {a.shape[0]} rows, expected {N}")
        return np.array(a, dtype=np.float64, order="C")

    # -- dynamics ------------------------------------------------------------
    def inverse_dynamics(self, q, qd, qdd, wrench=None) -> np.ndarray:
        """Joint torques ``tau = M(q) qdd + C(q, qd) qd + g(q) - J(q)^T wrench`` [N m | N].

        Parameters
        ----------
        q, qd, qdd : array_like, shape (n,) or (N, n)
        wrench : array_like, shape (6,) or (N, 6), optional
            Environment wrench on the tool (world frame, moment about the tool origin).

        Returns
        -------
        ndarray, shape like q.  Armature is included; friction is not.
        """
        if wrench is None:
            out = _empty(self._n)
            try:
                _k.rnea_into(self._P, q, qd, qdd, out)
                return out
            except (TypeError, ValueError):
                pass  # not a plain float64 (n,) input: validated and dispatched below
        (q, qd, qdd), batch = self._states(("q", "qd", "qdd"), q, qd, qdd)
        if batch:
            W = _NO_W if wrench is None else self._wrench(wrench, q.shape[0])
            return self._call(_k.rnea_batch, q, qd, qdd, W, True, 1.0, wrench is not None)
        if wrench is None:
            return self._call(_k.rnea, q, qd, qdd)
        return self._call(_k.rnea_w, q, qd, qdd, self._wrench(wrench, None), True, 1.0)

    def bias(self, q, qd) -> np.ndarray:
        """h(q, qd) = C(q, qd) qd + g(q), shape like q [N m | N]."""
        try:
            return _k.bias(self._P, q, qd, 1.0)
        except (TypeError, ValueError):
            pass  # validated and dispatched below
        (q, qd), batch = self._states(("q", "qd"), q, qd)
        if batch:
            return self._call(_k.rnea_batch, q, qd, qd, _NO_W, False, 1.0, False)
        return self._call(_k.bias, q, qd, 1.0)

    def gravity(self, q) -> np.ndarray:
        """Gravity torques g(q), shape like q [N m | N]."""
        try:
            return _k.gravity(self._P, q)
        except (TypeError, ValueError):
            pass  # not a plain float64 (n,) input: validated and dispatched below
        (q,), batch = self._states(("q",), q)
        if batch:
            z = np.zeros_like(q)
            return self._call(_k.rnea_batch, q, z, z, _NO_W, False, 1.0, False)
        return self._call(_k.gravity, q)

    def coriolis_torque(self, q, qd) -> np.ndarray:
        """C(q, qd) qd (velocity terms of the bias only), shape like q."""
        (q, qd), batch = self._states(("q", "qd"), q, qd)
        if batch:
            return self._call(_k.rnea_batch, q, qd, qd, _NO_W, False, 0.0, False)
        return self._call(_k.bias, q, qd, 0.0)

    def mass_matrix(self, q) -> np.ndarray:
        """Joint-space inertia M(q) incl. armature, (n, n) or (N, n, n)."""
        M = _empty((self._n, self._n))
        try:
            _k.crba_into(self._P, q, M)
            return M
        except (TypeError, ValueError):
            pass  # validated and dispatched below
        (q,), batch = self._states(("q",), q)
        if batch:
            return self._call(_k.crba_batch, q)
        return self._call(_k.crba, q)

    def coriolis_matrix(self, q, qd) -> np.ndarray:
        """Coriolis matrix C(q, qd) with C qd = h - g and dM/dt - 2C skew-symmetric.

        Shape (n, n) or (N, n, n).  Built as ``sum_i J_i^T (I_i dJ_i/dt + B(I_i, v_i) J_i)``
        over the links in world-frame spatial coordinates, with Echeandia & Wensing's
        ``B(I, v) = 1/2 [(v x*) I + (I v) xbar - I (v x)]`` (the construction Pinocchio's
        ``computeCoriolisMatrix`` uses).
        """
        (q, qd), batch = self._states(("q", "qd"), q, qd)
        if batch:
            return self._call(_k.coriolis, q, qd)
        return self._call(_k.coriolis, q[None], qd[None])[0]

    def forward_dynamics(self, q, qd, tau, wrench=None) -> np.ndarray:
        """Accelerations ``qdd = M^-1 (tau - h + J^T wrench)``, shape like q.

        Raises
        ------
        ModelError
            If the mass matrix is not positive definite at q.
        """
        if wrench is None:
            out = _empty(self._n)
            try:
                _k.aba_into(self._P, q, qd, tau, out)
                return out
            except (TypeError, ValueError):
                pass  # validated and dispatched below
            except ZeroDivisionError as err:
                raise ModelError(f"{self.name}: mass matrix is not positive definite at q") from err
        (q, qd, tau), batch = self._states(("q", "qd", "tau"), q, qd, tau)
        if batch:
            W = _NO_W if wrench is None else self._wrench(wrench, q.shape[0])
            return self._call(_k.aba_batch, q, qd, tau, W, wrench is not None)
        if wrench is None:
            return self._call(_k.aba, q, qd, tau)
        W = self._wrench(wrench, 1)
        return self._call(_k.aba_batch, q[None], qd[None], tau[None], W, True)[0]

    # -- energies ------------------------------------------------------------
    def _energies(self, q, qd):
        (q, qd), batch = self._states(("q", "qd"), q, qd)
        if batch:
            return self._call(_k.energies, q, qd), True
        return self._call(_k.energies, q[None], qd[None]), False

    def kinetic_energy(self, q, qd):
        """Kinetic energy [J] incl. armature: float, or (N,) for a batch."""
        (ke, _), batch = self._energies(q, qd)
        return ke if batch else float(ke[0])

    def potential_energy(self, q):
        """Gravitational potential energy ``-sum_i m_i g . c_i`` [J] (zero at the world origin)."""
        q = self._state(q, "q")
        (_, pe), batch = self._energies(q, np.zeros_like(q))
        return pe if batch else float(pe[0])

    # -- kinematics ----------------------------------------------------------
    def _poses(self, q):
        (q,), batch = self._states(("q",), q)
        return (self._call(_k.poses_batch, q) if batch else self._call(_k.poses, q)), batch

    def forward_kinematics(self, q) -> np.ndarray:
        """Tool pose T_world_tool, (4, 4) or (N, 4, 4)."""
        try:
            return _k.fk(self._P, q)
        except (TypeError, ValueError):
            pass  # not a plain float64 (n,) input: validated and dispatched below
        T, batch = self._poses(q)
        return np.ascontiguousarray(T[:, -1]) if batch else T[-1].copy()

    def joint_poses(self, q) -> np.ndarray:
        """World poses of the joint frames J_0..J_{n-1} (joint i moves about their z), (n, 4, 4) or (N, n, 4, 4)."""
        T, _ = self._poses(q)
        return np.ascontiguousarray(T[..., :-1, :, :])

    def stick_figure(self, q, pose=None):
        """The chain of the link frames' origins to the tool (see :meth:`dynamics.base.Model.stick_figure`)."""
        qa = np.asarray(q, dtype=float)
        pts = self.link_poses(qa)[:, :3, 3]
        tool = self.forward_kinematics(qa)[:3, 3]
        return [np.vstack([pts, tool])], tool, None

    def link_poses(self, q) -> np.ndarray:
        """World poses of the link frames: index 0 is the base (link 0) frame, i the frame of link i.

        Returns shape (n + 1, 4, 4) or (N, n + 1, 4, 4).  For a DH robot these are
        the DH frames; for a URDF model the joint frames.
        """
        T, batch = self._poses(q)
        lead = T.shape[:-3]
        out = np.empty(lead + (self._n + 1, 4, 4))
        out[..., 0, :, :] = self._BF
        out[..., 1:, :, :] = T[..., :-1, :, :] @ self._LF
        return out

    def jacobian(self, q) -> np.ndarray:
        """Geometric tool Jacobian [v; omega] in the world frame, (6, n) or (N, 6, n)."""
        try:
            return _k.jacobian(self._P, q)
        except (TypeError, ValueError):
            pass  # not a plain float64 (n,) input: validated and dispatched below
        (q,), batch = self._states(("q",), q)
        return self._call(_k.jacobian_batch, q) if batch else self._call(_k.jacobian, q)

    # -- variants ------------------------------------------------------------
    def to_mjcf(self, q0=None):
        """This robot as MJCF (:func:`dynamics.mjcf.serial_mjcf`), assembled at ``q0``; returns a
        :class:`dynamics.mjcf.MjcfRobot`."""
        from .mjcf import serial_mjcf
        return serial_mjcf(self, q0)

    def scaled(self, mass_factor: float = 1.0, inertia_factor: float | None = None) -> "SerialModel":
        """Copy with every link mass times ``mass_factor`` and every inertia tensor
        (about the COM) times ``inertia_factor`` (default ``mass_factor``).

        Centres of mass, geometry and the drive data (armature, friction) are unchanged.
        """
        if inertia_factor is None:
            inertia_factor = mass_factor
        for v, nm in ((mass_factor, "mass_factor"), (inertia_factor, "inertia_factor")):
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
                raise ModelError(f"{nm} must be a finite number >= 0, got {v!r}")
        return SerialModel(joint_types=self._types, placements=self._X, mass=self._mass * mass_factor,
                           com=self._com, inertia=self._Ic * inertia_factor, tool=self._tool,
                           gravity=self._g, link_frames=self._LF, base_frame=self._BF,
                           joint_names=self._names, limits=self._limits, drive=self._drive,
                           name=self.name, source=self.source)

    def summary(self) -> str:
        lines = [super().summary(),
                 f"  joint types: {', '.join(self._types)}",
                 f"  link masses [kg]: {np.array2string(self._mass, precision=4)}"]
        return "\n".join(lines)


# ---------------------------------------------------------------------------
# robot-file loader
# ---------------------------------------------------------------------------

def _angle(sec: Section, key: str, default=0.0) -> float:
    """Read ``key`` [rad] or ``key_deg`` [deg] (not both); ``default=None``: one is required."""
    if sec.has(key) and sec.has(key + "_deg"):
        raise sec.error(key + "_deg", f"give either '{key}' or '{key}_deg', not both")
    if sec.has(key + "_deg"):
        return math.radians(sec.float(key + "_deg"))
    if not sec.has(key):
        if default is None:
            raise sec.error(key, f"required field is missing (give '{key}' [rad] or "
                                 f"'{key}_deg' [deg])")
        return default
    return sec.float(key)


def _transform(sec: Section | None) -> np.ndarray:
    """Read ``{ xyz = [..], rpy = [..] | rpy_deg = [..] }`` as a 4x4 transform."""
    T = np.eye(4)
    if sec is None:
        return T
    T[:3, 3] = sec.vector("xyz", 3, [0.0, 0.0, 0.0])
    if sec.has("rpy") and sec.has("rpy_deg"):
        raise sec.error("rpy_deg", "give either 'rpy' or 'rpy_deg', not both")
    if sec.has("rpy_deg"):
        rpy = np.radians(sec.vector("rpy_deg", 3))
    else:
        rpy = sec.vector("rpy", 3, [0.0, 0.0, 0.0])
    T[:3, :3] = rpy_matrix(rpy)
    sec.finish()
    return T


def load_serial(root: Section, base_dir=None) -> SerialModel:
    """Build a :class:`SerialModel` from a DH robot file (see the module docstring).

    Parameters
    ----------
    root : Section
        The robot file's root table.
    base_dir : path, optional
        Directory of the robot file (unused: serial robot files reference no other file).

    Raises
    ------
    ConfigError
        Naming the file and the field for any missing, unknown or invalid entry.
    """
    root.str("type", choices=["serial"])
    name = root.str("name", "serial")
    if not isinstance(root.raw("description", ""), str):
        raise root.error("description", "expected a string")
    conv = root.str("convention", choices=["standard", "modified"])
    gravity = root.vector("gravity", 3, [0.0, 0.0, -9.81])
    base = _transform(root.section("base", None))
    tool = _transform(root.section("tool", None))
    rows = root.sections("joints")
    if not rows:
        raise root.error("joints", "at least one joint is required")
    n = len(rows)
    types, names = [], []
    pre, post = [], []
    mass = np.zeros(n)
    com = np.zeros((n, 3))
    inertia = np.zeros((n, 3, 3))
    lim = {k: np.full(n, v) for k, v in (("position_min", -np.inf), ("position_max", np.inf),
                                          ("velocity_max", np.inf), ("torque_max", np.inf))}
    arm, visc, coul = np.zeros(n), np.zeros(n), np.zeros(n)
    for i, js in enumerate(rows):
        jt = js.str("type", "revolute", choices=["revolute", "prismatic"])
        types.append(jt)
        nm = js.str("name", f"joint{i + 1}")
        if nm in names:
            raise js.error("name", f"duplicate joint name {nm!r}")
        names.append(nm)
        # the DH parameters of the row are all required: a forgotten one is not silently 0
        a = js.float("a")
        alpha = _angle(js, "alpha", None)
        d = js.float("d")
        if jt == "revolute":
            offset = _angle(js, "offset")
            theta, dd = offset, d
        else:
            offset = js.float("offset", 0.0)
            theta, dd = _angle(js, "theta"), d + offset
        fixed = dh_transform(a, alpha, dd, theta, conv)   # the DH transform at q = 0
        if conv == "standard":
            pre.append(np.eye(4))      # J_i = L_{i-1} . Motion(q) ; L_i = J_i . fixed
            post.append(fixed)
        else:
            pre.append(fixed)          # J_i = L_{i-1} . fixed . Motion(q) ; L_i = J_i
            post.append(np.eye(4))
        m = js.float("mass", minimum=0.0)
        c = js.vector("com", 3, [0.0, 0.0, 0.0])
        I = _inertia_matrix(js.vector("inertia", 6))
        why = check_inertia(I)
        if why:
            raise js.error("inertia", why)
        pts = []
        for ps in js.sections("point_masses", []):
            pts.append((ps.float("mass", minimum=0.0), ps.vector("position", 3)))
            ps.finish()
        m, c, I = _combine(m, c, I, pts)
        # link frame -> joint frame
        S = post[-1]
        mass[i] = m
        com[i] = S[:3, :3] @ c + S[:3, 3]
        inertia[i] = S[:3, :3] @ I @ S[:3, :3].T
        if jt == "revolute":
            pmin, pmax = _angle(js, "position_min", -np.inf), _angle(js, "position_max", np.inf)
        else:
            pmin = js.float("position_min", -np.inf) if js.has("position_min") else -np.inf
            pmax = js.float("position_max", np.inf) if js.has("position_max") else np.inf
        if not pmin < pmax:
            raise js.error("position_max", f"must be greater than position_min ({pmin!r}), got {pmax!r}")
        lim["position_min"][i], lim["position_max"][i] = pmin, pmax
        for key in ("velocity_max", "torque_max"):
            if js.has(key):
                lim[key][i] = js.float(key, minimum=0.0, strict_min=True)
        rotor = js.float("rotor_inertia", 0.0, minimum=0.0)
        ratio = js.float("gear_ratio", 1.0, minimum=GEAR_RATIO_RANGE[0], maximum=GEAR_RATIO_RANGE[1])
        arm[i] = rotor * ratio ** 2
        visc[i] = js.float("viscous", 0.0, minimum=0.0)
        coul[i] = js.float("coulomb", 0.0, minimum=0.0)
        js.finish()
    placements = np.empty((n, 4, 4))
    prev = base
    for i in range(n):
        placements[i] = prev @ pre[i]
        prev = post[i]
    root.finish()
    try:
        model = SerialModel(joint_types=types, placements=placements, mass=mass, com=com,
                            inertia=inertia, tool=post[-1] @ tool, gravity=gravity,
                            link_frames=np.array(post), base_frame=base, joint_names=names,
                            limits=JointLimits(**lim), drive=DriveParams(arm, visc, coul),
                            name=name, source=root.file)
    except ModelError as err:
        raise root.error("joints", str(err)) from err
    try:
        L = np.linalg.cholesky(model.mass_matrix(np.zeros(n)))
    except np.linalg.LinAlgError as err:
        raise root.error("joints", "the mass matrix is singular at q = 0 (some joint moves no "
                                   "mass or inertia)") from err
    if not np.all(np.diag(L) > 1e-12 * max(1.0, float(np.abs(L).max()))):
        raise root.error("joints", "the mass matrix is singular at q = 0")
    return model
