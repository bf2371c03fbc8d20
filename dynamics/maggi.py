"""Maggi's equations with redundant coordinates for the seed-000 arm: an independent reference.

This is the Maggi formulation of seed 000 (Malvezzi, Orsino, Hess-Coelho,
"Lagrange's, Maggi's and Kane's equations applied to the dynamic modelling of
serial manipulator", eqs. 12-22, Table 2), with the misprints listed in
``shared/seeds/ERRATA.md`` (section "000") corrected.  It exists to cross-check
the fast recursive model of :mod:`dynamics.serial` on ``seed000_arm.toml``, so
it is derived from the paper's geometry alone: it builds its own positions of
the centres of mass (eq. 19) and angular velocities, and never calls
:mod:`dynamics.serial` or any other kinematics of the package.  It is a
reference, not a hot path: plain numpy, one state per call.

Conventions (ERRATA "000")
--------------------------
* World frame: ``z`` vertical up, gravity ``-g e_z``.
* Independent coordinates ``theta = q = [gamma1, alpha2, alpha3]`` [rad] and
  independent speeds ``u = qd = [gamma1', alpha2', alpha3']`` [rad/s]:
  ``gamma1`` turns body 1 about the vertical, ``alpha2`` is the elevation of
  body 2 measured up from the horizontal, ``alpha3`` the angle of body 3
  relative to body 2 (body 3's elevation is ``chi3 = alpha2 + alpha3``).
* At ``q = 0`` both links point horizontally along world ``+y``; the horizontal
  direction of the arm is ``h = (-sin gamma1, cos gamma1, 0)``.
* Body axes (paper): ``x`` = the elevation-joint axis (horizontal, normal to
  the arm's vertical plane), ``y`` = along the link, ``z`` = completes the
  triad.  ``J_x, J_y, J_z`` are central principal moments about these axes.
* Body 4 (end effector) is a point mass ``m4`` at the tip of body 3.
* Actuator torques ``T1, T2, T3`` [N m] act on bodies 1, 2, 3 (``T2`` between
  bodies 1 and 2, ``T3`` between bodies 2 and 3), so their virtual work is
  ``T1 dgamma1 + T2 dalpha2 + T3 dalpha3``.

Redundant coordinates (eqs. 19-20)
----------------------------------
``q_r`` (13,) = ``[gamma1, alpha2, alpha3, chi3, x2, y2, z2, x3, y3, z3, x4, y4, z4]``
with ``chi3 = alpha2 + alpha3`` [rad] and ``(x_j, y_j, z_j)`` [m] the world
position of the centre of mass ``G_j`` of body ``j = 2, 3, 4`` (eq. 19)::

    r_j = rho_j h(gamma1) + zeta_j e_z,
    rho_j  = e_j l2 cos(alpha2) + f_j l3 cos(chi3)      (horizontal reach)
    zeta_j = e_j l2 sin(alpha2) + f_j l3 sin(chi3)      (height)
    (e_2, f_2) = (1/2, 0), (e_3, f_3) = (1, 1/2), (e_4, f_4) = (1, 1).

They satisfy 10 holonomic constraints (eq. 12) ``h(q_r) = 0``:
``chi3 - alpha2 - alpha3 = 0`` and ``r_j - R_j(gamma1, alpha2, alpha3) = 0``.
Differentiated (eqs. 13-16): ``A q_r' = 0`` with ``A`` (10, 13); its orthogonal
complement ``C`` (13, 3), ``A C = 0`` (eq. 17), gives ``q_r' = C u`` and
``q_r'' = C u' + C' u``.  ``C`` is eq. 20 with the ERRATA fixes (the
``alpha2``/``alpha3`` entries of the ``x`` rows change sign, ``f_j l2 -> f_j l3``
in the ``z`` row).

Lagrangian in redundant coordinates (eq. 21, corrected: ``L = T - V``)::

    T = 1/2 Jz1 g1'^2
      + 1/2 Jx2 a2'^2 + 1/2 Jy2 (sin a2 g1')^2 + 1/2 Jz2 (cos a2 g1')^2
      + 1/2 Jx3 chi3'^2 + 1/2 Jy3 (sin chi3 g1')^2 + 1/2 Jz3 (cos chi3 g1')^2
      + sum_j 1/2 m_j (x_j'^2 + y_j'^2 + z_j'^2)
    V = sum_j m_j g z_j                                   (printed with + in L)

(body ``k``'s angular velocity in its own axes is
``(a_k', g1' sin a_k, g1' cos a_k)`` with ``a_2 = alpha2``, ``a_3 = chi3``).
``T = 1/2 q_r'^T M_r(q_r) q_r'`` with ``M_r`` diagonal.

Maggi's equations (eq. 18)::

    C^T Phi = 0,   Phi_r = d/dt dL/dq_r' - dL/dq_r - Q_r,   Q_r = B T_act

with ``B`` (13, 3) = ``[I_3; 0]`` (the actuators only do work on
``gamma1, alpha2, alpha3``) and ``C^T B = I_3``, hence the inverse dynamics::

    T_act = C^T Phi~,   Phi~ = M_r q_r'' + h_r(q_r, q_r') + g_r(q_r)
          = C^T M_r C u' + C^T (M_r C' u + h_r + g_r)
          = M(q) u' + bias(q, u)

Corrected eq. 22 (``Phi~``, i.e. ``Phi`` without the actuator torques)::

    Phi_gamma1 = [Jz1 + Jy2 sin^2 a2 + Jz2 cos^2 a2 + Jy3 sin^2 chi3 + Jz3 cos^2 chi3] g1''
                 + (Jy2 - Jz2) sin(2 a2) g1' a2' + (Jy3 - Jz3) sin(2 chi3) g1' chi3'
    Phi_alpha2 = Jx2 a2'' - (Jy2 - Jz2) sin a2 cos a2 g1'^2
    Phi_alpha3 = 0
    Phi_chi3   = Jx3 chi3'' - (Jy3 - Jz3) sin chi3 cos chi3 g1'^2
    Phi_xj = m_j x_j'',  Phi_yj = m_j y_j'',  Phi_zj = m_j (z_j'' + g)

(printed: ``(J_y + J_z)`` everywhere, the constant ``(Jz2 + Jz3) g1''`` of
``Phi_gamma1`` dropped -- the bracket is ``Jz1 + Jz2 + Jz3 + (Jy2 - Jz2) sin^2 a2
+ (Jy3 - Jz3) sin^2 chi3`` -- and ``m_j (z_j'' - g)``.)

Parameters are the paper's Table 2 symbols; :func:`table2_from_robot_file`
reads them from a robot file laid out like ``hil_configs/robots/seed000_arm.toml``
(see its header for the paper-axis -> link-axis map).
"""

