"""A supervisor's calls about people: hands (list, create, show, set capabilities) and their keys
(list, mint with scopes, a lane and an expiry, revoke). A key with the `hands` scope makes
them; `supervise` also reads hands. `Client` and `AsyncClient` both have them (`PeopleCalls`):

    boss.hand_create("builder", lane="docs", capabilities=["python"])
    issued = boss.key_mint("builder", scopes=["work", "leases"], lane="docs",
                           expires_in_s=86_400)
    issued.key      # gc_<prefix>_<secret>: in this answer only; the server keeps a hash
    boss.key_revoke(issued.prefix, reason="rotated")   # its next call is refused key_revoked

A key can grant only the scopes its issuer holds, and a lane-limited issuer only its lane
(`scope_denied` otherwise); a revoked key's tenures end in the revoking transaction. The
creating calls send an `Idempotency-Key`, so a retry whose first answer was lost creates
nothing twice; a minted key's replayed answer carries no secret (`key` None: the server never
stores it), so the way on is to revoke that key and mint another.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any
from urllib.parse import quote

from groundcontrol_client.core.sending import Sending, drop_none
from groundcontrol_client.core.steps import Steps, call
from groundcontrol_client.core.supervisor import idempotency_headers
from groundcontrol_client.core.when import relative
from groundcontrol_client.core.wire import Flag, OrDefault, Text, Time, WholeNumber, WireModel

KEY_TEXT_PREFIX = "gc_"


class HandRecord(WireModel, title="hand"):
    """One agent identity: its lane (None: any lane), whether it is the workspace's supervisor,
    and its capabilities (a run that needs a tag it lacks refuses its claim)."""

    id: WholeNumber
    name: Text
    lane: Text | None = None
    is_supervisor: Flag = False
    capabilities: OrDefault[list[str]] = []
    created_at: Time = None


class BoundTo(WireModel, title="key's tenure"):
    resource: Text
    fence: WholeNumber


class KeyRecord(WireModel, title="key"):
    """A key as the server describes it: never its secret."""

    prefix: Text
    hand: Text = ""
    scopes: OrDefault[list[str]] = []
    lane: Text | None = None  # the lane it is limited to (None: every lane)
    expires_at: Time = None
    created_at: Time = None
    last_used_at: Time = None
    revoked_at: Time = None
    revoke_reason: Text | None = None
    issued_by: Text | None = None  # the prefix of the key that minted it
    revoke_when_done: Flag = False
    bound_to: BoundTo | None = None


class IssuedKey(KeyRecord, title="minted key"):
    """A minted key: `key` is the whole key (gc_<prefix>_<secret>), in this answer only. None in
    a replay of a lost answer (the secret is never stored): revoke that key and mint another."""

    key: Text | None = None


def key_prefix(text: str) -> str:
    """A key's prefix from its prefix, `gc_<prefix>`, or the whole key `gc_<prefix>_<secret>`:
    whichever a supervisor pastes names the same key."""
    text = text.strip()
    if text.startswith(KEY_TEXT_PREFIX):
        return text[len(KEY_TEXT_PREFIX) :].partition("_")[0]
    return text


def hand_path(name: str, *rest: str) -> str:
    """`hands/<name>/...`, the name quoted as one path segment."""
    return "/".join([f"hands/{quote(name, safe='')}", *rest])


# --- sentences: how gctl says a hand and a key ------------------------------------------------


def describe_hand(hand: HandRecord) -> str:
    """e.g. "hand 'builder' (lane docs; capabilities python, gpu)"."""
    facts = [f"lane {hand.lane}" if hand.lane else "any lane"]
    if hand.is_supervisor:
        facts.append("the workspace's supervisor")
    facts.append(
        f"capabilities {', '.join(hand.capabilities)}" if hand.capabilities else "no capabilities"
    )
    return f"hand '{hand.name}' ({'; '.join(facts)})"


def describe_key(key: KeyRecord, now: datetime) -> str:
    """e.g. "key gc_ab12 of hand 'builder' (work, leases; lane docs; expires in 7 days), last
    used 3 minutes ago": what it is, then how it stands (last used, or revoked and why)."""
    text = _key_sentence(key, now)
    if key.revoked_at is not None:
        why = f": {key.revoke_reason}" if key.revoke_reason else ""
        return f"{text}, revoked {relative(key.revoked_at, now)}{why}"
    if key.last_used_at is not None:
        return f"{text}, last used {relative(key.last_used_at, now)}"
    return f"{text}, never used"


