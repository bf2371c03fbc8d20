"""The MIT codec, model table and emulator against references we did not write.

References (used as test oracles only, never copied):

* the CubeMars "AK Series Actuator Driver Manual" V1.0.8, section 5.3 (MIT power mode):
  the range table (p. 49-50) is typed in :data:`MANUAL_V108` below;
* ``tmotor-can-mit-mode`` 1.1.2 (``tmotor_can_mit_mode.tmotor``): ranges, ``pack_cmd``,
  ``unpack_reply``.  It talks to Kvaser hardware through ``canlib`` at import time
  (its class body opens channel 0); :class:`_CanlibShim` stands in for ``canlib`` and
  carries its frames over a python-can ``virtual`` bus;
* ``TMotorCANControl`` 1.2.6 (``TMotorCANControl.mit_can``): ranges (``MIT_Params``),
  ``CAN_Manager.MIT_controller`` (encoder), ``parse_MIT_message`` (decoder) and the
  ``TMotorManager_mit_can`` client.  Its ``CAN_Manager`` singleton runs ``sudo ip link``
  on socketcan ``can0``; the tests put an instance on a virtual bus in its place.

Disagreements found (asserted below, so a change in either side shows up):

* AK60-6 velocity: manual and tmotor-can-mit-mode +-45 rad/s, TMotorCANControl +-50
  (this project had +-50 too; now +-45);
* encoder scale: TMotorCANControl (and the manual's host example, p. 51) scale by
  ``2**bits / span``; the firmware's decoder, tmotor-can-mit-mode and this codec by
  ``(2**bits - 1) / span``: TMotorCANControl's fields are 0 or 1 LSB above ours;
* both third-party clients read only 8-byte (CubeMars) replies: tmotor-can-mit-mode
  loops until it sees 8 bytes, TMotorCANControl's listener raises on the 6-byte reply
  (no error byte), so both are driven against the ``cubemars8`` emulator.
"""

from __future__ import annotations

import sys
import time
import types
import uuid

import can
import numpy as np
import pytest

from drivers.base import JointMapping
from drivers.codecs import mit as mitc
from drivers.sim.emulators import EmulatorHost
from drivers.sim.mit_emulator import MitEmulator, MitMotorConfig
from drivers.sim.plant import SimulatedPlant
from dynamics.toy_models import Pendulum

#: CubeMars AK Series Actuator Driver Manual V1.0.8, p. 49-50 (MIT mode range table):
#: model -> (P_max rad, V_max rad/s, T_max N m, Kp_max, Kd_max); the last column is headed
#: "AK80-80" in the manual, the AK80-64 in both libraries.
MANUAL_V108 = {
    "AK10-9": (12.5, 50.0, 65.0, 500.0, 5.0),
    "AK60-6": (12.5, 45.0, 15.0, 500.0, 5.0),
    "AK70-10": (12.5, 50.0, 25.0, 500.0, 5.0),
    "AK80-6": (12.5, 76.0, 12.0, 500.0, 5.0),
    "AK80-9": (12.5, 50.0, 18.0, 500.0, 5.0),
    "AK80-64": (12.5, 8.0, 144.0, 500.0, 5.0),
}
AK_MODELS = sorted(MANUAL_V108)


# ---------------------------------------------------------------------------
# third-party modules
# ---------------------------------------------------------------------------
class _CanlibShim:
    """A stand-in for Kvaser's ``canlib`` package: channel 0 is a python-can virtual bus.

    Only what tmotor-can-mit-mode uses: ``canlib.Frame``, ``canlib.canlib.openChannel``
    (with ``Open``, ``Driver``, ``MessageFlag`` constants), ``channel.write/read``.
    ``read`` raises after 0.5 s without a frame (Kvaser's ``CanNoMsg``), so a library
    loop waiting for a frame cannot hang the suite.
    """

    channel_name = f"torqueloop-tmotor-shim-{uuid.uuid4().hex}"

    class NoMessage(Exception):
        pass

    class Frame:
        def __init__(self, id_, data, flags=0, dlc=None):
            self.id = int(id_)
            self.data = bytes(data)
            self.flags = flags

    class Channel:
        def __init__(self, name):
            self.bus = can.Bus(interface="virtual", channel=name)

        def setBusOutputControl(self, _control):
            pass

        def busOn(self):
            pass

        def busOff(self):
            pass

        def close(self):
            self.bus.shutdown()

        def write(self, frame):
            self.bus.send(can.Message(arbitration_id=frame.id, data=frame.data, is_extended_id=False))

        def read(self, timeout=500):
            msg = self.bus.recv(timeout / 1000.0)
            if msg is None:
                raise _CanlibShim.NoMessage("no message")
            return _CanlibShim.Frame(msg.arbitration_id, msg.data)

        def drain(self):
            while self.bus.recv(0.0) is not None:
                pass

    @classmethod
    def modules(cls):
        top = types.ModuleType("canlib")
        sub = types.ModuleType("canlib.canlib")
        sub.Open = types.SimpleNamespace(ACCEPT_VIRTUAL=0x20)
        sub.Driver = types.SimpleNamespace(NORMAL=4)
        sub.MessageFlag = types.SimpleNamespace(STD=2)
        sub.openChannel = lambda channel, flags=0: cls.Channel(cls.channel_name)
        top.canlib = sub
        top.Frame = cls.Frame
        return {"canlib": top, "canlib.canlib": sub}


