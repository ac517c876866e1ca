"""The web tier's gunicorn worker (groundcontrol/gunicorn_worker.py), under a real gunicorn: every
framing of an answer intact, kept-alive and pipelined requests answered in order, no connection
starved when they outnumber the threads, and a stop that does not wait on a lingering thread.
The answer's one write is checked against a socket that records its writes."""

from __future__ import annotations

import email.utils
import json
import os
import runpy
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from gunicorn.config import Config
from gunicorn.http import wsgi

from groundcontrol import gunicorn_worker
from groundcontrol.gunicorn_worker import FleetWorker, OneWriteResponse

ROOT = Path(__file__).resolve().parents[2]


# --- a real gunicorn serving tests/web/wsgi_app.py with the worker --------------------------------


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Server:
    def __init__(
        self,
        tmp_path: Path,
        threads: int,
        args: tuple[str, ...] = (),
        env: dict[str, str] | None = None,
    ) -> None:
        self.port = _free_port()
        config = tmp_path / "empty.conf.py"  # not ./gunicorn.conf.py, which gunicorn would read
        config.write_text("")
        self.log = tmp_path / "gunicorn.log"
        given = env or {}
        env = {k: v for k, v in os.environ.items() if not k.startswith(("GUNICORN_", "GC_"))}
        env.update(given)
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(  # noqa: S603
                [
                    sys.executable, "-m", "gunicorn", "-c", str(config),
                    "--worker-class", "groundcontrol.gunicorn_worker.FleetWorker",
                    "--workers", "1", "--threads", str(threads), "--keep-alive", "5",
                    "--graceful-timeout", "20",
                    "--bind", f"127.0.0.1:{self.port}", *args, "tests.web.wsgi_app:application",
                ],
                cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            assert self.process.poll() is None, self.log.read_text()
            try:
                with self.connect() as probe:
                    probe.sendall(request("GET", "/echo"))
                    assert read_answer(probe)[0] == 200
                return
            except OSError:
                time.sleep(0.1)
        raise AssertionError("gunicorn did not serve:\n" + self.log.read_text())

    def connect(self) -> socket.socket:
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=10)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    running = Server(tmp_path, threads=4)
    yield running
    running.stop()


def request(
    method: str, path: str, body: bytes = b"", close: bool = False, headers: str = ""
) -> bytes:
    head = f"{method} {path} HTTP/1.1\r\nHost: test\r\nContent-Length: {len(body)}\r\n"
    if close:
        head += "Connection: close\r\n"
    return head.encode() + headers.encode() + b"\r\n" + body


