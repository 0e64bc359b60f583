package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func franzLogger(o *options) kgo.Opt {
	level := kgo.LogLevelInfo
	if o.verbose {
		level = kgo.LogLevelDebug
	}
	return kgo.WithLogger(kgo.BasicLogger(os.Stderr, level, func() string {
		return time.Now().Format("15:04:05.000 ")
	}))
}

func franzBalancer(o *options) kgo.GroupBalancer {
	switch o.strategy {
	case "", "cooperative-sticky":
		return kgo.CooperativeStickyBalancer()
	case "sticky":
		return kgo.StickyBalancer()
	case "range":
		return kgo.RangeBalancer()
	case "roundrobin":
		if o.protocol == "consumer" {
			// franz-go would quietly fall back to the classic protocol (should848)
			fail("franz-go's KIP-848 members take a range or sticky strategy, not roundrobin")
		}
		return kgo.RoundRobinBalancer()
	}
	fail("unknown strategy %q", o.strategy)
	return nil
}

// franzGroupOpts are a franz-go group member's options as the flags say, its assignment
// followed by `m`; autocommit off (what was read is committed when the caller says).
func franzGroupOpts(o *options, m *member) []kgo.Opt {
	opts := []kgo.Opt{
		kgo.SeedBrokers(o.brokers()...),
		kgo.ClientID("goclients-franz"),
		kgo.ConsumerGroup(o.group),
		kgo.Balancers(franzBalancer(o)),
		kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, p map[string][]int32) { m.change(p, nil) }),
		kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, p map[string][]int32) { m.change(nil, p) }),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, p map[string][]int32) { m.change(nil, p) }),
		franzLogger(o),
	}
	if o.pattern != "" {
		opts = append(opts, kgo.ConsumeTopics(o.pattern), kgo.ConsumeRegex())
	} else {
		opts = append(opts, kgo.ConsumeTopics(o.topicList()...))
	}
	if o.protocol == "consumer" {
		opts = append(opts, kgo.ServerSideBalancer())
	} else {
		opts = append(opts, kgo.SessionTimeout(o.sessionTimeout()), kgo.HeartbeatInterval(o.heartbeatInterval()))
	}
	if o.instanceID != "" {
		opts = append(opts, kgo.InstanceID(o.instanceID))
	}
	return opts
}

// consumeFranz is a franz-go group member: it polls, counts every record it polled, and
// at the end commits everything it polled (CommitUncommittedOffsets).
func consumeFranz(o *options) {
	m := newMember()
	cl, err := kgo.NewClient(franzGroupOpts(o, m)...)
	if err != nil {
		fail("franz-go: %v", err)
	}
	deadline := time.Now().Add(time.Duration(o.seconds * float64(time.Second)))
	for !m.done(o, deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		fetches := cl.PollFetches(ctx)
		cancel()
		fetches.EachError(func(topic string, partition int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) {
				fmt.Fprintf(os.Stderr, "goclients: fetching %s-%d: %v\n", topic, partition, err)
			}
		})
		fetches.EachRecord(func(r *kgo.Record) { m.read(string(r.Value), nil) })
	}
	committed := map[string]int64{}
	if held := m.heldByTopic(); o.commit && len(held) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if err := cl.CommitUncommittedOffsets(ctx); err != nil {
			fail("franz-go: committing: %v", err)
		}
		committed = franzCommitted(ctx, cl, o.group, held)
		cancel()
	}
	memberID, generation := cl.GroupMetadata()
	say(m.result(committed, memberID, generation))
	cl.Close()
}

// franzCommitted reads the group's commits of `partitions` back from its coordinator: an
// OffsetFetch of the client's own (franz-go sends it to the coordinator it finds).
func franzCommitted(ctx context.Context, cl *kgo.Client, group string, partitions map[string][]int32) map[string]int64 {
	req := kmsg.NewPtrOffsetFetchRequest()
	fetched := kmsg.NewOffsetFetchRequestGroup()
	fetched.Group = group
	for topic, ps := range partitions {
		t := kmsg.NewOffsetFetchRequestGroupTopic()
		t.Topic, t.Partitions = topic, ps
		fetched.Topics = append(fetched.Topics, t)
	}
	req.Groups = append(req.Groups, fetched)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		fail("franz-go: fetching the commits: %v", err)
	}
	committed := map[string]int64{}
	for _, g := range resp.Groups {
		if err := kerr.ErrorForCode(g.ErrorCode); err != nil {
			fail("franz-go: fetching the commits: %v", err)
		}
		for _, t := range g.Topics {
			for _, p := range t.Partitions {
				if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
					fail("franz-go: fetching the commit of %s-%d: %v", t.Topic, p.Partition, err)
				}
				if p.Offset >= 0 {
					committed[partitionName(t.Topic, p.Partition)] = p.Offset
				}
			}
		}
	}
	return committed
}

