"""The telemetry log's rows as ROS 2 messages (CDR, little-endian), shared by the MCAP file
(:mod:`controller.telemetry_mcap`) and the live view (:mod:`controller.telemetry_live`): the
``ros2msg`` schema texts, :class:`RowEncoder` (``/joint_states``, ``/torqueloop/cycle``, the
safety changes for ``/rosout``), the faults as ``/rosout`` messages, and the install hints of
the optional packages."""

from __future__ import annotations

import numpy as np

__all__ = ["RowEncoder", "CYCLE_MSG", "JOINT_STATE_MSG", "LOG_MSG", "fault_logs", "missing", "safety_text",
           "torque_limits"]

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


def missing(module: str, what: str, package: str, extra: str) -> str | None:
    """None when ``module`` can be imported, else why not with the install hint
    (``"<what> needs the '<package>' package (pip install 'torqueloop[<extra>]'): ..."``)."""
    import importlib
    try:
        importlib.import_module(module)
    except ImportError as err:
        return f"{what} needs the '{package}' package (pip install 'torqueloop[{extra}]'): {type(err).__name__}: {err}"
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


class RowEncoder:
    """The log's rows as ROS 2 CDR messages (``/joint_states``, ``/torqueloop/cycle``) and the
    safety state's changes as ``/rosout`` texts: the one encoding of the MCAP file and the live
    view (:mod:`controller.telemetry_live`).

    Parameters
    ----------
    dtype : numpy.dtype
        The rows' dtype, :func:`controller.telemetry.log_dtype` ``(n, dim)``.
    joint_names : sequence of str, length n
    axis_names : sequence of str, length dim
    torque_limit_nm : ndarray, shape (n,)
        The limit the safety layer clips to [N m|N] (NaN where unknown).
    start_ns : int
        The run's start, ns since the epoch (message time = start + cycle time).
    """

    def __init__(self, dtype: np.dtype, joint_names, axis_names, torque_limit_nm, start_ns: int):
        self.n = np.dtype(dtype)["q"].shape[0]
        self.torque_limit_nm = np.asarray(torque_limit_nm, float)
        self.start_ns = int(start_ns)
        n, dim = self.n, np.dtype(dtype)["err"].shape[0]
        jl = _Layout()
        jl.scalar("sec", "<i4")
        jl.scalar("nanosec", "<u4")
        jl.string("")                       # frame_id
        jl.strings(list(joint_names))
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

    def encode(self, rows: np.ndarray):
        """The messages of ``k`` rows.

        Parameters
        ----------
        rows : ndarray, shape (k,)
            Rows of the dtype (SI units and radians, as in ``log.npy``).

        Returns
        -------
        stamp : ndarray, shape (k,), int64
            Message times, ns since the epoch.
        joint, cycle : ndarray, shape (k, size), uint8
            The ``JointState`` and ``ControlCycle`` messages, one row each.
        """
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
        return stamp, joint, cyc

    def safety_changes(self, rows: np.ndarray) -> list:
        """The rows where the safety code changes (from the previous call's last row on).

        Returns
        -------
        list of (int, int, str, str)
            ``(row index, level, logger name, text)`` for each change, in row order.
        """
        out = []
        for j in np.flatnonzero(np.diff(rows["safety"], prepend=-1 if self._last_safety is None
                                        else self._last_safety) != 0):
            code = int(rows["safety"][j])
            if code == self._last_safety:
                continue
            level = _INFO if code == 0 else (_ERROR if code & 16 else _WARN)
            out.append((int(j), level, "torqueloop.safety",
                        f"safety state {code}: {safety_text(code)} at t = {float(rows['t'][j]):.6g} s"))
            self._last_safety = code
        return out


def fault_logs(meta: dict | None, start_ns: int) -> list:
    """The faults of ``meta["result"]`` (``t_s`` [s], ``cause``, ``joint``, ``message``) as
    ``/rosout`` messages: ``(stamp_ns, level, logger name, text)``."""
    result = (meta or {}).get("result")
    out = []
    for f in (result.get("faults") or []) if isinstance(result, dict) else []:
        joint = f.get("joint")
        out.append((int(start_ns) + int(round(float(f.get("t_s", 0.0)) * 1e9)), _ERROR, "torqueloop.fault",
                    f"fault {f.get('cause')}" + ("" if joint is None else f" joint {joint}")
                    + f": {f.get('message', '')}"))
    return out


def torque_limits(value, n: int) -> np.ndarray:
    """meta.json's ``torque_limit`` as (n,) floats (NaN where absent or unreadable)."""
    try:
        a = np.asarray([float(v) for v in value], float)
        if a.shape == (n,):
            return a
    except (TypeError, ValueError):
        pass
    return np.full(n, np.nan)
