"""The HTTP face against a fake run service: routes parse, authenticate and map errors; the
service decides. No node, no store, no actor.

`create_app` is given a small object standing where the node would be, holding only what
the run routes read of it (`directory` for keys and apps, `admission`, `settings` and `runs`,
the run kind's entry points); `FakeRuns` records what each route asked and answers what the
test says. So the tests show the face's own contract: what reaches the service from a request,
what never does (bad input, a wrong app), and how a service's answer or error becomes HTTP.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

import attrs
import pytest
from trio.testing import MockClock

from foliot.actors.admission import Admission
from foliot.core import credentials
from foliot.core.config import Settings
from foliot.core.errors import Conflict, NotFound, StorageUnavailable
from foliot.core.views import run_view
from foliot.core.workflow import machine
from foliot.core.workflow.definition import canonical_json
from foliot.core.workflow.model import Run
from foliot.http.app import create_app
from foliot.storage.base import ApiKeyRecord, AppRecord

T0 = 1_800_000_000_000
ADMIN = "admin-token-for-tests"
KEY_ID, SECRET = "key_shop", "s3cret"
SHOP_KEY = f"{credentials.KEY_PREFIX}{KEY_ID}.{SECRET}"


def a_run(run_id: str = "run_1", app: str = "shop", status: str = "waiting") -> Run:
    return Run(
        run_id=run_id,
        app=app,
        workflow="order",
        version=1,
        status=status,
        input=None,
        state={},
        generation=0,
        created_at=T0,
        updated_at=T0,
        trace_id="0" * 32,
        current_step="pay",
        wait_signal="paid",
        seq=2,
    )


class FakeRuns:
    """Stands for `foliot.kinds.run.service.Runs`: records calls, answers as told."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.docs: dict[str, Run] = {}
        self.start_answer: Callable[[dict[str, Any]], tuple[dict[str, Any], bool]] = lambda kw: (
            {"runId": "run_new", "status": "running"},
            True,
        )
        self.ask_answer: Callable[[str, Any], tuple[machine.Reply, Run | None]] = lambda run_id, msg: (
            machine.Ok("delivered"),
            None,
        )

    async def start(self, **kw: Any) -> tuple[dict[str, Any], bool]:
        self.calls.append(("start", kw))
        return self.start_answer(kw)

    async def document(self, run_id: str) -> Run | None:
        self.calls.append(("document", run_id))
        return self.docs.get(run_id)

    def busy(self, run_id: str) -> bool:
        return False

    async def ask(
        self, run_id: str, message: Any, known: Run | None = None
    ) -> tuple[machine.Reply, Run | None]:
        self.calls.append(("ask", (run_id, message, known)))
        return self.ask_answer(run_id, message)

    def called(self, name: str) -> list[Any]:
        return [args for n, args in self.calls if n == name]


class FakeDirectory:
    async def api_key(self, key_id: str) -> ApiKeyRecord | None:
        if key_id != KEY_ID:
            return None
        return ApiKeyRecord(KEY_ID, "shop", credentials.hash_secret(SECRET), T0)

    async def app_record(self, app: str) -> AppRecord | None:
        return AppRecord(app, "http://handler.test", None, T0, T0) if app in ("shop", "other") else None


class NoPushes:
    backlog = 0
    apps_waiting = 0

    def app_backlog(self, app: str) -> int:
        return 0


@attrs.define
class FakeNode:
    """What the run routes read of the node: nothing else is there."""

    settings: Settings
    runs: FakeRuns
    directory: FakeDirectory
    admission: Admission
    forwarder: None = None


@attrs.define
class Face:
    node: FakeNode
    client: Any

    @property
    def runs(self) -> FakeRuns:
        return self.node.runs

    async def post(self, path: str, body: Any, key: str = SHOP_KEY, **headers: str) -> tuple[int, Any, Any]:
        r = await self.client.post(path, json=body, headers={"Authorization": f"Bearer {key}", **headers})
        return r.status_code, await r.get_json(), r.headers

    async def get(self, path: str, key: str = SHOP_KEY) -> tuple[int, Any]:
        r = await self.client.get(path, headers={"Authorization": f"Bearer {key}"})
        return r.status_code, await r.get_json()


