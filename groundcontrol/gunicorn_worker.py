"""The web tier's gunicorn worker: gunicorn's gthread worker, made cheaper for a fleet's hands,
which each keep one connection open and call again as soon as they are answered.

gthread hands every request of a kept-alive connection from its main thread (the poller) to a
pool thread and back: two thread switches, a pipe write and a selector re-registration per
request. Measured under load on two cores (docs/performance.md) that was about a fifth of a
worker's CPU per call. Two changes, and everything else is gthread's own:

- **A thread stays with its connection** while the worker holds fewer connections than it has
  threads: after answering, it waits briefly (`LINGER_S`) for the same client's next request
  and serves it directly. When connections outnumber threads it hands the connection back to
  the poller at once, exactly like gthread, so no connection waits behind another's linger.
- **An answer whose body is complete goes out in one write** (status line, headers and body),
  not two: the client wakes once per answer instead of twice. Its `Date` is formatted once a
  second, not once per answer.

Select it with `worker_class` (gunicorn.conf.py does).
"""

from __future__ import annotations

import select
import time
from datetime import datetime
from typing import Any

from gunicorn import util
from gunicorn.http import wsgi
from gunicorn.workers.gthread import ThreadWorker

# How long a thread waits for its client's next request before handing the connection back to
# the poller, and how often it checks meanwhile whether the worker has become busier (more
# connections than threads) or is stopping.
LINGER_S = 0.2
LINGER_SLICE_S = 0.02


def http_date() -> str:
    """The `Date` header's value now, formatted once a second: gunicorn formats it for every
    answer (`email.utils.formatdate`, about 3 % of a worker's time under load, measured with
    py-spy; docs/performance.md). Two threads crossing a second may both format it: harmless."""
    global _date  # noqa: PLW0603 - one (second, text) pair for the process, replaced whole
    second = int(time.time())
    cached_second, text = _date
    if cached_second != second:
        text = util.http_date(second)
        _date = (second, text)
    return text


_date: tuple[int, str] = (0, "")


class OneWriteResponse(wsgi.Response):
    """gunicorn's HTTP/1 response, writing the head together with a body it has whole."""

    def default_headers(self) -> list[str]:
        # gunicorn's own (27.0.1), with the date of `http_date`.
        if self.upgrade:
            connection = "upgrade"
        elif self.should_close():
            connection = "close"
        else:
            connection = "keep-alive"
        headers = [
            f"HTTP/{self.req.version[0]}.{self.req.version[1]} {self.status}\r\n",
            f"Server: {self.version}\r\n",
            f"Date: {http_date()}\r\n",
            f"Connection: {connection}\r\n",
        ]
        if self.chunked:
            headers.append("Transfer-Encoding: chunked\r\n")
        return headers

    def write(self, arg: bytes) -> None:
        if (
            not self.headers_sent
            and type(arg) is bytes
            and not self.chunked
            and not self._omits_body
            and self.response_length == len(arg)
        ):
            head = self.default_headers()
            head.extend(f"{name}: {value}\r\n" for name, value in self.headers)
            util.write(self.sock, ("".join(head) + "\r\n").encode("latin-1") + arg)
            self.headers_sent = True
            self.sent = len(arg)
            return
        super().write(arg)


class FleetWorker(ThreadWorker):
    """gthread, with a thread that stays with its connection while there are threads enough."""

    def handle(self, conn: Any) -> Any:
        keepalive = super().handle(conn)
        while keepalive is True and self._next_request_arrives(conn):
            keepalive = super().handle(conn)
        return keepalive

    def _next_request_arrives(self, conn: Any) -> bool:
        """True when the connection's next request is here (or already read ahead) while this
        thread can wait for it; False hands the connection back to the poller."""
        if conn.parser.unreader.buf.getvalue():
            return True
        deadline = time.monotonic() + LINGER_S
        while self.alive and self.nr_conns < self.cfg.threads:
            readable, _, _ = select.select([conn.sock], [], [], LINGER_SLICE_S)
            if readable:
                return True
            if time.monotonic() >= deadline:
                return False
        return False

    def handle_request(self, req: Any, conn: Any) -> bool:
        # gthread's own handle_request (gunicorn 27.0.1), with OneWriteResponse as the response.
        environ: dict[str, Any] = {}
        resp = None
        try:
            self.cfg.pre_request(self, req)
            request_start = datetime.now()
            resp, environ = wsgi.create(
                req, conn.sock, conn.client, conn.server, self.cfg, response_class=OneWriteResponse
            )
            environ["wsgi.multithread"] = True
            self.nr += 1
            if self.nr >= self.max_requests:
                if self.alive:
                    self.log.info("Autorestarting worker after current request.")
                    self.alive = False
                resp.force_close()
            if (
                not self.alive
                or not self.cfg.keepalive
                or len(self.keepalived_conns) >= self.max_keepalived
            ):
                resp.force_close()
            respiter = self.wsgi(environ, resp.start_response)
            try:
                if isinstance(respiter, environ["wsgi.file_wrapper"]):
                    resp.write_file(respiter)
                else:
                    for item in respiter:
                        resp.write(item)
                resp.close()
            finally:
                self.log.access(resp, req, environ, datetime.now() - request_start)
                if hasattr(respiter, "close"):
                    respiter.close()
            if resp.should_close():
                self.log.debug("Closing connection.")
                return False
        except OSError:
            raise  # a socket error is handle()'s to log or ignore, not the 500 below
        except (Exception, SystemExit):
            if resp and resp.headers_sent:
                # A timeout's abort after the head went out: a 500 now would corrupt the answer.
                self.log.exception("Error handling request")
                util.close_graceful(conn.sock)
                raise StopIteration() from None
            raise
        finally:
            try:
                self.cfg.post_request(self, req, environ, resp)
            except Exception:
                self.log.exception("Exception in post_request hook")
        return True
