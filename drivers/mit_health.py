"""Faults an MIT drive cannot report itself: a motor that replies but does not follow its commands.

The classic 6-byte MIT reply carries no fault code, and even the 8-byte CubeMars reply says
nothing when the power stage stops producing torque while the logic still answers (a limp
motor), or when the drive's control loop hangs while its CAN interrupt keeps answering with the
same state (frozen replies).  What the host *can* see is the reply's torque field, which the
drive computes from the measured q-axis current, against the torque the drive was told to
produce (``t_ff + kp (p_des - p) + kd (v_des - v)``, motor side, from the decoded frame).

The rule is :mod:`drivers.follow`'s (shared with the torque-only drives' check); here it runs
compiled (:class:`FollowMonitor`).  The codes are above 255 so they never collide with a
drive's own error byte.
"""

from __future__ import annotations




from . import _mit_kernels as _k
from . import follow as _follow
# the codes, defined with the rule (drivers.follow)
from ._mit_kernels import FAULT_OVER_TEMPERATURE
from .follow import FAULT_FROZEN, FAULT_NOT_FOLLOWING, FollowConfig, follow_config

__all__ = ["FollowConfig", "FollowMonitor", "FAULT_NOT_FOLLOWING", "FAULT_FROZEN",
           "FAULT_OVER_TEMPERATURE", "DETECTED_FAULTS", "follow_config"]


#: Fault codes the MIT driver detects itself -> description.
DETECTED_FAULTS: dict[int, str] = {
    FAULT_NOT_FOLLOWING: "measured torque does not follow the command (a limp motor, or one that rebooted out of "
                         "motor mode?)",
    FAULT_FROZEN: "replies frozen while the command changes (the drive's control loop stopped, or it rebooted "
                  "out of motor mode?)",
    FAULT_OVER_TEMPERATURE: "reported temperature above temperature_max_c",
}


class FollowMonitor(_follow.FollowMonitor):
    """:class:`drivers.follow.FollowMonitor` with the rule compiled (:data:`drivers._mit_kernels.follow_step`):
    :class:`~drivers.mit.MitCanDriver` runs it in its compiled cycle step on this object's arrays,
    :meth:`update` from Python."""

    _step = staticmethod(_k.follow_step)
