"""`python -m groundcontrol_client` is `gctl`."""

from groundcontrol_client.cli import entry

entry()
