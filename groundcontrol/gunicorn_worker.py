"""The web tier's gunicorn worker: gunicorn's gthread worker, made cheaper for a fleet's hands,
which each keep one connection open and call again as soon as they are answered.

gthread hands every request of a kept-alive connection from its main thread (the poller) to a
pool thread and back: two thread switches, a pipe write and a selector re-registration per
request. Measured under load on two cores (docs/performance.md) that was about a fifth of a
worker's CPU per call. Three changes, and everything else is gthread's own:

- **A thread stays with its connection** while the worker holds fewer connections than it has
  threads: after answering, it waits briefly (`LINGER_S`) for the same client's next request
  and serves it directly. When connections outnumber threads it hands the connection back to
  the poller at once, exactly like gthread, so no connection waits behind another's linger.
- **A hot-path call on a kept-alive connection comes in through a front door** (`FrontDoor`):
  the request is parsed by gunicorn's own C parser (gunicorn_h1c, gunicorn's `fast` parser)
  and handed to the application's hot path (fleet/hotpath.py) as a WSGI environ built the way
  gunicorn builds it, and the answer is written in one piece. gunicorn's request and response
  objects, its header policy, its environ and its body readers are about a third of a worker's
  CPU per call (docs/performance.md); a hot call needs none of what they do. Anything the front
  door is not sure of goes through gunicorn untouched: another method or path, HTTP/1.0, a
  chunked body, `Expect`, `Connection: close` or `upgrade`, proxy headers, a repeated header, a
  malformed request. A call the hot path leaves to Django goes through gunicorn too, carrying
  what the hot path did (the rate limit's count; that it tried).
- **An answer whose body is complete goes out in one write** (status line, headers and body),
  not two: the client wakes once per answer instead of twice. Its `Date` is formatted once a
  second, not once per answer.

Select it with `worker_class` (gunicorn.conf.py does). `GC_FRONT_DOOR=off` closes the front door.
"""

from __future__ import annotations

import io
import os
import select
import time
from datetime import datetime
from typing import Any

from gunicorn import util
from gunicorn.http import wsgi
from gunicorn.http.message import MAX_REQUEST_LINE
from gunicorn.workers.gthread import ThreadWorker

try:
    import gunicorn_h1c
except ImportError:  # pragma: no cover - a dependency; without it gunicorn's parser and no door
    gunicorn_h1c = None

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


def head_lines(version: str, status: str, connection: str) -> list[str]:
    """An answer's first lines as gunicorn writes them (27.0.1), with the date of `http_date`."""
    return [
        f"HTTP/{version} {status}\r\n",
        f"Server: {wsgi.SERVER}\r\n",
        f"Date: {http_date()}\r\n",
        f"Connection: {connection}\r\n",
    ]


def write_whole(sock: Any, head: list[str], headers: list[tuple[str, str]], body: bytes) -> None:
    """The head, the headers and the body in one write."""
    head.extend(f"{name}: {value}\r\n" for name, value in headers)
    head.append("\r\n")
    util.write(sock, "".join(head).encode("latin-1") + body)


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
        major, minor = self.req.version
        headers = head_lines(f"{major}.{minor}", self.status, connection)
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
            write_whole(self.sock, self.default_headers(), self.headers, arg)
            self.headers_sent = True
            self.sent = len(arg)
            return
        super().write(arg)


# Request headers after which the front door steps aside: framing it does not read, and every
# header that gunicorn's policy may turn into something else in the environ (the scheme, a
# forwarded address or path).
_STEP_ASIDE = frozenset(
    {
        b"transfer-encoding",
        b"expect",
        b"upgrade",
        b"http2-settings",
        b"te",
        b"trailer",
        b"forwarded",
        b"proxy-connection",
    }
)
# A body larger than this goes through gunicorn (the hot path's bodies are a few hundred bytes).
FRONT_DOOR_MAX_BODY = 64 * 1024
_CARRY = "front_door_carry"


def _request_line_limit(setting: int) -> int:
    """`limit_request_line` as gunicorn hands it to this parser (gunicorn.http.message.Request):
    0 is unlimited (1 MiB for the C parser), and nothing beyond gunicorn's maximum."""
    if setting == 0:
        return 1024 * 1024
    if setting < 0 or setting >= MAX_REQUEST_LINE:
        return MAX_REQUEST_LINE
    return setting


