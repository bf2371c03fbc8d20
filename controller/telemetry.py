"""Per-cycle telemetry written incrementally to a ``.npy`` file plus ``meta.json``.

Format
------
A run directory holds

* ``log.npy`` -- a standard NumPy ``.npy`` (format 1.0) file whose one-
  dimensional structured array has one row per control cycle.  On disk every
  field is a scalar column (``t``, ``q[0]``, ``q[1]``, ..., or ``q[theta1]``,
  ``err[x]`` where the joints and axes are named, see :func:`file_dtype`) so that ``pandas.DataFrame(np.load(path))`` accepts it;
  :func:`read_log` returns the same bytes viewed with per-quantity vector
  fields (``log["q"]`` of shape (rows, n), see :func:`log_dtype`).  The
  header is written with reserved space; rows are
  appended in blocks of ``buffer_rows`` and, after each block, the header is
  rewritten in place with the new row count.  The data block is written
  *before* the header, so at any moment the header never claims more rows than
  are on disk: a crash (even SIGKILL) loses at most the rows still in the
  in-memory buffer, and ``np.load(path)`` / ``pandas.DataFrame(np.load(path))``
  open the file directly, no custom reader needed.
* ``meta.json`` -- configuration, versions, git commit, start time, seed,
  field descriptions, and (after :meth:`TelemetryWriter.close`) the run result.

Why not CSV: at 1 kHz with 6 joints a row has 82 numbers; formatting them as
text (17 significant digits, needed to keep float64 exact) cost 18-33 us per
row in memory alone versus about 2 us per row for this binary writer,
flushes included (``benchmarks/bench_loop.py``, rows ``telemetry row ...``,
measured on a loaded 2-core machine) -- a few percent of a 1 ms budget
against a fraction of one, for a file that is also 2-3x larger.
Use :func:`read_log` (or ``np.load``) to read, :func:`to_csv` to export.
"""

from __future__ import annotations

import datetime as _dt
import errno
import functools
import json
import os
import platform
import sys
from pathlib import Path

import numpy as np
from numba import njit

from dynamics._kernel_cache import stamp_package_caches
from dynamics.errors import TorqueloopError

__all__ = ["TelemetryWriter", "log_dtype", "file_dtype", "column_labels", "usable_labels", "group_fields", "read_log", "read_meta",
           "collect_meta", "to_csv", "utc_ns", "log_dataframe", "FIELD_DOC"]

_MAGIC = b"\x93NUMPY\x01\x00"

#: description and unit of each field (stored in meta.json)
FIELD_DOC = {
    "t": "cycle time since start [s]",
    "q": "measured joint position [rad|m]",
    "qd": "joint velocity used by the controller (measured or estimated) [rad/s|m/s]",
    "ref_pos": "reference position (controller space)",
    "ref_vel": "reference velocity (controller space)",
    "ref_acc": "reference acceleration (controller space)",
    "err": "position tracking error ref - measured (controller space; SO(3)-aware for 6-DOF)",
    "tau_ctrl": "controller output before the safety layer [N m|N]",
    "tau_cmd": "commanded torque sent to the driver [N m|N]",
    "tau_meas": "measured joint torque from the feedback [N m|N]",
    "safety": "safety state code (bits: 1 clipped, 2 soft limit, 4 braking, 8 holding, 16 fault, 32 disabled)",
    "sat": "torque clipped by the safety layer this cycle",
    "lateness_s": "how late the cycle started after its deadline [s]",
    "compute_s": "time from cycle start to command ready (estimate + control + safety) [s]",
    "fresh": "feedback fresh flag per joint",
    "fault": "device fault code per joint (0 = none)",
    "enabled": "drive enabled flag per joint",
}


def log_dtype(n: int, dim: int) -> np.dtype:
    """Structured dtype of one log row for ``n`` actuators and a ``dim``-dimensional reference."""
    return np.dtype([
        ("t", "<f8"), ("q", "<f8", (n,)), ("qd", "<f8", (n,)),
        ("ref_pos", "<f8", (dim,)), ("ref_vel", "<f8", (dim,)), ("ref_acc", "<f8", (dim,)),
        ("err", "<f8", (dim,)),
        ("tau_ctrl", "<f8", (n,)), ("tau_cmd", "<f8", (n,)), ("tau_meas", "<f8", (n,)),
        ("safety", "<i4"), ("sat", "?", (n,)),
        ("lateness_s", "<f8"), ("compute_s", "<f8"),
        ("fresh", "?", (n,)), ("fault", "<i4", (n,)), ("enabled", "?", (n,)),
    ])


