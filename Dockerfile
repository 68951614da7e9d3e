# callgate sidecar image.
#   docker build -t callgate:<version> .   (pyproject.toml's [project].version, as scripts/image tags it)
# Without a daemon or any container registry: scripts/image (buildah, a base made from Debian's
# packages by mmdebstrap as PYTHON_IMAGE; docs/DEPLOY.md), which also runs and checks the image.
# Two stages: the first builds a virtualenv from PyPI (wheels only need pip, no compiler), the
# second copies it onto a clean python:3.11-slim and runs as an unprivileged user. The Helm chart
# (charts/callgate) runs it with a read-only root filesystem as uid/gid 10001.
# Optional dependencies of pyproject.toml ([project.optional-dependencies]) are added with
#   docker build --build-arg EXTRAS=otlp -t callgate:<version>-otlp .
# (otlp: the OTLP/gRPC span exporter, for [observability] tracing_exporter = "otlp").
ARG PYTHON_IMAGE=python:3.11-slim

FROM ${PYTHON_IMAGE} AS build
# Comma-separated extras of pyproject.toml; empty = none.
ARG EXTRAS=""
# A CA bundle for pip, only while building (a TLS-intercepting proxy): mount it into the build and
# name it, e.g. buildah bud -v /etc/ssl/certs/ca-certificates.crt:/run/build-ca.pem:ro
# --build-arg PIP_CERT=/run/build-ca.pem (scripts/image does). Unset: pip's own CA bundle.
ARG PIP_CERT
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
RUN python -m venv /opt/callgate
WORKDIR /src
COPY pyproject.toml README.md callgate.toml ./
COPY pep517 ./pep517
COPY policies ./policies
COPY callgate ./callgate
# The sidecar extra (the base install is the slim client). No Rust toolchain here: the build
# backend (pep517/callgate_build.py) builds the pure-Python package, and the Python core runs
# (docs/NATIVE.md; the platform wheel of scripts/dist carries the compiled core).
RUN /opt/callgate/bin/pip install ".[sidecar${EXTRAS:+,$EXTRAS}]" \
 && /opt/callgate/bin/python -m compileall -q /opt/callgate/lib \
 && /opt/callgate/bin/callgate --version

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="callgate" \
      org.opencontainers.image.description="Authorization sidecar for AI-agent tool calls" \
      org.opencontainers.image.licenses="Apache-2.0"
RUN groupadd --system --gid 10001 callgate \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin callgate
COPY --from=build /opt/callgate /opt/callgate
# PATH: `callgate` and the venv's `python` (the chart's exec probes run `python -m callgate.server.healthcheck`).
ENV PATH=/opt/callgate/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 10001:10001
WORKDIR /tmp
ENTRYPOINT ["callgate"]
CMD ["serve", "--config", "/etc/callgate/config/callgate.toml"]
