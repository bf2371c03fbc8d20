"""``sim_odrive_ascii``: the real :class:`~drivers.odrive.OdriveAsciiDriver` talking to an emulated
ODrive (firmware 0.5.6, :mod:`drivers.sim.odrive_ascii_emulator`) that drives the simulated plant,
on a pseudo-terminal or inline.

Keys: every key of ``type = "odrive_ascii"`` (``port`` is ignored: the driver opens the
emulator's pseudo-terminal, or its inline port; ``error_property`` must be ``"error"``, the
0.5 firmware's), ``[plant]`` as for the other simulated types (:mod:`drivers.sim.build`), and
``[driver.emulator]`` (``torqueloop check --explain driver.emulator``): ``serve`` (``"thread"``:
a pty answered by a thread, as a USB/UART ODrive is opened; ``"inline"``: no pty and no
thread, the driver's port is an :class:`~drivers.sim.odrive_ascii_emulator.InlineOdriveAsciiPort`),
``wire_time`` (inline: ``"wait"`` for the wall clock, ``"count"`` for the lock-step clock),
``reply_delay_s``, ``watchdog_timeout_s`` (the axes' saved ``config.watchdog_timeout`` with
``enable_watchdog``; default off), ``current_limit_a`` (the saved ``motor.config.current_lim``
before the driver writes its own), ``vbus_voltage_v``, ``poll_s`` and the planted errors of
:func:`drivers.sim.planted.device_mappings`.  The modelled wire speed is the driver's ``baudrate``.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from dynamics.base import Model
from dynamics.config import Section
from dynamics.errors import ConfigError

__all__ = ["build_sim_odrive_ascii"]


def build_sim_odrive_ascii(section: Section, *, now: Callable[[], float], transports=None,
                           model: Model | None = None, rng: np.random.Generator | None = None):
    """Registry builder of ``type = "sim_odrive_ascii"`` (see module docstring)."""
    from .. import odrive as real
    from .build import _POLL_DOC, WATCHDOG_RANGE_S, EmulatedDriver, plant_from_section
    from .planted import device_mappings
    from .odrive_ascii_emulator import OdriveAsciiAxisConfig, OdriveAsciiEmulator
    from .serial_emulator import driver_on_port, serve_keys

    if transports:
        raise section.error("type", "sim_odrive_ascii opens its own port to the emulated ODrive; do not pass "
                                    "transports")
    if section.data.get("error_property", "error") != "error":
        raise section.error("error_property", 'the emulated ODrive runs firmware 0.5.6: its axis error is "error"')
    given_errp = "error_property" in section.data
    plant = plant_from_section(section.section("plant", {}), model, now=now, rng=rng)
    emu_sec = section.section("emulator", {})
    serve, wire = serve_keys(emu_sec, "ODrive ASCII", "ODrive answers")
    delay = emu_sec.float("reply_delay_s", 1e-4, minimum=0.0, maximum=0.1,
                          doc="ODrive ASCII: from a request's last byte to its reply's first [s] (the firmware's "
                              "processing time: an assumption, not in its source)")
    wd = emu_sec.float("watchdog_timeout_s", None, minimum=WATCHDOG_RANGE_S[0], maximum=WATCHDOG_RANGE_S[1],
                       doc="ODrive ASCII: the axes' saved config.watchdog_timeout with enable_watchdog [s] "
                           "(default: off); c/v/p/q/t/u feed it")
    cur = emu_sec.float("current_limit_a", 10.0, minimum=0.0, strict_min=True, maximum=200.0,
                        doc="ODrive ASCII: the axes' saved motor.config.current_lim [A] (the firmware's 10 A), "
                            "until the driver writes its own at enable")
    vbus = emu_sec.float("vbus_voltage_v", 24.0, minimum=0.0, doc="ODrive ASCII: what vbus_voltage reads [V]")
    poll = emu_sec.float("poll_s", 0.005, minimum=0.0, strict_min=True, doc=_POLL_DOC)
    baud = section.int("baudrate", 115200, minimum=1) if section.has("baudrate") else 115200
    try:
        emu = OdriveAsciiEmulator([], plant, now, baudrate=baud, reply_delay_s=delay, serve=serve, poll_s=poll,
                                  vbus_voltage_v=vbus)
    except ConfigError as err:
        raise emu_sec.error(err.field, err.message) from err
    try:
        driver = driver_on_port(emu, section,
                                lambda sec, transports: real.build_ascii(sec, now=now, transports=transports),
                                baudrate=baud, wire_time=wire)
        if not given_errp:
            driver.error_property = "error"     # the 0.5 firmware's name, not the driver's 0.6 default
        try:
            maps = device_mappings(emu_sec, list(driver._maps))
            emu_sec.finish()
            emu.add_axes([OdriveAsciiAxisConfig(a, j, maps[j], cur, wd) for j, a in enumerate(driver._axes)])
        except ConfigError as err:
            driver.close()
            if err.file is not None:
                raise
            raise section.error("joints", str(err)) from err
    except BaseException:
        emu.close()
        raise
    if wd is not None and driver.watchdog_s is None:
        driver.watchdog_s = wd          # the emulated axes' own timeout: the loop's gap limit
    return EmulatedDriver(driver, plant, [emu], [emu], [])
