"""Resource names are canonical (issue 18, item 4; `leases.names`): every other spelling is a
400 `validation_error` naming `resource`, whose message says what is wrong and how to fix it,
refused by the endpoint's input validation before a hot call's statement runs, and it writes
nothing but its refusal: no lease, no event, no renewal or release of the lease it looks like.
Good names (unicode letters, dots inside segments, one trailing `/`) still work, and a property
says the rule is exactly the reference predicate below, for the hot acquire's body too and over
HTTP on every generated name."""

from __future__ import annotations

import json
import unicodedata
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from rest_framework.exceptions import ValidationError

from apikit.errors import ValidationFailed
from apikit.inputs import valid_data
from leases import names
from leases.models import Event, Lease, Refusal
from leases.services import MAX_RESOURCE_LENGTH
from leasing import hot
from tests.support.api import Api, error_of

pytestmark = [pytest.mark.hostile, pytest.mark.django_db]


# Unicode's Default_Ignorable_Code_Point (DerivedCoreProperties.txt), as written there.
DEFAULT_IGNORABLE = frozenset(
    chr(c)
    for low, high in [
        (0x00AD, 0x00AD),
        (0x034F, 0x034F),
        (0x061C, 0x061C),
        (0x115F, 0x1160),
        (0x17B4, 0x17B5),
        (0x180B, 0x180F),
        (0x200B, 0x200F),
        (0x202A, 0x202E),
        (0x2060, 0x206F),
        (0x3164, 0x3164),
        (0xFE00, 0xFE0F),
        (0xFEFF, 0xFEFF),
        (0xFFA0, 0xFFA0),
        (0xFFF0, 0xFFF8),
        (0x1BCA0, 0x1BCA3),
        (0x1D173, 0x1D17A),
        (0xE0000, 0xE0FFF),
    ]
    for c in range(low, high + 1)
)


# Drawn as '/' or as a full stop (issue 33, item 8): Unicode's confusables of '/' and '.'
# (confusables.txt) that are no letters, and whatever NFKC folds into a '/' or into dots.
SLASH_LOOKALIKES = frozenset(
    "\u0337\u0338\u1735\u2041\u2044\u2215\u2571\u27cb\u29f6\u29f8\u2afb\u2afd\u2f03\u3033"
    "\u31d3\U0001d23a"
)
DOT_LOOKALIKES = frozenset("\u0701\u0702\ua60e\U00010a50\U0001d16d")


def drawn_as_slash(c: str) -> bool:
    return c in SLASH_LOOKALIKES or (c != "/" and "/" in unicodedata.normalize("NFKC", c))


def drawn_as_dots(c: str) -> bool:
    folded = unicodedata.normalize("NFKC", c)
    return c in DOT_LOOKALIKES or (c != "." and folded != "" and set(folded) == {"."})


def reference(name: str) -> bool:
    """Canonical, as issue 18 words it (and issue 33, item 8: no look-alike of '/' anywhere, no
    segment of dots spelled with a look-alike of '.'), written apart from `leases.names`."""
    if not 1 <= len(name) <= MAX_RESOURCE_LENGTH:
        return False
    if any(unicodedata.category(c) in ("Cc", "Cf", "Cs", "Zl", "Zp") for c in name):
        return False
    if any(c in DEFAULT_IGNORABLE for c in name):  # invisible, whatever its category
        return False
    if unicodedata.normalize("NFC", name) != name or name.strip() != name:
        return False
    if any(drawn_as_slash(c) for c in name):
        return False
    parts = name.removesuffix("/").split("/")
    if any(
        part
        and any(drawn_as_dots(c) for c in part)
        and all(c == "." or drawn_as_dots(c) for c in part)
        for part in parts
    ):
        return False
    return all(part not in ("", ".", "..") for part in parts)


