"""The kernel compiler every compiling backend stands on (shaped like tinygrad's).

* :mod:`.lower` groups a fragment's primitive steps into kernels in the small IR of :mod:`.ir`: :mod:`.schedule`
  decides which values are buffers and which are computed inside their consumers (elementwise chains, views,
  a reduction's prologue and epilogue, row kernels); :mod:`.views` folds movement ops into index arithmetic;
  :mod:`.elementwise`, :mod:`.reduce` and :mod:`.kernels` say how each primitive computes.
* :mod:`.render` renders the IR as C-like source; :mod:`.c`, :mod:`.opencl`, :mod:`.cuda`, :mod:`.hip` and
  :mod:`.metal` override only what their language spells differently.
* :mod:`.program` runs a lowered fragment on a device's runtime; :mod:`.cache` keeps compiled kernels on disk.

``TENSORWIRE_DEBUG_KERNELS=1`` prints each kernel's source when it is compiled.
"""

from .lower import Options, lower
from .render import CStyleRenderer

__all__ = ["CStyleRenderer", "Options", "lower"]
