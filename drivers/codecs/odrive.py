"""ODrive "CANSimple" protocol, firmware 0.6 (ODrive Pro / S1 / Micro) and 0.5 (ODrive 3.6).

Pure functions, no I/O.  Units are the ODrive's: turns (rev) and rev/s for
position and velocity, N m for torque, A for current, V for voltage.

Arbitration id (standard 11-bit): ``node_id << 5 | cmd_id`` with node ids
0..63 and command ids 0..31 (ODrive docs, "CAN Protocol": axis 0x01 with
command 0x0C gives 0x2C).  Payloads are little-endian.  Messages the ODrive
sends (heartbeat, encoder estimates, Iq, torques, ...) are broadcast cyclically
at configured rates or returned in answer to a remote (RTR) frame with the
same arbitration id (:func:`rtr_request`).

Firmware generations (``firmware`` argument, :data:`FIRMWARES`)
----------------------------------------------------------------
``"0.6"`` follows ODrive's ``odrive-cansimple-0.6.10.dbc``; ``"0.5"`` follows
``odrive-cansimple-0.5.6.dbc`` (both ship in the PyPI package ``odrive-can``
and are the references of ``tests/test_odrive_references.py``).  They differ in:

* the heartbeat: 0.6 has ``Procedure_Result`` (byte 5) and
  ``Trajectory_Done_Flag`` (bit 48); 0.5 has motor / encoder / controller
  error flags (bits 40, 48, 56) and ``Trajectory_Done_Flag`` at bit 63;
* the axis error bits (:data:`AXIS_ERROR_NAMES` / :data:`AXIS_ERROR_NAMES_05`);
* several ids (:class:`Cmd` / :class:`Cmd05`): 0x00 ``Get_Version`` exists on
  0.6 only, 0x1C is ``Get_Torques`` on 0.6 but ``Get_ADC_Voltage`` on 0.5,
  0x1D ``Get_Powers`` / ``Get_Controller_Error``, 0x03 ``Get_Error`` /
  ``Get_Motor_Error``, ...;
* ``Clear_Errors`` and ``Reboot`` carry one byte on 0.6, none on 0.5.

Lengths: what we send and what we accept
-----------------------------------------
Encoders produce exactly the DBC length (:func:`message_length`: 8 bytes for
``Set_Axis_State``, ``Set_Input_Torque``, ... zero-padded), so a strict
DBC-based peer accepts them.  Decoders accept what the firmware accepts: the
firmware reads the signals it needs from a zero-initialised 8-byte receive
buffer whatever the DLC, so

* longer frames are accepted (extra bytes ignored);
* a signal wholly beyond the frame reads as 0 (``Clear_Errors`` with 0 bytes
  is "identify = 0", ``Set_Controller_Mode`` with 4 bytes has input mode 0);
* an integer signal cut short reads zero-extended (``Set_Axis_State`` sent as
  1 or 4 bytes by other clients is the same request);
* a float signal cut short has no meaning (its present bytes are the low
  mantissa bits): :class:`~dynamics.errors.DecodeError`.

Decoders of messages *from* the ODrive (heartbeat, estimates, ...) need every
byte of the signals they read (a truncated feedback frame is corrupt); longer
frames are accepted.  Unknown axis states in a heartbeat (0.6.11 added
``HARMONIC_CALIBRATION`` = 15 and ``..._COMMUTATION`` = 16; later firmware
may add more) are returned as plain ``int``, never an error.

Encoders refuse non-finite values and out-of-range integers with
:class:`~dynamics.errors.DriverError`; decoders raise
:class:`~dynamics.errors.DecodeError`.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from enum import IntEnum

from dynamics.errors import DecodeError, DriverError

__all__ = [
    "FIRMWARES", "check_firmware",
    "Cmd", "Cmd05", "AxisState", "ControlMode", "InputMode", "ProcedureResult",
    "AXIS_ERROR_NAMES", "AXIS_ERROR_NAMES_05", "MESSAGE_LENGTH", "MESSAGE_LENGTH_05",
    "RTR_COMMANDS", "RTR_COMMANDS_05", "MAX_NODE_ID", "WATCHDOG_ERROR_BIT", "ESTOP_ERROR_BIT",
    "message_length", "arbitration_id", "split_id", "rtr_request", "axis_error_names", "axis_state_name",
    "Heartbeat", "EncoderEstimates", "ControllerMode", "Iq", "Torques", "BusVoltageCurrent",
    "ErrorStatus", "InputPos", "InputVel", "Version",
    "encode_set_axis_state", "decode_set_axis_state",
    "encode_set_controller_mode", "decode_set_controller_mode",
    "encode_set_input_torque", "decode_set_input_torque",
    "encode_set_input_vel", "decode_set_input_vel",
    "encode_set_input_pos", "decode_set_input_pos",
    "encode_heartbeat", "decode_heartbeat",
    "encode_encoder_estimates", "decode_encoder_estimates",
    "encode_iq", "decode_iq",
    "encode_torques", "decode_torques",
    "encode_bus_voltage_current", "decode_bus_voltage_current",
    "encode_error_status", "decode_error_status",
    "encode_version", "decode_version",
    "encode_adc_voltage", "decode_adc_voltage",
    "encode_clear_errors", "decode_clear_errors",
    "encode_reboot", "decode_reboot", "encode_estop",
    "encode_set_limits", "decode_set_limits", "encode_set_traj_vel_limit", "encode_set_traj_accel_limits",
    "encode_set_traj_inertia", "encode_set_absolute_position", "encode_set_pos_gain", "encode_set_vel_gains",
    "decode_one_float_command", "decode_two_float_command", "encode_temperature", "encode_powers",
    "decode_two_floats", "encode_error_code", "decode_error_code", "encode_encoder_count", "decode_encoder_count",
    "encode_set_linear_count", "decode_set_linear_count", "encode_set_axis_node_id", "decode_set_axis_node_id",
    "encode_address", "decode_address", "encode_rx_sdo", "encode_tx_sdo", "decode_sdo",
]

MAX_NODE_ID = 0x3F
_MAX_CMD_ID = 0x1F
_F32_MAX = 3.4028234663852886e38

#: Supported firmware generations: "0.6" (ODrive Pro / S1 / Micro) and "0.5" (ODrive 3.6).
FIRMWARES = ("0.6", "0.5")


def check_firmware(firmware) -> str:
    """Return ``firmware`` if it is one of :data:`FIRMWARES`, else raise DriverError."""
    if firmware not in FIRMWARES:
        raise DriverError(f"ODrive firmware must be one of {FIRMWARES}, got {firmware!r}")
    return firmware


class Cmd(IntEnum):
    """CANSimple command ids of firmware 0.6 (lower 5 bits of the arbitration id)."""

    GET_VERSION = 0x00
    HEARTBEAT = 0x01
    ESTOP = 0x02
    GET_ERROR = 0x03
    RX_SDO = 0x04
    TX_SDO = 0x05
    ADDRESS = 0x06
    SET_AXIS_STATE = 0x07
    GET_ENCODER_ESTIMATES = 0x09
    SET_CONTROLLER_MODE = 0x0B
    SET_INPUT_POS = 0x0C
    SET_INPUT_VEL = 0x0D
    SET_INPUT_TORQUE = 0x0E
    SET_LIMITS = 0x0F
    SET_TRAJ_VEL_LIMIT = 0x11
    SET_TRAJ_ACCEL_LIMITS = 0x12
    SET_TRAJ_INERTIA = 0x13
    GET_IQ = 0x14
    GET_TEMPERATURE = 0x15
    REBOOT = 0x16
    GET_BUS_VOLTAGE_CURRENT = 0x17
    CLEAR_ERRORS = 0x18
    SET_ABSOLUTE_POSITION = 0x19
    SET_POS_GAIN = 0x1A
    SET_VEL_GAINS = 0x1B
    GET_TORQUES = 0x1C
    GET_POWERS = 0x1D
    ENTER_DFU_MODE = 0x1F


class Cmd05(IntEnum):
    """CANSimple command ids of firmware 0.5 (ODrive 3.6, ``odrive-cansimple-0.5.6.dbc``)."""

    CANOPEN_NMT = 0x00
    HEARTBEAT = 0x01
    ESTOP = 0x02
    GET_MOTOR_ERROR = 0x03
    GET_ENCODER_ERROR = 0x04
    GET_SENSORLESS_ERROR = 0x05
    SET_AXIS_NODE_ID = 0x06
    SET_AXIS_STATE = 0x07
    SET_AXIS_STARTUP_CONFIG = 0x08
    GET_ENCODER_ESTIMATES = 0x09
    GET_ENCODER_COUNT = 0x0A
    SET_CONTROLLER_MODE = 0x0B
    SET_INPUT_POS = 0x0C
    SET_INPUT_VEL = 0x0D
    SET_INPUT_TORQUE = 0x0E
    SET_LIMITS = 0x0F
    START_ANTICOGGING = 0x10
    SET_TRAJ_VEL_LIMIT = 0x11
    SET_TRAJ_ACCEL_LIMITS = 0x12
    SET_TRAJ_INERTIA = 0x13
    GET_IQ = 0x14
    GET_SENSORLESS_ESTIMATES = 0x15
    REBOOT = 0x16
    GET_BUS_VOLTAGE_CURRENT = 0x17
    CLEAR_ERRORS = 0x18
    SET_LINEAR_COUNT = 0x19
    SET_POS_GAIN = 0x1A
    SET_VEL_GAINS = 0x1B
    GET_ADC_VOLTAGE = 0x1C
    GET_CONTROLLER_ERROR = 0x1D


class AxisState(IntEnum):
    """``AxisState`` (ODrive API reference; 15 and 16 since firmware 0.6.11)."""

    UNDEFINED = 0
    IDLE = 1
    STARTUP_SEQUENCE = 2
    FULL_CALIBRATION_SEQUENCE = 3
    MOTOR_CALIBRATION = 4
    SENSORLESS_CONTROL = 5
    ENCODER_INDEX_SEARCH = 6
    ENCODER_OFFSET_CALIBRATION = 7
    CLOSED_LOOP_CONTROL = 8
    LOCKIN_SPIN = 9
    ENCODER_DIR_FIND = 10
    HOMING = 11
    ENCODER_HALL_POLARITY_CALIBRATION = 12
    ENCODER_HALL_PHASE_CALIBRATION = 13
    ANTICOGGING_CALIBRATION = 14
    HARMONIC_CALIBRATION = 15
    HARMONIC_CALIBRATION_COMMUTATION = 16


class ControlMode(IntEnum):
    """``Controller.ControlMode``."""

    VOLTAGE_CONTROL = 0
    TORQUE_CONTROL = 1
    VELOCITY_CONTROL = 2
    POSITION_CONTROL = 3


class InputMode(IntEnum):
    """``Controller.InputMode``."""

    INACTIVE = 0
    PASSTHROUGH = 1
    VEL_RAMP = 2
    POS_FILTER = 3
    MIX_CHANNELS = 4
    TRAP_TRAJ = 5
    TORQUE_RAMP = 6
    MIRROR = 7
    TUNING = 8


class ProcedureResult(IntEnum):
    """``ProcedureResult`` (heartbeat byte 5, firmware 0.6)."""

    SUCCESS = 0
    BUSY = 1
    CANCELLED = 2
    DISARMED = 3
    NO_RESPONSE = 4
    POLE_PAIR_CPR_MISMATCH = 5
    PHASE_RESISTANCE_OUT_OF_RANGE = 6
    PHASE_INDUCTANCE_OUT_OF_RANGE = 7
    UNBALANCED_PHASES = 8
    INVALID_MOTOR_TYPE = 9
    ILLEGAL_HALL_STATE = 10
    TIMEOUT = 11
    HOMING_WITHOUT_ENDSTOP = 12
    INVALID_STATE = 13
    NOT_CALIBRATED = 14
    NOT_CONVERGING = 15


#: Axis error bits (firmware 0.6 ``ODriveError``), bit value -> name.
AXIS_ERROR_NAMES: dict[int, str] = {
    0x1: "INITIALIZING", 0x2: "SYSTEM_LEVEL", 0x4: "TIMING_ERROR", 0x8: "MISSING_ESTIMATE",
    0x10: "BAD_CONFIG", 0x20: "DRV_FAULT", 0x40: "MISSING_INPUT", 0x100: "DC_BUS_OVER_VOLTAGE",
    0x200: "DC_BUS_UNDER_VOLTAGE", 0x400: "DC_BUS_OVER_CURRENT", 0x800: "DC_BUS_OVER_REGEN_CURRENT",
    0x1000: "CURRENT_LIMIT_VIOLATION", 0x2000: "MOTOR_OVER_TEMP", 0x4000: "INVERTER_OVER_TEMP",
    0x8000: "VELOCITY_LIMIT_VIOLATION", 0x10000: "POSITION_LIMIT_VIOLATION",
    0x1000000: "WATCHDOG_TIMER_EXPIRED", 0x2000000: "ESTOP_REQUESTED", 0x4000000: "SPINOUT_DETECTED",
    0x8000000: "BRAKE_RESISTOR_DISARMED", 0x10000000: "THERMISTOR_DISCONNECTED",
    0x40000000: "CALIBRATION_ERROR",
}

#: Axis error bits of firmware 0.5 (``Axis.Error`` of ODrive 3.6), bit value -> name.
AXIS_ERROR_NAMES_05: dict[int, str] = {
    0x1: "INVALID_STATE", 0x40: "MOTOR_FAILED", 0x80: "SENSORLESS_ESTIMATOR_FAILED",
    0x100: "ENCODER_FAILED", 0x200: "CONTROLLER_FAILED", 0x800: "WATCHDOG_TIMER_EXPIRED",
    0x1000: "MIN_ENDSTOP_PRESSED", 0x2000: "MAX_ENDSTOP_PRESSED", 0x4000: "ESTOP_REQUESTED",
    0x20000: "HOMING_WITHOUT_ENDSTOP", 0x40000: "OVER_TEMP", 0x80000: "UNKNOWN_POSITION",
}

#: ``WATCHDOG_TIMER_EXPIRED`` / ``ESTOP_REQUESTED`` axis error bit per firmware generation.
WATCHDOG_ERROR_BIT = {"0.6": 0x1000000, "0.5": 0x800}
ESTOP_ERROR_BIT = {"0.6": 0x2000000, "0.5": 0x4000}

#: Payload length (DLC) per command, ``odrive-cansimple-0.6.10.dbc``.
MESSAGE_LENGTH: dict[Cmd, int] = {
    Cmd.GET_VERSION: 8, Cmd.HEARTBEAT: 8, Cmd.ESTOP: 0, Cmd.GET_ERROR: 8, Cmd.RX_SDO: 8,
    Cmd.TX_SDO: 8, Cmd.ADDRESS: 8, Cmd.SET_AXIS_STATE: 8, Cmd.GET_ENCODER_ESTIMATES: 8,
    Cmd.SET_CONTROLLER_MODE: 8, Cmd.SET_INPUT_POS: 8, Cmd.SET_INPUT_VEL: 8, Cmd.SET_INPUT_TORQUE: 8,
    Cmd.SET_LIMITS: 8, Cmd.SET_TRAJ_VEL_LIMIT: 8, Cmd.SET_TRAJ_ACCEL_LIMITS: 8,
    Cmd.SET_TRAJ_INERTIA: 8, Cmd.GET_IQ: 8, Cmd.GET_TEMPERATURE: 8, Cmd.REBOOT: 1,
    Cmd.GET_BUS_VOLTAGE_CURRENT: 8, Cmd.CLEAR_ERRORS: 1, Cmd.SET_ABSOLUTE_POSITION: 8,
    Cmd.SET_POS_GAIN: 8, Cmd.SET_VEL_GAINS: 8, Cmd.GET_TORQUES: 8, Cmd.GET_POWERS: 8,
    Cmd.ENTER_DFU_MODE: 0,
}

#: Payload length (DLC) per command, ``odrive-cansimple-0.5.6.dbc``; ``Estop`` (0x02), which
#: that DBC leaves out, has no payload (firmware 0.5 ``can_simple.cpp`` reads none).
MESSAGE_LENGTH_05: dict[Cmd05, int] = {c: 8 for c in Cmd05 if c not in (
    Cmd05.CANOPEN_NMT, Cmd05.SET_AXIS_STARTUP_CONFIG)}
MESSAGE_LENGTH_05.update({Cmd05.ESTOP: 0, Cmd05.START_ANTICOGGING: 0, Cmd05.REBOOT: 0, Cmd05.CLEAR_ERRORS: 0})

#: Messages the ODrive answers when it receives a remote (RTR) frame with their id (0.6).
RTR_COMMANDS = frozenset({
    Cmd.GET_VERSION, Cmd.HEARTBEAT, Cmd.GET_ERROR, Cmd.ADDRESS, Cmd.GET_ENCODER_ESTIMATES,
    Cmd.GET_IQ, Cmd.GET_TEMPERATURE, Cmd.GET_BUS_VOLTAGE_CURRENT, Cmd.GET_TORQUES, Cmd.GET_POWERS,
})

#: Messages firmware 0.5 answers on an RTR frame or a 0-byte data frame with their id
#: (``can_simple.cpp``: ``if (msg.rtr || msg.len == 0)``); the heartbeat is broadcast only.
#: ``Get_ADC_Voltage`` and ``Get_Controller_Error`` are answered on any frame.
RTR_COMMANDS_05 = frozenset({
    Cmd05.GET_MOTOR_ERROR, Cmd05.GET_ENCODER_ERROR, Cmd05.GET_SENSORLESS_ERROR,
    Cmd05.GET_ENCODER_ESTIMATES, Cmd05.GET_ENCODER_COUNT, Cmd05.GET_IQ, Cmd05.GET_SENSORLESS_ESTIMATES,
    Cmd05.GET_BUS_VOLTAGE_CURRENT, Cmd05.GET_ADC_VOLTAGE, Cmd05.GET_CONTROLLER_ERROR,
})


def message_length(cmd: int, firmware: str = "0.6") -> int:
    """DBC payload length of command ``cmd`` on ``firmware``.

    Raises
    ------
    DriverError
        Unknown firmware, or ``cmd`` is not a message of that generation.
    """
    table = MESSAGE_LENGTH if check_firmware(firmware) == "0.6" else MESSAGE_LENGTH_05
    enum_cls = Cmd if firmware == "0.6" else Cmd05
    try:
        return table[enum_cls(cmd)]
    except (ValueError, KeyError) as err:
        raise DriverError(f"command 0x{int(cmd):02X} is not a CANSimple {firmware} message") from err


# ---------------------------------------------------------------------------
# ids
# ---------------------------------------------------------------------------
def arbitration_id(node_id: int, cmd_id: int) -> int:
    """``node_id << 5 | cmd_id`` (node 0..63, command 0..31).

    Raises
    ------
    DriverError
        If an id is out of range.
    """
    if isinstance(node_id, bool) or not isinstance(node_id, int) or not 0 <= node_id <= MAX_NODE_ID:
        raise DriverError(f"ODrive node id must be an integer in [0, {MAX_NODE_ID}], got {node_id!r}")
    if isinstance(cmd_id, bool) or not isinstance(cmd_id, int) or not 0 <= cmd_id <= _MAX_CMD_ID:
        raise DriverError(f"ODrive command id must be an integer in [0, 31], got {cmd_id!r}")
    return (node_id << 5) | int(cmd_id)


def split_id(arb_id: int) -> tuple[int, int]:
    """Split a standard arbitration id into ``(node_id, cmd_id)``.

    Raises
    ------
    DecodeError
        If ``arb_id`` is not an 11-bit id.
    """
    if isinstance(arb_id, bool) or not isinstance(arb_id, int) or not 0 <= arb_id <= 0x7FF:
        raise DecodeError(f"not an 11-bit CAN id: {arb_id!r}")
    return arb_id >> 5, arb_id & 0x1F


def rtr_request(node_id: int, cmd: int, firmware: str = "0.6") -> tuple[int, int]:
    """Arbitration id and DLC of a remote (RTR) frame requesting message ``cmd``.

    Send it with ``is_remote=True`` and no data; the ODrive answers with a data
    frame of the same id.

    Raises
    ------
    DriverError
        If ``cmd`` is not a message the ODrive (of that firmware) answers on request.
    """
    if check_firmware(firmware) == "0.6":
        enum_cls, answered = Cmd, RTR_COMMANDS
    else:
        enum_cls, answered = Cmd05, RTR_COMMANDS_05
    try:
        cmd = enum_cls(cmd)
    except ValueError as err:
        raise DriverError(f"command {cmd!r} is not a CANSimple {firmware} message") from err
    if cmd not in answered:
        raise DriverError(f"{cmd.name} cannot be requested with an RTR frame on firmware {firmware}")
    return arbitration_id(node_id, int(cmd)), message_length(cmd, firmware)


def axis_error_names(axis_error: int, firmware: str = "0.6") -> list[str]:
    """Names of the bits set in an axis error word of ``firmware`` (unknown bits as hex)."""
    names = AXIS_ERROR_NAMES if check_firmware(firmware) == "0.6" else AXIS_ERROR_NAMES_05
    out = []
    bit = 1
    while bit <= axis_error:
        if axis_error & bit:
            out.append(names.get(bit, f"0x{bit:X}"))
        bit <<= 1
    return out


def axis_state_name(state: int) -> str:
    """Name of an axis state, or ``"STATE_<n>"`` for a state this module does not know."""
    try:
        return AxisState(int(state)).name
    except ValueError:
        return f"STATE_{int(state)}"


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------
def _f32(name: str, x) -> float:
    x = float(x)
    if not math.isfinite(x) or abs(x) > _F32_MAX:
        raise DriverError(f"refusing to encode {name}={x!r} (must be a finite float32)")
    return x


def _uint(name: str, x, bits: int) -> int:
    if isinstance(x, bool) or not isinstance(x, int) or not 0 <= x < (1 << bits):
        raise DriverError(f"{name} must be an integer in [0, {(1 << bits) - 1}], got {x!r}")
    return int(x)


def _pad(payload: bytes, length: int) -> bytes:
    """Zero-pad ``payload`` to the DBC length."""
    return payload + bytes(length - len(payload))


_F2 = struct.Struct("<ff")
_F1 = struct.Struct("<f")
_U2 = struct.Struct("<II")
_U1 = struct.Struct("<I")
_I16 = struct.Struct("<h")


def _cmd_int(data: bytes, start: int, size: int, signed: bool = False) -> int:
    """Integer signal of a command as the firmware reads it: bytes past the frame are zero."""
    return int.from_bytes(data[start:start + size].ljust(size, b"\0"), "little", signed=signed)


def _cmd_float(data: bytes, start: int, name: str) -> float:
    """Float32 signal of a command: absent -> 0.0, cut short -> DecodeError, non-finite -> DecodeError."""
    n = len(data)
    if n <= start:
        return 0.0
    if n < start + 4:
        raise DecodeError(f"{name}: float32 signal cut short ({n} bytes in the frame)")
    (v,) = _F1.unpack_from(data, start)
    if not math.isfinite(v):
        raise DecodeError(f"{name}: non-finite value {v!r}")
    return v


def _need(data, n: int, what: str) -> bytes:
    """Feedback frame: at least ``n`` bytes (longer frames are accepted)."""
    data = bytes(data)
    if len(data) < n:
        raise DecodeError(f"{what} needs {n} bytes, got {len(data)}")
    return data


def _finite(what: str, *values: float) -> None:
    for v in values:
        if not math.isfinite(v):
            raise DecodeError(f"{what} payload holds a non-finite value {v!r}")


def _enum(enum_cls, value: int, what: str):
    try:
        return enum_cls(value)
    except ValueError as err:
        raise DecodeError(f"unknown {what} {value}") from err


def _pack_two_floats(a_name: str, a, b_name: str, b) -> bytes:
    return _F2.pack(_f32(a_name, a), _f32(b_name, b))


def _unpack_two_floats(data, what: str) -> tuple[float, float]:
    a, b = _F2.unpack_from(_need(data, 8, what))
    _finite(what, a, b)
    return a, b


# ---------------------------------------------------------------------------
# messages to the ODrive
# ---------------------------------------------------------------------------
def encode_set_axis_state(state: AxisState) -> bytes:
    """``Set_Axis_State`` (0x07): requested state as uint32, zero-padded to the DBC's 8 bytes."""
    try:
        state = AxisState(state)
    except ValueError as err:
        raise DriverError(f"unknown axis state {state!r}") from err
    return _pad(_U1.pack(int(state)), 8)


