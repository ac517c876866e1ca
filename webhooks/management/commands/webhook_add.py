"""Register a webhook for a workspace's events; the signing secret is printed once."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from apikit.errors import GroundControlError
from webhooks.services import WEBHOOK_KINDS, webhook_create, workspace_named


class Command(BaseCommand):
    help = (
        "Register a URL that receives the workspace's events of the given kinds, signed with "
        "HMAC-SHA256 (header X-GroundControl-Signature). The secret is printed once."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--workspace", required=True)
        parser.add_argument("--url", required=True)
        parser.add_argument(
            "--kind",
            action="append",
            required=True,
            choices=WEBHOOK_KINDS,
            help="an event kind to deliver (repeat for several)",
        )
        parser.add_argument("--description", default="")
        parser.add_argument("--secret", help="use this secret instead of generating one")
        parser.add_argument("--actor", default="manage.py")
        parser.add_argument("--json", action="store_true", help="print one JSON object")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            issued = webhook_create(
                workspace=workspace_named(options["workspace"]),
                url=options["url"],
                kinds=options["kind"],
                actor=options["actor"],
                description=options["description"],
                secret=options["secret"],
            )
        except GroundControlError as error:
            raise CommandError(f"{error.code}: {error.message}") from error
        result = {
            "id": issued.webhook.pk,
            "workspace": options["workspace"],
            "url": issued.webhook.url,
            "kinds": issued.webhook.kinds,
            "secret": issued.secret,
        }
        if options["json"]:
            self.stdout.write(json.dumps(result))
            return
        self.stdout.write(f"webhook {result['id']}: {result['url']} ({', '.join(result['kinds'])})")
        self.stdout.write(f"signing secret:  {result['secret']}  (shown once)")
