# One image for every tensorwire service; compose.yaml picks the command.
FROM python:3.11-slim
WORKDIR /app
COPY . /app
# extras for a service's image, e.g. EXTRAS="[cuda]" for a CUDA worker (compose.yaml's worker-cuda0)
ARG EXTRAS=""
RUN pip install --no-cache-dir ".${EXTRAS}"
ENTRYPOINT ["tensorwire"]
