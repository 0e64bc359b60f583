package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"sync"
	"time"

	"github.com/IBM/sarama"
)

func saramaStrategy(o *options) sarama.BalanceStrategy {
	switch o.strategy {
	case "", "range":
		return sarama.NewBalanceStrategyRange()
	case "roundrobin":
		return sarama.NewBalanceStrategyRoundRobin()
	case "sticky":
		return sarama.NewBalanceStrategySticky()
	case "cooperative-sticky":
		return sarama.NewBalanceStrategyCooperativeSticky()
	}
	fail("unknown strategy %q", o.strategy)
	return nil
}

// saramaHandler follows sarama's sessions: the claims a session starts with, the claims a
// cooperative rebalance adds (a ConsumeClaim starts) or revokes (a ConsumeClaim ends while
// its session goes on), and no claims once the session ends.
type saramaHandler struct {
	m    *member
	mu   sync.Mutex
	sess sarama.ConsumerGroupSession
}

func (h *saramaHandler) session() sarama.ConsumerGroupSession {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.sess
}

func (h *saramaHandler) Setup(sess sarama.ConsumerGroupSession) error {
	h.mu.Lock()
	h.sess = sess
	h.mu.Unlock()
	h.m.replace(sess.Claims())
	return nil
}

func (h *saramaHandler) Cleanup(sess sarama.ConsumerGroupSession) error {
	h.mu.Lock()
	h.sess = nil
	h.mu.Unlock()
	h.m.replace(nil)
	return nil
}

func (h *saramaHandler) ConsumeClaim(sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	mine := map[string][]int32{claim.Topic(): {claim.Partition()}}
	h.m.change(mine, nil)
	defer func() {
		if sess.Context().Err() == nil { // revoked by a cooperative rebalance
			h.m.change(nil, mine)
		}
	}()
	for {
		select {
		case message, ok := <-claim.Messages():
			if !ok {
				return nil
			}
			h.m.read(string(message.Value), func() { sess.MarkMessage(message, "") })
		case <-sess.Context().Done():
			return nil
		}
	}
}

// saramaConfig is a sarama group member's configuration as the flags say: from the oldest
// offset where none is committed, autocommit off (what was read is committed when the
// caller says).
func saramaConfig(o *options) *sarama.Config {
	if o.verbose {
		sarama.Logger = log.New(os.Stderr, "[sarama] ", log.Ltime|log.Lmicroseconds)
	}
	config := sarama.NewConfig()
	config.ClientID = "goclients-sarama"
	if o.kafkaVersion != "" {
		version, err := sarama.ParseKafkaVersion(o.kafkaVersion)
		if err != nil {
			fail("sarama: %v", err)
		}
		config.Version = version
	}
	config.Consumer.Offsets.Initial = sarama.OffsetOldest
	config.Consumer.Offsets.AutoCommit.Enable = false
	config.Consumer.Return.Errors = true
	config.Consumer.Group.Session.Timeout = o.sessionTimeout()
	config.Consumer.Group.Heartbeat.Interval = o.heartbeatInterval()
	config.Consumer.Group.Rebalance.GroupStrategies = []sarama.BalanceStrategy{saramaStrategy(o)}
	config.Consumer.Group.InstanceId = o.instanceID
	return config
}

// consumeSarama is a sarama group member: every record it reads is marked, and at the end
// its session commits what was marked (AutoCommit off, Commit()).
func consumeSarama(o *options) {
	client, err := sarama.NewClient(o.brokers(), saramaConfig(o))
	if err != nil {
		fail("sarama: %v", err)
	}
	group, err := sarama.NewConsumerGroupFromClient(o.group, client)
	if err != nil {
		fail("sarama: %v", err)
	}
	go func() {
		for err := range group.Errors() {
			fmt.Fprintf(os.Stderr, "goclients: sarama: %v\n", err)
		}
	}()
	m := newMember()
	handler := &saramaHandler{m: m}
	ctx, cancel := context.WithCancel(context.Background())
	consuming := make(chan struct{})
	go func() {
		defer close(consuming)
		for ctx.Err() == nil { // an eager rebalance ends Consume: join again
			err := group.Consume(ctx, o.topicList(), handler)
			if errors.Is(err, sarama.ErrClosedConsumerGroup) {
				return
			}
			if err != nil {
				fmt.Fprintf(os.Stderr, "goclients: sarama: consuming: %v\n", err)
				select {
				case <-ctx.Done():
				case <-time.After(100 * time.Millisecond):
				}
			}
		}
	}()
	deadline := time.Now().Add(time.Duration(o.seconds * float64(time.Second)))
	tick := time.NewTicker(50 * time.Millisecond)
	for !m.done(o, deadline) {
		<-tick.C
	}
	tick.Stop()
	committed := map[string]int64{}
	memberID, generation := "", int32(-1)
	if sess := handler.session(); sess != nil {
		memberID, generation = sess.MemberID(), sess.GenerationID()
		if held := m.heldByTopic(); o.commit && len(held) > 0 {
			sess.Commit() // synchronous; a failure goes to group.Errors() and shows in the read-back
			committed = saramaCommitted(client, o.group, held)
		}
	}
	say(m.result(committed, memberID, generation))
	cancel()
	select {
	case <-consuming:
	case <-time.After(30 * time.Second):
		fmt.Fprintln(os.Stderr, "goclients: sarama: the session did not end within 30 s")
	}
	if err := group.Close(); err != nil {
		fmt.Fprintf(os.Stderr, "goclients: sarama: closing: %v\n", err)
	}
	client.Close()
}

