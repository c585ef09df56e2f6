package redq

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redq/redq/internal/redistest"
)

// The migration reads rmq's global keys (rmq::queues, rmq::connections),
// which have no namespace, so every scenario gets a Redis of its own: a
// miniredis, and a redis-server started for it.
func forEachRmqBackend(t *testing.T, f func(t *testing.T, b backend)) {
	t.Run("miniredis", func(t *testing.T) {
		m := miniredis.RunT(t)
		c := redis.NewClient(&redis.Options{Addr: m.Addr()})
		t.Cleanup(func() { c.Close() })
		f(t, backend{name: "miniredis", client: c, mini: m})
	})
	t.Run("redis", func(t *testing.T) {
		s := redistest.Start(t)
		f(t, backend{name: "redis", client: s.Client(t)})
	})
}

// rmqFixture writes an rmq v5 deployment into Redis by hand, command for
// command as rmq's programs do it.
type rmqFixture struct {
	t *testing.T
	c redis.UniversalClient
	l rmqLayout
}

func (f rmqFixture) must(err error) {
	f.t.Helper()
	if err != nil && !errors.Is(err, redis.Nil) {
		f.t.Fatal(err)
	}
}

// openQueue is rmq's OpenQueue: the queue is listed.
func (f rmqFixture) openQueue(q string) {
	f.must(f.c.SAdd(context.Background(), rmqQueuesKey, q).Err())
}

// publish is rmq's Publish: one LPUSH of all payloads.
func (f rmqFixture) publish(q string, payloads ...string) {
	f.t.Helper()
	f.openQueue(q)
	args := make([]any, len(payloads))
	for i, p := range payloads {
		args[i] = p
	}
	f.must(f.c.LPush(context.Background(), f.l.ready(q), args...).Err())
}

// reject puts payloads into the rejected list as rmq's Reject does (LPUSH).
func (f rmqFixture) reject(q string, payloads ...string) {
	f.t.Helper()
	for _, p := range payloads {
		f.must(f.c.LPush(context.Background(), f.l.rejected(q), p).Err())
	}
}

// connection is rmq's openConnection: a heartbeat (only when alive; a
// connection that died has none) and an entry in the connections set.
func (f rmqFixture) connection(name string, alive bool) {
	f.t.Helper()
	ctx := context.Background()
	if alive {
		f.must(f.c.Set(ctx, rmqHeartbeatKey(name), "1", time.Minute).Err())
	}
	f.must(f.c.SAdd(ctx, rmqConnectionsKey, name).Err())
}

// take is rmq's StartConsuming, AddConsumer and n fetches: RPOPLPUSH from
// ready into the connection's unacked list. It returns what it took.
func (f rmqFixture) take(conn, q string, n int) []string {
	f.t.Helper()
	ctx := context.Background()
	f.must(f.c.SAdd(ctx, rmqConnQueuesKey(conn), q).Err())
	f.must(f.c.SAdd(ctx, "rmq::connection::"+conn+"::queue::"+f.l.queue(q)+"::consumers", "consumer-abc123").Err())
	var got []string
	for range n {
		p, err := f.c.LMove(ctx, f.l.ready(q), f.l.unacked(conn, q), "RIGHT", "LEFT").Result() // rmq's RPOPLPUSH
		if err != nil {
			f.t.Fatalf("take: %v", err)
		}
		got = append(got, p)
	}
	return got
}

// withHeader is what rmq's PayloadWithHeader makes.
func withHeader(payload string, h http.Header) string {
	j, err := json.Marshal(h)
	if err != nil {
		panic(err)
	}
	return rmqHeaderSignature + string(j) + "\n" + payload
}

// dbSnapshot returns every key of the database with its type, content and
// whether it has a TTL, to show that a run changed nothing.
func dbSnapshot(t testing.TB, c redis.UniversalClient) map[string]string {
	t.Helper()
	ctx := context.Background()
	keys, err := c.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, k := range keys {
		typ := c.Type(ctx, k).Val()
		var content []string
		switch typ {
		case "list":
			content = c.LRange(ctx, k, 0, -1).Val()
		case "set":
			content = c.SMembers(ctx, k).Val()
			sort.Strings(content)
		case "hash":
			for f, v := range c.HGetAll(ctx, k).Val() {
				content = append(content, f+"="+v)
			}
			sort.Strings(content)
		case "zset":
			for _, z := range c.ZRangeWithScores(ctx, k, 0, -1).Val() {
				content = append(content, fmt.Sprint(z.Member, "@", z.Score))
			}
		case "string":
			content = []string{c.Get(ctx, k).Val()}
		}
		sum := sha256.Sum256([]byte(strings.Join(content, "\x00")))
		out[k] = fmt.Sprintf("%s %d %s ttl=%v", typ, len(content), hex.EncodeToString(sum[:8]), c.PTTL(ctx, k).Val() > 0)
	}
	return out
}

