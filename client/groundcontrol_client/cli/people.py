"""gctl's commands for hands and keys (a key with the `hands` scope; `supervise` also reads
hands): `gctl hands list|create|show|capabilities`, `gctl keys list|mint|revoke`. A minted key
is printed once, in the answer, and stored nowhere: not by the server (a hash only), not by
gctl."""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from typing import Any

from groundcontrol_client.cli.output import Result, UsageError
from groundcontrol_client.core.people import (
    describe_hand,
    describe_issued,
    describe_key,
    describe_revoked,
)
from groundcontrol_client.core.when import now_utc
from groundcontrol_client.http import Client

_DURATION = re.compile(r"([0-9]+(?:\.[0-9]+)?)\s*([smhdw]?)")
_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 7 * 86_400}


def duration_s(text: str) -> float:
    """ "7d", "12h", "30m", "90s", "2w", or a number of seconds: in seconds."""
    found = _DURATION.fullmatch(text.strip().lower())
    if found is None:
        raise UsageError(
            f"--expires-in must be a length like 7d, 12h, 30m or 90 (seconds), not {text!r}"
        )
    return float(found.group(1)) * _SECONDS[found.group(2)]


# --- hands ----------------------------------------------------------------------------------


def cmd_hands_list(client: Client, args: argparse.Namespace) -> Result:
    hands = client.hands()
    return [h.raw for h in hands], "\n".join(map(describe_hand, hands)) or "no hands"


def cmd_hands_create(client: Client, args: argparse.Namespace) -> Result:
    hand = client.hand_create(args.name, lane=args.lane, capabilities=args.capability or None)
    text = f"{describe_hand(hand)}; mint its key: gctl keys mint {hand.name} --scope work"
    return hand.raw, text


def cmd_hands_show(client: Client, args: argparse.Namespace) -> Result:
    hand = client.hand(args.name)
    return hand.raw, describe_hand(hand)


def cmd_hands_capabilities(client: Client, args: argparse.Namespace) -> Result:
    if not args.tags and not args.clear:
        raise UsageError(
            "name the capabilities (gctl hands capabilities NAME python gpu), or --clear"
        )
    if args.tags and args.clear:
        raise UsageError("give capabilities or --clear, not both")
    hand = client.hand_set_capabilities(args.name, args.tags)
    return hand.raw, f"{describe_hand(hand)}: its next claim is judged by these"


# --- keys -----------------------------------------------------------------------------------


def cmd_keys_list(client: Client, args: argparse.Namespace) -> Result:
    keys, now = client.keys(args.hand), now_utc()
    text = "\n".join(describe_key(key, now) for key in keys)
    return [key.raw for key in keys], text or f"hand '{args.hand}' has no keys"


def cmd_keys_mint(client: Client, args: argparse.Namespace) -> Result:
    issued = client.key_mint(
        args.hand,
        scopes=args.scope,
        lane=args.lane,
        expires_in_s=duration_s(args.expires_in) if args.expires_in else None,
        revoke_when_done=args.revoke_when_done,
    )
    return issued.raw, describe_issued(issued, now_utc())


def cmd_keys_revoke(client: Client, args: argparse.Namespace) -> Result:
    key = client.key_revoke(args.prefix, reason=args.reason or "")
    return key.raw, describe_revoked(key)


def noun(
    sub: Any, common: argparse.ArgumentParser, name: str, help_text: str
) -> Callable[..., argparse.ArgumentParser]:
    """`gctl NAME ACTION ...`: the noun's parser; the function that adds an action to it."""
    actions = sub.add_parser(name, help=help_text, description=help_text).add_subparsers(
        dest="action", required=True, title="actions", help="an action"
    )

    def add_action(
        action: str, handler: Callable[..., Any], action_help: str
    ) -> argparse.ArgumentParser:
        p = actions.add_parser(action, parents=[common], help=action_help, description=action_help)
        p.set_defaults(handler=handler)
        return p

    return add_action


def add_people_commands(sub: Any, common: argparse.ArgumentParser) -> None:
    hands = noun(sub, common, "hands", "hands: agent identities, each with its own keys")
    hands("list", cmd_hands_list, "the workspace's hands (a lane-limited key: its lane's)")
    p = hands("create", cmd_hands_create, "a hand (one that exists is answered as it is)")
    p.add_argument("name", help="the hand's name, e.g. builder")
    p.add_argument("--lane", help="the lane it works in (a lane's slug)")
    p.add_argument(
        "--capability",
        action="append",
        default=[],
        metavar="TAG",
        help="what it can do (python, gpu, ...): a run that needs a tag it lacks refuses its "
        "claim; repeatable",
    )
    p = hands("show", cmd_hands_show, "one hand: its lane and capabilities")
    p.add_argument("name", help="the hand's name")
    p = hands(
        "capabilities",
        cmd_hands_capabilities,
        "replace a hand's capabilities (its next claim is judged by them)",
    )
    p.add_argument("name", help="the hand's name")
    p.add_argument("tags", nargs="*", metavar="TAG", help="the capabilities, e.g. python gpu")
    p.add_argument("--clear", action="store_true", help="take every capability away")

    keys = noun(sub, common, "keys", "a hand's keys: list, mint (shown once), revoke")
    p = keys("list", cmd_keys_list, "a hand's keys, revoked ones too (never their secrets)")
    p.add_argument("hand", help="the hand's name")
    p = keys(
        "mint",
        cmd_keys_mint,
        "mint a key for a hand: printed once, here; the server keeps only its prefix and a hash",
    )
    p.add_argument("hand", help="the hand's name")
    p.add_argument(
        "--scope",
        action="append",
        required=True,
        metavar="SCOPE",
        help="a scope it grants (work, leases, plan, supervise, ...: only scopes your key "
        "holds; the server names them all if one is wrong); repeatable: --scope work --scope "
        "leases",
    )
    p.add_argument("--lane", help="limit it to this lane: it sees and claims only its runs")
    p.add_argument(
        "--expires-in",
        metavar="LENGTH",
        help="it expires this long from now: 7d, 12h, 30m, or seconds (at most 366 days)",
    )
    p.add_argument(
        "--revoke-when-done",
        action="store_true",
        help="revoke it once the hand's attempt has ended (finished, released or lost) and "
        "none is still open",
    )
    p = keys(
        "revoke",
        cmd_keys_revoke,
        "revoke a key now: its next call is refused and its tenures end",
    )
    p.add_argument("prefix", help="the key's prefix (gc_<prefix>, or the whole key)")
    p.add_argument("--reason", help="why (kept with the key and its event)")
