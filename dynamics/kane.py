"""Kane's method for serial chains: an independent cross-check of :mod:`dynamics.serial`.

Kane's equations (seed 003, Purushotham & Anjeneyulu, section II-III; seed 000,
Malvezzi et al., eqs. 1-3) read, for generalized speeds ``u_r`` (here ``u = qd``)::

    F_r + F*_r = 0                                          r = 1 .. n
    F_r  = sum_k [ F_k . v_{k,r} + T_k . w_{k,r} ]          generalized active forces
    F*_r = -sum_k [ m_k a_k . v_{k,r}
                    + (I_k alpha_k + omega_k x I_k omega_k) . w_{k,r} ]
                                                            generalized inertia forces

with, for each body ``k``, ``v_{k,r} = d v_k / d u_r`` the partial velocity of its
mass centre and ``w_{k,r} = d omega_k / d u_r`` its partial angular velocity
(world frame), ``a_k`` the mass-centre acceleration, ``alpha_k`` the angular
acceleration and ``I_k`` the central inertia tensor in world axes.  The active
forces are gravity ``m_k g`` at each mass centre and the joint drive torques
``tau_r`` (which enter ``F_r`` as ``tau_r`` exactly: a drive acts and reacts along
its own joint axis, so only ``u_r`` sees it).  Workless joint constraint forces
never appear; a constraint load is exposed by an *auxiliary* speed (see
:func:`seed003_2r_inverse_dynamics`, and a joint locked at ``q = qd = qdd = 0`` in
:class:`KaneChain`).

Serial chain, partial velocities (own derivation, world frame)
--------------------------------------------------------------
Joint frames ``J_0 .. J_{n-1}`` as in :class:`~dynamics.serial.SerialModel`:
``T_i = T_{i-1} X_i Motion_i(q_i)`` (``T_{-1}`` the world), ``Motion`` is
``Rz(q_i)`` (revolute) or ``Tz(q_i)`` (prismatic).  Write ``z_i`` (unit axis) and
``o_i`` (origin) of ``J_i`` in the world, ``p_k`` the mass centre of body ``k``
(rigidly attached to ``J_k``).  Body ``k`` moves with joints ``r <= k``::

    revolute r:   w_{k,r} = z_r,   v_{k,r} = z_r x (p_k - o_r)
    prismatic r:  w_{k,r} = 0,     v_{k,r} = z_r
    r > k:        w_{k,r} = 0,     v_{k,r} = 0

so ``omega_k = sum_r w_{k,r} u_r`` and ``v_k = sum_r v_{k,r} u_r``.

Accelerations from the analytic time derivatives of the partial velocities
(``a_k = sum_r v_{k,r} du_r + (d/dt v_{k,r}) u_r``, likewise ``alpha_k``): the axis
``z_r`` and the origin ``o_r`` are fixed in body ``r`` (``Rz``/``Tz`` keep the z
axis; a revolute origin lies on its own axis), so ``dz_r/dt = omega_r x z_r`` and
``do_r/dt = vo_r``, the velocity of the point ``o_r`` of body ``r`` (formula above
with ``p_k -> o_r``, ``k -> r``).  Hence::

    revolute r:   dw_{k,r}/dt = omega_r x z_r
                  dv_{k,r}/dt = (omega_r x z_r) x (p_k - o_r) + z_r x (v_k - vo_r)
    prismatic r:  dw_{k,r}/dt = 0
                  dv_{k,r}/dt = omega_r x z_r

Then ``tau = -(F*_r + F_r|gravity)`` plus the drive armature ``armature_r * du_r``
(the reflected rotor inertia, treated as in :mod:`dynamics.serial`: a diagonal
generalized inertia, no rotor gyroscopics), and the generalized inertia
(mass) matrix is ``M_rs = sum_k m_k v_{k,r} . v_{k,s} + w_{k,r} . I_k w_{k,s}``
(+ armature on the diagonal).

This module reads only the *parameters* of a :class:`~dynamics.serial.SerialModel`
(joint types, placements, central inertias, gravity, armature) and builds its
own kinematics; it never calls the model's dynamics, Jacobian or numba kernels.
Plain numpy, vectorised over a leading batch dimension; a reference, not a hot
path.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

__all__ = ["KaneChain", "seed003_2r_inverse_dynamics", "seed003_2r_mass_matrix",
           "SEED003_M", "SEED003_L"]

#: seed 003, Table 3: "M" = 5 kg is the mass ``m`` of rod B (rod A has 2 m)
SEED003_M = 5.0
#: seed 003, Table 3: L = 1.25 m (rod A is 4 L long, rod B 2 L)
SEED003_L = 1.25


class KaneChain:
    """Serial-chain dynamics by Kane's method (partial velocities, world frame).

    Parameters
    ----------
    joint_types : sequence of str, length n
        ``"revolute"`` or ``"prismatic"``; joint ``i`` rotates about / slides
        along the z axis of its joint frame ``J_i``.
    placements : array_like, shape (n, 4, 4)
        ``X_i``: pose of ``J_i`` at ``q_i = 0`` in ``J_{i-1}`` (``J_{-1}`` = world).
    mass : array_like, shape (n,)
        Body masses [kg]; body ``i`` is rigidly attached to ``J_i``.
    com : array_like, shape (n, 3)
        Mass centres in the joint frames ``J_i`` [m].
    inertia : array_like, shape (n, 3, 3)
        Central inertia tensors (about the mass centre), ``J_i`` axes [kg m^2].
    gravity : array_like, shape (3,)
        Gravity acceleration, world frame [m/s^2].
    armature : array_like, shape (n,), optional
        Reflected rotor inertia per joint [kg m^2 | kg] (default 0).

    Notes
    -----
    State arguments accept one state ``(n,)`` or a batch ``(..., n)``; units
    rad, rad/s, rad/s^2 (m, m/s, m/s^2 for prismatic joints), torques N m (N).
    """

    def __init__(self, joint_types: Sequence[str], placements, mass, com, inertia,
                 gravity=(0.0, 0.0, -9.81), armature=None):
        self.joint_types = tuple(joint_types)
        n = len(self.joint_types)
        for t in self.joint_types:
            if t not in ("revolute", "prismatic"):
                raise ValueError(f"joint type must be 'revolute' or 'prismatic', got {t!r}")
        self.n = n
        self.placements = np.array(placements, dtype=float).reshape(n, 4, 4)
        self.mass = np.array(mass, dtype=float).reshape(n)
        self.com = np.array(com, dtype=float).reshape(n, 3)
        self.inertia = np.array(inertia, dtype=float).reshape(n, 3, 3)
        self.gravity = np.array(gravity, dtype=float).reshape(3)
        self.armature = np.zeros(n) if armature is None else np.array(armature, dtype=float).reshape(n)
        self._revolute = np.array([t == "revolute" for t in self.joint_types])
        # lower-triangular "body k moves with joint r" mask, (k, r)
        self._moves = np.tril(np.ones((n, n), dtype=bool))

    # -- construction ----------------------------------------------------------
    @classmethod
    def from_model(cls, model) -> "KaneChain":
        """Build from a :class:`~dynamics.serial.SerialModel`'s parameters.

        Reads ``joint_types``, ``placements``, ``link_inertias`` (mass, centre of
        mass in ``J_i``, central inertia in ``J_i`` axes), ``gravity_vector`` and
        ``drive.armature``; nothing else of the model is used.
        """
        m, c, Ic = model.link_inertias
        return cls(model.joint_types, model.placements, m, c, Ic, model.gravity_vector,
                   np.asarray(model.drive.armature, dtype=float))

    @classmethod
    def from_file(cls, path: str | Path) -> "KaneChain":
        """Load a serial robot file with :func:`dynamics.load_model` and wrap its parameters."""
        from . import load_model
        return cls.from_model(load_model(path))

    # -- kinematics --------------------------------------------------------------
    def _state(self, x) -> np.ndarray:
        a = np.asarray(x, dtype=float)
        if a.shape[-1:] != (self.n,):
            raise ValueError(f"expected a state of shape (..., {self.n}), got {a.shape}")
        return a

    def joint_frames(self, q) -> np.ndarray:
        """World poses ``T_i`` of the joint frames after the joint motion.

        Parameters
        ----------
        q : array_like, shape (..., n)

        Returns
        -------
        ndarray, shape (..., n, 4, 4)
            ``T_i = T_{i-1} X_i Motion_i(q_i)``; joint ``i`` acts about/along the
            z axis of ``T_i``.
        """
        q = self._state(q)
        lead = q.shape[:-1]
        out = np.empty(lead + (self.n, 4, 4))
        T = np.broadcast_to(np.eye(4), lead + (4, 4))
        for i in range(self.n):
            Mo = np.broadcast_to(np.eye(4), lead + (4, 4)).copy()
            if self._revolute[i]:
                c, s = np.cos(q[..., i]), np.sin(q[..., i])
                Mo[..., 0, 0], Mo[..., 0, 1], Mo[..., 1, 0], Mo[..., 1, 1] = c, -s, s, c
            else:
                Mo[..., 2, 3] = q[..., i]
            T = T @ self.placements[i] @ Mo
            out[..., i, :, :] = T
        return out

    def _geometry(self, q):
        """Axes z (.., n, 3), origins o (.., n, 3), mass centres p (.., n, 3), world inertias (.., n, 3, 3)."""
        T = self.joint_frames(q)
        R = T[..., :3, :3]
        z = R[..., :, 2]
        o = T[..., :3, 3]
        p = o + np.einsum("...kij,kj->...ki", R, self.com)
        Iw = R @ self.inertia @ np.swapaxes(R, -1, -2)
        return z, o, p, Iw

    def _partials(self, z, o, points):
        """Partial velocities of ``points[k]`` (fixed in body k) and partial angular velocities.

        Returns ``V, W`` of shape (..., n_k, n_r, 3): ``V[k, r] = d v(points_k) / d u_r``,
        ``W[k, r] = d omega_k / d u_r`` (zero for ``r > k``).
        """
        d = points[..., :, None, :] - o[..., None, :, :]                 # (.., k, r, 3)
        zr = np.broadcast_to(z[..., None, :, :], d.shape)
        rev = self._revolute[None, :, None]
        V = np.where(rev, np.cross(zr, d), zr)
        W = np.where(rev, zr, 0.0)
        mask = self._moves[:, :, None]
        return np.where(mask, V, 0.0), np.where(mask, W, 0.0)

    def partial_velocities(self, q):
        """Partial velocities of the mass centres and partial angular velocities.

        Parameters
        ----------
        q : array_like, shape (..., n)

        Returns
        -------
        V : ndarray, shape (..., n, n, 3)
            ``V[..., k, r, :]``: d(velocity of the mass centre of body k)/d u_r,
            world frame [m/rad | 1].
        W : ndarray, shape (..., n, n, 3)
            ``W[..., k, r, :]``: d(angular velocity of body k)/d u_r, world frame
            [1 | rad/m].
        """
        z, o, p, _ = self._geometry(q)
        return self._partials(z, o, p)

    def _motion(self, q, qd):
        """Geometry, partial velocities, their time derivatives and the velocities."""
        z, o, p, Iw = self._geometry(q)
        V, W = self._partials(z, o, p)
        Vo, _ = self._partials(z, o, o)                                  # joint origins, fixed in body r
        omega = np.einsum("...krx,...r->...kx", W, qd)
        v = np.einsum("...krx,...r->...kx", V, qd)
        vo = np.einsum("...krx,...r->...kx", Vo, qd)
        zdot = np.cross(omega, z)                                         # axis r fixed in body r
        d = p[..., :, None, :] - o[..., None, :, :]
        zd = np.broadcast_to(zdot[..., None, :, :], d.shape)
        zr = np.broadcast_to(z[..., None, :, :], d.shape)
        rel = v[..., :, None, :] - vo[..., None, :, :]
        rev = self._revolute[None, :, None]
        mask = self._moves[:, :, None]
        Vd = np.where(mask, np.where(rev, np.cross(zd, d) + np.cross(zr, rel), zd), 0.0)
        Wd = np.where(mask & rev, zd, 0.0)
        return p, Iw, V, W, Vd, Wd, omega, v

    # -- dynamics ----------------------------------------------------------------
    def generalized_forces(self, q, qd, qdd):
        """Kane's generalized forces at one state (torques not included).

        Parameters
        ----------
        q, qd, qdd : array_like, shape (..., n)

        Returns
        -------
        F_star : ndarray, shape (..., n)
            Generalized inertia forces ``F*_r`` [N m | N], armature included
            (``-armature_r qdd_r``).
        F_grav : ndarray, shape (..., n)
            Generalized active forces of gravity ``sum_k m_k g . v_{k,r}``.
        """
        q, qd, qdd = np.broadcast_arrays(self._state(q), self._state(qd), self._state(qdd))
        p, Iw, V, W, Vd, Wd, omega, _ = self._motion(q, qd)
        a = np.einsum("...krx,...r->...kx", V, qdd) + np.einsum("...krx,...r->...kx", Vd, qd)
        alpha = np.einsum("...krx,...r->...kx", W, qdd) + np.einsum("...krx,...r->...kx", Wd, qd)
        Iw_alpha = np.einsum("...kxy,...ky->...kx", Iw, alpha)
        Iw_omega = np.einsum("...kxy,...ky->...kx", Iw, omega)
        euler = Iw_alpha + np.cross(omega, Iw_omega)                      # (.., k, 3)
        F_star = -(np.einsum("k,...kx,...krx->...r", self.mass, a, V)
                   + np.einsum("...kx,...krx->...r", euler, W)) - self.armature * qdd
        F_grav = np.einsum("k,x,...krx->...r", self.mass, self.gravity, V)
        return F_star, F_grav

    def inverse_dynamics(self, q, qd, qdd) -> np.ndarray:
        """Joint torques from ``F_r + F*_r = 0`` with ``F_r = F_r|gravity + tau_r``.

        Parameters
        ----------
        q, qd, qdd : array_like, shape (..., n)
            Joint positions [rad | m], speeds (the generalized speeds u) and
            accelerations.

        Returns
        -------
        ndarray, shape (..., n)
            ``tau = -(F* + F_grav)`` [N m | N]; armature included, no friction.
        """
        F_star, F_grav = self.generalized_forces(q, qd, qdd)
        return -(F_star + F_grav)

    def bias(self, q, qd) -> np.ndarray:
        """Velocity and gravity terms ``h(q, qd)`` = inverse dynamics at ``qdd = 0``, shape (..., n)."""
        q = self._state(q)
        return self.inverse_dynamics(q, qd, np.zeros(np.broadcast_shapes(q.shape, np.shape(qd))))

    def gravity_torque(self, q) -> np.ndarray:
        """Holding torques ``g(q) = -sum_k m_k g . v_{k,r}``, shape (..., n) [N m | N]."""
        z, o, p, _ = self._geometry(q)
        V, _ = self._partials(z, o, p)
        return -np.einsum("k,x,...krx->...r", self.mass, self.gravity, V)

    def mass_matrix(self, q) -> np.ndarray:
        """Generalized inertia matrix from the partial velocities.

        ``M_rs = sum_k m_k v_{k,r} . v_{k,s} + w_{k,r} . I_k w_{k,s}`` (+ armature
        on the diagonal).

        Parameters
        ----------
        q : array_like, shape (..., n)

        Returns
        -------
        ndarray, shape (..., n, n) [kg m^2 | kg m | kg]
        """
        z, o, p, Iw = self._geometry(q)
        V, W = self._partials(z, o, p)
        M = (np.einsum("k,...krx,...ksx->...rs", self.mass, V, V)
             + np.einsum("...krx,...kxy,...ksy->...rs", W, Iw, W))
        return M + np.diag(self.armature)

    def forward_dynamics(self, q, qd, tau) -> np.ndarray:
        """Accelerations ``qdd = M^-1 (tau - h)``, shape (..., n)."""
        M = self.mass_matrix(q)
        rhs = np.asarray(tau, dtype=float) - self.bias(q, qd)
        return np.linalg.solve(M, rhs[..., None])[..., 0]

    # -- energy --------------------------------------------------------------------
    def kinetic_energy(self, q, qd) -> np.ndarray:
        """Kinetic energy [J] ``sum_k 1/2 m_k |v_k|^2 + 1/2 omega_k . I_k omega_k`` + armature.

        Returns an array of shape ``(...)`` (0-d for one state).
        """
        q, qd = np.broadcast_arrays(self._state(q), self._state(qd))
        z, o, p, Iw = self._geometry(q)
        V, W = self._partials(z, o, p)
        v = np.einsum("...krx,...r->...kx", V, qd)
        w = np.einsum("...krx,...r->...kx", W, qd)
        return 0.5 * (np.einsum("k,...kx,...kx->...", self.mass, v, v)
                      + np.einsum("...kx,...kxy,...ky->...", w, Iw, w)
                      + np.einsum("r,...r,...r->...", self.armature, qd, qd))

    def potential_energy(self, q) -> np.ndarray:
        """Gravitational potential energy ``-sum_k m_k g . p_k`` [J] (zero at the world origin)."""
        _, _, p, _ = self._geometry(q)
        return -np.einsum("k,x,...kx->...", self.mass, self.gravity, p)

    def energy(self, q, qd) -> np.ndarray:
        """Total mechanical energy ``kinetic_energy + potential_energy`` [J], shape ``(...)``."""
        return self.kinetic_energy(q, qd) + self.potential_energy(q)


# ---------------------------------------------------------------------------
# seed 003: the 2R arm by Kane's method with the auxiliary speed u3
# ---------------------------------------------------------------------------

def seed003_2r_mass_matrix(q, m: float = SEED003_M, L: float = SEED003_L) -> np.ndarray:
    """Generalized inertia matrix of the seed-003 2R arm (ERRATA reading).

    Parameters
    ----------
    q : array_like, shape (..., 2)
        ``[q1, q2]`` [rad] in the paper's variables (see
        :func:`seed003_2r_inverse_dynamics`).
    m : float
        Mass of rod B [kg] (rod A has ``2 m``); the paper's "M" = 5 kg.
    L : float
        Length unit [m] (rod A ``4 L``, rod B ``2 L``); 1.25 m in the paper.

    Returns
    -------
    ndarray, shape (..., 2, 2)
        ``m L^2 [[80/3 + 4/3 s2^2, 4 c2], [4 c2, 4/3]]`` [kg m^2].
    """
    q = np.asarray(q, dtype=float)
    s2, c2 = np.sin(q[..., 1]), np.cos(q[..., 1])
    M = np.empty(q.shape[:-1] + (2, 2))
    M[..., 0, 0] = 80.0 / 3.0 + 4.0 / 3.0 * s2 ** 2
    M[..., 0, 1] = M[..., 1, 0] = 4.0 * c2
    M[..., 1, 1] = 4.0 / 3.0
    return m * L ** 2 * M


def seed003_2r_inverse_dynamics(q, qd, qdd, m: float = SEED003_M, L: float = SEED003_L,
                                g: float = 9.81):
    """Joint torques and the auxiliary constraint torque of the seed-003 2R arm.

    Closed form derived by Kane's method in the paper's own variables, with the
    geometry of ``shared/seeds/ERRATA.md`` (and ``hil_configs/robots/seed003_2r.toml``).

    Geometry (world ``n1, n2`` horizontal, ``n3`` up, gravity ``-g n3``): frame A
    of rod A has ``a2 = n2``, ``a3 = s1 n1 + c1 n3`` (from the tip P up to O),
    ``a1 = a2 x a3 = c1 n1 - s1 n3`` (Table 1).  Rod A (mass ``2m``, length ``4L``)
    turns about ``a2`` through the fixed point O with its mass centre at
    ``-2L a3`` and P at ``-4L a3``.  Rod B (mass ``m``, length ``2L``) turns about
    ``a3`` at P; its direction is ``b = -s2 a1 + c2 a2``, mass centre ``P + L b``.
    Both rods are slender: ``I_A = (8/3) m L^2 (a1 a1 + a2 a2)``,
    ``I_B = (1/3) m L^2 (1 - b b)``.

    Kane with the auxiliary speed ``u3`` (a rotation of A, and of B with it,
    about ``a1`` through O: eq. 4.1 ``omega'_A = u3 a1 + u1 a2``), ``u1 = qd1``,
    ``u2 = qd2``; in the A basis (``u3 = du3 = 0`` after the partials are taken)::

        r   w'_A   v'_A*       w'_B   v'_B*
        1   a2     -2L a1      a2     L(-4 a1 + s2 a3)
        2   0      0           a3     L(-c2 a1 - s2 a2)
        3   a1     2L a2       a1     L(4 a2 + c2 a3)

        alpha_A = du1 a2,   a_A* = -2L du1 a1 + 2L u1^2 a3
        alpha_B = u1 u2 a1 + du1 a2 + du2 a3            (eq. 4.8 corrected)
        a_B*/L  = (-4 du1 - c2 du2 + s2 (u1^2 + u2^2)) a1
                + (-s2 du2 - c2 u2^2) a2
                + (4 u1^2 + s2 du1 + 2 c2 u1 u2) a3     (eq. 4.9 corrected)
        I_B alpha_B + w_B x I_B w_B = m L^2/3 [ (2 c2^2 u1 u2 + s2 c2 du1) a1
                + (s2^2 du1 + 2 s2 c2 u1 u2) a2 + (du2 - s2 c2 u1^2) a3 ]

    Active forces: gravity ``-2 m g n3`` at A*, ``-m g n3`` at B* (``n3 = -s1 a1 + c1 a3``),
    drive torques ``T1 a2`` (ground on A) and ``T2 a3`` (A on B), and the
    constraint torque ``Tc a1`` the ground bearing exerts on A about ``a1``
    (ERRATA: about the axis of ``u3``, not ``a3``).  ``F_r + F*_r = 0`` gives::

        T1 = m L^2 [(80/3 + 4/3 s2^2) du1 + 4 c2 du2 + 8/3 s2 c2 u1 u2 - 4 s2 u2^2]
             + m g L (8 s1 + s2 c1)
        T2 = m L^2 [4 c2 du1 + 4/3 du2 - 4/3 s2 c2 u1^2] + m g L s1 c2
        Tc = m L^2 [4/3 s2 c2 du1 - 4 s2 du2 + 4 c2 (u1^2 - u2^2) + 8/3 c2^2 u1 u2]
             + m g L c1 c2

    Parameters
    ----------
    q : array_like, shape (..., 2)
        ``[q1, q2]`` [rad]: ``q1`` turns ``a3`` from ``n3`` toward ``n1`` (rod A
        hangs straight down at 0), ``q2`` turns B about ``a3`` (B along ``n2`` at 0).
    qd, qdd : array_like, shape (..., 2)
        ``[u1, u2]`` [rad/s] and ``[du1, du2]`` [rad/s^2].
    m : float
        Mass of rod B [kg] (the paper's "M", 5 kg); rod A has ``2 m``.
    L : float
        Length unit [m] (1.25 m).
    g : float
        Gravity magnitude [m/s^2] (positive; gravity is ``-g n3``).

    Returns
    -------
    tau : ndarray, shape (..., 2)
        ``[T1, T2]`` [N m]: T1 about ``a2 = n2`` (ground on A), T2 about ``a3``
        (A on B).  Same signs and variables as the joints of ``seed003_2r.toml``.
    Tc : ndarray, shape (...)
        Constraint torque [N m] about ``a1``, exerted by the ground on A at O.
    """
    q, qd, qdd = np.broadcast_arrays(np.asarray(q, dtype=float), np.asarray(qd, dtype=float),
                                     np.asarray(qdd, dtype=float))
    s1, c1 = np.sin(q[..., 0]), np.cos(q[..., 0])
    s2, c2 = np.sin(q[..., 1]), np.cos(q[..., 1])
    u1, u2 = qd[..., 0], qd[..., 1]
    du1, du2 = qdd[..., 0], qdd[..., 1]
    mL2, mgL = m * L * L, m * g * L
    T1 = (mL2 * ((80.0 / 3.0 + 4.0 / 3.0 * s2 ** 2) * du1 + 4.0 * c2 * du2
                 + 8.0 / 3.0 * s2 * c2 * u1 * u2 - 4.0 * s2 * u2 ** 2)
          + mgL * (8.0 * s1 + s2 * c1))
    T2 = mL2 * (4.0 * c2 * du1 + 4.0 / 3.0 * du2 - 4.0 / 3.0 * s2 * c2 * u1 ** 2) + mgL * s1 * c2
    Tc = (mL2 * (4.0 / 3.0 * s2 * c2 * du1 - 4.0 * s2 * du2 + 4.0 * c2 * (u1 ** 2 - u2 ** 2)
                 + 8.0 / 3.0 * c2 ** 2 * u1 * u2)
          + mgL * c1 * c2)
    return np.stack([T1, T2], axis=-1), Tc
