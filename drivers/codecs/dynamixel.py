"""Dynamixel Protocol 2.0 (ROBOTIS X series) packets, control table and units.

Pure functions, no I/O.  Source: the ROBOTIS e-Manual, "DYNAMIXEL Protocol 2.0"
(https://emanual.robotis.com/docs/en/dxl/protocol2/) for the packets, and the
per-model pages (https://emanual.robotis.com/docs/en/dxl/x/<model>/) for the
control table, units and limits.

Packet (little-endian)::

    FF FF FD 00 | ID | LEN_L LEN_H | INST | [ERR] PARAM ... | CRC_L CRC_H

``LEN`` counts instruction, (error,) parameters and CRC, after byte stuffing;
the CRC is CRC-16 with polynomial 0x8005, initial value 0, no reflection
("CRC-16/BUYPASS"), over everything from the first header byte to the last
parameter, stuffing included.  Byte stuffing: in the instruction and
parameter fields every ``FF FF FD`` is sent as ``FF FF FD FD`` (the receiver
drops the extra ``FD``).  The status packet of a Fast Sync Read (ID 0xFE,
instruction 0x55) is not stuffed; its devices append one segment each
(error, ID, data, CRC so far).

Units (X series): position 1 pulse = 2 pi / 4096 rad, velocity 0.229 rev/min
per LSB, current per LSB model dependent (2.69 mA for XM/XH430-W, 1 mA for
XL330), Return Delay Time 2 us per LSB, Bus Watchdog 20 ms per LSB, voltage
0.1 V per LSB.  Conversions to SI live here only (:class:`DxlModel`).

Encoders refuse out-of-range identifiers and values with
:class:`~dynamics.errors.DriverError`; decoders raise
:class:`~dynamics.errors.DecodeError` (:class:`CrcError` for a CRC mismatch).
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from enum import IntEnum
from typing import Iterable, Sequence

from dynamics.errors import DecodeError, DriverError

__all__ = [
    "HEADER", "BROADCAST_ID", "MAX_ID", "Inst", "StatusError", "Addr", "ALERT_BIT",
    "HW_ERROR_BITS", "hw_error_names", "status_error_name",
    "CrcError", "Packet", "crc16", "stuff", "unstuff",
    "encode_instruction", "encode_status", "decode_packet", "PacketFramer",
    "encode_ping", "encode_read", "encode_write", "encode_reboot",
    "encode_sync_write", "encode_sync_read", "encode_fast_sync_read",
    "encode_fast_sync_status", "decode_fast_sync_status", "parse_sync_params",
    "DxlModel", "DXL_MODELS", "model_by_number",
    "POSITION_RAD_PER_PULSE", "VELOCITY_RAD_S_PER_LSB", "RETURN_DELAY_S_PER_LSB", "BUS_WATCHDOG_S_PER_LSB",
    "PRESENT_BLOCK_ADDR", "PRESENT_BLOCK_LEN", "Present", "decode_present", "encode_present",
    "packet_length",
]

HEADER = b"\xff\xff\xfd\x00"
BROADCAST_ID = 0xFE
MAX_ID = 0xFC
_MAX_LEN = 0xFFFF


class Inst(IntEnum):
    """Instruction codes (Protocol 2.0)."""

    PING = 0x01
    READ = 0x02
    WRITE = 0x03
    REG_WRITE = 0x04
    ACTION = 0x05
    FACTORY_RESET = 0x06
    REBOOT = 0x08
    CLEAR = 0x10
    STATUS = 0x55
    SYNC_READ = 0x82
    SYNC_WRITE = 0x83
    FAST_SYNC_READ = 0x8A
    BULK_READ = 0x92
    BULK_WRITE = 0x93
    FAST_BULK_READ = 0x9A


class StatusError(IntEnum):
    """Error numbers of the status packet's error field (bits 0..6)."""

    NONE = 0x00
    RESULT_FAIL = 0x01
    INSTRUCTION = 0x02
    CRC = 0x03
    DATA_RANGE = 0x04
    DATA_LENGTH = 0x05
    DATA_LIMIT = 0x06
    ACCESS = 0x07


#: bit 7 of the status error field: the device has a hardware error (read Hardware Error Status)
ALERT_BIT = 0x80

