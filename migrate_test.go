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
		p, err := f.c.RPopLPush(ctx, f.l.ready(q), f.l.unacked(conn, q)).Result()
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
	return rmqHeaderSig + string(j) + "\n" + payload
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
				trace := func(i int) http.Header { return http.Header{"Trace-Id": {"t" + strconv.Itoa(i)}, "X-Multi": {"a", "b"}} }
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
				f.take("dead-1", "tasks", 4)            // r0..r3
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
