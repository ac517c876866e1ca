from tests.support.live import gc  # noqa: F401 - the live server, for the command hooks
