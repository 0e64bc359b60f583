"""What every part of the API shares: the coordinator and the topic view it answers from,
and the ACL check that each request goes through."""

from __future__ import annotations

from .. import logs, metrics
from ..cluster.ownership import Coordinator
from ..security.acls.authorizer import Operation, ResourceType
from ..security.client import Client
from ..topics.view import TopicView

MAX_TOPIC_NAME = 249  # characters: Kafka's limit on topic names


class ApiPart:
    """Handlers for some API keys (`handlers()`: key -> handler). A handler takes the
    request's header, the decoded request and the `Client`, and returns the response
    message, or a coroutine or a `serving.pending.Pending` that will make it."""

    def __init__(self, coordinator: Coordinator, topics: TopicView, acls=None):
        self.coordinator = coordinator
        self.topics = topics
        self.acls = acls  # an AclStore: its current `authorizer` decides every request; None: all allowed
        self.log = logs.get("groupkeeper.api")  # operators' acts (a group deleted, offsets set or deleted)

    def handlers(self) -> dict:
        raise NotImplementedError

    def allowed(self, client: Client, operation: Operation, resource: ResourceType, name: str) -> bool:
        """Whether the ACLs let `client` do `operation` on the resource (always, without ACLs)."""
        if self.acls is None:
            return True
        if self.acls.authorizer.allows(client.principal, client.host, operation, resource, name):
            return True
        metrics.AUTHORIZATION_DENIALS.labels(resource.value, operation.value).inc()
        return False

    def allowed_all(self, client: Client, operation: Operation, resource: ResourceType, names) -> bool:
        """Whether the ACLs let `client` do `operation` on every one of `names` (always,
        without ACLs); the first denial ends the look, and is the one counted."""
        return self.acls is None or all(self.allowed(client, operation, resource, name) for name in names)
