"""Driver registry: build a :class:`~drivers.base.Driver` from the ``[driver]`` table of a config.

``DRIVER_TYPES`` maps the ``type`` key to ``"module:function"``; the module is
imported only when that type is chosen, so e.g. the simulation is never
imported for a real run.  Every builder has the signature
``build(section, *, now, transports=None) -> Driver``.

Common keys of CAN drivers (``mit_can``, ``odrive_can``)::

    [driver]
    type = "mit_can"
    reply_timeout_s = 0.002          # wall-clock wait for replies per cycle (at most 1 s)
    enable_timeout_s = 0.05          # (at most 60 s)
    drive_watchdog_s = 0.05          # optional, any driver type: the drives' own command timeout;
                                     # a loop stalled longer stops instead of resuming
    # MIT only: quantization = "nearest" (or "truncate", the reference host code's -1/2 LSB bias);
    # reply_centered = true (decode replies to the middle of the firmware's truncation step)

    [driver.bus]                     # one bus, named "default" ...
    interface = "socketcan"          # any python-can interface name
    channel = "can0"
    bitrate = 1000000                # optional
    fd = false                       # optional, with data_bitrate
    [driver.bus.options]             # optional, passed to can.Bus as-is
    receive_own_messages = false     # (must stay false: our own frames would be foreign traffic)
    # a rehearsal (udp_multicast, drivers.sim.serve): rehearsal = "NAME" instead of channel and
    # options.port: the group and port derived from NAME and the user (transport.rehearsal_address)

    # ... or several named buses:
    # [driver.buses.left]  interface = ..., channel = ...
    # [driver.buses.right] ...

    [[driver.joints]]
    bus = "left"                     # needed only with several buses
    name = "hip"
    gear_ratio = 1.0                 # motor turns per joint turn
    sign = 1
    offset_rad = 0.0
    torque_constant_nm_per_a = 0.1
    efficiency = 1.0
    # MIT: can_id = 1, model = "AK80-9" and/or [driver.joints.limits] p_max_rad = ...
    # ODrive: node_id = 0 (see drivers.odrive)

``odrive_ascii`` (ODrive ASCII protocol on a serial port) takes ``port``
(device path or pyserial URL), ``baudrate`` and ``[[driver.joints]]`` with
``axis`` (0 or 1) and the mapping keys; see :func:`drivers.odrive.build_ascii`.

``dynamixel`` (Dynamixel X series, Protocol 2.0 on a serial port, current control) takes
``port``, ``baudrate``, ``read_mode``, ``return_delay_us``, ``bus_watchdog_ms`` and
``[[driver.joints]]`` with ``id`` and ``model``; see :func:`drivers.dynamixel.build`.

``transports``: an optional mapping bus name -> already-open
:class:`~drivers.transport.CanTransport` (the simulation passes virtual
buses this way).  Buses given there need no ``bus``/``buses`` entry; buses
listed in the config but not given are opened.  The driver takes ownership of
every transport and closes them in its ``close()``.
"""

from __future__ import annotations

import importlib
from typing import Callable, Mapping

from dynamics.base import GEAR_RATIO_RANGE as _GEAR_RATIO_RANGE
from dynamics.config import Section
from dynamics.errors import CommsError, ConfigError, DriverError

from .base import Driver, JointCapability, JointMapping
from .transport import CanTransport, rehearsal_address

__all__ = ["DRIVER_TYPES", "CAPABILITIES", "build_driver", "check_driver", "open_buses", "close_buses", "joint_bus",
           "joint_mapping", "joint_capabilities", "capability_joints", "mapping_text"]

#: driver ``type`` -> "module:function" building it; other packages (the
#: simulation) add their entries here.
DRIVER_TYPES: dict[str, str] = {
    "mit_can": "drivers.mit:build",
    "odrive_can": "drivers.odrive:build",
    "odrive_ascii": "drivers.odrive:build_ascii",
    "dynamixel": "drivers.dynamixel:build",
    "sim_direct": "drivers.sim.build:build_sim_direct",
    "sim_mit_can": "drivers.sim.build:build_sim_mit_can",
    "sim_odrive_can": "drivers.sim.build:build_sim_odrive_can",
    "sim_dynamixel": "drivers.sim.dynamixel_sim:build_sim_dynamixel",
    "sim_odrive_ascii": "drivers.sim.odrive_ascii_sim:build_sim_odrive_ascii",
    "cia402_can": "drivers.cia402:build",
    "sim_cia402_can": "drivers.sim.build:build_sim_cia402_can",
}

