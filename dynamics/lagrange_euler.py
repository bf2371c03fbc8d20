"""Lagrange-Euler (trace, Uicker-Kahn) dynamics of a serial chain: an independent reference.

This is the textbook 4x4-matrix formulation of seed 004 (Arora, Sharma, Cambow,
"Review of Lagrange-Euler mechanics applied for dynamic study of robotic arm",
section 3), with the misprints listed in ``shared/seeds/ERRATA.md`` corrected.
It exists to cross-check the fast recursive model of :mod:`dynamics.serial`
(Newton-Euler / CRBA), so it is derived and coded independently of it: it reads
the Denavit-Hartenberg rows of a robot file itself, builds its own link
transforms and never calls :class:`~dynamics.serial.SerialModel`.  It is a
reference, not a hot path: plain numpy, O(n^4) per state.

Notation (the paper's, indices from 1 in the text, from 0 in the code)
---------------------------------------------------------------------
``T_j``
    Pose (4, 4) of link frame ``j`` in the world: ``T_0`` is the ``base`` pose,
    ``T_j = T_{j-1} A_j(q_j)`` with ``A_j`` the DH link transform of row ``j``.
``Q_j``
    Derivative (generator) matrix of joint ``j``: revolute ``dRz/dtheta`` at 0
    (``Q[0, 1] = -1, Q[1, 0] = 1``), prismatic ``dTz/dd`` (``Q[2, 3] = 1``).
    Standard DH (``A = Rz(theta) Tz(d) Tx(a) Rx(alpha)``): the joint motion is
    the *first* factor, so ``dA/dq = Q A``.  Modified DH (Craig,
    ``A = Rx(alpha) Tx(a) Rz(theta) Tz(d)``): the joint motion is the *last*
    factor (``Rz`` and ``Tz`` commute), so ``dA/dq = A Q``.
``U_ji = dT_j/dq_i``
    ``T_{i-1} (dA_i/dq_i) A_{i+1} ... A_j`` for ``i <= j``, zero for ``i > j``
    (eq. 3.18/3.38; standard DH: ``T_{i-1} Q_i T^{i-1}_j``).
``U_jkm = d^2 T_j / dq_k dq_m``
    the same product with ``A_k`` and ``A_m`` differentiated (twice if
    ``k = m``), zero unless ``k, m <= j`` (eq. 3.39).
``J_j``
    Pseudo-inertia (4, 4) of link ``j`` about the link-frame origin,
    ``J = int [r; 1] [r; 1]^T dm`` (eqs. 3.20/3.21): ``J[:3, :3] = tr(I_o)/2 * 1 - I_o``
    with ``I_o`` the inertia tensor about the frame origin (ERRATA: not about the
    COM), ``J[:3, 3] = J[3, :3] = m c``, ``J[3, 3] = m``.  Point masses ``m_p`` at
    ``p`` add ``m_p [p; 1][p; 1]^T``.

Equations of motion (eq. 3.34 with ``q''``, ERRATA)::

    tau_i = sum_j M_ij qdd_j + sum_k sum_m h_ikm qd_k qd_m + c_i
    M_ij  = sum_p Tr(U_pj J_p U_pi^T)              (+ armature_i on the diagonal)
    h_ikm = sum_j Tr(U_jkm J_j U_ji^T)
    c_i   = -sum_j g~^T U_ji J_j[:, 3]             (= -sum_j m_j g^T U_ji r_j)

with ``g~ = [g; 0]`` the homogeneous gravity vector in the world frame and the
sums over ``p, j`` running over all links (the terms with ``p < max(i, j)``
vanish).  Energies: ``K = 1/2 sum_j Tr(Td_j J_j Td_j^T) + 1/2 sum_i
armature_i qd_i^2`` with ``Td_j = sum_i U_ji qd_i``; ``P = -sum_j g~^T T_j J_j[:, 3]``
(zero when every centre of mass is at the world origin).

Robot files are the ``type = "serial"`` TOML files of :mod:`dynamics.serial`
(same keys and meaning).  Keys that do not enter the dynamics (limits,
friction, descriptions) are ignored; the ``tool`` pose is read for
:meth:`LagrangeEulerChain.forward_kinematics` only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from .config import read_toml

__all__ = ["LagrangeEulerChain", "from_robot_file", "from_robot_dict", "pseudo_inertia"]

#: joint generators: d/dq of the joint motion at q = 0
_Q_REVOLUTE = np.array([[0.0, -1.0, 0.0, 0.0],
                        [1.0, 0.0, 0.0, 0.0],
                        [0.0, 0.0, 0.0, 0.0],
                        [0.0, 0.0, 0.0, 0.0]])
_Q_PRISMATIC = np.array([[0.0, 0.0, 0.0, 0.0],
                         [0.0, 0.0, 0.0, 0.0],
                         [0.0, 0.0, 0.0, 1.0],
                         [0.0, 0.0, 0.0, 0.0]])


# ---------------------------------------------------------------------------
# elementary transforms (own copies: this module shares no kinematics code)
# ---------------------------------------------------------------------------

def _rot_x(t: float) -> np.ndarray:
    c, s = math.cos(t), math.sin(t)
    return np.array([[1.0, 0, 0, 0], [0, c, -s, 0], [0, s, c, 0], [0, 0, 0, 1.0]])


def _rot_z(t: float) -> np.ndarray:
    c, s = math.cos(t), math.sin(t)
    return np.array([[c, -s, 0, 0], [s, c, 0, 0], [0, 0, 1.0, 0], [0, 0, 0, 1.0]])


def _trans(x: float, y: float, z: float) -> np.ndarray:
    T = np.eye(4)
    T[0, 3], T[1, 3], T[2, 3] = x, y, z
    return T


def _rpy_pose(xyz: Sequence[float], rpy: Sequence[float]) -> np.ndarray:
    """Pose (4, 4) with translation ``xyz`` [m] and rotation ``Rz(yaw) Ry(pitch) Rx(roll)``."""
    r, p, y = (float(v) for v in rpy)
    Rx = _rot_x(r)[:3, :3]
    Rz = _rot_z(y)[:3, :3]
    cp, sp = math.cos(p), math.sin(p)
    Ry = np.array([[cp, 0.0, sp], [0.0, 1.0, 0.0], [-sp, 0.0, cp]])
    T = np.eye(4)
    T[:3, :3] = Rz @ Ry @ Rx
    T[:3, 3] = [float(v) for v in xyz]
    return T


def pseudo_inertia(mass: float, com: Sequence[float], inertia_com: np.ndarray,
                   point_masses: Sequence[tuple[float, Sequence[float]]] = ()) -> np.ndarray:
    """Pseudo-inertia matrix (4, 4) ``int [r; 1][r; 1]^T dm`` about the link-frame origin.

    Parameters
    ----------
    mass : float
        Link mass [kg].
    com : array_like, shape (3,)
        Centre of mass in the link frame [m].
    inertia_com : array_like, shape (3, 3)
        Inertia tensor about the centre of mass, link-frame axes [kg m^2]
        (tensor entries: the (0, 1) entry is ``-int x y dm``).
    point_masses : sequence of (mass [kg], position (3,) [m])
        Extra point masses rigidly attached to the link (link frame).

    Returns
    -------
    ndarray, shape (4, 4)
        ``[[tr(I_o)/2 * 1 - I_o, m c], [m c^T, m]]`` with ``I_o`` the inertia about
        the link-frame origin (parallel-axis theorem), summed with the point masses.
    """
    c = np.asarray(com, dtype=float).reshape(3)
    Ic = np.asarray(inertia_com, dtype=float).reshape(3, 3)
    Io = Ic + mass * (float(c @ c) * np.eye(3) - np.outer(c, c))     # parallel axis
    J = np.zeros((4, 4))
    J[:3, :3] = 0.5 * np.trace(Io) * np.eye(3) - Io                   # int r r^T dm
    J[:3, 3] = J[3, :3] = mass * c
    J[3, 3] = mass
    for mp, p in point_masses:
        rp = np.append(np.asarray(p, dtype=float).reshape(3), 1.0)
        J += float(mp) * np.outer(rp, rp)
    return J


# ---------------------------------------------------------------------------
# the chain
# ---------------------------------------------------------------------------

@dataclass(frozen=True, eq=False)
class LagrangeEulerChain:
    """Serial chain in Denavit-Hartenberg form with Lagrange-Euler dynamics.

    Parameters
    ----------
    convention : {"standard", "modified"}
        ``standard``: ``A = Rz(theta) Tz(d) Tx(a) Rx(alpha)``; ``modified``
        (Craig): ``A = Rx(alpha) Tx(a) Rz(theta) Tz(d)``.
    joint_types : tuple of str, length n
        ``"revolute"`` (``theta = q + offset``, ``d`` fixed) or ``"prismatic"``
        (``d = d + offset + q``, ``theta`` fixed).
    a, alpha, d, theta, offset : ndarray, shape (n,)
        DH parameters [m, rad, m, rad]; ``theta`` is used by prismatic joints
        only, ``offset`` is [rad] (revolute) or [m] (prismatic).
    pseudo_inertias : ndarray, shape (n, 4, 4)
        ``J_j`` about the origin of link frame ``j`` [kg m^2, kg m, kg]
        (see :func:`pseudo_inertia`).
    gravity : ndarray, shape (3,)
        Gravity acceleration in the world frame [m/s^2].
    base : ndarray, shape (4, 4)
        Pose of link frame 0 in the world.
    tool : ndarray, shape (4, 4)
        Pose of the tool in the last link frame.
    armature : ndarray, shape (n,)
        Reflected rotor inertia added to M's diagonal [kg m^2 | kg].
    joint_names : tuple of str
    name : str

    Notes
    -----
    Immutable (frozen dataclass with read-only arrays).  State methods take one
    state ``q, qd, qdd`` of shape (n,) each, or a batch (N, n), and return the
    matching shape.  Units: SI, radians; torques [N m] (revolute) or [N]
    (prismatic).
    """

    convention: str
    joint_types: tuple
    a: np.ndarray
    alpha: np.ndarray
    d: np.ndarray
    theta: np.ndarray
    offset: np.ndarray
    pseudo_inertias: np.ndarray
    gravity_vector: np.ndarray
    base: np.ndarray
    tool: np.ndarray
    armature: np.ndarray
    joint_names: tuple = ()
    name: str = "serial"

    def __post_init__(self):
        if self.convention not in ("standard", "modified"):
            raise ValueError(f"convention must be 'standard' or 'modified', got {self.convention!r}")
        jt = tuple(self.joint_types)
        n = len(jt)
        if n < 1:
            raise ValueError("a chain needs at least one joint")
        for t in jt:
            if t not in ("revolute", "prismatic"):
                raise ValueError(f"joint type must be 'revolute' or 'prismatic', got {t!r}")
        object.__setattr__(self, "joint_types", jt)
        shapes = {"a": (n,), "alpha": (n,), "d": (n,), "theta": (n,), "offset": (n,),
                  "pseudo_inertias": (n, 4, 4), "gravity_vector": (3,), "base": (4, 4),
                  "tool": (4, 4), "armature": (n,)}
        for key, shape in shapes.items():
            arr = np.array(getattr(self, key), dtype=float)
            if arr.shape != shape:
                raise ValueError(f"{key}: expected shape {shape}, got {arr.shape}")
            if not np.all(np.isfinite(arr)):
                raise ValueError(f"{key}: non-finite values")
            arr.setflags(write=False)
            object.__setattr__(self, key, arr)
        names = tuple(self.joint_names) or tuple(f"joint{i + 1}" for i in range(n))
        if len(names) != n:
            raise ValueError(f"expected {n} joint names, got {len(names)}")
        object.__setattr__(self, "joint_names", names)

    # -- description ---------------------------------------------------------
    @property
    def dof(self) -> int:
        """Number of joints n."""
        return len(self.joint_types)

    @property
    def link_masses(self) -> np.ndarray:
        """Link masses (n,) [kg], point masses included (``J_j[3, 3]``)."""
        return self.pseudo_inertias[:, 3, 3].copy()

    # -- kinematics ----------------------------------------------------------
    def _link(self, i: int, qi: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``A_i``, ``dA_i/dq_i``, ``d^2A_i/dq_i^2`` for joint i at q_i."""
        if self.joint_types[i] == "revolute":
            th, dd, Q = qi + self.offset[i], self.d[i], _Q_REVOLUTE
        else:
            th, dd, Q = self.theta[i], self.d[i] + self.offset[i] + qi, _Q_PRISMATIC
        if self.convention == "standard":
            A = _rot_z(th) @ _trans(0.0, 0.0, dd) @ _trans(self.a[i], 0.0, 0.0) @ _rot_x(self.alpha[i])
            return A, Q @ A, Q @ Q @ A
        A = _rot_x(self.alpha[i]) @ _trans(self.a[i], 0.0, 0.0) @ _rot_z(th) @ _trans(0.0, 0.0, dd)
        return A, A @ Q, A @ Q @ Q

    def _q(self, q) -> np.ndarray:
        a = np.asarray(q, dtype=float)
        if a.shape != (self.dof,):
            raise ValueError(f"{self.name}: expected a state of shape ({self.dof},), got {a.shape}")
        if not np.all(np.isfinite(a)):
            raise ValueError(f"{self.name}: non-finite state")
        return a

    def link_transforms(self, q) -> np.ndarray:
        """World poses of the link frames ``T_0 .. T_n``, shape (n + 1, 4, 4); ``T_0`` is the base.

        Parameters
        ----------
        q : array_like, shape (n,)
            Joint positions [rad | m].
        """
        q = self._q(q)
        T = np.empty((self.dof + 1, 4, 4))
        T[0] = self.base
        for i in range(self.dof):
            T[i + 1] = T[i] @ self._link(i, q[i])[0]
        return T

    def forward_kinematics(self, q) -> np.ndarray:
        """Tool pose in the world, ``T_n @ tool``, shape (4, 4).

        Parameters
        ----------
        q : array_like, shape (n,)
        """
        return self.link_transforms(q)[-1] @ self.tool

    def derivatives(self, q, second: bool = True):
        """Link poses and their first (and second) partial derivatives.

        Parameters
        ----------
        q : array_like, shape (n,)
            Joint positions [rad | m].
        second : bool
            Also return the second derivatives.

        Returns
        -------
        T : ndarray, shape (n, 4, 4)
            ``T[j]``: world pose of link frame j + 1 (code index j = paper link j + 1).
        U : ndarray, shape (n, n, 4, 4)
            ``U[j, i] = dT[j]/dq_i`` (zero for i > j).
        U2 : ndarray, shape (n, n, n, 4, 4), only if ``second``
            ``U2[j, k, m] = d^2 T[j] / dq_k dq_m`` (symmetric in k, m; zero unless k, m <= j).
        """
        q = self._q(q)
        n = self.dof
        links = [self._link(i, q[i]) for i in range(n)]
        A = [L[0] for L in links]
        dA = [L[1] for L in links]
        d2A = [L[2] for L in links]
        prefix = [self.base]                    # prefix[i] = T_{i} (paper), i = 0..n
        for i in range(n):
            prefix.append(prefix[-1] @ A[i])
        T = np.array(prefix[1:])
        U = np.zeros((n, n, 4, 4))
        for i in range(n):
            X = prefix[i] @ dA[i]               # T_{i-1} dA_i  (paper indices)
            for j in range(i, n):
                if j > i:
                    X = X @ A[j]
                U[j, i] = X
        if not second:
            return T, U
        U2 = np.zeros((n, n, n, 4, 4))
        for k in range(n):
            for m in range(k, n):
                # product A_1 .. A_j with factor k and factor m differentiated
                X = prefix[k] @ (d2A[k] if m == k else dA[k])
                for s in range(k + 1, m + 1):
                    X = X @ (dA[s] if s == m else A[s])
                for j in range(m, n):
                    if j > m:
                        X = X @ A[j]
                    U2[j, k, m] = X
                    U2[j, m, k] = X
        return T, U, U2

    # -- dynamics ------------------------------------------------------------
    def _map(self, fn, *xs):
        """Apply a single-state method over a batch (N, n) if given one."""
        arrs = [np.asarray(x, dtype=float) for x in xs]
        if all(a.ndim == 1 for a in arrs):
            return fn(*arrs)
        N = max(a.shape[0] for a in arrs if a.ndim == 2)
        rows = [np.broadcast_to(a, (N, self.dof)) if a.ndim == 1 else a for a in arrs]
        return np.array([fn(*r) for r in zip(*rows)])

    def _mass_matrix(self, q):
        _, U = self.derivatives(q, second=False)
        J = self.pseudo_inertias
        M = np.einsum("pjab,pbc,piac->ij", U, J, U)       # sum_p Tr(U_pj J_p U_pi^T)
        return M + np.diag(self.armature)

    def mass_matrix(self, q) -> np.ndarray:
        """Joint-space inertia ``M_ij = sum_p Tr(U_pj J_p U_pi^T)`` plus armature on the diagonal.

        Parameters
        ----------
        q : array_like, shape (n,) or (N, n)
            Joint positions [rad | m].

        Returns
        -------
        ndarray, shape (n, n) or (N, n, n)
            [kg m^2 | kg m | kg] per entry (revolute/prismatic mix).
        """
        return self._map(self._mass_matrix, q)

    def _velocity_coefficients(self, q):
        _, U, U2 = self.derivatives(q)
        return np.einsum("jkmab,jbc,jiac->ikm", U2, self.pseudo_inertias, U)

    def velocity_coefficients(self, q) -> np.ndarray:
        """Coriolis/centrifugal coefficients ``h_ikm = sum_j Tr(U_jkm J_j U_ji^T)``.

        Parameters
        ----------
        q : array_like, shape (n,) or (N, n)

        Returns
        -------
        ndarray, shape (n, n, n) or (N, n, n, n)
            ``h[i, k, m]``, symmetric in (k, m); ``velocity_terms = h[i] : qd qd^T``.
        """
        return self._map(self._velocity_coefficients, q)

    def _velocity_terms(self, q, qd):
        qd = self._q(qd)
        return np.einsum("ikm,k,m->i", self._velocity_coefficients(q), qd, qd)

    def velocity_terms(self, q, qd) -> np.ndarray:
        """Coriolis and centrifugal torques ``h_i = sum_k sum_m h_ikm qd_k qd_m``.

        Parameters
        ----------
        q : array_like, shape (n,) or (N, n)
            Joint positions [rad | m].
        qd : array_like, shape (n,) or (N, n)
            Joint velocities [rad/s | m/s].

        Returns
        -------
        ndarray, shape (n,) or (N, n)
            [N m | N].
        """
        return self._map(self._velocity_terms, q, qd)

    def _gravity(self, q):
        _, U = self.derivatives(q, second=False)
        g4 = np.append(self.gravity_vector, 0.0)
        mr = self.pseudo_inertias[:, :, 3]                 # (n, 4): [m_j r_j; m_j]
        return -np.einsum("a,jiab,jb->i", g4, U, mr)

    def gravity(self, q) -> np.ndarray:
        """Gravity torques ``c_i = -sum_j m_j g^T U_ji r_j`` (torque that holds the arm still).

        Parameters
        ----------
        q : array_like, shape (n,) or (N, n)
            Joint positions [rad | m].

        Returns
        -------
        ndarray, shape (n,) or (N, n)
            [N m | N].
        """
        return self._map(self._gravity, q)

    def bias(self, q, qd) -> np.ndarray:
        """Velocity terms plus gravity, ``h(q, qd) + c(q)``, shape like q [N m | N]."""
        return self.velocity_terms(q, qd) + self.gravity(q)

    def _inverse_dynamics(self, q, qd, qdd):
        qdd = self._q(qdd)
        return self._mass_matrix(q) @ qdd + self._velocity_terms(q, qd) + self._gravity(q)

    def inverse_dynamics(self, q, qd, qdd) -> np.ndarray:
        """Joint torques ``tau = M(q) qdd + h(q, qd) + c(q)`` (eq. 3.34 with qdd).

        Parameters
        ----------
        q, qd, qdd : array_like, shape (n,) or (N, n)
            Positions [rad | m], velocities [rad/s | m/s], accelerations [rad/s^2 | m/s^2].

        Returns
        -------
        ndarray, shape (n,) or (N, n)
            [N m | N]; armature included, friction not.
        """
        return self._map(self._inverse_dynamics, q, qd, qdd)

    def _kinetic_energy(self, q, qd):
        qd = self._q(qd)
        _, U = self.derivatives(q, second=False)
        Td = np.einsum("jiab,i->jab", U, qd)              # dT_j/dt
        ke = 0.5 * np.einsum("jab,jbc,jac->", Td, self.pseudo_inertias, Td)
        return float(ke + 0.5 * np.sum(self.armature * qd * qd))

    def kinetic_energy(self, q, qd):
        """Kinetic energy ``1/2 sum_j Tr(Td_j J_j Td_j^T) + 1/2 sum_i armature_i qd_i^2`` [J].

        Parameters
        ----------
        q, qd : array_like, shape (n,) or (N, n)

        Returns
        -------
        float, or ndarray (N,) for a batch.
        """
        return self._map(self._kinetic_energy, q, qd)

    def _potential_energy(self, q):
        T = self.link_transforms(q)[1:]
        g4 = np.append(self.gravity_vector, 0.0)
        return float(-np.einsum("a,jab,jb->", g4, T, self.pseudo_inertias[:, :, 3]))

    def potential_energy(self, q):
        """Gravitational potential energy ``-sum_j m_j g^T (T_j r_j)`` [J] (eq. 3.32).

        Parameters
        ----------
        q : array_like, shape (n,) or (N, n)

        Returns
        -------
        float, or ndarray (N,) for a batch.  Zero reference: all COMs at the world origin.
        """
        return self._map(self._potential_energy, q)


