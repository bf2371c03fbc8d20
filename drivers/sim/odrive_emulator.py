"""Emulated ODrive axes speaking CANSimple (firmware 0.6 or 0.5) on a simulated plant.

Behaviour modelled on the firmware, not on our driver (issue 11).  Sources:
ODrive's CANSimple DBC files (0.6.10, 0.5.6), the ODrive docs ("CAN Protocol",
API reference) and, for firmware 0.5, its open ``can_simple.cpp`` / ``axis.cpp``.

What the emulated firmware does
-------------------------------
* **Every frame addressed to an axis feeds its watchdog** (``do_command`` feeds
  before looking at the command: data, RTR, unknown ids alike).  With
  ``watchdog_timeout_s`` set (``axis.config.enable_watchdog``), closed loop
  without a frame for that long sets ``WATCHDOG_TIMER_EXPIRED`` (0x1000000 on
  0.6, 0x800 on 0.5) and the axis disarms to IDLE at the expiry time (loop
  clock).  Closed loop is refused while an error is set, until
  ``Clear_Errors``.
* **Torque limits**: the applied motor torque is the input torque clamped to
  ``min(torque_limit_nm, current_limit_a * torque_constant)`` (the firmware
  turns torque into a current set-point and clamps it to the current limit,
  default 10 A as ``motor.config.current_lim`` of ODrive 3.6);
  ``Set_Limits`` changes the current limit (and the plant's joint torque
  limit with it) at run time.  A 1e30 N m command is applied as the limit,
  and Iq / Torques report the clamped values.
* **Torque-mode velocity limit** (``enable_torque_mode_vel_limit``, on by
  default): once ``Set_Limits`` gave a velocity limit ``vl`` [turn/s], the
  torque is clamped to ``[(-vl - v) g, (vl - v) g]`` with the velocity
  estimate ``v`` and ``vel_gain`` ``g`` (``Set_Vel_Gains``, default 1/6 N m
  per turn/s), as the firmware's ``limitVel``; applied when a command frame
  arrives (the firmware does it every control tick).  Before any
  ``Set_Limits`` the limit is off (the firmware's default of 2 turn/s is not
  emulated).
* **Lengths**: commands are decoded as the firmware reads them (any DLC, see
  :mod:`drivers.codecs.odrive`); a frame whose signals cannot be read (a float
  cut short, a NaN, an unknown control mode) is ignored with no state change
  (counted in :attr:`OdriveEmulator.frames_ignored`).
* **Requests**: RTR frames of the messages the firmware answers
  (:data:`~drivers.codecs.odrive.RTR_COMMANDS` / ``RTR_COMMANDS_05``) get one
  answer; on 0.5 a 0-byte *data* frame with such an id is answered like an RTR
  (``if (msg.rtr || msg.len == 0)``), ``Get_ADC_Voltage`` and
  ``Get_Controller_Error`` on any frame, and the heartbeat is never answered on
  request (cyclic only).  ``Get_Version`` exists on 0.6 only (0x00 is CANopen
  NMT, ignored, on 0.5).
* **Set_Axis_State**: IDLE disarms; CLOSED_LOOP_CONTROL arms unless an error is
  set (0.6: ``procedure_result = DISARMED``); 0 (UNDEFINED) is "no request";
  any other state (the calibration procedures are not emulated, unknown states)
  is refused: ``procedure_result = INVALID_STATE`` on 0.6, axis error
  ``INVALID_STATE`` and IDLE on 0.5.
* ``Set_Input_Torque`` / the torque feed-forward of ``Set_Input_Vel`` and
  ``Set_Input_Pos`` set the held input torque in any state, as the firmware's
  ``controller.input_torque`` (it is applied in closed loop with
  ``TORQUE_CONTROL``; velocity and position control are not emulated: no
  torque).  So a torque sent while IDLE is applied on arming, as on a real
  ODrive: the driver sends 0 before requesting closed loop.
* ``Estop`` sets ``ESTOP_REQUESTED`` and disarms; ``Reboot`` (0.6 actions 0..2,
  0.5 any) disarms and clears errors; 0.6 ``Reboot`` action 3 and
  ``Enter_DFU_Mode`` leave CANSimple (the axis goes silent).
  ``Set_Axis_Node_ID`` (0.5) / ``Address`` with this serial number (0.6) change
  the node id.  ``Set_Absolute_Position`` (0.6) / ``Set_Linear_Count`` (0.5)
  set the reported position.  Gains and trajectory limits are stored (not used
  in torque control).  Unknown ids and ``RxSdo`` (no endpoint table) are ignored.
* Serving never raises on a frame: whatever a frame holds, the answer is a
  list of frames (maybe empty).

Not emulated: calibration, velocity/position control, over-speed errors, CAN bus
error states.
"""

from __future__ import annotations

import math
import struct
import sys
import threading
from dataclasses import dataclass, field
from typing import Sequence

import can
import numpy as np

from dynamics.errors import ConfigError, DecodeError, DriverError
from ..base import JointMapping
from ..codecs import odrive as odc
from . import _odrive_kernel as _ok
from .emulators import EmulatedDevice, _msg
from .plant import Plant

__all__ = ["OdriveAxisConfig", "OdriveEmulator"]

_TWO_PI = 2.0 * math.pi
_F32_MAX = 3.4028234663852886e38
#: a little-endian float32 (a Set_Input_Torque's torque, as the codec reads it)
_F1 = struct.Struct("<f")
#: the firmware's control tick [s]: the control loop runs in the current-measurement callback at
#: ``CURRENT_MEAS_HZ`` = 168 MHz / (2 x 3500 x 3) = 8 kHz (ODrive 3.x board header: TIM_1_8 at
#: 168 MHz, ``TIM_1_8_PERIOD_CLOCKS`` 3500, ``TIM_1_8_RCR`` 2); a command takes effect, and the
#: encoder estimate a request reads is updated, once per tick.  The emulated axes' plant step on
#: the wall clock defaults to it (``[driver.emulator] plant_step_min_s``).
CONTROL_PERIOD_S = 1.0 / 8000.0

#: ``controller.config.vel_gain`` default [N m / (turn/s)] (ODrive 0.5 and 0.6)
_VEL_GAIN_DEFAULT = 1.0 / 6.0
#: ``Set_Vel_Gains`` values before any (vel_gain, vel_integrator_gain)
_VEL_GAINS_DEFAULT = (_VEL_GAIN_DEFAULT, 0.0)


def _f32_saturate(x: float) -> float:
    """``x`` limited to the finite float32 range (NaN stays NaN)."""
    return min(max(x, -_F32_MAX), _F32_MAX)


