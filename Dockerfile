# The Brain's image: `brain serve` by default, `brain worker` and `brain db upgrade` by command.
# Build:  docker build -t brain .
# Where no registry is reachable, give a local base and the CA bundle your network needs:
#   DOCKER_BUILDKIT=1 docker build --build-arg BASE=local/python:3.11-bookworm \
#       --secret id=ca,src=/etc/ssl/certs/ca-certificates.crt -t brain .
# See docs/deploy.md.
ARG BASE=python:3.12-slim
FROM ${BASE}

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    VIRTUAL_ENV=/opt/brain \
    PATH=/opt/brain/bin:$PATH

# The package first (the layer changes only with the code); the venv keeps it apart from the
# base image's own Python packages.
COPY pyproject.toml README.md /src/
COPY brain /src/brain
# The optional "ca" secret: a CA bundle for pip (a network that inspects TLS); without it the
# image's own bundle is used.
RUN --mount=type=secret,id=ca,target=/run/secrets/ca \
    if [ -s /run/secrets/ca ]; then export PIP_CERT=/run/secrets/ca; fi \
    && python3 -m venv /opt/brain \
    && pip install /src \
    && rm -rf /src \
    && useradd --uid 10001 --user-group --home-dir /srv/brain --create-home brain \
    && mkdir -p /srv/brain/flows /srv/brain/data \
    && chown brain:brain /srv/brain/data

COPY --chmod=755 docker/entrypoint.sh /usr/local/bin/brain-entrypoint
WORKDIR /srv/brain
# Workflows go in /srv/brain/flows (mounted, or copied by an image derived from this one);
# without a PostgreSQL URL, runs are kept in SQLite on the data volume.
ENV BRAIN_DATABASE_URL=sqlite+aiosqlite:////srv/brain/data/brain.db
VOLUME ["/srv/brain/data"]
EXPOSE 8000
# The health check runs as root, so steps (user brain) cannot read its environment; and
# isolated (-I), so that it imports nothing from the working folder, which brain can write.
HEALTHCHECK --interval=5s --timeout=5s --start-period=30s --retries=3 \
    CMD ["/opt/brain/bin/python3", "-I", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/health', timeout=4)"]
# Every command runs as the user brain (uid 10001): the entrypoint drops root at once.
ENTRYPOINT ["brain-entrypoint"]
# Listening on every interface needs BRAIN_API_TOKEN: `brain serve` refuses to start without it.
CMD ["brain", "serve", "/srv/brain/flows", "--host", "0.0.0.0", "--port", "8000"]
