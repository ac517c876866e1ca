"""Who is calling, by network address: the one definition of a request's client address.

The address is what the per-address limit on unauthenticated calls counts and what the refusal
record's counted aggregates are keyed by (`apikit.ratelimit`, `leases.audit`):

1. With `GC_TRUSTED_PROXY_HOPS=0` (the default) it is `REMOTE_ADDR`, the peer of the TCP
   connection; `X-Forwarded-For` is ignored, since any client can send one.
2. Behind N trusted proxies, each of which appends the address it saw to `X-Forwarded-For`
   (nginx: `proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for`), it is the N-th entry
   from the right: the one the outermost trusted proxy wrote. Entries further left are the
   client's own and never read. A header with fewer entries, or an entry that is not an address,
   falls back to `REMOTE_ADDR` (the proxy's address: such calls share one count, so a malformed
   header buys no fresh address). granian has no forwarded-address setting, hence this one.
3. The address is normalised (`[::1]:443` and `::1` are one caller), and an IPv6 address counts
   as its /64: a host is usually given a whole /64 and may call from any address in it.

Nothing here raises on a malformed header.
"""

from __future__ import annotations

import functools
import ipaddress

from django.conf import settings
from django.http import HttpRequest

UNKNOWN = "unknown"  # no usable peer address (a Unix socket, a test without one)
# Longer than any address with a port and brackets ("[ffff:...:ffff]:65535" is 47 characters):
# not parsed at all.
_MAX_TEXT = 64
IPV6_PREFIX = 64


def client_address(request: HttpRequest) -> str:
    """The caller's address as counted and recorded (see the module's docstring)."""
    meta = request.META
    hops = int(getattr(settings, "GC_TRUSTED_PROXY_HOPS", 0) or 0)
    if hops > 0:
        forwarded = meta.get("HTTP_X_FORWARDED_FOR")
        if isinstance(forwarded, str) and forwarded:
            # At most hops + 1 pieces: the entries the proxies wrote, and the rest unsplit.
            entries = forwarded.rsplit(",", hops)
            if len(entries) >= hops:
                found = normal_address(entries[-hops])
                if found is not None:
                    return found
    remote = meta.get("REMOTE_ADDR")
    return (normal_address(remote) if isinstance(remote, str) else None) or UNKNOWN


@functools.lru_cache(maxsize=4096)
def normal_address(text: str) -> str | None:
    """`text` as one caller's address (an IPv6 one as its /64 network), or None if it is not an
    address. Cached: the same few addresses come back on every call."""
    text = text.strip()
    if not text or len(text) > _MAX_TEXT:
        return None
    try:
        address = ipaddress.ip_address(_host_part(text))
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        bare = ipaddress.IPv6Address(int(address))  # without a zone (`%eth0`)
        return str(ipaddress.IPv6Network((bare, IPV6_PREFIX), strict=False))
    return str(address)


def _host_part(text: str) -> str:
    """The host of `host`, `host:port`, `[v6]` or `[v6]:port`."""
    if text.startswith("["):
        return text[1:].partition("]")[0]
    if text.count(":") == 1:  # IPv4 with a port (a bare IPv6 address has two or more)
        return text.partition(":")[0]
    return text
