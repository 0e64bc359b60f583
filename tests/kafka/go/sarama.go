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

// consumeSarama is a sarama group member: every record it reads is marked, and at the end
// its session commits what was marked (AutoCommit off, Commit()).
func consumeSarama(o *options) {
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
	client, err := sarama.NewClient(o.brokers(), config)
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
