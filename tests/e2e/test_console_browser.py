"""The console in a real browser: headless Chromium (Debian's `chromium` + `chromium-driver`)
driven by Selenium against a live server.

Signs in, finds a stuck run by filter, reads its "why" line, fixes its state and rewinds it,
sees it complete; saves a screenshot of each page (to `$FOLIOT_SCREENSHOTS`, else the test's
temporary folder; `docs/console/*.png` were made this way). `.ci/run` installs Chromium and
sets `FOLIOT_REQUIRE_BROWSER=1`, so there a missing browser fails the test instead of skipping.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest
import trio

from foliot.core.views import run_view

from ..conftest import ADMIN, Api

pytestmark = pytest.mark.e2e

# Every wait on the browser or the server is on a condition, bounded by this (a loaded machine
# may be slow; nothing here depends on how slow, only on its being less than this).
WAIT_S = 120

STUCK = {
    "name": "fulfil",
    "steps": [
        {
            "name": "check",
            "type": "choice",
            "choices": [
                {
                    "when": {
                        "any": [
                            {"path": "input.fix", "op": "exists", "value": True},
                            {"path": "state.fix", "op": "exists", "value": True},
                        ]
                    },
                    "next": "ship",
                }
            ],
            "default": "$stuck",
        },
        {"name": "ship", "type": "task", "next": "$end"},
    ],
}
WAITER = {"name": "await-payment", "steps": [{"name": "pay", "type": "wait", "signal": "paid"}]}
PICK = {"name": "pick", "steps": [{"name": "pick", "type": "task", "queue": "warehouse"}]}


def _driver() -> Any:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    chromedriver = shutil.which("chromedriver")
    if chromium is None or chromedriver is None:
        if os.environ.get("FOLIOT_REQUIRE_BROWSER") == "1":
            pytest.fail("chromium and chromium-driver are required (FOLIOT_REQUIRE_BROWSER=1)")
        pytest.skip("chromium / chromium-driver not installed (apt-get install chromium chromium-driver)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1360,1000",
    ):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=chromedriver), options=options)
    driver.set_page_load_timeout(WAIT_S)
    return driver


class Page:
    """The browser, waited on explicitly: after any navigation, the new document must be fully
    loaded and show what the next step reads before anything is read from it."""

    def __init__(self, driver: Any) -> None:
        from selenium.webdriver.support.ui import WebDriverWait

        self.driver = driver
        self.wait = WebDriverWait(driver, WAIT_S)

    def find(self, css: str) -> Any:
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support import expected_conditions

        return self.wait.until(expected_conditions.presence_of_element_located((By.CSS_SELECTOR, css)))

    def _loaded(self, then: str) -> None:
        self.wait.until(lambda d: d.execute_script("return document.readyState") == "complete")
        self.find(then)

    def get(self, url: str, then: str = "h1") -> None:
        self.driver.get(url)
        self._loaded(then)

    def go(self, css: str, then: str = "h1") -> None:
        """Click something that loads a new page; wait until the old page is gone, the new one
        is loaded, and `then` is on it."""
        old = self.find("html")
        self.find(css).click()
        self.wait.until(lambda _driver: _left(old))
        self._loaded(then)


def _left(element: Any) -> bool:
    """Whether `element`'s document is gone (selenium's `staleness_of`, but also taking
    Chromium's answer for a node asked about in the middle of the navigation: "Node with given
    id does not belong to the document", an unknown error rather than a stale element)."""
    from selenium.common.exceptions import StaleElementReferenceException, WebDriverException

    try:
        element.is_enabled()
    except StaleElementReferenceException:
        return True
    except WebDriverException as exc:
        if "does not belong to the document" in str(exc):
            return True
        raise
    return False


async def until(api: Api, run_id: str, status: str) -> dict[str, Any]:
    """Wait for a status on the engine's commit notifications, bounded by WAIT_S (not the
    fixture's 10 s: the machine may be loaded)."""
    run = await api.engine.runs.wait_for(run_id, lambda r: r.status == status, WAIT_S)
    return run_view(run)


@pytest.fixture
def database_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'foliot.db'}"  # one store: the browser is the point here


