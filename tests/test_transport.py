"""CAN and serial transports: virtual-bus round trip, idempotent close, error wrapping, loop:// and a pty."""

import os
import time
import uuid

import can
import pytest

from drivers.serial_port import LineFramer, SerialTransport, encode_line
from drivers.transport import BusLike, CanTransport, Frame, recv_any_fields, recv_queued_fields
from dynamics.errors import CommsError, CommsTimeoutError, DecodeError


def _channel():
    return f"tl-test-{uuid.uuid4().hex}"


def test_virtual_round_trip_and_close_idempotent():
    ch = _channel()
    a = CanTransport("virtual", ch)
    b = CanTransport("virtual", ch)
    try:
        a.send(0x123, b"\x01\x02\x03")
        a.send_many([(0x124, b""), Frame(0x1ABCDE, b"\xff" * 8, is_extended_id=True)])
        a.send(0x2C9, is_remote=True, dlc=8)
        got = [b.recv(1.0) for _ in range(4)]
        assert [f.arbitration_id for f in got] == [0x123, 0x124, 0x1ABCDE, 0x2C9]
        assert got[0].data == b"\x01\x02\x03" and not got[0].is_extended_id
        assert got[2].is_extended_id and got[2].data == b"\xff" * 8
        assert got[3].is_remote and got[3].dlc == 8 and got[3].data == b""
        assert b.recv(0.0) is None
        assert a.frames_sent == 4 and b.frames_received == 4
        a.send(1, b"x")
        a.send(2, b"y")
        time.sleep(0.01)
        assert b.drain() == 2 and b.recv(0) is None
    finally:
        a.close()
        b.close()
    a.close()  # second close is a no-op
    assert a.closed
    with pytest.raises(CommsError):
        a.send(1, b"")
    with pytest.raises(CommsError):
        a.recv(0)


class _Keep:
    """A BusLike keeping what it is sent."""

    def __init__(self):
        self.sent = []

    def send(self, msg, timeout=None):
        self.sent.append((msg, timeout))

    def recv(self, timeout=None):
        return None

    def shutdown(self):
        pass


def _slots(msg):
    names = [n for c in type(msg).__mro__ for n in getattr(c, "__slots__", ()) if n != "__weakref__"]
    return {n: (type(getattr(msg, n)), getattr(msg, n)) for n in names}


@pytest.mark.parametrize("fd, data_bitrate", [(False, None), (True, None), (True, 5_000_000)])
def test_send_makes_the_message_the_keyword_construction_makes(fd, data_bitrate):
    """CanTransport.send builds its can.Message with positional arguments: every attribute is the
    one of the keyword construction it replaces (a python-can whose signature changed fails here)."""
    bus = _Keep()
    t = CanTransport(bus=bus, name="keep", fd=fd, data_bitrate=data_bitrate, send_timeout_s=0.003)
    cases = [(0x7FF, b"", False), (1, b"\x01\x02\x03", False), (0x1ABCDE, bytes(range(8)), True),
             (5, bytearray(b"\xff" * 8), False), (9, [1, 2, 3], False), (3, bytes(12), False),
             (0x123, bytes(64), True)]
    for arb, data, ext in cases:
        t.send(arb, data, ext)
        use_fd = fd or len(data) > 8
        want = can.Message(arbitration_id=arb, data=data, is_extended_id=ext, is_fd=use_fd,
                           bitrate_switch=use_fd and t.data_bitrate is not None)
        got, timeout = bus.sent[-1]
        assert type(got) is can.Message and _slots(got) == _slots(want) and timeout == 0.003
        assert (got.data is data) == (want.data is data)
    assert t.frames_sent == len(cases)


def test_send_batch_sends_what_send_sends_frame_by_frame():
    """send_batch of (id, data, remote_dlc) gives the bus the messages send() gives it for each
    frame (every slot, the same timeout, in order), counts them, and wraps a bus error."""
    frames = [(0x0C, b"\x00\x00\x80\x3f\x00\x00\x00\x00", None), (0x09, b"", 8), (0x2C, bytes(3), None),
              (0x7FF, b"", 0)]
    one, many = _Keep(), _Keep()
    a = CanTransport(bus=one, name="one", send_timeout_s=0.004)
    b = CanTransport(bus=many, name="many", send_timeout_s=0.004)
    for arb, data, dlc in frames:
        a.send(arb, data, is_remote=dlc is not None, dlc=dlc)
    b.send_batch(frames)
    assert [(_slots(m), t) for m, t in many.sent] == [(_slots(m), t) for m, t in one.sent]
    assert [m.is_remote_frame for m, _ in many.sent] == [False, True, False, True]
    assert b.frames_sent == a.frames_sent == 4

    class _Full(_Keep):
        def send(self, msg, timeout=None):
            if len(self.sent) == 1:
                raise can.CanOperationError("TX buffer full")
            super().send(msg, timeout)

    c = CanTransport(bus=_Full(), name="full")
    with pytest.raises(CommsError, match="0x9"):
        c.send_batch(frames)
    assert c.frames_sent == 1
    c.close()
    with pytest.raises(CommsError, match="closed"):
        c.send_batch(frames)