from __future__ import annotations

import math
import tomllib
from pathlib import Path
from typing import Mapping

import numpy as np

__all__ = ["Seed000Maggi", "TABLE2", "REDUNDANT_NAMES", "table2_from_robot_file"]

#: Table 2 of the paper [kg, m, kg m^2] and the gravity used by seed000_arm.toml [m/s^2].
TABLE2: dict[str, float] = dict(Jz1=3.0, m2=3.0, l2=1.0, Jx2=0.36, Jy2=0.07, Jz2=0.36,
                                m3=3.0, l3=1.0, Jx3=0.36, Jy3=0.07, Jz3=0.36, m4=1.0,
                                g=9.81)

#: Names of the redundant coordinates, in the order of ``q_r`` (13,).
REDUNDANT_NAMES: tuple[str, ...] = ("gamma1", "alpha2", "alpha3", "chi3",
                                    "x2", "y2", "z2", "x3", "y3", "z3", "x4", "y4", "z4")

#: (e_j, f_j) of eq. 19 for bodies j = 2, 3, 4.
_EF = ((0.5, 0.0), (1.0, 0.5), (1.0, 1.0))


def _state(x, what: str) -> np.ndarray:
    a = np.asarray(x, dtype=float)
    if a.shape != (3,):
        raise ValueError(f"{what} must have shape (3,), got {a.shape}")
    return a


