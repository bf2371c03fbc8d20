"""The per-cycle log as an MCAP file (ROS 2 bags, Foxglove, PlotJuggler), written off the control thread.

:class:`McapRecorder` takes the rows of :func:`controller.telemetry.log_dtype` that the
:class:`~controller.telemetry.TelemetryWriter` flushes (one block of ``buffer_rows`` rows at a
time, copied into a preallocated ring buffer: the control thread's only work) and a writer
thread drains the ring into ``log.mcap``.  A full ring (a writer that cannot keep up, a stalled
disk) drops the newest rows and counts them; it never makes the control thread wait.

Channels (ROS 2 CDR encoding, ``ros2msg`` schemas: ROS 2 tools, ``rosbags``, Foxglove and
PlotJuggler decode them from the schema text, no ROS installation needed):

``/joint_states``  ``sensor_msgs/msg/JointState``
    one per cycle: joint names, measured position [rad|m], the velocity the controller used
    [rad/s|m/s], measured effort [N m|N].
``/torqueloop/cycle``  ``torqueloop_msgs/msg/ControlCycle`` (its text: :data:`CYCLE_MSG`)
    one per cycle: reference, tracking error, controller / commanded / measured torque and the
    torque limit, clipped flags, safety code, lateness and compute time, drive flags.
``/rosout``  ``rcl_interfaces/msg/Log``
    every change of the safety state and every fault of the run (the faults at the end, with
    their own time stamps), the dropped rows.

Metadata records: ``torqueloop.run`` (joint and axis names, sizes, field descriptions) and,
at the end, ``torqueloop.config`` and ``torqueloop.result`` (the run's meta.json: config,
versions, result; each top-level key as JSON text).  Message times are the run's start time
(UTC, ns since the epoch) plus the cycle time ``t``.

Encoding a cycle costs the writer thread about 2 ``mcap`` ``add_message`` calls (13 us each
on the 2-core test machine); the cycle's bytes are laid out for a whole block at once with
numpy, since every message of a run has the same size.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import numpy as np

from dynamics.errors import ConfigError, TorqueloopError

__all__ = ["McapRecorder", "write_mcap", "CYCLE_MSG", "JOINT_STATE_MSG", "LOG_MSG", "mcap_available"]

_SEP = "=" * 80 + "\n"

_TIME_MSG = "int32 sec\nuint32 nanosec\n"

#: ``sensor_msgs/msg/JointState`` with its dependencies (ros2msg text as ROS 2 bags store it)
JOINT_STATE_MSG = ("std_msgs/Header header\nstring[] name\nfloat64[] position\nfloat64[] velocity\n"
                   "float64[] effort\n" + _SEP + "MSG: std_msgs/Header\nbuiltin_interfaces/Time stamp\n"
                   "string frame_id\n" + _SEP + "MSG: builtin_interfaces/Time\n" + _TIME_MSG)

#: ``torqueloop_msgs/msg/ControlCycle``: one control cycle beside the joint states
CYCLE_MSG = ("# one control cycle of torqueloop (controller/telemetry.py FIELD_DOC)\n"
             "builtin_interfaces/Time stamp\n"
             "float64 t_s             # cycle time since start [s]\n"
             "float64[] ref_pos       # reference position (controller space; axis names in metadata)\n"
             "float64[] ref_vel       # reference velocity\n"
             "float64[] ref_acc       # reference acceleration\n"
             "float64[] err           # tracking error ref - measured\n"
             "float64[] tau_ctrl      # controller output before the safety layer [N m|N]\n"
             "float64[] tau_cmd       # commanded torque sent to the driver [N m|N]\n"
             "float64[] tau_meas      # measured torque [N m|N]\n"
             "float64[] tau_limit     # the torque limit the safety layer clips to [N m|N]\n"
             "bool[] saturated        # clipped by the safety layer this cycle\n"
             "int32 safety            # safety code: 1 clipped 2 soft limit 4 braking 8 holding 16 fault 32 disabled\n"
             "float64 lateness_s      # cycle start after its deadline [s]\n"
             "float64 compute_s       # estimate + control + safety time [s]\n"
             "bool[] fresh            # feedback fresh per joint\n"
             "int32[] fault           # device fault code per joint (0 none)\n"
             "bool[] enabled          # drive enabled per joint\n"
             + _SEP + "MSG: builtin_interfaces/Time\n" + _TIME_MSG)

#: ``rcl_interfaces/msg/Log`` (what ``/rosout`` carries)
LOG_MSG = ("byte DEBUG=10\nbyte INFO=20\nbyte WARN=30\nbyte ERROR=40\nbyte FATAL=50\n"
           "builtin_interfaces/Time stamp\nuint8 level\nstring name\nstring msg\nstring file\n"
           "string function\nuint32 line\n" + _SEP + "MSG: builtin_interfaces/Time\n" + _TIME_MSG)

_INFO, _WARN, _ERROR = 20, 30, 40

#: names of the safety code's bits (controller.safety)
_SAFETY_BITS = ((1, "clipped"), (2, "soft limit"), (4, "braking"), (8, "holding"), (16, "fault"), (32, "disabled"))


def mcap_available() -> str | None:
    """None when the ``mcap`` package can be imported, else why not (the install hint)."""
    try:
        import mcap.writer  # noqa: F401
    except ImportError as err:
        return (f"MCAP recording needs the 'mcap' package (pip install 'torqueloop[mcap]'): "
                f"{type(err).__name__}: {err}")
    return None


def safety_text(code: int) -> str:
    """The safety code's bits as words (``"clipped, braking"``; ``"normal"`` for 0)."""
    words = [w for bit, w in _SAFETY_BITS if code & bit]
    return ", ".join(words) if words else "normal"