# ---------------------------------------------------------------------------
# robot-file reader
# ---------------------------------------------------------------------------

def _num(tbl: Mapping[str, Any], key: str, default: float | None = None) -> float:
    if key not in tbl:
        if default is None:
            raise ValueError(f"required field {key!r} is missing")
        return float(default)
    v = tbl[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise ValueError(f"{key}: expected a finite number, got {v!r}")
    return float(v)


def _angle(tbl: Mapping[str, Any], key: str) -> float:
    """``key`` [rad] or ``key_deg`` [deg] (not both), default 0."""
    if key in tbl and key + "_deg" in tbl:
        raise ValueError(f"give either {key!r} or {key + '_deg'!r}, not both")
    if key + "_deg" in tbl:
        return math.radians(_num(tbl, key + "_deg"))
    return _num(tbl, key, 0.0)


def _vec(tbl: Mapping[str, Any], key: str, n: int, default=None) -> np.ndarray:
    if key not in tbl:
        if default is None:
            raise ValueError(f"required field {key!r} is missing")
        return np.array(default, dtype=float)
    v = np.array(tbl[key], dtype=float)
    if v.shape != (n,) or not np.all(np.isfinite(v)):
        raise ValueError(f"{key}: expected {n} finite numbers, got {tbl[key]!r}")
    return v


def _pose(tbl: Mapping[str, Any] | None) -> np.ndarray:
    if tbl is None:
        return np.eye(4)
    if "rpy" in tbl and "rpy_deg" in tbl:
        raise ValueError("give either 'rpy' or 'rpy_deg', not both")
    rpy = np.radians(_vec(tbl, "rpy_deg", 3)) if "rpy_deg" in tbl else _vec(tbl, "rpy", 3, [0, 0, 0])
    return _rpy_pose(_vec(tbl, "xyz", 3, [0, 0, 0]), rpy)


def from_robot_dict(data: Mapping[str, Any], name: str | None = None) -> LagrangeEulerChain:
    """Build a :class:`LagrangeEulerChain` from the parsed dict of a serial robot file.

    Parameters
    ----------
    data : Mapping
        Root table of a ``type = "serial"`` robot file (see :mod:`dynamics.serial`).
    name : str, optional
        Overrides the file's ``name``.

    Raises
    ------
    ValueError
        If the file is not a serial DH robot file or a needed entry is invalid.
    """
    if data.get("type") != "serial":
        raise ValueError(f"not a serial robot file (type = {data.get('type')!r})")
    conv = data.get("convention")
    if conv not in ("standard", "modified"):
        raise ValueError(f"convention must be 'standard' or 'modified', got {conv!r}")
    rows = data.get("joints")
    if not isinstance(rows, list) or not rows:
        raise ValueError("at least one [[joints]] row is required")
    types, names = [], []
    a, alpha, d, theta, offset, arm, J = [], [], [], [], [], [], []
    for i, row in enumerate(rows):
        try:
            jt = row.get("type", "revolute")
            if jt not in ("revolute", "prismatic"):
                raise ValueError(f"type must be 'revolute' or 'prismatic', got {jt!r}")
            types.append(jt)
            names.append(str(row.get("name", f"joint{i + 1}")))
            a.append(_num(row, "a", 0.0))
            alpha.append(_angle(row, "alpha"))
            d.append(_num(row, "d", 0.0))
            if jt == "revolute":
                offset.append(_angle(row, "offset"))
                theta.append(0.0)
            else:
                if "offset_deg" in row:
                    raise ValueError("a prismatic offset is a length: use 'offset' [m]")
                offset.append(_num(row, "offset", 0.0))
                theta.append(_angle(row, "theta"))
            ixx, iyy, izz, ixy, ixz, iyz = _vec(row, "inertia", 6)
            Ic = np.array([[ixx, ixy, ixz], [ixy, iyy, iyz], [ixz, iyz, izz]])
            pts = [(_num(p, "mass"), _vec(p, "position", 3)) for p in row.get("point_masses", [])]
            J.append(pseudo_inertia(_num(row, "mass"), _vec(row, "com", 3, [0, 0, 0]), Ic, pts))
            arm.append(_num(row, "rotor_inertia", 0.0) * _num(row, "gear_ratio", 1.0) ** 2)
        except ValueError as err:
            raise ValueError(f"joints[{i}]: {err}") from err
    return LagrangeEulerChain(
        convention=conv, joint_types=tuple(types), a=np.array(a), alpha=np.array(alpha),
        d=np.array(d), theta=np.array(theta), offset=np.array(offset),
        pseudo_inertias=np.array(J), gravity_vector=_vec(data, "gravity", 3, [0.0, 0.0, -9.81]),
        base=_pose(data.get("base")), tool=_pose(data.get("tool")), armature=np.array(arm),
        joint_names=tuple(names), name=name or str(data.get("name", "serial")))


def from_robot_file(path: str | Path) -> LagrangeEulerChain:
    """Read a serial DH robot file (TOML) into a :class:`LagrangeEulerChain`.

    Parameters
    ----------
    path : str or Path
        A ``type = "serial"`` robot file, same format as :func:`dynamics.serial.load_serial`.

    Returns
    -------
    LagrangeEulerChain

    Raises
    ------
    ConfigError
        If the file cannot be read or parsed (from :func:`dynamics.config.read_toml`).
    ValueError
        If an entry the dynamics needs is missing or invalid.
    """
    return from_robot_dict(read_toml(path))
