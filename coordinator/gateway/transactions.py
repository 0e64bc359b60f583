"""What the gateway sees of transactions, recorded for every instance (store/transactions.py).

Where the gateway relays InitProducerId and EndTxn to the brokers' transaction coordinator,
it reads the request's fields as it goes (`observer`) and the answer's error code as it comes
back (the answer is paired with its request by the link, by correlation id; these answers are
small, so they are gathered whole instead of streamed, and go on as they came). An answer NONE
is handed to the `Recorder`: a bounded queue that one task drains into ZooKeeper, in order.
InitProducerId's answer goes on at once. EndTxn's waits until its end is recorded (`hold_end`):
a producer begins its next transaction only once it has that answer, so the next
transaction's pending offsets are written after the end, which is how a group's owner tells
an end of this transaction from an earlier one's of the same epoch (transaction version 1:
store/transactions.py, order). An end that cannot be recorded (ZooKeeper away past
WRITE_TIMEOUT, the queue full) closes the client's connection instead of answering: the
producer asks EndTxn again, which the transaction coordinator answers again, and its end is
recorded then.

- InitProducerId with a transactional id, answered NONE: "begun" with the ANSWER's producer id
  and epoch (those the producer now has).
- EndTxn answered NONE: "committed" or "aborted" (the request's `committed`) with the
  REQUEST's producer id and epoch. Under transaction version 2 (KIP-890) an EndTxn v5 answer
  carries a new producer id and epoch, which the producer's next transaction runs under; the
  one that ended, and that its TxnOffsetCommit offsets were written under, is the request's.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import trio

from protocol import ErrorCode, ProtocolError, decode_broker_response, decode_request
from protocol.framing import frame as framed
from protocol.schemas import END_TXN, INIT_PRODUCER_ID

from .. import logs
from ..serving.interfaces import CloseConnection
from ..serving.pending import Pending
from ..store.transactions import UNRECORDED, WRITE_TIMEOUT, TransactionOutcomes

OBSERVED = frozenset({INIT_PRODUCER_ID.key, END_TXN.key})
QUEUE_LIMIT = 10_000  # states waiting to be written; past it they are dropped (counted)


class Recorder:
    """The gateway's states to record (`begun`, `ended`: they never block), written in order
    by `run`, each within WRITE_TIMEOUT of when it was seen."""

    def __init__(self, outcomes: TransactionOutcomes, limit: int = QUEUE_LIMIT):
        self.outcomes = outcomes
        self._send, self._receive = trio.open_memory_channel(limit)
        self._dropped = 0  # in the current burst of drops
        self.log = logs.get("groupkeeper.transactions")

    def begun(self, transactional_id: str, producer_id: int, producer_epoch: int) -> None:
        self._offer((transactional_id, producer_id, producer_epoch, None))

    def ended(self, transactional_id: str, producer_id: int, producer_epoch: int, committed: bool,
              then: Callable[[bool], None] | None = None) -> None:
        """`then(recorded)`, if given, once the end is recorded or could not be."""
        self._offer((transactional_id, producer_id, producer_epoch, committed), then)

    def hold_end(self, api_version: int, frame: bytes, pending: Pending) -> Pending | None:
        """For EndTxn request `frame` (without its size): the Pending its answer from the
        broker is to complete, which completes `pending` (the client's) once an end answered
        NONE is recorded, with a CloseConnection where it could not be; any other answer at
        once. None: a request that does not read (relayed as it is, unrecorded)."""
        try:
            _, request = decode_request(frame, whole=False)
        except ProtocolError:
            return None
        end = (request.transactional_id, request.producer_id, request.producer_epoch, request.committed)
        held = Pending()

        def answered(make) -> None:
            try:
                answer = make()
                _, body, _ = decode_broker_response(END_TXN.key, api_version, answer[4:])
            except Exception:  # noqa: BLE001 - not readable: relayed as it came, unrecorded
                pending.resolve(make)
                return
            if body.error_code != ErrorCode.NONE:
                pending.resolve(lambda: answer)
                return
            self.ended(*end, then=lambda recorded: pending.resolve((lambda: answer) if recorded else _unrecorded))
        held.on_resolved(answered)
        return held

    def _offer(self, item: tuple, then: Callable[[bool], None] | None = None) -> None:
        try:
            self._send.send_nowait((*item, int(time.time() * 1000), trio.current_time(), then))
        except trio.WouldBlock:
            if then is not None:
                then(False)
            UNRECORDED.labels("queue_full").inc()
            if not self._dropped:
                self.log.warning("transaction states to record are queued to the limit: new ones are dropped "
                                 "until there is room (ZooKeeper slow or away?)", limit=QUEUE_LIMIT)
            self._dropped += 1
            return
        if self._dropped:
            self.log.info("transaction states are queued again", dropped=self._dropped)
            self._dropped = 0

    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        async for transactional_id, producer_id, epoch, committed, at_ms, seen, then in self._receive:
            timeout = max(0.0, seen + WRITE_TIMEOUT - trio.current_time())
            if committed is None:
                recorded = await self.outcomes.record_begun(transactional_id, producer_id, epoch, at_ms, timeout)
            else:
                recorded = await self.outcomes.record_end(transactional_id, producer_id, epoch, committed, at_ms,
                                                          timeout)
            if then is not None:
                then(recorded)

    @property
    def queued(self) -> int:
        return self._send.statistics().current_buffer_used


def _unrecorded() -> bytes:
    raise CloseConnection("an EndTxn's end could not be recorded: the producer asks again")


def observer(api_key: int, api_version: int, frame: bytes, recorder: Recorder) -> Callable[[bytes], None] | None:
    """What reads the answer to request `frame` (without its size) and records what it says;
    None when there is nothing to record (not a transaction's request, an idempotent
    producer's InitProducerId, a request that does not read)."""
    if api_key not in OBSERVED:
        return None
    try:
        _, request = decode_request(frame, whole=False)
    except ProtocolError:
        return None
    if api_key == INIT_PRODUCER_ID.key:
        transactional_id = request.transactional_id
        if transactional_id is None:
            return None

        def seen(answer: bytes) -> None:
            _, body, _ = decode_broker_response(api_key, api_version, answer)
            if body.error_code == ErrorCode.NONE and body.producer_id >= 0:
                recorder.begun(transactional_id, body.producer_id, body.producer_epoch)
        return seen
    transactional_id, producer_id, epoch, committed = (request.transactional_id, request.producer_id,
                                                       request.producer_epoch, request.committed)

    def ended(answer: bytes) -> None:
        _, body, _ = decode_broker_response(api_key, api_version, answer)
        if body.error_code == ErrorCode.NONE:
            # the request's producer id and epoch, not a v5 answer's (KIP-890: the next ones)
            recorder.ended(transactional_id, producer_id, epoch, committed)
    return ended


def observing(api_key: int, api_version: int, frame: bytes, recorder: Recorder,
              rewriter: Callable[[bytes], bytes] | None) -> Callable[[bytes], bytes] | None:
    """`rewriter` (what makes a relayed answer, without its size, the frame the client gets;
    None: the answer as it came) with the answer read on the way for `recorder`, if request
    `frame` is one whose answer is recorded. Reading never changes the answer nor fails it."""
    seen = observer(api_key, api_version, frame, recorder)
    if seen is None:
        return rewriter

    def observed(answer: bytes) -> bytes:
        try:
            seen(answer)
        except Exception:  # noqa: BLE001 - an answer that does not read is relayed all the same, unrecorded
            pass
        return framed(answer) if rewriter is None else rewriter(answer)
    return observed

