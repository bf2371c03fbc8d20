"""ODrive CANSimple codec.

Byte-exact references:
- arbitration id: ODrive docs "CAN Protocol" (docs.odriverobotics.com): axis 0x01,
  command 0x0C -> message id 0x2C.
- heartbeat: the odrive_can DBC usage example (Axis_Error=1, Axis_State=11 (HOMING)
  encodes to 01 00 00 00 0b 00 00 00).
- float payloads: IEEE-754 float32 little endian, computed by hand
  (1.0 = 0x3F800000, 1.5 = 0x3FC00000, -2.0 = 0xC0000000).
"""

import math

import pytest
from hypothesis import given, settings, strategies as st

from drivers.codecs import odrive as od
from dynamics.errors import CommsError, DecodeError, DriverError


def test_arbitration_id_docs_example():
    assert od.arbitration_id(0x01, 0x0C) == 0x2C
    assert od.arbitration_id(1, od.Cmd.SET_INPUT_POS) == 0x2C
    assert od.split_id(0x2C) == (1, 0x0C)
    assert od.arbitration_id(0x3F, 0x1F) == 0x7FF
    with pytest.raises(DriverError):
        od.arbitration_id(64, 1)
    with pytest.raises(DriverError):
        od.arbitration_id(1, 32)
    with pytest.raises(DecodeError):
        od.split_id(0x800)


def test_command_ids_match_protocol_table():
    assert (od.Cmd.HEARTBEAT, od.Cmd.ESTOP, od.Cmd.GET_ERROR, od.Cmd.SET_AXIS_STATE) == (1, 2, 3, 7)
    assert (od.Cmd.GET_ENCODER_ESTIMATES, od.Cmd.SET_CONTROLLER_MODE, od.Cmd.SET_INPUT_POS) == (9, 0x0B, 0x0C)
    assert (od.Cmd.SET_INPUT_VEL, od.Cmd.SET_INPUT_TORQUE, od.Cmd.GET_IQ, od.Cmd.REBOOT) == (0x0D, 0x0E, 0x14, 0x16)
    assert (od.Cmd.GET_BUS_VOLTAGE_CURRENT, od.Cmd.CLEAR_ERRORS, od.Cmd.GET_TORQUES) == (0x17, 0x18, 0x1C)
    assert od.AxisState.CLOSED_LOOP_CONTROL == 8 and od.AxisState.IDLE == 1
    assert od.ControlMode.TORQUE_CONTROL == 1 and od.InputMode.PASSTHROUGH == 1


def test_heartbeat_dbc_example():
    data = od.encode_heartbeat(1, od.AxisState.HOMING)
    assert data == bytes.fromhex("010000000b000000")
    hb = od.decode_heartbeat(data)
    assert hb == od.Heartbeat(1, od.AxisState.HOMING, 0, False)
    hb2 = od.decode_heartbeat(od.encode_heartbeat(0x01000000, 8, 3, True))
    assert hb2.axis_state is od.AxisState.CLOSED_LOOP_CONTROL and hb2.trajectory_done
    assert od.axis_error_names(hb2.axis_error) == ["WATCHDOG_TIMER_EXPIRED"]
    # a state this module does not know (future firmware) is kept as an int, never "corrupt"
    assert od.decode_heartbeat(bytes.fromhex("0000000063000000")).axis_state == 0x63
    for s in (15, 16):   # firmware 0.6.11: HARMONIC_CALIBRATION(_COMMUTATION)
        assert od.decode_heartbeat(bytes([0, 0, 0, 0, s, 0, 0, 0])).axis_state == s
    with pytest.raises(DecodeError):
        od.decode_heartbeat(bytes(6))


def test_commands_byte_exact():
    # lengths of odrive-cansimple-0.6.10.dbc: 8 bytes, zero-padded
    assert od.encode_set_axis_state(od.AxisState.CLOSED_LOOP_CONTROL) == bytes.fromhex("0800000000000000")
    assert od.decode_set_axis_state(bytes.fromhex("01000000")) is od.AxisState.IDLE
    cm = od.encode_set_controller_mode(od.ControlMode.TORQUE_CONTROL, od.InputMode.PASSTHROUGH)
    assert cm == bytes.fromhex("0100000001000000")
    assert od.decode_set_controller_mode(cm) == od.ControllerMode(od.ControlMode.TORQUE_CONTROL,
                                                                  od.InputMode.PASSTHROUGH)
    assert od.encode_set_input_torque(1.0) == bytes.fromhex("0000803f00000000")
    assert od.decode_set_input_torque(bytes.fromhex("000000c0")) == -2.0
    assert od.encode_set_input_vel(1.5, -2.0) == bytes.fromhex("0000c03f000000c0")
    # Set_Input_Pos: float32 1.0, vel_ff 0.5 rev/s -> 500 = 0x01F4, torque_ff -0.25 -> -250 = 0xFF06
    assert od.encode_set_input_pos(1.0, 0.5, -0.25) == bytes.fromhex("0000803ff40106ff")
    ip = od.decode_set_input_pos(bytes.fromhex("0000803ff40106ff"))
    assert (ip.pos_rev, ip.vel_ff_rev_s, ip.torque_ff_nm) == (1.0, 0.5, -0.25)
    assert od.encode_clear_errors() == b"\x00" and od.decode_clear_errors(b"\x01") is True
    assert od.encode_reboot(0) == b"\x00" and od.encode_estop() == b""