class _Layout:
    """A little-endian CDR message whose size is the same for every row: a byte template plus
    the offsets where each row's values go (alignment relative to the byte after the 4-byte
    encapsulation header, as CDR has it)."""

    def __init__(self):
        self.buf = bytearray(b"\x00\x01\x00\x00")      # CDR_LE encapsulation
        self.slots: dict[str, tuple[int, np.dtype, int]] = {}

    def _align(self, a: int) -> None:
        pad = (-(len(self.buf) - 4)) % a
        self.buf += bytes(pad)

    def scalar(self, name: str, dtype: str) -> None:
        dt = np.dtype(dtype)
        self._align(dt.itemsize)
        self.slots[name] = (len(self.buf), dt, 0)
        self.buf += bytes(dt.itemsize)

    def string(self, text: str) -> None:
        data = text.encode("utf-8") + b"\x00"
        self._align(4)
        self.buf += len(data).to_bytes(4, "little") + data

    def strings(self, texts) -> None:
        self._align(4)
        self.buf += len(texts).to_bytes(4, "little")
        for s in texts:
            self.string(s)

    def sequence(self, name: str, dtype: str, count: int) -> None:
        dt = np.dtype(dtype)
        self._align(4)
        self.buf += int(count).to_bytes(4, "little")
        if count:
            self._align(dt.itemsize)
        self.slots[name] = (len(self.buf), dt, int(count))
        self.buf += bytes(dt.itemsize * count)

    def fill(self, values: dict) -> np.ndarray:
        """The messages of ``k`` rows, shape (k, size) uint8: ``values[name]`` of shape (k,) or
        (k, count) for every slot."""
        k = len(next(iter(values.values())))
        tmpl = np.frombuffer(bytes(self.buf), dtype=np.uint8)
        out = np.empty((k, tmpl.size), dtype=np.uint8)
        out[:] = tmpl
        for name, (off, dt, count) in self.slots.items():
            width = dt.itemsize * max(count, 1)
            v = np.asarray(values[name]).astype(dt.newbyteorder("<"), copy=False).reshape(k, max(count, 1))
            out[:, off:off + width] = np.ascontiguousarray(v).view(np.uint8).reshape(k, width)
        return out