func sameDB(t testing.TB, what string, before, after map[string]string) {
	t.Helper()
	if !reflect.DeepEqual(before, after) {
		for k, v := range after {
			if before[k] != v {
				t.Errorf("%s: %s is %q, was %q", what, k, v, before[k])
			}
		}
		for k, v := range before {
			if _, ok := after[k]; !ok {
				t.Errorf("%s: %s (%s) is gone", what, k, v)
			}
		}
		t.Fatalf("%s changed the database", what)
	}
}

// got is one delivery as a consumer saw it.
type got struct {
	payload  string
	header   http.Header
	attempts int
}

func (g got) String() string { return fmt.Sprintf("%q %v a%d", g.payload, g.header, g.attempts) }

// consumeAll takes every ready delivery of queue in namespace ns with redq,
// in the order redq hands them out, and acks them.
func consumeAll(t *testing.T, c redis.UniversalClient, ns, queue string) []got {
	t.Helper()
	conn, err := openConn(c, "consumer", nil, WithNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { <-conn.StopAllConsuming() }()
	q := openQueue(t, conn, queue)
	var out []got
	for {
		ds, err := q.TakeBatch(context.Background(), 7, 0)
		if errors.Is(err, ErrorTimeout) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			g := got{payload: d.Payload(), attempts: d.Attempts()}
			// Through an assertion, as rmq users ask for headers.
			if h, ok := d.(interface{ Header() http.Header }); ok {
				g.header = h.Header()
			}
			out = append(out, g)
		}
		ackAll(t, ds)
	}
}