def decode_set_axis_state(data: bytes) -> AxisState | int:
    """Requested state of a ``Set_Axis_State`` frame of any length (see module docstring).

    Returns an :class:`AxisState`, or the plain ``int`` for a state this module
    does not know (the firmware decides what to do with it).
    """
    v = _cmd_int(bytes(data), 0, 4)
    try:
        return AxisState(v)
    except ValueError:
        return v


@dataclass(frozen=True)
class ControllerMode:
    """Payload of ``Set_Controller_Mode``."""

    control_mode: ControlMode
    input_mode: InputMode


def encode_set_controller_mode(control_mode: ControlMode, input_mode: InputMode) -> bytes:
    """``Set_Controller_Mode`` (0x0B): control mode, input mode as uint32 each, 8 bytes."""
    try:
        cm, im = ControlMode(control_mode), InputMode(input_mode)
    except ValueError as err:
        raise DriverError(f"bad controller mode ({control_mode!r}, {input_mode!r})") from err
    return _U2.pack(int(cm), int(im))


def decode_set_controller_mode(data: bytes) -> ControllerMode:
    """Inverse of :func:`encode_set_controller_mode` (any length; unknown modes -> DecodeError)."""
    data = bytes(data)
    cm, im = _cmd_int(data, 0, 4), _cmd_int(data, 4, 4)
    return ControllerMode(_enum(ControlMode, cm, "control mode"), _enum(InputMode, im, "input mode"))


