"""The fault matrix (fault kind x protocol) of :mod:`tests.fault_matrix`, one test per cell.

Each cell runs its protocol's shipped config through the real run path with one fault
injected and checks: status and cause, cycles from the onset to the zero-torque stop within
the cell's bound, no non-finite or over-limit command ever, one command per logged row
reached the driver, log and meta.json complete with the stop row flagged FAULT | DISABLED,
no torque left on the reachable joints (a drive's own fault reaction may only brake), and
the CLI's exit code.  ``python -m tests.fault_matrix`` prints the measured matrix.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

try:
    from tests import fault_matrix as fm
    from tests.serve_process import CpuWatch, interfered
except ImportError:  # pragma: no cover - rootdir not on sys.path
    import fault_matrix as fm
    from serve_process import CpuWatch, interfered


#: protocols whose emulated devices answer from another thread against a wall-clock reply
#: timeout (the Dynamixel servos behind a pseudo-terminal, canopen's receiving thread): their
#: cells run with no other test of the suite at once (tests/conftest.py, ``exclusive``)
THREADED = ("dynamixel", "cia402")


def _param(cell):
    marks = [pytest.mark.exclusive] if cell.protocol in THREADED else []
    return pytest.param(cell, marks=marks, id=f"{cell.fault}-{cell.protocol}".replace(" ", "_"))


@pytest.mark.parametrize("cell", [_param(c) for c in fm.CELLS])
def test_fault_cell(tmp_path, cell):
    watch = CpuWatch()
    c = fm.CellRun(cell, tmp_path / "run")
    bad = fm.problems(c)
    if bad and cell.protocol in THREADED and fm.stopped_early_for_timing(c):
        # a stop for stale feedback or an overrun before the injected fault: a failure of the
        # product unless other processes measurably held the machine during the cell (the
        # other protocols' devices are served inline on the lock-step clock: no wall-clock
        # timeout can expire there, so an early stop is always a failure)
        interfered(watch, f"stopped for {c.result.faults[0]} before the injected fault")
    assert not bad, f"{cell.fault} x {cell.protocol}: " + "; ".join(bad)


def test_every_cell_is_run_or_explained():
    run = {(c.fault, c.protocol) for c in fm.CELLS}
    assert len(run) == len(fm.CELLS)
    for f in fm.FAULTS:
        for p in fm.ALL:
            assert ((f, p) in run) != ((f, p) in fm.NOT_APPLICABLE), (f, p)
    assert all(len(why) > 5 for why in fm.NOT_APPLICABLE.values())


def test_the_cell_checks_catch_what_they_are_for(tmp_path):
    """The checker is not vacuous: a passing cell's outcome, tampered with, is refused."""
    cell = next(c for c in fm.CELLS if (c.fault, c.protocol) == ("NaN from the controller", "plant"))
    c = fm.CellRun(cell, tmp_path / "run")
    assert fm.problems(c) == []
    log = c.log.copy()
    tampered = {
        "non-finite": lambda lg: lg["tau_cmd"].__setitem__((5, 0), np.nan),
        "beyond the limit": lambda lg: lg["tau_cmd"].__setitem__((5, 0), 2.0 * float(c.safety.tau_max[0])),
        "stop is not the last row": lambda lg: lg["tau_cmd"].__setitem__((len(lg) - 1, 0), 0.1),
        "FAULT | DISABLED": lambda lg: lg["safety"].__setitem__(len(lg) - 1, 0),
    }
    for what, spoil in tampered.items():
        c.log = log.copy()
        spoil(c.log)
        c.hooked.sent = list(c.log["tau_cmd"])      # only the property under test differs
        assert any(what in p for p in fm.problems(c)), what
    c.log = log.copy()
    c.hooked.sent = list(c.log["tau_cmd"])
    c.log = c.log[:-1]
    assert any("log incomplete" in p for p in fm.problems(c))
    c.log = log
    c.applied_torque = c.applied_torque + 1.0
    assert any("torque still applied" in p for p in fm.problems(c))
    c.applied_torque = c.applied_torque - 1.0
    # a device nobody reaches: its watchdog must remove a torque that is there, in time
    c.cell = dataclasses.replace(cell, disconnected=(1,), watchdog_s=0.05)
    c.torque_at_stop, c.torque_off_s = np.array([0.0, 0.5, 0.0]), 0.04
    assert fm.problems(c) == []
    c.torque_off_s = 0.06
    assert any("still apply torque" in p for p in fm.problems(c))
    c.torque_at_stop, c.torque_off_s = np.array([0.5, 0.0, 0.5]), 0.04
    assert any("nothing to remove" in p for p in fm.problems(c))
