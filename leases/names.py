"""A resource's name: what makes one canonical, defined once (`resource_problem`).

A name is opaque, never a path on any disk, but it reads as `/`-separated segments (a later
issue makes them a tree, where a trailing `/` names a directory), and two spellings that look
alike must never be two resources. So a canonical name is:

1. 1 to 512 characters;
2. without control characters (Unicode category Cc: NUL, line breaks, tabs, C1), format
   characters (Cf: bidirectional controls U+202A-U+202E and U+2066-U+2069, the marks
   U+200E/U+200F, zero-width U+200B-U+200D, U+FEFF), lone surrogates (Cs), line and paragraph
   separators (Zl, Zp), or any other invisible character (Unicode's default-ignorable code
   points outside those categories: the combining grapheme joiner, variation selectors, the
   Hangul fillers), anywhere;
3. in Unicode normal form C (NFC), so `é` is spelled one way;
4. without leading or trailing whitespace;
5. without empty segments (`a//b`, and so no leading `/`), `.` or `..` segments; a single
   trailing `/` is allowed (`src/auth/`);
6. at most 32 segments (`MAX_SEGMENTS`);
7. without look-alikes of the two characters that give a name its shape (issue 33, item 8):
   no character drawn as a solidus (`_drawn_as`: U+FF0F fullwidth solidus, U+2215 division
   slash, U+2044 fraction slash, U+29F8 big solidus, ...), anywhere, since `src／auth.py` is
   one segment that no lease on `src/` covers; and no segment of dots spelled with a character
   drawn as a full stop (U+FF0E fullwidth full stop, U+2024 one dot leader, U+2025 two dot
   leader, ...), since `．．` reads as `..`.

Rule 7 refuses, it does not fold: `src／auth.py` and `src/auth.py` are two files on a disk, and
a name folded into another file's would lease the wrong one. The normal form stays NFC, not
NFKC: NFKC would also fold what file names keep apart (the ligature `ﬁ`, full-width letters,
superscripts), and leaves U+2044, U+2215 and U+29F8 as they are, so rule 7 names its characters
itself (`_drawn_as`: NFKC's `/` and `.` folds, and Unicode's confusables of `/` and `.` that
no decomposition reaches; letters that spell words, such as KATAKANA LETTER NO, are left out).

The service (`leases.services.validate_resource`), and through it the DRF views, and the hot
path (`leasing.hot`) all ask `resource_problem`; a prefix filter asks `prefix_problem`, which
refuses only what no canonical name can hold anywhere (rule 2, rule 7's solidus look-alikes,
and the length).
"""

from __future__ import annotations

import functools
import re
import unicodedata

from apikit.errors import ValidationFailed

