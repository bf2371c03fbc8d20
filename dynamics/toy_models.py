"""Small closed-form models for simulator tests, examples and benchmarks.

These implement :class:`dynamics.base.Model` with textbook closed forms, so
the simulated plant can be checked independently of the general serial-chain
code in :mod:`dynamics`.  Both move in the vertical x-y plane of the base
frame (joint axes along z, gravity along -y); joint angles are measured from
the +x axis (absolute for link 1, relative for link 2).
"""

from __future__ import annotations

import math

import numpy as np

from dynamics.base import DriveParams, JointLimits, Model
from dynamics.errors import ModelError

__all__ = ["Pendulum", "PlanarTwoLink"]


def _as_state(x, n, what):
    a = np.asarray(x, dtype=float)
    if a.shape[-1:] != (n,) or a.ndim > 2:
        raise ModelError(f"{what}: expected shape ({n},) or (N, {n}), got {a.shape}")
    return a


class _PlanarBase(Model):
    def __init__(self, *, g: float, armature, viscous, coulomb, torque_max, name: str):
        n = self.dof
        self._g = float(g)
        self._drive = DriveParams(np.broadcast_to(np.asarray(armature, float), (n,)).copy(),
                                  np.broadcast_to(np.asarray(viscous, float), (n,)).copy(),
                                  np.broadcast_to(np.asarray(coulomb, float), (n,)).copy())
        tmax = np.broadcast_to(np.asarray(torque_max, float), (n,)).copy()
        lim = JointLimits.unbounded(n)
        self._limits = JointLimits(lim.position_min, lim.position_max, lim.velocity_max, tmax)
        self.name = name

    @property
    def drive(self) -> DriveParams:
        return self._drive

    @property
    def limits(self) -> JointLimits:
        return self._limits

    @property
    def gravity_vector(self) -> np.ndarray:
        return np.array([0.0, -self._g, 0.0])

    def kinetic_energy(self, q, qd):
        q = _as_state(q, self.dof, "q")
        qd = _as_state(qd, self.dof, "qd")
        M = self.mass_matrix(q)
        return 0.5 * np.einsum("...i,...ij,...j->...", qd, M, qd)


class Pendulum(_PlanarBase):
    """A rigid pendulum about the z axis, angle from +x.

    Parameters
    ----------
    mass_kg, com_m, inertia_kgm2 : float
        Mass, distance of the centre of mass from the axis, inertia about the
        centre of mass (z).
    length_m : float
        Distance of the tool frame from the axis.
    """

    def __init__(self, mass_kg=1.0, com_m=0.5, inertia_kgm2=0.0, length_m=None, *, g=9.81,
                 armature=0.0, viscous=0.0, coulomb=0.0, torque_max=np.inf, name="pendulum"):
        self.m, self.c, self.I = float(mass_kg), float(com_m), float(inertia_kgm2)
        self.length = self.c if length_m is None else float(length_m)
        super().__init__(g=g, armature=armature, viscous=viscous, coulomb=coulomb,
                         torque_max=torque_max, name=name)

    @property
    def dof(self) -> int:
        return 1

    def mass_matrix(self, q):
        q = _as_state(q, 1, "q")
        val = self.I + self.m * self.c ** 2 + self._drive.armature[0]
        return np.full(q.shape[:-1] + (1, 1), val)

    def bias(self, q, qd):
        q = _as_state(q, 1, "q")
        _as_state(qd, 1, "qd")
        return self.m * self._g * self.c * np.cos(q)

    def coriolis_matrix(self, q, qd):
        q = _as_state(q, 1, "q")
        return np.zeros(q.shape[:-1] + (1, 1))

    def potential_energy(self, q):
        q = _as_state(q, 1, "q")
        return self.m * self._g * self.c * np.sin(q[..., 0])

    def forward_kinematics(self, q):
        q = _as_state(q, 1, "q")[..., 0]
        T = np.zeros(q.shape + (4, 4))
        c, s = np.cos(q), np.sin(q)
        T[..., 0, 0], T[..., 0, 1], T[..., 1, 0], T[..., 1, 1] = c, -s, s, c
        T[..., 2, 2] = T[..., 3, 3] = 1.0
        T[..., 0, 3], T[..., 1, 3] = self.length * c, self.length * s
        return T

    def jacobian(self, q):
        q = _as_state(q, 1, "q")[..., 0]
        J = np.zeros(q.shape + (6, 1))
        J[..., 0, 0] = -self.length * np.sin(q)
        J[..., 1, 0] = self.length * np.cos(q)
        J[..., 5, 0] = 1.0
        return J

    def scaled(self, mass_factor=1.0, inertia_factor=None):
        fi = mass_factor if inertia_factor is None else inertia_factor
        d = self._drive
        return Pendulum(self.m * mass_factor, self.c, self.I * fi, self.length, g=self._g,
                        armature=d.armature, viscous=d.viscous, coulomb=d.coulomb,
                        torque_max=self._limits.torque_max, name=self.name)


