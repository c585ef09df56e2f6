package main

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redq/redq"
	"github.com/redq/redq/internal/redistest"
)

// rmqLayout writes keys as rmq v5 does: with cluster hash tags ({q}) or
// without ([q]).
type rmqLayout struct {
	t      *testing.T
	c      *redis.Client
	tagged bool
}

func (l rmqLayout) q(name string) string {
	if l.tagged {
		return "{" + name + "}"
	}
	return "[" + name + "]"
}

func (l rmqLayout) ready(q string) string { return "rmq::queue::" + l.q(q) + "::ready" }

func (l rmqLayout) unacked(conn, q string) string {
	return "rmq::connection::" + conn + "::queue::" + l.q(q) + "::unacked"
}

func (l rmqLayout) must(err error) {
	l.t.Helper()
	if err != nil {
		l.t.Fatal(err)
	}
}

// publish is rmq's OpenQueue and Publish.
func (l rmqLayout) publish(q string, payloads ...string) {
	l.t.Helper()
	ctx := context.Background()
	l.must(l.c.SAdd(ctx, "rmq::queues", q).Err())
	for _, p := range payloads {
		l.must(l.c.LPush(ctx, l.ready(q), p).Err())
	}
}

func (l rmqLayout) reject(q string, payloads ...string) {
	l.t.Helper()
	for _, p := range payloads {
		l.must(l.c.LPush(context.Background(), "rmq::queue::"+l.q(q)+"::rejected", p).Err())
	}
}

// take opens an rmq connection (alive: with a heartbeat) that takes n
// deliveries of q with RPOPLPUSH, as rmq's consumers do.
func (l rmqLayout) take(conn string, alive bool, q string, n int) {
	l.t.Helper()
	ctx := context.Background()
	if alive {
		l.must(l.c.Set(ctx, "rmq::connection::"+conn+"::heartbeat", "1", time.Minute).Err())
	}
	l.must(l.c.SAdd(ctx, "rmq::connections", conn).Err())
	l.must(l.c.SAdd(ctx, "rmq::connection::"+conn+"::queues", q).Err())
	for range n {
		l.must(l.c.LMove(ctx, l.ready(q), l.unacked(conn, q), "RIGHT", "LEFT").Err()) // rmq's RPOPLPUSH
	}
}

// rmqHeader is what rmq's PayloadWithHeader makes.
func rmqHeader(payload string, h http.Header) string {
	j, _ := json.Marshal(h)
	return "\xFF\x00\xBE\xBEJ" + string(j) + "\n" + payload
}

// keysAndLengths is every key with its type and length, to show that a run
// changed nothing.
func keysAndLengths(t *testing.T, c *redis.Client) map[string]string {
	t.Helper()
	ctx := context.Background()
	out := map[string]string{}
	for _, k := range c.Keys(ctx, "*").Val() {
		typ := c.Type(ctx, k).Val()
		var n int64
		switch typ {
		case "list":
			n = c.LLen(ctx, k).Val()
		case "set":
			n = c.SCard(ctx, k).Val()
		case "hash":
			n = c.HLen(ctx, k).Val()
		}
		out[k] = typ + " " + strconv.FormatInt(n, 10)
	}
	return out
}

// taken is a delivery as a redq consumer got it.
type taken struct {
	payload string
	header  http.Header
}

// takeAll consumes every ready delivery of queue with redq, in order.
func takeAll(t *testing.T, tg target, queue string) []taken {
	t.Helper()
	q, err := tg.open(t, "consumer").OpenQueue(queue)
	if err != nil {
		t.Fatal(err)
	}
	var out []taken
	for {
		ds, err := q.TakeBatch(context.Background(), 100, 0)
		if errors.Is(err, redq.ErrorTimeout) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			tk := taken{payload: d.Payload()}
			if h, ok := d.(interface{ Header() http.Header }); ok {
				tk.header = h.Header()
			}
			out = append(out, tk)
		}
		if errs := ds.Ack(); len(errs) > 0 {
			t.Fatal(errs)
		}
	}
}

func payloadsOf(ts []taken) []string {
	out := make([]string, len(ts))
	for i, tk := range ts {
		out[i] = tk.payload
	}
	return out
}

var progressRe = regexp.MustCompile(`(?m)^redq migrate-from-rmq: moved (\d+)/(\d+) \(\d+%\) at [0-9.]+[kM]?/s, queue \S+$`)

