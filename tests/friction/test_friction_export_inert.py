"""The Markdown export is pasted into issue trackers, which render it (issue 33, item 9b): what a
hand wrote must arrive there as text. Links, images, autolinks, HTML, @mentions, #references
and Markdown's own syntax in a report were passed through: a report could show a disguised
link, load a tracking image in every reader's browser, ping a team, or forge table rows. Each
is rendered inert here by a CommonMark renderer with GitHub's tables and strikethrough
(markdown-it-py), and what trackers find in the rendered text (mentions, references, bare links,
e-mail addresses) is looked for in that text, as they look for it."""

from __future__ import annotations

import html
import re
from typing import Any

import pytest
from markdown_it import MarkdownIt

from tests.support.api import Api

pytestmark = [pytest.mark.hostile, pytest.mark.django_db]

HOSTILE = (
    "[click me](https://evil.example/phish) ![pixel](https://evil.example/t.gif) "
    "[ref][1] [1]: https://evil.example/ref <https://evil.example/auto> "
    "https://evil.example/bare www.evil.example WWW.EVIL.EXAMPLE ftp://evil.example/x "
    "mailto:ops@evil.example boss@example.com @octocat @acme/security-team #123 "
    "<img src=x onerror=alert(1)> <script>alert(1)</script> &lt;b&gt; &#64;entity "
    "**bold** __strong__ _em_ *em* ~~gone~~ `code` ``two`` \\`escaped\\` "
    "| extra | cells\n| forged | row |\n\n# heading\n> quote"
)


def rendered(markdown: str) -> str:
    return MarkdownIt("commonmark").enable(["table", "strikethrough"]).render(markdown)


def shown_text(page: str) -> str:
    """What a reader sees (and a tracker's text filters search): the text of the HTML."""
    return html.unescape(re.sub(r"<[^>]+>", " ", page))


def assert_inert(markdown: str, *, rows: int, ours: int) -> str:
    page = rendered(markdown)
    for tag in ("<a ", "<img", "<em>", "<strong>", "<s>", "<del>", "<script", "<h1", "<blockquote"):
        assert tag not in page, (tag, page)
    assert page.count("<code>") == ours, page  # only the refused calls' codes, ours
    assert page.count("<tr>") == 1 + rows, page  # the header and one row per report
    text = shown_text(page)
    assert not re.search(r"@[A-Za-z0-9]", text), text  # a mention, an e-mail address
    assert not re.search(r"#[0-9]", text), text  # a reference
    assert "://" not in text and not re.search(r"(?i)www\.", text), text  # a bare link
    return text


def test_hostile_text_in_a_report_is_exported_as_text(api_a: Api, boss: Api) -> None:
    refused = api_a.post("/runs/999999/claim", {"process_id": "x:1"})
    assert refused.status_code == 404
    filed = api_a.post(
        "/friction",
        {
            "what": HOSTILE,
            "instead": "asked @octocat at https://evil.example/x",
            "minutes": 3,
            "refusals": [refused["X-Request-ID"]],
        },
    )
    assert filed.status_code == 201, filed.content
    markdown = boss.get("/friction/export", {"format": "markdown"}).content.decode()
    text = assert_inert(markdown, rows=1, ours=1)
    # And it still reads as written (the zero-width spaces aside, whitespace made one line).
    seen = " ".join(text.replace("\u200b", "").split())
    for said in (
        "[click me](https://evil.example/phish)",
        "![pixel](https://evil.example/t.gif)",
        "<https://evil.example/auto>",
        "www.evil.example",
        "boss@example.com @octocat @acme/security-team #123",
        "<img src=x onerror=alert(1)> <script>alert(1)</script> &lt;b&gt; &#64;entity",
        "**bold** __strong__ _em_ *em* ~~gone~~ `code` ``two`` \\`escaped\\`",
        "| extra | cells | forged | row | # heading > quote",
        "asked @octocat at https://evil.example/x",
    ):
        assert said in seen, (said, seen)


def test_the_dashboards_download_is_inert_too(
    workspace_admin_client: Any, api_a: Api, workspace: Any
) -> None:
    filed = api_a.post("/friction", {"what": HOSTILE, "minutes": 1})
    assert filed.status_code == 201, filed.content
    markdown = workspace_admin_client.get("/friction/export.md").content.decode()
    assert_inert(markdown, rows=1, ours=0)
