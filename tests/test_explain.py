"""`torqueloop check --explain`: the key reference is what the parsers accept, read from them."""

from __future__ import annotations

import ast
import copy
import dataclasses
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from controller.app.explain import (_examples, _mujoco_example, _run_examples, driver_keys, explain, run_keys,
                                    safety_keys, trajectory_keys, trajectory_tables)
from controller.safety import SafetyConfig
from drivers.registry import DRIVER_TYPES, build_driver
from dynamics.toy_models import Pendulum
from dynamics.config import RecordingSection, Section
from dynamics.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]


def _with_unknown_key(example: dict, table: str, root: str) -> dict:
    """A copy of ``example`` (the table ``root``) with an unknown key in its sub-table ``table``."""
    data = copy.deepcopy(example)
    node = data
    for part in [p for p in table.split(".") if p][len(root.split(".")) if root else 0:]:
        node = node.setdefault(part, {})      # an optional table the example leaves out
        node = node[0] if isinstance(node, list) else node
    node["zz_not_a_key"] = 1
    return data


def _listed(err: ConfigError) -> set[str]:
    """The keys a refusal of ``zz_not_a_key`` lists as allowed."""
    assert err.field.endswith("zz_not_a_key"), str(err)
    return set(ast.literal_eval(re.search(r"allowed here: (\[.*\])", str(err)).group(1)))


def _allowed_by_parser(kind: str, table: str) -> set[str]:
    """Put an unknown key into ``table`` of the example and read the parser's 'allowed here' list
    (the plant's tables: of the MuJoCo example, which reads every key the numba one does and more)."""
    example, model = (_mujoco_example() if table.startswith("driver.plant") else (_examples()[kind], Pendulum()))
    if table.startswith("driver.plant"):
        kind = "sim_direct"
    data = _with_unknown_key(example, table, "driver")
    kw = {"model": model, "rng": None} if kind.startswith("sim_") else {}
    with pytest.raises(ConfigError) as ei:
        drv = build_driver(Section(data, "x.toml", "driver"), now=lambda: 0.0, **kw)
        drv.close()
    return _listed(ei.value)


@pytest.mark.parametrize("kind", sorted(_examples()))
def test_explained_keys_are_exactly_what_the_parser_accepts(kind):
    tables = driver_keys(kind)
    assert "driver" in tables and "driver.joints" in tables or kind == "sim_direct"
    for table, keys in tables.items():
        if table in ("driver.bus", "driver.buses"):
            continue        # _open_bus reads its table before the joints; checked below
        assert set(keys) == _allowed_by_parser(kind, table), table


def test_explained_defaults_and_choices_come_from_the_parser():
    t = driver_keys("odrive_can")
    fb = t["driver"]["feedback"]
    assert fb["choices"] == ["broadcast", "rtr"] and fb["default"] == "broadcast"
    assert t["driver.joints"]["node_id"]["required"] and t["driver.joints"]["node_id"]["maximum"] == 63
    plant = driver_keys("sim_direct")["driver.plant"]
    assert plant["brakes"]["default"] is True and "brake_torque_nm" in plant
    # a table built with every explained plant key at its default is accepted
    vals = {k: v["default"] for k, v in plant.items() if v.get("default") is not None}
    sec = Section({"type": "sim_direct", "plant": vals}, "x.toml", "driver")
    build_driver(sec, now=lambda: 0.0, model=Pendulum(), rng=None).close()


def test_safety_reference_is_the_config_dataclass():
    keys = safety_keys()
    assert list(keys) == [f.name for f in dataclasses.fields(SafetyConfig)]
    assert keys["stale_cycles"]["default"] == SafetyConfig().stale_cycles
    text = explain("safety")
    for name in keys:
        assert f"  {name} " in text
    assert "'brake_disable'" in text and "(None: off" in text


def test_recording_section_marks_optional_alternatives():
    log_sec = RecordingSection({"b": 2}, "x.toml", "t")
    if log_sec.has("a"):
        log_sec.float("a")
    log_sec.int("b", minimum=1)
    log_sec.str("c", "x", choices=["x", "y"])
    t = log_sec.log.tables["t"]
    assert t["a"]["required"] is False and t["b"]["required"] is True and t["b"]["minimum"] == 1
    assert t["c"] == {"kind": "string", "required": False, "choices": ["x", "y"], "default": "x"}


def test_cli_explain():
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    def tl(*a):
        return subprocess.run([sys.executable, "-m", "controller.app.cli", *a], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=120)
    r = tl("check", "--explain", "driver.joints")
    assert r.returncode == 0, r.stderr
    for kinds in ('"mit_can", "sim_mit_can"', '"odrive_can", "sim_odrive_can"',
                  '"odrive_ascii", "sim_odrive_ascii"', '"dynamixel", "sim_dynamixel"',
                  '"cia402_can", "sim_cia402_can"'):
        assert f'(type = {kinds}; one table per actuator)' in r.stdout
    assert "node_id" in r.stdout and "can_id" in r.stdout and "axis" in r.stdout
    r = tl("check", "--explain", "bogus")
    assert r.returncode == 2 and "unknown --explain topic" in r.stderr
    r = tl("check", "--explain", "trajectori")
    assert r.returncode == 2 and "did you mean 'trajectory'?" in r.stderr
    assert set(DRIVER_TYPES) >= set(_examples())


def test_the_sweep_tables_are_explained_from_their_parsers():
    """``--explain tune`` / ``robustness`` list every field of the specs their tables fill."""
    import dataclasses

    from controller.app.explain import explain, sweep_keys
    from controller.app.tune_config import RobustnessSpec, TuneSpec

    for topic, cls in (("tune", TuneSpec), ("robustness", RobustnessSpec)):
        keys = sweep_keys(topic)
        assert set(keys) == {f.name for f in dataclasses.fields(cls)}, topic
        text = explain(topic)
        assert f"[{topic}]" in text and "samples" in explain("robustness")
    assert "one of 'auto', 'batch', 'dask', 'local', 'ray'" in explain("robustness")