#: protocol -> "module:function" giving each joint's :class:`~drivers.base.JointCapability` from a
#: ``[driver]`` table without opening anything (a ``sim_*`` type has its protocol's; ``sim_direct``,
#: the plant without drives, has none)
CAPABILITIES: dict[str, str] = {
    "mit_can": "drivers.mit:capabilities",
    "odrive_can": "drivers.odrive:capabilities",
    "odrive_ascii": "drivers.odrive:capabilities_ascii",
    "dynamixel": "drivers.dynamixel:capabilities",
    "cia402_can": "drivers.cia402:capabilities",
}

DEFAULT_BUS = "default"


def joint_capabilities(section: Section) -> list[JointCapability] | None:
    """What each joint's drive can deliver (torque, position and velocity ranges), read from a
    ``[driver]`` table before anything is opened or enabled; None for a driver without drives
    (``sim_direct``).

    The table is not marked read (the builder checks its keys); a bad value raises the
    builder's :class:`ConfigError` naming the file and field.
    """
    kind = Section(section.data, section.file, section.path).str("type", choices=sorted(DRIVER_TYPES))
    target = CAPABILITIES.get(kind.removeprefix("sim_"))
    if target is None:
        return None
    mod_name, _, fn_name = target.partition(":")
    return getattr(importlib.import_module(mod_name), fn_name)(section)


def capability_joints(section: Section) -> list[Section]:
    """Fresh views of a ``[driver]`` table's ``[[joints]]`` (for a ``capabilities`` function: the
    original table's read marks are left alone)."""
    view = Section(section.data, section.file, section.path)
    return view.sections("joints") if view.has("joints") else []


def mapping_text(m: JointMapping) -> str:
    """``"x gear_ratio 100 x efficiency 0.9"`` (the factors that differ from 1), for messages."""
    out = [f"gear_ratio {m.gear_ratio:g}"]
    if m.efficiency != 1.0:
        out.append(f"efficiency {m.efficiency:g}")
    return " x ".join(out)


def build_driver(section: Section, *, now: Callable[[], float],
                 transports: Mapping[str, CanTransport] | None = None, **kwargs) -> Driver:
    """Build the driver described by a ``[driver]`` table.

    Parameters
    ----------
    section : Section
        The ``[driver]`` table (errors name its file and fields).
    now : callable
        The control loop's clock [s].
    transports : mapping, optional
        Pre-opened buses by name (see module docstring).
    **kwargs
        Passed on to the builder (e.g. ``model=``/``rng=`` for simulated types).

    Raises
    ------
    ConfigError
        Unknown type or bad entries (naming file and field).
    CommsError
        A bus cannot be opened.
    """
    if not isinstance(section, Section):
        raise ConfigError(f"build_driver needs a Section, got {type(section).__name__}")
    kind = section.str("type", choices=sorted(DRIVER_TYPES))
    target = DRIVER_TYPES[kind]
    mod_name, _, fn_name = target.partition(":")
    try:
        mod = importlib.import_module(mod_name)
    except ImportError as err:
        raise section.error("type", f"driver type {kind!r} is not available ({mod_name}: {err})") from err
    fn = getattr(mod, fn_name, None)
    if fn is None:
        raise section.error("type", f"driver type {kind!r}: {target} does not exist")
    # the drives' own command timeout, where the user knows it (CubeMars "CAN timeout", an ODrive
    # axis watchdog): a stall of the loop longer than it is a stop (controller.loop)
    wd = section.float("drive_watchdog_s", None, minimum=1e-4, maximum=10.0,
                       doc="the drives' own command timeout [s] where known: a loop stalled longer "
                           "stops instead of resuming")
    driver = fn(section, now=now, transports=transports, **kwargs)
    if wd is not None:
        driver.watchdog_s = wd
    return driver


# ---------------------------------------------------------------------------
# helpers shared by the CAN builders
# ---------------------------------------------------------------------------
_BUS_KEYS = ("interface", "channel", "rehearsal", "bitrate", "fd", "data_bitrate", "options")


def _open_bus(sec: Section, name: str) -> CanTransport:
    interface, ch, bitrate, kwargs = _bus_args(sec)
    try:
        return CanTransport(interface, ch, bitrate=bitrate, name=name, **kwargs)
    except CommsError as err:
        raise CommsError(f"{sec.file or '<config>'}: field '{sec.path}': {err}") from err


_DATA_BITRATE_DOC = "fd = true: the data phase's bit rate [bit/s]"


