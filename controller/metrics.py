"""Run metrics: tracking error, torques, energy, deadline misses, saturation.

The same accumulator serves the live loop (rows are buffered and reduced in
blocks, so a long run needs constant memory) and the offline analysis of a
telemetry log (:func:`metrics_from_log`).

Definitions (``N`` cycles of period ``dt``)
-------------------------------------------
* ``rms_error[i] = sqrt(mean_k e_k[i]^2)``, ``max_abs_error[i] = max_k |e_k[i]|``
  per axis of the controller's space (rad or m; task space: m and rad).
* Task space (``task_layout`` "planar" = (x, y, phi), "spatial" = (x, y, z, 3
  angles)): ``rms_position_error_m = sqrt(mean_k |e_pos,k|^2)``,
  ``rms_orientation_error_rad`` likewise with the orientation error (wrapped
  angle, or rotation-vector error mapped to angle coordinates), and maxima.
* ``peak_torque[j] = max_k |tau_k[j]|``, ``rms_torque[j]``.
* ``energy_j[j] = sum_k tau_k[j] qd_k[j] dt`` (net mechanical work of actuator j,
  rectangle rule), ``positive_work_j = sum max(tau qd, 0) dt`` over all joints.
* ``deadline_misses``: cycles whose lateness exceeds ``miss_fraction * dt``.
* ``saturation_fraction[j]``: fraction of cycles with joint j clipped;
  ``saturation_fraction_any``: fraction with any joint clipped.
"""

from __future__ import annotations

import numpy as np

from dynamics.errors import TorqueloopError

__all__ = ["MetricsAccumulator", "metrics_from_log", "TASK_LAYOUTS"]

#: task-space layouts: (position indices, orientation indices)
TASK_LAYOUTS = {"planar": ((0, 1), (2,)), "spatial": ((0, 1, 2), (3, 4, 5))}


class MetricsAccumulator:
    """Streaming metrics (see module docstring).

    Parameters
    ----------
    n, dim : int
        Actuators and reference dimension.
    period_s : float
        Control period dt [s].
    task_layout : {"planar", "spatial"} or None
        Splits the error into position and orientation parts (task space).
    miss_fraction : float
        Lateness above ``miss_fraction * period_s`` counts as a deadline miss.
    block : int
        Rows buffered before a block reduction.
    """

    def __init__(self, n: int, dim: int, period_s: float, *, task_layout: str | None = None,
                 miss_fraction: float = 0.5, block: int = 1024):
        if task_layout is not None and task_layout not in TASK_LAYOUTS:
            raise TorqueloopError(f"task_layout must be one of {sorted(TASK_LAYOUTS)} or None, got {task_layout!r}")
        self.n, self.dim, self.period_s = n, dim, float(period_s)
        self.task_layout = task_layout
        self.miss_fraction = float(miss_fraction)
        self._e = np.zeros((block, dim))
        self._tau = np.zeros((block, n))
        self._qd = np.zeros((block, n))
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
        self._reduce_arrays(np.asarray(err, float).reshape(-1, self.dim), np.asarray(tau, float).reshape(-1, self.n),
                            np.asarray(qd, float).reshape(-1, self.n), np.asarray(sat, bool).reshape(-1, self.n),
                            np.asarray(lateness_s, float).reshape(-1))

    def _reduce(self):
        k = self._i
        if k:
            self._reduce_arrays(self._e[:k], self._tau[:k], self._qd[:k], self._sat[:k], self._late[:k])
            self._i = 0

    def _reduce_arrays(self, e, tau, qd, sat, late):
        if e.shape[0] == 0:
            return
        fin = np.isfinite(e)
        e0 = np.where(fin, e, 0.0)
        self._se2 += np.sum(e0 ** 2, axis=0)
        self._emax = np.maximum(self._emax, np.max(np.abs(e0), axis=0))
        if self.task_layout is not None:
            pi, oi = TASK_LAYOUTS[self.task_layout]
            p2 = np.sum(e0[:, list(pi)] ** 2, axis=1)
            o2 = np.sum(e0[:, list(oi)] ** 2, axis=1)
            self._pe2 += float(np.sum(p2))
            self._oe2 += float(np.sum(o2))
            self._pmax = max(self._pmax, float(np.sqrt(np.max(p2))))
            self._omax = max(self._omax, float(np.sqrt(np.max(o2))))
        t0 = np.where(np.isfinite(tau), tau, 0.0)
        v0 = np.where(np.isfinite(qd), qd, 0.0)
        self._tmax = np.maximum(self._tmax, np.max(np.abs(t0), axis=0))
        self._t2 += np.sum(t0 ** 2, axis=0)
        p = t0 * v0 * self.period_s
        self._energy += np.sum(p, axis=0)
        self._posw += float(np.sum(np.maximum(p, 0.0)))
        self._misses += int(np.sum(late > self.miss_fraction * self.period_s))
        self._satc += np.sum(sat, axis=0)
        self._satany += int(np.sum(np.any(sat, axis=1)))
        self.count += e.shape[0]

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
        if self.task_layout is not None:
            out["rms_position_error_m"] = float(np.sqrt(self._pe2 / N))
            out["max_position_error_m"] = self._pmax
            out["rms_orientation_error_rad"] = float(np.sqrt(self._oe2 / N))
            out["max_orientation_error_rad"] = self._omax
        return out


def metrics_from_log(log: np.ndarray, period_s: float, *, task_layout: str | None = None,
                     miss_fraction: float = 0.5) -> dict:
    """Metrics of a telemetry log (from :func:`controller.telemetry.read_log` or ``np.load``)."""
    from .telemetry import group_fields
    log = group_fields(log)
    n = log.dtype["q"].shape[0] if log.dtype["q"].shape else 1
    dim = log.dtype["err"].shape[0] if log.dtype["err"].shape else 1
    acc = MetricsAccumulator(n, dim, period_s, task_layout=task_layout, miss_fraction=miss_fraction)
    acc.add_batch(log["err"], log["tau_cmd"], log["qd"], log["sat"], log["lateness_s"])
    return acc.result()
