"""The driver interface the control loop talks to.

A driver owns every actuator of one robot (possibly over several buses) and
exchanges one :class:`Command` for one :class:`Feedback` per control cycle.
Real drivers (MIT CAN, ODrive CAN, serial) and the simulated plant (directly,
or behind emulated devices) all implement :class:`Driver`, so the loop cannot
tell them apart.

Everything here is joint side and SI: rad, rad/s, N m (m, m/s, N for
prismatic joints).  Motor-side units and gear ratios are handled by
:class:`JointMapping` inside the drivers; protocol units only in codecs.
"""

from __future__ import annotations

import collections
import functools
import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, field

import numpy as np

from dynamics.errors import CommsError, DriverError, ForeignTrafficError, TorqueloopError

__all__ = ["Command", "Feedback", "Driver", "TransportDriver", "JointMapping", "FAULT_NONE", "check_mapping",
           "command_vector", "torque_only", "TIMEOUT_MAX_S", "Timeout", "JointCapability"]

#: fault code meaning "no fault"; other codes are driver specific (documented per driver)
FAULT_NONE = 0


#: the longest plausible wait of each driver timeout [s] (every one must be > 0): a reply a second
#: late is no reply, a drive that takes a minute to enable is broken, and a wait of 1e300 s is no
#: timeout at all (the OS's timers overflow: an OverflowError in the middle of a cycle)
TIMEOUT_MAX_S = {"reply_timeout_s": 1.0, "enable_timeout_s": 60.0, "sdo_timeout_s": 10.0}

#: the meaning of each key of a ``[driver]`` table (its own keys; those of its sub-tables are the
#: ``doc`` of the calls that read them): ``torqueloop check --explain driver`` prints it beside
#: what the builders' calls give (type, bounds, default; :mod:`controller.app.explain`)
DRIVER_KEY_DOCS = {
    "type": "the driver: --explain driver.<type>",
    "joints": "one [[driver.joints]] table per actuator, in the robot's joint order: --explain driver.joints",
    "bus": "[driver.bus]: the one CAN bus (--explain driver.bus)",
    "buses": "[driver.buses.NAME]: several CAN buses, each joint naming its own (bus = NAME)",
    "plant": "simulated drivers: the simulated robot: --explain driver.plant",
    "emulator": "simulated drivers: the emulated devices: --explain driver.emulator",
    "faults": "simulated drivers: seeded faults between driver and devices: --explain driver.faults",
    "follow": "checks that each drive follows its commands (a limp or hung motor is a fault)",
    "joint_names": "sim_direct: the joints' names in logs (default: the robot file's)",
    "reply_timeout_s": ("wall-clock wait for the drives' replies in each cycle [s]; a late reply is stale "
                        "feedback"),
    "enable_timeout_s": "how long enabling the drives may take before it is a fault [s]",
    "enable_tries": "MIT: enable commands sent to a drive before giving up",
    "quantization": ("MIT: commands rounded to the protocol's bits (nearest), or truncated as the reference host"
                     " code does (a -1/2 LSB bias)"),
    "reply_centered": "MIT: replies decoded to the middle of the firmware's truncation step",
    "reply_variant": ("MIT: reply layout: classic6 (6 bytes, no fault codes), cubemars8 (8 bytes with "
                      "temperature and error byte) or auto (detected at enable)"),
    "temperature_max_c": "MIT cubemars8: a reported temperature above this is a fault [degC]",
    "feedback": "ODrive CAN: the encoder estimates broadcast cyclically, or asked for every cycle (rtr)",
    "torque_feedback": "ODrive CAN: the measured torque from Get_Iq, from Get_Torques (firmware 0.6) or none",
    "firmware": "ODrive CAN: the drives' firmware generation (its CANSimple message set)",
    "encoder_rate_hz": ("ODrive CAN: the drives' configured encoder broadcast rate [Hz] (bus-load budget; "
                        "default: the loop rate)"),
    "heartbeat_rate_hz": "ODrive CAN: the drives' configured heartbeat rate [Hz] (bus-load budget)",
    "port": "serial port: a device path (/dev/serial/by-id/...) or a pyserial URL",
    "baudrate": "serial baud rate [bit/s], as the drives are set",
    "status_every": "read the drives' state and errors every this many cycles (0: never)",
    "error_property": "ODrive ASCII: the error property read (active_errors: firmware 0.6; error: 0.5)",
    "read_mode": "Dynamixel: how feedback is read: Fast Sync Read (one reply for all servos) or Sync Read",
    "return_delay_us": "Dynamixel: the servos' return delay time [us] (even; as set in them)",
    "bus_watchdog_ms": ("Dynamixel: the servos' bus watchdog [ms] (multiple of 20): a servo without commands "
                        "this long stops"),
    "sdo_timeout_s": "CiA 402: wait for an SDO answer during set-up [s]",
    "heartbeat_period_s": "CiA 402: the drives' heartbeat period 0x1017 [s]",
    "heartbeat_timeout_s": "CiA 402: a drive silent this long is lost (default: 3 heartbeat periods) [s]",
    "master_node_id": "CiA 402: our node id in the heartbeat the drives consume (0x1016; 0: none)",
    "master_heartbeat_period_s": "CiA 402: the period of our heartbeat [s]",
    "master_heartbeat_timeout_s": ("CiA 402: the drives run their fault reaction when our heartbeat is missing "
                                   "this long [s] (default: 3 periods)"),
    "quick_stop_option": ("CiA 402: quick stop option code 0x605A (1: slow-down ramp, 2: quick stop ramp, "
                          "then switch on disabled; 5, 6: stay in quick stop; 0: coast)"),
    "fault_reaction_option": "CiA 402: fault reaction option code 0x605E (0, 1 or 2)",
}


