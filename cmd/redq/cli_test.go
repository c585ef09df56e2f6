package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redq/redq/internal/redistest"
)

// keySnapshot is every key of a Redis with its DUMP and PTTL.
type keySnapshot map[string]struct {
	dump string
	pttl time.Duration
}

func snapshot(t *testing.T, c *redis.Client) keySnapshot {
	t.Helper()
	ctx := context.Background()
	s := keySnapshot{}
	iter := c.Scan(ctx, 0, "*", 1000).Iterator()
	for iter.Next(ctx) {
		k := iter.Val()
		dump, err := c.Dump(ctx, k).Result()
		if err != nil {
			t.Fatalf("DUMP %s: %v", k, err)
		}
		pttl, err := c.PTTL(ctx, k).Result()
		if err != nil {
			t.Fatalf("PTTL %s: %v", k, err)
		}
		s[k] = struct {
			dump string
			pttl time.Duration
		}{dump, pttl}
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestReadOnlyCommands runs every read-only command against a real
// redis-server holding data of every kind and checks that not one key
// changed: the same keys, the same DUMP, and time to live only less by the
// time that passed (a write that refreshed one would raise it).
func TestReadOnlyCommands(t *testing.T) {
	srv := redistest.Start(t)
	tg := newTarget(t, srv.Addr())
	w := newWorld(t, tg)
	ids := tg.page(t, "jobs", "--state", "delayed")
	// The producer stops (the other connection is dead already), so that
	// nothing but the commands runs: a live connection's heartbeat would
	// change keys by itself.
	<-w.conn.StopAllConsuming()

	before := snapshot(t, tg.client)
	began := time.Now()
	if len(before) < 10 {
		t.Fatalf("only %d keys: the world is not populated", len(before))
	}
	for _, args := range [][]string{
		tg.args("queues"), tg.args("queues", "--json"),
		tg.args("inspect", "jobs"), tg.args("inspect", "jobs", "--json"),
		tg.args("inspect", "jobs", "--state", "delayed"), tg.args("inspect", "jobs", "--state", "rejected", "--json"),
		tg.args("inspect", "jobs", "--state", "unacked"), tg.args("inspect", "jobs", "--state", "keyed"),
		tg.args("inspect", "jobs", "--search", "alp", "--limit", "1"),
		tg.args("delivery", "jobs", w.rejected), tg.args("delivery", "jobs", ids.Items[0].ID, "--json", "--payload-out", filepath.Join(t.TempDir(), "p")),
		tg.args("connections"), tg.args("connections", "--json"),
		tg.args("timers"), tg.args("timers", "--json"),
		tg.args("rounds"), tg.args("rounds", "--json"), tg.args("rounds", "--round", "feeds"), tg.args("rounds", "--round", "feeds", "--json"),
		tg.args("stats"), tg.args("stats", "--json"),
		{"version"}, {"version", "--json"}, {"help"}, {"help", "inspect"},
		// Failures change nothing either.
		tg.args("inspect", "nope"), tg.args("delivery", "jobs", "00000000000000000000000000000000"),
	} {
		redqRun(t, args...)
	}
	after := snapshot(t, tg.client)
	elapsed := time.Since(began)
	for k, b := range before {
		a, ok := after[k]
		switch {
		case !ok && b.pttl >= 0 && b.pttl <= elapsed+time.Second:
			// It expired meanwhile.
		case !ok:
			t.Errorf("key %s was deleted", k)
		case a.dump != b.dump:
			t.Errorf("key %s changed", k)
		case (a.pttl < 0) != (b.pttl < 0) || a.pttl > b.pttl:
			t.Errorf("key %s: time to live %v, was %v", k, a.pttl, b.pttl)
		}
	}
	for k := range after {
		if _, ok := before[k]; !ok {
			t.Errorf("key %s was created", k)
		}
	}
}

func TestRedisURLForms(t *testing.T) {
	srv := redistest.Start(t)
	_, port, _ := net.SplitHostPort(srv.Addr())
	for _, tc := range []struct {
		url  string
		code int
		want string
	}{
		{srv.Addr(), 0, ""},
		{":" + port, 0, ""},
		{"redis://" + srv.Addr() + "/0", 0, ""},
		{"127.0.0.1", 2, "want redis://[user:pass@]host:port/db"},
		{"127.0.0.1:http", 2, "the port must be a number"},
		{"http://" + srv.Addr(), 2, "want redis://[user:pass@]host:port/db"},
		{"redis://" + srv.Addr() + "/x", 2, "invalid --redis"},
	} {
		code, stdout, stderr := redqRun(t, "queues", "--redis", tc.url)
		if code != tc.code || !strings.Contains(stderr, tc.want) {
			t.Errorf("--redis %q: exit %d, want %d with %q\nstdout:\n%s\nstderr:\n%s", tc.url, code, tc.code, tc.want, stdout, stderr)
		}
	}

	// Without --redis, $REDIS_URL.
	tg := newTarget(t, srv.Addr())
	newWorld(t, tg)
	t.Setenv(redisURLEnv, srv.Addr())
	if out := mustRedq(t, "queues", "--namespace", tg.ns); !strings.Contains(out, "jobs") {
		t.Errorf("queues with $REDIS_URL: %q", out)
	}
	t.Setenv(redisURLEnv, "nonsense")
	if code, _, stderr := redqRun(t, "queues"); code != 2 || !strings.Contains(stderr, `invalid $REDIS_URL "nonsense"`) {
		t.Errorf("a bad $REDIS_URL: exit %d, %q", code, stderr)
	}
	t.Setenv(redisURLEnv, "")
	if code, _, stderr := redqRun(t, "queues"); code != 2 || !strings.Contains(stderr, "--redis is required (or set $REDIS_URL)") {
		t.Errorf("no Redis: exit %d, %q", code, stderr)
	}
}

// Errors are one line with one "redq" prefix, durations as durations. The
// command runs as a process of its own, so that the test sees all it writes
// to stderr, go-redis's own log lines included.
func TestErrorsOneLine(t *testing.T) {
	srv := redistest.Start(t)
	closed := srv.Addr()
	srv.Close() // nothing listens there now
	// Each run takes about two seconds (go-redis retries the dial), so
	// they run side by side.
	t.Run("unreachable", func(t *testing.T) {
		for _, args := range [][]string{
			{"queues", "--redis", closed}, {"stats", "--redis", closed}, {"retry", "jobs", "00000000000000000000000000000000", "--redis", closed},
			{"queues", "--redis", "127.0.0.1:1"}, {"clean", "--redis", "127.0.0.1:1"}, {"inspect", "jobs", "--redis", "127.0.0.1:1"}, {"pause", "jobs", "--redis", "127.0.0.1:1"},
		} {
			t.Run(strings.Join(args, " "), func(t *testing.T) {
				t.Parallel()
				addr := args[len(args)-1]
				code, _, stderr := redqExec(t, args...)
				if code != 1 || strings.Count(stderr, "\n") != 1 || !strings.HasPrefix(stderr, "redq "+args[0]+": ") || strings.Contains(stderr, "redq: ") || !strings.Contains(stderr, "connect to Redis at "+addr) {
					t.Errorf("exit %d, %q; want 1 and one line with one prefix", code, stderr)
				}
			})
		}
	})
	code, _, stderr := redqExec(t, "clean", "--redis", closed, "--interval", "-90m")
	if code != 2 || !strings.Contains(stderr, "-1h30m0s") {
		t.Errorf("a negative interval: exit %d, %q; want 2 and the duration as a duration", code, stderr)
	}
}

// Commands that run until stopped keep go-redis's log lines (rate-limited)
// so that an operator sees Redis come and go; one-shot commands drop them.
func TestLongRunning(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{nil, false},
		{[]string{"queues", "--redis", "x"}, false},
		{[]string{"inspect", "jobs", "--state", "rejected"}, false},
		{[]string{"clean"}, false},
		{[]string{"clean", "--interval", "0"}, false},
		{[]string{"clean", "--interval", "bad"}, false},
		{[]string{"clean", "--redis", "x", "--interval", "30s"}, true},
		{[]string{"clean", "-interval=1m"}, true},
		{[]string{"serve"}, true},
		{[]string{"demo", "--duration", "5s"}, true},
		{[]string{"soak"}, true},
	} {
		if got := longRunning(tc.args); got != tc.want {
			t.Errorf("longRunning(%q) = %v, want %v", tc.args, got, tc.want)
		}
	}
}

// The demo works in a namespace of its own, and deletes it at the end when
// it created it.
func TestDemoNamespace(t *testing.T) {
	srv := redistest.Start(t)
	tg := newTarget(t, srv.Addr())
	ctx := context.Background()
	code, stdout, stderr := redqRun(t, "demo", "--redis", tg.url, "--addr", "", "--duration", "1s", "--rate", "200")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	checkSummary(t, stdout)
	if keys := tg.client.Keys(ctx, "*").Val(); len(keys) != 0 {
		t.Errorf("the demo left keys behind: %v\n%s", keys, stderr)
	}
	if !strings.Contains(stderr, `deleted the`) || !strings.Contains(stderr, `namespace "redq-demo"`) {
		t.Errorf("the demo does not say it deleted its namespace:\n%s", stderr)
	}

	// With --keep, or in a namespace that held keys, it leaves them, and
	// never touches the default namespace.
	mustRedq(t, "demo", "--redis", tg.url, "--addr", "", "--duration", "1s", "--keep")
	keys := tg.client.Keys(ctx, "*").Val()
	if len(keys) == 0 {
		t.Fatal("--keep kept nothing")
	}
	for _, k := range keys {
		if !strings.HasPrefix(k, "redq-demo:") && !strings.HasPrefix(k, "{redq-demo}:") {
			t.Errorf("key %s is outside the demo's namespace", k)
		}
	}
	n := len(keys)
	_, _, stderr = redqRun(t, "demo", "--redis", tg.url, "--addr", "", "--duration", "1s")
	if !strings.Contains(stderr, "holds keys already") || len(tg.client.Keys(ctx, "*").Val()) < n {
		t.Errorf("a second demo in a namespace with keys deleted them:\n%s", stderr)
	}
}

func TestVersionAndHelp(t *testing.T) {
	out := mustRedq(t, "version")
	if !strings.HasPrefix(out, "redq ") || !strings.Contains(out, "go1.") {
		t.Errorf("version: %q", out)
	}
	var b buildInfo
	if err := json.Unmarshal([]byte(mustRedq(t, "version", "--json")), &b); err != nil || b.GoVersion == "" {
		t.Errorf("version --json: %+v, %v", b, err)
	}
	if got := mustRedq(t, "--version"); got != out {
		t.Errorf("--version %q, version %q", got, out)
	}
	help := mustRedq(t, "help")
	for _, c := range commands {
		if !strings.Contains(help, "\n  "+c.name+" ") {
			t.Errorf("help does not list %s", c.name)
		}
	}
	var at []int
	for _, g := range groups {
		at = append(at, strings.Index(help, capitalize(g)+":"))
	}
	if slices.Contains(at, -1) || !slices.IsSorted(at) {
		t.Errorf("help's groups at %v:\n%s", at, help)
	}
	for _, c := range commands {
		out := mustRedq(t, "help", c.name)
		if !strings.HasPrefix(out, fmt.Sprintf("usage: %s\n", usageLine(&c))) {
			t.Errorf("help %s: %q", c.name, out)
		}
	}
}