_CL = odc.AxisState.CLOSED_LOOP_CONTROL
_IDLE = odc.AxisState.IDLE
_SET_INPUT_TORQUE = int(odc.Cmd.SET_INPUT_TORQUE)
_GET_ENCODER_ESTIMATES = int(odc.Cmd.GET_ENCODER_ESTIMATES)
_HEARTBEAT = int(odc.Cmd.HEARTBEAT)
_GET_TORQUES = int(odc.Cmd.GET_TORQUES)
#: a timed event's messages are made by the compiled call from this many on (_timer_compiled; fewer
#: cost less in Python: two estimates per event, the Stewart run's two axes per bus, took 11 us
#: compiled against 10 frame by frame, twelve messages 27 against 51, thread CPU at a load of 5-10)
_BC_COMPILED_MIN = 3
#: the sets of due messages whose compiled inputs an emulator keeps (_timer_compiled)
_BC_SETS_KEPT = 64
#: the compiled broadcasts' kind of each cyclic message but the heartbeat (_timer_compiled)
_BC_KIND = {_GET_ENCODER_ESTIMATES: _ok.KIND_BC_ESTIMATES, int(odc.Cmd.GET_IQ): _ok.KIND_BC_IQ,
            _GET_TORQUES: _ok.KIND_BC_TORQUES}
_TORQUE_CONTROL = int(odc.ControlMode.TORQUE_CONTROL)
#: GPIOs whose ADC voltage ODrive 3.6 reports (``GPIO_COUNT``; ``Get_ADC_Voltage`` ignores others)
_GPIO_COUNT_05 = 17
_PERIODIC = ((odc.Cmd.HEARTBEAT, "heartbeat_period_s"),
             (odc.Cmd.GET_ENCODER_ESTIMATES, "encoder_period_s"),
             (odc.Cmd.GET_IQ, "iq_period_s"),
             (odc.Cmd.GET_TORQUES, "torques_period_s"))
_DEFAULT_VERSION = {"0.6": (0, 6, 10), "0.5": (0, 5, 6)}
# errors the heartbeat's 0.5 flags summarise (MOTOR_FAILED, ENCODER_FAILED, CONTROLLER_FAILED)
_FLAGS_05 = (0x40, 0x100, 0x200)
_DEFAULT_FAULT = {"0.6": 0x2000, "0.5": 0x40000}      # MOTOR_OVER_TEMP / OVER_TEMP


@dataclass(frozen=True)
class OdriveAxisConfig:
    """One emulated ODrive axis.

    Attributes
    ----------
    node_id : int
        CANSimple node id (0..63).
    joint : int
        Plant joint it drives.
    mapping : JointMapping
        Joint <-> motor side (must match the driver's); its
        ``torque_constant_nm_per_a`` turns torque into the current that is
        limited and reported as Iq.
    torque_limit_nm : float
        Motor torque limit (``motor.config.torque_lim``) [N m]; ``inf`` = none
        (the firmware default; the current limit still applies).
    heartbeat_period_s : float or None
        Cyclic ``Heartbeat`` period on the loop clock (ODrive default 0.1 s);
        ``None`` = none.  Cyclic messages are due at ``t0 + k * period``.
    encoder_period_s : float or None
        Cyclic ``Get_Encoder_Estimates`` period; ``None`` = only on request.
    watchdog_timeout_s : float or None
        ``axis.config.watchdog_timeout`` with ``enable_watchdog`` (``None``: off).
    bus_voltage_v : float
        ``Get_Bus_Voltage_Current`` voltage [V].
    iq_period_s, torques_period_s : float or None
        Cyclic ``Get_Iq`` / ``Get_Torques`` periods (default: on request only;
        ``Get_Torques`` exists on 0.6 only).
    current_limit_a : float
        Motor current limit [A] (``motor.config.current_lim``, default 10 A);
        finite and > 0.
    temperature_c : float
        FET and motor temperature reported by ``Get_Temperature`` [degC].
    serial_number : int or None
        48-bit serial number of the ``Address`` message (default derived from the node id).
    encoder_cpr : int
        Counts per motor revolution of ``Get_Encoder_Count`` / ``Set_Linear_Count`` (0.5).
    """

    node_id: int
    joint: int
    mapping: JointMapping = field(default_factory=JointMapping)
    torque_limit_nm: float = math.inf
    heartbeat_period_s: float | None = 0.1
    encoder_period_s: float | None = 0.01
    watchdog_timeout_s: float | None = None
    bus_voltage_v: float = 24.0
    iq_period_s: float | None = None
    torques_period_s: float | None = None
    current_limit_a: float = 10.0
    temperature_c: float = 30.0
    serial_number: int | None = None
    encoder_cpr: int = 8192


class _Axis:
    __slots__ = ("cfg", "node_id", "state", "control_mode", "input_mode", "input_torque", "axis_error",
                 "procedure_result", "last_feed_t", "periods", "slots", "t0", "silent", "commands",
                 "current_limit_a", "vel_limit_rev_s", "params", "pos_offset_rev", "serial", "kt", "torque_lim",
                 "setpoint_nm", "K", "quantum", "index")

    def __init__(self, cfg: OdriveAxisConfig, t0: float):
        self.cfg = cfg
        self.node_id = cfg.node_id
        self.state = _IDLE
        self.control_mode: int = odc.ControlMode.TORQUE_CONTROL
        self.input_mode: int = odc.InputMode.PASSTHROUGH
        self.input_torque = 0.0
        self.axis_error = 0
        self.procedure_result = int(odc.ProcedureResult.SUCCESS)
        self.last_feed_t = -math.inf
        self.periods = {cmd: float(getattr(cfg, name)) for cmd, name in _PERIODIC if getattr(cfg, name) is not None}
        self.t0 = t0
        #: the axis' cyclic messages' slots in its emulator's schedule (OdriveEmulator._due, _cnt), in
        #: the order of ``periods``
        self.slots: list[int] = []
        self.silent = False
        self.commands = 0
        self.current_limit_a = float(cfg.current_limit_a)
        self.vel_limit_rev_s = math.inf
        self.params: dict[str, float] = {}
        self.pos_offset_rev = 0.0
        self.serial = cfg.serial_number if cfg.serial_number is not None else 0x3000_0000_0000 + cfg.node_id
        self.kt = float(cfg.mapping.torque_constant_nm_per_a)
        self.torque_lim = float(cfg.torque_limit_nm)
        #: the motor torque applied since the last command frame [N m] (after the velocity limit)
        self.setpoint_nm = 0.0
        #: the compiled answer path's constants (drivers.sim._odrive_kernel, layout K_*)
        self.K = np.empty(_ok.K_SIZE)
        self.K[_ok.K_SIGN], self.K[_ok.K_GEAR], self.K[_ok.K_OFFSET], self.K[_ok.K_EFF] = (
            cfg.mapping.sign, cfg.mapping.gear_ratio, cfg.mapping.offset_rad, cfg.mapping.efficiency)
        #: the joint encoder's step [rad] (0.0: none) for the compiled path, None: the Python path
        #: (set at bind: a plant drawing sensor noise, or none bound yet)
        self.quantum: float | None = None
        #: the axis' row in the emulator's arrays of the compiled run of frames (OdriveEmulator._KK, _P)
        self.index = 0

    def limit_nm(self) -> float:
        """Effective motor torque limit [N m]."""
        return min(self.torque_lim, self.current_limit_a * abs(self.kt))

    def torque_setpoint(self) -> float:
        """Motor torque the drive applies now [N m] (clamped; 0 unless armed in torque control)."""
        if self.state != _CL or self.control_mode != odc.ControlMode.TORQUE_CONTROL:
            return 0.0
        lim = self.limit_nm()
        return min(max(self.input_torque, -lim), lim)


