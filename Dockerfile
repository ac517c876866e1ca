# One image for every process of the production topology (web, worker, beat, migrate).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app
COPY . .
# Editable, so the code runs from /app, next to templates/ and static/.
RUN pip install -e . \
    && useradd --create-home --uid 10001 groundcontrol \
    && mkdir -p /app/var \
    && chown groundcontrol /app/var
USER groundcontrol

EXPOSE 8000
CMD ["gunicorn", "-c", "gunicorn.conf.py", "groundcontrol.wsgi:application"]
