"""Requests that came through a reverse proxy: who sent them, over which scheme, to which host.

Foliot serves plain HTTP; in production a TLS-terminating proxy stands in front of it. Only
when the connection's peer is one of FOLIOT_TRUSTED_PROXIES (addresses or CIDR ranges; none
by default) are the proxy's headers believed: `Forwarded` (RFC 7239) when present, otherwise
`X-Forwarded-For`, `X-Forwarded-Proto` and `X-Forwarded-Host`. A peer that is not trusted may
send them all it likes: they are ignored (not removed: a node forwarding the request to
another passes them on as they came, and that node, whose peer is a node and not a proxy,
ignores them too).

The proxies' chain is read from the right (the hop nearest to us) while its addresses are
trusted; the first untrusted address is the client, and the scheme and host are the ones that
same hop reported. The request's ASGI scope is then rewritten: `client`, `scheme` and the
`Host` header. FOLIOT_PUBLIC_URL (`https://foliot.example.com`) names the scheme the public
reaches Foliot over when no trusted proxy says otherwise: with `https`, the console's cookies
are `Secure` even though the request arrived over plain HTTP.

With neither setting the app is not wrapped at all (`behind_proxies` returns it unchanged).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence
from typing import Any, Final

from hypercorn.typing import ASGIFramework, ASGIReceiveCallable, ASGISendCallable, Scope

from ..core.networks import Network

Address = ipaddress.IPv4Address | ipaddress.IPv6Address

_HOST: Final = re.compile(r"[A-Za-z0-9.-]{1,253}(:[0-9]{1,5})?|\[[0-9A-Fa-f:.]{2,45}\](:[0-9]{1,5})?")
_PAIR: Final = re.compile(r'\s*([A-Za-z]+)\s*=\s*("(?:[^"\\]|\\.)*"|[^;,\s]*)\s*')
_MAX_HEADER: Final = 4096


def _address(text: str) -> Address | None:
    """An address from `for=` / X-Forwarded-For (`1.2.3.4`, `1.2.3.4:80`, `[::1]:80`, `::1`)."""
    text = text.strip().strip('"')
    if text.startswith("["):
        text = text[1 : text.find("]")] if "]" in text else ""
    elif text.count(":") == 1:
        text = text.split(":", 1)[0]
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None  # `unknown`, an obfuscated `_name`, garbage: not an address


def forwarded_elements(value: str) -> list[dict[str, str]]:
    """RFC 7239 `Forwarded`: one dict per element, keys lower-cased, quotes removed."""
    elements: list[dict[str, str]] = []
    for element in _split_outside_quotes(value, ","):
        pairs: dict[str, str] = {}
        for pair in _split_outside_quotes(element, ";"):
            found = _PAIR.fullmatch(pair)
            if found is None:
                continue
            text = found.group(2)
            if text.startswith('"'):
                text = re.sub(r"\\(.)", r"\1", text[1:-1])
            pairs[found.group(1).lower()] = text
        elements.append(pairs)
    return elements


def _split_outside_quotes(text: str, sep: str) -> list[str]:
    parts: list[str] = []
    current: list[str] = []
    quoted = escaped = False
    for ch in text:
        if escaped:
            escaped = False
        elif ch == "\\" and quoted:
            escaped = True
        elif ch == '"':
            quoted = not quoted
        elif ch == sep and not quoted:
            parts.append("".join(current))
            current = []
            continue
        current.append(ch)
    parts.append("".join(current))
    return parts


class Proxies:
    """What the trusted proxies say about one request (pure: headers in, answers out)."""

    def __init__(self, trusted: Sequence[Network], public_scheme: str | None = None) -> None:
        self.trusted = tuple(trusted)
        self.public_scheme = public_scheme

    def trusts(self, peer: str | None) -> bool:
        if not peer or not self.trusted:
            return False
        address = _address(peer)
        return address is not None and any(address in net for net in self.trusted)

    def hops(self, headers: Sequence[tuple[bytes, bytes]]) -> list[tuple[str | None, str | None, str | None]]:
        """`(for, proto, host)` per hop, nearest last: from `Forwarded`, else `X-Forwarded-*`."""
        found: dict[bytes, list[str]] = {}
        for name, value in headers:
            key = name.lower()
            if key in (b"forwarded", b"x-forwarded-for", b"x-forwarded-proto", b"x-forwarded-host"):
                found.setdefault(key, []).append(value.decode("latin-1"))
        joined = {key: ",".join(values) for key, values in found.items()}
        if any(len(v) > _MAX_HEADER for v in joined.values()):
            return []
        if b"forwarded" in joined:
            return [
                (e.get("for"), e.get("proto"), e.get("host"))
                for e in forwarded_elements(joined[b"forwarded"])
            ]

        def items(key: bytes) -> list[str]:
            return [v.strip() for v in joined[key].split(",")] if key in joined else []

        fors, protos, hosts = (
            items(b"x-forwarded-for"),
            items(b"x-forwarded-proto"),
            items(b"x-forwarded-host"),
        )
        count = max(len(fors), len(protos), len(hosts))

        def at(values: list[str], i: int) -> str | None:
            # Lists of other lengths than the longest are aligned on the right (the nearest hop).
            j = i - (count - len(values))
            return values[j] if 0 <= j < len(values) else None

        return [(at(fors, i), at(protos, i), at(hosts, i)) for i in range(count)]

    def view(
        self, peer: str | None, headers: Sequence[tuple[bytes, bytes]]
    ) -> tuple[str | None, str | None, str | None]:
        """`(client address, scheme, host)` the trusted proxies report for a request from
        `peer`; None for what they do not say (or when `peer` is not trusted)."""
        if not self.trusts(peer):
            return None, None, None
        client = proto = host = None
        for hop_for, hop_proto, hop_host in reversed(self.hops(headers)):
            # This hop was reported by a trusted proxy: believe what it says of its request.
            if hop_proto is not None and hop_proto.lower() in ("http", "https"):
                proto = hop_proto.lower()
            if hop_host is not None and _HOST.fullmatch(hop_host):
                host = hop_host
            address = _address(hop_for) if hop_for is not None else None
            if address is None:
                break
            client = str(address)
            if not any(address in net for net in self.trusted):
                break  # the client: nothing further left is a proxy of ours
        return client, proto, host


class BehindProxies:
    """ASGI middleware: the scope as the trusted proxies (and FOLIOT_PUBLIC_URL) describe it."""

    def __init__(self, app: ASGIFramework, proxies: Proxies) -> None:
        self.app = app
        self.proxies = proxies

    async def __call__(self, scope: Scope, receive: ASGIReceiveCallable, send: ASGISendCallable) -> None:
        if scope["type"] in ("http", "websocket"):
            scope = self.rewrite(scope)
        await self.app(scope, receive, send)

    def rewrite(self, scope: Any) -> Any:
        peer = scope.get("client")
        client, proto, host = self.proxies.view(peer[0] if peer else None, scope.get("headers", ()))
        public = self.proxies.public_scheme
        if client is None and proto is None and host is None and public is None:
            return scope
        scope = dict(scope)
        if client is not None:
            scope["client"] = (client, 0)
        scheme = proto or public
        if scheme is not None:
            scope["scheme"] = scheme if scope["type"] == "http" else ("wss" if scheme == "https" else "ws")
        if host is not None:
            headers = [(k, v) for k, v in scope["headers"] if k.lower() != b"host"]
            scope["headers"] = [(b"host", host.encode("latin-1")), *headers]
        return scope


def behind_proxies(app: ASGIFramework, trusted: Sequence[Network], public_url: str | None) -> ASGIFramework:
    """`app` wrapped to honour the trusted proxies' headers and FOLIOT_PUBLIC_URL; `app` itself
    when neither is set (nothing to do on any request)."""
    if not trusted and public_url is None:
        return app
    scheme = public_url.split(":", 1)[0].lower() if public_url else None
    return BehindProxies(app, Proxies(trusted, scheme))
