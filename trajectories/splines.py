"""Via-point splines with continuous acceleration.

``kind="cubic"``: :class:`scipy.interpolate.CubicSpline`, C2; ``bc="clamped"``
gives zero end velocities (the end accelerations are then generally non-zero,
so the motion has acceleration steps when started from rest), ``bc="natural"``
zero end accelerations (non-zero end velocities).

``kind="quintic"`` (default): a degree-5 B-spline through the points
(:func:`scipy.interpolate.make_interp_spline`) with zero velocity *and*
acceleration at both ends (``bc`` must be ``"clamped"``): C4 inside, starts and
ends at rest, jerk finite.
"""

from __future__ import annotations

import numpy as np
from scipy.interpolate import CubicSpline, make_interp_spline

from dynamics.errors import TrajectoryError

from .base import Trajectory

__all__ = ["ViaPointSpline"]


class ViaPointSpline(Trajectory):
    """Spline through via points at given times.

    Parameters
    ----------
    times_s : array_like, shape (K,)
        Strictly increasing times [s]; the trajectory runs over
        ``[0, times_s[-1] - times_s[0]]`` (shifted to start at 0).
    points : array_like, shape (K, dim)
        Positions at those times.
    kind : {"quintic", "cubic"}
    bc : {"clamped", "natural"}
        End conditions (see module docstring).
    """

    def __init__(self, times_s, points, kind: str = "quintic", bc: str = "clamped", names=None):
        t = np.asarray(times_s, dtype=float)
        P = np.asarray(points, dtype=float)
        if P.ndim == 1:
            P = P[:, None]
        if t.ndim != 1 or P.ndim != 2 or P.shape[0] != t.size:
            raise TrajectoryError(f"times_s (K,) and points (K, dim) must match, got {t.shape} and {P.shape}")
        if not (np.all(np.isfinite(t)) and np.all(np.isfinite(P))):
            raise TrajectoryError("via-point times and positions must be finite")
        if t.size < 2 or np.any(np.diff(t) <= 0):
            raise TrajectoryError("via-point times must be strictly increasing (at least 2 points)")
        t = t - t[0]
        self.times_s = t
        self.points = P
        self.kind = kind
        self.bc = bc
        self.names = None if names is None else tuple(names)
        try:
            self._build(t, P, kind, bc)
        except ValueError as err:
            if isinstance(err, TrajectoryError):
                raise
            raise TrajectoryError(f"cannot build the via-point spline: {err}") from err
        self._d = [self._spl] + [self._spl.derivative(k) for k in (1, 2, 3)]

    def _build(self, t, P, kind, bc):
        if kind == "cubic":
            if bc == "clamped":
                bct = ((1, np.zeros(P.shape[1])), (1, np.zeros(P.shape[1])))
            elif bc == "natural":
                bct = "natural"
            else:
                raise TrajectoryError(f"bc must be 'clamped' or 'natural', got {bc!r}")
            self._spl = CubicSpline(t, P, axis=0, bc_type=bct)
        elif kind == "quintic":
            if bc != "clamped":
                raise TrajectoryError("quintic via-point splines only support bc='clamped' (rest at both ends)")
            if t.size < 2:
                raise TrajectoryError("quintic spline needs at least 2 via points")
            zeros = np.zeros(P.shape[1])
            ends = [(1, zeros), (2, zeros)]
            self._spl = make_interp_spline(t, P, k=5, bc_type=(ends, ends), axis=0)
        else:
            raise TrajectoryError(f"kind must be 'quintic' or 'cubic', got {kind!r}")

    @property
    def duration_s(self) -> float:
        return float(self.times_s[-1])

    @property
    def dim(self) -> int:
        return self.points.shape[1]

    def _eval(self, t):
        return tuple(np.asarray(d(t), dtype=float) for d in self._d)