def _bus_args(sec: Section) -> tuple:
    """A bus table's (interface, channel, bitrate, other can.Bus keywords), read and checked."""
    interface = sec.str("interface", doc="python-can interface: socketcan, pcan, kvaser, slcan, "
                                         "virtual, udp_multicast (rehearsals)...")
    ch = sec.raw("channel", None, doc="the adapter's channel (can0, PCAN_USBBUS1...)")
    if ch is not None and (isinstance(ch, bool) or not isinstance(ch, (str, int))):
        raise sec.error("channel", f"expected a string or integer, got {ch!r}")
    kwargs = {}
    if sec.has("rehearsal", doc="interface = 'udp_multicast': the rehearsal's name (drivers.sim.serve), "
                                "instead of channel and options.port"):
        # the rehearsal's own group and port (drivers.transport.rehearsal_address), as its server's
        if interface != "udp_multicast":
            raise sec.error("rehearsal", f"only with interface = \"udp_multicast\", not {interface!r}")
        if ch is not None or (sec.has("options") and "port" in sec.raw("options")):
            raise sec.error("rehearsal", "give either rehearsal or channel and options.port, not both")
        try:
            ch, kwargs["port"] = rehearsal_address(sec.str("rehearsal"))
        except DriverError as err:
            raise sec.error("rehearsal", str(err)) from err
    bitrate = sec.int("bitrate", None, minimum=1, doc="nominal bit rate [bit/s] (default: the adapter's)")
    if sec.bool("fd", False, doc="CAN FD"):
        kwargs["fd"] = True
        dbr = sec.int("data_bitrate", None, minimum=1, doc=_DATA_BITRATE_DOC)
        if dbr is not None:
            kwargs["data_bitrate"] = dbr
    elif sec.has("data_bitrate", doc=_DATA_BITRATE_DOC):
        raise sec.error("data_bitrate", "only valid with fd = true")
    if sec.has("options", doc="other keyword arguments of python-can's can.Bus, passed as they are"):
        kwargs.update(dict(sec.section("options").data))
    sec.finish()
    return interface, ch, bitrate, kwargs


def check_driver(section: Section) -> None:
    """Validate a hardware ``[driver]`` table exactly as :func:`build_driver` reads it, without
    touching any hardware: every bus table is read and checked, the driver is built on private
    virtual CAN buses (a ``loop://`` serial port for the serial drivers) and closed again.  The
    one validation ``torqueloop check`` and ``run`` share (``controller.app.run.validate_run``).

    Raises
    ------
    ConfigError
        Naming the file and the field, as the run would.
    """
    import uuid

    data = section.data
    kind = data.get("type")
    if kind in ("odrive_ascii", "dynamixel"):
        from .serial_port import SerialTransport
        transports = {"port": SerialTransport("loop://")}
    else:
        sec = Section(data, section.file, section.path)
        specs = {}
        if sec.has("bus") and not sec.has("buses"):
            specs[DEFAULT_BUS] = sec.section("bus")
        elif sec.has("buses") and not sec.has("bus"):
            bs = sec.section("buses")
            for name in bs.data:
                specs[name] = bs.section(name)
        names = list(specs) or [DEFAULT_BUS]       # their tables are read by open_buses
        transports = {n: CanTransport("virtual", f"torqueloop-check-{uuid.uuid4().hex}", name=n) for n in names}
    try:
        drv = build_driver(Section(data, section.file, section.path), now=lambda: 0.0, transports=transports)
    except BaseException:
        for t in transports.values():
            t.close()
        raise
    drv.close()


def open_buses(section: Section, transports: Mapping[str, CanTransport] | None = None) -> dict[str, CanTransport]:
    """Open the buses of a ``[driver]`` table (``bus`` or ``buses``), merged with ``transports``.

    The tables of the buses given in ``transports`` are read and checked too (not opened).

    Raises
    ------
    ConfigError
        Both ``bus`` and ``buses``, none at all, or bad entries.
    CommsError
        A bus cannot be opened (already opened ones are closed again).
    """
    given = dict(transports or {})
    for k, t in given.items():
        if not isinstance(t, CanTransport):
            raise ConfigError(f"transports[{k!r}] must be a CanTransport, got {type(t).__name__}")
    specs: dict[str, Section] = {}
    if section.has("bus") and section.has("buses"):
        raise section.error("buses", "give either [bus] or [buses.<name>], not both")
    if section.has("bus"):
        specs[DEFAULT_BUS] = section.section("bus")
    elif section.has("buses"):
        bs = section.section("buses")
        if not bs.data:
            raise section.error("buses", "no bus given")
        for name in bs.data:
            specs[name] = bs.section(name)
        bs.finish()
    if not specs and not given:
        raise section.error("bus", "a [bus] table (or [buses.<name>] tables) is required")
    opened: dict[str, CanTransport] = {}
    try:
        for name, sec in specs.items():
            if name in given:
                _bus_args(sec)      # its table is checked all the same (a misspelt key is refused)
                continue
            opened[name] = _open_bus(sec, name)
    except BaseException:
        for t in opened.values():
            t.close()
        raise
    return {**given, **opened}


