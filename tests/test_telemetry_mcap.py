"""log.mcap: a run's MCAP recording read back by readers we did not write (the ``mcap`` reader,
``mcap_ros2``'s decoder, ``rosbags``' CDR deserializer), its writer off the control thread (a
stalled writer drops rows and counts them, the run is unchanged), and ``torqueloop export``."""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

mcap_reader = pytest.importorskip("mcap.reader")
ros2_decoder = pytest.importorskip("mcap_ros2.decoder")
rosbags_typesys = pytest.importorskip("rosbags.typesys")

from controller.app.cli import main  # noqa: E402
from controller.app.run import build_run, load_run  # noqa: E402
from controller.telemetry import read_log, read_meta  # noqa: E402
from controller.telemetry_mcap import CYCLE_MSG, McapRecorder  # noqa: E402

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



def _run(out: Path, overrides: dict, duration_s: float = 1.0):
    spec = load_run(DEMO, overrides=overrides, duration_s=duration_s)
    return build_run(spec, out_dir=out).execute()


def _decoded(path: Path) -> dict:
    """topic -> [(log_time_ns, decoded message)] by mcap_ros2's decoder; and the metadata."""
    out: dict = {}
    with open(path, "rb") as fh:
        reader = mcap_reader.make_reader(fh, decoder_factories=[ros2_decoder.DecoderFactory()])
        for _schema, channel, message, decoded in reader.iter_decoded_messages(log_time_order=False):
            out.setdefault(channel.topic, []).append((message.log_time, decoded))
        out["metadata"] = {m.name: dict(m.metadata) for m in reader.iter_metadata()}
        out["statistics"] = reader.get_summary().statistics
    return out


def _raw(path: Path) -> dict:
    """topic -> [(schema name, log_time, bytes)] as the mcap reader gives them."""
    out: dict = {}
    with open(path, "rb") as fh:
        for schema, channel, message in mcap_reader.make_reader(fh).iter_messages(log_time_order=False):
            out.setdefault(channel.topic, []).append((schema.name, message.log_time, message.data))
    return out



@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    out = tmp_path_factory.mktemp("mcap") / "run"
    result = _run(out, {"telemetry.mcap": True})
    return out, result


def test_run_writes_mcap_that_independent_readers_read_back_equal_to_the_log(recorded):
    out, result = recorded
    log, meta = read_log(out), read_meta(out)
    rows = log.shape[0]
    assert result.status == "completed" and rows == result.n_cycles > 900
    got = _decoded(out / "log.mcap")
    # message counts equal the log's rows
    counts = got["statistics"].channel_message_counts
    assert sorted(counts.values())[-2:] == [rows, rows]
    js = [m for _, m in got["/joint_states"]]
    cyc = [m for _, m in got["/torqueloop/cycle"]]
    assert len(js) == len(cyc) == rows
    # /joint_states: sensor_msgs/JointState with the joints' names, q, qd and the measured torque
    assert all(m.name == list(meta["joint_names"]) for m in js)
    assert _equal([m.position for m in js], log["q"])
    assert _equal([m.velocity for m in js], log["qd"])
    assert _equal([m.effort for m in js], log["tau_meas"])
    # stamps: the run's start (meta.json) plus the cycle time
    start_s = dt.datetime.fromisoformat(meta["start_time_utc"]).timestamp()
    stamps = np.array([m.header.stamp.sec + 1e-9 * m.header.stamp.nanosec for m in js])
    assert np.max(np.abs(stamps - (start_s + log["t"]))) < 2e-6
    assert np.array_equal([t for t, _ in got["/joint_states"]],
                          [m.header.stamp.sec * 10**9 + m.header.stamp.nanosec for m in js])
    # /torqueloop/cycle: every other column of log.npy, and the limits
    for field, column in CYCLE_FIELDS.items():
        assert _equal([getattr(m, field) for m in cyc], log[column]), field
    assert _equal([m.tau_limit for m in cyc], np.tile(meta["torque_limit"], (rows, 1)))
    # /rosout: the safety state's changes (normal from the start, disabled at the end)
    logs = [m for _, m in got["/rosout"]]
    assert [m.name for m in logs] == ["torqueloop.safety", "torqueloop.safety"]
    assert "normal" in logs[0].msg and "disabled" in logs[-1].msg and logs[-1].level == 30
    # metadata: names, the config and the result of meta.json
    md = got["metadata"]
    assert json.loads(md["torqueloop.run"]["joint_names"]) == meta["joint_names"]
    assert json.loads(md["torqueloop.config"]["config"]) == meta["config"]
    assert json.loads(md["torqueloop.result"]["status"]) == "completed"
    assert json.loads(md["torqueloop.result"]["n_cycles"]) == rows
    # meta.json reports the recording
    assert meta["mcap"]["rows_written"] == rows and meta["mcap"]["rows_dropped"] == 0
    assert meta["mcap"]["error"] is None