def encode_set_input_torque(torque_nm: float) -> bytes:
    """``Set_Input_Torque`` (0x0E): motor torque [N m] as float32, zero-padded to 8 bytes."""
    return _pad(_F1.pack(_f32("torque_nm", torque_nm)), 8)


def decode_set_input_torque(data: bytes) -> float:
    """Torque [N m] of a ``Set_Input_Torque`` frame (4 or more bytes; 0 bytes -> 0.0)."""
    return _cmd_float(bytes(data), 0, "Set_Input_Torque")


@dataclass(frozen=True)
class InputVel:
    """Payload of ``Set_Input_Vel``: velocity [rev/s] and torque feed-forward [N m]."""

    vel_rev_s: float
    torque_ff_nm: float


def encode_set_input_vel(vel_rev_s: float, torque_ff_nm: float = 0.0) -> bytes:
    """``Set_Input_Vel`` (0x0D): two float32, 8 bytes."""
    return _pack_two_floats("vel_rev_s", vel_rev_s, "torque_ff_nm", torque_ff_nm)


def decode_set_input_vel(data: bytes) -> InputVel:
    """Inverse of :func:`encode_set_input_vel` (any length, see module docstring)."""
    data = bytes(data)
    return InputVel(_cmd_float(data, 0, "Set_Input_Vel"), _cmd_float(data, 4, "Set_Input_Vel"))


