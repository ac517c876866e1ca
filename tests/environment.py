"""The test run's environment, set before pytest-django loads the settings.

Loaded as a plugin (`-p tests.environment` in pyproject's addopts) because conftest.py files are
read only after the settings are. Without DATABASE_URL the run uses the embedded default's
PostgreSQL under var/ (starting it, and stopping it at the end if it started it) and names it in
DATABASE_URL, so the run and every server it starts (they inherit its environment) are shaped
exactly like a run against any other server. A run with DATABASE_URL is shaped like production,
which refuses to start without SECRET_KEY (groundcontrol/secret_key.py): the run gets a random
key of its own unless the caller gave one.
"""

from __future__ import annotations

import atexit
import os
import secrets

from groundcontrol import embedded_postgres
from groundcontrol.env import var_dir

if not os.environ.get("DATABASE_URL", "").strip():
    _var = var_dir()
    if not embedded_postgres.running(_var):
        atexit.register(embedded_postgres.stop, _var)
    os.environ["DATABASE_URL"] = embedded_postgres.database_url(_var)
# Each test process (and every server it starts, which inherits its environment) counts in a
# cache namespace of its own: Redis is shared by every test process on the machine, and one
# run's failed logins or rate-limit counts must not throttle another's.
os.environ["GC_CACHE_KEY_PREFIX"] = f"tests-{os.getpid()}-{secrets.token_hex(4)}"
if not os.environ.get("SECRET_KEY", "").strip():
    os.environ["SECRET_KEY"] = "tests-" + secrets.token_urlsafe(40)