def test_rosbags_deserializes_every_message_equal_to_the_log(recorded):
    """A second CDR decoder, with its own ROS 2 type store (JointState, Log) and our
    ControlCycle registered from the schema text the file carries."""
    out, _ = recorded
    log = read_log(out)
    store = rosbags_typesys.get_typestore(rosbags_typesys.Stores.ROS2_HUMBLE)
    raw = _raw(out / "log.mcap")
    name, _, _ = raw["/torqueloop/cycle"][0]
    store.register(rosbags_typesys.get_types_from_msg(CYCLE_MSG.split("=" * 80)[0], name))
    js = [store.deserialize_cdr(data, schema) for schema, _, data in raw["/joint_states"]]
    cyc = [store.deserialize_cdr(data, schema) for schema, _, data in raw["/torqueloop/cycle"]]
    assert raw["/joint_states"][0][0] == "sensor_msgs/msg/JointState"
    assert np.array_equal(np.array([m.position for m in js]), log["q"])
    assert np.array_equal(np.array([m.velocity for m in js]), log["qd"])
    assert np.array_equal(np.array([m.effort for m in js]), log["tau_meas"])
    for field, column in CYCLE_FIELDS.items():
        assert _equal(np.array([getattr(m, field) for m in cyc]), log[column]), field
    rosout = [store.deserialize_cdr(data, schema) for schema, _, data in raw["/rosout"]]
    assert raw["/rosout"][0][0] == "rcl_interfaces/msg/Log" and "normal" in rosout[0].msg


def test_faults_are_log_messages_at_their_time(tmp_path):
    """A lossy bus stops the run (stale feedback): each fault of meta.json is an ERROR on /rosout
    at its own time, the safety state's changes are there, and the rows are all recorded."""
    ov = {"telemetry.mcap": True, "driver.faults.seed": 5, "driver.faults.during_enable": False,
          "driver.reply_timeout_s": 0.02, "driver.faults.drop_prob": 0.45, "driver.faults.side": "recv"}
    result = _run(tmp_path / "run", ov)
    assert result.status == "fault" and result.faults
    meta = read_meta(tmp_path / "run")
    got = _decoded(tmp_path / "run" / "log.mcap")
    start_ns = round(dt.datetime.fromisoformat(meta["start_time_utc"]).timestamp() * 1e6) * 1000
    faults = [(t, m) for t, m in got["/rosout"] if m.name == "torqueloop.fault"]
    assert len(faults) == len(meta["result"]["faults"])
    for (t, m), f in zip(faults, meta["result"]["faults"]):
        assert m.level == 40 and f["cause"] in m.msg and f["message"] in m.msg
        assert abs(t - (start_ns + f["t_s"] * 1e9)) < 2e3
    safety = [m.msg for _, m in got["/rosout"] if m.name == "torqueloop.safety"]
    assert any("fault" in s for s in safety)
    assert len(got["/joint_states"]) == read_log(tmp_path / "run").shape[0]