// consumeRejected moves the rejected deliveries of queue back to ready and
// consumes them.
func consumeRejected(t *testing.T, c redis.UniversalClient, ns, queue string) []got {
	t.Helper()
	conn, err := openConn(c, "returner", nil, WithNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := openQueue(t, conn, queue).ReturnRejected(1 << 40); err != nil {
		t.Fatal(err)
	}
	<-conn.StopAllConsuming()
	return consumeAll(t, c, ns, queue)
}

func wantGot(t *testing.T, what string, gotten []got, want []got) {
	t.Helper()
	if len(gotten) != len(want) {
		t.Fatalf("%s: got %d deliveries, want %d:\n got %v\nwant %v", what, len(gotten), len(want), gotten, want)
	}
	for i := range want {
		g, w := gotten[i], want[i]
		if g.payload != w.payload || g.attempts != w.attempts || len(g.header) != len(w.header) ||
			(len(w.header) > 0 && !reflect.DeepEqual(g.header, w.header)) {
			t.Fatalf("%s: delivery %d is %v, want %v\n got %v\nwant %v", what, i, g, w, gotten, want)
		}
	}
}

func plainGot(attempts int, payloads ...string) []got {
	out := make([]got, len(payloads))
	for i, p := range payloads {
		out[i] = got{payload: p, attempts: attempts}
	}
	return out
}

func migrate(t *testing.T, c redis.UniversalClient, opts MigrateOptions) MigrateReport {
	t.Helper()
	r, err := MigrateFromRmq(context.Background(), c, opts)
	if err != nil {
		t.Fatalf("migrate: %v\nreport:\n%s", err, r)
	}
	return r
}

func queueReport(t *testing.T, r MigrateReport, name string) MigrateQueueReport {
	t.Helper()
	for _, q := range r.Queues {
		if q.Name == name {
			return q
		}
	}
	t.Fatalf("no queue %q in the report:\n%s", name, r)
	return MigrateQueueReport{}
}

func wantQueueReport(t *testing.T, r MigrateReport, name string, ready, rejected, unacked, headers int64) {
	t.Helper()
	q := queueReport(t, r, name)
	if q.Ready != ready || q.Rejected != rejected || q.Unacked != unacked || q.Headers != headers {
		t.Fatalf("%s: ready/rejected/unacked/headers = %d/%d/%d/%d, want %d/%d/%d/%d\n%s", name,
			q.Ready, q.Rejected, q.Unacked, q.Headers, ready, rejected, unacked, headers, r)
	}
}

// A deployment of two queues with headers, rejections, a dead and a live
// connection, in either layout: every payload arrives in redq once, in
// order, with its header; the live connection's deliveries stay; a dry run
// before changes nothing and a second run moves nothing.
func TestMigrateFromRmq(t *testing.T) {
	for _, layout := range rmqLayouts {
		t.Run(layout.String(), func(t *testing.T) {
			forEachRmqBackend(t, func(t *testing.T, b backend) {
				ctx := context.Background()
				f := rmqFixture{t: t, c: b.client, l: layout}
				trace := func(i int) http.Header {
					return http.Header{"Trace-Id": {"t" + strconv.Itoa(i)}, "X-Multi": {"a", "b"}}
				}
				var published []got
				for i := range 12 {
					p := "r" + strconv.Itoa(i)
					g := got{payload: p, attempts: 1}
					if i%3 == 0 {
						g.header = trace(i)
						p = withHeader(p, g.header)
					}
					f.publish("tasks", p)
					published = append(published, g)
				}
				f.publish("emails", "e0", "e1", "e2") // one LPUSH: e2 is the newest
				f.openQueue("empty")
				f.connection("dead-1", false)
				f.connection("live-1", true)
				f.connection("idle-1", false)
				f.take("dead-1", "tasks", 4)             // r0..r3
				liveHeld := f.take("live-1", "tasks", 2) // r4, r5
				f.reject("tasks", "j0", withHeader("j1", trace(1)), "j2")
				f.take("dead-1", "emails", 1) // e0

				before := dbSnapshot(t, b.client)
				dry := migrate(t, b.client, MigrateOptions{Namespace: "app", DryRun: true})
				sameDB(t, "a dry run", before, dbSnapshot(t, b.client))
				if !dry.DryRun || dry.Moved() != 6+3+4+2+1 {
					t.Fatalf("dry run reports %d to move:\n%s", dry.Moved(), dry)
				}
				wantQueueReport(t, dry, "tasks", 6, 3, 4, 0)
				wantQueueReport(t, dry, "emails", 2, 0, 1, 0)
				wantQueueReport(t, dry, "empty", 0, 0, 0, 0)
				if want := []RmqHolding{{"live-1", "tasks", 2}}; !reflect.DeepEqual(dry.Live, want) {
					t.Fatalf("live: %v, want %v", dry.Live, want)
				}

				var progress []MigrateProgress
				r := migrate(t, b.client, MigrateOptions{Namespace: "app", ChunkSize: 2,
					Progress: func(p MigrateProgress) { progress = append(progress, p) }})
				wantQueueReport(t, r, "tasks", 6, 3, 4, 2+2+1)
				wantQueueReport(t, r, "emails", 2, 0, 1, 0)
				if q := queueReport(t, r, "tasks"); !slices.Equal(q.Layouts, []string{layout.String()}) || q.Left != 0 {
					t.Fatalf("tasks: layouts %v, left %d", q.Layouts, q.Left)
				}
				if want := []RmqHolding{{"dead-1", "emails", 1}, {"dead-1", "tasks", 4}}; !reflect.DeepEqual(r.Dead, want) {
					t.Fatalf("dead: %v, want %v", r.Dead, want)
				}
				if want := []RmqHolding{{"live-1", "tasks", 2}}; !reflect.DeepEqual(r.Live, want) {
					t.Fatalf("live: %v, want %v", r.Live, want)
				}
				if len(progress) == 0 || progress[len(progress)-1].Moved != 16 || progress[len(progress)-1].Total != 16 {
					t.Fatalf("progress: %v", progress)
				}
				for _, want := range []string{"NOT MOVED: rmq connection live-1 is alive holding 2 deliveries of queue tasks", "moved 16 deliveries"} {
					if !strings.Contains(r.String(), want) {
						t.Fatalf("report lacks %q:\n%s", want, r)
					}
				}

				// rmq's lists are empty but the live connection's, which is as it was.
				for _, k := range []string{layout.ready("tasks"), layout.rejected("tasks"), layout.unacked("dead-1", "tasks"), layout.ready("emails")} {
					if n := b.client.Exists(ctx, k).Val(); n != 0 {
						t.Fatalf("%s is still there", k)
					}
				}
				if held := b.client.LRange(ctx, layout.unacked("live-1", "tasks"), 0, -1).Val(); !slices.Equal(held, []string{liveHeld[1], liveHeld[0]}) {
					t.Fatalf("the live connection holds %q, took %q", held, liveHeld)
				}
				queues := b.client.SMembers(ctx, "{app}:queues").Val()
				sort.Strings(queues)
				if !slices.Equal(queues, []string{"emails", "tasks"}) {
					t.Fatalf("redq's queues set: %v", queues)
				}

				// Every delivery got an id of its own, which tells when it moved.
				ids := map[string]bool{}
				for _, k := range []string{"app:{tasks}:ready", "app:{tasks}:rejected", "app:{emails}:ready"} {
					for _, e := range b.client.LRange(ctx, k, 0, -1).Val() {
						env, ok := decodeEnvelope(e)
						if !ok || ids[env.id] || time.Since(publishedAt(env.id)) > time.Minute {
							t.Fatalf("%s holds %q: a well-formed envelope %v, id seen before %v, published at %v",
								k, e, ok, ids[env.id], publishedAt(env.id))
						}
						ids[env.id] = true
					}
				}

				again := dbSnapshot(t, b.client)
				r2 := migrate(t, b.client, MigrateOptions{Namespace: "app"})
				if r2.Moved() != 0 {
					t.Fatalf("a second run moved %d:\n%s", r2.Moved(), r2)
				}
				sameDB(t, "a second run", again, dbSnapshot(t, b.client))

				// The dead connection's takes come first, the oldest first and
				// with their attempt counted, then the ready ones in order.
				want := slices.Clone(published[:4])
				for i := range want {
					want[i].attempts = 2
				}
				want = append(want, published[6:]...)
				wantGot(t, "tasks", consumeAll(t, b.client, "app", "tasks"), want)
				wantGot(t, "tasks rejected", consumeRejected(t, b.client, "app", "tasks"),
					[]got{{payload: "j0", attempts: 1}, {payload: "j1", header: trace(1), attempts: 1}, {payload: "j2", attempts: 1}})
				wantGot(t, "emails", consumeAll(t, b.client, "app", "emails"),
					[]got{{payload: "e0", attempts: 2}, {payload: "e1", attempts: 1}, {payload: "e2", attempts: 1}})
			})
		})
	}
}

// A run stopped after any number of chunks, then run again (with more
// published in rmq meanwhile), ends with every payload in redq once and in
// order; the interrupted run needs no Merge to be continued.
func TestMigrateInterruptedAndRerun(t *testing.T) {
	forEachRmqBackend(t, func(t *testing.T, b backend) {
		f := rmqFixture{t: t, c: b.client, l: rmqLayouts[1]}
		var ready, held, rejected []got
		for i := range 40 {
			p := "r" + strconv.Itoa(i)
			g := got{payload: p, attempts: 1}
			if i%4 == 1 {
				g.header = http.Header{"N": {strconv.Itoa(i)}}
				p = withHeader(p, g.header)
			}
			f.publish("q", p)
			ready = append(ready, g)
		}
		f.connection("gone", false)
		f.take("gone", "q", 7)
		for _, g := range ready[:7] {
			g.attempts = 2
			held = append(held, g)
		}
		ready = ready[7:]
		for i := range 5 {
			p := "j" + strconv.Itoa(i)
			f.reject("q", p)
			rejected = append(rejected, got{payload: p, attempts: 1})
		}

		runs, stops := 0, 0
		for k := 1; ; k += 2 {
			runs++
			ctx, cancel := context.WithCancel(context.Background())
			chunks, seen := 0, int64(0)
			r, err := MigrateFromRmq(ctx, b.client, MigrateOptions{ChunkSize: 3, Progress: func(p MigrateProgress) {
				seen = p.Moved
				if chunks++; chunks == k {
					cancel()
				}
			}})
			cancel()
			if err == nil {
				if chunks > k {
					t.Fatalf("run %d went on after its context was cancelled", runs)
				}
				break
			}
			if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "run it again") {
				t.Fatalf("run %d: %v", runs, err)
			}
			if chunks != k || r.Moved() != seen || seen == 0 {
				t.Fatalf("run %d was cancelled after chunk %d, ran %d chunks and reports %d moved, progress %d", runs, k, chunks, r.Moved(), seen)
			}
			stops++
			if runs == 2 {
				// rmq publishers go on meanwhile
				for i := 40; i < 44; i++ {
					p := "r" + strconv.Itoa(i)
					f.publish("q", p)
					ready = append(ready, got{payload: p, attempts: 1})
				}
			}
		}
		if stops < 3 {
			t.Fatalf("only %d runs were interrupted", stops)
		}
		wantGot(t, "ready", consumeAll(t, b.client, DefaultNamespace, "q"), append(held, ready...))
		wantGot(t, "rejected", consumeRejected(t, b.client, DefaultNamespace, "q"), rejected)
		for _, l := range rmqLayouts {
			for _, k := range []string{l.ready("q"), l.rejected("q"), l.unacked("gone", "q")} {
				if b.client.Exists(context.Background(), k).Val() != 0 {
					t.Fatalf("%s is left", k)
				}
			}
		}
	})
}

