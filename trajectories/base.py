"""The trajectory protocol and generic combinators.

A trajectory is a function of time ``t`` in ``[0, duration_s]`` returning
position, velocity, acceleration and jerk of ``dim`` coordinates.  Outside the
interval it is *clamped*: it holds the end position with zero velocity,
acceleration and jerk (so a trajectory that does not end at rest has a velocity
step at ``duration_s`` when sampled beyond it; every trajectory built by this
package that is meant to be executed starts and ends at rest).

Units are those of the coordinates (SI, rad for angles); time is in seconds.

Sampling convention
-------------------
``sample(t)`` accepts a scalar ``t`` (returns arrays of shape ``(dim,)``) or an
array of shape ``(N,)`` (returns arrays of shape ``(N, dim)``).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Sequence as _Seq

import numpy as np

from dynamics.errors import TrajectoryError

__all__ = ["Sample", "Trajectory", "Hold", "Sequence", "Stack", "TimeScaled", "GridCache", "as_time",
           "check_duration"]


@dataclass(frozen=True, init=False)
class Sample:
    """Position, velocity, acceleration and jerk at one time or a batch of times.

    Each array has shape ``(dim,)`` for a scalar time or ``(N, dim)`` for ``N``
    times.  Units: coordinate units per s^k.
    """

    pos: np.ndarray
    vel: np.ndarray
    acc: np.ndarray
    jerk: np.ndarray

    def __init__(self, pos: np.ndarray, vel: np.ndarray, acc: np.ndarray, jerk: np.ndarray):
        # the fields set in the instance dict: the generated __init__ of a frozen dataclass
        # (object.__setattr__ per field) cost 0.3 us more, once per control cycle
        d = self.__dict__
        d["pos"] = pos
        d["vel"] = vel
        d["acc"] = acc
        d["jerk"] = jerk

    def __iter__(self):
        return iter((self.pos, self.vel, self.acc, self.jerk))


def as_time(t) -> tuple[np.ndarray, bool]:
    """Return ``(t as a 1-D float array, was_scalar)``; raise on non-finite times."""
    arr = np.asarray(t, dtype=float)
    scalar = arr.ndim == 0
    arr = np.atleast_1d(arr)
    if arr.ndim != 1:
        raise TrajectoryError(f"time must be a scalar or a 1-D array, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise TrajectoryError("time values must be finite")
    return arr, scalar


#: longest single trajectory segment [s]; a longer session is several runs (its log and its
#: feasibility grid would otherwise not fit in memory)
DURATION_MAX_S = 3600.0
#: most samples :meth:`Trajectory.time_grid` hands out (an hour at 10 kHz)
GRID_SAMPLES_MAX = 36_000_000


def check_duration(duration_s, name: str = "duration_s", allow_zero: bool = False) -> float:
    """Validate a duration [s] (finite, positive, at most :data:`DURATION_MAX_S`) and return it."""
    try:
        d = float(duration_s)
    except (TypeError, ValueError) as err:
        raise TrajectoryError(f"{name} must be a number, got {duration_s!r}") from err
    if not np.isfinite(d) or d < 0 or (d == 0 and not allow_zero):
        op = ">= 0" if allow_zero else "> 0"
        raise TrajectoryError(f"{name} must be finite and {op}, got {duration_s!r}")
    if d > DURATION_MAX_S:
        raise TrajectoryError(f"{name} = {d:g} s is longer than {DURATION_MAX_S:g} s; split a longer session "
                              "into several runs")
    return d


class Trajectory(ABC):
    """A ``dim``-dimensional trajectory over ``[0, duration_s]``, clamped outside.

    Subclasses implement :meth:`_eval` for times already clamped to the
    interval; :meth:`sample` handles shapes and clamping.
    """

    #: names of the coordinates (optional, for plots/logs)
    names: tuple[str, ...] | None = None

    @property
    @abstractmethod
    def duration_s(self) -> float:
        """Total duration T [s]."""

    @property
    @abstractmethod
    def dim(self) -> int:
        """Number of coordinates."""

    @abstractmethod
    def _eval(self, t: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Evaluate at times ``t`` (shape (N,), inside [0, T]); return four (N, dim) arrays."""

    def sample(self, t) -> Sample:
        """Sample the trajectory.

        Parameters
        ----------
        t : float or array_like, shape (N,)
            Time(s) [s].  Times before 0 or after ``duration_s`` hold the end
            positions with zero derivatives.

        Returns
        -------
        Sample
            Arrays of shape ``(dim,)`` (scalar t) or ``(N, dim)``.
        """
        tt, scalar = as_time(t)
        T = self.duration_s
        before = tt < 0.0
        after = tt > T
        tc = np.clip(tt, 0.0, T)
        p, v, a, j = (np.array(x, dtype=float, copy=True) for x in self._eval(tc))
        out = before | after
        if np.any(out):
            v[out] = 0.0
            a[out] = 0.0
            j[out] = 0.0
        if scalar:
            return Sample(p[0], v[0], a[0], j[0])
        return Sample(p, v, a, j)

    @property
    def start(self) -> np.ndarray:
        """Position at t = 0, shape (dim,)."""
        return self.sample(0.0).pos

    @property
    def end(self) -> np.ndarray:
        """Position at t = duration_s, shape (dim,)."""
        return self.sample(self.duration_s).pos

    def time_grid(self, dt_s: float) -> np.ndarray:
        """Times ``0, dt, 2 dt, ...`` up to and including ``duration_s``, shape (N,)."""
        dt = check_duration(dt_s, "dt_s")
        n = int(np.floor(self.duration_s / dt + 1e-9))
        if n > GRID_SAMPLES_MAX:
            raise TrajectoryError(f"a grid of {n} samples ({self.duration_s:g} s every {dt:g} s) is more than "
                                  f"{GRID_SAMPLES_MAX}; use a larger step or a shorter trajectory")
        t = np.arange(n + 1) * dt
        if t[-1] < self.duration_s - 1e-12:
            t = np.append(t, self.duration_s)
        return t

    def __repr__(self) -> str:  # pragma: no cover - cosmetic
        return f"<{type(self).__name__} dim={self.dim} T={self.duration_s:.4g} s>"


