# One image for every tensorwire service: compose.yaml builds it once (tensorwire:local) and each service picks its
# command. `docker build --build-arg EXTRAS="[mpi,cuda]" .` adds the CUDA backend's wheels (a GPU worker needs the
# NVIDIA Container Toolkit on the host); the default has MPI for the collectives.
# `--build-arg BASE=rocm --build-arg EXTRAS="[mpi,rocm]"` builds it on AMD's ROCm image instead, for ROCm workers
# (compose.yaml's `rocm` profile builds tensorwire:rocm so): hip-python needs ROCm's own libraries, which no pip
# wheel brings. BuildKit (Docker's default builder) builds only the base the build asks for.
ARG BASE=python
# the ROCm release the `rocm` extra's hip-python is matched to (pyproject.toml: hip-python==7.2.*)
ARG ROCM_VERSION=7.2

# Python 3.11 on Debian, and a C compiler with OpenMP: the CPU backend compiles each batch into fused C kernels
# (without one it runs numpy)
FROM python:3.11-slim AS base-python
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*

# ROCm's runtime, hipRTC and device libraries (the dev image), hipBLAS for matmul, the C compiler, and Ubuntu's
# Python in a virtual environment
FROM rocm/dev-ubuntu-22.04:${ROCM_VERSION} AS base-rocm
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3 python3-venv gcc libc6-dev \
       hipblas \
    && rm -rf /var/lib/apt/lists/* \
    && python3 -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH

FROM base-${BASE}
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