class Timeout:
    """A driver's timeout attribute [s], checked whenever it is set (construction or later):
    finite, > 0 and at most its :data:`TIMEOUT_MAX_S` entry, else :class:`DriverError` (the
    value is not taken).  A class attribute ``reply_timeout_s = Timeout()`` declares one."""

    def __set_name__(self, owner, name):
        self.name, self.attr = name, "_" + name
        self.maximum = TIMEOUT_MAX_S[name]

    def __get__(self, obj, owner=None):
        if obj is None:
            return self
        try:
            return obj.__dict__[self.attr]
        except KeyError:
            raise AttributeError(self.name) from None

    def __set__(self, obj, value):
        if not (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
                and 0 < value <= self.maximum):
            raise DriverError(f"{self.name} must be > 0 and <= {self.maximum:g} s, got {value!r}")
        obj.__dict__[self.attr] = float(value)


@dataclass
class Command:
    """One cycle's command for all n joints.

    Attributes
    ----------
    torque_nm : ndarray, shape (n,)
        Feed-forward joint torque [N m] (force [N] for prismatic joints).
    position_rad, velocity_rad_s : ndarray, shape (n,), optional
        Set-points for a drive-side PD (MIT protocol); ignored when kp/kd are 0.
    kp_nm_per_rad, kd_nm_s_per_rad : ndarray, shape (n,), optional
        Drive-side PD gains, joint side.  ``None`` means pure torque control.
    """

    torque_nm: np.ndarray
    position_rad: np.ndarray | None = None
    velocity_rad_s: np.ndarray | None = None
    kp_nm_per_rad: np.ndarray | None = None
    kd_nm_s_per_rad: np.ndarray | None = None

    @staticmethod
    def zero(n: int) -> "Command":
        return Command(np.zeros(n))


@dataclass
class Feedback:
    """All joints' measured state after one cycle.

    Attributes
    ----------
    t_s : float
        Time stamp of the measurement [s] on the loop's clock.
    position_rad, velocity_rad_s, torque_nm : ndarray, shape (n,)
        Measured joint position, velocity and torque (from current).
        ``velocity_rad_s`` is NaN for devices that only report positions.
    fault : ndarray of int, shape (n,)
        Device fault code per joint, ``FAULT_NONE`` (0) when healthy.
    fresh : ndarray of bool, shape (n,)
        True where a valid reply arrived in this cycle; where False the values
        are the last good ones (or NaN if there never was one).
    enabled : ndarray of bool, shape (n,)
        Whether each drive reports itself enabled (closed loop / motor mode).
    """

    t_s: float
    position_rad: np.ndarray
    velocity_rad_s: np.ndarray
    torque_nm: np.ndarray
    fault: np.ndarray
    fresh: np.ndarray
    enabled: np.ndarray
    info: dict = field(default_factory=dict)


