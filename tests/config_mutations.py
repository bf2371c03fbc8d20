"""Config mutations for the property-based test and the probe (issue 12, "Low").

Every leaf of a shipped run config (and of the robot file it names) is a field a user
can get wrong.  :func:`mutate` replaces one leaf by a hostile value (huge, tiny, zero,
negative, non-finite, wrong type, wrong length, missing) and :func:`classify` runs the
same validation as ``torqueloop check`` on the result:

* ``"clean"``: a :class:`ConfigError` naming the file and the field;
* ``"accepted"``: the config is valid (then every safety value is within its range);
* ``"unnamed"``: a ConfigError without file or field;
* ``"traceback"``: any other exception (what the CLI would show as a traceback).

``python -m tests.config_mutations N`` runs N seeded random mutations and prints the counts.
"""

from __future__ import annotations

import math
import sys
import tomllib
from pathlib import Path
from typing import Any

import tomli_w

ROOT = Path(__file__).resolve().parents[1]
RUN_CONFIGS = sorted((ROOT / "hil_configs" / "runs").glob("*.toml"))
HARDWARE_CONFIGS = sorted((ROOT / "hil_configs" / "hardware").glob("*.toml"))

#: hostile replacement values
VALUES: list[Any] = [1e300, -1e300, 1e-300, 0, 0.0, -1, -1.0, 1e9, 0.001, math.inf, -math.inf, math.nan,
                     "x", "", True, [], [1.0], [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0], {"a": 1}, "__delete__"]


def leaves(data: Any, prefix: tuple = ()) -> list[tuple]:
    """Paths (tuples of keys / list indices) of every scalar or list-of-scalars leaf."""
    out = []
    if isinstance(data, dict):
        for k, v in data.items():
            out += leaves(v, prefix + (k,))
    elif isinstance(data, list) and data and all(isinstance(x, dict) for x in data):
        for i, v in enumerate(data):
            out += leaves(v, prefix + (i,))
    else:
        out.append(prefix)
    return out


def _set(data, path, value):
    d = data
    for k in path[:-1]:
        d = d[k]
    if value == "__delete__":
        del d[path[-1]]
    else:
        d[path[-1]] = value


def _clean_for_toml(x):
    if isinstance(x, dict):
        return {k: _clean_for_toml(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_clean_for_toml(v) for v in x]
    return x


def mutate(config: Path, tmp: Path, leaf_index: int, value_index: int, *, robot: bool = False) -> Path:
    """Write a mutated copy of ``config`` (or of its robot file, ``robot=True``) into ``tmp``; return the run
    config path to check."""
    data = tomllib.loads(config.read_text())
    robot_path = (config.parent / data["robot"]["file"]).resolve()
    if robot:
        rdata = tomllib.loads(robot_path.read_text())
        paths = leaves(rdata)
        path = paths[leaf_index % len(paths)]
        _set(rdata, path, VALUES[value_index % len(VALUES)])
        rfile = tmp / "robot.toml"
        rfile.write_bytes(tomli_w.dumps(_clean_for_toml(rdata)).encode())
        data["robot"]["file"] = str(rfile)
    else:
        data["robot"]["file"] = str(robot_path)
        plant = data.get("driver", {}).get("plant", {})
        if isinstance(plant.get("robot"), str):
            plant["robot"] = str((config.parent / plant["robot"]).resolve())
        paths = leaves(data)
        path = paths[leaf_index % len(paths)]
        if path[:2] == ("robot", "file"):
            path = ("name",)
        _set(data, path, VALUES[value_index % len(VALUES)])
    out = tmp / config.name
    out.write_bytes(tomli_w.dumps(_clean_for_toml(data)).encode())
    return out


def classify(path: Path) -> tuple[str, str]:
    """Run ``torqueloop check``'s validation on ``path``; return (outcome, detail)."""
    from controller.app.commands import check
    from dynamics.errors import ConfigError

    try:
        check(str(path))
    except ConfigError as err:
        if err.file and (err.field or "file" in str(err).lower() or err.file.endswith(".urdf")):
            return "clean", str(err)
        return "unnamed", str(err)
    except Exception as err:  # noqa: BLE001 - that is what is being counted
        import traceback
        return "traceback", "".join(traceback.format_exception(err))[-2000:]
    return "accepted", ""


def probe(n: int, seed: int = 0) -> dict:
    import tempfile

    import numpy as np

    rng = np.random.default_rng(seed)
    counts = {"clean": 0, "accepted": 0, "unnamed": 0, "traceback": 0}
    examples: dict[str, list] = {"unnamed": [], "traceback": []}
    configs = RUN_CONFIGS + HARDWARE_CONFIGS
    for _ in range(n):
        cfg = configs[int(rng.integers(len(configs)))]
        robot = bool(rng.random() < 0.25)
        with tempfile.TemporaryDirectory() as d:
            p = mutate(cfg, Path(d), int(rng.integers(10_000)), int(rng.integers(len(VALUES))), robot=robot)
            outcome, detail = classify(p)
        counts[outcome] += 1
        if outcome in examples and len(examples[outcome]) < 5:
            examples[outcome].append((cfg.name, detail[-400:]))
    return {"counts": counts, "examples": examples}


if __name__ == "__main__":  # pragma: no cover - the probe
    import json
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 500
    print(json.dumps(probe(n), indent=1))
