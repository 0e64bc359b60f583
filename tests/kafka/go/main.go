// Command goclients is a group member of one of two unmodified Go clients, franz-go
// (github.com/twmb/franz-go) or IBM sarama (github.com/IBM/sarama), for the tests, with
// the contract of tests/kafka/java/GroupConsumer.java:
//
//	goclients --client franz|franz-go|sarama --bootstrap H:P --group G [--protocol classic|consumer]
//	    [--topics a,b | --pattern REGEX] [--records N] [--seconds S] [--stop-file PATH]
//	    [--commit] [--instance-id ID] [--strategy NAME] [--session-timeout-ms MS]
//	    [--kafka-version V] [--verbose]
//
// It reads until it has read N records, or the stop file exists, or S seconds have passed;
// then commits what it read (--commit, synchronously), reads the commits back from the
// group's coordinator and closes. On stdout, one JSON object a line: {"assigned": [...]} at
// every change of its assignment, {"count": N} as it reads (at most twice a second), then
// {"read": N, "values": [...], "committed": {"t-0": 12, ...}, "member": "...", "generation": G}.
// The client's own log goes to stderr.
//
//	goclients --produce N --bootstrap H:P --topics T [--partitions P] [--prefix X]
//
// produces N records "X-i" with franz-go (acks=all, idempotent): record i to partition
// i % P when P > 0, else where franz-go's default partitioner puts it; prints
// {"acked": N, "failed": F, "partitions": {"0": n0, ...}}.
//
//	goclients --client franz|sarama --copy-to OUT --transactional-id X --bootstrap H:P
//	    --group G --topics IN [--protocol P] [--records N] [--abort-every N] [--batch N] [--seconds S]
//
// copies IN to OUT in transactions, exactly once: the exactly-once loop of copier.go.
//
// --protocol consumer is KIP-848 (franz-go's ServerSideBalancer, with a range or sticky
// strategy: "sticky" and "cooperative-sticky" ask for the server's uniform assignor);
// sarama speaks the classic protocol only.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

type options struct {
	client, protocol, bootstrap, group string
	topics, pattern                    string
	records                            int
	seconds                            float64
	stopFile                           string
	commit                             bool
	instanceID, strategy, kafkaVersion string
	sessionTimeoutMs                   int
	verbose                            bool
	produce, partitions                int
	prefix                             string
	copyTo, transactionalID            string
	abortEvery, batch                  int
}

func (o *options) brokers() []string { return strings.Split(o.bootstrap, ",") }

func (o *options) topicList() []string {
	var out []string
	for _, t := range strings.Split(o.topics, ",") {
		if t != "" {
			out = append(out, t)
		}
	}
	return out
}

func (o *options) sessionTimeout() time.Duration {
	return time.Duration(o.sessionTimeoutMs) * time.Millisecond
}

// heartbeatInterval is what the other clients of the tests use: a third of the session,
// at most a second.
func (o *options) heartbeatInterval() time.Duration {
	return min(time.Second, o.sessionTimeout()/3)
}

var stdout sync.Mutex

// say prints one JSON object on a line of its own.
func say(fields map[string]any) {
	line, err := json.Marshal(fields)
	if err != nil {
		panic(err)
	}
	stdout.Lock()
	defer stdout.Unlock()
	os.Stdout.Write(append(line, '\n'))
}

// member is what a group member of either client shares: the partitions it holds, the
// values it read, and when it must stop reading.
type member struct {
	mu       sync.Mutex
	held     map[partition]bool
	reported bool
	values   []string
	distinct map[string]struct{} // what "count" says: values read, each once
	stopped  bool
	said     int
	saidAt   time.Time
}

type partition struct {
	topic string
	index int32
}

func (p partition) String() string { return partitionName(p.topic, p.index) }

func partitionName(topic string, index int32) string { return fmt.Sprintf("%s-%d", topic, index) }

func newMember() *member { return &member{held: map[partition]bool{}} }

// change applies an assignment change, and says the new assignment when it differs, and
// always the first time (an empty first assignment is news too).
func (m *member) change(add, remove map[string][]int32) {
	m.mu.Lock()
	defer m.mu.Unlock()
	changed := !m.reported
	for topic, indexes := range add {
		for _, i := range indexes {
			changed = changed || !m.held[partition{topic, i}]
			m.held[partition{topic, i}] = true
		}
	}
	for topic, indexes := range remove {
		for _, i := range indexes {
			changed = changed || m.held[partition{topic, i}]
			delete(m.held, partition{topic, i})
		}
	}
	if changed {
		m.reported = true
		names := make([]string, 0, len(m.held))
		for p := range m.held {
			names = append(names, p.String())
		}
		sort.Strings(names)
		say(map[string]any{"assigned": names})
	}
}

// replace makes `claims` the whole assignment.
func (m *member) replace(claims map[string][]int32) {
	gone := m.heldByTopic()
	for topic, indexes := range gone {
		gone[topic] = slices.DeleteFunc(indexes, func(i int32) bool { return slices.Contains(claims[topic], i) })
	}
	m.change(claims, gone)
}

func (m *member) heldByTopic() map[string][]int32 {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string][]int32{}
	for p := range m.held {
		out[p.topic] = append(out[p.topic], p.index)
	}
	return out
}