// go-redis sends a command again when a reply is lost: the same chunk call
// sent twice moves once and answers the first reply.
func TestMigrateResentChunk(t *testing.T) {
	forEachRmqBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		f := rmqFixture{t: t, c: b.client, l: rmqLayouts[0]}
		f.publish("q", "a", withHeader("b", http.Header{"H": {"1"}}), "c", "d")
		k := newQueueKeys(DefaultNamespace, "q")
		keys := []string{f.l.ready("q"), k.ready, k.prefix + ":rmq"}
		call := func(token string) []int64 {
			t.Helper()
			v, err := scripts.migrateRmq.Run(ctx, b.client, keys, token, 2, "back", "123456", "ready").Result()
			if err != nil {
				t.Fatal(err)
			}
			r, err := int64s(v)
			if err != nil {
				t.Fatal(err)
			}
			return r
		}
		first := call("run:1")
		if !slices.Equal(first, []int64{2, 1, 0, 0}) {
			t.Fatalf("first call: %v", first)
		}
		if again := call("run:1"); !slices.Equal(again, first) {
			t.Fatalf("the same call again answered %v, first %v", again, first)
		}
		if n := b.client.LLen(ctx, k.ready).Val(); n != 2 {
			t.Fatalf("redq's ready holds %d after a resent call, want 2", n)
		}
		if next := call("run:2"); !slices.Equal(next, []int64{2, 0, 0, 0}) {
			t.Fatalf("the next call: %v", next)
		}
		if next := call("run:3"); !slices.Equal(next, []int64{0, 0, 0, 0}) {
			t.Fatalf("a call on an empty list: %v", next)
		}
		rec := b.client.HGetAll(ctx, k.prefix+":rmq").Val()
		if rec["ready"] != "4" || rec["seq"] != "4" {
			t.Fatalf("record: %v", rec)
		}
		wantGot(t, "q", consumeAll(t, b.client, DefaultNamespace, "q"),
			[]got{{payload: "a", attempts: 1}, {payload: "b", header: http.Header{"H": {"1"}}, attempts: 1}, {payload: "c", attempts: 1}, {payload: "d", attempts: 1}})
	})
}