class Seed000Maggi:
    """Maggi's equations (redundant coordinates) of the seed-000 3-DOF arm.

    Parameters
    ----------
    Jz1 : float
        Moment of inertia of body 1 about the vertical axis [kg m^2].
    m2, m3 : float
        Masses of bodies 2 and 3 [kg] (centres of mass at mid-link, eq. 19).
    l2, l3 : float
        Lengths of bodies 2 and 3 [m].
    Jx2, Jy2, Jz2, Jx3, Jy3, Jz3 : float
        Central principal moments of bodies 2 and 3 [kg m^2] about the paper's
        body axes (x: joint axis, y: along the link, z: the third axis).
    m4 : float
        Point mass of the end effector at the tip of body 3 [kg].
    g : float
        Gravitational acceleration [m/s^2], acting along world ``-z``.

    Defaults are Table 2 (:data:`TABLE2`).  All methods take one state:
    ``q``, ``qd``, ``qdd`` of shape (3,) = ``[gamma1, alpha2, alpha3]`` and its
    derivatives [rad, rad/s, rad/s^2].
    """

    n_dof = 3
    n_redundant = 13

    def __init__(self, *, Jz1: float = TABLE2["Jz1"], m2: float = TABLE2["m2"],
                 l2: float = TABLE2["l2"], Jx2: float = TABLE2["Jx2"], Jy2: float = TABLE2["Jy2"],
                 Jz2: float = TABLE2["Jz2"], m3: float = TABLE2["m3"], l3: float = TABLE2["l3"],
                 Jx3: float = TABLE2["Jx3"], Jy3: float = TABLE2["Jy3"], Jz3: float = TABLE2["Jz3"],
                 m4: float = TABLE2["m4"], g: float = TABLE2["g"]):
        self.params = dict(Jz1=float(Jz1), m2=float(m2), l2=float(l2), Jx2=float(Jx2),
                           Jy2=float(Jy2), Jz2=float(Jz2), m3=float(m3), l3=float(l3),
                           Jx3=float(Jx3), Jy3=float(Jy3), Jz3=float(Jz3), m4=float(m4),
                           g=float(g))
        for k, v in self.params.items():
            if not math.isfinite(v) or v < 0.0:
                raise ValueError(f"parameter {k} must be finite and >= 0, got {v!r}")
        self._m = np.array([m2, m3, m4], dtype=float)

    @classmethod
    def from_robot_file(cls, path: str | Path) -> "Seed000Maggi":
        """Build from a robot file laid out like ``seed000_arm.toml``.

        See :func:`table2_from_robot_file`.
        """
        return cls(**table2_from_robot_file(path))

    def __repr__(self) -> str:
        return "Seed000Maggi(" + ", ".join(f"{k}={v!r}" for k, v in self.params.items()) + ")"

    # ------------------------------------------------------------------
    # kinematics of the bodies (eq. 19) and the redundant coordinates
    # ------------------------------------------------------------------

    def _reach(self, a2: float, chi3: float):
        """``rho_j, zeta_j`` (3,) each: horizontal reach and height of G_2, G_3, G_4 [m]."""
        p = self.params
        e = np.array([ef[0] for ef in _EF])
        f = np.array([ef[1] for ef in _EF])
        rho = e * p["l2"] * math.cos(a2) + f * p["l3"] * math.cos(chi3)
        zeta = e * p["l2"] * math.sin(a2) + f * p["l3"] * math.sin(chi3)
        return rho, zeta, e, f

    def com_positions(self, q) -> np.ndarray:
        """World positions of the centres of mass G_2, G_3, G_4 (eq. 19).

        Parameters
        ----------
        q : array_like, shape (3,)
            ``[gamma1, alpha2, alpha3]`` [rad].

        Returns
        -------
        ndarray, shape (3, 3)
            Row ``j - 2`` is ``(x_j, y_j, z_j)`` [m] in the world frame (z up).
        """
        g1, a2, a3 = _state(q, "q")
        rho, zeta, _, _ = self._reach(a2, a2 + a3)
        h = np.array([-math.sin(g1), math.cos(g1), 0.0])
        return rho[:, None] * h[None, :] + zeta[:, None] * np.array([0.0, 0.0, 1.0])

    def redundant_coordinates(self, q) -> np.ndarray:
        """The redundant coordinates ``q_r`` on the constraint manifold.

        Parameters
        ----------
        q : array_like, shape (3,)
            ``[gamma1, alpha2, alpha3]`` [rad].

        Returns
        -------
        ndarray, shape (13,)
            ``[gamma1, alpha2, alpha3, chi3, x2, y2, z2, x3, y3, z3, x4, y4, z4]``
            [rad, m] (:data:`REDUNDANT_NAMES`).
        """
        q = _state(q, "q")
        return np.concatenate([q, [q[1] + q[2]], self.com_positions(q).ravel()])

    def constraint_residual(self, q_r) -> np.ndarray:
        """The holonomic constraints ``h(q_r)`` (eq. 12), zero on the manifold.

        Parameters
        ----------
        q_r : array_like, shape (13,)
            Redundant coordinates [rad, m].

        Returns
        -------
        ndarray, shape (10,)
            ``[chi3 - alpha2 - alpha3, r_2 - R_2, r_3 - R_3, r_4 - R_4]`` [rad, m].
        """
        q_r = np.asarray(q_r, dtype=float)
        if q_r.shape != (self.n_redundant,):
            raise ValueError(f"q_r must have shape (13,), got {q_r.shape}")
        return np.concatenate([[q_r[3] - q_r[1] - q_r[2]],
                               q_r[4:] - self.com_positions(q_r[:3]).ravel()])

    def constraint_matrix(self, q) -> np.ndarray:
        """Orthogonal complement ``C`` of the constraint Jacobian (eq. 20, corrected).

        ``q_r' = C u`` for every admissible motion, with ``u = [gamma1', alpha2',
        alpha3']``; ``C = d q_r / d theta``.

        Parameters
        ----------
        q : array_like, shape (3,)
            ``[gamma1, alpha2, alpha3]`` [rad].

        Returns
        -------
        ndarray, shape (13, 3)
            Rows in the order of :data:`REDUNDANT_NAMES`, columns ``gamma1,
            alpha2, alpha3``; angular rows dimensionless, Cartesian rows [m/rad].
        """
        g1, a2, a3 = _state(q, "q")
        chi = a2 + a3
        p = self.params
        sg, cg = math.sin(g1), math.cos(g1)
        rho, zeta, e, f = self._reach(a2, chi)
        C = np.zeros((self.n_redundant, 3))
        C[0, 0] = C[1, 1] = C[2, 2] = 1.0
        C[3, 1] = C[3, 2] = 1.0                       # chi3 = alpha2 + alpha3
        for j in range(3):
            r = 4 + 3 * j
            fs = f[j] * p["l3"] * math.sin(chi)
            fc = f[j] * p["l3"] * math.cos(chi)
            # x_j = -sin(g1) rho_j
            C[r, :] = [-cg * rho[j], sg * zeta[j], sg * fs]
            # y_j = cos(g1) rho_j
            C[r + 1, :] = [-sg * rho[j], -cg * zeta[j], -cg * fs]
            # z_j = zeta_j
            C[r + 2, :] = [0.0, e[j] * p["l2"] * math.cos(a2) + fc, fc]
        return C

    def constraint_jacobian(self, q) -> np.ndarray:
        """Constraint Jacobian ``A = dh/dq_r`` (eqs. 14-16): ``A q_r' = 0``.

        Parameters
        ----------
        q : array_like, shape (3,)
            ``[gamma1, alpha2, alpha3]`` [rad].

        Returns
        -------
        ndarray, shape (10, 13)
            ``A = [-C[3:] , I_10]`` (the first three columns are the independent
            coordinates); ``A @ constraint_matrix(q) = 0``.
        """
        C = self.constraint_matrix(q)
        return np.hstack([-C[3:], np.eye(self.n_redundant - 3)])

    def actuation_matrix(self) -> np.ndarray:
        """``B`` (13, 3): generalized forces of the actuators, ``Q_r = B [T1, T2, T3]``.

        Returns
        -------
        ndarray, shape (13, 3)
            ``[I_3; 0]``: the torques work on ``gamma1, alpha2, alpha3`` only.
            ``C^T B = I_3``.
        """
        B = np.zeros((self.n_redundant, 3))
        B[:3] = np.eye(3)
        return B

    def redundant_velocities(self, q, qd) -> np.ndarray:
        """``q_r' = C u`` (13,) [rad/s, m/s]."""
        return self.constraint_matrix(q) @ _state(qd, "qd")

    def convective_accelerations(self, q, qd) -> np.ndarray:
        """``C'(q, u) u`` (13,): the part of ``q_r''`` quadratic in the speeds.

        Parameters
        ----------
        q, qd : array_like, shape (3,)
            Joint angles [rad] and speeds ``u`` [rad/s].

        Returns
        -------
        ndarray, shape (13,)
            [rad/s^2, m/s^2]; zero in the four angular rows.  For the centres of
            mass, with ``n = dh/dgamma1 = (-cos g1, -sin g1, 0)``:
            ``(rho''_v - rho g1'^2) h + 2 rho' g1' n + zeta''_v e_z``, where
            ``rho' = -(e l2 sin a2 a2' + f l3 sin chi3 chi3')``,
            ``rho''_v = -(e l2 cos a2 a2'^2 + f l3 cos chi3 chi3'^2)``,
            ``zeta''_v = -(e l2 sin a2 a2'^2 + f l3 sin chi3 chi3'^2)``.
        """
        g1, a2, a3 = _state(q, "q")
        gd, a2d, a3d = _state(qd, "qd")
        chi, chid = a2 + a3, a2d + a3d
        p = self.params
        rho, _, e, f = self._reach(a2, chi)
        l2, l3 = p["l2"], p["l3"]
        s2, c2, sc, cc = math.sin(a2), math.cos(a2), math.sin(chi), math.cos(chi)
        rho_d = -(e * l2 * s2 * a2d + f * l3 * sc * chid)
        rho_dd = -(e * l2 * c2 * a2d**2 + f * l3 * cc * chid**2)
        zeta_dd = -(e * l2 * s2 * a2d**2 + f * l3 * sc * chid**2)
        h = np.array([-math.sin(g1), math.cos(g1), 0.0])
        n = np.array([-math.cos(g1), -math.sin(g1), 0.0])
        acc = ((rho_dd - rho * gd**2)[:, None] * h + (2.0 * rho_d * gd)[:, None] * n
               + zeta_dd[:, None] * np.array([0.0, 0.0, 1.0]))
        return np.concatenate([np.zeros(4), acc.ravel()])

    def redundant_accelerations(self, q, qd, qdd) -> np.ndarray:
        """``q_r'' = C u' + C' u`` (13,) [rad/s^2, m/s^2]."""
        return self.constraint_matrix(q) @ _state(qdd, "qdd") + self.convective_accelerations(q, qd)

    # ------------------------------------------------------------------
    # Maggi's equations (eqs. 18, 21, 22 corrected)
    # ------------------------------------------------------------------

    def redundant_mass_matrix(self, q) -> np.ndarray:
        """``M_r`` (13, 13), diagonal: ``T = 1/2 q_r'^T M_r q_r'`` (eq. 21).

        Parameters
        ----------
        q : array_like, shape (3,)
            ``[gamma1, alpha2, alpha3]`` [rad] (``M_r`` depends on ``alpha2`` and
            ``chi3``).

        Returns
        -------
        ndarray, shape (13, 13)
            ``diag(Jz1 + Jy2 s2^2 + Jz2 c2^2 + Jy3 s_chi^2 + Jz3 c_chi^2, Jx2, 0,
            Jx3, m2, m2, m2, m3, m3, m3, m4, m4, m4)`` [kg m^2, kg].
        """
        _, a2, a3 = _state(q, "q")
        p = self.params
        chi = a2 + a3
        d = np.empty(self.n_redundant)
        d[0] = (p["Jz1"] + p["Jy2"] * math.sin(a2)**2 + p["Jz2"] * math.cos(a2)**2
                + p["Jy3"] * math.sin(chi)**2 + p["Jz3"] * math.cos(chi)**2)
        d[1], d[2], d[3] = p["Jx2"], 0.0, p["Jx3"]
        d[4:] = np.repeat(self._m, 3)
        return np.diag(d)

    def redundant_velocity_forces(self, q, qd) -> np.ndarray:
        """``h_r`` (13,): the speed-product terms of ``d/dt dL/dq_r' - dL/dq_r`` (eq. 22).

        Parameters
        ----------
        q, qd : array_like, shape (3,)
            Joint angles [rad] and speeds [rad/s].

        Returns
        -------
        ndarray, shape (13,)
            [N m, N]: ``gamma1`` row ``(Jy2 - Jz2) sin(2 a2) g1' a2' + (Jy3 - Jz3)
            sin(2 chi3) g1' chi3'``, ``alpha2`` row ``-(Jy2 - Jz2) sin a2 cos a2
            g1'^2``, ``chi3`` row ``-(Jy3 - Jz3) sin chi3 cos chi3 g1'^2``, others 0.
        """
        _, a2, a3 = _state(q, "q")
        gd, a2d, a3d = _state(qd, "qd")
        p = self.params
        chi, chid = a2 + a3, a2d + a3d
        dJ2, dJ3 = p["Jy2"] - p["Jz2"], p["Jy3"] - p["Jz3"]
        h = np.zeros(self.n_redundant)
        h[0] = dJ2 * math.sin(2 * a2) * gd * a2d + dJ3 * math.sin(2 * chi) * gd * chid
        h[1] = -dJ2 * math.sin(a2) * math.cos(a2) * gd**2
        h[3] = -dJ3 * math.sin(chi) * math.cos(chi) * gd**2
        return h

    def redundant_gravity_forces(self) -> np.ndarray:
        """``g_r = dV/dq_r`` (13,) [N]: ``m_j g`` in the ``z_j`` rows, 0 elsewhere.

        ``V = sum_j m_j g z_j`` (world z up); the printed eq. 21/22 has the
        opposite sign.
        """
        gr = np.zeros(self.n_redundant)
        gr[6::3] = self._m * self.params["g"]
        return gr

    def phi(self, q, qd, qdd) -> np.ndarray:
        """``Phi~`` (13,): eq. 22 (corrected) without the actuator torques.

        ``Phi~ = M_r q_r'' + h_r + g_r`` with ``q_r'' = C u' + C' u``.

        Parameters
        ----------
        q, qd, qdd : array_like, shape (3,)
            Joint angles, speeds, accelerations [rad, rad/s, rad/s^2].

        Returns
        -------
        ndarray, shape (13,)
            [N m, N] in the order of :data:`REDUNDANT_NAMES`.
        """
        return (self.redundant_mass_matrix(q) @ self.redundant_accelerations(q, qd, qdd)
                + self.redundant_velocity_forces(q, qd) + self.redundant_gravity_forces())

    def inverse_dynamics(self, q, qd, qdd) -> np.ndarray:
        """Actuator torques ``[T1, T2, T3]`` from Maggi's equations ``C^T (Phi~ - B T) = 0``.

        Parameters
        ----------
        q, qd, qdd : array_like, shape (3,)
            Joint angles, speeds, accelerations [rad, rad/s, rad/s^2].

        Returns
        -------
        ndarray, shape (3,)
            [N m].  (``C^T B = I_3``, so ``T = C^T Phi~``.)
        """
        C = self.constraint_matrix(q)
        return C.T @ self.phi(q, qd, qdd)

    def mass_matrix(self, q) -> np.ndarray:
        """Joint-space mass matrix ``M = C^T M_r C`` (3, 3) [kg m^2].

        Parameters
        ----------
        q : array_like, shape (3,)
            ``[gamma1, alpha2, alpha3]`` [rad].
        """
        C = self.constraint_matrix(q)
        M = C.T @ self.redundant_mass_matrix(q) @ C
        return 0.5 * (M + M.T)          # exactly symmetric (the product is, up to rounding)

    def bias(self, q, qd) -> np.ndarray:
        """``C^T (M_r C' u + h_r + g_r)`` (3,) [N m]: torques at ``qdd = 0`` (gravity included).

        Parameters
        ----------
        q, qd : array_like, shape (3,)
            Joint angles [rad] and speeds [rad/s].
        """
        C = self.constraint_matrix(q)
        return C.T @ (self.redundant_mass_matrix(q) @ self.convective_accelerations(q, qd)
                      + self.redundant_velocity_forces(q, qd) + self.redundant_gravity_forces())

    def forward_dynamics(self, q, qd, tau) -> np.ndarray:
        """Joint accelerations from Maggi's equations, ``(C^T M_r C) qdd = tau - C^T (M_r C' u + h_r + g_r)``.

        The ODE form of the paper's DAE (the redundant accelerations follow as
        ``C qdd + C' u``, see :meth:`redundant_accelerations`).

        Parameters
        ----------
        q, qd : array_like, shape (3,)
            Joint angles [rad] and speeds [rad/s].
        tau : array_like, shape (3,)
            Actuator torques ``[T1, T2, T3]`` [N m].

        Returns
        -------
        ndarray, shape (3,)
            [rad/s^2].
        """
        return np.linalg.solve(self.mass_matrix(q), np.asarray(tau, dtype=float) - self.bias(q, qd))

    def gravity(self, q) -> np.ndarray:
        """Gravity torques ``C^T g_r`` (3,) [N m] (holding torque at rest)."""
        return self.constraint_matrix(q).T @ self.redundant_gravity_forces()

    def kinetic_energy(self, q, qd) -> float:
        """``T = 1/2 q_r'^T M_r q_r'`` [J] (eq. 21)."""
        v = self.redundant_velocities(q, qd)
        return 0.5 * float(v @ self.redundant_mass_matrix(q) @ v)

    def potential_energy(self, q) -> float:
        """``V = sum_j m_j g z_j`` [J], zero when all centres of mass are at z = 0."""
        return float(self.params["g"] * self._m @ self.com_positions(q)[:, 2])