#: Hardware Error Status (70) / Shutdown (63) bits of the X series
HW_ERROR_BITS = {0: "input_voltage", 2: "overheating", 3: "motor_encoder", 4: "electrical_shock", 5: "overload"}


def hw_error_names(bits: int) -> list[str]:
    """Names of the Hardware Error Status bits set in ``bits`` (unknown bits as ``bit<k>``)."""
    return [HW_ERROR_BITS.get(k, f"bit{k}") for k in range(8) if bits >> k & 1]


def status_error_name(err: int) -> str:
    """Name of a status packet's error number (alert bit ignored)."""
    try:
        return StatusError(err & 0x7F).name.lower()
    except ValueError:
        return f"unknown_0x{err & 0x7F:02X}"


class Addr(IntEnum):
    """X-series control table addresses (e-Manual, XM430-W350 "Control Table")."""

    MODEL_NUMBER = 0            # 2, R
    FIRMWARE_VERSION = 6        # 1, R
    ID = 7                      # 1, RW (EEPROM)
    BAUD_RATE = 8               # 1, RW (EEPROM)
    RETURN_DELAY_TIME = 9       # 1, RW (EEPROM), 2 us
    DRIVE_MODE = 10             # 1, RW (EEPROM)
    OPERATING_MODE = 11         # 1, RW (EEPROM), 0 = current control
    HOMING_OFFSET = 20          # 4, RW (EEPROM)
    TEMPERATURE_LIMIT = 31      # 1, RW (EEPROM), degC
    MAX_VOLTAGE_LIMIT = 32      # 2, RW (EEPROM), 0.1 V
    MIN_VOLTAGE_LIMIT = 34      # 2, RW (EEPROM), 0.1 V
    PWM_LIMIT = 36              # 2, RW (EEPROM)
    CURRENT_LIMIT = 38          # 2, RW (EEPROM), current unit
    VELOCITY_LIMIT = 44         # 4, RW (EEPROM), 0.229 rev/min
    MAX_POSITION_LIMIT = 48     # 4, RW (EEPROM)
    MIN_POSITION_LIMIT = 52     # 4, RW (EEPROM)
    SHUTDOWN = 63               # 1, RW (EEPROM)
    TORQUE_ENABLE = 64          # 1, RW
    LED = 65                    # 1, RW
    STATUS_RETURN_LEVEL = 68    # 1, RW
    REGISTERED_INSTRUCTION = 69  # 1, R
    HARDWARE_ERROR_STATUS = 70  # 1, R
    BUS_WATCHDOG = 98           # 1, RW (signed), 20 ms
    GOAL_PWM = 100              # 2, RW
    GOAL_CURRENT = 102          # 2, RW (signed), current unit
    GOAL_VELOCITY = 104         # 4, RW
    GOAL_POSITION = 116         # 4, RW
    REALTIME_TICK = 120         # 2, R, ms
    MOVING = 122                # 1, R
    PRESENT_PWM = 124           # 2, R
    PRESENT_CURRENT = 126       # 2, R (signed)
    PRESENT_VELOCITY = 128      # 4, R (signed)
    PRESENT_POSITION = 132      # 4, R (signed)
    PRESENT_INPUT_VOLTAGE = 144  # 2, R, 0.1 V
    PRESENT_TEMPERATURE = 146   # 1, R, degC


# ---------------------------------------------------------------------------
# CRC and byte stuffing
# ---------------------------------------------------------------------------
def _crc_table() -> tuple[int, ...]:
    poly = 0x8005
    table = []
    for i in range(256):
        c = i << 8
        for _ in range(8):
            c = ((c << 1) ^ poly) if c & 0x8000 else (c << 1)
        table.append(c & 0xFFFF)
    return tuple(table)


_CRC_TABLE = _crc_table()


def _crc_table16() -> list[int]:
    """The CRC of every 16-bit word (two bytes, the first one high) from 0: ``crc16`` then takes
    a word per step, ``crc = T16[crc ^ word]`` (a 16-bit register shifted by 16 bits keeps
    nothing of itself: the word XORed in is all that is left to reduce)."""
    t = _CRC_TABLE
    out = []
    for hi in range(256):
        c = t[hi]
        base, top = (c << 8) & 0xFFFF, c >> 8
        out += [base ^ t[top ^ lo] for lo in range(256)]
    return out


_CRC_TABLE16 = _crc_table16()
_WORDS = [struct.Struct(f">{k}H") for k in range(160)]      # big-endian words of packets up to 320 bytes


