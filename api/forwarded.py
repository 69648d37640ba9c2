"""The client's address behind reverse proxies: ``X-Forwarded-For``, believed only as far as the
proxies named in ``CITEWISE_TRUSTED_PROXIES``.

Each proxy appends the address it received the request from, so the header reads left to right
from the farthest hop to the nearest, and everything left of the first proxy we trust is
whatever the client chose to send. The client is therefore found from the right: starting at
the socket's peer, each address that is a trusted proxy hands over to the entry it appended,
and the first address that is not a trusted proxy is the client. A client that sends
``X-Forwarded-For: 127.0.0.1`` through a trusted proxy stays where the proxy saw it.

``*`` trusts whoever connects, and nothing further: the right-most entry (the one the
connecting proxy appended) is the client. (uvicorn's own handling takes the left-most entry
for ``*``, the one the client wrote, which made any caller "this machine" in local mode; the
front door also refuses ``*`` in local mode at start-up, ``composition.build_door``.)

This replaces uvicorn's ``proxy_headers``, which ``app.uvicorn_options`` turns off.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Awaitable, Callable

Scope = dict
ASGIApp = Callable[[Scope, Callable, Callable], Awaitable[None]]
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class TrustedProxies:
    """``CITEWISE_TRUSTED_PROXIES``: addresses and networks (``10.0.0.0/8``), or ``*``."""

    def __init__(self, spec: str) -> None:
        items = [i.strip() for i in spec.split(",") if i.strip()]
        self.anyone = "*" in items
        self.networks: list[Network] = []
        for item in items:
            if item != "*":
                # A bad entry is a start-up error (ValueError names it), never silently ignored.
                self.networks.append(ipaddress.ip_network(item, strict=False))

    def __contains__(self, address: str | None) -> bool:
        if self.anyone:
            return True
        ip = _ip(address)
        return ip is not None and any(ip in net for net in self.networks)

    def client(self, peer: str | None, forwarded_for: list[str]) -> str | None:
        """The client's address, given the socket's peer and the ``X-Forwarded-For`` entries
        (left to right)."""
        if peer not in self or not forwarded_for:
            return peer
        if self.anyone:
            return forwarded_for[-1]
        for address in reversed(forwarded_for):
            if address not in self:
                return address
        # Every hop is a proxy we trust: the left-most was appended by one of them.
        return forwarded_for[0]


def _ip(address: str | None) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(address or "")
    except ValueError:
        return None


def _entries(values: list[bytes]) -> list[str]:
    """``X-Forwarded-For`` entries without ports: ``1.2.3.4:5678`` and ``[::1]:80`` as sent
    by some proxies; anything else as written (and so never a trusted proxy)."""
    out = []
    for value in values:
        for item in value.decode("latin-1").split(","):
            item = item.strip()
            if item.startswith("[") and "]" in item:
                item = item[1:item.index("]")]
            elif item.count(":") == 1:
                item = item.split(":", 1)[0]
            if item:
                out.append(item)
    return out


class ForwardedFor:
    """Sets the ASGI scope's ``client`` (and ``scheme``, from ``X-Forwarded-Proto``) from the
    headers of a trusted proxy, before the front door reads them."""

    def __init__(self, app: ASGIApp, trusted: str) -> None:
        self.app = app
        self.trusted = TrustedProxies(trusted)

    async def __call__(self, scope: Scope, receive, send) -> None:
        if scope["type"] in ("http", "websocket"):
            peer = scope.get("client")
            host = peer[0] if peer else None
            if host in self.trusted:
                headers = scope.get("headers", [])
                forwarded = _entries([v for k, v in headers if k == b"x-forwarded-for"])
                client = self.trusted.client(host, forwarded)
                if client and client != host:
                    scope["client"] = (client, 0)
                protos = [v.decode("latin-1").strip() for k, v in headers
                          if k == b"x-forwarded-proto"]
                if protos and protos[-1] in ("http", "https"):
                    scope["scheme"] = protos[-1] if scope["type"] == "http" else \
                        protos[-1].replace("http", "ws")
        await self.app(scope, receive, send)
