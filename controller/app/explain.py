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
import re
import uuid
from typing import Any

from dynamics.config import KeyLog, RecordingSection, near_match
from dynamics.errors import ConfigError, TorqueloopError

__all__ = ["explain", "TOPICS", "driver_keys", "run_keys", "trajectory_keys", "safety_keys", "sweep_keys"]


def _examples() -> dict[str, dict]:
    """A minimal valid ``[driver]`` table per driver type (one joint).

    The MuJoCo engine's plant keys are read only with ``engine = "mujoco"``: that example is
    :func:`_mujoco_example` (it needs a robot file the engine can write an MJCF of)."""
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
        "dynamixel": {"type": "dynamixel", "port": "loop://", "joints": [{"id": 1, "model": "XM430-W350"}]},
        "sim_odrive_ascii": {"type": "sim_odrive_ascii", "port": "/dev/null", "joints": [{"axis": 0}],
                             "plant": {}, "emulator": {"serve": "inline"}},
        "sim_dynamixel": {"type": "sim_dynamixel", "port": "/dev/null",
                          "joints": [{"id": 1, "model": "XM430-W350"}], "plant": {}},
        "cia402_can": {"type": "cia402_can", "bus": bus(),
                       "joints": [{"node_id": 1, "counts_per_rev": 131072, "rated_torque_nm": 1.0}]},
        "sim_cia402_can": {"type": "sim_cia402_can",
                           "joints": [{"node_id": 1, "counts_per_rev": 131072, "rated_torque_nm": 1.0}],
                           "plant": {}, "emulator": {}, "faults": {"seed": 1}},
    }


def _mujoco_example() -> tuple[dict, Any]:
    """A ``sim_direct`` table with the MuJoCo engine and every key only it reads, and its model
    (a two-joint serial arm of the repository's robot files; compiled once, 30 s)."""
    from dynamics import load_model

    table = {"type": "sim_direct",
             "plant": {"engine": "mujoco", "solref": [0.001, 1.0], "solimp": [0.99, 0.9999, 0.001, 0.5, 2.0],
                       "payload": {"mass_kg": 0.1}}}
    return table, load_model(_repo_file("hil_configs/robots/seed003_2r.toml"))


def _repo_file(rel: str):
    """A file of the repository the package runs from (the shipped examples)."""
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / rel
    if not path.is_file():
        raise ConfigError(f"--explain builds its examples from the repository's {rel}, not found here "
                          f"(run it from a clone of the repository)")
    return path


def record_driver(kind: str, table: dict, log: KeyLog, model=None) -> None:
    """Build driver ``table`` (of type ``kind``) through a :class:`RecordingSection` into ``log``;
    keys without a ``doc`` of their own are described by :func:`_table_docs`."""
    from drivers.registry import build_driver
    from dynamics.toy_models import Pendulum

    sec = RecordingSection(table, None, "driver", log)
    kw = {"model": model if model is not None else Pendulum(), "rng": None} if kind.startswith("sim_") else {}
    drv = build_driver(sec, now=lambda: 0.0, **kw)
    drv.close()
    for path, docs in _table_docs().items():
        for key, info in log.tables.get(path, {}).items():
            if not info.get("doc") and docs.get(key):
                info["doc"] = docs[key]


def _table_docs() -> dict[str, dict[str, str]]:
    """The meanings of keys whose table fills a documented class (``{table path: {key: text}}``):
    the ``[driver]`` table's own keys (:data:`drivers.base.DRIVER_KEY_DOCS`), ``[driver.follow]``
    (:class:`drivers.follow.FollowConfig`'s attributes) and ``[driver.faults]``
    (:class:`drivers.sim.faults.FaultInjectingBus`'s parameters)."""
    from drivers.base import DRIVER_KEY_DOCS
    from drivers.follow import FollowConfig
    from drivers.sim.faults import FaultInjectingBus

    return {"driver": DRIVER_KEY_DOCS, "driver.follow": _doc_attributes(FollowConfig),
            "driver.faults": _doc_attributes(FaultInjectingBus, "Parameters")}


