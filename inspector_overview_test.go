package redq

import (
	"context"
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// tripCounter counts what a client sends: each command sent alone and
// each pipeline is one round trip.
type tripCounter struct{ trips atomic.Int64 }

func (r *tripCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (r *tripCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		r.trips.Add(1)
		return next(ctx, cmd)
	}
}
func (r *tripCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		r.trips.Add(1)
		return next(ctx, cmds)
	}
}

// fillOverview makes data of every kind in the namespace: queues with
// ready, delayed, rejected, unacked, keyed and paused deliveries and
// totals; an active, a stopped and a dead connection, and one registered
// for a queue but missing from the connection set; a timer set and a
// round.
func fillOverview(t *testing.T, b backend, ns Option) {
	t.Helper()
	ctx := context.Background()
	c := openT(t, b, "live", ns)
	q := openQueue(t, c, "jobs")
	for _, p := range []string{"a", "b", "c", "d"} {
		if err := q.Publish(p); err != nil {
			t.Fatal(err)
		}
	}
	if err := q.Put(ctx, []byte("later"), Delay(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Upsert(ctx, "k", []byte("keyed"), Delay(time.Hour)); err != nil {
		t.Fatal(err)
	}
	held := take(t, q, 3)
	if err := held[0].Reject(); err != nil {
		t.Fatal(err)
	}
	if err := held[1].Ack(); err != nil {
		t.Fatal(err)
	}
	idle := openQueue(t, c, "idle")
	if err := idle.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	openQueue(t, c, "{grp}child")
	stopped := openT(t, b, "gone", ns)
	openQueue(t, stopped, "jobs")
	<-stopped.StopAllConsuming()
	tm, err := c.OpenTimers("tm")
	if err != nil {
		t.Fatal(err)
	}
	if err := tm.Set(ctx, "t1", time.Hour); err != nil {
		t.Fatal(err)
	}
	r, err := c.OpenRound("feeds", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"x", "y"} {
		if _, err := r.Add(ctx, id, []byte(id)); err != nil {
			t.Fatal(err)
		}
	}
	sc := openSchedules(t, c, "cron")
	mustSchedule(t, sc, "hourly", "@every 1h", "h")
	mustSchedule(t, sc, "daily", "@every 24h", "d")
	if err := sc.Pause(ctx, "daily"); err != nil {
		t.Fatal(err)
	}
	// A dead connection (registered, no heartbeat) holding a delivery of
	// jobs, and one registered for jobs but not in the connection set.
	g := newGlobalKeys(c.opts.namespace)
	k := newQueueKeys(c.opts.namespace, "jobs")
	for _, cmd := range []*redis.IntCmd{
		b.client.SAdd(ctx, g.connections, "ghost"),
		b.client.HSet(ctx, k.consumers, "ghost", 2, "orphan", 1),
		b.client.HSet(ctx, k.unacked("ghost"), "t1", "e1"),
		b.client.HSet(ctx, k.unacked("orphan"), "t2", "e2", "t3", "e3"),
	} {
		if err := cmd.Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// separately reads what Overview reads with the four separate methods.
func separately(t *testing.T, i *Inspector) Overview {
	t.Helper()
	ctx := context.Background()
	var o Overview
	var err error
	if o.Queues, err = i.Queues(ctx); err != nil {
		t.Fatal(err)
	}
	if o.Connections, err = i.Connections(ctx); err != nil {
		t.Fatal(err)
	}
	if o.Timers, err = i.Timers(ctx); err != nil {
		t.Fatal(err)
	}
	if o.Rounds, err = i.Rounds(ctx); err != nil {
		t.Fatal(err)
	}
	if o.ScheduleSets, err = i.ScheduleSets(ctx); err != nil {
		t.Fatal(err)
	}
	return o
}

// sameOverview compares two readings made a moment apart: heartbeat ages
// and round lags move with the clock, so they are compared within a
// minute and then left out.
func sameOverview(t *testing.T, what string, got, want Overview) {
	t.Helper()
	near := func(a, b time.Duration) bool { return (a < 0) == (b < 0) && (a-b).Abs() < time.Minute }
	for n := range got.Connections {
		if n < len(want.Connections) {
			if !near(got.Connections[n].HeartbeatAge, want.Connections[n].HeartbeatAge) {
				t.Errorf("%s: heartbeat age of %s: %v, separately %v", what, got.Connections[n].Name,
					got.Connections[n].HeartbeatAge, want.Connections[n].HeartbeatAge)
			}
			got.Connections[n].HeartbeatAge, want.Connections[n].HeartbeatAge = 0, 0
		}
	}
	for name, r := range got.Rounds {
		w := want.Rounds[name]
		if !near(r.OldestLag, w.OldestLag) {
			t.Errorf("%s: lag of round %s: %v, separately %v", what, name, r.OldestLag, w.OldestLag)
		}
		r.OldestLag, w.OldestLag = 0, 0
		got.Rounds[name], want.Rounds[name] = r, w
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s:\nOverview:   %+v\nseparately: %+v", what, got, want)
	}
}

// Overview returns what Queues, Connections, Timers and Rounds return, for
// data of every kind, and for an empty namespace.
func TestInspectorOverviewMatchesSeparateReads(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		empty := newInspectorT(t, b, namespace())
		o, err := empty.Overview(ctx)
		if err != nil {
			t.Fatal(err)
		}
		sameOverview(t, "empty namespace", o, separately(t, empty))
		if o.Timers == nil || o.Rounds == nil || o.ScheduleSets == nil || len(o.Queues) != 0 || len(o.Connections) != 0 {
			t.Errorf("empty namespace: %+v", o)
		}

		ns := namespace()
		fillOverview(t, b, ns)
		i := newInspectorT(t, b, ns)
		// The first call guesses registrations; the second goes by the
		// first's. Both must read everything.
		for _, what := range []string{"first call", "second call"} {
			o, err := i.Overview(ctx)
			if err != nil {
				t.Fatal(err)
			}
			sameOverview(t, what, o, separately(t, i))
		}
		o, _ = i.Overview(ctx)
		if len(o.Queues) != 3 || len(o.Connections) != 3 || len(o.Timers) != 1 || len(o.Rounds) != 1 || len(o.ScheduleSets) != 1 {
			t.Fatalf("not every kind of data was made: %+v", o)
		}
		if cron := o.ScheduleSets["cron"]; cron.Schedules != 2 || cron.Paused != 1 || cron.NextDue.IsZero() {
			t.Errorf("schedule set cron: %+v", cron)
		}
		jobs := o.Queues[1]
		if jobs.Name != "jobs" || jobs.Unacked != 4 || jobs.Rejected != 1 || jobs.Delayed != 2 || jobs.Connections != 3 || jobs.Published != 6 || jobs.Acked != 1 {
			t.Errorf("jobs: %+v", jobs)
		}
		if !o.Queues[0].Paused && !o.Queues[2].Paused {
			t.Errorf("the paused queue reads not paused: %+v", o.Queues)
		}
		states := map[string]string{}
		for _, c := range o.Connections {
			states[c.Name] = c.State
		}
		if states["ghost"] != "dead" || len(states) != 3 {
			t.Errorf("connection states: %v", states)
		}
	})
}

// Overview costs two round trips once the Inspector has seen the
// namespace's registrations, however many queues there are; after a
// restart that emptied the script cache it still reads everything.
func TestInspectorOverviewRoundTrips(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		ns := namespace()
		fillOverview(t, b, ns)
		c := openT(t, b, "many", ns)
		for _, name := range []string{"q1", "q2", "q3", "q4", "q5"} {
			q := openQueue(t, c, name)
			if err := q.Publish("x"); err != nil {
				t.Fatal(err)
			}
			take(t, q, 1)
		}
		rt := &tripCounter{}
		client := redis.NewClient(&redis.Options{Addr: b.client.(*redis.Client).Options().Addr})
		t.Cleanup(func() { client.Close() })
		client.AddHook(rt)
		i, err := NewInspector(client, ns)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := i.Overview(ctx); err != nil { // loads the scripts; learns "orphan"
			t.Fatal(err)
		}
		rt.trips.Store(0)
		o, err := i.Overview(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n := rt.trips.Load(); n != 2 {
			t.Errorf("Overview: %d round trips, want 2", n)
		}
		if b.mini != nil {
			return // miniredis keeps no script cache to flush
		}
		if err := client.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		rt.trips.Store(0)
		again, err := i.Overview(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("after SCRIPT FLUSH: %d round trips", rt.trips.Load())
		if n := rt.trips.Load(); n > 6 {
			t.Errorf("Overview after SCRIPT FLUSH: %d round trips, want at most 6", n)
		}
		sameOverview(t, "after SCRIPT FLUSH", again, o)
	})
}

// On a Redis Cluster client, whose pipelines go-redis splits by node,
// Overview still returns what the separate reads return, also after every
// node's script cache was emptied.
func TestInspectorOverviewOnCluster(t *testing.T) {
	onCluster(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		ns := namespace()
		fillOverview(t, b, ns)
		i := newInspectorT(t, b, ns)
		o, err := i.Overview(ctx)
		if err != nil {
			t.Fatal(err)
		}
		sameOverview(t, "cluster", o, separately(t, i))
		if err := b.client.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		again, err := i.Overview(ctx)
		if err != nil {
			t.Fatal(err)
		}
		sameOverview(t, "cluster after SCRIPT FLUSH", again, separately(t, i))
	})
}
