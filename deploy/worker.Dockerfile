# syntax=docker/dockerfile:1
# A jsworker worker image: installs the project, adds an app, runs
# `jsworker run $JSWORKER_APP --metrics-port 9400`.
#
# Build from the repository root (the project is the build context):
#   docker build -f deploy/worker.Dockerfile -t jsworker-worker .
#   docker build -f deploy/worker.Dockerfile --build-arg APP_DIR=path/to/your/app -t my-worker .
# deploy/worker.Dockerfile.dockerignore keeps .venv, .git and caches out of the context.
FROM python:3.11-slim

# tini as PID 1: it forwards SIGTERM to the worker (which then finishes running jobs within
# --grace) and reaps zombies. Python as PID 1 would ignore a SIGTERM that arrives before the
# worker has installed its handler, and the container would only stop by SIGKILL.
RUN apt-get update \
    && apt-get install -y --no-install-recommends tini \
    && rm -rf /var/lib/apt/lists/*

# The project itself: only what the wheel needs, so edits to tests or docs do not bust the
# cache of this layer.
# Dependencies at the versions in deploy/requirements.lock (the ones the suite ran against),
# then the project without re-resolving them.
WORKDIR /src
COPY deploy/requirements.lock ./
RUN pip install --no-cache-dir -r requirements.lock
COPY pyproject.toml README.md ./
COPY jsworker ./jsworker
RUN pip install --no-cache-dir --no-deps . && rm -rf /src

# The app: a directory whose modules define an App; JSWORKER_APP names the module. The default
# is the quickstart's tasks module, so the image runs as is.
ARG APP_DIR=examples/quickstart
COPY ${APP_DIR} /app
WORKDIR /app
ENV PYTHONPATH=/app \
    JSWORKER_APP=tasks \
    PYTHONUNBUFFERED=1

# No reason to run jobs as root.
RUN useradd --system --uid 10001 --no-create-home jsworker
USER 10001

# Prometheus metrics (the port below; compose's prometheus.yml and the k8s manifests use it).
EXPOSE 9400

# sh -c expands $JSWORKER_APP, then `exec` replaces the shell with the worker so that tini's
# signals reach it; "$@" appends the container's arguments (CMD below, or compose `command:` /
# k8s `args:`) as further `jsworker run` options.
ENTRYPOINT ["tini", "--", "/bin/sh", "-c", "exec jsworker run \"$JSWORKER_APP\" --metrics-port 9400 \"$@\"", "jsworker"]
# Default options; whoever stops the container must wait longer than --grace (compose:
# stop_grace_period, k8s: terminationGracePeriodSeconds).
CMD ["--grace", "30"]
