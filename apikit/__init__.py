"""The API's shared machinery, used by every app's endpoints and importing none of them: the
error classes and their uniform body (`errors`, `api`), the context of the call being served
(`context`), request ids, body limits, pagination and the OpenAPI error answers (`api`), the
per-key rate limit (`ratelimit`) and its Redis cache backend (`cache`)."""