def driver_keys(kind: str) -> dict[str, dict[str, dict]]:
    """Keys of every table of driver type ``kind``: ``{table path: {key: info}}``.

    Raises
    ------
    ConfigError
        ``kind`` is not registered, or has no example table to build.
    """
    from drivers.registry import DRIVER_TYPES

    examples = _examples()
    if kind not in DRIVER_TYPES:
        raise ConfigError(f"unknown driver type {kind!r} (registered: {sorted(DRIVER_TYPES)})")
    if kind not in examples:
        raise ConfigError(f"no example table to explain driver type {kind!r}; see the docstring of "
                          f"{DRIVER_TYPES[kind].split(':')[0]}")
    log = KeyLog()
    if kind.startswith("sim_"):
        # first, so that its record of the MuJoCo keys stays: every simulated type reads its
        # [driver.plant] with drivers.sim.build.plant_from_section
        table, model = _mujoco_example()
        mj = KeyLog()
        record_driver("sim_direct", table, mj, model)
        log.tables.update({p: k for p, k in mj.tables.items() if p.startswith("driver.plant")})
    record_driver(kind, examples[kind], log)
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


def _doc_attributes(cls, section: str = "Attributes") -> dict[str, str]:
    """numpydoc ``Attributes`` (or another ``section``) of a class docstring: name -> one-line
    description."""
    doc = (cls.__doc__ or "").splitlines()
    out: dict[str, str] = {}
    try:
        start = next(i for i, ln in enumerate(doc) if ln.strip() == section) + 2
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


#: a key's meaning that starts with the condition under which it is read (``corners = 'blend': ...``)
_CONDITION = re.compile(r"^(\w+ = '[^']*'): ")


def _describe(info: dict) -> str:
    """One line: the key's type, bounds, choices, and whether it is required or its default.

    A default the meaning states itself (``(default: the home pose's)``, one that depends on
    the robot or other keys) is not printed from the example; a required key whose meaning
    starts with a condition (``corners = 'blend': ...``) is required under it."""
    kind = info.get("kind", "any")
    doc = info.get("doc") or ""
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
    cond = _CONDITION.match(doc)
    if info.get("required"):
        parts.append(f"REQUIRED with {cond.group(1)}" if cond else "REQUIRED")
    elif "(default: " in doc:
        parts.append("optional")
    elif "default" in info and info["default"] is not None and info.get("kind") not in ("table", "tables"):
        parts.append(f"default {_fmt_value(info['default'])}")
    elif not info.get("required"):
        parts.append("optional")
    return "; ".join(parts)


def _table_text(title: str, keys: dict[str, dict]) -> list[str]:
    """``title``, then each key (required ones first): its type, bounds, default, and its
    meaning with the unit on the next line."""
    width = max((len(k) for k in keys), default=0)
    lines = [title]
    for k in sorted(keys, key=lambda k: (not keys[k].get("required"), k)):
        lines.append(f"  {k:<{width}}  {_describe(keys[k])}")
        if keys[k].get("doc"):
            lines.append(f"  {'':<{width}}    {keys[k]['doc']}")
    return lines


def _run_examples() -> list[dict]:
    """Minimal run configs (a two-joint serial arm of the repository, the simulated plant) that
    between them read every key of the run tables: each gain design, the real-time table."""
    robot = str(_repo_file("hil_configs/robots/seed003_2r.toml"))
    base = {"name": "explain", "description": "", "robot": {"file": robot}, "driver": {"type": "sim_direct"},
            "trajectory": {"type": "hold", "position": [0.0, 0.0], "duration_s": 1.0},
            "loop": {"duration_s": 1.0, "realtime": {"sched_fifo_priority": 10, "cpu": 0}},
            "telemetry": {}, "bringup": {}}
    controllers = [{"kind": "computed_torque", "wn_rad_s": 20.0},
                   {"kind": "pid", "kp": 10.0, "kd": 1.0, "ki": 1.0, "integral_limit": 0.1},
                   {"kind": "computed_torque", "design": "place", "poles": [-10.0, -20.0]},
                   {"kind": "computed_torque", "design": "lqr", "lqr": {"q_pos": 100.0}}]
    return [dict(base, controller=c) for c in controllers]


