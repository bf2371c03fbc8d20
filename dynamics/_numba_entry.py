"""Calling a compiled kernel without numba's dispatcher, once its arguments' types were checked.

A numba dispatcher matches the type of every argument on every call; for a kernel called each
control cycle with many arguments that matching costs as much as the kernel's own work.  Where
the caller passes the same array objects (or arrays made the same way) call after call, it can
check their types once against the kernel's one compiled signature and then call the machine
code itself (numba's ``entry_point``, which unboxes each argument as the signature says and
checks nothing).  Used by the compiled loop cycle (:mod:`controller.compiled`) and the ODrive
driver's feedback decoder (:mod:`drivers.odrive`).
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["entry_for", "direct_entry"]


def entry_for(kernel, n_args: int, typed: Iterable[tuple[int, object]]):
    """The machine code of ``kernel`` (a numba dispatcher) when it has exactly one compiled
    signature, of ``n_args`` arguments, and each ``(position, value)`` of ``typed`` is of the
    signature's type at that position; else ``kernel`` itself (the dispatcher then matches, or
    compiles, as before).

    Only for calls whose checked arguments are the objects given here (or arrays made the same
    way: the same dtype, dimensions, layout, writeability) and whose other arguments have the
    signature's types: the caller keeps that true (the entry does not check it)."""
    from numba import typeof

    sigs = list(kernel.overloads)
    if len(sigs) != 1:
        return kernel
    sig = sigs[0]
    if len(sig) != n_args:
        return kernel
    try:
        if any(typeof(a) != sig[i] for i, a in typed):
            return kernel
    except ValueError:          # a value numba cannot type
        return kernel
    return kernel.overloads[sig].entry_point


def direct_entry(kernel, *args):
    """:func:`entry_for` with every argument given: the machine code to call with arguments of
    exactly the types of ``args``, or ``kernel``."""
    return entry_for(kernel, len(args), enumerate(args))
