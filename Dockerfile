# One image for every tensorwire service; compose.yaml picks the command.
FROM python:3.11-slim
WORKDIR /app
COPY . /app
RUN pip install --no-cache-dir .
ENTRYPOINT ["tensorwire"]
