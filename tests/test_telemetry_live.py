"""The live view (``run --live``, ``replay --live``): a WebSocket client of our own (the
``websockets`` package speaking the Foxglove WebSocket protocol v1, the
messages decoded by ``mcap_ros2``'s CDR decoder from the schema text the server advertises)
receives the channels at the configured rate with the values of log.npy; a client that stalls
or disconnects mid-run leaves the run's log bit-identical to a run without the live view.

The live page in headless Chromium: tests/test_live_browser.py.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("foxglove")
ws_client = pytest.importorskip("websockets.sync.client")
ros2_decoder = pytest.importorskip("mcap_ros2.decoder")
mcap_records = pytest.importorskip("mcap.records")

from controller.app.cli import main  # noqa: E402
from controller.app.run import build_run, load_run  # noqa: E402
from controller.telemetry import TelemetryWriter, read_log, read_meta, utc_ns  # noqa: E402
from controller.telemetry_ros2 import TF_RATE_HZ  # noqa: E402
from dynamics import load_model  # noqa: E402

try:
    from tests.config_mutations import VALUES
    from tests.telemetry_checks import CYCLE_FIELDS, check_rrr_tf
    from tests.telemetry_checks import equal as _equal
except ImportError:  # pragma: no cover - rootdir not on sys.path
    from config_mutations import VALUES
    from telemetry_checks import CYCLE_FIELDS, check_rrr_tf
    from telemetry_checks import equal as _equal

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "hil_configs" / "runs" / "3rrr_circle.toml"
pytestmark = pytest.mark.filterwarnings("ignore:connect\\(\\) must be used:DeprecationWarning")
TOPICS = ("/joint_states", "/torqueloop/cycle", "/rosout")
#: a run's channels: the robot's frames too (its meta names the robot file)
RUN_TOPICS = TOPICS + ("/tf",)


class Client:
    """A Foxglove WebSocket client (protocol ``foxglove.websocket.v1``, written from its spec; the
    SDK's server names it ``foxglove.sdk.v1``):
    waits for the server to advertise our three topics, subscribes to them, and collects the
    binary ``MessageData`` frames (opcode 1: uint32 subscription id, uint64 log time, payload)."""

    def __init__(self, address: str, *, max_queue=16, topics=TOPICS):
        self.ws = ws_client.connect(address, subprotocols=["foxglove.websocket.v1", "foxglove.sdk.v1"],
                                    max_queue=max_queue, open_timeout=60, compression=None, proxy=None)
        # foxglove-sdk's server accepts only the protocol's new name (the same messages)
        assert self.ws.subprotocol == "foxglove.sdk.v1"
        self.channels: dict[str, dict] = {}
        while set(topics) - set(self.channels):
            msg = self.ws.recv(timeout=60)
            if isinstance(msg, str):
                obj = json.loads(msg)
                if obj["op"] == "advertise":
                    for ch in obj["channels"]:
                        self.channels[ch["topic"]] = ch
        self.subs = {i + 1: self.channels[t] for i, t in enumerate(topics)}
        self.ws.send(json.dumps({"op": "subscribe", "subscriptions": [
            {"id": sid, "channelId": ch["id"]} for sid, ch in self.subs.items()]}))
        self.received: dict[str, list] = {t: [] for t in topics}

    def decoder(self, topic: str):
        ch = self.channels[topic]
        assert ch["encoding"] == "cdr" and ch["schemaEncoding"] == "ros2msg"
        schema = mcap_records.Schema(id=1, name=ch["schemaName"], encoding="ros2msg", data=ch["schema"].encode())
        return ros2_decoder.DecoderFactory().decoder_for("cdr", schema)

    def read(self, count: int | None = None, timeout_s: float = 600.0) -> None:
        """Collect messages until the server closes (or ``count`` are in); TimeoutError when
        nothing comes for ``timeout_s``."""
        from websockets.exceptions import ConnectionClosed
        got = 0
        while count is None or got < count:
            try:
                msg = self.ws.recv(timeout=timeout_s)
            except ConnectionClosed:
                return
            if isinstance(msg, bytes) and msg[0] == 1:
                sid, log_time = struct.unpack_from("<IQ", msg, 1)
                self.received[self.subs[sid]["topic"]].append((log_time, msg[13:]))
                got += 1

    def decoded(self, topic: str) -> list:
        dec = self.decoder(topic)
        return [(t, dec(data)) for t, data in self.received[topic]]



def _check_stream(client: Client, log: np.ndarray, meta: dict, rate_hz: float) -> None:
    """The client's messages: about ``rate_hz`` per second of cycle time, each equal to its row
    of log.npy (found by its time stamp), the safety changes on /rosout."""
    start_ns = utc_ns(meta["start_time_utc"])
    duration_s = float(log["t"][-1] - log["t"][0])
    js = client.decoded("/joint_states")
    cyc = client.decoded("/torqueloop/cycle")
    expected = duration_s * rate_hz
    assert 0.8 * expected <= len(js) <= 1.2 * expected + 2, (len(js), expected)
    assert len(cyc) == len(js)
    t_rx = np.array([(m.header.stamp.sec * 10**9 + m.header.stamp.nanosec - start_ns) * 1e-9 for _, m in js])
    assert np.all(np.diff(t_rx) > 0)
    # decimated: one row per 1/rate of cycle time (no two in one interval)
    assert np.all(np.diff(np.floor(t_rx * rate_hz + 1e-6)) >= 1)
    idx = np.searchsorted(log["t"], t_rx - 1e-7)
    assert np.all(np.abs(log["t"][idx] - t_rx) < 2e-6)
    rows = log[idx]
    assert [t for t, _ in js] == [m.header.stamp.sec * 10**9 + m.header.stamp.nanosec for _, m in js]
    assert all(m.name == list(meta["joint_names"]) for _, m in js)
    assert _equal([m.position for _, m in js], rows["q"])
    assert _equal([m.velocity for _, m in js], rows["qd"])
    assert _equal([m.effort for _, m in js], rows["tau_meas"])
    for field, column in CYCLE_FIELDS.items():
        assert _equal([getattr(m, field) for _, m in cyc], rows[column]), field
    assert _equal([m.tau_limit for _, m in cyc], np.tile(meta["torque_limit"], (len(cyc), 1)))
    safety = [m.msg for _, m in client.decoded("/rosout") if m.name == "torqueloop.safety"]
    assert "normal" in safety[0] and "disabled" in safety[-1]
    # /tf: the robot's frames with the rows sent, at most TF_RATE_HZ a second of cycle time
    tf = client.decoded("/tf")
    tf_rate = min(rate_hz, TF_RATE_HZ)
    assert 0.8 * duration_s * tf_rate <= len(tf) <= 1.2 * duration_s * tf_rate + 2, (len(tf), tf_rate)
    assert {t for t, _ in tf} <= {t for t, _ in js}
    assert check_rrr_tf([m for _, m in tf], log, start_ns, load_model(meta["robot_file"]), tf_rate) == len(tf)


def _watch_cli(args: list[str]) -> tuple[Client, str, str]:
    """The CLI in a process of its own, a :class:`Client` on the live address it prints reading
    until the server closes; returns the client, the address and the CLI's stdout (the lines
    up to the live page's address, which follows the live view's, and those after the run:
    communicate() reads the pipe itself, past what the line iterator buffered)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.Popen([sys.executable, "-m", "controller.app.cli", *args], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    head = []
    address = None
    try:
        for line in p.stdout:
            head.append(line)
            if "live view at ws://" in line:
                address = line.split("live view at ")[1].split()[0]
            if "live page at http://" in line:
                break
        else:
            p.wait(60)
            pytest.fail(f"no live addresses printed: {''.join(head)} {p.stderr.read()}")
        c = Client(address, topics=RUN_TOPICS)
        c.read()
        out, err = p.communicate(timeout=600)
        out = "".join(head) + out
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(30)
    assert p.returncode == 0, err
    return c, address, out


def test_run_live_streams_the_channels_at_the_rate_with_the_logs_values(tmp_path):
    """`run --live --wait-viewer`: the CLI prints the address; the client subscribes, the run
    starts, and the client gets ~duration x live_rate_hz rows equal to log.npy's."""
    out = tmp_path / "run"
    c, address, cli_out = _watch_cli(["run", str(DEMO), "--live", "--wait-viewer", "600", "--duration", "2",
                                      "--set", "telemetry.live_rate_hz=40", "--no-plots", "--no-progress",
                                      "-o", str(out)])
    assert address.startswith("ws://127.0.0.1:") and not address.endswith(":0")
    assert "live page at http://127.0.0.1:" in cli_out      # the built-in page (tests/test_live_browser.py)
    log, meta = read_log(out), read_meta(out)
    _check_stream(c, log, meta, 40.0)
    assert meta["live"]["rows_sent"] == len(c.received["/joint_states"]) and meta["live"]["error"] is None
    assert "mcap" not in meta and not (out / "log.mcap").exists()


@pytest.fixture(scope="module")
def baseline(tmp_path_factory):
    out = tmp_path_factory.mktemp("live") / "off"
    result = build_run(load_run(DEMO, duration_s=2.0), out_dir=out).execute()
    return out, result


def _run_with_client(out: Path, behaviour: str, monkeypatch):
    """A lock-step run with the live view streaming every row, and a client that ``stalls``
    (subscribes, never reads again) or ``disconnects`` (closes after its first message); the
    loop waits (at its third flush, in this test only) until the client did so: mid-run."""
    spec = load_run(DEMO, overrides={"telemetry.live": True, "telemetry.live_rate_hz": 1000.0}, duration_s=2.0)
    run = build_run(spec, out_dir=out)
    rec = run.loop.telemetry.recorder
    acted = threading.Event()
    holder = {}

    def client():
        try:
            c = holder["client"] = Client(rec.live_address, max_queue=1, topics=RUN_TOPICS)
            if behaviour == "disconnects":
                c.read(1)
                c.ws.close()
            acted.set()     # the stalled client never calls recv again
        except BaseException as err:  # noqa: BLE001 - reported by the test
            holder["error"] = err
            acted.set()

    th = threading.Thread(target=client, daemon=True)
    th.start()
    assert rec.wait_viewer(120)
    flushes = []
    original = TelemetryWriter.flush

    def flush(self):
        original(self)
        flushes.append(1)
        if len(flushes) == 3:
            assert acted.wait(120)

    monkeypatch.setattr(TelemetryWriter, "flush", flush)
    result = run.execute()
    th.join(30)
    assert "error" not in holder, holder.get("error")
    if behaviour == "stalls":
        holder["client"].ws.close()
    return result


@pytest.mark.parametrize("behaviour", ["stalls", "disconnects"])
def test_a_client_that_stalls_or_disconnects_leaves_the_run_bit_identical(baseline, tmp_path, monkeypatch,
                                                                           behaviour):
    off_dir, off = baseline
    on = _run_with_client(tmp_path / "on", behaviour, monkeypatch)
    a, b = read_log(off_dir), read_log(tmp_path / "on")
    assert b.shape == a.shape and on.n_cycles == off.n_cycles and on.status == off.status == "completed"
    for name in a.dtype.names:
        if name != "compute_s":      # CPU time, measured
            assert np.array_equal(a[name], b[name], equal_nan=a[name].dtype.kind == "f"), name
    for key, value in off.metrics.items():
        if "dead" not in key and "late" not in key and "compute" not in key:
            assert _equal(on.metrics[key], value), key
    live = read_meta(tmp_path / "on")["live"]
    assert live["error"] is None and live["rows_sent"] == a.shape[0]     # every row given to the server


def test_replay_live_streams_a_recorded_run_at_the_rate_with_its_values(baseline):
    run_dir, _ = baseline
    c, _, out = _watch_cli(["replay", str(run_dir), "--live", "--speed", "20", "--rate", "100",
                            "--wait-viewer", "600"])
    _check_stream(c, read_log(run_dir), read_meta(run_dir), 100.0)
    assert f"{len(c.received['/joint_states'])} rows" in out
    assert "live page at http://127.0.0.1:" in out


@pytest.mark.parametrize("argv", [
    ["replay", "{run}"],                                   # without --live
    ["replay", "{run}", "--live", "--speed", "0"],
    ["replay", "{run}", "--live", "--speed", "nan"],
    ["replay", "{run}", "--live", "--rate", "-1"],
    ["replay", "{run}", "--live", "--live-port", "70000"],
    ["replay", "{run}", "--live", "--wait-viewer", "-1"],
    ["replay", "{missing}", "--live"],
    ["run", str(DEMO), "--wait-viewer", "5", "--no-plots"],  # without the live view
])
def test_bad_live_arguments_exit_2_naming_them(baseline, tmp_path, capsys, argv):
    run_dir, _ = baseline
    argv = [a.format(run=run_dir, missing=tmp_path / "nothing") for a in argv]
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and ("--" in err or str(tmp_path / "nothing") in err), err


@pytest.mark.parametrize("how", ["--live-port", "[telemetry] live_port", "replay"])
def test_a_busy_live_port_exits_2_naming_the_field_and_the_file(baseline, tmp_path, capsys, how):
    """A port another socket listens on: exit 2 naming the field (or option) and the file, no traceback."""
    import socket

    run_dir, _ = baseline
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        if how == "replay":
            argv, file, field = ["replay", str(run_dir), "--live", "--live-port", str(port)], str(run_dir), "--live-port"
        else:
            opt = ["--live-port", str(port)] if how == "--live-port" else ["--set", f"telemetry.live_port={port}"]
            argv = ["run", str(DEMO), "--live", *opt, "--duration", "0.1", "--no-plots", "--no-progress",
                    "-o", str(tmp_path / "run")]
            file, field = str(DEMO), "telemetry.live_port"
        capsys.readouterr()
        assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and file in err and f"field '{field}'" in err and str(port) in err, err


@settings(max_examples=60, deadline=None, derandomize=True)
@given(key=st.sampled_from(["telemetry.live", "telemetry.live_rate_hz", "telemetry.live_port"]),
       value=st.one_of(st.sampled_from([v for v in VALUES if v != "__delete__"]),
                       st.integers(-10**6, 10**6), st.floats(allow_nan=True), st.booleans(), st.text(max_size=5)))
def test_the_live_keys_take_their_type_and_range_or_name_file_and_field(key, value):
    from dynamics.errors import ConfigError
    try:
        spec = load_run(DEMO, overrides={key: value})
    except ConfigError as err:
        assert err.file == str(DEMO) and err.field == key, (err.file, err.field)
        return
    if key == "telemetry.live":
        assert isinstance(value, bool) and (spec.telemetry_live is not None) is value
    elif key == "telemetry.live_rate_hz":
        assert spec.telemetry_live is None      # off by default: the rate is read, not used
        assert not isinstance(value, bool) and isinstance(value, (int, float)) and 0 < value <= 1e5
    else:
        assert type(value) is int and 0 <= value <= 65535


def test_a_viewer_that_falls_behind_for_a_moment_loses_nothing():
    """A block of rows sent at once (a replay catching up after a stall, or a flush of the ring)
    while the viewer does not read: up to BACKLOG_S seconds of messages wait for it (foxglove-sdk's
    default buffer, 1024 messages, dropped the oldest of such a block)."""
    import time

    from controller.telemetry import log_dtype
    from controller.telemetry_live import BACKLOG_S, LiveServer

    rate = 500.0
    srv = LiveServer(log_dtype(3, 3), ["a", "b", "c"], ["x", "y", "phi"], start_ns=0, rate_hz=rate)
    try:
        c = Client(srv.address)
        assert srv.subscribed.wait(60)          # set once the viewer subscribed to every channel
        rows = np.zeros(int(0.8 * BACKLOG_S * rate), dtype=log_dtype(3, 3))   # 3 200 messages
        rows["t"] = np.arange(rows.size) / rate
        rows["q"] = np.arange(rows.size)[:, None] * [1.0, 2.0, 3.0]
        assert srv.publish(rows) == rows.size   # all at once, nobody reading
        while min(len(c.received["/joint_states"]), len(c.received["/torqueloop/cycle"])) < rows.size:
            c.read(count=1, timeout_s=20.0)     # (and the /rosout message of the safety state)
        js = c.decoded("/joint_states")
        assert len(js) == rows.size and len(c.received["/torqueloop/cycle"]) == rows.size
        np.testing.assert_array_equal([m.position for _, m in js], rows["q"])
    finally:
        srv.close(linger_s=0.0)



def test_data_start_only_when_the_viewer_subscribed_to_every_channel():
    """`--wait-viewer`: the first rows go out when the viewer's subscriptions to all three channels
    are in (the server reports them one by one; the replay test once lost the first
    /torqueloop/cycle message, sent after /joint_states alone was subscribed)."""
    from controller.telemetry import log_dtype
    from controller.telemetry_live import LiveServer

    for _ in range(5):
        srv = LiveServer(log_dtype(3, 3), ["a", "b", "c"], ["x", "y", "phi"], start_ns=0, rate_hz=100.0)
        try:
            c = Client(srv.address)
            assert srv.subscribed.wait(60)
            rows = np.zeros(5, dtype=log_dtype(3, 3))
            rows["t"] = np.arange(5) / 100.0
            srv.publish(rows)
            while min(len(c.received["/joint_states"]), len(c.received["/torqueloop/cycle"])) < 5:
                c.read(count=1, timeout_s=20.0)
            for topic in ("/joint_states", "/torqueloop/cycle"):
                assert [t for t, _ in c.received[topic]] == [int(round(x * 1e9)) for x in rows["t"]], topic
        finally:
            srv.close(linger_s=0.0)
