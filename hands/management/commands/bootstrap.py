"""Create (idempotently) a workspace, its admin, and a supervisor hand with a key."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from hands.services import bootstrap


class Command(BaseCommand):
    help = (
        "Create a workspace, an admin user who is a member, and a supervisor hand with a key "
        "holding every scope. The key is printed once. With --member-of, the user is an admin "
        "of those workspaces too (created when missing)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--workspace", required=True)
        parser.add_argument("--username", required=True)
        parser.add_argument("--password", required=True)
        parser.add_argument("--new-key", action="store_true", help="mint a key even if one exists")
        parser.add_argument(
            "--member-of",
            action="append",
            default=[],
            metavar="WORKSPACE",
            help="another workspace the user is an admin of as well (repeatable; created when "
            "missing; no supervisor hand there)",
        )
        parser.add_argument("--json", action="store_true", help="print one JSON object")

    def handle(self, *args: Any, **options: Any) -> None:
        result = bootstrap(
            workspace_name=options["workspace"],
            username=options["username"],
            password=options["password"],
            new_key=options["new_key"],
            member_of=options["member_of"],
        )
        if options["json"]:
            self.stdout.write(json.dumps(result))
            return
        self.stdout.write(f"workspace:        {result['workspace']}")
        self.stdout.write(f"admin user:       {result['username']}")
        for other in result["member_of"]:
            self.stdout.write(f"also admin of:    {other}")
        self.stdout.write(f"supervisor hand:  {result['supervisor_hand']}")
        if result["supervisor_key"]:
            self.stdout.write(f"supervisor key:   {result['supervisor_key']}  (shown once)")
        else:
            self.stdout.write("supervisor key:   (already issued; pass --new-key for another)")
