# syntax=docker/dockerfile:1
# `ca serve` of a project, for replicas behind a load balancer (docs/deploy.md).
#
#   docker build -t cleveragents .
#   docker run -p 8765:8765 -e OPS_TOKEN=... -e TEAM_TOKEN=... cleveragents
#
# The image serves the repository's example project (agents/, with deploy/ca.yaml as its ca.yaml,
# which requires tokens); mount your own project on /project to serve it instead.

ARG PYTHON_IMAGE=python:3.12-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
COPY --from=ghcr.io/astral-sh/uv:0.9 /uv /usr/local/bin/uv
ENV UV_COMPILE_BYTECODE=1 UV_LINK_MODE=copy UV_PYTHON_DOWNLOADS=never UV_PROJECT_ENVIRONMENT=/app/.venv
WORKDIR /src
# The locked dependencies first, in a layer of their own: it changes only with uv.lock.
COPY pyproject.toml uv.lock README.md ./
RUN uv sync --locked --no-dev --no-install-project --extra postgres --extra otel
COPY framework ./framework
COPY profiles ./profiles
COPY templates ./templates
RUN uv sync --locked --no-dev --no-editable --extra postgres --extra otel

FROM ${PYTHON_IMAGE}
# A numeric user, so that Kubernetes' runAsNonRoot can check it; it owns /project, where
# `ca serve` keeps its .ca/ folder.
RUN groupadd --gid 10001 ca \
    && useradd --uid 10001 --gid 10001 --create-home --shell /usr/sbin/nologin ca \
    && install -d -o 10001 -g 10001 /project
COPY --from=build /app/.venv /app/.venv
WORKDIR /project
COPY --chown=10001:10001 agents ./agents
COPY --chown=10001:10001 tools ./tools
COPY --chown=10001:10001 ca.mcp.lock ./
COPY --chown=10001:10001 deploy/ca.yaml ./ca.yaml
USER 10001:10001
# Settings from the environment (docs/deploy.md): bound on every address, which `ca serve`
# allows only with server.auth in ca.yaml; logs as JSON lines on stderr.
ENV PATH=/app/.venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    MCP_PYTHON=/app/.venv/bin/python \
    CA_HOST=0.0.0.0 \
    CA_PORT=8765 \
    CA_LOG_FORMAT=json \
    CA_SHUTDOWN_TIMEOUT=30s
EXPOSE 8765
# Liveness only: /readyz (the store answers) is for the load balancer, which stops sending to a
# replica whose database is away without the replica being restarted.
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:' + os.environ.get('CA_PORT', '8765') + '/healthz', timeout=3)"]
# SIGTERM drains: running tasks get CA_SHUTDOWN_TIMEOUT to finish (give the container more than that).
STOPSIGNAL SIGTERM
ENTRYPOINT ["ca", "serve"]
CMD ["/project"]
