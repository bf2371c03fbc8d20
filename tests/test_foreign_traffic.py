"""A bus shared with something else (issue 37 item 1).

* a command frame for one of our motors that we did not send (a second controller driving
  them) stops the run at once, cause ``foreign_traffic``;
* replies nobody of ours asked for (a spoofer) are not used, and a few of them stop the run;
* a second controller listens before it sends anything: it finds the ids busy and refuses
  without a single frame, and its refusal sends no EXIT_MOTOR_MODE to the first run's motors;
* the rehearsal (another process on udp_multicast) with an intruder sending MIT command frames
  for our ids ends in a safe stop naming the foreign traffic;
* mid-run on ODrive and CiA 402, the other controller's frames made by stacks we did not write
  (ODrive's DBC through cantools, the ``canopen`` library's NMT master and SDO client) stop the
  run in the cycle they arrive.

Before this, the driver took any 6/8-byte frame whose byte 0 is a motor id as that motor's
reply and discarded anything queued before a send unread: an intruder's 12 N m went unseen
(only a tracking error was reported), spoofed replies were fresh feedback, and a refused
second controller sent EXIT_MOTOR_MODE to the running one's motors.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import can
import numpy as np
import pytest

from controller.app.run import build_run, load_run
from drivers.codecs import mit as mitc
from drivers.mit import MitCanDriver, MitJoint
from drivers.transport import CanTransport
from dynamics.errors import ForeignTrafficError

try:
    from tests.test_integration_faults import _Hooked
except ImportError:  # pragma: no cover - rootdir not on sys.path
    from test_integration_faults import _Hooked

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "hil_configs" / "runs" / "3rrr_circle.toml"
K = 100
AK80_9 = mitc.MIT_MODELS["AK80-9"]


def _inject_before_reply(transport, frames_for):
    """Wrap ``transport``'s receive: before each frame it delivers, ``frames_for(frame)`` frames
    (field tuples) are delivered first (what another node put on the bus)."""
    orig = transport.recv_fields
    queue: list = []

    def recv_fields(timeout_s=0.0):
        if queue:
            return queue.pop(0)
        f = orig(timeout_s)
        if f is not None:
            extra = frames_for(f)
            if extra:
                queue.extend(extra[1:] + [f])
                return extra[0]
        return f

    transport.recv_fields = recv_fields


def _run_demo(tmp_path, hook):
    spec = load_run(DEMO, overrides={"safety.stop_reaction": "zero_disable"}, duration_s=0.3)
    r = build_run(spec, out_dir=tmp_path / "run")
    try:
        hooked = _Hooked(r.driver, {K: lambda: hook(r)})
        r.loop.driver = hooked
        res = r.loop.run()
        r.driver.sync()
        in_mode = [i for emu in r.driver.emulators for i in emu.can_ids if emu.motor_mode(i)]
    finally:
        r.close()
    return res, hooked, in_mode


def _fields(arb, data):
    return (arb, bytes(data), 0.0, False, False, False, None)


def test_a_command_frame_for_our_motor_stops_the_run_at_once(tmp_path):
    """Another controller's MIT command (12 N m for motor 2) arrives in cycle K: that cycle ends in
    the stop (zero torque, EXIT), cause foreign_traffic, and the motors are out of motor mode."""
    cmd = mitc.encode_command(0.0, 0.0, 0.0, 0.0, 12.0, AK80_9)
    sent = []

    def hook(r):
        tr = r.driver.inner.transports[0]

        def frames_for(f):
            if not sent and len(f[1]) >= 6 and f[1][0] == 2:
                sent.append(True)
                return [_fields(2, cmd)]
            return []
        _inject_before_reply(tr, frames_for)

    res, hooked, in_mode = _run_demo(tmp_path, hook)
    assert res.status == "fault"
    assert res.faults[0].cause == "foreign_traffic" and "motor id 2" in res.faults[0].message
    assert res.n_cycles == K + 1            # the row of cycle K is the last one
    assert in_mode == []


def test_spoofed_replies_are_not_used_and_stop_the_run(tmp_path):
    """From cycle K a spoofer answers for motor 2 before the motor does (another position): the
    reply kept is the first, the real one is the one too many; three within 50 cycles stop it."""
    spoof = mitc.encode_reply(2, 1.0, 0.0, 0.0, AK80_9)

    def hook(r):
        def frames_for(f):
            if len(f[1]) >= 6 and f[1][0] == 2 and f[0] == 0:
                return [_fields(0, spoof)]
            return []
        _inject_before_reply(r.driver.inner.transports[0], frames_for)

    res, hooked, in_mode = _run_demo(tmp_path, hook)
    assert res.status == "fault"
    assert res.faults[0].cause == "foreign_traffic" and "asked for" in res.faults[0].message
    assert K + 1 <= res.n_cycles <= K + 4
    assert in_mode == []


def test_a_byte_identical_duplicate_is_not_foreign(tmp_path):
    """CAN retransmits a frame whose acknowledgement was disturbed: the same reply twice is a
    duplicate, counted, and the run completes."""
    def hook(r):
        def frames_for(f):
            return [f] if len(f[1]) >= 6 and f[1][0] == 2 else []
        _inject_before_reply(r.driver.inner.transports[0], frames_for)

    res, hooked, in_mode = _run_demo(tmp_path, hook)
    assert res.status == "completed", [str(f) for f in res.faults]


class _OtherController(threading.Thread):
    """A controller already running on the bus: MIT commands (zero torque) to ``ids`` every ``period_s``."""

    def __init__(self, channel, ids, period_s=0.001):
        super().__init__(daemon=True)
        self.bus = can.Bus(interface="virtual", channel=channel)
        self.ids, self.period_s = ids, period_s
        self.stop = threading.Event()

    def run(self):
        data = mitc.encode_command(0.0, 0.0, 0.0, 0.0, 0.0, AK80_9)
        while not self.stop.is_set():
            for i in self.ids:
                self.bus.send(can.Message(arbitration_id=i, data=data, is_extended_id=False))
            time.sleep(self.period_s)
        self.bus.shutdown()


def test_a_second_controller_finds_the_ids_busy_and_sends_nothing():
    channel = f"busy-{time.monotonic_ns()}"
    sniffer = can.Bus(interface="virtual", channel=channel)
    other = _OtherController(channel, [1, 2])
    other.start()
    try:
        tr = CanTransport("virtual", channel)
        # one of the other controller's frames is queued for the driver before it listens (a
        # thread starved through the whole 50 ms window would send nothing in it: not this test)
        while sniffer.recv(0.0) is not None:
            pass
        assert sniffer.recv(10.0) is not None
        drv = MitCanDriver([MitJoint(tr, i, AK80_9) for i in (1, 2)], now=time.monotonic)
        with pytest.raises(ForeignTrafficError, match="command frames to motor id"):
            drv.enable()
        drv.close()                 # disable + close: must not send either
        time.sleep(0.01)
        mine = []
        while (m := sniffer.recv(0.0)) is not None:
            if bytes(m.data) != bytes(other_payload()):
                mine.append(m)
        assert mine == [], [(hex(m.arbitration_id), bytes(m.data).hex()) for m in mine]
    finally:
        other.stop.set()
        other.join(2.0)
        sniffer.shutdown()


def test_frames_that_arrived_while_the_listener_was_descheduled_are_heard():
    """The process is descheduled past its listening deadline (a loaded machine): what another
    controller sent meanwhile is queued but was never read in the window; it is read before the
    first frame, and the ids are busy (the old loop ended at the deadline and sent ENTER)."""
    channel = f"stalled-{time.monotonic_ns()}"
    other = can.Bus(interface="virtual", channel=channel)
    try:
        tr = CanTransport("virtual", channel)
        drv = MitCanDriver([MitJoint(tr, i, AK80_9) for i in (1, 2)], now=time.monotonic,
                           enable_timeout_s=0.01, enable_tries=1)
        drv.listen_s = 0.0          # the window is over before the first read: the stall
        orig, state = tr.recv_fields, {"sent": False}

        def recv_fields(timeout_s=0.0):
            f = orig(timeout_s)
            if f is None and not state["sent"]:     # the history is read: the other one sends now
                state["sent"] = True
                other.send(can.Message(arbitration_id=2, data=other_payload(), is_extended_id=False))
            return f
        tr.recv_fields = recv_fields
        with pytest.raises(ForeignTrafficError, match="command frames to motor id 2"):
            drv.enable()
        drv.close()
        assert other.recv(0.0) is None          # nothing was sent: no ENTER, no EXIT
    finally:
        other.shutdown()


def other_payload():
    return mitc.encode_command(0.0, 0.0, 0.0, 0.0, 0.0, AK80_9)


def test_a_quiet_bus_is_not_busy():
    """Listening on a bus where nobody talks to our ids (other ids, other traffic) passes."""
    channel = f"quiet-{time.monotonic_ns()}"
    other = _OtherController(channel, [7, 8])
    other.start()
    try:
        tr = CanTransport("virtual", channel)
        drv = MitCanDriver([MitJoint(tr, i, AK80_9) for i in (1, 2)], now=time.monotonic,
                           enable_timeout_s=0.01, enable_tries=1)
        with pytest.raises(Exception) as ei:         # nobody answers ENTER: a timeout, not "busy"
            drv.enable()
        assert not isinstance(ei.value, ForeignTrafficError), ei.value
        drv.close()
    finally:
        other.stop.set()
        other.join(2.0)


# --- the rehearsal: the emulated robot in another process, on udp_multicast ----------------------
def _rehearsal(tmp_path, name):
    from drivers.transport import rehearsal_address
    from tests.serve_process import rehearsal_pair

    from tests.test_bringup import write_clean_calibration

    srv, run = rehearsal_pair(tmp_path, "3rrr_mit_udp", "3rrr_horizontal.toml", name)
    # 250 Hz (LENIENT) with the reply timeout a user sets for it, in the file: the calibration is
    # made for the config as run (a --set would make it stale)
    text = run.read_text()
    assert "reply_timeout_s = 0.0008" in text
    run.write_text(text.replace("reply_timeout_s = 0.0008", "reply_timeout_s = 0.002", 1))
    write_clean_calibration(run)        # a hardware run needs one (bring-up: tests/test_bringup.py)
    return srv, run, rehearsal_address(name)


def _cli(run, out, *extra):
    import os
    import subprocess
    import sys

    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.Popen([sys.executable, "-m", "controller.app.cli", "run", str(run), "--yes-hardware",
                             "--duration", "3.0", "-o", str(out), "--no-plots", "--no-progress",
                             "--set", "safety.overrun_fraction_max=0.9", "--set", "safety.lateness_max_s=10.0",
                             *extra], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


#: a rehearsal run that tolerates a loaded machine (late replies, missed deadlines): what these tests
#: check is the foreign traffic (100 Hz: a shared machine keeps that rate; a listen of 50 ms hears
#: five of its cycles)
# 250 Hz with the reply timeout a user sets for it (2 ms, written into the run file by
# _rehearsal): the template's 0.8 ms fits its 1 kHz; on a loaded 2-core CI machine the emulator
# process answered the third motor later than 0.8 ms for 100 cycles in a row, and run A stopped on
# stale feedback before B was started (CI, 2026-11-29)
LENIENT = ("--set", "safety.stale_cycles=100", "--set", "safety.stale_fraction_max=0.9",
           "--set", "safety.tracking_error_max=[0.2, 0.2, 1.0]", "--set", "loop.rate_hz=250.0")


class _Sniffer(threading.Thread):
    """Reads the rehearsal's bus: when the run's motor commands flow, and every ENTER/EXIT frame."""

    def __init__(self, group, port):
        super().__init__(daemon=True)
        self.bus = can.Bus(interface="udp_multicast", channel=group, port=port, hop_limit=0)
        self.cycling = threading.Event()
        self.special: list[tuple[float, int, bytes]] = []     # (time, id, payload) of ENTER/EXIT
        self.stop = threading.Event()

    def run(self):
        while not self.stop.is_set():
            m = self.bus.recv(0.05)
            if m is None:
                continue
            d = bytes(m.data)
            if m.arbitration_id in (1, 2, 3) and d[:7] == b"\xff" * 7 and d[7] in (0xFC, 0xFD):
                self.special.append((time.monotonic(), m.arbitration_id, d))
            elif m.arbitration_id == 1 and len(d) == 8:
                self.cycling.set()

    def close(self):
        self.stop.set()
        self.join(2.0)
        self.bus.shutdown()


@pytest.mark.exclusive
def test_an_intruder_in_a_rehearsal_is_named_and_stopped(tmp_path):
    """While the rehearsal runs, a third party sends MIT command frames (12 N m) for motor 2: the
    run stops safely (exit 1), naming the foreign traffic; its log is on disk."""
    pytest.importorskip("msgpack")
    from tests.serve_process import interfered, served

    import os
    srv, run, (group, port) = _rehearsal(tmp_path, f"3rrr_mit-intruder-{os.getpid()}")
    with served(srv, "--duration-s", "120") as server:
        sniff = _Sniffer(group, port)
        sniff.start()
        out = tmp_path / "out"
        proc = _cli(run, out, *LENIENT)
        try:
            if not sniff.cycling.wait(120):
                pytest.fail(f"the run never cycled: {proc.communicate(timeout=60)}")
            time.sleep(0.3)
            data = mitc.encode_command(0.0, 0.0, 0.0, 0.0, 12.0, AK80_9)
            t_end = time.monotonic() + 5.0
            while proc.poll() is None and time.monotonic() < t_end:
                sniff.bus.send(can.Message(arbitration_id=2, data=data, is_extended_id=False))
                time.sleep(0.001)
            stdout, stderr = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
            sniff.close()
    import json
    meta = json.loads((out / "meta.json").read_text())
    first = meta["result"]["faults"][0] if meta["result"]["faults"] else {}
    if first.get("cause") != "foreign_traffic":
        interfered(server.watch, f"wall-clock rehearsal stopped by {first}")
    assert proc.returncode == 1, stdout[-1500:] + stderr[-500:]
    assert first.get("cause") == "foreign_traffic" and "motor id 2" in first.get("message", ""), first
    assert "foreign_traffic" in stdout
    assert len(np.load(out / "log.npy")) == meta["result"]["n_cycles"] > 0


@pytest.mark.exclusive
def test_a_second_controller_in_a_rehearsal_is_refused_before_it_sends(tmp_path):
    """Controller B started on the running rehearsal (same bus and ids) is refused (exit 2, the
    ids busy) without a frame: no ENTER or EXIT_MOTOR_MODE goes out while it runs, and the first
    run goes on to complete."""
    pytest.importorskip("msgpack")
    from tests.serve_process import interfered, served

    import os
    srv, run, (group, port) = _rehearsal(tmp_path, f"3rrr_mit-second-{os.getpid()}")
    with served(srv, "--duration-s", "120") as server:
        sniff = _Sniffer(group, port)
        sniff.start()
        # long enough for B to start, validate and be refused on a 2-core machine; 250 Hz (the
        # rate two Python processes hold): at 100 Hz the 1 kHz template's gains tracked 34 mrad
        # RMS and the singularity guard stopped A at 7.2 s
        a = _cli(run, tmp_path / "a", "--duration", "20.0", *LENIENT)
        try:
            if not sniff.cycling.wait(120):
                pytest.fail(f"run A never cycled: {a.communicate(timeout=60)}")
            b_start = time.monotonic()
            b = _cli(run, tmp_path / "b", "--set", "loop.rate_hz=100.0")
            b_out, b_err = b.communicate(timeout=120)
            b_done = time.monotonic()
            a_running = a.poll() is None
            a_out, a_err = a.communicate(timeout=120)
        finally:
            if a.poll() is None:
                a.kill()
            sniff.close()
    if not a_running:
        interfered(server.watch, "run A ended before B was refused")
        pytest.fail(f"run A ended before B was refused: {a_out[-1500:]}\n-- B --\n{b_out[-2000:]}{b_err[-2000:]}")
    assert b.returncode == 2, b_out[-1500:] + b_err[-500:]
    assert "busy" in b_err + b_out and "motor id" in b_err + b_out, (b_out, b_err)
    # ENTER frames: only A's, at its start; EXIT frames: only A's, at its end
    assert all(t < b_start for t, i, d in sniff.special if d[7] == 0xFC), sniff.special
    assert all(t > b_done for t, i, d in sniff.special if d[7] == 0xFD), "an EXIT went out before A ended"
    if a.returncode != 0:
        interfered(server.watch, f"wall-clock rehearsal A: exit {a.returncode}")
    assert a.returncode == 0, a_out[-1500:] + a_err[-500:]


def test_each_rehearsal_has_its_own_bus():
    """The shipped rehearsals, and one name run by two users, get distinct groups and ports (the
    port must differ: python-can binds it on every interface and Linux hands a port's datagrams
    of every joined group to each socket on it); the server and the run derive the same one."""
    from drivers.registry import open_buses
    from drivers.transport import REHEARSAL_PORTS, rehearsal_address
    from dynamics.config import Section, read_toml

    reh = ROOT / "hil_configs" / "rehearsal"
    names = {read_toml(p)["server"]["rehearsal"] for p in reh.glob("*_server.toml")}
    assert len(names) == 3
    for p in reh.glob("*_run.toml"):
        assert read_toml(p)["driver"]["bus"]["rehearsal"] in names, p
    addrs = [rehearsal_address(n) for n in names] + [rehearsal_address("3rrr_mit", uid=u) for u in (1000, 1001)]
    assert len({port for _, port in addrs}) == len(addrs) and len({g for g, _ in addrs}) == len(addrs)
    for group, port in addrs:
        a = [int(x) for x in group.split(".")]
        assert a[0] == 239 and all(0 <= x <= 255 for x in a) and REHEARSAL_PORTS[0] <= port < REHEARSAL_PORTS[1]
    # a rehearsal name and an explicit channel/port are refused together
    with pytest.raises(Exception, match="rehearsal"):
        open_buses(Section({"bus": {"interface": "udp_multicast", "rehearsal": "x", "channel": "239.1.2.3"}},
                           "run.toml", "driver"))
    with pytest.raises(Exception, match="rehearsal"):
        open_buses(Section({"bus": {"interface": "virtual", "rehearsal": "x"}}, "run.toml", "driver"))


def _other_master_frame(protocol, run):
    """A frame only another controller sends to joint 1's device, per protocol (fields tuple)."""
    drv = run.driver.inner
    if protocol == "mit":
        return _fields(drv.joints[1].can_id, mitc.encode_command(0.0, 0.0, 0.0, 0.0, 0.0, AK80_9))
    if protocol == "odrive":
        from drivers.codecs import odrive as odc
        node = drv.axes[1].node_id
        return _fields(odc.arbitration_id(node, odc.Cmd.SET_INPUT_TORQUE), odc.encode_set_input_torque(0.0))
    from drivers.codecs import cia402 as cc
    return _fields(cc.rpdo_id(drv.axes[1].node_id, 1), bytes(6))


