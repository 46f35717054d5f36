"""The collectives service: an MPI job with one rank per device worker (``mpiexec -n N tensorwire collectives``)."""
