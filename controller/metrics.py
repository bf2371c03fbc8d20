"""Run metrics: tracking error, torques, energy, deadline misses, saturation.

The same accumulator serves the live loop (rows are buffered and reduced in
blocks, so a long run needs constant memory) and the offline analysis of a
telemetry log (:func:`metrics_from_log`).

Definitions (``N`` cycles of period ``dt``)
-------------------------------------------
* ``rms_error[i] = sqrt(mean_k e_k[i]^2)``, ``max_abs_error[i] = max_k |e_k[i]|``
  per axis of the controller's space (rad or m; task space: m and rad).
* Task space (``task_layout`` "planar" = (x, y, phi), "point" = (x, y, z), "planar_point" =
  (x, y), "spatial" = (x, y, z, 3 angles), "orientation" = (3 angles); :data:`TASK_LAYOUTS`):
  ``rms_position_error_m = sqrt(mean_k |e_pos,k|^2)`` (layouts with position axes),
  ``rms_orientation_error_rad`` (layouts with angle axes) likewise with the orientation error
  (wrapped angle, or rotation-vector error mapped to angle coordinates), and maxima.
* ``peak_torque[j] = max_k |tau_k[j]|``, ``rms_torque[j]``.
* ``energy_j[j] = sum_k tau_k[j] qd_k[j] dt`` (net mechanical work of actuator j,
  rectangle rule), ``positive_work_j = sum max(tau qd, 0) dt`` over all joints.
* ``deadline_misses``: cycles whose lateness exceeds ``miss_threshold_fraction_of_period * dt``.
* ``saturation_fraction[j]``: fraction of cycles with joint j clipped (by the safety
  layer); ``saturation_fraction_any``: fraction with any joint clipped.
* ``at_limit_fraction[j]`` (with ``torque_limit``): fraction of cycles whose commanded
  torque of joint j was at its limit, ``|tau| >= torque_limit (1 - 1e-9)``, whoever put it
  there: a law that saturates its own output at the limit leaves nothing for the safety
  layer to clip, so ``saturation_fraction`` alone reads 0 while the drive is at its limit.
"""

from __future__ import annotations

import numpy as np

from dynamics.errors import TorqueloopError

__all__ = ["MetricsAccumulator", "metrics_from_log", "TASK_LAYOUTS"]

#: task-space layouts: (position indices, orientation indices)
TASK_LAYOUTS = {"planar": ((0, 1), (2,)), "point": ((0, 1, 2), ()), "planar_point": ((0, 1), ()),
                "spatial": ((0, 1, 2), (3, 4, 5)), "orientation": ((), (0, 1, 2))}


