"""ODrive "CANSimple" protocol (firmware 0.6, ODrive Pro / S1; the subset used here is
unchanged from 0.5.x on ODrive 3.6).

Pure functions, no I/O.  Units are the ODrive's: turns (rev) and rev/s for
position and velocity, N m for torque, A for current, V for voltage.

Arbitration id (standard 11-bit): ``node_id << 5 | cmd_id`` with node ids
0..63 and command ids 0..31 (ODrive docs, "CAN Protocol": axis 0x01 with
command 0x0C gives 0x2C).  Payloads are little-endian; lengths follow the
``odrive-cansimple`` DBC file (:data:`MESSAGE_LENGTH`).  Messages the ODrive
sends (heartbeat, encoder estimates, Iq, torques, ...) are broadcast cyclically
at configured rates or returned in answer to a remote (RTR) frame with the
same arbitration id (:func:`rtr_request`).

Encoders refuse non-finite values and out-of-range integers with
:class:`~dynamics.errors.DriverError`; decoders check the exact length and the
content (enum values, finiteness of measured floats) and raise
:class:`~dynamics.errors.DecodeError`.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from enum import IntEnum

from dynamics.errors import DecodeError, DriverError

__all__ = [
    "Cmd", "AxisState", "ControlMode", "InputMode", "ProcedureResult", "AXIS_ERROR_NAMES",
    "MESSAGE_LENGTH", "RTR_COMMANDS", "MAX_NODE_ID",
    "arbitration_id", "split_id", "rtr_request", "axis_error_names",
    "Heartbeat", "EncoderEstimates", "ControllerMode", "Iq", "Torques", "BusVoltageCurrent",
    "ErrorStatus", "InputPos", "InputVel",
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
    "encode_clear_errors", "decode_clear_errors",
    "encode_reboot", "encode_estop",
]

MAX_NODE_ID = 0x3F
_MAX_CMD_ID = 0x1F
_F32_MAX = 3.4028234663852886e38


class Cmd(IntEnum):
    """CANSimple command ids (lower 5 bits of the arbitration id)."""

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


class AxisState(IntEnum):
    """``AxisState`` (ODrive API reference)."""

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

#: Payload length (DLC) per command, from the odrive-cansimple DBC file.
MESSAGE_LENGTH: dict[Cmd, int] = {
    Cmd.GET_VERSION: 8, Cmd.HEARTBEAT: 8, Cmd.ESTOP: 0, Cmd.GET_ERROR: 8, Cmd.RX_SDO: 8,
    Cmd.TX_SDO: 8, Cmd.ADDRESS: 8, Cmd.SET_AXIS_STATE: 4, Cmd.GET_ENCODER_ESTIMATES: 8,
    Cmd.SET_CONTROLLER_MODE: 8, Cmd.SET_INPUT_POS: 8, Cmd.SET_INPUT_VEL: 8, Cmd.SET_INPUT_TORQUE: 4,
    Cmd.SET_LIMITS: 8, Cmd.SET_TRAJ_VEL_LIMIT: 4, Cmd.SET_TRAJ_ACCEL_LIMITS: 8,
    Cmd.SET_TRAJ_INERTIA: 4, Cmd.GET_IQ: 8, Cmd.GET_TEMPERATURE: 8, Cmd.REBOOT: 1,
    Cmd.GET_BUS_VOLTAGE_CURRENT: 8, Cmd.CLEAR_ERRORS: 1, Cmd.SET_ABSOLUTE_POSITION: 4,
    Cmd.SET_POS_GAIN: 4, Cmd.SET_VEL_GAINS: 8, Cmd.GET_TORQUES: 8, Cmd.GET_POWERS: 8,
    Cmd.ENTER_DFU_MODE: 0,
}

#: Messages the ODrive answers when it receives a remote (RTR) frame with their id.
RTR_COMMANDS = frozenset({
    Cmd.GET_VERSION, Cmd.HEARTBEAT, Cmd.GET_ERROR, Cmd.ADDRESS, Cmd.GET_ENCODER_ESTIMATES,
    Cmd.GET_IQ, Cmd.GET_TEMPERATURE, Cmd.GET_BUS_VOLTAGE_CURRENT, Cmd.GET_TORQUES, Cmd.GET_POWERS,
})


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


def rtr_request(node_id: int, cmd: Cmd) -> tuple[int, int]:
    """Arbitration id and DLC of a remote (RTR) frame requesting message ``cmd``.

    Send it with ``is_remote=True`` and no data; the ODrive answers with a data
    frame of the same id.

    Raises
    ------
    DriverError
        If ``cmd`` is not a message the ODrive answers on request.
    """
    cmd = Cmd(cmd)
    if cmd not in RTR_COMMANDS:
        raise DriverError(f"{cmd.name} cannot be requested with an RTR frame")
    return arbitration_id(node_id, int(cmd)), MESSAGE_LENGTH[cmd]


def axis_error_names(axis_error: int) -> list[str]:
    """Names of the bits set in an axis error word (unknown bits as hex)."""
    out = []
    bit = 1
    while bit <= axis_error:
        if axis_error & bit:
            out.append(AXIS_ERROR_NAMES.get(bit, f"0x{bit:X}"))
        bit <<= 1
    return out


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


def _check_len(data, cmd: Cmd) -> bytes:
    data = bytes(data)
    want = MESSAGE_LENGTH[cmd]
    if len(data) != want:
        raise DecodeError(f"{cmd.name} payload must be {want} bytes, got {len(data)}")
    return data


def _finite(cmd: Cmd, *values: float) -> None:
    for v in values:
        if not math.isfinite(v):
            raise DecodeError(f"{cmd.name} payload holds a non-finite value {v!r}")


def _enum(enum_cls, value: int, what: str):
    try:
        return enum_cls(value)
    except ValueError as err:
        raise DecodeError(f"unknown {what} {value}") from err


_F2 = struct.Struct("<ff")
_F1 = struct.Struct("<f")
_U2 = struct.Struct("<II")
_U1 = struct.Struct("<I")


def _pack_two_floats(cmd: Cmd, a_name: str, a, b_name: str, b) -> bytes:
    return _F2.pack(_f32(a_name, a), _f32(b_name, b))


def _unpack_two_floats(data, cmd: Cmd) -> tuple[float, float]:
    a, b = _F2.unpack(_check_len(data, cmd))
    _finite(cmd, a, b)
    return a, b


# ---------------------------------------------------------------------------
# messages to the ODrive
# ---------------------------------------------------------------------------
def encode_set_axis_state(state: AxisState) -> bytes:
    """``Set_Axis_State`` (0x07): requested state as uint32, 4 bytes."""
    try:
        state = AxisState(state)
    except ValueError as err:
        raise DriverError(f"unknown axis state {state!r}") from err
    return _U1.pack(int(state))


def decode_set_axis_state(data: bytes) -> AxisState:
    """Inverse of :func:`encode_set_axis_state`."""
    (v,) = _U1.unpack(_check_len(data, Cmd.SET_AXIS_STATE))
    return _enum(AxisState, v, "axis state")


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
    """Inverse of :func:`encode_set_controller_mode`."""
    cm, im = _U2.unpack(_check_len(data, Cmd.SET_CONTROLLER_MODE))
    return ControllerMode(_enum(ControlMode, cm, "control mode"), _enum(InputMode, im, "input mode"))


def encode_set_input_torque(torque_nm: float) -> bytes:
    """``Set_Input_Torque`` (0x0E): motor torque [N m] as float32, 4 bytes."""
    return _F1.pack(_f32("torque_nm", torque_nm))


def decode_set_input_torque(data: bytes) -> float:
    """Inverse of :func:`encode_set_input_torque` (torque [N m])."""
    (t,) = _F1.unpack(_check_len(data, Cmd.SET_INPUT_TORQUE))
    _finite(Cmd.SET_INPUT_TORQUE, t)
    return t


@dataclass(frozen=True)
class InputVel:
    """Payload of ``Set_Input_Vel``: velocity [rev/s] and torque feed-forward [N m]."""

    vel_rev_s: float
    torque_ff_nm: float


def encode_set_input_vel(vel_rev_s: float, torque_ff_nm: float = 0.0) -> bytes:
    """``Set_Input_Vel`` (0x0D): two float32, 8 bytes."""
    return _pack_two_floats(Cmd.SET_INPUT_VEL, "vel_rev_s", vel_rev_s, "torque_ff_nm", torque_ff_nm)


def decode_set_input_vel(data: bytes) -> InputVel:
    """Inverse of :func:`encode_set_input_vel`."""
    return InputVel(*_unpack_two_floats(data, Cmd.SET_INPUT_VEL))


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
    """Inverse of :func:`encode_set_input_pos`."""
    p, v, t = _POS.unpack(_check_len(data, Cmd.SET_INPUT_POS))
    _finite(Cmd.SET_INPUT_POS, p)
    return InputPos(p, v * 0.001, t * 0.001)


def encode_clear_errors(identify: bool = False) -> bytes:
    """``Clear_Errors`` (0x18): one byte, 1 to also blink the LED."""
    return bytes((1 if identify else 0,))


def decode_clear_errors(data: bytes) -> bool:
    """Inverse of :func:`encode_clear_errors` (the identify flag)."""
    d = _check_len(data, Cmd.CLEAR_ERRORS)
    if d[0] > 1:
        raise DecodeError(f"Clear_Errors identify byte must be 0 or 1, got {d[0]}")
    return bool(d[0])


def encode_reboot(action: int = 0) -> bytes:
    """``Reboot`` (0x16): action byte (0 reboot, 1 save configuration, 2 erase configuration)."""
    if isinstance(action, bool) or action not in (0, 1, 2):
        raise DriverError(f"reboot action must be 0, 1 or 2, got {action!r}")
    return bytes((action,))


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
        Axis error bit field (uint32; 0 = healthy, see :data:`AXIS_ERROR_NAMES`).
    axis_state : AxisState
        Current axis state.
    procedure_result : int
        Result of the last procedure (see :class:`ProcedureResult`).
    trajectory_done : bool
        Trajectory-done flag.
    """

    axis_error: int
    axis_state: AxisState
    procedure_result: int = 0
    trajectory_done: bool = False


