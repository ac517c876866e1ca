"""The API tests' callers (a supervisor, two hands, an outsider), shared here."""

from tests.api.conftest import anonymous, api_a, api_b, api_outsider, boss, run  # noqa: F401