MAX_RESOURCE_LENGTH = 512
# A grant locks each node on its name's line (leases.tree.lock_tree): the depth bounds how many
# locks one call may hold, so that a flood of deep names cannot fill the database's lock table.
MAX_SEGMENTS = 32
# The top of the pools' members (`pool/<pool>/<member>`), taken only through their pool.
POOL_TOP = "pool"
# Categories no canonical name holds anywhere (rule 2).
FORBIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
_KINDS = {
    "Cc": "a control character",
    "Cf": "an invisible format character",
    "Cs": "a lone surrogate",
    "Zl": "a line separator",
    "Zp": "a paragraph separator",
}
# The default-ignorable code points (DerivedCoreProperties.txt) of no category above: drawn as
# nothing, like a format character, but marks, letters or unassigned, so rule 2 names them.
_INVISIBLE = (
    (0x034F, 0x034F),
    (0x115F, 0x1160),
    (0x17B4, 0x17B5),
    (0x180B, 0x180D),
    (0x180F, 0x180F),
    (0x2065, 0x2065),
    (0x3164, 0x3164),
    (0xFE00, 0xFE0F),
    (0xFFA0, 0xFFA0),
    (0xFFF0, 0xFFF8),
    (0xE0000, 0xE0FFF),
)
_INVISIBLE_KIND = "an invisible character"
# Rule 7: characters drawn as a solidus or a full stop that no compatibility decomposition (NFKC)
# folds into one: Unicode's confusables of `/` and `.` (confusables.txt), less the letters that
# spell words (KATAKANA LETTER NO, CJK ideograph 4E3F, COPTIC CAPITAL LETTER OLD COPTIC ESH).
_SLASHES = frozenset(
    map(
        chr,
        (
            0x0337,  # combining short solidus overlay
            0x0338,  # combining long solidus overlay
            0x1735,  # Philippine single punctuation
            0x2041,  # caret insertion point
            0x2044,  # fraction slash
            0x2215,  # division slash
            0x2571,  # box drawings light diagonal upper right to lower left
            0x27CB,  # mathematical rising diagonal
            0x29F6,  # solidus with overbar
            0x29F8,  # big solidus
            0x2AFB,  # triple solidus binary relation
            0x2AFD,  # double solidus operator
            0x2F03,  # Kangxi radical slash
            0x3033,  # vertical kana repeat mark upper half
            0x31D3,  # CJK stroke sp
            0x1D23A,  # Greek instrumental notation symbol-47
        ),
    )
)
_DOTS = frozenset(
    map(
        chr,
        (
            0x0701,  # Syriac supralinear full stop
            0x0702,  # Syriac sublinear full stop
            0xA60E,  # Vai full stop
            0x10A50,  # Kharoshthi punctuation dot
            0x1D16D,  # musical symbol combining augmentation dot
        ),
    )
)
_SHOWN = 60  # characters of a name repeated in a message
# Of ASCII, only the controls are forbidden (and ASCII is always NFC): most names are ASCII, and
# the hot path asks on every acquire and renew.
_ASCII_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _is_forbidden(c: str) -> bool:
    if unicodedata.category(c) in FORBIDDEN_CATEGORIES:
        return True
    code = ord(c)
    return any(low <= code <= high for low, high in _INVISIBLE)


def _kind(c: str) -> str:
    return _KINDS.get(unicodedata.category(c), _INVISIBLE_KIND)


def _forbidden(name: str) -> str | None:
    """The first character no canonical name may hold, or None."""
    if name.isascii():
        found = _ASCII_CONTROL.search(name)
        return found.group() if found else None
    return next((c for c in name if _is_forbidden(c)), None)


@functools.cache
def _drawn_as(c: str) -> str:
    """What a non-ASCII character is drawn as, of the two characters that give a name its shape
    (rule 7): `/` for a solidus look-alike, the dots it reads as (`.`, `..` for U+2025) for a
    full-stop look-alike, else ''. (A cache of the characters met: few, since most names are
    ASCII and never ask.)"""
    if c in _SLASHES:
        return "/"
    if c in _DOTS:
        return "."
    folded = unicodedata.normalize("NFKC", c)
    if folded == c:
        return ""
    if "/" in folded:  # U+FF0F fullwidth solidus; also U+2105 care of, drawn `c/o`
        return "/"
    return folded if folded.strip(".") == "" else ""  # U+FF0E, U+2024, U+2025, U+2026, ...


def _slash(name: str) -> str | None:
    """The first character of a non-ASCII `name` drawn as a solidus (rule 7), or None."""
    return next((c for c in name if not c.isascii() and _drawn_as(c) == "/"), None)


def _dotted(segments: list[str]) -> str | None:
    """The first segment made only of dots of which one is a look-alike (rule 7), or None."""
    for segment in segments:
        if segment.isascii() or not segment:
            continue
        if all(c == "." or (not c.isascii() and _drawn_as(c).startswith(".")) for c in segment):
            return segment
    return None


def _named(c: str) -> str:
    """`U+FF0F (fullwidth solidus)`: a character as a message names it."""
    named = unicodedata.name(c, "").lower()
    return f"U+{ord(c):04X}" + (f" ({named})" if named else "")


def _shown(name: str) -> str:
    """The name as a message quotes it: escaped (repr shows every invisible character as an
    escape), and cut short."""
    return repr(name) if len(name) <= _SHOWN else repr(name[:_SHOWN]) + "..."


