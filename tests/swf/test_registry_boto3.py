"""Every registry action through a real boto3 client against a live Foliot, on both stores:
each fault raised as botocore's own exception class, pages, order, region isolation."""

from __future__ import annotations

import datetime as dt
from typing import Any

from .conftest import Swf, call, raises


def names(infos: list[dict[str, Any]]) -> list[str]:
    return [i["name"] for i in infos]


async def test_domain_lifecycle(swf: Swf) -> None:
    c = swf.client()
    await call(
        c.register_domain, name="orders", description="the shop", workflowExecutionRetentionPeriodInDays="7"
    )
    found = await call(c.describe_domain, name="orders")
    assert found["domainInfo"] == {
        "name": "orders",
        "status": "REGISTERED",
        "description": "the shop",
        "arn": "arn:aws:swf:us-east-1:000000000000:/domain/orders",
    }
    assert found["configuration"] == {"workflowExecutionRetentionPeriodInDays": "7"}

    try:
        await call(c.register_domain, name="orders", workflowExecutionRetentionPeriodInDays="1")
        raise AssertionError("a second registration must fail")
    except c.exceptions.DomainAlreadyExistsFault as fault:
        assert fault.response["ResponseMetadata"]["HTTPStatusCode"] == 400

    await call(c.deprecate_domain, name="orders")
    assert (await call(c.describe_domain, name="orders"))["domainInfo"]["status"] == "DEPRECATED"
    await raises("DomainDeprecatedFault", c.deprecate_domain, name="orders")
    await raises(
        "DomainAlreadyExistsFault",
        c.register_domain,
        name="orders",
        workflowExecutionRetentionPeriodInDays="1",
    )
    await call(c.undeprecate_domain, name="orders")
    await raises("DomainAlreadyExistsFault", c.undeprecate_domain, name="orders")
    for action in (c.describe_domain, c.deprecate_domain, c.undeprecate_domain):
        await raises("UnknownResourceFault", action, name="nope")


async def test_fault_classes_are_botocore_exceptions(swf: Swf) -> None:
    c = swf.client()
    await call(c.register_domain, name="d", workflowExecutionRetentionPeriodInDays="NONE")
    for cls, fn, kwargs in [
        (c.exceptions.UnknownResourceFault, c.describe_domain, {"name": "x"}),
        (
            c.exceptions.DomainAlreadyExistsFault,
            c.register_domain,
            {"name": "d", "workflowExecutionRetentionPeriodInDays": "1"},
        ),
        (
            c.exceptions.TypeNotDeprecatedFault,
            c.delete_workflow_type,
            {"domain": "d", "workflowType": {"name": "w", "version": "1"}},
        ),
    ]:
        if cls is c.exceptions.TypeNotDeprecatedFault:
            await call(c.register_workflow_type, domain="d", name="w", version="1")
        try:
            await call(fn, **kwargs)
        except cls as fault:
            assert fault.response["Error"]["Message"]
        else:
            raise AssertionError(f"{cls.__name__} expected")


async def test_list_domains_status_order_and_pages(swf: Swf) -> None:
    c = swf.client()
    all_names = [f"dom-{i:02}" for i in range(7)]
    for name in reversed(all_names):
        await call(c.register_domain, name=name, workflowExecutionRetentionPeriodInDays="1")
    await call(c.deprecate_domain, name="dom-03")
    live = [n for n in all_names if n != "dom-03"]

    assert names((await call(c.list_domains, registrationStatus="REGISTERED"))["domainInfos"]) == live
    listed = await call(c.list_domains, registrationStatus="REGISTERED", reverseOrder=True)
    assert names(listed["domainInfos"]) == live[::-1]
    assert "nextPageToken" not in listed
    deprecated = await call(c.list_domains, registrationStatus="DEPRECATED")
    assert names(deprecated["domainInfos"]) == ["dom-03"]

    seen: list[str] = []
    token = None
    while True:
        kwargs: dict[str, Any] = {
            "registrationStatus": "REGISTERED",
            "maximumPageSize": 4,
            "reverseOrder": True,
        }
        if token:
            kwargs["nextPageToken"] = token
        page = await call(c.list_domains, **kwargs)
        assert len(page["domainInfos"]) <= 4
        seen += names(page["domainInfos"])
        token = page.get("nextPageToken")
        if not token:
            break
    assert seen == live[::-1]

    paginator = c.get_paginator("list_domains")
    pages = await call(
        lambda: list(paginator.paginate(registrationStatus="REGISTERED", PaginationConfig={"PageSize": 2}))
    )
    assert len(pages) == 3 and [n for p in pages for n in names(p["domainInfos"])] == live

    first = await call(c.list_domains, registrationStatus="REGISTERED", maximumPageSize=2)
    # A token is bound to the arguments that made it.
    await raises(
        "ValidationException",
        c.list_domains,
        registrationStatus="DEPRECATED",
        nextPageToken=first["nextPageToken"],
    )
    await raises(
        "ValidationException", c.list_domains, registrationStatus="REGISTERED", nextPageToken="garbage"
    )