@pytest.mark.parametrize("protocol,config", [("mit", "3rrr_circle.toml"), ("odrive", "stewart_motion.toml"),
                                             ("cia402", "3rrr_circle_cia402.toml")])
def test_each_can_protocol_listens_before_it_sends(tmp_path, protocol, config, monkeypatch):
    """Another master's frames for our devices while the driver listens: enable is refused (fault
    foreign_traffic, no cycle: exit 2) and not one frame is sent, by enable or by the stop."""
    from drivers.transport import CanTransport

    # another node on the bus: a wait can bring its frames (the emulated devices alone, served
    # inline on the lock-step clock, cannot: drivers.transport.CanTransport.wait_is_futile)
    monkeypatch.setattr(CanTransport, "wait_is_futile", property(lambda self: False))
    spec = load_run(ROOT / "hil_configs" / "runs" / config, duration_s=0.1)
    r = build_run(spec, out_dir=tmp_path / "run")
    sent = []
    try:
        frame = _other_master_frame(protocol, r)
        trs = r.driver.inner.transports
        orig = trs[0].recv_fields

        def recv_fields(timeout_s=0.0):
            if timeout_s is None or timeout_s > 0:
                return frame
            return orig(timeout_s)
        trs[0].recv_fields = recv_fields
        for t in trs:
            send, send_frame, send_batch = t.send, t.send_frame, t.send_batch
            t.send = lambda *a, _s=send, **k: (sent.append(a), _s(*a, **k))[1]
            t.send_frame = lambda f, _s=send_frame: (sent.append(f), _s(f))[1]
            t.send_batch = lambda fs, _s=send_batch: (sent.extend(fs), _s(fs))[1]
        res = r.loop.run()
    finally:
        r.close()
    assert res.status == "fault" and res.n_cycles == 0
    assert res.faults[0].cause == "foreign_traffic" and "busy" in res.faults[0].message, [str(f) for f in res.faults]
    assert sent == [], sent[:5]