// read records a value and runs `mark` (which makes it one to commit), both at once, unless
// the member has stopped reading: then the record is neither counted nor committed.
func (m *member) read(value string, mark func()) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stopped {
		return
	}
	m.values = append(m.values, value)
	if m.distinct == nil {
		m.distinct = map[string]struct{}{}
	}
	m.distinct[value] = struct{}{}
	if mark != nil {
		mark()
	}
}

// done says whether reading is over (and, once it is, stops it for good); says the count
// on the way, at most twice a second.
func (m *member) done(o *options, deadline time.Time) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if n := len(m.distinct); n != m.said && time.Since(m.saidAt) > 500*time.Millisecond {
		m.said, m.saidAt = n, time.Now()
		say(map[string]any{"count": n})
	}
	if !m.stopped && (len(m.values) >= o.records || time.Now().After(deadline) || stopFileExists(o)) {
		m.stopped = true
	}
	return m.stopped
}

func (m *member) result(committed map[string]int64, memberID string, generation int32) map[string]any {
	m.mu.Lock()
	defer m.mu.Unlock()
	values := m.values
	if values == nil {
		values = []string{}
	}
	return map[string]any{"read": len(values), "values": values, "committed": committed,
		"member": memberID, "generation": generation}
}

func stopFileExists(o *options) bool {
	if o.stopFile == "" {
		return false
	}
	_, err := os.Stat(o.stopFile)
	return err == nil
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "goclients: "+format+"\n", args...)
	os.Exit(2)
}

func main() {
	o := &options{}
	flag.StringVar(&o.client, "client", "franz", "franz (or franz-go) or sarama")
	flag.StringVar(&o.protocol, "protocol", "classic", "classic, or consumer (KIP-848; franz-go only)")
	flag.StringVar(&o.bootstrap, "bootstrap", "", "HOST:PORT[,HOST:PORT...]")
	flag.StringVar(&o.group, "group", "", "the consumer group")
	flag.StringVar(&o.topics, "topics", "", "topics to subscribe to, comma-separated")
	flag.StringVar(&o.pattern, "pattern", "", "a regular expression of topics to subscribe to (franz-go only)")
	flag.IntVar(&o.records, "records", int(^uint(0)>>1), "stop once this many records are read")
	flag.Float64Var(&o.seconds, "seconds", 120, "stop after this many seconds")
	flag.StringVar(&o.stopFile, "stop-file", "", "stop once this file exists")
	flag.BoolVar(&o.commit, "commit", false, "commit what was read, then read the commits back")
	flag.StringVar(&o.instanceID, "instance-id", "", "group.instance.id: a static member")
	flag.StringVar(&o.strategy, "strategy", "", "the assignment strategy: range, roundrobin, sticky, cooperative-sticky "+
		"(default: the client's own, franz-go's cooperative-sticky, sarama's range)")
	flag.IntVar(&o.sessionTimeoutMs, "session-timeout-ms", 10000, "the classic protocol's session timeout")
	flag.StringVar(&o.kafkaVersion, "kafka-version", "", "sarama's Config.Version (default: sarama's own)")
	flag.BoolVar(&o.verbose, "verbose", false, "the client's debug log on stderr")
	flag.IntVar(&o.produce, "produce", 0, "produce this many records to the one topic instead of consuming")
	flag.IntVar(&o.partitions, "partitions", 0, "with --produce: record i to partition i % P")
	flag.StringVar(&o.prefix, "prefix", "go", "with --produce: the values' prefix")
	flag.StringVar(&o.copyTo, "copy-to", "", "copy --topics to this topic exactly once (copier.go) instead of consuming")
	flag.StringVar(&o.transactionalID, "transactional-id", "", "with --copy-to: the producer's transactional id")
	flag.IntVar(&o.abortEvery, "abort-every", 0, "with --copy-to: abort every Nth transaction and rewind")
	flag.IntVar(&o.batch, "batch", 10, "with --copy-to: records a transaction at most")
	flag.Parse()
	if flag.NArg() > 0 {
		fail("unexpected arguments: %v", flag.Args())
	}
	if o.bootstrap == "" {
		fail("--bootstrap is required")
	}
	if o.produce > 0 {
		if len(o.topicList()) != 1 {
			fail("--produce needs exactly one topic in --topics")
		}
		produceFranz(o)
		return
	}
	if o.group == "" || (o.topics == "") == (o.pattern == "") {
		fail("--group and one of --topics or --pattern are required")
	}
	if o.protocol != "classic" && o.protocol != "consumer" {
		fail("--protocol is classic or consumer, not %q", o.protocol)
	}
	if o.copyTo != "" {
		if o.transactionalID == "" || o.pattern != "" || o.batch < 1 {
			fail("--copy-to needs --transactional-id, --topics (not --pattern) and a --batch of 1 or more")
		}
		switch o.client {
		case "franz", "franz-go":
			copyFranz(o)
		case "sarama":
			if o.protocol != "classic" {
				fail("sarama has no KIP-848 consumer protocol (no ConsumerGroupHeartbeat): classic only")
			}
			copySarama(o)
		default:
			fail("--client is franz or sarama, not %q", o.client)
		}
		return
	}
	switch o.client {
	case "franz", "franz-go":
		consumeFranz(o)
	case "sarama":
		if o.protocol != "classic" {
			fail("sarama has no KIP-848 consumer protocol (no ConsumerGroupHeartbeat): classic only")
		}
		if o.pattern != "" {
			fail("sarama subscribes to named topics only, not to a pattern")
		}
		consumeSarama(o)
	default:
		fail("--client is franz or sarama, not %q", o.client)
	}
}
