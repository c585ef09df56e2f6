package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redq/redq"
	"github.com/redq/redq/internal/console"
)

const (
	demoTag = "redq-demo"
	// demoNamespace keeps the demo's keys apart from an application's,
	// which use redq.DefaultNamespace unless they chose another.
	demoNamespace = "redq-demo"

	// How often the demo's background loops run.
	produceEvery  = 50 * time.Millisecond
	progressEvery = time.Second
	returnEvery   = 2 * time.Second
	cleanEvery    = 5 * time.Second
	clockEvery    = 100 * time.Millisecond // miniredis clock
	// demoPoll bounds how long an idle fetch blocks on Redis. A publish
	// wakes it at once anyway; short, because stopping waits for it.
	demoPoll = 100 * time.Millisecond
	// maxBatch bounds one publish call when the producer catches up.
	maxBatch = 1000
)

// demoConfig holds the demo's flags.
type demoConfig struct {
	redisURL      string
	namespace     string
	addr          string
	queue         string
	consumers     int
	rate          int
	rejectPercent int
	work          time.Duration
	duration      time.Duration
	keep          bool
}

// demoDetails is the demo's help text beyond its flags.
const demoDetails = `
Without --redis (and without $REDIS_URL) the demo runs on an embedded
miniredis that ends with it. On a real Redis it works in the namespace
--namespace (default "redq-demo", never the default namespace "redq" of
applications). When that namespace held no keys when the demo started, the
demo deletes its keys when it ends (pass --keep to look at them after);
otherwise it leaves what it finds, and what it added, in place.`

// demoCommand: redq demo [--redis URL] [--addr localhost:8080] [--queue demo]
// [--consumers 4] [--rate 200] [--reject-percent 5] [--work 5ms] [--duration 0]
func demoCommand(fs *flag.FlagSet) func(context.Context, io.Writer, io.Writer) error {
	var c demoConfig
	fs.StringVar(&c.redisURL, "redis", "", "Redis URL: "+redisURLForm+" (default: $"+redisURLEnv+", else an embedded miniredis)")
	fs.StringVar(&c.namespace, "namespace", demoNamespace, "namespace (key prefix) of the demo's queue")
	fs.BoolVar(&c.keep, "keep", false, "keep the demo's keys in Redis when it ends (they are deleted when the namespace was empty at the start)")
	fs.StringVar(&c.addr, "addr", "localhost:8080", `address of the stats page ("": no stats page)`)
	fs.StringVar(&c.queue, "queue", "demo", "queue to publish to and consume from")
	fs.IntVar(&c.consumers, "consumers", 4, "number of consumers")
	fs.IntVar(&c.rate, "rate", 200, "deliveries published per second")
	fs.IntVar(&c.rejectPercent, "reject-percent", 5, "percentage of deliveries the consumers reject (they are returned to ready every 2s)")
	fs.DurationVar(&c.work, "work", 5*time.Millisecond, "simulated processing time per delivery")
	fs.DurationVar(&c.duration, "duration", 0, "stop after this long (0: run until Ctrl-C)")
	return func(ctx context.Context, stdout, stderr io.Writer) error {
		if err := c.validate(); err != nil {
			return err
		}
		return runDemo(ctx, c, stdout, stderr)
	}
}

func (c *demoConfig) validate() error {
	switch {
	case c.consumers < 1 || c.consumers > 1000:
		return usagef("--consumers must be from 1 to 1000, is %d", c.consumers)
	case c.rate < 1 || c.rate > 1_000_000:
		return usagef("--rate must be from 1 to 1000000 per second, is %d", c.rate)
	case c.rejectPercent < 0 || c.rejectPercent > 100:
		return usagef("--reject-percent must be from 0 to 100, is %d", c.rejectPercent)
	case c.work < 0:
		return usagef("--work must not be negative, is %v", c.work)
	case c.duration < 0:
		return usagef("--duration must not be negative, is %v", c.duration)
	}
	return nil
}

// demoCounters are what the demo did, as seen by its own goroutines.
// unknown counts the deliveries of publishes whose outcome is unknown
// (redq.ErrorOutcomeUnknown): each is in Redis once or not at all.
type demoCounters struct {
	published, acked, rejected, returned, cleaned, failed, unknown atomic.Int64
}

