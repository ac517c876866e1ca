"""The API's callers (tests/api/conftest.py) for the schedules' tests."""

from tests.api.conftest import anonymous, api_outsider, boss  # noqa: F401
