"""The group APIs: membership of classic groups (JoinGroup, SyncGroup, Heartbeat,
LeaveGroup) and of consumer-protocol groups (ConsumerGroupHeartbeat, ConsumerGroupDescribe),
and their administration (ListGroups, DescribeGroups, DeleteGroups)."""

from __future__ import annotations

from collections.abc import Callable

from protocol import ErrorCode, messages as m
from protocol.hot import heartbeat_answer, read_heartbeat
from protocol.hot_consumer import consumer_heartbeat_answer, read_consumer_heartbeat
from protocol.schemas import (CONSUMER_GROUP_DESCRIBE, CONSUMER_GROUP_HEARTBEAT, DELETE_GROUPS, DESCRIBE_GROUPS,
                              OFFSET_DELETE,
                              HEARTBEAT, JOIN_GROUP, LEAVE_GROUP, LIST_GROUPS, SYNC_GROUP)

from ..cluster.ownership import Owned
from ..groups.consumer_group import STATIC_LEAVE_EPOCH, by_topic
from ..groups.retention import consumer_subscribed, subscribed
from ..groups.state import GroupState
from ..security.acls.authorizer import CLUSTER_NAME, Operation, ResourceType
from ..security.client import Client
from ..store.errors import FAILURES as STORE_FAILURES, error_code as store_error_code
from ..topics.view import NO_TOPIC_ID
from .access import MAX_TOPIC_NAME, ApiPart

MAX_DESCRIBERS = 10_000  # clients (principal, host) whose topic decider is kept

E = ErrorCode
CLASSIC_MEMBER, CONSUMER_MEMBER = 0, 1  # ConsumerGroupDescribe v1's member types (KIP-1099)
MAX_SUBSCRIBED_TOPICS = 10_000  # names in one consumer-protocol member's subscription
MAX_TOPIC_REGEX = 4096  # characters of a consumer-protocol member's subscription expression
# what a ConsumerGroupDescribe says of a group whose assignments name a topic the client may not describe
HIDDEN_TOPICS = "The group has topics the client is not authorized to describe."