@dataclass(frozen=True)
class InputPos:
    """Payload of ``Set_Input_Pos``: position [rev], velocity and torque feed-forwards."""

    pos_rev: float
    vel_ff_rev_s: float
    torque_ff_nm: float


_POS = struct.Struct("<fhh")


def encode_set_input_pos(pos_rev: float, vel_ff_rev_s: float = 0.0, torque_ff_nm: float = 0.0) -> bytes:
    """``Set_Input_Pos`` (0x0C): float32 position, int16 vel_ff (x0.001 rev/s), int16 torque_ff (x0.001 N m).

    The feed-forwards are rounded to the 0.001 step and must fit int16
    (|x| <= 32.767).
    """
    p = _f32("pos_rev", pos_rev)
    ints = []
    for name, x in (("vel_ff_rev_s", vel_ff_rev_s), ("torque_ff_nm", torque_ff_nm)):
        x = _f32(name, x)
        k = int(round(x * 1000.0))
        if not -32768 <= k <= 32767:
            raise DriverError(f"{name}={x!r} does not fit the int16 x 0.001 field")
        ints.append(k)
    return _POS.pack(p, *ints)


def decode_set_input_pos(data: bytes) -> InputPos:
    """Inverse of :func:`encode_set_input_pos` (any length, see module docstring)."""
    data = bytes(data)
    return InputPos(_cmd_float(data, 0, "Set_Input_Pos"), _cmd_int(data, 4, 2, True) * 0.001,
                    _cmd_int(data, 6, 2, True) * 0.001)


