"""The offset APIs: OffsetCommit, answered once ZooKeeper confirms its write, and
OffsetFetch."""

from __future__ import annotations

import math
import time
from functools import partial

from protocol import ErrorCode, messages as m
from protocol.schemas import OFFSET_COMMIT, OFFSET_FETCH

from .. import metrics
from ..cluster.ownership import Owned
from ..security.acls.authorizer import Operation, ResourceType
from ..security.client import ANONYMOUS, Client
from ..serving.pending import Deferred, Pending
from ..store.errors import FAILURES as STORE_FAILURES, error_code as store_error_code
from .access import MAX_TOPIC_NAME, ApiPart

E = ErrorCode
MAX_OFFSET_METADATA = 4096  # characters: Kafka's offset.metadata.max.bytes
AUDIT_EVERY = 60.0  # seconds: one log line per group, principal and host, for commits outside a generation
AUDIT_KEYS = 10_000  # of those remembered at most (then forgotten all at once: a line each again)


class OffsetApi(ApiPart):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # (group, principal, host) -> (when last logged, commits since): `_audit_outside`
        self._outside: dict[tuple[str, str, str], tuple[float, int]] = {}

    def handlers(self) -> dict:
        return {OFFSET_COMMIT.key: self.offset_commit, OFFSET_FETCH.key: self.offset_fetch}

    def offset_commit(self, header, request, client):
        def answer(error_of):
            return m.OffsetCommitResponse(topics=[m.OffsetCommitResponseTopic(name=t.name, partitions=[
                m.OffsetCommitResponsePartition(partition_index=p.partition_index,
                                                error_code=error_of(t.name, p.partition_index))
                for p in t.partitions]) for t in request.topics])

        if not self.allowed(client, Operation.READ, ResourceType.GROUP, request.group_id):
            return answer(lambda topic, p: E.GROUP_AUTHORIZATION_FAILED)
        route = self.coordinator.route(request.group_id)
        if not isinstance(route, Owned):
            return answer(lambda topic, p: route)
        if sum(len(t.partitions) for t in request.topics) > self.coordinator.group_config.max_commit_partitions:
            return answer(lambda topic, p: E.INVALID_COMMIT_OFFSET_SIZE)
        error = route.groups.commit_check(request.group_id, request.member_id,
                                          request.generation_id_or_member_epoch, request.group_instance_id,
                                          member_epochs=header.api_version >= 9)
        if error != E.NONE:
            return answer(lambda topic, p: error)
        refused = {(t.name, p.partition_index): E.INVALID_TOPIC_EXCEPTION if len(t.name) > MAX_TOPIC_NAME
                   else E.OFFSET_METADATA_TOO_LARGE
                   for t in request.topics for p in t.partitions
                   if len(t.name) > MAX_TOPIC_NAME or (p.committed_metadata is not None
                                                       and len(p.committed_metadata) > MAX_OFFSET_METADATA)}
        if self.acls is not None:
            for t in request.topics:
                if not self.allowed(client, Operation.READ, ResourceType.TOPIC, t.name):
                    refused.update(dict.fromkeys(((t.name, p.partition_index) for p in t.partitions),
                                                 E.TOPIC_AUTHORIZATION_FAILED))
        now_ms = int(time.time() * 1000)
        # OffsetCommit v2-v4 may name how long the offsets are kept (retention_time_ms; -1: the
        # broker's offsets_retention_minutes): Kafka stores that as the entry's own expiry
        kept_ms = getattr(request, "retention_time_ms", -1) if header.api_version <= 4 else -1
        expiry = () if kept_ms is None or kept_ms < 0 else (now_ms + kept_ms,)
        entries = {(t.name, p.partition_index): (p.committed_offset, p.committed_leader_epoch,
                                                 p.committed_metadata, now_ms, *expiry)
                   for t in request.topics for p in t.partitions if (t.name, p.partition_index) not in refused}
        if not entries:
            return answer(lambda topic, p: refused.get((topic, p), E.NONE))
        pending, started = Pending(), time.perf_counter()

        def done(error: Exception | None) -> None:  # `entries` as it is once submitted (below)
            pending.resolve(partial(self._committed, request, entries, refused, answer, started, error, client,
                                    header.client_id))
        try:
            over = route.store.submit(request.group_id, entries, done, budget_payer(client))
        except STORE_FAILURES as exc:
            code = store_error_code(exc)
            return answer(lambda topic, p: refused.get((topic, p), code))  # a partition's own refusal stays
        if over:  # past the ZooKeeper data budget: these would have made its data larger, the others go on
            refused.update(dict.fromkeys(over, E.INVALID_COMMIT_OFFSET_SIZE))
            entries = {key: entry for key, entry in entries.items() if key not in refused}
        return pending

    def _committed(self, request, entries, refused, answer, started: float, error: Exception | None,
                   client: Client, client_id: str | None):
        """The second half of a commit: its answer once it is durable, or has failed."""
        if error is not None:
            code = store_error_code(error)
            return answer(lambda topic, p: refused.get((topic, p), code))
        metrics.OFFSET_COMMITS.inc()
        metrics.OFFSET_COMMIT_PARTITIONS.inc(len(entries))
        metrics.OFFSET_COMMIT_SECONDS.observe(time.perf_counter() - started)
        offsets = [{"topic": t, "partition": p, "offset": o} for (t, p), (o, *_) in entries.items()]
        generation = request.generation_id_or_member_epoch
        if generation < 0:  # outside any generation: a tool's reset (or a simple consumer): who, from where
            self.coordinator.events.emit("offsets_committed", request.group_id, generation=generation, member=None,
                                         offsets=offsets, principal=client.principal, host=client.host,
                                         client_id=client_id)
            self._audit_outside(request.group_id, client, client_id, len(entries))
        else:
            self.coordinator.events.emit("offsets_committed", request.group_id, generation=generation,
                                         member=request.member_id or None, offsets=offsets)
        return answer(lambda topic, p: refused.get((topic, p), E.NONE))

    def _audit_outside(self, group_id: str, client: Client, client_id: str | None, partitions: int) -> None:
        """A log line for offsets set outside any generation (`groupkeeper groups
        reset-offsets`, kafka-consumer-groups.sh, an admin client's alterConsumerGroupOffsets),
        at most one a minute per group, principal and host, counting those in between: a simple
        consumer (assign() and commit) commits this way too, and must not flood the log. Every
        one is in the event log."""
        key = (group_id, client.principal, client.host)
        now = time.monotonic()
        last, count = self._outside.get(key, (-math.inf, 0))
        if now - last < AUDIT_EVERY:
            self._outside[key] = (last, count + 1)
            return
        if len(self._outside) >= AUDIT_KEYS:
            self._outside.clear()
        self._outside[key] = (now, 0)
        self.log.info("offsets set outside a generation", group=group_id, partitions=partitions,
                      principal=client.principal, host=client.host, client_id=client_id,
                      since_last=count)

    async def offset_fetch(self, header, request, client):
        """Authorized, routed and settled here; the answer, megabytes for a group of many
        partitions (and a v8 request may name a group many times), is made by the connection
        once its client has room for it (`Deferred`), from what is durable then."""
        if header.api_version >= 8:
            groups = [(g.group_id, await self._settled(g.group_id, client, g.member_id, g.member_epoch),
                       None if g.topics is None else [(t.name, t.partition_indexes) for t in g.topics])
                      for g in request.groups]
            return Deferred(partial(self._groups_answer, groups, client))
        topics = None if request.topics is None else [(t.name, t.partition_indexes) for t in request.topics]
        route = await self._settled(request.group_id, client)
        return Deferred(partial(self._answer, header.api_version, route, request.group_id, topics, client))

    def _groups_answer(self, groups, client: Client) -> m.OffsetFetchResponse:
        return m.OffsetFetchResponse(groups=[
            m.OffsetFetchResponseGroup(group_id=gid, error_code=error, topics=[
                m.OffsetFetchResponseTopics(name=name, partitions=[
                    m.OffsetFetchResponsePartitions(partition_index=p, committed_offset=o,
                                                    committed_leader_epoch=e, metadata=md, error_code=pe)
                    for p, o, e, md, pe in parts]) for name, parts in result])
            for gid, error, result in (self._fetch_group(gid, route, topics, client) for gid, route, topics in groups)])

    def _answer(self, version: int, route, group_id: str, topics, client: Client) -> m.OffsetFetchResponse:
        _, error, result = self._fetch_group(group_id, route, topics, client)
        return m.OffsetFetchResponse(error_code=error, topics=[
            m.OffsetFetchResponseTopic(name=name, partitions=[
                m.OffsetFetchResponsePartition(partition_index=p, committed_offset=o, committed_leader_epoch=e,
                                               metadata=md, error_code=pe if version >= 2 or error == E.NONE else error)
                for p, o, e, md, pe in parts]) for name, parts in result])

    async def _settled(self, group_id: str, client: Client, member_id: str | None = None, member_epoch: int = -1):
        """Where `group_id`'s offsets are read (`Owned`), settled; or the error that answers
        for them. A consumer group's member (v9+) is answered only at its current epoch."""
        route = (self.coordinator.route(group_id) if self.allowed(client, Operation.DESCRIBE, ResourceType.GROUP, group_id)
                 else E.GROUP_AUTHORIZATION_FAILED)
        if isinstance(route, Owned) and (refused := route.groups.fetch_check(group_id, member_id, member_epoch)):
            route = refused
        if isinstance(route, Owned):
            try:  # a write of the group's whose outcome is unknown is read back first
                await route.store.settle(group_id)
            except STORE_FAILURES as exc:
                route = store_error_code(exc)
        return route

    def _fetch_group(self, group_id: str, route, topics, client: Client):
        """(group, error, [(topic, [(partition, offset, epoch, metadata, error)])]): of the
        topics the client may describe; those named that it may not, TOPIC_AUTHORIZATION_FAILED."""
        if not isinstance(route, Owned):
            return group_id, route, [(name, [(p, -1, -1, "", route) for p in parts]) for name, parts in topics or []]
        committed = route.store.durable.get(group_id, {})
        named = topics is not None
        if not named:  # all of them: those it may not describe left out
            topics = [(name, sorted(parts)) for name, parts in sorted(committed.items())
                      if self.allowed(client, Operation.DESCRIBE, ResourceType.TOPIC, name)]
        result = []
        for name, parts in topics:
            if named and not self.allowed(client, Operation.DESCRIBE, ResourceType.TOPIC, name):
                result.append((name, [(p, -1, -1, "", E.TOPIC_AUTHORIZATION_FAILED) for p in parts]))
                continue
            have = committed.get(name, {})
            result.append((name, [(p, *(_entry(have[p]) if p in have else (-1, -1, "")), E.NONE)
                                  for p in parts]))
        return group_id, E.NONE, result


def budget_payer(client: Client) -> str:
    """Whom the ZooKeeper data a commit adds is charged to: its principal once authenticated,
    else its address (every unauthenticated client is User:ANONYMOUS)."""
    return client.principal if client.principal != ANONYMOUS else client.host


def _entry(entry) -> tuple[int, int, str | None]:
    return entry[0], entry[1], entry[2]  # (offset, epoch, metadata[, commit ms[, expiry ms]])
