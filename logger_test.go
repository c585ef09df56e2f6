package redq

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/logging"

	"github.com/redq/redq/internal/redistest"
)

// logBuffer is an io.Writer for a slog handler that tests read from while
// background goroutines log.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// lines returns the lines logged so far that contain all of subs.
func (b *logBuffer) lines(subs ...string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for _, l := range strings.Split(b.buf.String(), "\n") {
		if l == "" {
			continue
		}
		ok := true
		for _, s := range subs {
			ok = ok && strings.Contains(l, s)
		}
		if ok {
			out = append(out, l)
		}
	}
	return out
}

func newTestLogger() (*slog.Logger, *logBuffer) {
	b := &logBuffer{}
	return slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug})), b
}

// countingLog counts the lines go-redis sends before passing them on.
type countingLog struct {
	next interface {
		Printf(context.Context, string, ...any)
	}
	n atomic.Int64
}

func (c *countingLog) Printf(ctx context.Context, format string, v ...any) {
	c.n.Add(1)
	c.next.Printf(ctx, format, v...)
}

// A Redis restart under load, with WithLogger on the connection and
// RedisLogger installed for go-redis: redq logs the first failure and the
// recovery with its duration, go-redis's flood shrinks to a handful of
// lines, and nothing is logged per retry.
func TestRedisRestartLogsAFewLines(t *testing.T) {
	if testing.Short() {
		t.Skip("restarts a redis-server")
	}
	if _, ok := redistest.Available(); !ok {
		if redistest.Required() {
			t.Fatal("REDQ_REQUIRE_REDIS=1 but redis-server is not available")
		}
		t.Skip("redis-server not found; set REDQ_REQUIRE_REDIS=1 to make this an error")
	}
	srv := redistest.Start(t, redistest.WithAppendOnly())
	logger, buf := newTestLogger()
	raw := &countingLog{next: RedisLogger(logger)}
	redis.SetLogger(raw)
	t.Cleanup(logging.Enable) // go-redis's default logger again

	client := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { client.Close() })
	errs := make(chan error, 10000)
	c, err := openConn(client, "logged", errs, namespace(), WithLogger(logger),
		WithHeartbeat(50*time.Millisecond, 10*time.Second), WithHeartbeatErrorLimit(5))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { <-c.StopAllConsuming() })
	q := openQueue(t, c, "jobs")
	if err := q.StartConsuming(10, 20*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	var consumed atomic.Int64
	if _, err := q.AddConsumerFunc("w", func(d Delivery) {
		if d.Ack() == nil {
			consumed.Add(1)
		}
	}); err != nil {
		t.Fatal(err)
	}
	mustPut(t, q, "before")
	eventually(t, "the first delivery consumed", func() bool { return consumed.Load() == 1 })

	srv.Stop()
	time.Sleep(2 * time.Second)
	if err := srv.Relaunch(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for len(buf.lines("redq: connection resumed")) != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("no recovery logged:\n%s", strings.Join(buf.lines(), "\n"))
		}
		time.Sleep(5 * time.Millisecond)
	}
	mustPut(t, q, "after")
	eventually(t, "the second delivery consumed", func() bool { return consumed.Load() == 2 })

	var hbErrs int
	for len(errs) > 0 {
		var hb *HeartbeatError
		if errors.As(<-errs, &hb) {
			hbErrs++
		}
	}
	if hbErrs < 10 {
		t.Fatalf("%d heartbeat errors on the channel; the outage was too short to show anything", hbErrs)
	}
	redq := buf.lines("redq: ")
	redq = slicesDelete(redq, "source=go-redis")
	if len(buf.lines("redq: heartbeat failed")) != 1 || len(buf.lines("redq: connection paused")) != 1 {
		t.Errorf("want one first-failure line and one pause line, got:\n%s", strings.Join(redq, "\n"))
	}
	if r := buf.lines("redq: connection resumed", "failures=", "after="); len(r) != 1 {
		t.Errorf("the recovery line names neither failures nor duration:\n%s", strings.Join(redq, "\n"))
	}
	// One line per kind of problem (heartbeat, pause, fetch, settle) and
	// per recovery, not one per failed attempt.
	if len(redq) > 8 {
		t.Errorf("%d redq lines for %d heartbeat errors:\n%s", len(redq), hbErrs, strings.Join(redq, "\n"))
	}
	goredis := buf.lines("source=go-redis")
	t.Logf("go-redis sent %d lines, %d logged; redq logged %d lines for %d heartbeat errors:\n%s", raw.n.Load(), len(goredis), len(redq), hbErrs, strings.Join(buf.lines(), "\n"))
	if len(goredis) > 5 {
		t.Errorf("%d go-redis lines logged (of %d):\n%s", len(goredis), raw.n.Load(), strings.Join(goredis, "\n"))
	}
	for _, l := range goredis {
		if !strings.Contains(l, "level=WARN") && !strings.Contains(l, "level=DEBUG") {
			t.Errorf("go-redis line at another level than warn or debug: %s", l)
		}
	}
}