@pytest.fixture
def face(autojump_clock: MockClock) -> Face:
    settings = Settings(payload_max_bytes=1_000)
    node = FakeNode(settings, FakeRuns(), FakeDirectory(), Admission(settings, NoPushes(), None))  # type: ignore[arg-type]
    app = create_app(node, settings, ADMIN)  # type: ignore[arg-type]
    return Face(node, app.test_client())


# ---------------------------------------------------------------------- starting a run


async def test_a_start_hands_the_parsed_request_to_the_service_and_answers_201(
    face: Face, autojump_clock: MockClock
) -> None:
    body = {
        "workflow": "order",
        "version": 2,
        "input": {"sku": "a"},
        "businessKey": "o-1",
        "runTimeout": "1h",
    }
    status, answer, _ = await face.post("/apps/shop/runs", body, **{"Idempotency-Key": "k-1"})
    assert status == 201 and answer == {"runId": "run_new", "status": "running"}
    [kw] = face.runs.called("start")
    assert kw == {
        "app": "shop",
        "workflow": "order",
        "version": 2,
        "input": {"sku": "a"},
        "business_key": "o-1",
        "run_timeout_ms": 3_600_000,
        "idempotency_key": "k-1",
        "request_hash": hashlib.sha256(canonical_json(body).encode()).hexdigest(),
        "render": run_view,
        "priority": 3,  # the default, as the face parsed it (issue 23)
    }
    assert face.node.admission.admitted == 1 and face.node.admission.inflight == 0


async def test_a_replayed_start_answers_200_with_what_the_service_replayed(
    face: Face, autojump_clock: MockClock
) -> None:
    face.runs.start_answer = lambda kw: ({"runId": "run_first"}, False)
    status, answer, _ = await face.post("/apps/shop/runs", {"workflow": "order"}, **{"Idempotency-Key": "k"})
    assert (status, answer) == (200, {"runId": "run_first"})


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"workflow": "bad name"}, "workflow"),
        ({"workflow": "order", "version": 0}, "version"),
        ({"workflow": "order", "runTimeout": "soon"}, "runTimeout"),
        ({"workflow": "order", "surprise": 1}, "surprise"),
        ({"workflow": "order", "businessKey": ""}, "businessKey"),
    ],
)
async def test_a_bad_start_is_refused_400_naming_the_field_and_never_reaches_the_service(
    face: Face, autojump_clock: MockClock, body: dict[str, Any], field: str
) -> None:
    status, answer, _ = await face.post("/apps/shop/runs", body)
    assert status == 400 and answer["error"]["code"] == "invalid_request"
    assert answer["error"]["field"] == field
    assert face.runs.calls == []


async def test_an_oversized_input_is_413_and_never_reaches_the_service(
    face: Face, autojump_clock: MockClock
) -> None:
    status, answer, _ = await face.post("/apps/shop/runs", {"workflow": "order", "input": "x" * 2_000})
    assert status == 413 and answer["error"]["field"] == "input" and face.runs.calls == []


async def test_a_key_of_another_app_or_an_unknown_app_never_reaches_the_service(
    face: Face, autojump_clock: MockClock
) -> None:
    status, answer, _ = await face.post("/apps/other/runs", {"workflow": "order"})
    assert status == 403 and answer["error"]["code"] == "forbidden"
    status, answer, _ = await face.post("/apps/ghost/runs", {"workflow": "order"}, key=ADMIN)
    assert status == 404 and answer["error"]["code"] == "not_found"
    status, answer, _ = await face.post("/apps/shop/runs", {"workflow": "order"}, key="fk_nobody.x")
    assert status == 401
    assert face.runs.calls == []


