"""Push receipts: a fence judged when the work lands (`POST /fences/receipts`).

A fence is current only while its tenure lasts, so asking in CI whether a commit's fence is
current *now* gets both answers wrong once the holder has released: the new holder's good commit
reads stale, and a stale session's commit without a trailer passes. So the pre-push hook
(`gctl git pre-push`) asks when the work lands, and the server keeps the answer: one receipt per
(repository, commit), signed, which CI reads back (`GET /fences/receipts`, `gctl verify`).

For each commit a push sends, with the pushing hand `P`:

1. each fence it carries (`Ground-Control-Fence: <resource>@<fence> <holder>`) is one decision on
   the database's clock (`verification.standing`): `current`, `superseded` or `unknown`; a
   current one whose tenure is not `P`'s, or whose trailer names another holder than `P`, is
   `not_holder` (a push vouches only for the pusher's own fences, so a commit cannot borrow
   another's);
2. each path it touches (as the hooks name files) is judged as the pre-commit hook judges it
   (`verification.paths_standing`): refused under another hand's exclusive tenure (or a shared
   one while `P` holds none over it), and refused when `P`'s own last tenure over it lapsed (lost
   or broken) and `P` holds none over it now;
3. the commit is accepted when nothing was refused, and its receipt is written by one upsert
   whose condition keeps an accepted receipt as it is: a re-push answers with the first
   receipt (`duplicate`), and a refused commit is judged again by its next push.

A receipt records the repository, the commit, each fence with its status then (and the tenure's
holder and process), the refusals with their sentences, the pushing hand, its key and process,
and the database's time; it is signed with an HMAC-SHA256 keyed from SECRET_KEY
(`django.utils.crypto.salted_hmac`, checked against SECRET_KEY_FALLBACKS too), so a row altered
in the database without the key reads back `signature_valid: false`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC
from typing import Any

from django.conf import settings
from django.db import connection
from django.utils.crypto import constant_time_compare, salted_hmac

from apikit import concealing
from apikit.errors import ValidationFailed
from leases import verification
from leases.clock import db_now
from leases.models import FenceReceipt, FenceStatus
from leases.verification import Carried, PathStanding

MAX_RECEIPT_COMMITS = 100
# The fences and paths of one call, every commit's together.
MAX_RECEIPT_NAMES = 2000
MAX_REPOSITORY_LENGTH = 512
MAX_PROCESS_LENGTH = verification.MAX_NAME_LENGTH
_SHA = re.compile(r"[0-9a-f]{40}(?:[0-9a-f]{24})?")
SIGNATURE_SALT = "groundcontrol.leases.receipts.FenceReceipt"
TABLE = FenceReceipt._meta.db_table

# Writes the receipts of one push; an accepted receipt stays as it is (a re-push), a refused one
# takes the new judgement. RETURNING says which rows this statement wrote.
_RECORD = (
    f"INSERT INTO {TABLE} AS r (workspace_id, repository, sha, accepted, at, hand, key_prefix, "
    "process_id, fences, refusals, signature) VALUES {rows} "
    "ON CONFLICT (workspace_id, repository, sha) DO UPDATE SET accepted = excluded.accepted, "
    "at = excluded.at, hand = excluded.hand, key_prefix = excluded.key_prefix, "
    "process_id = excluded.process_id, fences = excluded.fences, "
    "refusals = excluded.refusals, signature = excluded.signature "
    "WHERE NOT r.accepted "
    "RETURNING sha"
)
_ROW = "(%s, %s, %s, %s, %s, %s, %s, %s, %s::jsonb, %s::jsonb, %s)"


@dataclass(frozen=True)
class Pushed:
    """One commit a push sends: its id, the fences it carries and the files it touches."""

    sha: str
    fences: tuple[Carried, ...]
    paths: tuple[str, ...]


@dataclass(frozen=True)
class Push:
    repository: str
    process_id: str
    commits: tuple[Pushed, ...]


def _text_problem(value: object, field: str, limit: int, *, required: bool) -> str | None:
    if value is None or value == "":
        return f"{field} is required" if required else None
    if not isinstance(value, str):
        return f"{field} must be a string"
    if len(value) > limit or verification.UNPRINTABLE.search(value):
        return f"{field} must be at most {limit} printable characters"
    return None


def validate_text(value: object, field: str, limit: int, *, required: bool) -> str:
    problem = _text_problem(value, field, limit, required=required)
    if problem is not None:
        raise ValidationFailed(problem, fields={field: [problem]})
    return value if isinstance(value, str) else ""


def validate_sha(value: object, field: str) -> str:
    if not isinstance(value, str) or not _SHA.fullmatch(value):
        message = f"{field} must be a commit id: 40 (or 64) lowercase hexadecimal digits"
        raise ValidationFailed(message, fields={field: [message]})
    return value


def validate_push(body: object) -> Push:
    """The body of `POST /fences/receipts`, or `validation_error` naming the first fault."""
    if not isinstance(body, dict):
        raise ValidationFailed(
            "the body must be an object {repository, process_id?, commits}",
            fields={"body": ["An object."]},
        )
    repository = validate_text(
        body.get("repository"), "repository", MAX_REPOSITORY_LENGTH, required=True
    )
    process_id = validate_text(
        body.get("process_id"), "process_id", MAX_PROCESS_LENGTH, required=False
    )
    commits = body.get("commits")
    if not isinstance(commits, list) or not commits:
        raise ValidationFailed(
            "commits must be a non-empty list of {sha, fences, paths}",
            fields={"commits": ["A non-empty list of {sha, fences, paths}."]},
        )
    if len(commits) > MAX_RECEIPT_COMMITS:
        raise ValidationFailed(
            f"commits holds {len(commits)} items; at most {MAX_RECEIPT_COMMITS} in one call",
            fields={"commits": [f"At most {MAX_RECEIPT_COMMITS} items."]},
        )
    pushed: dict[str, Pushed] = {}
    names = 0
    for index, commit in enumerate(commits):
        where = f"commits[{index}]"
        if not isinstance(commit, dict):
            message = f"{where} must be an object {{sha, fences, paths}}"
            raise ValidationFailed(message, fields={where: [message]})
        sha = validate_sha(commit.get("sha"), f"{where}.sha")
        if sha in pushed:
            message = f"{where}.sha {sha} is sent twice: each commit once"
            raise ValidationFailed(message, fields={f"{where}.sha": [message]})
        field = f"{where}.fences"
        fences = verification.validate_fences(
            commit.get("fences"), field=field, required=False, limit=MAX_RECEIPT_NAMES
        )
        paths = verification.validate_paths(
            commit.get("paths"), field=f"{where}.paths", limit=MAX_RECEIPT_NAMES
        )
        names += len(fences) + len(paths)
        if names > MAX_RECEIPT_NAMES:
            message = (
                f"the commits' fences and paths number more than {MAX_RECEIPT_NAMES} by "
                f"{where}: send fewer commits in one call"
            )
            raise ValidationFailed(message, fields={"commits": [message]})
        pushed[sha] = Pushed(sha, tuple(dict.fromkeys(fences)), tuple(dict.fromkeys(paths)))
    return Push(repository, process_id, tuple(pushed.values()))


# --- signing -----------------------------------------------------------------------------------


def _canonical(claims: dict[str, Any]) -> str:
    return json.dumps(claims, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def sign(claims: dict[str, Any], secret: str | bytes | None = None) -> str:
    """The receipt's HMAC-SHA256, keyed from SECRET_KEY (or `secret`) and this module's salt."""
    return salted_hmac(
        SIGNATURE_SALT, _canonical(claims), secret=secret, algorithm="sha256"
    ).hexdigest()


def signature_valid(claims: dict[str, Any], signature: str) -> bool:
    """Signed by this server: with SECRET_KEY, or a key it had (SECRET_KEY_FALLBACKS)."""
    secrets = [settings.SECRET_KEY, *getattr(settings, "SECRET_KEY_FALLBACKS", [])]
    return any(constant_time_compare(sign(claims, secret), signature) for secret in secrets)


def claims_of(receipt: FenceReceipt) -> dict[str, Any]:
    """What a receipt says, as signed: every field but the signature and the row's id."""
    return {
        "workspace_id": receipt.workspace_id,
        "repository": receipt.repository,
        "sha": receipt.sha,
        "accepted": receipt.accepted,
        "at": receipt.at.astimezone(UTC).isoformat(),
        "hand": receipt.hand,
        "key_prefix": receipt.key_prefix,
        "process_id": receipt.process_id,
        "fences": receipt.fences,
        "refusals": receipt.refusals,
    }