@pytest.fixture(scope="module")
def tmotor():
    """``tmotor_can_mit_mode.tmotor`` imported over the canlib shim."""
    saved = {k: sys.modules.get(k) for k in ("canlib", "canlib.canlib")}
    sys.modules.update(_CanlibShim.modules())
    try:
        from tmotor_can_mit_mode.tmotorCAN import tmotor as cls
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v
    yield cls
    cls.motors_dict.clear()
    cls.channel.close()


def _tmc():
    from TMotorCANControl import mit_can
    return mit_can


class _Manager:
    """A ``TMotorCANControl.mit_can.CAN_Manager`` on a given bus, without its ``sudo ip link``."""

    @staticmethod
    def make(bus=None):
        mc = _tmc()

        class Mgr(mc.CAN_Manager):
            def __del__(self):  # the original takes can0 down with sudo
                pass

        m = object.__new__(Mgr)
        m.bus = bus
        if bus is not None:
            m.notifier = can.Notifier(bus, [])
        return m


def _tmc_limits(model) -> mitc.MitLimits:
    """TMotorCANControl's own ranges for ``model`` (they differ from ours for the AK60-6,
    see :data:`TMC_DISAGREES`), to compare its scaling on equal ranges."""
    p = _tmc().MIT_Params[model]
    return mitc.MitLimits(p_max_rad=p["P_max"], v_max_rad_s=p["V_max"], kp_max=p["Kp_max"],
                          kd_max=p["Kd_max"], t_max_nm=p["T_max"])


class _RecordingBus:
    def __init__(self):
        self.sent = []

    def send(self, msg, timeout=None):
        self.sent.append(msg)


# ---------------------------------------------------------------------------
# ranges
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("model", AK_MODELS)
def test_ranges_equal_the_manual(model):
    p, v, t, kp, kd = MANUAL_V108[model]
    L = mitc.MIT_MODELS[model]
    assert (L.p_max_rad, L.v_max_rad_s, L.t_max_nm, L.kp_max, L.kd_max) == (p, v, t, kp, kd)


@pytest.mark.parametrize("model", AK_MODELS)
def test_ranges_equal_tmotor_can_mit_mode(tmotor, model):
    p_min, p_max, v_min, v_max, t_min, t_max = tmotor.return_params(model)
    L = mitc.MIT_MODELS[model]
    assert (-p_min, p_max, -v_min, v_max, -t_min, t_max) == (
        L.p_max_rad, L.p_max_rad, L.v_max_rad_s, L.v_max_rad_s, L.t_max_nm, L.t_max_nm)
    m = tmotor.__new__(tmotor)
    tmotor.__init__(m, 99, model)
    assert (m.KP_MAX, m.KD_MAX, m.KP_MIN, m.KD_MIN) == (L.kp_max, L.kd_max, 0.0, 0.0)
    tmotor.motors_dict.pop(99, None)


#: TMotorCANControl 1.2.6 vs the manual: (model, key) -> (theirs, manual)
TMC_DISAGREES = {("AK60-6", "V_max"): (50.0, 45.0), ("AK60-6", "V_min"): (-50.0, -45.0)}


