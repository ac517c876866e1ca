"""The test run's environment, set before pytest-django loads the settings.

Loaded as a plugin (`-p tests.environment` in pyproject's addopts) because conftest.py files are
read only after the settings are. A run on PostgreSQL (DATABASE_URL set, DEBUG off) is shaped
like production, which refuses to start without SECRET_KEY (groundcontrol/secret_key.py): the
run, and every server it starts (they inherit its environment), gets a random key of its own
unless the caller gave one.
"""

from __future__ import annotations

import os
import secrets

if not os.environ.get("SECRET_KEY", "").strip():
    os.environ["SECRET_KEY"] = "tests-" + secrets.token_urlsafe(40)
