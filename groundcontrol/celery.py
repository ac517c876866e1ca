"""The Celery app: Redis as broker, configuration from Django settings (`CELERY_*`), the beat
schedule in `settings.CELERY_BEAT_SCHEDULE`, and the tasks in `ops/tasks.py`.

    celery -A groundcontrol worker     # runs the jobs (any number of them)
    celery -A groundcontrol beat       # enqueues them on schedule (two at once are harmless)

Without REDIS_URL the broker is in memory and tasks run eagerly; the embedded scheduler
(`groundcontrol/scheduler.py`) then runs the same tasks on a timer inside the web process.
"""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "groundcontrol.settings")

app = Celery("groundcontrol")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["ops"])