class Hold(Trajectory):
    """Stay at ``position`` (shape (dim,)) for ``duration_s`` seconds."""

    def __init__(self, position, duration_s: float):
        p = np.atleast_1d(np.asarray(position, dtype=float))
        if p.ndim != 1 or not np.all(np.isfinite(p)):
            raise TrajectoryError(f"hold position must be a finite 1-D vector, got {position!r}")
        self._p = p
        self._T = check_duration(duration_s, allow_zero=True)

    @property
    def duration_s(self) -> float:
        return self._T

    @property
    def dim(self) -> int:
        return self._p.size

    def _eval(self, t):
        n = t.size
        z = np.zeros((n, self.dim))
        return np.broadcast_to(self._p, (n, self.dim)).copy(), z, z.copy(), z.copy()


class Sequence(Trajectory):
    """Segments played one after the other.

    Parameters
    ----------
    segments : sequence of Trajectory
        Same ``dim``.  Each segment should start where the previous one ends
        (checked to ``tol``); velocities are *not* required to match, but
        segments built by this package start and end at rest, so a sequence of
        them is velocity-continuous.
    tol : float
        Allowed position mismatch at the junctions.
    """

    def __init__(self, segments: _Seq[Trajectory], tol: float = 1e-9):
        segs = list(segments)
        if not segs:
            raise TrajectoryError("a sequence needs at least one segment")
        dim = segs[0].dim
        for i, s in enumerate(segs):
            if not isinstance(s, Trajectory):
                raise TrajectoryError(f"segment {i} is not a Trajectory: {s!r}")
            if s.dim != dim:
                raise TrajectoryError(f"segment {i} has dim {s.dim}, expected {dim}")
        for i in range(1, len(segs)):
            gap = np.max(np.abs(segs[i].start - segs[i - 1].end))
            if gap > tol:
                raise TrajectoryError(
                    f"segment {i} starts {gap:.3g} away from where segment {i - 1} ends")
        self.segments = tuple(segs)
        self._dim = dim
        self._t0 = np.concatenate([[0.0], np.cumsum([s.duration_s for s in segs])])
        self.names = segs[0].names

    @property
    def duration_s(self) -> float:
        return float(self._t0[-1])

    @property
    def dim(self) -> int:
        return self._dim

    @property
    def breakpoints_s(self) -> np.ndarray:
        """Start times of the segments and the end time, shape (n_segments + 1,)."""
        return self._t0.copy()

    def _eval(self, t):
        n = t.size
        out = [np.zeros((n, self._dim)) for _ in range(4)]
        # segment index: the last segment whose start <= t (ties go to the later segment)
        idx = np.clip(np.searchsorted(self._t0, t, side="right") - 1, 0, len(self.segments) - 1)
        for k, seg in enumerate(self.segments):
            m = idx == k
            if not np.any(m):
                continue
            vals = seg._eval(np.clip(t[m] - self._t0[k], 0.0, seg.duration_s))
            for o, v in zip(out, vals):
                o[m] = v
        return tuple(out)


