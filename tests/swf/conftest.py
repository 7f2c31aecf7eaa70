"""A live Foliot (hypercorn on an ephemeral port, both stores) and real boto3 SWF clients.

boto3 is synchronous: each call runs on a worker thread (`trio.to_thread`), so the server keeps
serving on the test's Trio loop while the client waits on its socket. Retries are off, so a
fault reaches the test as the first answer.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import attrs
import boto3
import pytest
import trio
from botocore.config import Config

from foliot.server import Running, serve

from ..conftest import ADMIN, make_settings

PRESET_KEY, PRESET_SECRET = "FKIAPRESETKEY0000001", "preset/secret+0000000000000000000000000"


@attrs.define
class Swf:
    running: Running
    tmp: Path

    @property
    def url(self) -> str:
        return self.running.url

    def client(
        self,
        region: str = "us-east-1",
        key: str = PRESET_KEY,
        secret: str = PRESET_SECRET,
        *,
        validate: bool = True,
    ) -> Any:
        return boto3.client(
            "swf",
            endpoint_url=self.url,
            region_name=region,
            aws_access_key_id=key,
            aws_secret_access_key=secret,
            config=Config(
                retries={"max_attempts": 1, "mode": "standard"},
                parameter_validation=validate,
                connect_timeout=5,
                read_timeout=30,
            ),
        )


async def call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run one blocking boto3 call off the Trio thread."""
    with trio.fail_after(30):
        return await trio.to_thread.run_sync(lambda: fn(*args, **kwargs))


async def raises(code: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call, expecting the AWS error `code`; returns the botocore exception."""
    from botocore.exceptions import ClientError

    with pytest.raises(ClientError) as info:
        await call(fn, *args, **kwargs)
    assert info.value.response["Error"]["Code"] == code, info.value.response
    return info.value


@pytest.fixture
async def swf(tmp_path: Path, nursery: trio.Nursery, database_url: str) -> AsyncIterator[Swf]:
    settings = make_settings(
        tmp_path, database_url=database_url, swf_credentials=((PRESET_KEY, PRESET_SECRET),)
    )
    running: Running = await nursery.start(serve, settings)
    yield Swf(running, tmp_path)


def admin() -> dict[str, str]:
    return {"Authorization": f"Bearer {ADMIN}"}