@dataclass(frozen=True)
class JointMapping:
    """Mapping between motor side and joint side for one joint.

    joint_position = sign * motor_position / gear_ratio + offset_rad
    joint_torque   = sign * motor_torque * gear_ratio * efficiency
    motor_torque   = torque_constant_nm_per_a * current_a

    Attributes
    ----------
    gear_ratio : float
        Motor turns per joint turn (>= 1 for reducers).
    sign : int
        +1 or -1.
    offset_rad : float
        Joint position at motor position zero.
    torque_constant_nm_per_a : float
        Motor torque constant (for drives that report or take currents).
    efficiency : float
        Gear efficiency (0, 1].
    """

    gear_ratio: float = 1.0
    sign: int = 1
    offset_rad: float = 0.0
    torque_constant_nm_per_a: float = 1.0
    efficiency: float = 1.0

    # each takes a float (and returns one, computed as for an array: the same bits) or an
    # array_like (returns an array); a float skips np.asarray, which costs more than the sum
    def joint_to_motor_position(self, q):
        q = q if type(q) is float else np.asarray(q)
        return self.sign * (q - self.offset_rad) * self.gear_ratio

    def motor_to_joint_position(self, p):
        p = p if type(p) is float else np.asarray(p)
        return self.sign * p / self.gear_ratio + self.offset_rad

    def joint_to_motor_velocity(self, qd):
        qd = qd if type(qd) is float else np.asarray(qd)
        return self.sign * qd * self.gear_ratio

    def motor_to_joint_velocity(self, v):
        v = v if type(v) is float else np.asarray(v)
        return self.sign * v / self.gear_ratio

    def joint_to_motor_torque(self, tau):
        tau = tau if type(tau) is float else np.asarray(tau)
        return self.sign * tau / (self.gear_ratio * self.efficiency)

    def motor_to_joint_torque(self, t):
        t = t if type(t) is float else np.asarray(t)
        return self.sign * t * self.gear_ratio * self.efficiency


@dataclass(frozen=True)
class JointCapability:
    """What one drive can deliver to its joint, joint side and SI (known before anything is enabled).

    Each driver module computes these from its ``[driver]`` table (``capabilities(section)``,
    dispatched by :func:`drivers.registry.joint_capabilities`); the run's effective torque limit
    is the least of the robot file, ``[safety] torque_max`` and :attr:`torque_max_nm`.

    Attributes
    ----------
    torque_max_nm : float
        Largest joint torque [N m] (force [N] on a prismatic joint) the drive delivers with its
        settings (e.g. ODrive: current_limit_a x torque_constant_nm_per_a x gear_ratio x efficiency).
    torque_from : str
        How :attr:`torque_max_nm` is made, with the values (``"current_limit_a 10 A x ..."``).
    settings : tuple of str
        The config fields that change it (``"driver.joints[0].current_limit_a"``...).
    position_range : tuple of 2 float or None
        Joint positions [rad | m] the protocol's position field can carry (the motor-side field
        range through gear ratio, sign and offset); None: no bound worth checking.
    position_from : str
        The field and settings behind :attr:`position_range`.
    velocity_max : float
        Largest |joint velocity| [rad/s | m/s] the protocol's velocity field (or the drive's velocity
        limit) carries; ``inf``: no bound.
    velocity_from : str
        The field or setting behind :attr:`velocity_max`.
    offset_key : str
        The joint-offset key the table used (``"offset_rad"``, ``"offset_m"``), or "" when none.
    path : str
        The joint's table (``"driver.joints[2]"``).
    """

    torque_max_nm: float
    torque_from: str
    settings: tuple = ()
    position_range: tuple | None = None
    position_from: str = ""
    velocity_max: float = math.inf
    velocity_from: str = ""
    offset_key: str = ""
    path: str = ""