# ---------------------------------------------------------------------------
# robot-file reader
# ---------------------------------------------------------------------------

def _ang(row: Mapping, key: str) -> float:
    if key + "_deg" in row:
        return math.radians(float(row[key + "_deg"]))
    return float(row.get(key, 0.0))


def table2_from_robot_file(path: str | Path) -> dict[str, float]:
    """Read the Table 2 parameters (and ``g``) from a seed-000 robot file.

    The file must describe the arm exactly as ``seed000_arm.toml`` does
    (standard DH; joint 1: ``a = d = 0``, ``alpha = 90 deg``, ``offset = 90 deg``,
    centre of mass on the vertical axis; joints 2, 3: ``alpha = d = offset = 0``,
    ``a = l``, centre of mass at ``[-l/2, 0, 0]``; one point mass ``m4`` at the
    origin of link frame 3; diagonal inertias; no drive armature; no base/tool;
    gravity along ``-z``), since the Maggi model's geometry is fixed by eq. 19.

    Paper axes -> link axes (the file's header): bodies 2, 3: ``Jx`` = link
    ``Izz``, ``Jy`` = link ``Ixx``, ``Jz`` = link ``Iyy``; body 1: ``Jz1`` = link
    ``Iyy``.  Body 1's mass and other moments do not enter the dynamics.

    Parameters
    ----------
    path : str or Path
        A ``.toml`` robot file.

    Returns
    -------
    dict
        Keyword arguments of :class:`Seed000Maggi`.

    Raises
    ------
    ValueError
        If the file is not laid out as the seed-000 arm.
    """
    path = Path(path)
    with open(path, "rb") as fh:
        data = tomllib.load(fh)
    return _table2_from_mapping(data, str(path))


