"""A mechanism file through every emulated driver: the five-bar leg of
``hil_configs/runs/fivebar_square.toml`` (shipped on emulated ODrive CAN drives) with its
``[driver]`` table replaced by each other protocol's emulated drives (MIT CAN, CiA 402 over
CANopen, Dynamixel Protocol 2.0 on a pseudo-terminal) and the in-process plant.

The drivers know nothing of the model family: each joint is a drive with a torque interface.
Each run must complete its first second of the square (through the supervisor's singularity
guard and the run's 5 mm tracking limit) and follow it as the shipped ODrive run does: the
foot's RMS error within 2x of the in-process plant's run plus what the protocol's own
quantisation costs (0.3 mm: a Dynamixel's 4096 counts a turn move the foot by up to 0.1 mm).
"""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest

from controller.app.run import build_run, load_run
from dynamics.config import read_toml, write_toml

ROOT = Path(__file__).resolve().parents[1]
RUN = ROOT / "hil_configs" / "runs" / "fivebar_square.toml"
BUS = {"interface": "virtual", "channel": "fivebar-drivers"}
JOINTS = ("hip_left", "hip_right")

#: each protocol's emulated drives for the leg's two hips (direct drive: gear 1), and its rate
DRIVERS = {
    "sim_direct": ({"type": "sim_direct"}, 1000.0),
    "sim_mit_can": ({"type": "sim_mit_can", "bus": BUS,
                     "joints": [{"name": n, "can_id": i + 1, "model": "AK80-9"} for i, n in enumerate(JOINTS)]},
                    1000.0),
    "sim_cia402_can": ({"type": "sim_cia402_can", "bus": BUS,
                        "joints": [dict(name=n, node_id=i + 1, eds="cia402_generic.eds", counts_per_rev=131072,
                                        rated_torque_nm=1.0, torque_limit_nm=3.0, gear_ratio=1.0)
                                   for i, n in enumerate(JOINTS)]},
                       500.0),
    "sim_dynamixel": ({"type": "sim_dynamixel", "port": "/dev/null", "baudrate": 4000000,
                       "read_mode": "fast_sync", "return_delay_us": 0,
                       "joints": [{"name": n, "id": i + 1, "model": "XM540-W270"} for i, n in enumerate(JOINTS)]},
                      500.0),
}


def _run(kind: str, tmp_path: Path):
    data = copy.deepcopy(read_toml(RUN))
    data["robot"]["file"] = str((RUN.parent / data["robot"]["file"]).resolve())
    plant = data["driver"].get("plant", {})
    drv, rate = copy.deepcopy(DRIVERS[kind][0]), DRIVERS[kind][1]
    drv["plant"] = plant
    data["driver"] = drv
    data["loop"]["rate_hz"] = rate
    path = tmp_path / f"{kind}.toml"
    write_toml(path, data)
    spec = load_run(path, duration_s=1.0)
    run = build_run(spec, out_dir=tmp_path / kind)
    return run, run.execute()


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The in-process plant's run: the foot's RMS error [m] on the same second of the square."""
    run, res = _run("sim_direct", tmp_path_factory.mktemp("direct"))
    assert res.status == "completed", res.faults
    return float(res.metrics["rms_position_error_m"])


#: the Dynamixel servos answer on a pseudo-terminal from a thread, within a wall-clock reply
#: timeout: run alone (tests/conftest.py)
@pytest.mark.parametrize("kind", ["sim_mit_can", "sim_cia402_can",
                                  pytest.param("sim_dynamixel", marks=pytest.mark.exclusive)])
def test_fivebar_runs_on_every_emulated_driver(kind, reference, tmp_path):
    run, res = _run(kind, tmp_path)
    assert res.status == "completed", (kind, [str(f) for f in res.faults])
    assert run.spec.model.family == "mechanism"
    assert run.driver.n_joints == 2
    rms = float(res.metrics["rms_position_error_m"])
    assert np.isfinite(rms) and rms < 2.0 * reference + 3e-4, (kind, rms, reference)