# --- during the run, every CAN protocol: a bus that echoes our frames, another controller's ------
try:
    from tests import fault_matrix as fm
except ImportError:  # pragma: no cover - rootdir not on sys.path
    import fault_matrix as fm

CAN_PROTOCOLS = ("mit", "odrive", "cia402")


def _echoing(transports) -> list:
    """Make every frame the driver sends come back to it before anything else it reads (a bus that
    loops our own frames back, as udp_multicast does); returns the echo queues (one per bus)."""
    queues = []
    for t in transports:
        queue: list = []
        send, recv = t.send, t.recv_fields

        def send_(arb, data=b"", is_extended_id=False, *, is_remote=False, dlc=None, _s=send, _q=queue):
            _s(arb, data, is_extended_id, is_remote=is_remote, dlc=dlc)
            _q.append((arb, bytes(data), 0.0, False, bool(is_remote), bool(is_extended_id),
                       dlc if is_remote else None))

        def recv_(timeout_s=0.0, _r=recv, _q=queue):
            return _q.pop(0) if _q else _r(timeout_s)
        t.send, t.recv_fields = send_, recv_
        queues.append(queue)
    return queues


def _run_protocol(tmp_path, protocol, hook=None, echo=True):
    """The fault matrix's run of ``protocol`` (lock-step), every bus echoing our frames from the
    start; ``hook(run)`` at driver cycle K.  Returns (result, frames sent, joint 1's device id)."""
    proto = fm.PROTOCOLS[protocol]
    spec = load_run(fm.RUNS / proto.config, overrides={"safety.stop_reaction": "zero_disable"},
                    duration_s=proto.duration_s)
    r = build_run(spec, out_dir=tmp_path / "run")
    try:
        sent_before = [t.frames_sent for t in r.driver.inner.transports]
        if echo:
            _echoing(r.driver.inner.transports)
        hooked = _Hooked(r.driver, {K: lambda: hook(r)} if hook is not None else {})
        r.loop.driver = hooked
        res = r.loop.run()
        sent = sum(t.frames_sent for t in r.driver.inner.transports) - sum(sent_before)
        drv = r.driver.inner
        dev = drv.joints[1].can_id if protocol == "mit" else drv.axes[1].node_id
    finally:
        r.close()
    return res, sent, dev