class GroupApi(ApiPart):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # (principal, host) -> (the authorizer, whether that client may describe a topic): what a
        # regex member's matches are filtered by, the same object while the ACLs stay
        self._describers: dict[tuple[str, str], tuple[object, Callable[[str], bool]]] = {}
        # a group's status by Burrow's rules, from its committed offsets (`cluster.lag.CommitWindows`,
        # set by the daemon when lag is measured): the `groupkeeper_status` extension of describes
        self.status_of: Callable[[str, dict], str | None] = lambda group_id, offsets: None
        # through the gateway: the brokers' share groups (KIP-932), listed on their node ports and
        # deleted where groupkeeper has no such group (`gateway.cluster.ShareGroupAdmin`); else None
        self.share_groups = None

    def handlers(self) -> dict:
        return {JOIN_GROUP.key: self.join_group, SYNC_GROUP.key: self.sync_group, HEARTBEAT.key: self.heartbeat,
                LEAVE_GROUP.key: self.leave_group, CONSUMER_GROUP_HEARTBEAT.key: self.consumer_group_heartbeat,
                CONSUMER_GROUP_DESCRIBE.key: self.consumer_group_describe, LIST_GROUPS.key: self.list_groups,
                DESCRIBE_GROUPS.key: self.describe_groups, DELETE_GROUPS.key: self.delete_groups,
                OFFSET_DELETE.key: self.offset_delete}

    async def join_group(self, header, request, client):
        if not self.allowed(client, Operation.READ, ResourceType.GROUP, request.group_id):
            return m.JoinGroupResponse(error_code=E.GROUP_AUTHORIZATION_FAILED, member_id=request.member_id)
        route = self.coordinator.route(request.group_id, empty_ok=False)
        if not isinstance(route, Owned):
            return m.JoinGroupResponse(error_code=route, member_id=request.member_id)
        protocols = [(p.name, bytes(p.metadata)) for p in request.protocols]
        if not route.groups.assignable(protocols):
            return m.JoinGroupResponse(error_code=E.INCONSISTENT_GROUP_PROTOCOL, member_id=request.member_id)
        rebalance_timeout = request.rebalance_timeout_ms if header.api_version >= 1 else request.session_timeout_ms
        reply = await route.groups.join(
            request.group_id, member_id=request.member_id, instance_id=request.group_instance_id,
            client_id=header.client_id or "", client_host=client.host,
            session_timeout=request.session_timeout_ms / 1000, rebalance_timeout=rebalance_timeout / 1000,
            protocol_type=request.protocol_type, protocols=protocols,
            require_known_member_id=header.api_version >= 4, reason=request.reason)
        leader, members = reply.leader, reply.members
        # A static leader back within its session, its assignment kept: below v9 Kafka names its
        # old member id as leader, with no members, and so do we. From v9 Kafka names it leader
        # with skip_assignment (KIP-814); we name it leader without: the assignment here is the
        # server's, whose bytes a client that checks its own plan against the stored one (franz-go
        # 1.22, on skip_assignment) finds different from its own encoding, and rejoins; asked to
        # assign, it syncs, and the stored assignment answers it (the Java client alike).
        if reply.replaced and header.api_version < 9:
            leader, members = reply.replaced, ()
        return m.JoinGroupResponse(
            error_code=reply.error, generation_id=reply.generation, protocol_type=reply.protocol_type,
            protocol_name=reply.protocol_name if header.api_version >= 7 else (reply.protocol_name or ""),
            leader=leader, member_id=reply.member_id,
            members=[m.JoinGroupResponseMember(member_id=mid, group_instance_id=iid, metadata=meta)
                     for mid, iid, meta in members])

    async def sync_group(self, header, request, client):
        if not self.allowed(client, Operation.READ, ResourceType.GROUP, request.group_id):
            return m.SyncGroupResponse(error_code=E.GROUP_AUTHORIZATION_FAILED)
        route = self.coordinator.route(request.group_id, empty_ok=False)
        if not isinstance(route, Owned):
            return m.SyncGroupResponse(error_code=route)
        reply = await route.groups.sync(
            request.group_id, request.member_id, generation=request.generation_id,
            instance_id=request.group_instance_id, protocol_type=request.protocol_type,
            protocol_name=request.protocol_name,
            assignments={a.member_id: bytes(a.assignment) for a in request.assignments})
        return m.SyncGroupResponse(error_code=reply.error, protocol_type=reply.protocol_type,
                                   protocol_name=reply.protocol_name, assignment=reply.assignment)

    def stable_heartbeat(self, frame: bytes, now: float, client: Client) -> bytes | None:
        """The answer (a whole frame) to the heartbeat in `frame` if it is the usual one, a
        Stable dynamic member's of a group served here that the ACLs let the client read,
        read and answered without message objects; None for any other case, which
        `heartbeat` then answers."""
        read = read_heartbeat(frame)
        if read is None:
            return None
        version, correlation_id, group_id, generation, member_id = read
        if self.acls is not None and not self.acls.authorizer.allows(client.principal, client.host, Operation.READ,
                                                                      ResourceType.GROUP, group_id):
            return None
        route = self.coordinator.route(group_id, empty_ok=False, now=now)
        if type(route) is not Owned or not route.groups.keep_alive(group_id, member_id, generation, now):
            return None
        return heartbeat_answer(version, correlation_id)

    def heartbeat(self, header, request, client):
        if not self.allowed(client, Operation.READ, ResourceType.GROUP, request.group_id):
            return m.HeartbeatResponse(error_code=E.GROUP_AUTHORIZATION_FAILED)
        route = self.coordinator.route(request.group_id, empty_ok=False)
        if route == E.COORDINATOR_LOAD_IN_PROGRESS:
            # Kafka answers a heartbeat for a group still loading blindly with NONE (its
            # GroupCoordinator.handleHeartbeat): aiokafka 0.14 takes COORDINATOR_LOAD_IN_PROGRESS
            # there for a fatal error and stops its consumer; the member's session starts
            # afresh when the group is loaded, and its next heartbeat is answered for real
            return m.HeartbeatResponse(error_code=E.NONE)
        if not isinstance(route, Owned):
            return m.HeartbeatResponse(error_code=route)
        return m.HeartbeatResponse(error_code=route.groups.heartbeat(
            request.group_id, request.member_id, request.generation_id, request.group_instance_id))

    def leave_group(self, header, request, client):
        if not self.allowed(client, Operation.READ, ResourceType.GROUP, request.group_id):
            return m.LeaveGroupResponse(error_code=E.GROUP_AUTHORIZATION_FAILED)
        route = self.coordinator.route(request.group_id, empty_ok=False)
        leaving = ([(request.member_id, None)] if header.api_version < 3 else
                   [(x.member_id, x.group_instance_id) for x in request.members])
        if not isinstance(route, Owned):
            return m.LeaveGroupResponse(error_code=route)
        errors = route.groups.leave(request.group_id, leaving)
        if header.api_version < 3:
            return m.LeaveGroupResponse(error_code=errors[0])
        return m.LeaveGroupResponse(error_code=E.NONE, members=[
            m.MemberResponse(member_id=mid, group_instance_id=iid, error_code=error)
            for (mid, iid), error in zip(leaving, errors)])

    # -- consumer-protocol groups (KIP-848) ---------------------------------------------

    async def consumer_group_heartbeat(self, header, request, client):
        def refused(error: ErrorCode, message: str | None = None):
            return m.ConsumerGroupHeartbeatResponse(error_code=error, error_message=message or error.name,
                                                    member_id=request.member_id or None,
                                                    member_epoch=request.member_epoch)

        if not self.allowed(client, Operation.READ, ResourceType.GROUP, request.group_id):
            return refused(E.GROUP_AUTHORIZATION_FAILED)
        invalid = _invalid_heartbeat(request, header.api_version, self.coordinator.group_config.max_group_id_length)
        if invalid is not None:
            return refused(E.INVALID_REQUEST, invalid)
        # Kafka 4 (KAFKA-18813): a subscription may name only topics the client may describe.
        # Checked after the request's sizes are (Kafka checks before): at most 10,000 names.
        if request.subscribed_topic_names and not self.allowed_all(client, Operation.DESCRIBE, ResourceType.TOPIC,
                                                                   set(request.subscribed_topic_names)):
            return refused(E.TOPIC_AUTHORIZATION_FAILED)
        route = self.coordinator.route(request.group_id, empty_ok=False)
        if not isinstance(route, Owned):
            return refused(route)
        names = self.topics.names_by_id
        owned = None if request.topic_partitions is None else [
            (names[t.topic_id], p) for t in request.topic_partitions if t.topic_id in names for p in t.partitions]
        reply = await route.groups.consumer_heartbeat(
            request.group_id, member_id=request.member_id, epoch=request.member_epoch, owned=owned,
            instance_id=request.instance_id, rack_id=request.rack_id,
            rebalance_timeout_ms=request.rebalance_timeout_ms, subscribed=request.subscribed_topic_names,
            regex=request.subscribed_topic_regex, assignor=request.server_assignor,
            client_id=header.client_id or "", client_host=client.host, may_describe=self._describer(client))
        if reply.error != E.NONE:
            return refused(reply.error)
        assignment = None
        if reply.assignment is not None:
            ids = self.topics.topic_ids  # a topic without an id cannot be named to these clients
            assignment = m.ConsumerGroupHeartbeatAssignment(topic_partitions=[
                m.ConsumerGroupHeartbeatTopicPartitions(topic_id=ids[topic], partitions=partitions)
                for topic, partitions in by_topic(reply.assignment).items()
                if ids.get(topic, NO_TOPIC_ID) != NO_TOPIC_ID])
        return m.ConsumerGroupHeartbeatResponse(
            error_code=E.NONE, member_id=reply.member_id, member_epoch=reply.epoch,
            heartbeat_interval_ms=int(reply.heartbeat_interval * 1000), assignment=assignment)

    def steady_consumer_heartbeat(self, frame: bytes, now: float, client: Client) -> bytes | None:
        """The answer (a whole frame) to the ConsumerGroupHeartbeat in `frame` if it is the
        steady one (every field null but the rebalance timeout; a member of a group served
        here that holds its target, with nothing to change or store; the ACLs letting the
        client read the group, and judging its expression by the same decider as before),
        read and answered without message objects; None for any other case, which
        `consumer_group_heartbeat` then answers. The bytes are those it would answer."""
        read = read_consumer_heartbeat(frame)
        if read is None:
            return None
        version, correlation_id, group_id, member_id, epoch, timeout = read
        may_describe = None
        if self.acls is not None:
            if not self.acls.authorizer.allows(client.principal, client.host, Operation.READ, ResourceType.GROUP,
                                               group_id):
                return None
            # the decider `update` would be handed: a new one (the ACLs changed) declines, the
            # general path then looks again at what a regex member's expression resolves to
            may_describe = self._describer(client)
        member = member_id.decode()
        if len(member) > self.coordinator.group_config.max_group_id_length:
            return None  # what _invalid_heartbeat refuses
        route = self.coordinator.route(group_id, empty_ok=False, now=now)
        if type(route) is not Owned:
            return None
        interval = route.groups.consumer_keep_alive(group_id, member, epoch, timeout, may_describe, now)
        if interval is None:
            return None
        return consumer_heartbeat_answer(version, correlation_id, member_id, epoch, int(interval * 1000))

    def _describer(self, client: Client) -> Callable[[str], bool] | None:
        """With ACLs, whether `client` may describe a topic: what a regex member's matches
        are filtered by (Kafka 4, KAFKA-18813: its expression resolves to the topics it may
        describe, the others left out); the same object while the ACLs stay, so that the
        group recomputes what the expression resolves to only when they changed."""
        if self.acls is None:
            return None
        authorizer, key = self.acls.authorizer, (client.principal, client.host)
        found = self._describers.get(key)
        if found is None or found[0] is not authorizer:
            def may(topic: str, allows=authorizer.allows, principal=client.principal, host=client.host) -> bool:
                return allows(principal, host, Operation.DESCRIBE, ResourceType.TOPIC, topic)
            if len(self._describers) >= MAX_DESCRIBERS:
                del self._describers[next(iter(self._describers))]  # the oldest
            found = self._describers[key] = (authorizer, may)
        return found[1]

    def consumer_group_describe(self, header, request, client):
        described = []
        for group_id in request.group_ids:
            route = (self.coordinator.route(group_id) if self.allowed(client, Operation.DESCRIBE, ResourceType.GROUP,
                                                                      group_id) else E.GROUP_AUTHORIZATION_FAILED)
            if not isinstance(route, Owned):
                described.append(m.DescribedConsumerGroup(error_code=route, error_message=route.name,
                                                          group_id=group_id))
                continue
            group = route.groups.consumer_groups.get(group_id)
            if group is None:
                message = (f"Group {group_id} is not a consumer group." if route.groups.group(group_id) is not None
                           else f"Group {group_id} not found.")
                described.append(m.DescribedConsumerGroup(error_code=E.GROUP_ID_NOT_FOUND, error_message=message,
                                                          group_id=group_id))
                continue
            # as Kafka 4's broker (KAFKA-18813): a group whose members' assignments or targets
            # name a topic the client may not describe is not shown, only refused
            if self.acls is not None and not self.allowed_all(client, Operation.DESCRIBE, ResourceType.TOPIC, {
                    t for x in group.members.values() for t, _ in (*x.assigned, *group.target.get(x.member_id, ()))}):
                described.append(m.DescribedConsumerGroup(error_code=E.TOPIC_AUTHORIZATION_FAILED,
                                                          error_message=HIDDEN_TOPICS, group_id=group_id))
                continue
            described.append(m.DescribedConsumerGroup(
                error_code=E.NONE, group_id=group_id, group_state=group.state.value, group_epoch=group.group_epoch,
                assignment_epoch=group.assignment_epoch,
                assignor_name=group.assignor or group.config.default_assignor,
                members=[m.ConsumerGroupMember(
                    member_id=x.member_id, instance_id=x.instance_id, rack_id=x.rack_id, member_epoch=x.epoch,
                    client_id=x.client_id, client_host=x.client_host, subscribed_topic_names=list(x.subscribed),
                    subscribed_topic_regex=x.regex, assignment=self._described(x.assigned),
                    target_assignment=self._described(group.target.get(x.member_id, frozenset())),
                    member_type=CLASSIC_MEMBER if x.classic is not None else CONSUMER_MEMBER)
                    for x in group.members.values()],
                groupkeeper_status=self.status_of(group_id, route.store.durable.get(group_id, {}))))
        return m.ConsumerGroupDescribeResponse(groups=described)

    def _described(self, partitions) -> m.ConsumerGroupDescribeAssignment:
        ids = self.topics.topic_ids
        return m.ConsumerGroupDescribeAssignment(topic_partitions=[
            m.ConsumerGroupDescribeTopicPartitions(topic_id=ids.get(topic, NO_TOPIC_ID), topic_name=topic,
                                                   partitions=ps)
            for topic, ps in by_topic(partitions).items()])

    def list_groups(self, header, request, client):
        """Every group served here (v4+: of the states asked for; v5+: of the types asked
        for, classic or consumer, and with its type). On a broker's node port of the gateway,
        none of ours (each group is listed once, by its coordinator), but v5+, where share
        groups may be asked for: those the broker coordinates, as it lists them."""
        types = {t.lower() for t in request.types_filter}
        if client.node is not None:
            if self.share_groups is not None and header.api_version >= 5 and (not types or "share" in types):
                return self._share_listed(client.node, list(request.states_filter), client)
            return m.ListGroupsResponse(error_code=E.NONE, groups=[])
        wanted = {s.lower() for s in request.states_filter}
        every = self.allowed(client, Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME)
        groups = [m.ListedGroup(group_id=gid, protocol_type=protocol_type, group_state=state, group_type=kind)
                  for gid, protocol_type, state, _, kind in sorted(self.coordinator.all_groups())
                  if (not wanted or state.lower() in wanted) and (not types or kind in types)
                  and (every or self.allowed(client, Operation.DESCRIBE, ResourceType.GROUP, gid))]
        return m.ListGroupsResponse(error_code=E.NONE, groups=groups)

    async def _share_listed(self, node: int, states: list[str], client):
        listed = await self.share_groups.listed(node, states, client)
        if isinstance(listed, ErrorCode):
            return m.ListGroupsResponse(error_code=listed, groups=[])
        return m.ListGroupsResponse(error_code=E.NONE, groups=[
            g for g in listed if self.allowed(client, Operation.DESCRIBE, ResourceType.GROUP, g.group_id)])

    def describe_groups(self, header, request, client):
        described = []
        for group_id in request.groups:
            route = (self.coordinator.route(group_id) if self.allowed(client, Operation.DESCRIBE, ResourceType.GROUP,
                                                                      group_id) else E.GROUP_AUTHORIZATION_FAILED)
            if not isinstance(route, Owned):
                described.append(m.DescribedGroup(error_code=route, group_id=group_id))
                continue
            group = route.groups.group(group_id)
            if group is None:  # offsets only: Empty; nothing at all, or a consumer group: Dead, as Kafka answers
                consumer = group_id in route.groups.consumer_groups
                state = GroupState.EMPTY if group_id in route.store.durable and not consumer else GroupState.DEAD
                described.append(m.DescribedGroup(
                    error_code=E.NONE, group_id=group_id, group_state=state.value,
                    groupkeeper_status=None if consumer else self.status_of(group_id,
                                                                            route.store.durable.get(group_id, {}))))
                continue
            stable = group.state == GroupState.STABLE
            described.append(m.DescribedGroup(
                error_code=E.NONE, group_id=group_id, group_state=group.state.value,
                protocol_type=group.protocol_type or "", protocol_data=group.protocol_name or "",
                members=[m.DescribedGroupMember(
                    member_id=x.member_id, group_instance_id=x.instance_id, client_id=x.client_id,
                    client_host=x.client_host, member_metadata=x.metadata(group.protocol_name),
                    member_assignment=x.assignment if stable else b"")
                    for x in group.members.values()],
                groupkeeper_status=self.status_of(group_id, route.store.durable.get(group_id, {}))))
        return m.DescribeGroupsResponse(groups=described)

    async def delete_groups(self, header, request, client):
        results = []
        for group_id in request.groups_names:
            error = (await self._delete(group_id) if self.allowed(client, Operation.DELETE, ResourceType.GROUP, group_id)
                     else E.GROUP_AUTHORIZATION_FAILED)
            if error == E.GROUP_ID_NOT_FOUND and self.share_groups is not None:  # a share group, at the brokers?
                shared = await self.share_groups.delete(group_id, client)
                error = error if shared is None else shared
            results.append(m.DeletableGroupResult(group_id=group_id, error_code=error))
            if error == E.NONE:  # an operator's act: who, from where, what
                self.log.info("group deleted", group=group_id, principal=client.principal, host=client.host,
                              client_id=header.client_id)
                self.coordinator.events.emit("group_deleted", group_id, principal=client.principal, host=client.host,
                                             client_id=header.client_id)
        return m.DeleteGroupsResponse(results=results)

    async def offset_delete(self, header, request, client):
        """OffsetDelete (KIP-496), as Kafka's coordinator answers it: a group with members
        keeps the offsets of the topics they consume (GROUP_SUBSCRIBED_TO_TOPIC for those
        partitions), the others' go; a classic group with members that are not consumers
        (connect, ...) is NON_EMPTY_GROUP; a partition without an offset is answered as deleted.
        Needs Delete on the group and Read on each topic, as Kafka's does."""
        def answer(error: ErrorCode, per_partition=lambda topic, p: E.NONE):
            return m.OffsetDeleteResponse(error_code=error, topics=[m.OffsetDeleteResponseTopic(
                name=t.name, partitions=[m.OffsetDeleteResponsePartition(
                    partition_index=p.partition_index, error_code=per_partition(t.name, p.partition_index))
                    for p in t.partitions]) for t in request.topics])

        group_id = request.group_id
        if not self.allowed(client, Operation.DELETE, ResourceType.GROUP, group_id):
            return answer(E.GROUP_AUTHORIZATION_FAILED)
        route = self.coordinator.route(group_id)
        if not isinstance(route, Owned):
            return answer(route)
        group = route.groups.group(group_id)
        consumer = route.groups.consumer_groups.get(group_id)
        offsets = route.store.durable.get(group_id)
        if group is None and consumer is None and offsets is None:
            return answer(E.GROUP_ID_NOT_FOUND)
        if consumer is not None and consumer.members:
            kept = consumer_subscribed(consumer)
        elif group is not None and group.members and group.state != GroupState.EMPTY:
            if group.protocol_type != "consumer":
                return answer(E.NON_EMPTY_GROUP)
            kept = subscribed(group)
            if kept is None:  # a subscription that cannot be read: keep all, as Kafka (nothing known)
                kept = frozenset(t.name for t in request.topics)
        else:
            kept = frozenset()
        errors: dict[tuple[str, int], ErrorCode] = {}
        doomed: dict[str, dict] = {}
        for t in request.topics:
            for p in t.partitions:
                if t.name in kept:
                    errors[(t.name, p.partition_index)] = E.GROUP_SUBSCRIBED_TO_TOPIC
                elif not self.allowed(client, Operation.READ, ResourceType.TOPIC, t.name):
                    errors[(t.name, p.partition_index)] = E.TOPIC_AUTHORIZATION_FAILED
                elif (entry := (offsets or {}).get(t.name, {}).get(p.partition_index)) is not None:
                    doomed.setdefault(t.name, {})[p.partition_index] = entry
        if doomed:
            try:
                removed = await route.store.expire_offsets(group_id, doomed)
                await route.store.collect(group_id)
            except STORE_FAILURES as exc:
                code = store_error_code(exc)
                return answer(E.NONE, lambda topic, p: errors.get((topic, p), code))
            self.log.info("offsets deleted", group=group_id, partitions=removed, principal=client.principal,
                          host=client.host, client_id=header.client_id)
            self.coordinator.events.emit("offsets_deleted", group_id, partitions=removed, principal=client.principal,
                                         host=client.host, client_id=header.client_id,
                                         offsets=[{"topic": t, "partition": p} for t, ps in sorted(doomed.items())
                                                  for p in sorted(ps)])
        return answer(E.NONE, lambda topic, p: errors.get((topic, p), E.NONE))

    async def _delete(self, group_id: str) -> ErrorCode:
        route = self.coordinator.route(group_id)
        if not isinstance(route, Owned):
            return route
        group = route.groups.group(group_id) or route.groups.consumer_groups.get(group_id)
        if group is not None and group.members:
            return E.NON_EMPTY_GROUP
        if route.pending is not None and route.pending.of_group(group_id):
            return E.NON_EMPTY_GROUP  # a transaction's offsets pending: not deleted under it (nor expired)
        if group is None and group_id not in route.store.durable and group_id not in route.store.groups:
            return E.GROUP_ID_NOT_FOUND
        try:
            await route.store.delete_group(group_id)
        except STORE_FAILURES as exc:
            return store_error_code(exc)
        route.groups.drop(group_id)
        return E.NONE