// An rmq connection whose heartbeat comes back while its unacked list is
// being moved keeps the rest: the check runs in each chunk's script.
func TestMigrateDeadConnectionComesBack(t *testing.T) {
	forEachRmqBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		f := rmqFixture{t: t, c: b.client, l: rmqLayouts[0]}
		f.publish("q", "a", "b", "c", "d", "e", "f")
		f.connection("zombie", false)
		f.take("zombie", "q", 6)
		calls := 0
		r := migrate(t, b.client, MigrateOptions{ChunkSize: 2, Progress: func(MigrateProgress) {
			if calls++; calls == 1 {
				// SIGCONT: the paused rmq consumer refreshes its heartbeat
				f.must(b.client.Set(ctx, rmqHeartbeatKey("zombie"), "1", time.Minute).Err())
			}
		}})
		if want := []RmqHolding{{"zombie", "q", 2}}; !reflect.DeepEqual(r.Dead, want) {
			t.Fatalf("dead: %v, want %v\n%s", r.Dead, want, r)
		}
		if want := []RmqHolding{{"zombie", "q", 4}}; !reflect.DeepEqual(r.Live, want) {
			t.Fatalf("live: %v, want %v\n%s", r.Live, want, r)
		}
		// The first chunk took its newest takes (to push them to the front
		// behind the older ones that were to follow).
		if held := b.client.LRange(ctx, f.l.unacked("zombie", "q"), 0, -1).Val(); !slices.Equal(held, []string{"d", "c", "b", "a"}) {
			t.Fatalf("the connection holds %q", held)
		}
		wantGot(t, "q", consumeAll(t, b.client, DefaultNamespace, "q"), plainGot(2, "e", "f"))
	})
}

// A redq queue that holds deliveries already is refused unless Merge is
// set, and then rmq's line up behind redq's (a dead connection's in front,
// as a cleaner returns them). An empty queue, or one holding only the wake
// marker, is no clash.
func TestMigrateNamespaceClash(t *testing.T) {
	forEachRmqBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		f := rmqFixture{t: t, c: b.client, l: rmqLayouts[1]}
		f.publish("tasks", "r0", "r1", "r2")
		f.connection("dead", false)
		f.take("dead", "tasks", 1)
		f.reject("tasks", "j0")
		f.publish("idle", "i0")
		f.publish("opened", "o0")

		conn := openT(t, b, "redq-side", WithNamespace("app"))
		if err := openQueue(t, conn, "tasks").Publish("x0", "x1"); err != nil {
			t.Fatal(err)
		}
		openQueue(t, conn, "opened") // registered, empty: no clash
		if err := b.client.LPush(ctx, newQueueKeys("app", "idle").ready, migrateWakeMarker).Err(); err != nil {
			t.Fatal(err)
		}
		// redq deliveries elsewhere than the plain ready list count too.
		mustPut(t, openQueue(t, conn, "prio"), "p", Priority(3))
		mustPut(t, openQueue(t, conn, "later"), "l", Delay(time.Hour))
		held := openQueue(t, conn, "held")
		if err := held.Publish("h"); err != nil {
			t.Fatal(err)
		}
		take(t, held, 1)
		for _, q := range []string{"prio", "later", "held"} {
			f.publish(q, q+"-rmq")
		}

		before := dbSnapshot(t, b.client)
		for _, dry := range []bool{true, false} {
			r, err := MigrateFromRmq(ctx, b.client, MigrateOptions{Namespace: "app", DryRun: dry})
			var refused *MigrationRefusedError
			if !errors.As(err, &refused) || !errors.Is(err, ErrorMigrationRefused) || len(refused.Problems) != 4 ||
				!strings.Contains(err.Error(), `queue "tasks": redq's queue "tasks" in namespace "app" already holds 2 deliveries`) ||
				!strings.Contains(err.Error(), "--merge") {
				t.Fatalf("dry run %v: %v", dry, err)
			}
			for i, q := range []string{"held", "later", "prio", "tasks"} {
				if refused.Problems[i].Queue != q {
					t.Fatalf("problem %d is about %q, want %q: %v", i, refused.Problems[i].Queue, q, err)
				}
			}
			if !r.DryRun || r.Moved() != 9 {
				t.Fatalf("a refused run reports:\n%s", r)
			}
		}
		sameDB(t, "a refused run", before, dbSnapshot(t, b.client))

		migrate(t, b.client, MigrateOptions{Namespace: "app", Merge: true})
		wantGot(t, "tasks", consumeAll(t, b.client, "app", "tasks"),
			append(plainGot(2, "r0"), plainGot(1, "x0", "x1", "r1", "r2")...))
		wantGot(t, "idle", consumeAll(t, b.client, "app", "idle"), plainGot(1, "i0"))
		wantGot(t, "opened", consumeAll(t, b.client, "app", "opened"), plainGot(1, "o0"))
		wantGot(t, "rejected", consumeRejected(t, b.client, "app", "tasks"), plainGot(1, "j0"))

		// Side by side: rmq publishers go on, redq's queue holds its own
		// deliveries now, and a later run (without Merge) adds rmq's.
		if err := openQueue(t, conn, "tasks").Publish("x2"); err != nil {
			t.Fatal(err)
		}
		f.publish("tasks", "r3")
		migrate(t, b.client, MigrateOptions{Namespace: "app"})
		wantGot(t, "tasks", consumeAll(t, b.client, "app", "tasks"), plainGot(1, "x2", "r3"))
	})
}

