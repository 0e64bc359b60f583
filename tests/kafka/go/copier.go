package main

// The exactly-once read-process-write loop of either client, with the contract of
// tests/kafka/java/EosCopier.java, so that the conformance matrix drives every client's
// loop alike (tests/support/members.py's copy_exactly_once):
//
//	goclients --client franz|sarama --copy-to OUT --transactional-id X --bootstrap H:P
//	    --group G --topics IN [--protocol classic|consumer] [--records N] [--abort-every N]
//	    [--batch N] [--seconds S]
//
// A read_committed consumer in group G and a transactional producer copy every record of IN
// to OUT as "out-" + its value, on the same partition, each polled batch (at most --batch
// records) in one transaction that also carries the consumer's positions with its group
// metadata (franz-go: a GroupTransactSession; sarama: AddOffsetsToTxnWithGroupMetadata).
// --abort-every N: every Nth transaction is aborted instead of committed, and the consumer
// goes back to the group's committed offsets to read the batch again. It stops once N input
// records were copied in committed transactions, or after S seconds ({"done": false, ...},
// exit status 3). An error the client calls fatal ends it with {"fatal": ...}, exit status
// 2; any other in a transaction aborts it and rewinds, counted "failed".
//
// On stdout, one JSON object a line: {"initialized": true} once the producer has its
// producer id (sarama asks for it when the producer is made; franz-go only at its first
// transaction, so it says this before that); {"assigned": [...]} at every change of the
// assignment; {"committed": [values...], "offsets": {"t-0": 12, ...}} per committed
// transaction; {"aborted": N} per planned abort (N: so far); {"failed": "..."} per
// transaction failed; at the end {"done": true, "copied": N, "transactions": T, "aborted": A,
// "failed": F} (T: committed).

import (
	"os"
	"time"
)

// copier counts what a copy loop did and says it as the contract above has it.
type copier struct {
	o                                            *options
	deadline                                     time.Time
	copied, transactions, aborted, failed, begun int
}

func newCopier(o *options) *copier {
	return &copier{o: o, deadline: time.Now().Add(time.Duration(o.seconds * float64(time.Second)))}
}

// more says whether to go on copying; past the deadline it says so and exits 3.
func (c *copier) more() bool {
	if c.copied >= c.o.records {
		return false
	}
	if time.Now().After(c.deadline) {
		c.done(false)
		os.Exit(3)
	}
	return true
}

// begin counts a transaction begun and says whether it is one to abort.
func (c *copier) begin() (abort bool) {
	c.begun++
	return c.o.abortEvery > 0 && c.begun%c.o.abortEvery == 0
}

func (c *copier) committed(values []string, offsets map[string]int64) {
	c.transactions++
	c.copied += len(values)
	say(map[string]any{"committed": values, "offsets": offsets})
}

func (c *copier) plannedAbort() {
	c.aborted++
	say(map[string]any{"aborted": c.aborted})
}

func (c *copier) failure(err error) {
	c.failed++
	say(map[string]any{"failed": err.Error()})
}

// fatal ends the program: the producer cannot go on, and the transaction is not ours to end.
func (c *copier) fatal(err error) {
	say(map[string]any{"fatal": err.Error()})
	os.Exit(2)
}

func (c *copier) done(finished bool) {
	say(map[string]any{"done": finished, "copied": c.copied, "transactions": c.transactions,
		"aborted": c.aborted, "failed": c.failed})
}