@pytest.mark.parametrize("model", AK_MODELS)
def test_ranges_against_tmotorcancontrol(model):
    params = _tmc().MIT_Params[model]
    L = mitc.MIT_MODELS[model]
    ours = {"P_min": -L.p_max_rad, "P_max": L.p_max_rad, "V_min": -L.v_max_rad_s, "V_max": L.v_max_rad_s,
            "T_min": -L.t_max_nm, "T_max": L.t_max_nm, "Kp_min": 0.0, "Kp_max": L.kp_max,
            "Kd_min": 0.0, "Kd_max": L.kd_max}
    differ = {k: (params[k], ours[k]) for k in ours if params[k] != ours[k]}
    assert differ == {k[1]: v for k, v in TMC_DISAGREES.items() if k[0] == model}


def test_error_code_table_is_tmotorcancontrols():
    theirs = _tmc().MIT_Params["ERROR_CODES"]
    assert sorted(theirs) == sorted(mitc.MIT_ERROR_CODES)


# ---------------------------------------------------------------------------
# packing, byte-exact
# ---------------------------------------------------------------------------
def _random_commands(model, n=400, seed=0):
    """Values inside, at and beyond every field's range (the packers clamp)."""
    L = mitc.MIT_MODELS[model]
    rng = np.random.default_rng(seed)
    out = []
    spans = (L.p_max_rad, L.v_max_rad_s, L.kp_max, L.kd_max, L.t_max_nm)
    for _ in range(n):
        p, v, kp, kd, t = (float(rng.uniform(-1.2, 1.2) * s) for s in spans)
        out.append((p, v, abs(kp), abs(kd), t))
    out += [(L.p_max_rad, L.v_max_rad_s, L.kp_max, L.kd_max, L.t_max_nm),
            (-L.p_max_rad, -L.v_max_rad_s, 0.0, 0.0, -L.t_max_nm), (0.0, 0.0, 0.0, 0.0, 0.0)]
    return out


@pytest.mark.parametrize("model", AK_MODELS)
def test_command_packing_byte_exact_vs_tmotor_can_mit_mode(tmotor, model):
    m = tmotor.__new__(tmotor)
    tmotor.__init__(m, 98, model)
    L = mitc.MIT_MODELS[model]
    for p, v, kp, kd, t in _random_commands(model):
        theirs = bytes(m.pack_cmd(p, v, t, kp, kd))
        assert mitc.encode_command(p, v, kp, kd, t, L, nearest=False) == theirs, (p, v, kp, kd, t)
    assert bytes(m.enter_motor_mode()) == mitc.ENTER_MOTOR_MODE
    assert bytes(m.exit_motor_mode()) == mitc.EXIT_MOTOR_MODE
    tmotor.motors_dict.pop(98, None)


@pytest.mark.parametrize("model", AK_MODELS)
def test_reply_decoding_exact_vs_both_libraries(tmotor, model):
    L = mitc.MIT_MODELS[model]
    tmotor.motors_dict[7] = model
    mgr = _Manager.make()
    rng = np.random.default_rng(1)
    for _ in range(400):
        data = bytes([7]) + bytes(rng.integers(0, 256, 7, dtype=np.uint8).tolist())
        ours = mitc.decode_reply(data, L)
        assert tmotor.unpack_reply(list(data[:6])) == (7, ours.p_rad, ours.v_rad_s, ours.t_nm)
        Lt = _tmc_limits(model)
        for d in (data, data[:6]):
            o = mitc.decode_reply(d, Lt)
            st = mgr.parse_MIT_message(d, model)
            assert (st.position, st.velocity, st.current, st.temperature, st.error) == (
                o.p_rad, o.v_rad_s, o.t_nm, o.temperature_c, o.error)
    tmotor.motors_dict.pop(7, None)


def _fields(data: bytes) -> tuple[int, int, int, int, int]:
    return ((data[0] << 8) | data[1], (data[2] << 4) | (data[3] >> 4), ((data[3] & 0xF) << 8) | data[4],
            (data[5] << 4) | (data[6] >> 4), ((data[6] & 0xF) << 8) | data[7])