// Queue names redq refuses: the run is refused, naming each queue that
// holds something, and nothing moves; without them the others move.
func TestMigrateRefusesInvalidQueueNames(t *testing.T) {
	forEachRmqBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		f := rmqFixture{t: t, c: b.client, l: rmqLayouts[0]}
		f.publish("good", "g0")
		f.publish("has space", "s0")
		f.openQueue("a:b")
		f.reject("a:b", "c0")
		f.openQueue("{empty}")

		before := dbSnapshot(t, b.client)
		r, err := MigrateFromRmq(ctx, b.client, MigrateOptions{})
		var refused *MigrationRefusedError
		if !errors.As(err, &refused) || len(refused.Problems) != 2 {
			t.Fatalf("err %v\n%s", err, r)
		}
		for _, want := range []string{`queue "a:b": the name is not a valid redq queue name: byte 1 (':')`, `queue "has space"`, "--queues"} {
			if !strings.Contains(err.Error(), want) {
				t.Fatalf("%q lacks %q", err, want)
			}
		}
		if strings.Contains(err.Error(), "{empty}") || !strings.Contains(queueReport(t, r, "{empty}").Note, "holds nothing to move") {
			t.Fatalf("an empty queue with a bad name is only noted: %v\n%s", err, r)
		}
		sameDB(t, "a refused run", before, dbSnapshot(t, b.client))

		r = migrate(t, b.client, MigrateOptions{Queues: []string{"good"}})
		if r.Moved() != 1 || len(r.Queues) != 1 {
			t.Fatalf("moved:\n%s", r)
		}
		if n := b.client.LLen(ctx, f.l.ready("has space")).Val(); n != 1 {
			t.Fatalf("the refused queue lost deliveries: %d left", n)
		}
		wantGot(t, "good", consumeAll(t, b.client, DefaultNamespace, "good"), plainGot(1, "g0"))
	})
}

// No rmq data, a queue rmq does not know, bad options and clients: clear
// errors, and nothing changes.
func TestMigrateBadInput(t *testing.T) {
	forEachRmqBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		for _, opts := range []MigrateOptions{{}, {DryRun: true}, {Queues: []string{"tasks"}}} {
			_, err := MigrateFromRmq(ctx, b.client, opts)
			if !errors.Is(err, ErrorNoRmqData) || !strings.Contains(err.Error(), "rmq::queues") {
				t.Fatalf("%+v on an empty Redis: %v", opts, err)
			}
		}
		b.client.Set(ctx, "other", "app", 0)
		f := rmqFixture{t: t, c: b.client, l: rmqLayouts[0]}
		f.publish("tasks", "t0")
		before := dbSnapshot(t, b.client)
		_, err := MigrateFromRmq(ctx, b.client, MigrateOptions{Queues: []string{"tasks", "taks"}})
		if !errors.Is(err, ErrorMigrationRefused) || !strings.Contains(err.Error(), `queue "taks": no such rmq queue`) {
			t.Fatalf("a queue rmq does not know: %v", err)
		}
		for _, tc := range []struct {
			client redis.UniversalClient
			opts   MigrateOptions
			want   string
		}{
			{b.client, MigrateOptions{ChunkSize: -1}, "chunk size"},
			{b.client, MigrateOptions{ChunkSize: MaxMigrateChunk + 1}, "chunk size"},
			{b.client, MigrateOptions{Namespace: "a b"}, "namespace"},
			{b.client, MigrateOptions{HashTags: 7}, "hash tags"},
			{b.client, MigrateOptions{Queues: []string{""}}, "queue name"},
			{nil, MigrateOptions{}, "redis client"},
			{new(redis.Ring), MigrateOptions{}, "ring"},
		} {
			_, err := MigrateFromRmq(ctx, tc.client, tc.opts)
			if !errors.Is(err, ErrorInvalidArgument) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("%+v: %v", tc.opts, err)
			}
		}
		sameDB(t, "bad input", before, dbSnapshot(t, b.client))
	})
}

