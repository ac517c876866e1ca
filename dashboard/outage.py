"""A database outage answers the pages with 503 and a page that says so, never a 500.

The API answers an outage with its uniform body (`apikit.api`); the pages answer with
`503.html`: the outage message the API gives, a link to retry and the request id. Two ways an
outage reaches a page:

- a view's query fails (most pages, the login form's password check, and the session or user
  that the session and authentication middleware load lazily, on first use, which is in the
  view): `process_exception` turns the exception into the 503 page;
- a middleware's own query fails (a session saved after the view, the CSRF secret kept in the
  session with CSRF_USE_SESSIONS): Django turns that exception into a 500 answer inside the
  middleware that raised it, before any `process_exception` or outer middleware could see the
  exception itself. `got_request_exception`, which Django sends with the exception still being
  handled, marks the request, and `__call__` answers 503 in place of that 500. When Django's
  500 page fails on the outage as well, the exception itself comes out to `__call__`.

The page is rendered without the request's context processors, which would read the session
and the user from the database that just failed.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import Any

from django.core.signals import got_request_exception
from django.db import DatabaseError
from django.http import HttpRequest, HttpResponse
from django.template.loader import render_to_string

from apikit.api import API_PREFIX, as_domain_error
from apikit.errors import DependencyUnavailable
from apikit.outages import is_database_outage

logger = logging.getLogger(__name__)

TEMPLATE = "503.html"
# Set on a request whose answer an outage turned into a 500 (see the module's docstring).
_OUTAGE = "gc_database_outage"


def is_outage(exception: BaseException | None) -> bool:
    """The database, or another store a page needs (the login throttle's), out of reach."""
    return is_database_outage(exception) or isinstance(exception, DependencyUnavailable)


def outage_page(request: HttpRequest, exception: Exception) -> HttpResponse:
    error = as_domain_error(exception)
    message = error.message if error is not None else "the database is unreachable; retry later"
    request_id = getattr(request, "request_id", "")
    logger.warning(
        "a store is unreachable: %s %s answered 503 (request %s): %s",
        request.method,
        request.path,
        request_id,
        exception,
    )
    html = render_to_string(
        TEMPLATE,
        {"message": message, "request_id": request_id, "retry_url": request.get_full_path()},
    )
    response = HttpResponse(html, status=503)
    # Never cached: the next try must reach the server.
    response["Cache-Control"] = "no-store"
    return response


def _note_outage(sender: Any, request: HttpRequest | None = None, **kwargs: Any) -> None:
    exception = sys.exc_info()[1]
    if request is not None and is_outage(exception):
        setattr(request, _OUTAGE, exception)


got_request_exception.connect(_note_outage, dispatch_uid="dashboard.outage")


class DatabaseOutageMiddleware:
    """503 with the outage page for every page (not the API, which has its own body) whose
    database is unreachable. Listed after RequestIdMiddleware (the page shows the request id)
    and before the session middleware (whose failures it must see answered)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        try:
            response = self.get_response(request)
        except DatabaseError as error:
            # Django's own 500 page failed on the outage too (its CSRF token is read from the
            # session with CSRF_USE_SESSIONS), and the exception came all the way out.
            if not is_database_outage(error) or not self._is_page(request):
                raise
            return outage_page(request, error)
        exception = getattr(request, _OUTAGE, None)
        if exception is not None and response.status_code == 500 and self._is_page(request):
            return outage_page(request, exception)
        return response

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if is_outage(exception) and self._is_page(request):
            return outage_page(request, exception)
        return None

    @staticmethod
    def _is_page(request: HttpRequest) -> bool:
        return not request.path.startswith(API_PREFIX)
