"""Task-space paths: geometric curves timed by a scalar law.

A :class:`Curve` is a function ``p(u)`` of a normalised parameter ``u`` in
``[0, 1]`` with exact derivatives ``p_u, p_uu, p_uuu``.  Geometric curves
(lines, arcs, polylines with fillets) are parameterised proportionally to arc
length, so a constant ``du/dt`` gives a constant speed.  A
:class:`PathTrajectory` composes a curve with a timing law ``u = s(t)`` and
applies the chain rule exactly::

    v = p_u s'
    a = p_uu s'^2 + p_u s''
    j = p_uuu s'^3 + 3 p_uu s' s'' + p_u s'''

Orientation
-----------
Planar poses are ``(x, y, phi)`` with ``phi`` a rotation about the z axis [rad].
Spatial poses for the Stewart platform are ``(x, y, z, alpha, beta, gamma)``
with ``R = Rz(gamma) Ry(beta) Rx(alpha)``; :class:`SlerpCurve` interpolates the
orientation along the geodesic (quaternion slerp) and returns the Euler angles
with their *analytic* parameter derivatives, obtained from the angular
velocity ``omega = E(e) e'`` with
``E = [[cg cb, -sg, 0], [sg cb, cg, 0], [-sb, 0, 1]]`` (world frame):
``e' = E^-1 omega'``, ``e'' = E^-1 (omega'' - E' e')``,
``e''' = E^-1 (omega''' - E'' e' - 2 E' e'')``.  The Euler rates are *not*
the angular velocity (see seeds/ERRATA.md, 002); :func:`euler_rates_to_omega`
converts.  The representation is singular at ``cos(beta) = 0``.
"""

from __future__ import annotations

import math
import warnings
from abc import ABC, abstractmethod
from typing import Sequence as _Seq

import numpy as np
from scipy.spatial.transform import Rotation

from dynamics.errors import TrajectoryError

from .base import Sequence, Trajectory, check_duration
from .profiles import ConstantSpeedLaw, ShapeLaw, TimingLaw

__all__ = [
    "Curve", "LineCurve", "ArcCurve", "CompositeCurve", "StackedCurve", "SineCurve", "SlerpCurve",
    "PathTrajectory", "line", "circle", "polygon", "square", "planar_circle_pose", "pose_move",
    "euler_zyx_to_matrix", "matrix_to_euler_zyx", "euler_rate_matrix", "euler_rates_to_omega",
]


def _vec(x, name, dim=None) -> np.ndarray:
    a = np.atleast_1d(np.asarray(x, dtype=float))
    if a.ndim != 1 or not np.all(np.isfinite(a)) or (dim is not None and a.size != dim):
        want = f"shape ({dim},)" if dim is not None else "a 1-D vector"
        raise TrajectoryError(f"{name} must be a finite vector of {want}, got {x!r}")
    return a