def crc16(data: bytes | bytearray | memoryview, crc: int = 0) -> int:
    """CRC-16 of Protocol 2.0 (poly 0x8005, MSB first, init 0), continuing from ``crc``.

    Two bytes a step (:data:`_CRC_TABLE16`), an odd first byte through the byte table."""
    n = len(data)
    if not n:
        return crc
    crc &= 0xFFFF                   # only the register's 16 bits take part (as the byte table's step)
    if n & 1:
        crc = ((crc << 8) & 0xFFFF) ^ _CRC_TABLE[(crc >> 8) ^ data[0]]
        start = 1
    else:
        start = 0
    k = n >> 1
    words = _WORDS[k].unpack_from(data, start) if k < 160 else struct.unpack_from(f">{k}H", data, start)
    t = _CRC_TABLE16
    for w in words:
        crc = t[crc ^ w]
    return crc


def stuff(body: bytes) -> bytes:
    """Byte-stuff an instruction+parameter field: ``FF FF FD`` -> ``FF FF FD FD``.

    Only occurrences inside ``body`` (instruction and parameters) count, as the
    e-Manual's "Processing Order of Transmission" defines the inspection range.
    """
    if b"\xff\xff\xfd" not in body:
        return bytes(body)
    out = bytearray()
    for i, b in enumerate(body):
        out.append(b)
        if b == 0xFD and i >= 2 and body[i - 1] == 0xFF and body[i - 2] == 0xFF:
            out.append(0xFD)
    return bytes(out)


def unstuff(body: bytes) -> bytes:
    """Undo :func:`stuff`: drop the ``FD`` after every ``FF FF FD``."""
    if b"\xff\xff\xfd\xfd" not in body:
        return bytes(body)
    out = bytearray()
    i = 0
    n = len(body)
    while i < n:
        b = body[i]
        out.append(b)
        if b == 0xFD and len(out) >= 3 and out[-2] == 0xFF and out[-3] == 0xFF and i + 1 < n and body[i + 1] == 0xFD:
            i += 1      # skip the stuffed byte
        i += 1
    return bytes(out)


class CrcError(DecodeError):
    """A packet's CRC does not match (``packet_id`` and ``instruction`` as received)."""

    def __init__(self, message: str, packet_id: int | None = None, instruction: int | None = None):
        super().__init__(message)
        self.packet_id = packet_id
        self.instruction = instruction


@dataclass(frozen=True)
class Packet:
    """One decoded packet.

    Attributes
    ----------
    id : int
        Packet ID (0..252, or 0xFE broadcast).
    instruction : int
        Instruction code (:class:`Inst`; 0x55 for a status packet).
    params : bytes
        Parameters after unstuffing (for a status packet: after the error byte).
    error : int or None
        Status packets: the error field (bit 7 alert, bits 0..6 error number).
    raw : bytes
        The packet as received (header to CRC, stuffing included).
    """

    id: int
    instruction: int
    params: bytes
    error: int | None = None
    raw: bytes = b""

    @property
    def is_status(self) -> bool:
        return self.instruction == Inst.STATUS


def _check_id(dxl_id: int, *, broadcast: bool = True) -> int:
    if type(dxl_id) is int and 0 <= dxl_id <= MAX_ID:       # the common case, at once
        return dxl_id
    top = BROADCAST_ID if broadcast else MAX_ID
    if isinstance(dxl_id, bool) or not isinstance(dxl_id, int) or not (0 <= dxl_id <= MAX_ID or dxl_id == top):
        raise DriverError(f"Dynamixel ID must be an integer in 0..{MAX_ID}" +
                          (" or 0xFE (broadcast)" if broadcast else "") + f", got {dxl_id!r}")
    return dxl_id


def _frame(dxl_id: int, body: bytes, *, stuffing: bool = True) -> bytes:
    body = stuff(body) if stuffing else bytes(body)
    length = len(body) + 2
    if length > _MAX_LEN:
        raise DriverError(f"packet too long ({length} bytes after the length field)")
    head = HEADER + bytes((dxl_id, length & 0xFF, length >> 8))
    pkt = head + body
    c = crc16(pkt)
    return pkt + bytes((c & 0xFF, c >> 8))


