"""`POST /api/v1/hooks/{harness}`: a harness's hook event, answered in the harness's own format.

The body is the event as the harness sends it (Claude Code's `type: "http"` hooks post it as is;
a command hook's `gctl hook HARNESS` forwards it, adding what only the agent's side can know
under `groundcontrol`); the key comes as `Authorization: Bearer`, which a harness's hook
settings can fill from the environment. Whatever goes wrong, the answer is the harness's own
refusal of the write, with the sentence: a harness takes an HTTP error for a hook that failed
and lets the tool call through, and an unchecked write breaks the one-writer promise. Only a
harness Ground Control does not know is a plain 404.
"""

from __future__ import annotations

import json
from typing import Any

from django.http import HttpRequest, HttpResponse
from drf_spectacular.utils import OpenApiParameter, OpenApiTypes, extend_schema
from rest_framework import serializers

from apikit import reads
from apikit.api import json_answer, json_body, refusal_body, refusal_of
from apikit.errors import GroundControlError, NotFound, ValidationFailed
from apikit.openapi import error_responses
from apikit.ratelimit import rate_caller, rate_limit
from hands.models import Scope
from hands.views import LEASES, HandAPIView
from harnesses import services, sessions
from harnesses.formats import FORMATS, BadEvent, HookEvent, Verdict
from leasing import hot

REPOSITORY_HEADER = "HTTP_X_GC_REPOSITORY"
# Answer headers for the agent's side (`groundcontrol_client.hooks.command`): the session's
# process identity; the absolute paths the event writes (JSON list: resolve them on the disk
# and ask again, with `groundcontrol.resolved`); "snapshot" (a shell command is about to run:
# note the dirty files) or "needed" (a shell command ran: ask again with the files it changed).
SESSION_HEADER = "X-GC-Session"
RESOLVE_HEADER = "X-GC-Resolve"
CHANGED_HEADER = "X-GC-Changed"


class HookEventIn(serializers.Serializer):
    """The harness's own event (its fields are the harness's: see docs/agents.md), and, from a
    command hook, what the agent's side adds."""

    groundcontrol = serializers.DictField(
        required=False,
        help_text="What only the agent's side knows: `repositories` (absolute paths of "
        "repository top levels), `links` (tracked symbolic links: absolute path -> the absolute "
        "path it resolves to), `ttl_s` (how long an event keeps the session's leases; 5 to "
        "3600, default 300); for this event: `resolves` (true: it can resolve paths on its "
        "disk, so a write is first answered with X-GC-Resolve: the paths as the event names "
        "them), `resolved` (each path of X-GC-Resolve -> the absolute path it resolves to), "
        "`changed` (files a shell command changed, absolute or relative to the event's cwd), "
        "`outside_allowed` (true: a file in no repository is written unleased).",
    )


MAX_RESOLVED = 64


def _disk(facts: object) -> services.Disk:
    """What the agent's side says of its disk for this event, checked."""
    if not isinstance(facts, dict):
        return services.Disk()
    changed = facts.get("changed")
    if changed is not None and (
        not isinstance(changed, list) or not all(isinstance(p, str) and p for p in changed)
    ):
        raise ValidationFailed(
            "groundcontrol.changed must be a list of paths",
            fields={"groundcontrol.changed": ["A list of paths."]},
        )
    resolved = facts.get("resolved")
    if resolved is not None and (
        not isinstance(resolved, dict)
        or len(resolved) > MAX_RESOLVED
        or not all(isinstance(v, str) and v.startswith("/") for v in resolved.values())
    ):
        raise ValidationFailed(
            f"groundcontrol.resolved must map at most {MAX_RESOLVED} paths to absolute paths",
            fields={"groundcontrol.resolved": ["Path -> absolute path."]},
        )
    return services.Disk(
        resolves=facts.get("resolves") is True,
        resolved=resolved,
        changed=changed,
        outside_allowed=facts.get("outside_allowed") is True,
    )