class Curve(ABC):
    """A parametric curve ``p(u)``, ``u`` in [0, 1], with exact derivatives."""

    @property
    @abstractmethod
    def dim(self) -> int:
        """Number of coordinates."""

    @property
    @abstractmethod
    def length(self) -> float:
        """Geometric length (for timing); curves without one return 1.0."""

    @abstractmethod
    def eval(self, u: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(p, p_u, p_uu, p_uuu)`` at ``u`` (shape (N,)), each of shape (N, dim)."""

    def point(self, u: float) -> np.ndarray:
        return self.eval(np.array([float(u)]))[0][0]


class LineCurve(Curve):
    """Segment from ``a`` to ``b`` (any dimension)."""

    def __init__(self, a, b):
        self.a = _vec(a, "line start")
        self.b = _vec(b, "line end", self.a.size)
        self._d = self.b - self.a

    @property
    def dim(self) -> int:
        return self.a.size

    @property
    def length(self) -> float:
        return float(np.linalg.norm(self._d))

    def eval(self, u):
        n = u.size
        z = np.zeros((n, self.dim))
        return self.a + u[:, None] * self._d, np.broadcast_to(self._d, (n, self.dim)).copy(), z, z.copy()


class ArcCurve(Curve):
    """Circular arc ``c + r (cos th e1 + sin th e2)``, ``th = th0 + u * span``.

    ``e1``, ``e2`` are orthonormal vectors of the plane (any dimension >= 2);
    ``span`` [rad] may be negative (clockwise with respect to e1 -> e2) and may
    exceed 2 pi (several turns).
    """

    def __init__(self, center, radius: float, start_angle: float, span: float, e1=None, e2=None):
        self.c = _vec(center, "arc centre")
        if not (np.isfinite(radius) and radius > 0):
            raise TrajectoryError(f"radius must be > 0, got {radius!r}")
        if not (np.isfinite(span) and span != 0 and np.isfinite(start_angle)):
            raise TrajectoryError(f"arc span must be finite and non-zero, got {span!r}")
        d = self.c.size
        e1 = np.eye(d)[0] if e1 is None else _vec(e1, "e1", d)
        e2 = np.eye(d)[1] if e2 is None else _vec(e2, "e2", d)
        if abs(np.linalg.norm(e1) - 1) > 1e-9 or abs(np.linalg.norm(e2) - 1) > 1e-9 or abs(e1 @ e2) > 1e-9:
            raise TrajectoryError("arc plane vectors e1, e2 must be orthonormal")
        self.r, self.th0, self.span = float(radius), float(start_angle), float(span)
        self.e1, self.e2 = e1, e2

    @property
    def dim(self) -> int:
        return self.c.size

    @property
    def length(self) -> float:
        return abs(self.span) * self.r

    def eval(self, u):
        th = self.th0 + u * self.span
        c, s = np.cos(th)[:, None], np.sin(th)[:, None]
        r, w = self.r, self.span
        radial = c * self.e1 + s * self.e2
        tang = -s * self.e1 + c * self.e2
        return self.c + r * radial, r * w * tang, -r * w**2 * radial, -r * w**3 * tang


class CompositeCurve(Curve):
    """Curves joined end to end; each takes a share of ``u`` proportional to its length."""

    def __init__(self, curves: _Seq[Curve], tol: float = 1e-9):
        curves = list(curves)
        if not curves:
            raise TrajectoryError("a composite curve needs at least one piece")
        dim = curves[0].dim
        for i, c in enumerate(curves):
            if c.dim != dim:
                raise TrajectoryError(f"curve piece {i} has dim {c.dim}, expected {dim}")
            if i and np.max(np.abs(c.point(0.0) - curves[i - 1].point(1.0))) > tol:
                raise TrajectoryError(f"curve piece {i} does not start where piece {i - 1} ends")
        lengths = np.array([c.length for c in curves])
        if np.any(lengths <= 0):
            raise TrajectoryError("composite curve pieces must have positive length")
        self.curves = tuple(curves)
        self._L = float(lengths.sum())
        self._u0 = np.concatenate([[0.0], np.cumsum(lengths) / self._L])
        self._u0[-1] = 1.0
        self._frac = lengths / self._L

    @property
    def dim(self) -> int:
        return self.curves[0].dim

    @property
    def length(self) -> float:
        return self._L

    @property
    def breakpoints_u(self) -> np.ndarray:
        return self._u0.copy()

    def eval(self, u):
        n = u.size
        out = [np.zeros((n, self.dim)) for _ in range(4)]
        idx = np.clip(np.searchsorted(self._u0, u, side="right") - 1, 0, len(self.curves) - 1)
        for k, c in enumerate(self.curves):
            m = idx == k
            if not np.any(m):
                continue
            f = self._frac[k]
            vals = c.eval(np.clip((u[m] - self._u0[k]) / f, 0.0, 1.0))
            for o, v, p in zip(out, vals, range(4)):
                o[m] = v / f**p
        return tuple(out)


class StackedCurve(Curve):
    """Several curves of the same parameter side by side (e.g. position + angle)."""

    def __init__(self, curves: _Seq[Curve], length: float | None = None):
        curves = list(curves)
        if not curves:
            raise TrajectoryError("a stacked curve needs at least one part")
        self.curves = tuple(curves)
        self._L = float(curves[0].length if length is None else length)

    @property
    def dim(self) -> int:
        return sum(c.dim for c in self.curves)

    @property
    def length(self) -> float:
        return self._L

    def eval(self, u):
        vals = [c.eval(u) for c in self.curves]
        return tuple(np.concatenate([v[k] for v in vals], axis=1) for k in range(4))


class SineCurve(Curve):
    """Scalar ``offset + amplitude * sin(2 pi cycles u + phase)`` (e.g. a rotating platform angle)."""

    def __init__(self, offset: float, amplitude: float, cycles: float = 1.0, phase: float = 0.0):
        vals = [float(x) for x in (offset, amplitude, cycles, phase)]
        if not all(math.isfinite(x) for x in vals):
            raise TrajectoryError("sine curve parameters must be finite")
        self.offset, self.amplitude, self.cycles, self.phase = vals

    @property
    def dim(self) -> int:
        return 1

    @property
    def length(self) -> float:
        return 1.0

    def eval(self, u):
        w = 2 * math.pi * self.cycles
        x = w * u + self.phase
        A = self.amplitude
        s, c = np.sin(x)[:, None], np.cos(x)[:, None]
        return self.offset + A * s, A * w * c, -A * w**2 * s, -A * w**3 * c


# -- orientation ---------------------------------------------------------------

def euler_zyx_to_matrix(e) -> np.ndarray:
    """R = Rz(gamma) Ry(beta) Rx(alpha) for e = (alpha, beta, gamma), shape (..., 3) -> (..., 3, 3)."""
    e = np.asarray(e, dtype=float)
    # scipy's extrinsic "xyz" = Rz(g) Ry(b) Rx(a)
    return Rotation.from_euler("xyz", e.reshape(-1, 3)).as_matrix().reshape(e.shape[:-1] + (3, 3))


def matrix_to_euler_zyx(R) -> np.ndarray:
    """Inverse of :func:`euler_zyx_to_matrix`, beta in [-pi/2, pi/2], shape (..., 3, 3) -> (..., 3)."""
    R = np.asarray(R, dtype=float)
    with warnings.catch_warnings():
        # at cos(beta) = 0 scipy warns about gimbal lock; callers that need rates raise TrajectoryError
        warnings.simplefilter("ignore", UserWarning)
        e = Rotation.from_matrix(R.reshape(-1, 3, 3)).as_euler("xyz")
    return e.reshape(R.shape[:-2] + (3,))


def euler_rate_matrix(e) -> np.ndarray:
    """E(e) with omega_world = E e_dot for R = Rz(g) Ry(b) Rx(a); shape (..., 3) -> (..., 3, 3)."""
    e = np.asarray(e, dtype=float)
    b, g = e[..., 1], e[..., 2]
    cb, sb, cg, sg = np.cos(b), np.sin(b), np.cos(g), np.sin(g)
    E = np.zeros(e.shape[:-1] + (3, 3))
    E[..., 0, 0] = cg * cb
    E[..., 0, 1] = -sg
    E[..., 1, 0] = sg * cb
    E[..., 1, 1] = cg
    E[..., 2, 0] = -sb
    E[..., 2, 2] = 1.0
    return E


def _euler_rate_matrix_dot(e, ed) -> np.ndarray:
    """dE/dt given Euler angles and their rates."""
    b, g = e[..., 1], e[..., 2]
    bd, gd = ed[..., 1], ed[..., 2]
    cb, sb, cg, sg = np.cos(b), np.sin(b), np.cos(g), np.sin(g)
    Ed = np.zeros(e.shape[:-1] + (3, 3))
    Ed[..., 0, 0] = -sg * gd * cb - cg * sb * bd
    Ed[..., 0, 1] = -cg * gd
    Ed[..., 1, 0] = cg * gd * cb - sg * sb * bd
    Ed[..., 1, 1] = -sg * gd
    Ed[..., 2, 0] = -cb * bd
    return Ed


def _euler_rate_matrix_ddot(e, ed, edd) -> np.ndarray:
    """d^2E/dt^2 given Euler angles, rates and accelerations."""
    b, g = e[..., 1], e[..., 2]
    bd, gd = ed[..., 1], ed[..., 2]
    bdd, gdd = edd[..., 1], edd[..., 2]
    cb, sb, cg, sg = np.cos(b), np.sin(b), np.cos(g), np.sin(g)
    E2 = np.zeros(e.shape[:-1] + (3, 3))
    # d/dt(-sg cb gd - cg sb bd)
    E2[..., 0, 0] = (-cg * cb * gd**2 + sg * sb * gd * bd - sg * cb * gdd
                     + sg * sb * gd * bd - cg * cb * bd**2 - cg * sb * bdd)
    E2[..., 0, 1] = sg * gd**2 - cg * gdd
    # d/dt(cg cb gd - sg sb bd)
    E2[..., 1, 0] = (-sg * cb * gd**2 - cg * sb * gd * bd + cg * cb * gdd
                     - cg * sb * gd * bd - sg * cb * bd**2 - sg * sb * bdd)
    E2[..., 1, 1] = -cg * gd**2 - sg * gdd
    E2[..., 2, 0] = sb * bd**2 - cb * bdd
    return E2


def euler_rates_to_omega(e, ed) -> np.ndarray:
    """World-frame angular velocity for Euler angles e and rates ed, shape (..., 3)."""
    return np.einsum("...ij,...j->...i", euler_rate_matrix(e), np.asarray(ed, dtype=float))


def _solve3(E, rhs):
    cb = np.hypot(E[..., 0, 0], E[..., 1, 0])
    if np.any(np.abs(cb) < 1e-9):
        raise TrajectoryError("Euler-angle representation singular (cos(beta) = 0) along the path")
    return np.linalg.solve(E, rhs[..., None])[..., 0]


def omega_to_euler_derivatives(e, w1, w2, w3):
    """Euler-angle derivatives (e', e'', e''') from the angular velocity and its derivatives.

    All arrays shape (N, 3); ``w1 = omega``, ``w2 = omega'``, ``w3 = omega''``
    (world frame, derivatives with respect to the same variable as e').
    """
    E = euler_rate_matrix(e)
    e1 = _solve3(E, w1)
    Ed = _euler_rate_matrix_dot(e, e1)
    e2 = _solve3(E, w2 - np.einsum("...ij,...j->...i", Ed, e1))
    Edd = _euler_rate_matrix_ddot(e, e1, e2)
    e3 = _solve3(E, w3 - np.einsum("...ij,...j->...i", Edd, e1) - 2 * np.einsum("...ij,...j->...i", Ed, e2))
    return e1, e2, e3


class SlerpCurve(Curve):
    """Geodesic orientation interpolation from R0 to R1, returned as Euler angles (alpha, beta, gamma).

    ``R(u) = R0 Exp(u theta k)`` (the quaternion slerp); world angular
    velocity per unit u is the constant ``R0 k theta``.  Output: e(u) and its
    analytic u-derivatives (see module docstring).  Angles are unwrapped
    continuously from the start angles ``e0``.
    """

    def __init__(self, e0, e1):
        self.e0 = _vec(e0, "start orientation (alpha, beta, gamma)", 3)
        self.e1 = _vec(e1, "end orientation (alpha, beta, gamma)", 3)
        R0 = euler_zyx_to_matrix(self.e0)
        R1 = euler_zyx_to_matrix(self.e1)
        self._R0 = Rotation.from_matrix(R0)
        rv = (self._R0.inv() * Rotation.from_matrix(R1)).as_rotvec()   # body-frame rotation vector
        self._rv = rv
        self._w_world = R0 @ rv                                         # omega per unit u, world frame
        self._theta = float(np.linalg.norm(rv))

    @property
    def dim(self) -> int:
        return 3

    @property
    def length(self) -> float:
        return self._theta if self._theta > 0 else 1.0

    @property
    def angle(self) -> float:
        """Total rotation angle [rad]."""
        return self._theta

    def eval(self, u):
        n = u.size
        R = (self._R0 * Rotation.from_rotvec(u[:, None] * self._rv)).as_matrix()
        e = matrix_to_euler_zyx(R)
        # unwrap relative to the start angles (alpha and gamma can cross +-pi)
        e = self.e0 + (e - self.e0 + np.pi) % (2 * np.pi) - np.pi
        w1 = np.broadcast_to(self._w_world, (n, 3)).copy()
        z = np.zeros((n, 3))
        e1, e2, e3 = omega_to_euler_derivatives(e, w1, z, z.copy())
        return e, e1, e2, e3


# -- timed paths -----------------------------------------------------------------

class PathTrajectory(Trajectory):
    """A curve timed by a law: ``x(t) = curve(law(t))`` with exact chain-rule derivatives."""

    def __init__(self, curve: Curve, law: TimingLaw, names=None):
        if not isinstance(curve, Curve):
            raise TrajectoryError(f"expected a Curve, got {curve!r}")
        self.curve, self.law = curve, law
        self.names = None if names is None else tuple(names)

    @property
    def duration_s(self) -> float:
        return self.law.duration_s

    @property
    def dim(self) -> int:
        return self.curve.dim

    def _eval(self, t):
        s, sd, sdd, sddd = (x[:, 0] for x in self.law._eval(t))
        p, p1, p2, p3 = self.curve.eval(np.clip(s, 0.0, 1.0))
        sd, sdd, sddd = sd[:, None], sdd[:, None], sddd[:, None]
        return (p, p1 * sd, p2 * sd**2 + p1 * sdd,
                p3 * sd**3 + 3 * p2 * sd * sdd + p1 * sddd)


def _law(duration_s, profile, ramp_s=None) -> TimingLaw:
    if profile == "constant_speed":
        T = check_duration(duration_s)
        return ConstantSpeedLaw(T, T * 0.1 if ramp_s is None else ramp_s)
    return ShapeLaw(profile, duration_s)


def line(a, b, duration_s: float, profile: str = "quintic") -> PathTrajectory:
    """Straight line from ``a`` to ``b`` timed by ``profile`` (any shape of :mod:`.profiles`
    or ``"constant_speed"``)."""
    return PathTrajectory(LineCurve(a, b), _law(duration_s, profile))


def _plane_basis(dim, normal):
    if dim == 2:
        if normal is not None:
            raise TrajectoryError("a 2-D circle takes no normal")
        return np.array([1.0, 0.0]), np.array([0.0, 1.0])
    if dim != 3:
        raise TrajectoryError(f"circle centre must be 2-D or 3-D, got {dim}-D")
    nrm = np.array([0.0, 0.0, 1.0]) if normal is None else _vec(normal, "normal", 3)
    if np.linalg.norm(nrm) == 0:
        raise TrajectoryError("circle normal must be non-zero")
    nrm = nrm / np.linalg.norm(nrm)
    ref = np.array([1.0, 0.0, 0.0]) if abs(nrm[0]) < 0.9 else np.array([0.0, 1.0, 0.0])
    e1 = ref - (ref @ nrm) * nrm
    e1 /= np.linalg.norm(e1)
    return e1, np.cross(nrm, e1)


def circle(center, radius: float, duration_s: float, *, turns: float = 1.0, start_angle: float = 0.0,
           normal=None, ramp_s: float | None = None, profile: str = "constant_speed") -> PathTrajectory:
    """Circle (2-D, or 3-D in the plane normal to ``normal``) at constant speed.

    Starts at angle ``start_angle`` (from e1; e1 = x for 2-D and for the default
    normal z) and runs ``turns`` turns (negative: clockwise).  With
    ``profile="constant_speed"`` the speed ramps up from rest during ``ramp_s``
    (default 10 % of the duration) and down at the end.
    """
    c = _vec(center, "circle centre")
    e1, e2 = _plane_basis(c.size, normal)
    if not np.isfinite(turns) or turns == 0:
        raise TrajectoryError(f"turns must be finite and non-zero, got {turns!r}")
    arc = ArcCurve(c, radius, start_angle, 2 * math.pi * turns, e1, e2)
    return PathTrajectory(arc, _law(duration_s, profile, ramp_s))


def _fillet(V, d1, d2, r):
    """Arc of radius r tangent to incoming unit direction d1 and outgoing d2 at corner V."""
    cosd = float(np.clip(d1 @ d2, -1.0, 1.0))
    delta = math.acos(cosd)
    if delta < 1e-12:
        return None, V, V
    if math.pi - delta < 1e-9:
        raise TrajectoryError("cannot blend a corner that reverses direction")
    t = r * math.tan(delta / 2)
    P1 = V - t * d1
    P2 = V + t * d2
    n1 = d2 - cosd * d1
    n1 /= np.linalg.norm(n1)
    C = P1 + r * n1
    return ArcCurve(C, r, 0.0, delta, -n1, d1), P1, P2


def polygon(vertices, duration_s: float, *, closed: bool = True, corners: str = "stop",
            blend_radius: float = 0.0, profile: str | None = None, ramp_s: float | None = None) -> Trajectory:
    """Polygon through ``vertices`` (shape (K, dim)), starting and ending at ``vertices[0]`` if closed.

    Parameters
    ----------
    corners : {"stop", "blend"}
        ``"stop"``: one rest-to-rest move per edge (``profile``, default
        ``"quintic"``), each edge's duration proportional to its length.
        ``"blend"``: interior corners replaced by circular fillets of
        ``blend_radius`` and the whole path traversed with one law (default
        ``"constant_speed"``: constant speed, ramps at the start/end only;
        acceleration ``v^2/r`` on the fillets, so it steps at fillet ends).
    """
    V = np.asarray(vertices, dtype=float)
    if V.ndim != 2 or V.shape[0] < 2 or not np.all(np.isfinite(V)):
        raise TrajectoryError(f"vertices must be a finite (K>=2, dim) array, got {np.shape(vertices)}")
    pts = np.vstack([V, V[:1]]) if closed else V
    edges = np.diff(pts, axis=0)
    lens = np.linalg.norm(edges, axis=1)
    if np.any(lens <= 0):
        raise TrajectoryError("consecutive polygon vertices must differ")
    T = check_duration(duration_s)
    if corners == "stop":
        prof = profile or "quintic"
        segs = [PathTrajectory(LineCurve(pts[i], pts[i + 1]), ShapeLaw(prof, T * lens[i] / lens.sum()))
                for i in range(len(edges))]
        return Sequence(segs)
    if corners != "blend":
        raise TrajectoryError(f"corners must be 'stop' or 'blend', got {corners!r}")
    r = float(blend_radius)
    if not r > 0:
        raise TrajectoryError(f"blend_radius must be > 0 for blended corners, got {blend_radius!r}")
    dirs = edges / lens[:, None]
    pieces: list[Curve] = []
    cur = pts[0]
    for i in range(1, len(pts) - 1):
        arc, P1, P2 = _fillet(pts[i], dirs[i - 1], dirs[i], r)
        if arc is None:
            continue
        # fillet must fit: tangent lengths of adjacent corners must not overlap the edges
        if (P1 - cur) @ dirs[i - 1] < -1e-12:
            raise TrajectoryError(f"blend_radius {r} too large for the edge ending at vertex {i}")
        if np.linalg.norm(P1 - cur) > 1e-12:
            pieces.append(LineCurve(cur, P1))
        pieces.append(arc)
        cur = P2
    if (pts[-1] - cur) @ dirs[-1] < -1e-12:
        raise TrajectoryError(f"blend_radius {r} too large for the last edge")
    if np.linalg.norm(pts[-1] - cur) > 1e-12:
        pieces.append(LineCurve(cur, pts[-1]))
    return PathTrajectory(CompositeCurve(pieces), _law(T, profile or "constant_speed", ramp_s))


def square(start, side: float, duration_s: float, *, first_direction=(1.0, 0.0),
           ccw: bool = True, **kw) -> Trajectory:
    """Closed square of ``side`` [m] starting and ending at corner ``start`` (2-D).

    ``first_direction`` is the direction of the first edge; the next edges turn
    by +90 deg (``ccw``) or -90 deg.  Other keywords go to :func:`polygon`.
    """
    p0 = _vec(start, "square start", 2)
    if not (np.isfinite(side) and side > 0):
        raise TrajectoryError(f"side must be > 0, got {side!r}")
    d = _vec(first_direction, "first_direction", 2)
    d = d / np.linalg.norm(d)
    n = np.array([-d[1], d[0]]) if ccw else np.array([d[1], -d[0]])
    verts = np.array([p0, p0 + side * d, p0 + side * (d + n), p0 + side * n])
    return polygon(verts, duration_s, closed=True, **kw)


def planar_circle_pose(center, radius: float, duration_s: float, *, phi0: float = 0.0,
                       phi_amplitude: float = 0.0, phi_cycles: float = 1.0, turns: float = 1.0,
                       start_angle: float = 0.0, ramp_s: float | None = None) -> PathTrajectory:
    """Planar pose path (x, y, phi): circle of the platform centre with
    ``phi = phi0 + phi_amplitude sin(2 pi phi_cycles u)``, where ``u`` is the
    fraction of the path covered (so phi is tied to the position along the circle).
    """
    c = _vec(center, "circle centre", 2)
    arc = ArcCurve(c, radius, start_angle, 2 * math.pi * turns)
    curve = StackedCurve([arc, SineCurve(phi0, phi_amplitude, phi_cycles)], length=arc.length)
    return PathTrajectory(curve, _law(duration_s, "constant_speed", ramp_s), names=("x", "y", "phi"))


def pose_move(pose0, pose1, duration_s: float, profile: str = "quintic") -> Trajectory:
    """Rest-to-rest move between poses.

    3-vectors ``(x, y, phi)``: straight line in all three coordinates.
    6-vectors ``(x, y, z, alpha, beta, gamma)``: straight line in position,
    slerp in orientation (Euler angles of R = Rz Ry Rx with analytic rates).
    """
    p0 = _vec(pose0, "start pose")
    p1 = _vec(pose1, "end pose", p0.size)
    law = _law(duration_s, profile)
    if p0.size == 6:
        curve = StackedCurve([LineCurve(p0[:3], p1[:3]), SlerpCurve(p0[3:], p1[3:])])
        return PathTrajectory(curve, law, names=("x", "y", "z", "alpha", "beta", "gamma"))
    if p0.size == 3:
        return PathTrajectory(LineCurve(p0, p1), law, names=("x", "y", "phi"))
    raise TrajectoryError(f"poses must have 3 (planar) or 6 (spatial) coordinates, got {p0.size}")

