package redq

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redq/redq/internal/redistest"
)

// Bad rate limits are an *ArgumentError naming the field, and change
// nothing in Redis: a new queue is not created, and an existing queue
// keeps its limit.
func TestRateLimitBadInput(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		c := openT(t, b, "bad", namespace())
		if _, err := c.OpenQueue("kept", WithRateLimit(5, time.Second)); err != nil {
			t.Fatal(err)
		}
		cases := []struct {
			n   int64
			per time.Duration
			arg string
		}{
			{0, time.Second, "rate limit n"},
			{-1, time.Second, "rate limit n"},
			{MaxRateLimitN + 1, time.Second, "rate limit n"},
			{1, 0, "rate limit per"},
			{1, -time.Second, "rate limit per"},
			{1, 500 * time.Microsecond, "rate limit per"},
			{1, MaxRateLimitPer + time.Millisecond, "rate limit per"},
			{1, 1500 * time.Microsecond, "rate limit per"},
			{0, 0, "rate limit n"},
		}
		for _, tc := range cases {
			for _, name := range []string{"fresh", "kept"} {
				_, err := c.OpenQueue(name, WithRateLimit(tc.n, tc.per))
				var ae *ArgumentError
				if !errors.As(err, &ae) || ae.Arg != tc.arg || !strings.HasPrefix(err.Error(), "redq: ") {
					t.Fatalf("WithRateLimit(%d, %v) on %s: %v, want an *ArgumentError for %q", tc.n, tc.per, name, err, tc.arg)
				}
			}
		}
		names, err := c.GetOpenQueuesContext(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(names) != 1 || names[0] != "kept" {
			t.Fatalf("queues after bad options: %v, want only kept", names)
		}
		fresh := newQueueKeys(c.keys.ns, "fresh")
		if n, err := b.client.Exists(ctx, fresh.meta(), fresh.rate()).Result(); err != nil || n != 0 {
			t.Fatalf("keys of the refused queue: %d, %v", n, err)
		}
		if got := mustStats(t, c, "kept").QueueStats["kept"].RateLimit; got != (RateLimit{5, time.Second}) {
			t.Fatalf("limit after bad options: %v, want 5/1s", got)
		}
		// the bounds themselves are good
		for _, l := range []RateLimit{{1, MinRateLimitPer}, {MaxRateLimitN, MaxRateLimitPer}} {
			if _, err := c.OpenQueue("bounds", WithRateLimit(l.N, l.Per)); err != nil {
				t.Fatalf("WithRateLimit(%d, %v): %v", l.N, l.Per, err)
			}
		}
	})
}

// A limit set through one connection holds for Take and TakeBatch on
// another that was opened without it: a batch gets what the window
// allows, a Take waits until the first hand-out leaves the window, the
// stats and the Inspector show the limit, and removing it hands out the
// rest at once.
func TestRateLimitAcrossConnectionsWithTake(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		ns := namespace()
		admin := openT(t, b, "admin", ns)
		worker := openT(t, b, "worker", ns)
		const per = 600 * time.Millisecond
		qa, err := admin.OpenQueue("mail", WithRateLimit(3, per))
		if err != nil {
			t.Fatal(err)
		}
		qw := openQueue(t, worker, "mail")
		for i := 0; i < 10; i++ {
			mustPut(t, qa, "m")
		}
		start := time.Now()
		ds, err := qw.TakeBatch(ctx, 10, 0)
		if err != nil || len(ds) != 3 {
			t.Fatalf("TakeBatch(10) under a limit of 3: %d, %v", len(ds), err)
		}
		ackAll(t, ds)
		if ds, err := qw.TakeBatch(ctx, 10, 50*time.Millisecond); !errors.Is(err, ErrorTimeout) {
			t.Fatalf("TakeBatch with the window full: %d, %v, want ErrorTimeout", len(ds), err)
		}
		m, err := qw.Take(ctx, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if waited := time.Since(start); waited < per-10*time.Millisecond {
			t.Fatalf("Take returned %v after the first hand-out, before the window of %v passed", waited, per)
		}
		_ = m.Ack()

		for _, c := range []Connection{admin, worker} {
			if got := mustStats(t, c, "mail").QueueStats["mail"].RateLimit; got != (RateLimit{3, per}) {
				t.Fatalf("stats' limit: %v, want 3/%v", got, per)
			}
		}
		insp, err := NewInspector(b.client, ns)
		if err != nil {
			t.Fatal(err)
		}
		info, err := insp.Queue(ctx, "mail")
		if err != nil || info.RateLimit != (RateLimit{3, per}) {
			t.Fatalf("Inspector's limit: %v, %v", info.RateLimit, err)
		}

		if _, err := admin.OpenQueue("mail", WithoutRateLimit()); err != nil {
			t.Fatal(err)
		}
		// three more are allowed in this window by the limit; the rest
		// only without it
		ds, err = qw.TakeBatch(ctx, 10, 0)
		if err != nil || len(ds) != 6 {
			t.Fatalf("TakeBatch after the limit was removed: %d, %v, want the 6 left", len(ds), err)
		}
		ackAll(t, ds)
		if got := mustStats(t, worker, "mail").QueueStats["mail"].RateLimit; !got.IsZero() {
			t.Fatalf("stats' limit after WithoutRateLimit: %v", got)
		}
	})
}

