# Load the Celery app whenever Django starts, so `shared_task`s bind to it.
from groundcontrol.celery import app as celery_app

__all__ = ["celery_app"]