def check_mapping(mapping: JointMapping, what: str) -> None:
    """Raise :class:`DriverError` unless ``mapping`` is usable (finite, gear > 0, sign +-1, 0 < eff <= 1).

    ``what`` names the joint in the message (``"axis 1"``, ``"ID 3"``...)."""
    if not isinstance(mapping, JointMapping):
        raise DriverError(f"{what}: mapping must be a JointMapping, got {type(mapping).__name__}")
    vals = (mapping.gear_ratio, mapping.offset_rad, mapping.torque_constant_nm_per_a, mapping.efficiency)
    if not all(isinstance(v, (int, float)) and math.isfinite(v) for v in vals):
        raise DriverError(f"{what}: mapping values must be finite, got {mapping}")
    if mapping.gear_ratio <= 0 or mapping.torque_constant_nm_per_a <= 0:
        raise DriverError(f"{what}: gear_ratio and torque_constant_nm_per_a must be > 0, got {mapping}")
    if mapping.sign not in (1, -1):
        raise DriverError(f"{what}: sign must be +1 or -1, got {mapping.sign!r}")
    if not 0 < mapping.efficiency <= 1:
        raise DriverError(f"{what}: efficiency must be in (0, 1], got {mapping.efficiency!r}")


def command_vector(x, name: str, n: int) -> list[float]:
    """One field of a :class:`Command` as n finite floats (the check every driver makes of every
    value it encodes).

    Parameters
    ----------
    x : array_like, shape (n,)
    name : the field's name in the message (``"torque_nm"``).
    n : joints of the driver.

    Raises
    ------
    DriverError
        Not numbers, a shape other than (n,), or a non-finite value.
    """
    try:
        a = np.asarray(x, dtype=float)
    except (TypeError, ValueError) as err:
        raise DriverError(f"command.{name} must be {n} numbers: {err}") from err
    if a.shape != (n,):
        raise DriverError(f"command.{name} must have shape ({n},), got {a.shape}")
    lst = a.tolist()
    if not all(map(math.isfinite, lst)):
        raise DriverError(f"command.{name} holds non-finite values: {lst}")
    return lst


def torque_only(command: Command, n: int, who: str) -> list[float]:
    """The joint torques of a command for a driver that does torque control only [N m | N].

    The one check of every torque-only driver (ODrive CAN and ASCII, CiA 402 CST, Dynamixel)
    before it encodes anything: a command it refuses never reaches a motor.

    Parameters
    ----------
    command : Command
        ``torque_nm`` (n,) finite; ``kp_nm_per_rad`` / ``kd_nm_s_per_rad`` None, or (n,) finite
        and all zero (the drive has no PD of its own); set-points are ignored.
    n : int
        Joints of the driver.
    who : str
        The drive's name in the message (``"ODrive driver"``, ``"CiA 402 CST"``...).

    Returns
    -------
    list of float, length n

    Raises
    ------
    DriverError
        No torque, a wrong shape, a non-finite value, or a non-zero drive-side gain.
    """
    if command.torque_nm is None:
        raise DriverError("command.torque_nm is required")
    tau = command_vector(command.torque_nm, "torque_nm", n)
    for name in ("kp_nm_per_rad", "kd_nm_s_per_rad"):
        g = getattr(command, name)
        if g is not None and any(command_vector(g, name, n)):
            raise DriverError(f"{who} does torque control only; command.{name} must be 0 or None")
    return tau


