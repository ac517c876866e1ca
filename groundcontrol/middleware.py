"""The middleware that serves people's pages (the dashboard, the admin, the sign-in), skipped on the
REST API's paths.

An API call is authenticated by its key alone (hands.authentication), answers JSON and sets no
cookie, so the signed-in user, messages, htmx's headers, static files and the trailing-slash
redirect have nothing to do there; with django-csp's policy built twice, they cost
about a third of a renewal's web-server CPU (docs/performance.md). The middleware that matters to
every answer stays in `settings.MIDDLEWARE` unwrapped: the unread body's `Connection: close`, the
security headers, the Content-Security-Policy, the request id, the outage answer, the NUL
refusal, and Django's sessions, CSRF and X-Frame-Options (which `check --deploy` looks for by
name; no API call loads its session, and CSRF returns at once for every API view, all exempt).

Each class here is Django's (or its library's) own, with one change: on a path under
`API_PREFIX` it hands the request straight on.
"""

from __future__ import annotations

from typing import Any, ClassVar

from csp.constants import HEADER, HEADER_REPORT_ONLY
from csp.middleware import CheckableLazyObject
from csp.middleware import CSPMiddleware as _CSP
from csp.utils import build_policy
from django.conf import settings
from django.contrib.auth.middleware import AuthenticationMiddleware as _Authentication
from django.contrib.messages.middleware import MessageMiddleware as _Messages
from django.http import HttpRequest, HttpResponseBase
from django.middleware.common import CommonMiddleware as _Common
from django_htmx.middleware import HtmxMiddleware as _Htmx
from whitenoise.middleware import WhiteNoiseMiddleware as _WhiteNoise

from apikit.api import API_PREFIX


def pages_only(middleware: type) -> type:
    """`middleware`, handing a request under `API_PREFIX` to the next one untouched."""

    def __call__(self: Any, request: HttpRequest) -> HttpResponseBase:
        if request.path_info.startswith(API_PREFIX):
            return self.get_response(request)
        return middleware.__call__(self, request)

    # WSGI only (groundcontrol.server): the skip is a plain call, never awaited.
    namespace: dict[str, Any] = {
        "__call__": __call__,
        "__module__": __name__,
        "__doc__": f"{middleware.__module__}.{middleware.__qualname__}, for pages only.",
        "async_capable": False,
        "sync_capable": True,
    }
    return type(middleware.__name__, (middleware,), namespace)


class _StaticFilesFoundOnce(_WhiteNoise):
    """WhiteNoise's, finding the static files once per process. It looks through every finder
    and builds a responder per file when its middleware is made: once per web process, but once
    per client in Django's test client (61 ms for 211 files, more than the calls it serves)."""

    _found: ClassVar[dict[tuple[Any, ...], dict[str, Any]]] = {}

    def add_files_from_finders(self) -> None:
        # What the responders were built with: a settings override makes a set of its own.
        shape = (self.static_prefix, self.max_age, self.charset, self.allow_all_origins)
        found = self._found.get(shape)
        if found is None:
            before = dict(self.files)
            super().add_files_from_finders()
            found = {url: f for url, f in self.files.items() if before.get(url) is not f}
            self._found[shape] = found
        self.files.update(found)


WhiteNoiseMiddleware = pages_only(_StaticFilesFoundOnce)
CommonMiddleware = pages_only(_Common)
AuthenticationMiddleware = pages_only(_Authentication)
MessageMiddleware = pages_only(_Messages)
HtmxMiddleware = pages_only(_Htmx)


class CSPMiddleware(_CSP):
    """django-csp's, with the policy of an answer that drew no nonce and changed no directive
    built once instead of twice per answer (the policy and the report-only one).

    Such an answer's policy is the settings' alone: every API answer's, and every page's that
    has no inline script. django-csp builds it anew for each answer, about a sixth of a
    renewal's CPU in the web server (docs/performance.md). Anything else (a nonce drawn, a
    view's `csp_update`, `csp_exempt` or the like, prefixes excluded in the settings, DEBUG's
    exempted error pages) is django-csp's own path.
    """

    def __init__(self, get_response: Any) -> None:
        super().__init__(get_response)
        excluded = any(
            (getattr(settings, name, None) or {}).get("EXCLUDE_URL_PREFIXES")
            for name in ("CONTENT_SECURITY_POLICY", "CONTENT_SECURITY_POLICY_REPORT_ONLY")
        )
        self.settings_policies = (
            None
            if excluded
            else ((HEADER, build_policy()), (HEADER_REPORT_ONLY, build_policy(report_only=True)))
        )

    def process_response(
        self, request: HttpRequest, response: HttpResponseBase
    ) -> HttpResponseBase:
        if (
            self.settings_policies is None
            or settings.DEBUG
            or getattr(request, "_csp_nonce", None) is not None
            or any(name.startswith("_csp_") for name in vars(response))
        ):
            return super().process_response(request, response)
        for header, policy in self.settings_policies:
            if policy and header not in response:
                response[header] = policy
        # As django-csp does: a nonce drawn after the header is written is an error.
        request.csp_nonce = CheckableLazyObject(self._csp_nonce_post_response)  # type: ignore[attr-defined]
        return response