def close_buses(buses: Mapping[str, CanTransport], given: Mapping[str, CanTransport] | None) -> None:
    """Close the buses that :func:`open_buses` opened (not those passed in), after a failed build."""
    keep = {id(t) for t in (given or {}).values()}
    for t in buses.values():
        if id(t) not in keep:
            t.close()


#: meaning of a joint table's ``bus`` key
BUS_DOC = "name of the bus the drive is on ([driver.buses.NAME]; needed only with several buses)"
#: meaning of a joint table's ``name`` key (every driver type)
JOINT_NAME_DOC = "the joint's name in logs and messages (default: the robot file's)"


def joint_bus(js: Section, buses: Mapping[str, CanTransport]) -> str:
    """Name of the bus a joint is on (``bus`` key; optional when there is only one bus)."""
    if len(buses) == 1 and not js.has("bus", doc=BUS_DOC):
        return next(iter(buses))
    name = js.str("bus", choices=sorted(buses), doc=BUS_DOC)
    return name


#: plausible gear ratios (motor turns per joint turn): a speed-up of 100 to a 10,000:1 reduction
#: (one range for driver tables and robot files: :data:`dynamics.base.GEAR_RATIO_RANGE`)
GEAR_RATIO_RANGE = _GEAR_RATIO_RANGE
#: plausible joint offsets [rad]: a thousand radians is 160 turns, past any encoder's zero
OFFSET_RAD_MAX = 1000.0
#: plausible motor torque constants [N m / A]
KT_RANGE = (1e-4, 100.0)


#: the joint-offset keys: ``offset_rad`` on a revolute joint, ``offset_m`` on a prismatic one
#: (the run refuses the other one, naming the right key: see :func:`offset_key`)
OFFSET_KEYS = ("offset_rad", "offset_m")
#: the keys :func:`joint_mapping` reads in every driver type's ``[[driver.joints]]``
MAPPING_KEYS = ("gear_ratio", "sign", "offset_rad", "torque_constant_nm_per_a", "efficiency")
OFFSET_DOCS = {"offset_rad": "revolute joint: joint position at motor position zero [rad]; measure it "
                             "(torqueloop bringup) before a first run",
               "offset_m": "prismatic joint: joint position at motor position zero [m]"}


def offset_key(js: Section) -> str:
    """The joint-offset key a joint table uses (``"offset_rad"``, ``"offset_m"``; "" for none).

    Raises
    ------
    ConfigError
        Both given.
    """
    given = [k for k in OFFSET_KEYS if js.has(k, doc=OFFSET_DOCS[k])]
    if len(given) > 1:
        raise js.error("offset_m", "give offset_rad (revolute joint) or offset_m (prismatic joint), not both")
    return given[0] if given else ""


def joint_mapping(js: Section, torque_constant_nm_per_a: float = 1.0) -> JointMapping:
    """Read the :class:`JointMapping` keys of a joint table.

    The joint offset (joint position at motor position zero) is ``offset_rad`` [rad] on a
    revolute joint, ``offset_m`` [m] on a prismatic one (a leg geared in rad/m); the run checks
    the key against the model's joint type (:func:`controller.app.run.validate_run`).
    ``torque_constant_nm_per_a``: the default of that key (a servo model's own)."""
    sign = js.int("sign", 1, doc="1 or -1: -1 when the motor turns the joint the other way (check "
                                 "it on the robot: torqueloop bringup)")
    if sign not in (1, -1):
        raise js.error("sign", f"must be 1 or -1, got {sign}")
    okey = offset_key(js) or "offset_rad"
    return JointMapping(
        gear_ratio=js.float("gear_ratio", 1.0, minimum=GEAR_RATIO_RANGE[0], maximum=GEAR_RATIO_RANGE[1],
                            doc="motor turns per joint turn (per metre of a prismatic joint: rad/m); "
                                "the drive's positions and torques are motor side"),
        sign=sign,
        offset_rad=js.float(okey, 0.0, minimum=-OFFSET_RAD_MAX, maximum=OFFSET_RAD_MAX, doc=OFFSET_DOCS[okey]),
        torque_constant_nm_per_a=js.float("torque_constant_nm_per_a", torque_constant_nm_per_a,
                                          minimum=KT_RANGE[0], maximum=KT_RANGE[1],
                                          doc="motor torque per phase current [N m/A] (drives "
                                              "commanded in current)"),
        efficiency=js.float("efficiency", 1.0, minimum=0.0, strict_min=True, maximum=1.0,
                            doc="gearbox efficiency: joint torque = motor torque x gear_ratio x efficiency"),
    )