class Driver(ABC):
    """All actuators of one robot, cycled together.

    Lifecycle: construct (opens ports/buses) -> :meth:`enable` -> repeated
    :meth:`cycle` -> :meth:`disable` -> :meth:`close`.  ``close`` is idempotent
    and also disables; the driver is a context manager that closes on exit.
    A driver never sends a non-finite command: :meth:`cycle` raises
    ``DriverError`` instead (the safety layer should have caught it first).
    """

    #: the drives' own command timeout [s] where known (``[driver] drive_watchdog_s``, an emulated
    #: drive's watchdog, a CiA 402 drive's master-heartbeat timeout), else None: a loop that stalls
    #: longer finds the drives' torque zeroed and stops rather than resuming (controller.loop)
    watchdog_s: float | None = None

    @property
    @abstractmethod
    def n_joints(self) -> int:
        """Number of joints driven."""

    @abstractmethod
    def enable(self) -> Feedback:
        """Put every drive in torque-control mode with zero torque; return first feedback."""

    @abstractmethod
    def disable(self) -> None:
        """Command zero torque and put every drive in its idle/disabled state."""

    @abstractmethod
    def cycle(self, command: Command) -> Feedback:
        """Send every joint's command in one bus cycle and return every joint's feedback."""

    @abstractmethod
    def close(self) -> None:
        """Disable (best effort) and release ports/buses; safe to call twice."""

    def fault_text(self, joint: int, code: int) -> str:
        """What ``Feedback.fault`` code ``code`` of joint ``joint`` means, for a message: the
        protocol's name of it where the driver knows one (an MIT error byte, ODrive axis error
        bits, a CiA 402 EMCY code, Dynamixel hardware error bits) or the host's own check
        (:func:`drivers.follow.host_fault_text`), always with the number."""
        from .follow import host_fault_text

        text = host_fault_text(int(code))
        return text if text is not None else f"fault code {int(code)}"

    def clear_faults(self) -> None:
        """Acknowledge the drives' latched faults after a stop, leaving them disabled; :meth:`enable`
        then brings them back (the recovery path, :meth:`controller.app.run.Run.recover`).

        The default disables every drive (an MIT drive clears its latched error when it leaves
        motor mode); protocols with a fault acknowledgement of their own override it (ODrive
        ``Clear_Errors``, CiA 402 fault reset).

        Raises
        ------
        CommsError
            The bus or port is still down.
        DriverError
            A drive keeps its fault (the cause persists).
        """
        self.disable()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


