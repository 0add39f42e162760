# The servingbench image: the Dagster code location (gRPC) and every run's pod.
#   docker build -t servingbench:0.1.0 .
# Installs exactly uv.lock (no resolution at build time) and runs as a non-root user.
# The base is pinned by digest (the multi-arch index of python:3.11.10-slim-bookworm as
# published on Docker Hub); `docker pull` refuses it if the bytes differ. Bump tag and
# digest together.
FROM python:3.11.10-slim-bookworm@sha256:5148c0e4bbb64271bca1d3322360ebf4bfb7564507ae32dd639322e4952a6b16

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 UV_VERSION=0.13.9 \
    DAGSTER_HOME=/opt/dagster/dagster_home PATH=/app/.venv/bin:$PATH

RUN pip install --no-cache-dir uv==${UV_VERSION}

WORKDIR /app
# dependencies first (a layer that changes only with the lock), then the project
COPY pyproject.toml uv.lock ./
RUN uv sync --frozen --no-dev --no-install-project
COPY pipelines/ pipelines/
COPY assets/ assets/
COPY resources/ resources/
COPY emulator/ emulator/
COPY sql/ sql/
COPY setup.py workspace.yaml README.md ./
RUN uv sync --frozen --no-dev --no-editable

RUN useradd --uid 10001 --create-home servingbench \
    && mkdir -p "$DAGSTER_HOME" && chown servingbench "$DAGSTER_HOME"
USER 10001

EXPOSE 3030
CMD ["dagster", "api", "grpc", "-m", "servingbench.pipelines.definitions", "-h", "0.0.0.0", "-p", "3030"]