def run_keys() -> dict[str, dict[str, dict]]:
    """The keys of the run config's own tables (``{table path: {key: info}}``: the root,
    ``robot``, ``controller``, ``controller.lqr``, ``loop``, ``loop.realtime``, ``telemetry``),
    as :func:`controller.app.run.parse_run` reads them."""
    from .run import parse_run

    log = KeyLog()
    for data in _run_examples():
        parse_run(data, key_log=log)
    return {path: keys for path, keys in log.tables.items()
            if path.split(".")[0] in ("", "robot", "controller", "loop", "telemetry")}


def _trajectory_examples() -> list[tuple[str, dict]]:
    """``(robot, [trajectory] table)`` pairs reading every key of every trajectory type:
    ``"2r"`` (a serial arm, joint and task space), ``"3rrr"`` and ``"stewart"`` (parallel)."""
    return [
        ("2r", {"type": "point_to_point", "start": [0.0, 0.0], "target": [0.1, 0.2], "duration_s": 1.0,
                "profile": "quintic", "vmax": 10.0, "amax": 100.0, "jmax": 1000.0, "scale_to_limits": True,
                "acceleration_max": 50.0, "check_dt_s": 0.01, "check": True, "tabulate_dt_s": 0.0}),
        ("2r", {"type": "hold", "position": [0.0, 0.0], "duration_s": 1.0}),
        ("2r", {"type": "via_points", "times_s": [0.0, 1.0], "points": [[0.0, 0.0], [0.1, 0.1]],
                "kind": "cubic", "bc": "natural"}),
        ("2r", {"type": "fourier", "start": [0.0, 0.0], "a": [[0.01], [0.01]], "b": [[0.0], [0.0]],
                "period_s": 2.0, "periods": 1}),
        ("2r", {"type": "file", "path": "__FILE__", "kind": "quintic", "bc": "clamped"}),
        ("2r", {"type": "circle", "space": "task", "center": [-2.62, 2.19], "radius_m": 0.02,
                "duration_s": 1.0, "turns": 1.0, "start_angle": 0.0, "ramp_s": 0.2,
                "task_components": "xy", "q_rest": [0.3, 0.5], "q_guess": [0.3, 0.5]}),
        ("3rrr", {"type": "circle", "center": "__HOME2__", "radius_m": 0.005, "duration_s": 1.0,
                  "phi0": "__PHI__", "phi_amplitude": 0.0, "phi_cycles": 1.0}),
        ("stewart", {"type": "circle", "center": "__HOME3__", "radius_m": 0.005, "duration_s": 1.0,
                     "normal": [0.0, 0.0, 1.0], "orientation": [0.0, 0.0, 0.0]}),
        ("3rrr", {"type": "square", "start": "__HOME2__", "side_m": 0.005, "duration_s": 1.0,
                  "first_direction": [1.0, 0.0], "ccw": True, "corners": "blend", "blend_radius_m": 0.001,
                  "profile": "quintic", "ramp_s": 0.1, "phi": "__PHI__"}),
        ("3rrr", {"type": "polygon", "vertices": "__TRIANGLE__", "duration_s": 1.0, "closed": True}),
        ("3rrr", {"type": "preset", "name": "rrr_circle", "options": {"duration_s": 2.0}}),
    ]


