"""Address ranges in settings (`FOLIOT_TRUSTED_PROXIES`): parsed once, pure."""

from __future__ import annotations

import ipaddress

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def parse_networks(raw: str | None) -> tuple[Network, ...]:
    """FOLIOT_TRUSTED_PROXIES: `10.0.0.5, 10.1.0.0/16, ::1`; `ValueError` naming a bad entry."""
    if raw is None or not raw.strip():
        return ()
    out: list[Network] = []
    for item in raw.split(","):
        item = item.strip()
        if not item:
            continue
        try:
            out.append(ipaddress.ip_network(item, strict=False))
        except ValueError:
            raise ValueError(f"{item!r} is not an address or a CIDR range (10.0.0.0/8, ::1)") from None
    return tuple(out)
