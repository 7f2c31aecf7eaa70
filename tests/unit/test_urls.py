"""Outbound base URLs (an app's handlerBaseUrl, a Lambda function's url): what is accepted is
what the push client can send a request to, and nothing else."""

from __future__ import annotations

import pytest

from foliot.actors.pushclient import split_url
from foliot.http.urls import UrlError, check_http_url

GOOD = [
    "http://handler",
    "https://handler.example.com",
    "http://127.0.0.1:8080",
    "http://[::1]:8080/base",
    "https://api.example.com:443/hooks/v1",
    "http://my_service:3000",  # Docker Compose service names hold `_`
    "http://handler/a%20b/c",
    "http://handler/~user/x;y=1",
    "HTTP://Handler.Example",
    "http://handler:",  # an empty port is the default port
]

BAD = [
    ("ftp://handler", "http(s)"),
    ("http://", "host"),
    ("http:///path", "host"),
    ("handler:8080", "http(s)"),
    ("http://handler:abc", "port"),
    ("http://handler:99999", "port"),
    ("http://handler:0", "port"),
    ("http://handler:-1", "port"),
    ("http://user:secret@handler", "credentials"),
    ("http://user@handler", "credentials"),
    ("http://@handler", "credentials"),
    ("http://ha ndler", "whitespace"),
    ("http://handler/a b", "whitespace"),
    ("http://handler/\u00e9", "ASCII"),
    ("http://h\u00e4ndler.example", "ASCII"),
    ("http://handler/\x00", "control"),
    ("http://handler/%zz", "path"),
    ("http://handler/a\\b", "path"),
    ("http://handler/a|b", "path"),
    ("http://handler/x#frag", "fragment"),
    ("http://-handler", "host"),
    ("http://handler..example", "host"),
    ("http://[::1", "host"),
    ("http://[zz::1]", "host"),
    ("http://" + "a" * 2100, "2048"),
]


@pytest.mark.parametrize("url", GOOD)
def test_an_accepted_url_is_one_the_push_client_can_send_to(url: str) -> None:
    checked = check_http_url(url, query=False)
    (scheme, host, port), target = split_url(checked + "/foliot/wf/step")
    assert scheme in ("http", "https") and host and 0 < port < 65536
    assert target.startswith("/") and " " not in target and target.isascii()


@pytest.mark.parametrize(("url", "says"), BAD)
def test_a_url_the_push_client_cannot_use_is_refused(url: str, says: str) -> None:
    with pytest.raises(UrlError) as refused:
        check_http_url(url, query=True)
    assert says in str(refused.value)


def test_a_query_is_refused_only_where_no_query_is_taken() -> None:
    assert check_http_url("https://fn.example/v2?x=1&y=%20", query=True) == "https://fn.example/v2?x=1&y=%20"
    with pytest.raises(UrlError, match="query"):
        check_http_url("https://fn.example/v2?x=1", query=False)
    with pytest.raises(UrlError, match="query"):
        check_http_url("https://fn.example/v2?x=%zz", query=True)