class FrontDoor:
    """Answers a hot-path call on a kept-alive connection without gunicorn's WSGI machinery.

    The application must offer `serves(path)` (whether a POST there may be a hot call),
    `respond(environ)` (the answer as status, headers and body, or None for the application to
    answer) and `carried` (the environ keys a request takes along to the application when
    `respond` left it there); `fleet.hotpath.HotPath` does.
    """

    def __init__(self, worker: Any) -> None:
        cfg = worker.cfg
        self.worker = worker
        self.hot_path = worker.wsgi
        self.limits = {
            "limit_request_line": _request_line_limit(cfg.limit_request_line),
            "limit_request_fields": cfg.limit_request_fields,
            "limit_request_field_size": cfg.limit_request_field_size,
            "permit_unconventional_http_method": cfg.permit_unconventional_http_method,
            "permit_unconventional_http_version": cfg.permit_unconventional_http_version,
        }
        self.step_aside = {name.lower().encode("latin-1") for name in cfg.secure_scheme_headers}
        self.step_aside |= {name.lower().encode("latin-1") for name in cfg.forwarder_headers}
        self.base = wsgi.base_environ(cfg)
        self.base.update({"wsgi.multithread": True, "wsgi.url_scheme": "http", "SCRIPT_NAME": ""})

    @classmethod
    def for_worker(cls, worker: Any) -> FrontDoor | None:
        """A front door for `worker`, or None where gunicorn must see every request: turned off,
        no hot path, or a setting whose effect the front door does not reproduce (TLS, an access
        log, the PROXY protocol, request hooks, a SCRIPT_NAME, gunicorn's Python parser)."""
        cfg = worker.cfg
        settings = cfg.settings
        app = worker.wsgi
        if (
            os.environ.get("GC_FRONT_DOOR", "on").lower() in ("off", "0", "false", "no")
            or gunicorn_h1c is None
            or not hasattr(gunicorn_h1c, "LimitRequestLine")
            or cfg.http_parser == "python"
            or not all(hasattr(app, name) for name in ("serves", "respond", "carried"))
            or cfg.is_ssl
            or cfg.accesslog
            or cfg.proxy_protocol != "off"
            or getattr(cfg, "protocol", "http") != "http"
            or os.environ.get("SCRIPT_NAME")
            or settings["pre_request"].value is not settings["pre_request"].default
            or settings["post_request"].value is not settings["post_request"].default
        ):
            return None
        return cls(worker)

    def serve(self, conn: Any) -> bool | None:
        """Answer the connection's next request if the hot path does; True to keep the connection,
        False to close it, None when gunicorn's own path must take the request (its bytes are put
        back, and what the hot path did travels with it)."""
        unreader = conn.parser.unreader
        data = unreader.take_buffered() or conn.sock.recv(8192)
        if not data:
            return False  # the client closed the connection
        while True:
            try:
                parsed = gunicorn_h1c.parse_request(data, last_len=0, **self.limits)
                break
            except gunicorn_h1c.IncompleteError:
                more = None if len(data) > 16384 else conn.sock.recv(8192)
                if not more:
                    unreader.unread(data)
                    return None
                data += more
            except Exception:  # noqa: BLE001 - a malformed request: gunicorn answers it
                unreader.unread(data)
                return None
        environ = self._environ(parsed, conn)
        if environ is None:
            unreader.unread(data)
            return None
        start = parsed["consumed"]
        length = int(environ["CONTENT_LENGTH"])
        while len(data) < start + length:
            more = conn.sock.recv(start + length - len(data) + 8192)
            if not more:
                unreader.unread(data)
                return None
            data += more
        environ["wsgi.input"] = io.BytesIO(data[start : start + length])
        rest = data[start + length :]
        try:
            answered = self.hot_path.respond(environ)
        except Exception:  # noqa: BLE001 - Django answers it (a 503 when the database is down)
            self.worker.log.exception("front door: the hot path failed")
            answered = None
        if answered is None:
            # Django answers it. What the hot path did goes with it: the call was counted once
            # and the statement already ran (and matched nothing).
            carried = {key: environ[key] for key in self.hot_path.carried if key in environ}
            setattr(conn, _CARRY, carried)
            unreader.unread(data)
            return None
        if rest:
            unreader.unread(rest)
        keepalive = self.worker.count_request()
        status, headers, body = answered
        head = head_lines("1.1", status, "keep-alive" if keepalive else "close")
        write_whole(conn.sock, head, headers, body)
        conn.parser.req_count += 1
        return keepalive

    def _environ(self, parsed: dict[str, Any], conn: Any) -> dict[str, Any] | None:
        """The request's WSGI environ as gunicorn would build it, or None for a request the front
        door leaves to gunicorn."""
        if parsed["method"] != b"POST" or parsed["minor_version"] != 1:
            return None
        raw_path = parsed["path"]
        if not raw_path.startswith(b"/") or any(c in raw_path for c in b"?#%"):
            return None  # a query, a fragment, an escape or another form: gunicorn's to split
        path = raw_path.decode("latin-1")
        if not self.hot_path.serves(path):
            return None
        environ = dict(self.base)
        step_aside = self.step_aside
        for raw_name, raw_value in parsed["headers"]:
            name = raw_name.lower()
            if (
                name in _STEP_ASIDE
                or name in step_aside
                or name.startswith(b"x-forwarded-")
                or b"_" in name
                or (name == b"connection" and raw_value.lower() != b"keep-alive")
            ):
                return None
            if name == b"content-type":
                key = "CONTENT_TYPE"
            elif name == b"content-length":
                key = "CONTENT_LENGTH"
            else:
                key = "HTTP_" + name.decode("latin-1").upper().replace("-", "_")
            if key in environ:
                return None  # a repeated header: gunicorn joins or refuses it
            environ[key] = raw_value.decode("latin-1")
        length = environ.get("CONTENT_LENGTH", "")
        if "HTTP_HOST" not in environ or not length.isdigit() or int(length) > FRONT_DOOR_MAX_BODY:
            return None
        server, client = conn.server, conn.client
        if not isinstance(server, tuple) or not isinstance(client, tuple):
            return None
        environ.update(
            {
                "REQUEST_METHOD": "POST",
                "QUERY_STRING": "",
                "RAW_URI": path,
                "PATH_INFO": path,
                "SERVER_PROTOCOL": "HTTP/1.1",
                "SERVER_NAME": server[0],
                "SERVER_PORT": str(server[1]),
                "REMOTE_ADDR": client[0],
                "REMOTE_PORT": str(client[1]),
                "gunicorn.socket": conn.sock,
            }
        )
        return environ


