"""Fences checked where the damage happens: `POST /fences/verify` answers, for each fence a
commit carried (`Ground-Control-Fence: <resource>@<fence>`), whether it is still current
(`leases.verification`), for a push hook or a CI job (`gctl git`, `gctl verify`)."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiExample, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from apikit.openapi import error_responses
from hands.views import LEASES, SUPERVISE, VERIFY, HandAPIView
from leases import verification
from leases.models import FenceStatus


class FencesVerifyIn(serializers.Serializer):
    fences = serializers.ListField(
        child=serializers.CharField(),
        max_length=verification.MAX_FENCES,
        help_text="Each `<resource>@<fence>`: a canonical resource name, `@`, and a fence (the "
        f"last `@` splits them); 1 to {verification.MAX_FENCES}.",
    )


class FenceAnswerOut(serializers.Serializer):
    fence = serializers.CharField(help_text="As asked, `<resource>@<fence>`.")
    resource = serializers.CharField()
    fence_number = serializers.IntegerField()
    status = serializers.ChoiceField(
        choices=FenceStatus.choices,
        help_text="`current`: that tenure is held and not lost; `superseded`: it has ended "
        "(released, lost, broken, or taken past); `unknown`: the node was never leased in this "
        "workspace, or never granted that fence.",
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
    holder = serializers.CharField(required=False, help_text="For `current`: who holds it.")


class FencesVerifyOut(serializers.Serializer):
    fences = FenceAnswerOut(many=True)
    all_current = serializers.BooleanField()


class FencesVerifyApi(HandAPIView):
    """Are these fences still current? Each answer is recorded.

    `verify` is CI's scope: it reads fences and nothing else. `leases` (a hand's pre-push hook)
    and `supervise` will do as well, since either may already ask `POST /leases/check`."""

    required_scope = (VERIFY, LEASES, SUPERVISE)

    @extend_schema(
        tags=["leases"],
        request=FencesVerifyIn,
        description="For each `<resource>@<fence>` (a commit's `Ground-Control-Fence` "
        "trailers): `current`, `superseded` (with `current_fence`, `when` and how it `ended`) "
        "or `unknown`. The rule is `POST /leases/check`'s. Every answer is recorded.",
        responses={200: FencesVerifyOut, **error_responses("scope_denied", body=True)},
        examples=[
            OpenApiExample(
                "a commit's fences",
                value={"fences": ["src/auth/@7", "docs/@2"]},
                request_only=True,
            )
        ],
    )
    def post(self, request: Request) -> Response:
        body = request.data if isinstance(request.data, dict) else {}
        if not isinstance(request.data, dict):
            verification.validate_fences(None)  # says what the body must be
        answers = verification.fences_verify(
            workspace_id=self.workspace_id,
            fences=body.get("fences"),
            key_prefix=self.key.prefix,
            hand=self.hand.name,
        )
        return Response(
            {
                "fences": answers,
                "all_current": all(a["status"] == FenceStatus.CURRENT for a in answers),
            }
        )
