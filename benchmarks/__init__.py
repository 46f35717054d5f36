"""Speed, measured as ratios against a peer run side by side in the same run (``python -m benchmarks``)."""

import os as _os

# The in-process peers (numpy) get the same OpenBLAS idle-spin bound as the cluster's workers (LocalCluster sets it
# for them), set before numpy loads: with OpenBLAS's default, idle BLAS threads busy-wait ~0.1 s after every
# multiply, and each side's spinning threads slowed the other side's next round on the shared cores. The value is
# tensorwire.cluster.BLAS_THREAD_TIMEOUT, written out because importing tensorwire would load numpy first.
_os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "22")