class FleetWorker(ThreadWorker):
    """gthread, with a thread that stays with its connection while there are threads enough."""

    front_door: FrontDoor | None = None

    def load_wsgi(self) -> None:
        super().load_wsgi()
        self.front_door = FrontDoor.for_worker(self)

    def handle(self, conn: Any) -> Any:
        keepalive = self._handle_one(conn)
        while keepalive is True and self._next_request_arrives(conn):
            keepalive = self._handle_one(conn)
        return keepalive

    def _handle_one(self, conn: Any) -> Any:
        """One request: through the front door when it takes it, else gthread's own handle()
        (which also serves a connection's first request: TLS, HTTP/2 and the wait for data)."""
        try:
            if self.front_door is not None and conn.initialized and not conn.is_http2:
                try:
                    conn.sock.setblocking(True)
                    served = self.front_door.serve(conn)
                except OSError:
                    return False  # the client went away: gthread closes the connection
                if served is not None:
                    return served
            return super().handle(conn)
        finally:
            # What the front door carried belongs to the request it put back, handled just now.
            setattr(conn, _CARRY, None)

    def count_request(self) -> bool:
        """gthread's bookkeeping of a request being answered (gunicorn 27.0.1's handle_request):
        False when its connection must close after it."""
        self.nr += 1
        if self.nr >= self.max_requests:
            if self.alive:
                self.log.info("Autorestarting worker after current request.")
                self.alive = False
            return False
        return bool(
            self.alive and self.cfg.keepalive and len(self.keepalived_conns) < self.max_keepalived
        )

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
            carried = getattr(conn, _CARRY, None)
            if carried:
                environ.update(carried)  # what the front door's hot path did with this request
                setattr(conn, _CARRY, None)
            if not self.count_request():
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