#: fields of the controller's dimension (the others have one entry per actuator)
_DIM_FIELDS = ("ref_pos", "ref_vel", "ref_acc", "err")


#: the argument types of :func:`_write_row` for which it is compiled: the buffer's bytes, the
#: row, n, dim, then the fields as :meth:`TelemetryWriter.record` gets them from the loop
_ROW_SIGNATURE = ("boolean(uint8[:, ::1], int64, int64, int64, float64, " + "float64[::1], " * 9
                  + "int64, boolean[::1], float64, float64, boolean[::1], int64[::1], boolean[::1])")


@functools.cache
def _row_writer():
    """:func:`_write_row`, compiled for :data:`_ROW_SIGNATURE` alone (loaded from numba's cache
    at the first call in a process, not at import): arguments of other types raise TypeError
    (no specialisation is compiled for them)."""
    _write_row.compile(_ROW_SIGNATURE)
    _write_row.disable_compile()
    return _write_row


# numba takes a function's cache locator when it is decorated: the kernel files' stamp first
stamp_package_caches()


@njit(cache=True, error_model="numpy")
def _write_row(raw, i, n, dim, t, q, qd, ref_pos, ref_vel, ref_acc, err, tau_ctrl, tau_cmd, tau_meas, safety, sat,
               lateness_s, compute_s, fresh, fault, enabled):
    """Write row ``i`` of a :func:`log_dtype` ``(n, dim)`` buffer (``raw``: its bytes, one row
    of ``itemsize`` bytes per log row) from the values of one cycle, the same bytes as the
    assignment of the tuple of values (little-endian machine: the fields are stored as they are
    in memory; each a plain copy, the int64 codes narrowed to int32 as numpy casts them).

    Returns False, writing nothing, when ``i`` is not a row of ``raw``, an array has another
    length than its field or a code is out of the int32 range (the tuple assignment then does
    what it does).
    """
    if not 0 <= i < raw.shape[0]:
        return False
    for v in (q, qd, tau_ctrl, tau_cmd, tau_meas):
        if v.shape[0] != n:
            return False
    for v in (ref_pos, ref_vel, ref_acc, err):
        if v.shape[0] != dim:
            return False
    if sat.shape[0] != n or fresh.shape[0] != n or fault.shape[0] != n or enabled.shape[0] != n:
        return False
    lo, hi = -2147483648, 2147483647
    if not lo <= safety <= hi:
        return False
    for j in range(n):
        if not lo <= fault[j] <= hi:
            return False
    nf = 1 + 5 * n + 4 * dim                 # the doubles t .. tau_meas, in the field order
    f = np.empty(nf + 2)                     # then lateness_s, compute_s
    f[0] = t
    k = 1
    for v in (q, qd):
        for j in range(n):
            f[k] = v[j]
            k += 1
    for v in (ref_pos, ref_vel, ref_acc, err):
        for j in range(dim):
            f[k] = v[j]
            k += 1
    for v in (tau_ctrl, tau_cmd, tau_meas):
        for j in range(n):
            f[k] = v[j]
            k += 1
    f[nf] = lateness_s
    f[nf + 1] = compute_s
    codes = np.empty(1 + n, dtype=np.int32)  # safety, fault
    codes[0] = safety
    for j in range(n):
        codes[1 + j] = fault[j]
    fb = f.view(np.uint8)
    cb = codes.view(np.uint8)
    row = raw[i]
    p = 8 * nf
    row[0:p] = fb[0:p]                       # t, q, qd, ref_pos, ref_vel, ref_acc, err, tau_*
    row[p:p + 4] = cb[0:4]                   # safety
    p += 4
    for j in range(n):                       # sat
        row[p + j] = sat[j]
    p += n
    row[p:p + 16] = fb[8 * nf:8 * nf + 16]   # lateness_s, compute_s
    p += 16
    for j in range(n):                       # fresh
        row[p + j] = fresh[j]
    p += n
    row[p:p + 4 * n] = cb[4:4 + 4 * n]       # fault
    p += 4 * n
    for j in range(n):                       # enabled
        row[p + j] = enabled[j]
    return True


def usable_labels(names, count: int) -> list[str] | None:
    """``names`` as column labels if they can be (``count`` distinct non-empty strings without
    brackets), else None (the columns are then numbered)."""
    if names is None:
        return None
    labels = [str(v) for v in names]
    if len(labels) != count or len(set(labels)) != count or any(not v or "[" in v or "]" in v for v in labels):
        return None
    return labels


def _column_labels(count: int, names, what: str) -> list[str]:
    if names is None:
        return [str(j) for j in range(count)]
    labels = usable_labels(names, count)
    if labels is None:
        raise TorqueloopError(f"{what}: need {count} distinct non-empty names without brackets, got {names!r}")
    return labels