class HookApi(HandAPIView):
    """Answer one hook event of a harness's session (see the operation's description)."""

    required_scope = LEASES

    def dispatch(self, request: Any, *args: Any, **kwargs: Any) -> Any:
        if request.method != "POST":
            return super().dispatch(request, *args, **kwargs)
        if kwargs["harness"] not in FORMATS:
            error, _ = refusal_of(
                NotFound(f"no harness {kwargs['harness']!r}: one of {', '.join(sorted(FORMATS))}"),
                request,
            )
            return json_answer(refusal_body(error, request), status=error.http_status)
        with reads.primary():
            return self.post(request, **kwargs)

    @extend_schema(
        tags=["hooks"],
        request=HookEventIn,
        parameters=[
            OpenApiParameter(
                "harness",
                str,
                OpenApiParameter.PATH,
                enum=sorted(FORMATS),
                description="The harness whose event format the body is in.",
            ),
            OpenApiParameter(
                "release_on_stop",
                bool,
                OpenApiParameter.QUERY,
                required=False,
                description="1: release the session's leases at the end of each turn (Stop) "
                "too, not only when the session ends.",
            ),
            OpenApiParameter(
                "X-GC-Repository",
                str,
                OpenApiParameter.HEADER,
                required=False,
                description="An absolute path of a repository's top level, registered for the "
                "session (a harness's settings fill it from the project directory).",
            ),
        ],
        description="The harness's own event; the answer is in the harness's own hook output "
        "format, 200 always (an empty body: nothing to say). A write is allowed once every file "
        "it writes is leased for the session (process identity `<harness>:<session id>`), or "
        "denied with the sentence the model reads; every event renews the session's leases, "
        "SessionEnd releases them. A bad key, a body that is no event, a file in no registered "
        "repository or an outage is a denial too, never an HTTP error the harness would let "
        "the write through on. Only a URL no hook configuration makes is refused as any API "
        "call's would be: an unknown harness (404), a NUL in the path or a query parameter "
        "(400, before any view reads it).",
        responses={
            (200, "application/json"): OpenApiTypes.OBJECT,
            **error_responses("validation_error", "not_found"),
        },
    )
    def post(self, request: HttpRequest, harness: str) -> HttpResponse:
        form = FORMATS[harness]
        event: HookEvent | None = None
        decision: services.Decision | None = None
        try:
            body = json_body(request)
            if not isinstance(body, dict):
                raise BadEvent(f"the body is JSON but not an object ({type(body).__name__})")
            event = form.event(body)
            caller = hot.Caller.of(request, Scope.LEASES)
            rate_limit(rate_caller(caller.prefix, caller.secret_hash))
            facts = body.get("groundcontrol")
            decision = services.decide(
                caller,
                event,
                harness=harness,
                registration=sessions.registration_of(facts, request.META.get(REPOSITORY_HEADER)),
                disk=_disk(facts),
                release_on_stop=request.GET.get("release_on_stop") == "1",
            )
            verdict = decision.verdict
        except BadEvent as error:
            verdict = Verdict(
                "deny",
                f"Ground Control could not read this {harness} hook event, so the tool call is "
                f"refused: {error}",
            )
        except Exception as exc:  # noqa: BLE001 - every failure refuses the write
            refused, _ = refusal_of(exc, request)
            verdict = Verdict("deny", _failure(refused), {"code": refused.code})
        answer = form.answer(event, verdict)
        response = HttpResponse(status=200) if answer is None else json_answer(answer)
        if decision is not None:
            _needs(response, decision)
        return response


def _needs(response: HttpResponse, decision: services.Decision) -> None:
    """What the agent's side may do (a command hook reads these; an HTTP hook ignores them)."""
    response[SESSION_HEADER] = decision.process_id
    if decision.resolve:
        response[RESOLVE_HEADER] = json.dumps(decision.resolve)
    if decision.snapshot:
        response[CHANGED_HEADER] = "snapshot"
    elif decision.changed_needed:
        response[CHANGED_HEADER] = "needed"


def _failure(error: GroundControlError) -> str:
    return (
        "Ground Control refused the hook's call, so the tool call is refused: "
        f"{error.message} ({error.code})"
    )