def test_a_stalled_writer_drops_rows_counts_them_and_leaves_the_run_unchanged(tmp_path, monkeypatch):
    """The writer process is stopped (SIGSTOP) before the first cycle and continued only when
    the run closes the recording: the ring (300 rows) fills, the rest is dropped and counted,
    and the run (lock-step clock) gives the same log and metrics as without MCAP."""
    off = _run(tmp_path / "off", {})
    assert not (tmp_path / "off" / "log.mcap").exists() and "mcap" not in read_meta(tmp_path / "off")  # opt-in
    spec = load_run(DEMO, overrides={"telemetry.mcap": True, "telemetry.mcap_buffer_rows": 300}, duration_s=1.0)
    run = build_run(spec, out_dir=tmp_path / "on")
    rec = run.loop.telemetry.recorder
    os.kill(rec.pid, signal.SIGSTOP)
    original = McapRecorder.close

    def close(self, *args, **kwargs):
        os.kill(self.pid, signal.SIGCONT)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(McapRecorder, "close", close)
    try:
        on = run.execute()
    finally:
        if rec._proc.poll() is None:  # noqa: SLF001 - a failure above: never leave it stopped
            os.kill(rec.pid, signal.SIGCONT)
    a, b = read_log(tmp_path / "off"), read_log(tmp_path / "on")
    rows = a.shape[0]
    assert b.shape[0] == rows == on.n_cycles == off.n_cycles
    for name in a.dtype.names:
        if name != "compute_s":      # CPU time, measured
            assert _equal(a[name], b[name]), name
    assert on.status == off.status == "completed"
    for key, value in off.metrics.items():
        if "dead" not in key and "late" not in key:
            assert _equal(on.metrics[key], value), key
    st = read_meta(tmp_path / "on")["mcap"]
    assert st["rows_written"] == 300 and st["rows_dropped"] == rows - 300 and st["error"] is None
    assert st["dropped_t_s"] == [float(a["t"][300]), float(a["t"][-1])]
    assert any("MCAP" in m and f"{rows - 300} of {rows} rows dropped" in m for m in on.messages)
    got = _decoded(tmp_path / "on" / "log.mcap")
    js = [m for _, m in got["/joint_states"]]
    assert len(js) == 300 and _equal([m.position for m in js], b["q"][:300])
    assert any(m.name == "torqueloop.mcap" and str(rows - 300) in m.msg for _, m in got["/rosout"])


_KILLED = """
import sys
from controller.app.run import build_run, load_run
spec = load_run({demo!r}, overrides={{"telemetry.mcap": True, "telemetry.buffer_rows": 50}}, duration_s=120.0)
run = build_run(spec, out_dir={out!r})
print(run.loop.telemetry.recorder.pid, flush=True)
run.execute()
"""


def _ended(pid: int) -> bool:
    """Whether process ``pid`` has exited (gone, or a zombie nobody reaped yet: an orphan's
    parent here may be an init that does not reap)."""
    if not os.path.isdir("/proc"):      # pragma: no cover - no procfs: a zombie counts as running
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def test_the_recording_is_finished_when_the_control_process_is_killed(tmp_path):
    """SIGKILL of the control process mid-run: the writer process finishes log.mcap with the rows
    it received (a valid file: summary, counts), every one of them equal to log.npy's."""
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.Popen([sys.executable, "-c", _KILLED.format(demo=str(DEMO), out=str(out))], env=env,
                         stdout=subprocess.PIPE, text=True)
    try:
        writer = int(p.stdout.readline())
        deadline = time.monotonic() + 600.0     # a cold numba cache compiles first (no timing asserted)
        while time.monotonic() < deadline and p.poll() is None:     # some blocks reach the writer
            time.sleep(0.2)
            try:
                if read_log(out).shape[0] >= 500:
                    break
            except (OSError, ValueError):       # not there yet, or its header read mid-rewrite
                pass
        assert p.poll() is None, "the run ended before it was killed"
    finally:
        p.kill()
        p.wait(30)
    deadline = time.monotonic() + 120.0
    while time.monotonic() < deadline and not _ended(writer):
        time.sleep(0.1)
    assert _ended(writer), "the writer process did not finish the recording"
    got = _decoded(out / "log.mcap")
    log = read_log(out)
    js = [m for _, m in got["/joint_states"]]
    assert 0 < len(js) <= log.shape[0]
    assert got["statistics"].channel_message_counts[1] == len(js)
    assert _equal([m.position for m in js], log["q"][:len(js)])


