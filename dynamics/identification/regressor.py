"""Inverse dynamics linear in the dynamic parameters: ``tau = Y(q, qd, qdd) pi``.

Standard parameters
-------------------
Serial chains (:class:`~dynamics.serial.SerialModel`, from DH robot files or
URDF): per link ``j`` the ten inertial parameters in the joint frame ``J_j``
(the frame the joint moves about/along its z axis, see
:mod:`dynamics.serial`), in Pinocchio's order::

    [m, m cx, m cy, m cz, Ixx, Ixy, Iyy, Ixz, Iyz, Izz]

with the rotational inertia taken *about the frame origin* (not the centre of
mass): ``I_O = I_c + m (|c|^2 E - c c^T)``.

Planar 3RRR (:class:`~dynamics.planar3rrr.Planar3RRR`): the model's own body
set (centres of mass on the link lines, platform centre of mass at P), per leg
``i`` (legs first)::

    proximal  [ZZ_A, MX_A, M_A]   ZZ about the base joint A_i, MX = m r along the link
    distal    [ZZ_B, MX_B, M_B]   ZZ about the elbow B_i, MX = m r along B_i -> C_i

then the platform ``[ZZ_P, M_P]`` (about P).  ``M_A`` moves nothing (the link
turns about a fixed joint) and has a zero column: the identifiability report
says so.

Mechanisms (:class:`~dynamics.mechanism.MechanismModel`, ``type = "mechanism"``
files): per body (file order, massless bodies included) the ten inertial
parameters of the serial convention in the body's frame (the frame of its
parent joint), about the frame origin.  The regressor comes from the generated
body kinematics (:func:`dynamics._mechanism_derive.derive_regressor`: each
body's rotation, twist Jacobian ``J`` (6, n) and ``Jdot zd``, sympy + cse +
numba, cached by digest like the model's own kernels): each body's
Newton-Euler wrench about its origin is linear in its ten parameters (as for a
serial link), ``J^T`` maps it to the tree's generalised forces ``Y_tree`` in
the full coordinates ``z``, and ``tau = G^T Y_tree pi`` with the closure's
velocity map ``G`` (``zd = G qd``, ``zdd = G qdd + g0``), as the model's own
inverse dynamics does.

Drive parameters, per joint, after the inertial block: ``[Ia, Fv, Fc]``
(armature [kg m^2], viscous [N m s/rad], Coulomb [N m]) and optionally an
offset ``[Fo]`` [N m].  So ``Y pi`` equals ``model.inverse_dynamics(q, qd,
qdd) + model.friction_torque(qd)`` (+ offset) for the model's own ``pi``.

The 3RRR is a closed chain: its torques are ``tau = G^T Y_tree pi`` with
``G = [I; J_x]`` (``(thetad, Xd) = G thetad``), where ``Y_tree`` maps the
parameters to the generalised forces of the open tree (three 2R legs and the
free platform) in the redundant coordinates ``(theta, X)``, from the
Newton-Euler equations of each body (virtual power along the
constraint-compatible motions).

Shapes: ``q, qd, qdd`` are ``(N, n)`` (or ``(n,)``); ``Y`` is ``(N, n, p)`` (or
``(n, p)``).  Units SI, radians.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..base import Model
from ..errors import ModelError

__all__ = ["ParameterSet", "parameter_set", "standard_parameters", "regressor", "stacked_regressor",
           "INERTIAL_NAMES"]

#: the ten standard inertial parameters of a rigid body, Pinocchio's order
INERTIAL_NAMES = ("m", "mcx", "mcy", "mcz", "Ixx", "Ixy", "Iyy", "Ixz", "Iyz", "Izz")
_DRIVE = ("Ia", "Fv", "Fc")
_RRR_LINK = ("ZZ", "MX", "M")


@dataclass(frozen=True)
class ParameterSet:
    """The layout of a model's standard parameter vector.

    Attributes
    ----------
    kind : str
        ``"serial"``, ``"planar_3rrr"`` or ``"mechanism"``.
    names : tuple of str, length p
        ``"<body>.<param>"`` for inertial and ``"<joint>.<param>"`` for drive entries.
    bodies : tuple of str
        Body names in order; each owns ``body_size`` consecutive entries.
    body_size : tuple of int
        Entries per body (10 for serial links and mechanism bodies; 3 or 2 for the 3RRR bodies).
    n_inertial : int
        Number of inertial entries (the drive block starts here).
    dof : int
    offset : bool
        Whether every joint has a constant torque offset entry ``Fo``.
    units : tuple of str
    """

    kind: str
    names: tuple
    bodies: tuple
    body_size: tuple
    n_inertial: int
    dof: int
    offset: bool
    units: tuple

    @property
    def size(self) -> int:
        """Number of standard parameters p."""
        return len(self.names)

    @property
    def drive_size(self) -> int:
        """Drive entries per joint (3, or 4 with an offset)."""
        return len(_DRIVE) + (1 if self.offset else 0)

    def drive_index(self, joint: int, what: str) -> int:
        """Index of drive entry ``what`` (``"Ia"``, ``"Fv"``, ``"Fc"``, ``"Fo"``) of ``joint``."""
        order = _DRIVE + (("Fo",) if self.offset else ())
        return self.n_inertial + joint * self.drive_size + order.index(what)

    def body_slice(self, body: int) -> slice:
        """Slice of body ``body``'s inertial entries."""
        s = int(sum(self.body_size[:body]))
        return slice(s, s + self.body_size[body])