func runDemo(ctx context.Context, c demoConfig, stdout, stderr io.Writer) error {
	out := console.New(stderr)

	// Redis: the one given, or an embedded miniredis whose clock we move,
	// since miniredis expires keys (heartbeats) only when told time passed.
	var client *redis.Client
	var mini *miniredis.Miniredis
	raw, from := c.redisURL, "--redis"
	if raw == "" {
		raw, from = os.Getenv(redisURLEnv), "$"+redisURLEnv
	}
	cleanup := func() {}
	if raw != "" {
		opts, err := parseRedisURL(raw, from)
		if err != nil {
			return err
		}
		client = redis.NewClient(opts)
		out.Logf("redq demo: Redis at %s (from %s), namespace %q", opts.Addr, from, c.namespace)
		empty, err := namespaceEmpty(ctx, client, c.namespace)
		if err != nil {
			_ = client.Close() // the error above is what the user needs
			return fmt.Errorf("connect to Redis at %s: %w", opts.Addr, err)
		}
		switch {
		case c.keep:
		case empty:
			cleanup = func() {
				dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				n, err := deleteNamespace(dctx, client, c.namespace)
				if err != nil {
					out.Logf("redq demo: delete namespace %q: %v", c.namespace, err)
					return
				}
				out.Logf("redq demo: deleted the %d keys of namespace %q, which was empty when the demo started (--keep keeps them)", n, c.namespace)
			}
		default:
			out.Logf("redq demo: namespace %q holds keys already; the demo leaves them, and its own, in place", c.namespace)
		}
	} else {
		m, err := miniredis.Run()
		if err != nil {
			return fmt.Errorf("start embedded Redis: %w", err)
		}
		defer m.Close()
		mini = m
		client = redis.NewClient(&redis.Options{Addr: m.Addr()})
		out.Logf("redq demo: embedded Redis (miniredis) at %s; pass --redis URL to use a real one", m.Addr())
	}

	errChan := make(chan error, 64)
	conn, err := redq.Open(ctx, demoTag, client, errChan, redq.WithNamespace(c.namespace))
	if err != nil {
		_ = client.Close() // the open error is what the user needs
		if errors.Is(err, redq.ErrorInvalidArgument) {
			return usageError{err}
		}
		return fmt.Errorf("connect to Redis at %s: %w", client.Options().Addr, err)
	}
	defer func() { _ = client.Close() }()
	// Deferred after the client's Close and before stopConsuming: it runs
	// once the connection stopped, with the client still open.
	defer cleanup()
	stopConsuming := sync.OnceFunc(func() { <-conn.StopAllConsuming() })
	defer stopConsuming() // for early returns; the normal way out is below
	queue, err := conn.OpenQueue(c.queue)
	if errors.Is(err, redq.ErrorInvalidArgument) {
		return usageError{fmt.Errorf("--queue: %w", err)}
	}
	if err != nil {
		return err
	}

	var srv *statsServer
	shutdownSrv := func() error { return nil }
	if c.addr != "" {
		if srv, err = startStatsServer(c.addr, conn); err != nil {
			return err
		}
		shutdownSrv = sync.OnceValue(srv.Shutdown)
		defer func() { _ = shutdownSrv() }() // for early returns; the normal path checks its error
		out.Logf("redq demo: stats page on %s", srv.URL())
	}

	var n demoCounters
	if err := queue.StartConsuming(int64(5*c.consumers), demoPoll); err != nil {
		return fmt.Errorf("start consuming: %w", err)
	}
	for i := 0; i < c.consumers; i++ {
		if _, err := queue.AddConsumerFunc("worker", demoWorker(c, &n, out)); err != nil {
			return fmt.Errorf("add consumer: %w", err)
		}
	}

	runCtx := ctx
	if c.duration > 0 {
		var cancel context.CancelFunc
		runCtx, cancel = context.WithTimeout(ctx, c.duration)
		defer cancel()
	}
	started := time.Now()
	out.Logf("redq demo: publishing %d/s to queue %q in namespace %q, %d consumers rejecting %d%%; %s",
		c.rate, c.queue, c.namespace, c.consumers, c.rejectPercent, untilWhat(c.duration))

	// The producer goes first on the way out, so it has its own group.
	var producer, background sync.WaitGroup
	producer.Add(1)
	go func() {
		defer producer.Done()
		produce(runCtx, queue, c.rate, &n, out)
	}()
	every := func(d time.Duration, f func()) {
		background.Add(1)
		go func() {
			defer background.Done()
			t := time.NewTicker(d)
			defer t.Stop()
			for {
				select {
				case <-runCtx.Done():
					return
				case <-t.C:
					f()
				}
			}
		}()
	}
	if mini != nil {
		last := time.Now()
		every(clockEvery, func() {
			now := time.Now()
			mini.FastForward(now.Sub(last))
			last = now
		})
	}
	// Rejected work flows back: an operator would run return-rejected
	// after an outage; the demo does it every few seconds.
	every(returnEvery, func() {
		k, err := queue.ReturnRejectedContext(runCtx, math.MaxInt64)
		n.returned.Add(k)
		if err != nil {
			out.Logf("return rejected: %v", err)
		}
	})
	cleaner := redq.NewCleaner(conn)
	every(cleanEvery, func() {
		k, err := cleaner.CleanContext(runCtx)
		n.cleaned.Add(k)
		switch {
		case err != nil && runCtx.Err() == nil:
			out.Logf("clean: %v", err)
		case k > 0:
			out.Logf("cleaner returned %d deliveries of dead connections and lost leases to ready", k)
		}
	})
	lastAcked, lastAt := int64(0), started
	every(progressEvery, func() {
		s, err := conn.CollectStatsContext(runCtx, []string{c.queue})
		if err != nil {
			if runCtx.Err() == nil {
				out.Logf("stats: %v", err)
			}
			return
		}
		qs := s.QueueStats[c.queue]
		now, acked := time.Now(), n.acked.Load()
		rate := float64(acked-lastAcked) / now.Sub(lastAt).Seconds()
		lastAcked, lastAt = acked, now
		out.Progress(fmt.Sprintf("published %d  acked %d  rejected %d  | ready %d  unacked %d  rejected now %d  | %.0f acked/s",
			n.published.Load(), acked, n.rejected.Load(), qs.ReadyCount, qs.UnackedCount(), qs.RejectedCount, rate))
	})
	background.Add(1)
	go func() {
		defer background.Done()
		for {
			select {
			case <-runCtx.Done():
				return
			case err := <-errChan:
				out.Logf("redq demo: %s", message(err))
			}
		}
	}()

	var serveErr error
	if srv != nil {
		select {
		case <-runCtx.Done():
		case serveErr = <-srv.Failed():
			serveErr = fmt.Errorf("stats page: %w", serveErr)
		}
	} else {
		<-runCtx.Done()
	}

	// Stop in order: no new work, then the consumers (they finish their
	// current delivery; fetched-but-unhandled ones go back to ready), then
	// the page.
	producer.Wait()
	background.Wait()
	stopConsuming()
	if serveErr == nil {
		if err := shutdownSrv(); err != nil {
			out.Logf("%v", err)
		}
	}

	// What is left in Redis. The context is fresh: runCtx is done. A
	// stopped connection can still read stats.
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	left := "left in Redis: unknown"
	if s, err := conn.CollectStatsContext(sctx, []string{c.queue}); err != nil {
		out.Logf("final stats: %v", err)
	} else {
		qs := s.QueueStats[c.queue]
		left = fmt.Sprintf("left in Redis: ready %d, rejected %d, unacked %d", qs.ReadyCount, qs.RejectedCount, qs.UnackedCount())
	}
	out.Done()
	// Publishes of unknown outcome are named only when there were some: a
	// loaded machine or a Redis that stopped answering.
	unknown := ""
	if k := n.unknown.Load(); k > 0 {
		unknown = fmt.Sprintf(" (and %d of unknown outcome: in Redis once or not at all)", k)
	}
	fmt.Fprintf(stdout, "redq demo: %s: published %d%s, acked %d, rejected %d (returned %d), failed %d; %s\n",
		time.Since(started).Round(100*time.Millisecond), n.published.Load(), unknown, n.acked.Load(), n.rejected.Load(),
		n.returned.Load(), n.failed.Load(), left)
	return serveErr
}