def raising(error: Exception) -> Callable[..., Any]:
    def answer(*args: Any) -> Any:
        raise error

    return answer


@pytest.mark.parametrize(
    ("error", "status", "expected"),
    [
        (
            Conflict("businessKey 'o-1' is used", code="business_key_in_use", runId="run_9"),
            409,
            {"code": "business_key_in_use", "message": "businessKey 'o-1' is used", "runId": "run_9"},
        ),
        (
            NotFound("workflow 'order' not found"),
            404,
            {"code": "not_found", "message": "workflow 'order' not found"},
        ),
        (
            StorageUnavailable("connection refused"),
            503,
            {"code": "unavailable", "message": "storage is unavailable; nothing was changed, retry"},
        ),
    ],
)
async def test_the_services_errors_become_the_spec_error_shape(
    face: Face, autojump_clock: MockClock, error: Exception, status: int, expected: dict[str, Any]
) -> None:
    face.runs.start_answer = raising(error)
    got, answer, headers = await face.post("/apps/shop/runs", {"workflow": "order"})
    assert (got, answer) == (status, {"error": expected})
    assert (headers.get("Retry-After") == "1") is (status == 503)
    assert face.node.admission.inflight == 0  # counted out again, whatever the service raised


# ---------------------------------------------------------------------- signals and interventions


async def test_a_signal_asks_the_run_it_names_and_answers_202(face: Face, autojump_clock: MockClock) -> None:
    run = face.runs.docs["run_1"] = a_run()
    status, answer, _ = await face.post(
        "/apps/shop/signals", {"runId": "run_1", "name": "paid", "payload": {"n": 1}, "signalId": "s-1"}
    )
    assert (status, answer) == (202, {"runId": "run_1", "status": "delivered"})
    assert face.runs.called("ask") == [("run_1", machine.SignalIn("paid", {"n": 1}, "s-1"), run)]


async def test_a_signal_the_run_refuses_answers_the_runs_refusal(
    face: Face, autojump_clock: MockClock
) -> None:
    face.runs.docs["run_1"] = a_run(status="completed")
    face.runs.ask_answer = lambda run_id, msg: (
        machine.Rejected(409, "run_closed", "the run is completed"),
        None,
    )
    status, answer, _ = await face.post("/apps/shop/signals", {"runId": "run_1", "name": "paid"})
    assert (status, answer) == (409, {"error": {"code": "run_closed", "message": "the run is completed"}})


async def test_a_signal_to_a_run_of_another_app_is_404_and_asks_nothing(
    face: Face, autojump_clock: MockClock
) -> None:
    face.runs.docs["run_1"] = a_run(app="other")
    status, answer, _ = await face.post("/apps/shop/signals", {"runId": "run_1", "name": "paid"})
    assert status == 404 and answer["error"]["code"] == "not_found"
    assert face.runs.called("ask") == [] and face.runs.called("document") == ["run_1"]


async def test_a_cancel_asks_the_run_and_answers_the_run_it_got_back(
    face: Face, autojump_clock: MockClock
) -> None:
    run = face.runs.docs["run_1"] = a_run()
    cancelled = attrs.evolve(run, status="cancelled", seq=3)
    face.runs.ask_answer = lambda run_id, msg: (machine.Ok(), cancelled)
    status, answer, _ = await face.post("/apps/shop/runs/run_1/cancel", {"reason": "customer asked"})
    assert (status, answer) == (200, run_view(cancelled))
    assert face.runs.called("ask") == [("run_1", machine.Cancel("customer asked"), run)]


async def test_reading_a_run_reads_the_services_document(face: Face, autojump_clock: MockClock) -> None:
    run = face.runs.docs["run_1"] = a_run()
    assert await face.get("/apps/shop/runs/run_1") == (200, run_view(run))
    status, answer = await face.get("/apps/shop/runs/run_404")
    assert status == 404 and answer["error"]["code"] == "not_found"