def trajectory_tables(tmp) -> list[tuple[Any, dict]]:
    """The examples of :func:`_trajectory_examples` ready to build: ``(model, [trajectory] table)``
    with the robots' poses filled in and the ``file`` example's samples written into folder ``tmp``."""
    from pathlib import Path

    import numpy as np

    from dynamics import load_model

    files = {"2r": "seed003_2r.toml", "3rrr": "3rrr_horizontal.toml", "stewart": "stewart.toml"}
    models = {k: load_model(_repo_file(f"hil_configs/robots/{f}")) for k, f in files.items()}
    csv = Path(tmp) / "samples.csv"
    csv.write_text("t,q1,q2\n0,0,0\n0.5,0.05,0.1\n1,0.1,0.2\n")
    out = []
    for robot, table in _trajectory_examples():
        model = models[robot]
        home = np.asarray(model.home_pose, float) if hasattr(model, "home_pose") else None
        subst = {"__FILE__": str(csv)}
        if home is not None:
            subst.update({"__HOME2__": home[:2].tolist(), "__HOME3__": home[:3].tolist(), "__PHI__": float(home[2]),
                          "__TRIANGLE__": (home[:2] + np.array([[0.0, 0.0], [0.004, 0.0], [0.0, 0.004]])).tolist()})
        out.append((model, {k: subst.get(v, v) if isinstance(v, str) else v for k, v in table.items()}))
    return out


def trajectory_keys() -> dict[str, dict[str, dict]]:
    """The keys of the ``[trajectory]`` table per ``type`` (``{type: {key: info}}``; a sub-table
    as ``{type.sub: ...}``), as :func:`trajectories.load_trajectory` reads them from the examples
    of :func:`_trajectory_examples` (the shipped 2R arm, 3RRR and Stewart robot files)."""
    import tempfile
    from pathlib import Path

    from trajectories import load_trajectory

    out: dict[str, dict[str, dict]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for model, table in trajectory_tables(tmp):
            log = KeyLog()
            load_trajectory(RecordingSection(table, str(Path(tmp) / "run.toml"), "trajectory", log), model)
            kind = table["type"]
            for path, keys in log.tables.items():
                if path == "trajectory.options":
                    continue    # a preset's keyword arguments: listed per preset (_preset_text)
                name = kind if path == "trajectory" else f"{kind}.{path.split('.', 1)[1]}"
                merged = out.setdefault(name, {})
                for k, info in keys.items():
                    if k in merged and merged[k].get("length") != info.get("length"):
                        info = dict(info, length=None)      # the robot's: 2 or 3 values
                    merged.setdefault(k, {}).update(info)
    return out


def _preset_text() -> list[str]:
    """The presets and the keyword arguments each takes in ``[trajectory.options]`` (their
    signatures in :mod:`trajectories.presets`)."""
    import inspect

    from trajectories.presets import PRESETS

    def value(v):
        if isinstance(v, (tuple, list)):
            return "[" + ", ".join(f"{float(x):.4g}" if isinstance(x, (int, float)) else repr(x) for x in v) + "]"
        return _fmt_value(v)

    lines = ["  presets (name) and their [trajectory.options] with defaults (trajectories.presets):"]
    for name, fn in sorted(PRESETS.items()):
        params = inspect.signature(fn).parameters.values()
        opts = [f"{p.name}={value(p.default) if p.default is not inspect.Parameter.empty else 'REQUIRED'}"
                for p in params if p.name != "model" and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)]
        if any(p.kind == p.VAR_KEYWORD for p in params):
            opts.append(f"those of the function it calls ({fn.__module__}.{fn.__name__})")
        lines.append(f"    {name}: " + (", ".join(opts) or "(none)"))
    return lines


#: the run config's own tables (``--explain TOPIC``) and the tables :func:`run_keys` reads in each
_RUN_TOPICS = {"run": [""], "robot": ["robot"], "controller": ["controller", "controller.lqr"],
               "loop": ["loop", "loop.realtime"], "telemetry": ["telemetry"]}