// demoWorker returns a consumer that works for c.work and then acks, or
// rejects about c.rejectPercent of the deliveries.
func demoWorker(c demoConfig, n *demoCounters, out *console.Console) redq.ConsumerFunc {
	return func(d redq.Delivery) {
		if c.work > 0 {
			time.Sleep(c.work)
		}
		if rand.IntN(100) < c.rejectPercent {
			if err := d.Reject(); err != nil {
				n.failed.Add(1)
				out.Logf("reject: %v", err)
				return
			}
			n.rejected.Add(1)
			return
		}
		if err := d.Ack(); err != nil {
			n.failed.Add(1)
			out.Logf("ack: %v", err)
			return
		}
		n.acked.Add(1)
	}
}

// produce publishes rate deliveries per second until ctx is done, in one
// call per tick holding whatever is due.
func produce(ctx context.Context, queue redq.Queue, rate int, n *demoCounters, out *console.Console) {
	start := time.Now()
	ticker := time.NewTicker(produceEvery)
	defer ticker.Stop()
	next := int64(0)
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		due := int64(time.Since(start).Seconds() * float64(rate))
		k := min(due-next, maxBatch)
		if k <= 0 {
			continue
		}
		batch := make([]string, k)
		for i := range batch {
			batch[i] = fmt.Sprintf(`{"job":%d}`, next+int64(i))
		}
		// Not ctx: a publish cut off halfway would leave us unsure whether
		// it happened, and the summary counts exactly.
		pctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := queue.PublishContext(pctx, batch...)
		cancel()
		switch {
		case err == nil:
			n.published.Add(k)
		case nothingPublished(err):
			// The same jobs go out again with the next tick's.
			out.Logf("publish: %v", err)
			continue
		default:
			// The batch may be in Redis (once: redq never runs a call
			// twice). Publishing its jobs again would be a new call and
			// could deliver each of them twice, so they are counted as
			// of unknown outcome and the producer moves on.
			n.unknown.Add(k)
			out.Logf("publish: %v; jobs %d to %d are in Redis once or not at all, and are not published again", err, next, next+k-1)
		}
		next += k
	}
}