# (bad spelling, the canonical name a lax server might take it for, words the message holds)
BAD = [
    (" src/a", "src/a", "leading or trailing whitespace; send 'src/a'"),
    ("src/a ", "src/a", "leading or trailing whitespace; send 'src/a'"),
    ("\u00a0src/a", "src/a", "leading or trailing whitespace"),
    ("\u3000src/a", "src/a", "leading or trailing whitespace"),
    ("src//a", "src/a", "empty segment ('//'); send 'src/a'"),
    ("src/a//", "src/a/", "empty segment ('//'); send 'src/a/'"),
    ("/src/a", "src/a", "starts with '/' (an empty first segment); send 'src/a'"),
    ("/", "src/a", "starts with '/'"),
    ("src/./a", "src/a", "'.' segment; send 'src/a'"),
    ("./src/a", "src/a", "'.' segment; send 'src/a'"),
    ("src/a/.", "src/a", "'.' segment; send 'src/a'"),
    (".", "src/a", "'.' segment"),
    ("src/../src/a", "src/a", "'..' segment: a resource name is not a path to resolve"),
    ("src/a/..", "src/a", "'..' segment"),
    ("..", "src/a", "'..' segment"),
    ("../../etc/passwd", "etc/passwd", "'..' segment"),
    ("src/a\x00", "src/a", "control character at U+0000; send 'src/a'"),
    ("src/\na", "src/a", "control character at U+000A"),
    ("src/\ta", "src/a", "control character at U+0009"),
    ("src/a\x7f", "src/a", "control character at U+007F"),
    ("src/a\x85", "src/a", "control character at U+0085"),
    ("src/a\u2028", "src/a", "line separator at U+2028"),
    ("src/a\u2029", "src/a", "paragraph separator at U+2029"),
    *(
        (
            f"src/{chr(c)}a",
            "src/a",
            f"invisible format character ({unicodedata.name(chr(c)).lower()})",
        )
        for c in [*range(0x202A, 0x202F), *range(0x2066, 0x206A), 0x200E, 0x200F]
    ),
    *(
        (f"src/a{chr(c)}", "src/a", f"at U+{c:04X}; send 'src/a'")
        for c in (0x200B, 0x200C, 0x200D, 0xFEFF)
    ),
    ("cafe\u0301/", "caf\u00e9/", "not in Unicode normal form C (NFC); send 'café/'"),
    ("\u212b", "\u00c5", "NFC"),  # the angstrom sign, whose NFC is Å
]
BAD_IDS = [ascii(bad)[1:-1] or "empty" for bad, _, _ in BAD]
GOOD = [
    "src/app.py",
    "src/auth/",
    "ünïcødé/文件/🚀",
    "caf\u00e9",
    "Ωmega/λ",
    "my resource",
    "a..b/.../.hidden",
    "x" * MAX_RESOURCE_LENGTH,
    "run",  # only names under `run/` are slots
]


def accepted(call: hot.HotCall, body: dict[str, Any]) -> bool:
    """Whether a hot call takes `body`: its input serializer's validation and its own checks."""
    try:
        call.parse(valid_data(call.body, body))
    except (ValidationError, ValidationFailed):
        return False
    return True


def statements() -> Any:
    """Counts the hot calls' statements run (`leasing.hot.run_statement`)."""
    return mock.patch.object(hot, "run_statement", wraps=hot.run_statement)


def unwritten() -> tuple[list[dict[str, Any]], int]:
    """What a refused call must leave as it was: every lease row and the number of events."""
    return list(Lease.objects.order_by("id").values()), Event.objects.count()


@pytest.mark.parametrize(("bad", "meant", "words"), BAD, ids=BAD_IDS)
def test_it_refuses_a_bad_spelling_on_acquire(api_a: Api, bad: str, meant: str, words: str) -> None:
    api = api_a
    before = unwritten()
    body = {"resource": bad, "ttl_s": 30, "process_id": "p:1"}
    with statements() as ran:
        error = error_of(api.post("/leases/acquire", body), 400, "validation_error")
    assert words in error["message"], error["message"]
    assert error["message"].startswith("resource "), error["message"]
    assert error["fields"] == {"resource": [error["message"]]}
    assert unwritten() == before
    assert not Lease.objects.exists()
    # Refused by the body's validation: the acquire's statement never ran.
    assert not accepted(hot.acquire, body)
    assert ran.call_count == 0
    refusal = Refusal.objects.get(path="/api/v1/leases/acquire")
    assert refusal.code == "validation_error" and refusal.message == error["message"]