def file_dtype(n: int, dim: int, joint_names=None, axis_names=None) -> np.dtype:
    """On-disk dtype: :func:`log_dtype` with every vector field split into scalar columns.

    The columns are ``name[label]``: the label is the joint's name for the
    per-actuator fields (``q[theta1]``, ``tau_cmd[leg3]``) and the axis name for
    the reference and error fields (``err[x]``, ``ref_pos[phi]``) when
    ``joint_names`` (length n) / ``axis_names`` (length dim) are given, the index
    (``q[0]``) otherwise.  Same item size and byte layout as :func:`log_dtype`
    (both packed), so one is a ``view`` of the other.
    """
    jl = _column_labels(n, joint_names, "joint_names")
    al = _column_labels(dim, axis_names, "axis_names")
    grouped = log_dtype(n, dim)
    fields = []
    for name in grouped.names:
        sub = grouped[name]
        if sub.shape:
            labels = al if name in _DIM_FIELDS else jl
            fields += [(f"{name}[{lab}]", sub.base.str) for lab in labels]
        else:
            fields.append((name, sub.str))
    return np.dtype(fields)


def column_labels(arr: np.ndarray, field: str) -> list[str]:
    """The labels of a vector field's columns in a flat log (``"q"`` -> ``["theta1", ...]`` or ``["0", ...]``)."""
    names = arr.dtype.names or ()
    return [k[len(field) + 1:-1] for k in names if k.startswith(field + "[") and k.endswith("]")]


def group_fields(arr: np.ndarray) -> np.ndarray:
    """View a flat on-disk log (columns ``q[0]`` or ``q[theta1]``...) with vector fields (:func:`log_dtype`)."""
    names = arr.dtype.names or ()
    if "q" in names:
        return arr
    try:
        n = sum(1 for k in names if k.startswith("q["))
        dim = sum(1 for k in names if k.startswith("err["))
        grouped = log_dtype(n, dim)
        expected = file_dtype(n, dim)
        same = (len(names) == len(expected.names) and arr.dtype.itemsize == expected.itemsize
                and all(a.split("[")[0] == b.split("[")[0] and arr.dtype[a] == expected[b]
                        for a, b in zip(names, expected.names)))
        if not same:
            raise ValueError("unexpected columns")
        return arr.view(grouped)
    except (ValueError, TypeError) as err:
        raise TorqueloopError(f"not a torqueloop telemetry log (columns {names[:6]}...): {err}") from err


@functools.lru_cache(maxsize=16)
def _descr_text(dtype: np.dtype) -> str:
    """``repr`` of the ``.npy`` descr of ``dtype`` (numpy's own, built once per dtype: each
    flush rewrites the header)."""
    return repr(np.lib.format.dtype_to_descr(dtype))


def _header_bytes(dtype: np.dtype, rows: int, total_len: int | None = None) -> bytes:
    # the text of repr({"descr": ..., "fortran_order": False, "shape": (rows,)})
    text = "{'descr': " + _descr_text(dtype) + ", 'fortran_order': False, 'shape': (" + str(int(rows)) + ",)}"
    if total_len is None:
        # room for a 20-digit row count, padded to a multiple of 64 bytes
        base = len(_MAGIC) + 2 + len(text) + 20 + 1
        total_len = ((base + 63) // 64) * 64
    hlen = total_len - len(_MAGIC) - 2
    body = text + " " * (hlen - len(text) - 1) + "\n"
    if len(body) != hlen or hlen > 65535:
        raise TorqueloopError("telemetry header does not fit its reserved space")
    return _MAGIC + hlen.to_bytes(2, "little") + body.encode("latin1")


def _git_commit(start: Path) -> str:
    """Commit hash of the git work tree containing ``start`` (read from .git, no subprocess)."""
    for d in [start, *start.parents]:
        g = d / ".git"
        if g.is_dir():
            try:
                head = (g / "HEAD").read_text().strip()
                if not head.startswith("ref: "):
                    return head
                ref = head[5:]
                rp = g / ref
                if rp.is_file():
                    return rp.read_text().strip()
                packed = g / "packed-refs"
                if packed.is_file():
                    for line in packed.read_text().splitlines():
                        if line.endswith(" " + ref):
                            return line.split()[0]
                return f"unavailable ({ref} has no commit)"
            except OSError as err:
                return f"unavailable ({err})"
    return "unavailable (not a git work tree)"


def collect_meta(extra: dict | None = None) -> dict:
    """Provenance for meta.json: versions, git commit, start time, host; merged with ``extra``."""
    versions = {"python": sys.version.split()[0], "numpy": np.__version__, "platform": platform.platform()}
    try:
        from importlib.metadata import PackageNotFoundError, version
        try:
            versions["torqueloop"] = version("torqueloop")
        except PackageNotFoundError:
            versions["torqueloop"] = "not installed"
    except ImportError as err:  # pragma: no cover - stdlib always has it
        versions["torqueloop"] = f"unknown ({err})"
    meta = {
        "start_time_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(),
        "host": platform.node(),
        "pid": os.getpid(),
        "versions": versions,
        "git_commit": _git_commit(Path(__file__).resolve().parent),
    }
    if extra:
        meta.update(extra)
    return meta


def utc_ns(iso: str) -> int:
    """ns since the epoch of an ISO time (meta.json's ``start_time_utc``; UTC when it has no zone).

    Raises ValueError for a text that is not an ISO time."""
    d = _dt.datetime.fromisoformat(str(iso))
    if d.tzinfo is None:
        d = d.replace(tzinfo=_dt.timezone.utc)
    return int(d.timestamp()) * 1_000_000_000 + d.microsecond * 1000


def _jsonable(x):
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        return _jsonable(x.tolist())
    if isinstance(x, (np.floating, float)):
        v = float(x)
        return v if np.isfinite(v) else str(v)
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (np.bool_,)):
        return bool(x)
    if isinstance(x, (str, int, bool)) or x is None:
        return x
    return repr(x)


