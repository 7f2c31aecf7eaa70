"""Outbound URLs an operator registers (an app's `handlerBaseUrl`, a Lambda function's `url`).

Pure. A URL is accepted only if the push client (`actors/pushclient.py`) can send a request to
it as written: http(s), a valid host (DNS name, IPv4, or a bracketed IPv6 literal), a port in
1..65535 when one is given, and a path (and query, where one is taken) of RFC 3986 characters
only. Credentials (`user:password@`) are refused: pushes never send them (they are
authenticated by `foliot-signature`), and the stored URL is shown to the app's keys and to
viewers.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Final
from urllib.parse import urlsplit

MAX_URL: Final = 2048
_LABEL: Final = r"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?"
_HOST: Final = re.compile(rf"{_LABEL}(?:\.{_LABEL})*\.?")
_PATH: Final = re.compile(r"(?:[A-Za-z0-9\-._~!$&'()*+,;=:@/]|%[0-9A-Fa-f]{2})*")
_QUERY: Final = re.compile(r"(?:[A-Za-z0-9\-._~!$&'()*+,;=:@/?]|%[0-9A-Fa-f]{2})*")


class UrlError(ValueError):
    """Why a URL cannot be used for outbound calls (the message completes "url: ...")."""


def check_http_url(url: str, *, query: bool) -> str:
    """`url` if the push client can send requests to it, else `UrlError`; `query` says whether
    a query string is allowed."""
    if len(url) > MAX_URL:
        raise UrlError(f"is longer than {MAX_URL} characters")
    if any(ch.isspace() or ord(ch) < 32 or ord(ch) == 127 for ch in url):
        raise UrlError("must not hold whitespace or control characters")
    if not url.isascii():
        raise UrlError("must be ASCII (percent-encode the path; a non-ASCII host in its punycode form)")
    try:
        parts = urlsplit(url)
    except ValueError:
        raise UrlError("must name a valid host") from None
    if parts.scheme not in ("http", "https"):
        raise UrlError("must be an http(s) URL")
    if "@" in parts.netloc:
        raise UrlError("must not carry credentials (user:password@); pushes are signed instead")
    _check_host(parts.netloc, parts.hostname)
    try:
        port = parts.port
    except ValueError:
        raise UrlError("has an invalid port (1..65535)") from None
    if port == 0:
        raise UrlError("has an invalid port (1..65535)")
    if _PATH.fullmatch(parts.path) is None:
        raise UrlError("has a path holding characters a URL path cannot (percent-encode them)")
    if parts.query or url.endswith("?"):
        if not query:
            raise UrlError("must not have a query")
        if _QUERY.fullmatch(parts.query) is None:
            raise UrlError("has a query holding characters a URL query cannot (percent-encode them)")
    if parts.fragment or "#" in url:
        raise UrlError("must not have a fragment")
    return url


def _check_host(netloc: str, hostname: str | None) -> None:
    if not hostname:
        raise UrlError("must name a valid host")
    if netloc.startswith("["):
        try:
            ipaddress.IPv6Address(hostname)
        except ValueError:
            raise UrlError("must name a valid host") from None
    elif _HOST.fullmatch(hostname) is None:
        raise UrlError("must name a valid host")
