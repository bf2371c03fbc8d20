"""The per-cycle log as an MCAP file (ROS 2 bags, Foxglove, PlotJuggler), written off the control thread.

:class:`McapRecorder` takes the rows of :func:`controller.telemetry.log_dtype` that the
:class:`~controller.telemetry.TelemetryWriter` flushes (one block of ``buffer_rows`` rows at a
time, copied into a preallocated ring buffer in shared memory: the control thread's only work)
and a writer process drains the ring into ``log.mcap`` (a process, not a thread: see
:class:`McapRecorder`).  A full ring (a writer that cannot keep up, a stalled disk) drops the
newest rows and counts them; it never makes the control thread wait.

Channels (ROS 2 CDR encoding, ``ros2msg`` schemas: ROS 2 tools, ``rosbags``, Foxglove and
PlotJuggler decode them from the schema text, no ROS installation needed):

``/joint_states``  ``sensor_msgs/msg/JointState``
    one per cycle: joint names, measured position [rad|m], the velocity the controller used
    [rad/s|m/s], measured effort [N m|N].
``/torqueloop/cycle``  ``torqueloop_msgs/msg/ControlCycle`` (its text: :data:`CYCLE_MSG`)
    one per cycle: reference, tracking error, controller / commanded / measured torque and the
    torque limit, clipped flags, safety code, lateness and compute time, drive flags.
``/tf``  ``tf2_msgs/msg/TFMessage``
    the robot's frames (a serial arm's links and tool; a parallel robot's base, platform and
    actuated links) by the model's own kinematics at the logged joint positions, at most
    :data:`~controller.telemetry_ros2.TF_RATE_HZ` per second of cycle time
    (:class:`~controller.telemetry_ros2.FrameEncoder`); when the run names its robot file.
``/rosout``  ``rcl_interfaces/msg/Log``
    every change of the safety state and every fault of the run (the faults at the end, with
    their own time stamps), the dropped rows.

Metadata records: ``torqueloop.run`` (joint and axis names, sizes, field descriptions) and,
at the end, ``torqueloop.config`` and ``torqueloop.result`` (the run's meta.json: config,
versions, result; each top-level key as JSON text).  Message times are the run's start time
(UTC, ns since the epoch) plus the cycle time ``t``.

Encoding a cycle costs the writer 2 ``mcap`` ``add_message`` calls (about 13 us each on the
2-core test machine, 23-37 us a row with compression: ``benchmarks/bench_telemetry.py``); the
messages' bytes are laid out for a whole block at once with numpy, since every message of a
run has the same size.
"""

from __future__ import annotations

import json
import os
import pickle
import select
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from dynamics.errors import ConfigError, TorqueloopError

from .telemetry_ros2 import (CYCLE_MSG, JOINT_STATE_MSG, LOG_MSG, TF_MSG, TF_RATE_HZ,  # noqa: F401 - re-exported
                             Decimator, RowEncoder, _cdr_log, fault_logs, missing, safety_text, torque_limits)

__all__ = ["McapRecorder", "McapFile", "write_mcap", "CYCLE_MSG", "JOINT_STATE_MSG", "LOG_MSG", "mcap_available"]

_WARN = 30      # rcl_interfaces/msg/Log levels


def mcap_available() -> str | None:
    """None when the ``mcap`` package can be imported, else why not (the install hint)."""
    return missing("mcap.writer", "MCAP recording", "mcap", "mcap")