def _invalid_heartbeat(request, version: int, max_id: int) -> str | None:
    """What Kafka refuses INVALID_REQUEST in a ConsumerGroupHeartbeat before looking at
    the group, or None. From v1 the member makes up its own id, even to join. Beyond Kafka,
    what the group would keep is bounded: ids as group ids are, topic names as Kafka's, the
    subscription's size."""
    epoch = request.member_epoch
    if any(len(x or "") > max_id for x in (request.member_id, request.instance_id, request.rack_id)):
        return f"MemberId, InstanceId and RackId can't be longer than {max_id} characters."
    names = request.subscribed_topic_names or ()
    if len(names) > MAX_SUBSCRIBED_TOPICS or any(len(name) > MAX_TOPIC_NAME for name in names):
        return f"At most {MAX_SUBSCRIBED_TOPICS} subscribed topics, of at most {MAX_TOPIC_NAME} characters."
    if len(request.subscribed_topic_regex or "") > MAX_TOPIC_REGEX:
        return f"SubscribedTopicRegex can't be longer than {MAX_TOPIC_REGEX} characters."
    if not request.member_id and (epoch != 0 or version >= 1):
        return "MemberId can't be empty."
    if request.instance_id == "":
        return "InstanceId can't be empty."
    if request.rack_id == "":
        return "RackId can't be empty."
    if epoch == STATIC_LEAVE_EPOCH and request.instance_id is None:
        return "InstanceId can't be null."
    if epoch == 0 and request.rebalance_timeout_ms == -1:
        return "RebalanceTimeoutMs must be provided in first request."
    if epoch == 0 and request.topic_partitions:
        return "TopicPartitions must be empty when (re-)joining."
    if epoch == 0 and request.subscribed_topic_names is None and request.subscribed_topic_regex is None:
        return "SubscribedTopicNames or SubscribedTopicRegex must be set in first request."
    if epoch < STATIC_LEAVE_EPOCH:
        return "MemberEpoch is invalid."
    return None