async def test_tags(swf: Swf) -> None:
    c = swf.client()
    await call(
        c.register_domain,
        name="tagged",
        workflowExecutionRetentionPeriodInDays="1",
        tags=[{"key": "team", "value": "shop"}, {"key": "env"}],
    )
    arn = (await call(c.describe_domain, name="tagged"))["domainInfo"]["arn"]
    assert (await call(c.list_tags_for_resource, resourceArn=arn))["tags"] == [
        {"key": "team", "value": "shop"},
        {"key": "env", "value": ""},
    ]
    await call(
        c.tag_resource, resourceArn=arn, tags=[{"key": "team", "value": "ops"}, {"key": "tier", "value": "1"}]
    )
    await call(c.untag_resource, resourceArn=arn, tagKeys=["env", "absent"])
    assert (await call(c.list_tags_for_resource, resourceArn=arn))["tags"] == [
        {"key": "team", "value": "ops"},
        {"key": "tier", "value": "1"},
    ]

    many = [{"key": f"k{i}", "value": "v"} for i in range(49)]
    try:
        await call(c.tag_resource, resourceArn=arn, tags=many)
    except c.exceptions.TooManyTagsFault:
        pass
    else:
        raise AssertionError("51 tags must be refused")
    assert len((await call(c.list_tags_for_resource, resourceArn=arn))["tags"]) == 2  # nothing stored
    await call(c.tag_resource, resourceArn=arn, tags=many[:48])
    assert len((await call(c.list_tags_for_resource, resourceArn=arn))["tags"]) == 50

    await raises(
        "TooManyTagsFault",
        c.register_domain,
        name="crowded",
        workflowExecutionRetentionPeriodInDays="1",
        tags=[{"key": f"k{i}"} for i in range(51)],
    )
    await raises("UnknownResourceFault", c.describe_domain, name="crowded")
    await raises("UnknownResourceFault", c.list_tags_for_resource, resourceArn=arn.replace("tagged", "nope"))
    await raises(
        "UnknownResourceFault",
        c.tag_resource,
        resourceArn=arn.replace("us-east-1", "eu-west-1"),
        tags=many[:1],
    )
    await raises(
        "OperationNotPermittedFault",
        c.untag_resource,
        resourceArn=arn.replace("000000000000", "123456789012"),
        tagKeys=["a"],
    )
    await raises(
        "ValidationException", c.list_tags_for_resource, resourceArn="arn:aws:sqs:us-east-1:000000000000:q"
    )
    await raises("ValidationException", c.tag_resource, resourceArn=arn, tags=[{"key": "bad<char>"}])