class PlanarTwoLink(_PlanarBase):
    """Two-link planar arm in the vertical plane (closed-form dynamics).

    Parameters
    ----------
    masses_kg : (2,)
        Link masses.
    lengths_m : (2,)
        Link lengths (axis to axis; link 2 to the tool frame).
    coms_m : (2,)
        Distance of each centre of mass from its joint axis, along the link.
    inertias_kgm2 : (2,)
        Inertia of each link about its centre of mass (z axis).
    """

    def __init__(self, masses_kg=(1.0, 0.8), lengths_m=(0.4, 0.3), coms_m=(0.2, 0.15),
                 inertias_kgm2=(0.015, 0.006), *, g=9.81, armature=0.0, viscous=0.0,
                 coulomb=0.0, torque_max=np.inf, name="planar_two_link"):
        self.m = np.asarray(masses_kg, float).copy()
        self.l = np.asarray(lengths_m, float).copy()
        self.c = np.asarray(coms_m, float).copy()
        self.I = np.asarray(inertias_kgm2, float).copy()
        super().__init__(g=g, armature=armature, viscous=viscous, coulomb=coulomb,
                         torque_max=torque_max, name=name)

    @property
    def dof(self) -> int:
        return 2

    def mass_matrix(self, q):
        q = _as_state(q, 2, "q")
        m1, m2 = self.m
        l1 = self.l[0]
        c1, c2 = self.c
        I1, I2 = self.I
        a = self._drive.armature
        cq2 = np.cos(q[..., 1])
        M = np.empty(q.shape[:-1] + (2, 2))
        M[..., 0, 0] = I1 + I2 + m1 * c1 ** 2 + m2 * (l1 ** 2 + c2 ** 2 + 2 * l1 * c2 * cq2) + a[0]
        M[..., 0, 1] = M[..., 1, 0] = I2 + m2 * (c2 ** 2 + l1 * c2 * cq2)
        M[..., 1, 1] = I2 + m2 * c2 ** 2 + a[1]
        return M

    def coriolis_matrix(self, q, qd):
        q = _as_state(q, 2, "q")
        qd = _as_state(qd, 2, "qd")
        hh = -self.m[1] * self.l[0] * self.c[1] * np.sin(q[..., 1])
        C = np.empty(np.broadcast_shapes(q.shape, qd.shape)[:-1] + (2, 2))
        C[..., 0, 0] = hh * qd[..., 1]
        C[..., 0, 1] = hh * (qd[..., 0] + qd[..., 1])
        C[..., 1, 0] = -hh * qd[..., 0]
        C[..., 1, 1] = 0.0
        return C

    def gravity(self, q):
        q = _as_state(q, 2, "q")
        m1, m2 = self.m
        g = self._g
        c12 = np.cos(q[..., 0] + q[..., 1])
        out = np.empty(q.shape)
        out[..., 0] = (m1 * self.c[0] + m2 * self.l[0]) * g * np.cos(q[..., 0]) + m2 * self.c[1] * g * c12
        out[..., 1] = m2 * self.c[1] * g * c12
        return out

    def bias(self, q, qd):
        q = _as_state(q, 2, "q")
        qd = _as_state(qd, 2, "qd")
        C = self.coriolis_matrix(q, qd)
        return np.einsum("...ij,...j->...i", C, qd) + self.gravity(q)

    def forward_dynamics(self, q, qd, tau, wrench=None):
        """Closed-form 2x2 solve for a single state (the plant's hot path); batches and
        wrenches go through the generic :meth:`Model.forward_dynamics`."""
        q = np.asarray(q, dtype=float)
        qd = np.asarray(qd, dtype=float)
        if wrench is not None or q.shape != (2,) or qd.shape != (2,):
            return super().forward_dynamics(q, qd, tau, wrench)
        t = np.asarray(tau, dtype=float)
        if t.shape != (2,):
            raise ModelError(f"tau: expected shape (2,), got {t.shape}")
        m1, m2 = self.m
        l1 = self.l[0]
        c1, c2 = self.c
        I1, I2 = self.I
        a = self._drive.armature
        g = self._g
        q1, q2 = float(q[0]), float(q[1])
        v1, v2 = float(qd[0]), float(qd[1])
        cq2, sq2 = math.cos(q2), math.sin(q2)
        m11 = I1 + I2 + m1 * c1 * c1 + m2 * (l1 * l1 + c2 * c2 + 2 * l1 * c2 * cq2) + a[0]
        m12 = I2 + m2 * (c2 * c2 + l1 * c2 * cq2)
        m22 = I2 + m2 * c2 * c2 + a[1]
        hh = -m2 * l1 * c2 * sq2
        c12 = math.cos(q1 + q2)
        g2 = m2 * c2 * g * c12
        g1 = (m1 * c1 + m2 * l1) * g * math.cos(q1) + g2
        r1 = float(t[0]) - (hh * v2 * v1 + hh * (v1 + v2) * v2) - g1
        r2 = float(t[1]) - (-hh * v1 * v1) - g2
        det = m11 * m22 - m12 * m12
        if not det > 0.0:
            raise ModelError(f"{self.name}: singular mass matrix")
        return np.array([(m22 * r1 - m12 * r2) / det, (m11 * r2 - m12 * r1) / det])

    def potential_energy(self, q):
        q = _as_state(q, 2, "q")
        m1, m2 = self.m
        s1 = np.sin(q[..., 0])
        s12 = np.sin(q[..., 0] + q[..., 1])
        return self._g * (m1 * self.c[0] * s1 + m2 * (self.l[0] * s1 + self.c[1] * s12))

    def forward_kinematics(self, q):
        q = _as_state(q, 2, "q")
        a1, a12 = q[..., 0], q[..., 0] + q[..., 1]
        T = np.zeros(q.shape[:-1] + (4, 4))
        c, s = np.cos(a12), np.sin(a12)
        T[..., 0, 0], T[..., 0, 1], T[..., 1, 0], T[..., 1, 1] = c, -s, s, c
        T[..., 2, 2] = T[..., 3, 3] = 1.0
        T[..., 0, 3] = self.l[0] * np.cos(a1) + self.l[1] * c
        T[..., 1, 3] = self.l[0] * np.sin(a1) + self.l[1] * s
        return T

    def jacobian(self, q):
        q = _as_state(q, 2, "q")
        a1, a12 = q[..., 0], q[..., 0] + q[..., 1]
        J = np.zeros(q.shape[:-1] + (6, 2))
        J[..., 0, 0] = -self.l[0] * np.sin(a1) - self.l[1] * np.sin(a12)
        J[..., 0, 1] = -self.l[1] * np.sin(a12)
        J[..., 1, 0] = self.l[0] * np.cos(a1) + self.l[1] * np.cos(a12)
        J[..., 1, 1] = self.l[1] * np.cos(a12)
        J[..., 5, :] = 1.0
        return J

    def scaled(self, mass_factor=1.0, inertia_factor=None):
        fi = mass_factor if inertia_factor is None else inertia_factor
        d = self._drive
        return PlanarTwoLink(self.m * mass_factor, self.l, self.c, self.I * fi, g=self._g,
                             armature=d.armature, viscous=d.viscous, coulomb=d.coulomb,
                             torque_max=self._limits.torque_max, name=self.name)
