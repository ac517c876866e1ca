"""The WSGI application: Django."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "groundcontrol.settings")
application = get_wsgi_application()