def _segments(name: str) -> list[str]:
    """The `/`-separated segments, a single trailing `/` (a directory) not counted."""
    return (name[:-1] if name.endswith("/") else name).split("/")


def _broken(name: str) -> str | None:
    """The first rule `name` breaks (a short code), or None if it is canonical."""
    if not name:
        return "empty"
    if len(name) > MAX_RESOURCE_LENGTH:
        return "long"
    if _forbidden(name) is not None:
        return "character"
    if not name.isascii() and not unicodedata.is_normalized("NFC", name):
        return "nfc"
    if not name.isascii() and _slash(name) is not None:
        return "slash"
    if name != name.strip():
        return "whitespace"
    segments = _segments(name)
    if segments[0] == "":
        return "leading /"
    if "" in segments:
        return "empty segment"
    if ".." in segments:
        return ".."
    if "." in segments:
        return "."
    if not name.isascii() and _dotted(segments) is not None:
        return "dots"
    if len(segments) > MAX_SEGMENTS:
        return "deep"
    return None


def _tidied(name: str) -> str | None:
    """The canonical name a client most likely meant, or None when there is no safe guess (a
    `..` segment: the name is not a path to resolve)."""
    for _ in range(3):  # each round can only shorten the name; two always settle it
        kept = "".join(c for c in name if not _is_forbidden(c))
        kept = unicodedata.normalize("NFC", kept).strip()
        segments = _segments(kept)
        if ".." in segments:
            return None
        tidy = "/".join(s for s in segments if s not in ("", "."))
        if tidy and kept.endswith("/"):
            tidy += "/"
        if not tidy or _broken(tidy) is None:
            break
        name = tidy
    return tidy if tidy and _broken(tidy) is None else None


def _fix(name: str, fallback: str) -> str:
    tidy = _tidied(name)
    return f"send {_shown(tidy)}" if tidy is not None else fallback


def resource_problem(name: str, *, field: str = "resource") -> str | None:
    """What is wrong with `name` as a resource name and how to fix it, or None if canonical:
    the first of the module's rules that it breaks, said in words."""
    broken = _broken(name)
    if broken is None:
        return None
    shown = f"{field} {_shown(name)}"
    if broken == "empty":
        return f"{field} must be a non-empty string"
    if broken == "long":
        return f"{field} is longer than {MAX_RESOURCE_LENGTH} characters ({len(name)})"
    if broken == "character":
        bad = _forbidden(name)
        assert bad is not None
        named = unicodedata.name(bad, "").lower()
        what = _kind(bad)
        what += f" ({named})" if named and named not in what else ""
        return f"{shown} holds {what} at U+{ord(bad):04X}; " + _fix(name, "remove it")
    if broken == "nfc":
        normal = unicodedata.normalize("NFC", name)
        return f"{field} {ascii(name)} is not in Unicode normal form C (NFC); " + _fix(
            name, f"send it as {ascii(normal)}"
        )
    if broken == "slash":
        bad = _slash(name)
        assert bad is not None
        return (
            f"{shown} holds {_named(bad)}, which looks like the separator '/' but separates "
            "nothing, so no lease on the directory it seems to be in would cover it; write '/' "
            "where a separator is meant, else name it without that character"
        )
    if broken == "dots":
        dots = _dotted(_segments(name))
        assert dots is not None
        look = next(c for c in dots if c != ".")
        reads = "".join("." if c == "." else _drawn_as(c) for c in dots)
        return (
            f"{shown} has a segment {dots!r} that reads as {reads!r}, spelled with "
            f"{_named(look)}: a segment of dots is written with '.' only, and a resource name "
            "is not a path to resolve; name it without that segment"
        )
    if broken == "whitespace":
        return f"{shown} has leading or trailing whitespace; " + _fix(name, "remove it")
    if broken == "leading /":
        return f"{shown} starts with '/' (an empty first segment); " + _fix(
            name, "remove the leading '/'"
        )
    if broken == "empty segment":
        return f"{shown} has an empty segment ('//'); " + _fix(name, "remove the extra '/'")
    if broken == "deep":
        return (
            f"{shown} has {len(_segments(name))} segments; a name has at most {MAX_SEGMENTS} "
            "(lease a directory higher up instead)"
        )
    if broken == "..":
        return (
            f"{shown} has a '..' segment: a resource name is not a path to resolve; "
            "name it without '.' or '..' segments"
        )
    return f"{shown} has a '.' segment; " + _fix(name, "remove it")