class Reader:
    """Reads answers off one connection, keeping what it read ahead."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = b""

    def _fill(self) -> None:
        data = self.sock.recv(65536)
        if not data:
            raise ConnectionError("the server closed the connection")
        self.buffer += data

    def _take_line(self) -> bytes:
        while b"\r\n" not in self.buffer:
            self._fill()
        line, self.buffer = self.buffer.split(b"\r\n", 1)
        return line

    def _take(self, size: int) -> bytes:
        while len(self.buffer) < size:
            self._fill()
        data, self.buffer = self.buffer[:size], self.buffer[size:]
        return data

    def answer(self, method: str = "GET") -> tuple[int, dict[str, str], bytes]:
        status = int(self._take_line().split()[1])
        headers = {}
        while line := self._take_line():
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        if method == "HEAD" or status in (204, 304) or status < 200:
            return status, headers, b""
        if headers.get("transfer-encoding") == "chunked":
            body = b""
            while size := int(self._take_line(), 16):
                body += self._take(size)
                self._take_line()
            self._take_line()
            return status, headers, body
        return status, headers, self._take(int(headers["content-length"]))


def read_answer(sock: socket.socket, method: str = "GET") -> tuple[int, dict[str, str], bytes]:
    return Reader(sock).answer(method)


# --- the worker under gunicorn ------------------------------------------------------------------


def test_the_web_tier_runs_this_worker() -> None:
    settings = runpy.run_path(str(ROOT / "gunicorn.conf.py"))
    assert settings["worker_class"] == "groundcontrol.gunicorn_worker.FleetWorker"


def test_a_kept_alive_connection_gets_every_framing_whole_and_in_order(server: Server) -> None:
    with server.connect() as sock:
        reader = Reader(sock)
        for n in range(30):
            sock.sendall(request("POST", "/echo", f"call {n}".encode()))
            status, headers, body = reader.answer()
            assert (status, body) == (200, f"echo:call {n}".encode())
            assert headers["connection"] == "keep-alive"
            assert headers["content-length"] == str(len(body))
        sock.sendall(request("GET", "/parts"))
        assert reader.answer()[::2] == (200, b"0123456789")
        sock.sendall(request("GET", "/chunked"))
        status, headers, body = reader.answer()
        assert (status, headers["transfer-encoding"], body) == (200, "chunked", b"alpha-beta-gamma")
        sock.sendall(request("GET", "/empty"))
        status, headers, body = reader.answer()
        assert (status, body) == (204, b"")
        assert "content-length" not in headers
        sock.sendall(request("HEAD", "/echo"))
        status, headers, body = reader.answer("HEAD")
        assert (status, headers["content-length"], body) == (200, "5", b"")
        # Nothing was sent beyond the answers (a HEAD's body would show up here).
        sock.sendall(request("POST", "/echo", b"last"))
        assert reader.answer()[::2] == (200, b"echo:last")
        assert reader.buffer == b""


def test_pipelined_requests_are_answered_in_order(server: Server) -> None:
    with server.connect() as sock:
        reader = Reader(sock)
        sock.sendall(b"".join(request("POST", "/echo", f"p{n}".encode()) for n in range(5)))
        assert [reader.answer()[2] for _ in range(5)] == [f"echo:p{n}".encode() for n in range(5)]


def test_a_connection_idle_past_the_linger_is_still_served(server: Server) -> None:
    with server.connect() as sock:
        reader = Reader(sock)
        sock.sendall(request("POST", "/echo", b"one"))
        assert reader.answer()[2] == b"echo:one"
        # Longer than a thread waits: the connection went back to gunicorn's poller.
        time.sleep(gunicorn_worker.LINGER_S * 3)
        sock.sendall(request("POST", "/echo", b"two"))
        assert reader.answer()[2] == b"echo:two"
        sock.sendall(request("POST", "/echo", b"bye", close=True))
        status, headers, body = reader.answer()
        assert (status, headers["connection"], body) == (200, "close", b"echo:bye")
        assert sock.recv(1) == b""


def test_connections_outnumbering_threads_are_all_served(server: Server) -> None:
    """Four threads, twelve clients that keep calling until every one of them has been answered
    twenty times: threads that stayed with their first connections would serve those four for
    ever and leave the other eight unanswered."""
    failures: list[BaseException] = []
    served = [0] * 12
    deadline = time.monotonic() + 30

    def client(i: int) -> None:
        try:
            with server.connect() as sock:
                reader = Reader(sock)
                n = 0
                while min(served) < 20 and time.monotonic() < deadline:
                    sock.sendall(request("POST", "/echo", f"{i}/{n}".encode()))
                    assert reader.answer()[2] == f"echo:{i}/{n}".encode()
                    served[i] += 1
                    n += 1
        except BaseException as exc:  # noqa: BLE001 - reported below
            failures.append(exc)

    clients = [threading.Thread(target=client, args=(i,)) for i in range(12)]
    for thread in clients:
        thread.start()
    for thread in clients:
        thread.join(60)
    assert not failures, failures
    assert min(served) >= 20, served


def test_a_stopping_worker_answers_and_does_not_wait_on_a_kept_connection(
    server: Server,
) -> None:
    with server.connect() as idle, server.connect() as busy:
        idle.sendall(request("POST", "/echo", b"x"))
        assert read_answer(idle)[2] == b"echo:x"
        busy.sendall(request("GET", "/slow", b""))
        time.sleep(0.05)
        started = time.monotonic()
        os.kill(server.process.pid, signal.SIGTERM)
        # The request in flight is finished, and told the connection closes.
        status, headers, body = read_answer(busy)
        assert (status, body) == (200, b"slow")
        assert server.process.wait(timeout=15) == 0
        # Well inside the 20 s graceful timeout: the kept connection did not hold the worker.
        assert time.monotonic() - started < 10
        assert idle.recv(1) == b""


# --- one write per answer -----------------------------------------------------------------------


class RecordingSocket:
    def __init__(self) -> None:
        self.writes: list[bytes] = []

    def sendall(self, data: bytes) -> None:
        self.writes.append(bytes(data))


class FakeRequest:
    def __init__(self, method: str = "GET") -> None:
        self.method = method
        self.version = (1, 1)
        self.headers: list[tuple[str, str]] = []

    def should_close(self) -> bool:
        return False


def _respond(
    status: str, headers: list[tuple[str, str]], parts: list[bytes], method: str = "GET"
) -> list[bytes]:
    sock = RecordingSocket()
    response = OneWriteResponse(FakeRequest(method), sock, Config())
    response.start_response(status, headers)
    for part in parts:
        response.write(part)
    response.close()
    return sock.writes


def test_an_answer_with_its_whole_body_goes_out_in_one_write() -> None:
    writes = _respond(
        "200 OK", [("Content-Length", "11"), ("X-Request-Id", "r1")], [b"hello world"]
    )
    assert len(writes) == 1
    head, body = writes[0].split(b"\r\n\r\n", 1)
    assert head.startswith(b"HTTP/1.1 200 OK\r\n")
    assert b"\r\nContent-Length: 11" in head and b"\r\nX-Request-Id: r1" in head
    assert body == b"hello world"


@pytest.mark.parametrize(
    ("status", "headers", "parts", "method"),
    [
        ("200 OK", [("Content-Length", "10")], [b"01234", b"56789"], "GET"),  # in pieces
        ("200 OK", [], [b"alpha", b"beta"], "GET"),  # chunked
        ("204 No Content", [], [], "GET"),  # no body
        ("200 OK", [("Content-Length", "5")], [b"hello"], "HEAD"),  # no body sent
    ],
)
def test_other_answers_are_written_exactly_as_gunicorn_writes_them(
    status: str, headers: list[tuple[str, str]], parts: list[bytes], method: str
) -> None:
    ours = _respond(status, headers, parts, method)
    sock = RecordingSocket()
    theirs_response = wsgi.Response(FakeRequest(method), sock, Config())
    theirs_response.start_response(status, headers)
    for part in parts:
        theirs_response.write(part)
    theirs_response.close()

    def without_date(writes: list[bytes]) -> list[bytes]:
        return [
            b"\r\n".join(line for line in w.split(b"\r\n") if not line.startswith(b"Date: "))
            for w in writes
        ]

    assert without_date(ours) == without_date(sock.writes)
    assert ours  # at least the head


def test_the_date_is_gunicorns_own_formatted_once_a_second(monkeypatch) -> None:  # noqa: ANN001
    def date_of(writes: list[bytes]) -> bytes:
        (line,) = [x for x in writes[0].split(b"\r\n") if x.startswith(b"Date: ")]
        return line

    formatted = []
    monkeypatch.setattr(gunicorn_worker, "_date", (0, ""))
    monkeypatch.setattr(email.utils, "formatdate", _counting(email.utils.formatdate, formatted))
    # Within one second, then the next: each answer's date is gunicorn's for that instant.
    for instant in (1_900_000_000.2, 1_900_000_000.9, 1_900_000_001.1):
        monkeypatch.setattr(time, "time", lambda instant=instant: instant)
        ours = _respond("200 OK", [("Content-Length", "2")], [b"ok"])
        sock = RecordingSocket()
        theirs = wsgi.Response(FakeRequest("GET"), sock, Config())
        theirs.start_response("200 OK", [("Content-Length", "2")])
        theirs.write(b"ok")
        assert date_of(ours) == date_of(sock.writes), instant
    assert date_of(ours) == b"Date: Sun, 17 Mar 2030 17:46:41 GMT"
    # gunicorn formatted three dates; ours two, one per second.
    assert len(formatted) == 3 + 2


def _counting(function, calls: list):  # noqa: ANN001, ANN202
    def counted(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        calls.append(args)
        return function(*args, **kwargs)

    return counted


def test_the_worker_is_gthread_underneath() -> None:
    from gunicorn.workers.gthread import ThreadWorker

    assert issubclass(FleetWorker, ThreadWorker)


# --- the front door: hot calls on a kept-alive connection ---------------------------------------


def raw_answer(reader: Reader) -> tuple[list[bytes], bytes]:
    """An answer's head lines as sent, without its Date, and its body."""
    lines = []
    while line := reader._take_line():
        lines.append(line)
    length = next(int(x.split(b":")[1]) for x in lines if x.lower().startswith(b"content-length"))
    return [x for x in lines if not x.startswith(b"Date: ")], reader._take(length)