// slicesDelete drops the lines that contain sub.
func slicesDelete(lines []string, sub string) []string {
	out := lines[:0]
	for _, l := range lines {
		if !strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return out
}

func TestRedisLoggerDeduplicates(t *testing.T) {
	logger, buf := newTestLogger()
	r := RedisLogger(logger)
	ctx := context.Background()
	for i := range 50 {
		r.Printf(ctx, "redis: discarding bad PubSub connection: %s", fmt.Sprintf("read tcp %d: EOF", i))
	}
	r.Printf(ctx, "sentinel: new master=%q addr=%q", "m", "127.0.0.1:1")
	lines := buf.lines("source=go-redis")
	if len(lines) != 2 {
		t.Fatalf("want 2 lines (one per kind), got:\n%s", strings.Join(lines, "\n"))
	}
	if !strings.Contains(lines[0], "level=WARN") || !strings.Contains(lines[0], "discarding bad PubSub connection: read tcp 0: EOF") {
		t.Errorf("first line: %s", lines[0])
	}
	if !strings.Contains(lines[1], "level=DEBUG") || !strings.Contains(lines[1], `msg="redis: sentinel: new master`) {
		t.Errorf("second line: %s", lines[1])
	}

	// After the interval the kind is logged again, with how many were held back.
	r.interval = time.Millisecond
	time.Sleep(2 * time.Millisecond)
	r.Printf(ctx, "redis: discarding bad PubSub connection: %s", "again")
	if got := buf.lines("again", "suppressed=49"); len(got) != 1 {
		t.Fatalf("the line after the interval does not count the 49 held back:\n%s", strings.Join(buf.lines(), "\n"))
	}
}

func TestRedisLoggerCapsLinesPerInterval(t *testing.T) {
	logger, buf := newTestLogger()
	r := RedisLogger(logger)
	for i := range 3 * RedisLogBurst {
		r.Printf(context.Background(), fmt.Sprintf("failure kind %d: %%v", i), errors.New("x"))
	}
	if got := len(buf.lines()); got != RedisLogBurst {
		t.Fatalf("%d lines for %d kinds, want the cap %d", got, 3*RedisLogBurst, RedisLogBurst)
	}
	var nilLog *RedisLog
	nilLog.Printf(context.Background(), "x") // a nil logger drops lines
	RedisLogger(nil).Printf(context.Background(), "x")
}

func TestWithLoggerRefusesNil(t *testing.T) {
	var ae *ArgumentError
	if _, err := openConn(realOrMini(t), "t", nil, WithLogger(nil)); !errors.As(err, &ae) {
		t.Fatalf("WithLogger(nil): %v, want an *ArgumentError", err)
	}
}

// The episodes behind the log lines: a first failure logs, repeats do not
// until the reminder interval, a count of 1 starts over, and a problem
// without a success to end it ends after a quiet interval.
func TestLogStateEpisodes(t *testing.T) {
	var s logState
	t0 := time.Now()
	if _, log := s.fail("heartbeat", t0, true, false); !log {
		t.Fatal("first failure not logged")
	}
	for i := 1; i < 100; i++ {
		if _, log := s.fail("heartbeat", t0.Add(time.Duration(i)*100*time.Millisecond), false, false); log {
			t.Fatalf("failure %d logged", i+1)
		}
	}
	e, log := s.fail("heartbeat", t0.Add(LogReminderInterval+time.Second), false, false)
	if !log || e.failures != 101 {
		t.Fatalf("reminder: logged %v after %d failures, want true after 101", log, e.failures)
	}
	if !s.markPaused("heartbeat") || s.markPaused("heartbeat") {
		t.Fatal("markPaused must be true once per episode")
	}
	if e, ok := s.end("heartbeat"); !ok || !e.paused || e.failures != 101 {
		t.Fatalf("end: %+v %v", e, ok)
	}
	if _, ok := s.end("heartbeat"); ok {
		t.Fatal("ended twice")
	}
	s.fail("settle", t0, false, true)
	if _, log := s.fail("settle", t0.Add(time.Second), false, true); log {
		t.Fatal("a repeat within the interval logged")
	}
	if e, log := s.fail("settle", t0.Add(time.Second+LogReminderInterval), false, true); !log || e.failures != 1 {
		t.Fatalf("after a quiet interval: logged %v with %d failures, want a new episode", log, e.failures)
	}
	s.fail("queue q", t0, true, false)
	s.fail("queue q", t0.Add(time.Second), false, false)
	if e, log := s.fail("queue q", t0.Add(2*time.Second), true, false); !log || e.failures != 1 {
		t.Fatalf("count 1: logged %v with %d failures, want a new episode", log, e.failures)
	}
}

// Without WithLogger nothing is logged and nothing is remembered.
func TestNoLoggerRemembersNothing(t *testing.T) {
	c := openT(t, backend{client: realOrMini(t)}, "quiet", namespace())
	c.report(&HeartbeatError{RedisErr: errors.New("down"), Count: 1})
	c.logRecovered("heartbeat")
	if c.logs.episodes != nil {
		t.Fatal("a connection without a logger keeps episodes")
	}
}

// The cleaner logs its failure once and its recovery.
func TestCleanerFailureLogged(t *testing.T) {
	b := backend{client: realOrMini(t)}
	logger, buf := newTestLogger()
	c := openT(t, b, "cleaner", namespace(), WithLogger(logger))
	cl := NewCleaner(c)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for range 3 {
		if _, err := cl.CleanContext(ctx); err == nil {
			t.Fatal("a clean with a cancelled context succeeded")
		}
	}
	if _, err := cl.Clean(); err != nil {
		t.Fatal(err)
	}
	if got := buf.lines("redq: cleaner"); len(got) != 2 || !strings.Contains(got[0], "level=WARN") ||
		!strings.Contains(got[1], "works again") || !strings.Contains(got[1], "failures=3") {
		t.Fatalf("want one failure and one recovery line, got:\n%s", strings.Join(buf.lines(), "\n"))
	}
}
