package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redq/redq"
	"github.com/redq/redq/internal/redistest"
)

// syncBuffer is a bytes.Buffer that the command's goroutines may write
// while the test reads.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// running is a run of the command in the background.
type running struct {
	stdout, stderr *syncBuffer
	code           chan int
}

func start(ctx context.Context, args ...string) *running {
	r := &running{stdout: &syncBuffer{}, stderr: &syncBuffer{}, code: make(chan int, 1)}
	go func() { r.code <- run(ctx, args, r.stdout, r.stderr) }()
	return r
}

// wait returns the exit status; the command must end within a generous
// bound.
func (r *running) wait(t *testing.T) int {
	t.Helper()
	select {
	case code := <-r.code:
		return code
	case <-time.After(30 * time.Second):
		t.Fatalf("command did not end; stderr:\n%s", r.stderr)
		return -1
	}
}

// waitFor waits until re matches the buffer and returns the first group.
func waitFor(t *testing.T, b *syncBuffer, re *regexp.Regexp) string {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		if m := re.FindStringSubmatch(b.String()); m != nil {
			return m[len(m)-1]
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %q in:\n%s", re, b)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// redq runs the command to its end.
func redqRun(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	r := start(context.Background(), args...)
	code = r.wait(t)
	stdout, stderr = r.stdout.String(), r.stderr.String()
	return code, stdout, stderr
}

// mustRedq runs the command and fails the test unless it exits 0.
func mustRedq(t *testing.T, args ...string) string {
	t.Helper()
	code, stdout, stderr := redqRun(t, args...)
	if code != 0 {
		t.Fatalf("redq %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, stdout, stderr)
	}
	return stdout
}

// target is a Redis the command talks to, with a namespace of the test's
// own and a client for the test to prepare and check the state.
type target struct {
	url, ns string
	client  *redis.Client
}

var nsCounter atomic.Int64

// forBackends runs f on a miniredis and on a real redis-server (skipped
// without one, unless REDQ_REQUIRE_REDIS=1).
func forBackends(t *testing.T, f func(t *testing.T, tg target)) {
	t.Run("miniredis", func(t *testing.T) {
		m := miniredis.RunT(t)
		f(t, newTarget(t, m.Addr()))
	})
	t.Run("redis", func(t *testing.T) {
		s := redistest.Start(t)
		f(t, newTarget(t, s.Addr()))
	})
}

func newTarget(t *testing.T, addr string) target {
	c := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { c.Close() })
	return target{url: "redis://" + addr, ns: fmt.Sprintf("cli%d", nsCounter.Add(1)), client: c}
}

// open opens a library connection in the target's namespace, stopped at
// the end of the test.
func (tg target) open(t *testing.T, tag string) redq.Connection {
	t.Helper()
	c, err := redq.Open(context.Background(), tag, tg.client, nil, redq.WithNamespace(tg.ns))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { <-c.StopAllConsuming() })
	return c
}

func (tg target) args(cmd string, more ...string) []string {
	return append([]string{cmd, "--redis", tg.url, "--namespace", tg.ns}, more...)
}

// stats runs "redq stats --json" and decodes it.
func (tg target) stats(t *testing.T) redq.Stats {
	t.Helper()
	out := mustRedq(t, tg.args("stats", "--json")...)
	var s redq.Stats
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("decode stats %q: %v", out, err)
	}
	return s
}

func wantQueue(t *testing.T, s redq.Stats, queue string, ready, rejected, unacked int64) {
	t.Helper()
	qs, ok := s.QueueStats[queue]
	if !ok {
		t.Fatalf("no queue %q in %v", queue, s.Names())
	}
	if qs.ReadyCount != ready || qs.RejectedCount != rejected || qs.UnackedCount() != unacked {
		t.Fatalf("%s: ready/rejected/unacked = %d/%d/%d, want %d/%d/%d", queue,
			qs.ReadyCount, qs.RejectedCount, qs.UnackedCount(), ready, rejected, unacked)
	}
}

func wantScheduled(t *testing.T, s redq.Stats, queue string, delayed, expired int64) {
	t.Helper()
	qs := s.QueueStats[queue]
	if qs.DelayedCount != delayed || qs.ExpiredCount != expired {
		t.Fatalf("%s: delayed/expired = %d/%d, want %d/%d", queue, qs.DelayedCount, qs.ExpiredCount, delayed, expired)
	}
}