def hot(reader: Reader) -> dict:
    status, _, body = reader.answer()
    assert status == 200, body
    return json.loads(body)


def test_a_hot_call_on_a_kept_connection_comes_through_the_front_door_as_gunicorn_serves_it(
    server: Server,
) -> None:
    """A connection's first request always goes through gunicorn (it sets the connection up);
    the next ones through the front door, with the environ gunicorn builds and the same bytes."""
    with server.connect() as sock:
        reader = Reader(sock)
        answers = []
        for n in range(3):
            sock.sendall(request("POST", "/hot/echo", f"call {n}".encode()))
            answers.append(raw_answer(reader))
    bodies = [json.loads(body) for _, body in answers]
    assert [b["via"] for b in bodies] == ["gunicorn", "front door", "front door"]
    assert [b["body"] for b in bodies] == ["call 0", "call 1", "call 2"]
    # Every text value of the environ, as gunicorn built it for the first call.
    assert bodies[1]["environ"] == bodies[0]["environ"] == bodies[2]["environ"]
    assert bodies[0]["environ"]["PATH_INFO"] == "/hot/echo"
    assert bodies[0]["environ"]["HTTP_HOST"] == "test"
    # The same head, but for each body's own length.
    heads = [[x for x in head if not x.startswith(b"Content-Length: ")] for head, _ in answers]
    assert heads[0] == heads[1] == heads[2]
    for head, body in answers:
        assert f"Content-Length: {len(body)}".encode() in head
    assert heads[0][0] == b"HTTP/1.1 200 OK" and b"Connection: keep-alive" in heads[0]


