package redqprom_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/redq/redq"
	"github.com/redq/redq/internal/redistest"
	"github.com/redq/redq/redqprom"
)

var realRedis *redistest.Server

func TestMain(m *testing.M) {
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
	if srv != nil {
		srv.Close()
	}
	os.Exit(code)
}

// backend is one Redis a scenario runs on.
type backend struct {
	name   string
	client *redis.Client
}

var nsCounter atomic.Int64

func namespace() redq.Option {
	return redq.WithNamespace(fmt.Sprintf("p%d-%d", os.Getpid(), nsCounter.Add(1)))
}

// forEachBackend runs f on miniredis and on a real redis-server.
func forEachBackend(t *testing.T, f func(t *testing.T, b backend)) {
	t.Run("miniredis", func(t *testing.T) {
		m := miniredis.RunT(t)
		c := redis.NewClient(&redis.Options{Addr: m.Addr()})
		t.Cleanup(func() { c.Close() })
		f(t, backend{"miniredis", c})
	})
	t.Run("redis", func(t *testing.T) {
		if realRedis == nil {
			if redistest.Required() {
				t.Fatal("REDQ_REQUIRE_REDIS=1 but redis-server is not available")
			}
			t.Skip("redis-server not found; set REDQ_REQUIRE_REDIS=1 to make this an error")
		}
		f(t, backend{"redis", realRedis.Client(t)})
	})
}

// scrape serves reg over HTTP and returns what a Prometheus scrape reads.
func scrape(t testing.TB, reg *prometheus.Registry) string {
	t.Helper()
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape: %s\n%s", resp.Status, b)
	}
	return string(b)
}

// wantLines fails unless every line is in the scrape.
func wantLines(t testing.TB, body string, lines ...string) {
	t.Helper()
	for _, l := range lines {
		if !strings.Contains(body, "\n"+l+"\n") {
			t.Errorf("scrape lacks %q", l)
		}
	}
	if t.Failed() {
		t.Logf("scrape:\n%s", body)
	}
}

// A scrape over an Inspector shows what Redis holds: counts by state, the
// paused state, consumers and the totals, read back after the deliveries
// were published, acked and rejected through another connection.
func TestCollectorScrape(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ns := namespace()
		conn, err := redq.Open(context.Background(), "worker", b.client, nil, ns)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { <-conn.StopAllConsuming() })
		q, err := conn.OpenQueue("jobs")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.OpenQueue("idle"); err != nil {
			t.Fatal(err)
		}
		for i := range 5 {
			if err := q.Publish(fmt.Sprint(i)); err != nil {
				t.Fatal(err)
			}
		}
		if err := q.Put(context.Background(), []byte("later"), redq.Delay(time.Hour)); err != nil {
			t.Fatal(err)
		}
		if err := q.StartConsuming(2, 10*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		got := make(chan redq.Delivery, 10)
		if _, err := q.AddConsumerFunc("w", func(d redq.Delivery) { got <- d }); err != nil {
			t.Fatal(err)
		}
		if err := (<-got).Ack(); err != nil {
			t.Fatal(err)
		}
		if err := (<-got).Reject(); err != nil {
			t.Fatal(err)
		}
		<-got // held: unacked
		<-got
		idle, err := conn.OpenQueue("idle")
		if err != nil {
			t.Fatal(err)
		}
		if err := idle.Pause(context.Background()); err != nil {
			t.Fatal(err)
		}

		insp, err := redq.NewInspector(b.client, ns)
		if err != nil {
			t.Fatal(err)
		}
		reg := prometheus.NewRegistry()
		reg.MustRegister(redqprom.NewCollector(insp))
		body := scrape(t, reg)
		wantLines(t, body,
			`redq_up 1`,
			`redq_queue_deliveries{queue="jobs",state="ready"} 1`,
			`redq_queue_deliveries{queue="jobs",state="delayed"} 1`,
			`redq_queue_deliveries{queue="jobs",state="unacked"} 2`,
			`redq_queue_deliveries{queue="jobs",state="rejected"} 1`,
			`redq_queue_paused{queue="jobs"} 0`,
			`redq_queue_paused{queue="idle"} 1`,
			`redq_queue_consumers{queue="jobs"} 1`,
			`redq_queue_published_total{queue="jobs"} 6`,
			`redq_queue_acked_total{queue="jobs"} 1`,
			`redq_queue_rejected_total{queue="jobs"} 1`,
			`redq_connections{state="active"} 1`,
		)
		if problems, err := testutil.CollectAndLint(redqprom.NewCollector(insp)); err != nil || len(problems) > 0 {
			t.Errorf("lint: %v %v", problems, err)
		}
	})
}