def receipt_json(receipt: FenceReceipt, **extra: Any) -> dict[str, Any]:
    claims = claims_of(receipt)
    del claims["workspace_id"]
    return {**claims, "signature": receipt.signature, **extra}


# --- judging -----------------------------------------------------------------------------------


def _fence_sentence(answer: dict[str, Any], pusher: str) -> str:
    fence, status = answer["fence"], answer["status"]
    if status == FenceStatus.UNKNOWN:
        return f"carries {fence}: no such fence was ever granted in this workspace"
    if status == FenceStatus.SUPERSEDED:
        since = f" at {answer['when']}" if answer["when"] else ""
        return (
            f"carries {fence}, which is stale: the lease {answer['ended']}{since}; the current "
            f"fence is {answer['current_fence']}"
        )
    holder, named = answer["holder"], answer["named_holder"]
    if named and named != holder:
        return (
            f"carries {fence} naming hand '{named}', but that tenure is {_hand(holder)}'s: a "
            "commit cannot borrow another's fence"
        )
    return (
        f"carries {fence}, the tenure of {_hand(holder)}, but hand '{pusher}' pushed it: a push "
        "vouches only for the pushing hand's own fences"
    )


def _hand(name: str) -> str:
    """A holder as a receipt's sentence names it: nobody the pusher may not read (another
    lane's hand, to a lane-limited key: `apikit.concealing`)."""
    return f"hand '{name}'" if concealing.shown(name) else concealing.ANOTHER_LANE