func TestMigrateFromRmqCommand(t *testing.T) {
	forBackends(t, func(t *testing.T, tg target) {
		ctx := context.Background()
		tags := rmqLayout{t: t, c: tg.client, tagged: true}
		plain := rmqLayout{t: t, c: tg.client, tagged: false}
		hdr := http.Header{"Traceparent": {"00-abc-01"}}
		tags.publish("tasks", "t0", rmqHeader("t1", hdr), "t2", "t3", "t4", "t5")
		tags.take("worker-dead", false, "tasks", 2) // t0, t1
		tags.take("worker-live", true, "tasks", 1)  // t2
		tags.reject("tasks", "j0")
		plain.publish("mails", "m0", "m1")

		before := keysAndLengths(t, tg.client)
		out := mustRedq(t, tg.args("migrate-from-rmq", "--dry-run")...)
		for _, want := range []string{"(dry run: nothing changed)", "would move 8 deliveries (ready 5, rejected 1, unacked of dead connections 2) of 2 queues",
			"dead rmq connection worker-dead: 2 unacked deliveries of queue tasks would move",
			"NOT MOVED: rmq connection worker-live is alive holding 1 deliveries of queue tasks; stop it or run rmq's cleaner, then migrate again"} {
			if !strings.Contains(out, want) {
				t.Fatalf("dry run output lacks %q:\n%s", want, out)
			}
		}
		if after := keysAndLengths(t, tg.client); !reflect.DeepEqual(before, after) {
			t.Fatalf("a dry run changed Redis:\n%v\n%v", before, after)
		}

		code, stdout, stderr := redqRun(t, tg.args("migrate-from-rmq", "--chunk", "1", "--progress", "1ns")...)
		if code != 0 {
			t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
		}
		if m := progressRe.FindAllStringSubmatch(stderr, -1); len(m) < 5 || m[len(m)-1][1] != "8" || m[len(m)-1][2] != "8" {
			t.Fatalf("progress lines:\n%s", stderr)
		}
		for _, want := range []string{"moved 8 deliveries", "hash tags", "plain", "NOT MOVED: rmq connection worker-live"} {
			if !strings.Contains(stdout, want) {
				t.Fatalf("output lacks %q:\n%s", want, stdout)
			}
		}
		if held := tg.client.LRange(ctx, tags.unacked("worker-live", "tasks"), 0, -1).Val(); !slices.Equal(held, []string{"t2"}) {
			t.Fatalf("the live rmq connection holds %q", held)
		}
		wantQueue(t, tg.stats(t), "tasks", 5, 1, 0)

		// Nothing more to move: a second run says so and changes nothing.
		before = keysAndLengths(t, tg.client)
		if out := mustRedq(t, tg.args("migrate-from-rmq")...); !strings.Contains(out, "moved 0 deliveries") {
			t.Fatalf("a second run:\n%s", out)
		}
		if after := keysAndLengths(t, tg.client); !reflect.DeepEqual(before, after) {
			t.Fatalf("a second run changed Redis:\n%v\n%v", before, after)
		}

		got := takeAll(t, tg, "tasks")
		if p := payloadsOf(got); !slices.Equal(p, []string{"t0", "t1", "t3", "t4", "t5"}) {
			t.Fatalf("tasks: %q", p)
		}
		if !reflect.DeepEqual(got[1].header, hdr) || got[0].header != nil {
			t.Fatalf("headers: %v, %v", got[0].header, got[1].header)
		}
		if p := payloadsOf(takeAll(t, tg, "mails")); !slices.Equal(p, []string{"m0", "m1"}) {
			t.Fatalf("mails: %q", p)
		}
	})
}

func TestMigrateFromRmqCommandFailures(t *testing.T) {
	t.Setenv(redisURLEnv, "")
	m := miniredis.RunT(t)
	url := "redis://" + m.Addr() + "/0"
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"migrate-from-rmq"}, 2, "--redis is required (or set $REDIS_URL)"},
		{[]string{"migrate-from-rmq", "--redis", url, "--chunk", "0"}, 2, "--chunk must be 1 to 10000"},
		{[]string{"migrate-from-rmq", "--redis", url, "--chunk", "10001"}, 2, "--chunk must be 1 to 10000"},
		{[]string{"migrate-from-rmq", "--redis", url, "--hash-tags", "yes"}, 2, "--hash-tags must be auto, on or off"},
		{[]string{"migrate-from-rmq", "--redis", url, "--progress", "-1s"}, 2, "--progress must not be negative"},
		{[]string{"migrate-from-rmq", "--redis", url, "--queues", ", ,"}, 2, "--queues names no queue"},
		{[]string{"migrate-from-rmq", "--redis", url, "--namespace", "a:b"}, 2, "invalid namespace"},
		{[]string{"migrate-from-rmq", "--redis", "http://x"}, 2, `invalid --redis "http://x"`},
		{[]string{"help", "migrate-from-rmq"}, 0, "-dry-run"},
		{[]string{"help"}, 0, "migrate-from-rmq"},
		{[]string{"migrate-from-rmq", "--redis", url}, 1, "no rmq data in Redis at " + m.Addr() + " db 0: no rmq data found: rmq::queues and rmq::connections are empty"},
		{[]string{"migrate-from-rmq", "--redis", url, "--dry-run"}, 1, "no rmq data"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, stdout, stderr := redqRun(t, tc.args...)
			if code != tc.code || !strings.Contains(stdout+stderr, tc.want) {
				t.Fatalf("exit %d, want %d and %q\nstdout:\n%s\nstderr:\n%s", code, tc.code, tc.want, stdout, stderr)
			}
		})
	}
}