class McapFile:
    """The MCAP file itself: the channels, the rows encoded as messages, the closing records.

    Used by the writer process of :class:`McapRecorder` and, in the caller's thread, by
    :func:`write_mcap` (runs on disk).

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
    start_ns : int
        The run's start, ns since the epoch (message time = start + cycle time).
    compression : {"zstd", "lz4", "none"}
    frames : controller.telemetry_ros2.FrameEncoder, optional
        The robot's frames on ``/tf`` (at most :data:`~controller.telemetry_ros2.TF_RATE_HZ`
        messages per second of cycle time); None: no ``/tf``.
    """

    def __init__(self, path, dtype: np.dtype, joint_names, axis_names, *, torque_limit_nm=None,
                 start_ns: int, compression: str = "zstd", frames=None):
        why = mcap_available()
        if why is not None:
            raise ConfigError(why, field="telemetry.mcap")
        from mcap.writer import CompressionType, Writer
        self.path = Path(path)
        self.dtype = np.dtype(dtype)
        self.n = self.dtype["q"].shape[0]
        self.dim = self.dtype["err"].shape[0]
        self.joint_names = [str(v) for v in joint_names]
        self.axis_names = [str(v) for v in axis_names]
        if len(self.joint_names) != self.n or len(self.axis_names) != self.dim:
            raise TorqueloopError(f"MCAP: {len(self.joint_names)} joint names for {self.n} joints, "
                                  f"{len(self.axis_names)} axis names for {self.dim} axes")
        lim = np.full(self.n, np.nan) if torque_limit_nm is None else np.asarray(torque_limit_nm, float)
        self.torque_limit_nm = np.broadcast_to(lim, (self.n,)).astype(float)
        self.start_ns = int(start_ns)
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
        self._frames = frames
        self._tf_rows = Decimator(TF_RATE_HZ)
        if frames is not None:
            ts_ = self._w.register_schema("tf2_msgs/msg/TFMessage", "ros2msg", TF_MSG.encode())
            self._ch_tf = self._w.register_channel("/tf", "cdr", ts_)
        self._w.add_metadata("torqueloop.run", {
            "joint_names": json.dumps(self.joint_names), "axis_names": json.dumps(self.axis_names),
            "n": str(self.n), "dim": str(self.dim), "torque_limit": json.dumps(_finite_or_str(self.torque_limit_nm)),
            "start_time_ns": str(self.start_ns),
            "channels": json.dumps({"/joint_states": "position q, velocity qd (as used by the controller), "
                                                     "effort tau_meas",
                                    "/torqueloop/cycle": "the other columns of log.npy",
                                    **({"/tf": f"the robot's frames (root 'world') at most {TF_RATE_HZ:g} "
                                               "per second of cycle time"} if frames is not None else {}),
                                    "/rosout": "safety state changes, faults, dropped rows"})})
        self._enc = RowEncoder(self.dtype, self.joint_names, self.axis_names, self.torque_limit_nm,
                               self.start_ns)
        self.rows_written = 0
        self.messages = 0
        #: ``/tf`` messages written
        self.tf_messages = 0

    def write_rows(self, rows: np.ndarray) -> None:
        """Encode and write rows: a JointState and a ControlCycle each, and a Log message where
        the safety code changes.

        Parameters
        ----------
        rows : ndarray, shape (k,)
            Rows of :attr:`dtype` (SI units and radians, as in ``log.npy``).
        """
        if rows.shape[0] == 0:
            return
        stamp, joint, cyc = self._enc.encode(rows)
        changes = self._enc.safety_changes(rows)
        w = self._w
        c = 0
        for j in range(rows.shape[0]):
            ts = int(stamp[j])
            w.add_message(self._ch_joint, log_time=ts, data=joint[j].tobytes(), publish_time=ts,
                          sequence=self.rows_written)
            w.add_message(self._ch_cycle, log_time=ts, data=cyc[j].tobytes(), publish_time=ts,
                          sequence=self.rows_written)
            self.messages += 2
            while c < len(changes) and changes[c][0] == j:
                self.log(ts, *changes[c][1:])
                c += 1
            self.rows_written += 1
        if self._frames is not None:
            stamp, msgs = self._frames.encode(rows[self._tf_rows.keep(rows["t"])])
            for j in range(stamp.size):
                ts = int(stamp[j])
                w.add_message(self._ch_tf, log_time=ts, data=msgs[j].tobytes(), publish_time=ts,
                              sequence=self.tf_messages)
                self.tf_messages += 1
            self.messages += stamp.size

    def log(self, stamp_ns: int, level: int, name: str, text: str) -> None:
        """Write one ``/rosout`` message.

        Parameters
        ----------
        stamp_ns : int
            Its time, ns since the epoch.
        level : int
            ``rcl_interfaces/msg/Log`` level (20 info, 30 warn, 40 error).
        name : str
            The logger's name (``torqueloop.safety``, ``torqueloop.fault``...).
        text : str
        """
        self._w.add_message(self._ch_log, log_time=int(stamp_ns), data=_cdr_log(stamp_ns, level, name, text),
                            publish_time=int(stamp_ns))
        self.messages += 1

    def finish(self, meta: dict | None, rows_dropped: int = 0, dropped_t=(), ring_rows: int = 0) -> None:
        """Write the faults of ``meta["result"]`` and the dropped rows as ``/rosout`` messages,
        ``meta`` as metadata and the file's summary; close the file.

        Parameters
        ----------
        meta : dict or None
            meta.json's content (``result`` with its ``faults``: ``t_s`` [s], ``cause``,
            ``joint``, ``message``).
        rows_dropped : int
            Rows the recorder could not queue.
        dropped_t : sequence of float
            ``[first, last]`` cycle time of those rows [s].
        ring_rows : int
            The ring's size, for the message.
        """
        try:
            meta = meta or {}
            result = meta.get("result") if isinstance(meta.get("result"), dict) else {}
            for ts, level, name, text in fault_logs(meta, self.start_ns):
                self.log(ts, level, name, text)
            if rows_dropped:
                ts = self.start_ns + (int(round(dropped_t[0] * 1e9)) if dropped_t else 0)
                self.log(ts, _WARN, "torqueloop.mcap",
                         f"{rows_dropped} telemetry rows not recorded here (MCAP writer behind: ring of "
                         f"{ring_rows} rows full)" + (f" from t = {dropped_t[0]:.6g} s to {dropped_t[1]:.6g} s"
                                                      if dropped_t else "") + "; log.npy has every row")
            rest = {k: v for k, v in meta.items() if k != "result"}
            self._w.add_metadata("torqueloop.config", {str(k): json.dumps(v, default=str) for k, v in rest.items()})
            self._w.add_metadata("torqueloop.result", {str(k): json.dumps(v, default=str) for k, v in result.items()})
            self._w.finish()
        finally:
            self._fh.close()