@pytest.mark.parametrize("protocol", CAN_PROTOCOLS)
def test_our_own_frames_looped_back_are_not_foreign(tmp_path, protocol):
    """Every frame the driver sends (enable's configuration, SDO and NMT, the cycles' commands)
    comes back to it, as on udp_multicast: none is taken for another controller's; the run
    completes."""
    res, sent, _ = _run_protocol(tmp_path, protocol)
    assert res.status == "completed", [str(f) for f in res.faults]
    assert sent > res.n_cycles                  # the echo had something to hand back


def _inject_once(frame):
    def hook(r):
        drv = r.driver.inner
        tr = drv.transports[drv._bus_of[1]]
        orig, queue = tr.recv_fields, [frame(drv)]

        def recv_fields(timeout_s=0.0):
            f = orig(timeout_s)
            return queue.pop() if (f is not None and queue) else f
        tr.recv_fields = recv_fields
    return hook


def _odrive_idle(drv):
    from drivers.codecs import odrive as odc
    node = drv.axes[1].node_id
    return _fields(odc.arbitration_id(node, odc.Cmd.SET_AXIS_STATE), odc.encode_set_axis_state(odc.AxisState.IDLE))


def _cia402_nmt_stop(drv):
    return _fields(0x000, bytes([0x02, drv.axes[1].node_id]))