async def test_workflow_types(swf: Swf) -> None:
    c = swf.client()
    await call(c.register_domain, name="d", workflowExecutionRetentionPeriodInDays="3")
    before = dt.datetime.now(dt.UTC)
    await call(
        c.register_workflow_type,
        domain="d",
        name="Order",
        version="1.0",
        description="orders",
        defaultTaskList={"name": "deciders"},
        defaultTaskStartToCloseTimeout="60",
        defaultExecutionStartToCloseTimeout="3600",
        defaultChildPolicy="TERMINATE",
        defaultTaskPriority="5",
        defaultLambdaRole="arn:aws:iam::000000000000:role/lambda",
    )
    detail = await call(
        c.describe_workflow_type, domain="d", workflowType={"name": "Order", "version": "1.0"}
    )
    info = detail["typeInfo"]
    assert info["workflowType"] == {"name": "Order", "version": "1.0"}
    assert (info["status"], info["description"]) == ("REGISTERED", "orders")
    assert abs((info["creationDate"] - before).total_seconds()) < 60
    assert "deprecationDate" not in info
    assert detail["configuration"] == {
        "defaultTaskList": {"name": "deciders"},
        "defaultTaskStartToCloseTimeout": "60",
        "defaultExecutionStartToCloseTimeout": "3600",
        "defaultChildPolicy": "TERMINATE",
        "defaultTaskPriority": "5",
        "defaultLambdaRole": "arn:aws:iam::000000000000:role/lambda",
    }
    await raises("TypeAlreadyExistsFault", c.register_workflow_type, domain="d", name="Order", version="1.0")
    await raises("UnknownResourceFault", c.register_workflow_type, domain="nope", name="Order", version="1.0")
    await raises(
        "UnknownResourceFault",
        c.describe_workflow_type,
        domain="d",
        workflowType={"name": "Order", "version": "2"},
    )

    for name, version in [("Order", "2.0"), ("Billing", "1"), ("Zeta", "1"), ("Order", "1.5")]:
        await call(c.register_workflow_type, domain="d", name=name, version=version)
    listed = await call(c.list_workflow_types, domain="d", registrationStatus="REGISTERED")
    keys = [(t["workflowType"]["name"], t["workflowType"]["version"]) for t in listed["typeInfos"]]
    assert keys == [("Billing", "1"), ("Order", "1.0"), ("Order", "1.5"), ("Order", "2.0"), ("Zeta", "1")]
    only = await call(
        c.list_workflow_types, domain="d", name="Order", registrationStatus="REGISTERED", reverseOrder=True
    )
    assert [t["workflowType"]["version"] for t in only["typeInfos"]] == ["2.0", "1.5", "1.0"]
    paged = await call(
        lambda: list(
            c.get_paginator("list_workflow_types").paginate(
                domain="d", registrationStatus="REGISTERED", PaginationConfig={"PageSize": 2}
            )
        )
    )
    assert [
        (t["workflowType"]["name"], t["workflowType"]["version"]) for p in paged for t in p["typeInfos"]
    ] == keys
    assert len(paged) == 3

    ref = {"name": "Order", "version": "1.0"}
    await raises("TypeNotDeprecatedFault", c.delete_workflow_type, domain="d", workflowType=ref)
    await call(c.deprecate_workflow_type, domain="d", workflowType=ref)
    await raises("TypeDeprecatedFault", c.deprecate_workflow_type, domain="d", workflowType=ref)
    deprecated = await call(c.describe_workflow_type, domain="d", workflowType=ref)
    assert deprecated["typeInfo"]["status"] == "DEPRECATED" and "deprecationDate" in deprecated["typeInfo"]
    gone = await call(c.list_workflow_types, domain="d", registrationStatus="DEPRECATED")
    assert [t["workflowType"] for t in gone["typeInfos"]] == [ref]
    await call(c.undeprecate_workflow_type, domain="d", workflowType=ref)
    await raises("TypeAlreadyExistsFault", c.undeprecate_workflow_type, domain="d", workflowType=ref)
    await call(c.deprecate_workflow_type, domain="d", workflowType=ref)
    await call(c.delete_workflow_type, domain="d", workflowType=ref)
    await raises("UnknownResourceFault", c.describe_workflow_type, domain="d", workflowType=ref)
    await raises("UnknownResourceFault", c.delete_workflow_type, domain="d", workflowType=ref)
    await raises("UnknownResourceFault", c.undeprecate_workflow_type, domain="d", workflowType=ref)
    await raises(
        "UnknownResourceFault", c.list_workflow_types, domain="nope", registrationStatus="REGISTERED"
    )

    await call(c.deprecate_domain, name="d")
    await raises("DomainDeprecatedFault", c.register_workflow_type, domain="d", name="New", version="1")


