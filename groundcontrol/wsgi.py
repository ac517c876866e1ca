"""The WSGI application: Django, with the hand's hot calls answered in front of it on PostgreSQL
(fleet/hotpath.py)."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "groundcontrol.settings")
django_application = get_wsgi_application()

from fleet.hotpath import HotPath  # noqa: E402 - needs the apps loaded above

application = HotPath(django_application)
