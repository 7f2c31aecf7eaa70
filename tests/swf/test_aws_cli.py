"""The AWS CLI (`awscli` from PyPI) against a live Foliot: docs/swf.md's example run as
written, the seed document's registration example, a listing, and a fault as the CLI shows it."""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

from .conftest import PRESET_KEY, PRESET_SECRET, Swf

pytestmark = pytest.mark.e2e


ROOT = Path(__file__).resolve().parents[2]


def aws_binary() -> str:
    binary = shutil.which("aws", path=str(Path(sys.executable).parent))
    if binary is None:
        pytest.fail("awscli is a dev dependency; reinstall with .[dev]")
    return binary


def cli_env(swf: Swf) -> dict[str, str]:
    return {
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


async def aws(swf: Swf, *args: str) -> tuple[int, str, str]:
    with trio.fail_after(60):
        done = await trio.run_process(
            [aws_binary(), "--endpoint-url", swf.url, "--output", "json", "swf", *args],
            env=cli_env(swf),
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    return done.returncode, done.stdout.decode(), done.stderr.decode()


@pytest.fixture
def database_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'foliot.db'}"  # one store: the CLI adds nothing store-specific


def docs_example() -> str:
    """The shell blocks of docs/swf.md's "The AWS CLI" section, in order, as one script."""
    text = (ROOT / "docs" / "swf.md").read_text()
    section = text[text.index("### The AWS CLI\n") : text.index("\n## Regions\n")]
    blocks = re.findall(r"```sh\n(.*?)```", section, re.S)
    assert len(blocks) == 3, "the section's three blocks: registration, one execution, reading"
    return "\n".join(blocks)


async def test_the_docs_example_runs_as_written(swf: Swf) -> None:
    """Issue 26, point 17: the example registers an activity type a decision can schedule by
    its type alone; the commands run in one shell as the page gives them, only the endpoint
    and the key filled in."""
    script = docs_example()
    assert script.count("FKIA…") == 1 and script.count("AWS_SECRET_ACCESS_KEY=…") == 1
    script = script.replace("FKIA…", PRESET_KEY).replace(
        "AWS_SECRET_ACCESS_KEY=…", f"AWS_SECRET_ACCESS_KEY={PRESET_SECRET}"
    )
    script = script.replace("http://127.0.0.1:8080", swf.url)
    assert "…" not in script
    env = {**cli_env(swf), "PATH": f"{Path(aws_binary()).parent}:{os.environ.get('PATH', '')}"}
    del env["AWS_DEFAULT_REGION"]  # the script's own export sets it
    with trio.fail_after(120):
        done = await trio.run_process(
            ["bash", "-euo", "pipefail", "-c", script],
            env=env,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    out, err = done.stdout.decode(), done.stderr.decode()
    assert done.returncode == 0, err

    # What the page's last commands printed: the history, and the next decision task pending.
    decoded = json.JSONDecoder()
    answers: list[Any] = []
    rest = out.lstrip()
    while rest:
        value, end = decoded.raw_decode(rest)
        answers.append(value)
        rest = rest[end:].lstrip()
    history = next(a for a in answers if "events" in a)
    types = [e["eventType"] for e in history["events"]]
    assert "ScheduleActivityTaskFailed" not in types
    assert types[-4:] == [
        "ActivityTaskScheduled",
        "ActivityTaskStarted",
        "ActivityTaskCompleted",
        "DecisionTaskScheduled",
    ]
    scheduled = history["events"][-4]["activityTaskScheduledEventAttributes"]
    assert scheduled["scheduleToCloseTimeout"] == "360" and scheduled["heartbeatTimeout"] == "NONE"
    assert scheduled["taskList"] == {"name": "charge-tl"}
    assert answers[-1] == {"count": 1, "truncated": False}


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
