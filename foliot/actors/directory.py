"""The request path's reads of apps, API keys, workflows and push targets, cached briefly.

Each read is fresh within a second (`TtlCache`) and dropped at once when this node changes it
(`forget_*`); a push target (the app's URL and live signing secrets) is kept at most 30 s and
never past the next secret's expiry, so an outgoing secret stops being used in time. A target
carries the app's weight and rate limit (`app_flow`), so a change made on another node applies
here within those 30 s (at once on the node that made it).
"""

from __future__ import annotations

import json
from collections import OrderedDict

from ..core.config import Settings
from ..core.credentials import Vault
from ..core.errors import NotFound
from ..core.limits import AppLimits, effective
from ..core.workflow.definition import Definition, parse_definition
from ..core.workflow.flow import RateLimit, app_bucket
from ..storage.base import ApiKeyRecord, AppRecord, Store, WorkflowRecord
from .cache import TtlCache
from .clock import Clock
from .dispatcher import Target

_DEFINITION_CACHE = 1024
_TARGET_TTL_MS = 30_000
_OPEN_RUNS_TTL_MS = 1_000  # an app's open-run count is read from storage at most this often


class Directory:
    def __init__(self, store: Store, clock: Clock, vault: Vault) -> None:
        self.store = store
        self.clock = clock
        self.vault = vault
        self._definitions: OrderedDict[tuple[str, str, int], Definition] = OrderedDict()
        self._targets: dict[str, tuple[int, Target]] = {}
        self._keys = TtlCache[str, ApiKeyRecord | None](clock.now)
        self._apps = TtlCache[str, AppRecord | None](clock.now)
        self._latest = TtlCache[tuple[str, str], WorkflowRecord | None](clock.now)
        self._limits = TtlCache[str, dict[str, int | float]](clock.now)
        self._open: dict[str, list[int]] = {}  # app -> [read until, open runs]

    async def maybe_definition(self, app: str, name: str, version: int) -> Definition | None:
        key = (app, name, version)
        cached = self._definitions.get(key)
        if cached is not None:
            self._definitions.move_to_end(key)
            return cached
        record = await self.store.get_workflow(app, name, version)
        if record is None:
            return None
        definition = parse_definition(json.loads(record.document))
        self._definitions[key] = definition
        if len(self._definitions) > _DEFINITION_CACHE:
            self._definitions.popitem(last=False)
        return definition

    async def definition(self, app: str, name: str, version: int) -> Definition:
        found = await self.maybe_definition(app, name, version)
        if found is None:
            raise NotFound(f"workflow {name!r} version {version} not found")
        return found

    async def target(self, app: str) -> Target:
        now = self.clock.now()
        cached = self._targets.get(app)
        if cached is not None and now < cached[0]:
            return cached[1]
        record = await self.store.get_app(app)
        if record is None:
            raise NotFound(f"app {app!r} not found")
        live = [
            s
            for s in reversed(await self.store.list_signing_secrets(app))
            if s.expires_at is None or s.expires_at > now
        ]
        flow = await self.store.get_app_flow(app)
        weight, rate = 1, None
        if flow is not None:
            weight = flow.weight
            if flow.rate_limit is not None and flow.rate_period_ms is not None:
                rate = app_bucket(app, RateLimit(flow.rate_limit, flow.rate_period_ms))
        secrets = tuple(self.vault.decrypt(s.secret_enc) for s in live)
        target = Target(record.handler_base_url, secrets, weight, rate)
        # Cache no longer than the next secret expiry, so the outgoing one stops in time.
        valid_until = min([now + _TARGET_TTL_MS] + [s.expires_at for s in live if s.expires_at is not None])
        # Expired entries go as new ones come, so apps no longer used are not kept forever.
        for name in [name for name, (until, _) in self._targets.items() if until <= now]:
            del self._targets[name]
        self._targets[app] = (valid_until, target)
        return target

    async def api_key(self, key_id: str) -> ApiKeyRecord | None:
        """An API key's record, at most `TtlCache` old (a revocation here applies at once)."""
        return await self._keys.get(key_id, lambda: self.store.get_api_key(key_id))

    async def app_record(self, app: str) -> AppRecord | None:
        return await self._apps.get(app, lambda: self.store.get_app(app))

    async def latest_workflow(self, app: str, name: str) -> WorkflowRecord | None:
        return await self._latest.get((app, name), lambda: self.store.get_workflow(app, name, None))

    async def resolve(self, app: str, name: str, version: int | None) -> tuple[Definition, int] | None:
        """A workflow's definition at `version` (None: its latest), with that version number;
        None when there is no such workflow or version."""
        if version is None:
            latest = await self.latest_workflow(app, name)
            if latest is None:
                return None
            version = latest.version
        definition = await self.maybe_definition(app, name, version)
        return None if definition is None else (definition, version)

    async def limits(self, app: str, settings: Settings) -> AppLimits:
        """The app's effective limits (`core/limits.py`): `settings` with the app's overrides,
        read at most once a second (at once on this node after it changed them)."""
        return effective(settings, await self._limits.get(app, lambda: self.store.get_app_limits(app)))

    async def open_runs(self, app: str) -> int:
        """The app's open runs: read from the `run_counts` counters at most once a second per
        app, plus the runs this node admitted since (`took_runs`). Other nodes' starts of that
        second are seen at the next read: the limit holds within about a second of starts."""
        now = self.clock.now()
        found = self._open.get(app)
        if found is not None and now < found[0]:
            return found[1]
        count = await self.store.open_runs_of(app)
        for name in [name for name, (until, _) in self._open.items() if until <= now]:
            del self._open[name]  # apps no longer starting are not kept
        self._open[app] = [now + _OPEN_RUNS_TTL_MS, count]
        return count

    def took_runs(self, app: str, n: int) -> None:
        """`n` runs of `app` admitted here: counted until the next read of the counters."""
        found = self._open.get(app)
        if found is not None:
            found[1] += n

    def forget_limits(self, app: str) -> None:
        self._limits.invalidate(app)

    def forget_api_key(self, key_id: str) -> None:
        self._keys.invalidate(key_id)

    def forget_app(self, app: str) -> None:
        """The app's URL or secrets changed: re-read them before the next push or request."""
        self._targets.pop(app, None)
        self._apps.invalidate(app)

    def forget_workflow(self, app: str, name: str) -> None:
        """A version was registered: the next start without `version` picks it."""
        self._latest.invalidate((app, name))