_HB = struct.Struct("<IBBBx")


def encode_heartbeat(axis_error: int, axis_state: AxisState, procedure_result: int = 0,
                     trajectory_done: bool = False) -> bytes:
    """Pack a heartbeat: u32 error, u8 state, u8 procedure result, u8 trajectory done, 1 reserved."""
    try:
        state = AxisState(axis_state)
    except ValueError as err:
        raise DriverError(f"unknown axis state {axis_state!r}") from err
    return _HB.pack(_uint("axis_error", axis_error, 32), int(state),
                    _uint("procedure_result", procedure_result, 8), 1 if trajectory_done else 0)


def decode_heartbeat(data: bytes) -> Heartbeat:
    """Inverse of :func:`encode_heartbeat`.

    Raises
    ------
    DecodeError
        Wrong length or unknown axis state.
    """
    err, state, proc, done = _HB.unpack(_check_len(data, Cmd.HEARTBEAT))
    return Heartbeat(err, _enum(AxisState, state, "axis state"), proc, bool(done & 1))


@dataclass(frozen=True)
class EncoderEstimates:
    """``Get_Encoder_Estimates`` (0x09): position [rev] and velocity [rev/s], motor side."""

    pos_rev: float
    vel_rev_s: float


def encode_encoder_estimates(pos_rev: float, vel_rev_s: float) -> bytes:
    """Two little-endian float32, 8 bytes."""
    return _pack_two_floats(Cmd.GET_ENCODER_ESTIMATES, "pos_rev", pos_rev, "vel_rev_s", vel_rev_s)