// fakeSource answers from memory, or fails.
type fakeSource struct {
	queues []redq.QueueInfo
	conns  []redq.ConnectionInfo
	timers map[string]redq.TimerStat
	rounds map[string]redq.RoundStat
	sets   map[string]redq.ScheduleSetStat
	err    error
}

func (f *fakeSource) ScheduleSets(context.Context) (map[string]redq.ScheduleSetStat, error) {
	return f.sets, nil
}

func (f *fakeSource) Queues(context.Context) ([]redq.QueueInfo, error) { return f.queues, f.err }
func (f *fakeSource) Connections(context.Context) ([]redq.ConnectionInfo, error) {
	return f.conns, nil
}
func (f *fakeSource) Timers(context.Context) (map[string]redq.TimerStat, error) { return f.timers, nil }
func (f *fakeSource) Rounds(context.Context) (map[string]redq.RoundStat, error) { return f.rounds, nil }

// fakeOverview is a fakeSource read in one Overview call; its four
// separate reads fail, so that a Collector calling them is seen.
type fakeOverview struct{ f *fakeSource }

var errSeparate = errors.New("read separately although Overview is offered")

func (o fakeOverview) Overview(context.Context) (redq.Overview, error) {
	if o.f.err != nil {
		return redq.Overview{}, o.f.err
	}
	return redq.Overview{Queues: o.f.queues, Connections: o.f.conns, Timers: o.f.timers, Rounds: o.f.rounds, ScheduleSets: o.f.sets}, nil
}
func (fakeOverview) Queues(context.Context) ([]redq.QueueInfo, error) { return nil, errSeparate }
func (fakeOverview) Connections(context.Context) ([]redq.ConnectionInfo, error) {
	return nil, errSeparate
}
func (fakeOverview) Timers(context.Context) (map[string]redq.TimerStat, error) {
	return nil, errSeparate
}
func (fakeOverview) Rounds(context.Context) (map[string]redq.RoundStat, error) {
	return nil, errSeparate
}

var _ redqprom.OverviewSource = (*redq.Inspector)(nil)

// Each field of the snapshot lands in its metric, whether the Source is
// read in four calls or in one Overview; a failed read makes redq_up 0
// without failing the scrape.
func TestCollectorMetrics(t *testing.T) {
	newFake := func() *fakeSource {
		return &fakeSource{
			queues: []redq.QueueInfo{{Name: "a", Ready: 3, Delayed: 4, Unacked: 5, Rejected: 6, KeyedPending: 7, Paused: true,
				Consumers: 8, Connections: 9, Published: 10, Acked: 11, Rejects: 12, Retried: 13}},
			conns:  []redq.ConnectionInfo{{Name: "x", State: "active"}, {Name: "y", State: "dead"}, {Name: "z", State: "dead"}},
			timers: map[string]redq.TimerStat{"alarms": {Pending: 2, Firing: 1}},
			rounds: map[string]redq.RoundStat{"polls": {ItemCount: 4, DueCount: 2, OldestLag: 1500 * time.Millisecond, IssuedCount: 40, ExpiredCount: 3}},
			sets:   map[string]redq.ScheduleSetStat{"nightly": {Schedules: 5, Paused: 2, Fired: 70}},
		}
	}
	for _, overview := range []bool{false, true} {
		t.Run(fmt.Sprintf("overview=%v", overview), func(t *testing.T) {
			fake := newFake()
			var src redqprom.Source = fake
			if overview {
				src = fakeOverview{fake}
			}
			reg := prometheus.NewRegistry()
			reg.MustRegister(redqprom.NewCollector(src))
			wantLines(t, scrape(t, reg),
				`redq_up 1`,
				`redq_queue_deliveries{queue="a",state="ready"} 3`,
				`redq_queue_deliveries{queue="a",state="delayed"} 4`,
				`redq_queue_deliveries{queue="a",state="unacked"} 5`,
				`redq_queue_deliveries{queue="a",state="rejected"} 6`,
				`redq_queue_keyed_pending{queue="a"} 7`,
				`redq_queue_paused{queue="a"} 1`,
				`redq_queue_consumers{queue="a"} 8`,
				`redq_queue_connections{queue="a"} 9`,
				`redq_queue_published_total{queue="a"} 10`,
				`redq_queue_acked_total{queue="a"} 11`,
				`redq_queue_rejected_total{queue="a"} 12`,
				`redq_queue_retried_total{queue="a"} 13`,
				`redq_connections{state="active"} 1`,
				`redq_connections{state="dead"} 2`,
				`redq_connections{state="stopped"} 0`,
				`redq_timers_pending{timers="alarms"} 2`,
				`redq_timers_firing{timers="alarms"} 1`,
				`redq_round_items{round="polls"} 4`,
				`redq_round_due{round="polls"} 2`,
				`redq_round_oldest_lag_seconds{round="polls"} 1.5`,
				`redq_round_issued_total{round="polls"} 40`,
				`redq_round_expired_total{round="polls"} 3`,
				`redq_schedules{set="nightly"} 5`,
				`redq_schedules_paused{set="nightly"} 2`,
				`redq_schedule_ticks_fired_total{set="nightly"} 70`,
			)
			if problems, err := testutil.CollectAndLint(redqprom.NewCollector(src)); err != nil || len(problems) > 0 {
				t.Errorf("lint: %v %v", problems, err)
			}

			reg2 := prometheus.NewRegistry()
			reg2.MustRegister(redqprom.NewCollector(src, redqprom.WithoutConnections(), redqprom.WithoutTimersAndRounds(), redqprom.WithTimeout(time.Second)))
			body := scrape(t, reg2)
			if strings.Contains(body, "redq_connections") || strings.Contains(body, "redq_timers") || strings.Contains(body, "redq_round") {
				t.Errorf("left-out metrics reported:\n%s", body)
			}
			wantLines(t, body, `redq_up 1`, `redq_queue_deliveries{queue="a",state="ready"} 3`)

			fake.err = errors.New("redis: connection refused")
			body = scrape(t, reg)
			wantLines(t, body, `redq_up 0`)
			if strings.Contains(body, "redq_queue_deliveries") {
				t.Errorf("queue metrics reported although the read failed:\n%s", body)
			}
			if !overview {
				// the other reads still report
				wantLines(t, body, `redq_connections{state="dead"} 2`)
			} else if strings.Contains(body, "redq_connections") {
				t.Errorf("connections reported although the one read failed:\n%s", body)
			}
		})
	}
}

