"""SECRET_KEY: the environment's, or on the embedded default one minted once and kept in VAR_DIR.

Django signs sessions, CSRF tokens and password-reset links with SECRET_KEY, so a key anyone can
read (one written in the repository) lets anyone forge a login. The rules, in order:

1. `SECRET_KEY` set: used, unless it is the development key earlier versions shipped as their
   default (published in this repository's history: never a secret), which is refused; and
   with DEBUG off, unless it is weak (`weakness`: shorter than `MIN_LENGTH`, of fewer than
   `MIN_DISTINCT` different characters, a shorter string repeated, or Django's
   `django-insecure-` placeholder), which is refused too: `SECRET_KEY=x` signed every session
   of a production install.
2. Not set, on the embedded default (no DATABASE_URL: the database server lives under VAR_DIR)
   and without `GC_REQUIRE_SECRET_KEY`: a random key minted the first time and kept in
   `VAR_DIR/secret_key` (mode 0600). That server is one machine's, so every process that can
   reach the database also sees VAR_DIR; processes starting at once agree on one key
   (`persisted_key`).
3. Otherwise (a DATABASE_URL: production, perhaps several machines, each of which would mint a
   key of its own and refuse the others' sessions): refused, with how to set one.
"""

from __future__ import annotations

import os
import secrets
import tempfile
import time
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

KEY_FILE = "secret_key"
# The default of earlier versions: refused wherever it is given.
PUBLISHED_DEV_KEY = "embedded-default-insecure-key-change-me-in-production-000000000"
HOW_TO_SET = (
    'set SECRET_KEY to a long random value, e.g. the output of python3 -c "import secrets; '
    'print(secrets.token_urlsafe(50))" (docs/deploy.md, "SECRET_KEY")'
)
# A given key's floor with DEBUG off (`weakness`): a check of what a person types ("x",
# "changeme" four times, 50 x's), never a measure of secrecy. 32 characters and 8 different ones
# pass every generated key (32 hex digits hold fewer than 8 different ones about once in 10^8).
MIN_LENGTH = 32
MIN_DISTINCT = 8
# What `django-admin startproject` writes into a settings file, which is then published with it.
DJANGO_PLACEHOLDER = "django-insecure-"
# A process that finds the file created but not yet written (only without hard links) waits
# this long for the writer.
_SETTLE_S = 2.0


def weakness(key: str) -> str | None:
    """Why `key` is too weak to sign with (the clause that ends "SECRET_KEY ..."), or None."""
    if key.startswith(DJANGO_PLACEHOLDER):
        return (
            f"starts with {DJANGO_PLACEHOLDER!r}, the mark of a key django-admin wrote into a "
            "settings file"
        )
    if len(key) < MIN_LENGTH:
        return f"is {len(key)} characters long; a key has at least {MIN_LENGTH}"
    distinct = len(set(key))
    if distinct < MIN_DISTINCT:
        return f"is made of {distinct} different characters; a key has at least {MIN_DISTINCT}"
    if key in (key + key)[1:-1]:  # a string is a repetition iff it occurs inside itself twice
        return "repeats a shorter string"
    return None


def secret_key(
    *, given: str, embedded: bool, require: bool, var_dir: Path, debug: bool = False
) -> str:
    """The key to run with (see the module's docstring), or ImproperlyConfigured saying why."""
    given = given.strip()
    if given == PUBLISHED_DEV_KEY:
        raise ImproperlyConfigured(
            "SECRET_KEY is the development key that earlier versions published as their "
            f"default, so it is no secret: {HOW_TO_SET}, or unset it on the embedded default"
        )
    weak = weakness(given) if given and not debug else None
    if weak is not None:
        # The key itself is never repeated: a log of the refusal must not publish it.
        raise ImproperlyConfigured(
            f"SECRET_KEY {weak}, too weak to sign sessions with while DEBUG is off: {HOW_TO_SET}"
        )
    if given:
        return given
    if require:
        raise ImproperlyConfigured(
            f"SECRET_KEY is not set and GC_REQUIRE_SECRET_KEY is on: {HOW_TO_SET}"
        )
    if not embedded:
        raise ImproperlyConfigured(
            "SECRET_KEY is not set and DATABASE_URL is (a production database, perhaps served "
            f"by several machines, which must share one key): {HOW_TO_SET}"
        )
    try:
        return persisted_key(var_dir)
    except OSError as error:
        raise ImproperlyConfigured(
            f"SECRET_KEY is not set and no key could be kept in {var_dir / KEY_FILE} "
            f"({error}): {HOW_TO_SET}, or make GC_VAR_DIR writable"
        ) from None


def persisted_key(var_dir: Path) -> str:
    """The key in `var_dir/secret_key`, minted first if there is none.

    1. Read the file; a key there is the answer.
    2. Otherwise write a new key to a private temporary file beside it (mkstemp: mode 0600) and
       hard-link it to the final name. The link is created whole or not at all, and fails when
       the name exists, so of several processes starting at once exactly one wins, and no reader
       ever sees a half-written key.
    3. Read the file again: every process answers with the winner's key.
    """
    path = var_dir / KEY_FILE
    key = _read(path)
    if key:
        return key
    var_dir.mkdir(parents=True, exist_ok=True)
    _mint(path)
    deadline = time.monotonic() + _SETTLE_S
    while not (key := _read(path)) and time.monotonic() < deadline:
        time.sleep(0.05)
    if not key:
        raise ImproperlyConfigured(f"{path} is empty: delete it and start again")
    return key


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="ascii").strip()
    except FileNotFoundError:
        return ""


def _mint(path: Path) -> None:
    key = secrets.token_urlsafe(50)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{KEY_FILE}.")
    try:
        with os.fdopen(fd, "w", encoding="ascii") as out:
            out.write(key + "\n")
            out.flush()
            os.fsync(out.fileno())
        try:
            os.link(temporary, path)
        except FileExistsError:
            pass  # another process won: its key is the one
        except OSError:
            # A filesystem without hard links: create the name exclusively and write it; a
            # process that loses reads it once written (`persisted_key` waits for that).
            try:
                descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:
                return
            with os.fdopen(descriptor, "w", encoding="ascii") as out:
                out.write(key + "\n")
    finally:
        os.unlink(temporary)
