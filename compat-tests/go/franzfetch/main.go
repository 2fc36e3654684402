// Command franzfetch drives franz-go's consumer against a broker while what it fetches
// changes under it, and fails unless every record produced arrives in time.
//
// Scenarios (-scenario):
//
//	group: a group member consumes; while records keep flowing a second member joins
//	       and a third joins and leaves (rebalances: a member's fetch in flight is
//	       abandoned and its fetch session reset, with its old id and epoch 0); then
//	       partitions are added (another rebalance).
//	seek:  a direct consumer seeks back to the start mid-stream and is given an added
//	       partition; it must read everything again.
//
// Exit status 0: every record arrived; 1: the deadline passed (missing records are
// listed); 2: a setup step failed. The client's log goes to stderr.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

var (
	brokers  = flag.String("brokers", "127.0.0.1:9092", "bootstrap address")
	scenario = flag.String("scenario", "group", "group or seek")
	topic    = flag.String("topic", "franz", "topic to create and use")
	timeout  = flag.Duration("timeout", 60*time.Second, "deadline for the whole scenario")
	perStep  = flag.Int("records", 300, "records produced at each step")
)

func main() {
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	var err error
	switch *scenario {
	case "group":
		err = groupScenario(ctx)
	case "seek":
		err = seekScenario(ctx)
	default:
		err = fmt.Errorf("unknown scenario %q", *scenario)
	}
	var missing missingError
	switch {
	case err == nil:
		fmt.Println("ok")
	case errors.As(err, &missing):
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		os.Exit(1)
	default:
		fmt.Fprintln(os.Stderr, "setup failed:", err)
		os.Exit(2)
	}
}

// seen is the set of record values consumed, by any member.
type seen struct {
	mu     sync.Mutex
	values map[string]bool
}

func newSeen() *seen { return &seen{values: map[string]bool{}} }

func (s *seen) add(v string) {
	s.mu.Lock()
	s.values[v] = true
	s.mu.Unlock()
}

func (s *seen) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.values)
}

func (s *seen) reset() {
	s.mu.Lock()
	s.values = map[string]bool{}
	s.mu.Unlock()
}

type missingError struct{ missing []string }

func (e missingError) Error() string {
	shown := e.missing
	if len(shown) > 20 {
		shown = shown[:20]
	}
	return fmt.Sprintf("%d records never arrived, e.g. %v", len(e.missing), shown)
}

// waitFor waits until every value in want was seen, or the context ends.
func (s *seen) waitFor(ctx context.Context, want []string) error {
	for {
		s.mu.Lock()
		var missing []string
		for _, v := range want {
			if !s.values[v] {
				missing = append(missing, v)
			}
		}
		s.mu.Unlock()
		if len(missing) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			sort.Strings(missing)
			return missingError{missing}
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func newClient(opts ...kgo.Opt) (*kgo.Client, error) {
	base := []kgo.Opt{
		kgo.SeedBrokers(*brokers),
		kgo.WithLogger(kgo.BasicLogger(os.Stderr, kgo.LogLevelInfo, nil)),
		kgo.MetadataMinAge(100 * time.Millisecond),
		kgo.MetadataMaxAge(time.Second),
		kgo.FetchMaxWait(500 * time.Millisecond),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
	}
	return kgo.NewClient(append(base, opts...)...)
}

func createTopic(ctx context.Context, cl *kgo.Client, partitions int32) error {
	req := kmsg.NewPtrCreateTopicsRequest()
	t := kmsg.NewCreateTopicsRequestTopic()
	t.Topic = *topic
	t.NumPartitions = partitions
	t.ReplicationFactor = 1
	req.Topics = append(req.Topics, t)
	req.TimeoutMillis = 10000
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return err
	}
	return kerr.ErrorForCode(resp.Topics[0].ErrorCode)
}

func addPartitions(ctx context.Context, cl *kgo.Client, total int32) error {
	req := kmsg.NewPtrCreatePartitionsRequest()
	t := kmsg.NewCreatePartitionsRequestTopic()
	t.Topic = *topic
	t.Count = total
	req.Topics = append(req.Topics, t)
	req.TimeoutMillis = 10000
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return err
	}
	return kerr.ErrorForCode(resp.Topics[0].ErrorCode)
}

// produce writes `n` records named step-i round-robin over `partitions` partitions,
// retrying while the producer does not know the partitions yet.
func produce(ctx context.Context, cl *kgo.Client, step string, n int, partitions int32) ([]string, error) {
	var values []string
	var records []*kgo.Record
	for i := 0; i < n; i++ {
		v := fmt.Sprintf("%s-%d", step, i)
		values = append(values, v)
		records = append(records, &kgo.Record{Topic: *topic, Partition: int32(i) % partitions, Value: []byte(v)})
	}
	for {
		err := cl.ProduceSync(ctx, records...).FirstErr()
		if err == nil {
			return values, nil
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("produce %s: %w", step, err)
		}
		cl.ForceMetadataRefresh()
		time.Sleep(200 * time.Millisecond)
	}
}