def _cia402_sdo(drv):
    from drivers.codecs import cia402 as cc
    return _fields(cc.sdo_rx_id(drv.axes[1].node_id), bytes([0x40, 0x41, 0x60, 0, 0, 0, 0, 0]))


@pytest.mark.parametrize("protocol,frame,named", [
    ("mit", lambda drv: fm.other_master_frame("mit", drv, 1), "command frames to motor id {id}"),
    ("odrive", lambda drv: fm.other_master_frame("odrive", drv, 1), "SET_INPUT_TORQUE) to axis node {id}"),
    ("odrive", _odrive_idle, "SET_AXIS_STATE) to axis node {id}"),
    ("cia402", lambda drv: fm.other_master_frame("cia402", drv, 1), "RPDOs to node {id}"),
    ("cia402", _cia402_nmt_stop, "NMT commands to node {id}"),
    ("cia402", _cia402_sdo, "SDO requests to node {id}"),
], ids=["mit-command", "odrive-torque", "odrive-axis-state", "cia402-rpdo", "cia402-nmt", "cia402-sdo"])
def test_another_controllers_frame_mid_run_stops_that_cycle(tmp_path, protocol, frame, named):
    """On a bus that echoes our own frames, one frame of another controller for joint 1's device
    arrives in cycle K: that cycle ends in the stop, cause foreign_traffic, naming the device and
    the kind of frame (before: MIT only; ODrive and CiA 402 listened before enable only)."""
    res, _, dev = _run_protocol(tmp_path, protocol, _inject_once(frame))
    assert res.status == "fault", res.status
    f = res.faults[0]
    assert f.cause == "foreign_traffic", [str(x) for x in res.faults]
    assert named.format(id=dev) in f.message, f.message
    assert res.n_cycles == K + 1                # the row of cycle K is the last one