class TransportDriver(Driver):
    """A :class:`Driver` talking to its devices through transports (CAN buses, a serial port)
    that it may own: the closed state and the one close sequence of every such driver.

    A subclass sets ``self._closed = False`` and ``self._owns`` (whether it opened its
    transports, so closes them) in its constructor and lists its transports in
    :attr:`transports`.

    Its :meth:`cycle` is the moteus shape: the pure ``make_commands(command)`` (everything the
    cycle sends, encoded; it raises on a bad command, so nothing is sent then), then one
    ``_exchange(request)`` that does the I/O for every joint and returns the
    :class:`Feedback`; ``self._enabled_cmd`` (set by ``enable()``, cleared by ``disable()``)
    gates it and ``self.cycles`` counts it; :attr:`follow`, when set, checks the feedback's
    torque against the command (a fault code where the drive does not follow).  A driver whose cycle is more than that (the MIT
    driver's compiled encoder and follow check) overrides :meth:`cycle`.
    """

    reply_timeout_s = Timeout()
    enable_timeout_s = Timeout()

    #: how long :meth:`listen_before_talk` listens before the first frame [s]: a controller at
    #: 20 Hz or faster sends in that time
    listen_s = 0.05
    #: whether this driver sent anything yet (set before the first frame of ``enable()``): one that
    #: never did has nothing to disable, so a run refused before it sent leaves the bus untouched
    _touched = False

    #: payloads kept per (bus, arbitration id) sent, to tell a bus's echo of our own frames (as
    #: udp_multicast hands them back) from another controller's
    ECHO_KEEP = 8

    def _master_frame(self, bus: int, arb: int, data: bytes) -> str | None:
        """Whether a data frame (11-bit id ``arb``, payload ``data``, received on
        ``transports[bus]``) is one only a controller sends to one of our devices (a command, an
        RPDO, an SDO request, NMT): its description (``"command frames to motor id 2"``), or None.

        The one rule of "another controller talks to our devices", before the first frame
        (:meth:`_foreign`) and during the run (:meth:`_screen_master`).  A protocol on a shared
        bus overrides it; the default (a port no one else can use) sees nothing."""
        return None

    def _foreign(self, bus: int, frame: tuple) -> str | None:
        """What ``frame`` (:meth:`~drivers.transport.CanTransport.recv_fields`' fields, received
        on ``transports[bus]`` while this driver has asked nothing) says about another node
        talking to our devices: a description (``"command frames to motor id 2"``), or None.

        By default the frames of :meth:`_master_frame`; a protocol adds what its devices say
        only when someone else drives them (answers nobody of ours asked for, a drive already
        enabled)."""
        if frame[3] or frame[4] or frame[5]:     # error, remote, extended
            return None
        return self._master_frame(bus, frame[0], frame[1])

    @functools.cached_property
    def _echo(self) -> dict:
        """The payloads lately sent, per (bus index, arbitration id): deques of
        :attr:`ECHO_KEEP` (made at first use: a subclass need not call an ``__init__`` here)."""
        return {}

    @functools.cached_property
    def _foreign_seen(self) -> list:
        """Descriptions of the foreign frames :meth:`_screen_master` noted since the last
        :meth:`_foreign_found` (made at first use)."""
        return []

    def _echo_of(self, bus: int, arb: int):
        """The payloads lately sent with ``arb`` on ``transports[bus]`` (a deque the sender
        appends to: :meth:`_note_sent`)."""
        d = self._echo.get((bus, arb))
        if d is None:
            d = self._echo[(bus, arb)] = collections.deque(maxlen=self.ECHO_KEEP)
        return d

    def _note_sent(self, bus: int, arb: int, data: bytes) -> None:
        """Keep a data frame this driver sent (see :meth:`_screen_master`)."""
        self._echo_of(bus, arb).append(bytes(data))

    def _screen_master(self, bus: int, arb: int, data: bytes) -> str | None:
        """A data frame received during the run: when it is one only a controller sends to our
        devices (:meth:`_master_frame`) and not an echo of one this driver sent
        (:meth:`_note_sent`), it is noted as foreign for :meth:`_check_foreign`.  Returns
        what it was: None (not such a frame: read it as a device's), ``""`` (our own) or the
        description noted."""
        what = self._master_frame(bus, arb, data)
        if what is None:
            return None
        recent = self._echo_of(bus, arb)
        data = bytes(data)
        if data in recent:                  # our own frame, echoed by the bus
            recent.remove(data)
            return ""
        self._foreign_seen.append(what)
        return what

    def _foreign_found(self) -> list[str]:
        """What foreign traffic :meth:`_screen_master` noted since the last call (then forgotten);
        a protocol with more signs of it (the MIT driver's unasked replies) extends it."""
        seen = self._foreign_seen
        if not seen:
            return []
        what = sorted(set(seen))
        seen.clear()
        return what

    def _check_foreign(self) -> None:
        """Raise :class:`ForeignTrafficError` for the foreign traffic seen since the last check
        (:meth:`_foreign_found`): called by every cycle and at the end of ``enable()``.

        Raises
        ------
        ForeignTrafficError
            Another controller's frames for our devices (the run stops in this cycle, cause
            ``foreign_traffic``)."""
        what = self._foreign_found()
        if what:
            raise ForeignTrafficError("foreign traffic on this driver's devices: " + "; ".join(what) +
                                      " (another controller or a spoofer on the bus)")

    def _heard(self, bus: int, frame: tuple) -> None:
        """A frame received while listening that is not foreign (a device's own broadcast): a
        driver that keeps state from such frames (heartbeats) takes it here; default: dropped."""

    def listen_before_talk(self) -> None:
        """Listen :attr:`listen_s` on every bus before the first frame; refuse when another node
        talks to our devices (see :meth:`_foreign`).

        Raises
        ------
        ForeignTrafficError
            The ids are busy (a second controller, or one still running): nothing was sent, and
            :meth:`disable` sends nothing either.
        CommsError
            A bus failed.
        """
        if (type(self)._foreign is TransportDriver._foreign
                and type(self)._master_frame is TransportDriver._master_frame):
            return
        import time

        from .transport import recv_any_fields
        buses = list(self.transports)
        for b, t in enumerate(buses):   # what was queued since the bus was opened is history
            while (f := t.recv_fields(0.0)) is not None:
                self._heard(b, f)
        seen: dict[str, int] = {}

        def sort(bus: int, f: tuple) -> None:       # a foreign frame counted, any other heard
            what = self._foreign(bus, f)
            if what is not None:
                seen[what] = seen.get(what, 0) + 1
            else:
                self._heard(bus, f)

        deadline = time.monotonic() + self.listen_s
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            got = recv_any_fields(buses, remaining)
            if got is None:
                break
            sort(*got)
        # what arrived during the window but was not read in it (the process descheduled past the
        # deadline reads nothing in the loop): read now, the window counts as heard only then
        for b, t in enumerate(buses):
            for _ in range(100_000):
                f = t.recv_fields(0.0)
                if f is None:
                    break
                sort(b, f)
        if seen:
            heard = "; ".join(f"{what} ({k} frames)" for what, k in seen.items())
            raise ForeignTrafficError(
                f"the bus is busy: another node talks to this driver's devices ({heard} in "
                f"{self.listen_s * 1e3:g} ms before the first frame): a second controller, or one still "
                "running? Nothing was sent")

    #: what :meth:`disable` may raise while :meth:`close` still closes the transports (a driver
    #: whose device library raises its own errors while disabling widens it)
    _disable_errors: tuple[type[BaseException], ...] = (TorqueloopError,)
    #: the "drive follows its torque commands" check (:class:`drivers.mit_health.TorqueFollow`) of a
    #: torque-only driver that reads torque, run on every cycle's feedback; None: none
    follow = None

    def _check_open(self) -> None:
        if self._closed:
            raise DriverError("driver is closed")

    def cycle(self, command: Command) -> Feedback:
        """Send every joint's command in one bus cycle and collect the feedback (see the
        driver's module docstring for what goes on the wire).

        Raises
        ------
        DriverError
            Closed, not enabled, or a bad command (nothing is sent then).
        CommsError
            A bus or port failed.
        """
        self._check_open()
        if not self._enabled_cmd:
            raise DriverError("cycle() before enable()")
        fb = self._exchange(self._request(command))
        self.cycles += 1
        if self._foreign_seen:
            self._check_foreign()       # another controller's frames for our devices: stop now
        if self.follow is not None:
            self.follow.check(command.torque_nm, fb)
        return fb

    def _request(self, command: Command):
        """What :meth:`cycle` hands to ``_exchange``: ``make_commands(command)``, unless the
        driver has a faster form of the same frames (the ODrive CAN driver's compiled encoder)."""
        return self.make_commands(command)

    def _follow_start(self, fb: Feedback) -> Feedback:
        """Reset the follow check at enable (its filter starts at ``fb``'s torques); returns ``fb``."""
        if self.follow is not None:
            self.follow.reset(fb)
        return fb

    @property
    @abstractmethod
    def transports(self) -> tuple:
        """The buses or ports this driver talks through (objects with ``close()``), in order of
        first use."""

    def close(self) -> None:
        """Disable (best effort), then close the transports if owned.  Safe to call twice.

        The transports are closed whatever disabling raised; an error :attr:`_disable_errors`
        does not name (a bug) is raised after that.

        Raises
        ------
        CommsError
            Disabling or closing failed; raised after every transport was closed.
        """
        if self._closed:
            return
        errors: list[BaseException] = []
        try:
            try:
                self.disable()
            except self._disable_errors as err:
                errors.append(err)
        finally:
            self._closed = True
            if self._owns:
                for t in self.transports:
                    try:
                        t.close()
                    except CommsError as err:
                        errors.append(err)
        if errors:
            raise CommsError(f"{type(self).__name__}.close: {len(errors)} error(s), first: {errors[0]}") from errors[0]
