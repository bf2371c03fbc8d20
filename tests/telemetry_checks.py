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


def _matrix(tr) -> np.ndarray:
    """A geometry_msgs/Transform as a 4x4 matrix (scipy's quaternion convention: x, y, z, w)."""
    from scipy.spatial.transform import Rotation
    q = [tr.rotation.x, tr.rotation.y, tr.rotation.z, tr.rotation.w]
    assert abs(np.linalg.norm(q) - 1.0) < 1e-12, q      # a unit quaternion
    T = np.eye(4)
    T[:3, :3] = Rotation.from_quat(q).as_matrix()
    T[:3, 3] = [tr.translation.x, tr.translation.y, tr.translation.z]
    return T


def check_rrr_tf(messages, log: np.ndarray, start_ns: int, model, rate_hz: float) -> int:
    """``/tf`` messages (decoded ``tf2_msgs/msg/TFMessage``) of a task-space 3RRR run against the
    log and the model's geometry, not its kinematics code: the platform frame at the measured
    pose (``ref_pos - err``, the controller's), each proximal link at its base joint turned by
    its joint angle, each distal link starting at the proximal link's end (its length away) and
    reaching the platform joint (the distal length away, through the platform frame); at most
    one message per ``1 / rate_hz`` of cycle time, each stamped with a row's time.  Returns the
    number of messages."""
    A = np.asarray(model.base_joints)
    c = np.asarray(model.platform_joints)
    l1, l2 = np.asarray(model.proximal.length, float), np.asarray(model.distal.length, float)
    t_prev = -1.0
    for m in messages:
        stamps = {x.header.stamp.sec * 10**9 + x.header.stamp.nanosec for x in m.transforms}
        assert len(stamps) == 1
        t = (stamps.pop() - start_ns) * 1e-9
        assert np.floor(t * rate_hz + 1e-6) > np.floor(t_prev * rate_hz + 1e-6)
        t_prev = t
        i = int(np.argmin(np.abs(log["t"] - t)))
        assert abs(log["t"][i] - t) < 2e-6
        row = log[i]
        tree = {x.child_frame_id: (x.header.frame_id, _matrix(x.transform)) for x in m.transforms}
        assert tree["base"][0] == "world" and np.allclose(tree["base"][1], np.eye(4), atol=0)
        parent, P = tree["platform"]
        X = row["ref_pos"] - row["err"]
        assert parent == "base"
        assert np.allclose(P[:3, 3], [X[0], X[1], 0.0], atol=1e-9, rtol=0)
        assert abs(np.arctan2(P[1, 0], P[0, 0]) - X[2]) < 1e-9 and abs(P[2, 2] - 1.0) < 1e-12
        for k in range(3):
            _, Tp = tree[f"proximal{k + 1}"]
            _, Td = tree[f"distal{k + 1}"]
            assert np.allclose(Tp[:2, 3], A[k], atol=1e-12, rtol=0)
            assert abs(np.angle(np.exp(1j * (np.arctan2(Tp[1, 0], Tp[0, 0]) - row["q"][k])))) < 1e-9
            assert np.allclose(Td[:3, 3], Tp[:3, 3] + l1[k] * Tp[:3, 0], atol=1e-9, rtol=0)
            C = P @ np.array([c[k, 0], c[k, 1], 0.0, 1.0])
            assert np.allclose(C[:3], Td[:3, 3] + l2[k] * Td[:3, 0], atol=1e-6, rtol=0)
    return len(messages)