class _Queue(_Keep):
    """A BusLike holding frames to receive; ``feed`` puts a frame on another bus when this one is
    found empty the first time (a frame arriving meanwhile)."""

    def __init__(self, ids, feed=None):
        super().__init__()
        self.q = [can.Message(arbitration_id=i, data=bytes([i & 0xFF])) for i in ids]
        self.feed = feed

    def recv(self, timeout=None):
        if self.q:
            return self.q.pop(0)
        if self.feed is not None:
            bus, arb = self.feed
            self.feed = None
            bus.q.append(can.Message(arbitration_id=arb))
        return None


def _buses():
    b0, b1 = _Queue([1, 2]), _Queue([3])
    b2 = _Queue([4, 5, 6], feed=(b0, 7))
    return [CanTransport(bus=b, name=f"b{i}") for i, b in enumerate((b0, b1, b2))]


def test_recv_queued_fields_takes_what_recv_any_fields_takes():
    """Every queued frame of every bus, each bus's in order: the frames polling recv_any_fields
    with no time takes, per bus in the same order, and a frame that came meanwhile on an earlier
    bus (which that polling leaves for later) last."""
    got = recv_queued_fields(_buses())
    ts = _buses()
    want = []
    while (f := recv_any_fields(ts, 0.0)) is not None:
        want.append(f)
    assert len(want) == 6 and got[:6] == want
    assert got[6] == (0, (7, b"", 0.0, False, False, True, None)) and len(got) == 7
    assert recv_queued_fields(_buses()[1:2]) == [(0, (3, bytes([3]), 0.0, False, False, True, None))]


def test_context_manager_and_wrapping_existing_bus():
    ch = _channel()
    raw = can.Bus(interface="virtual", channel=ch)
    assert isinstance(raw, BusLike)
    with CanTransport.from_bus(raw, name="wrapped") as t, CanTransport("virtual", ch) as peer:
        peer.send(7, b"\x07")
        f = t.recv(1.0)
        assert f == Frame(7, b"\x07", timestamp=f.timestamp)
    assert t.closed


@pytest.mark.parametrize("iface,channel", [("nosuchinterface", "x"), ("slcan", "/dev/does-not-exist"),
                                           ("socketcan", "nosuchcan0")])
def test_bad_interface_or_channel_is_comms_error(iface, channel):
    with pytest.raises(CommsError) as info:
        CanTransport(iface, channel)
    assert iface in str(info.value)
    assert info.value.__cause__ is not None



@pytest.mark.parametrize("code,says", [
    (97, "sudo modprobe can_raw"),                              # EAFNOSUPPORT: no AF_CAN in the kernel
    (19, "`ip -details link show` lists the CAN interfaces"),    # ENODEV: no such interface
    (100, "`sudo ip link set can7 up type can bitrate 500000`"),  # ENETDOWN: interface down
])
def test_a_socketcan_interface_that_does_not_open_says_what_to_do(monkeypatch, code, says):
    """The kernel's errno picks the advice (the messages a first hardware run meets)."""
    def refuse(*args, **kwargs):
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(can, "Bus", refuse)
    with pytest.raises(CommsError) as info:
        CanTransport("socketcan", "can7", bitrate=500000)
    assert "'can7'" in str(info.value) and says in str(info.value)
    assert isinstance(info.value.__cause__, OSError)

def test_bus_errors_are_wrapped():
    class Broken:
        def send(self, msg, timeout=None):
            raise can.CanOperationError("bus off")

        def recv(self, timeout=None):
            raise can.CanOperationError("controller gone")

        def shutdown(self):
            pass

    t = CanTransport.from_bus(Broken(), name="broken")
    with pytest.raises(CommsError, match="bus off"):
        t.send(1, b"")
    with pytest.raises(CommsError, match="controller gone"):
        t.recv(0)

    class Full(Broken):
        def send(self, msg, timeout=None):
            raise can.CanTimeoutError("tx full")

    with pytest.raises(CommsTimeoutError):
        CanTransport.from_bus(Full()).send(1, b"")
    with pytest.raises(CommsError):
        CanTransport.from_bus(object())


