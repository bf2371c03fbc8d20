"""Reference (slow, complex-step safe) Lagrange formulation of the Stewart platform.

This is formulation (a) of :mod:`dynamics.stewart`: seed 002 (Alwan & Sarhan),
eqs. 5-23, with the errors listed in ``ERRATA.md`` fixed:

* Euler-angle rates are not the angular velocity: ``omega = E e'`` and
  ``omega_dot = E e'' + E' e'``;
* eq. 13 uses the platform joint vector rotated into the base frame, ``R p_i``;
* the leg equivalent mass is ``(m1 S1^2 + m2 (L - S2)^2) / L^2``;
* the leg rotational term is the general ``A^T I_w A / L^2`` (it reduces to
  ``-[u]x I_w [u]x / L^2`` when the leg does not spin about its axis, see below);
* eq. 23's gravity term is ``J_i^T G_Li`` (no trailing ``J_i``).

Leg model
---------
Each leg is a lower cylinder (body 1) hinged at the base by a universal joint
and an upper piston (body 2) sliding in it (prismatic, no relative rotation) and
attached to the platform by a ball joint.  The leg's generalized coordinates are
the platform joint position ``x_L = r + R p_i`` (base frame).  The universal
joint's first axis ``a`` is fixed in the base; its second axis (the leg frame's
x axis) is ``x_L = (u x a) / |u x a|``; the leg frame is ``(x_L, u x x_L, u)``.
This makes the leg orientation a function of ``u`` only (holonomic), and its
angular velocity is ``omega_L = (A v_P) / L`` with ``A = [u]x + u k^T``,
``k = -(a.u)/|u x a| x_L``: the part ``u x u'`` plus the spin about the leg axis
that the universal joint imposes.

The Coriolis/centrifugal vector of each leg is obtained from its Lagrangian
``T = 1/2 x_L'^T M_L(x_L) x_L'`` by ``C x' = M' x' - 1/2 d/dx (x'^T M x')``
with complex-step derivatives (exact to rounding).  Every function here accepts
complex inputs (no ``abs``/``conj``), so callers can complex-step through them.
This module is the independent cross-check of the fast Kane/Newton-Euler
kernels in :mod:`dynamics._stewart_kernels`; it is not used on hot paths.

Parameter packing: see :func:`dynamics._stewart_kernels.pack_legs`.
"""

from __future__ import annotations

import numpy as np

from ._stewart_kernels import LEG_B, LEG_P, LEG_A, LEG_M1, LEG_S1, LEG_I1, LEG_M2, LEG_S2, LEG_I2, \
    LEG_ARM, PL_M, PL_C, PL_I, PL_G

_H = 1e-40  # complex-step size


def skew(v):
    """[v]x, shape (3, 3); complex safe."""
    z = 0.0 * v[0]
    return np.array([[z, -v[2], v[1]], [v[2], z, -v[0]], [-v[1], v[0], z]])


def rot(e):
    """R = Rz(gamma) Ry(beta) Rx(alpha) for e = (alpha, beta, gamma)."""
    ca, sa = np.cos(e[0]), np.sin(e[0])
    cb, sb = np.cos(e[1]), np.sin(e[1])
    cg, sg = np.cos(e[2]), np.sin(e[2])
    return np.array([[cg * cb, cg * sb * sa - sg * ca, cg * sb * ca + sg * sa],
                     [sg * cb, sg * sb * sa + cg * ca, sg * sb * ca - cg * sa],
                     [-sb, cb * sa, cb * ca]])


def euler_E(e):
    """E with omega_world = E e'."""
    cb, sb = np.cos(e[1]), np.sin(e[1])
    cg, sg = np.cos(e[2]), np.sin(e[2])
    z = 0.0 * cb
    return np.array([[cg * cb, -sg, z], [sg * cb, cg, z], [-sb, z, z + 1.0]])


def euler_Edot(e, ed):
    """dE/dt for Euler rates ed."""
    cb, sb = np.cos(e[1]), np.sin(e[1])
    cg, sg = np.cos(e[2]), np.sin(e[2])
    bd, gd = ed[1], ed[2]
    z = 0.0 * cb
    return np.array([[-sg * cb * gd - cg * sb * bd, -cg * gd, z],
                     [cg * cb * gd - sg * sb * bd, -sg * gd, z],
                     [-cb * bd, z, z]])