// consume polls `cl` into `s` until the context ends.
func consume(ctx context.Context, cl *kgo.Client, s *seen, wg *sync.WaitGroup) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			fetches := cl.PollFetches(ctx)
			if fetches.IsClientClosed() {
				return
			}
			fetches.EachError(func(t string, p int32, err error) {
				if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
					fmt.Fprintf(os.Stderr, "fetch error %s[%d]: %v\n", t, p, err)
				}
			})
			fetches.EachRecord(func(r *kgo.Record) { s.add(string(r.Value)) })
		}
	}()
}

func groupScenario(ctx context.Context) error {
	admin, err := newClient()
	if err != nil {
		return err
	}
	defer admin.Close()
	if err := createTopic(ctx, admin, 3); err != nil {
		return fmt.Errorf("create topic: %w", err)
	}
	group := *topic + "-group"
	member := func() (*kgo.Client, error) {
		return newClient(
			kgo.ConsumerGroup(group),
			kgo.ConsumeTopics(*topic),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
			kgo.HeartbeatInterval(500*time.Millisecond),
		)
	}
	s := newSeen()
	pollCtx, stopPolling := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stopPolling(); wg.Wait() }()

	a, err := member()
	if err != nil {
		return err
	}
	defer a.Close()
	consume(pollCtx, a, s, &wg)
	want, err := produce(ctx, admin, "first", *perStep, 3)
	if err != nil {
		return err
	}
	if err := s.waitFor(ctx, want); err != nil {
		return err
	}

	// A second member joins and a third comes and goes while records keep flowing, so
	// that fetches are in flight when each rebalance changes what a member reads.
	flowing := make(chan []string, 1)
	go func() {
		var values []string
		for i := 0; i < 20; i++ {
			more, err := produce(ctx, admin, fmt.Sprintf("flow%d", i), *perStep/10, 3)
			if err != nil {
				break
			}
			values = append(values, more...)
			time.Sleep(100 * time.Millisecond)
		}
		flowing <- values
	}()
	b, err := member()
	if err != nil {
		return err
	}
	defer b.Close()
	consume(pollCtx, b, s, &wg)
	time.Sleep(time.Second)
	c, err := member()
	if err != nil {
		return err
	}
	cCtx, stopC := context.WithCancel(pollCtx)
	consume(cCtx, c, s, &wg)
	time.Sleep(time.Second)
	stopC()
	c.Close() // leaves the group: another rebalance
	want = append(want, <-flowing...)
	if err := s.waitFor(ctx, want); err != nil {
		return err
	}

	// Three more partitions: the leader notices and the group rebalances again.
	if err := addPartitions(ctx, admin, 6); err != nil {
		return fmt.Errorf("add partitions: %w", err)
	}
	more, err := produce(ctx, admin, "third", *perStep, 6)
	if err != nil {
		return err
	}
	want = append(want, more...)
	return s.waitFor(ctx, want)
}

func seekScenario(ctx context.Context) error {
	admin, err := newClient()
	if err != nil {
		return err
	}
	defer admin.Close()
	if err := createTopic(ctx, admin, 3); err != nil {
		return fmt.Errorf("create topic: %w", err)
	}
	want, err := produce(ctx, admin, "first", *perStep, 3)
	if err != nil {
		return err
	}
	// Partitions 0 and 1 only, to start with.
	c, err := newClient(kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{
		*topic: {0: kgo.NewOffset().AtStart(), 1: kgo.NewOffset().AtStart()},
	}))
	if err != nil {
		return err
	}
	defer c.Close()
	s := newSeen()
	pollCtx, stopPolling := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stopPolling(); wg.Wait() }()
	consume(pollCtx, c, s, &wg)
	var first01 []string
	for i, v := range want {
		if i%3 != 2 {
			first01 = append(first01, v)
		}
	}
	if err := s.waitFor(ctx, first01); err != nil {
		return err
	}

	// Seek both back to the start, and add partition 2: everything again.
	s.reset()
	c.SetOffsets(map[string]map[int32]kgo.EpochOffset{*topic: {0: {Epoch: -1, Offset: 0}, 1: {Epoch: -1, Offset: 0}}})
	c.AddConsumePartitions(map[string]map[int32]kgo.Offset{*topic: {2: kgo.NewOffset().AtStart()}})
	if err := s.waitFor(ctx, want); err != nil {
		return err
	}
	more, err := produce(ctx, admin, "second", *perStep, 3)
	if err != nil {
		return err
	}
	return s.waitFor(ctx, append(want, more...))
}