class OdriveEmulator(EmulatedDevice):
    """ODrive axes speaking CANSimple, firmware ``"0.6"`` or ``"0.5"`` (see the module docstring).

    Parameters
    ----------
    axes : sequence of OdriveAxisConfig
    t0_s : float
        Loop time of the first cyclic messages.
    firmware : {"0.6", "0.5"}
        Protocol generation.
    fw_version : tuple of 3 int, optional
        Reported by ``Get_Version`` (0.6); default (0, 6, 10) / (0, 5, 6).
    hw_version : tuple of 3 int
        Hardware version reported by ``Get_Version``.

    Attributes
    ----------
    frames_ignored : int
        Frames addressed to an axis that the firmware would drop (unreadable
        signals, unknown modes, commands of the other generation...).
    """

    def __init__(self, axes: Sequence[OdriveAxisConfig], *, t0_s: float = 0.0, firmware: str = "0.6",
                 fw_version: tuple[int, int, int] | None = None, hw_version: tuple[int, int, int] = (4, 4, 58)):
        if firmware not in odc.FIRMWARES:
            raise ConfigError(f"must be one of {odc.FIRMWARES}, got {firmware!r}", field="firmware")
        self.firmware = firmware
        fwv = tuple(fw_version) if fw_version is not None else _DEFAULT_VERSION[firmware]
        if len(fwv) != 3 or not all(isinstance(x, int) and 0 <= x <= 255 for x in fwv):
            raise ConfigError(f"expected three integers 0..255, got {fw_version!r}", field="fw_version")
        self.version = odc.Version(2, *hw_version, *fwv, 0)
        axes = list(axes)
        if not axes:
            raise ConfigError("at least one axis is required", field="axes")
        self._axes: dict[int, _Axis] = {}
        joints = set()
        for i, a in enumerate(axes):
            self._check_axis(i, a, joints)
            self._axes[a.node_id] = _Axis(a, float(t0_s))
        # the cyclic messages' schedule, one slot per message of an axis: its time due (the k-th is
        # due at t0 + k * period), its count of those sent, and what is constant (axis, command id,
        # t0, period); _order lists the slots axis by axis in the order of _axes, each axis' in
        # the order of its periods (the order the messages of one event go out in)
        self._due: list[float] = []
        self._cnt: list[int] = []
        self._slot_ax: list[_Axis] = []
        self._slot_cmd: list[int] = []
        self._slot_t0: list[float] = []
        self._slot_period: list[float] = []
        for ax in self._axes.values():
            for cmd, period in ax.periods.items():
                ax.slots.append(len(self._due))
                self._due.append(ax.t0)
                self._cnt.append(0)
                self._slot_ax.append(ax)
                self._slot_cmd.append(int(cmd))
                self._slot_t0.append(ax.t0)
                self._slot_period.append(period)
        self._order: list[int] = []
        self._order_slots()
        #: an axis has a watchdog (else no timed event is a watchdog's expiry)
        self._any_wd = any(ax.cfg.watchdog_timeout_s is not None for ax in self._axes.values())
        # the compiled run of frames (on_fields_batch): every axis' mapping constants in one array
        # (each axis' K a view of its row) and its state in another, refreshed after any change
        # of the axes (_P_ok False) but those the run makes itself
        self._KK = np.empty((len(axes), _ok.K_SIZE))
        for i, ax in enumerate(self._axes.values()):
            ax.index = i
            self._KK[i] = ax.K
            ax.K = self._KK[i]
        self._P = np.zeros((len(axes), _ok.P_SIZE))
        self._P_ok = False
        #: node id -> axis of every axis the compiled run serves (found with _P)
        self._fast_axes: dict[int, _Axis] = {}
        #: the run's inputs and buffers by its frames' (arbitration_id, remote_dlc) (_run_pattern)
        self._runs: dict[tuple, tuple] = {}
        #: the compiled broadcasts' inputs and buffers by the set of messages due (_timer_compiled):
        #: kinds, axes, payload buffer and its float32 view, whether a torque is read
        self._bc: dict[tuple, tuple] = {}
        #: the axes' torque set-points for the compiled broadcasts of Iq and Torques
        self._setpoints = np.zeros(len(axes))
        self._wd_bit = odc.WATCHDOG_ERROR_BIT[firmware]
        self._estop_bit = odc.ESTOP_ERROR_BIT[firmware]
        self._rtr = odc.RTR_COMMANDS if firmware == "0.6" else odc.RTR_COMMANDS_05
        self._lock = threading.RLock()
        #: the devices' next timed event (next_timer_s) while nothing changed it; None: to compute
        self._next_t: float | None = None
        #: counts the changes that may move the timers (EmulatedDevice.timer_epoch)
        self.timer_epoch = 0
        self.frames_ignored = 0
        #: the plant's own joint torque limits at bind (before the axes' current limits) [N m]
        self._plant_limit: dict[int, float] = {}
        # the compiled estimates' payload buffer; its float32 view is the codec's little-endian
        # bytes only on a little-endian machine (else the Python path)
        self._est = np.zeros(8, dtype=np.uint8)
        self._est_f32 = self._est.view(np.float32) if sys.byteorder == "little" else None

    def _check_axis(self, i: int, a, joints: set) -> None:
        where = f"axes[{i}]"
        if not isinstance(a, OdriveAxisConfig):
            raise ConfigError(f"expected OdriveAxisConfig, got {type(a).__name__}", field=where)
        if isinstance(a.node_id, bool) or not isinstance(a.node_id, int) or not 0 <= a.node_id <= odc.MAX_NODE_ID:
            raise ConfigError(f"node_id must be in 0..{odc.MAX_NODE_ID}, got {a.node_id!r}", field=f"{where}.node_id")
        if a.node_id in self._axes:
            raise ConfigError(f"duplicate node id {a.node_id}", field=f"{where}.node_id")
        if a.joint in joints:
            raise ConfigError(f"joint {a.joint} driven twice", field=f"{where}.joint")
        joints.add(a.joint)
        for name in ("heartbeat_period_s", "encoder_period_s", "watchdog_timeout_s", "iq_period_s",
                     "torques_period_s"):
            v = getattr(a, name)
            if v is not None and (not math.isfinite(float(v)) or not 1e-4 <= float(v) <= 1e4):
                raise ConfigError(f"must be in [1e-4, 1e4] s or None, got {v!r}", field=f"{where}.{name}")
        if self.firmware == "0.5" and a.torques_period_s is not None:
            raise ConfigError("firmware 0.5 has no Get_Torques message (0x1C is Get_ADC_Voltage)",
                              field=f"{where}.torques_period_s")
        c = float(a.current_limit_a)
        if not (math.isfinite(c) and c > 0):
            raise ConfigError(f"must be finite and > 0, got {a.current_limit_a!r}", field=f"{where}.current_limit_a")
        t = float(a.torque_limit_nm)
        if math.isnan(t) or t <= 0:
            raise ConfigError(f"must be > 0 (inf: none), got {a.torque_limit_nm!r}", field=f"{where}.torque_limit_nm")
        kt = float(a.mapping.torque_constant_nm_per_a)
        if not (math.isfinite(kt) and kt != 0):
            raise ConfigError(f"must be finite and non-zero, got {kt!r}",
                              field=f"{where}.mapping.torque_constant_nm_per_a")

    # -- setup and inspection ---------------------------------------------------------
    def bind(self, plant: Plant) -> None:
        super().bind(plant)
        self._P_ok = False
        for ax in self._axes.values():
            j = ax.cfg.joint
            if not 0 <= j < plant.n_joints:
                raise ConfigError(f"joint {j} out of range for a {plant.n_joints}-joint plant",
                                  field=f"axis {ax.node_id}.joint")
            self._plant_limit[j] = float(plant.torque_limit_nm[j])
            ax.quantum = plant._joint_quantum(j) if self._est_f32 is not None else None
            self._limit_plant(ax)

    def _limit_plant(self, ax: _Axis) -> None:
        """The plant joint's torque limit: its own, or the axis' (current limit) when lower."""
        mp = ax.cfg.mapping
        j = ax.cfg.joint
        lim = abs(ax.limit_nm() * mp.gear_ratio * mp.efficiency)
        self.plant.set_torque_limit([min(self._plant_limit[j], lim)], joints=[j])

    @property
    def node_ids(self) -> tuple[int, ...]:
        return tuple(self._axes)

    def _axis(self, node_id: int) -> _Axis:
        try:
            return self._axes[node_id]
        except KeyError as err:
            raise DriverError(f"no emulated ODrive axis with node id {node_id}") from err

    def axis_state(self, node_id: int) -> int:
        return self._axis(node_id).state

    def axis_error(self, node_id: int) -> int:
        return self._axis(node_id).axis_error

    def commands_applied(self, node_id: int) -> int:
        """Number of torque commands applied to the plant by this axis (armed, torque control)."""
        return self._axis(node_id).commands

    def torque_limit_nm(self, node_id: int) -> float:
        """Effective motor torque limit of an axis now [N m]."""
        return self._axis(node_id).limit_nm()

    # -- fault injection --------------------------------------------------------------
    def inject_error(self, node_id: int, bits: int | None = None) -> None:
        """Set axis error bits (default: over-temperature of the firmware); the axis disarms to IDLE."""
        bits = _DEFAULT_FAULT[self.firmware] if bits is None else bits
        if isinstance(bits, bool) or not isinstance(bits, int) or not 0 < bits < (1 << 32):
            raise DriverError(f"error bits must be a non-zero uint32, got {bits!r}")
        with self._lock:
            ax = self._axis(node_id)
            ax.axis_error |= bits
            self._disarm(ax)
            self._timers_changed()

    def reboot(self, node_id: int) -> None:
        """Power-cycle one axis (a brown-out, an e-stop that cut the supply): it comes back IDLE
        (zero torque, brake engaged) with no error, its torque input and position offset reset;
        commands do nothing until it is requested into closed loop again."""
        with self._lock:
            ax = self._axis(node_id)
            ax.axis_error = 0
            ax.input_torque = 0.0
            ax.pos_offset_rev = 0.0
            ax.procedure_result = int(odc.ProcedureResult.SUCCESS)
            self._disarm(ax)
            self._timers_changed()

    def set_silent(self, node_id: int, silent: bool = True) -> None:
        with self._lock:
            self._axis(node_id).silent = bool(silent)
            self._P_ok = False

    # -- plant coupling ------------------------------------------------------------------
    def _apply(self, ax: _Axis) -> None:
        """The torque the axis applies now, to the plant: by one call of the compiled
        :func:`~drivers.sim._odrive_kernel.applied_torque` when the plant draws no sensor noise
        (the same values), else :meth:`_apply_python`."""
        if ax.quantum is None:
            self._apply_python(ax)
            return
        plant = self.plant
        with plant._lock:
            try:
                t_m, tau = _ok.applied_torque(
                    ax.K, plant._qd, ax.cfg.joint,
                    ax.state == _CL and ax.control_mode == _TORQUE_CONTROL, ax.input_torque,
                    ax.torque_lim, ax.current_limit_a, ax.kt, ax.vel_limit_rev_s,
                    ax.params.get("set_vel_gains", _VEL_GAINS_DEFAULT)[0])
            except TypeError:           # the plant's state in arrays of another layout: the Python path
                self._apply_python(ax)
                return
        ax.setpoint_nm = t_m
        plant.set_joint_command(ax.cfg.joint, tau)

    def _apply_python(self, ax: _Axis) -> None:
        mp = ax.cfg.mapping
        t_m = ax.torque_setpoint()
        vl = ax.vel_limit_rev_s
        if t_m != 0.0 and math.isfinite(vl):     # the firmware's limitVel (torque mode)
            v = self._motor_pos_vel(ax)[1]
            g = ax.params.get("set_vel_gains", _VEL_GAINS_DEFAULT)[0]
            t_m = min(max(t_m, (-vl - v) * g), (vl - v) * g)
        ax.setpoint_nm = t_m
        self.plant.set_joint_command(ax.cfg.joint, mp.sign * t_m * mp.gear_ratio * mp.efficiency)

    def _disarm(self, ax: _Axis) -> None:
        self._P_ok = False
        ax.state = _IDLE
        self._apply(ax)
        self.plant.set_brake(True, joints=[ax.cfg.joint])

    # -- timed events ------------------------------------------------------------------------
    #: on_frame returns None, changing nothing, for every frame accepts refuses (an extended
    #: or error frame, a node id of no axis here): the host skips the pre-check
    on_frame_filters = True

    def accepts(self, msg: can.Message) -> bool:
        return not msg.is_extended_id and not msg.is_error_frame and (msg.arbitration_id >> 5) in self._axes

    def _timers_changed(self) -> None:
        """Before a change of the axes that may move their timers (holding the lock)."""
        self._next_t = None
        self.timer_epoch += 1

    def next_timer_s(self) -> float:
        """The axes' next cyclic message or watchdog expiry [s] (``inf``: none).  Kept until a
        frame, a timed event or a fault injection changes the axes (the inline host asks at every
        send and every empty receive)."""
        t = self._next_t
        if t is not None:
            # read without the lock: a change clears it holding the lock before it changes
            # anything, and a value is computed and stored only holding it
            return t
        with self._lock:
            due = self._due
            t = min(due) if due else math.inf
            if self._any_wd:
                for ax in self._axes.values():
                    wd = ax.cfg.watchdog_timeout_s
                    if wd is not None and ax.state == _CL:
                        t = min(t, ax.last_feed_t + wd)
            self._next_t = t
            return t

    def _order_slots(self) -> None:
        """The schedule's slots axis by axis in the order of ``_axes`` (at construction, and after
        an axis got another node id: it moved to the end)."""
        self._order = [i for ax in self._axes.values() for i in ax.slots]

    def on_timer(self, t_s: float) -> list[can.Message]:
        return [_msg(arb, data) for arb, data in self.on_timer_fields(t_s)]

    def on_timer_fields(self, t_s: float) -> list[tuple[int, bytes]]:
        out: list[tuple[int, bytes]] = []
        with self._lock:
            fast = self._timer_compiled(t_s)
            if fast is not None:
                return fast
            self._timers_changed()
            due, cnt, t0, period, cmds = self._due, self._cnt, self._slot_t0, self._slot_period, self._slot_cmd
            for ax in self._axes.values():
                wd = ax.cfg.watchdog_timeout_s
                if wd is not None and ax.state == _CL and ax.last_feed_t + wd <= t_s:
                    ax.axis_error |= self._wd_bit
                    self._disarm(ax)
                for i in ax.slots:
                    if due[i] <= t_s:
                        c = cnt[i] + 1
                        cnt[i] = c
                        due[i] = t0[i] + c * period[i]
                        if not ax.silent:
                            cmd = cmds[i]
                            if cmd == _GET_ENCODER_ESTIMATES:      # what _answer does for it
                                out.append(((ax.node_id << 5) | cmd, self._estimates(ax)))
                            else:
                                out.extend(self._answer(ax, cmd, b""))
        return out

    def _timer_compiled(self, t_s: float) -> list[tuple[int, bytes]] | None:
        """:meth:`on_timer_fields` (holding the lock) with the payloads of the cyclic estimates, Iq and
        Torques made by one call of the compiled
        :func:`~drivers.sim._odrive_kernel.broadcast_payloads` (the same bytes), heartbeats as
        :meth:`_answer` makes them: the same frames in the same order, the same schedule after it.
        ``None``, having changed nothing, where the Python path is taken: a watchdog expiring at
        ``t_s`` (the axis disarms before its messages), an axis not served by the compiled run
        (silent, a plant drawing sensor noise), a value the codec refuses (it raises there).  Fewer
        than :data:`_BC_COMPILED_MIN` messages due are made frame by frame here (the Python
        path's answers, its schedule walked once)."""
        if self._est_f32 is None:
            return None
        if not self._P_ok:
            self._refresh_run_state()
        axes = self._axes
        if len(self._fast_axes) != len(axes):
            return None
        if self._any_wd:
            for ax in axes.values():
                wd = ax.cfg.watchdog_timeout_s
                if wd is not None and ax.state == _CL and ax.last_feed_t + wd <= t_s:
                    return None
        due_t = self._due
        # the slots due, in the order their messages go out (_order)
        due = tuple([i for i in self._order if due_t[i] <= t_s])
        cnt, t0, period = self._cnt, self._slot_t0, self._slot_period
        if len(due) >= _BC_COMPILED_MIN:
            made = self._bc_payloads(due)
            if made is False:
                return None
            payloads, arbs, heartbeats = made
            # what on_timer_fields does when no watchdog expires and every axis answers, with the
            # payloads made above (in the order of their messages), heartbeats made here
            self._timers_changed()
            for i in due:
                c = cnt[i] + 1
                cnt[i] = c
                due_t[i] = t0[i] + c * period[i]
            out = list(zip(arbs, payloads))
            for f, arb, ax in heartbeats:           # (in their order: each goes where it was due)
                out.insert(f, (arb, self._heartbeat(ax)))
            return out
        # fewer than _BC_COMPILED_MIN: made as the Python path makes them
        self._timers_changed()
        out = []
        slot_ax, cmds = self._slot_ax, self._slot_cmd
        for i in due:
            c = cnt[i] + 1
            cnt[i] = c
            due_t[i] = t0[i] + c * period[i]
            ax, cmd = slot_ax[i], cmds[i]
            if cmd == _GET_ENCODER_ESTIMATES:
                out.append(((ax.node_id << 5) | cmd, self._estimates(ax)))
            else:
                out.extend(self._answer(ax, cmd, b""))
        return out

    def _bc_payloads(self, due: tuple) -> tuple | bool:
        """The payloads of the due messages (slots of the schedule) but heartbeats, in their order,
        by one call of :func:`~drivers.sim._odrive_kernel.broadcast_payloads` (holding the lock),
        with their arbitration ids, and per heartbeat its position among the due messages, its
        arbitration id and its axis; False: not made (the Python path is taken)."""
        axes = self._axes
        # the kernel's inputs of this set of slots, found once (a run's events repeat one set;
        # forgotten when an axis gets another node id)
        bufs = self._bc.get(due)
        if bufs is None:
            slot_ax, cmds = self._slot_ax, self._slot_cmd
            if self.firmware != "0.6" and any(cmds[i] == _GET_TORQUES for i in due):
                return False
            if len(self._bc) >= _BC_SETS_KEPT:
                self._bc.clear()
            kinds = [_BC_KIND[cmds[i]] for i in due if cmds[i] != _HEARTBEAT]
            m = len(kinds)
            est = np.zeros((m, 8), dtype=np.uint8)
            arb = [(slot_ax[i].node_id << 5) | cmds[i] for i in due]
            heartbeats = [(n, arb[n], slot_ax[i]) for n, i in enumerate(due) if cmds[i] == _HEARTBEAT]
            bufs = self._bc[due] = (np.array(kinds, dtype=np.int64),
                                    np.array([slot_ax[i].index for i in due if cmds[i] != _HEARTBEAT],
                                             dtype=np.int64),
                                    est, est.view(np.float32), any(k != _ok.KIND_BC_ESTIMATES for k in kinds),
                                    [a for a, i in zip(arb, due) if cmds[i] != _HEARTBEAT], heartbeats,
                                    struct.Struct("8s" * m))
        kind, axis, est, est_f32, torques, arbs, heartbeats, split = bufs
        payloads = ()
        if kind.shape[0]:
            setpoint = self._setpoints
            if torques:
                for ax in axes.values():
                    setpoint[ax.index] = ax.setpoint_nm
            plant = self.plant
            with plant._lock:
                try:
                    if _ok.broadcast_payloads(kind, axis, self._KK, self._P, setpoint, plant._q, plant._qd,
                                              plant._tau_applied, est_f32) < 0:
                        return False
                except TypeError:       # the plant's state in arrays of another layout: the Python path
                    return False
            # each message's 8 bytes (one call)
            payloads = split.unpack(est.tobytes())
        return payloads, arbs, heartbeats

    def drop_stale_broadcasts(self, t_s: float) -> None:
        with self._lock:
            self._timers_changed()
            due, cnt, t0, period = self._due, self._cnt, self._slot_t0, self._slot_period
            for i in range(len(due)):
                if due[i] < t_s:
                    p = period[i]
                    cnt[i] = int((t_s - t0[i]) / p)
                    due[i] = t0[i] + cnt[i] * p

    # -- answers ---------------------------------------------------------------------------------
    def _reply(self, ax: _Axis, cmd: int, data: bytes) -> list[tuple[int, bytes]]:
        # odc.arbitration_id of a node id checked at construction (0..63) and a command id (0..31)
        return [((ax.node_id << 5) | cmd, data)]

    def _motor_pos_vel(self, ax: _Axis) -> tuple[float, float]:
        q, qd, _tau = self.plant.measure_joint(ax.cfg.joint)
        mp = ax.cfg.mapping
        # JointMapping.joint_to_motor_position / _velocity on floats (the same operations in the
        # same order as on its 0-d arrays: the same values), without the arrays.  The
        # firmware's estimates are float32: a value past its range saturates there (the reply
        # still goes out), it never stops the device answering
        return (_f32_saturate(mp.sign * (q - mp.offset_rad) * mp.gear_ratio / _TWO_PI + ax.pos_offset_rev),
                _f32_saturate(mp.sign * qd * mp.gear_ratio / _TWO_PI))

    def _estimates(self, ax: _Axis) -> bytes:
        """The ``Get_Encoder_Estimates`` payload of the axis now: ``encode_encoder_estimates`` of
        :meth:`_motor_pos_vel`, by one call of the compiled
        :func:`~drivers.sim._odrive_kernel.encoder_estimates` when the plant draws no sensor noise
        (the same bytes); the Python path otherwise, and for a value the kernel declines (it raises
        the proper error)."""
        quantum = ax.quantum
        if quantum is not None:
            plant = self.plant
            with plant._lock:
                try:
                    ok = _ok.encoder_estimates(ax.K, plant._q, plant._qd, ax.cfg.joint, quantum, ax.pos_offset_rev,
                                               self._est_f32)
                except TypeError:       # the plant's state in arrays of another layout: the Python path
                    ok = False
            if ok:
                return self._est.tobytes()
        return odc.encode_encoder_estimates(*self._motor_pos_vel(ax))

    def _applied_motor_torque(self, ax: _Axis) -> float:
        # JointMapping.joint_to_motor_torque of the joint's applied torque (Plant.applied_torque_nm)
        # on floats: the same operations in the same order, the same value, without the arrays
        plant = self.plant
        with plant._lock:
            tau = float(plant._tau_applied[ax.cfg.joint])
        mp = ax.cfg.mapping
        return float(mp.sign * tau / (mp.gear_ratio * mp.efficiency))

    def _heartbeat(self, ax: _Axis) -> bytes:
        if self.firmware == "0.6":
            return odc.encode_heartbeat(ax.axis_error, int(ax.state), ax.procedure_result, True)
        e = ax.axis_error
        return odc.encode_heartbeat(e, int(ax.state), trajectory_done=True, firmware="0.5",
                                    motor_error_flag=bool(e & _FLAGS_05[0]),
                                    encoder_error_flag=bool(e & _FLAGS_05[1]),
                                    controller_error_flag=bool(e & _FLAGS_05[2]))

    def _answer(self, ax: _Axis, cmd: int, data: bytes) -> list[tuple[int, bytes]]:
        """The message ``cmd`` of axis ``ax`` (cyclic broadcast or answer to a request), as
        ``(arbitration_id, data)`` pairs (no frame or one)."""
        fw06 = self.firmware == "0.6"
        if cmd == odc.Cmd.HEARTBEAT:
            return self._reply(ax, cmd, self._heartbeat(ax))
        if cmd == odc.Cmd.GET_ENCODER_ESTIMATES:
            return self._reply(ax, cmd, self._estimates(ax))
        if cmd == odc.Cmd.GET_IQ:
            return self._reply(ax, cmd, odc.encode_iq(ax.setpoint_nm / ax.kt,
                                                      self._applied_motor_torque(ax) / ax.kt))
        if cmd == odc.Cmd.GET_BUS_VOLTAGE_CURRENT:
            return self._reply(ax, cmd, odc.encode_bus_voltage_current(ax.cfg.bus_voltage_v, 0.0))
        if fw06:
            if cmd == odc.Cmd.GET_TORQUES:
                return self._reply(ax, cmd, odc.encode_torques(ax.setpoint_nm, self._applied_motor_torque(ax)))
            if cmd == odc.Cmd.GET_VERSION:
                return self._reply(ax, cmd, odc.encode_version(self.version))
            if cmd == odc.Cmd.GET_ERROR:
                return self._reply(ax, cmd, odc.encode_error_status(ax.axis_error, ax.axis_error))
            if cmd == odc.Cmd.ADDRESS:
                return self._reply(ax, cmd, odc.encode_address(ax.node_id, ax.serial))
            if cmd == odc.Cmd.GET_TEMPERATURE:
                return self._reply(ax, cmd, odc.encode_temperature(ax.cfg.temperature_c, ax.cfg.temperature_c))
            if cmd == odc.Cmd.GET_POWERS:
                mech = self._applied_motor_torque(ax) * self._motor_pos_vel(ax)[1] * _TWO_PI
                return self._reply(ax, cmd, odc.encode_powers(mech, mech))
            return []
        if cmd == odc.Cmd05.GET_ENCODER_COUNT:
            counts = self._motor_pos_vel(ax)[0] * ax.cfg.encoder_cpr
            shadow = int(max(min(round(counts), 2 ** 31 - 1), -2 ** 31))
            return self._reply(ax, cmd, odc.encode_encoder_count(shadow, shadow % ax.cfg.encoder_cpr))
        if cmd == odc.Cmd05.GET_SENSORLESS_ESTIMATES:     # the sensorless estimator is not running
            return self._reply(ax, cmd, odc.encode_encoder_estimates(0.0, 0.0))
        if cmd in (odc.Cmd05.GET_MOTOR_ERROR, odc.Cmd05.GET_ENCODER_ERROR, odc.Cmd05.GET_CONTROLLER_ERROR):
            flag = {odc.Cmd05.GET_MOTOR_ERROR: _FLAGS_05[0], odc.Cmd05.GET_ENCODER_ERROR: _FLAGS_05[1],
                    odc.Cmd05.GET_CONTROLLER_ERROR: _FLAGS_05[2]}[cmd]
            return self._reply(ax, cmd, odc.encode_error_code(1 if ax.axis_error & flag else 0))
        if cmd == odc.Cmd05.GET_SENSORLESS_ERROR:
            return self._reply(ax, cmd, odc.encode_error_code(0))
        if cmd == odc.Cmd05.GET_ADC_VOLTAGE:
            gpio = data[0] if data else 0
            return self._reply(ax, cmd, odc.encode_adc_voltage(0.0)) if gpio < _GPIO_COUNT_05 else []
        return []

    # -- frames ------------------------------------------------------------------------------------
    def on_frame(self, msg: can.Message, t_s: float) -> list[can.Message] | None:
        if msg.is_extended_id or msg.is_error_frame:
            return None
        remote = msg.is_remote_frame
        r = self._on(msg.arbitration_id, b"" if remote else bytes(msg.data), remote, t_s)
        return r if not r else [_msg(arb, data) for arb, data in r]

    #: on_fields answers as on_frame does (one path, :meth:`_on`)
    fields_native = True

    def on_fields(self, arb: int, data: bytes, remote_dlc: int | None, t_s: float) -> list[tuple[int, bytes]] | None:
        remote = remote_dlc is not None
        return self._on(arb, b"" if remote else bytes(data), remote, t_s)

    def _on(self, arb: int, data: bytes, remote: bool, t_s: float) -> list[tuple[int, bytes]] | None:
        """A classic frame with a standard id (a data frame carrying ``data``, or a remote frame)
        received at ``t_s``: the answer as ``(arbitration_id, data)`` pairs, ``None`` when it is
        not addressed to an axis here (nothing changed)."""
        node, cmd = arb >> 5, arb & 0x1F
        with self._lock:
            ax = self._axes.get(node)
            if ax is None or ax.silent:
                return None
            # what follows may change the axes' timers; a request or a Set_Input_Torque only
            # feeds the watchdog (its expiry moves later): the kept next event stays while it
            # was not this expiry
            kept = self._next_t
            if (kept is None or not (remote or cmd == _SET_INPUT_TORQUE) or not t_s >= ax.last_feed_t
                    or (ax.state == _CL and ax.cfg.watchdog_timeout_s is not None
                        and not kept < ax.last_feed_t + ax.cfg.watchdog_timeout_s)):
                self._timers_changed()
            ax.last_feed_t = t_s           # any frame for the axis feeds the watchdog
            try:
                # a cycle's frames first: the request of the estimates (both generations answer
                # it) and Set_Input_Torque (no generation's request), what _answer and _command
                # do for them
                if remote:
                    if cmd == _GET_ENCODER_ESTIMATES:
                        return [(arb, self._estimates(ax))]
                    return self._answer(ax, cmd, data) if cmd in self._rtr else []
                if cmd == _SET_INPUT_TORQUE:
                    self._set_torque(ax, odc.decode_set_input_torque(data))
                    return []
                return self._command(ax, cmd, data)
            except (DecodeError, DriverError, ValueError, OverflowError, struct.error):
                # a frame the firmware cannot read (or an answer that cannot be encoded): dropped
                self.frames_ignored += 1
                return []

    def _refresh_run_state(self) -> None:
        """The compiled run's state of every axis (``_P``) from the axes, and the axes it serves:
        those answering (not silent) whose plant draws no sensor noise (holding the lock)."""
        P = self._P
        fast = {}
        for ax in self._axes.values():
            if ax.silent or ax.quantum is None:
                continue
            r = P[ax.index]
            r[_ok.P_JOINT] = ax.cfg.joint
            r[_ok.P_QUANTUM] = ax.quantum
            r[_ok.P_ARMED] = 1.0 if ax.state == _CL and ax.control_mode == _TORQUE_CONTROL else 0.0
            r[_ok.P_TLIM], r[_ok.P_CLIM], r[_ok.P_KT] = ax.torque_lim, ax.current_limit_a, ax.kt
            r[_ok.P_VLIM] = ax.vel_limit_rev_s
            r[_ok.P_VGAIN] = ax.params.get("set_vel_gains", _VEL_GAINS_DEFAULT)[0]
            r[_ok.P_POSOFF] = ax.pos_offset_rev
            fast[ax.node_id] = ax
        self._fast_axes = fast
        self._runs.clear()          # the runs' patterns name the axes served
        self._P_ok = True

    def _run_pattern(self, key: tuple) -> tuple | None:
        """The compiled run's inputs of a run of frames with these ``(arbitration_id, remote_dlc)``
        (kinds, axes, buffers; see :meth:`on_fields_batch`), found once per pattern while the
        served axes stay (``_refresh_run_state`` forgets them); None: a frame the run does not serve."""
        pat = self._runs.get(key)
        if pat is not None:
            return pat
        fast = self._fast_axes
        kinds, rows, axes, torques = [], [], [], []
        for f, (arb, remote_dlc) in enumerate(key):
            ax = fast.get(arb >> 5)
            cmd = arb & 0x1F
            if ax is None or cmd != (_GET_ENCODER_ESTIMATES if remote_dlc is not None else _SET_INPUT_TORQUE):
                return None
            kinds.append(_ok.KIND_ESTIMATES if remote_dlc is not None else _ok.KIND_TORQUE)
            if remote_dlc is None:
                torques.append(f)
            rows.append(ax.index)
            axes.append(ax)
        m = len(key)
        if len(self._runs) >= _BC_SETS_KEPT:
            self._runs.clear()
        est = np.zeros((m, 8), dtype=np.uint8)
        pat = self._runs[key] = (np.array(kinds, dtype=np.int64), np.array(rows, dtype=np.int64), np.zeros(m),
                                 np.zeros((m, 2)), est, est.view(np.float32), axes, torques)
        return pat

    def on_fields_batch(self, frames, t_s: float) -> list[tuple[int, bytes]] | None:
        """:meth:`on_fields` of each of ``frames`` in turn, all received at ``t_s``, by one call of the
        compiled :func:`~drivers.sim._odrive_kernel.serve_frames`: the same answers, the same axes'
        state and plant command after it, for a cycle's frames (``Set_Input_Torque`` data frames
        and requests of the encoder estimates) to answering axes on a plant without sensor noise.

        Returns ``None``, having changed nothing, for anything else (another command, a frame
        the firmware would drop, an axis not served so, a stuck actuator, a torque or an estimate
        the Python path refuses): the caller serves the frames one by one (:meth:`on_fields`, the
        reference).  Only for frames that would be served at one loop time with no timed event
        due between them (:meth:`EmulatorHost.serve_fields` decides).
        """
        if self._est_f32 is None:
            return None
        plant = self.plant
        if plant._stuck:
            return None
        with self._lock:
            if not self._P_ok:
                self._refresh_run_state()
            pat = self._run_pattern(tuple([(f[0], f[2]) for f in frames]))
            if pat is None:
                return None
            kind, axis, val, res, est, est_f32, axes, torques = pat
            vals = {}
            for f in torques:
                data = frames[f][1]
                n = len(data)
                v = 0.0
                if n >= 4:
                    v = _F1.unpack_from(data)[0]
                    if not v - v == 0.0:
                        return None         # the codec's DecodeError: dropped (frames_ignored)
                elif n:
                    return None
                val[f] = vals[f] = v
            with plant._lock:
                try:
                    if _ok.serve_frames(kind, axis, val, self._KK, self._P, plant._q, plant._qd, plant._cmd, res,
                                        est_f32) < 0:
                        return None
                except TypeError:       # the plant's state in arrays of another layout: the Python path
                    return None
                if plant._pd:
                    plant._gains_updated()      # what set_joint_command does after its write
            # the axes' own state, frame by frame, as _on and _set_torque leave it
            applied = res.tolist()
            payloads = est.tobytes()
            out = []
            for f, ax in enumerate(axes):
                kept = self._next_t
                wd = ax.cfg.watchdog_timeout_s
                if (kept is None or not t_s >= ax.last_feed_t
                        or (ax.state == _CL and wd is not None and not kept < ax.last_feed_t + wd)):
                    self._timers_changed()
                ax.last_feed_t = t_s
                v = vals.get(f)
                if v is None:
                    out.append((frames[f][0], payloads[8 * f:8 * f + 8]))
                else:
                    ax.input_torque = v
                    if ax.state == _CL and ax.control_mode == _TORQUE_CONTROL:
                        ax.commands += 1
                    ax.setpoint_nm = applied[f][0]
            return out

    def _set_state(self, ax: _Axis, req: int) -> None:
        self._P_ok = False
        fw06 = self.firmware == "0.6"
        if req == odc.AxisState.UNDEFINED:
            return
        if req == _IDLE:
            self._disarm(ax)
            ax.procedure_result = int(odc.ProcedureResult.SUCCESS)
        elif req == _CL:
            if ax.axis_error:
                ax.procedure_result = int(odc.ProcedureResult.DISARMED)
                self._disarm(ax)
                return
            ax.state = _CL
            ax.procedure_result = int(odc.ProcedureResult.SUCCESS)
            self._apply(ax)
            # the mechanical brake: released in closed loop, applied when idle
            self.plant.set_brake(False, joints=[ax.cfg.joint])
        elif fw06:
            ax.procedure_result = int(odc.ProcedureResult.INVALID_STATE)
        else:
            ax.axis_error |= 0x1       # 0.5 Axis.Error INVALID_STATE
            self._disarm(ax)

    def _set_torque(self, ax: _Axis, t_m: float) -> None:
        ax.input_torque = t_m
        if ax.state == _CL and ax.control_mode == _TORQUE_CONTROL:
            ax.commands += 1
        self._apply(ax)

    def _command(self, ax: _Axis, cmd: int, data: bytes) -> list[tuple[int, bytes]]:
        self._P_ok = False          # a mode, a limit, a state, an offset, a node id...: the run's state anew
        C = odc.Cmd
        fw06 = self.firmware == "0.6"
        if not fw06 and not data and cmd in self._rtr:
            return self._answer(ax, cmd, data)          # 0.5: a 0-byte data frame is a request
        if cmd == C.SET_AXIS_STATE:
            self._set_state(ax, odc.decode_set_axis_state(data))
        elif cmd == C.SET_CONTROLLER_MODE:
            mode = odc.decode_set_controller_mode(data)
            ax.control_mode, ax.input_mode = mode.control_mode, mode.input_mode
            self._apply(ax)
        elif cmd == C.SET_INPUT_TORQUE:
            self._set_torque(ax, odc.decode_set_input_torque(data))
        elif cmd == C.SET_INPUT_VEL:
            v = odc.decode_set_input_vel(data)
            ax.params["input_vel"] = v.vel_rev_s
            self._set_torque(ax, v.torque_ff_nm)
        elif cmd == C.SET_INPUT_POS:
            p = odc.decode_set_input_pos(data)
            ax.params["input_pos"] = p.pos_rev
            self._set_torque(ax, p.torque_ff_nm)
        elif cmd == C.SET_LIMITS:
            vel, cur = odc.decode_set_limits(data)
            if vel < 0 or cur < 0:
                raise DecodeError("negative limit")
            ax.vel_limit_rev_s, ax.current_limit_a = vel, cur
            if self._plant_limit:
                self._limit_plant(ax)
            self._apply(ax)
        elif cmd == C.CLEAR_ERRORS:
            odc.decode_clear_errors(data)
            ax.axis_error = 0
            ax.procedure_result = int(odc.ProcedureResult.SUCCESS)
        elif cmd == C.ESTOP:
            ax.axis_error |= self._estop_bit
            self._disarm(ax)
        elif cmd == C.REBOOT:
            action = odc.decode_reboot(data) if fw06 else 0
            if action == 3:
                self._leave_cansimple(ax)
            elif action <= 2:
                ax.axis_error = 0
                ax.input_torque = 0.0
                self._disarm(ax)
        elif cmd in (C.SET_TRAJ_VEL_LIMIT, C.SET_TRAJ_INERTIA, C.SET_POS_GAIN):
            ax.params[C(cmd).name.lower()] = odc.decode_one_float_command(data, C(cmd).name)
        elif cmd in (C.SET_TRAJ_ACCEL_LIMITS, C.SET_VEL_GAINS):
            ax.params[C(cmd).name.lower()] = odc.decode_two_float_command(data, C(cmd).name)
        elif fw06:
            self._command_06(ax, cmd, data)
        else:
            return self._command_05(ax, cmd, data)
        return []

    def _command_06(self, ax: _Axis, cmd: int, data: bytes) -> None:
        if cmd == odc.Cmd.SET_ABSOLUTE_POSITION:
            pos = odc.decode_one_float_command(data, "Set_Absolute_Position")
            ax.pos_offset_rev += pos - self._motor_pos_vel(ax)[0]
        elif cmd == odc.Cmd.ENTER_DFU_MODE:
            self._leave_cansimple(ax)
        elif cmd == odc.Cmd.ADDRESS and len(data) >= 7:
            node, serial = odc.decode_address(data)
            if serial == ax.serial:
                self._renumber(ax, node)
        # Get_* ids as data frames, RxSdo (no endpoint table here), unknown ids: ignored

    def _command_05(self, ax: _Axis, cmd: int, data: bytes) -> list[tuple[int, bytes]]:
        if cmd in (odc.Cmd05.GET_ADC_VOLTAGE, odc.Cmd05.GET_CONTROLLER_ERROR):
            return self._answer(ax, cmd, data)          # answered on any frame
        if cmd == odc.Cmd05.SET_LINEAR_COUNT:
            count = odc.decode_set_linear_count(data)
            ax.pos_offset_rev += count / ax.cfg.encoder_cpr - self._motor_pos_vel(ax)[0]
        elif cmd == odc.Cmd05.SET_AXIS_NODE_ID:
            self._renumber(ax, odc.decode_set_axis_node_id(data))
        return []

    def _renumber(self, ax: _Axis, node: int) -> None:
        if not 0 <= node <= odc.MAX_NODE_ID or node in self._axes:
            raise DecodeError(f"node id {node} out of range or used by another emulated axis")
        del self._axes[ax.node_id]
        ax.node_id = node
        self._axes[node] = ax
        self._order_slots()         # its messages go out last now, under its new id
        self._bc.clear()

    def _leave_cansimple(self, ax: _Axis) -> None:
        ax.input_torque = 0.0
        self._disarm(ax)
        ax.silent = True
