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
    with pytest.raises(DecodeError):       # axis state 0x63 does not exist
        od.decode_heartbeat(bytes.fromhex("0000000063000000"))
    with pytest.raises(DecodeError):
        od.decode_heartbeat(bytes(7))


def test_commands_byte_exact():
    assert od.encode_set_axis_state(od.AxisState.CLOSED_LOOP_CONTROL) == bytes.fromhex("08000000")
    assert od.decode_set_axis_state(bytes.fromhex("01000000")) is od.AxisState.IDLE
    cm = od.encode_set_controller_mode(od.ControlMode.TORQUE_CONTROL, od.InputMode.PASSTHROUGH)
    assert cm == bytes.fromhex("0100000001000000")
    assert od.decode_set_controller_mode(cm) == od.ControllerMode(od.ControlMode.TORQUE_CONTROL,
                                                                  od.InputMode.PASSTHROUGH)
    assert od.encode_set_input_torque(1.0) == bytes.fromhex("0000803f")
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
