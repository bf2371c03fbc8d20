"""The block reductions of MetricsAccumulator give the very floats of the row-major reference.

The accumulator stores its rows by quantity and reduces along contiguous memory; every
figure must still be bit-identical to the plain per-quantity ``np.sum`` / ``np.max`` over
(cycles, axes) arrays it replaced (the tuning results and the logs' metrics do not change).

``RowMajorReference`` is the accumulator's former reduction (a subclass sharing its state):
those are parity tests. The figures' independent check, against their definitions written
with numpy over the raw arrays, is
``test_ctrl_telemetry.py::test_metrics_stream_equals_log_and_definitions``.
"""

from __future__ import annotations

import numpy as np
import pytest

from controller.metrics import TASK_LAYOUTS, MetricsAccumulator, _axis_sums, metrics_from_log


class RowMajorReference(MetricsAccumulator):
    """The reduction as it was: separate (k, dim) / (k, n) arrays, one numpy call per figure."""

    def _reduce(self):
        k = self._i
        if k:
            self._reduce_rows(self._e[:k], self._tau[:k], self._qd[:k], self._sat[:k], self._late[:k])
            self._i = 0

    def add_batch(self, err, tau, qd, sat, lateness_s) -> None:
        self._reduce()
        self._reduce_rows(np.ascontiguousarray(err, float).reshape(-1, self.dim),
                          np.ascontiguousarray(tau, float).reshape(-1, self.n),
                          np.ascontiguousarray(qd, float).reshape(-1, self.n),
                          np.asarray(sat, bool).reshape(-1, self.n), np.asarray(lateness_s, float).reshape(-1))

    def _reduce_rows(self, e, tau, qd, sat, late):
        e, tau, qd = (np.ascontiguousarray(x) for x in (e, tau, qd))
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
        self._misses += int(np.sum(late > self.miss_threshold_fraction_of_period * self.period_s))
        self._satc += np.sum(sat, axis=0)
        self._satany += int(np.sum(np.any(sat, axis=1)))
        self.count += e.shape[0]


def _data(rng, N, n, dim, *, specials: bool):
    """Errors, torques and velocities over many magnitudes (sums that depend on their order)."""
    def arr(cols):
        x = rng.normal(size=(N, cols)) * 10.0 ** rng.integers(-9, 4, size=(N, cols))
        if specials and N:
            for v in (np.nan, np.inf, -np.inf, -0.0, 0.0):
                x[rng.integers(0, N, size=max(1, N // 50)), rng.integers(0, cols, size=max(1, N // 50))] = v
        return x
    sat = rng.random((N, n)) < (0.05 if specials else 0.0)
    late = rng.random(N) * 1e-3 if specials else np.zeros(N)
    return arr(dim), arr(n), arr(n), sat, late


def _feed(acc, data, rng):
    """Rows as the loop gives them: single cycles and compiled segments of any length."""
    e, tau, qd, sat, late = data
    r, N = 0, e.shape[0]
    while r < N:
        if rng.random() < 0.3:
            acc.add(e[r], tau[r], qd[r], sat[r], late[r])
            r += 1
        else:
            m = int(rng.integers(1, 1500))
            sl = slice(r, r + m)
            scalar = rng.random() < 0.5 and not sat[sl].any() and not late[sl].any()
            acc.add_rows(e[sl], tau[sl], qd[sl], False if scalar else sat[sl], 0.0 if scalar else late[sl])
            r += m


@pytest.mark.parametrize("n,dim,layout", [(3, 3, "planar"), (3, 3, None), (1, 1, None), (2, 1, None),
                                          (1, 2, None), (6, 6, "spatial"), (6, 6, None), (7, 3, "planar"),
                                          (2, 3, "planar")])
@pytest.mark.parametrize("specials", [False, True])
def test_block_reductions_equal_the_row_major_reference_bit_for_bit(n, dim, layout, specials):
    rng = np.random.default_rng(n * 100 + dim * 10 + specials)
    for trial in range(6):
        N = int(rng.choice([1, 5, 1023, 1024, 1025, 4001, 9000]))
        block = int(rng.choice([1, 7, 256, 1024]))
        data = _data(rng, N, n, dim, specials=specials)
        seed = int(rng.integers(1 << 30))
        got = MetricsAccumulator(n, dim, 1e-3, task_layout=layout, block=block)
        ref = RowMajorReference(n, dim, 1e-3, task_layout=layout, block=block)
        _feed(got, data, np.random.default_rng(seed))
        _feed(ref, data, np.random.default_rng(seed))
        assert repr(got.result()) == repr(ref.result()), (N, block)
        # a whole log at once (metrics_from_log), longer than numpy's buffer
        got = MetricsAccumulator(n, dim, 1e-3, task_layout=layout)
        ref = RowMajorReference(n, dim, 1e-3, task_layout=layout)
        got.add_batch(*data)
        ref.add_batch(*data)
        assert repr(got.result()) == repr(ref.result()), N


def test_axis_sums_add_the_cycles_as_numpy_sums_the_row_major_array():
    rng = np.random.default_rng(3)
    for axes in (1, 2, 3, 6):
        for k in (1, 2, 8, 9, 130, 1024, 20000):
            x = rng.normal(size=(k, axes)) * 10.0 ** rng.integers(-9, 9, size=(k, axes))
            assert np.array_equal(_axis_sums(np.ascontiguousarray(x.T)), np.sum(x, axis=0)), (axes, k)


def test_metrics_from_log_equals_the_streamed_figures():
    """One add_batch of a whole log gives the figures of the loop's streamed blocks when the
    log fits one block (the block boundaries are where the sums are grouped)."""
    rng = np.random.default_rng(5)
    e, tau, qd, sat, late = _data(rng, 900, 3, 3, specials=True)
    log = np.zeros(900, dtype=[("err", float, 3), ("tau_cmd", float, 3), ("qd", float, 3), ("sat", bool, 3),
                               ("lateness_s", float), ("q", float, 3)])
    log["err"], log["tau_cmd"], log["qd"], log["sat"], log["lateness_s"] = e, tau, qd, sat, late
    acc = MetricsAccumulator(3, 3, 1e-3, task_layout="planar")
    for k in range(900):
        acc.add(e[k], tau[k], qd[k], sat[k], late[k])
    assert repr(metrics_from_log(log, 1e-3, task_layout="planar")) == repr(acc.result())
