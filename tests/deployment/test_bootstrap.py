import json
from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from hands.models import Hand, HandKey, Membership, Workspace
from hands.services import ALL_SCOPES, key_authenticate

pytestmark = pytest.mark.django_db


def bootstrap(*extra: str) -> dict:
    out = StringIO()
    call_command(
        "bootstrap",
        "--workspace",
        "acme",
        "--username",
        "ada",
        "--password",
        "pw-123456",
        "--json",
        *extra,
        stdout=out,
    )
    return json.loads(out.getvalue())


def test_it_creates_workspace_admin_and_a_supervisor_key_once() -> None:
    first = bootstrap()
    assert set(first) >= {"workspace", "username", "supervisor_hand", "supervisor_key"}
    key = key_authenticate(first["supervisor_key"])
    assert key.scopes == ALL_SCOPES
    assert key.hand.name == first["supervisor_hand"]
    user = get_user_model().objects.get(username="ada")
    assert user.check_password("pw-123456")
    assert Membership.objects.get(user=user).role == "admin"
    # Plaintext never stored.
    assert not HandKey.objects.filter(
        secret_hash__contains=first["supervisor_key"].split("_", 2)[2]
    ).exists()

    again = bootstrap()
    assert again["supervisor_key"] is None
    assert (Workspace.objects.count(), Hand.objects.count(), HandKey.objects.count()) == (1, 1, 1)

    fresh = bootstrap("--new-key")
    assert fresh["supervisor_key"] and fresh["supervisor_key"] != first["supervisor_key"]
