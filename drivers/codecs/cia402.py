"""CANopen CiA 402 (drives and motion control) codec: cyclic synchronous torque subset.

Pure functions and small records, no I/O.  The CANopen services themselves
(NMT, SDO, PDO configuration, EMCY and heartbeat bookkeeping) are done by the
``canopen`` library in :mod:`drivers.cia402`; this module holds what the
cyclic hot path needs byte-exact, and the one place where drive units become
SI units.

Objects (CiA 402 / CiA 301)
---------------------------
======  ==========================  ======  ==============================
index   name                        type    unit here
======  ==========================  ======  ==============================
0x6040  controlword                 UINT16  bit field (:data:`CW_*`)
0x6041  statusword                  UINT16  bit field (:func:`decode_state`)
0x6060  modes of operation          INT8    10 = cyclic synchronous torque
0x6061  modes of operation display  INT8
0x6064  position actual value       INT32   encoder increments (motor side)
0x606C  velocity actual value       INT32   increments per second
0x6071  target torque               INT16   per mille of 0x6076
0x6072  max torque                  UINT16  per mille of 0x6076
0x6076  motor rated torque          UINT32  mN m
0x6077  torque actual value         INT16   per mille of 0x6076
0x608F  position encoder resolution UINT32  sub1 increments / sub2 motor revolutions
======  ==========================  ======  ==============================

Velocity in increments per second is the CiA 402 default velocity unit when no
factor group (0x6091..0x6097) is configured; drives set to other units need
their ``velocity_counts_per_rev_s`` set accordingly (:class:`Cia402Units`).

PDO layout used by torqueloop (written to the drive by SDO at enable)
---------------------------------------------------------------------
* RPDO1 (COB-ID 0x200 + node), synchronous: controlword (16 bit), target
  torque (16 bit): 4 bytes, little endian.
* TPDO1 (0x180 + node), every SYNC: statusword (16), position actual value
  (32), torque actual value (16): 8 bytes.
* TPDO2 (0x280 + node), every SYNC: velocity actual value (32), modes of
  operation display (8): 5 bytes.

SYNC is COB-ID 0x080 without data, EMCY ``0x080 + node`` (8 bytes: error code
UINT16, error register UINT8, 5 manufacturer bytes), heartbeat ``0x700 + node``
(1 byte: NMT state, toggle bit 7 masked).
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from enum import IntEnum
from functools import cached_property

from dynamics.errors import DecodeError, DriverError

__all__ = [
    "CW_SHUTDOWN", "CW_SWITCH_ON", "CW_ENABLE_OPERATION", "CW_DISABLE_VOLTAGE", "CW_QUICK_STOP",
    "CW_DISABLE_OPERATION", "CW_FAULT_RESET", "MODE_CST", "SUPPORTED_MODE_CST", "DEVICE_PROFILE_402",
    "State", "NmtState", "Cia402Units", "Emcy", "RPDO1_MAP", "TPDO1_MAP", "TPDO2_MAP",
    "SYNC_ID", "rpdo_id", "tpdo_id", "emcy_id", "heartbeat_id", "sdo_rx_id", "sdo_tx_id",
    "decode_state", "statusword_for", "controlword_command",
    "encode_rpdo1", "pack_rpdo1", "decode_rpdo1", "encode_tpdo1", "decode_tpdo1", "encode_tpdo2", "decode_tpdo2",
    "encode_emcy", "decode_emcy", "encode_heartbeat", "decode_heartbeat",
    "EMCY_HEARTBEAT", "EMCY_GENERIC", "EMCY_NAMES",
]

# -- controlword commands (CiA 402 table 'device control commands') -------------------
CW_SHUTDOWN = 0x0006
CW_SWITCH_ON = 0x0007
CW_ENABLE_OPERATION = 0x000F
CW_DISABLE_VOLTAGE = 0x0000
CW_QUICK_STOP = 0x0002
CW_DISABLE_OPERATION = 0x0007
CW_FAULT_RESET = 0x0080

#: modes of operation (0x6060) value of cyclic synchronous torque
MODE_CST = 10
#: bit of 0x6502 (supported drive modes) that says CST is supported
SUPPORTED_MODE_CST = 1 << 9
#: low 16 bits of 0x1000 (device type) of a CiA 402 device
DEVICE_PROFILE_402 = 402

SYNC_ID = 0x080
#: COB-ID of NMT commands (master -> node; byte 0 the command, byte 1 the node id, 0: every node)
NMT_ID = 0x000

#: EMCY error codes (CiA 301 table 'emergency error codes') used here
EMCY_GENERIC = 0x1000
EMCY_HEARTBEAT = 0x8130
EMCY_NAMES = {
    0x0000: "error reset / no error",
    0x1000: "generic error",
    0x2310: "continuous over-current",
    0x3210: "DC link over-voltage",
    0x3220: "DC link under-voltage",
    0x4210: "excess temperature device",
    0x7300: "sensor (encoder) error",
    0x8110: "CAN overrun",
    0x8130: "life guard or heartbeat error",
    0x8611: "following error",
}


class State(IntEnum):
    """Power state machine states (CiA 402), decoded from the statusword."""

    NOT_READY_TO_SWITCH_ON = 0
    SWITCH_ON_DISABLED = 1
    READY_TO_SWITCH_ON = 2
    SWITCHED_ON = 3
    OPERATION_ENABLED = 4
    QUICK_STOP_ACTIVE = 5
    FAULT_REACTION_ACTIVE = 6
    FAULT = 7
    UNKNOWN = 8


class NmtState(IntEnum):
    """NMT states as carried by the heartbeat (CiA 301)."""

    BOOT_UP = 0x00
    STOPPED = 0x04
    OPERATIONAL = 0x05
    PRE_OPERATIONAL = 0x7F


# (mask, value) pairs of the statusword, CiA 402 'state coding' table
_SW_CODING = (
    (0x4F, 0x00, State.NOT_READY_TO_SWITCH_ON),
    (0x4F, 0x40, State.SWITCH_ON_DISABLED),
    (0x6F, 0x21, State.READY_TO_SWITCH_ON),
    (0x6F, 0x23, State.SWITCHED_ON),
    (0x6F, 0x27, State.OPERATION_ENABLED),
    (0x6F, 0x07, State.QUICK_STOP_ACTIVE),
    (0x4F, 0x0F, State.FAULT_REACTION_ACTIVE),
    (0x4F, 0x08, State.FAULT),
)

#: statusword bits of each state (bit 5 'quick stop' is 1 when not active); see statusword_for
_SW_BITS = {
    State.NOT_READY_TO_SWITCH_ON: 0x0000,
    State.SWITCH_ON_DISABLED: 0x0040,
    State.READY_TO_SWITCH_ON: 0x0021,
    State.SWITCHED_ON: 0x0023,
    State.OPERATION_ENABLED: 0x0027,
    State.QUICK_STOP_ACTIVE: 0x0007,
    State.FAULT_REACTION_ACTIVE: 0x000F,
    State.FAULT: 0x0008,
}
SW_VOLTAGE_ENABLED = 1 << 4
SW_WARNING = 1 << 7
SW_REMOTE = 1 << 9
SW_INTERNAL_LIMIT = 1 << 11
#: CSx modes: 'drive follows the command value'
SW_FOLLOWING = 1 << 12


def decode_state(statusword: int) -> State:
    """Power state of a statusword (0x6041).

    Parameters
    ----------
    statusword : int
        0..0xFFFF.

    Returns
    -------
    State
        ``State.UNKNOWN`` for a bit pattern the standard does not define.
    """
    for mask, value, state in _SW_CODING:
        if statusword & mask == value:
            return state
    return State.UNKNOWN


def statusword_for(state: State, *, voltage: bool = True, remote: bool = True,
                   internal_limit: bool = False, following: bool = False, warning: bool = False) -> int:
    """Statusword a drive reports in ``state`` (used by the emulator).

    Bit 4 (voltage enabled) is set only where the power stage may be on
    (switched on, operation enabled, quick stop active, fault reaction active).
    """
    if state not in _SW_BITS:
        raise DriverError(f"no statusword for state {state!r}")
    sw = _SW_BITS[state]
    if voltage and state in (State.SWITCHED_ON, State.OPERATION_ENABLED, State.QUICK_STOP_ACTIVE,
                             State.FAULT_REACTION_ACTIVE):
        sw |= SW_VOLTAGE_ENABLED
    if remote:
        sw |= SW_REMOTE
    if internal_limit:
        sw |= SW_INTERNAL_LIMIT
    if following:
        sw |= SW_FOLLOWING
    if warning:
        sw |= SW_WARNING
    return sw


def controlword_command(controlword: int) -> str | None:
    """Device control command of a controlword (bits 0-3 and 7), as in the CiA 402 command table.

    Returns
    -------
    str or None
        ``"fault_reset"`` (bit 7 set; the drive acts on its rising edge),
        ``"disable_voltage"``, ``"quick_stop"``, ``"shutdown"``, ``"switch_on"``
        (also 'disable operation'), ``"enable_operation"``; ``None`` for a
        pattern the table does not define.
    """
    if controlword & 0x80:
        return "fault_reset"
    if controlword & 0x02 == 0:
        return "disable_voltage"
    if controlword & 0x06 == 0x02:
        return "quick_stop"
    if controlword & 0x07 == 0x06:
        return "shutdown"
    if controlword & 0x0F == 0x07:
        return "switch_on"
    if controlword & 0x0F == 0x0F:
        return "enable_operation"
    return None


# -- identifiers (CiA 301 predefined connection set) -------------------------------------
def _check_node(node_id: int) -> int:
    if isinstance(node_id, bool) or not isinstance(node_id, int) or not 1 <= node_id <= 127:
        raise DriverError(f"CANopen node id must be an integer in 1..127, got {node_id!r}")
    return node_id


def rpdo_id(node_id: int, n: int = 1) -> int:
    """COB-ID of RPDO ``n`` (1..4) of a node."""
    return 0x100 + 0x100 * n + _check_node(node_id)


def tpdo_id(node_id: int, n: int = 1) -> int:
    """COB-ID of TPDO ``n`` (1..4) of a node."""
    return 0x080 + 0x100 * n + _check_node(node_id)


def emcy_id(node_id: int) -> int:
    return 0x080 + _check_node(node_id)


def heartbeat_id(node_id: int) -> int:
    return 0x700 + _check_node(node_id)


def sdo_rx_id(node_id: int) -> int:
    """COB-ID of SDO requests to a node (client -> server)."""
    return 0x600 + _check_node(node_id)


def sdo_tx_id(node_id: int) -> int:
    """COB-ID of SDO responses of a node (server -> client)."""
    return 0x580 + _check_node(node_id)


# -- PDO mapping (index, subindex, bits) ---------------------------------------------------
RPDO1_MAP = ((0x6040, 0, 16), (0x6071, 0, 16))
TPDO1_MAP = ((0x6041, 0, 16), (0x6064, 0, 32), (0x6077, 0, 16))
TPDO2_MAP = ((0x606C, 0, 32), (0x6061, 0, 8))

_RPDO1 = struct.Struct("<Hh")
_TPDO1 = struct.Struct("<Hih")
_TPDO2 = struct.Struct("<ib")
#: the layouts of TPDO1 (statusword, position, torque) and TPDO2 (velocity, mode display)
TPDO1_STRUCT, TPDO2_STRUCT = _TPDO1, _TPDO2
_EMCY = struct.Struct("<HB5s")
_I16 = (-0x8000, 0x7FFF)
_I32 = (-0x80000000, 0x7FFFFFFF)


def _int_in(x, lo: int, hi: int, what: str) -> int:
    if isinstance(x, bool) or not isinstance(x, int):
        raise DriverError(f"{what} must be an integer, got {x!r}")
    if not lo <= x <= hi:
        raise DriverError(f"{what} must be in [{lo}, {hi}], got {x}")
    return x


def encode_rpdo1(controlword: int, target_torque_permille: int) -> bytes:
    """RPDO1 payload: controlword (UINT16) and target torque (INT16, per mille), 4 bytes."""
    _int_in(controlword, 0, 0xFFFF, "controlword")
    _int_in(target_torque_permille, *_I16, "target torque [per mille]")
    return _RPDO1.pack(controlword, target_torque_permille)


#: :func:`encode_rpdo1` without its checks, for a caller whose values hold them (an int
#: controlword in 0..0xFFFF, an int torque in the INT16 range): the same bytes
pack_rpdo1 = _RPDO1.pack


def decode_rpdo1(data: bytes) -> tuple[int, int]:
    """Inverse of :func:`encode_rpdo1`: ``(controlword, target_torque_permille)``."""
    if len(data) != _RPDO1.size:
        raise DecodeError(f"RPDO1 must be {_RPDO1.size} bytes, got {len(data)}")
    return _RPDO1.unpack(data)


def encode_tpdo1(statusword: int, position_counts: int, torque_permille: int) -> bytes:
    """TPDO1 payload: statusword, position actual value (INT32), torque actual (INT16): 8 bytes."""
    _int_in(statusword, 0, 0xFFFF, "statusword")
    _int_in(position_counts, *_I32, "position [counts]")
    _int_in(torque_permille, *_I16, "torque [per mille]")
    return _TPDO1.pack(statusword, position_counts, torque_permille)


def decode_tpdo1(data: bytes) -> tuple[int, int, int]:
    """``(statusword, position_counts, torque_permille)`` of a TPDO1 payload."""
    if len(data) != _TPDO1.size:
        raise DecodeError(f"TPDO1 must be {_TPDO1.size} bytes, got {len(data)}")
    return _TPDO1.unpack(data)


def encode_tpdo2(velocity_counts_s: int, mode_display: int) -> bytes:
    """TPDO2 payload: velocity actual value (INT32, counts/s), modes of operation display (INT8)."""
    _int_in(velocity_counts_s, *_I32, "velocity [counts/s]")
    _int_in(mode_display, -128, 127, "mode of operation")
    return _TPDO2.pack(velocity_counts_s, mode_display)


def decode_tpdo2(data: bytes) -> tuple[int, int]:
    """``(velocity_counts_s, mode_display)`` of a TPDO2 payload."""
    if len(data) != _TPDO2.size:
        raise DecodeError(f"TPDO2 must be {_TPDO2.size} bytes, got {len(data)}")
    return _TPDO2.unpack(data)


@dataclass(frozen=True)
class Emcy:
    """One emergency message: CiA 301 error code, error register (0x1001), manufacturer bytes."""

    code: int
    register: int
    vendor: bytes = b"\0" * 5

    @property
    def name(self) -> str:
        return EMCY_NAMES.get(self.code, f"error 0x{self.code:04X}")


def encode_emcy(code: int, register: int, vendor: bytes = b"") -> bytes:
    """EMCY payload (8 bytes); ``vendor`` is padded with zeros to 5 bytes."""
    _int_in(code, 0, 0xFFFF, "EMCY error code")
    _int_in(register, 0, 0xFF, "error register")
    if len(vendor) > 5:
        raise DriverError(f"EMCY manufacturer data is at most 5 bytes, got {len(vendor)}")
    return _EMCY.pack(code, register, bytes(vendor).ljust(5, b"\0"))


def decode_emcy(data: bytes) -> Emcy:
    """Decode an EMCY payload (8 bytes; shorter payloads are padded, as some drives send them)."""
    if not 2 <= len(data) <= 8:
        raise DecodeError(f"EMCY must be 2..8 bytes, got {len(data)}")
    code, reg, vendor = _EMCY.unpack(bytes(data).ljust(8, b"\0"))
    return Emcy(code, reg, vendor)


def encode_heartbeat(state: NmtState | int) -> bytes:
    return bytes((int(state) & 0x7F,))


def decode_heartbeat(data: bytes) -> int:
    """NMT state of a heartbeat (toggle bit masked)."""
    if len(data) != 1:
        raise DecodeError(f"heartbeat must be 1 byte, got {len(data)}")
    return data[0] & 0x7F


# -- units ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Cia402Units:
    """Drive units of one axis (motor side): the only place they are converted.

    Attributes
    ----------
    counts_per_rev : float
        Encoder increments per motor revolution (0x608F sub1 / sub2).
    rated_torque_nm : float
        Motor rated torque 0x6076 [N m] (the drive stores mN m); 1000 per mille.
    velocity_counts_per_rev_s : float, optional
        Velocity units per (motor revolution per second); default ``counts_per_rev``
        (velocity in increments per second).
    """

    counts_per_rev: float
    rated_torque_nm: float
    velocity_counts_per_rev_s: float | None = None

    def __post_init__(self):
        for name in ("counts_per_rev", "rated_torque_nm"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise DriverError(f"{name} must be finite and > 0, got {v!r}")
        v = self.velocity_counts_per_rev_s
        if v is not None and not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
            raise DriverError(f"velocity_counts_per_rev_s must be finite and > 0, got {v!r}")

    # the conversion factors, computed once (functools.cached_property: kept in the instance's
    # __dict__, which the frozen dataclass's fields, equality and hash do not see)
    @cached_property
    def rad_per_count(self) -> float:
        return 2.0 * math.pi / self.counts_per_rev

    @cached_property
    def rad_s_per_count_s(self) -> float:
        return 2.0 * math.pi / (self.velocity_counts_per_rev_s or self.counts_per_rev)

    @cached_property
    def nm_per_permille(self) -> float:
        return self.rated_torque_nm / 1000.0

    @property
    def rated_torque_mnm(self) -> int:
        """0x6076 value [mN m]."""
        return int(round(self.rated_torque_nm * 1000.0))

    def position_rad(self, counts: int) -> float:
        """Motor position [rad] of a position actual value."""
        return counts * self.rad_per_count

    def velocity_rad_s(self, counts_s: int) -> float:
        """Motor velocity [rad/s] of a velocity actual value."""
        return counts_s * self.rad_s_per_count_s

    def torque_nm(self, permille: int) -> float:
        """Motor torque [N m] of a per-mille torque value."""
        return permille * self.nm_per_permille

    def position_counts(self, rad: float) -> int:
        """Position actual value of a motor position [rad] (nearest count, wrapped to INT32)."""
        c = int(round(rad / self.rad_per_count))
        return ((c + 0x80000000) & 0xFFFFFFFF) - 0x80000000

    def velocity_counts_s(self, rad_s: float) -> int:
        """Velocity actual value of a motor velocity [rad/s] (nearest, clamped to INT32)."""
        return min(max(int(round(rad_s / self.rad_s_per_count_s)), _I32[0]), _I32[1])

    def torque_permille(self, nm: float, limit_permille: int = 0x7FFF) -> tuple[int, bool]:
        """Per-mille value of a motor torque [N m], nearest, clamped to +-``limit_permille``.

        Returns
        -------
        (int, bool)
            The value and whether it was clamped.
        """
        if not math.isfinite(nm):
            raise DriverError(f"torque must be finite, got {nm!r}")
        x = nm / self.nm_per_permille
        lim = min(int(limit_permille), 0x7FFF)
        if x > lim:
            return lim, True
        if x < -lim:
            return -lim, True
        return int(round(x)), False
