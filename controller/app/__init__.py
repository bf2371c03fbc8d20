"""The application on top of the control core (``controller``).

A run config turned into running parts (:mod:`.run`), the Python API (:mod:`.api`), the
``torqueloop`` command line (:mod:`.cli`, :mod:`.commands`), gain tuning (:mod:`.tune_config`,
:mod:`.tune`), parameter identification (:mod:`.identify`), config help (:mod:`.explain`), the
run summary, plots and animation (:mod:`.report`, :mod:`.plots`, :mod:`.animate`).  These modules
use the core (laws, gains, safety, loop, clock, telemetry); the core never imports them.
"""


#: The Python API, importable from here (``from controller.app import run_config``); loaded on
#: first use so that the command line does not pay for it.
__all__ = ["run_config", "RunOutput", "shipped_configs", "simulate", "SimulationOutput"]


def __getattr__(name):
    if name in __all__:
        from . import api

        return getattr(api, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