// Both layouts in one Redis: auto moves both, on and off one each.
func TestMigrateLayouts(t *testing.T) {
	forEachRmqBackend(t, func(t *testing.T, b backend) {
		plain := rmqFixture{t: t, c: b.client, l: rmqLayouts[0]}
		tagged := rmqFixture{t: t, c: b.client, l: rmqLayouts[1]}
		plain.publish("q", "p0")
		tagged.publish("q", "t0")
		r := migrate(t, b.client, MigrateOptions{Namespace: "on", HashTags: RmqHashTagsOn})
		if q := queueReport(t, r, "q"); q.Ready != 1 || !slices.Equal(q.Layouts, []string{"hash tags"}) {
			t.Fatalf("on:\n%s", r)
		}
		r = migrate(t, b.client, MigrateOptions{Namespace: "off", HashTags: RmqHashTagsOff})
		if q := queueReport(t, r, "q"); q.Ready != 1 || !slices.Equal(q.Layouts, []string{"plain"}) {
			t.Fatalf("off:\n%s", r)
		}
		wantGot(t, "on", consumeAll(t, b.client, "on", "q"), plainGot(1, "t0"))
		wantGot(t, "off", consumeAll(t, b.client, "off", "q"), plainGot(1, "p0"))
		plain.publish("q", "p1")
		tagged.publish("q", "t1")
		r = migrate(t, b.client, MigrateOptions{Namespace: "auto"})
		if q := queueReport(t, r, "q"); q.Ready != 2 || !slices.Equal(q.Layouts, []string{"plain", "hash tags"}) {
			t.Fatalf("auto:\n%s", r)
		}
		wantGot(t, "auto", consumeAll(t, b.client, "auto", "q"), plainGot(1, "p1", "t1"))
	})
}

// rmq header lines: what becomes a redq header is exactly what Go's
// encoding/json reads as an http.Header, which is what rmq's
// ExtractHeaderAndPayload accepts; anything else moves whole as the
// payload, and (as rmq would) is rejected when a consumer fetches it.
func TestMigrateHeaderLines(t *testing.T) {
	lines := []string{
		`{"A":["1"]}`, `{"A":["1","2"],"B":["3"]}`, `{}`, `null`, ` null `, `{"A":null}`, `{"A":[]}`,
		`{"A":["x",null]}`, ` { "A" : [ "x" , "y" ] } `, "{\t\"A\":[\"x\"]\r}", `{"A":["\u00e9\n\"\\\/\b\f\r\t"]}`,
		`{"A":["\ud800"]}`, `{"A":["é"]}`, "{\"A\":[\"\xff\xfe\"]}", "{\"A\":[\"\x7f\"]}", `{"":[""]}`, `{"\"":["]"]}`,
		`{"A":["1"],"A":["2"]}`, `{"A":["[{,:}]"]}`,
		// not an http.Header, or not JSON
		``, ` `, `nul`, `nullx`, `[]`, `"A"`, `1`, `{"A":{}}`, `{"A":[1]}`, `{"A":"x"}`, `{"A":[["x"]]}`,
		`{"A":[true]}`, `{"A":["x"],}`, `{"A":["x",]}`, `{"A":["x"]} x`, `{"A":["x"]`, `{"A":["x"}`, `{"A"["x"]}`,
		`{A:["x"]}`, `{"A":["\x"]}`, `{"A":["\u12"]}`, `{"A":["\u12g4"]}`, "{\"A\":[\"tab\there\"]}", "{\"A\":[\"nul\x00\"]}",
		`{"A":nullx}`, `{"A":[nul]}`, `{"A":["x"]}{`, `{,}`, `{"A":["x"],,"B":[]}`, `{"A":["x"] "B":[]}`, `{"A":["x"`,
	}
	forEachRmqBackend(t, func(t *testing.T, b backend) {
		f := rmqFixture{t: t, c: b.client, l: rmqLayouts[0]}
		var want []got
		var readable, unreadable int64
		for i, line := range lines {
			raw := rmqHeaderSignature + line + "\nbody" + strconv.Itoa(i)
			f.publish("h", raw)
			var h http.Header
			if err := json.Unmarshal([]byte(line), &h); err != nil {
				unreadable++ // moved whole; rejected when fetched
				continue
			}
			if strings.TrimSpace(line) != "null" {
				readable++
			}
			want = append(want, got{payload: "body" + strconv.Itoa(i), header: h, attempts: 1})
		}
		// A signature without a header line at all.
		f.publish("h", rmqHeaderSignature+`{"A":["x"]}`)
		unreadable++
		r := migrate(t, b.client, MigrateOptions{ChunkSize: 7})
		if q := queueReport(t, r, "h"); q.Headers != readable || q.UnreadableHeaders != unreadable {
			t.Fatalf("headers %d, unreadable %d; want %d and %d\n%s", q.Headers, q.UnreadableHeaders, readable, unreadable, r)
		}
		gotten := consumeAll(t, b.client, DefaultNamespace, "h")
		if len(gotten) != len(want) {
			t.Fatalf("got %d deliveries, want %d", len(gotten), len(want))
		}
		for i := range want {
			g, w := gotten[i], want[i]
			if g.payload != w.payload || !reflect.DeepEqual(g.header, w.header) && (len(g.header) != 0 || len(w.header) != 0) {
				t.Errorf("delivery %d: got %v, want %v", i, g, w)
			}
		}
		if n, err := b.client.LLen(context.Background(), newQueueKeys(DefaultNamespace, "h").rejected).Result(); err != nil || n != unreadable {
			t.Fatalf("rejected %d (%v), want the %d with unreadable headers", n, err, unreadable)
		}
	})
}

