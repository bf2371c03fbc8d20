"""Shared timing helpers for the benchmark modules.

All times are wall-clock microseconds from :func:`time.perf_counter_ns`; the
garbage collector is paused while a sample is taken (as :mod:`timeit` does).
A *sample* is the mean time of ``number`` back-to-back calls; the statistics
are over ``repeat`` samples.  On a shared machine, compare two functions with
:func:`time_calls`, which interleaves their samples so that load changes hit
both alike.
"""

from __future__ import annotations

import gc
import time
from typing import Any, Callable

import numpy as np

__all__ = ["time_call", "time_calls", "interleaved_samples", "stats"]


def stats(samples_us) -> tuple[float, float]:
    """(median, 99th percentile) of per-call samples [us]."""
    s = np.asarray(samples_us, dtype=float)
    return float(np.median(s)), float(np.percentile(s, 99))


def _sample(fn: Callable, args: tuple, number: int) -> float:
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        t0 = time.perf_counter_ns()
        for _ in range(number):
            fn(*args)
        t1 = time.perf_counter_ns()
    finally:
        if was_enabled:
            gc.enable()
    return (t1 - t0) / number / 1e3


def time_call(fn: Callable, *args: Any, repeat: int = 50, number: int = 1000,
              warmup: int = 1) -> tuple[float, float]:
    """Median and 99th-percentile time per call [us] of ``fn(*args)``.

    Parameters
    ----------
    fn : callable
    *args : positional arguments passed to every call
    repeat : int
        Number of samples.
    number : int
        Calls per sample (a sample is their mean).
    warmup : int
        Untimed samples first (JIT compilation, caches).
    """
    for _ in range(warmup):
        _sample(fn, args, number)
    return stats([_sample(fn, args, number) for _ in range(repeat)])


def interleaved_samples(calls: dict[str, tuple[Callable, tuple]], *, repeat: int = 50,
                        number: int = 1000, warmup: int = 1) -> dict[str, list[float]]:
    """Per-call samples [us] (``repeat`` each) of several ``name -> (fn, args)``, interleaved:
    sample j of every function is taken in round j, so a ratio of two functions' samples of
    the same round compares them under the same load."""
    for _ in range(warmup):
        for fn, args in calls.values():
            _sample(fn, args, number)
    samples: dict[str, list[float]] = {k: [] for k in calls}
    for _ in range(repeat):
        for k, (fn, args) in calls.items():
            samples[k].append(_sample(fn, args, number))
    return samples


def time_calls(calls: dict[str, tuple[Callable, tuple]], *, repeat: int = 50, number: int = 1000,
               warmup: int = 1) -> dict[str, tuple[float, float]]:
    """Like :func:`time_call` for several ``name -> (fn, args)``, samples interleaved
    (:func:`interleaved_samples`)."""
    samples = interleaved_samples(calls, repeat=repeat, number=number, warmup=warmup)
    return {k: stats(v) for k, v in samples.items()}