#: the ring's header: int64 head (rows pushed), tail (rows taken by the writer); rows from byte 64
_HEADER = 64


def _send(fh, obj) -> None:
    """One frame on a pipe: 4-byte length, then the pickle."""
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    fh.write(len(data).to_bytes(4, "little") + data)
    fh.flush()


def _recv(fh):
    """One frame of :func:`_send`; EOFError when the other side is gone."""
    head = fh.read(4)
    if len(head) < 4:
        raise EOFError("pipe closed")
    size = int.from_bytes(head, "little")
    data = fh.read(size)
    if len(data) < size:
        raise EOFError("pipe closed")
    return pickle.loads(data)


def _readable(fh, timeout_s: float) -> bool:
    """True when ``fh`` has data (or EOF) within ``timeout_s``."""
    return bool(select.select([fh], [], [], timeout_s)[0])


class McapRecorder:
    """Record telemetry rows into an MCAP file and/or stream them live, from a writer process
    (see module docstring).

    The control thread copies rows into a ring buffer in shared memory (:meth:`push`, never
    waits); a process of its own (``python -c`` of this module, niced, started here, before the
    run: no re-import of the caller's main script) drains it into an :class:`McapFile`.  A
    process rather than a thread: a writer thread holds the interpreter lock for its ~25 us of
    Python per row, and the control thread waits for it (measured on the compiled offline loop
    of ``3rrr_circle_direct.toml``: +3.5 us of control-thread CPU a cycle with a writer thread,
    +1.4 us with this process, see README).  If the control process dies, the writer still finishes the file with
    the rows it received.  The ring's counters are plain int64 stores (one writer each): the
    writer reads rows 1 ms after it saw the head move, where a weakly ordered CPU could show
    the head before the rows.  POSIX only (``select`` on a pipe).

    Parameters
    ----------
    path, dtype, joint_names, axis_names, torque_limit_nm, compression
        As :class:`McapFile`; ``path`` None: no MCAP file (the live view only).
    live : dict, optional
        Also serve the rows live from the writer process
        (:class:`controller.telemetry_live.LiveServer`): ``{"rate_hz": float, "port": int}``
        (port 0: the OS chooses; :attr:`live_address` tells).
    ring_rows : int
        Rows the ring holds (preallocated shared memory: ``ring_rows * dtype.itemsize`` bytes).
    start_ns : int, optional
        The run's start, ns since the epoch (default: now).
    frames : dict, optional
        The robot's frames on ``/tf`` (file and live view): ``{"robot_file": path, "space":
        "joint"|"task"}``; the writer process loads the model (its kernels from numba's cache,
        compiled by the control process moments before) before it reports ready.  A model
        that cannot be loaded leaves ``/tf`` out (``tf_error`` in :meth:`stats`).
    avoid_cpus : sequence of int, optional
        CPUs the writer process (and the live view's server threads in it) must not run on:
        the control loop's pinned CPU (``[loop.realtime] cpu``), so that the writer's work
        (and the kernel's loopback networking it causes) stays off the loop's core.  Applied
        where the process may run on another CPU; otherwise (one CPU, or no other CPU allowed)
        the writer keeps its CPUs and :attr:`cpus_note` says why.
    start_timeout_s : float
        How long to wait for the writer process to open the file (and load the model: a
        read-only install compiles its kernels again).
    """

    def __init__(self, path, dtype: np.dtype, joint_names, axis_names, *, torque_limit_nm=None,
                 ring_rows: int = 65536, start_ns: int | None = None, compression: str = "zstd",
                 start_timeout_s: float = 300.0, live: dict | None = None, frames: dict | None = None,
                 avoid_cpus=None):
        from multiprocessing import shared_memory
        why = mcap_available() if path is not None else None
        if why is not None:
            raise ConfigError(why, field="telemetry.mcap")
        if live is not None:
            from .telemetry_live import live_available
            why = live_available()
            if why is not None:
                raise ConfigError(why, field="telemetry.live")
        if path is None and live is None:
            raise TorqueloopError("telemetry recorder: neither an MCAP file nor the live view asked for")
        if ring_rows < 1:
            raise ConfigError(f"must be >= 1, got {ring_rows!r}", field="telemetry.mcap_buffer_rows")
        self.path = None if path is None else Path(path)
        self.dtype = np.dtype(dtype)
        self.start_ns = time.time_ns() if start_ns is None else int(start_ns)
        #: ``ws://127.0.0.1:PORT`` of the live view, or None
        self.live_address: str | None = None
        #: ``http://127.0.0.1:PORT/``: the live page (plots in a browser), or None
        self.live_page: str | None = None
        #: the CPUs the writer process runs on (None: not known), and why it was not moved off
        #: ``avoid_cpus`` where it was not (None: it was, or nothing asked)
        self.writer_cpus: list[int] | None = None
        self.cpus_note: str | None = None
        self.rows_dropped = 0
        self.dropped_t: list[float] = []     # [first, last] t of the dropped rows
        self.closed = False
        self._result: dict | None = None
        self._proc = None
        cap = int(ring_rows)
        self._cap = cap
        self._shm = shared_memory.SharedMemory(create=True, size=_HEADER + cap * self.dtype.itemsize)
        try:
            self._ctr = np.ndarray((2,), np.int64, buffer=self._shm.buf)
            self._ctr[:] = 0
            self._ring = np.ndarray((cap,), self.dtype, buffer=self._shm.buf, offset=_HEADER)
            self._ring.view(np.uint8)[:] = 0     # its pages mapped now, not in the run's cycles
            #: the ring's bytes, one row of ``itemsize`` per row: rows are copied as bytes (a
            #: structured assignment goes field by field, 10x slower)
            self._raw = self._ring.view(np.uint8).reshape(cap, self.dtype.itemsize)
            self._head = 0
            root = str(Path(__file__).resolve().parents[1])
            env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, *filter(None, [os.environ.get("PYTHONPATH")])])}
            self._proc = subprocess.Popen(
                [sys.executable, "-c", "from controller.telemetry_mcap import _writer_main; _writer_main()"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, close_fds=True)
            _send(self._proc.stdin, {
                "shm": self._shm.name, "dtype": self.dtype, "cap": cap,
                "path": None if self.path is None else str(self.path), "live": live,
                "joint_names": [str(v) for v in joint_names], "axis_names": [str(v) for v in axis_names],
                "torque_limit_nm": None if torque_limit_nm is None else np.asarray(torque_limit_nm, float),
                "start_ns": self.start_ns, "compression": compression, "frames": frames,
                "avoid_cpus": None if avoid_cpus is None else sorted({int(c) for c in avoid_cpus})})
            if not _readable(self._proc.stdout, start_timeout_s):
                raise TorqueloopError(f"{self._what}: the telemetry writer process did not start within "
                                      f"{start_timeout_s:g} s")
            try:
                kind, detail = _recv(self._proc.stdout)
            except EOFError:
                kind, detail = "error", f"the process ended (exit code {self._proc.wait(5)})"
            if kind == "config_error":
                raise ConfigError(detail[0], field=detail[1])
            if kind != "ready":
                raise TorqueloopError(f"{self._what}: the telemetry writer could not start: {detail}")
            self.live_address = detail.get("live_address")
            self.live_page = detail.get("live_page")
            self.writer_cpus = detail.get("cpus")
            self.cpus_note = detail.get("cpus_note")
        except BaseException:
            self._release(kill=True)
            raise

    @property
    def _what(self) -> str:
        return str(self.path) if self.path is not None else "live view"

    def wait_viewer(self, timeout_s: float) -> bool:
        """Wait until a viewer subscribes to a live channel (call before the run starts).

        Parameters
        ----------
        timeout_s : float
            At most this long [s].

        Returns
        -------
        bool
            True when a viewer subscribed, False when the time ran out (or no live view).
        """
        if self.live_address is None or self.closed:
            return False
        _send(self._proc.stdin, {"op": "wait_viewer", "timeout_s": float(timeout_s)})
        if not _readable(self._proc.stdout, timeout_s + 10.0):
            raise TorqueloopError("live view: the telemetry writer did not answer")
        try:
            kind, detail = _recv(self._proc.stdout)
        except EOFError as err:
            raise TorqueloopError("live view: the telemetry writer process ended") from err
        return kind == "viewer" and bool(detail)

    @property
    def ring_rows(self) -> int:
        """Rows the ring buffer holds."""
        return self._cap

    @property
    def pid(self) -> int | None:
        """The writer process's id."""
        return None if self._proc is None else self._proc.pid

    def push(self, rows: np.ndarray) -> int:
        """Queue rows for the writer; never waits.

        Rows beyond the ring's free room are dropped (counted in :attr:`rows_dropped`, their
        time span in :attr:`dropped_t`).

        Parameters
        ----------
        rows : ndarray, shape (k,)
            Rows of :attr:`dtype`.

        Returns
        -------
        int
            The number of rows this call dropped.
        """
        k = rows.shape[0]
        if k == 0 or self.closed:
            return 0
        cap = self._cap
        head = self._head
        take = min(k, cap - (head - int(self._ctr[1])))
        if take > 0:
            if rows.dtype != self.dtype:
                raise TorqueloopError(f"MCAP recorder: rows of dtype {rows.dtype}, expected {self.dtype}")
            src = np.ascontiguousarray(rows[:take]).view(np.uint8).reshape(take, self.dtype.itemsize)
            i = head % cap
            first = min(take, cap - i)
            self._raw[i:i + first] = src[:first]
            if take > first:
                self._raw[:take - first] = src[first:]
            self._head = head + take
            self._ctr[0] = self._head        # after the rows (the writer reads up to it)
        if take < k:
            self.rows_dropped += k - take
            t = rows["t"]
            if not self.dropped_t:
                self.dropped_t = [float(t[take]), float(t[k - 1])]
            else:
                self.dropped_t[1] = float(t[k - 1])
        return k - take

    def close(self, meta: dict | None = None, *, timeout_s: float = 120.0) -> dict:
        """Let the writer drain the ring, write the faults, the dropped rows and ``meta`` and
        finish the file; then end the writer process and free the shared memory.  Idempotent.

        Parameters
        ----------
        meta : dict, optional
            meta.json's content (config, versions, ``result``), JSON-serialisable.
        timeout_s : float
            How long to wait for the writer [s]; past it the process is killed and the
            error recorded.

        Returns
        -------
        dict
            :meth:`stats`.
        """
        if self.closed:
            return self.stats()
        self.closed = True
        try:
            _send(self._proc.stdin, {"meta": meta, "rows_dropped": self.rows_dropped,
                                     "dropped_t": list(self.dropped_t), "ring_rows": self._cap})
            if _readable(self._proc.stdout, timeout_s):
                kind, detail = _recv(self._proc.stdout)
                self._result = detail if kind == "done" else {"error": str(detail)}
            else:
                self._result = {"error": f"TimeoutError: the MCAP writer did not finish within {timeout_s:g} s"}
        except (OSError, EOFError, ValueError) as err:
            self._result = {"error": f"the MCAP writer process ended early ({type(err).__name__}: {err})"}
        self._release(kill=self._result.get("error") is not None)
        return self.stats()

    def _release(self, *, kill: bool) -> None:
        proc = self._proc
        if proc is not None:
            for fh in (proc.stdin, proc.stdout):
                try:
                    fh.close()
                except OSError:
                    pass
            try:
                proc.wait(0.5 if kill else 10.0)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10.0)
        self._ctr = self._ring = self._raw = None
        try:
            self._shm.close()
            self._shm.unlink()
        except (OSError, BufferError):
            pass

    def stats(self) -> dict:
        """``path``, ``rows_written``, ``rows_dropped``, ``dropped_t_s``, ``messages``, ``ring_rows``,
        ``error``, ``tf_messages`` (``/tf`` in the file), ``tf_skipped`` (rows whose kinematics
        failed), ``tf_error`` (the model could not be loaded); ``live`` (:meth:`controller.telemetry_live.LiveServer.stats`) with the live view."""
        r = self._result or {}
        return {"path": None if self.path is None else str(self.path), "live": r.get("live"),
                "rows_written": int(r.get("rows_written", 0)),
                "rows_dropped": self.rows_dropped + int(r.get("rows_lost", 0)),
                "dropped_t_s": list(self.dropped_t), "messages": int(r.get("messages", 0)),
                "ring_rows": self._cap, "error": r.get("error"), "tf_messages": int(r.get("tf_messages", 0)),
                "tf_skipped": int(r.get("tf_skipped", 0)), "tf_error": r.get("tf_error")}