// nothingPublished reports whether err, the error of a publish, says that
// nothing was published: Redis was unreachable or refused writes, or the
// publish was given up before it was sent (a bare context error). Any other
// error, ErrorOutcomeUnknown above all, may come after the payloads landed.
func nothingPublished(err error) bool {
	switch {
	case errors.Is(err, redq.ErrorOutcomeUnknown):
		return false
	case errors.Is(err, redq.ErrorUnavailable), errors.Is(err, redq.ErrorWritesRefused),
		errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return true
	}
	return false
}

func untilWhat(d time.Duration) string {
	if d > 0 {
		return "stopping after " + d.String()
	}
	return "Ctrl-C to stop"
}

// namespaceEmpty reports whether Redis holds no key of namespace ns.
func namespaceEmpty(ctx context.Context, client *redis.Client, ns string) (bool, error) {
	for _, pattern := range namespacePatterns(ns) {
		iter := client.Scan(ctx, 0, pattern, 1000).Iterator()
		if iter.Next(ctx) {
			return false, nil
		}
		if err := iter.Err(); err != nil {
			return false, err
		}
	}
	return true, nil
}

// deleteNamespace deletes every key of namespace ns and returns how many.
func deleteNamespace(ctx context.Context, client *redis.Client, ns string) (int64, error) {
	var n int64
	for _, pattern := range namespacePatterns(ns) {
		iter := client.Scan(ctx, 0, pattern, 1000).Iterator()
		for iter.Next(ctx) {
			k, err := client.Unlink(ctx, iter.Val()).Result()
			if err != nil {
				return n, err
			}
			n += k
		}
		if err := iter.Err(); err != nil {
			return n, err
		}
	}
	return n, nil
}

// namespacePatterns match the keys of namespace ns: its global keys
// {ns}:... and its queues' keys ns:{queue}:... (see keys.go).
func namespacePatterns(ns string) []string {
	esc := globEscaper.Replace(ns)
	return []string{"{" + esc + "}:*", esc + ":{*"}
}

var globEscaper = strings.NewReplacer(`\`, `\\`, "*", `\*`, "?", `\?`, "[", `\[`, "]", `\]`)