def test_run_tables_are_explained_as_parse_run_reads_them():
    """``--explain run | robot | controller | loop | telemetry``: for every table, the keys listed
    are the union of what parse_run accepts there over the examples (each gain design)."""
    from controller.app.run import parse_run

    tables = run_keys()
    assert {"", "robot", "controller", "controller.lqr", "loop", "loop.realtime", "telemetry"} <= set(tables)
    for table, keys in tables.items():
        allowed: set[str] = set()
        for example in _run_examples():
            if table == "controller.lqr" and "lqr" not in example["controller"]:
                continue
            with pytest.raises(ConfigError) as ei:
                parse_run(_with_unknown_key(example, table, ""), file="x.toml")
            allowed |= _listed(ei.value)
        assert set(keys) == allowed, table


def test_trajectory_types_are_explained_as_load_trajectory_reads_them(tmp_path):
    """``--explain trajectory``: every type, its keys the union of what load_trajectory accepts
    over the examples (the 2R arm, the 3RRR and the Stewart platform)."""
    from trajectories import TRAJECTORY_TYPES, load_trajectory

    per_type = trajectory_keys()
    assert set(TRAJECTORY_TYPES) <= set(per_type)
    allowed: dict[str, set] = {}
    for model, table in trajectory_tables(tmp_path):
        with pytest.raises(ConfigError) as ei:
            load_trajectory(Section(_with_unknown_key(table, "trajectory", "trajectory"), str(tmp_path / "r.toml"),
                                    "trajectory"), model)
        allowed.setdefault(table["type"], set()).update(_listed(ei.value))
    for kind, keys in allowed.items():
        assert set(per_type[kind]) == keys, kind
    text = explain("trajectory")
    for kind in TRAJECTORY_TYPES:
        assert f'type = "{kind}"' in text
    assert "REQUIRED with corners = 'blend'" in explain("trajectory.square")


def test_every_explained_key_says_what_it_is():
    """Each key of the run's tables, the trajectory and every table of every driver type has a
    one-line meaning (from the ``doc`` of the call that reads it, or the class the table fills)."""
    tables = {f"run:{p}": k for p, k in run_keys().items()}
    tables.update({f"trajectory:{p}": k for p, k in trajectory_keys().items()})
    for kind in sorted(_examples()):
        for path, keys in driver_keys(kind).items():
            tables[f"{kind}:{path}"] = keys
    missing = sorted(f"{t}.{k}" for t, keys in tables.items() for k, info in keys.items() if not info.get("doc"))
    assert not missing, missing


@pytest.mark.parametrize("topic", ["run", "robot", "trajectory", "controller", "loop", "telemetry", "safety",
                                   "driver", "driver.joints", "driver.plant", "driver.dynamixel",
                                   "driver.cia402_can", "trajectory.circle"])
def test_every_topic_answers(topic):
    text = explain(topic)
    assert text.strip() and "no example table" not in text and "unknown --explain topic" not in text


def test_mujoco_plant_keys_are_explained():
    text = explain("driver.plant")
    for key in ("engine", "mjcf", "solref", "solimp", "payload", "payload_body"):
        assert re.search(rf"^  {key} ", text, re.M), key
    assert "[driver.plant.payload]" in text and "mass_kg" in text and "list [5]" in text


def test_a_misspelt_key_names_the_right_one():
    """A misspelt required key: the missing key is named with the table's near spelling of it;
    an unknown optional one: refused with the nearest allowed key and the allowed list."""
    sec = Section({"duraton_s": 4.0}, "x.toml", "trajectory")
    with pytest.raises(ConfigError) as ei:
        sec.float("duration_s")
    assert ei.value.field == "trajectory.duration_s"
    assert "'duraton_s': a misspelling of 'duration_s'" in str(ei.value)
    sec = Section({"zetta": 1.0}, "x.toml", "controller")
    sec.float("zeta", 1.0)
    sec.float("wn_rad_s", 10.0)
    with pytest.raises(ConfigError) as ei:
        sec.finish()
    assert ei.value.field == "controller.zetta" and "did you mean 'zeta'?" in str(ei.value)
    assert "allowed here: ['wn_rad_s', 'zeta']" in str(ei.value)
    sec = Section({"qqq": 1.0}, "x.toml", "t")
    with pytest.raises(ConfigError) as ei:
        sec.float("duration_s")
    assert str(ei.value).endswith("required field is missing")      # nothing near: nothing named


def test_mapping_keys_are_what_joint_mapping_reads():
    """``drivers.registry.MAPPING_KEYS`` (the joint keys of every driver type, listed by ``check``'s
    first-run list when a template leaves them out) is what joint_mapping reads."""
    from drivers.registry import MAPPING_KEYS, OFFSET_KEYS, joint_mapping

    sec = RecordingSection({}, "x.toml", "driver.joints")
    joint_mapping(sec)
    assert set(sec.log.tables["driver.joints"]) == set(MAPPING_KEYS) | set(OFFSET_KEYS)


def test_the_driver_key_docs_name_keys_the_drivers_read():
    """Every key ``drivers.base.DRIVER_KEY_DOCS`` describes is a key of some ``[driver]`` table
    (a renamed key leaves a stale description behind)."""
    from drivers.base import DRIVER_KEY_DOCS

    read = set()
    for kind in _examples():
        read |= set(driver_keys(kind).get("driver", {}))
    assert set(DRIVER_KEY_DOCS) <= read, sorted(set(DRIVER_KEY_DOCS) - read)