# --- the other controller is a third-party stack, not our codec --------------------------------
def _odrive_dbc():
    import cantools
    import odrive_can

    return cantools.database.load_file(str(Path(odrive_can.__file__).parent / "dbc" / "odrive-cansimple-0.6.10.dbc"))


def _third_party_odrive_torque(bus, node):
    """ODrive's own CANSimple DBC (shipped in ``odrive-can``), encoded by cantools, sent with
    python-can: Set_Input_Torque 0.5 N m for ``node``."""
    msg = _odrive_dbc().get_message_by_name(f"Axis{node}_Set_Input_Torque")
    bus.send(can.Message(arbitration_id=msg.frame_id, data=msg.encode({"Input_Torque": 0.5}),
                         is_extended_id=False))


def _third_party_odrive_idle(bus, node):
    msg = _odrive_dbc().get_message_by_name(f"Axis{node}_Set_Axis_State")
    bus.send(can.Message(arbitration_id=msg.frame_id, data=msg.encode({"Axis_Requested_State": "IDLE"}),
                         is_extended_id=False))


def _canopen_node(bus, node):
    import canopen

    net = canopen.Network(bus)           # canopen's own master
    remote = canopen.RemoteNode(node, canopen.ObjectDictionary())
    net.add_node(remote)
    return remote