#: how files are opened for writing (a seam for the disk-full tests)
_open = open


def write_json(path: Path, data: dict) -> None:
    """Write ``data`` as JSON, atomically where the disk allows it.

    First a temporary file renamed over ``path``; when that fails (a full
    disk) the temporary file is removed and ``path`` is rewritten in place,
    compactly (truncating it frees its blocks, so this can succeed where the
    copy could not).  Raises OSError only when neither works.
    """
    path = Path(path)
    text = json.dumps(_jsonable(data), indent=2)
    tmp = path.with_suffix(path.suffix + ".tmp")
    try:
        with _open(tmp, "w") as fh:
            fh.write(text)
        os.replace(tmp, path)
        return
    except OSError:
        try:
            tmp.unlink()
        except OSError:
            pass
    with _open(path, "w") as fh:
        fh.write(json.dumps(_jsonable(data), separators=(",", ":")))


_write_json = write_json


class TelemetryWriter:
    """Incremental writer of the per-cycle log (see module docstring).

    Parameters
    ----------
    directory : path
        Run directory (created if missing); the log is ``directory/log.npy``.
    n : int
        Number of actuators.
    dim : int
        Reference dimension (n for joint-space control, task dof otherwise).
    buffer_rows : int
        Rows kept in memory between flushes (a crash loses at most these).
    meta : dict, optional
        Extra metadata (configs, seed, ...) merged into meta.json.
    fsync : bool
        Also ``os.fsync`` after each flush (survives power loss, costs ms).
    joint_names, axis_names : sequence of str, optional
        Column labels on disk (length n and dim): ``q[theta1]``, ``err[x]``
        instead of ``q[0]``, ``err[0]`` (see :func:`file_dtype`).
    mcap_ring_rows : int, optional
        Also record ``log.mcap`` (:class:`controller.telemetry_mcap.McapRecorder`): each
        flushed block of rows is copied into a shared-memory ring buffer of this many rows
        that a writer process drains; a full ring drops rows (counted in meta.json's ``mcap`` and in
        :attr:`notes`).  None (default): no MCAP.
    live : dict, optional
        Also stream the rows to a live viewer (Foxglove WebSocket) from the same writer process:
        ``{"rate_hz": float, "port": int, "ring_rows": int}`` (see
        :class:`controller.telemetry_mcap.McapRecorder`); :attr:`recorder`'s ``live_address``
        tells where.  None (default): no live view.
    torque_limit_nm : array_like, shape (n,), optional
        The torque limits, recorded beside the torques in the MCAP file.
    writer_avoid_cpus : sequence of int, optional
        CPUs the writer process must stay off (the loop's pinned CPU; see
        :class:`controller.telemetry_mcap.McapRecorder` ``avoid_cpus``).

    ``meta["robot_file"]`` (and ``meta["space"]``), when given, put the robot's frames on the
    MCAP file's and the live view's ``/tf`` (computed in the writer process).
    """

    def __init__(self, directory, n: int, dim: int, *, buffer_rows: int = 200, meta: dict | None = None,
                 fsync: bool = False, joint_names=None, axis_names=None, mcap_ring_rows: int | None = None,
                 live: dict | None = None, torque_limit_nm=None, writer_avoid_cpus=None):
        if buffer_rows < 1:
            raise TorqueloopError("buffer_rows must be >= 1")
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.path = self.directory / "log.npy"
        self.meta_path = self.directory / "meta.json"
        self.n, self.dim = int(n), int(dim)
        self.dtype = log_dtype(self.n, self.dim)
        self.file_dtype = file_dtype(self.n, self.dim, joint_names, axis_names)
        self.fsync = fsync
        self._buf = np.zeros(buffer_rows, dtype=self.dtype)
        self._v = {name: self._buf[name] for name in self.dtype.names}
        # the buffer's bytes for the compiled row writer (its layout is log_dtype's as stored on
        # a little-endian machine; elsewhere every row is assigned as a tuple)
        little = sys.byteorder == "little"
        self._raw = self._buf.view(np.uint8).reshape(buffer_rows, self.dtype.itemsize) if little else None
        self._write_row = _row_writer() if little else None
        self._i = 0
        self.rows_written = 0
        self._hlen = len(_header_bytes(self.file_dtype, 0))
        self.meta = collect_meta(meta)
        self.meta["fields"] = {k: FIELD_DOC[k] for k in self.dtype.names}
        self.meta["n"] = self.n
        self.meta["dim"] = self.dim
        self.meta["buffer_rows"] = buffer_rows
        self._fh = _open(self.path, "w+b")      # read back if the folder is deleted (see flush)
        self._fh.write(_header_bytes(self.file_dtype, 0, self._hlen))
        self._fh.flush()
        _write_json(self.meta_path, self.meta)
        self.closed = False
        #: rows that could not be written (disk full, I/O error): kept in memory, see :meth:`unwritten`
        self._held: list[np.ndarray] = []
        self.held_rows_max = 1_000_000
        #: the first write error, or None
        self.write_error: OSError | None = None
        #: what the run's summary should say about this log (set by :meth:`close`)
        self.notes: list[str] = []
        #: the writer process of log.mcap and the live view (McapRecorder), or None
        self.recorder = None
        if mcap_ring_rows is not None or live is not None:
            from .telemetry_mcap import McapRecorder
            rings = [r for r in (mcap_ring_rows, (live or {}).get("ring_rows")) if r is not None]
            try:
                self.recorder = McapRecorder(
                    None if mcap_ring_rows is None else self.directory / "log.mcap", self.dtype,
                    _column_labels(self.n, joint_names, "joint_names"),
                    _column_labels(self.dim, axis_names, "axis_names"), torque_limit_nm=torque_limit_nm,
                    ring_rows=max(rings) if rings else 65536, start_ns=utc_ns(self.meta["start_time_utc"]),
                    live=None if live is None else {"rate_hz": float(live.get("rate_hz", 50.0)),
                                                    "port": int(live.get("port", 0))},
                    frames={"robot_file": str(self.meta["robot_file"]), "space": str(self.meta.get("space", "joint"))}
                    if self.meta.get("robot_file") else None, avoid_cpus=writer_avoid_cpus)
            except BaseException:
                self._fh.close()
                raise

    def record(self, t, q, qd, ref_pos, ref_vel, ref_acc, err, tau_ctrl, tau_cmd, tau_meas, safety, sat,
               lateness_s, compute_s, fresh, fault, enabled) -> None:
        """Append one row (arrays of shape (n,) or (dim,) as in :func:`log_dtype`).

        The arguments are the fields of :func:`log_dtype` in its order; the row is
        written in one assignment (each value converted to its field as a field-wise
        assignment would convert it), or, for the values of a control cycle (float64,
        bool and int64 vectors of the fields' lengths, contiguous), by one compiled call
        (:func:`_write_row`: the same bytes).
        """
        if self.closed:
            raise TorqueloopError("telemetry writer is closed")
        i = self._i
        try:
            done = self._raw is not None and self._write_row(
                self._raw, i, self.n, self.dim, t, q, qd, ref_pos, ref_vel, ref_acc, err, tau_ctrl, tau_cmd,
                tau_meas, safety, sat, lateness_s, compute_s, fresh, fault, enabled)
        except TypeError:       # values of other types than _ROW_SIGNATURE's: the assignment converts them
            done = False
        if not done:
            self._buf[i] = (t, q, qd, ref_pos, ref_vel, ref_acc, err, tau_ctrl, tau_cmd, tau_meas, safety, sat,
                            lateness_s, compute_s, fresh, fault, enabled)
        self._i = i + 1
        if self._i == self._buf.shape[0]:
            self.flush()

    def next_row(self):
        """``(raw, i)``: the buffer's bytes and the row the next record goes to, for a compiled
        writer of :func:`_write_row`'s layout (its ``compute_s`` then set by :meth:`take_row`), or
        None (closed, or a big-endian machine: rows are assigned as tuples there)."""
        return None if self._raw is None or self.closed else (self._raw, self._i)

    def take_row(self, compute_s: float) -> None:
        """Take the row written at :meth:`next_row`'s place, with its ``compute_s`` [s], as
        :meth:`record` takes one (the buffer is flushed when full: its errors are
        :meth:`flush`'s)."""
        if self.closed:
            raise TorqueloopError("telemetry writer is closed")
        i = self._i
        self._v["compute_s"][i] = compute_s
        self._i = i + 1
        if self._i == self._buf.shape[0]:
            self.flush()

    @property
    def room(self) -> int:
        """Rows that :meth:`record_rows` can take before the next flush."""
        return self._buf.shape[0] - self._i

    def record_rows(self, **columns) -> None:
        """Append ``N`` rows at once, at most :attr:`room` (then the buffer is flushed as
        ``N`` calls of :meth:`record` would flush it).

        Keyword arguments are the fields of :func:`log_dtype`, each an array with a
        leading axis ``N`` (``t`` gives ``N``) or a value broadcast to every row.
        """
        if self.closed:
            raise TorqueloopError("telemetry writer is closed")
        N = np.shape(columns["t"])[0]
        if N > self.room:
            raise TorqueloopError(f"record_rows: {N} rows, room for {self.room}")
        if set(columns) != set(self.dtype.names):
            raise TorqueloopError(f"record_rows: fields {sorted(set(self.dtype.names) ^ set(columns))} "
                                  "missing or unknown")
        i = self._i
        for name, val in columns.items():
            self._v[name][i:i + N] = val
        self._i = i + N
        if self._i == self._buf.shape[0]:
            self.flush()

    def flush(self) -> None:
        """Write buffered rows, then rewrite the header with the new row count, then hand the
        rows to the MCAP recorder (if any; also after a write error).

        On a write error (a full disk) the rows are kept in memory
        (:meth:`unwritten`), the file keeps a valid header for the rows that
        did reach it, and the first error is raised once (later flushes retry
        quietly: space may have been freed).
        """
        if self.closed or self._i == 0:
            return
        # the buffer's rows as they are (a view, written from its memory): nothing records into
        # the buffer before this returns, and rows kept after an error are copied
        rows = block = self._buf[: self._i]
        self._i = 0
        try:
            self._write(rows)
        finally:
            # the recorder gets the block only after log.npy's header counts it: a process killed
            # in between leaves the MCAP recording a prefix of the log, never a block ahead of it
            if self.recorder is not None:
                self.recorder.push(block)       # a copy into its ring, never a wait

    def _write(self, rows: np.ndarray) -> None:
        if self._held:
            rows = np.concatenate(self._held + [rows])
            self._held = []
        fh = self._fh
        deleted = None
        try:
            if os.fstat(fh.fileno()).st_nlink == 0:     # the folder was deleted under us
                deleted = self._relink()
                fh = self._fh
            start = self._hlen + self.rows_written * self.dtype.itemsize
            fh.seek(start)
            fh.write(memoryview(rows).cast("B"))
            fh.flush()
            fh.seek(0)
            fh.write(_header_bytes(self.file_dtype, self.rows_written + rows.shape[0], self._hlen))
            fh.flush()
            self.rows_written += rows.shape[0]
            if self.fsync:
                os.fsync(fh.fileno())
        except OSError as err:
            self._held = [rows[-self.held_rows_max:].copy()]
            try:  # drop a partial tail so the file stays a valid log of rows_written rows
                fh.truncate(self._hlen + self.rows_written * self.dtype.itemsize)
            except (OSError, ValueError):
                pass
            first = self.write_error is None
            if first:
                self.write_error = err
                raise
            return
        if deleted is not None and self.write_error is None:
            self.write_error = deleted
            raise deleted

    def _relink(self):
        """The log file was deleted under the writer (its folder removed during the run): the
        folder is made again and the rows written so far are copied from the open file into a
        new ``log.npy``, which is written on from then.  Returns the error that says so
        (:class:`FileNotFoundError`; :meth:`flush` raises it once: the loop stops the run, and
        meta.json goes to the new folder)."""
        old = self._fh
        self.directory.mkdir(parents=True, exist_ok=True)
        new = _open(self.path, "w+b")
        try:
            old.flush()
            old.seek(0)
            new.write(old.read(self._hlen + self.rows_written * self.dtype.itemsize))
            new.flush()
        except BaseException:
            new.close()
            raise
        old.close()
        self._fh = new
        return FileNotFoundError(errno.ENOENT, f"the output folder {self.directory} was deleted during the run: "
                                 f"made again, the {self.rows_written} rows written before restored into it")

    def unwritten(self) -> np.ndarray:
        """Rows recorded but not on disk (after a write error), shape (rows,) of :func:`log_dtype`."""
        parts = self._held + ([self._buf[: self._i].copy()] if not self.closed and self._i else [])
        return np.concatenate(parts) if parts else np.zeros(0, dtype=self.dtype)

    def close(self, result: dict | None = None) -> None:
        """Flush, close the file and update meta.json with ``result`` (idempotent)."""
        if self.closed:
            return
        try:
            try:
                self.flush()
            except OSError:
                pass  # recorded in write_error; the rows stay in memory
            held = self.unwritten()
            try:
                self._fh.close()
            except OSError as err:
                self.write_error = self.write_error or err
        finally:
            self.closed = True
        self._held = [held] if held.size else []
        self.meta["rows"] = self.rows_written
        self.meta["end_time_utc"] = _dt.datetime.now(_dt.timezone.utc).isoformat()
        if self.write_error is not None:
            self.meta["log_incomplete"] = {"rows_not_written": int(held.shape[0]),
                                           "error": f"{type(self.write_error).__name__}: {self.write_error}"}
        if result is not None:
            self.meta["result"] = result
        if self.recorder is not None:
            rec = self.recorder
            self.meta["telemetry_writer"] = {"cpus": rec.writer_cpus, "note": rec.cpus_note}
            if rec.cpus_note:
                self.notes.append(f"telemetry writer: {rec.cpus_note}")
            st = rec.close(_jsonable(self.meta))
            live = st.pop("live")
            if st.get("tf_error"):
                self.notes.append(f"/tf (the robot's frames) left out: the writer could not load the model: "
                                  f"{st['tf_error']}")
            if live is not None:
                self.meta["live"] = live
                if live.get("error"):
                    self.notes.append(f"live view: failed: {live['error']}")
            if st["path"] is not None:
                self.meta["mcap"] = st
                if st["rows_dropped"]:
                    self.notes.append(f"MCAP: {st['rows_dropped']} of {st['rows_dropped'] + st['rows_written']} rows dropped (the writer "
                                      f"fell behind, ring of {st['ring_rows']} rows full); log.npy has them all, "
                                      f"`torqueloop export {self.directory} --format mcap` writes every row")
                if st["error"]:
                    self.notes.append(f"MCAP: recording failed: {st['error']}")
            elif st["rows_dropped"] and live is not None:
                self.notes.append(f"live view: {st['rows_dropped']} rows not streamed (the writer fell behind, "
                                  f"ring of {st['ring_rows']} rows full)")
        try:
            _write_json(self.meta_path, self.meta)
        except OSError:
            # no room for the full metadata: the result alone, in place
            small = {k: self.meta[k] for k in ("rows", "end_time_utc", "log_incomplete", "result", "n", "dim", "mcap",
                                                "live")
                     if k in self.meta}
            _write_json(self.meta_path, small)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def _log_path(path) -> Path:
    p = Path(path)
    return p / "log.npy" if p.is_dir() else p