def test_a_block_reaches_the_recorder_only_once_the_logs_header_counts_it(tmp_path, monkeypatch):
    """The order the kill test above relies on, checked at every block rather than at a random
    kill: when a block is handed to the MCAP recorder, log.npy on disk already counts it (a
    process killed between the two leaves the recording a prefix of the log)."""
    seen = []
    original = McapRecorder.push

    def push(self, rows):
        seen.append((self.rows_pushed + rows.shape[0], read_log(tmp_path / "run").shape[0]))
        self.rows_pushed += rows.shape[0]
        return original(self, rows)

    monkeypatch.setattr(McapRecorder, "rows_pushed", 0, raising=False)
    monkeypatch.setattr(McapRecorder, "push", push)
    result = _run(tmp_path / "run", {"telemetry.mcap": True, "telemetry.buffer_rows": 50}, duration_s=0.3)
    assert len(seen) >= result.n_cycles // 50
    assert all(pushed <= on_disk for pushed, on_disk in seen), seen


def test_tf_read_back_by_rosbags_is_the_measured_pose_and_the_robots_geometry(recorded):
    """/tf (tf2_msgs/msg/TFMessage from rosbags' own type store): one message per 1/50 s of cycle
    time, the platform at the pose the controller measured, the links where the robot file's
    geometry puts them (tests/telemetry_checks.py check_rrr_tf), unit quaternions."""
    from controller.telemetry import utc_ns
    from controller.telemetry_ros2 import TF_RATE_HZ
    from dynamics import load_model

    out, _ = recorded
    log, meta = read_log(out), read_meta(out)
    store = rosbags_typesys.get_typestore(rosbags_typesys.Stores.ROS2_HUMBLE)
    raw = _raw(out / "log.mcap")["/tf"]
    assert {schema for schema, _, _ in raw} == {"tf2_msgs/msg/TFMessage"}
    msgs = [store.deserialize_cdr(data, schema) for schema, _, data in raw]
    bins = np.unique(np.floor(log["t"] * TF_RATE_HZ + 1e-6))
    start_ns = utc_ns(meta["start_time_utc"])
    assert check_rrr_tf(msgs, log, start_ns, load_model(meta["robot_file"]), TF_RATE_HZ) == bins.size
    assert [t for _, t, _ in raw] == [m.transforms[0].header.stamp.sec * 10**9 + m.transforms[0].header.stamp.nanosec
                                      for m in msgs]
    assert meta["mcap"]["tf_messages"] == bins.size and meta["mcap"]["tf_skipped"] == 0


def test_tf_of_a_serial_arm_chains_its_link_frames_to_the_tool():
    """A serial arm's /tf: world -> base_link -> link1 .. link<n> -> tool, each relative to the one
    before; composed, every link lands on the model's link pose and the tool on its forward
    kinematics (rosbags decodes the messages)."""
    from controller.telemetry import log_dtype
    from controller.telemetry_ros2 import FrameEncoder
    from dynamics import load_model

    try:
        from tests.telemetry_checks import _matrix
    except ImportError:  # pragma: no cover
        from telemetry_checks import _matrix
    model = load_model(ROOT / "hil_configs" / "robots" / "seed003_2r.toml")
    n = model.dof
    rows = np.zeros(7, log_dtype(n, n))
    rows["t"] = np.arange(7) * 0.02
    rows["q"] = np.random.default_rng(3).uniform(-3.0, 3.0, (7, n))
    rows["q"][4, 0] = np.nan                        # no frames for it
    enc = FrameEncoder(model, 10**18)
    stamp, data = enc.encode(rows)
    assert enc.skipped == 1 and stamp.size == 6
    store = rosbags_typesys.get_typestore(rosbags_typesys.Stores.ROS2_HUMBLE)
    good = [i for i in range(7) if i != 4]
    for k, i in enumerate(good):
        msg = store.deserialize_cdr(data[k].tobytes(), "tf2_msgs/msg/TFMessage")
        names = [(x.header.frame_id, x.child_frame_id) for x in msg.transforms]
        links = ["base_link"] + [f"link{j}" for j in range(1, n + 1)]
        assert names == [("world", "base_link")] + list(zip(links[:-1], links[1:])) + [(links[-1], "tool")]
        T = np.eye(4)
        poses = model.link_poses(rows["q"][i])
        for j, x in enumerate(msg.transforms):
            T = T @ _matrix(x.transform)
            np.testing.assert_allclose(T, poses[j] if j <= n else model.forward_kinematics(rows["q"][i]),
                                       atol=1e-12)
        assert msg.transforms[0].header.stamp.sec * 10**9 + msg.transforms[0].header.stamp.nanosec == stamp[k]