def test_feedback_messages_byte_exact():
    e = od.encode_encoder_estimates(1.5, -2.0)
    assert e == bytes.fromhex("0000c03f000000c0")
    assert od.decode_encoder_estimates(e) == od.EncoderEstimates(1.5, -2.0)
    assert od.decode_iq(od.encode_iq(1.0, 1.5)) == od.Iq(1.0, 1.5)
    assert od.decode_torques(od.encode_torques(-2.0, 1.0)) == od.Torques(-2.0, 1.0)
    assert od.decode_bus_voltage_current(od.encode_bus_voltage_current(24.0, 1.5)) == od.BusVoltageCurrent(24.0, 1.5)
    assert od.decode_error_status(od.encode_error_status(0x20, 7)) == od.ErrorStatus(0x20, 7)
    # a NaN in a measurement is corrupt content
    with pytest.raises(DecodeError):
        od.decode_encoder_estimates(bytes.fromhex("0000c07f00000000"))


def test_rtr_request():
    arb, dlc = od.rtr_request(3, od.Cmd.GET_ENCODER_ESTIMATES)
    assert (arb, dlc) == (3 << 5 | 9, 8)
    with pytest.raises(DriverError):
        od.rtr_request(3, od.Cmd.SET_INPUT_TORQUE)


def test_encoders_refuse_bad_values():
    for bad in (math.nan, math.inf, 1e39):
        with pytest.raises(DriverError):
            od.encode_set_input_torque(bad)
        with pytest.raises(DriverError):
            od.encode_encoder_estimates(0.0, bad)
    with pytest.raises(DriverError):
        od.encode_set_input_pos(0.0, 40.0, 0.0)   # 40000 does not fit int16
    with pytest.raises(DriverError):
        od.encode_set_axis_state(99)
    with pytest.raises(DriverError):
        od.encode_heartbeat(-1, od.AxisState.IDLE)
    with pytest.raises(DriverError):
        od.encode_set_controller_mode(7, 1)


f32 = st.floats(width=32, allow_nan=False, allow_infinity=False)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(f32, f32)
def test_float_round_trips_exact_for_float32(a, b):
    assert od.decode_encoder_estimates(od.encode_encoder_estimates(a, b)) == od.EncoderEstimates(a, b)
    assert od.decode_set_input_vel(od.encode_set_input_vel(a, b)) == od.InputVel(a, b)
    assert od.decode_set_input_torque(od.encode_set_input_torque(a)) == a


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.floats(-1e4, 1e4), st.floats(-32.7, 32.7), st.floats(-32.7, 32.7))
def test_input_pos_round_trip_within_quantisation(p, v, t):
    ip = od.decode_set_input_pos(od.encode_set_input_pos(p, v, t))
    assert abs(ip.pos_rev - p) <= abs(p) * 2 ** -23 + 1e-45
    assert abs(ip.vel_ff_rev_s - v) <= 0.0005 + 1e-12 and abs(ip.torque_ff_nm - t) <= 0.0005 + 1e-12


DECODERS = [od.decode_set_axis_state, od.decode_set_controller_mode, od.decode_set_input_torque,
            od.decode_set_input_vel, od.decode_set_input_pos, od.decode_heartbeat,
            od.decode_encoder_estimates, od.decode_iq, od.decode_torques, od.decode_bus_voltage_current,
            od.decode_error_status, od.decode_clear_errors]


@settings(max_examples=400, deadline=None, derandomize=True)
@given(st.binary(min_size=0, max_size=10))
def test_decoders_fuzz_only_value_or_decode_error(data):
    for dec in DECODERS:
        try:
            out = dec(data)
        except DecodeError as err:
            assert isinstance(err, CommsError)
            continue
        assert out is not None


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.integers(-5, 0x900))
def test_split_id_fuzz(arb):
    try:
        node, cmd = od.split_id(arb)
    except DecodeError:
        assert not 0 <= arb <= 0x7FF
        return
    assert od.arbitration_id(node, cmd) == arb