@pytest.mark.parametrize(("bad", "meant", "words"), BAD, ids=BAD_IDS)
def test_it_refuses_a_bad_spelling_on_renew_release_and_check(
    api_a: Api, bad: str, meant: str, words: str
) -> None:
    """Whatever the spelling looks like, it never reaches the lease it looks like."""
    api = api_a
    held = api.post("/leases/acquire", {"resource": meant, "ttl_s": 30, "process_id": "p:1"})
    assert held.status_code == 201, held.content
    fence = held.json()["fence"]
    before = unwritten()
    for call, body in (
        ("/leases/renew", {"resource": bad, "fence": fence, "process_id": "p:1"}),
        ("/leases/release", {"resource": bad, "fence": fence}),
        ("/leases/check", {"resource": bad, "fence": fence}),
    ):
        with statements() as ran:
            error = error_of(api.post(call, body), 400, "validation_error")
        assert words in error["message"], (call, error["message"])
        assert "resource" in error["fields"], call
        assert ran.call_count == 0, call  # no statement ran
        if call == "/leases/renew":
            assert not accepted(hot.renew, body)
    assert unwritten() == before
    assert Lease.objects.get().status == "held"


def test_it_says_how_to_fix_a_name(api_a: Api) -> None:
    api = api_a
    error = error_of(
        api.post("/leases/acquire", {"resource": " a", "ttl_s": 30, "process_id": "p"}),
        400,
        "validation_error",
    )
    assert error["message"] == "resource ' a' has leading or trailing whitespace; send 'a'"
    renew = api.post("/leases/renew", {"resource": "a/./b", "fence": 1, "process_id": "p"})
    assert error_of(renew, 400, "validation_error")["message"] == (
        "resource 'a/./b' has a '.' segment; send 'a/b'"
    )


@pytest.mark.parametrize("good", GOOD, ids=[ascii(g)[1:20] for g in GOOD])
def test_good_names_still_work(api_a: Api, api_b: Api, good: str) -> None:
    api, rival = api_a, api_b
    granted = api.post("/leases/acquire", {"resource": good, "ttl_s": 30, "process_id": "p"})
    assert granted.status_code == 201, granted.content
    assert granted.json()["resource"] == good
    fence = granted.json()["fence"]
    denied = rival.post("/leases/acquire", {"resource": good, "ttl_s": 30, "process_id": "q"})
    assert error_of(denied, 409, "lease_held")["resource"] == good
    renewed = api.post("/leases/renew", {"resource": good, "fence": fence, "process_id": "p"})
    assert renewed.status_code == 200, renewed.content
    checked = api.post("/leases/check", {"resource": good, "fence": fence})
    assert checked.status_code == 200 and checked.json()["valid"] is True
    released = api.post("/leases/release", {"resource": good, "fence": fence})
    assert released.status_code == 200, released.content
    assert Lease.objects.get().resource == good
    kinds = list(Event.objects.filter(resource=good).order_by("id").values_list("kind", flat=True))
    assert kinds == ["lease_acquired", "lease_released"]


def test_a_supervisor_can_still_break_a_lease_whose_name_is_not_canonical(boss: Api) -> None:
    """A lease taken before names had to be canonical is not stranded: break finds it by any
    name it could have been taken under."""
    Lease.objects.create(
        workspace_id=boss.hand.workspace_id,
        resource="old/../name",
        status="held",
        holder="hand-a",
        fence=3,
    )
    broken = boss.post("/leases/break", {"resource": "old/../name", "reason": "stranded"})
    assert broken.status_code == 200, broken.content
    assert Lease.objects.get().fence == 4


# --- The rule as a property -----------------------------------------------------------------

# Pieces that each break, or nearly break, one rule; joined in any order, and any text besides.
PIECES = st.sampled_from(
    [
        "a",
        "B",
        "é",
        "e",
        "\u0301",
        "文",
        "🚀",
        "/",
        ".",
        "..",
        " ",
        "\u00a0",
        "\t",
        "\n",
        "\x00",
        "\x7f",
        "\x85",
        "\u2028",
        "\u202e",
        "\u2066",
        "\u200b",
        "\u200e",
        "\ufeff",
        "\u034f",
        "\u3164",
        "\ufe0f",
        "\u212b",
        "run/",
        "RUN/",
        "\ud800",
        # Look-alikes of '/' and '.' (issue 33, item 8), and characters that only resemble them.
        "\uff0f",
        "\u2215",
        "\u2044",
        "\u29f8",
        "\u0338",
        "\u2105",
        "\uff0e",
        "\u2024",
        "\u2025",
        "\u2026",
        "\u30ce",
        "\u2260",
    ]
)
NAMES = st.one_of(
    st.lists(PIECES, max_size=8).map("".join),
    st.text(max_size=24),
    st.text(alphabet=st.characters(codec="utf-8"), max_size=8).map(lambda t: f"src/{t}"),
)