def _fence_verdict(*, workspace_id: int, carried: Carried, pusher: str) -> dict[str, Any]:
    """The fence's answer (`verification.judged`) with the tenure's process, and `not_holder`
    when its tenure is not the pushing hand's."""
    found, answer = verification.judged(workspace_id=workspace_id, carried=carried)
    answer.setdefault("holder", "")
    answer["process_id"] = ""
    if found.status == FenceStatus.CURRENT:
        assert found.tenure is not None
        answer["process_id"] = found.tenure.process_id
        if found.tenure.holder != pusher:
            answer["status"] = str(FenceStatus.NOT_HOLDER)
    return answer


def _path_refusal(standing: PathStanding, pusher: str) -> dict[str, Any] | None:
    in_the_way = standing.in_the_way(pusher)
    if in_the_way:
        t = in_the_way[0]
        shared = ", shared" if t.mode == "shared" else ""
        return {
            "kind": "held",
            "path": standing.path,
            "fence": f"{t.resource}@{t.fence}",
            "holder": t.holder,
            "message": (
                f"touches {standing.path}, under {t.resource} held by {_hand(t.holder)} (fence "
                f"{t.fence}, {t.state}{shared}), and hand '{pusher}' holds no lease covering it"
            ),
        }
    lapsed = standing.lapsed
    if lapsed is None:
        return None
    when = f" at {lapsed.when.isoformat()}" if lapsed.when else ""
    return {
        "kind": "lapsed",
        "path": standing.path,
        "fence": f"{lapsed.resource}@{lapsed.fence}",
        "holder": pusher,
        "message": (
            f"touches {standing.path}, under {lapsed.resource}, whose lease hand '{pusher}' held "
            f"at fence {lapsed.fence} and {lapsed.ended}{when}, and holds none over it now: "
            "take the lease again (and take in the work of whoever held it since) before "
            "pushing under it"
        ),
    }