class Stack(Trajectory):
    """Several trajectories of equal duration side by side (coordinates concatenated)."""

    def __init__(self, parts: _Seq[Trajectory], tol_s: float = 1e-9):
        parts = list(parts)
        if not parts:
            raise TrajectoryError("a stack needs at least one trajectory")
        T = parts[0].duration_s
        for i, p in enumerate(parts):
            if abs(p.duration_s - T) > tol_s:
                raise TrajectoryError(f"stacked trajectory {i} lasts {p.duration_s} s, expected {T} s")
        self.parts = tuple(parts)
        self._T = T

    @property
    def duration_s(self) -> float:
        return self._T

    @property
    def dim(self) -> int:
        return sum(p.dim for p in self.parts)

    def _eval(self, t):
        vals = [p._eval(np.clip(t, 0.0, p.duration_s)) for p in self.parts]
        return tuple(np.concatenate([v[k] for v in vals], axis=1) for k in range(4))


class TimeScaled(Trajectory):
    """Uniform time scaling: ``y(t) = x(t / k)``, so it lasts ``k`` times longer.

    Velocity scales by ``1/k``, acceleration by ``1/k**2``, jerk by ``1/k**3``.

    Parameters
    ----------
    base : Trajectory
    factor : float
        ``k > 0``; ``k > 1`` slows the motion down.
    """

    def __init__(self, base: Trajectory, factor: float):
        k = check_duration(factor, "factor")
        self.base = base
        self.factor = k
        self.names = base.names

    @property
    def duration_s(self) -> float:
        return self.base.duration_s * self.factor

    @property
    def task(self) -> "Trajectory":
        """The task-space reference, scaled alike, when ``base`` is a mapped trajectory."""
        task = getattr(self.base, "task", None)
        if task is None:
            raise AttributeError(f"{type(self.base).__name__} has no task trajectory")
        return TimeScaled(task, self.factor)

    @property
    def dim(self) -> int:
        return self.base.dim

    def _eval(self, t):
        k = self.factor
        p, v, a, j = self.base._eval(np.clip(t / k, 0.0, self.base.duration_s))
        return p, v / k, a / k**2, j / k**3