// Keyed items count like other deliveries, and pause and the limit
// compose: a paused queue hands out nothing whatever the window allows,
// and after Resume the window's rule applies as before.
func TestRateLimitKeyedAndPause(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		c := openT(t, b, "kp", namespace())
		const per = 400 * time.Millisecond
		q, err := c.OpenQueue("mix", WithRateLimit(3, per))
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"k1", "k2"} {
			if _, err := q.Upsert(ctx, k, []byte(k)); err != nil {
				t.Fatal(err)
			}
		}
		for i := 0; i < 4; i++ {
			mustPut(t, q, "plain")
		}
		if err := q.Pause(ctx); err != nil {
			t.Fatal(err)
		}
		if ds, err := q.TakeBatch(ctx, 10, 100*time.Millisecond); !errors.Is(err, ErrorTimeout) {
			t.Fatalf("TakeBatch on a paused limited queue: %d, %v, want ErrorTimeout", len(ds), err)
		}
		if err := q.Resume(ctx); err != nil {
			t.Fatal(err)
		}
		ds, err := q.TakeBatch(ctx, 10, time.Second)
		if err != nil || len(ds) != 3 {
			t.Fatalf("TakeBatch after Resume: %d, %v, want the limit's 3", len(ds), err)
		}
		start := time.Now()
		ackAll(t, ds)
		var more Deliveries
		for len(more) < 3 {
			d, err := q.TakeBatch(ctx, int64(3-len(more)), 2*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			more = append(more, d...)
		}
		if waited := time.Since(start); waited < per-50*time.Millisecond {
			t.Fatalf("3 more within %v of a window of %v", waited, per)
		}
		keys := 0
		for _, d := range append(ds, more...) {
			if d.Key() != "" {
				keys++
			}
		}
		if keys != 2 {
			t.Fatalf("%d keyed items among the first 6 hand-outs, want both", keys)
		}
		ackAll(t, more)
	})
}

// fetchCounter counts the fetch script calls a client sends (alone or in
// a pipeline).
type fetchCounter struct{ n atomic.Int64 }

func (h *fetchCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *fetchCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.count(cmd)
		return next(ctx, cmd)
	}
}

func (h *fetchCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			h.count(c)
		}
		return next(ctx, cmds)
	}
}

func (h *fetchCounter) count(c redis.Cmder) {
	args := c.Args()
	if len(args) < 2 {
		return
	}
	name, _ := args[0].(string)
	body, _ := args[1].(string)
	if strings.EqualFold(name, "evalsha") && body == scripts.fetch.Hash() ||
		strings.EqualFold(name, "eval") && strings.Contains(body, "LOST connection is not registered") {
		h.n.Add(1)
	}
}