def _judge(
    *, workspace_id: int, commit: Pushed, pusher: str, paths: dict[str, PathStanding]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(the fences' verdicts, the refusals) of one commit."""
    verdicts = [
        _fence_verdict(workspace_id=workspace_id, carried=carried, pusher=pusher)
        for carried in commit.fences
    ]
    refusals = [
        {
            "kind": "fence",
            "path": "",
            "fence": verdict["fence"],
            "holder": verdict["holder"],
            "message": _fence_sentence(verdict, pusher),
        }
        for verdict in verdicts
        if verdict["status"] != FenceStatus.CURRENT
    ]
    for path in commit.paths:
        refusal = _path_refusal(paths[path], pusher)
        if refusal is not None:
            refusals.append(refusal)
    # A holder the pusher may not read (another lane's hand, to a lane-limited key) is recorded
    # unnamed, as its sentences say it: the receipt is what the push was told.
    hidden = concealing.concealed(item["holder"] for item in (*verdicts, *refusals))
    for item in (*verdicts, *refusals):
        if item["holder"] in hidden:
            item["holder"] = ""
            if "process_id" in item:
                item["process_id"] = ""
    return verdicts, refusals


def receipts_record(
    *, workspace_id: int, hand: str, key_prefix: str, body: object
) -> list[dict[str, Any]]:
    """Judge and record the receipt of each commit of a push (the module's docstring), in the
    order sent; each answer says whether it was on record already (`duplicate`)."""
    push = validate_push(body)
    at = db_now().astimezone(UTC)  # the judgement's time, on the database's clock
    every = list(dict.fromkeys(p for commit in push.commits for p in commit.paths))
    paths = {
        s.path: s
        for s in verification.paths_standing(workspace_id=workspace_id, hand=hand, paths=every)
    }
    judged: list[FenceReceipt] = []
    for commit in push.commits:
        verdicts, refusals = _judge(
            workspace_id=workspace_id, commit=commit, pusher=hand, paths=paths
        )
        receipt = FenceReceipt(
            workspace_id=workspace_id,
            repository=push.repository,
            sha=commit.sha,
            accepted=not refusals,
            at=at,
            hand=hand,
            key_prefix=key_prefix,
            process_id=push.process_id,
            fences=verdicts,
            refusals=refusals,
        )
        receipt.signature = sign(claims_of(receipt))
        judged.append(receipt)
    written = _record(judged)
    standing = _found(
        workspace_id, push.repository, [r.sha for r in judged if r.sha not in written]
    )
    return [
        receipt_json(r, duplicate=False) if r.sha in written else _duplicate(standing, r)
        for r in judged
    ]


def _duplicate(standing: dict[str, FenceReceipt], judged: FenceReceipt) -> dict[str, Any]:
    # The upsert wrote nothing only where an accepted receipt stands (rows are never deleted
    # by a call), so it is there to read.
    return receipt_json(standing[judged.sha], duplicate=True)


def _record(receipts: Sequence[FenceReceipt]) -> set[str]:
    """One statement for the push: the shas whose receipt it wrote."""
    params: list[Any] = []
    for r in receipts:
        params += [
            r.workspace_id,
            r.repository,
            r.sha,
            r.accepted,
            r.at,
            r.hand,
            r.key_prefix,
            r.process_id,
            json.dumps(r.fences),
            json.dumps(r.refusals),
            r.signature,
        ]
    sql = _RECORD.replace("{rows}", ", ".join([_ROW] * len(receipts)))
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return {row[0] for row in cursor.fetchall()}


def _found(workspace_id: int, repository: str, shas: Sequence[str]) -> dict[str, FenceReceipt]:
    if not shas:
        return {}
    rows = FenceReceipt.objects.filter(
        workspace_id=workspace_id, repository=repository, sha__in=list(shas)
    )
    return {r.sha: r for r in rows}


def validate_lookup(repository: object, shas: Sequence[object]) -> tuple[str, list[str]]:
    repository = validate_text(repository, "repository", MAX_REPOSITORY_LENGTH, required=True)
    if not shas:
        raise ValidationFailed(
            "sha is required (repeatable: each commit CI verifies)",
            fields={"sha": ["This field is required."]},
        )
    if len(shas) > MAX_RECEIPT_COMMITS:
        raise ValidationFailed(
            f"sha is repeated {len(shas)} times; at most {MAX_RECEIPT_COMMITS}",
            fields={"sha": [f"At most {MAX_RECEIPT_COMMITS} commits."]},
        )
    return repository, [validate_sha(sha, "sha") for sha in shas]


def receipts_lookup(
    *, workspace_id: int, repository: object, shas: Sequence[object]
) -> list[dict[str, Any]]:
    """The receipts on record for these commits of `repository` (those there are, in the order
    asked), each with whether its signature verifies."""
    repository, wanted = validate_lookup(repository, shas)
    found = _found(workspace_id, repository, wanted)
    return [
        receipt_json(r, signature_valid=signature_valid(claims_of(r), r.signature))
        for r in (found[sha] for sha in dict.fromkeys(wanted) if sha in found)
    ]