def encode_instruction(dxl_id: int, instruction: int, params: bytes = b"") -> bytes:
    """An instruction packet (stuffed, with CRC)."""
    _check_id(dxl_id)
    if not 0 <= int(instruction) <= 0xFF or int(instruction) == Inst.STATUS:
        raise DriverError(f"bad instruction code {instruction!r}")
    return _frame(dxl_id, bytes((int(instruction),)) + bytes(params))


def encode_status(dxl_id: int, error: int = 0, params: bytes = b"") -> bytes:
    """A status packet of one device (stuffed, with CRC)."""
    _check_id(dxl_id, broadcast=False)
    if not 0 <= error <= 0xFF:
        raise DriverError(f"status error field must be a byte, got {error!r}")
    return _frame(dxl_id, bytes((Inst.STATUS, error)) + bytes(params))


def packet_length(header7: bytes) -> int:
    """Total length [bytes] of the packet whose first 7 bytes are ``header7``."""
    if len(header7) < 7 or header7[:4] != HEADER:
        raise DecodeError(f"not a Protocol 2.0 header: {bytes(header7[:7]).hex(' ')}")
    return 7 + (header7[5] | header7[6] << 8)


def decode_packet(raw: bytes) -> Packet:
    """Decode one complete packet (header to CRC).

    Raises
    ------
    CrcError
        CRC mismatch.
    DecodeError
        Bad header, length or reserved byte.
    """
    raw = bytes(raw)
    n = packet_length(raw)
    if len(raw) != n:
        raise DecodeError(f"packet length field says {n} bytes, got {len(raw)}")
    length = n - 7
    if length < 3:
        raise DecodeError(f"packet length {length} < 3")
    pid, inst = raw[4], raw[7]
    crc = raw[-2] | raw[-1] << 8
    if crc16(raw[:-2]) != crc:
        raise CrcError(f"CRC mismatch in packet for ID {pid} (instruction 0x{inst:02X})", pid, inst)
    if pid in (0xFD, 0xFF):
        raise DecodeError(f"invalid packet ID 0x{pid:02X}")
    body = raw[8:-2]
    if inst == Inst.STATUS:
        if not body:
            raise DecodeError("status packet without error field")
        if pid == BROADCAST_ID:   # Fast Sync/Bulk Read status: not stuffed
            return Packet(pid, inst, bytes(body[1:]), body[0], raw)
        body = unstuff(body)
        return Packet(pid, inst, bytes(body[1:]), body[0], raw)
    return Packet(pid, inst, unstuff(body), None, raw)


class PacketFramer:
    """Split a byte stream into Protocol 2.0 packets (either direction).

    :meth:`feed` returns the complete items found: :class:`Packet`, or the
    :class:`DecodeError` (:class:`CrcError`) of a damaged packet.  Bytes before
    a header are skipped and counted in :attr:`skipped`; a damaged packet is
    consumed whole (its length field is trusted, as the firmware does).

    Parameters
    ----------
    max_length : int
        Longest accepted length field; a larger one is taken as noise and the
        search for a header resumes one byte later.
    """

    def __init__(self, max_length: int = 1024):
        self._buf = bytearray()
        self.max_length = int(max_length)
        self.skipped = 0

    @property
    def pending(self) -> int:
        """Bytes held (partial packet)."""
        return len(self._buf)

    def needed(self) -> int:
        """Bytes still missing for the packet being received (at least 1 when none is)."""
        buf = self._buf
        if len(buf) < 7:
            return 7 - len(buf) if buf[:min(4, len(buf))] == HEADER[:min(4, len(buf))] else 1
        return max(1, 7 + (buf[5] | buf[6] << 8) - len(buf))

    def clear(self) -> None:
        self._buf.clear()

    def feed(self, data: bytes) -> list:
        """Add bytes; return the packets (or decode errors) completed by them."""
        buf = self._buf
        buf += data
        out = []
        while True:
            i = buf.find(HEADER)
            if i < 0:
                keep = 3 if buf.endswith(b"\xff\xff\xfd") else 2 if buf.endswith(b"\xff\xff") else \
                    1 if buf.endswith(b"\xff") else 0
                self.skipped += len(buf) - keep
                del buf[:len(buf) - keep]
                return out
            if i:
                self.skipped += i
                del buf[:i]
            if len(buf) < 7:
                return out
            length = buf[5] | buf[6] << 8
            if length < 3 or length > self.max_length:
                self.skipped += 1
                del buf[:1]
                continue
            total = 7 + length
            if len(buf) < total:
                return out
            raw = bytes(buf[:total])
            del buf[:total]
            try:
                out.append(decode_packet(raw))
            except DecodeError as err:
                out.append(err)