// saramaCommitted reads the group's commits of `partitions` back from its coordinator, as
// sarama's admin client does (OffsetFetch).
func saramaCommitted(client sarama.Client, group string, partitions map[string][]int32) map[string]int64 {
	admin, err := sarama.NewClusterAdminFromClient(client)
	if err != nil {
		fail("sarama: %v", err)
	}
	// not closed: that would close the client, which consumeSarama closes last
	answer, err := admin.ListConsumerGroupOffsets(group, partitions)
	if err != nil {
		fail("sarama: fetching the commits: %v", err)
	}
	if answer.Err != sarama.ErrNoError {
		fail("sarama: fetching the commits: %v", answer.Err)
	}
	committed := map[string]int64{}
	for topic, blocks := range answer.Blocks {
		for index, block := range blocks {
			if block.Err != sarama.ErrNoError {
				fail("sarama: fetching the commit of %s-%d: %v", topic, index, block.Err)
			}
			if block.Offset >= 0 {
				committed[partitionName(topic, index)] = block.Offset
			}
		}
	}
	return committed
}

// claimed is a message a claim of a session delivered.
type claimed struct {
	sess    sarama.ConsumerGroupSession
	message *sarama.ConsumerMessage
}

// copyHandler hands the copy loop every session as it starts and the messages its claims
// deliver, tagged with the session: a message of an ended session is one to read again.
type copyHandler struct {
	m        *member
	sessions chan sarama.ConsumerGroupSession
	messages chan claimed
}

func (h *copyHandler) Setup(sess sarama.ConsumerGroupSession) error {
	h.m.replace(sess.Claims())
	select {
	case h.sessions <- sess:
	case <-sess.Context().Done():
	}
	return nil
}

func (h *copyHandler) Cleanup(sarama.ConsumerGroupSession) error {
	h.m.replace(nil)
	return nil
}

func (h *copyHandler) ConsumeClaim(sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	for {
		select {
		case message, ok := <-claim.Messages():
			if !ok {
				return nil
			}
			select {
			case h.messages <- claimed{sess, message}:
			case <-sess.Context().Done():
				return nil
			}
		case <-sess.Context().Done():
			return nil
		}
	}
}

