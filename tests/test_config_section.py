"""The config reader: every error names the file and the field."""

import math

import numpy as np
import pytest

from dynamics.config import Section, read_toml
from dynamics.errors import ConfigError, TorqueloopError


def test_typed_reads_and_finish():
    s = Section({"mass": 2, "com": [0, 0, 0.5], "name": "x", "sub": {"k": 1}}, file="a.toml")
    assert s.float("mass", minimum=0) == 2.0
    np.testing.assert_array_equal(s.vector("com", 3), [0, 0, 0.5])
    assert s.str("name") == "x"
    sub = s.section("sub")
    assert sub.int("k") == 1
    sub.finish()
    s.finish()


@pytest.mark.parametrize(
    "data, call, field, words",
    [
        ({"mass": -1.0}, lambda s: s.float("mass", minimum=0.0), "links[1].mass", ">= 0"),
        ({"mass": math.nan}, lambda s: s.float("mass"), "links[1].mass", "finite"),
        ({"com": [0, 1]}, lambda s: s.vector("com", 3), "links[1].com", "shape 3"),
        ({"com": [0, "a", 1]}, lambda s: s.vector("com", 3), "links[1].com", "numbers"),
        ({}, lambda s: s.float("mass"), "links[1].mass", "missing"),
        ({"kind": "z"}, lambda s: s.str("kind", choices=["a", "b"]), "links[1].kind", "one of"),
        ({"n": True}, lambda s: s.int("n"), "links[1].n", "integer"),
    ],
)
def test_errors_name_file_and_field(data, call, field, words):
    s = Section(data, file="robot.toml", path="links[1]")
    with pytest.raises(ConfigError) as ei:
        call(s)
    msg = str(ei.value)
    assert "robot.toml" in msg and field in msg and words in msg
    assert ei.value.field == field and ei.value.file == "robot.toml"
    assert isinstance(ei.value, TorqueloopError)


def test_unknown_key_is_rejected():
    s = Section({"mass": 1.0, "masss": 2.0}, file="r.toml", path="joints[0]")
    s.float("mass")
    with pytest.raises(ConfigError, match=r"r.toml: field 'joints\[0\].masss': unknown field"):
        s.finish()


def test_read_toml_errors(tmp_path):
    with pytest.raises(ConfigError, match="file not found"):
        read_toml(tmp_path / "nope.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("a = [1, 2\n")
    with pytest.raises(ConfigError, match="invalid TOML") as ei:
        read_toml(bad)
    assert str(bad) in str(ei.value)
