"""The web tier's gunicorn worker (groundcontrol/gunicorn_worker.py), under a real gunicorn: every
framing of an answer intact, kept-alive and pipelined requests answered in order, no connection
starved when they outnumber the threads, and a stop that does not wait on a lingering thread.
The answer's one write is checked against a socket that records its writes."""

from __future__ import annotations

import email.utils
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
    def __init__(self, tmp_path: Path, threads: int) -> None:
        self.port = _free_port()
        config = tmp_path / "empty.conf.py"  # not ./gunicorn.conf.py, which gunicorn would read
        config.write_text("")
        self.log = tmp_path / "gunicorn.log"
        env = {k: v for k, v in os.environ.items() if not k.startswith("GUNICORN_")}
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(  # noqa: S603
                [
                    sys.executable, "-m", "gunicorn", "-c", str(config),
                    "--worker-class", "groundcontrol.gunicorn_worker.FleetWorker",
                    "--workers", "1", "--threads", str(threads), "--keep-alive", "5",
                    "--graceful-timeout", "20",
                    "--bind", f"127.0.0.1:{self.port}", "tests.web.wsgi_app:application",
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


def request(method: str, path: str, body: bytes = b"", close: bool = False) -> bytes:
    head = f"{method} {path} HTTP/1.1\r\nHost: test\r\nContent-Length: {len(body)}\r\n"
    if close:
        head += "Connection: close\r\n"
    return head.encode() + b"\r\n" + body


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
        if method == "HEAD" or status in (204, 304):
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
