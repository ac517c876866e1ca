"""CI's word on record: the attestations of the workspace, newest first (an `attest` or
`supervise` key; a lane-limited key: its lane's and the workspace's), all or one URL's. `Client`
and `AsyncClient` both have the call (`AttestationCalls`); an attestation is made with `attest`
(`core.calls`, an `attest` key), read here:

    for said in boss.attestations(url="https://github.com/acme/app/pull/9"):
        print(said.observed_at, said.hand, said.result, said.backs)
"""

from __future__ import annotations

from groundcontrol_client.core.errors import hand_called
from groundcontrol_client.core.grades import Attestation
from groundcontrol_client.core.records import RecordsCalls
from groundcontrol_client.core.sending import Sending, drop_none
from groundcontrol_client.core.steps import Steps, call
from groundcontrol_client.core.when import absolute

QUOTE = "'"
# How the server names the attester of a GitHub integration's attestation (it has no hand).
INTEGRATION_PREFIX = "github-integration-"


def describe_attestation(said: Attestation) -> str:
    """e.g. "2030-01-01 10:20:36 UTC: hand 'ci' (key gc_3f9a…) attested pass for
    https://…/pull/9 (pull_request), backing attempt 41; the workspace's evidence"."""
    when = absolute(said.observed_at) if said.observed_at is not None else "at an unknown time"
    if said.hand and said.hand.startswith(INTEGRATION_PREFIX):
        who = f"GitHub integration {said.hand.removeprefix(INTEGRATION_PREFIX)}"
    else:
        who = hand_called(said.hand, quote=QUOTE)
    if said.key_prefix:
        who += f" (key gc_{said.key_prefix})"
    kind = f" ({said.kind})" if said.kind else ""
    text = f"{when}: {who} attested {said.result} for {said.url}{kind}"
    if said.backs is not None:
        text += f", backing attempt {said.backs}"
    text += f"; lane {said.lane}'s evidence" if said.lane else "; the workspace's evidence"
    if said.note:
        text += f": {said.note}"
    return text


class AttestationCalls(Sending):
    """The attestations on record, as steps (`core.steps`); `Client` and `AsyncClient` have
    them."""

    # The newest N of a list endpoint, read as the record's reads are (one definition).
    _newest = RecordsCalls._newest

    @call
    def attestations(
        self, *, url: str | None = None, limit: int | None = None
    ) -> Steps[list[Attestation]]:
        """The attestations, newest first: of `url` only if given; `limit`: the newest so many
        (None: all). Each says who attested (`hand`, `key_prefix`), what (`result`, `kind`,
        `note`), when CI observed it (`observed_at`, the order of a URL's attestations), the
        `lane` whose evidence it grades (None: the workspace's) and the attempt it `backs`."""
        items = yield from self._newest("attestations", drop_none({"url": url}), limit)
        return [Attestation.from_wire(item) for item in items]