def encode_clear_errors(identify: bool = False, firmware: str = "0.6") -> bytes:
    """``Clear_Errors`` (0x18): one byte (1 also blinks the LED) on 0.6; no payload on 0.5."""
    if check_firmware(firmware) == "0.5":
        if identify:
            raise DriverError("Clear_Errors has no identify flag on firmware 0.5")
        return b""
    return bytes((1 if identify else 0,))


def decode_clear_errors(data: bytes) -> bool:
    """Identify flag of a ``Clear_Errors`` frame (any length; 0 bytes -> False; any non-zero byte 0 -> True)."""
    return _cmd_int(bytes(data), 0, 1) != 0


def encode_reboot(action: int = 0, firmware: str = "0.6") -> bytes:
    """``Reboot`` (0x16): action byte (0 reboot, 1 save, 2 erase configuration, 3 DFU) on 0.6; empty on 0.5."""
    if check_firmware(firmware) == "0.5":
        if action != 0:
            raise DriverError("Reboot takes no action byte on firmware 0.5 (reboot only)")
        return b""
    if isinstance(action, bool) or action not in (0, 1, 2, 3):
        raise DriverError(f"reboot action must be 0, 1, 2 or 3, got {action!r}")
    return bytes((action,))


def decode_reboot(data: bytes) -> int:
    """Action of a ``Reboot`` frame (0 bytes -> 0, reboot)."""
    return _cmd_int(bytes(data), 0, 1)


