"""Behind a TLS-terminating proxy (issue 20, item 5): `Forwarded` / `X-Forwarded-*` are believed
only from FOLIOT_TRUSTED_PROXIES, and the console's cookies are `Secure` when the public scheme
is https (said by a trusted proxy, or by FOLIOT_PUBLIC_URL). Over real HTTP on both stores."""

from __future__ import annotations

import ipaddress

import pytest

from foliot.core.config import Settings
from foliot.core.networks import parse_networks
from foliot.http.proxy import Proxies, behind_proxies

from ..conftest import Api

LOCAL = ipaddress.ip_network("127.0.0.1/32")
ELSEWHERE = ipaddress.ip_network("10.0.0.0/8")


async def login_cookie(api: Api, **headers: str) -> str:
    page = await api.client.get("/console/login", headers=headers)
    assert page.status_code == 200
    return page.headers["set-cookie"]


@pytest.mark.parametrize("settings_overrides", [{"trusted_proxies": (ELSEWHERE,)}])
async def test_an_untrusted_peers_forwarded_headers_are_ignored(api: Api) -> None:
    for headers in ({"X-Forwarded-Proto": "https"}, {"Forwarded": "for=1.2.3.4;proto=https"}):
        assert "Secure" not in await login_cookie(api, **headers)


@pytest.mark.parametrize("settings_overrides", [{"trusted_proxies": (LOCAL,)}])
async def test_a_trusted_proxys_https_makes_the_cookie_secure(api: Api) -> None:
    assert "Secure" in await login_cookie(api, **{"X-Forwarded-Proto": "https"})
    assert "Secure" in await login_cookie(api, Forwarded='for="[2001:db8::1]:4711";proto=https')
    assert "Secure" not in await login_cookie(api)  # the proxy said nothing: plain HTTP
    assert "Secure" not in await login_cookie(api, **{"X-Forwarded-Proto": "gopher"})


@pytest.mark.parametrize("settings_overrides", [{"public_url": "https://foliot.example.com"}])
async def test_an_https_public_url_makes_the_cookie_secure(api: Api) -> None:
    cookie = await login_cookie(api)
    assert "Secure" in cookie and "HttpOnly" in cookie and "SameSite=Strict" in cookie
    assert "Secure" in await login_cookie(api, **{"X-Forwarded-Proto": "http"})  # not trusted


def test_the_chain_is_read_from_the_nearest_hop_while_it_is_trusted() -> None:
    proxies = Proxies(parse_networks("10.0.0.0/8, ::1"))

    def view(peer: str, **headers: str) -> tuple[str | None, str | None, str | None]:
        raw = [(k.replace("_", "-").lower().encode(), v.encode()) for k, v in headers.items()]
        return proxies.view(peer, raw)

    # One proxy: the client, its scheme and host.
    assert view(
        "10.0.0.2", x_forwarded_for="203.0.113.9", x_forwarded_proto="https", x_forwarded_host="f.example"
    ) == (
        "203.0.113.9",
        "https",
        "f.example",
    )
    # A client's forged entry left of the real one is not believed: the first untrusted address wins.
    assert view("10.0.0.2", x_forwarded_for="6.6.6.6, 203.0.113.9, 10.0.0.7")[0] == "203.0.113.9"
    # Two proxies of ours: the outer one's report of the client's request counts.
    assert view("::1", forwarded="for=203.0.113.9;proto=https;host=f.example, for=10.0.0.3;proto=http") == (
        "203.0.113.9",
        "https",
        "f.example",
    )
    # From a peer that is not trusted, nothing is believed.
    assert view("192.0.2.1", x_forwarded_for="203.0.113.9", x_forwarded_proto="https") == (None, None, None)
    # Garbage is ignored, not believed.
    assert view("10.0.0.2", x_forwarded_for="unknown", x_forwarded_host="a b") == (None, None, None)
    assert view("10.0.0.2", forwarded='for="_hidden";proto="https"') == (None, "https", None)


def test_settings_are_checked() -> None:
    with pytest.raises(SystemExit, match="FOLIOT_TRUSTED_PROXIES"):
        Settings.from_env({"FOLIOT_TRUSTED_PROXIES": "10.0.0.0/8, nowhere"})
    with pytest.raises(SystemExit, match="FOLIOT_PUBLIC_URL"):
        Settings.from_env({"FOLIOT_PUBLIC_URL": "foliot.example.com"})
    s = Settings.from_env(
        {"FOLIOT_TRUSTED_PROXIES": "10.0.0.5,fd00::/8", "FOLIOT_PUBLIC_URL": "https://f.example/"}
    )
    assert [str(n) for n in s.trusted_proxies] == [
        "10.0.0.5/32",
        "fd00::/8",
    ] and s.public_url == "https://f.example"
    assert Settings.from_env({}).trusted_proxies == () and Settings.from_env({}).public_url is None
    app = object()
    assert behind_proxies(app, (), None) is app  # nothing to do: not wrapped