class GridCache(Trajectory):
    """A trajectory sampled on the time grid ``k * period_s``, evaluated ahead and cached.

    A control loop samples its reference at exactly ``t = k * period_s``
    (``k`` an integer); evaluating those times one by one costs the full
    Python overhead of the trajectory tree per cycle.  This wrapper evaluates
    the whole grid of the trajectory at once (up to :attr:`table_rows_max` grid
    times; kept with the trajectory, see :meth:`rows`) with the wrapped
    trajectory's own vectorised :meth:`Trajectory.sample` (per time the same
    computation as a scalar call; the package's trajectories give bit-identical
    results, see ``tests/test_perf_fastpaths.py``) and serves scalar grid times
    from it: the first sample pays for the whole run (a loop takes it before the
    drives are enabled), so no control cycle stalls on an evaluation.  A longer
    trajectory, or grid times past its end, are evaluated ``block`` grid times
    at a time.  Any other time (off the grid, arrays, a range that fails to
    evaluate) is passed to the wrapped trajectory unchanged, so results and
    errors are exactly those of ``base.sample``.

    Parameters
    ----------
    base : Trajectory
        The trajectory to sample (not modified).
    period_s : float
        Grid step [s] (the loop period).
    block : int
        Grid times evaluated per block past the whole-grid table (memory ``4 * block * dim``
        floats).
    horizon_s : float, optional
        The last time the caller samples on the grid (a run shorter than its trajectory): the
        table then stops there (``min(duration_s, horizon_s)``), rather than evaluating grid
        times nobody reads; later times are evaluated in blocks as past the table.  The rows
        are the same numbers either way (each time's evaluation does not depend on the others).
    """

    def __init__(self, base: Trajectory, period_s: float, block: int = 256, horizon_s: float | None = None):
        if not isinstance(base, Trajectory):
            raise TrajectoryError(f"base must be a Trajectory, got {type(base).__name__}")
        self.base = base
        self.period_s = check_duration(period_s, "period_s")
        if isinstance(block, bool) or not isinstance(block, (int, np.integer)) or block < 1:
            raise TrajectoryError(f"block must be an integer >= 1, got {block!r}")
        self._block = int(block)
        if horizon_s is not None and not (float(horizon_s) >= 0.0 and math.isfinite(float(horizon_s))):
            raise TrajectoryError(f"horizon_s must be finite and >= 0, got {horizon_s!r}")
        self._horizon_s = None if horizon_s is None else float(horizon_s)
        self._k0 = -1           # first grid index of the cached rows (-1: none)
        self._rows = np.empty((0, 4, base.dim))   # the table or a block: pos, vel, acc, jerk per grid time
        self.names = base.names

    @property
    def duration_s(self) -> float:
        return self.base.duration_s

    @property
    def dim(self) -> int:
        return self.base.dim

    def _eval(self, t):
        return self.base._eval(t)

    def sample(self, t) -> Sample:
        """Like ``base.sample(t)``; scalar times on the grid come from the cached block."""
        if (type(t) is float or type(t) is int) and 0.0 <= t < 1e15:
            P = self.period_s
            k = round(t / P)
            if k >= 0 and k * P == t:
                j = k - self._k0
                if self._k0 < 0 or not 0 <= j < self._rows.shape[0]:
                    if not self._fill(k):
                        return self.base.sample(t)
                    j = k - self._k0
                r = self._rows[j].copy()       # (4, dim): one copy, the four rows views of it
                return Sample(r[0], r[1], r[2], r[3])
        return self.base.sample(t)

    def rows(self, k: int, count: int):
        """Position, velocity and acceleration at the grid times ``k .. k + count - 1``.

        Arrays of shape ``(count, dim)``, each row equal to ``sample(i * period_s)``
        (the same vectorised evaluation as the cached blocks), or ``None`` when some
        time of the range fails to evaluate (the scalar calls then raise, or not,
        exactly as ``base.sample`` does).
        """
        tab = self._table()
        if tab is not None and k + count <= tab.shape[0]:
            return tuple(tab[k:k + count, i].copy() for i in range(3))
        ts = np.arange(k, k + count) * self.period_s
        try:
            s = self.base.sample(ts)
        except Exception:  # noqa: BLE001 - not swallowed: the caller samples per time instead
            return None
        return s.pos, s.vel, s.acc

    #: longest trajectory grid (rows) that :meth:`rows` and :meth:`sample` tabulate whole
    #: (memory ``4 * rows * dim`` floats: 500 s at 1 kHz of a 6-DOF task is 96 MB)
    table_rows_max = 500_000

    def _table(self):
        """Position, velocity, acceleration and jerk at every grid time of the trajectory
        (``k * period_s <= duration_s``, and ``<= horizon_s`` when given), shape (rows, 4, dim),
        or None (too long, or some time fails to evaluate).

        Evaluated once per trajectory object and period (the same vectorised evaluation as
        the blocks) and kept with the trajectory, so the runs of a sweep that share their
        trajectory (``controller.app.run.parse_run``'s ``trajectory_cache``) evaluate it once
        (a run with a longer horizon than the kept table's extends it).
        """
        store = getattr(self.base, "__dict__", None)
        if store is None:           # a trajectory class with __slots__: nothing to keep it in
            return None
        memo = store.setdefault("_grid_tables", {})
        n = int(math.floor(self.base.duration_s / self.period_s)) + 1
        if self._horizon_s is not None:     # the loop's count of cycles (ControlLoop.n_planned)
            n = min(n, int(math.floor(self._horizon_s / self.period_s + 1e-9)) + 1)
        kept = memo.get(self.period_s, False)
        if kept is False or (kept is not None and kept.shape[0] < n):
            tab = None
            if n <= self.table_rows_max:
                try:
                    s = self.base.sample(np.arange(n) * self.period_s)
                    tab = np.stack((s.pos, s.vel, s.acc, s.jerk), axis=1)
                except Exception:  # noqa: BLE001 - not swallowed: rows() and sample() then evaluate per range
                    tab = None
            if tab is not None or kept is False:
                memo[self.period_s] = tab
            kept = tab
        return kept

    def _fill(self, k: int) -> bool:
        """Cache the rows that hold grid index ``k``: the whole-grid table when it does,
        else ``block`` rows from ``k``.  False when that block fails to evaluate."""
        tab = self._table()
        if tab is not None and k < tab.shape[0]:
            self._rows = tab
            self._k0 = 0
            return True
        ts = np.arange(k, k + self._block) * self.period_s
        try:
            s = self.base.sample(ts)
        except Exception:  # noqa: BLE001 - not swallowed: the caller re-runs the scalar call
            # some time of the block failed: let the scalar call raise (or not) exactly
            # as base.sample(t) would
            self._k0 = -1
            return False
        self._rows = np.stack((s.pos, s.vel, s.acc, s.jerk), axis=1)    # (block, 4, dim)
        self._k0 = k
        return True