def encode_estop() -> bytes:
    """``Estop`` (0x02): empty payload."""
    return b""


# ---------------------------------------------------------------------------
# messages from the ODrive
# ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Heartbeat:
    """``Heartbeat`` (0x01).

    Attributes
    ----------
    axis_error : int
        Axis error bit field (uint32; 0 = healthy, see :data:`AXIS_ERROR_NAMES`
        or, on 0.5, :data:`AXIS_ERROR_NAMES_05`).
    axis_state : AxisState or int
        Current axis state (a plain ``int`` for a state this module does not know).
    procedure_result : int
        Result of the last procedure (0.6, see :class:`ProcedureResult`; 0 on 0.5).
    trajectory_done : bool
        Trajectory-done flag.
    motor_error_flag, encoder_error_flag, controller_error_flag : bool
        Firmware 0.5 only: the motor / encoder / controller has an error.
    """

    axis_error: int
    axis_state: AxisState | int
    procedure_result: int = 0
    trajectory_done: bool = False
    motor_error_flag: bool = False
    encoder_error_flag: bool = False
    controller_error_flag: bool = False


_HB = struct.Struct("<IBBBx")
_HB05 = struct.Struct("<IBBBB")


def encode_heartbeat(axis_error: int, axis_state: AxisState | int, procedure_result: int = 0,
                     trajectory_done: bool = False, *, firmware: str = "0.6", motor_error_flag: bool = False,
                     encoder_error_flag: bool = False, controller_error_flag: bool = False) -> bytes:
    """Pack a heartbeat (8 bytes).

    0.6: u32 error, u8 state, u8 procedure result, u8 bit 0 trajectory done, 1 reserved.
    0.5: u32 error, u8 state, u8 motor error flag, u8 encoder error flag,
    u8 controller error flag (bit 0) | trajectory done (bit 7).
    """
    if isinstance(axis_state, bool) or not isinstance(axis_state, int) or not 0 <= int(axis_state) <= 0xFF:
        raise DriverError(f"axis state must be a uint8, got {axis_state!r}")
    err = _uint("axis_error", axis_error, 32)
    if check_firmware(firmware) == "0.5":
        if procedure_result:
            raise DriverError("firmware 0.5 heartbeats carry no procedure result")
        return _HB05.pack(err, int(axis_state), int(bool(motor_error_flag)), int(bool(encoder_error_flag)),
                          int(bool(controller_error_flag)) | (0x80 if trajectory_done else 0))
    if motor_error_flag or encoder_error_flag or controller_error_flag:
        raise DriverError("firmware 0.6 heartbeats carry no motor/encoder/controller error flags")
    return _HB.pack(err, int(axis_state), _uint("procedure_result", procedure_result, 8), 1 if trajectory_done else 0)


def decode_heartbeat(data: bytes, firmware: str = "0.6") -> Heartbeat:
    """Inverse of :func:`encode_heartbeat`.

    Unknown axis states are returned as ``int`` (never an error): newer
    firmware adds states.  Reserved bits are ignored.

    Raises
    ------
    DecodeError
        Fewer bytes than the signals need (7 on 0.6, 8 on 0.5).
    """
    fw = check_firmware(firmware)
    d = _need(data, 7 if fw == "0.6" else 8, "Heartbeat")
    err, state = _U1.unpack_from(d)[0], d[4]
    try:
        state = AxisState(state)
    except ValueError:
        pass
    if fw == "0.6":
        return Heartbeat(err, state, d[5], bool(d[6] & 1))
    return Heartbeat(err, state, 0, bool(d[7] & 0x80), bool(d[5] & 1), bool(d[6] & 1), bool(d[7] & 1))


@dataclass(frozen=True)
class Version:
    """``Get_Version`` (0x00, firmware 0.6 only): protocol, hardware and firmware versions."""

    protocol_version: int
    hw_version_major: int
    hw_version_minor: int
    hw_version_variant: int
    fw_version_major: int
    fw_version_minor: int
    fw_version_revision: int
    fw_version_unreleased: int = 0

    @property
    def firmware(self) -> str:
        """Generation string, ``"<major>.<minor>"`` (compare with :data:`FIRMWARES`)."""
        return f"{self.fw_version_major}.{self.fw_version_minor}"

    def __str__(self) -> str:
        dev = "-dev" if self.fw_version_unreleased else ""
        return (f"firmware {self.fw_version_major}.{self.fw_version_minor}.{self.fw_version_revision}{dev} "
                f"(hardware {self.hw_version_major}.{self.hw_version_minor}.{self.hw_version_variant}, "
                f"protocol {self.protocol_version})")


def encode_version(v: Version) -> bytes:
    """Eight uint8 fields in :class:`Version` order."""
    return bytes(_uint(name, getattr(v, name), 8) for name in Version.__dataclass_fields__)


def decode_version(data: bytes) -> Version:
    """Inverse of :func:`encode_version`."""
    return Version(*_need(data, 8, "Get_Version")[:8])


@dataclass(frozen=True)
class EncoderEstimates:
    """``Get_Encoder_Estimates`` (0x09): position [rev] and velocity [rev/s], motor side."""

    pos_rev: float
    vel_rev_s: float


def encode_encoder_estimates(pos_rev: float, vel_rev_s: float) -> bytes:
    """Two little-endian float32, 8 bytes."""
    return _pack_two_floats("pos_rev", pos_rev, "vel_rev_s", vel_rev_s)