// deadHolder leaves behind a dead connection holding n unacked deliveries
// of queue, as a crashed worker would, and returns its name.
func deadHolder(t *testing.T, tg target, queue string, n int) string {
	t.Helper()
	conn := tg.open(t, "crashed")
	q, err := conn.OpenQueue(queue)
	if err != nil {
		t.Fatal(err)
	}
	payloads := make([]string, n)
	for i := range payloads {
		payloads[i] = "p" + strconv.Itoa(i)
	}
	if err := q.Publish(payloads...); err != nil {
		t.Fatal(err)
	}
	got := make(chan redq.Delivery, n)
	if err := q.StartConsuming(int64(n), 20*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	// The consumer keeps every delivery without settling it.
	if _, err := q.AddConsumerFunc("keeper", func(d redq.Delivery) { got <- d }); err != nil {
		t.Fatal(err)
	}
	for range n {
		select {
		case <-got:
		case <-time.After(15 * time.Second):
			t.Fatal("the crashed worker got nothing")
		}
	}
	// Stopping deletes the heartbeat; deleting the marker of a clean stop
	// too makes it look crashed: the connection is dead now, and its
	// deliveries stay unacked until a cleaner runs.
	<-conn.StopAllConsuming()
	name := connectionName(conn)
	if err := tg.client.Del(context.Background(), "{"+tg.ns+"}:stopped:"+name).Err(); err != nil {
		t.Fatal(err)
	}
	return name
}

func TestUsageErrors(t *testing.T) {
	t.Setenv(redisURLEnv, "")
	m := miniredis.RunT(t)
	url := "redis://" + m.Addr()
	for _, tc := range []struct {
		args []string
		code int
		want string // in stdout+stderr
	}{
		{nil, 2, "usage: redq <command>"},
		{[]string{"bogus"}, 2, `unknown command "bogus"`},
		{[]string{"help"}, 0, "return-rejected"},
		{[]string{"--help"}, 0, "purge-rejected"},
		{[]string{"help", "demo"}, 0, "-reject-percent"},
		{[]string{"help", "nope"}, 2, `unknown command "nope"`},
		{[]string{"stats", "-h"}, 0, "usage: redq stats"},
		{[]string{"stats"}, 2, "--redis is required"},
		{[]string{"stats", "--bogus"}, 2, "flag provided but not defined: -bogus"},
		{[]string{"stats", "--redis", "http://localhost"}, 2, `invalid --redis "http://localhost"`},
		{[]string{"stats", "--redis", url, "extra"}, 2, `unexpected argument "extra"`},
		{[]string{"stats", "--redis", url, "--namespace", "no spaces"}, 2, "invalid namespace"},
		{[]string{"serve"}, 2, "--redis is required"},
		{[]string{"clean", "--redis", url, "--interval", "-1s"}, 2, "--interval must not be negative"},
		{[]string{"clean", "--redis", url, "--interval", "often"}, 2, "invalid value"},
		{[]string{"return-rejected", "--redis", url}, 2, "--queue is required"},
		{[]string{"return-rejected", "--redis", url, "--queue", "q", "--max", "-1"}, 2, "--max must not be negative"},
		{[]string{"purge-rejected", "--redis", url}, 2, "--queue is required"},
		{[]string{"demo", "--rate", "0"}, 2, "--rate must be"},
		{[]string{"demo", "--rate", "fast"}, 2, "invalid value"},
		{[]string{"demo", "--consumers", "0"}, 2, "--consumers must be"},
		{[]string{"demo", "--reject-percent", "101"}, 2, "--reject-percent must be"},
		{[]string{"demo", "--duration", "-1s"}, 2, "--duration must not be negative"},
		{[]string{"demo", "--addr", "", "--queue", "a:b"}, 2, "invalid queue name"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, stdout, stderr := redqRun(t, tc.args...)
			if code != tc.code {
				t.Errorf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tc.code, stdout, stderr)
			}
			if !strings.Contains(stdout+stderr, tc.want) {
				t.Errorf("output does not contain %q\nstdout:\n%s\nstderr:\n%s", tc.want, stdout, stderr)
			}
			if tc.code == 2 && stdout != "" {
				t.Errorf("a usage error wrote to stdout: %q", stdout)
			}
		})
	}
}

