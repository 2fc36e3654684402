// commitbench: consumers that commit after every message, as segmentio/kafka-go's Reader
// does by default (a GroupID and CommitInterval 0: ReadMessage commits each message's
// offset synchronously before it returns). Started by bench/commits.py against one broker.
//
// Each of -readers readers is the only member of a group of its own (so the groups'
// offsets go to different __consumer_offsets partitions), reads -messages messages of
// -topic from its start, and commits each. Prints one JSON line: the messages read, the
// seconds from the first reader's start to the last reader's end, and the per-commit
// round trips' percentiles (ReadMessage's time, the fetch being served from the reader's
// prefetched batches, so it is mostly the commit).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"
)

func main() {
	brokers := flag.String("brokers", "127.0.0.1:9092", "bootstrap broker")
	topic := flag.String("topic", "commits", "topic to read")
	readers := flag.Int("readers", 1, "readers, each in a group of its own")
	messages := flag.Int("messages", 2000, "messages each reader reads and commits")
	groupPrefix := flag.String("group-prefix", "commitbench", "group ids are PREFIX-N")
	timeout := flag.Duration("timeout", 5*time.Minute, "give up after this long")
	flag.Parse()

	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()

	// Each reader joins its group and reads its first message before the clock starts, so
	// the figure leaves out the group join (as bench.py's consumer figures do).
	type reader struct {
		r        *kafka.Reader
		ready    chan error
		latency  []time.Duration
		finished time.Time
		err      error
	}
	all := make([]*reader, *readers)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range all {
		rd := &reader{ready: make(chan error, 1)}
		rd.r = kafka.NewReader(kafka.ReaderConfig{
			Brokers:        []string{*brokers},
			GroupID:        fmt.Sprintf("%s-%d", *groupPrefix, i),
			Topic:          *topic,
			StartOffset:    kafka.FirstOffset,
			CommitInterval: 0,
			MaxWait:        500 * time.Millisecond,
		})
		all[i] = rd
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := rd.r.ReadMessage(ctx); err != nil {
				rd.ready <- err
				return
			}
			rd.ready <- nil
			<-start
			rd.latency = make([]time.Duration, 0, *messages)
			for n := 1; n < *messages; n++ {
				t := time.Now()
				if _, err := rd.r.ReadMessage(ctx); err != nil {
					rd.err = err
					return
				}
				rd.latency = append(rd.latency, time.Since(t))
			}
			rd.finished = time.Now()
		}()
	}
	for _, rd := range all {
		if err := <-rd.ready; err != nil {
			fail("first message: %v", err)
		}
	}
	began := time.Now()
	close(start)
	wg.Wait()
	var end time.Time
	var latency []time.Duration
	for _, rd := range all {
		if rd.err != nil {
			fail("reading: %v", rd.err)
		}
		if rd.finished.After(end) {
			end = rd.finished
		}
		latency = append(latency, rd.latency...)
		rd.r.Close()
	}
	sort.Slice(latency, func(i, j int) bool { return latency[i] < latency[j] })
	pct := func(q float64) float64 {
		return float64(latency[int(q*float64(len(latency)-1))].Microseconds()) / 1000
	}
	seconds := end.Sub(began).Seconds()
	out := map[string]any{
		"messages":       len(latency),
		"seconds":        seconds,
		"messages_per_s": float64(len(latency)) / seconds,
		"p50_ms":         pct(0.5),
		"p99_ms":         pct(0.99),
	}
	json.NewEncoder(os.Stdout).Encode(out)
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "commitbench: "+format+"\n", args...)
	os.Exit(1)
}