def _is_3rrr(model: Model) -> bool:
    from ..planar3rrr import Planar3RRR
    return isinstance(model, Planar3RRR)


def _is_serial(model: Model) -> bool:
    from ..serial import SerialModel
    return isinstance(model, SerialModel)


def _is_mechanism(model: Model) -> bool:
    from ..mechanism import MechanismModel
    return isinstance(model, MechanismModel)


def parameter_set(model: Model, *, offset: bool = False) -> ParameterSet:
    """The standard parameter layout of ``model`` (see the module docstring).

    Raises
    ------
    ModelError
        For a model type without a regressor (the Stewart platform).
    """
    n = model.dof
    jn = list(model.joint_names)
    drive = _DRIVE + (("Fo",) if offset else ())
    dunits = {"Ia": "kg m^2", "Fv": "N m s/rad", "Fc": "N m", "Fo": "N m"}
    if _is_serial(model) or _is_mechanism(model):
        if _is_serial(model):
            bodies, kind = tuple(f"link{j + 1}" for j in range(n)), "serial"
        else:
            bodies, kind = tuple(b["name"] for b in model.spec.symbolic["bodies"]), "mechanism"
        names = [f"{b}.{p}" for b in bodies for p in INERTIAL_NAMES]
        iu = ("kg", "kg m", "kg m", "kg m") + ("kg m^2",) * 6
        units = list(iu) * len(bodies)
        sizes = (10,) * len(bodies)
    elif _is_3rrr(model):
        bodies = []
        for i in range(3):
            bodies += [f"proximal{i + 1}", f"distal{i + 1}"]
        bodies.append("platform")
        names, units, sizes = [], [], []
        for b in bodies[:-1]:
            names += [f"{b}.{p}" for p in _RRR_LINK]
            units += ["kg m^2", "kg m", "kg"]
            sizes.append(3)
        names += ["platform.ZZ", "platform.M"]
        units += ["kg m^2", "kg"]
        sizes.append(2)
        bodies, sizes, kind = tuple(bodies), tuple(sizes), "planar_3rrr"
    else:
        raise ModelError(f"{model.name}: no parameter regressor for {type(model).__name__} "
                         "(serial arms, the planar 3RRR and mechanism files have one)")
    ni = len(names)
    for j in range(n):
        names += [f"{jn[j]}.{p}" for p in drive]
        units += [dunits[p] for p in drive]
    return ParameterSet(kind, tuple(names), bodies, sizes, ni, n, bool(offset), tuple(units))