def decode_encoder_estimates(data: bytes) -> EncoderEstimates:
    """Inverse of :func:`encode_encoder_estimates` (non-finite values -> DecodeError)."""
    return EncoderEstimates(*_unpack_two_floats(data, Cmd.GET_ENCODER_ESTIMATES))


@dataclass(frozen=True)
class Iq:
    """``Get_Iq`` (0x14): q-axis current set-point and measurement [A]."""

    iq_setpoint_a: float
    iq_measured_a: float


def encode_iq(iq_setpoint_a: float, iq_measured_a: float) -> bytes:
    """Two little-endian float32, 8 bytes."""
    return _pack_two_floats(Cmd.GET_IQ, "iq_setpoint_a", iq_setpoint_a, "iq_measured_a", iq_measured_a)


def decode_iq(data: bytes) -> Iq:
    """Inverse of :func:`encode_iq`."""
    return Iq(*_unpack_two_floats(data, Cmd.GET_IQ))


@dataclass(frozen=True)
class Torques:
    """``Get_Torques`` (0x1C): torque target and estimate [N m], motor side."""

    torque_target_nm: float
    torque_estimate_nm: float


def encode_torques(torque_target_nm: float, torque_estimate_nm: float) -> bytes:
    """Two little-endian float32, 8 bytes."""
    return _pack_two_floats(Cmd.GET_TORQUES, "torque_target_nm", torque_target_nm,
                            "torque_estimate_nm", torque_estimate_nm)


def decode_torques(data: bytes) -> Torques:
    """Inverse of :func:`encode_torques`."""
    return Torques(*_unpack_two_floats(data, Cmd.GET_TORQUES))


@dataclass(frozen=True)
class BusVoltageCurrent:
    """``Get_Bus_Voltage_Current`` (0x17): DC bus voltage [V] and current [A]."""

    bus_voltage_v: float
    bus_current_a: float


def encode_bus_voltage_current(bus_voltage_v: float, bus_current_a: float) -> bytes:
    """Two little-endian float32, 8 bytes."""
    return _pack_two_floats(Cmd.GET_BUS_VOLTAGE_CURRENT, "bus_voltage_v", bus_voltage_v,
                            "bus_current_a", bus_current_a)


def decode_bus_voltage_current(data: bytes) -> BusVoltageCurrent:
    """Inverse of :func:`encode_bus_voltage_current`."""
    return BusVoltageCurrent(*_unpack_two_floats(data, Cmd.GET_BUS_VOLTAGE_CURRENT))


@dataclass(frozen=True)
class ErrorStatus:
    """``Get_Error`` (0x03): active error bits and the disarm reason (uint32 each)."""

    active_errors: int
    disarm_reason: int


def encode_error_status(active_errors: int, disarm_reason: int) -> bytes:
    """Two little-endian uint32, 8 bytes."""
    return _U2.pack(_uint("active_errors", active_errors, 32), _uint("disarm_reason", disarm_reason, 32))


def decode_error_status(data: bytes) -> ErrorStatus:
    """Inverse of :func:`encode_error_status`."""
    return ErrorStatus(*_U2.unpack(_check_len(data, Cmd.GET_ERROR)))
