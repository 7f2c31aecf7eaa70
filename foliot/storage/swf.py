"""What the SWF registry needs from a store: access keys, domains and types, all per region.

Both backends implement `SwfRegistryStore` (`swf_sqlite.py`, `swf_postgres.py`) and pass one
contract suite. Every method is one transaction; writes that depend on what is there (an
insert under a limit, a status change, a tag edit) are guarded inside that transaction and
answer what they found, so two callers can never both win.
"""

from __future__ import annotations

import enum
from typing import Any, Protocol

import attrs

REGISTERED = "REGISTERED"
DEPRECATED = "DEPRECATED"
WORKFLOW = "workflow"
ACTIVITY = "activity"


@attrs.frozen
class SwfCredential:
    access_key_id: str
    secret_enc: str
    created_at: int
    revoked_at: int | None = None


@attrs.frozen
class SwfDomain:
    region: str
    name: str
    status: str
    description: str | None
    retention_days: str
    tags: str  # JSON: [[key, value], ...] in the order they were first set
    created_at: int
    deprecated_at: int | None = None


@attrs.frozen
class SwfType:
    region: str
    domain: str
    kind: str  # WORKFLOW or ACTIVITY
    name: str
    version: str
    status: str
    description: str | None
    config: str  # JSON: the registered defaults, as sent
    created_at: int
    deprecated_at: int | None = None


class Insert(enum.Enum):
    """The outcome of a guarded registration."""

    OK = "ok"
    EXISTS = "exists"
    LIMIT = "limit"
    NO_DOMAIN = "no_domain"
    DOMAIN_DEPRECATED = "domain_deprecated"


class SwfRegistryStore(Protocol):
    # access keys
    async def add_swf_credential(self, credential: SwfCredential) -> None: ...

    async def get_swf_credential(self, access_key_id: str) -> SwfCredential | None: ...

    async def list_swf_credentials(self) -> list[SwfCredential]:
        """Live (unrevoked) keys, oldest first."""
        ...

    async def revoke_swf_credential(self, access_key_id: str, now: int) -> bool: ...

    # domains
    async def swf_insert_domain(self, domain: SwfDomain, max_domains: int) -> Insert:
        """OK, EXISTS (registered or deprecated), or LIMIT (the region holds `max_domains`)."""
        ...

    async def swf_get_domain(self, region: str, name: str) -> SwfDomain | None: ...

    async def swf_list_domains(
        self, region: str, status: str, after: str | None, reverse: bool, limit: int
    ) -> list[SwfDomain]:
        """Domains with `status`, by name (descending when `reverse`), strictly past `after`."""
        ...

    async def swf_set_domain_status(self, region: str, name: str, status: str, now: int) -> bool:
        """Move the domain to `status` from the other one; False when it was not in the other."""
        ...

    async def swf_replace_domain_tags(self, region: str, name: str, expected: str, tags: str) -> bool:
        """Set the tags where they still equal `expected` (compare-and-set)."""
        ...

    # types
    async def swf_insert_type(self, type_: SwfType, max_types: int) -> Insert:
        """OK, EXISTS, LIMIT (`max_types` of this kind in the domain), NO_DOMAIN or
        DOMAIN_DEPRECATED, checked in the same transaction as the insert."""
        ...

    async def swf_get_type(
        self, region: str, domain: str, kind: str, name: str, version: str
    ) -> SwfType | None: ...

    async def swf_list_types(
        self,
        region: str,
        domain: str,
        kind: str,
        status: str,
        name: str | None,
        after: tuple[str, str] | None,
        reverse: bool,
        limit: int,
    ) -> list[SwfType]:
        """Types by (name, version) (descending when `reverse`), strictly past `after`."""
        ...

    async def swf_set_type_status(
        self, region: str, domain: str, kind: str, name: str, version: str, status: str, now: int
    ) -> bool: ...

    async def swf_delete_type(self, region: str, domain: str, kind: str, name: str, version: str) -> bool:
        """Delete a DEPRECATED type; False when there is none in that state."""
        ...


def other_status(status: str) -> str:
    return DEPRECATED if status == REGISTERED else REGISTERED


def attrs_tuple(record: Any) -> tuple[Any, ...]:
    """A record's fields in declaration order: the column order of both backends' INSERTs."""
    return attrs.astuple(record, recurse=False)