def _key_sentence(key: KeyRecord, now: datetime) -> str:
    """What a key is: its prefix, hand, scopes, lane, expiry and what it lives by."""
    facts = [", ".join(key.scopes) or "no scopes", f"lane {key.lane}" if key.lane else "any lane"]
    if key.expires_at is None:
        facts.append("no expiry")
    elif key.expires_at > now:
        facts.append(f"expires {relative(key.expires_at, now)}")
    else:
        facts.append(f"expired {relative(key.expires_at, now)}")
    if key.bound_to is not None:
        facts.append(f"lives by {key.bound_to.resource} at fence {key.bound_to.fence}")
    if key.revoke_when_done:
        facts.append("revoked when its work is done")
    return f"key {KEY_TEXT_PREFIX}{key.prefix} of hand '{key.hand}' ({'; '.join(facts)})"


def describe_issued(issued: IssuedKey, now: datetime) -> str:
    """The minted key in a sentence, and the key itself, said to be shown once."""
    text = _key_sentence(issued, now)
    if issued.key is None:
        return (
            f"{text}: its secret was in an earlier answer that was lost (the server keeps only a "
            f"hash); revoke it (gctl keys revoke {issued.prefix}) and mint another"
        )
    return f"{text} — shown once: {issued.key}"


def describe_revoked(key: KeyRecord) -> str:
    """e.g. "revoked key gc_ab12 of hand 'builder': its tenures end now"."""
    return (
        f"revoked key {KEY_TEXT_PREFIX}{key.prefix} of hand '{key.hand}': its next call is "
        "refused, and its tenures (and those of the keys it minted) end now"
    )


class PeopleCalls(Sending):
    """Hands and keys, as steps (`core.steps`); `Client` and `AsyncClient` have them."""

    # --- hands ----------------------------------------------------------------------------------

    @call
    def hands(self) -> Steps[list[HandRecord]]:
        """The workspace's hands (a lane-limited key: its lane's), newest first."""
        items = yield from self._list("hands")
        return [HandRecord.from_wire(item) for item in items]

    @call
    def hand(self, name: str) -> Steps[HandRecord]:
        return HandRecord.from_wire((yield from self._request("GET", hand_path(name))))

    @call
    def hand_create(
        self,
        name: str,
        *,
        lane: str | None = None,
        capabilities: Iterable[str] | None = None,
        idempotency_key: str | None = None,
    ) -> Steps[HandRecord]:
        """A hand (`lane`: the lane it works in). A hand that exists is answered as it is: only
        `hand_set_capabilities` changes its capabilities."""
        body = drop_none(
            {
                "name": name,
                "lane": lane,
                "capabilities": None if capabilities is None else list(capabilities),
            }
        )
        answer = yield from self._request(
            "POST", "hands", json=body, headers=idempotency_headers(idempotency_key)
        )
        return HandRecord.from_wire(answer)

    @call
    def hand_set_capabilities(self, name: str, capabilities: Iterable[str]) -> Steps[HandRecord]:
        """Replace the hand's capabilities (trimmed, lowercased, each kept once): its next claim
        is judged by them."""
        body = {"capabilities": list(capabilities)}
        return HandRecord.from_wire((yield from self._request("PATCH", hand_path(name), json=body)))

    # --- keys -----------------------------------------------------------------------------------

    @call
    def keys(self, hand: str) -> Steps[list[KeyRecord]]:
        """The hand's keys, revoked ones too, newest first (never their secrets)."""
        items = yield from self._list(hand_path(hand, "keys"))
        return [KeyRecord.from_wire(item) for item in items]

    @call
    def key_mint(
        self,
        hand: str,
        *,
        scopes: Iterable[str],
        lane: str | None = None,
        expires_in_s: float | None = None,
        revoke_when_done: bool = False,
        bound_to: Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
    ) -> Steps[IssuedKey]:
        """A new key for `hand` with `scopes` (only scopes this key holds), limited to `lane`'s
        runs if given, expiring `expires_in_s` from now if given; `bound_to` `{resource, fence?}`
        ties it to a tenure the hand holds (it is refused key_revoked once that ends). The key is
        `IssuedKey.key`, shown in this answer only."""
        body = drop_none(
            {
                "scopes": list(scopes),
                "lane": lane,
                "expires_in_s": expires_in_s,
                "revoke_when_done": True if revoke_when_done else None,
                "bound_to": dict(bound_to) if bound_to is not None else None,
            }
        )
        answer = yield from self._request(
            "POST",
            hand_path(hand, "keys"),
            json=body,
            headers=idempotency_headers(idempotency_key),
        )
        return IssuedKey.from_wire(answer)

    @call
    def key_revoke(self, prefix: str, *, reason: str = "") -> Steps[KeyRecord]:
        """Revoke now (by its prefix, `gc_<prefix>`, or the whole key): its next call is refused
        `key_revoked`, and every tenure taken with it, or with a key it minted, ends. Safe to
        repeat: a revoked key stays as it was revoked."""
        path = f"keys/{quote(key_prefix(prefix), safe='')}/revoke"
        answer = yield from self._request("POST", path, json={"reason": reason})
        return KeyRecord.from_wire(answer)
