"""Where a webhook may be delivered: public addresses only, unless the operator allows a host.

A webhook URL is chosen by whoever registers it, and the server then posts to it from inside
the deployment's network; a URL naming the metadata service (`169.254.169.254`), a database on
`10.0.0.5` or the server itself (`127.0.0.1`) would turn webhooks into a way to reach them. So:

- `address_refusal` is the rule, the only one: an address is refused when it is loopback,
  private, link-local, unspecified, reserved, multicast or otherwise not global (IPv4 inside
  IPv6, as `::ffff:127.0.0.1`, 6to4 or NAT64, is judged as the IPv4 it carries), unless the
  host or the address is in `GC_WEBHOOK_ALLOWED_HOSTS` (names, addresses or networks).
- `target_check` applies it when a webhook is registered: the URL is http(s), has no
  credentials, and a host that is an IP address in any spelling the resolver accepts
  (`2130706433`, `0x7f000001`, `127.1`, `0177.0.0.1`, `[::1]`) is normalised and judged.
- `target_resolve` applies it again when a delivery is sent: the host is resolved, every
  address it resolves to must pass (a name that answered with a public address at
  registration may answer with `127.0.0.1` now: DNS rebinding), and the request is then made
  to one of those vetted addresses (`Target.request_url`), with the name in the Host header and
  as the TLS server name, so the connection goes where the check looked.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from dataclasses import dataclass, replace
from urllib.parse import SplitResult, urlsplit

import httpx
from django.conf import settings

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
# What `inet_aton` reads as an IPv4 address: decimal, hex or octal parts, one to four of them.
_NUMERIC_HOST = re.compile(r"(?:0x[0-9a-f]*|[0-9]+)(?:\.(?:0x[0-9a-f]*|[0-9]+)){0,3}", re.I)
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/?#@\s]*@")
# A name that resolves to several addresses is tried at most this many of them.
MAX_ADDRESSES = 3


class TargetRefused(Exception):
    """The URL may not be delivered to; the message names the host, never credentials."""


@dataclass(frozen=True)
class Target:
    """A checked webhook URL: its parts, and after `target_resolve` the vetted addresses."""

    url: str
    scheme: str
    host: str  # lowercased, no brackets, no trailing dot
    port: int
    address: IPAddress | None  # the host, when it is an IP address
    addresses: tuple[IPAddress, ...] = ()

    def request_url(self, address: IPAddress) -> httpx.URL:
        """The URL with `address` in place of the host (the name goes in `headers`)."""
        return httpx.URL(self.url).copy_with(host=str(address))

    @property
    def headers(self) -> dict[str, str]:
        host = f"[{self.host}]" if ":" in self.host else self.host
        default = 443 if self.scheme == "https" else 80
        headers = {"Host": host if self.port == default else f"{host}:{self.port}"}
        if self.scheme == "https":
            # Connections are pooled by address: one made (and verified) for another name at
            # the same address must not carry this request.
            headers["Connection"] = "close"
        return headers

    @property
    def extensions(self) -> dict[str, str]:
        return {"sni_hostname": self.host} if self.scheme == "https" and not self.address else {}


def redact(text: str) -> str:
    """`text` with the credentials of any URL in it replaced by `***`."""
    return _USERINFO.sub(r"\1***@", text)


def host_address(host: str) -> IPAddress | None:
    """The IP address `host` spells, in any form the resolver accepts, or None for a name."""
    host = host.strip("[]").rstrip(".")
    try:
        return _unwrapped(ipaddress.ip_address(host))
    except ValueError:
        pass
    if _NUMERIC_HOST.fullmatch(host):
        try:
            return ipaddress.IPv4Address(socket.inet_aton(host))
        except OSError:
            return None
    return None


def _unwrapped(address: IPAddress) -> IPAddress:
    """An IPv6 address that carries an IPv4 one (mapped, 6to4, NAT64) judged as that IPv4."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return address.ipv4_mapped
        if address.sixtofour is not None:
            return address.sixtofour
        if address in _NAT64:
            return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return address


def _allowed(host: str, address: IPAddress | None) -> bool:
    for entry in settings.GC_WEBHOOK_ALLOWED_HOSTS:
        entry = entry.strip().lower()
        if not entry:
            continue
        if "/" in entry:
            try:
                network = ipaddress.ip_network(entry.strip("[]"), strict=False)
            except ValueError:
                continue
            if address is not None and address.version == network.version and address in network:
                return True
            continue
        entry_address = host_address(entry)
        if entry_address is None:
            if entry.rstrip(".") == host:
                return True
        elif address is not None and entry_address == address:
            return True
    return False


def address_refusal(host: str, address: IPAddress | None) -> str | None:
    """Why `host` (at `address`, when known) may not receive webhooks, or None if it may.

    The one rule, applied at registration and again at delivery.
    """
    if _allowed(host, address):
        return None
    if address is None:
        if host == "localhost" or host.endswith(".localhost"):
            return f"{host} is a loopback name"
        return None  # judged by what it resolves to, when a delivery is sent
    for kind in ("loopback", "link_local", "unspecified", "multicast", "private", "reserved"):
        if getattr(address, f"is_{kind}"):
            return f"{address} is a {kind.replace('_', '-')} address"
    if not address.is_global:
        return f"{address} is not a public address"
    return None


def _parts(url: str) -> SplitResult:
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises on a port that is not a number in range
    except ValueError:
        raise TargetRefused("the URL is malformed") from None
    return parts


def target_check(url: str) -> Target:
    """The webhook URL, checked as far as it can be without resolving its host."""
    parts = _parts(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise TargetRefused("the URL must be http or https with a host")
    if "@" in parts.netloc:
        raise TargetRefused("the URL must not carry credentials (user:password@)")
    host = parts.hostname.rstrip(".")
    if not host.isascii():
        try:  # as the resolver will see it: `127。0。0。1` and `１２７.０.０.１` are 127.0.0.1
            host = host.encode("idna").decode("ascii").rstrip(".")
        except UnicodeError:
            raise TargetRefused("the URL's host is not a valid name") from None
    address = host_address(host)
    reason = address_refusal(host, address)
    if reason:
        raise TargetRefused(
            f"webhooks are not delivered to {host}: {reason} "
            "(allow it with GC_WEBHOOK_ALLOWED_HOSTS)"
        )
    default = 443 if parts.scheme == "https" else 80
    return Target(
        url=url, scheme=parts.scheme, host=host, port=parts.port or default, address=address
    )


def target_resolve(url: str) -> Target:
    """The URL checked as at registration, then its host resolved and every address it resolves
    to checked; raises TargetRefused, or OSError when the name does not resolve."""
    target = target_check(url)
    if target.address is not None:
        return replace(target, addresses=(target.address,))
    infos = socket.getaddrinfo(target.host, target.port, type=socket.SOCK_STREAM)
    addresses: list[IPAddress] = []
    for info in infos:
        address = ipaddress.ip_address(str(info[4][0]).split("%")[0])
        reason = address_refusal(target.host, _unwrapped(address))
        if reason:
            raise TargetRefused(
                f"webhooks are not delivered to {target.host}: it resolves to {reason} "
                "(allow it with GC_WEBHOOK_ALLOWED_HOSTS)"
            )
        if address not in addresses:
            addresses.append(address)
    if not addresses:
        raise OSError(f"{target.host} resolves to no address")
    return replace(target, addresses=tuple(addresses[:MAX_ADDRESSES]))
