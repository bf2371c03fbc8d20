"""Errors planted in emulated devices: the robot as built differs from its config.

``[driver.emulator]`` keys read by every emulated protocol (``sim_mit_can``, ``sim_odrive_can``,
``sim_cia402_can``, ``sim_dynamixel``), what ``torqueloop bringup`` must find::

    reversed_joints = [1]            # joint indices whose motor turns against the config's `sign`
    encoder_offset_rad = [0.0, 0.3]  # the encoder's zero is this far (joint side) from where
                                     #   `offset_rad` puts it: the driver reads q - this
    torque_factor = [1.0, 0.5]       # torque delivered per torque the drive believes it gives (a wrong
                                     #   torque constant; the reported torque follows the drive's belief,
                                     #   as a current-based measurement does)

Each device is built with its own :class:`~drivers.base.JointMapping` (sign, offset and efficiency
changed as said), the driver with the configured one.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from dynamics.config import Section
from ..base import JointMapping

__all__ = ["device_mappings", "TORQUE_FACTOR_RANGE"]


def _per_joint(sec: Section, key: str, n: int, default: float, minimum, doc: str) -> np.ndarray:
    """A float or n floats (``default`` when absent), shape (n,); ``doc``: the key's meaning."""
    if not sec.has(key, doc=doc):
        sec.raw(key, None)          # read (recorded by `check --explain driver.emulator`)
        return np.full(n, float(default))
    if isinstance(sec.raw(key), list):
        return sec.vector(key, n, minimum=minimum)
    return np.full(n, sec.float(key, minimum=minimum))


#: plausible planted torque factors (torque delivered per torque believed)
TORQUE_FACTOR_RANGE = (0.05, 20.0)


def device_mappings(emu_sec: Section, mappings: list[JointMapping]) -> list[JointMapping]:
    """The emulated devices' own joint mappings: the driver's ``mappings`` with the errors planted
    in ``[driver.emulator]`` (``reversed_joints``, ``encoder_offset_rad``, ``torque_factor``;
    module docstring), as a robot differs from its config.  Without those keys the devices
    and the driver agree.

    Parameters
    ----------
    emu_sec : Section
        The ``[driver.emulator]`` table (its planted keys are read here).
    mappings : list of JointMapping, length n
        The driver's mappings, in joint order.

    Returns
    -------
    list of JointMapping, length n
    """
    n = len(mappings)
    rev = emu_sec.raw("reversed_joints", [], doc="planted error: joints (indices) whose motor turns the "
                                                 "other way than the config says")
    if not isinstance(rev, list) or not all(isinstance(j, int) and not isinstance(j, bool) and 0 <= j < n
                                            for j in rev):
        raise emu_sec.error("reversed_joints", f"expected a list of joint indices in 0..{n - 1}, got {rev!r}")
    off = _per_joint(emu_sec, "encoder_offset_rad", n, 0.0, None,
                     "planted error: the encoders' zero off the config's offset [rad], a number or one per joint")
    if not np.all(np.abs(off) <= 100.0):
        raise emu_sec.error("encoder_offset_rad", f"must be finite and within +-100 rad, got {off.tolist()}")
    kf = _per_joint(emu_sec, "torque_factor", n, 1.0, TORQUE_FACTOR_RANGE[0],
                    "planted error: torque delivered per torque believed (a wrong torque constant), a "
                    "number or one per joint")
    if not np.all(kf <= TORQUE_FACTOR_RANGE[1]):
        raise emu_sec.error("torque_factor", f"must be in {list(TORQUE_FACTOR_RANGE)}, got {kf.tolist()}")
    return [replace(m, sign=-m.sign if j in rev else m.sign, offset_rad=m.offset_rad + float(off[j]),
                    efficiency=m.efficiency * float(kf[j]))
            for j, m in enumerate(mappings)]