@settings(max_examples=2000, deadline=None)
@given(NAMES)
@example("x" * MAX_RESOURCE_LENGTH)
@example("x" * (MAX_RESOURCE_LENGTH + 1))
@example("a/")
@example("a//")
def test_validate_says_canonical_exactly_when_the_reference_does(name: str) -> None:
    assert names.is_canonical(name) == reference(name)
    assert (names.resource_problem(name) is None) == reference(name)
    if reference(name):
        assert names.validate_resource(name) == name
        # Every prefix of a canonical name is a prefix the lease list may filter by.
        assert all(names.prefix_problem(name[:i]) is None for i in range(len(name) + 1))
    else:
        with pytest.raises(ValidationFailed) as refused:
            names.validate_resource(name)
        assert list(refused.value.fields["fields"]) == ["resource"]
    # The hot acquire takes exactly the canonical names no hand is refused directly (run
    # slots and pool members are taken through their run and their pool).
    body = {"resource": name, "ttl_s": 30, "process_id": "p"}
    slot = name.strip().lower().startswith("run/")
    pool = name.strip().split("/", 1)[0].lower() == "pool"
    assert accepted(hot.acquire, body) == (reference(name) and not slot and not pool), name


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(NAMES)
def test_every_name_is_answered_by_the_rule_over_http(api_a: Api, name: str) -> None:
    """Over the real HTTP path: the hand's acquire of `name` is granted exactly when the name is
    canonical (and no run slot's), a second acquire is the holder's renewal and answers alike,
    and a refusal is a validation_error that writes no lease."""
    body = {"resource": name, "ttl_s": 30, "process_id": "p"}
    leases = Lease.objects.count()
    answers = [
        (r.status_code, r.json().get("error", {}).get("code"))
        for r in (api_a.post("/leases/acquire", body), api_a.post("/leases/acquire", body))
    ]
    assert answers[0] == answers[1], (name, answers)
    slot = name.strip().lower().startswith("run/")
    assert answers[0][0] == (201 if reference(name) and not slot else 400), (name, answers)
    if answers[0][0] == 201:
        assert answers[0][1] is None, (name, answers)
        fence = Lease.objects.get(resource=name).fence
        renew = {"resource": name, "fence": fence, "process_id": "p"}
        statuses = {api_a.post("/leases/renew", renew).status_code for _ in range(2)}
        assert statuses == {200}, name
    else:  # (a name with NUL cannot even be looked up on PostgreSQL: count the rows)
        assert answers[0][1] == "validation_error", (name, answers)
        assert Lease.objects.count() == leases


def test_a_name_the_body_cannot_carry_as_text_is_refused_too(api_a: Api) -> None:
    """A lone surrogate arrives only through a JSON escape: the body's validation refuses it by
    the same rule, and no statement runs."""
    raw = json.dumps({"resource": "src/\ud800", "ttl_s": 30, "process_id": "p"}).encode()
    with statements() as ran:
        response = api_a.client.post(
            "/api/v1/leases/acquire",
            data=raw,
            content_type="application/json",
            headers={"Authorization": f"Bearer {api_a.key}"},
        )
    error = error_of(response, 400, "validation_error")
    assert "resource" in error["fields"] or "body" in error["fields"]
    assert ran.call_count == 0
    assert not Lease.objects.exists()


@pytest.mark.parametrize(
    "name", ["src/\ud800", "src/\x00", "src/\n"], ids=["surrogate", "nul", "lf"]
)
def test_break_still_refuses_what_no_lease_can_hold(boss: Api, name: str) -> None:
    """Break takes non-canonical names, but never one the database cannot hold (a lone
    surrogate could not even be encoded for it: a 500 without this check)."""
    error = error_of(
        boss.post("/leases/break", {"resource": name, "reason": "r"}), 400, "validation_error"
    )
    assert "resource" in error["fields"]