func TestUnreachableRedisFails(t *testing.T) {
	m := miniredis.RunT(t)
	addr := m.Addr()
	m.Close() // nothing listens there now
	code, _, stderr := redqRun(t, "stats", "--redis", "redis://"+addr)
	if code != 1 || !strings.Contains(stderr, "connect to Redis at "+addr) {
		t.Errorf("exit %d, stderr %q; want 1 and the address", code, stderr)
	}
}

var summaryRe = regexp.MustCompile(`published (\d+)(?: \(and (\d+) of unknown outcome: in Redis once or not at all\))?, acked (\d+), rejected (\d+) \(returned (\d+)\), failed (\d+); left in Redis: ready (\d+), rejected (\d+), unacked (\d+)`)

// checkSummary reads the demo's final line and checks that every
// published delivery was acked or is still in Redis, and that nothing else
// is there but deliveries of publishes whose outcome was unknown (a loaded
// machine).
func checkSummary(t *testing.T, stdout string) {
	t.Helper()
	m := summaryRe.FindStringSubmatch(stdout)
	if m == nil {
		t.Fatalf("no summary line in %q", stdout)
	}
	n := make([]int64, len(m))
	for i := 1; i < len(m); i++ {
		n[i], _ = strconv.ParseInt(m[i], 10, 64) // an absent unknown count is 0
	}
	published, unknown, acked, rejected, failed := n[1], n[2], n[3], n[4], n[6]
	ready, rejectedLeft, unacked := n[7], n[8], n[9]
	if published == 0 || acked == 0 || rejected == 0 {
		t.Errorf("published %d, acked %d, rejected %d: want all > 0", published, acked, rejected)
	}
	if failed != 0 {
		t.Errorf("%d acks or rejects failed", failed)
	}
	if unacked != 0 {
		t.Errorf("%d deliveries left unacked after a clean stop", unacked)
	}
	if seen := acked + ready + rejectedLeft + unacked; seen < published || seen > published+unknown {
		t.Errorf("acked %d + ready %d + rejected %d + unacked %d is not from published %d to published + unknown %d: deliveries were lost or duplicated",
			acked, ready, rejectedLeft, unacked, published, published+unknown)
	}
}

// TestDemoEmbedded runs the demo on its embedded miniredis, reads its stats
// page while it runs and stops it as Ctrl-C would, by cancelling the
// context.
func TestDemoEmbedded(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := start(ctx, "demo", "--addr", "127.0.0.1:0", "--rate", "500", "--reject-percent", "10", "--work", "1ms")
	url := waitFor(t, r.stderr, regexp.MustCompile(`stats page on (http://\S+)`))
	// Let it run for about two seconds: two progress lines (stderr is not a
	// terminal, so each is a line of its own).
	waitFor(t, r.stderr, regexp.MustCompile(`(?s)published \d+  acked \d+.*\n.*published \d+  acked \d+`))

	res, err := http.Get(url + "?format=json")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	var s redq.Stats
	if err := json.Unmarshal(body, &s); err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("stats page: %d %q: %v", res.StatusCode, body, err)
	}
	demo, ok := s.QueueStats["demo"]
	if !ok || demo.ConsumerCount() != 4 || demo.ConnectionCount() != 1 {
		t.Errorf("stats page shows %+v, want queue demo with 4 consumers on 1 connection", s)
	}
	for name, cs := range demo.Connections {
		if !strings.HasPrefix(name, demoTag+"-") || !cs.Active {
			t.Errorf("connection %s %+v, want an active %s-* connection", name, cs, demoTag)
		}
	}
	res, err = http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || !strings.Contains(string(body), `data-queue="demo"`) {
		t.Errorf("HTML page: %d, without the demo queue:\n%s", res.StatusCode, body)
	}

	cancel()
	if code := r.wait(t); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, r.stderr)
	}
	checkSummary(t, r.stdout.String())
	if t.Failed() {
		t.Logf("the demo's stderr:\n%s", r.stderr)
	}
	if _, err := http.Get(url); err == nil {
		t.Error("the stats page still answers after the demo stopped")
	}
}

