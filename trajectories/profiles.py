"""Point-to-point timing laws and synchronised multi-axis moves.

A *timing law* is a scalar trajectory ``s(t)`` going from 0 at ``t = 0`` to 1 at
``t = T`` (dimensionless), with exact derivatives.  A multi-axis move is
``q(t) = q0 + (q1 - q0) s(t)``: every axis starts and ends together and moves
along the straight joint-space (or task-space) segment, so the slowest axis
sets the duration and the other axes are stretched with the same profile
shape.

Shapes (``tau = t / T``)
-------------------------
==================  =====================================  ===========  ===========  ===========
name                s(tau)                                 max s' * T   max s''*T^2  max s'''*T^3
==================  =====================================  ===========  ===========  ===========
``cubic``           3 tau^2 - 2 tau^3                      3/2          6            12
``quintic``         10 tau^3 - 15 tau^4 + 6 tau^5          15/8         10/sqrt(3)   60
``minimum_jerk``    same polynomial as ``quintic`` (the rest-to-rest minimum-jerk solution)
``cycloidal``       tau - sin(2 pi tau) / (2 pi)           2            2 pi         4 pi^2
``septic``          35 tau^4 - 84 tau^5 + 70 tau^6 - 20 tau^7  35/16    7.5132       52.5
==================  =====================================  ===========  ===========  ===========

The cycloidal law has a sinusoidal acceleration whose end points are
inflection points (velocity and acceleration both zero), as used in seed 000.
``cubic`` has acceleration steps at the ends (infinite jerk there, not
represented in the sampled jerk).

Limit-based laws: :func:`trapezoidal_law` (bang-coast-bang acceleration; its
jerk is a train of Dirac impulses at the switching instants, reported as 0)
and :func:`double_s_law` (time-optimal rest-to-rest motion under velocity,
acceleration and jerk bounds, piecewise-constant jerk, 7 phases, including the
cases where the maximum velocity and/or acceleration are not reached; see
Biagiotti & Melchiorri, *Trajectory Planning for Automatic Machines and
Robots*, 2008, sec. 3.4).
"""

from __future__ import annotations

import math

import numpy as np
from scipy.interpolate import PPoly

from dynamics.errors import TrajectoryError

from .base import Trajectory, check_duration

__all__ = [
    "TimingLaw", "ShapeLaw", "PiecewiseLaw", "ConstantSpeedLaw", "SHAPES",
    "shape_law", "trapezoidal_law", "double_s_law", "double_s_phases", "constant_speed_law",
    "PointToPoint", "point_to_point",
]

_TWO_PI = 2.0 * math.pi

#: peak |s'|, |s''|, |s'''| of the normalised shapes (T = 1)
SHAPE_PEAKS: dict[str, tuple[float, float, float]] = {
    "cubic": (1.5, 6.0, 12.0),
    "quintic": (15.0 / 8.0, 10.0 / math.sqrt(3.0), 60.0),
    "minimum_jerk": (15.0 / 8.0, 10.0 / math.sqrt(3.0), 60.0),
    "cycloidal": (2.0, _TWO_PI, _TWO_PI**2),
    "septic": (35.0 / 16.0, 7.513188404399293, 52.5),
    "linear": (1.0, 0.0, 0.0),
}
SHAPES = tuple(k for k in SHAPE_PEAKS if k != "linear")