// Consumers of a rate-limited queue whose window is full wait without
// polling Redis: a few fetch calls in a second, not one per loop. When
// the limit is removed they take the rest within their poll duration.
func TestRateLimitConsumersDoNotSpin(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ns := namespace()
		admin := openT(t, b, "admin", ns)
		opts := b.client.(*redis.Client).Options()
		client := redis.NewClient(&redis.Options{Addr: opts.Addr})
		t.Cleanup(func() { client.Close() })
		h := &fetchCounter{}
		client.AddHook(h)
		worker, err := openConn(client, "worker", nil, ns)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { <-worker.StopAllConsuming() })

		qa, err := admin.OpenQueue("slow", WithRateLimit(4, time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 20; i++ {
			mustPut(t, qa, "s")
		}
		qw := openQueue(t, worker, "slow")
		const poll = 400 * time.Millisecond
		if err := qw.StartConsuming(10, poll); err != nil {
			t.Fatal(err)
		}
		var got atomic.Int64
		for i := 0; i < 3; i++ {
			if _, err := qw.AddConsumerFunc("c", func(d Delivery) {
				got.Add(1)
				_ = d.Ack()
			}); err != nil {
				t.Fatal(err)
			}
		}
		eventually(t, "4 deliveries consumed", func() bool { return got.Load() == 4 })
		before := h.n.Load()
		time.Sleep(time.Second)
		fetches := h.n.Load() - before
		if got.Load() != 4 {
			t.Fatalf("consumed %d under a limit of 4 a minute", got.Load())
		}
		// one fetch each time the wait (capped by the poll duration) ends
		if limit := int64(time.Second/poll) + 2; fetches > limit {
			t.Fatalf("%d fetches in a second while the limit held, want at most %d", fetches, limit)
		}
		if fetches == 0 {
			t.Fatal("no fetch in a second: the consumers do not look again within their poll duration")
		}
		if _, err := admin.OpenQueue("slow", WithoutRateLimit()); err != nil {
			t.Fatal(err)
		}
		removed := time.Now()
		eventually(t, "the rest consumed", func() bool { return got.Load() == 20 })
		if d := time.Since(removed); d > 2*poll+time.Second {
			t.Fatalf("the rest took %v after the limit was removed", d)
		}
	})
}

// Handlers obey the limit: with 5 per 500ms, 12 deliveries take at least
// two more windows after the first hand-out, and no 500ms span of
// receipts holds more than 5 plus what a window boundary allows.
func TestRateLimitHandlers(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		c := openT(t, b, "h", namespace())
		const per = 500 * time.Millisecond
		q, err := c.OpenQueue("jobs", WithRateLimit(5, per))
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 12; i++ {
			mustPut(t, q, "j")
		}
		if err := q.StartConsuming(20, 50*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var at []time.Time
		for i := 0; i < 4; i++ {
			if _, err := q.AddHandler("h", func(ctx context.Context, m Message) error {
				mu.Lock()
				at = append(at, time.Now())
				mu.Unlock()
				return nil
			}); err != nil {
				t.Fatal(err)
			}
		}
		count := func() int {
			mu.Lock()
			defer mu.Unlock()
			return len(at)
		}
		eventually(t, "12 handled", func() bool { return count() == 12 })
		mu.Lock()
		defer mu.Unlock()
		if span := at[11].Sub(at[0]); span < 2*per-20*time.Millisecond {
			t.Fatalf("12 handled within %v under a limit of 5 per %v", span, per)
		}
		if at[5].Sub(at[0]) < per-20*time.Millisecond {
			t.Fatalf("the 6th handled %v after the 1st, within one window of %v", at[5].Sub(at[0]), per)
		}
		_ = ctx
	})
}