def is_canonical(name: str) -> bool:
    return _broken(name) is None


def validate_resource(name: object, *, field: str = "resource") -> str:
    """`name` if it is a canonical resource name; else `validation_error` naming `field`, whose
    message says what is wrong and how to fix it."""
    if not isinstance(name, str) or not name:
        raise ValidationFailed(
            f"{field} must be a non-empty string", fields={field: ["This field is required."]}
        )
    problem = resource_problem(name, field=field)
    if problem is not None:
        raise ValidationFailed(problem, fields={field: [problem]})
    return name


def prefix_problem(prefix: str, *, field: str = "prefix") -> str | None:
    """What makes `prefix` match no canonical name whatever follows it, of what can be told
    from a prefix alone: too long, or a character no canonical name holds (rule 2). Anything
    else may begin a canonical name (a prefix need not end at a segment, nor be NFC)."""
    if len(prefix) > MAX_RESOURCE_LENGTH:
        return f"{field} is longer than {MAX_RESOURCE_LENGTH} characters ({len(prefix)})"
    bad = _forbidden(prefix)
    if bad is not None:
        return (
            f"{field} {_shown(prefix)} holds {_kind(bad)} at "
            f"U+{ord(bad):04X}, which no resource name holds; remove it"
        )
    slash = _slash(prefix) if not prefix.isascii() else None
    if slash is not None:
        return (
            f"{field} {_shown(prefix)} holds {_named(slash)}, which looks like '/' and no "
            "resource name holds; write '/' instead"
        )
    return None


def validate_prefix(prefix: object, *, field: str = "prefix") -> str:
    """A resource-prefix filter, or `validation_error` naming `field`."""
    if not isinstance(prefix, str):
        raise ValidationFailed(f"{field} must be a string", fields={field: ["A string."]})
    problem = prefix_problem(prefix, field=field)
    if problem is not None:
        raise ValidationFailed(problem, fields={field: [problem]})
    return prefix


# --- The tree ---------------------------------------------------------------------------------
# A name is a node of a tree: `src/auth/` and `src/auth` are one node (the trailing `/` only says
# it is a directory), whose ancestors are `src`, and whose descendants are every name that starts
# with `src/auth/`. Leases conflict along the tree (leases.engine); these are its only definitions.


def node_of(name: str) -> str:
    """The tree node a name stands for: the name without its trailing `/`."""
    return name[:-1] if name.endswith("/") and len(name) > 1 else name


def ancestors_of(node: str) -> list[str]:
    """Every proper ancestor of `node`, nearest last: `a/b/c` -> [`a`, `a/b`]."""
    parts = node.split("/")
    return ["/".join(parts[:i]) for i in range(1, len(parts))]


def top_of(node: str) -> str:
    """The first segment: every node that can conflict with `node` shares it."""
    return node.split("/", 1)[0]


def descendants_range(node: str) -> tuple[str, str]:
    """[low, high): every descendant of `node`, and nothing else, in code point order (`0` is
    the character after `/`): `a/b` -> (`a/b/`, `a/b0`)."""
    return node + "/", node + "0"


def is_within(node: str, other: str) -> bool:
    """Whether `node` is `other` or below it."""
    return node == other or node.startswith(other + "/")


def overlaps(node: str, other: str) -> bool:
    """Whether two nodes are on one line of the tree (the same, or one above the other): the
    Python form of the engine's conflict condition."""
    return is_within(node, other) or is_within(other, node)
