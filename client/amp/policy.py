"""Which recorded ops autocast runs in which dtype, per device type: :mod:`tensorwire.autocast_policy` (outside this
package, so that recording reads it without loading ``GradScaler``), under its ``amp`` name."""

from ..autocast_policy import DEFAULT_DTYPES, POLICIES, SUPPORTED_DTYPES

__all__ = ["DEFAULT_DTYPES", "POLICIES", "SUPPORTED_DTYPES"]
