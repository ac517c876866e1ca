"""Revoking a key races the keys it is minting, on PostgreSQL, each thread with its own
connection: whichever commits first, no key issued by a revoked key is left usable (issue 18,
item 2). Without the issuer's row lock in the minting transaction, a mint that read the issuer
before the revocation committed would leave a live child behind."""

from __future__ import annotations

import pytest

from apikit.errors import GroundControlError
from hands import services as hand_services
from hands.models import HandKey
from tests.support.threads import together

pytestmark = [pytest.mark.concurrency, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

ROUNDS = 6
MINTERS = 8


def test_no_key_minted_by_a_revoked_key_stays_usable(workspace) -> None:  # noqa: ANN001
    hand, _ = hand_services.hand_create(workspace=workspace, name="minter")
    for round_ in range(ROUNDS):
        parent = hand_services.key_issue(hand=hand, scopes=["hands", "work"], actor="test").key
        parent = HandKey.objects.select_related("hand").get(pk=parent.pk)
        refused: list[str] = []

        def mint(parent: HandKey = parent, refused: list[str] = refused) -> None:
            try:
                hand_services.key_issue_by(issuer=parent, hand=hand, scopes=["work"])
            except GroundControlError as error:
                refused.append(error.code)

        def revoke(parent: HandKey = parent) -> None:
            hand_services.key_revoke(
                workspace_id=workspace.pk, prefix=parent.prefix, actor="admin", reason="r"
            )

        bodies = [mint] * MINTERS
        bodies.insert(round_ % (MINTERS + 1), revoke)
        assert together(bodies) == []
        assert set(refused) <= {"key_revoked"}
        children = HandKey.objects.filter(issued_by=parent)
        assert children.count() + len(refused) == MINTERS
        assert not children.filter(revoked_at=None).exists()