@pytest.mark.parametrize("model", AK_MODELS)
def test_command_packing_vs_tmotorcancontrol_within_its_scale_difference(model):
    """TMotorCANControl scales by 2**bits/span: each field is ours or ours + 1 LSB (never less),
    and at least one differs (the disagreement is real, not a tolerance hiding nothing)."""
    L = _tmc_limits(model)
    bus = _RecordingBus()
    mgr = _Manager.make()
    mgr.bus = bus
    plus_one = 0
    for p, v, kp, kd, t in _random_commands(model, seed=2):
        mgr.MIT_controller(5, model, p, v, kp, kd, t)
        msg = bus.sent.pop()
        assert msg.arbitration_id == 5 and not msg.is_extended_id and len(msg.data) == 8
        theirs = _fields(bytes(msg.data))
        ours = _fields(mitc.encode_command(p, v, kp, kd, t, L, nearest=False))
        d = np.subtract(theirs, ours)
        # at the clamped top the 2**bits scale would overflow: TMotorCANControl clamps 2 LSB
        # below x_max, i.e. one LSB below ours there
        top = np.array([65535, 4095, 4095, 4095, 4095]) == np.array(ours)
        assert np.all((d >= 0) & (d <= 1) | top & (d == -1)), (p, v, kp, kd, t, theirs, ours)
        plus_one += int(np.sum(d == 1))
    assert plus_one > 0
    mgr.power_on(5)
    mgr.power_off(5)
    mgr.zero(5)
    assert [bytes(m.data) for m in bus.sent] == [mitc.ENTER_MOTOR_MODE, mitc.EXIT_MOTOR_MODE, mitc.SET_ZERO]


# ---------------------------------------------------------------------------
# third-party clients driving the emulator over a python-can virtual bus
# ---------------------------------------------------------------------------
class _Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


#: the emulated joint: a gravity-free rigid body, J = I + m c^2 [kg m^2], no friction, no lag
_J = 0.01 + 1.0 * 0.1 ** 2


def _emulated(channel: str, clock, model="AK80-9"):
    plant = SimulatedPlant(Pendulum(mass_kg=1.0, com_m=0.1, inertia_kgm2=0.01, g=0.0), q0=[0.0])
    emu = MitEmulator([MitMotorConfig(1, 0, model, JointMapping(), variant="cubemars8")])
    host = EmulatorHost(can.Bus(interface="virtual", channel=channel), [emu], plant, clock, own_bus=True)
    return plant, emu, host


def _predicted(tau_nm: float, t0: float, t: float) -> tuple[float, float]:
    """Constant torque from rest at t0: q = tau/J (t-t0)^2 / 2, qd = tau/J (t-t0)."""
    a = tau_nm / _J
    return 0.5 * a * (t - t0) ** 2, a * (t - t0)


# its staleness warning is on the wall clock (100 ms without a reply); the test's clock is lock-step
@pytest.mark.filterwarnings("ignore:State update requested but no data:RuntimeWarning")
def test_tmotorcancontrol_client_enables_and_moves_the_emulated_motor(capsys):
    mc = _tmc()
    channel = f"torqueloop-tmc-{uuid.uuid4().hex}"
    clock = _Clock()
    plant, emu, host = _emulated(channel, clock)
    mgr = _Manager.make(can.Bus(interface="virtual", channel=channel))
    saved = mc.CAN_Manager._instance
    mc.CAN_Manager._instance = mgr
    L = mitc.MIT_MODELS["AK80-9"]
    try:
        motor = mc.TMotorManager_mit_can(motor_type="AK80-9", motor_ID=1)
        with motor:                       # ENTER_MOTOR_MODE + its 10-reply connection check
            assert emu.motor_mode(1)
            motor.set_current_gains()
            tau_field = 0.4               # N m in the frame's torque field
            iq = motor.TMotor_current_to_qaxis_current(tau_field)
            motor.set_motor_current_qaxis_amps(iq)
            # what the drive decodes from the field their encoder writes (2**12/span scale)
            u = mc.CAN_Manager.float_to_uint(motor.qaxis_current_to_TMotor_current(iq),
                                             -L.t_max_nm, L.t_max_nm, 12)
            tau = mitc.uint_to_float(u, -L.t_max_nm, L.t_max_nm, 12)
            assert tau == pytest.approx(tau_field, abs=2 * 2 * L.t_max_nm / 4095)
            t0, dt, n = 0.1, 0.002, 100
            for k in range(n + 2):        # the last update reads the reply to the one before
                clock.t = t0 + min(k, n) * dt
                motor.update()
                host.sync()
                deadline = time.monotonic() + 2.0
                while not motor._updated and time.monotonic() < deadline:   # the listener thread
                    time.sleep(0.001)
            T = t0 + n * dt
            q_pred, v_pred = _predicted(tau, t0, T)
            assert q_pred > 0.3           # a real motion, not noise
            assert motor.position == pytest.approx(q_pred, abs=2 * 25.0 / 65535)
            assert motor.velocity == pytest.approx(v_pred, abs=2 * 100.0 / 4095)
            assert plant.state.q[0] == pytest.approx(q_pred, rel=1e-9)
        host.sync()
        assert not emu.motor_mode(1)      # __exit__ sent EXIT_MOTOR_MODE
        host.check()
    finally:
        mc.CAN_Manager._instance = saved
        mgr.notifier.stop()
        mgr.bus.shutdown()
        host.close()