def twist_from_euler(X, Xd, Xdd):
    """(nu, nu_dot) = ([v; omega], [a; omega_dot]) from Euler-coordinate motion."""
    e, ed, edd = X[3:], Xd[3:], Xdd[3:]
    E = euler_E(e)
    om = E @ ed
    omd = E @ edd + euler_Edot(e, ed) @ ed
    return np.concatenate([Xd[:3], om]), np.concatenate([Xdd[:3], omd])


def _leg_frame(x, leg):
    b, a = leg[LEG_B], leg[LEG_A]
    l = x - b
    L = np.sqrt(l @ l)
    u = l / L
    ua = np.cross(u, a)
    s = np.sqrt(ua @ ua)
    xl = ua / s
    yl = np.cross(u, xl)
    c = a @ u
    return L, u, xl, yl, c, s


def leg_mass(x, leg):
    """M_Li(x_L), 3x3, the leg's inertia in its platform-joint coordinates [kg]."""
    L, u, xl, yl, c, s = _leg_frame(x, leg)
    m1, S1, m2, S2 = leg[LEG_M1], leg[LEG_S1], leg[LEG_M2], leg[LEG_S2]
    I1 = leg[LEG_I1].reshape(3, 3)
    I2 = leg[LEG_I2].reshape(3, 3)
    RL = np.stack([xl, yl, u], axis=1)
    Iw = RL @ (I1 + I2) @ RL.T
    P = np.eye(3) - np.outer(u, u)
    m_eq = (m1 * S1 ** 2 + m2 * (L - S2) ** 2) / L ** 2
    A = skew(u) + np.outer(u, -(c / s) * xl)
    return m2 * np.outer(u, u) + m_eq * P + A.T @ Iw @ A / L ** 2


def leg_potential(x, leg, g):
    """Gravitational potential of one leg [J] (zero at the base-joint height)."""
    L, u, *_ = _leg_frame(x, leg)
    m1, S1, m2, S2 = leg[LEG_M1], leg[LEG_S1], leg[LEG_M2], leg[LEG_S2]
    return -(m1 * S1 + m2 * (L - S2)) * (g @ u) - (m1 + m2) * (g @ leg[LEG_B])


def leg_gravity(x, leg, g):
    """G_Li = dV_L/dx_L, shape (3,) [N] (corrected eq. 11)."""
    L, u, *_ = _leg_frame(x, leg)
    m1, S1, m2, S2 = leg[LEG_M1], leg[LEG_S1], leg[LEG_M2], leg[LEG_S2]
    P = np.eye(3) - np.outer(u, u)
    return -((m1 * S1 + m2 * (L - S2)) / L * (P @ g) + m2 * u * (u @ g))


def leg_coriolis(x, xd, leg):
    """C_Li x' = M' x' - 1/2 grad_x(x'^T M x'), by complex step (real inputs only)."""
    x = np.asarray(x, dtype=float)
    xd = np.asarray(xd, dtype=float)
    Md = leg_mass(x + 1j * _H * xd, leg).imag / _H
    grad = np.empty(3)
    for k in range(3):
        dx = np.zeros(3)
        dx[k] = 1.0
        grad[k] = (xd @ leg_mass(x + 1j * _H * dx, leg) @ xd).imag / _H
    return Md @ xd - 0.5 * grad


def platform_terms(R, om, plat):
    """Platform M_pl (6x6), C_pl nu (6,) and G_pl (6,) in twist coordinates about the reference point."""
    m = plat[PL_M]
    cw = R @ plat[PL_C]
    Ic = R @ plat[PL_I].reshape(3, 3) @ R.T
    g = plat[PL_G]
    Sc = skew(cw)
    IO = Ic - m * Sc @ Sc
    M = np.block([[m * np.eye(3), -m * Sc], [m * Sc, IO]])
    Cv = np.concatenate([m * np.cross(om, np.cross(om, cw)), np.cross(om, IO @ om)])
    G = np.concatenate([-m * g, -m * np.cross(cw, g)])
    return M, Cv, G