// roundTrips counts what a client sends: each command sent alone and
// each pipeline is one round trip (on one node).
type roundTrips struct{ trips, cmds atomic.Int64 }

func (r *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }
func (r *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		r.trips.Add(1)
		r.cmds.Add(1)
		return next(ctx, cmd)
	}
}
func (r *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		r.trips.Add(1)
		r.cmds.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// setupQueues opens n queues in a namespace of their own, every tenth
// with a delivery, and returns a registry with a Collector over an
// Inspector whose client counts round trips.
func setupQueues(t testing.TB, addr string, n int) (*prometheus.Registry, *roundTrips) {
	t.Helper()
	ns := namespace()
	setup := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { setup.Close() })
	conn, err := redq.Open(context.Background(), "setup", setup, nil, ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { <-conn.StopAllConsuming() })
	for i := range n {
		q, err := conn.OpenQueue(fmt.Sprintf("q%04d", i))
		if err != nil {
			t.Fatal(err)
		}
		if i%10 == 0 {
			if err := q.Publish("x"); err != nil {
				t.Fatal(err)
			}
		}
	}
	client := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { client.Close() })
	rt := &roundTrips{}
	client.AddHook(rt)
	insp, err := redq.NewInspector(client, ns)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(redqprom.NewCollector(insp))
	scrape(t, reg) // warm: scripts loaded
	rt.trips.Store(0)
	rt.cmds.Store(0)
	return reg, rt
}

// A scrape over an Inspector costs Redis two round trips, for 10 queues
// as for 1,000 (see docs/metrics.md for the figures).
func TestCollectorRoundTrips(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		for _, n := range []int{10, 1000} {
			reg, rt := setupQueues(t, b.client.Options().Addr, n)
			start := time.Now()
			body := scrape(t, reg)
			took := time.Since(start)
			if got := strings.Count(body, "redq_queue_paused{"); got != n {
				t.Fatalf("%d queues scraped, want %d", got, n)
			}
			t.Logf("%s: a scrape of %d queues: %d round trips, %d commands, %v", b.name, n, rt.trips.Load(), rt.cmds.Load(), took)
			if trips := rt.trips.Load(); trips > 2 {
				t.Errorf("a scrape of %d queues: %d round trips, want at most 2", n, trips)
			}
		}
	})
}

// BenchmarkScrape1000Queues measures one scrape of 1,000 queues on the
// real redis-server (reported: round trips and commands per scrape).
func BenchmarkScrape1000Queues(b *testing.B) {
	if realRedis == nil {
		b.Skip("redis-server not found")
	}
	reg, rt := setupQueues(b, realRedis.Addr(), 1000)
	b.ResetTimer()
	for b.Loop() {
		if _, err := reg.Gather(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(rt.trips.Load())/float64(b.N), "trips/op")
	b.ReportMetric(float64(rt.cmds.Load())/float64(b.N), "cmds/op")
}
