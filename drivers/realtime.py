"""Real-time settings of a process: SCHED_FIFO priority, CPU affinity, a frozen garbage collector.

The control loop's wall clock (``[loop.realtime]``, :class:`controller.clock.WallClock`) and the
rehearsal server (``[server.realtime]``, :mod:`drivers.sim.serve`) apply the same settings with
:func:`apply_realtime` and undo them with :func:`restore_realtime`.  What the operating system
refuses (no ``CAP_SYS_NICE`` or rtprio limit, a CPU that is not there) is not an error: it is
returned as a message that names the setting, and the process goes on without it.

Keys of ``settings``
--------------------
``sched_fifo_priority`` : int, 1..99
    ``SCHED_FIFO`` at this priority (``os.sched_setscheduler``).
``cpu`` : int or list of int
    The CPUs the process may run on (``os.sched_setaffinity``).
``freeze_gc`` : bool
    ``gc.collect()``, ``gc.freeze()`` and ``gc.disable()``: no full collection over the objects
    built so far while the settings hold.
"""

from __future__ import annotations

import gc
import os
from typing import Any, Mapping

__all__ = ["REALTIME_KEYS", "apply_realtime", "restore_realtime"]

#: the keys :func:`apply_realtime` knows
REALTIME_KEYS = frozenset({"sched_fifo_priority", "cpu", "freeze_gc"})


def apply_realtime(settings: Mapping[str, Any]) -> tuple[dict, list[str]]:
    """Apply ``settings`` to this process (see the module docstring).

    Returns
    -------
    saved : dict
        What :func:`restore_realtime` needs to undo what was applied.
    messages : list of str
        One per setting that could not be applied, naming it and the reason.
    """
    saved: dict = {}
    messages: list[str] = []
    if "cpu" in settings:
        cpus = settings["cpu"]
        cpus = {int(cpus)} if isinstance(cpus, int) else {int(c) for c in cpus}
        if hasattr(os, "sched_setaffinity"):
            try:
                saved["affinity"] = os.sched_getaffinity(0)
                os.sched_setaffinity(0, cpus)
            except OSError as err:
                saved.pop("affinity", None)
                messages.append(f"CPU affinity {sorted(cpus)} not applied: {err}")
        else:
            messages.append("CPU affinity not supported on this platform")
    prio = settings.get("sched_fifo_priority")
    if prio is not None:
        if hasattr(os, "sched_setscheduler"):
            try:
                saved["sched"] = (os.sched_getscheduler(0), os.sched_getparam(0))
                os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(int(prio)))
            except (OSError, ValueError) as err:
                saved.pop("sched", None)
                messages.append(f"SCHED_FIFO priority {prio} not applied (needs CAP_SYS_NICE or rtprio limit): {err}")
        else:
            messages.append("SCHED_FIFO not supported on this platform")
    if settings.get("freeze_gc"):
        saved["gc"] = gc.isenabled()
        gc.collect()
        gc.freeze()
        gc.disable()
    return saved, messages


def restore_realtime(saved: dict) -> list[str]:
    """Undo :func:`apply_realtime` (scheduler, affinity, garbage collector); ``saved`` is emptied.
    Returns a message for each setting that could not be restored."""
    messages: list[str] = []
    if "sched" in saved:
        policy, param = saved.pop("sched")
        try:
            os.sched_setscheduler(0, policy, param)
        except OSError as err:
            messages.append(f"could not restore the scheduling policy: {err}")
    if "affinity" in saved:
        cpus = saved.pop("affinity")
        try:
            os.sched_setaffinity(0, cpus)
        except OSError as err:
            messages.append(f"could not restore the CPU affinity: {err}")
    if "gc" in saved:
        was = saved.pop("gc")
        gc.unfreeze()
        if was:
            gc.enable()
    return messages