def decode_encoder_estimates(data: bytes) -> EncoderEstimates:
    """Inverse of :func:`encode_encoder_estimates` (non-finite values -> DecodeError)."""
    return EncoderEstimates(*_unpack_two_floats(data, "Get_Encoder_Estimates"))


@dataclass(frozen=True)
class Iq:
    """``Get_Iq`` (0x14): q-axis current set-point and measurement [A]."""

    iq_setpoint_a: float
    iq_measured_a: float


def encode_iq(iq_setpoint_a: float, iq_measured_a: float) -> bytes:
    """Two little-endian float32, 8 bytes."""
    return _pack_two_floats("iq_setpoint_a", iq_setpoint_a, "iq_measured_a", iq_measured_a)


def decode_iq(data: bytes) -> Iq:
    """Inverse of :func:`encode_iq`."""
    return Iq(*_unpack_two_floats(data, "Get_Iq"))


@dataclass(frozen=True)
class Torques:
    """``Get_Torques`` (0x1C, firmware 0.6): torque target and estimate [N m], motor side."""

    torque_target_nm: float
    torque_estimate_nm: float


def encode_torques(torque_target_nm: float, torque_estimate_nm: float) -> bytes:
    """Two little-endian float32, 8 bytes."""
    return _pack_two_floats("torque_target_nm", torque_target_nm, "torque_estimate_nm", torque_estimate_nm)


def decode_torques(data: bytes) -> Torques:
    """Inverse of :func:`encode_torques`."""
    return Torques(*_unpack_two_floats(data, "Get_Torques"))


@dataclass(frozen=True)
class BusVoltageCurrent:
    """``Get_Bus_Voltage_Current`` (0x17): DC bus voltage [V] and current [A]."""

    bus_voltage_v: float
    bus_current_a: float


def encode_bus_voltage_current(bus_voltage_v: float, bus_current_a: float) -> bytes:
    """Two little-endian float32, 8 bytes."""
    return _pack_two_floats("bus_voltage_v", bus_voltage_v, "bus_current_a", bus_current_a)


def decode_bus_voltage_current(data: bytes) -> BusVoltageCurrent:
    """Inverse of :func:`encode_bus_voltage_current`."""
    return BusVoltageCurrent(*_unpack_two_floats(data, "Get_Bus_Voltage_Current"))


@dataclass(frozen=True)
class ErrorStatus:
    """``Get_Error`` (0x03, firmware 0.6): active error bits and the disarm reason (uint32 each)."""

    active_errors: int
    disarm_reason: int


def encode_error_status(active_errors: int, disarm_reason: int) -> bytes:
    """Two little-endian uint32, 8 bytes."""
    return _U2.pack(_uint("active_errors", active_errors, 32), _uint("disarm_reason", disarm_reason, 32))


def decode_error_status(data: bytes) -> ErrorStatus:
    """Inverse of :func:`encode_error_status`."""
    return ErrorStatus(*_U2.unpack_from(_need(data, 8, "Get_Error")))


def encode_adc_voltage(voltage_v: float) -> bytes:
    """``Get_ADC_Voltage`` (0x1C, firmware 0.5) answer: float32 voltage, zero-padded to 8 bytes."""
    return _pad(_F1.pack(_f32("voltage_v", voltage_v)), 8)


def decode_adc_voltage(data: bytes) -> float:
    """Inverse of :func:`encode_adc_voltage` [V]."""
    (v,) = _F1.unpack_from(_need(data, 4, "Get_ADC_Voltage"))
    _finite("Get_ADC_Voltage", v)
    return v


# ---------------------------------------------------------------------------
# the remaining messages of the DBCs (configuration, diagnostics)
# ---------------------------------------------------------------------------
def _floats_message(names: tuple[str, ...], values, length: int = 8) -> bytes:
    return _pad(b"".join(_F1.pack(_f32(n, v)) for n, v in zip(names, values)), length)


def _cmd_floats(data, what: str, count: int) -> tuple[float, ...]:
    data = bytes(data)
    return tuple(_cmd_float(data, 4 * k, what) for k in range(count))


def encode_set_limits(vel_limit_rev_s: float, current_limit_a: float) -> bytes:
    """``Set_Limits`` (0x0F): velocity limit [rev/s], current limit [A], two float32."""
    return _floats_message(("vel_limit_rev_s", "current_limit_a"), (vel_limit_rev_s, current_limit_a))


def decode_set_limits(data: bytes) -> tuple[float, float]:
    """``(vel_limit_rev_s, current_limit_a)`` of a ``Set_Limits`` frame."""
    return _cmd_floats(data, "Set_Limits", 2)


def encode_set_traj_vel_limit(vel_limit_rev_s: float) -> bytes:
    """``Set_Traj_Vel_Limit`` (0x11): float32, zero-padded to the DBC's 8 bytes."""
    return _floats_message(("vel_limit_rev_s",), (vel_limit_rev_s,))


def encode_set_traj_accel_limits(accel_rev_s2: float, decel_rev_s2: float) -> bytes:
    """``Set_Traj_Accel_Limits`` (0x12): two float32 [rev/s^2]."""
    return _floats_message(("accel_rev_s2", "decel_rev_s2"), (accel_rev_s2, decel_rev_s2))


def encode_set_traj_inertia(inertia_nm_per_rev_s2: float) -> bytes:
    """``Set_Traj_Inertia`` (0x13): float32 [N m / (rev/s^2)], zero-padded to 8 bytes."""
    return _floats_message(("inertia",), (inertia_nm_per_rev_s2,))


def encode_set_absolute_position(pos_rev: float) -> bytes:
    """``Set_Absolute_Position`` (0x19, firmware 0.6): float32 [rev], zero-padded to 8 bytes."""
    return _floats_message(("pos_rev",), (pos_rev,))