// TestDemoDuration runs the demo against a real Redis for --duration.
func TestDemoDuration(t *testing.T) {
	s := redistest.Start(t)
	tg := newTarget(t, s.Addr())
	began := time.Now()
	stdout := mustRedq(t, "demo", "--redis", tg.url, "--namespace", tg.ns, "--addr", "", "--duration", "2s", "--rate", "300", "--reject-percent", "10", "--keep")
	if d := time.Since(began); d < 2*time.Second {
		t.Errorf("demo --duration 2s returned after %v", d)
	}
	checkSummary(t, stdout)
	// What the summary says is left is what Redis holds.
	m := summaryRe.FindStringSubmatch(stdout)
	ready, _ := strconv.ParseInt(m[7], 10, 64)
	rejected, _ := strconv.ParseInt(m[8], 10, 64)
	wantQueue(t, tg.stats(t), "demo", ready, rejected, 0)
}

func TestStatsAndClean(t *testing.T) {
	forBackends(t, func(t *testing.T, tg target) {
		dead := deadHolder(t, tg, "jobs", 3)
		producer := tg.open(t, "producer")
		q, err := producer.OpenQueue("jobs")
		if err != nil {
			t.Fatal(err)
		}
		if err := q.Publish("a", "b"); err != nil {
			t.Fatal(err)
		}
		// One delivery due in an hour, and two whose time to live will
		// have run out when they come due: delayed until clean reaches
		// them, then expired.
		ctx := context.Background()
		if err := q.Put(ctx, []byte("later"), redq.Delay(time.Hour)); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if err := q.Put(ctx, []byte("stale"), redq.Delay(time.Millisecond), redq.TTL(time.Millisecond)); err != nil {
				t.Fatal(err)
			}
		}
		published, err := tg.client.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}

		s := tg.stats(t)
		wantQueue(t, s, "jobs", 2, 0, 3)
		wantScheduled(t, s, "jobs", 3, 0)
		if cs, ok := s.QueueStats["jobs"].Connections[dead]; !ok || cs.Active {
			t.Errorf("jobs connections %v: want %s dead", s.QueueStats["jobs"].Connections, dead)
		}
		wantOthers := map[string]bool{connectionName(producer): true}
		if fmt.Sprint(s.OtherConnections) != fmt.Sprint(wantOthers) {
			t.Errorf("other connections %v, want only the producer (not the command's own): %v", s.OtherConnections, wantOthers)
		}

		text := mustRedq(t, tg.args("stats")...)
		// ready, rejected, delayed, expired, unacked, consumers, connections
		if !regexp.MustCompile(`(?m)^jobs\s+2\s+0\s+3\s+0\s+3\s+0\s+1\s*$`).MatchString(text) {
			t.Errorf("stats text has no line 'jobs 2 0 3 0 3 0 1':\n%s", text)
		}
		if !strings.Contains(text, dead) || !strings.Contains(text, "dead") {
			t.Errorf("stats text does not show %s dead:\n%s", dead, text)
		}

		// Wait until the stale deliveries' time to live has run out by
		// Redis's clock, the one that decides.
		deadline := time.Now().Add(15 * time.Second)
		for {
			now, err := tg.client.Time(ctx).Result()
			if err != nil {
				t.Fatal(err)
			}
			if now.Sub(published) > 10*time.Millisecond {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("Redis's clock does not move")
			}
			time.Sleep(2 * time.Millisecond)
		}
		// clean returns the dead connection's deliveries (and counts them)
		// and finds the stale ones expired on its round over the queue.
		if out := mustRedq(t, tg.args("clean")...); !strings.Contains(out, "returned 3 deliveries") {
			t.Errorf("clean: %q, want 3 returned", out)
		}
		s = tg.stats(t)
		wantQueue(t, s, "jobs", 5, 0, 0)
		wantScheduled(t, s, "jobs", 1, 2)
		text = mustRedq(t, tg.args("stats")...)
		if !regexp.MustCompile(`(?m)^jobs\s+5\s+0\s+1\s+2\s+0\s+0\s+0\s*$`).MatchString(text) {
			t.Errorf("stats text after clean has no line 'jobs 5 0 1 2 0 0 0':\n%s", text)
		}
		if _, ok := s.QueueStats["jobs"].Connections[dead]; ok {
			t.Errorf("the dead connection is still registered for jobs after clean")
		}
		if out := mustRedq(t, tg.args("clean")...); !strings.Contains(out, "returned 0 deliveries") {
			t.Errorf("second clean: %q, want 0 returned", out)
		}
	})
}

