"""The telemetry log's rows as ROS 2 messages (CDR, little-endian), shared by the MCAP file
(:mod:`controller.telemetry_mcap`) and the live view (:mod:`controller.telemetry_live`): the
``ros2msg`` schema texts, :class:`RowEncoder` (``/joint_states``, ``/torqueloop/cycle``, the
safety changes for ``/rosout``), the faults as ``/rosout`` messages, and the install hints of
the optional packages."""

from __future__ import annotations

import numpy as np

__all__ = ["RowEncoder", "FrameEncoder", "Decimator", "CYCLE_MSG", "JOINT_STATE_MSG", "LOG_MSG", "TF_MSG",
           "TF_RATE_HZ", "fault_logs", "missing", "safety_text", "torque_limits"]

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

#: ``tf2_msgs/msg/TFMessage`` with its dependencies
TF_MSG = ("geometry_msgs/TransformStamped[] transforms\n" + _SEP + "MSG: geometry_msgs/TransformStamped\n"
          "std_msgs/Header header\nstring child_frame_id\ngeometry_msgs/Transform transform\n" + _SEP
          + "MSG: std_msgs/Header\nbuiltin_interfaces/Time stamp\nstring frame_id\n" + _SEP
          + "MSG: builtin_interfaces/Time\n" + _TIME_MSG + _SEP + "MSG: geometry_msgs/Transform\n"
          "geometry_msgs/Vector3 translation\ngeometry_msgs/Quaternion rotation\n" + _SEP
          + "MSG: geometry_msgs/Vector3\nfloat64 x\nfloat64 y\nfloat64 z\n" + _SEP
          + "MSG: geometry_msgs/Quaternion\nfloat64 x 0\nfloat64 y 0\nfloat64 z 0\nfloat64 w 1\n")

#: ``/tf`` messages per second of cycle time at most in ``log.mcap`` (the live view sends one
#: with each row it sends): a 3-D view needs no more, and the forward kinematics of a parallel
#: robot (a Newton solve and the link frames, 0.3-0.4 ms of Python a row for the 3RRR and the
#: Stewart platform on the 2-core test machine) at every 1 kHz row would cost the writer a third
#: of a core
TF_RATE_HZ = 50.0

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

    def count(self, count: int) -> None:
        """A sequence's length (its elements follow)."""
        self._align(4)
        self.buf += int(count).to_bytes(4, "little")

    def array(self, name: str, dtype: str, count: int) -> None:
        """``count`` values without a length (fields of a nested message, stored one after the other)."""
        dt = np.dtype(dtype)
        self._align(dt.itemsize)
        self.slots[name] = (len(self.buf), dt, int(count))
        self.buf += bytes(dt.itemsize * count)

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


class Decimator:
    """Which rows start a new ``1 / rate_hz`` interval of cycle time (at most one row an interval),
    across calls: the live view's rows and the ``/tf`` messages of ``log.mcap``.

    Parameters
    ----------
    rate_hz : float
        Intervals per second of cycle time (> 0).
    """

    def __init__(self, rate_hz: float):
        self.rate_hz = float(rate_hz)
        self._bin = -1                  # the last interval a row was kept in (floor(t * rate_hz))

    def keep(self, t: np.ndarray) -> np.ndarray:
        """Indices of the rows to keep.

        Parameters
        ----------
        t : ndarray, shape (k,)
            Cycle times of consecutive rows [s].

        Returns
        -------
        ndarray of int, shape (k',)
        """
        bins = np.floor(np.asarray(t, float) * self.rate_hz + 1e-6).astype(np.int64)     # t = k / rate: bin k
        keep = np.flatnonzero(np.diff(bins, prepend=self._bin) > 0)
        if bins.size:
            self._bin = max(self._bin, int(bins[-1]))
        return keep


