"""Robot models: kinematics and dynamics, pure computation.

``load_model`` reads a robot file (TOML, or a URDF for serial arms) and returns
a :class:`~dynamics.base.Model`.  This package imports nothing from the other
torqueloop packages.
"""

from __future__ import annotations

from importlib import import_module
from pathlib import Path
from typing import Any, Mapping

from .base import DriveParams, JointLimits, Model, ParallelModel, SingularityReport
from .config import Section, read_toml
from .errors import *  # noqa: F401,F403  (the error tree is part of the public API)
from .errors import ConfigError

__all__ = ["load_model", "Model", "ParallelModel", "JointLimits", "DriveParams",
           "SingularityReport", "MODEL_TYPES"]

#: robot-file ``type`` -> "module:function" taking a Section and returning a Model.
MODEL_TYPES: dict[str, str] = {
    "serial": "dynamics.serial:load_serial",
    "planar_3rrr": "dynamics.planar3rrr:load_3rrr",
    "stewart": "dynamics.stewart:load_stewart",
}


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
    loader = getattr(import_module(mod_name), func_name)
    model = loader(root, base_dir=base_dir)
    root.finish()
    if model.source is None and fname is not None:
        model.source = fname
    return model