class TimingLaw(Trajectory):
    """A scalar law ``s(t)``, ``dim == 1``, with ``s(0) = 0`` and ``s(T) = 1``."""

    @property
    def dim(self) -> int:
        return 1

    def derivatives(self, t) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(s, s', s'', s''')`` at times ``t`` (clamped), each of shape (N,) [1/s^k]."""
        smp = self.sample(np.atleast_1d(np.asarray(t, dtype=float)))
        return smp.pos[:, 0], smp.vel[:, 0], smp.acc[:, 0], smp.jerk[:, 0]

    def scaled_to(self, duration_s: float) -> "TimingLaw":
        """The same shape stretched uniformly to ``duration_s`` (subclasses return their own type)."""
        return _ScaledLaw(self, check_duration(duration_s) / self.duration_s)


class _ScaledLaw(TimingLaw):
    """``s(t / k)`` for any timing law (generic uniform time scaling)."""

    def __init__(self, base: TimingLaw, k: float):
        self.base, self.k = base, float(k)

    @property
    def duration_s(self) -> float:
        return self.base.duration_s * self.k

    def _eval(self, t):
        k = self.k
        s, v, a, j = self.base._eval(np.clip(t / k, 0.0, self.base.duration_s))
        return s, v / k, a / k**2, j / k**3


def _shape(kind: str, tau: np.ndarray):
    if kind == "cubic":
        return (3 * tau**2 - 2 * tau**3, 6 * tau - 6 * tau**2, 6 - 12 * tau,
                np.full_like(tau, -12.0))
    if kind in ("quintic", "minimum_jerk"):
        return (tau**3 * (10 - 15 * tau + 6 * tau**2),
                30 * tau**2 * (1 - tau) ** 2,
                60 * tau * (1 - 3 * tau + 2 * tau**2),
                60 * (1 - 6 * tau + 6 * tau**2))
    if kind == "cycloidal":
        w = _TWO_PI * tau
        return (tau - np.sin(w) / _TWO_PI, 1 - np.cos(w), _TWO_PI * np.sin(w),
                _TWO_PI**2 * np.cos(w))
    if kind == "septic":
        return (35 * tau**4 - 84 * tau**5 + 70 * tau**6 - 20 * tau**7,
                140 * tau**3 - 420 * tau**4 + 420 * tau**5 - 140 * tau**6,
                420 * tau**2 - 1680 * tau**3 + 2100 * tau**4 - 840 * tau**5,
                840 * tau - 5040 * tau**2 + 8400 * tau**3 - 4200 * tau**4)
    if kind == "linear":
        return tau.copy(), np.ones_like(tau), np.zeros_like(tau), np.zeros_like(tau)
    raise TrajectoryError(f"unknown profile shape {kind!r}; expected one of {sorted(SHAPE_PEAKS)}")


class ShapeLaw(TimingLaw):
    """A fixed-shape law ``s(t) = shape(t / T)`` (see module table).

    ``"linear"`` (constant speed, ``s = t/T``) is allowed but does not start or
    end at rest.
    """

    def __init__(self, kind: str, duration_s: float):
        if kind not in SHAPE_PEAKS:
            raise TrajectoryError(f"unknown profile shape {kind!r}; expected one of {sorted(SHAPE_PEAKS)}")
        self.kind = kind
        self._T = check_duration(duration_s)

    @property
    def duration_s(self) -> float:
        return self._T

    def scaled_to(self, duration_s: float) -> "ShapeLaw":
        return ShapeLaw(self.kind, duration_s)

    def _eval(self, t):
        T = self._T
        s, d1, d2, d3 = _shape(self.kind, t / T)
        return s[:, None], (d1 / T)[:, None], (d2 / T**2)[:, None], (d3 / T**3)[:, None]


def shape_law(kind: str, duration_s: float) -> ShapeLaw:
    """Fixed-shape timing law ``kind`` lasting ``duration_s`` seconds."""
    return ShapeLaw(kind, duration_s)


class PiecewiseLaw(TimingLaw):
    """A piecewise-polynomial law (``scipy.interpolate.PPoly`` in t, degree <= 3).

    Used for trapezoidal and double-S laws.  Derivatives are exact inside each
    piece; at breakpoints the left/right values of discontinuous derivatives
    are those of the piece starting there.
    """

    def __init__(self, pp: PPoly, *, kind: str = "piecewise", limits: tuple | None = None,
                 phases: dict | None = None):
        self.pp = pp
        self._d = [pp.derivative(k) if k else pp for k in range(4)]
        self.kind = kind
        #: (vmax, amax, jmax) the law was built for (normalised units) or None
        self.limits = limits
        #: phase durations (documentation / tests)
        self.phases = phases or {}

    @property
    def duration_s(self) -> float:
        return float(self.pp.x[-1] - self.pp.x[0])

    def _eval(self, t):
        return tuple(d(t)[:, None] for d in self._d)

    def scaled_to(self, duration_s: float) -> "PiecewiseLaw":
        k = check_duration(duration_s) / self.duration_s
        c = self.pp.c.copy()
        deg = c.shape[0] - 1
        for i in range(deg + 1):   # coefficient of (t - x_j)^(deg - i) scales by k^-(deg - i)
            c[i] /= k ** (deg - i)
        lim = None if self.limits is None else tuple(x / k**(i + 1) for i, x in enumerate(self.limits))
        return PiecewiseLaw(PPoly(c, self.pp.x * k), kind=self.kind, limits=lim,
                            phases={n: v * k for n, v in self.phases.items()})


def _ppoly_from_jerks(durations, jerks, a0=0.0, v0=0.0, p0=0.0) -> PPoly:
    """Piecewise-cubic position from piecewise-constant jerk (zero-length pieces dropped)."""
    x = [0.0]
    coefs = []
    p, v, a = p0, v0, a0
    for T, j in zip(durations, jerks):
        if T <= 0:
            continue
        coefs.append([j / 6.0, a / 2.0, v, p])
        p = p + v * T + a * T**2 / 2 + j * T**3 / 6
        v = v + a * T + j * T**2 / 2
        a = a + j * T
        x.append(x[-1] + T)
    return PPoly(np.array(coefs).T, np.array(x))


def _ppoly_from_accels(durations, accels) -> PPoly:
    x = [0.0]
    coefs = []
    p = v = 0.0
    for T, a in zip(durations, accels):
        if T <= 0:
            continue
        coefs.append([0.0, a / 2.0, v, p])
        p = p + v * T + a * T**2 / 2
        v = v + a * T
        x.append(x[-1] + T)
    return PPoly(np.array(coefs).T, np.array(x))


def _positive_limit(x, name) -> float:
    try:
        v = float(x)
    except (TypeError, ValueError) as err:
        raise TrajectoryError(f"{name} must be a number, got {x!r}") from err
    if not v > 0 or math.isnan(v):
        raise TrajectoryError(f"{name} must be > 0, got {x!r}")
    return v


def trapezoidal_law(*, vmax: float | None = None, amax: float | None = None,
                    duration_s: float | None = None, accel_fraction: float = 1.0 / 3.0) -> PiecewiseLaw:
    """Trapezoidal-velocity law for a unit displacement.

    Either time-optimal under ``vmax`` [1/s] and ``amax`` [1/s^2] (in units of
    the displacement; a triangle when ``vmax`` is not reached), or with a given
    ``duration_s`` and acceleration time ``accel_fraction * duration_s``
    (``0 < accel_fraction <= 1/2``).  If all three are given the law lasts
    ``duration_s`` and :class:`InfeasibleTrajectoryError` is *not* raised here:
    use :func:`point_to_point` for limit-checked construction.
    """
    if duration_s is not None:
        T = check_duration(duration_s)
        f = float(accel_fraction)
        if not 0 < f <= 0.5:
            raise TrajectoryError(f"accel_fraction must be in (0, 0.5], got {accel_fraction!r}")
        Ta = f * T
        v = 1.0 / (T - Ta)
        a = v / Ta
        pp = _ppoly_from_accels([Ta, T - 2 * Ta, Ta], [a, 0.0, -a])
        return PiecewiseLaw(pp, kind="trapezoidal", limits=(v, a, math.inf),
                            phases={"Ta": Ta, "Tv": T - 2 * Ta})
    if vmax is None or amax is None:
        raise TrajectoryError("trapezoidal law needs vmax and amax, or duration_s")
    v = _positive_limit(vmax, "vmax")
    a = _positive_limit(amax, "amax")
    Ta = v / a
    if Ta * v >= 1.0:          # vmax not reached: triangle
        Ta = math.sqrt(1.0 / a)
        Tv = 0.0
    else:
        Tv = 1.0 / v - Ta
    pp = _ppoly_from_accels([Ta, Tv, Ta], [a, 0.0, -a])
    return PiecewiseLaw(pp, kind="trapezoidal", limits=(v, a, math.inf), phases={"Ta": Ta, "Tv": Tv})


def double_s_phases(h: float, vmax: float, amax: float, jmax: float) -> tuple[float, float, float]:
    """Phase durations ``(Tj, Ta, Tv)`` of the time-optimal rest-to-rest double-S.

    ``h > 0`` is the displacement; ``Tj`` the jerk phase, ``Ta`` the whole
    acceleration phase (= deceleration phase), ``Tv`` the cruise.  Total
    duration ``2 Ta + Tv``.
    """
    if vmax * jmax >= amax**2:
        Tj = amax / jmax
        Ta = Tj + vmax / amax
    else:
        Tj = math.sqrt(vmax / jmax)
        Ta = 2.0 * Tj
    Tv = h / vmax - Ta
    if Tv >= 0:
        return Tj, Ta, Tv
    # vmax not reached
    if h >= 2.0 * amax**3 / jmax**2:
        Tj = amax / jmax
        Ta = Tj / 2.0 + math.sqrt((Tj / 2.0) ** 2 + h / amax)
    else:                      # neither vmax nor amax reached
        Tj = (h / (2.0 * jmax)) ** (1.0 / 3.0)
        Ta = 2.0 * Tj
    return Tj, Ta, 0.0


def double_s_law(vmax: float, amax: float, jmax: float) -> PiecewiseLaw:
    """Time-optimal jerk-limited (double-S) law for a unit displacement.

    Parameters
    ----------
    vmax, amax, jmax : float
        Bounds on |s'| [1/s], |s''| [1/s^2], |s'''| [1/s^3] (in units of the
        displacement: divide physical limits by |q1 - q0|).
    """
    v = _positive_limit(vmax, "vmax")
    a = _positive_limit(amax, "amax")
    j = _positive_limit(jmax, "jmax")
    Tj, Ta, Tv = double_s_phases(1.0, v, a, j)
    pp = _ppoly_from_jerks([Tj, Ta - 2 * Tj, Tj, Tv, Tj, Ta - 2 * Tj, Tj],
                           [j, 0.0, -j, 0.0, -j, 0.0, j])
    return PiecewiseLaw(pp, kind="double_s", limits=(v, a, j), phases={"Tj": Tj, "Ta": Ta, "Tv": Tv})


class ConstantSpeedLaw(TimingLaw):
    """Constant speed with smooth start and stop.

    ``s`` accelerates from rest during ``ramp_s`` with acceleration
    ``(V/Tr) (1 - cos(2 pi t / Tr))`` (zero acceleration and jerk at both ends
    of the ramp), cruises at ``V = 1 / (T - Tr)``, and decelerates
    symmetrically.  With ``ramp_s = 0`` it is the pure constant-speed law
    ``s = t / T`` (velocity steps at the ends).
    """

    def __init__(self, duration_s: float, ramp_s: float = 0.0):
        self._T = check_duration(duration_s)
        r = float(ramp_s)
        if not 0 <= r <= self._T / 2 or not math.isfinite(r):
            raise TrajectoryError(f"ramp_s must be in [0, duration_s/2] = [0, {self._T / 2}], got {ramp_s!r}")
        self.ramp_s = r
        self.speed = 1.0 / (self._T - r)

    @property
    def duration_s(self) -> float:
        return self._T

    def scaled_to(self, duration_s: float) -> "ConstantSpeedLaw":
        k = check_duration(duration_s) / self._T
        return ConstantSpeedLaw(duration_s, self.ramp_s * k)

    def _ramp(self, t):
        V, Tr = self.speed, self.ramp_s
        w = _TWO_PI / Tr
        c = V / Tr
        return (c * (t**2 / 2 + (np.cos(w * t) - 1) / w**2), c * (t - np.sin(w * t) / w),
                c * (1 - np.cos(w * t)), c * w * np.sin(w * t))

    def _eval(self, t):
        V, Tr, T = self.speed, self.ramp_s, self._T
        s = V * (t - Tr / 2)
        sd = np.full_like(t, V)
        sdd = np.zeros_like(t)
        sddd = np.zeros_like(t)
        if Tr > 0:
            m = t < Tr
            if np.any(m):
                s[m], sd[m], sdd[m], sddd[m] = self._ramp(t[m])
            m = t > T - Tr
            if np.any(m):
                p, v, a, j = self._ramp(T - t[m])
                s[m], sd[m], sdd[m], sddd[m] = 1.0 - p, v, -a, j
        return s[:, None], sd[:, None], sdd[:, None], sddd[:, None]


def constant_speed_law(duration_s: float, ramp_s: float = 0.0) -> ConstantSpeedLaw:
    """See :class:`ConstantSpeedLaw`."""
    return ConstantSpeedLaw(duration_s, ramp_s)


class PointToPoint(Trajectory):
    """Straight move ``q(t) = q0 + (q1 - q0) s(t)`` for a timing law ``s``.

    Parameters
    ----------
    q0, q1 : array_like, shape (dim,)
        Start and end positions.
    law : TimingLaw
    names : tuple of str, optional
    """

    def __init__(self, q0, q1, law: TimingLaw, names=None):
        q0 = np.atleast_1d(np.asarray(q0, dtype=float))
        q1 = np.atleast_1d(np.asarray(q1, dtype=float))
        if q0.shape != q1.shape or q0.ndim != 1:
            raise TrajectoryError(f"start and end must be vectors of equal length, got {q0.shape} and {q1.shape}")
        if not (np.all(np.isfinite(q0)) and np.all(np.isfinite(q1))):
            raise TrajectoryError("start and end positions must be finite")
        self.q0, self.q1, self.law = q0, q1, law
        self._delta = q1 - q0
        self.names = None if names is None else tuple(names)

    @property
    def duration_s(self) -> float:
        return self.law.duration_s

    @property
    def dim(self) -> int:
        return self.q0.size

    def _eval(self, t):
        s, sd, sdd, sddd = self.law._eval(t)
        d = self._delta
        return self.q0 + s * d, sd * d, sdd * d, sddd * d


def _limit_vector(x, n, name):
    if x is None:
        return None
    arr = np.broadcast_to(np.asarray(x, dtype=float), (n,)).copy() if np.ndim(x) == 0 else np.asarray(x, dtype=float)
    if arr.shape != (n,):
        raise TrajectoryError(f"{name} must be a scalar or have shape ({n},), got shape {arr.shape}")
    if np.any(~(arr > 0)):
        raise TrajectoryError(f"{name} must be > 0 everywhere, got {arr!r}")
    return arr


def point_to_point(q0, q1, profile: str = "quintic", *, duration_s: float | None = None,
                   vmax=None, amax=None, jmax=None, accel_fraction: float = 1.0 / 3.0,
                   names=None) -> PointToPoint:
    """Synchronised rest-to-rest multi-axis move.

    Parameters
    ----------
    q0, q1 : array_like, shape (n,)
        Start and end positions.
    profile : str
        ``"cubic"``, ``"quintic"``, ``"minimum_jerk"``, ``"cycloidal"``,
        ``"septic"``, ``"trapezoidal"`` or ``"double_s"``.
    duration_s : float, optional
        Duration.  Without it the move is as short as the per-axis limits allow
        (the slowest axis sets the duration).  With it and limits, the
        duration must not be shorter than that minimum.
    vmax, amax, jmax : float or array_like (n,), optional
        Per-axis bounds on |velocity|, |acceleration|, |jerk| (units of q per
        s, s^2, s^3).  Fixed-shape profiles use those given; ``trapezoidal``
        needs vmax and amax (or a duration); ``double_s`` needs all three.
    accel_fraction : float
        For ``trapezoidal`` with a duration and no limits: acceleration time
        over duration.

    Returns
    -------
    PointToPoint

    Raises
    ------
    TrajectoryError
        Bad arguments (no duration and no limits, non-positive limits...).
    InfeasibleTrajectoryError
        ``duration_s`` is shorter than the limits allow.
    """
    from dynamics.errors import InfeasibleTrajectoryError

    q0 = np.atleast_1d(np.asarray(q0, dtype=float))
    q1 = np.atleast_1d(np.asarray(q1, dtype=float))
    if q0.shape != q1.shape or q0.ndim != 1:
        raise TrajectoryError(f"start and end must be vectors of equal length, got {q0.shape} and {q1.shape}")
    n = q0.size
    delta = np.abs(q1 - q0)
    moving = delta > 0
    vm, am, jm = (_limit_vector(x, n, nm) for x, nm in ((vmax, "vmax"), (amax, "amax"), (jmax, "jmax")))
    if duration_s is not None:
        duration_s = check_duration(duration_s)
    if not np.any(moving):
        if duration_s is None:
            raise TrajectoryError("start equals end: a duration_s is needed")
        return PointToPoint(q0, q1, ShapeLaw("quintic", duration_s), names=names)

    def norm_limit(lim):   # limit on s^(k): min over moving axes of lim_i / |delta_i|
        return None if lim is None else float(np.min(lim[moving] / delta[moving]))

    vs, as_, js = norm_limit(vm), norm_limit(am), norm_limit(jm)

    if profile in SHAPE_PEAKS and profile != "linear":
        pv, pa, pj = SHAPE_PEAKS[profile]
        t_min = 0.0
        for lim, peak, power in ((vs, pv, 1.0), (as_, pa, 0.5), (js, pj, 1.0 / 3.0)):
            if lim is not None:
                t_min = max(t_min, (peak / lim) ** power)
        if duration_s is None:
            if t_min == 0.0:
                raise TrajectoryError(f"profile {profile!r} needs duration_s or limits (vmax/amax/jmax)")
            duration_s = t_min
        elif duration_s < t_min * (1 - 1e-12):
            raise InfeasibleTrajectoryError(
                f"duration {duration_s:.6g} s is shorter than the {t_min:.6g} s the limits allow")
        return PointToPoint(q0, q1, ShapeLaw(profile, duration_s), names=names)

    if profile == "trapezoidal":
        if vs is None or as_ is None:
            if duration_s is None:
                raise TrajectoryError("trapezoidal profile needs vmax and amax, or duration_s")
            return PointToPoint(q0, q1, trapezoidal_law(duration_s=duration_s, accel_fraction=accel_fraction),
                                names=names)
        law = trapezoidal_law(vmax=vs, amax=as_)
    elif profile == "double_s":
        if vs is None or as_ is None or js is None:
            raise TrajectoryError("double_s profile needs vmax, amax and jmax")
        law = double_s_law(vs, as_, js)
    else:
        raise TrajectoryError(
            f"unknown profile {profile!r}; expected one of {sorted(SHAPES) + ['double_s', 'trapezoidal']}")
    if duration_s is not None:
        if duration_s < law.duration_s * (1 - 1e-12):
            raise InfeasibleTrajectoryError(
                f"duration {duration_s:.6g} s is shorter than the {law.duration_s:.6g} s the limits allow")
        law = law.scaled_to(duration_s)
    return PointToPoint(q0, q1, law, names=names)
