"""How a call is sent, as steps: the retry rules, backoff, pages, the answer read or the error
raised, and a client's configuration (`GC_URL`, `GC_KEY`, `GC_TIMEOUT`, `GC_RETRIES`).

Retries: a transient failure (`errors.is_transient`: a 429, 502, 503 or 504 answer, or a
connection that failed) is retried with exponential backoff and jitter (never a 409: a denial is
an answer, not a fault). A call that is not safe to repeat (a claim: a second one would take a
second slot) is retried only when the request surely never reached the server (the connection
could not be opened, or the server itself said 503 or 429; a proxy's 502 or 504 may come after
the server acted); every other hand call is idempotent on the server (a retried finish or
release answers as the first did; a retried acquire by the holder renews and keeps the fence).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx

from groundcontrol_client.core.decisions import decided_on_primary, decision_headers
from groundcontrol_client.core.errors import (
    TRANSIENT_STATUSES,
    ConfigError,
    ConnectionFailed,
    GroundControlError,
    ServerError,
    error_from_response,
    is_transient,
)
from groundcontrol_client.core.steps import Send, Sleep, Steps, call

if TYPE_CHECKING:
    from typing import Self

__version__ = "0.1.0"
DEFAULT_TIMEOUT_S = 10.0
# The answers retried (those `errors.is_transient` calls transient), from `errors`' one table.
RETRY_STATUSES = TRANSIENT_STATUSES
# Errors raised before the request left this machine: repeating it cannot act twice.
_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
# A proxy's answers for a server it could not reach in time: the request may have reached the
# server and been acted on, so a call that is not safe to repeat is not repeated after one.
_MAYBE_APPLIED = frozenset({502, 504})
# A server's Retry-After is honoured up to this; past it, the call fails and the caller decides.
MAX_RETRY_AFTER_S = 60.0
MAX_PAGES = 100


def retryable_answer(status: int, error: GroundControlError, *, idempotent: bool) -> bool:
    """Whether a non-2xx answer is tried again."""
    if not is_transient(error):
        return False
    return idempotent or status not in _MAYBE_APPLIED


@dataclass(frozen=True)
class RetryPolicy:
    """`retries` more tries after the first; delays double from `backoff_s` up to
    `max_backoff_s`, each drawn from the upper half of its range (jitter that keeps a floor, so
    a fleet that failed together does not come back together)."""

    retries: int = 4
    backoff_s: float = 0.5
    max_backoff_s: float = 8.0

    def delay(self, attempt: int, *, hint: float | None, rand: Callable[[], float]) -> float:
        ceiling = min(self.max_backoff_s, self.backoff_s * (2**attempt))
        delay = ceiling / 2 + rand() * ceiling / 2
        if hint is not None:
            delay = max(delay, min(hint, MAX_RETRY_AFTER_S))
        return delay


def base_url(url: str) -> str:
    url = url.strip().rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise ConfigError(f"GC_URL must be an http(s) URL, not {url!r}")
    if url.endswith("/api/v1"):
        url = url[: -len("/api/v1")]
    return url + "/api/v1/"


def _retry_hint(response: httpx.Response, error: GroundControlError) -> float | None:
    hint = error.get("retry_after_s")
    if isinstance(hint, int | float) and not isinstance(hint, bool):
        return float(hint)
    header = response.headers.get("retry-after")
    try:
        return float(header) if header else None
    except ValueError:
        return None


def _env_number(
    env: Mapping[str, str], name: str, kind: type[int] | type[float], minimum: float = 0
) -> float:
    try:
        value = kind(env[name])
    except ValueError:
        value = None
    if value is None or value < minimum:
        raise ConfigError(f"{name} must be a number of at least {minimum:g}, not {env[name]!r}")
    return value


def drop_none(body: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in body.items() if v is not None}


def _body(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return None


def decoded(response: httpx.Response) -> Any:
    """A successful answer's JSON (None for an empty one)."""
    if response.status_code == 204 or not response.content:
        return None
    try:
        return response.json()
    except ValueError:
        raise ServerError(
            f"HTTP {response.status_code} with a body that is not JSON",
            status=response.status_code,
        ) from None


