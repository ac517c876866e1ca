"""The client's half of the fences at the repository, held to the server's: the trailer's
holder written as the server reads it, the repository named one way whatever the clone's URL,
the push receipt calls split within the server's limits, and the wire models reading only what
the schema answers."""

from __future__ import annotations

from typing import Any

import pytest
from drf_spectacular.generators import SchemaGenerator
from groundcontrol_client.core import models
from groundcontrol_client.git import fences as git_fences

from groundcontrol.limits import limits
from leases import receipts, verification
from tests.client.test_models_contract import Reading, _in_schema, example

HOLDERS = ["hand-a", "hand b", "a@b", "100%", "no\u00a0break", "émile", "x%40y", "7"]


@pytest.mark.parametrize("holder", HOLDERS)
def test_the_trailer_names_its_holder_as_the_server_reads_it(holder: str) -> None:
    assert git_fences.holder_text(holder) == verification.holder_text(holder)
    value = git_fences.trailer_value("src/my file.py", 3, holder)
    assert " " not in value.rpartition(" ")[2] and "@" not in value.rpartition(" ")[2]
    carried = verification.parse_fence(value, 0)
    assert (carried.resource, carried.fence, carried.holder) == ("src/my file.py", 3, holder)
    assert git_fences.fence_of(value) == "src/my file.py@3"


@pytest.mark.parametrize("value", ["src/app.py@3", "src/my file@3", "a@b/c@12"])
def test_an_older_trailer_without_a_holder_still_reads(value: str) -> None:
    carried = verification.parse_fence(value, 0)
    assert carried.holder is None and carried.name == value
    assert git_fences.fence_of(value) == value


@pytest.mark.parametrize(
    "url",
    [
        "git@github.com:acme/app.git",
        "https://github.com/acme/app",
        "https://x-access-token:secret@GitHub.com/acme/app.git/",
        "ssh://git@github.com/acme/app.git",
        "ssh://git@github.com:22/acme/app",
        "git+ssh://git@github.com/acme/app.git",
    ],
)
def test_every_form_of_one_remote_names_one_repository(url: str) -> None:
    assert git_fences.repository_of(url) == "github.com/acme/app"


def test_a_local_remote_is_named_by_its_resolved_path(tmp_path: Any) -> None:
    bare = tmp_path / "remote.git"
    bare.mkdir()
    expected = str(bare.resolve()).removesuffix(".git")
    assert git_fences.repository_of(str(bare)) == expected
    assert git_fences.repository_of(f"file://{bare}/") == expected
    assert git_fences.repository_of("remote.git", cwd=str(tmp_path)) == expected
    assert git_fences.repository_of("https://example.com:8443/a/b.git") == "example.com:8443/a/b"


def test_the_clients_limits_are_the_servers() -> None:
    server = {name: value for name, (value, _) in limits().items()}
    assert git_fences.PATHS_PER_CALL == server["verified_paths"] == verification.MAX_PATHS
    assert git_fences.RECEIPT_COMMITS_PER_CALL == server["receipt_commits"]
    assert git_fences.RECEIPT_NAMES_PER_CALL == server["receipt_names"]
    assert verification.MAX_NAME_LENGTH == server["name_length"]
    assert receipts.MAX_PROCESS_LENGTH == server["name_length"]


def pushed(sha: str, paths: int) -> git_fences.Pushed:
    return git_fences.Pushed(sha, [], [f"p{i}" for i in range(paths)])


def test_a_push_is_sent_in_calls_within_the_servers_limits() -> None:
    names = git_fences.RECEIPT_NAMES_PER_CALL
    commits = [pushed(f"{i:040x}", 1) for i in range(git_fences.RECEIPT_COMMITS_PER_CALL + 1)]
    assert [len(b) for b in git_fences.batches(commits)] == [
        git_fences.RECEIPT_COMMITS_PER_CALL,
        1,
    ]
    big = [pushed("a" * 40, names - 1), pushed("b" * 40, 2), pushed("c" * 40, names)]
    assert [[c.sha[0] for c in b] for b in git_fences.batches(big)] == [["a"], ["b"], ["c"]]
    with pytest.raises(git_fences.GitError, match="split it"):
        git_fences.batches([pushed("d" * 40, names + 1)])


@pytest.fixture(scope="module")
def components() -> dict[str, Any]:
    return SchemaGenerator().get_schema(request=None, public=True)["components"]["schemas"]


@pytest.mark.parametrize(
    ("parse", "name"),
    [
        (models.ReceiptsRecorded.from_wire, "FenceReceiptsRecordedOut"),
        (models.ReceiptsFound.from_wire, "FenceReceiptsOut"),
        (models.RecordedReceipt.from_wire, "RecordedReceiptOut"),
        (models.StoredReceipt.from_wire, "StoredReceiptOut"),
        (models.FencesVerified.from_wire, "FencesVerifyOut"),
        (models.PathAnswer.from_wire, "PathAnswerOut"),
    ],
)
def test_the_receipt_models_read_only_what_the_schema_answers(
    parse: Any, name: str, components: dict[str, Any]
) -> None:
    read: set[str] = set()
    assert parse(Reading(example(components[name], components), "", read)) is not None
    unknown = {p for p in read if not _in_schema(p, components[name], components, name)}
    assert not unknown, f"{name}: {sorted(unknown)}"