def standard_parameters(model: Model, *, offset: bool = False) -> np.ndarray:
    """The model's own standard parameter vector pi, shape (p,) (offsets zero)."""
    ps = parameter_set(model, offset=offset)
    pi = np.zeros(ps.size)
    if ps.kind in ("serial", "mechanism"):
        for j, (m, c, Ic) in enumerate(zip(*_body_inertias(model))):
            Io = Ic + m * (c @ c * np.eye(3) - np.outer(c, c))
            pi[10 * j:10 * j + 10] = [m, *(m * c), Io[0, 0], Io[0, 1], Io[1, 1], Io[0, 2], Io[1, 2], Io[2, 2]]
    else:
        p, d = model.proximal, model.distal
        for i in range(3):
            k = 6 * i
            pi[k:k + 3] = [p.inertia[i] + p.mass[i] * p.com[i] ** 2, p.mass[i] * p.com[i], p.mass[i]]
            pi[k + 3:k + 6] = [d.inertia[i] + d.mass[i] * d.com[i] ** 2, d.mass[i] * d.com[i], d.mass[i]]
        pi[18:20] = [model.platform_inertia, model.platform_mass]
    dr = model.drive
    for j in range(model.dof):
        pi[ps.drive_index(j, "Ia")] = dr.armature[j]
        pi[ps.drive_index(j, "Fv")] = dr.viscous[j]
        pi[ps.drive_index(j, "Fc")] = dr.coulomb[j]
    return pi


def _body_inertias(model: Model):
    """(masses (B,) [kg], centres of mass (B, 3) [m], inertias about them (B, 3, 3) [kg m^2]) of
    a serial model's links or a mechanism's bodies, each in its own frame."""
    if not _is_mechanism(model):
        return model.link_inertias
    P = np.asarray(model.spec.params, dtype=float).reshape(-1, 10)
    m = P[:, 0]
    c = np.divide(P[:, 1:4], m[:, None], out=np.zeros((len(m), 3)), where=m[:, None] > 0)
    Ixx, Iyy, Izz, Ixy, Iyz, Izx = P[:, 4:10].T
    Ic = np.stack([np.stack([Ixx, Ixy, Izx], -1), np.stack([Ixy, Iyy, Iyz], -1),
                   np.stack([Izx, Iyz, Izz], -1)], 1)
    return m, c, Ic


def _states(model: Model, q, qd, qdd):
    arrs = [np.asarray(x, dtype=float) for x in (q, qd, qdd)]
    single = arrs[0].ndim == 1
    arrs = [np.atleast_2d(a) for a in arrs]
    n = model.dof
    for a, nm in zip(arrs, ("q", "qd", "qdd")):
        if a.ndim != 2 or a.shape[1] != n or a.shape != arrs[0].shape:
            raise ModelError(f"{model.name}: {nm} must have shape ({n},) or (N, {n}) like q, got {a.shape}")
        if not np.all(np.isfinite(a)):
            raise ModelError(f"{model.name}: {nm} has non-finite values")
    return arrs, single


def regressor(model: Model, q, qd, qdd, *, offset: bool = False, poses=None) -> np.ndarray:
    """The regressor Y with ``tau = Y pi`` (module docstring), shape (N, n, p) or (n, p).

    Parameters
    ----------
    model : SerialModel, Planar3RRR or MechanismModel
        Gives the geometry, joint types and gravity (its masses are not used).
    q, qd, qdd : array_like, shape (n,) or (N, n)
        Joint positions [rad|m], velocities and accelerations.
    offset : bool
        Add a constant torque offset column per joint.
    poses : array_like, shape (N, 3), optional
        3RRR only: platform pose hints (Newton start of the forward kinematics).

    Returns
    -------
    ndarray
        ``Y``; ``Y @ standard_parameters(model)`` equals the inverse dynamics plus friction.
    """
    (q, qd, qdd), single = _states(model, q, qd, qdd)
    ps = parameter_set(model, offset=offset)
    N, n = q.shape
    Y = np.zeros((N, n, ps.size))
    if ps.kind == "serial":
        _serial_inertial(model, q, qd, qdd, Y)
    elif ps.kind == "mechanism":
        _mechanism_inertial(model, q, qd, qdd, Y)
    else:
        _rrr_inertial(model, q, qd, qdd, Y, poses)
    for j in range(n):
        Y[:, j, ps.drive_index(j, "Ia")] = qdd[:, j]
        Y[:, j, ps.drive_index(j, "Fv")] = qd[:, j]
        Y[:, j, ps.drive_index(j, "Fc")] = np.sign(qd[:, j])
        if offset:
            Y[:, j, ps.drive_index(j, "Fo")] = 1.0
    return Y[0] if single else Y