def read_log(path, *, flat: bool = False) -> np.ndarray:
    """Read a log (run directory or ``log.npy``) as a structured array, shape (rows,).

    By default with vector fields (``log["q"]`` has shape (rows, n)); with
    ``flat=True`` exactly as stored (scalar columns, as ``np.load`` gives).
    """
    p = _log_path(path)
    try:
        with open(p, "rb") as fh:
            magic = fh.read(6)
    except OSError as err:
        raise TorqueloopError(f"{p}: cannot read telemetry log: {err}") from err
    if magic != b"\x93NUMPY":
        raise TorqueloopError(f"{p}: not a torqueloop telemetry log (a run's log.npy, or the run folder "
                              f"holding it): the file is not in numpy's .npy format")
    try:
        arr = np.load(p, allow_pickle=False)
    except (OSError, ValueError, EOFError) as err:
        raise TorqueloopError(f"{p}: not a torqueloop telemetry log: a damaged or truncated .npy file "
                              f"({type(err).__name__})") from err
    if arr.dtype.names is None or "t" not in arr.dtype.names:
        raise TorqueloopError(f"{p}: not a torqueloop telemetry log: a .npy file without the log's columns "
                              f"(time 't', 'q[0]', ...; dtype {arr.dtype})")
    return arr if flat else group_fields(arr)


