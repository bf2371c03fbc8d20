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

from controller.app.explain import _examples, driver_keys, explain, safety_keys
from controller.safety import SafetyConfig
from drivers.registry import DRIVER_TYPES, build_driver
from dynamics.toy_models import Pendulum
from dynamics.config import RecordingSection, Section
from dynamics.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]


def _allowed_by_parser(kind: str, table: str) -> set[str]:
    """Put an unknown key into ``table`` of the example and read the parser's 'allowed here' list."""
    data = copy.deepcopy(_examples()[kind])
    node = data
    for part in table.split(".")[1:]:
        node = node.setdefault(part, {})      # an optional table the example leaves out
        node = node[0] if isinstance(node, list) else node
    node["zz_not_a_key"] = 1
    kw = {"model": Pendulum(), "rng": None} if kind.startswith("sim_") else {}
    with pytest.raises(ConfigError) as ei:
        drv = build_driver(Section(data, "x.toml", "driver"), now=lambda: 0.0, **kw)
        drv.close()
    assert ei.value.field.endswith("zz_not_a_key"), str(ei.value)
    listed = re.search(r"allowed here: (\[.*\])", str(ei.value)).group(1)
    return set(ast.literal_eval(listed))


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
    for kind in ("mit_can", "odrive_can", "odrive_ascii"):
        assert f'(type = "{kind}"; one table per actuator)' in r.stdout
    assert "node_id" in r.stdout and "can_id" in r.stdout and "axis" in r.stdout
    r = tl("check", "--explain", "bogus")
    assert r.returncode == 2 and "unknown --explain topic" in r.stderr
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
