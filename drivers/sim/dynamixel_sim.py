"""``sim_dynamixel``: the real :class:`~drivers.dynamixel.DynamixelDriver` on a pseudo-terminal,
talking to emulated servos (:mod:`drivers.sim.dynamixel_emulator`) that drive the simulated plant.

Keys: every key of ``type = "dynamixel"`` (``port`` is ignored: the driver opens the
emulator's pseudo-terminal), ``[plant]`` as for the other simulated types
(:mod:`drivers.sim.build`), and optionally::

    [driver.emulator]
    supply_voltage_v = 12.0          # every servo's input voltage
    temperature_c = 35.0
    firmware_version = 52            # >= 45: Fast Sync Read supported
    poll_s = 0.005                   # idle wait of the serving thread
    # reversed_joints, encoder_offset_rad, torque_factor: errors planted in the servos
    #   (drivers.sim.build.device_mappings)

The modelled wire speed is the driver's ``baudrate``.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from dynamics.base import Model
from dynamics.config import Section
from dynamics.errors import ConfigError

from ..base import TIMEOUT_MAX_S

__all__ = ["build_sim_dynamixel"]


def build_sim_dynamixel(section: Section, *, now: Callable[[], float], transports=None,
                        model: Model | None = None, rng: np.random.Generator | None = None):
    """Registry builder of ``type = "sim_dynamixel"`` (see module docstring)."""
    from .. import dynamixel as real
    from ..serial_port import SerialTransport
    from .build import _POLL_DOC, _TEMPERATURE_DOC, EmulatedDriver, plant_from_section
    from .planted import device_mappings
    from .dynamixel_emulator import DynamixelBusEmulator, ServoConfig

    if transports:
        raise section.error("type", "sim_dynamixel opens its own pseudo-terminal; do not pass transports")
    plant = plant_from_section(section.section("plant", {}), model, now=now, rng=rng)
    emu_sec = section.section("emulator", {})
    volts = emu_sec.float("supply_voltage_v", 12.0, minimum=0.0, doc="Dynamixel: the supply voltage the servos report [V]")
    temp = emu_sec.float("temperature_c", 35.0, doc=_TEMPERATURE_DOC)
    fw = emu_sec.int("firmware_version", 52, minimum=0, maximum=255,
                     doc="Dynamixel: the firmware version the servos report")
    poll = emu_sec.float("poll_s", 0.005, minimum=0.0, strict_min=True, doc=_POLL_DOC)
    baud = section.int("baudrate", 4_000_000, minimum=1) if section.has("baudrate") else 4_000_000
    emu = DynamixelBusEmulator([], plant, now, baudrate=baud, poll_s=poll)
    try:
        rt = section.float("reply_timeout_s", 0.01, minimum=0.0, strict_min=True, maximum=TIMEOUT_MAX_S["reply_timeout_s"]) \
            if section.has("reply_timeout_s") else 0.01
        port = SerialTransport(emu.port_path, baudrate=baud, timeout_s=rt, max_line_bytes=1 << 20)
        try:
            driver = real.build(section, now=now, transports={"port": port})
        except BaseException:
            port.close()
            raise
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