async def test_find_a_stuck_run_read_why_fix_it_and_see_it_complete(api: Api, tmp_path: Path) -> None:
    shots = Path(os.environ.get("FOLIOT_SCREENSHOTS") or tmp_path / "shots")
    shots.mkdir(parents=True, exist_ok=True)  # noqa: ASYNC240 (a local folder, once)
    await api.register(STUCK)
    await api.register(WAITER)
    for i in range(3):
        done = await api.start("fulfil", {"fix": i})
        await until(api, done["runId"], "completed")
    stuck = await api.start("fulfil", {"orderId": 7}, businessKey="order-7")
    await until(api, stuck["runId"], "stuck")
    waiting = [
        (await api.start("await-payment", {"orderId": i}, businessKey=f"pay-{i}"))["runId"] for i in range(50)
    ]
    for waiter in waiting:
        await until(api, waiter, "waiting")
    base = str(api.client.base_url)
    run_id = stuck["runId"]
    await api.engine.sampler.sample_once()  # the overview's per-app trends show these runs

    def browse() -> dict[str, Any]:
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support.ui import Select

        seen: dict[str, Any] = {}
        driver = _driver()
        try:
            page = Page(driver)
            find, go = page.find, page.go
            page.get(f"{base}/console/", then="input[name=token]")
            assert "/console/login" in driver.current_url  # sent to sign in
            driver.save_screenshot(str(shots / "login.png"))
            find("input[name=token]").send_keys(ADMIN)
            go("form[action='/console/login'] button")
            assert driver.current_url.endswith("/console/")
            driver.save_screenshot(str(shots / "overview.png"))
            seen["overview"] = driver.page_source
            cookie = driver.get_cookie("foliot_console")
            seen["cookie"] = cookie
            page.get(f"{base}/console/runs?app=orders", then="form.filters button")
            Select(find("select[name=status]")).select_by_visible_text("stuck")
            go("form.filters button", then="table a code")
            driver.save_screenshot(str(shots / "runs.png"))
            links = driver.find_elements(By.CSS_SELECTOR, "table a code")
            seen["found"] = [link.text for link in links]
            go("table a code", then="#why")
            seen["why"] = find("#why").text
            driver.save_screenshot(str(shots / "run-stuck.png"))
            find("form[action$='/state'] textarea[name=set]").send_keys('{"fix": true}')
            find("form[action$='/state'] input[name=reason]").send_keys("stock found")
            find("form[action$='/state'] input[name=confirm]").click()
            go("form[action$='/state'] button", then="p.msg")
            seen["after_edit"] = find("p.msg").text
            Select(find("form[action$='/rewind'] select[name=toStep]")).select_by_visible_text("check")
            find("form[action$='/rewind'] input[name=reason]").send_keys("retry the route")
            find("form[action$='/rewind'] input[name=confirm]").click()
            go("form[action$='/rewind'] button", then="p.msg")
            seen["after_rewind"] = find("p.msg").text
            # bulk-cancel the 50 runs waiting for a payment: the count, a confirmation, the result
            page.get(f"{base}/console/runs?app=orders", then="form.filters button")
            find("input[name=workflow]").send_keys("await-payment")
            Select(find("select[name=status]")).select_by_visible_text("waiting")
            go("form.filters button", then="form[action='/console/runs/bulk/cancel'] button")
            seen["bulk_offer"] = driver.find_element(
                By.XPATH, "//h2[text()='Bulk interventions']/following-sibling::p"
            ).text
            go("form[action='/console/runs/bulk/cancel'] button", then="input[name=confirm]")
            seen["bulk_ask"] = find("main p").text
            driver.save_screenshot(str(shots / "bulk-confirm.png"))
            find("input[name=reason]").send_keys("orders withdrawn")
            find("input[name=confirm]").click()
            go("form[action='/console/runs/bulk/cancel'] button", then="p.msg")
            seen["bulk_done"] = find("p.msg").text
            return seen
        finally:
            driver.quit()

    seen = await trio.to_thread.run_sync(browse)
    assert seen["cookie"]["httpOnly"] is True and seen["cookie"]["sameSite"] == "Strict"
    assert seen["found"] == [run_id]
    assert seen["why"].startswith("Why is it not moving? stuck at `check` for ")
    assert "no_choice_matched" in seen["why"] or "stuck_by_definition" in seen["why"]
    assert seen["after_edit"] == "state: done" and seen["after_rewind"] == "rewind: done"
    assert seen["bulk_offer"] == "50 run(s) match this filter."
    assert seen["bulk_ask"].startswith("50 run(s) of app orders match")
    assert (
        seen["bulk_done"] == "50 run(s) examined: 50 cancelled, 0 skipped (their status does not allow it)."
    )
    assert {(await api.run(w))["status"] for w in waiting} == {"cancelled"}
    done = await until(api, run_id, "completed")
    assert done["state"]["fix"] is True and done["generation"] == 2

    # a pull queue with a backlog, sampled twice, for the Queues page's chart
    await api.register(PICK)
    await api.engine.sampler.sample_once()
    for i in range(3):
        await until(api, (await api.start("pick", {"orderId": i}))["runId"], "running")
    await api.engine.sampler.sample_once()

    def more_shots() -> None:
        driver = _driver()
        try:
            page = Page(driver)
            page.get(f"{base}/console/login", then="input[name=token]")
            page.find("input[name=token]").send_keys(ADMIN)
            page.go("form[action='/console/login'] button")
            assert driver.current_url.endswith("/console/")
            for name, path in (
                ("run-completed", f"/console/apps/orders/runs/{run_id}"),
                ("actors", "/console/actors"),
                ("timers", "/console/timers"),
                ("queues", "/console/queues"),
                ("workflows", "/console/workflows?app=orders"),
                ("workflow", "/console/apps/orders/workflows/fulfil"),
            ):
                page.get(base + path)
                driver.save_screenshot(str(shots / f"{name}.png"))
                seen[name] = driver.page_source
        finally:
            driver.quit()

    await trio.to_thread.run_sync(more_shots)
    assert 'aria-label="orders/warehouse: backlog"' in seen["queues"]
    assert sorted(p.name for p in shots.glob("*.png")) == sorted(  # noqa: ASYNC240
        f"{n}.png"
        for n in (
            "bulk-confirm",
            "login",
            "overview",
            "runs",
            "run-stuck",
            "run-completed",
            "actors",
            "timers",
            "queues",
            "workflows",
            "workflow",
        )
    )