func TestStatsEmptyNamespace(t *testing.T) {
	m := miniredis.RunT(t)
	code, stdout, stderr := redqRun(t, "stats", "--redis", "redis://"+m.Addr(), "--namespace", "empty")
	if code != 0 || !strings.Contains(stderr, `no open queues in namespace "empty"`) || !strings.HasPrefix(stdout, "queue ") {
		t.Errorf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
}

func TestCleanInterval(t *testing.T) {
	forBackends(t, func(t *testing.T, tg target) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		r := start(ctx, tg.args("clean", "--interval", "20ms")...)
		waitFor(t, r.stderr, regexp.MustCompile(`cleaning namespace`))
		deadHolder(t, tg, "jobs", 2)
		waitFor(t, r.stdout, regexp.MustCompile(`returned 2 deliveries`))
		cancel()
		if code := r.wait(t); code != 0 {
			t.Fatalf("exit %d; stderr:\n%s", code, r.stderr)
		}
		if out := r.stdout.String(); !strings.Contains(out, "returned 2 deliveries of dead connections and lost leases to ready in total") {
			t.Errorf("no total in %q", out)
		}
		wantQueue(t, tg.stats(t), "jobs", 2, 0, 0)
	})
}

func TestRejectedOperations(t *testing.T) {
	forBackends(t, func(t *testing.T, tg target) {
		// A worker rejects everything, as during a downstream outage.
		conn := tg.open(t, "worker")
		q, err := conn.OpenQueue("jobs")
		if err != nil {
			t.Fatal(err)
		}
		if err := q.StartConsuming(10, 20*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		var rejected atomic.Int64
		if _, err := q.AddConsumerFunc("failing", func(d redq.Delivery) {
			if err := d.Reject(); err == nil {
				rejected.Add(1)
			}
		}); err != nil {
			t.Fatal(err)
		}
		if err := q.Publish("1", "2", "3", "4", "5", "6"); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(15 * time.Second)
		for rejected.Load() < 6 {
			if time.Now().After(deadline) {
				t.Fatalf("rejected %d of 6", rejected.Load())
			}
			time.Sleep(5 * time.Millisecond)
		}
		<-conn.StopAllConsuming()
		wantQueue(t, tg.stats(t), "jobs", 0, 6, 0)

		if out := mustRedq(t, tg.args("return-rejected", "--queue", "jobs", "--max", "2")...); !strings.Contains(out, `returned 2 rejected deliveries of queue "jobs"`) {
			t.Errorf("return-rejected --max 2: %q", out)
		}
		wantQueue(t, tg.stats(t), "jobs", 2, 4, 0)

		if out := mustRedq(t, tg.args("purge-rejected", "--queue", "jobs")...); !strings.Contains(out, `purged 4 rejected deliveries of queue "jobs"`) {
			t.Errorf("purge-rejected: %q", out)
		}
		wantQueue(t, tg.stats(t), "jobs", 2, 0, 0)

		if out := mustRedq(t, tg.args("return-rejected", "--queue", "jobs")...); !strings.Contains(out, "returned 0 rejected") {
			t.Errorf("return-rejected on an empty rejected list: %q", out)
		}

		// A mistyped queue is an error, and does not create the queue.
		for _, cmd := range []string{"return-rejected", "purge-rejected"} {
			code, _, stderr := redqRun(t, tg.args(cmd, "--queue", "jbos")...)
			if code != 2 || !strings.Contains(stderr, `no queue "jbos" is open in namespace "`+tg.ns+`"; open queues: jobs`) {
				t.Errorf("%s on a missing queue: exit %d, %q", cmd, code, stderr)
			}
		}
		if names := tg.stats(t).Names(); !slices.Equal(names, []string{"jobs"}) {
			t.Errorf("queues %v after operations on a missing queue, want only jobs", names)
		}
	})
}