class MetricsAccumulator:
    """Streaming metrics (see module docstring).

    Parameters
    ----------
    n, dim : int
        Actuators and reference dimension.
    period_s : float
        Control period dt [s].
    task_layout : {"planar", "point", "planar_point", "spatial", "orientation"} or None
        Splits the error into position and orientation parts (task space).
    miss_threshold_fraction_of_period : float
        Lateness above ``miss_threshold_fraction_of_period * period_s`` counts as a deadline miss.
    block : int
        Rows buffered before a block reduction.
    torque_limit : array_like, shape (n,), optional
        The limit the commanded torque is held to [N m | N]: counts ``at_limit_fraction``.
    """

    def __init__(self, n: int, dim: int, period_s: float, *, task_layout: str | None = None,
                 miss_threshold_fraction_of_period: float = 0.5, block: int = 1024, torque_limit=None):
        if task_layout is not None and task_layout not in TASK_LAYOUTS:
            raise TorqueloopError(f"task_layout must be one of {sorted(TASK_LAYOUTS)} or None, got {task_layout!r}")
        self.n, self.dim, self.period_s = n, dim, float(period_s)
        self.task_layout = task_layout
        self.miss_threshold_fraction_of_period = float(miss_threshold_fraction_of_period)
        # the rows are stored by quantity, one contiguous row of ``block`` cycles per axis of
        # [e | tau | qd] (shape (dim + 2 n, block)), so that the block reductions run along
        # contiguous memory; _e, _tau and _qd are (block, .) views of it
        self._q_rows = np.zeros((dim + 2 * n, block))
        self._e = self._q_rows[:dim].T
        self._tau = self._q_rows[dim:dim + n].T
        self._qd = self._q_rows[dim + n:].T
        self._pos_ix, self._ori_ix = (list(ix) for ix in TASK_LAYOUTS[task_layout]) if task_layout else ([], [])
        self._sat = np.zeros((block, n), dtype=bool)
        self._late = np.zeros(block)
        self._i = 0
        self.count = 0
        self._se2 = np.zeros(dim)
        self._emax = np.zeros(dim)
        self._pe2 = 0.0
        self._pmax = 0.0
        self._oe2 = 0.0
        self._omax = 0.0
        self._tmax = np.zeros(n)
        self._t2 = np.zeros(n)
        self._energy = np.zeros(n)
        self._posw = 0.0
        self._misses = 0
        self._satc = np.zeros(n, dtype=np.int64)
        self._satany = 0
        self._lim = None if torque_limit is None else np.broadcast_to(
            np.asarray(torque_limit, dtype=float), (n,)).reshape(n, 1) * (1.0 - 1e-9)
        self._atc = np.zeros(n, dtype=np.int64)

    def add(self, err, tau, qd, sat, lateness_s) -> None:
        """Add one cycle: error (dim,), commanded torque (n,), velocity (n,), clipped mask (n,), lateness [s]."""
        i = self._i
        self._e[i] = err
        self._tau[i] = tau
        self._qd[i] = qd
        self._sat[i] = sat
        self._late[i] = lateness_s
        self._i = i + 1
        if self._i == self._e.shape[0]:
            self._reduce()

    def block(self) -> tuple:
        """The buffers the next row goes to, for a compiled writer: ``(rows (dim + 2 n, B) by
        quantity (error, commanded torque, velocity), sat (B, n), lateness (B,), column)``; the
        row is column ``column`` of each, and :meth:`advance` takes it (as :meth:`add` would)."""
        return self._q_rows, self._sat, self._late, self._i

    def advance(self) -> None:
        """Take the row written at the column of :meth:`block` (a block reduction when full)."""
        self._i += 1
        if self._i == self._late.shape[0]:
            self._reduce()

    def add_rows(self, err, tau, qd, sat, lateness_s) -> None:
        """Add N cycles (leading axis N; ``sat`` and ``lateness_s`` may be scalars) with the
        same block reductions as N calls of :meth:`add` (identical results)."""
        N = np.shape(err)[0]
        B = self._e.shape[0]
        r = 0
        while r < N:
            i = self._i
            m = min(B - i, N - r)
            self._e[i:i + m] = err[r:r + m]
            self._tau[i:i + m] = tau[r:r + m]
            self._qd[i:i + m] = qd[r:r + m]
            self._sat[i:i + m] = sat if np.ndim(sat) < 2 else sat[r:r + m]
            self._late[i:i + m] = lateness_s if np.ndim(lateness_s) == 0 else lateness_s[r:r + m]
            self._i = i + m
            r += m
            if self._i == B:
                self._reduce()

    def add_batch(self, err, tau, qd, sat, lateness_s) -> None:
        """Add N cycles at once (arrays with a leading axis N)."""
        self._reduce()
        rows = np.concatenate([np.asarray(err, float).reshape(-1, self.dim).T,
                               np.asarray(tau, float).reshape(-1, self.n).T,
                               np.asarray(qd, float).reshape(-1, self.n).T])
        self._reduce_arrays(rows, np.asarray(sat, bool).reshape(-1, self.n), np.asarray(lateness_s, float).reshape(-1))

    def _reduce(self):
        k = self._i
        if k:
            self._reduce_arrays(self._q_rows[:, :k], self._sat[:k], self._late[:k])
            self._i = 0

    def _reduce_arrays(self, rows, sat, late):
        """Fold k cycles into the sums and maxima.

        Parameters
        ----------
        rows : ndarray, shape (dim + 2 n, k)
            By quantity: the error (controller space) [rad | m], the commanded torque
            [N m | N] and the velocity [rad/s | m/s], one row per axis.
        sat : ndarray of bool, shape (k, n)
            Joints clipped.
        late : ndarray, shape (k,)
            Lateness [s].

        Each sum adds the same values in the same order as ``np.sum`` of the cycles-by-axes
        array (k, .) over its axis 0 (:func:`_axis_sums`), or is that very call on the same
        array; maxima and counts are exact in any order.  So the metrics are those of the
        row-major reductions (``tests/test_metrics_reduce.py``).
        """
        k = rows.shape[1]
        if k == 0:
            return
        dim, n = self.dim, self.n
        top = np.maximum.reduce
        w = np.where(np.isfinite(rows), rows, 0.0)
        e0, t0 = w[:dim], w[dim:dim + n]
        e2 = e0 ** 2
        self._se2 += _axis_sums(e2)
        self._emax = np.maximum(self._emax, top(np.abs(e0), axis=1))
        if self.task_layout is not None:
            # per cycle: the very reduction of a (k, axes) array
            p2 = np.add.reduce(np.ascontiguousarray(e2[self._pos_ix].T), axis=1)
            o2 = np.add.reduce(np.ascontiguousarray(e2[self._ori_ix].T), axis=1)
            self._pe2 += float(np.add.reduce(p2))
            self._oe2 += float(np.add.reduce(o2))
            self._pmax = max(self._pmax, float(np.sqrt(top(p2))))
            self._omax = max(self._omax, float(np.sqrt(top(o2))))
        self._tmax = np.maximum(self._tmax, top(np.abs(t0), axis=1))
        self._t2 += _axis_sums(t0 ** 2)
        p = t0 * w[dim + n:] * self.period_s
        self._energy += _axis_sums(p)
        # all of p, cycle after cycle: the order of the (k, n) array
        self._posw += float(np.add.reduce(np.maximum(np.ascontiguousarray(p.T), 0.0), axis=None))
        self._misses += int(np.count_nonzero(late > self.miss_threshold_fraction_of_period * self.period_s))
        if self._lim is not None:
            self._atc += np.count_nonzero(np.abs(t0) >= self._lim, axis=1)
        if sat.any():                   # (adding zero counts changes nothing)
            self._satc += np.count_nonzero(sat, axis=0)
            self._satany += int(np.count_nonzero(sat.any(axis=1)))
        self.count += k

    def result(self) -> dict:
        """The metrics as a dict of floats / lists (JSON-ready)."""
        self._reduce()
        N = max(self.count, 1)
        out = {
            "n_cycles": self.count,
            "rms_error": np.sqrt(self._se2 / N).tolist(),
            "max_abs_error": self._emax.tolist(),
            "peak_torque": self._tmax.tolist(),
            "rms_torque": np.sqrt(self._t2 / N).tolist(),
            "energy_j": self._energy.tolist(),
            "positive_work_j": self._posw,
            "deadline_misses": self._misses,
            "saturation_fraction": (self._satc / N).tolist(),
            "saturation_fraction_any": self._satany / N,
        }
        if self._lim is not None:
            out["at_limit_fraction"] = (self._atc / N).tolist()
        if self.task_layout is not None:
            if self._pos_ix:
                out["rms_position_error_m"] = float(np.sqrt(self._pe2 / N))
                out["max_position_error_m"] = self._pmax
            if self._ori_ix:
                out["rms_orientation_error_rad"] = float(np.sqrt(self._oe2 / N))
                out["max_orientation_error_rad"] = self._omax
        return out


