"""Pure CAN protocol codecs (no I/O, no transport imports).

:mod:`drivers.codecs.mit`
    MIT "mini cheetah" protocol (CubeMars / T-Motor AK series in MIT mode).
:mod:`drivers.codecs.odrive`
    ODrive CANSimple protocol.

Encoders take protocol (motor side) units and return ``bytes``; decoders take
``bytes`` and return frozen dataclasses, raising
:class:`~dynamics.errors.DecodeError` for a payload of the wrong length or
with impossible content.  Encoders refuse non-finite numbers and out-of-range
identifiers with :class:`~dynamics.errors.DriverError` so that nothing
non-finite is ever put on a bus.
"""

from . import mit, odrive

__all__ = ["mit", "odrive"]
