"""The AWS CLI (`awscli` from PyPI) against a live Foliot: the seed document's registration
example, a listing, and a fault as the CLI shows it."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest
import trio

from .conftest import PRESET_KEY, PRESET_SECRET, Swf

pytestmark = pytest.mark.e2e


async def aws(swf: Swf, *args: str) -> tuple[int, str, str]:
    binary = shutil.which("aws", path=str(Path(sys.executable).parent))
    if binary is None:
        pytest.fail("awscli is a dev dependency; reinstall with .[dev]")
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(swf.tmp),
        "AWS_ACCESS_KEY_ID": PRESET_KEY,
        "AWS_SECRET_ACCESS_KEY": PRESET_SECRET,
        "AWS_DEFAULT_REGION": "eu-central-1",
        "AWS_CONFIG_FILE": str(swf.tmp / "no-config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(swf.tmp / "no-credentials"),
        "AWS_MAX_ATTEMPTS": "1",
        "AWS_PAGER": "",
    }
    with trio.fail_after(60):
        done = await trio.run_process(
            [binary, "--endpoint-url", swf.url, "--output", "json", "swf", *args],
            env=env,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    return done.returncode, done.stdout.decode(), done.stderr.decode()


@pytest.fixture
def database_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'foliot.db'}"  # one store: the CLI adds nothing store-specific


async def test_aws_cli_registers_and_describes(swf: Swf) -> None:
    code, _, err = await aws(
        swf, "register-domain", "--name", "orders", "--workflow-execution-retention-period-in-days", "7"
    )
    assert code == 0, err
    code, _, err = await aws(
        swf,
        "register-workflow-type",
        "--domain", "orders",
        "--name", "OrderWorkflow",
        "--workflow-version", "1.0",
        "--default-task-list", "name=orders-tl",
        "--default-task-start-to-close-timeout", "60",
        "--default-execution-start-to-close-timeout", "3600",
        "--default-child-policy", "TERMINATE",
    )  # fmt: skip
    assert code == 0, err
    code, _, err = await aws(
        swf,
        "register-activity-type",
        "--domain", "orders",
        "--name", "ChargeCard",
        "--activity-version", "1.0",
        "--default-task-list", "name=orders-tl",
        "--default-task-schedule-to-start-timeout", "60",
        "--default-task-start-to-close-timeout", "300",
    )  # fmt: skip
    assert code == 0, err

    code, out, err = await aws(swf, "describe-domain", "--name", "orders")
    assert code == 0, err
    described = json.loads(out)
    assert described["domainInfo"]["arn"] == "arn:aws:swf:eu-central-1:000000000000:/domain/orders"
    assert described["configuration"] == {"workflowExecutionRetentionPeriodInDays": "7"}

    code, out, err = await aws(swf, "list-domains", "--registration-status", "REGISTERED")
    assert code == 0, err
    assert [d["name"] for d in json.loads(out)["domainInfos"]] == ["orders"]
    code, out, err = await aws(
        swf,
        "describe-workflow-type",
        "--domain",
        "orders",
        "--workflow-type",
        "name=OrderWorkflow,version=1.0",
    )
    assert code == 0, err
    assert json.loads(out)["configuration"]["defaultTaskList"] == {"name": "orders-tl"}

    code, _, err = await aws(
        swf, "register-domain", "--name", "orders", "--workflow-execution-retention-period-in-days", "7"
    )
    assert code != 0 and "DomainAlreadyExistsFault" in err


async def test_aws_cli_reads_executions(swf: Swf) -> None:
    """The read actions as the CLI calls them, its own pagination (`--page-size`) following
    Foliot's page tokens to the end."""
    from .store_kit import decision, start

    code, _, err = await aws(
        swf, "register-domain", "--name", "orders", "--workflow-execution-retention-period-in-days", "7"
    )
    assert code == 0, err
    store = swf.running.engine.store
    now = swf.running.engine.clock.now() - 60_000
    for i in range(3):
        await start(store, f"order-{i}", f"run-{i}", now + i * 1000, region="eu-central-1", domain="orders")
    live = await start(store, "order-9", "run-9", now, region="eu-central-1", domain="orders")
    await live.decide(now + 1, *[decision("RecordMarker", markerName=f"m{i}") for i in range(4)])
    oldest = f"oldestDate={(now - 1000) // 1000}"

    code, out, err = await aws(
        swf,
        "list-open-workflow-executions",
        "--domain",
        "orders",
        "--start-time-filter",
        oldest,
        "--page-size",
        "1",
    )
    assert code == 0, err
    assert [i["execution"]["runId"] for i in json.loads(out)["executionInfos"]] == [
        "run-2",
        "run-1",
        "run-9",
        "run-0",
    ]
    code, out, err = await aws(
        swf,
        "get-workflow-execution-history",
        "--domain", "orders",
        "--execution", "workflowId=order-9,runId=run-9",
        "--page-size", "2",
    )  # fmt: skip
    assert code == 0, err
    assert [e["eventId"] for e in json.loads(out)["events"]] == list(range(1, live.ex.last_event_id + 1))
    code, out, err = await aws(
        swf, "count-pending-decision-tasks", "--domain", "orders", "--task-list", "name=deciders"
    )
    assert code == 0, err
    assert json.loads(out) == {"count": 3, "truncated": False}
    code, _, err = await aws(
        swf, "describe-workflow-execution", "--domain", "orders", "--execution", "workflowId=order-9,runId=x"
    )
    assert code != 0 and "UnknownResourceFault" in err
