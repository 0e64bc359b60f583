"""The Kafka APIs: a decoded request in, a response message out.

| Module | Holds |
| --- | --- |
| `versions.py` | the one table of APIs and versions served (and advertised) |
| `router.py` | `Api`: which handler answers (api key, version); the serving layer's face of this package |
| `access.py` | `ApiPart`, what each part shares: the coordinator, the topic view, the ACL check |
| `cluster.py` | the cluster's answers: ApiVersions, Metadata, FindCoordinator, the leaders' APIs |
| `groups.py` | the group APIs, classic and consumer protocol, and their administration |
| `offsets.py` | OffsetCommit and OffsetFetch |

May import: `serving` (what a handler may return: `Pending`, `CloseConnection`), `cluster`,
`groups`, `security`, `topics`, `store`, the layers below them and `protocol`.
"""
