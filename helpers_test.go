package redq

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redq/redq/internal/redistest"
)

// realRedis is one redis-server for the whole test binary; tests isolate
// themselves with a namespace of their own. It is nil when the binary is
// missing and REDQ_REQUIRE_REDIS is not 1.
var realRedis *redistest.Server

func TestMain(m *testing.M) {
	flag.Parse()
	useKeyCheck()
	if helper := os.Getenv(helperEnv); helper != "" {
		os.Exit(runHelper(helper))
	}
	srv, err := redistest.StartMain()
	switch {
	case err == nil:
		realRedis = srv
	case redistest.Required():
		fmt.Fprintln(os.Stderr, "REDQ_REQUIRE_REDIS=1 but no real Redis:", err)
		os.Exit(1)
	default:
		fmt.Fprintln(os.Stderr, "real-Redis tests skipped:", err)
	}
	code := m.Run()
	closeSharedCluster()
	if srv != nil {
		srv.Close()
	}
	os.Exit(code)
}

// backend is one Redis a scenario runs on.
type backend struct {
	name   string
	client redis.UniversalClient
	mini   *miniredis.Miniredis // nil on real Redis
}

var nsCounter atomic.Int64

// namespace returns a namespace no other test uses.
// skipShort skips a test that starts a cluster, processes or long outages
// when go test runs with -short; the full run covers it.
func skipShort(t testing.TB, why string) {
	t.Helper()
	if testing.Short() {
		t.Skipf("%s; skipped with -short", why)
	}
}

func namespace() Option {
	return WithNamespace(fmt.Sprintf("t%d-%d", os.Getpid(), nsCounter.Add(1)))
}

// forEachBackend runs f on miniredis and on the real redis-server.
func forEachBackend(t *testing.T, f func(t *testing.T, b backend)) {
	t.Run("miniredis", func(t *testing.T) {
		m := miniredis.RunT(t)
		c := redis.NewClient(&redis.Options{Addr: m.Addr()})
		t.Cleanup(func() { c.Close() })
		f(t, backend{name: "miniredis", client: c, mini: m})
	})
	t.Run("redis", func(t *testing.T) {
		c := realClient(t)
		f(t, backend{name: "redis", client: c})
	})
}

func realClient(t testing.TB) *redis.Client {
	t.Helper()
	if realRedis == nil {
		if redistest.Required() {
			t.Fatal("REDQ_REQUIRE_REDIS=1 but redis-server is not available")
		}
		t.Skip("redis-server not found; set REDQ_REQUIRE_REDIS=1 to make this an error")
	}
	return realRedis.Client(t)
}

// openT opens a connection with opts and stops it at the end of the test.
// Pass namespace() (or a namespace shared on purpose) so that the test's
// keys are its own.
func openT(t testing.TB, b backend, tag string, opts ...Option) *redisConnection {
	t.Helper()
	c, err := openConn(b.client, tag, nil, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { <-c.StopAllConsuming() })
	return c
}

func openConn(client redis.UniversalClient, tag string, errChan chan<- error, opts ...Option) (*redisConnection, error) {
	c, err := Open(context.Background(), tag, client, errChan, opts...)
	if err != nil {
		return nil, err
	}
	return c.(*redisConnection), nil
}

func openQueue(t testing.TB, c Connection, name string) *redisQueue {
	t.Helper()
	q, err := c.OpenQueue(name)
	if err != nil {
		t.Fatal(err)
	}
	return q.(*redisQueue)
}

// eventually polls cond until it holds or the generous bound passes.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func mustStats(t testing.TB, c Connection, queues ...string) Stats {
	t.Helper()
	s, err := c.CollectStats(queues)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// holder is a consumer that keeps its deliveries without settling them.
type holder struct{ ch chan Message }

func (h holder) Consume(d Delivery) { h.ch <- d.(Message) }

// hold starts consuming q with one consumer that hands every delivery to
// the test, and returns the first n deliveries.
func hold(t testing.TB, q Queue, prefetch int64, n int) []Message {
	t.Helper()
	ds, _ := holdMore(t, q, prefetch, n)
	return ds
}

// holdMore is hold that also returns the channel later deliveries arrive on.
func holdMore(t testing.TB, q Queue, prefetch int64, n int) ([]Message, <-chan Message) {
	t.Helper()
	if err := q.StartConsuming(prefetch, 20*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	h := holder{ch: make(chan Message, 1000+n+int(prefetch))}
	if _, err := q.AddConsumer("holder", h); err != nil {
		t.Fatal(err)
	}
	out := make([]Message, 0, n)
	timeout := time.After(15 * time.Second)
	for len(out) < n {
		select {
		case d := <-h.ch:
			out = append(out, d)
		case <-timeout:
			t.Fatalf("got %d of %d deliveries", len(out), n)
		}
	}
	return out, h.ch
}

// counts reads ready, rejected and unacked of one queue.
func counts(t testing.TB, c Connection, queue string) (ready, rejected, unacked int64) {
	t.Helper()
	s := mustStats(t, c, queue).QueueStats[queue]
	return s.ReadyCount, s.RejectedCount, s.UnackedCount()
}

func wantCounts(t testing.TB, c Connection, queue string, ready, rejected, unacked int64) {
	t.Helper()
	r, j, u := counts(t, c, queue)
	if r != ready || j != rejected || u != unacked {
		t.Fatalf("%s: ready/rejected/unacked = %d/%d/%d, want %d/%d/%d", queue, r, j, u, ready, rejected, unacked)
	}
}

// realOrMini returns a client for tests that need any Redis but check no
// Redis behaviour (argument validation).
func realOrMini(t testing.TB) redis.UniversalClient {
	t.Helper()
	m := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { c.Close() })
	return c
}

// take registers c for q and moves n deliveries into its unacked storage
// without a consume loop, so a test knows exactly what is held. q must not
// be consuming.
func take(t testing.TB, q *redisQueue, n int) []Message {
	t.Helper()
	ctx := context.Background()
	if err := scripts.setConsumers.Run(ctx, q.conn.client, []string{q.keys.consumers}, q.conn.Name(), 0, "1").Err(); err != nil {
		t.Fatal(err)
	}
	q.buf = make(chan *redisDelivery, n)
	for len(q.buf) < n {
		got, _, err := q.fetch(ctx, q.conn.registration(), int64(min(n-len(q.buf), fetchChunk)))
		if err != nil {
			t.Fatal(err)
		}
		if got == 0 {
			t.Fatalf("took %d of %d", len(q.buf), n)
		}
	}
	out := make([]Message, n)
	for i := range out {
		out[i] = <-q.buf
	}
	return out
}

// mustPut publishes one payload with options or fails the test.
func mustPut(t testing.TB, q Queue, payload string, opts ...PublishOption) {
	t.Helper()
	if err := q.Put(context.Background(), []byte(payload), opts...); err != nil {
		t.Fatalf("put %q: %v", payload, err)
	}
}

// ackAll acks a batch or fails the test.
func ackAll(t testing.TB, ds Deliveries) {
	t.Helper()
	if errs := ds.Ack(); len(errs) > 0 {
		t.Fatalf("ack: %v", errs)
	}
}

// mustTake takes one delivery within timeout or fails the test.
func mustTake(t testing.TB, q Queue, timeout time.Duration) Message {
	t.Helper()
	d, err := q.Take(context.Background(), timeout)
	if err != nil {
		t.Fatalf("take: %v", err)
	}
	return d
}