def _cdr_log(stamp_ns: int, level: int, name: str, text: str) -> bytes:
    """One ``rcl_interfaces/msg/Log`` in CDR."""
    lay = _Layout()
    lay.scalar("sec", "<i4")
    lay.scalar("nanosec", "<u4")
    lay.scalar("level", "u1")
    lay.string(name)
    lay.string(text)
    lay.string("")
    lay.string("")
    lay.scalar("line", "<u4")
    sec, nsec = divmod(int(stamp_ns), 1_000_000_000)
    return lay.fill({"sec": [sec], "nanosec": [nsec], "level": [level], "line": [0]})[0].tobytes()


class McapRecorder:
    """Record telemetry rows into an MCAP file from a writer thread (see module docstring).

    Parameters
    ----------
    path : path
        The ``.mcap`` file (overwritten).
    dtype : numpy.dtype
        The rows' dtype, :func:`controller.telemetry.log_dtype` ``(n, dim)``.
    joint_names : sequence of str, length n
    axis_names : sequence of str, length dim
    torque_limit_nm : array_like, shape (n,), optional
        The limit the safety layer clips to [N m|N] (NaN where unknown).
    ring_rows : int
        Rows the ring buffer holds (preallocated: ``ring_rows * dtype.itemsize`` bytes).
    start_ns : int, optional
        The run's start, ns since the epoch (default: now).
    threaded : bool
        False: :meth:`push` encodes and writes in the caller's thread, nothing is dropped
        (:func:`write_mcap`, runs on disk).
    compression : {"zstd", "lz4", "none"}
    """

    def __init__(self, path, dtype: np.dtype, joint_names, axis_names, *, torque_limit_nm=None,
                 ring_rows: int = 65536, start_ns: int | None = None, threaded: bool = True,
                 compression: str = "zstd"):
        why = mcap_available()
        if why is not None:
            raise ConfigError(why, field="telemetry.mcap")
        from mcap.writer import CompressionType, Writer
        if ring_rows < 1:
            raise ConfigError(f"must be >= 1, got {ring_rows!r}", field="telemetry.mcap_buffer_rows")
        self.path = Path(path)
        self.dtype = np.dtype(dtype)
        self.n = self.dtype["q"].shape[0]
        self.dim = self.dtype["err"].shape[0]
        self.joint_names = [str(v) for v in joint_names]
        self.axis_names = [str(v) for v in axis_names]
        if len(self.joint_names) != self.n or len(self.axis_names) != self.dim:
            raise TorqueloopError(f"MCAP recorder: {len(self.joint_names)} joint names for {self.n} joints, "
                                  f"{len(self.axis_names)} axis names for {self.dim} axes")
        lim = np.full(self.n, np.nan) if torque_limit_nm is None else np.asarray(torque_limit_nm, float)
        self.torque_limit_nm = np.broadcast_to(lim, (self.n,)).astype(float)
        self.start_ns = time.time_ns() if start_ns is None else int(start_ns)
        self._fh = open(self.path, "wb")
        comp = {"zstd": CompressionType.ZSTD, "lz4": CompressionType.LZ4, "none": CompressionType.NONE}[compression]
        self._w = Writer(self._fh, compression=comp)
        self._w.start(profile="ros2", library="torqueloop")
        js = self._w.register_schema("sensor_msgs/msg/JointState", "ros2msg", JOINT_STATE_MSG.encode())
        cs = self._w.register_schema("torqueloop_msgs/msg/ControlCycle", "ros2msg", CYCLE_MSG.encode())
        ls = self._w.register_schema("rcl_interfaces/msg/Log", "ros2msg", LOG_MSG.encode())
        self._ch_joint = self._w.register_channel("/joint_states", "cdr", js)
        self._ch_cycle = self._w.register_channel("/torqueloop/cycle", "cdr", cs)
        self._ch_log = self._w.register_channel("/rosout", "cdr", ls)
        self._w.add_metadata("torqueloop.run", {
            "joint_names": json.dumps(self.joint_names), "axis_names": json.dumps(self.axis_names),
            "n": str(self.n), "dim": str(self.dim), "torque_limit": json.dumps(_finite_or_str(self.torque_limit_nm)),
            "start_time_ns": str(self.start_ns),
            "channels": json.dumps({"/joint_states": "position q, velocity qd (as used by the controller), "
                                                     "effort tau_meas",
                                    "/torqueloop/cycle": "the other columns of log.npy",
                                    "/rosout": "safety state changes, faults, dropped rows"})})
        n, dim = self.n, self.dim
        jl = _Layout()
        jl.scalar("sec", "<i4")
        jl.scalar("nanosec", "<u4")
        jl.string("")                       # frame_id
        jl.strings(self.joint_names)
        jl.sequence("q", "<f8", n)
        jl.sequence("qd", "<f8", n)
        jl.sequence("tau_meas", "<f8", n)
        cl = _Layout()
        cl.scalar("sec", "<i4")
        cl.scalar("nanosec", "<u4")
        cl.scalar("t", "<f8")
        for name in ("ref_pos", "ref_vel", "ref_acc", "err"):
            cl.sequence(name, "<f8", dim)
        for name in ("tau_ctrl", "tau_cmd", "tau_meas", "tau_limit"):
            cl.sequence(name, "<f8", n)
        cl.sequence("sat", "u1", n)
        cl.scalar("safety", "<i4")
        cl.scalar("lateness_s", "<f8")
        cl.scalar("compute_s", "<f8")
        cl.sequence("fresh", "u1", n)
        cl.sequence("fault", "<i4", n)
        cl.sequence("enabled", "u1", n)
        self._joint_layout, self._cycle_layout = jl, cl
        self._last_safety: int | None = None
        self.rows_written = 0
        self.rows_dropped = 0
        self.dropped_t: list[float] = []     # [first, last] t of the dropped rows
        self.messages = 0
        self.error: BaseException | None = None
        self.closed = False
        self.threaded = bool(threaded)
        # the ring: rows head-1 .. tail are waiting; the control thread advances head (after
        # copying), the writer thread advances tail (after writing); each counter has one writer
        self._ring = np.zeros(int(ring_rows), dtype=self.dtype)
        self._head = 0
        self._tail = 0
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread = None
        if self.threaded:
            self._thread = threading.Thread(target=self._drain, name="torqueloop-mcap", daemon=True)
            self._thread.start()

    @property
    def ring_rows(self) -> int:
        """Rows the ring buffer holds."""
        return self._ring.shape[0]

    # -- the control thread ---------------------------------------------------------------
    def push(self, rows: np.ndarray) -> int:
        """Queue rows (shape (k,) of :attr:`dtype`) for the writer; never waits.

        Rows beyond the ring's free room are dropped (counted in :attr:`rows_dropped`, their
        time span in :attr:`dropped_t`).  Returns the number dropped by this call.
        """
        k = rows.shape[0]
        if k == 0 or self.closed:
            return 0
        if not self.threaded:
            self._write_block(rows)
            return 0
        cap = self._ring.shape[0]
        head = self._head
        take = min(k, cap - (head - self._tail))
        if take > 0:
            i = head % cap
            first = min(take, cap - i)
            self._ring[i:i + first] = rows[:first]
            if take > first:
                self._ring[:take - first] = rows[first:take]
            self._head = head + take
            self._wake.set()
        if take < k:
            self.rows_dropped += k - take
            t = rows["t"]
            if not self.dropped_t:
                self.dropped_t = [float(t[take]), float(t[k - 1])]
            else:
                self.dropped_t[1] = float(t[k - 1])
        return k - take

    # -- the writer thread ----------------------------------------------------------------
    def _drain(self) -> None:
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)   # Linux: this thread only
        except (AttributeError, OSError):
            pass
        cap = self._ring.shape[0]
        while True:
            head, tail = self._head, self._tail
            if head == tail:
                if self._stop.is_set():
                    return
                self._wake.wait(0.05)
                self._wake.clear()
                continue
            i = tail % cap
            k = min(head - tail, cap - i, 32)
            if self.error is None:
                try:
                    self._write_block(self._ring[i:i + k])
                except Exception as err:  # noqa: BLE001 - recorded; the rows are then dropped
                    self.error = err
            if self.error is not None:      # a failed writer: the rows count as dropped
                self.rows_dropped += k
            self._tail = tail + k

    def _write_block(self, rows: np.ndarray) -> None:
        """Encode and write ``rows`` (the writer thread, or the caller when not threaded)."""
        k = rows.shape[0]
        stamp = self.start_ns + np.round(rows["t"] * 1e9).astype(np.int64)
        sec, nsec = np.divmod(stamp, 1_000_000_000)
        joint = self._joint_layout.fill({"sec": sec, "nanosec": nsec, "q": rows["q"], "qd": rows["qd"],
                                         "tau_meas": rows["tau_meas"]})
        cyc = self._cycle_layout.fill({
            "sec": sec, "nanosec": nsec, "t": rows["t"], "ref_pos": rows["ref_pos"], "ref_vel": rows["ref_vel"],
            "ref_acc": rows["ref_acc"], "err": rows["err"], "tau_ctrl": rows["tau_ctrl"],
            "tau_cmd": rows["tau_cmd"], "tau_meas": rows["tau_meas"],
            "tau_limit": np.broadcast_to(self.torque_limit_nm, (k, self.n)), "sat": rows["sat"],
            "safety": rows["safety"], "lateness_s": rows["lateness_s"], "compute_s": rows["compute_s"],
            "fresh": rows["fresh"], "fault": rows["fault"], "enabled": rows["enabled"]})
        safety = rows["safety"]
        w = self._w
        for j in range(k):
            ts = int(stamp[j])
            w.add_message(self._ch_joint, log_time=ts, data=joint[j].tobytes(), publish_time=ts, sequence=self.rows_written)
            w.add_message(self._ch_cycle, log_time=ts, data=cyc[j].tobytes(), publish_time=ts, sequence=self.rows_written)
            self.messages += 2
            code = int(safety[j])
            if code != self._last_safety:
                level = _INFO if code == 0 else (_ERROR if code & 16 else _WARN)
                text = f"safety state {code}: {safety_text(code)} at t = {float(rows['t'][j]):.6g} s"
                w.add_message(self._ch_log, log_time=ts, data=_cdr_log(ts, level, "torqueloop.safety", text),
                              publish_time=ts)
                self.messages += 1
                self._last_safety = code
            self.rows_written += 1
            if self.threaded:
                time.sleep(0)       # hand the interpreter to the control thread between rows

    # -- the end --------------------------------------------------------------------------
    def close(self, meta: dict | None = None, *, timeout_s: float = 60.0) -> dict:
        """Stop the writer after it drained the ring, write the faults, the dropped rows and
        ``meta`` (config and result, meta.json's content) and finish the file.

        Returns the figures meta.json keeps (``path``, ``rows_written``, ``rows_dropped``,
        ``messages``, ``error``).  Idempotent.
        """
        if self.closed:
            return self.stats()
        self.closed = True
        if self._thread is not None:
            self._stop.set()
            self._wake.set()
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                self.error = self.error or TimeoutError(f"the MCAP writer did not finish within {timeout_s:g} s")
                self.rows_dropped += self._head - self._tail
                self._fh_abandon()
                return self.stats()
        try:
            w = self._w
            meta = meta or {}
            result = meta.get("result") if isinstance(meta.get("result"), dict) else {}
            for f in result.get("faults") or []:
                ts = self.start_ns + int(round(float(f.get("t_s", 0.0)) * 1e9))
                joint = f.get("joint")
                text = (f"fault {f.get('cause')}" + ("" if joint is None else f" joint {joint}")
                        + f": {f.get('message', '')}")
                w.add_message(self._ch_log, log_time=ts, data=_cdr_log(ts, _ERROR, "torqueloop.fault", text),
                              publish_time=ts)
                self.messages += 1
            if self.rows_dropped:
                ts = self.start_ns + int(round(self.dropped_t[0] * 1e9)) if self.dropped_t else self.start_ns
                text = (f"{self.rows_dropped} telemetry rows not recorded here (MCAP writer behind: ring of "
                        f"{self.ring_rows} rows full)" + (f" from t = {self.dropped_t[0]:.6g} s to "
                                                          f"{self.dropped_t[1]:.6g} s" if self.dropped_t else "")
                        + "; log.npy has every row")
                w.add_message(self._ch_log, log_time=ts, data=_cdr_log(ts, _WARN, "torqueloop.mcap", text),
                              publish_time=ts)
                self.messages += 1
            rest = {k: v for k, v in meta.items() if k != "result"}
            w.add_metadata("torqueloop.config", {str(k): json.dumps(v, default=str) for k, v in rest.items()})
            w.add_metadata("torqueloop.result", {str(k): json.dumps(v, default=str) for k, v in result.items()})
            w.finish()
        except Exception as err:  # noqa: BLE001 - recorded in the stats
            self.error = self.error or err
        finally:
            try:
                self._fh.close()
            except OSError as err:
                self.error = self.error or err
        return self.stats()

    def _fh_abandon(self) -> None:
        """The writer thread is stuck (a hung disk): leave the file as it is."""
        try:
            self._fh.flush()
        except (OSError, ValueError):
            pass

    def stats(self) -> dict:
        """``path``, ``rows_written``, ``rows_dropped``, ``dropped_t_s``, ``messages``, ``ring_rows``, ``error``."""
        return {"path": str(self.path), "rows_written": self.rows_written, "rows_dropped": self.rows_dropped,
                "dropped_t_s": list(self.dropped_t), "messages": self.messages, "ring_rows": self.ring_rows,
                "error": None if self.error is None else f"{type(self.error).__name__}: {self.error}"}