@pytest.mark.parametrize("prefix", ["src/\u202e", "a\u200bb", "x" * 513])
def test_a_lease_list_refuses_a_prefix_no_name_can_start_with(api_a: Api, prefix: str) -> None:
    error = error_of(api_a.get("/leases", {"prefix": prefix}), 400, "validation_error")
    assert "prefix" in error["fields"]


def test_a_lease_list_takes_any_prefix_a_name_may_start_with(api_a: Api) -> None:
    assert (
        api_a.post(
            "/leases/acquire", {"resource": "src/app.py", "ttl_s": 30, "process_id": "a:1"}
        ).status_code
        == 201
    )
    for prefix in ("", "s", "src/", "src/app", "src/app.py"):
        listed = api_a.get("/leases", {"prefix": prefix})
        assert [lease["resource"] for lease in listed.json()] == ["src/app.py"], prefix


# --- Invisible characters in resource names: characters outside the format category (the
# combining grapheme joiner, variation selectors, the Hangul fillers: Unicode's default-ignorable
# code points) made `src/auth` and `src/auth` + U+034F two resources that look alike

INVISIBLE = [
    0x034F,  # combining grapheme joiner (Mn)
    0x115F,  # Hangul choseong filler (Lo)
    0x1160,  # Hangul jungseong filler (Lo)
    0x17B4,  # Khmer vowel inherent aq (Mn)
    0x180B,  # Mongolian free variation selector one (Mn)
    0x3164,  # Hangul filler (Lo)
    0xFE00,  # variation selector-1 (Mn)
    0xFE0F,  # variation selector-16 (Mn)
    0xFFA0,  # halfwidth Hangul filler (Lo)
    0xE0100,  # variation selector-17 (Mn)
]
INVISIBLE_IDS = [f"U+{c:04X}" for c in INVISIBLE]


@pytest.mark.parametrize("invisible", INVISIBLE, ids=INVISIBLE_IDS)
def test_it_refuses_a_name_with_an_invisible_character(
    api_a: Api, api_b: Api, invisible: int
) -> None:
    api, rival = api_a, api_b
    held = api.post("/leases/acquire", {"resource": "src/auth", "ttl_s": 30, "process_id": "p"})
    assert held.status_code == 201, held.content
    events = Event.objects.count()
    for spelling in (f"src/auth{chr(invisible)}", f"src/{chr(invisible)}auth", chr(invisible)):
        body = {"resource": spelling, "ttl_s": 30, "process_id": "q"}
        assert not accepted(hot.acquire, body)
        with statements() as ran:
            error = error_of(rival.post("/leases/acquire", body), 400, "validation_error")
        assert ran.call_count == 0
        assert f"U+{invisible:04X}" in error["message"], error["message"]
        assert error["fields"] == {"resource": [error["message"]]}
        assert names.prefix_problem(spelling) is not None
    assert list(Lease.objects.values_list("resource", flat=True)) == ["src/auth"]
    assert Event.objects.count() == events
    # The message says what to send instead.
    problem = names.resource_problem(f"src/auth{chr(invisible)}")
    assert problem is not None and problem.endswith("send 'src/auth'"), problem


@pytest.mark.parametrize("good", ["ünïcødé/文件/🚀", "한국어/파일", "ᄀ/ᅡ/가"])
def test_names_with_visible_letters_of_those_scripts_still_work(api_a: Api, good: str) -> None:
    granted = api_a.post("/leases/acquire", {"resource": good, "ttl_s": 30, "process_id": "p"})
    assert granted.status_code == 201, granted.content


# --- Look-alike separators and dot-dots (issue 33, item 8): `src／auth.py` (U+FF0F) was a name
# the lease on `src/` did not cover, granted to another hand beside it, and `．．` (U+FF0E twice)
# a segment that reads as `..`. Every such name is now refused, never folded into another.

