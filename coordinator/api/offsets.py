"""The offset APIs: OffsetCommit, answered once ZooKeeper confirms its write, and
OffsetFetch."""

from __future__ import annotations

import inspect
import math
import time
from collections import deque
from collections.abc import Mapping
from functools import partial

import trio

from protocol import ErrorCode, messages as m
from protocol.schemas import OFFSET_COMMIT, OFFSET_FETCH, TXN_OFFSET_COMMIT

from .. import metrics
from ..cluster.ownership import Owned
from ..security.acls.authorizer import Operation, ResourceType
from ..security.client import ANONYMOUS, Client
from ..serving.pending import Deferred, Pending
from ..store.errors import FAILURES as STORE_FAILURES, error_code as store_error_code
from ..store.pending import TxnKey
from .access import MAX_TOPIC_NAME, ApiPart

E = ErrorCode
MAX_OFFSET_METADATA = 4096  # characters: Kafka's offset.metadata.max.bytes
AUDIT_EVERY = 60.0  # seconds: one log line per group, principal and host, for commits outside a generation
AUDIT_KEYS = 10_000  # of those remembered at most (then forgotten all at once: a line each again)
CONFIRM_TIMEOUT = 5.0  # seconds a commit naming partitions the topic view lacks waits for the source to say
DEAD_TICKET_CHECK = 0.05  # seconds between looks at whether the commit ahead in line will ever run