def quaternions(R: np.ndarray) -> np.ndarray:
    """Unit quaternions (x, y, z, w), w >= 0, of rotation matrices.

    Parameters
    ----------
    R : ndarray, shape (..., 3, 3)

    Returns
    -------
    ndarray, shape (..., 4)
    """
    R = np.asarray(R, float)
    lead = R.shape[:-2]
    R = R.reshape(-1, 3, 3)
    r = lambda i, j: R[:, i, j]  # noqa: E731
    tr = r(0, 0) + r(1, 1) + r(2, 2)
    case = np.argmax(np.stack([tr, r(0, 0), r(1, 1), r(2, 2)], axis=1), axis=1)
    q = np.empty((R.shape[0], 4))
    # the largest of w, x, y, z computed from the diagonal, the others from it (Shepperd)
    with np.errstate(invalid="ignore", divide="ignore"):
        s = np.sqrt(np.maximum(1.0 + tr, 0.0)) * 2.0
        w = np.stack([(r(2, 1) - r(1, 2)) / s, (r(0, 2) - r(2, 0)) / s, (r(1, 0) - r(0, 1)) / s, s / 4], axis=1)
        s = np.sqrt(np.maximum(1.0 + r(0, 0) - r(1, 1) - r(2, 2), 0.0)) * 2.0
        x = np.stack([s / 4, (r(0, 1) + r(1, 0)) / s, (r(0, 2) + r(2, 0)) / s, (r(2, 1) - r(1, 2)) / s], axis=1)
        s = np.sqrt(np.maximum(1.0 + r(1, 1) - r(0, 0) - r(2, 2), 0.0)) * 2.0
        y = np.stack([(r(0, 1) + r(1, 0)) / s, s / 4, (r(1, 2) + r(2, 1)) / s, (r(0, 2) - r(2, 0)) / s], axis=1)
        s = np.sqrt(np.maximum(1.0 + r(2, 2) - r(0, 0) - r(1, 1), 0.0)) * 2.0
        z = np.stack([(r(0, 2) + r(2, 0)) / s, (r(1, 2) + r(2, 1)) / s, s / 4, (r(1, 0) - r(0, 1)) / s], axis=1)
    for c, v in enumerate((w, x, y, z)):
        q[case == c] = v[case == c]
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    q[q[:, 3] < 0] *= -1.0
    return q.reshape(lead + (4,))


def _inv(T: np.ndarray) -> np.ndarray:
    """Inverse of rigid transforms, (..., 4, 4)."""
    out = np.zeros_like(T)
    Rt = np.swapaxes(T[..., :3, :3], -1, -2)
    out[..., :3, :3] = Rt
    out[..., :3, 3] = -(Rt @ T[..., :3, 3:])[..., 0]
    out[..., 3, 3] = 1.0
    return out


def _rot_z(angle) -> np.ndarray:
    """Rotations about z, (k, 3, 3)."""
    c, s = np.cos(angle), np.sin(angle)
    R = np.zeros(np.shape(angle) + (3, 3))
    R[..., 0, 0], R[..., 0, 1], R[..., 1, 0], R[..., 1, 1], R[..., 2, 2] = c, -s, s, c, 1.0
    return R


def _z_to(d: np.ndarray) -> np.ndarray:
    """The smallest rotations taking the z axis onto the unit vectors ``d`` (k, 3): (k, 3, 3)."""
    d = d / np.linalg.norm(d, axis=1, keepdims=True)
    R = np.empty((d.shape[0], 3, 3))
    for i, (x, y, z) in enumerate(d):
        if z < -1.0 + 1e-12:
            R[i] = np.diag([1.0, -1.0, -1.0])       # half a turn about x
            continue
        V = np.array([[0.0, 0.0, x], [0.0, 0.0, y], [-x, -y, 0.0]])   # [ez x d]_x
        R[i] = np.eye(3) + V + V @ V / (1.0 + z)
    return R


