"""The live view: the log's channels streamed to Foxglove (or PlotJuggler) over a Foxglove WebSocket.

:class:`LiveServer` serves the channels of the MCAP recording (:mod:`controller.telemetry_mcap`:
``/joint_states`` as ``sensor_msgs/msg/JointState``, ``/torqueloop/cycle``, ``/rosout``; ROS 2
CDR with their ``ros2msg`` schemas, the same bytes as in ``log.mcap``) with the ``foxglove-sdk``
WebSocket server (protocol ``foxglove.websocket.v1``; its server runs in threads of its own, in
native code, and drops the oldest messages of a client that does not read).  The rows are
decimated to ``rate_hz`` of cycle time; every change of the safety state is sent.

During a run it lives in the telemetry writer process (:class:`controller.telemetry_mcap.McapRecorder`
with ``live=``), never in the control process: a viewer that connects, stalls or disconnects
costs the control thread nothing.  ``torqueloop replay RUN_DIR --live`` uses it in its own
process (:func:`replay`).  Beside it, :class:`PageServer` serves the live page (plots in any
browser) over HTTP on a second port.  Both bound to 127.0.0.1 only.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources

import numpy as np

from dynamics.errors import ConfigError

__all__ = ["LiveServer", "PageServer", "live_available", "replay", "HOST"]

#: the only address the server binds to (a viewer on this machine, or through an SSH tunnel)
HOST = "127.0.0.1"
#: the channels a viewer may subscribe to (and ``/tf`` with the robot's frames)
TOPICS = ("/joint_states", "/torqueloop/cycle", "/rosout")
#: how long after a viewer's first subscription the data start when it did not subscribe to all
SUBSCRIBE_GRACE_S = 0.5
#: how long the server stays up after the last message when a viewer is subscribed [s]: the
#: SDK cannot say when its queues have left, and it runs in the MCAP writer's process at the
#: lowest priority (a loaded machine starves it for a while); nobody subscribed, no wait
LINGER_S = 1.0
#: seconds of messages (two channels at the decimated rate) buffered per viewer before the
#: oldest are dropped
BACKLOG_S = 4.0


def live_available() -> str | None:
    """None when ``foxglove-sdk`` can be imported, else why not (the install hint)."""
    from .telemetry_ros2 import missing
    return missing("foxglove", "the live view", "foxglove-sdk", "live")


class PageServer:
    """The live page (``controller/web/live.html`` and ``live.js``, package data): an HTTP server
    on 127.0.0.1 in threads of its own that serves the page and ``info.json`` (the WebSocket
    address to connect to, the joint and axis names), nothing else.  The page is a Foxglove
    WebSocket client of its own: it decodes the channels' ROS 2 CDR messages from their schema
    texts and plots them (any browser, no internet).

    Parameters
    ----------
    info : dict
        Served as ``info.json`` (``ws``: the WebSocket address; ``joint_names``, ``axis_names``).
    port : int
        TCP port on 127.0.0.1 (0: one the OS chooses).
    """

    FILES = {"/": ("live.html", "text/html; charset=utf-8"), "/index.html": ("live.html", "text/html; charset=utf-8"),
             "/live.js": ("live.js", "text/javascript; charset=utf-8")}

    def __init__(self, info: dict, port: int = 0):
        web = resources.files(__package__) / "web"
        files = {path: (web.joinpath(name).read_bytes(), ctype) for path, (name, ctype) in self.FILES.items()}
        files["/info.json"] = (json.dumps(info).encode(), "application/json")

        class _Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server's name
                body, ctype = files.get(self.path.split("?")[0], (None, None))
                if body is None:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Cache-Control", "no-store")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format, *args):  # noqa: A002 - library code does not print
                pass

        try:
            self._httpd = ThreadingHTTPServer((HOST, int(port)), _Handler)
        except OSError as err:
            raise ConfigError(f"cannot serve the live page on {HOST}:{int(port)} ({err})",
                              field="telemetry.live") from err
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.1},
                                        name="torqueloop-live-page", daemon=True)
        self._thread.start()

    @property
    def address(self) -> str:
        """``http://127.0.0.1:PORT/`` (open it in a browser)."""
        return f"http://{HOST}:{self._httpd.server_address[1]}/"

    def close(self) -> None:
        """Stop serving (a page already loaded keeps what it received)."""
        self._httpd.shutdown()
        self._httpd.server_close()