def test_tf_of_the_stewart_platform_puts_each_leg_from_its_base_joint_to_its_platform_joint():
    """Platform poses -> leg lengths by the inverse kinematics; from the leg lengths alone /tf
    (rosbags decodes it) puts the platform at the pose and each leg frame at its base joint with
    its z axis reaching the platform joint after the leg's length."""
    from controller.telemetry import log_dtype
    from controller.telemetry_ros2 import FrameEncoder
    from dynamics import load_model

    try:
        from tests.telemetry_checks import _matrix
    except ImportError:  # pragma: no cover
        from telemetry_checks import _matrix
    model = load_model(ROOT / "hil_configs" / "robots" / "stewart.toml")
    X = np.asarray(model.home_pose, float) + np.random.default_rng(0).normal(0, [0.01] * 3 + [0.03] * 3, (8, 6))
    rows = np.zeros(8, log_dtype(6, 6))
    rows["t"] = np.arange(8) * 0.02
    rows["q"] = [model.inverse_kinematics(x) for x in X]
    stamp, data = FrameEncoder(model, 0).encode(rows)
    assert stamp.size == 8
    store = rosbags_typesys.get_typestore(rosbags_typesys.Stores.ROS2_HUMBLE)
    for k in range(8):
        msg = store.deserialize_cdr(data[k].tobytes(), "tf2_msgs/msg/TFMessage")
        tree = {x.child_frame_id: (x.header.frame_id, _matrix(x.transform)) for x in msg.transforms}
        P = tree["platform"][1]
        np.testing.assert_allclose(P[:3, 3], X[k, :3], atol=1e-9)
        joints = np.asarray(model.platform_joints) @ P[:3, :3].T + P[:3, 3]
        for i in range(6):
            parent, L = tree[f"leg{i + 1}"]
            assert parent == "base"
            np.testing.assert_allclose(L[:3, 3], np.asarray(model.base_joints)[i], atol=1e-12)
            np.testing.assert_allclose(L[:3, 3] + rows["q"][k, i] * L[:3, 2], joints[i], atol=1e-9)


def test_export_writes_the_recorded_bytes_and_csv(recorded, tmp_path, capsys):
    out, _ = recorded
    assert main(["export", str(out), "--format", "mcap", "-o", str(tmp_path / "x.mcap")]) == 0
    live, again = _raw(out / "log.mcap"), _raw(tmp_path / "x.mcap")
    for topic in ("/joint_states", "/torqueloop/cycle", "/rosout", "/tf"):
        assert live[topic] == again[topic], topic
    assert main(["export", str(out), "--format", "csv", "-o", str(tmp_path / "x.csv")]) == 0
    csv = np.genfromtxt(tmp_path / "x.csv", delimiter=",", names=True, deletechars="")
    flat = np.load(out / "log.npy")
    for name in flat.dtype.names:
        assert _equal(csv[name], flat[name].astype(float)), name


def test_export_parquet_reads_back_with_pandas_equal_to_the_log(recorded, tmp_path):
    pytest.importorskip("pyarrow")
    import pandas as pd
    out, _ = recorded
    assert main(["export", str(out), "--format", "parquet", "-o", str(tmp_path / "x.parquet")]) == 0
    df = pd.read_parquet(tmp_path / "x.parquet")
    flat = np.load(out / "log.npy")
    assert list(df.columns) == list(flat.dtype.names) and len(df) == flat.shape[0]
    for name in flat.dtype.names:
        assert df[name].dtype == flat[name].dtype, name      # each column keeps its type
        assert _equal(df[name].to_numpy(), flat[name]), name
    import pyarrow.parquet as pq
    meta = json.loads(pq.read_schema(tmp_path / "x.parquet").metadata[b"torqueloop.meta"])
    assert meta == read_meta(out)


def test_export_parquet_without_pyarrow_exits_2_naming_the_extra(recorded, tmp_path, capsys, monkeypatch):
    out, _ = recorded
    monkeypatch.setitem(sys.modules, "pyarrow", None)       # import pyarrow raises ImportError
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    capsys.readouterr()
    assert main(["export", str(out), "--format", "parquet", "-o", str(tmp_path / "x.parquet")]) == 2
    err = capsys.readouterr().err
    assert "torqueloop[parquet]" in err and "Traceback" not in err
    assert not (tmp_path / "x.parquet").exists()