def read_meta(path) -> dict:
    """Read ``meta.json`` of a run directory (or next to a ``log.npy``)."""
    p = Path(path)
    p = p / "meta.json" if p.is_dir() else p.parent / "meta.json"
    try:
        return json.loads(p.read_text())
    except (OSError, ValueError) as err:
        raise TorqueloopError(f"{p}: cannot read run metadata: {err}") from err


def flat_log(log: np.ndarray, joint_names=None, axis_names=None) -> np.ndarray:
    """A log with one scalar column per value (a view, no copy): a flat log as it is, a grouped
    one (``log["q"]`` of shape (rows, n)) viewed with :func:`file_dtype`'s columns, named after
    ``joint_names`` / ``axis_names`` where they are usable labels (:func:`usable_labels`), else
    numbered (``q[0]``)."""
    names = log.dtype.names or ()
    if "q" not in names:
        group_fields(log)       # validates the layout
        return log
    n = log.dtype["q"].shape[0] if log.dtype["q"].shape else 1
    dim = log.dtype["err"].shape[0] if log.dtype["err"].shape else 1
    return log.view(file_dtype(n, dim, usable_labels(joint_names, n), usable_labels(axis_names, dim)))


def log_dataframe(log, *, joint_names=None, axis_names=None):
    """The log as a :class:`pandas.DataFrame`, one column per scalar value.

    Parameters
    ----------
    log : numpy.ndarray or str or pathlib.Path
        A log array, grouped (:func:`read_log`, ``simulate(...).log``) or flat, or a run
        folder / ``log.npy`` (its columns keep the joint and axis names stored there).
    joint_names, axis_names : sequence of str, optional
        Labels of the per-joint columns (``q[theta1]``) and of the reference and error
        columns (``err[x]``) of a grouped array (default: numbered, ``q[0]``).

    Returns
    -------
    pandas.DataFrame
        Shape (rows, columns): ``t``, ``q[...]``, ``qd[...]``, ``ref_pos[...]``... (the
        fields of :data:`FIELD_DOC`, in SI units); pandas is an optional dependency.

    Raises
    ------
    TorqueloopError
        pandas is not installed, or ``log`` is not a torqueloop log.
    """
    try:
        import pandas as pd
    except ImportError as err:
        raise TorqueloopError("log_dataframe needs pandas (pip install pandas)") from err
    arr = read_log(log, flat=True) if isinstance(log, (str, Path)) else \
        flat_log(np.asarray(log), joint_names, axis_names)
    return pd.DataFrame(arr)


