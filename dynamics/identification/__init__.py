"""Dynamic parameter identification: regressor, base parameters, estimation, robot-file output.

Pure computation on :mod:`dynamics` models (imports nothing from the other
torqueloop packages).  See :mod:`.regressor` for the parameter conventions.
"""

from .regressor import (INERTIAL_NAMES, ParameterSet, parameter_set, regressor, stacked_regressor,
                        standard_parameters)

__all__ = ["INERTIAL_NAMES", "ParameterSet", "parameter_set", "regressor", "stacked_regressor",
           "standard_parameters"]