STEPS_ASIDE = [
    ("a GET", request("GET", "/hot/echo")),
    ("a query string", request("POST", "/hot/echo?x=1", b"{}")),
    ("another path", request("POST", "/echo", b"{}")),
    ("HTTP/1.0", b"POST /hot/echo HTTP/1.0\r\nHost: test\r\nContent-Length: 2\r\n\r\n{}"),
    ("no Host", b"POST /hot/echo HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}"),
    ("a proxy header", request("POST", "/hot/echo", b"{}", headers="X-Forwarded-For: 1.2.3.4\r\n")),
    ("a scheme header", request("POST", "/hot/echo", b"{}", headers="X-Forwarded-Proto: x\r\n")),
    ("Forwarded", request("POST", "/hot/echo", b"{}", headers="Forwarded: for=1.2.3.4\r\n")),
    ("an underscore", request("POST", "/hot/echo", b"{}", headers="X_Custom: a\r\n")),
    ("a repeated header", request("POST", "/hot/echo", b"{}", headers="X-A: 1\r\nX-A: 2\r\n")),
    ("Connection: close", request("POST", "/hot/echo", b"{}", close=True)),
    ("Expect", request("POST", "/hot/echo", b"{}", headers="Expect: 100-continue\r\n")),
    (
        "a chunked body",
        b"POST /hot/echo HTTP/1.1\r\nHost: test\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"2\r\n{}\r\n0\r\n\r\n",
    ),
    ("a malformed request", b"POST /hot/echo HTTP/1.1\r\nHost: test\r\nContent-Length: x\r\n\r\n"),
]  # fmt: skip


def comparable(body: bytes) -> object:
    """An answer's body, but for the client's port (each connection has its own)."""
    if not body.startswith(b"{"):
        return body
    echoed = json.loads(body)
    echoed.get("environ", {}).pop("REMOTE_PORT", None)
    return echoed


def final_answer(reader: Reader) -> tuple[int, dict[str, str], bytes]:
    """The answer after any 100 Continue."""
    while (answer := reader.answer())[0] == 100:
        pass
    return answer


@pytest.mark.parametrize(("name", "wire"), STEPS_ASIDE, ids=[name for name, _ in STEPS_ASIDE])
def test_a_request_the_front_door_is_not_sure_of_goes_through_gunicorn(
    server: Server, name: str, wire: bytes
) -> None:
    """Each is answered on a kept connection exactly as gunicorn answers it as a connection's
    first request (which never comes through the front door)."""
    with server.connect() as first, server.connect() as kept:
        first.sendall(wire)
        status, headers, body = final_answer(Reader(first))
        reader = Reader(kept)
        kept.sendall(request("POST", "/hot/echo", b"one"))
        kept.sendall(request("POST", "/hot/echo", b"two"))
        assert [hot(reader)["via"], hot(reader)["via"]] == ["gunicorn", "front door"]
        kept.sendall(wire)
        kept_status, kept_headers, kept_body = final_answer(reader)
        assert (kept_status, comparable(kept_body)) == (status, comparable(body))
        kept_headers.pop("date", None)
        headers.pop("date", None)
        assert kept_headers == headers
        if body.startswith(b"{"):
            assert json.loads(kept_body)["via"] == "gunicorn"
        if headers.get("connection") == "keep-alive":
            # The connection carries on, through the front door again.
            kept.sendall(request("POST", "/hot/echo", b"after"))
            assert hot(reader)["via"] == "front door"
        else:
            assert kept.recv(1) == b""