#: topics of ``--explain`` (besides ``driver.<type>``)
TOPICS = ("run", "robot", "trajectory", "controller", "loop", "telemetry", "safety", "driver",
          "driver.joints", "driver.plant", "driver.emulator", "driver.faults", "driver.bus", "tune",
          "robustness")


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
    if topic in _RUN_TOPICS:
        tables = run_keys()
        lines = []
        for path in _RUN_TOPICS[topic]:
            title = "top-level keys of a run config (every other table: --explain TABLE)" if path == "" \
                else f"[{path}]"
            lines += _table_text(title, tables.get(path, {})) + [""]
        return "\n".join(lines).rstrip()
    if topic == "trajectory" or topic.startswith("trajectory."):
        per_type = trajectory_keys()
        want = topic.removeprefix("trajectory").removeprefix(".")
        if want and want not in per_type:
            raise ConfigError(f"unknown --explain topic {topic!r}; trajectory types: "
                              f"{sorted(k for k in per_type if '.' not in k)}")
        common = set.intersection(*(set(v) for k, v in per_type.items() if "." not in k))
        any_type = next(iter(per_type.values()))
        lines = []
        if not want:
            lines += _table_text("[trajectory]  keys of every type (type-specific keys: --explain "
                                 "trajectory.TYPE, listed below)", {k: any_type[k] for k in common}) + [""]
        for name, keys in per_type.items():
            if want and name != want and not name.startswith(want + "."):
                continue
            title = f"[trajectory]  type = \"{name}\"" if "." not in name else \
                f"[trajectory.{name.split('.', 1)[1]}]  (type = \"{name.split('.')[0]}\")"
            own = {k: v for k, v in keys.items() if want or k not in common or "." in name}
            lines += _table_text(title, own) + [""]
            if name == "preset":
                lines += _preset_text() + [""]
        return "\n".join(lines).rstrip()
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
        near = near_match(topic, list(TOPICS) + [f"driver.{k}" for k in DRIVER_TYPES])
        raise ConfigError(f"unknown --explain topic {topic!r}; " + (f"did you mean {near}? " if near else "")
                          + f"one of {list(TOPICS)} or driver.<type> ({', '.join(sorted(DRIVER_TYPES))})")
    lines: list[str] = []
    shown: dict[tuple, list[str]] = {}         # a table (its keys, as text) -> the types that have it
    for kind in kinds:
        try:
            tables = driver_keys(kind)
        except TorqueloopError as err:
            lines += [f"driver type {kind}: {err}", ""]
            continue
        for path in sorted(tables, key=lambda p: (p.count("."), p)):
            if sub is not None and path != sub and not path.startswith(sub + "."):
                continue
            if sub is None and topic == "driver" and path != "driver":
                continue    # the overview: the [driver] table of each type
            keys = {k: v for k, v in tables[path].items() if k != "type" or path != "driver"} \
                if sub is not None else tables[path]
            body = tuple(_table_text("", keys)[1:])
            if sub is not None and (path, body) in shown:
                shown[path, body].append(kind)      # the same table as a type shown already
                continue
            shown[path, body] = [kind]
            lines += [(path, body)] + list(body) + [""]
    out = []
    for ln in lines:
        if isinstance(ln, tuple):       # a title, with every type that has this table
            path, kinds_ = ln[0], shown[ln]
            types = ", ".join(f'"{k}"' for k in kinds_)
            ln = (f"[[driver.joints]]  (type = {types}; one table per actuator)" if path == "driver.joints"
                  else f"[{path}]  (type = {types})")
        out.append(ln)
    lines = out
    if topic == "driver":
        lines.append("sub-tables: --explain driver.joints | driver.plant | driver.emulator | driver.faults "
                     "| driver.bus, or every table of one type: --explain driver.<type>")
    return "\n".join(lines).rstrip()
