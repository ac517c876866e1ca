"""Django's PostgreSQL backend for the embedded server (groundcontrol/embedded_postgres): the
process's first connection starts the server of the entry's VAR_DIR, or finds it running, and
takes its socket directory as the host. Everything else is Django's own backend."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from django.db.backends.postgresql import base

from groundcontrol import embedded_postgres

_lock = threading.Lock()
_hosts: dict[str, str] = {}


def _host(var_dir: str) -> str:
    with _lock:
        if var_dir not in _hosts:
            _hosts[var_dir] = embedded_postgres.socket_dir(embedded_postgres.start(Path(var_dir)))
        return _hosts[var_dir]


class DatabaseWrapper(base.DatabaseWrapper):
    def get_connection_params(self) -> dict[str, Any]:
        if not self.settings_dict["HOST"]:
            self.settings_dict["HOST"] = _host(self.settings_dict["VAR_DIR"])
        return super().get_connection_params()
