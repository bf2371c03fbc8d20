"""A bus shared with something else (issue 37 item 1).

* a command frame for one of our motors that we did not send (a second controller driving
  them) stops the run at once, cause ``foreign_traffic``;
* replies nobody of ours asked for (a spoofer) are not used, and a few of them stop the run;
* a second controller listens before it sends anything: it finds the ids busy and refuses
  without a single frame, and its refusal sends no EXIT_MOTOR_MODE to the first run's motors;
* the rehearsal (another process on udp_multicast) with an intruder sending MIT command frames
  for our ids ends in a safe stop naming the foreign traffic.

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