# ---------------------------------------------------------------------------
# instructions
# ---------------------------------------------------------------------------
def _u16(x: int) -> bytes:
    if isinstance(x, bool) or not isinstance(x, int) or not 0 <= x <= 0xFFFF:
        raise DriverError(f"expected an integer in 0..65535, got {x!r}")
    return bytes((x & 0xFF, x >> 8))


def encode_ping(dxl_id: int) -> bytes:
    """Ping (0x01); ID 0xFE pings every device."""
    return encode_instruction(dxl_id, Inst.PING)


def encode_read(dxl_id: int, address: int, length: int) -> bytes:
    """Read (0x02) ``length`` bytes from ``address``."""
    return encode_instruction(dxl_id, Inst.READ, _u16(address) + _u16(length))


def encode_write(dxl_id: int, address: int, data: bytes) -> bytes:
    """Write (0x03) ``data`` at ``address``."""
    if not data:
        raise DriverError("write needs at least one data byte")
    return encode_instruction(dxl_id, Inst.WRITE, _u16(address) + bytes(data))


def encode_reboot(dxl_id: int) -> bytes:
    """Reboot (0x08): clears a hardware-error shutdown (torque comes back off)."""
    return encode_instruction(dxl_id, Inst.REBOOT)


def encode_sync_write(address: int, length: int, items: Iterable[tuple[int, bytes]]) -> bytes:
    """Sync Write (0x83): ``length`` bytes at ``address`` of every ``(id, data)`` (broadcast, no reply)."""
    params = bytearray(_u16(address) + _u16(length))
    seen = set()
    for dxl_id, data in items:
        _check_id(dxl_id, broadcast=False)
        if dxl_id in seen:
            raise DriverError(f"ID {dxl_id} twice in a Sync Write")
        seen.add(dxl_id)
        if len(data) != length:
            raise DriverError(f"ID {dxl_id}: {len(data)} data bytes, expected {length}")
        params.append(dxl_id)
        params += data
    if not seen:
        raise DriverError("Sync Write needs at least one device")
    return encode_instruction(BROADCAST_ID, Inst.SYNC_WRITE, bytes(params))


def _sync_read(inst: Inst, address: int, length: int, ids: Sequence[int]) -> bytes:
    ids = list(ids)
    if not ids:
        raise DriverError("Sync Read needs at least one device")
    for i in ids:
        _check_id(i, broadcast=False)
    if len(set(ids)) != len(ids):
        raise DriverError(f"duplicate IDs in a Sync Read: {ids}")
    return encode_instruction(BROADCAST_ID, inst, _u16(address) + _u16(length) + bytes(ids))


def encode_sync_read(address: int, length: int, ids: Sequence[int]) -> bytes:
    """Sync Read (0x82): every listed device answers with its own status packet, in list order."""
    return _sync_read(Inst.SYNC_READ, address, length, ids)


def encode_fast_sync_read(address: int, length: int, ids: Sequence[int]) -> bytes:
    """Fast Sync Read (0x8A): the devices build one status packet together (X430/540 fw >= 45)."""
    return _sync_read(Inst.FAST_SYNC_READ, address, length, ids)


def parse_sync_params(params: bytes) -> tuple[int, int, bytes]:
    """``(address, length, rest)`` of a Sync Read/Write parameter field.

    Raises
    ------
    DecodeError
        Fewer than 4 bytes.
    """
    if len(params) < 4:
        raise DecodeError(f"sync instruction needs 4 parameter bytes, got {len(params)}")
    return params[0] | params[1] << 8, params[2] | params[3] << 8, bytes(params[4:])


