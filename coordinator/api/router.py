"""The API layer as the serving layer sees it (`serving.interfaces.Api`): which handler
answers (api key, version), and the two answers it asks for by name.

Every handler is called inline by the server, in the order the connection's requests
came, and returns the response; or a coroutine that will produce it (a JoinGroup waits for
its generation), which the server runs in a task of its own; or a `Pending` answer that a
callback completes (a commit, when ZooKeeper confirms its batch), which costs no task.
What a handler does before returning happens in request order: a commit is queued for its
write then, so pipelined commits land in the order they were sent.
"""

from __future__ import annotations

from collections.abc import Callable

from protocol import ErrorCode, messages as m
from protocol.schemas import APIS

from ..cluster.ownership import Coordinator
from ..security.client import Client
from ..topics.view import TopicView
from .access import ApiPart
from .cluster import ClusterApi
from .groups import GroupApi
from .offsets import OffsetApi
from .versions import LEADER_ONLY, SUPPORTED, WAITS


class Api:
    def __init__(self, coordinator: Coordinator, topics: TopicView, acls=None, *,
                 cluster: type[ApiPart] = ClusterApi):
        """`cluster`: the part that gives the cluster's answers (ApiVersions, Metadata,
        FindCoordinator, the leaders' APIs); the group and offset APIs are always ours."""
        self.cluster = cluster(coordinator, topics, acls)
        self.groups = GroupApi(coordinator, topics, acls)
        self.offsets = OffsetApi(coordinator, topics, acls)
        self._table: dict[int, Callable] = {
            **self.cluster.handlers(), **self.groups.handlers(), **self.offsets.handlers()}

    def dispatch(self, api_key: int, api_version: int) -> tuple[Callable, bool] | None:
        """The handler of (api, version) and whether its answer may wait (a coroutine or a
        `Pending`, counted against the connection's requests in flight); None
        for what is not served: refused, not guessed at. A leader-only API is answered in
        every version we can read, advertised or not (the cluster's ranges may change)."""
        lo, hi = SUPPORTED.get(api_key, (0, -1))
        if api_key in LEADER_ONLY:
            versions = APIS[api_key].versions
            lo, hi = versions.low, versions.high
        if not lo <= api_version <= hi:
            return None
        return self._table[api_key], api_key in WAITS

    def stable_heartbeat(self, frame: bytes, now: float, client: Client) -> bytes | None:
        return self.groups.stable_heartbeat(frame, now, client)

    def api_versions_response(self, error: ErrorCode = ErrorCode.NONE) -> m.ApiVersionsResponse:
        return self.cluster.api_versions_response(error)