class Sending:
    """A hand's configuration and the steps every call is sent by. The shells give the waiting:
    `rand` (the jitter) and `clock` (monotonic seconds: the instants of `give_up_at` and of a
    claim's wait) are the core's, for tests to replace."""

    def __init__(
        self,
        url: str,
        key: str,
        *,
        timeout: float = DEFAULT_TIMEOUT_S,
        retry: RetryPolicy | None = None,
        rand: Callable[[], float],
        clock: Callable[[], float],
    ) -> None:
        if not key:
            raise ConfigError("GC_KEY is not set: a hand needs its own key")
        self.url = base_url(url)
        self.timeout = timeout
        self.retry = retry or RetryPolicy()
        self._rand = rand
        self._clock = clock
        self.headers = {
            "Authorization": f"Bearer {key}",
            "User-Agent": f"groundcontrol-client/{__version__}",
            "Accept": "application/json",
        }

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **kwargs: Any) -> Self:
        """Configured from `GC_URL` and `GC_KEY`; optional `GC_TIMEOUT` (seconds per request)
        and `GC_RETRIES` (tries after the first on a transient failure)."""
        env = os.environ if env is None else env
        url = env.get("GC_URL", "")
        if not url:
            raise ConfigError("GC_URL is not set: the Ground Control server's URL")
        if "timeout" not in kwargs and env.get("GC_TIMEOUT"):
            kwargs["timeout"] = _env_number(env, "GC_TIMEOUT", float, minimum=0.1)
        if "retry" not in kwargs and env.get("GC_RETRIES"):
            kwargs["retry"] = RetryPolicy(retries=int(_env_number(env, "GC_RETRIES", int)))
        return cls(url, env.get("GC_KEY", ""), **kwargs)

    def bind(self, steps: Callable[..., Steps[Any]]) -> Any:  # pragma: no cover
        raise NotImplementedError("a shell runs the steps: Client or AsyncClient")

    def _send(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        idempotent: bool = True,
        give_up_at: float | None = None,
        timeout: float | None = None,
        decision: bool = False,
    ) -> Steps[httpx.Response]:
        """One call, retrying transient failures; the successful response.

        `give_up_at` (an instant of `clock`) stops retrying once the next try would start after
        it: a heartbeat that can no longer arrive in time is not worth waiting for.
        `decision`: the caller decides on the answer, which must come from the primary."""
        headers = decision_headers(headers) if decision else headers
        attempt = Send(
            method,
            path,
            json=json,
            params=drop_none(dict(params)) if params else None,
            headers=headers,
            timeout=timeout if timeout is not None else self.timeout,
        )
        tries = 0
        while True:
            outcome = yield attempt
            if isinstance(outcome, httpx.TransportError):
                error: GroundControlError = ConnectionFailed(
                    f"{method} {path} failed: {type(outcome).__name__}: {outcome or 'no answer'}"
                )
                hint = None
                if not idempotent and not isinstance(outcome, _NOT_SENT):
                    # The request may have been applied; only the caller can find out.
                    raise error from outcome
            else:
                assert isinstance(outcome, httpx.Response)
                if outcome.is_success:
                    if decision:
                        decided_on_primary(outcome, method, path)
                    return outcome
                error = error_from_response(outcome.status_code, _body(outcome))
                if not retryable_answer(outcome.status_code, error, idempotent=idempotent):
                    raise error
                hint = _retry_hint(outcome, error)
            if tries >= self.retry.retries:
                raise error
            delay = self.retry.delay(tries, hint=hint, rand=self._rand)
            if give_up_at is not None and self._clock() + delay >= give_up_at:
                raise error
            yield Sleep(delay)
            tries += 1

    def _request(self, method: str, path: str, **options: Any) -> Steps[Any]:
        return decoded((yield from self._send(method, path, **options)))

    @call
    def request(self, method: str, path: str, **options: Any) -> Steps[Any]:
        """Send one call (`json`, `params`, `idempotent`, `give_up_at`, `timeout`, `decision`:
        as the calls use them); the decoded JSON answer."""
        return (yield from self._request(method, path, **options))

    def _list(
        self, path: str, params: Mapping[str, Any] | None = None, *, decision: bool = False
    ) -> Steps[list[dict[str, Any]]]:
        """Every item of a list endpoint: a JSON array per page, the next page's URL in the
        `Link: <...>; rel="next"` header."""
        items: list[dict[str, Any]] = []
        next_url: str | None = path
        for _ in range(MAX_PAGES):
            if next_url is None:
                break
            response = yield from self._send("GET", next_url, params=params, decision=decision)
            items.extend(decoded(response) or [])
            next_url, params = response.links.get("next", {}).get("url"), None
        return items