def test_tmotor_can_mit_mode_client_enables_and_moves_the_emulated_motor(tmotor):
    clock = _Clock()
    plant, emu, host = _emulated(_CanlibShim.channel_name, clock)
    try:
        tmotor.channel.drain()
        m = tmotor(1, "AK80-9")
        m.start_motor()
        host.sync()
        assert emu.motor_mode(1)
        assert tmotor.read_can()[0] == 1
        tau_field = -0.3
        L = mitc.MIT_MODELS["AK80-9"]
        tau = mitc.decode_command(bytes(m.pack_cmd(0, 0, tau_field, 0, 0)), L).t_nm
        t0, dt, n = 0.05, 0.002, 100
        for k in range(n + 1):
            clock.t = t0 + k * dt
            m.attain(0.0, 0.0, tau_field, 0.0, 0.0)
            host.sync()
            mid, p, v, t = tmotor.read_can()
            assert mid == 1
        # the reply to the frame at T carries the state at T (before that frame's command)
        T = t0 + n * dt
        q_pred, v_pred = _predicted(tau, t0, T)
        assert q_pred < -0.3
        assert p == pytest.approx(q_pred, abs=2 * 25.0 / 65535)
        assert v == pytest.approx(v_pred, abs=2 * 100.0 / 4095)
        assert t == pytest.approx(tau, abs=2 * 36.0 / 4095)
        m.stop_motor()
        host.sync()
        assert not emu.motor_mode(1)
        host.check()
    finally:
        host.close()
        tmotor.motors_dict.pop(1, None)


@pytest.mark.parametrize("model", AK_MODELS)
def test_driver_cycle_frames_and_feedback_vs_tmotor_can_mit_mode(tmotor, model):
    """The MIT driver's own cycle (its compiled encoder and reply step, drivers/_mit_kernels.py)
    against tmotor-can-mit-mode: every torque frame it sends is ``pack_cmd(0, 0, t, 0, 0)`` byte
    for byte (truncating quantisation, the library's), and the joint values it reports are the
    library's ``unpack_reply`` of the replies (identity mapping, plain decoding)."""
    from drivers.base import Command
    from drivers.mit import MitCanDriver, MitJoint
    from drivers.transport import CanTransport

    L = mitc.MIT_MODELS[model]
    m = tmotor.__new__(tmotor)
    tmotor.__init__(m, 97, model)
    tmotor.motors_dict.update({5: model, 6: model})
    rng = np.random.default_rng(3)
    replies = {}

    class Bus:
        def __init__(self):
            self.sent, self.inbox = [], []

        def send(self, msg, timeout=None):
            self.sent.append(bytes(msg.data))
            data = bytes([msg.arbitration_id]) + bytes(rng.integers(0, 256, 7, dtype=np.uint8).tolist())
            replies[msg.arbitration_id] = data
            self.inbox.append(can.Message(arbitration_id=0, data=data, is_extended_id=False))

        def recv(self, timeout=None):
            return self.inbox.pop(0) if self.inbox else None

        def shutdown(self):
            pass

    bus = Bus()
    t = CanTransport.from_bus(bus, name="tp")
    drv = MitCanDriver([MitJoint(t, 5, L), MitJoint(t, 6, L)], now=lambda: 0.0, quantization="truncate",
                       reply_centered=False, reply_timeout_s=0.01)
    drv.enable()
    for _ in range(200):
        tau = rng.uniform(-1.2, 1.2, 2) * L.t_max_nm
        fb = drv.cycle(Command(tau))
        assert bus.sent[-2:] == [bytes(m.pack_cmd(0.0, 0.0, float(x), 0.0, 0.0)) for x in tau]
        for j, cid in enumerate((5, 6)):
            _, p, v, tq = tmotor.unpack_reply(list(replies[cid][:6]))
            assert (fb.position_rad[j], fb.velocity_rad_s[j], fb.torque_nm[j]) == (p, v, tq)
    for cid in (5, 6, 97):
        tmotor.motors_dict.pop(cid, None)
