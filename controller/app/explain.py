"""Key reference of the config tables, generated from the parsers themselves.

``torqueloop check --explain TOPIC`` prints it.  Nothing here is a hand-kept list:

* ``safety``: the fields and defaults of :class:`controller.safety.SafetyConfig` (the
  dataclass ``SafetyConfig.from_section`` fills), described by its docstring;
* ``driver`` and its sub-tables (``driver.joints``, ``driver.plant``, ``driver.emulator``,
  ``driver.faults``, ``driver.bus``) or one driver type (``driver.odrive_can``): every
  registered driver type is built from a small example table through a
  :class:`dynamics.config.RecordingSection` (in-process ``virtual`` CAN buses, a
  ``loop://`` serial port, a one-joint pendulum for the simulated plant), which records
  each key the builder reads with the type, default, bounds and choices of the very call
  that validates it;
* ``tune`` and ``robustness``: the sweeps' tables, read the same way by
  :meth:`~controller.app.tune_config.TuneSpec.from_section` and
  :meth:`~controller.app.tune_config.RobustnessSpec.from_section` from an example table; their
  sub-tables of dotted config keys are described after the keys.
"""

from __future__ import annotations

import dataclasses
import math
import uuid
from typing import Any

from dynamics.config import KeyLog, RecordingSection
from dynamics.errors import ConfigError, TorqueloopError

__all__ = ["explain", "TOPICS", "driver_keys", "safety_keys", "sweep_keys"]


def _examples() -> dict[str, dict]:
    """A minimal valid ``[driver]`` table per driver type (one joint)."""
    def bus():
        return {"interface": "virtual", "channel": f"torqueloop-explain-{uuid.uuid4().hex}"}
    return {
        "mit_can": {"type": "mit_can", "bus": bus(), "joints": [{"can_id": 1, "model": "AK80-9"}]},
        "odrive_can": {"type": "odrive_can", "bus": bus(), "joints": [{"node_id": 0}]},
        "odrive_ascii": {"type": "odrive_ascii", "port": "loop://", "joints": [{"axis": 0}]},
        "sim_direct": {"type": "sim_direct", "plant": {}},
        "sim_mit_can": {"type": "sim_mit_can", "joints": [{"can_id": 1, "model": "AK80-9"}],
                        "plant": {}, "emulator": {}, "faults": {"seed": 1}},
        "sim_odrive_can": {"type": "sim_odrive_can", "joints": [{"node_id": 0}],
                           "plant": {}, "emulator": {}, "faults": {"seed": 1}},
    }


def driver_keys(kind: str) -> dict[str, dict[str, dict]]:
    """Keys of every table of driver type ``kind``: ``{table path: {key: info}}``.

    Raises
    ------
    ConfigError
        ``kind`` is not registered, or has no example table to build.
    """
    from drivers.registry import DRIVER_TYPES, build_driver
    from dynamics.toy_models import Pendulum

    examples = _examples()
    if kind not in DRIVER_TYPES:
        raise ConfigError(f"unknown driver type {kind!r} (registered: {sorted(DRIVER_TYPES)})")
    if kind not in examples:
        raise ConfigError(f"no example table to explain driver type {kind!r}; see the docstring of "
                          f"{DRIVER_TYPES[kind].split(':')[0]}")
    log = KeyLog()
    sec = RecordingSection(examples[kind], None, "driver", log)
    kw = {"model": Pendulum(), "rng": None} if kind.startswith("sim_") else {}
    drv = build_driver(sec, now=lambda: 0.0, **kw)
    drv.close()
    return log.tables


#: the sweeps' sub-tables of dotted config keys (not fixed keys: described, not listed)
_SWEEP_SUBTABLES = {
    "tune": ["[tune.params]        dotted config key -> [low, high] or [low, high, \"log\"] (searched)",
             "[tune.uncertainty]   dotted config key -> [low, high] or [low, high, \"log\"] (plant draws)",
             "(controller.app.tune; the engines: controller.app.engines)"],
    "robustness": ["[robustness.uncertainty]  dotted config key -> [low, high], [low, high, \"log\"] or "
                   "[mean, std, \"normal\"]",
                   "[robustness.tolerance]    metric -> bound (upper; lower for singularity_margin_min);"
                   " --tolerance METRIC=VALUE",
                   "(controller.app.robustness; the engines: controller.app.engines)"],
}


def sweep_keys(topic: str) -> dict[str, dict]:
    """The keys of the ``[tune]`` or ``[robustness]`` table: ``{key: info}`` as their parser reads them."""
    from .tune_config import RobustnessSpec, TuneSpec

    log = KeyLog()
    if topic == "tune":
        TuneSpec.from_section(RecordingSection({"params": {"controller.wn_rad_s": [10.0, 80.0]}}, None, "tune", log))
    else:
        RobustnessSpec.from_section(RecordingSection({}, None, "robustness", log))
    return log.tables.get(topic, {})


def _doc_attributes(cls) -> dict[str, str]:
    """numpydoc ``Attributes`` of a class docstring: name -> one-line description."""
    doc = (cls.__doc__ or "").splitlines()
    out: dict[str, str] = {}
    try:
        start = next(i for i, ln in enumerate(doc) if ln.strip() == "Attributes") + 2
    except StopIteration:
        return out
    names: list[str] = []
    for ln in doc[start:]:
        if not ln.strip():
            continue
        if ln.startswith("    ") and not ln.startswith("        "):
            names = [n.strip() for n in ln.split(":")[0].split(",")]
            for n in names:
                out[n] = ""
        elif ln.startswith("        "):
            for n in names:
                out[n] = (out[n] + " " + ln.strip()).strip()
        else:
            break
    return out