func TestKeySlot(t *testing.T) {
	for key, want := range map[string]uint16{
		"123456789": 12739, "foo": 12182, "{foo}.bar": 12182, "a{foo}b{bar}": 12182, "{}foo": keySlot("{}foo"),
		"rmq::queue::{tasks}::ready": keySlot("redq:{tasks}:ready"),
	} {
		if got := keySlot(key); got != want {
			t.Errorf("slot of %q is %d, want %d", key, got, want)
		}
	}
	if keySlot("{}foo") == keySlot("foo") {
		t.Errorf("an empty hash tag counts as none: the whole key is hashed")
	}
	if keySlot("rmq::queue::[tasks]::ready") == keySlot("redq:{tasks}:ready") {
		t.Errorf("the plain layout is in another slot")
	}
}

// The script gets the helpers it uses from lib.lua.
func TestMigrateScriptCarriesItsHelpers(t *testing.T) {
	full := withHelpers(readScript("lib"), readScript("migrate_rmq"))
	for _, def := range []string{"local MARKER", "local function drop_marker"} {
		if !strings.Contains(full, def) {
			t.Errorf("migrate_rmq.lua lacks %q", def)
		}
	}
	if strings.Contains(full, "local function push_ready") {
		t.Errorf("migrate_rmq.lua carries helpers it does not use")
	}
}

// A context that ends while a chunk's script is under way lets that chunk
// finish and be counted, also on a client that gives up reading a reply
// when its context's deadline passes: what each run reports is what moved.
func TestMigrateCancelDuringAChunk(t *testing.T) {
	forEachRmqBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		impatient := redis.NewClient(&redis.Options{Addr: b.client.(*redis.Client).Options().Addr, ContextTimeoutEnabled: true})
		defer impatient.Close()
		f := rmqFixture{t: t, c: b.client, l: rmqLayouts[0]}
		n, chunk := 30000, 2000
		if b.mini != nil {
			n, chunk = 6000, 500 // miniredis runs scripts far slower
		}
		payloads := make([]string, n)
		for i := range payloads {
			payloads[i] = strconv.Itoa(i) + strings.Repeat(".", 90)
		}
		f.publish("q", payloads...)
		ready := newQueueKeys(DefaultNamespace, "q").ready
		var reported int64
		for run := 0; ; run++ {
			cctx, cancel := context.WithTimeout(ctx, time.Duration(1+run%5)*time.Millisecond)
			r, err := MigrateFromRmq(cctx, impatient, MigrateOptions{ChunkSize: chunk})
			cancel()
			reported += r.Moved()
			if in := b.client.LLen(ctx, ready).Val(); in != reported {
				t.Fatalf("run %d: redq holds %d, the runs reported %d moved (%v)", run, in, reported, err)
			}
			if err == nil {
				break
			}
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("run %d: %v", run, err)
			}
			if run > 200 {
				t.Fatal("the migration never completed")
			}
		}
		if reported != int64(n) {
			t.Fatalf("moved %d of %d", reported, n)
		}
		drained, err := openQueue(t, openT(t, b, "drain"), "q").Drain(int64(n) + 1)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(drained, payloads) {
			t.Fatalf("redq holds %d deliveries, not the %d published in order", len(drained), n)
		}
	})
}

// Large payloads: a chunk stops at about 8 MiB, so it takes several calls,
// and every payload still arrives once, in order.
func TestMigrateLargePayloads(t *testing.T) {
	t.Parallel()
	forEachRmqBackend(t, func(t *testing.T, b backend) {
		f := rmqFixture{t: t, c: b.client, l: rmqLayouts[1]}
		var want []got
		for i := range 40 {
			p := strconv.Itoa(i) + strings.Repeat("x", 1<<20)
			f.publish("big", p)
			want = append(want, got{payload: p, attempts: 1})
		}
		f.connection("dead", false)
		f.take("dead", "big", 20)
		for i := range want[:20] {
			want[i].attempts = 2
		}
		calls := 0
		r := migrate(t, b.client, MigrateOptions{Progress: func(MigrateProgress) { calls++ }})
		wantQueueReport(t, r, "big", 20, 0, 20, 0)
		if calls < 4 {
			t.Fatalf("40 MiB moved in %d calls", calls)
		}
		wantGot(t, "big", consumeAll(t, b.client, DefaultNamespace, "big"), want)
	})
}