def _place(avoid) -> tuple[list[int] | None, str | None]:
    """Move this process off the CPUs ``avoid`` (before any thread starts: they inherit it).

    Returns the CPUs it may run on (None where the platform does not tell) and why it was not
    moved (None: moved, or nothing asked)."""
    if not hasattr(os, "sched_getaffinity"):
        return None, (None if not avoid else "CPU affinity not supported on this platform")
    allowed = set(os.sched_getaffinity(0))
    if not avoid:
        return sorted(allowed), None
    rest = allowed - set(avoid)
    if not rest:
        return sorted(allowed), (f"the writer may run only on CPU(s) {sorted(allowed)}, all of them the "
                                 f"loop's ({sorted(set(avoid))}): it shares the loop's core")
    if rest != allowed:
        try:
            os.sched_setaffinity(0, rest)
        except OSError as err:
            return sorted(allowed), f"CPU affinity {sorted(rest)} not applied: {err}"
    return sorted(rest), None


def _writer_main() -> None:
    """The writer process: drain the ring into an :class:`McapFile` until told to close (or
    until the control process is gone: then the file is finished with what arrived).

    Frames (:func:`_send`) on stdin: the parameters, then the closing data; on the original
    stdout: ``("ready", None)`` or ``("error", text)``, then ``("done", figures)``."""
    from multiprocessing import resource_tracker, shared_memory
    inp = sys.stdin.buffer
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)       # stray prints go to stderr, not into the frames
    try:
        os.nice(19)
    except OSError:
        pass
    cpus = cpus_note = None
    try:
        p = _recv(inp)
        cpus, cpus_note = _place(p.get("avoid_cpus"))
        shm = shared_memory.SharedMemory(name=p["shm"])
        try:    # the control process owns (and unlinks) it; this process's tracker must not
            resource_tracker.unregister(shm._name, "shared_memory")  # noqa: SLF001
        except Exception:  # noqa: BLE001 - no tracker: nothing to undo
            pass
        cap = int(p["cap"])
        ctr = np.ndarray((2,), np.int64, buffer=shm.buf)
        ring = np.ndarray((cap,), p["dtype"], buffer=shm.buf, offset=_HEADER)
        f = live = frames = tf_error = None
        if p.get("frames"):
            from .telemetry_ros2 import frame_encoder
            try:
                frames = frame_encoder(p["frames"]["robot_file"], p["start_ns"], p["frames"].get("space", "joint"))
            except Exception as err:  # noqa: BLE001 - no /tf then; reported at close
                tf_error = f"{type(err).__name__}: {err}"
        if p["path"] is not None:
            f = McapFile(p["path"], p["dtype"], p["joint_names"], p["axis_names"],
                         torque_limit_nm=p["torque_limit_nm"], start_ns=p["start_ns"], compression=p["compression"],
                         frames=frames)
        if p["live"] is not None:
            from .telemetry_live import LiveServer
            live = LiveServer(p["dtype"], p["joint_names"], p["axis_names"], torque_limit_nm=p["torque_limit_nm"],
                              start_ns=p["start_ns"], rate_hz=p["live"]["rate_hz"], port=p["live"]["port"],
                              frames=None if frames is None else frames.copy())
    except ConfigError as err:      # a bad setting (a busy live port): the parent raises it again
        _send(out, ("config_error", (err.message, err.field)))
        return
    except Exception as err:  # noqa: BLE001 - reported to the parent
        _send(out, ("error", f"{type(err).__name__}: {err}"))
        return
    _send(out, ("ready", {"live_address": None if live is None else live.address,
                          "live_page": None if live is None else live.page_address,
                          "cpus": cpus, "cpus_note": cpus_note}))
    error = None
    lost = 0
    closing = None
    seen = 0
    live_error = None
    viewer_deadline = None      # a wait_viewer request: answer when a viewer subscribed or then
    while True:
        if viewer_deadline is not None and (live.subscribed.is_set() or time.monotonic() >= viewer_deadline):
            _send(out, ("viewer", live.subscribed.is_set()))
            viewer_deadline = None
        head, tail = int(ctr[0]), int(ctr[1])
        if head != seen:
            # rows stored before the head was: let the stores settle before reading them
            # (ordered on x86; a pause where the memory model is weaker)
            seen = head
            time.sleep(0.001)
        if head == tail:
            if closing is not None:
                break
            if _readable(inp, 0.01):
                try:
                    frame = _recv(inp)
                except (EOFError, OSError, pickle.UnpicklingError):     # the control process is gone
                    frame = {}
                if frame.get("op") == "wait_viewer":
                    viewer_deadline = (time.monotonic() + frame["timeout_s"]) if live is not None else 0.0
                    if live is None:
                        _send(out, ("viewer", False))
                        viewer_deadline = None
                else:
                    closing = frame
            continue
        i = tail % cap
        k = min(head - tail, cap - i, 256)
        rows = ring[i:i + k].copy()
        if live is not None:
            try:
                live.publish(rows)
            except Exception as err:  # noqa: BLE001 - the live view is best effort; reported at close
                live_error = live_error or f"{type(err).__name__}: {err}"
        if error is None and f is not None:
            try:
                f.write_rows(rows)
            except Exception as err:  # noqa: BLE001 - reported at close; the rows are lost
                error = f"{type(err).__name__}: {err}"
        if error is not None:
            lost += k
        ctr[1] = tail + k
    if live is not None:
        try:
            live.finish(closing.get("meta"))
            live.close()
        except Exception as err:  # noqa: BLE001 - reported
            live_error = live_error or f"{type(err).__name__}: {err}"
    try:
        if f is not None:
            f.finish(closing.get("meta"), closing.get("rows_dropped", 0) + lost, closing.get("dropped_t", ()),
                     closing.get("ring_rows", cap))
    except Exception as err:  # noqa: BLE001 - reported
        error = error or f"{type(err).__name__}: {err}"
    del ctr, ring
    shm.close()
    try:
        _send(out, ("done", {"rows_written": 0 if f is None else f.rows_written,
                             "messages": 0 if f is None else f.messages, "rows_lost": lost, "error": error,
                             "tf_messages": 0 if f is None else f.tf_messages, "tf_error": tf_error,
                             "tf_skipped": 0 if f is None or frames is None else f._frames.skipped,
                             "live": None if live is None else {**live.stats(), "error": live_error}}))
    except OSError:
        pass