class FrameEncoder:
    """The robot's frames at the logged joint positions, by the model's own kinematics, as
    ``tf2_msgs/msg/TFMessage`` (``/tf``): one message per row holding the whole tree, so a
    viewer that joins late has every frame with the next message (no ``/tf_static`` needed).

    Frames (root ``world``, the model's base frame; lengths in metres):

    * a serial arm: ``world -> base_link -> link1 -> ... -> link<n> -> tool``, its link frames
      (``model.link_poses``: DH frames, or a URDF's joint frames) and the tool
      (``model.forward_kinematics``), each relative to the one before;
    * a parallel robot: ``world -> base -> platform``, ``T_base_platform`` of
      ``model.forward_kinematics`` at the platform pose of ``model.forward_kinematics_task``
      (a Newton solve from the logged reference minus the error in task space, else from the
      last pose found); the 3RRR also ``base -> proximal<i>`` (origin A_i, x towards the
      elbow B_i) and ``base -> distal<i>`` (origin B_i, x towards the platform joint C_i), the
      Stewart platform ``base -> leg<i>`` (origin at the base joint, z along the leg).

    A row whose kinematics fail (no convergence, a singularity, non-finite values) gets no
    message (counted in :attr:`skipped`).

    Parameters
    ----------
    model : dynamics.base.Model
        The controller's model (a serial arm or a parallel robot).
    start_ns : int
        The run's start, ns since the epoch.
    space : {"joint", "task"}
        The run's control space: in task space ``ref_pos - err`` is the measured pose, the
        forward kinematics' first guess.
    """

    def __init__(self, model, start_ns: int, space: str = "joint"):
        from dynamics.errors import ConfigError
        self.model = model
        self.start_ns = int(start_ns)
        self.parallel = hasattr(model, "task_dof")
        self.space = space
        self._task_guess = self.parallel and space == "task"
        self.family = getattr(model, "family", None)
        n = int(model.dof)
        if self.family == "serial":
            links = ["base_link"] + [f"link{i}" for i in range(1, n + 1)]
            pairs = [("world", "base_link")] + list(zip(links[:-1], links[1:])) + [(links[-1], "tool")]
        elif self.parallel:
            pairs = [("world", "base"), ("base", "platform")]
            if self.family == "rrr":
                pairs += [("base", f"proximal{i}") for i in range(1, 4)] + [("base", f"distal{i}") for i in range(1, 4)]
            elif self.family == "stewart":
                pairs += [("base", f"leg{i}") for i in range(1, 7)]
        else:
            raise ConfigError(f"no frames for a {type(model).__name__} model", field="robot.file")
        #: (parent, child) of each transform, in message order
        self.frames = pairs
        lay = _Layout()
        lay.count(len(pairs))
        for j, (parent, child) in enumerate(pairs):
            lay.scalar(f"sec{j}", "<i4")
            lay.scalar(f"nanosec{j}", "<u4")
            lay.string(parent)
            lay.string(child)
            lay.array(f"x{j}", "<f8", 7)            # translation x y z, rotation x y z w
        self._layout = lay
        self._X = None
        self.skipped = 0

    def transforms(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The transforms of :attr:`frames` at each row, parent to child.

        Parameters
        ----------
        rows : ndarray, shape (k,)
            Log rows (``q``; ``ref_pos`` and ``err`` in task space).

        Returns
        -------
        ok : ndarray of bool, shape (k,)
            Rows whose kinematics succeeded.
        T : ndarray, shape (k_ok, len(frames), 4, 4)
            Their transforms [m].
        """
        q = np.asarray(rows["q"], float)
        if self.family == "serial":
            ok = np.all(np.isfinite(q), axis=1)
            if not ok.any():
                self.skipped += q.shape[0]
                return ok, np.empty((0, len(self.frames), 4, 4))
            P = self.model.link_poses(q[ok]).reshape(-1, q.shape[1] + 1, 4, 4)
            tool = self.model.forward_kinematics(q[ok]).reshape(-1, 4, 4)
            T = np.concatenate([P[:, :1], _inv(P[:, :-1]) @ P[:, 1:], (_inv(P[:, -1]) @ tool)[:, None]], axis=1)
        else:
            ok = np.zeros(q.shape[0], bool)
            out = []
            for i in range(q.shape[0]):
                T = self._parallel(rows[i])
                if T is not None:
                    ok[i] = True
                    out.append(T)
            T = np.array(out).reshape(-1, len(self.frames), 4, 4)
        good = np.all(np.isfinite(T), axis=(1, 2, 3))
        if not good.all():
            idx = np.flatnonzero(ok)
            ok[idx[~good]] = False
            T = T[good]
        self.skipped += int(q.shape[0] - ok.sum())
        return ok, T

    def _parallel(self, row):
        from dynamics.errors import TorqueloopError
        m = self.model
        q = np.asarray(row["q"], float)
        if not np.all(np.isfinite(q)):
            return None
        guess = self._X
        if self._task_guess and np.shape(row["ref_pos"]) == (m.task_dof,):
            g = np.asarray(row["ref_pos"], float) - np.asarray(row["err"], float)
            guess = g if np.all(np.isfinite(g)) else guess
        if guess is None:
            guess = m.home_pose
        try:
            X = np.asarray(m.forward_kinematics_task(q, guess=guess), float)
            Tp = np.asarray(m.forward_kinematics(q, pose=X), float)
            extra = []
            if self.family == "rrr":
                A, B, C = m.base_joints, m.elbow_positions(q), m.platform_joint_positions(X)
                for o, d in ((A, B - A), (B, C - B)):
                    E = np.zeros((3, 4, 4))
                    E[:, :3, :3] = _rot_z(np.arctan2(d[:, 1], d[:, 0]))
                    E[:, :2, 3] = o
                    E[:, 3, 3] = 1.0
                    extra.append(E)
            elif self.family == "stewart":
                b = np.asarray(m.base_joints, float)
                P = np.asarray(m.platform_joints, float) @ Tp[:3, :3].T + Tp[:3, 3]
                E = np.zeros((6, 4, 4))
                E[:, :3, :3] = _z_to(P - b)
                E[:, :3, 3] = b
                E[:, 3, 3] = 1.0
                extra.append(E)
        except TorqueloopError:
            self._X = None
            return None
        self._X = X
        return np.concatenate([np.eye(4)[None], Tp[None], *extra], axis=0)

    def copy(self) -> "FrameEncoder":
        """A new encoder of the same model (its own warm start and counts: one per stream)."""
        return FrameEncoder(self.model, self.start_ns, self.space)

    def encode(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The ``TFMessage`` of each row whose kinematics succeeded.

        Parameters
        ----------
        rows : ndarray, shape (k,)

        Returns
        -------
        stamp : ndarray, shape (k',), int64
            Message times, ns since the epoch.
        msgs : ndarray, shape (k', size), uint8
            The CDR messages.
        """
        ok, T = self.transforms(rows)
        stamp = self.start_ns + np.round(np.asarray(rows["t"], float)[ok] * 1e9).astype(np.int64)
        if not stamp.size:
            return stamp, np.empty((0, len(self._layout.buf)), np.uint8)
        sec, nsec = np.divmod(stamp, 1_000_000_000)
        x = np.concatenate([T[:, :, :3, 3], quaternions(T[:, :, :3, :3])], axis=2)     # (k', m, 7)
        values = {}
        for j in range(len(self.frames)):
            values[f"sec{j}"], values[f"nanosec{j}"], values[f"x{j}"] = sec, nsec, x[:, j]
        return stamp, self._layout.fill(values)


def frame_encoder(robot_file, start_ns: int, space: str = "joint") -> FrameEncoder:
    """A :class:`FrameEncoder` of the robot file's model (``dynamics.load_model``)."""
    from dynamics import load_model
    return FrameEncoder(load_model(robot_file), start_ns, space)


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