def _third_party_nmt_stop(bus, node):
    _canopen_node(bus, node).nmt.state = "STOPPED"        # canopen sends "stop remote node"


def _third_party_sdo_read(bus, node):
    remote = _canopen_node(bus, node)
    remote.sdo.RESPONSE_TIMEOUT = 0.01
    remote.sdo.MAX_RETRIES = 1          # one try (0 would retry for ever: canopen counts down to 0)
    try:
        remote.sdo.upload(0x6041, 0)                        # canopen's SDO client: read the statusword
    except Exception:       # noqa: BLE001 - nobody answers on the capture bus: only the request matters
        pass


@pytest.mark.parametrize("protocol,send,named", [
    ("odrive", _third_party_odrive_torque, "SET_INPUT_TORQUE) to axis node {id}"),
    ("odrive", _third_party_odrive_idle, "SET_AXIS_STATE) to axis node {id}"),
    ("cia402", _third_party_nmt_stop, "NMT commands to node {id}"),
    ("cia402", _third_party_sdo_read, "SDO requests to node {id}"),
], ids=["odrive-dbc-torque", "odrive-dbc-idle", "canopen-nmt-stop", "canopen-sdo-read"])
def test_a_third_party_controllers_frame_mid_run_stops_that_cycle(tmp_path, protocol, send, named):
    """The other controller's frame is made by a stack we did not write: ODrive's DBC encoded by
    cantools, or the ``canopen`` library's master (its NMT and its SDO client), sent on a
    python-can virtual bus, captured there and delivered to joint 1's bus in cycle K (the
    simulated run's bus is the inline emulator's, which no other stack can join): that cycle
    ends in the stop, cause foreign_traffic, naming the device (the frames of
    ``test_another_controllers_frame_mid_run_stops_that_cycle`` are our codec's)."""
    channel = f"third-party-{protocol}-{send.__name__}-{id(tmp_path)}"
    tx = can.Bus(interface="virtual", channel=channel)
    rx = can.Bus(interface="virtual", channel=channel)
    try:
        node = fm.PROTOCOLS[protocol]
        spec = load_run(fm.RUNS / node.config, duration_s=node.duration_s)
        r = build_run(spec, out_dir=tmp_path / "probe")
        try:
            dev = r.driver.inner.axes[1].node_id
        finally:
            r.close()
        send(tx, dev)
        frames = []
        while (m := rx.recv(0.05)) is not None:
            frames.append(_fields(m.arbitration_id, m.data))
    finally:
        tx.shutdown()
        rx.shutdown()
    assert frames, "the third-party stack sent nothing"
    queue = list(frames)
    res, _, dev = _run_protocol(tmp_path, protocol, _inject_once(lambda drv: queue.pop(0)))
    assert res.status == "fault", res.status
    f = res.faults[0]
    assert f.cause == "foreign_traffic", [str(x) for x in res.faults]
    assert named.format(id=dev) in f.message, f.message
    assert res.n_cycles == K + 1