def _axis_sums(x: np.ndarray) -> np.ndarray:
    """Per-axis sums over the cycles of ``x`` (axes, k), C-contiguous, shape (axes,).

    Each is the sum ``np.sum(x.T, axis=0)`` gives for the (k, axes) array in C order: with
    two or more axes numpy adds the cycles one after the other (the running sum's last
    value, ``np.add.accumulate``), with one axis pairwise over the contiguous values (the
    same reduction of the contiguous row).
    """
    if x.shape[0] == 1:
        return np.add.reduce(x, axis=1)
    return np.add.accumulate(x, axis=1)[:, -1]


def metrics_from_log(log: np.ndarray, period_s: float, *, task_layout: str | None = None,
                     miss_threshold_fraction_of_period: float = 0.5) -> dict:
    """Metrics of a telemetry log (from :func:`controller.telemetry.read_log` or ``np.load``)."""
    from .telemetry import group_fields
    log = group_fields(log)
    n = log.dtype["q"].shape[0] if log.dtype["q"].shape else 1
    dim = log.dtype["err"].shape[0] if log.dtype["err"].shape else 1
    acc = MetricsAccumulator(n, dim, period_s, task_layout=task_layout,
                             miss_threshold_fraction_of_period=miss_threshold_fraction_of_period)
    acc.add_batch(log["err"], log["tau_cmd"], log["qd"], log["sat"], log["lateness_s"])
    return acc.result()