SLASHES = [0xFF0F, 0x2215, 0x2044, 0x29F8, 0x2571, 0x0338, 0x2105]
SLASH_IDS = [f"U+{c:04X}" for c in SLASHES]
DOTTED = [
    ("src/\uff0e\uff0e/auth.py", "\uff0e\uff0e", "'..'", 0xFF0E),
    ("\uff0e\uff0e/etc/passwd", "\uff0e\uff0e", "'..'", 0xFF0E),
    ("src/\u2024\u2024/auth.py", "\u2024\u2024", "'..'", 0x2024),
    ("src/\u2025/auth.py", "\u2025", "'..'", 0x2025),  # two dot leader: one character
    ("src/.\uff0e/auth.py", ".\uff0e", "'..'", 0xFF0E),
    ("src/\u2024", "\u2024", "'.'", 0x2024),
    ("src/\u2026/", "\u2026", "'...'", 0x2026),
    ("src/\ufe52\ufe52/a", "\ufe52\ufe52", "'..'", 0xFE52),
]
DOTTED_IDS = [ascii(bad)[1:-1] for bad, _, _, _ in DOTTED]
# Like them but no look-alike of a separator or of a segment of dots: each still a name.
LOOK_BUT_FINE = [
    "src/auth\uff0epy",  # a fullwidth full stop inside a segment: a letter of the name
    "src/\uff0e\uff0ehidden",
    "\u30ce\u30fc\u30c8/\u30d5\u30a1\u30a4\u30eb.txt",  # katakana NO resembles '/': a letter
    "a\u2260b",  # not-equal: composed, drawn with its stroke, not a separator
    "\ufb01le",  # the ligature fi: NFC keeps it (NFKC would fold it into 'fi')
    "src/...",
]


@pytest.mark.parametrize("slash", SLASHES, ids=SLASH_IDS)
def test_a_look_alike_separator_cannot_slip_past_a_directory_lease(
    api_a: Api, api_b: Api, slash: int
) -> None:
    """The attack: A holds `src/`; B asks for `src<look-alike>auth.py`, which no lease on `src/`
    covers (it is one segment), and was granted it beside A's lease."""
    held = api_a.post("/leases/acquire", {"resource": "src/", "ttl_s": 30, "process_id": "a:1"})
    assert held.status_code == 201, held.content
    before = unwritten()
    name = f"src{chr(slash)}auth.py"
    body = {"resource": name, "ttl_s": 30, "process_id": "b:1"}
    assert not accepted(hot.acquire, body)  # the hot path refuses it too: never a grant
    with statements() as ran:
        error = error_of(api_b.post("/leases/acquire", body), 400, "validation_error")
    assert ran.call_count == 0
    assert f"U+{slash:04X} ({unicodedata.name(chr(slash)).lower()})" in error["message"]
    assert "looks like the separator '/' but separates nothing" in error["message"]
    assert error["message"].startswith(f"resource {name!r} holds "), error["message"]
    assert error["fields"] == {"resource": [error["message"]]}
    assert unwritten() == before
    assert list(Lease.objects.values_list("resource", flat=True)) == ["src/"]
    # Nor as a prefix of the lease list: no name holds it.
    error_of(api_a.get("/leases", {"prefix": f"src{chr(slash)}"}), 400, "validation_error")


@pytest.mark.parametrize(("bad", "segment", "reads", "look"), DOTTED, ids=DOTTED_IDS)
def test_a_segment_of_look_alike_dots_is_refused(
    api_a: Api, bad: str, segment: str, reads: str, look: int
) -> None:
    before = unwritten()
    body = {"resource": bad, "ttl_s": 30, "process_id": "a:1"}
    assert not accepted(hot.acquire, body)
    with statements() as ran:
        error = error_of(api_a.post("/leases/acquire", body), 400, "validation_error")
    assert ran.call_count == 0
    assert f"has a segment {segment!r} that reads as {reads}" in error["message"], error
    assert f"U+{look:04X}" in error["message"], error["message"]
    assert unwritten() == before


@pytest.mark.parametrize("good", LOOK_BUT_FINE, ids=[ascii(g)[1:24] for g in LOOK_BUT_FINE])
def test_what_only_resembles_a_separator_is_still_a_name(api_a: Api, good: str) -> None:
    granted = api_a.post("/leases/acquire", {"resource": good, "ttl_s": 30, "process_id": "p"})
    assert granted.status_code == 201, granted.content
    assert granted.json()["resource"] == good


