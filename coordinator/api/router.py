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

from ..cluster.ownership import Coordinator
from ..security.client import Client
from ..serving.interfaces import Route
from ..topics.view import TopicView
from .access import ApiPart
from .cluster import ClusterApi
from .groups import GroupApi
from .offsets import OffsetApi
from .versions import SUPPORTED, TRANSACTIONAL_OFFSETS, WAITS


class Api:
    def __init__(self, coordinator: Coordinator, topics: TopicView, acls=None, *, cluster: ApiPart | None = None,
                 metadata_cache_bytes: int | None = None):
        """`cluster`: the part that gives the cluster's answers (ApiVersions, Metadata,
        FindCoordinator, the leaders' APIs; `ClusterApi` unless the gateway gives its own);
        the group and offset APIs are always ours. `metadata_cache_bytes`: its cache of
        Metadata answers (None: the default size)."""
        self.cluster = cluster or ClusterApi(coordinator, topics, acls, metadata_cache_bytes=metadata_cache_bytes)
        self.groups = GroupApi(coordinator, topics, acls)
        self.groups.share_groups = getattr(self.cluster, "share_groups", None)  # the gateway's: the brokers'
        self.offsets = OffsetApi(coordinator, topics, acls)
        self._ours: dict[int, Callable] = {**self.groups.handlers(), **self.offsets.handlers()}
        # what is served, in which versions: TxnOffsetCommit only where transactions' outcomes are seen
        self._served = {**SUPPORTED, **(TRANSACTIONAL_OFFSETS if getattr(self.cluster, "sees_transactions", False)
                                       else {})}
        # the heartbeat's fast path, bound here: no call in between on the hottest request
        self.stable_heartbeat: Callable[[bytes, float, Client], bytes | None] = self.groups.stable_heartbeat
        self.steady_consumer_heartbeat: Callable[[bytes, float, Client], bytes | None] = \
            self.groups.steady_consumer_heartbeat

    def dispatch(self, api_key: int, api_version: int) -> Route | None:
        """How (api, version) is answered: the handler, whether its answer may wait (a
        coroutine or a `Pending`, counted against the connection's requests in flight),
        whether it relays; None for what is not served: refused, not guessed at."""
        handler = self._ours.get(api_key)
        if handler is None:
            return self.cluster.route(api_key, api_version)
        lo, hi = self._served.get(api_key, (0, -1))  # a handler not served here: refused
        return (handler, api_key in WAITS, False) if lo <= api_version <= hi else None

    def api_versions_response(self, error: ErrorCode = ErrorCode.NONE) -> m.ApiVersionsResponse:
        return self.cluster.api_versions_response(error)
