"""The application on top of the control core (``controller``).

A run config turned into running parts (:mod:`.run`), the Python API (:mod:`.api`), the
``torqueloop`` command line (:mod:`.cli`, :mod:`.commands`), gain tuning (:mod:`.tune_config`,
:mod:`.tune`), parameter identification (:mod:`.identify`), config help (:mod:`.explain`), the
run summary, plots and animation (:mod:`.report`, :mod:`.plots`, :mod:`.animate`).  These modules
use the core (laws, gains, safety, loop, clock, telemetry); the core never imports them.
"""
