"""The simulated side of torqueloop: plant, direct backend, device emulators, faults.

:class:`~drivers.sim.plant.SimulatedPlant`
    Fixed-step integration of a dynamics model with friction, saturation,
    current-loop lag, encoder quantisation and seeded sensor noise.
:class:`~drivers.sim.direct.DirectPlantDriver`
    The fastest :class:`~drivers.base.Driver`: commands go straight to the plant.
:mod:`drivers.sim.emulators`
    MIT and ODrive CAN devices on a python-can bus, served by
    :class:`~drivers.sim.emulators.EmulatorHost`, so the real drivers can run
    against the plant.
:class:`~drivers.sim.faults.FaultInjectingBus`
    Seeded drop / delay / duplicate / reorder / corrupt / bus-off faults.
:mod:`drivers.sim.serve`
    ``python -m drivers.sim.serve CONFIG``: emulators in a separate process on
    ``udp_multicast``.

The ``sim_*`` driver types are
registered in :data:`drivers.registry.DRIVER_TYPES`; :func:`build_simulated`
builds any of them directly.  Configuration keys: :mod:`drivers.sim.build`.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from dynamics.base import Model
from dynamics.config import Section
from dynamics.errors import ConfigError

from ..registry import DRIVER_TYPES
from .direct import DirectPlantDriver
from .plant import Plant, PlantState, SimulatedPlant

__all__ = ["Plant", "SimulatedPlant", "PlantState", "DirectPlantDriver", "build_simulated", "SIM_TYPES"]

#: simulated driver type -> "module:builder" (the ``sim_*`` entries of the one registry,
#: :data:`drivers.registry.DRIVER_TYPES`; imported when chosen)
SIM_TYPES = {k: v for k, v in DRIVER_TYPES.items() if k.startswith("sim_")}


def build_simulated(section: Section, *, model: Model, now: Callable[[], float],
                    rng: np.random.Generator | None = None):
    """Build a simulated driver from a ``[driver]`` table whose ``type`` is a ``sim_*`` type.

    Parameters
    ----------
    section : Section
        The ``[driver]`` table.
    model : Model
        The controller's model (the plant is a scaled copy, see
        :func:`drivers.sim.build.plant_from_section`).
    now : callable
        The loop's clock [s].
    rng : numpy.random.Generator, optional
        Noise / fault source when the tables give no ``seed``.

    Returns
    -------
    Driver
        ``DirectPlantDriver`` or :class:`~drivers.sim.build.EmulatedDriver`.
    """
    from importlib import import_module
    kind = section.str("type", choices=sorted(SIM_TYPES))
    if not isinstance(model, Model):
        raise ConfigError("a dynamics.Model is required to simulate", section.file, section.path or None)
    module, func = SIM_TYPES[kind].split(":")
    return getattr(import_module(module), func)(section, now=now, model=model, rng=rng)
