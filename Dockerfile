# One image for every tensorwire service: compose.yaml builds it once (tensorwire:local) and each service picks its
# command. `docker build --build-arg EXTRAS="[mpi,cuda]" .` adds the CUDA backend's wheels (a GPU worker needs the
# NVIDIA Container Toolkit on the host); the default has MPI for the collectives.
FROM python:3.11-slim

# a C compiler with OpenMP: the CPU backend compiles each batch into fused C kernels (without one it runs numpy)
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /app
COPY . /app
ARG EXTRAS="[mpi]"
RUN pip install --no-cache-dir ".${EXTRAS}"

# never root: a fixed uid, so that every container (and its shared memory files, which a collectives rank maps only
# when its own user owns them) agrees; /keys and /hubdata are created here so that the named volumes mounted on them
# start out owned by that user
RUN useradd --system --uid 10001 --user-group --create-home --home-dir /home/tensorwire tensorwire \
    && mkdir -p /keys /hubdata \
    && chown tensorwire:tensorwire /keys /hubdata
USER tensorwire:tensorwire

ENTRYPOINT ["tensorwire"]
CMD ["--help"]
