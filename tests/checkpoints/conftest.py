"""The lane probe's world (tests/lanes/conftest.py), grown here by a checkpoint of another
lane's hand."""

from tests.lanes.conftest import world  # noqa: F401