def test_a_call_the_hot_path_leaves_to_the_application_is_tried_once(server: Server) -> None:
    """The front door's hot path tried it (and counted it); the application answers it with
    what the hot path did, and the hot path does not try it again."""
    with server.connect() as sock:
        reader = Reader(sock)
        for _ in range(3):
            sock.sendall(request("POST", "/hot/refuse", b"{}"))
            status, _, body = reader.answer()
            assert (status, json.loads(body)) == (409, {"counted": 1, "tried": True})
        sock.sendall(request("POST", "/hot/echo", b"x"))
        assert hot(reader)["via"] == "front door"
        # What was carried went with that request only.
        sock.sendall(request("POST", "/echo", b"y"))
        assert reader.answer()[2] == b"echo:y"


def test_pipelined_and_split_requests_through_the_front_door(server: Server) -> None:
    with server.connect() as sock:
        reader = Reader(sock)
        sock.sendall(request("POST", "/hot/echo", b"first"))
        assert hot(reader)["via"] == "gunicorn"
        wires = [
            request("POST", "/hot/echo", b"a"),
            request("POST", "/hot/refuse", b"{}"),
            request("POST", "/echo", b"b"),
            request("POST", "/hot/echo", b"c"),
        ]
        sock.sendall(b"".join(wires))
        assert hot(reader)["body"] == "a"
        assert reader.answer()[::2] == (409, b'{"counted": 1, "tried": true}')
        assert reader.answer()[2] == b"echo:b"
        assert hot(reader)["body"] == "c"
        # One request in three pieces: the head cut in two, then the body.
        wire = request("POST", "/hot/echo", b"split body")
        for piece in (wire[:20], wire[20:-4], wire[-4:]):
            sock.sendall(piece)
            time.sleep(0.05)
        answer = hot(reader)
        assert (answer["via"], answer["body"]) == ("front door", "split body")


def test_the_front_door_keeps_gunicorns_count_of_requests(tmp_path: Path) -> None:
    """--max-requests: the answer that reaches it closes the connection, and the worker is
    replaced."""
    # One worker; the fixture's readiness probe is its first request.
    server = Server(tmp_path, threads=4, args=("--max-requests", "4"))
    try:
        with server.connect() as sock:
            reader = Reader(sock)
            connections = []
            for n in range(3):
                sock.sendall(request("POST", "/hot/echo", f"{n}".encode()))
                status, headers, body = reader.answer()
                connections.append(headers["connection"])
            assert json.loads(body)["via"] == "front door"
            assert connections == ["keep-alive", "keep-alive", "close"]
            assert sock.recv(1) == b""
    finally:
        server.stop()


def test_the_front_door_can_be_closed(tmp_path: Path) -> None:
    server = Server(tmp_path, threads=4, env={"GC_FRONT_DOOR": "off"})
    try:
        with server.connect() as sock:
            reader = Reader(sock)
            for _ in range(3):
                sock.sendall(request("POST", "/hot/echo", b"x"))
                assert hot(reader)["via"] == "gunicorn"
    finally:
        server.stop()


@pytest.mark.parametrize(
    ("setting", "limit"), [(0, 1024 * 1024), (4094, 4094), (100, 100), (8190, 8190), (9000, 8190)]
)
def test_the_request_line_limit_is_gunicorns(setting: int, limit: int) -> None:
    from gunicorn.http.message import Request
    from gunicorn.http.unreader import IterUnreader

    cfg = Config()
    cfg.set("limit_request_line", setting)
    wire = b"POST /hot/echo HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n"
    theirs = Request(cfg, IterUnreader([wire]), ("127.0.0.1", 1))
    assert theirs._use_fast  # gunicorn's own path parses with gunicorn_h1c too
    assert gunicorn_worker._request_line_limit(setting) == limit
    assert theirs._fast_limit_request_line == limit
