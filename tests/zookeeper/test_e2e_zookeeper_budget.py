"""Issue 31's pressure on ZooKeeper's memory, against a real `groupkeeper run` and a ZooKeeper
of the embedded one's 512 MiB heap: 10,000 partitions x 104 characters of metadata (within
offset_commit_max_partitions and group_max_offset_metadata_bytes) committed to 129 groups
from one address took that ZooKeeper to OutOfMemoryError. With the data budget its client is
refused at its share, ZooKeeper stays alive, and other clients' groups are served throughout,
new ones included; from two more addresses the budget fills, a warning comes first, and then
what would take the data past it is refused, whoever sends it, while existing groups go on.
The test sends 40 groups from the first address, not 129: its share is full after about 17,
and the refusals after that are alike (docs/operations.md has the issue's whole run)."""

from __future__ import annotations

import re
import socket
import threading
import time

from protocol import ErrorCode as E
from protocol.schemas import DELETE_GROUPS, JOIN_GROUP, OFFSET_COMMIT, SYNC_GROUP
from tests.support.clients import RawConnection
from tests.support.coordinator_process import CoordinatorProcess, cluster
from tools.bench.abuse import Bystander, Target
from coordinator.store.zkserver import ZooKeeperServer, data_bytes, four_letter_word, free_port

GROUPS, PARTITIONS, METADATA = 40, 10_000, "m" * 104  # the issue's partitions and metadata
DEADLINE = 3.0  # seconds any answer to an ordinary client may take
MiB = 1 << 20


def connect(port: int, source: str) -> RawConnection:
    """A connection from `source`, another loopback address: a client of its own for the budget."""
    connection = RawConnection.__new__(RawConnection)
    connection.sock = socket.create_connection(("127.0.0.1", port), timeout=60, source_address=(source, 0))
    connection._correlation = 0
    return connection


def commit(connection: RawConnection, group: str, partitions: int, metadata: str) -> set[str]:
    answer = connection.call(OFFSET_COMMIT, 7, {
        "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
        "topics": [{"name": "t", "partitions": [
            {"partition_index": p, "committed_offset": p, "committed_metadata": metadata} for p in range(partitions)]}]})
    return {E(p.error_code).name for t in answer.topics for p in t.partitions}


def attack(port: int, source: str, prefix: str, groups: int, answers: list) -> None:
    connection = connect(port, source)
    try:
        for g in range(groups):
            answers.append(commit(connection, f"{prefix}-{g}", PARTITIONS, METADATA))
    except OSError as exc:  # the coordinator or its ZooKeeper gave way
        answers.append({f"connection lost: {exc}"})
    finally:
        connection.close()