def _finite_or_str(a) -> list:
    return [float(v) if np.isfinite(v) else str(float(v)) for v in np.asarray(a, float).ravel()]


def write_mcap(run_dir, out=None) -> dict:
    """Write ``log.mcap`` for a run already on disk (its ``log.npy`` and ``meta.json``).

    Parameters
    ----------
    run_dir : path
        The run's folder.
    out : path, optional
        The MCAP file (default ``run_dir/log.mcap``).

    Returns
    -------
    dict
        :meth:`McapRecorder.stats` (nothing is dropped: written in this thread).
    """
    from .telemetry import column_labels, read_log, read_meta
    run_dir = Path(run_dir)
    flat = read_log(run_dir, flat=True)
    meta = read_meta(run_dir)
    log = read_log(run_dir)
    n, dim = log["q"].shape[1], log["err"].shape[1]
    joints = column_labels(flat, "q")
    axes = column_labels(flat, "err")
    rec = McapRecorder(run_dir / "log.mcap" if out is None else out, log.dtype, joints, axes,
                       torque_limit_nm=_limits(meta.get("torque_limit"), n), threaded=False,
                       start_ns=_start_ns(meta))
    for a in range(0, log.shape[0], 1024):
        rec.push(log[a:a + 1024])
    return rec.close(meta)


def _start_ns(meta: dict) -> int:
    """The run's start from meta.json (ns since the epoch); now when it has none."""
    from .telemetry import utc_ns
    try:
        return utc_ns(meta["start_time_utc"])
    except (KeyError, ValueError, TypeError):
        return time.time_ns()


def _limits(value, n: int) -> np.ndarray:
    """meta.json's ``torque_limit`` as (n,) floats (NaN where absent or unreadable)."""
    try:
        a = np.asarray([float(v) for v in value], float)
        if a.shape == (n,):
            return a
    except (TypeError, ValueError):
        pass
    return np.full(n, np.nan)
