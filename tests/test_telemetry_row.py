"""The compiled row writer of the telemetry (``controller.telemetry._write_row``): the same bytes
as the assignment of the tuple of values, for a control cycle's values (non-finite values, signed
zeros, any codes) and for every other kind of value (then the assignment itself runs: the same
conversions, broadcasts and errors).
"""

from __future__ import annotations

import numpy as np
import pytest

import controller.telemetry as T
from controller.telemetry import TelemetryWriter, log_dtype


def _cycle_values(rng, n, dim):
    """One cycle's values as the loop passes them (float64 / bool / int64 vectors, Python scalars)."""
    def vec(size):
        v = rng.normal(size=size)
        pick = rng.integers(0, 6, size=size)
        v[pick == 0] = np.nan
        v[pick == 1] = -0.0
        v[pick == 2] = rng.choice([np.inf, -np.inf], size=int(np.sum(pick == 2)))
        return v

    flags = lambda: rng.integers(0, 2, size=n).astype(bool)   # noqa: E731
    nan_payload = np.frombuffer(np.uint64(0x7FF8_0000_0000_1234).tobytes(), dtype=np.float64)[0]
    return (float(rng.normal()), vec(n), vec(n), vec(dim), vec(dim), vec(dim), vec(dim), vec(n), vec(n), vec(n),
            int(rng.integers(0, 2**7)), flags(), float(nan_payload), float(rng.normal()), flags(),
            rng.integers(-2**31, 2**31, size=n).astype(np.int64), flags())


def _by_assignment(n, dim, values):
    ref = np.zeros(1, dtype=log_dtype(n, dim))
    ref[0] = values
    return ref.tobytes()


@pytest.mark.parametrize("n, dim", [(3, 3), (6, 6), (2, 2), (7, 3), (1, 1)])
def test_compiled_row_is_the_assignments_bytes(n, dim):
    rng = np.random.default_rng(n * 10 + dim)
    buf = np.zeros(4, dtype=log_dtype(n, dim))
    raw = buf.view(np.uint8).reshape(4, buf.dtype.itemsize)
    for _ in range(200):
        values = _cycle_values(rng, n, dim)
        buf[:] = np.frombuffer(rng.bytes(buf.nbytes), dtype=buf.dtype)     # any previous content
        assert T._row_writer()(raw, 2, n, dim, *values)
        assert buf[2:3].tobytes() == _by_assignment(n, dim, values)
    before = buf.tobytes()
    for i in (-1, 4, 100):                                  # not a row: nothing written
        assert not T._row_writer()(raw, i, n, dim, *values)
    assert buf.tobytes() == before


def test_record_writes_the_same_log(tmp_path, monkeypatch):
    """Rows recorded through the compiled writer and through the assignment alone: the same file."""
    rng = np.random.default_rng(1)
    rows = [_cycle_values(rng, 3, 3) for _ in range(23)]
    written = []
    real = T._row_writer()
    monkeypatch.setattr(T, "_row_writer", lambda: lambda *a: written.append(real(*a)) or written[-1])
    logs = []
    for name in ("compiled", "assigned"):
        w = TelemetryWriter(tmp_path / name, 3, 3, buffer_rows=5)
        if name == "assigned":
            w._raw = None
        for r in rows:
            w.record(*r)
        w.close()
        logs.append((tmp_path / name / "log.npy").read_bytes())
    assert logs[0] == logs[1]
    assert written == [True] * len(rows)          # every row of the first log by the compiled writer


@pytest.mark.parametrize("change", ["int32 fault", "list q", "scalar fresh", "broadcast err", "strided qd",
                                    "int t", "code beyond int32", "fault beyond int32", "short tau",
                                    "readonly q", "float32 q", "masked q", "subclass tau"])
def test_other_values_take_the_assignment(tmp_path, change):
    """Values not of a cycle's kinds: the compiled writer declines (or is not typed for them) and
    the tuple assignment writes the row or raises, as it did alone; ndarray subclasses (a masked
    array: its data) are written as the assignment writes them."""
    rng = np.random.default_rng(2)
    v = list(_cycle_values(rng, 3, 3))
    if change == "int32 fault":
        v[15] = v[15].astype(np.int32)
    elif change == "list q":
        v[1] = v[1].tolist()
    elif change == "scalar fresh":
        v[14] = True
    elif change == "broadcast err":
        v[6] = np.array([0.5])
    elif change == "strided qd":
        v[2] = np.arange(6.0)[::2]
    elif change == "int t":
        v[0] = 3
    elif change == "code beyond int32":
        v[10] = 2**40
    elif change == "fault beyond int32":
        v[15] = np.array([2**40, 0, 0], dtype=np.int64)
    elif change == "short tau":
        v[8] = np.zeros(2)
    elif change == "readonly q":
        v[1] = v[1].copy()
        v[1].flags.writeable = False
    elif change == "float32 q":
        v[1] = v[1].astype(np.float32)
    elif change == "masked q":
        v[1] = np.ma.array(v[1], mask=[True, False, False])
    elif change == "subclass tau":
        v[7] = v[7].view(type("Sub", (np.ndarray,), {}))
    outcome = []
    for name in ("compiled", "assigned"):
        w = TelemetryWriter(tmp_path / name, 3, 3, buffer_rows=5)
        if name == "assigned":
            w._raw = None
        try:
            w.record(*v)
            outcome.append(w._buf[:1].tobytes())
        except Exception as exc:  # noqa: BLE001 - compared
            outcome.append((type(exc), str(exc)))
        w.close()
    assert outcome[0] == outcome[1]
