# One image for every process of the production topology (web, worker, beat, migrate).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app
COPY . .
# Editable, so the code runs from /app, next to templates/ and static/. The client
# (groundcontrol_client) beside it: the demo fleet's hands (`manage.py demo_fleet`) use it.
RUN pip install -e . ./client \
    && useradd --create-home --uid 10001 groundcontrol \
    && mkdir -p /app/var \
    && chown groundcontrol /app/var
USER groundcontrol

# The web server binds loopback unless told otherwise; inside a container loopback cannot be
# reached from a published port, so the image listens on all of the container's addresses
# (compose.yaml publishes the port on the host's loopback only).
ENV GC_BIND=0.0.0.0:8000
EXPOSE 8000
CMD ["python", "-m", "groundcontrol.server"]