def _finite_or_str(a) -> list:
    return [float(v) if np.isfinite(v) else str(float(v)) for v in np.asarray(a, float).ravel()]


def write_mcap(path, log: np.ndarray, meta: dict, joint_names, axis_names, *, start_ns: int, frames=None) -> dict:
    """Write a whole log as an MCAP file in this thread (a run on disk: ``torqueloop export``).

    Parameters
    ----------
    path : path
        The MCAP file (overwritten).
    log : ndarray, shape (rows,)
        The log with vector fields (:func:`controller.telemetry.read_log`).
    meta : dict
        The run's meta.json (config, result, ``torque_limit``).
    joint_names, axis_names : sequence of str
        Lengths n and dim.
    start_ns : int
        The run's start, ns since the epoch.
    frames : controller.telemetry_ros2.FrameEncoder, optional
        The robot's frames on ``/tf``.

    Returns
    -------
    dict
        ``path``, ``rows_written``, ``messages``, ``tf_messages``.
    """
    n = log.dtype["q"].shape[0]
    f = McapFile(path, log.dtype, joint_names, axis_names, torque_limit_nm=torque_limits(meta.get("torque_limit"), n),
                 start_ns=start_ns, frames=frames)
    for a in range(0, log.shape[0], 1024):
        f.write_rows(log[a:a + 1024])
    f.finish(meta)
    return {"path": str(path), "rows_written": f.rows_written, "messages": f.messages, "tf_messages": f.tf_messages}
