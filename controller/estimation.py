"""Velocity estimation for devices that report positions only.

:class:`FilteredDifference` is a backward finite difference followed by a
first-order low-pass filter, discretised exactly for the actual time step::

    v_raw[k] = (q[k] - q[k-1]) / dt
    v[k]     = v[k-1] + (1 - exp(-dt / tau)) (v_raw[k] - v[k-1]),   tau = 1 / (2 pi f_c)

The filter adds a phase lag of about ``tau`` plus half a sample; choose the
cut-off a few times above the closed-loop bandwidth.
"""

from __future__ import annotations

import numpy as np

from dynamics.errors import ModelError

__all__ = ["FilteredDifference"]


class FilteredDifference:
    """Low-pass filtered finite-difference velocity estimate.

    Parameters
    ----------
    n : int
        Number of joints.
    cutoff_hz : float
        Filter cut-off frequency f_c [Hz]; ``inf`` gives the raw difference.
    """

    def __init__(self, n: int, cutoff_hz: float):
        if not (cutoff_hz > 0):
            raise ModelError(f"cutoff_hz must be > 0, got {cutoff_hz!r}")
        self.n = int(n)
        self.cutoff_hz = float(cutoff_hz)
        self.tau_s = 0.0 if np.isinf(cutoff_hz) else 1.0 / (2.0 * np.pi * cutoff_hz)
        self.reset()

    def reset(self) -> None:
        self._q = None
        self._t = None
        self.v = np.zeros(self.n)

    def update(self, t_s: float, q: np.ndarray) -> np.ndarray:
        """Feed a position sample (shape (n,)) at ``t_s`` [s]; return the velocity estimate (n,).

        The first sample (and samples with non-finite entries, which are
        skipped for those joints) give the previous estimate (zero at start).
        """
        q = np.asarray(q, dtype=float)
        if self._q is None:
            self._q = q.copy()
            self._t = t_s
            return self.v.copy()
        dt = t_s - self._t
        if dt <= 0:
            return self.v.copy()
        ok = np.isfinite(q) & np.isfinite(self._q)
        raw = np.where(ok, (q - self._q) / dt, self.v)
        alpha = 1.0 if self.tau_s == 0.0 else -np.expm1(-dt / self.tau_s)
        self.v = self.v + alpha * (raw - self.v)
        self._q = np.where(np.isfinite(q), q, self._q)
        self._t = t_s
        return self.v.copy()