@pytest.mark.parametrize("what", ["missing", "file", "empty", "no_meta", "not_npy"])
def test_export_of_a_bad_folder_exits_2_naming_it(tmp_path, capsys, what):
    d = tmp_path / "run"
    if what == "file":
        d.write_text("x")
    elif what != "missing":
        d.mkdir()
    if what in ("no_meta", "not_npy"):
        (d / "log.npy").write_bytes(b"not numpy" if what == "not_npy" else np.save.__doc__.encode()[:10])
    if what == "not_npy":
        (d / "meta.json").write_text("{}")
    capsys.readouterr()
    assert main(["export", str(d), "--format", "mcap"]) == 2
    err = capsys.readouterr().err
    assert str(d) in err and "Traceback" not in err
    assert not (d / "log.mcap").exists()


@settings(max_examples=60, deadline=None, derandomize=True)
@given(key=st.sampled_from(["telemetry.mcap", "telemetry.mcap_buffer_rows"]),
       value=st.one_of(st.sampled_from([v for v in VALUES if v != "__delete__"]),
                       st.integers(-10**12, 10**12), st.booleans(), st.text(max_size=5)))
def test_the_mcap_keys_take_their_type_and_range_or_name_file_and_field(key, value):
    from dynamics.errors import ConfigError
    try:
        spec = load_run(DEMO, overrides={key: value})
    except ConfigError as err:
        assert err.file == str(DEMO) and err.field == key, (err.file, err.field)
        return
    if key == "telemetry.mcap":
        assert isinstance(value, bool) and spec.telemetry_mcap is value
    else:
        assert type(value) is int and 1 <= value <= 1 << 24 and spec.telemetry_mcap_rows == value


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="CPU affinity: Linux only")
def test_the_writer_process_stays_off_the_loops_pinned_cpu(tmp_path):
    """A wall-clock run that pins its loop (``[loop.realtime] cpu``) starts the MCAP writer
    process on the other CPUs (its real affinity, read from the OS while it runs), records
    where in meta.json, and the same run on the lock-step clock (no real-time setting) leaves
    the writer where it was started."""
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) < 2:
        pytest.skip(f"environment: one CPU allowed ({allowed}): no other CPU to move the writer to")
    loop_cpu = allowed[-1]
    spec = load_run(DEMO, overrides={"telemetry.mcap": True, "loop.clock": "wall",
                                     "loop.realtime.cpu": loop_cpu}, duration_s=0.05)
    run = build_run(spec, out_dir=tmp_path / "wall")
    rec = run.loop.telemetry.recorder
    try:
        real = sorted(os.sched_getaffinity(rec.pid))
    finally:
        run.execute()
    assert loop_cpu not in real and real == rec.writer_cpus == [c for c in allowed if c != loop_cpu]
    meta = read_meta(tmp_path / "wall")
    assert meta["telemetry_writer"] == {"cpus": real, "note": None}
    spec = load_run(DEMO, overrides={"telemetry.mcap": True}, duration_s=0.05)
    run = build_run(spec, out_dir=tmp_path / "lockstep")
    try:
        assert sorted(os.sched_getaffinity(run.loop.telemetry.recorder.pid)) == allowed
    finally:
        run.execute()


def test_a_writer_with_no_other_cpu_says_it_shares_the_loops_core(tmp_path):
    """Every CPU the process may use asked off: the writer stays where it can run and says so
    (the run's notes, meta.json), instead of failing or pretending."""
    if not hasattr(os, "sched_getaffinity"):
        pytest.skip("environment: CPU affinity is Linux only")
    from controller.telemetry import log_dtype
    allowed = sorted(os.sched_getaffinity(0))
    rec = McapRecorder(tmp_path / "x.mcap", log_dtype(3, 3), ["a", "b", "c"], ["x", "y", "phi"],
                       avoid_cpus=allowed, start_timeout_s=120)
    try:
        assert rec.writer_cpus == allowed and sorted(os.sched_getaffinity(rec.pid)) == allowed
        assert "shares the loop's core" in rec.cpus_note and str(allowed) in rec.cpus_note
    finally:
        rec.close({})