# ---------------------------------------------------------------------------
# what other clients send and the firmware accepts (issue 11)
# ---------------------------------------------------------------------------
def test_command_decoders_accept_what_the_firmware_accepts():
    closed = od.AxisState.CLOSED_LOOP_CONTROL
    # Set_Axis_State as 1 byte (pyodrivecan), 4 bytes (older clients), 8 bytes (DBC, ODrive's Arduino client)
    for data in (b"\x08", bytes.fromhex("08000000"), bytes.fromhex("0800000000000000")):
        assert od.decode_set_axis_state(data) is closed
    assert od.decode_set_axis_state(b"") == od.AxisState.UNDEFINED      # nothing requested
    assert od.decode_set_axis_state(bytes([0x63])) == 0x63              # the firmware decides
    # Set_Input_Torque: 4 bytes (float only) or the DBC's 8
    assert od.decode_set_input_torque(bytes.fromhex("000000c0")) == -2.0
    assert od.decode_set_input_torque(bytes.fromhex("000000c0deadbeef")) == -2.0
    with pytest.raises(DecodeError):     # a float cut short has no meaning
        od.decode_set_input_torque(b"\x00\x00")
    with pytest.raises(DecodeError):
        od.decode_set_input_torque(bytes.fromhex("0000c07f"))            # NaN never reaches a motor
    # Clear_Errors: 0 bytes (0.5 clients, Estop-like), 1 byte (0.6 DBC), 8 bytes
    assert od.decode_clear_errors(b"") is False and od.decode_clear_errors(bytes(8)) is False
    assert od.decode_clear_errors(b"\x01") is True
    # Set_Controller_Mode with only the control mode: input mode reads as 0 (INACTIVE)
    cm = od.decode_set_controller_mode(bytes.fromhex("01000000"))
    assert cm == od.ControllerMode(od.ControlMode.TORQUE_CONTROL, od.InputMode.INACTIVE)
    assert od.decode_set_input_vel(od.encode_set_input_vel(1.5, 0.0)[:4]) == od.InputVel(1.5, 0.0)


def test_feedback_decoders_need_their_signals_and_accept_longer_frames():
    e = od.encode_encoder_estimates(1.5, -2.0)
    assert od.decode_encoder_estimates(e + b"\x00") == od.EncoderEstimates(1.5, -2.0)
    with pytest.raises(DecodeError):
        od.decode_encoder_estimates(e[:7])


def test_firmware_05_layouts():
    # heartbeat of firmware 0.5: flags at bits 40, 48, 56 and trajectory done at bit 63
    data = od.encode_heartbeat(0x40, od.AxisState.IDLE, trajectory_done=True, firmware="0.5",
                               motor_error_flag=True, controller_error_flag=True)
    assert data == bytes.fromhex("4000000001010081")
    hb = od.decode_heartbeat(data, "0.5")
    assert hb == od.Heartbeat(0x40, od.AxisState.IDLE, 0, True, True, False, True)
    assert od.axis_error_names(0x840, "0.5") == ["MOTOR_FAILED", "WATCHDOG_TIMER_EXPIRED"]
    assert od.axis_error_names(0x800, "0.6") == ["DC_BUS_OVER_REGEN_CURRENT"]
    # the same bytes read as 0.6 mean something else (procedure result 1 = BUSY)
    assert od.decode_heartbeat(data, "0.6").procedure_result == 1
    assert od.encode_clear_errors(firmware="0.5") == b"" and od.encode_reboot(firmware="0.5") == b""
    assert od.message_length(0x1C, "0.5") == 8 and od.Cmd05(0x1C) is od.Cmd05.GET_ADC_VOLTAGE
    assert od.Cmd(0x1C) is od.Cmd.GET_TORQUES
    with pytest.raises(DriverError):
        od.rtr_request(1, od.Cmd.GET_VERSION, "0.5")      # 0x00 is CANopen NMT on 0.5
    with pytest.raises(DriverError):
        od.rtr_request(1, od.Cmd05.HEARTBEAT, "0.5")      # 0.5 does not answer heartbeat RTRs
    with pytest.raises(DriverError):
        od.check_firmware("0.4")
    v = od.Version(2, 4, 4, 58, 0, 6, 10, 0)
    assert od.decode_version(od.encode_version(v)) == v and v.firmware == "0.6"
