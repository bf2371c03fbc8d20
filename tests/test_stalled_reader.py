"""A reply that arrived in time is not lost because this process was stalled past its deadline.

A hypervisor or a busy machine can stop the control process for longer than a reply timeout
between sending a cycle's commands and reading the replies.  The replies are then already in
the receive queue: the driver must read them (without waiting) and report fresh feedback, not
report stale feedback and leave the replies for the next cycle to drop.  CI failed once on
this (a MIT driver reported the previous cycle's values after a 10 ms stall).

The stall is made deterministic: the module's clock jumps a second on every reading, so every
deadline has passed by the time the driver looks at the queue.
"""

from __future__ import annotations

import os
import select
import types

import can
import numpy as np
import pytest

from drivers.base import Command
from drivers.codecs import mit as mitc


class _JumpingClock(types.SimpleNamespace):
    """A ``time`` module stand-in whose ``monotonic`` advances 1 s per call (a stalled process)."""

    def __init__(self, real):
        super().__init__(**{k: getattr(real, k) for k in ("sleep", "perf_counter", "time", "perf_counter_ns",
                                                          "monotonic_ns")})
        self._t = 1000.0

    def monotonic(self):
        self._t += 1.0
        return self._t


class _AnsweringBus:
    """A bus on which each command's reply is queued at once (it arrived in time)."""

    def __init__(self, limits, rng):
        self.limits, self.rng, self.inbox, self.answers = limits, rng, [], {}

    def send(self, msg, timeout=None):
        # plausible values (the driver refuses a sample no motor could produce)
        p, t = self.rng.uniform(-0.01, 0.01), self.rng.uniform(-0.9, 0.9) * self.limits.t_max_nm
        v = 0.0
        data = mitc.encode_reply(msg.arbitration_id, p, v, t, self.limits)
        self.answers[msg.arbitration_id] = mitc.decode_reply(data, self.limits)
        self.inbox.append(can.Message(arbitration_id=0, data=data, is_extended_id=False))

    def recv(self, timeout=None):
        return self.inbox.pop(0) if self.inbox else None

    def shutdown(self):
        pass


def test_mit_driver_reads_replies_queued_before_a_stall(monkeypatch):
    import drivers.mit as mit
    from drivers.transport import CanTransport

    L = mitc.MIT_MODELS["AK80-6"]
    bus = _AnsweringBus(L, np.random.default_rng(7))
    tp = CanTransport.from_bus(bus, name="tp")
    drv = mit.MitCanDriver([mit.MitJoint(tp, i, L) for i in (5, 6)],
                           now=lambda: 0.0, reply_timeout_s=0.002, reply_centered=False)
    drv.enable()
    monkeypatch.setattr(mit, "time", _JumpingClock(mit.time))
    for _ in range(20):
        fb = drv.cycle(Command(np.array([0.1, -0.1])))
        assert fb.fresh.all()
        for j, cid in enumerate((5, 6)):
            r = bus.answers[cid]
            assert (fb.position_rad[j], fb.velocity_rad_s[j], fb.torque_nm[j]) == pytest.approx(
                (r.p_rad, r.v_rad_s, r.t_nm), abs=1e-12)
    assert not bus.inbox


def test_serial_port_reads_bytes_that_arrived_before_a_stall(monkeypatch):
    import drivers.serial_port as sp

    master, slave = os.openpty()
    try:
        port = sp.SerialTransport(os.ttyname(slave), timeout_s=0.002)
        try:
            os.write(master, b"abcdef")
            # the bytes are in the port's queue before the read starts
            assert select.select([slave], [], [], 2.0)[0]
            monkeypatch.setattr(sp, "time", _JumpingClock(sp.time))
            assert port.read(6) == b"abcdef"
            os.write(master, b"line\n")
            assert select.select([slave], [], [], 2.0)[0]
            assert port.read_line() == "line"
            # and nothing that did not arrive is waited for
            with pytest.raises(sp.CommsTimeoutError):
                port.read(1)
        finally:
            port.close()
    finally:
        os.close(master)
        os.close(slave)