class LiveServer:
    """A Foxglove WebSocket server with the log's channels, and the live page
    (:class:`PageServer`) on a second port.

    Parameters
    ----------
    dtype, joint_names, axis_names, start_ns
        As :class:`controller.telemetry_ros2.RowEncoder` (``dtype``: ``log_dtype(n, dim)``).
    torque_limit_nm : array_like, shape (n,), optional
        The limits the safety layer clips to [N m|N] (default: unknown, NaN).
    rate_hz : float
        Rows sent per second of cycle time (at most one per cycle; > 0).
    port : int
        TCP port on 127.0.0.1; 0: one the OS chooses (:attr:`port` tells which).  A port that
        cannot be bound (busy, or privileged) raises :class:`~dynamics.errors.ConfigError`
        naming ``telemetry.live_port``.
    name : str
        The server's name shown by the viewer.
    speed : float
        Cycle time per second of wall time (1 for a run, X for ``replay --speed X``): with
        ``rate_hz`` it sizes the per-viewer buffer to :data:`BACKLOG_S` seconds of messages (at
        least foxglove-sdk's default 1024), so a viewer that falls behind for a moment (a
        stalled process, a block of rows sent at once) loses nothing; one further behind loses
        the oldest messages, and the loop never waits.
    frames : controller.telemetry_ros2.FrameEncoder, optional
        The robot's frames, sent on ``/tf`` with the rows sent, at most
        :data:`~controller.telemetry_ros2.TF_RATE_HZ` a second of cycle time (None: no ``/tf``).
    """

    def __init__(self, dtype: np.dtype, joint_names, axis_names, *, torque_limit_nm=None, start_ns: int,
                 rate_hz: float = 50.0, port: int = 0, name: str = "torqueloop", speed: float = 1.0, frames=None):
        why = live_available()
        if why is not None:
            raise ConfigError(why, field="telemetry.live")
        if not (np.isfinite(rate_hz) and rate_hz > 0):
            raise ConfigError(f"must be > 0, got {rate_hz!r}", field="telemetry.live_rate_hz")
        import foxglove
        from foxglove.websocket import ServerListener

        from .telemetry_ros2 import CYCLE_MSG, JOINT_STATE_MSG, LOG_MSG, TF_MSG, TF_RATE_HZ, Decimator, RowEncoder
        n = np.dtype(dtype)["q"].shape[0]
        lim = np.full(n, np.nan) if torque_limit_nm is None else np.asarray(torque_limit_nm, float)
        self.start_ns = int(start_ns)
        self.rate_hz = float(rate_hz)
        joint_names, axis_names = [str(v) for v in joint_names], [str(v) for v in axis_names]
        self._enc = RowEncoder(dtype, joint_names, axis_names,
                               np.broadcast_to(lim, (n,)).astype(float), self.start_ns)
        self._rows = Decimator(self.rate_hz)
        self._frames = frames
        self._tf_rows = Decimator(TF_RATE_HZ)      # of the rows sent: at most the file's /tf rate
        self.messages = 0               # messages given to the server
        self.rows_sent = 0
        #: set when a viewer has subscribed to every channel, or SUBSCRIBE_GRACE_S after its first
        #: subscription (a viewer subscribes to the channels it shows, in one request, but the
        #: server reports them one by one: data sent after the first alone would miss the others)
        self.subscribed = threading.Event()
        ev = self.subscribed
        topics: set[str] = set()
        wanted = set(TOPICS) | ({"/tf"} if frames is not None else set())
        lock = threading.Lock()

        #: subscriptions open now (every viewer's, every channel's)
        self.subscriptions = 0
        server = self

        class _Listener(ServerListener):
            def on_subscribe(self, client, channel):    # noqa: ARG002 - the SDK's signature
                with lock:
                    server.subscriptions += 1
                    first = not topics
                    topics.add(str(getattr(channel, "topic", channel)))
                    if topics >= wanted:
                        ev.set()
                    elif first:
                        t = threading.Timer(SUBSCRIBE_GRACE_S, ev.set)
                        t.daemon = True
                        t.start()

            def on_unsubscribe(self, client, channel):  # noqa: ARG002 - the SDK's signature
                with lock:
                    server.subscriptions = max(0, server.subscriptions - 1)

        self._ctx = foxglove.Context()
        backlog = max(1024, int(np.ceil(BACKLOG_S * (2.0 if frames is None else 3.0) * self.rate_hz * max(float(speed), 1.0))) + 64)
        try:
            self._server = foxglove.start_server(name=name, host=HOST, port=int(port), context=self._ctx,
                                                 server_listener=_Listener(), message_backlog_size=backlog)
        except RuntimeError as err:
            if "bind" not in str(err).lower():
                raise
            raise ConfigError(f"cannot listen on {HOST}:{int(port)} ({err}); choose another port, or 0 for one "
                              "the OS picks", field="telemetry.live_port") from err
        try:
            def channel(topic, schema_name, text):
                return foxglove.Channel(topic, schema=foxglove.Schema(name=schema_name, encoding="ros2msg",
                                                                      data=text.encode()),
                                        message_encoding="cdr", context=self._ctx)
            self._ch_joint = channel(TOPICS[0], "sensor_msgs/msg/JointState", JOINT_STATE_MSG)
            self._ch_cycle = channel(TOPICS[1], "torqueloop_msgs/msg/ControlCycle", CYCLE_MSG)
            self._ch_log = channel(TOPICS[2], "rcl_interfaces/msg/Log", LOG_MSG)
            self._ch_tf = None if frames is None else channel("/tf", "tf2_msgs/msg/TFMessage", TF_MSG)
            self._port = int(self._server.port)
            self._page = PageServer({"ws": self.address, "name": name, "joint_names": joint_names,
                                     "axis_names": axis_names})
        except BaseException:
            self._server.stop()
            raise
        self.closed = False

    @property
    def port(self) -> int:
        """The TCP port the server listens on."""
        return self._port

    @property
    def address(self) -> str:
        """``ws://127.0.0.1:PORT`` (Foxglove: Open connection, Foxglove WebSocket)."""
        return f"ws://{HOST}:{self.port}"

    @property
    def page_address(self) -> str:
        """``http://127.0.0.1:PORT/``: the live page (:class:`PageServer`), for any browser."""
        return self._page.address

    def publish(self, rows: np.ndarray) -> int:
        """Send the rows that start a new ``1 / rate_hz`` interval of cycle time, and a ``/rosout``
        message for every change of the safety state.

        Parameters
        ----------
        rows : ndarray, shape (k,)
            Consecutive rows of the dtype.

        Returns
        -------
        int
            Rows sent.
        """
        if rows.shape[0] == 0 or self.closed:
            return 0
        keep = self._rows.keep(rows["t"])
        changes = self._enc.safety_changes(rows)
        c = 0
        tf = {}
        if keep.size:
            sent = rows[keep]
            stamp, joint, cyc = self._enc.encode(sent)
            if self._frames is not None:
                tf_stamp, tf_msgs = self._frames.encode(sent[self._tf_rows.keep(sent["t"])])
                tf = {int(v): tf_msgs[i] for i, v in enumerate(tf_stamp)}
        for i, j in enumerate(keep):
            while c < len(changes) and changes[c][0] <= j:
                self._log_change(rows, changes[c])
                c += 1
            ts = int(stamp[i])
            self._ch_joint.log(joint[i].tobytes(), log_time=ts)
            self._ch_cycle.log(cyc[i].tobytes(), log_time=ts)
            self.messages += 2
            if ts in tf:
                self._ch_tf.log(tf[ts].tobytes(), log_time=ts)
                self.messages += 1
        for ch in changes[c:]:
            self._log_change(rows, ch)
        self.rows_sent += int(keep.size)
        return int(keep.size)

    def _log_change(self, rows, change) -> None:
        j, level, name, text = change
        self.log(self.start_ns + int(round(float(rows["t"][j]) * 1e9)), level, name, text)

    def log(self, stamp_ns: int, level: int, name: str, text: str) -> None:
        """Send one ``/rosout`` message (``rcl_interfaces/msg/Log``; level 20 info, 30 warn, 40 error)."""
        from .telemetry_ros2 import _cdr_log
        if not self.closed:
            self._ch_log.log(_cdr_log(stamp_ns, level, name, text), log_time=int(stamp_ns))
            self.messages += 1

    def finish(self, meta: dict | None) -> None:
        """Send the faults of ``meta["result"]`` as ``/rosout`` messages (as the MCAP file has them)."""
        from .telemetry_ros2 import fault_logs
        for ts, level, name, text in fault_logs(meta, self.start_ns):
            self.log(ts, level, name, text)

    def stats(self) -> dict:
        """``address``, ``page``, ``rate_hz``, ``rows_sent``, ``messages``."""
        return {"address": self.address, "page": self.page_address, "rate_hz": self.rate_hz, "rows_sent": self.rows_sent,
                "messages": self.messages}

    def close(self, linger_s: float = LINGER_S) -> None:
        """Stop the server, after ``linger_s`` [s] for the last messages to leave when a viewer
        is subscribed (at once when none is). Idempotent."""
        if self.closed:
            return
        self.closed = True
        if self.subscriptions > 0:
            time.sleep(max(0.0, linger_s))
        self._server.stop()
        self._page.close()