class Newcomers:
    """Another client making new groups beside the pressure, each a commit of 8 partitions with
    some metadata: what it was answered, by group."""

    def __init__(self, port: int):
        self.connection = RawConnection(port, timeout=DEADLINE)
        self.answers: list[tuple[set[str], float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        n = 0
        while not self._stop.wait(0.25):
            n += 1
            started = time.monotonic()
            try:
                codes = commit(self.connection, f"newcomer-{n}", 8, "n" * 50)
            except OSError as exc:
                codes = {f"no answer: {exc}"}
            self.answers.append((codes, time.monotonic() - started))

    def take(self) -> list[tuple[set[str], float]]:
        answers, self.answers = self.answers, []
        return answers

    def wait_for(self, n: int, timeout: float = 30.0) -> list[tuple[set[str], float]]:
        """The next `n` answers or more (taken), once there are that many."""
        deadline = time.monotonic() + timeout
        while len(self.answers) < n:
            assert time.monotonic() < deadline, self.answers
            time.sleep(0.05)
        return self.take()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self.connection.close()


def metric(coordinator: CoordinatorProcess, name: str, labels: str = "") -> float:
    found = re.search(rf"^{name}{re.escape(labels)} (\S+)$", coordinator.scrape()[1], re.M)
    return float(found.group(1)) if found else 0.0


def alive(zookeeper: ZooKeeperServer) -> bool:
    try:
        return zookeeper.process.poll() is None and four_letter_word("127.0.0.1", zookeeper.port, b"ruok") == b"imok"
    except OSError:
        return False


def test_the_issues_pressure_leaves_zookeeper_alive_and_every_other_group_served(tmp_path):
    zookeeper = ZooKeeperServer(tmp_path / "zookeeper", free_port(), heap_mb=512)  # the embedded one's default
    zookeeper.start()
    coordinator = CoordinatorProcess(zookeeper, tmp_path)  # its budget derived from that heap: 64 MiB
    bystanders, newcomers = [], None
    try:
        # offsets are stored only for partitions that exist (a bystander commits to the topic
        # named as its group); created first, they are read at start-up, not during the pressure
        coordinator.cli("topics", "create", "t", "--partitions", str(PARTITIONS))
        for i in range(3):
            coordinator.cli("topics", "create", f"bystander-{i}", "--partitions", str(Bystander.PARTITIONS))
        coordinator.start()
        target = Target(("127.0.0.1", coordinator.port), DEADLINE)
        bystanders = [Bystander(target, f"bystander-{i}", (f"bystander-{i}", Bystander.PARTITIONS)) for i in range(3)]
        for bystander in bystanders:
            bystander.start()
            bystander.begin()
        newcomers = Newcomers(coordinator.port)

        # one address: 40 groups, refused once it holds half the budget
        answers: list[set[str]] = []
        attack(coordinator.port, "127.0.0.2", "one", GROUPS, answers)
        accepted = [a for a in answers if a == {"NONE"}]
        assert answers[:len(accepted)] == accepted and 10 <= len(accepted) <= 20, answers
        assert all(a == {"INVALID_COMMIT_OFFSET_SIZE"} for a in answers[len(accepted):]), answers
        assert alive(zookeeper) and data_bytes(zookeeper.connect_string) < 64 * MiB
        refused = coordinator.wait_for_log("zookeeper data budget: writes refused", limit="client", client="127.0.0.2")
        assert refused["client_bytes"] <= refused["client_budget_bytes"] == 32 * MiB
        assert metric(coordinator, "groupkeeper_zookeeper_budget_refusals_total", '{limit="client"}') == GROUPS - len(accepted)
        assert metric(coordinator, "groupkeeper_zookeeper_budget_bytes") == 64 * MiB
        assert 0 < metric(coordinator, "groupkeeper_zookeeper_budget_used_bytes") < 34 * MiB
        seen = newcomers.take()
        assert seen and all(codes == {"NONE"} and took < DEADLINE for codes, took in seen), seen  # room for others

        # two more addresses: the budget fills, a warning first; then growth is refused for everyone
        more: list[list[set[str]]] = [[], []]
        threads = [threading.Thread(target=attack, args=(coordinator.port, source, source, GROUPS // 2, out))
                   for source, out in zip(("127.0.0.3", "127.0.0.4"), more)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(300)
        assert all(a in ({"NONE"}, {"INVALID_COMMIT_OFFSET_SIZE"}) for out in more for a in out), more
        assert alive(zookeeper) and data_bytes(zookeeper.connect_string) < 64 * MiB
        lines = coordinator.events()
        warned = next(i for i, e in enumerate(lines) if e["event"] == "zookeeper data budget nearly used")
        full = next(i for i, e in enumerate(lines) if e["event"] == "zookeeper data budget: writes refused"
                    and e["limit"] == "total")
        assert warned < full
        used = metric(coordinator, "groupkeeper_zookeeper_budget_used_bytes")
        assert 0.75 * 64 * MiB < used <= 0.9 * 64 * MiB
        # while it filled, a newcomer was answered at once: served, or refused when an attacker's
        # commit had just taken what was left (what is left is less than one of theirs, and
        # may be less than a newcomer's)
        seen = newcomers.take()
        assert seen and all(codes in ({"NONE"}, {"INVALID_COMMIT_OFFSET_SIZE"}) and took < DEADLINE
                            for codes, took in seen), seen
        # one as large as the attackers' does not fit, from anyone
        refusals = metric(coordinator, "groupkeeper_zookeeper_budget_refusals_total", '{limit="total"}')
        other = RawConnection(coordinator.port)
        try:
            assert commit(other, "newcomer-large", PARTITIONS, METADATA) == {"INVALID_COMMIT_OFFSET_SIZE"}
            # the operator's way out (the warning's hint): a group deleted gives its room back,
            # and new groups fit again
            deleted = other.call(DELETE_GROUPS, 1, {"groups_names": ["one-0"]})
            assert [E(r.error_code).name for r in deleted.results] == ["NONE"]
        finally:
            other.close()
        assert metric(coordinator, "groupkeeper_zookeeper_budget_refusals_total", '{limit="total"}') == refusals + 1
        assert metric(coordinator, "groupkeeper_zookeeper_budget_used_bytes") < used - MiB
        newcomers.take()
        seen = newcomers.wait_for(4)  # the first may have been sent before the group went (one at a time)
        assert all(codes == {"NONE"} and took < DEADLINE for codes, took in seen[1:]), seen

        for bystander in bystanders:  # every answer, all along: no error, none slower than DEADLINE
            findings = bystander.end()
            assert not findings.problems, findings.problems
            assert findings.figures["requests"] > 50 and findings.figures["fetched_back"] == "4/4", findings.figures
    finally:
        if newcomers is not None:
            newcomers.stop()
        for bystander in bystanders:
            bystander.stop()
        coordinator.stop()
        zookeeper.stop()


def owned(instances: list[CoordinatorProcess]) -> list[float]:
    return [metric(i, "groupkeeper_owned_group_partitions") for i in instances]


def test_instances_share_the_budget_by_what_they_own_and_a_handover_moves_data_and_share(zookeeper, tmp_path):
    """Two instances: each holds the budget times its part of the group-partitions, so together
    they hold no more than the budget (one may refuse while the other has room); one stops, and
    the other takes its group-partitions, their data and their share of the budget with them."""
    budget = 24 * MiB
    a, b = instances = cluster(zookeeper, tmp_path, 2, zookeeper_data_budget_bytes=budget,
                               zookeeper_data_budget_per_client_bytes=budget)
    try:
        # offsets are stored only for partitions that exist; created first, it is read at
        # start-up, not (10,000 leaders looked for) while the commits below are timed
        a.cli("topics", "create", "t", "--partitions", str(PARTITIONS))
        for instance in instances:
            instance.start()
        deadline = time.monotonic() + 30
        while not (all(owned(instances)) and sum(owned(instances)) == 50
                   and abs(sum(metric(i, "groupkeeper_zookeeper_budget_bytes") for i in instances) - budget) <= 2):
            assert time.monotonic() < deadline, owned(instances)  # the shares add up once every one is loaded
            time.sleep(0.1)

        target = Target(("127.0.0.1", a.port), DEADLINE)
        answers, in_a_row = [], 0
        while in_a_row < 5:
            group = f"spread-{len(answers)}"
            connection = RawConnection(target.coordinator(group)[1])
            try:
                answers.append(commit(connection, group, PARTITIONS, METADATA))
            finally:
                connection.close()
            in_a_row = in_a_row + 1 if answers[-1] == {"INVALID_COMMIT_OFFSET_SIZE"} else 0
            assert answers[-1] in ({"NONE"}, {"INVALID_COMMIT_OFFSET_SIZE"}) and len(answers) < 40, answers
        used = [metric(i, "groupkeeper_zookeeper_budget_used_bytes") for i in instances]
        assert all(used) and sum(used) <= 0.9 * budget, used  # each within its share, so both within the budget
        assert 6 <= answers.count({"NONE"}) <= 12, answers

        assert b.stop() == 0  # its group-partitions, their data and their share go to a
        deadline = time.monotonic() + 30
        while metric(a, "groupkeeper_zookeeper_budget_bytes") != budget:  # all 50 taken and loaded
            assert time.monotonic() < deadline, owned([a])
            time.sleep(0.1)
        assert abs(metric(a, "groupkeeper_zookeeper_budget_used_bytes") - sum(used)) < 0.01 * sum(used)
        connection = RawConnection(a.port)
        try:  # the room b's groups had left in its share is a's now, and no more
            after = [commit(connection, f"after-the-handover-{n}", PARTITIONS, METADATA) for n in range(5)]
        finally:
            connection.close()
        assert after[-1] == {"INVALID_COMMIT_OFFSET_SIZE"}, after
        assert metric(a, "groupkeeper_zookeeper_budget_used_bytes") <= 0.9 * budget
    finally:
        for instance in instances:
            instance.stop()


def join_and_sync(connection: RawConnection, group: str, metadata: bytes) -> tuple[int, int]:
    """A lone member's JoinGroup (again with the member id it is given) and SyncGroup: their errors."""
    body = {"group_id": group, "session_timeout_ms": 10_000, "rebalance_timeout_ms": 10_000, "member_id": "",
            "protocol_type": "connect", "protocols": [{"name": "default", "metadata": metadata}]}
    joined = connection.call(JOIN_GROUP, 5, body)
    if joined.error_code == E.MEMBER_ID_REQUIRED:
        joined = connection.call(JOIN_GROUP, 5, {**body, "member_id": joined.member_id})
    if joined.error_code != E.NONE:
        return joined.error_code, -1
    synced = connection.call(SYNC_GROUP, 3, {"group_id": group, "generation_id": joined.generation_id,
                                              "member_id": joined.member_id, "assignments": [
                                                  {"member_id": joined.member_id, "assignment": b"a"}]})
    return joined.error_code, synced.error_code


def test_a_group_record_past_the_budget_is_not_stored_and_its_members_are_told(zookeeper, tmp_path):
    """A generation whose record would take ZooKeeper's data past the budget: SyncGroup answered
    GROUP_MAX_SIZE_REACHED (as for a group past group_max_record_bytes), nothing stored; a
    small group beside it forms."""
    import os

    from kazoo.client import KazooClient
    from coordinator.store import layout

    coordinator = CoordinatorProcess(zookeeper, tmp_path, zookeeper_data_budget_bytes=1 * MiB)
    coordinator.start()
    connection = RawConnection(coordinator.port)
    client = KazooClient(hosts=coordinator.zookeeper)
    client.start(timeout=10)
    try:
        assert join_and_sync(connection, "large", os.urandom(1_500_000)) == (E.NONE, E.GROUP_MAX_SIZE_REACHED)
        assert metric(coordinator, "groupkeeper_zookeeper_budget_refusals_total", '{limit="records"}') >= 1
        stored = [g for p in range(50) if client.exists(layout.groups_path(p))
                  for g in client.get_children(layout.groups_path(p))]
        assert "large" not in stored
        assert join_and_sync(connection, "small", b"x" * 100) == (E.NONE, E.NONE)
    finally:
        client.stop()
        connection.close()
        coordinator.stop()
