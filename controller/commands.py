"""Implementations of the CLI sub-commands (they return text/exit codes; cli.py prints)."""

from __future__ import annotations

from pathlib import Path

from dynamics import load_model
from dynamics.config import read_toml
from dynamics.errors import ConfigError

__all__ = ["check"]


def check(path: str) -> str:
    """Validate a robot file or a run config; return a human-readable report."""
    p = Path(path)
    if not p.exists():
        raise ConfigError("file not found", file=str(p))
    if p.suffix.lower() == ".urdf":
        return load_model(p).summary()
    data = read_toml(p)
    if "type" in data:  # a robot file
        return load_model(p).summary()
    from .run import check_run_config
    return check_run_config(p)