def stacked_regressor(model: Model, q, qd, qdd, *, offset: bool = False, poses=None) -> np.ndarray:
    """``regressor`` with the samples stacked joint-major per sample: shape (N n, p)."""
    Y = regressor(model, np.atleast_2d(q), np.atleast_2d(qd), np.atleast_2d(qdd), offset=offset, poses=poses)
    return Y.reshape(-1, Y.shape[-1])


# ---------------------------------------------------------------------------
# serial chains: Newton-Euler, linear in each body's parameters
# ---------------------------------------------------------------------------
def _skew(v: np.ndarray) -> np.ndarray:
    """(N, 3) -> (N, 3, 3) cross-product matrices."""
    S = np.zeros(v.shape[:-1] + (3, 3))
    S[..., 0, 1], S[..., 0, 2] = -v[..., 2], v[..., 1]
    S[..., 1, 0], S[..., 1, 2] = v[..., 2], -v[..., 0]
    S[..., 2, 0], S[..., 2, 1] = -v[..., 1], v[..., 0]
    return S


def _cross(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(N, 3) x (N, 3) -> (N, 3): ``np.cross``'s products and differences, element for element
    (the same numbers), without its axis handling (most of its cost on short arrays)."""
    out = np.empty(np.broadcast_shapes(a.shape, b.shape))
    a0, a1, a2 = a[..., 0], a[..., 1], a[..., 2]
    b0, b1, b2 = b[..., 0], b[..., 1], b[..., 2]
    np.multiply(a1, b2, out=out[..., 0])
    out[..., 0] -= a2 * b1
    np.multiply(a2, b0, out=out[..., 1])
    out[..., 1] -= a0 * b2
    np.multiply(a0, b1, out=out[..., 2])
    out[..., 2] -= a1 * b0
    return out


def _lmat(w: np.ndarray) -> np.ndarray:
    """(N, 3) -> (N, 3, 6) with I w = L(w) [Ixx, Ixy, Iyy, Ixz, Iyz, Izz]."""
    L = np.zeros(w.shape[:-1] + (3, 6))
    L[..., 0, 0], L[..., 0, 1], L[..., 0, 3] = w[..., 0], w[..., 1], w[..., 2]
    L[..., 1, 1], L[..., 1, 2], L[..., 1, 4] = w[..., 0], w[..., 1], w[..., 2]
    L[..., 2, 3], L[..., 2, 4], L[..., 2, 5] = w[..., 0], w[..., 1], w[..., 2]
    return L


def _wrench_matrix(w: np.ndarray, wd: np.ndarray, a: np.ndarray) -> np.ndarray:
    """A (..., 6, 10) with a body's Newton-Euler wrench about its frame origin (rows: force,
    moment; body frame) ``= A pi_b`` for its ten standard parameters, from the angular velocity
    ``w``, the angular acceleration ``wd`` and the origin's acceleration minus gravity ``a``
    (..., 3), body-frame components::

        f = m a + wd x h + w x (w x h),   n = I_O wd + w x (I_O w) + h x a
    """
    A = np.zeros(w.shape[:-1] + (6, 10))
    A[..., 0:3, 0] = a
    A[..., 0:3, 1:4] = _skew(wd) + _skew(w) @ _skew(w)
    A[..., 3:6, 1:4] = -_skew(a)
    A[..., 3:6, 4:10] = _lmat(wd) + _skew(w) @ _lmat(w)
    return A


def _serial_inertial(model, q, qd, qdd, Y) -> None:
    N, n = q.shape
    X = model.placements
    revolute = [t == "revolute" for t in model.joint_types]
    z = np.array([0.0, 0.0, 1.0])
    w = np.zeros((N, 3))
    wd = np.zeros((N, 3))
    a = np.tile(-model.gravity_vector, (N, 1))     # gravity as a base acceleration
    R_all, p_all, A_all = [], [], []
    for i in range(n):
        R0, p0 = X[i, :3, :3], X[i, :3, 3]
        if revolute[i]:
            c, s = np.cos(q[:, i]), np.sin(q[:, i])
            Rz = np.zeros((N, 3, 3))
            Rz[:, 0, 0], Rz[:, 0, 1], Rz[:, 1, 0], Rz[:, 1, 1], Rz[:, 2, 2] = c, -s, s, c, 1.0
            R = R0 @ Rz
            p = np.tile(p0, (N, 1))
        else:
            R = np.tile(R0, (N, 1, 1))
            p = p0 + q[:, i:i + 1] * R0[:, 2]
        Rt = np.swapaxes(R, 1, 2)
        # parent quantities at the new origin, expressed in the child frame
        a_o = a + _cross(wd, p) + _cross(w, _cross(w, p))
        w_p = np.einsum("nij,nj->ni", Rt, w)
        wd_p = np.einsum("nij,nj->ni", Rt, wd)
        a = np.einsum("nij,nj->ni", Rt, a_o)
        if revolute[i]:
            w = w_p + qd[:, i:i + 1] * z
            wd = wd_p + qdd[:, i:i + 1] * z + _cross(w_p, qd[:, i:i + 1] * z)
        else:
            w, wd = w_p, wd_p
            a = a + qdd[:, i:i + 1] * z + 2.0 * _cross(w, qd[:, i:i + 1] * z)
        A = _wrench_matrix(w, wd, a)
        R_all.append(R)
        p_all.append(p)
        A_all.append(A)
    for j in range(n):
        U = A_all[j]
        for i in range(j, -1, -1):
            Y[:, i, 10 * j:10 * j + 10] = U[:, 5] if revolute[i] else U[:, 2]
            if i == 0:
                break
            R, p = R_all[i], p_all[i]
            f = np.einsum("nij,njk->nik", R, U[:, 0:3])
            m = np.einsum("nij,njk->nik", R, U[:, 3:6]) + _skew(p) @ f
            U = np.concatenate([f, m], axis=1)


# ---------------------------------------------------------------------------
# mechanisms: per-body Newton-Euler from the generated body kinematics, then G^T
# ---------------------------------------------------------------------------
def _mechanism_inertial(model, q, qd, qdd, Y) -> None:
    rkin = model.regressor_kinematics()
    N = q.shape[0]
    n = len(model.all_joint_names)
    nb = len(model.spec.symbolic["bodies"])
    K = np.empty((N, nb, 9 + 6 * n + 6))
    G = np.empty((N, n, model.dof))
    zdd = np.empty((N, n))
    zd = np.empty((N, n))
    for k in range(N):
        z, zd[k], G[k], g0 = model.closure_state(q[k], qd[k])
        zdd[k] = G[k] @ qdd[k] + g0
        K[k] = rkin(z, zd[k])
    R = K[..., :9].reshape(N, nb, 3, 3)
    J = K[..., 9:9 + 6 * n].reshape(N, nb, 6, n)
    Rt = np.swapaxes(R, -1, -2)
    acc = np.einsum("nbij,nj->nbi", J, zdd) + K[..., 9 + 6 * n:]
    tw = np.einsum("nbij,nj->nbi", J, zd)
    g = np.asarray(model.gravity_vector, dtype=float)
    w = np.einsum("nbij,nbj->nbi", Rt, tw[..., 3:])
    wd = np.einsum("nbij,nbj->nbi", Rt, acc[..., 3:])
    a = np.einsum("nbij,nbj->nbi", Rt, acc[..., :3] - g)
    A = _wrench_matrix(w, wd, a)                                    # (N, nb, 6, 10)
    JF = np.concatenate([Rt @ J[:, :, :3], Rt @ J[:, :, 3:]], axis=2)   # body-frame twist Jacobians
    Yt = np.einsum("nbiz,nbik->nzbk", JF, A).reshape(N, n, 10 * nb)  # tree forces, full coordinates
    Y[:, :, :10 * nb] = np.einsum("nza,nzk->nak", G, Yt)


# ---------------------------------------------------------------------------
# planar 3RRR: per-body Newton-Euler in the redundant coordinates, then G^T
# ---------------------------------------------------------------------------
def _perp(v: np.ndarray) -> np.ndarray:
    return np.stack([-v[..., 1], v[..., 0]], axis=-1)


def _cross2(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return a[..., 0] * b[..., 1] - a[..., 1] * b[..., 0]


def rrr_task_states(model, q, qd, qdd, poses=None):
    """Platform pose, rate and acceleration (N, 3) each, and J_x (N, 3, 3), for joint states (N, 3)."""
    N = q.shape[0]
    X = np.empty((N, 3)); Xd = np.empty((N, 3)); Xdd = np.empty((N, 3)); Jx = np.empty((N, 3, 3))
    guess = model.home_pose
    batch = getattr(model, "task_acceleration_batch", None)
    for k in range(N):
        g = guess if poses is None else np.asarray(poses[k], dtype=float)
        X[k] = model.forward_kinematics_task(q[k], guess=g)
        Jx[k] = model.task_jacobian(q[k], X[k])
        Xd[k] = Jx[k] @ qd[k]
        if batch is None:
            Xdd[k] = model.task_acceleration(q[k], X[k], qd[k], qdd[k])
        guess = X[k]
    if batch is not None and N:     # all rows at once (the same numbers as task_acceleration)
        Xdd[:] = batch(q, X, qd, qdd)
    return X, Xd, Xdd, Jx


def _rrr_inertial(model, q, qd, qdd, Y, poses) -> None:
    N = q.shape[0]
    X, Xd, Xdd, Jx = rrr_task_states(model, q, qd, qdd, poses)
    g = np.asarray(model.gravity_vector, dtype=float)[:2]
    A = np.asarray(model.base_joints, dtype=float)
    cpl = np.asarray(model.platform_joints, dtype=float)
    a_len = np.asarray(model.proximal.length, dtype=float)
    b_len = np.asarray(model.distal.length, dtype=float)
    P, Pd, Pdd = X[:, :2], Xd[:, :2], Xdd[:, :2]
    phi, phid, phidd = X[:, 2], Xd[:, 2], Xdd[:, 2]
    cph, sph = np.cos(phi), np.sin(phi)
    p = 20  # inertial block size
    F_th = np.zeros((N, 3, p))      # generalised forces on theta per parameter
    F_X = np.zeros((N, 3, p))       # ... and on X
    for i in range(3):
        u = np.stack([np.cos(q[:, i]), np.sin(q[:, i])], axis=1)
        nv = _perp(u)
        a, b = a_len[i], b_len[i]
        B = A[i] + a * u
        vB = a * qd[:, i:i + 1] * nv
        aB = a * qdd[:, i:i + 1] * nv - a * qd[:, i:i + 1] ** 2 * u
        rho = np.stack([cph * cpl[i, 0] - sph * cpl[i, 1], sph * cpl[i, 0] + cph * cpl[i, 1]], axis=1)
        rp = _perp(rho)
        C = P + rho
        vC = Pd + phid[:, None] * rp
        aC = Pdd + phidd[:, None] * rp - phid[:, None] ** 2 * rho
        e = (C - B) / b
        ep = _perp(e)
        om = np.sum(ep * (vC - vB), axis=1) / b
        al = np.sum(ep * (aC - aB), axis=1) / b
        k = 6 * i
        # proximal: moment about A = ZZ thdd + MX u x (0 - g)
        F_th[:, i, k] = qdd[:, i]
        F_th[:, i, k + 1] = _cross2(u, -g[None, :])
        # distal: force F and moment m about B, linear in (ZZ, MX, M)
        ag = aB - g
        Fcol = {k + 4: al[:, None] * ep - om[:, None] ** 2 * e, k + 5: ag}
        mcol = {k + 3: al, k + 4: _cross2(e, ag)}
        dB = a * nv                                  # dB/dtheta_i
        dpsi_th = -np.sum(ep * dB, axis=1) / b       # dpsi/dtheta_i
        dpsi_X = np.concatenate([ep / b, (np.sum(ep * rp, axis=1) / b)[:, None]], axis=1)
        for col, Fv in Fcol.items():
            F_th[:, i, col] += np.sum(Fv * dB, axis=1)
        for col, mv in mcol.items():
            F_th[:, i, col] += mv * dpsi_th
            F_X[:, :, col] += mv[:, None] * dpsi_X
    F_X[:, 2, 18] = phidd
    F_X[:, 0:2, 19] = Pdd - g
    Y[:, :, :p] = F_th + np.einsum("nji,njk->nik", Jx, F_X)