def leg_jacobians(X, legs, plat_p):
    """Per-leg (J_i, rp_i, u_i, L_i): J_i = [I, -[R p_i]x] maps the twist to v_P (eq. 13 corrected)."""
    R = rot(X[3:])
    out = []
    for i in range(6):
        rp = R @ legs[i, LEG_P]
        x = X[:3] + rp
        l = x - legs[i, LEG_B]
        L = np.sqrt(l @ l)
        u = l / L
        Ji = np.hstack([np.eye(3), -skew(rp)])
        out.append((Ji, rp, u, L, x))
    return R, out


def task_jacobian_twist(X, legs):
    """J (6x6) with L' = J nu; rows [u_i^T, (R p_i x u_i)^T] (seed eq. 3, J^{-1} there)."""
    _, lj = leg_jacobians(X, legs, None)
    return np.array([np.concatenate([u, np.cross(rp, u)]) for (_, rp, u, _, _) in lj])


def mass_matrix_twist(X, legs, plat):
    """M(X) (6x6) in twist coordinates, legs + platform, without armature; complex safe."""
    R, lj = leg_jacobians(X, legs, plat)
    M, _, _ = platform_terms(R, np.zeros(3), plat)
    for i, (Ji, rp, u, L, x) in enumerate(lj):
        M = M + Ji.T @ leg_mass(x, legs[i]) @ Ji
    return M


def mass_matrix_actuated(X, legs, plat):
    """M_q(X) = J^{-T} M J^{-1} + diag(armature); complex safe (used for dM/dt)."""
    J = task_jacobian_twist(X, legs)
    Ji = np.linalg.inv(J)
    return Ji.T @ mass_matrix_twist(X, legs, plat) @ Ji + np.diag(legs[:, LEG_ARM])


def kinetic_energy(X, Xd, legs, plat):
    """Kinetic energy [J] from the Lagrangian mass matrices (incl. armature); complex safe."""
    om = euler_E(X[3:]) @ Xd[3:]
    nu = np.concatenate([Xd[:3], om])
    J = task_jacobian_twist(X, legs)
    Ld = J @ nu
    return 0.5 * nu @ mass_matrix_twist(X, legs, plat) @ nu + 0.5 * np.sum(legs[:, LEG_ARM] * Ld * Ld)


def potential_energy(X, legs, plat):
    """Gravitational potential energy [J] (platform + legs); complex safe."""
    R = rot(X[3:])
    g = plat[PL_G]
    V = -plat[PL_M] * (g @ (X[:3] + R @ plat[PL_C]))
    for i in range(6):
        V = V + leg_potential(X[:3] + R @ legs[i, LEG_P], legs[i], g)
    return V


def task_inverse_dynamics(X, Xd, Xdd, wrench, legs, plat):
    """Leg forces F (6,) [N] by the corrected seed-002 Lagrange formulation.

    Solves ``J^T F = M nu' + C nu + G - wrench`` with
    ``M = M_pl + sum J_i^T M_Li J_i``, ``C nu = C_pl nu + sum J_i^T (M_Li J_i' nu + C_Li J_i nu)``,
    ``G = G_pl + sum J_i^T G_Li`` (eqs. 18-23), plus the armature term ``arm * L''``.
    """
    X, Xd, Xdd = (np.asarray(v, dtype=float) for v in (X, Xd, Xdd))
    nu, nud = twist_from_euler(X, Xd, Xdd)
    v, om = nu[:3], nu[3:]
    g = plat[PL_G]
    R, lj = leg_jacobians(X, legs, plat)
    Mp, Cp, Gp = platform_terms(R, om, plat)
    rhs = Mp @ nud + Cp + Gp
    J = np.empty((6, 6))
    Ldd = np.empty(6)
    for i, (Ji, rp, u, L, x) in enumerate(lj):
        xd = Ji @ nu
        Jdnu = np.cross(om, np.cross(om, rp))  # J_i' nu (eq. 15 corrected)
        xdd = Ji @ nud + Jdnu
        ML = leg_mass(x, legs[i])
        Q = ML @ xdd + leg_coriolis(x, xd, legs[i]) + leg_gravity(x, legs[i], g)
        rhs = rhs + Ji.T @ Q
        J[i] = np.concatenate([u, np.cross(rp, u)])
        Ld = u @ xd
        Ldd[i] = u @ xdd + (xd @ xd - Ld * Ld) / L
    if wrench is not None:
        rhs = rhs - np.asarray(wrench, dtype=float)
    return np.linalg.solve(J.T, rhs) + legs[:, LEG_ARM] * Ldd
