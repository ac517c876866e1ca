"""Fences checked where the damage happens: `POST /fences/verify` answers, for each fence a
commit carried (`Ground-Control-Fence: <resource>@<fence> <holder>`), whether it is still current
(`leases.verification`), and for files, who holds them now; `POST /fences/receipts` judges a
push's commits when they land and keeps a signed receipt of each, which `GET /fences/receipts`
reads back for CI (`leases.receipts`; `gctl git`, `gctl verify`)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiExample, OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from apikit import concealing
from apikit.openapi import error_responses
from hands.views import LEASES, SUPERVISE, VERIFY, HandAPIView
from leases import receipts, verification
from leases.models import FenceStatus, LeaseMode

FENCE_HELP = (
    "Each `<resource>@<fence> <holder>` as a commit's trailer carries it: a canonical resource "
    "name, `@`, a fence, and the holder's hand name as one word (`%`, `@` and whitespace as "
    "%XX); the older `<resource>@<fence>`, which names no holder, still reads."
)


class FencesVerifyIn(serializers.Serializer):
    fences = serializers.ListField(
        child=serializers.CharField(),
        max_length=verification.MAX_FENCES,
        required=False,
        help_text=f"{FENCE_HELP} 1 to {verification.MAX_FENCES} (none when `paths` are asked).",
    )
    paths = serializers.ListField(
        child=serializers.CharField(),
        max_length=verification.MAX_PATHS,
        required=False,
        help_text="Files by their lease names (relative to the repository's top level): who "
        f"holds each now. At most {verification.MAX_PATHS}.",
    )


class FenceAnswerOut(serializers.Serializer):
    fence = serializers.CharField(help_text="As asked, `<resource>@<fence>` (without a holder).")
    resource = serializers.CharField()
    fence_number = serializers.IntegerField()
    named_holder = serializers.CharField(
        help_text="The holder the trailer names ('' for the older form, which names none)."
    )
    status = serializers.ChoiceField(
        choices=FenceStatus.choices,
        help_text="`current`: that tenure is held and not lost; `superseded`: it has ended "
        "(released, lost, broken, or taken past); `unknown`: the node was never leased in this "
        "workspace, or never granted that fence; `not_holder`: current, but the tenure of "
        "another holder than the one named (a commit cannot borrow another's fence).",
    )
    current_fence = serializers.IntegerField(
        allow_null=True, help_text="The node's fence now (null when it was never leased)."
    )
    when = serializers.DateTimeField(
        allow_null=True,
        help_text="For `superseded`: when it stopped being current (null once the events it "
        "is read from are past retention).",
    )
    ended = serializers.CharField(
        help_text="For `superseded`: released, lost, broken or taken (by a later grant)."
    )
    holder = serializers.CharField(
        required=False,
        allow_null=True,
        help_text=f"For `current` and `not_holder`: who holds it. {concealing.CONCEALED}",
    )


class HeldOverOut(serializers.Serializer):
    resource = serializers.CharField()
    fence = serializers.IntegerField()
    holder = serializers.CharField(allow_null=True, help_text=concealing.CONCEALED)
    mode = serializers.ChoiceField(choices=LeaseMode.choices)
    state = serializers.CharField(help_text="live, late or stalled.")


class LapsedOut(serializers.Serializer):
    resource = serializers.CharField()
    fence = serializers.IntegerField()
    ended = serializers.CharField(help_text="lost (past its grace) or broken.")
    when = serializers.DateTimeField(allow_null=True)


class PathAnswerOut(serializers.Serializer):
    path = serializers.CharField()
    held = HeldOverOut(
        many=True, help_text="The held tenures on the path or a directory above it, now."
    )
    lapsed = LapsedOut(
        allow_null=True,
        help_text="The calling hand's own last tenure over the path, when it ended without its "
        "release (lost or broken) and the hand holds none over it now; else null.",
    )


class FencesVerifyOut(serializers.Serializer):
    fences = FenceAnswerOut(many=True)
    all_current = serializers.BooleanField(help_text="Every fence asked about is `current`.")
    paths = PathAnswerOut(many=True, help_text="For each path asked about, in order.")


class FencesVerifyApi(HandAPIView):
    """Are these fences still current? Each answer is recorded.

    `verify` is CI's scope: it reads fences and nothing else. `leases` (a hand's pre-push hook)
    and `supervise` will do as well, since either may already ask `POST /leases/check`."""

    required_scope = (VERIFY, LEASES, SUPERVISE)

    @extend_schema(
        tags=["leases"],
        request=FencesVerifyIn,
        description="For each `<resource>@<fence> <holder>` (a commit's `Ground-Control-Fence` "
        "trailers): `current`, `superseded` (with `current_fence`, `when` and how it `ended`), "
        "`unknown`, or `not_holder`. The rule is `POST /leases/check`'s. Every answer is "
        "recorded. For each of `paths`: the held tenures over it now, and the caller's own "
        "lapsed tenure over it.",
        responses={200: FencesVerifyOut, **error_responses("scope_denied", body=True)},
        examples=[
            OpenApiExample(
                "a commit's fences and files",
                value={"fences": ["src/auth/@7 hand-a", "docs/@2"], "paths": ["src/auth/a.py"]},
                request_only=True,
            )
        ],
    )
    def post(self, request: Request) -> Response:
        body = request.data if isinstance(request.data, dict) else {}
        if not isinstance(request.data, dict):
            verification.validate_fences(None)  # says what the body must be
        paths = verification.validate_paths(body.get("paths"))
        answers = verification.fences_verify(
            workspace_id=self.workspace_id,
            fences=body.get("fences"),
            key_prefix=self.key.prefix,
            hand=self.hand.name,
            required=not paths,
        )
        standings = verification.paths_standing(
            workspace_id=self.workspace_id, hand=self.hand.name, paths=paths
        )
        answers = unvouched(answers)
        return Response(
            {
                "fences": answers,
                "all_current": all(a["status"] == FenceStatus.CURRENT for a in answers),
                "paths": [s.as_json() for s in standings],
            }
        )


# --- receipts ----------------------------------------------------------------------------------


class ReceiptCommitIn(serializers.Serializer):
    sha = serializers.CharField(help_text="The commit's id: 40 (or 64) lowercase hex digits.")
    fences = serializers.ListField(
        child=serializers.CharField(), required=False, help_text=f"Its trailers. {FENCE_HELP}"
    )
    paths = serializers.ListField(
        child=serializers.CharField(),
        required=False,
        help_text="The files it touches (`git diff-tree --no-commit-id --name-only -r`), by "
        "their lease names.",
    )


class FenceReceiptsIn(serializers.Serializer):
    repository = serializers.CharField(
        max_length=receipts.MAX_REPOSITORY_LENGTH,
        help_text="The repository pushed to, as the client names it: its remote's URL, "
        "normalised (`host/owner/name`, or a local path).",
    )
    process_id = serializers.CharField(
        max_length=receipts.MAX_PROCESS_LENGTH,
        required=False,
        help_text="The pushing process's identity, recorded.",
    )
    commits = ReceiptCommitIn(
        many=True,
        max_length=receipts.MAX_RECEIPT_COMMITS,
        help_text=f"1 to {receipts.MAX_RECEIPT_COMMITS} commits, each once; their fences and "
        f"paths together at most {receipts.MAX_RECEIPT_NAMES}.",
    )


class ReceiptFenceOut(FenceAnswerOut):
    process_id = serializers.CharField(
        allow_null=True,
        help_text="For `current` and `not_holder`: the process identity holding the tenure. "
        f"{concealing.CONCEALED}",
    )


class ReceiptRefusalOut(serializers.Serializer):
    kind = serializers.ChoiceField(
        choices=["fence", "held", "lapsed"],
        help_text="`fence`: a fence not current (or not the pusher's); `held`: a path under "
        "another hand's tenure; `lapsed`: a path under the pusher's own lost or broken tenure.",
    )
    path = serializers.CharField(allow_blank=True, help_text="The path ('' for a fence).")
    fence = serializers.CharField(allow_blank=True, help_text="`<resource>@<fence>` at issue.")
    holder = serializers.CharField(
        allow_blank=True,
        allow_null=True,
        help_text=f"The tenure's holder, if any. {concealing.CONCEALED}",
    )
    message = serializers.CharField(help_text="What was refused, as the hooks print it.")


class ReceiptOut(serializers.Serializer):
    sha = serializers.CharField()
    repository = serializers.CharField()
    accepted = serializers.BooleanField(
        help_text="Every fence current and the pusher's, and no path refused, when pushed."
    )
    at = serializers.DateTimeField(help_text="The database's time of the judgement.")
    hand = serializers.CharField(help_text="The pushing hand.")
    key_prefix = serializers.CharField(allow_blank=True)
    process_id = serializers.CharField(allow_blank=True)
    fences = ReceiptFenceOut(many=True)
    refusals = ReceiptRefusalOut(many=True)
    signature = serializers.CharField(
        help_text="HMAC-SHA256 of the receipt, keyed from the server's SECRET_KEY."
    )


class RecordedReceiptOut(ReceiptOut):
    duplicate = serializers.BooleanField(
        help_text="An accepted receipt was on record already (a re-push): this is it, unchanged."
    )


class StoredReceiptOut(ReceiptOut):
    signature_valid = serializers.BooleanField(
        help_text="The signature verifies (SECRET_KEY or SECRET_KEY_FALLBACKS): the row is as "
        "the server wrote it."
    )


class FenceReceiptsRecordedOut(serializers.Serializer):
    accepted = serializers.BooleanField(help_text="Every commit accepted: the push may go on.")
    receipts = RecordedReceiptOut(many=True)


class FenceReceiptsOut(serializers.Serializer):
    receipts = StoredReceiptOut(many=True, help_text="Those on record, in the order asked.")


class FenceReceiptsApi(HandAPIView):
    """A push's commits judged when they land (POST, a hand's pre-push hook), and their signed
    receipts read back (GET, CI's `gctl verify`)."""

    required_scope = {"POST": LEASES, "GET": (VERIFY, LEASES, SUPERVISE)}

    @extend_schema(
        tags=["leases"],
        request=FenceReceiptsIn,
        description="Judge each commit of a push now, on the database's clock: each fence it "
        "carries must be current and the pushing hand's, and no file it touches may be under "
        "another hand's tenure or the pusher's own lapsed one. Each commit's receipt is "
        "recorded and signed; an accepted receipt is final (a re-push answers with it, "
        "`duplicate`), a refused one is judged again by the next push.",
        responses={
            200: FenceReceiptsRecordedOut,
            **error_responses("scope_denied", body=True),
        },
        examples=[
            OpenApiExample(
                "a push of one commit",
                value={
                    "repository": "github.com/acme/app",
                    "process_id": "host-a:4242:1700000000",
                    "commits": [
                        {
                            "sha": "1a2b3c4d5e6f1a2b3c4d5e6f1a2b3c4d5e6f1a2b",
                            "fences": ["src/app.py@2 hand-b"],
                            "paths": ["src/app.py"],
                        }
                    ],
                },
                request_only=True,
            )
        ],
    )
    def post(self, request: Request) -> Response:
        answers = receipts.receipts_record(
            workspace_id=self.workspace_id,
            hand=self.hand.name,
            key_prefix=self.key.prefix,
            body=request.data,
        )
        return Response({"accepted": all(a["accepted"] for a in answers), "receipts": answers})

    @extend_schema(
        tags=["leases"],
        parameters=[
            OpenApiParameter("repository", str, required=True, description="As the push named it."),
            OpenApiParameter(
                "sha",
                str,
                many=True,
                required=True,
                description=f"A commit (repeatable, at most {receipts.MAX_RECEIPT_COMMITS}).",
            ),
        ],
        description="The receipts on record for these commits (those there are), each with "
        "whether its signature verifies.",
        responses={
            200: FenceReceiptsOut,
            **error_responses("scope_denied", "validation_error"),
        },
    )
    def get(self, request: Request) -> Response:
        found = receipts.receipts_lookup(
            workspace_id=self.workspace_id,
            repository=request.query_params.get("repository"),
            shas=request.query_params.getlist("sha"),
        )
        # A receipt that names a hand the caller may not read (another lane's: its pusher, a
        # holder, a named holder) is not on record to it; its sentences could not be concealed.
        hidden = concealing.concealed(name for receipt in found for name in _names_of(receipt))
        found = [r for r in found if not hidden.intersection(_names_of(r))]
        return Response({"receipts": found})


def unvouched(answers: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The fences' answers as the caller may read them: a current tenure of a hand it may not
    read (another lane's, to a lane-limited key) is one it cannot vouch for, so a trailer that
    names a holder reads `not_holder` whoever it names (else the answer would confirm a guessed
    name); its holder is concealed with every answer's (`apikit.concealing`)."""
    hidden = concealing.concealed(answer.get("holder") for answer in answers)
    for answer in answers:
        if answer.get("holder") in hidden and answer["named_holder"]:
            answer["status"] = str(FenceStatus.NOT_HOLDER)
    return answers


def _names_of(receipt: dict[str, Any]) -> list[str]:
    return [
        receipt["hand"],
        *(f.get(key) or "" for f in receipt["fences"] for key in ("holder", "named_holder")),
        *(r.get("holder") or "" for r in receipt["refusals"]),
    ]