def _table2_from_mapping(data: Mapping, where: str = "robot file") -> dict[str, float]:
    def need(cond: bool, msg: str):
        if not cond:
            raise ValueError(f"{where}: not the seed-000 arm layout: {msg}")

    tol = 1e-12
    need(data.get("type") == "serial", "type must be 'serial'")
    need(data.get("convention") == "standard", "convention must be 'standard'")
    need("base" not in data and "tool" not in data, "no base/tool transform allowed")
    grav = np.asarray(data.get("gravity", [0.0, 0.0, -9.81]), dtype=float)
    need(grav.shape == (3,) and abs(grav[0]) < tol and abs(grav[1]) < tol and grav[2] <= 0.0,
         "gravity must be along -z")
    rows = data.get("joints", [])
    need(len(rows) == 3, "exactly three joints")
    for i, r in enumerate(rows):
        need(r.get("type", "revolute") == "revolute", f"joint {i + 1} must be revolute")
        need(float(r.get("d", 0.0)) == 0.0, f"joint {i + 1}: d must be 0")
        need(float(r.get("rotor_inertia", 0.0)) == 0.0, f"joint {i + 1}: no rotor inertia")
        I = np.asarray(r["inertia"], dtype=float)
        need(I.shape == (6,) and np.all(I[3:] == 0.0), f"joint {i + 1}: inertia must be diagonal")
    r1, r2, r3 = rows
    need(float(r1.get("a", 0.0)) == 0.0, "joint 1: a must be 0")
    need(abs(_ang(r1, "alpha") - math.pi / 2) < tol, "joint 1: alpha must be 90 deg")
    need(abs(_ang(r1, "offset") - math.pi / 2) < tol, "joint 1: offset must be 90 deg")
    c1 = np.asarray(r1.get("com", [0.0, 0.0, 0.0]), dtype=float)
    need(c1[0] == 0.0 and c1[2] == 0.0, "joint 1: centre of mass must be on the vertical axis")
    need(not r1.get("point_masses"), "joint 1: no point masses")
    out: dict[str, float] = {"Jz1": float(r1["inertia"][1])}
    for k, r in ((2, r2), (3, r3)):
        l = float(r.get("a", 0.0))
        need(l > 0.0, f"joint {k}: a (link length) must be > 0")
        need(abs(_ang(r, "alpha")) < tol and abs(_ang(r, "offset")) < tol,
             f"joint {k}: alpha and offset must be 0")
        c = np.asarray(r.get("com", [0.0, 0.0, 0.0]), dtype=float)
        need(np.allclose(c, [-l / 2, 0.0, 0.0], rtol=0, atol=tol),
             f"joint {k}: centre of mass must be at [-a/2, 0, 0] (mid-link)")
        I = [float(v) for v in r["inertia"]]
        out.update({f"m{k}": float(r["mass"]), f"l{k}": l,
                    f"Jx{k}": I[2], f"Jy{k}": I[0], f"Jz{k}": I[1]})
    need(not r2.get("point_masses"), "joint 2: no point masses")
    pm = r3.get("point_masses", [])
    need(len(pm) == 1 and np.allclose(pm[0]["position"], 0.0, rtol=0, atol=tol),
         "joint 3: exactly one point mass (m4) at the link-3 frame origin (the tip)")
    out["m4"] = float(pm[0]["mass"])
    out["g"] = float(-grav[2])
    return out