def test_every_call_that_takes_a_name_refuses_a_look_alike_separator(api_a: Api, boss: Api) -> None:
    """One rule for every entry point that takes a resource name: each call is a 400
    `validation_error` that names the character, and none writes anything but its refusal."""
    name = "src\uff0fauth.py"
    held = api_a.post("/leases/acquire", {"resource": "src/", "ttl_s": 30, "process_id": "a:1"})
    assert held.status_code == 201, held.content
    before = unwritten()
    calls: list[tuple[Api, str, str, Any]] = [
        (api_a, "post", "/leases/acquire", {"resource": name, "ttl_s": 30, "process_id": "a:1"}),
        (api_a, "post", "/leases/renew", {"resource": name, "fence": 1, "process_id": "a:1"}),
        (api_a, "post", "/leases/release", {"resource": name, "fence": 1}),
        (api_a, "post", "/leases/check", {"resource": name, "fence": 1}),
        (
            api_a,
            "post",
            "/leases/renew-all",
            {"process_id": "a:1", "held": [{"resource": name, "fence": 1}]},
        ),
        (api_a, "post", "/leases/handoff", {"resource": name, "reason": "mine now"}),
        (boss, "post", "/pools", {"name": "ports\uff0f1", "members": ["a", "b"]}),
        (boss, "post", "/pools", {"name": "ports", "members": ["a\u2215b"]}),
        (api_a, "post", "/fences/verify", {"fences": [f"{name}@1"]}),
        (api_a, "post", "/fences/verify", {"fences": ["src/@1"], "paths": [name]}),
        (
            api_a,
            "post",
            "/fences/receipts",
            {"repository": "acme/app", "commits": [{"sha": "a" * 40, "paths": [name]}]},
        ),
        (
            api_a,
            "post",
            "/fences/receipts",
            {"repository": "acme/app", "commits": [{"sha": "b" * 40, "fences": [f"{name}@1"]}]},
        ),
        (api_a, "get", "/leases", {"covering": name}),
    ]
    for api, method, path, body in calls:
        answer = api.post(path, body) if method == "post" else api.get(path, body)
        error = error_of(answer, 400, "validation_error")
        assert "U+FF0F" in error["message"] or "U+2215" in error["message"], (path, error)
    assert unwritten() == before


def test_a_harness_hook_write_of_a_look_alike_path_is_denied(api_a: Api, api_b: Api) -> None:
    """The harness's way in: session A holds `src/`; session B's write of `src／auth.py` (a
    file of that name, in the repository's top level) was granted its own lease beside it."""
    from tests.harnesses.events import REPO, answer, event, hook

    def write(api: Api, path: str, session: str) -> Any:
        body = event("claude-code", "pre_tool_use_write", **{"tool_input.file_path": path})
        body["session_id"] = session
        return answer(hook(api, "claude-code", body, repository=REPO))

    assert write(api_a, f"{REPO}/src/app.py", "aaa") is None
    api_a.post(
        "/leases/acquire", {"resource": "src/", "ttl_s": 60, "process_id": "claude-code:aaa"}
    )
    said = write(api_b, f"{REPO}/src\uff0fauth.py", "bbb")
    assert isinstance(said, dict), said
    out = said["hookSpecificOutput"]
    assert out["permissionDecision"] == "deny"
    assert "U+FF0F (fullwidth solidus)" in out["permissionDecisionReason"]
    assert not Lease.objects.filter(resource__contains="\uff0f").exists()


def test_the_rule_covers_every_character_nfkc_folds_into_a_separator_or_dots() -> None:
    """Rule 7 names its characters itself (NFKC is not the normal form): every character whose
    compatibility form holds a '/' is refused anywhere, and every one that folds into dots is
    refused as a segment of its own, over the whole of this Python's Unicode."""
    for code in range(0x80, 0x110000):
        c = chr(code)
        if unicodedata.category(c) in ("Cs", "Cn") or not unicodedata.is_normalized("NFC", c):
            continue
        folded = unicodedata.normalize("NFKC", c)
        if folded == c:
            continue
        if "/" in folded:
            assert not names.is_canonical(f"a{c}b"), f"U+{code:04X}"
        elif set(folded) == {"."}:
            assert not names.is_canonical(f"a/{c}/b"), f"U+{code:04X}"
            assert names.is_canonical(f"a/x{c}/b"), f"U+{code:04X}"  # inside a word: a letter