// produceFranz produces o.produce records to the one topic and says how many were acked.
func produceFranz(o *options) {
	topic := o.topicList()[0]
	opts := []kgo.Opt{
		kgo.SeedBrokers(o.brokers()...),
		kgo.ClientID("goclients-franz-producer"),
		kgo.DefaultProduceTopic(topic),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		franzLogger(o),
	}
	if o.partitions > 0 {
		opts = append(opts, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		fail("franz-go: %v", err)
	}
	defer cl.Close()
	records := make([]*kgo.Record, o.produce)
	for i := range records {
		records[i] = &kgo.Record{Value: []byte(o.prefix + "-" + strconv.Itoa(i))}
		if o.partitions > 0 {
			records[i].Partition = int32(i % o.partitions)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	acked, failed := 0, 0
	partitions := map[string]int{}
	for _, result := range cl.ProduceSync(ctx, records...) {
		if result.Err != nil {
			failed++
			fmt.Fprintf(os.Stderr, "goclients: producing %s: %v\n", result.Record.Value, result.Err)
			continue
		}
		acked++
		partitions[strconv.Itoa(int(result.Record.Partition))]++
	}
	say(map[string]any{"acked": acked, "failed": failed, "partitions": partitions})
	if failed > 0 {
		os.Exit(1)
	}
}

// copyFranz is franz-go's exactly-once loop (copier.go): a GroupTransactSession, which sends
// the polled offsets with each transaction (TxnOffsetCommit with the group's member and
// generation or epoch) and, on an abort, sets the consumer back to the offsets last committed.
func copyFranz(o *options) {
	c := newCopier(o)
	m := newMember()
	opts := append(franzGroupOpts(o, m),
		kgo.TransactionalID(o.transactionalID),
		kgo.TransactionTimeout(60*time.Second),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.RequireStableFetchOffsets(),
		kgo.DefaultProduceTopic(o.copyTo),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
	)
	sess, err := kgo.NewGroupTransactSession(opts...)
	if err != nil {
		fail("franz-go: %v", err)
	}
	say(map[string]any{"initialized": true})
	for c.more() {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		fetches := sess.PollRecords(ctx, o.batch)
		cancel()
		fetches.EachError(func(topic string, partition int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) {
				fmt.Fprintf(os.Stderr, "goclients: fetching %s-%d: %v\n", topic, partition, err)
			}
		})
		records := fetches.Records()
		if len(records) == 0 {
			continue
		}
		if err := sess.Begin(); err != nil {
			c.fatal(fmt.Errorf("franz-go: beginning a transaction: %w", err))
		}
		abort := c.begin()
		values, offsets := make([]string, 0, len(records)), map[string]int64{}
		var produced error
		var mu sync.Mutex
		ctx, cancel = context.WithTimeout(context.Background(), 60*time.Second)
		for _, r := range records {
			values = append(values, string(r.Value))
			offsets[partitionName(r.Topic, r.Partition)] = r.Offset + 1 // the next offset to read
			sess.Produce(ctx, &kgo.Record{Partition: r.Partition, Value: []byte("out-" + string(r.Value))},
				func(_ *kgo.Record, err error) {
					if err != nil {
						mu.Lock()
						produced = err
						mu.Unlock()
					}
				})
		}
		// End flushes (or, aborting, drops) what was produced; it commits only if the group
		// did not rebalance meanwhile and TxnOffsetCommit succeeded, else it aborts; either
		// way it leaves the consumer at the offsets then committed
		committed, err := sess.End(ctx, kgo.TransactionEndTry(!abort))
		cancel()
		mu.Lock()
		failed := produced
		mu.Unlock()
		switch {
		case err != nil: // "no returned error is retryable" (End's documentation)
			c.fatal(fmt.Errorf("franz-go: ending a transaction: %w", err))
		case committed && failed != nil:
			c.fatal(fmt.Errorf("franz-go: a transaction committed with a record not produced: %w", failed))
		case committed:
			c.committed(values, offsets)
		case abort:
			c.plannedAbort()
		case failed != nil:
			c.failure(fmt.Errorf("franz-go: producing: %w", failed))
		default:
			c.failure(errors.New("franz-go: the transaction session aborted instead of committing (a " +
				"rebalance, or TxnOffsetCommit failed: see its log)"))
		}
	}
	c.done(true)
	sess.Close()
}
