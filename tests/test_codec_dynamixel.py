"""Dynamixel Protocol 2.0 codec: byte-exact against the e-Manual's published example packets
(https://emanual.robotis.com/docs/en/dxl/protocol2/) and against the official dynamixel-sdk's
own packet code (CRC, stuffing, Sync Write / Sync Read / Fast Sync Read packets, its receive
parser on our packets)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from drivers.codecs import dynamixel as dx
from dynamics.errors import DecodeError, DriverError

import dynamixel_sdk as sdk  # noqa: E402  (in the test extra)


def h(s: str) -> bytes:
    return bytes.fromhex(s)


# --- the e-Manual's examples (Protocol 2.0 page) -----------------------------------------------
def test_ping_examples():
    assert dx.encode_ping(1) == h("FF FF FD 00 01 03 00 01 19 4E")
    assert dx.encode_ping(dx.BROADCAST_ID) == h("FF FF FD 00 FE 03 00 01 31 42")
    # status of ID 1 / ID 2 (XM430-W210, model 1030, firmware 38)
    assert dx.encode_status(1, 0, h("06 04 26")) == h("FF FF FD 00 01 07 00 55 00 06 04 26 65 5D")
    assert dx.encode_status(2, 0, h("06 04 26")) == h("FF FF FD 00 02 07 00 55 00 06 04 26 6F 6D")
    p = dx.decode_packet(h("FF FF FD 00 02 07 00 55 00 06 04 26 6F 6D"))
    assert (p.id, p.instruction, p.error, p.params) == (2, 0x55, 0, h("06 04 26"))


def test_read_write_examples():
    assert dx.encode_read(1, 132, 4) == h("FF FF FD 00 01 07 00 02 84 00 04 00 1D 15")
    assert dx.encode_status(1, 0, h("A6 00 00 00")) == h("FF FF FD 00 01 08 00 55 00 A6 00 00 00 8C C0")
    assert dx.encode_write(1, 116, (512).to_bytes(4, "little")) == \
        h("FF FF FD 00 01 09 00 03 74 00 00 02 00 00 CA 89")
    assert dx.encode_status(1, 0) == h("FF FF FD 00 01 04 00 55 00 A1 0C")
    assert dx.encode_reboot(1) == h("FF FF FD 00 01 03 00 08 2F 4E")


def test_sync_examples():
    assert dx.encode_sync_read(132, 4, [1, 2]) == h("FF FF FD 00 FE 09 00 82 84 00 04 00 01 02 CE FA")
    assert dx.encode_status(2, 0, h("1F 08 00 00")) == h("FF FF FD 00 02 08 00 55 00 1F 08 00 00 BA BE")
    sw = dx.encode_sync_write(116, 4, [(1, (150).to_bytes(4, "little")), (2, (170).to_bytes(4, "little"))])
    assert sw == h("FF FF FD 00 FE 11 00 83 74 00 04 00 01 96 00 00 00 02 AA 00 00 00 82 87")


def test_fast_sync_read_example():
    # XC330-T288 IDs 3, 7, 4: Present Position 166, 2079, 1023
    assert dx.encode_fast_sync_read(132, 4, [3, 7, 4]) == \
        h("FF FF FD 00 FE 0A 00 8A 84 00 04 00 03 07 04 20 F2")
    status = h("FF FF FD 00 FE 19 00 55 00 03 A6 00 00 00 84 08"
               "00 07 1F 08 00 00 16 CA" "00 04 FF 03 00 00 D1 9E")
    segs = [(0, 3, (166).to_bytes(4, "little")), (0, 7, (2079).to_bytes(4, "little")),
            (0, 4, (1023).to_bytes(4, "little"))]
    assert dx.encode_fast_sync_status(segs) == status
    got = dx.decode_fast_sync_status(dx.decode_packet(status), 4)
    assert got == {3: (0, segs[0][2]), 7: (0, segs[1][2]), 4: (0, segs[2][2])}
    bad = bytearray(status)
    bad[14] ^= 0x01          # the first inner CRC; fix the outer one so only the inner check fails
    c = dx.crc16(bytes(bad[:-2]))
    bad[-2:] = bytes((c & 0xFF, c >> 8))
    with pytest.raises(DecodeError, match="inner CRC"):
        dx.decode_fast_sync_status(dx.decode_packet(bytes(bad)), 4)


# --- CRC, stuffing and framing -----------------------------------------------------------------
def test_crc_against_sdk_table():
    ph = sdk.PacketHandler(2.0)
    for data in (b"", b"\x00", bytes(range(256)), b"\xff\xff\xfd\x00\x01\x03\x00\x01"):
        assert dx.crc16(data) == ph.updateCRC(0, list(data), len(data))


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=700), st.integers(0, 0xFFFF), st.integers(0, 3))
def test_crc_word_steps_equal_the_sdk_byte_steps(data, crc, cut):
    """crc16 takes two bytes a step: byte-exact against the SDK's byte-at-a-time CRC for any
    length (odd and even, beyond the cached word formats), continued from any register value,
    on bytes, bytearray and memoryview, and split anywhere."""
    ph = sdk.PacketHandler(2.0)
    ref = ph.updateCRC(crc, list(data), len(data))
    assert dx.crc16(data, crc) == ref
    assert dx.crc16(bytearray(data), crc) == ref == dx.crc16(memoryview(data), crc)
    k = min(cut, len(data))
    assert dx.crc16(data[k:], dx.crc16(data[:k], crc)) == ref


def test_stuffing_round_trip_and_example():
    # a Write whose data holds FF FF FD: the e-Manual rule adds one FD
    pkt = dx.encode_write(1, 116, h("FF FF FD 00"))
    assert h("FF FF FD FD") in pkt[7:-2]
    assert pkt[5] | pkt[6] << 8 == len(pkt) - 7
    p = dx.decode_packet(pkt)
    assert p.params == h("74 00 FF FF FD 00")
    ph = sdk.PacketHandler(2.0)
    raw = [0xFF, 0xFF, 0xFD, 0x00, 1, 9, 0, 3, 0x74, 0, 0xFF, 0xFF, 0xFD, 0, 0, 0]
    sdk_pkt = ph.addStuffing(raw)
    n = (sdk_pkt[5] | sdk_pkt[6] << 8) + 7
    c = ph.updateCRC(0, sdk_pkt, n - 2)
    sdk_pkt[n - 2:n] = [c & 0xFF, c >> 8]
    assert bytes(sdk_pkt[:n]) == pkt


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=40))
def test_stuff_unstuff_inverse(body):
    s = dx.stuff(body)
    assert dx.unstuff(s) == body
    assert b"\xff\xff\xfd\xfd" not in s or b"\xff\xff\xfd" in body
    # no unstuffed header pattern survives (followed by something other than FD)
    for i in range(len(s) - 3):
        if s[i:i + 3] == b"\xff\xff\xfd":
            assert s[i + 3] == 0xFD


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 252), st.binary(min_size=0, max_size=20)), max_size=5),
       st.binary(max_size=10))
def test_framer_splits_any_chunking(items, junk):
    pkts = [dx.encode_status(i, 0, d) for i, d in items]
    stream = junk.replace(b"\xff", b"") + b"".join(pkts)
    fr = dx.PacketFramer()
    got = []
    for k in range(0, len(stream), 3):
        got += fr.feed(stream[k:k + 3])
    assert [(p.id, p.params) for p in got] == [(i, d) for i, d in items]


def test_framer_reports_crc_error_and_resyncs():
    good = dx.encode_status(3, 0, b"\x01\x02")
    bad = bytearray(dx.encode_status(4, 0, b"\x05"))
    bad[-1] ^= 0xFF
    out = dx.PacketFramer().feed(b"\x00\x13" + bytes(bad) + good)
    assert isinstance(out[0], dx.CrcError) and out[0].packet_id == 4
    assert out[1].id == 3 and out[1].params == b"\x01\x02"


def test_encoders_refuse_bad_input():
    with pytest.raises(DriverError):
        dx.encode_read(253, 0, 1)
    with pytest.raises(DriverError):
        dx.encode_sync_write(102, 2, [(1, b"\x00")])
    with pytest.raises(DriverError):
        dx.encode_sync_read(126, 10, [1, 1])
    with pytest.raises(DriverError):
        dx.DXL_MODELS["XM430-W350"].current_to_lsb(float("nan"))
    with pytest.raises(DecodeError):
        dx.decode_present(b"\x00" * 9)


# --- the official SDK builds the same packets and parses ours -----------------------------------
class _CapturePort:
    """Just enough of dynamixel_sdk.PortHandler for its tx/rx code: records writes, replays reads."""

    def __init__(self, rx: bytes = b""):
        self.is_using = False
        self.written = b""
        self.rx = bytearray(rx)

    def clearPort(self):
        pass

    def writePort(self, packet):
        self.written += bytes(packet)
        return len(packet)

    def readPort(self, n):
        out = bytes(self.rx[:n])
        del self.rx[:n]
        return list(out)

    def setPacketTimeout(self, n):
        pass

    def setPacketTimeoutMillis(self, ms):
        pass

    def isPacketTimeout(self):
        return True

    def getBaudRate(self):
        return 4_000_000


def test_sdk_builds_identical_sync_packets():
    ph = sdk.PacketHandler(2.0)
    port = _CapturePort()
    gsw = sdk.GroupSyncWrite(port, ph, 102, 2)
    for i, cur in ((1, -5), (2, 300), (7, 0x7FFF)):
        gsw.addParam(i, list((cur & 0xFFFF).to_bytes(2, "little")))
    gsw.txPacket()
    ours = dx.encode_sync_write(102, 2, [(1, (-5 & 0xFFFF).to_bytes(2, "little")),
                                         (2, (300).to_bytes(2, "little")),
                                         (7, (0x7FFF).to_bytes(2, "little"))])
    assert port.written == ours
    for fast in (False, True):
        port = _CapturePort()
        gsr = sdk.GroupSyncRead(port, ph, 126, 10)
        for i in (1, 2, 7):
            gsr.addParam(i)
        (gsr.fastSyncReadTxPacket if fast else gsr.txPacket)()
        enc = dx.encode_fast_sync_read if fast else dx.encode_sync_read
        assert port.written == enc(126, 10, [1, 2, 7])


def test_sdk_parses_our_status_packets():
    ph = sdk.PacketHandler(2.0)
    block = dx.encode_present(-12, 34, -56789)
    # per-device status packets (Sync Read)
    stream = dx.encode_status(1, 0, block) + dx.encode_status(2, 0x80, block[::-1])
    port = _CapturePort(stream)
    gsr = sdk.GroupSyncRead(port, ph, 126, 10)
    gsr.addParam(1)
    gsr.addParam(2)
    assert gsr.rxPacket() == sdk.COMM_SUCCESS
    assert gsr.getData(1, 132, 4) == (-56789) & 0xFFFFFFFF
    assert gsr.getData(1, 126, 2) == (-12) & 0xFFFF
    # one Fast Sync Read status packet
    fast = dx.encode_fast_sync_status([(0, 1, block), (0, 2, dx.encode_present(5, 6, 7))])
    port = _CapturePort(fast)
    gsr = sdk.GroupSyncRead(port, ph, 126, 10)
    gsr.addParam(1)
    gsr.addParam(2)
    assert gsr.fastSyncReadRxPacket() == sdk.COMM_SUCCESS
    assert gsr.getData(2, 128, 4) == 6 and gsr.getData(2, 132, 4) == 7
    assert gsr.getData(1, 128, 4) == 34


def test_sdk_receive_parser_accepts_our_stuffed_status():
    ph = sdk.PacketHandler(2.0)
    data = h("FF FF FD 12")
    pkt = dx.encode_status(5, 0, data)
    assert h("FF FF FD FD") in pkt
    rx, res = ph.rxPacket(_CapturePort(pkt), False)
    assert res == sdk.COMM_SUCCESS
    assert bytes(rx[9:9 + len(data)]) == data      # after the SDK's own unstuffing


def test_units_and_models():
    m = dx.DXL_MODELS["XM430-W350"]
    assert m.model_number == 1020 and m.current_limit_a == pytest.approx(3.209, abs=1e-3)
    assert m.torque_constant_nm_per_a == pytest.approx(4.1 / 2.3)
    assert m.current_to_lsb(1.0) == 372 and m.lsb_to_current(372) == pytest.approx(1.00068)
    assert dx.model_by_number(1200).name == "XL330-M288"
    assert dx.VELOCITY_RAD_S_PER_LSB * 60 / (2 * 3.141592653589793) == pytest.approx(0.229)
    p = dx.decode_present(dx.encode_present(-1, -2, 2**31 + 5))
    assert (p.current_lsb, p.velocity_lsb, p.position_pulse) == (-1, -2, 2**31 - 1)