def test_line_framer():
    fr = LineFramer(b"\n", max_line_bytes=8)
    assert fr.feed(b"ab") == []
    assert fr.feed(b"c\r\nde\nf") == [b"abc", b"de"]
    assert fr.pending == b"f"
    with pytest.raises(DecodeError):
        fr.feed(b"0123456789")
    assert fr.feed(b"tail\nok\n") == [b"ok"]    # the rest of the over-long line is dropped
    assert encode_line("r axis0.pos") == b"r axis0.pos\n"
    with pytest.raises(CommsError):
        encode_line("a\nb")


def test_serial_loop_url():
    with SerialTransport("loop://", timeout_s=0.05) as s:
        s.write_line("v 0 1.5")
        assert s.read_line() == "v 0 1.5"
        s.write(b"abc")
        with pytest.raises(CommsTimeoutError):
            s.read_line(timeout_s=0.02)
        s.write(b"\n1234")
        assert s.read_line() == "abc"            # partial data was kept across the timeout
        assert s.read(4) == b"1234"
        with pytest.raises(CommsTimeoutError):
            s.read(1, timeout_s=0.01)
        assert s.request("ping") == "ping"
    s.close()
    assert s.closed
    with pytest.raises(CommsError):
        s.write(b"x")


def test_serial_pty_pair():
    master, slave = os.openpty()
    try:
        with SerialTransport(os.ttyname(slave), timeout_s=0.5) as s:
            os.write(master, b"hello\r\nwor")
            assert s.read_line() == "hello"
            os.write(master, b"ld\n")
            assert s.read_line() == "world"
            s.write_line("r vbus_voltage")
            deadline = time.monotonic() + 1.0
            got = b""
            while b"\n" not in got and time.monotonic() < deadline:
                got += os.read(master, 64)
            assert got.replace(b"\r", b"") == b"r vbus_voltage\n"
    finally:
        os.close(master)
        os.close(slave)


@pytest.mark.skipif(os.name != "posix", reason="termios is POSIX")
@pytest.mark.parametrize("op", ["read", "write", "reset_input", "close"])
def test_serial_port_vanishing_in_termios_is_a_comms_error(op):
    """pyserial re-applies termios settings when the timeout changes; on a port whose device is
    gone that raises termios.error (not an OSError): it must arrive as CommsError."""
    import termios

    class _Gone:
        in_waiting = 0

        @property
        def timeout(self):
            return 0.1

        @timeout.setter
        def timeout(self, v):
            raise termios.error(5, "Input/output error")

        def write(self, *args):
            raise termios.error(5, "Input/output error")

        flush = read = reset_input_buffer = close = write

    s = SerialTransport(port=_Gone(), timeout_s=0.05)
    with pytest.raises(CommsError, match="Input/output"):
        if op == "read":
            s.read(1)
        elif op == "write":
            s.write(b"x")
        elif op == "reset_input":
            s.reset_input()
        else:
            s.close()


def test_serial_bad_port():
    with pytest.raises(CommsError):
        SerialTransport("/dev/does-not-exist-tl")


from hypothesis import given, settings, strategies as st  # noqa: E402


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.lists(st.binary(max_size=12).filter(lambda b: b"\n" not in b), max_size=8),
       st.lists(st.integers(1, 7), min_size=1, max_size=20))
def test_line_framer_chunking_invariant(lines, cuts):
    """However the stream is cut into chunks, the framer returns the same lines."""
    stream = b"".join(line + b"\n" for line in lines)
    fr = LineFramer(b"\n", max_line_bytes=1000)
    got, i, k = [], 0, 0
    while i < len(stream):
        step = cuts[k % len(cuts)]
        got += fr.feed(stream[i:i + step])
        i += step
        k += 1
    want = [line[:-1] if line.endswith(b"\r") else line for line in lines]
    assert got == want and fr.pending == b""


def test_udp_multicast_round_trip_or_clear_missing_dependency():
    """udp_multicast needs msgpack: without it the error names the interface and the missing package."""
    import importlib.util
    group = "239.74.163.2"
    if importlib.util.find_spec("msgpack") is None:
        with pytest.raises(CommsError, match="udp_multicast.*msgpack"):
            CanTransport("udp_multicast", group)
        return
    try:
        a = CanTransport("udp_multicast", group)
    except CommsError as err:  # no multicast route on this machine
        pytest.skip(f"udp_multicast cannot bind here: {err}")
    with a, CanTransport("udp_multicast", group) as b:
        a.send(0x55, b"\x01\x02")
        f = b.recv(2.0)
        assert f is not None and f.arbitration_id == 0x55 and f.data == b"\x01\x02"
