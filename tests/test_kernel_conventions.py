"""What every compiled kernel of the package shares.

``error_model="numpy"``: a float division by zero in a kernel gives inf or NaN (IEEE), as
numpy does, instead of numba's default Python behaviour (a zero test and a branch before every
division, and a ZeroDivisionError out of the kernel).  The divisions that can meet a zero in
normal use are guarded where they are written (a determinant, a norm, a lag time) and end in a
status code; one that is not (a zero pivot of a broken mass matrix) now gives a non-finite
torque, which the supervisor's per-joint check (``J_TAU_NONFINITE``, the same rule in the
Python and the compiled loop) turns into a fault before a motor sees it, instead of an
exception out of the compiled segment.  The branches cost 1-4 % of the compiled 3RRR cycle.
It changes no result: when it was introduced, the logs, metrics and faults of the shipped runs
(Python and compiled loop) were bit-identical to the tree before.
"""

from __future__ import annotations

import importlib

import pytest
from numba.core.registry import CPUDispatcher

from dynamics import _kernel_cache as kc


def _dispatchers(module):
    return [(name, obj) for name, obj in vars(module).items()
            if isinstance(obj, CPUDispatcher) and obj.py_func.__module__ == module.__name__]


@pytest.mark.parametrize("rel", kc.KERNEL_FILES)
def test_every_kernel_uses_numpys_error_model(rel):
    module = importlib.import_module(rel[:-3].replace("/", "."))
    kernels = _dispatchers(module)
    if rel in kc.COMPILED_SOURCES:      # compiled by a kernel module: its dispatchers live there
        kernels = [(f"{m}.{name}", obj) for m in (f[:-3].replace("/", ".") for f in kc.KERNEL_FILES
                                                  if f not in kc.COMPILED_SOURCES)
                   for name, obj in vars(importlib.import_module(m)).items()
                   if isinstance(obj, CPUDispatcher) and obj.py_func.__module__ == module.__name__]
    assert kernels, f"{rel} defines no kernel"
    wrong = [name for name, d in kernels if d.targetoptions.get("error_model") != "numpy"]
    assert not wrong, f"{rel}: kernels without error_model='numpy': {wrong}"