def safety_keys() -> dict[str, dict]:
    """The ``[safety]`` keys: ``{key: {"default": ..., "doc": ...}}`` from SafetyConfig."""
    from ..safety import REACTIONS, SafetyConfig

    docs = {k: v.replace(":data:`REACTIONS`", ", ".join(repr(r) for r in REACTIONS))
            for k, v in _doc_attributes(SafetyConfig).items()}
    out = {}
    for f in dataclasses.fields(SafetyConfig):
        out[f.name] = {"default": f.default, "doc": docs.get(f.name, "")}
    return out


def _fmt_value(v: Any) -> str:
    if isinstance(v, float) and math.isinf(v):
        return "inf (off)" if v > 0 else "-inf"
    if isinstance(v, str):
        return repr(v)
    if v is None:
        return "none"
    return str(v)


def _describe(info: dict) -> str:
    kind = info.get("kind", "any")
    parts = [{"tables": "array of tables", "any": "value"}.get(kind, kind)]
    if "length" in info and info["length"] is not None:
        # the examples have one joint: a length of 1 is "one value per joint"
        parts[0] += " (one per joint)" if info["length"] == 1 else f" [{info['length']}]"
    lo, hi = info.get("minimum"), info.get("maximum")
    if lo is not None or hi is not None:
        op = ">" if info.get("strict_min") else ">="
        if lo is not None and hi is not None:
            parts.append(f"{lo} .. {hi}" if not info.get("strict_min") else f"{op} {lo}, <= {hi}")
        elif lo is not None:
            parts.append(f"{op} {lo}")
        else:
            parts.append(f"<= {hi}")
    if info.get("choices"):
        parts.append("one of " + ", ".join(repr(c) for c in info["choices"]))
    if info.get("required"):
        parts.append("REQUIRED")
    elif "default" in info and info["default"] is not None and info.get("kind") not in ("table", "tables"):
        parts.append(f"default {_fmt_value(info['default'])}")
    elif not info.get("required"):
        parts.append("optional")
    return "; ".join(parts)


def _table_text(title: str, keys: dict[str, dict]) -> list[str]:
    width = max((len(k) for k in keys), default=0)
    lines = [title]
    for k in sorted(keys, key=lambda k: (not keys[k].get("required"), k)):
        lines.append(f"  {k:<{width}}  {_describe(keys[k])}")
    return lines


#: topics of ``--explain`` (besides ``driver.<type>``)
TOPICS = ("safety", "driver", "driver.joints", "driver.plant", "driver.emulator", "driver.faults",
          "driver.bus", "tune", "robustness")


def explain(topic: str) -> str:
    """The key reference of ``topic`` (see :data:`TOPICS`; also ``driver.<type>``).

    Raises
    ------
    ConfigError
        Unknown topic.
    """
    from drivers.registry import DRIVER_TYPES

    topic = topic.strip().removeprefix("[").removesuffix("]")
    if topic == "plant":
        topic = "driver.plant"
    if topic == "safety":
        lines = ["[safety] keys (controller.safety.SafetyConfig; scalars apply to every joint,",
                 " lists give one value per joint; 'none' = the robot file's limit):"]
        keys = safety_keys()
        width = max(len(k) for k in keys)
        for k, v in keys.items():
            lines.append(f"  {k:<{width}}  default {_fmt_value(v['default'])}")
            if v["doc"]:
                lines.append(f"  {'':<{width}}    {v['doc']}")
        return "\n".join(lines)
    if topic in _SWEEP_SUBTABLES:
        return "\n".join(_table_text(f"[{topic}]", sweep_keys(topic)) + [""] + _SWEEP_SUBTABLES[topic])
    if topic == "driver" or topic in DRIVER_TYPES or topic.removeprefix("driver.") in DRIVER_TYPES:
        kinds = [topic.removeprefix("driver.")] if topic != "driver" else list(DRIVER_TYPES)
        sub = None
    elif topic.startswith("driver.") and topic in TOPICS:
        kinds, sub = list(DRIVER_TYPES), topic
    else:
        raise ConfigError(f"unknown --explain topic {topic!r}; one of {list(TOPICS)} or "
                          f"driver.<type> ({', '.join(sorted(DRIVER_TYPES))})")
    lines: list[str] = []
    for kind in kinds:
        try:
            tables = driver_keys(kind)
        except TorqueloopError as err:
            lines += [f"driver type {kind}: {err}", ""]
            continue
        for path in sorted(tables, key=lambda p: (p.count("."), p)):
            if sub is not None and path != sub:
                continue
            if sub is None and topic == "driver" and path != "driver":
                continue    # the overview: the [driver] table of each type
            title = f"[{path}]  (type = \"{kind}\")"
            if path == "driver.joints":
                title = f"[[driver.joints]]  (type = \"{kind}\"; one table per actuator)"
            lines += _table_text(title, tables[path]) + [""]
    if topic == "driver":
        lines.append("sub-tables: --explain driver.joints | driver.plant | driver.emulator | driver.faults "
                     "| driver.bus, or every table of one type: --explain driver.<type>")
    return "\n".join(lines).rstrip()