def encode_set_pos_gain(pos_gain: float) -> bytes:
    """``Set_Pos_Gain`` (0x1A): float32 [(rev/s)/rev], zero-padded to 8 bytes."""
    return _floats_message(("pos_gain",), (pos_gain,))


def encode_set_vel_gains(vel_gain: float, vel_integrator_gain: float) -> bytes:
    """``Set_Vel_Gains`` (0x1B): two float32."""
    return _floats_message(("vel_gain", "vel_integrator_gain"), (vel_gain, vel_integrator_gain))


def decode_one_float_command(data: bytes, what: str = "command") -> float:
    """The float32 of a one-float command (Set_Traj_Vel_Limit, Set_Traj_Inertia, Set_Absolute_Position,
    Set_Pos_Gain)."""
    return _cmd_floats(data, what, 1)[0]


def decode_two_float_command(data: bytes, what: str = "command") -> tuple[float, float]:
    """The two float32 of Set_Traj_Accel_Limits / Set_Vel_Gains / Set_Limits."""
    return _cmd_floats(data, what, 2)


def encode_temperature(fet_temperature_c: float, motor_temperature_c: float) -> bytes:
    """``Get_Temperature`` (0x15, firmware 0.6): FET and motor temperature [degC], two float32."""
    return _pack_two_floats("fet_temperature_c", fet_temperature_c, "motor_temperature_c", motor_temperature_c)


def encode_powers(electrical_power_w: float, mechanical_power_w: float) -> bytes:
    """``Get_Powers`` (0x1D, firmware 0.6): electrical and mechanical power [W], two float32."""
    return _pack_two_floats("electrical_power_w", electrical_power_w, "mechanical_power_w", mechanical_power_w)


def decode_two_floats(data: bytes, what: str = "message") -> tuple[float, float]:
    """Two float32 of a feedback message (Get_Temperature, Get_Powers, Get_Sensorless_Estimates)."""
    return _unpack_two_floats(data, what)


def encode_error_code(code: int) -> bytes:
    """Firmware 0.5 ``Get_Motor_Error`` / ``Get_Encoder_Error`` / ``Get_Sensorless_Error`` /
    ``Get_Controller_Error`` answer: uint32 error code, zero-padded to 8 bytes."""
    return _pad(_U1.pack(_uint("code", code, 32)), 8)


def decode_error_code(data: bytes) -> int:
    """Inverse of :func:`encode_error_code`."""
    return _U1.unpack_from(_need(data, 4, "error code"))[0]


_I2 = struct.Struct("<ii")


def encode_encoder_count(shadow_count: int, count_in_cpr: int) -> bytes:
    """Firmware 0.5 ``Get_Encoder_Count`` (0x0A): two int32 as the firmware sends them.

    (The 0.5.6 DBC declares them unsigned; non-negative counts read the same.)
    """
    for name, v in (("shadow_count", shadow_count), ("count_in_cpr", count_in_cpr)):
        if isinstance(v, bool) or not isinstance(v, int) or not -(1 << 31) <= v < (1 << 31):
            raise DriverError(f"{name} must be an int32, got {v!r}")
    return _I2.pack(shadow_count, count_in_cpr)


def decode_encoder_count(data: bytes) -> tuple[int, int]:
    """Inverse of :func:`encode_encoder_count`."""
    return _I2.unpack_from(_need(data, 8, "Get_Encoder_Count"))


def encode_set_linear_count(count: int) -> bytes:
    """Firmware 0.5 ``Set_Linear_Count`` (0x19): int32 encoder count, zero-padded to 8 bytes."""
    if isinstance(count, bool) or not isinstance(count, int) or not -(1 << 31) <= count < (1 << 31):
        raise DriverError(f"count must be an int32, got {count!r}")
    return _pad(struct.pack("<i", count), 8)


def decode_set_linear_count(data: bytes) -> int:
    """Inverse of :func:`encode_set_linear_count` (any length, integer zero-extended)."""
    return _cmd_int(bytes(data), 0, 4, signed=True)


def encode_set_axis_node_id(node_id: int) -> bytes:
    """Firmware 0.5 ``Set_Axis_Node_ID`` (0x06): uint32 node id, zero-padded to 8 bytes."""
    return _pad(_U1.pack(_uint("node_id", node_id, 32)), 8)


def decode_set_axis_node_id(data: bytes) -> int:
    """Inverse of :func:`encode_set_axis_node_id`."""
    return _cmd_int(bytes(data), 0, 4)


def encode_address(node_id: int, serial_number: int) -> bytes:
    """Firmware 0.6 ``Address`` (0x06): uint8 node id, 48-bit serial number, 1 spare byte."""
    return bytes((_uint("node_id", node_id, 8),)) + _uint("serial_number", serial_number, 48).to_bytes(6, "little") \
        + b"\0"


def decode_address(data: bytes) -> tuple[int, int]:
    """``(node_id, serial_number)`` of an ``Address`` frame (7 or more bytes)."""
    d = _need(data, 7, "Address")
    return d[0], int.from_bytes(d[1:7], "little")


_SDO = struct.Struct("<BHBI")


def encode_rx_sdo(opcode: int, endpoint_id: int, value: int) -> bytes:
    """Firmware 0.6 ``RxSdo`` (0x04): opcode (0 read, 1 write), endpoint id, reserved, 4 value bytes (uint32 view)."""
    return _SDO.pack(_uint("opcode", opcode, 8), _uint("endpoint_id", endpoint_id, 16), 0, _uint("value", value, 32))


def encode_tx_sdo(endpoint_id: int, value: int) -> bytes:
    """Firmware 0.6 ``TxSdo`` (0x05): reserved, endpoint id, reserved, 4 value bytes (uint32 view)."""
    return _SDO.pack(0, _uint("endpoint_id", endpoint_id, 16), 0, _uint("value", value, 32))


def decode_sdo(data: bytes) -> tuple[int, int, int]:
    """``(opcode or reserved byte, endpoint_id, value)`` of an RxSdo / TxSdo frame (8 bytes)."""
    op, ep, _res, value = _SDO.unpack_from(_need(data, 8, "SDO"))
    return op, ep, value
