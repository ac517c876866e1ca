"""Bodies run at once, each on its own thread and PostgreSQL connection."""

from __future__ import annotations

import threading

from django.db import connection


def together(bodies: list) -> list[BaseException]:  # noqa: ANN001
    """Run each body on its own thread and connection, released at once by a barrier."""
    barrier = threading.Barrier(len(bodies))
    crashes: list[BaseException] = []

    def wrap(body) -> None:  # noqa: ANN001
        try:
            barrier.wait()
            body()
        except BaseException as crash:  # noqa: BLE001 - any crash fails the test
            crashes.append(crash)
        finally:
            connection.close()

    threads = [threading.Thread(target=wrap, args=(body,)) for body in bodies]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
        assert not thread.is_alive(), "a worker hung"
    return crashes