def replay(log: np.ndarray, meta: dict, joint_names, axis_names, *, start_ns: int, speed: float = 1.0,
           rate_hz: float = 50.0, port: int = 0, wait_viewer_s: float = 0.0, on_ready=None,
           block_s: float = 0.02, frames=None) -> dict:
    """Stream a recorded log through a :class:`LiveServer` as if live, at ``speed`` times its pace.

    Parameters
    ----------
    log : ndarray, shape (rows,)
        The log with vector fields (:func:`controller.telemetry.read_log`).
    meta : dict
        The run's meta.json (``torque_limit``, ``result`` with its faults).
    joint_names, axis_names : sequence of str
        Lengths n and dim.
    start_ns : int
        The run's start, ns since the epoch.
    speed : float
        Cycle time per wall-clock time (> 0; 2: twice as fast).
    rate_hz, port
        As :class:`LiveServer`.
    wait_viewer_s : float
        Wait up to this long for a viewer to subscribe before the first row [s].
    on_ready : callable, optional
        Called with the server's address and the live page's once they listen (the CLI prints them).
    block_s : float
        Wall-clock time between sends [s].
    frames : controller.telemetry_ros2.FrameEncoder, optional
        The robot's frames on ``/tf``.

    Returns
    -------
    dict
        :meth:`LiveServer.stats` and ``viewer`` (whether one subscribed before the start).
    """
    if not (np.isfinite(speed) and speed > 0):
        raise ConfigError(f"must be > 0, got {speed!r}", field="--speed")
    from .telemetry_ros2 import torque_limits
    n = log.dtype["q"].shape[0]
    srv = LiveServer(log.dtype, joint_names, axis_names, torque_limit_nm=torque_limits(meta.get("torque_limit"), n),
                     start_ns=start_ns, rate_hz=rate_hz, port=port, name="torqueloop replay", speed=speed,
                     frames=frames)
    try:
        if on_ready is not None:
            on_ready(srv.address, srv.page_address)
        viewer = srv.subscribed.wait(wait_viewer_s) if wait_viewer_s > 0 else srv.subscribed.is_set()
        t = log["t"]
        t0 = float(t[0]) if t.size else 0.0
        wall0 = time.monotonic()
        i = 0
        while i < t.size:
            now = (time.monotonic() - wall0) * speed + t0
            j = int(np.searchsorted(t, now, side="right"))
            if j > i:
                srv.publish(log[i:j])
                i = j
            if i < t.size:
                time.sleep(min(block_s, max(0.0, (float(t[i]) - now) / speed)) or block_s)
        srv.finish(meta)
    finally:
        srv.close()
    return {**srv.stats(), "viewer": bool(viewer)}