def to_csv(log: np.ndarray, path) -> None:
    """Export a structured log to CSV with one column per scalar (``q[0]``, ``q[1]``...).

    A flat log as stored (``read_log(path, flat=True)``) keeps its column names
    (``q[theta1]`` where the joints are named).
    """
    if "q" not in (log.dtype.names or ()):
        group_fields(log)  # validates the layout
        names = list(log.dtype.names)
        data = np.column_stack([log[k].astype(float) for k in names]) if log.shape[0] else np.zeros((0, len(names)))
        np.savetxt(path, data, delimiter=",", header=",".join(names), comments="", fmt="%.17g")
        return
    cols, names = [], []
    for name in log.dtype.names:
        a = log[name]
        if a.ndim == 1:
            cols.append(a.astype(float))
            names.append(name)
        else:
            for j in range(a.shape[1]):
                cols.append(a[:, j].astype(float))
                names.append(f"{name}[{j}]")
    data = np.column_stack(cols) if cols else np.zeros((0, 0))
    np.savetxt(path, data, delimiter=",", header=",".join(names), comments="", fmt="%.17g")


def to_parquet(log, path, meta: dict | None = None) -> None:
    """Export a log to a Parquet file: one column per scalar value, each of its own type
    (:func:`log_dataframe`'s columns), and ``meta`` (meta.json) as JSON text under the file's
    ``torqueloop.meta`` key.

    Parameters
    ----------
    log : numpy.ndarray or str or pathlib.Path
        As :func:`log_dataframe`.
    path : path
        The ``.parquet`` file (overwritten).
    meta : dict, optional
        The run's metadata.

    Raises
    ------
    TorqueloopError
        pandas or pyarrow is not installed (the ``parquet`` extra).
    """
    from .telemetry_ros2 import missing
    why = missing("pyarrow.parquet", "Parquet export", "pyarrow", "parquet")
    if why is not None:
        raise TorqueloopError(why)
    import pyarrow as pa
    import pyarrow.parquet as pq
    table = pa.Table.from_pandas(log_dataframe(log), preserve_index=False)
    if meta is not None:
        table = table.replace_schema_metadata({**(table.schema.metadata or {}),
                                               b"torqueloop.meta": json.dumps(_jsonable(meta)).encode()})
    pq.write_table(table, path)