// copySarama is sarama's exactly-once loop (copier.go): a transactional SyncProducer and a
// ConsumerGroup whose read_committed claims feed one loop, since a producer has one
// transaction at a time; each batch's offsets go with AddOffsetsToTxnWithGroupMetadata (the
// session's member and generation: TxnOffsetCommit v3). sarama's claims cannot seek, so a
// rewind ends the session (the Consume call's context) and joins again: the new session's
// claims start from the group's committed offsets (OffsetFetch with require_stable, as
// sarama asks for a read_committed consumer), and what the old one delivered is dropped.
func copySarama(o *options) {
	c := newCopier(o)
	config := saramaConfig(o)
	config.ClientID = "goclients-sarama-copier"
	config.Consumer.IsolationLevel = sarama.ReadCommitted
	config.Producer.Idempotent = true
	config.Producer.RequiredAcks = sarama.WaitForAll
	config.Producer.Return.Successes = true
	config.Producer.Partitioner = sarama.NewManualPartitioner
	config.Producer.Transaction.ID = o.transactionalID
	config.Producer.Transaction.Timeout = 60 * time.Second
	config.Net.MaxOpenRequests = 1 // the idempotent producer's requirement
	producer, err := sarama.NewSyncProducer(o.brokers(), config)
	if err != nil {
		fail("sarama: %v", err)
	}
	say(map[string]any{"initialized": true})
	group, err := sarama.NewConsumerGroup(o.brokers(), o.group, config)
	if err != nil {
		fail("sarama: %v", err)
	}
	go func() {
		for err := range group.Errors() {
			fmt.Fprintf(os.Stderr, "goclients: sarama: %v\n", err)
		}
	}()
	handler := &copyHandler{m: newMember(), sessions: make(chan sarama.ConsumerGroupSession),
		messages: make(chan claimed, 4*o.batch)}
	for c.more() {
		// one round: sessions of the group until a transaction is aborted
		ctx, cancel := context.WithCancel(context.Background())
		consuming := make(chan struct{})
		go func() {
			defer close(consuming)
			for ctx.Err() == nil { // a rebalance ends Consume: join again
				if err := group.Consume(ctx, o.topicList(), handler); err != nil && ctx.Err() == nil {
					fmt.Fprintf(os.Stderr, "goclients: sarama: consuming: %v\n", err)
					time.Sleep(100 * time.Millisecond)
				}
			}
		}()
		copySaramaRound(c, o, producer, handler)
		cancel()
		<-consuming
	}
	c.done(true)
	if err := group.Close(); err != nil {
		fmt.Fprintf(os.Stderr, "goclients: sarama: closing the group: %v\n", err)
	}
	if err := producer.Close(); err != nil {
		fmt.Fprintf(os.Stderr, "goclients: sarama: closing the producer: %v\n", err)
	}
}

// copySaramaRound copies batches in transactions until one is aborted (planned or failed)
// or everything is copied.
func copySaramaRound(c *copier, o *options, producer sarama.SyncProducer, h *copyHandler) {
	var sess sarama.ConsumerGroupSession
	for c.more() {
		var batch []*sarama.ConsumerMessage
		wait := time.After(500 * time.Millisecond)
	gather:
		for len(batch) < o.batch {
			select {
			case s := <-h.sessions:
				sess, batch = s, nil // a new session (a rebalance) reads from the committed offsets
			case got := <-h.messages:
				if got.sess == sess {
					batch = append(batch, got.message)
				}
			case <-wait:
				break gather
			}
			if len(batch) > 0 { // the batch is what has come so far, the first message's wait aside
				wait = time.After(20 * time.Millisecond)
			}
		}
		if len(batch) == 0 {
			continue
		}
		if err := producer.BeginTxn(); err != nil {
			c.fatal(fmt.Errorf("sarama: beginning a transaction: %w", err))
		}
		abort := c.begin()
		values, offsets := make([]string, 0, len(batch)), map[string]int64{}
		out := make([]*sarama.ProducerMessage, 0, len(batch))
		next := map[string][]*sarama.PartitionOffsetMetadata{}
		at := map[partition]*sarama.PartitionOffsetMetadata{}
		for _, message := range batch {
			values = append(values, string(message.Value))
			out = append(out, &sarama.ProducerMessage{Topic: o.copyTo, Partition: message.Partition,
				Value: sarama.StringEncoder("out-" + string(message.Value))})
			offsets[partitionName(message.Topic, message.Partition)] = message.Offset + 1
			p := partition{message.Topic, message.Partition}
			if at[p] == nil {
				at[p] = &sarama.PartitionOffsetMetadata{Partition: message.Partition, LeaderEpoch: -1}
				next[message.Topic] = append(next[message.Topic], at[p])
			}
			at[p].Offset = message.Offset + 1 // the next offset to read
		}
		err := producer.SendMessages(out)
		if err == nil {
			err = producer.AddOffsetsToTxnWithGroupMetadata(next, &sarama.ConsumerGroupMetadata{
				GroupID: o.group, GenerationID: sess.GenerationID(), MemberID: sess.MemberID()})
		}
		if err == nil && !abort {
			err = producer.CommitTxn()
			if err == nil {
				c.committed(values, offsets)
				continue
			}
		}
		if err != nil {
			if producer.TxnStatus()&sarama.ProducerTxnFlagFatalError != 0 {
				c.fatal(fmt.Errorf("sarama: %w", err))
			}
			c.failure(fmt.Errorf("sarama: %w", err))
		}
		if aborting := producer.AbortTxn(); aborting != nil {
			c.fatal(fmt.Errorf("sarama: aborting: %w", aborting))
		}
		if err == nil && abort {
			c.plannedAbort()
		}
		return // a rewind: the next round's session reads from the committed offsets
	}
}