// The acceptance run: a limit of 100 a second, 8 consumers in 2
// processes, for 8 s (30 s with REDQ_RATE_LONG=1), on a real Redis. The
// hand-out times are read by Redis's clock from the queue's log of takes,
// which this test copies every 200ms (an entry stays there a whole
// window); the copy is checked to hold every take the queue's counters
// account for (acked, unacked or back in ready), so that a take the log
// missed would fail the test. No 1 s window, wherever it starts, holds
// more than 100 hand-outs, and the run hands out at least 95 % of the
// limit.
func TestRateLimitProcesses(t *testing.T) {
	// Not parallel: its throughput floor needs the CPU to itself (see
	// docs/testing.md).
	skipShort(t, "runs consumer processes for seconds")
	run := 8 * time.Second
	if os.Getenv("REDQ_RATE_LONG") == "1" {
		run = 30 * time.Second
	}
	const (
		limit = 100
		per   = time.Second
		queue = "limited"
	)
	srv := redistest.Start(t)
	client := srv.Client(t)
	ctx := context.Background()
	ns := procNamespace(t)
	admin, err := openConn(client, "admin", nil, WithNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { <-admin.StopAllConsuming() })
	q, err := admin.OpenQueue(queue, WithRateLimit(limit, per))
	if err != nil {
		t.Fatal(err)
	}
	// more than the run can hand out, so the limit holds throughout
	procPublish(t, q, procPayloads("job", int(run/per+3)*limit))

	log := newQueueKeys(ns, queue).rate()
	var mu sync.Mutex
	taken := map[string]int64{} // take -> Redis ms
	copyLog := func() {
		v, err := client.ZRangeWithScores(ctx, log, 0, -1).Result()
		if err != nil {
			t.Error(err)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		for _, z := range v {
			taken[z.Member.(string)] = int64(z.Score)
		}
	}
	stopCopy := make(chan struct{})
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			copyLog()
			select {
			case <-stopCopy:
				return
			case <-tick.C:
			}
		}
	}()

	dir := t.TempDir()
	var children []*procHelper
	for _, tag := range []string{"p1", "p2"} {
		env := procEnv(srv, ns, queue, tag)
		env[procEnvPrefetch] = "10"
		env[procEnvConsumers] = "4"
		env[procEnvAckFile] = filepath.Join(dir, tag)
		h := startProcHelper(t, "consume", env)
		h.await("READY", procReadyTimeout, nil)
		children = append(children, h)
	}
	time.Sleep(run)
	for _, h := range children {
		h.send("STOP")
	}
	for _, h := range children {
		h.await("STOPPED", 30*time.Second, nil)
	}
	copyLog()
	close(stopCopy)
	<-copied

	insp, err := NewInspector(client, WithNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	info, err := insp.Queue(ctx, queue)
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := info.Acked + info.Unacked + info.Retried; int64(len(taken)) != want {
		t.Fatalf("the log copy holds %d takes, the counters account for %d (acked %d, unacked %d, retried %d)",
			len(taken), want, info.Acked, info.Unacked, info.Retried)
	}
	times := make([]int64, 0, len(taken))
	for _, ms := range taken {
		times = append(times, ms)
	}
	slices.Sort(times)
	// the busiest window [times[i], times[i]+per) of every start that
	// matters (a window's count only grows to its first hand-out)
	busiest, at := 0, int64(0)
	for i, j := 0, 0; i < len(times); i++ {
		for j < len(times) && times[j] < times[i]+per.Milliseconds() {
			j++
		}
		if j-i > busiest {
			busiest, at = j-i, times[i]
		}
	}
	span := time.Duration(times[len(times)-1]-times[0]) * time.Millisecond
	// the most the limit allows from the first hand-out to the last is
	// limit for every window that starts in that span, and one more
	rate := float64(len(times)) / (span.Seconds() + per.Seconds())
	t.Logf("%d hand-outs over %v: %.1f a second; busiest 1 s window %d (from %d ms)", len(times), span, rate, busiest, at)
	if busiest > limit {
		t.Fatalf("a 1 s window starting at Redis ms %d holds %d hand-outs, limit %d", at, busiest, limit)
	}
	if rate < 0.95*limit {
		t.Fatalf("%.1f hand-outs a second, want at least 95 %% of %d", rate, limit)
	}
}