// A clash with redq's data and a bad queue name are refused with exit
// status 1 before anything moves; --merge and --queues get past them.
func TestMigrateFromRmqCommandRefuses(t *testing.T) {
	forBackends(t, func(t *testing.T, tg target) {
		l := rmqLayout{t: t, c: tg.client}
		l.publish("tasks", "r0")
		l.publish("bad name", "b0")
		q, err := tg.open(t, "redq-app").OpenQueue("tasks")
		if err != nil {
			t.Fatal(err)
		}
		if err := q.Publish("x0"); err != nil {
			t.Fatal(err)
		}
		before := keysAndLengths(t, tg.client)
		code, stdout, stderr := redqRun(t, tg.args("migrate-from-rmq")...)
		for _, want := range []string{"migration refused, nothing moved", `queue "bad name": the name is not a valid redq queue name`,
			`queue "tasks": redq's queue "tasks" in namespace "` + tg.ns + `" already holds 1 deliveries`, "--merge"} {
			if code != 1 || !strings.Contains(stderr, want) {
				t.Fatalf("exit %d; stderr lacks %q:\n%s", code, want, stderr)
			}
		}
		if !strings.Contains(stdout, "would move 2 deliveries") {
			t.Fatalf("a refused run shows what it would move:\n%s", stdout)
		}
		if after := keysAndLengths(t, tg.client); !reflect.DeepEqual(before, after) {
			t.Fatalf("a refused run changed Redis:\n%v\n%v", before, after)
		}
		mustRedq(t, tg.args("migrate-from-rmq", "--merge", "--queues", "tasks")...)
		if p := payloadsOf(takeAll(t, tg, "tasks")); !slices.Equal(p, []string{"x0", "r0"}) {
			t.Fatalf("tasks: %q", p)
		}
	})
}

// Ctrl-C stops a run between chunks with exit status 1 and a message to run
// it again; the rerun finishes, and every payload is in redq once, in order.
func TestMigrateFromRmqCommandInterrupted(t *testing.T) {
	forBackends(t, func(t *testing.T, tg target) {
		l := rmqLayout{t: t, c: tg.client, tagged: true}
		n := 20000 // a fast Redis must not finish before the Ctrl-C lands
		if strings.HasSuffix(t.Name(), "miniredis") {
			n = 3000 // miniredis runs scripts far slower
		}
		payloads := make([]string, n)
		args := make([]any, n)
		for i := range payloads {
			payloads[i] = "p" + strconv.Itoa(i)
			args[i] = payloads[i]
		}
		l.publish("q")
		l.must(tg.client.LPush(context.Background(), l.ready("q"), args...).Err())

		ctx, cancel := context.WithCancel(context.Background())
		r := start(ctx, tg.args("migrate-from-rmq", "--chunk", "10", "--progress", "1ns")...)
		waitFor(t, r.stderr, regexp.MustCompile(`moved (\d+)/`+strconv.Itoa(n)))
		cancel()
		if code := r.wait(t); code != 1 || !strings.Contains(r.stderr.String(), "run it again to move the rest: context canceled") {
			t.Fatalf("exit %d\n%s", code, r.stderr)
		}
		mustRedq(t, tg.args("migrate-from-rmq")...)
		q, err := tg.open(t, "drain").OpenQueue("q")
		if err != nil {
			t.Fatal(err)
		}
		if p, err := q.Drain(int64(n) + 1); err != nil || !slices.Equal(p, payloads) {
			t.Fatalf("redq holds %d deliveries, not the %d published in order (%v)", len(p), n, err)
		}
	})
}

// --cluster talks to a Redis Cluster: rmq's layout with hash tags moves,
// its plain layout is refused with the reason.
func TestMigrateFromRmqCommandCluster(t *testing.T) {
	s := redistest.Start(t, redistest.WithArgs("--cluster-enabled", "yes"))
	ctx := context.Background()
	node := s.Client(t)
	if err := node.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", 0, 16383).Err(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for !strings.Contains(node.ClusterInfo(ctx).Val(), "cluster_state:ok") {
		if time.Now().After(deadline) {
			t.Fatal("the cluster did not become ok")
		}
		time.Sleep(10 * time.Millisecond)
	}
	tg := newTarget(t, s.Addr())
	tags := rmqLayout{t: t, c: tg.client, tagged: true}
	tags.publish("tasks", "t0", "t1")
	tags.take("dead", false, "tasks", 1)
	out := mustRedq(t, tg.args("migrate-from-rmq", "--cluster")...)
	if !strings.Contains(out, "moved 2 deliveries (ready 1, rejected 0, unacked of dead connections 1)") {
		t.Fatalf("output:\n%s", out)
	}
	wantQueue(t, tg.stats(t), "tasks", 2, 0, 0)

	plain := rmqLayout{t: t, c: tg.client}
	plain.publish("tasks", "p0")
	code, _, stderr := redqRun(t, tg.args("migrate-from-rmq", "--cluster")...)
	if code != 1 || !strings.Contains(stderr, "rmq::queue::[tasks]::ready (plain layout) is in slot") {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	if out := mustRedq(t, tg.args("migrate-from-rmq", "--cluster", "--hash-tags", "on")...); !strings.Contains(out, "moved 0 deliveries") {
		t.Fatalf("--hash-tags on:\n%s", out)
	}
}