def encode_fast_sync_status(segments: Sequence[tuple[int, int, bytes]]) -> bytes:
    """The status packet of a Fast Sync Read: one ``(error, id, data)`` segment per device.

    Each segment ends with the CRC of the packet up to it (the devices compute it
    as they append); the last one is the packet's CRC.  Not byte-stuffed.
    """
    if not segments:
        raise DriverError("a Fast Sync Read status needs at least one segment")
    n_data = {len(d) for _, _, d in segments}
    if len(n_data) != 1:
        raise DriverError("every segment must carry the same number of data bytes")
    length = 1 + sum(4 + len(d) for _, _, d in segments)
    pkt = bytearray(HEADER + bytes((BROADCAST_ID, length & 0xFF, length >> 8, Inst.STATUS)))
    crc = 0
    start = 0                           # the running CRC covers pkt[:start]
    for err, dxl_id, data in segments:
        _check_id(dxl_id, broadcast=False)
        pkt.append(err & 0xFF)
        pkt.append(dxl_id)
        pkt += data
        crc = crc16(pkt[start:], crc)   # the previous CRC's two bytes and this segment
        start = len(pkt)
        pkt.append(crc & 0xFF)
        pkt.append(crc >> 8)
    return bytes(pkt)


def decode_fast_sync_status(packet: Packet, length: int) -> dict[int, tuple[int, bytes]]:
    """Segments of a Fast Sync Read status packet: ``{id: (error, data)}``.

    ``packet.error``/``params`` hold the first segment's error and the rest;
    the packet CRC was checked by :func:`decode_packet` (the inner CRCs are the
    running CRC, checked here too).

    Raises
    ------
    DecodeError
        Not a broadcast status packet, a length that is not a whole number of
        segments, or a bad inner CRC.
    """
    if packet.id != BROADCAST_ID or packet.instruction != Inst.STATUS or packet.error is None:
        raise DecodeError("not a Fast Sync Read status packet")
    seg_len = length + 4
    raw = packet.raw
    if not raw:
        raise DecodeError("the Fast Sync Read status packet's raw bytes are needed")
    body = raw[8:]                       # segments; the last one's CRC is the packet CRC
    if len(body) % seg_len:
        raise DecodeError(f"Fast Sync Read status of {len(body)} bytes is not a whole number of "
                          f"{seg_len}-byte segments")
    out = {}
    running = 0                            # the CRC of raw up to ``start``, segment by segment
    start = 0
    for k in range(len(body) // seg_len):
        end = 8 + (k + 1) * seg_len        # offset after this segment's CRC in raw
        running = crc16(raw[start:end - 2], running)
        if running != raw[end - 2] | raw[end - 1] << 8:
            raise DecodeError(f"Fast Sync Read segment {k}: inner CRC mismatch")
        start = end - 2                    # the next span starts with this CRC's two bytes
        seg = body[k * seg_len:(k + 1) * seg_len]
        out[seg[1]] = (seg[0], bytes(seg[2:2 + length]))
    return out


# ---------------------------------------------------------------------------
# models and units
# ---------------------------------------------------------------------------
#: one position pulse [rad] (4096 pulses per output revolution)
POSITION_RAD_PER_PULSE = 2.0 * math.pi / 4096.0
#: one velocity LSB [rad/s] (0.229 rev/min)
VELOCITY_RAD_S_PER_LSB = 0.229 * 2.0 * math.pi / 60.0
#: one Return Delay Time LSB [s]
RETURN_DELAY_S_PER_LSB = 2e-6
#: one Bus Watchdog LSB [s]
BUS_WATCHDOG_S_PER_LSB = 0.020


@dataclass(frozen=True)
class DxlModel:
    """One X-series model: units, factory limits and torque-current relation.

    Attributes
    ----------
    name : str
    model_number : int
        Model Number (0) as reported by Ping/Read.
    current_a_per_lsb : float
        Goal/Present Current unit [A].
    current_limit_lsb : int
        Factory (and maximum) Current Limit (38) [LSB].
    velocity_limit_lsb : int
        Factory Velocity Limit (44) [LSB of 0.229 rev/min].
    temperature_limit_c : int
        Factory Temperature Limit (31) [degC].
    max_voltage_lsb, min_voltage_lsb : int
        Factory Max/Min Voltage Limit (32, 34) [0.1 V].
    shutdown_default : int
        Factory Shutdown (63) bits.
    stall_torque_nm, stall_current_a, rated_voltage_v : float
        Stall point of the specification table at ``rated_voltage_v``.
    source : str
        e-Manual page the values come from.

    Notes
    -----
    The torque-current relation of these geared servos is affine and lossy
    (the e-Manual's performance graphs show a no-load current and a gear
    efficiency that varies with load); this package uses the stall point of
    the specification table as a linear torque constant at the output horn,
    ``kt = stall_torque / stall_current`` (:attr:`torque_constant_nm_per_a`).
    Identify your servos (current vs. known load) for better torque accuracy
    and give ``torque_constant_nm_per_a`` per joint.
    """

    name: str
    model_number: int
    current_a_per_lsb: float
    current_limit_lsb: int
    velocity_limit_lsb: int
    temperature_limit_c: int
    max_voltage_lsb: int
    min_voltage_lsb: int
    shutdown_default: int
    stall_torque_nm: float
    stall_current_a: float
    rated_voltage_v: float
    source: str

    @property
    def torque_constant_nm_per_a(self) -> float:
        """Output-side torque per current [N m / A] (stall point, see Notes)."""
        return self.stall_torque_nm / self.stall_current_a

    @property
    def current_limit_a(self) -> float:
        """Factory Current Limit [A]."""
        return self.current_limit_lsb * self.current_a_per_lsb

    def current_to_lsb(self, current_a: float) -> int:
        """Current [A] -> Goal Current LSB (nearest; not clamped)."""
        if not math.isfinite(current_a):
            raise DriverError(f"current must be finite, got {current_a!r}")
        return int(round(current_a / self.current_a_per_lsb))

    def lsb_to_current(self, lsb: int) -> float:
        """Present Current LSB -> current [A]."""
        return lsb * self.current_a_per_lsb


_EMANUAL = "https://emanual.robotis.com/docs/en/dxl/x/"

#: models by name; values from each model's e-Manual page (specification table and control table)
DXL_MODELS: dict[str, DxlModel] = {m.name: m for m in (
    DxlModel("XM430-W350", 1020, 2.69e-3, 1193, 350, 80, 160, 95, 52, 4.1, 2.3, 12.0, _EMANUAL + "xm430-w350/"),
    DxlModel("XM430-W210", 1030, 2.69e-3, 1193, 330, 80, 160, 95, 52, 3.0, 2.3, 12.0, _EMANUAL + "xm430-w210/"),
    DxlModel("XM540-W270", 1120, 2.69e-3, 2047, 128, 80, 160, 95, 52, 10.6, 4.4, 12.0, _EMANUAL + "xm540-w270/"),
    DxlModel("XH430-W350", 1000, 2.69e-3, 648, 130, 80, 160, 95, 52, 3.4, 1.3, 12.0, _EMANUAL + "xh430-w350/"),
    DxlModel("XL330-M288", 1200, 1.0e-3, 1750, 445, 70, 70, 35, 53, 0.52, 1.47, 5.0, _EMANUAL + "xl330-m288/"),
)}


def model_by_number(number: int) -> DxlModel | None:
    """The known model with this Model Number, or None."""
    for m in DXL_MODELS.values():
        if m.model_number == number:
            return m
    return None


# ---------------------------------------------------------------------------
# the cyclic block: Present Current (126, 2) + Present Velocity (128, 4) + Present Position (132, 4)
# ---------------------------------------------------------------------------
PRESENT_BLOCK_ADDR = int(Addr.PRESENT_CURRENT)
PRESENT_BLOCK_LEN = 10
_PRESENT = struct.Struct("<hii")


@dataclass(frozen=True)
class Present:
    """Present Current / Velocity / Position in protocol units (LSB, LSB, pulse)."""

    current_lsb: int
    velocity_lsb: int
    position_pulse: int


def decode_present(data: bytes) -> Present:
    """Decode the 10-byte block read from address 126.

    Raises
    ------
    DecodeError
        Wrong length.
    """
    if len(data) != PRESENT_BLOCK_LEN:
        raise DecodeError(f"present block must be {PRESENT_BLOCK_LEN} bytes, got {len(data)}")
    c, v, p = _PRESENT.unpack(data)
    return Present(c, v, p)


def encode_present(current_lsb: int, velocity_lsb: int, position_pulse: int) -> bytes:
    """Encode the 10-byte block at address 126 (the device side; clamps to the field ranges)."""
    c, v, p = int(current_lsb), int(velocity_lsb), int(position_pulse)
    try:
        return _PRESENT.pack(c, v, p)
    except struct.error:                # a field out of its range: clamped
        return _PRESENT.pack(max(-0x8000, min(0x7FFF, c)), max(-0x80000000, min(0x7FFFFFFF, v)),
                             max(-0x80000000, min(0x7FFFFFFF, p)))
