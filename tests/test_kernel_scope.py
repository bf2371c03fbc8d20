"""A run loads the compiled kernels of its own robot, not another robot's.

numba compiles a kernel with explicit signatures when its module is imported.  The serial
chain's entry kernels (``dynamics._serial_kernels``, the ones ``SerialModel`` calls from Python)
take about 15 s to compile on a cold cache, a third of the first run of the 3RRR demo before
they were kept to serial models: the plant and the laws of every robot use only the lazily
compiled cores of ``dynamics._serial_core``.  Each case runs a shipped config in a new process
and lists the kernel modules it imported; the serial case shows that the probe sees the module
when it is used.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

_PROBE = r'''
import json, sys, tempfile
from pathlib import Path
from controller.app.run import build_run, load_run
from controller.app.animate import robot_polylines

with tempfile.TemporaryDirectory() as d:
    spec = load_run(sys.argv[1], overrides={"loop.duration_s": 0.02})
    run = build_run(spec, out_dir=Path(d) / "r")
    res = run.execute()
    assert res.status == "completed", (res.status, res.faults)
    model = spec.model                  # the stick figure of the robot (torqueloop animate)
    home = getattr(model, "home_pose", None)
    if home is None:
        robot_polylines(model, [0.0] * model.dof)
    else:
        robot_polylines(model, model.inverse_kinematics(home), home)
print(json.dumps(sorted(m for m in sys.modules if m.startswith(("dynamics._", "controller._", "drivers.")))))
'''

SERIAL_ENTRIES = "dynamics._serial_kernels"
STEWART = "dynamics._stewart_kernels"


@pytest.mark.parametrize("config, serial, stewart", [
    ("3rrr_circle", False, False),
    ("3rrr_circle_direct", False, False),
    ("stewart_motion_direct", False, True),
    ("seed000_fast", True, False),
])
def test_a_run_imports_only_its_robots_kernels(config, serial, stewart):
    path = str(ROOT / "hil_configs" / "runs" / f"{config}.toml")
    r = subprocess.run([sys.executable, "-c", _PROBE, path], cwd=ROOT, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    loaded = set(json.loads(r.stdout.strip().splitlines()[-1]))
    assert "dynamics._serial_core" in loaded        # every robot's plant and laws use the cores
    assert (SERIAL_ENTRIES in loaded) is serial, sorted(loaded)
    assert (STEWART in loaded) is stewart, sorted(loaded)


def test_exact_model_kind_names_each_family_and_no_subclass():
    """The one lookup the plant, the laws, the supervisor and the compiled loop use to choose a
    family's compiled form: the exact class of each shipped family, nothing for a subclass."""
    from dynamics import exact_model_kind, load_model
    from dynamics.toy_models import PlanarTwoLink

    robots = ROOT / "hil_configs" / "robots"
    for fname, kind in (("seed000_arm.toml", "serial"), ("3rrr_horizontal.toml", "rrr"),
                        ("stewart.toml", "stewart")):
        model = load_model(robots / fname)
        assert exact_model_kind(model) == kind, fname
        sub = type("Sub", (type(model),), {})
        model.__class__ = sub
        assert exact_model_kind(model) is None, fname
    assert exact_model_kind(PlanarTwoLink()) is None
