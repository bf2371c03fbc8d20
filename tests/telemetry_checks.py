"""What the telemetry tests share: the ControlCycle fields against log.npy's columns, and an
equality of values that treats NaN as equal (tests/test_telemetry_mcap.py, test_telemetry_live.py)."""

from __future__ import annotations

import numpy as np

#: ControlCycle's fields and the log.npy columns they carry
CYCLE_FIELDS = {"t_s": "t", "ref_pos": "ref_pos", "ref_vel": "ref_vel", "ref_acc": "ref_acc", "err": "err",
                "tau_ctrl": "tau_ctrl", "tau_cmd": "tau_cmd", "tau_meas": "tau_meas", "saturated": "sat",
                "safety": "safety", "lateness_s": "lateness_s", "compute_s": "compute_s", "fresh": "fresh",
                "fault": "fault", "enabled": "enabled"}


def equal(a, b) -> bool:
    """Same shape and values (floats compared as float64, NaN equal to NaN)."""
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype.kind == "f" or b.dtype.kind == "f":
        return a.shape == b.shape and np.array_equal(a.astype(float), b.astype(float), equal_nan=True)
    return np.array_equal(a, b)
