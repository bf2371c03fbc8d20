"""Robot models: kinematics and dynamics, pure computation.

``load_model`` reads a robot file (TOML, or a URDF for serial arms) and returns
a :class:`~dynamics.base.Model`.  This package imports nothing from the other
torqueloop packages.
"""

from __future__ import annotations

import math
from importlib import import_module
from pathlib import Path
from typing import Any, Mapping

from ._kernel_cache import guard as _guard_kernel_caches
from .base import DriveParams, JointLimits, Model, ParallelModel, SingularityReport
from .config import Section, read_toml
from .errors import *  # noqa: F401,F403  (the error tree is part of the public API)
from .errors import ConfigError

# Before any compiled kernel can load (none of the imports above loads one; checked by
# tests/test_kernel_cache.py): numba checks each cached kernel against its own file only, so
# drop the kernels' caches when any kernel file changed (see dynamics/_kernel_cache.py).
_guard_kernel_caches()

__all__ = ["load_model", "Model", "ParallelModel", "JointLimits", "DriveParams",
           "SingularityReport", "MODEL_TYPES", "exact_model_kind"]

#: robot-file ``type`` -> "module:function" taking a Section and returning a Model.
MODEL_TYPES: dict[str, str] = {
    "serial": "dynamics.serial:load_serial",
    "planar_3rrr": "dynamics.planar3rrr:load_3rrr",
    "stewart": "dynamics.stewart:load_stewart",
    "mechanism": "dynamics.mechanism:load_mechanism",
}


def exact_model_kind(model) -> str | None:
    """The family (``"serial"``, ``"rrr"``, ``"stewart"``, ...) that ``model``'s class itself
    declares (:attr:`dynamics.base.Model.family`), else None: a subclass that does not declare
    it again (whose methods may differ from the family's compiled forms) has none.  Reads the
    class only: imports nothing (no other family's kernels)."""
    return vars(type(model)).get("family")


#: largest magnitude any physical quantity in a robot file may have (SI units: no robot has a
#: length, mass, inertia, gain or stiffness beyond this; a value past it is a typo or a unit slip).
#: A field whose loader declares its own range (a dimensionless ratio such as the Stewart
#: platform's ``singular_condition``, default 1e9) is checked against that range instead: see
#: ``FIELD_RANGES`` in the loader's module.
ROBOT_MAGNITUDE_MAX = 1e7


def _check_magnitudes(root: Section, data: Any, path: tuple = (), own: Mapping[str, Any] = {}) -> None:
    """Refuse non-finite and absurdly large numbers anywhere in a robot file, naming the field.

    ``own``: dotted field -> (lowest, highest) of the fields whose loader declares its own range
    (its ``FIELD_RANGES``); those are held to it (finite, inside), the rest to
    :data:`ROBOT_MAGNITUDE_MAX`."""
    if isinstance(data, Mapping):
        for k, v in data.items():
            _check_magnitudes(root, v, path + (str(k),), own)
    elif isinstance(data, list):
        for i, v in enumerate(data):
            if isinstance(v, (Mapping, list)):
                _check_magnitudes(root, v, path + (str(i),), own)
            elif isinstance(v, (int, float)) and not isinstance(v, bool):
                _check_number(root, path, v, own)
    elif isinstance(data, (int, float)) and not isinstance(data, bool):
        _check_number(root, path, data, own)


def _check_number(root: Section, path: tuple, v: float, own: Mapping[str, Any] = {}) -> None:
    field = ".".join(p if not p.isdigit() else f"[{p}]" for p in path).replace(".[", "[")
    lo, hi = own.get(field, (-ROBOT_MAGNITUDE_MAX, ROBOT_MAGNITUDE_MAX))
    if not math.isfinite(v) or not lo <= v <= hi:
        if field in own:
            raise root.error(field, f"must be finite and in [{lo:g}, {hi:g}], got {v!r}")
        raise root.error(field, f"must be finite with magnitude <= {ROBOT_MAGNITUDE_MAX:g} (SI units), got {v!r}")


def load_model(source: str | Path | Mapping[str, Any], *, file: str | None = None) -> Model:
    """Build a model from a robot file or an equivalent dict.

    Parameters
    ----------
    source : path or mapping
        A ``.toml`` robot file, a ``.urdf`` file (serial arms, parsed by
        Pinocchio), or the already-parsed dict of a robot file.
    file : str, optional
        Name to use in error messages when ``source`` is a dict.

    Returns
    -------
    Model

    Raises
    ------
    ConfigError
        Naming the file and the field, for any invalid or unknown entry.
    """
    if isinstance(source, Mapping):
        data, fname, base_dir = source, file, None
    else:
        path = Path(source)
        if path.suffix.lower() == ".urdf":
            from .urdf import load_urdf
            return load_urdf(path)
        data, fname, base_dir = read_toml(path), str(path), path.parent
    root = Section(data, fname)
    kind = root.str("type", choices=sorted(MODEL_TYPES))
    mod_name, func_name = MODEL_TYPES[kind].split(":")
    mod = import_module(mod_name)
    _check_magnitudes(root, data, own=getattr(mod, "FIELD_RANGES", {}))
    loader = getattr(mod, func_name)
    model = loader(root, base_dir=base_dir)
    root.finish()
    if model.source is None and fname is not None:
        model.source = fname
    return model
