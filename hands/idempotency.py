"""`Idempotency-Key` for the creating POSTs: a retry gets the first answer and creates nothing.

The first successful answer is stored with a hash of the request (method, path, body) under
(workspace, key prefix, idempotency key), in the same transaction as what it created. A repeat
with the same request replays it; the same idempotency key with another request is refused
(`idempotency_conflict`). Two concurrent first requests race on the unique constraint: the loser's
transaction, creation included, rolls back, and it replays the winner's answer.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from typing import Any

from django.db import IntegrityError, transaction
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.utils.encoders import JSONEncoder

from apikit.errors import GroundControlError, ValidationFailed
from hands.errors import IdempotencyConflict
from hands.models import HandKey, IdempotencyRecord
from leases.audit import record_refusal

HEADER = "Idempotency-Key"
REPLAYED_HEADER = "Idempotent-Replayed"
_VALID_KEY = re.compile(r"^[\x21-\x7e]{1,200}$")


def _request_hash(request: Request) -> str:
    body = json.dumps(request.data, sort_keys=True, separators=(",", ":"), cls=JSONEncoder)
    return hashlib.sha256(f"{request.method} {request.path}\n{body}".encode()).hexdigest()


def _replay(record: IdempotencyRecord, request: Request, body_hash: str) -> Response:
    if (record.method, record.path, record.body_hash) != (request.method, request.path, body_hash):
        raise IdempotencyConflict(
            f"{HEADER} {record.idempotency_key!r} was first used for another request "
            f"({record.method} {record.path}); use a new key for a new request",
            idempotency_key=record.idempotency_key,
        )
    return Response(record.response, status=record.status_code, headers={REPLAYED_HEADER: "true"})


def idempotent(
    request: Request,
    create: Callable[[], Response],
    *,
    stored: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
) -> Response:
    """Answer `create()` once per idempotency key; `stored` redacts what must not be kept
    (a key's secret is shown once and never stored, so its replay carries none)."""
    raw = request.headers.get(HEADER)
    if raw is None:
        return create()
    if not _VALID_KEY.match(raw):
        raise ValidationFailed(
            f"{HEADER} must be 1 to 200 printable characters without spaces",
            fields={HEADER: ["1 to 200 printable characters, no spaces."]},
        )
    key: HandKey = request.auth
    workspace_id = key.hand.workspace_id
    body_hash = _request_hash(request)
    lookup = {"workspace_id": workspace_id, "key_prefix": key.prefix, "idempotency_key": raw}
    existing = IdempotencyRecord.objects.filter(**lookup).first()
    if existing is not None:
        return _replay(existing, request, body_hash)
    try:
        with transaction.atomic():
            response = create()
            if 200 <= response.status_code < 300:
                data = json.loads(json.dumps(response.data, cls=JSONEncoder))
                IdempotencyRecord.objects.create(
                    **lookup,
                    method=request.method,
                    path=request.path,
                    body_hash=body_hash,
                    status_code=response.status_code,
                    response=stored(data) if stored else data,
                )
    except IntegrityError:
        winner = IdempotencyRecord.objects.filter(**lookup).first()
        if winner is None:
            raise
        return _replay(winner, request, body_hash)
    except GroundControlError as error:
        # The refusal the service wrote was rolled back with this transaction; write it again.
        if error.recorded:
            error.recorded = False
            record_refusal(error)
        raise
    return response