async def test_activity_types(swf: Swf) -> None:
    c = swf.client()
    await call(c.register_domain, name="d", workflowExecutionRetentionPeriodInDays="3")
    await call(
        c.register_activity_type,
        domain="d",
        name="Charge",
        version="1",
        defaultTaskList={"name": "workers"},
        defaultTaskScheduleToStartTimeout="60",
        defaultTaskStartToCloseTimeout="300",
        defaultTaskScheduleToCloseTimeout="NONE",
        defaultTaskHeartbeatTimeout="30",
        defaultTaskPriority="-3",
    )
    ref = {"name": "Charge", "version": "1"}
    detail = await call(c.describe_activity_type, domain="d", activityType=ref)
    assert detail["typeInfo"]["activityType"] == ref
    assert detail["configuration"] == {
        "defaultTaskList": {"name": "workers"},
        "defaultTaskScheduleToStartTimeout": "60",
        "defaultTaskStartToCloseTimeout": "300",
        "defaultTaskScheduleToCloseTimeout": "NONE",
        "defaultTaskHeartbeatTimeout": "30",
        "defaultTaskPriority": "-3",
    }
    await raises("TypeAlreadyExistsFault", c.register_activity_type, domain="d", name="Charge", version="1")
    # A workflow type of the same name and version is another thing.
    await call(c.register_workflow_type, domain="d", name="Charge", version="1")
    listed = await call(c.list_activity_types, domain="d", registrationStatus="REGISTERED")
    assert [t["activityType"] for t in listed["typeInfos"]] == [ref]
    await raises("TypeNotDeprecatedFault", c.delete_activity_type, domain="d", activityType=ref)
    await call(c.deprecate_activity_type, domain="d", activityType=ref)
    await raises("TypeDeprecatedFault", c.deprecate_activity_type, domain="d", activityType=ref)
    await call(c.undeprecate_activity_type, domain="d", activityType=ref)
    await raises("TypeAlreadyExistsFault", c.undeprecate_activity_type, domain="d", activityType=ref)
    await call(c.deprecate_activity_type, domain="d", activityType=ref)
    await call(c.delete_activity_type, domain="d", activityType=ref)
    await raises("UnknownResourceFault", c.describe_activity_type, domain="d", activityType=ref)
    await call(c.describe_workflow_type, domain="d", workflowType=ref)  # untouched


async def test_regions_are_isolated(swf: Swf) -> None:
    east, west = swf.client("us-east-1"), swf.client("eu-west-1")
    await call(
        east.register_domain, name="shared", description="east", workflowExecutionRetentionPeriodInDays="1"
    )
    await raises("UnknownResourceFault", west.describe_domain, name="shared")
    await call(
        west.register_domain, name="shared", description="west", workflowExecutionRetentionPeriodInDays="2"
    )
    await call(west.register_domain, name="west-only", workflowExecutionRetentionPeriodInDays="2")
    east_view = await call(east.describe_domain, name="shared")
    west_view = await call(west.describe_domain, name="shared")
    assert east_view["domainInfo"]["description"] == "east"
    assert west_view["domainInfo"]["arn"] == "arn:aws:swf:eu-west-1:000000000000:/domain/shared"
    assert names((await call(east.list_domains, registrationStatus="REGISTERED"))["domainInfos"]) == [
        "shared"
    ]
    assert names((await call(west.list_domains, registrationStatus="REGISTERED"))["domainInfos"]) == [
        "shared",
        "west-only",
    ]
    await call(east.register_workflow_type, domain="shared", name="w", version="1")
    await raises(
        "UnknownResourceFault",
        west.describe_workflow_type,
        domain="shared",
        workflowType={"name": "w", "version": "1"},
    )
    await call(west.deprecate_domain, name="shared")
    assert (await call(east.describe_domain, name="shared"))["domainInfo"]["status"] == "REGISTERED"


async def test_registry_is_in_the_database(tmp_path: Any, database_url: str) -> None:
    import functools

    import trio

    from foliot.server import serve

    from ..conftest import make_settings
    from .conftest import PRESET_KEY, PRESET_SECRET, Swf

    settings = make_settings(
        tmp_path, database_url=database_url, swf_credentials=((PRESET_KEY, PRESET_SECRET),)
    )
    async with trio.open_nursery() as nursery:
        stop = trio.Event()
        first = Swf(await nursery.start(functools.partial(serve, settings, stop=stop)), tmp_path)
        c = first.client()
        await call(
            c.register_domain,
            name="kept",
            workflowExecutionRetentionPeriodInDays="5",
            tags=[{"key": "a", "value": "b"}],
        )
        await call(
            c.register_activity_type, domain="kept", name="A", version="1", defaultTaskList={"name": "l"}
        )
        stop.set()  # the first process drains and stops (SQLite is single-node)
    async with trio.open_nursery() as nursery:
        second = Swf(await nursery.start(serve, settings), tmp_path)  # a new process, same database
        c2 = second.client()
        assert (await call(c2.describe_domain, name="kept"))["configuration"] == {
            "workflowExecutionRetentionPeriodInDays": "5"
        }
        detail = await call(
            c2.describe_activity_type, domain="kept", activityType={"name": "A", "version": "1"}
        )
        assert detail["configuration"] == {"defaultTaskList": {"name": "l"}}
        nursery.cancel_scope.cancel()