class OffsetApi(ApiPart):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # (group, principal, host) -> (when last logged, commits since): `_audit_outside`
        self._outside: dict[tuple[str, str, str], tuple[float, int]] = {}
        # group -> its commits waiting on the topic source, and those behind them (`_commit_in_line`)
        self._lines: dict[str, deque[_Ticket]] = {}

    def handlers(self) -> dict:
        return {OFFSET_COMMIT.key: self.offset_commit, OFFSET_FETCH.key: self.offset_fetch,
                TXN_OFFSET_COMMIT.key: self.txn_offset_commit}

    async def txn_offset_commit(self, header, request, client):
        """TxnOffsetCommit: a transactional producer's offsets for a group, kept pending until
        its transaction's outcome is known (store/pending.py), checked as Kafka checks them:
        Write on the transactional id, Read on the group and each topic; each topic's name
        and existence as OffsetCommit's; from v3 (KIP-447) the member as OffsetCommit checks
        it (a member epoch in the generation's place for a consumer-protocol group, answered
        ILLEGAL_GENERATION when stale, as Kafka answers a transactional commit); a producer
        epoch older than one pending for the same transactional id and producer is a zombie's
        (PRODUCER_FENCED)."""
        def answer(error_of) -> m.TxnOffsetCommitResponse:
            return m.TxnOffsetCommitResponse(topics=[m.TxnOffsetCommitResponseTopic(name=t.name, partitions=[
                m.TxnOffsetCommitResponsePartition(partition_index=p.partition_index,
                                                   error_code=error_of(t.name, p.partition_index))
                for p in t.partitions]) for t in request.topics])

        if not self.allowed(client, Operation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id):
            return answer(lambda topic, p: E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        if not self.allowed(client, Operation.READ, ResourceType.GROUP, request.group_id):
            return answer(lambda topic, p: E.GROUP_AUTHORIZATION_FAILED)
        route = self.coordinator.route(request.group_id)
        if not isinstance(route, Owned):
            return answer(lambda topic, p: route)
        if route.pending is None:  # not served here (see ownership.Owned)
            return answer(lambda topic, p: E.UNSUPPORTED_VERSION)
        if sum(len(t.partitions) for t in request.topics) > self.coordinator.group_config.max_commit_partitions:
            return answer(lambda topic, p: E.INVALID_COMMIT_OFFSET_SIZE)
        refused = self._refused_topics(request.topics, client)
        for t in request.topics:
            for p in t.partitions:
                if p.committed_metadata is not None and len(p.committed_metadata) > MAX_OFFSET_METADATA:
                    refused.setdefault((t.name, p.partition_index), E.OFFSET_METADATA_TOO_LARGE)
        missing = missing_partitions(request.topics, refused, self.topics.partitions)
        unsure = unsure_topics(missing)
        counts = await self.topics.partition_counts(unsure, CONFIRM_TIMEOUT) if unsure else {}
        refused.update(existence_refusals(missing, counts))
        if all((t.name, p.partition_index) in refused for t in request.topics for p in t.partitions):
            return answer(lambda topic, p: refused[(topic, p)])
        route = self.coordinator.route(request.group_id)  # again: the source may have taken a while
        if not isinstance(route, Owned):
            return answer(lambda topic, p: refused.get((topic, p), route))
        if header.api_version >= 3 and (request.member_id or request.generation_id >= 0):
            error = route.groups.commit_check(request.group_id, request.member_id, request.generation_id,
                                              request.group_instance_id, member_epochs=True, transactional=True)
            if error != E.NONE:
                return answer(lambda topic, p: refused.get((topic, p), error))
        key = TxnKey(request.transactional_id, request.producer_id, request.producer_epoch)
        if route.pending.fenced_by(request.group_id, key) is not None:
            return answer(lambda topic, p: refused.get((topic, p), E.PRODUCER_FENCED))
        offsets = {(t.name, p.partition_index): (p.committed_offset, p.committed_leader_epoch, p.committed_metadata)
                   for t in request.topics for p in t.partitions if (t.name, p.partition_index) not in refused}
        markers = self.coordinator.markers
        # where the brokers will write this transaction's end for the group, should no gateway
        # instance record it (topics/markers.py): asked for its first offsets, before they are
        # answered, so before the producer can end the transaction
        marker_from = partial(markers.log_end, request.group_id) if markers is not None else None
        try:
            await route.pending.add(request.group_id, key, offsets, marker_from, budget_payer(client))
        except STORE_FAILURES as exc:
            code = store_error_code(exc)
            return answer(lambda topic, p: refused.get((topic, p), code))
        metrics.TXN_OFFSET_COMMITS.inc()
        self.coordinator.events.emit("transactional_offsets_pending", request.group_id,
                                     transactional_id=request.transactional_id, producer_id=request.producer_id,
                                     producer_epoch=request.producer_epoch, partitions=len(offsets))
        self.coordinator.on_pending(route, request.group_id, key)  # its outcome is watched for
        return answer(lambda topic, p: refused.get((topic, p), E.NONE))

    def offset_commit(self, header, request, client):
        """Kafka's order: the group's ACL, then each topic's name, ACL and existence (a
        partition refused there is answered so whatever the group's state, as Kafka answers
        before its coordinator is asked), then the member's generation or epoch for the rest."""
        answer = partial(_commit_answer, request)
        if not self.allowed(client, Operation.READ, ResourceType.GROUP, request.group_id):
            return answer(lambda topic, p: E.GROUP_AUTHORIZATION_FAILED)
        route = self.coordinator.route(request.group_id)
        if not isinstance(route, Owned):
            return answer(lambda topic, p: route)
        if sum(len(t.partitions) for t in request.topics) > self.coordinator.group_config.max_commit_partitions:
            return answer(lambda topic, p: E.INVALID_COMMIT_OFFSET_SIZE)
        refused = self._refused_topics(request.topics, client)
        line = self._line(request.group_id)
        missing = missing_partitions(request.topics, refused, self.topics.partitions)
        if line is None and not unsure_topics(missing):  # the view knows every topic named
            refused.update(dict.fromkeys(missing, E.UNKNOWN_TOPIC_OR_PARTITION))
            return self._store(header, request, client, route, refused)
        # a partition the view does not hold, or a commit of the group's waits already: in line
        if line is None:
            line = self._lines[request.group_id] = deque()
        ticket = _Ticket()
        line.append(ticket)
        ticket.coroutine = self._commit_in_line(ticket, line, header, request, client, refused)
        return ticket.coroutine

    def _refused_topics(self, topics, client: Client) -> dict[tuple[str, int], ErrorCode]:
        """The partitions of a commit's `topics` refused for their topic's name or ACL (Read),
        as Kafka refuses them before it looks at anything else."""
        refused = {}
        for t in topics:
            if len(t.name) > MAX_TOPIC_NAME:
                code = E.INVALID_TOPIC_EXCEPTION
            elif self.acls is not None and not self.allowed(client, Operation.READ, ResourceType.TOPIC, t.name):
                code = E.TOPIC_AUTHORIZATION_FAILED
            else:
                continue
            refused.update(dict.fromkeys(((t.name, p.partition_index) for p in t.partitions), code))
        return refused

    def _line(self, group_id: str) -> deque | None:
        """The group's commits waiting on the topic source, in the order they came, those
        whose task never ran (their connection closed first) dropped; None when none wait."""
        line = self._lines.get(group_id)
        while line and line[0].dead():
            line.popleft().done.set()
        if line is not None and not line:
            del self._lines[group_id]
            return None
        return line

    async def _commit_in_line(self, ticket: _Ticket, line: deque, header, request, client, refused: dict):
        """A commit behind others of its group, or naming partitions that the topic view does
        not hold: once its turn comes, the source is asked whether they exist now (a topic
        created a moment ago does), and the commit goes on as any other. Its turn ends once
        it is queued for its write, so the group's commits are written in the order they came."""
        try:
            while line[0] is not ticket:
                head = line[0]
                if head.dead():
                    line.popleft().done.set()
                    continue
                with trio.move_on_after(DEAD_TICKET_CHECK):  # a head whose task never ran never ends
                    await head.done.wait()
            missing = missing_partitions(request.topics, refused, self.topics.partitions)
            unsure = unsure_topics(missing)
            counts = await self.topics.partition_counts(unsure, CONFIRM_TIMEOUT) if unsure else {}
            refused.update(existence_refusals(missing, counts))
            result = self._store(header, request, client, self.coordinator.route(request.group_id), refused)
        finally:
            if line and line[0] is ticket:
                line.popleft()
            elif ticket in line:
                line.remove(ticket)
            ticket.done.set()
            if not line and self._lines.get(request.group_id) is line:
                del self._lines[request.group_id]
        if type(result) is Pending:
            resolved = trio.Event()
            made = []
            result.on_resolved(lambda answer: (made.append(answer), resolved.set()))
            await resolved.wait()
            return made[0]()
        return result

    def _store(self, header, request, client, route, refused: dict):
        """The commit's partitions not `refused` (partition -> error) checked against the
        group and stored; the answer, or a `Pending` one once ZooKeeper confirms the write."""
        answer = partial(_commit_answer, request)
        if all((t.name, p.partition_index) in refused for t in request.topics for p in t.partitions):
            return answer(lambda topic, p: refused[(topic, p)])  # Kafka does not ask its coordinator
        if not isinstance(route, Owned):
            return answer(lambda topic, p: refused.get((topic, p), route))
        error = route.groups.commit_check(request.group_id, request.member_id,
                                          request.generation_id_or_member_epoch, request.group_instance_id,
                                          member_epochs=header.api_version >= 9)
        if error != E.NONE:
            return answer(lambda topic, p: refused.get((topic, p), error))
        for t in request.topics:
            for p in t.partitions:
                if p.committed_metadata is not None and len(p.committed_metadata) > MAX_OFFSET_METADATA:
                    refused.setdefault((t.name, p.partition_index), E.OFFSET_METADATA_TOO_LARGE)
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
        stable = header.api_version >= 7 and request.require_stable
        if header.api_version >= 8:
            groups = [(g.group_id, await self._settled(g.group_id, client, g.member_id, g.member_epoch),
                       None if g.topics is None else [(t.name, t.partition_indexes) for t in g.topics])
                      for g in request.groups]
            return Deferred(partial(self._groups_answer, groups, client, stable))
        topics = None if request.topics is None else [(t.name, t.partition_indexes) for t in request.topics]
        route = await self._settled(request.group_id, client)
        return Deferred(partial(self._answer, header.api_version, route, request.group_id, topics, client, stable))

    def _groups_answer(self, groups, client: Client, stable: bool = False) -> m.OffsetFetchResponse:
        return m.OffsetFetchResponse(groups=[
            m.OffsetFetchResponseGroup(group_id=gid, error_code=error, topics=[
                m.OffsetFetchResponseTopics(name=name, partitions=[
                    m.OffsetFetchResponsePartitions(partition_index=p, committed_offset=o,
                                                    committed_leader_epoch=e, metadata=md, error_code=pe)
                    for p, o, e, md, pe in parts]) for name, parts in result])
            for gid, error, result in (self._fetch_group(gid, route, topics, client, stable)
                                       for gid, route, topics in groups)])

    def _answer(self, version: int, route, group_id: str, topics, client: Client,
                stable: bool = False) -> m.OffsetFetchResponse:
        _, error, result = self._fetch_group(group_id, route, topics, client, stable)
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

    def _fetch_group(self, group_id: str, route, topics, client: Client, stable: bool = False):
        """(group, error, [(topic, [(partition, offset, epoch, metadata, error)])]): of the
        topics the client may describe; those named that it may not, TOPIC_AUTHORIZATION_FAILED.
        `stable` (require_stable, KIP-447: read_committed consumers ask it): a partition with
        transactional offsets pending is answered UNSTABLE_OFFSET_COMMIT, which the client
        retries, so that it never starts from an offset its transaction may still abort."""
        if not isinstance(route, Owned):
            return group_id, route, [(name, [(p, -1, -1, "", route) for p in parts]) for name, parts in topics or []]
        committed = route.store.durable.get(group_id, {})
        unstable = route.pending.partitions(group_id) if stable and route.pending is not None else set()
        named = topics is not None
        if not named:  # all of them: those it may not describe left out
            names = set(committed) | {t for t, _ in unstable}
            topics = [(name, sorted(set(committed.get(name, ())) | {p for t, p in unstable if t == name}))
                      for name in sorted(names) if self.allowed(client, Operation.DESCRIBE, ResourceType.TOPIC, name)]
        result = []
        for name, parts in topics:
            if named and not self.allowed(client, Operation.DESCRIBE, ResourceType.TOPIC, name):
                result.append((name, [(p, -1, -1, "", E.TOPIC_AUTHORIZATION_FAILED) for p in parts]))
                continue
            have = committed.get(name, {})
            result.append((name, [(p, -1, -1, "", E.UNSTABLE_OFFSET_COMMIT) if (name, p) in unstable else
                                  (p, *(_entry(have[p]) if p in have else (-1, -1, "")), E.NONE)
                                  for p in parts]))
        return group_id, E.NONE, result


def budget_payer(client: Client) -> str:
    """Whom the ZooKeeper data a commit adds is charged to: its principal once authenticated,
    else its address (every unauthenticated client is User:ANONYMOUS)."""
    return client.principal if client.principal != ANONYMOUS else client.host


def _entry(entry) -> tuple[int, int, str | None]:
    return entry[0], entry[1], entry[2]  # (offset, epoch, metadata[, commit ms[, expiry ms]])


class _Ticket:
    """A commit's place in its group's line (`OffsetApi._commit_in_line`)."""
    __slots__ = ("coroutine", "done")

    def __init__(self):
        self.coroutine = None  # the commit's handler, run in a task of its connection's
        self.done = trio.Event()  # its turn is over

    def dead(self) -> bool:
        """Closed without ever running: its connection closed before its task started."""
        return self.coroutine is not None and inspect.getcoroutinestate(self.coroutine) == inspect.CORO_CLOSED


def _commit_answer(request, error_of) -> m.OffsetCommitResponse:
    return m.OffsetCommitResponse(topics=[m.OffsetCommitResponseTopic(name=t.name, partitions=[
        m.OffsetCommitResponsePartition(partition_index=p.partition_index,
                                        error_code=error_of(t.name, p.partition_index))
        for p in t.partitions]) for t in request.topics])


def missing_partitions(topics, refused: Mapping, partitions: Mapping[str, int]) -> list[tuple[str, int]]:
    """The partitions a commit names (`topics`: its request's) that are not refused already
    and that `partitions` (topic -> partition count: the topic view's) does not hold."""
    return [(t.name, p.partition_index) for t in topics for p in t.partitions
            if not 0 <= p.partition_index < partitions.get(t.name, 0) and (t.name, p.partition_index) not in refused]


def unsure_topics(missing) -> set[str]:
    """The topics whose existence is to be asked of the source: those of `missing` that
    could exist (a negative partition never does)."""
    return {topic for topic, p in missing if p >= 0}


def existence_refusals(missing, counts: Mapping[str, int] | None) -> dict[tuple[str, int], ErrorCode]:
    """What each of `missing` is answered once the source was asked (`counts`: topic ->
    partitions, 0 for none; None: it could not say): UNKNOWN_TOPIC_OR_PARTITION for what does
    not exist, as Kafka answers; COORDINATOR_LOAD_IN_PROGRESS, which clients retry, where the
    source could not say (never read, or unreachable), rather than refuse a partition that may
    exist; nothing for a partition that exists, which is stored."""
    refusals = {}
    for topic, p in missing:
        if p < 0:
            refusals[(topic, p)] = E.UNKNOWN_TOPIC_OR_PARTITION
        elif counts is None:
            refusals[(topic, p)] = E.COORDINATOR_LOAD_IN_PROGRESS
        elif p >= counts.get(topic, 0):
            refusals[(topic, p)] = E.UNKNOWN_TOPIC_OR_PARTITION
    return refusals
