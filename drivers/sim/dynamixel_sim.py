"""``sim_dynamixel``: the real :class:`~drivers.dynamixel.DynamixelDriver` talking to emulated servos
(:mod:`drivers.sim.dynamixel_emulator`) that drive the simulated plant, on a pseudo-terminal or inline.

Keys: every key of ``type = "dynamixel"`` (``port`` is ignored: the driver opens the
emulator's pseudo-terminal, or its inline port), ``[plant]`` as for the other simulated types
(:mod:`drivers.sim.build`), and optionally::

    [driver.emulator]
    serve = "thread"                 # or "inline"
    wire_time = "wait"               # inline only: or "count"
    supply_voltage_v = 12.0          # every servo's input voltage
    temperature_c = 35.0
    firmware_version = 52            # >= 45: Fast Sync Read supported
    poll_s = 0.005                   # idle wait of the serving thread
    # reversed_joints, encoder_offset_rad, torque_factor: errors planted in the servos
    #   (drivers.sim.build.device_mappings)

``serve = "thread"``: the servos answer on a pseudo-terminal from their own thread (the driver's
:class:`~drivers.serial_port.SerialTransport` opens it like a U2D2).  ``serve = "inline"``: no
pseudo-terminal and no thread; the driver's port is an
:class:`~drivers.sim.dynamixel_emulator.InlineDynamixelPort` whose writes the servos handle in the
driver's thread (the same bytes, the same firmware, the same reply schedule on the modelled wire),
and ``wire_time`` says whether its reads wait for the wire in wall-clock time (``"wait"``, as the
pseudo-terminal does: for the wall clock) or count it (``"count"``: the same answers and
timeouts without the wait, for the lock-step clock).  A run on the lock-step clock serves inline
with the wire time counted unless the config says otherwise
(:func:`controller.app.run.sim_driver_section`): the same results as the thread, several times
faster.

The modelled wire speed is the driver's ``baudrate``.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from dynamics.base import Model
from dynamics.config import Section
from dynamics.errors import ConfigError

__all__ = ["build_sim_dynamixel"]


def build_sim_dynamixel(section: Section, *, now: Callable[[], float], transports=None,
                        model: Model | None = None, rng: np.random.Generator | None = None):
    """Registry builder of ``type = "sim_dynamixel"`` (see module docstring)."""
    from .. import dynamixel as real
    from .build import _POLL_DOC, _TEMPERATURE_DOC, EmulatedDriver, plant_from_section
    from .planted import device_mappings
    from .dynamixel_emulator import DynamixelBusEmulator, ServoConfig
    from .serial_emulator import driver_on_port, serve_keys

    if transports:
        raise section.error("type", "sim_dynamixel opens its own port to the emulated servos; do not pass transports")
    plant = plant_from_section(section.section("plant", {}), model, now=now, rng=rng)
    emu_sec = section.section("emulator", {})
    volts = emu_sec.float("supply_voltage_v", 12.0, minimum=0.0, doc="Dynamixel: the supply voltage the servos report [V]")
    temp = emu_sec.float("temperature_c", 35.0, doc=_TEMPERATURE_DOC)
    fw = emu_sec.int("firmware_version", 52, minimum=0, maximum=255,
                     doc="Dynamixel: the firmware version the servos report")
    poll = emu_sec.float("poll_s", 0.005, minimum=0.0, strict_min=True, doc=_POLL_DOC)
    serve, wire = serve_keys(emu_sec, "Dynamixel", "servos answer")
    baud = section.int("baudrate", 4_000_000, minimum=1) if section.has("baudrate") else 4_000_000
    emu = DynamixelBusEmulator([], plant, now, baudrate=baud, poll_s=poll, serve=serve)
    try:
        driver = driver_on_port(emu, section, lambda sec, transports: real.build(sec, now=now, transports=transports),
                                baudrate=baud, wire_time=wire, max_line_bytes=1 << 20)
        try:
            maps = device_mappings(emu_sec, [s.mapping for s in driver.servos])
            emu_sec.finish()
        except ConfigError:
            driver.close()
            raise
        try:
            emu.add_servos([ServoConfig(s.dxl_id, j, s.model, maps[j], fw, volts, temp)
                            for j, s in enumerate(driver.servos)])
        except ConfigError as err:
            driver.close()
            raise section.error("joints", str(err)) from err
    except BaseException:
        emu.close()
        raise
    return EmulatedDriver(driver, plant, [emu], [emu], [])
