package redq

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"sync"
	"testing"
	"time"
)

// Every read of the Inspector leaves Redis byte for byte as it was (DUMP of
// every key), and registers nothing.
func TestInspectorReadsWriteNothing(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		if b.mini != nil {
			t.Skip("miniredis has no DUMP")
		}
		ctx := context.Background()
		ns := namespace()
		c := openT(t, b, "c", ns)
		q := openQueue(t, c, "jobs")
		for n := 0; n < 20; n++ {
			if err := q.Publish(fmt.Sprint("p", n)); err != nil {
				t.Fatal(err)
			}
		}
		_ = q.Put(ctx, []byte("later"), Delay(time.Hour))
		_, _ = q.Upsert(ctx, "k", []byte("keyed"), Delay(time.Hour))
		held := take(t, q, 3)
		if err := held[0].Reject(); err != nil {
			t.Fatal(err)
		}
		r, err := c.OpenRound("round", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.Add(ctx, "a", []byte("x")); err != nil {
			t.Fatal(err)
		}
		tm, err := c.OpenTimers("tm")
		if err != nil {
			t.Fatal(err)
		}
		if err := tm.Set(ctx, "t1", time.Hour); err != nil {
			t.Fatal(err)
		}
		snapshot := func() map[string]string {
			keys, err := b.client.Keys(ctx, "*").Result()
			if err != nil {
				t.Fatal(err)
			}
			out := map[string]string{}
			for _, k := range keys {
				out[k] = b.client.Dump(ctx, k).Val()
			}
			return out
		}
		before := snapshot()
		i := newInspectorT(t, b, ns)
		read := func(what string, err error) {
			t.Helper()
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
		}
		_, err = i.Queues(ctx)
		read("Queues", err)
		_, err = i.Queue(ctx, "jobs")
		read("Queue", err)
		_, err = i.History(ctx, "jobs", time.Hour)
		read("History", err)
		_, err = i.Connections(ctx)
		read("Connections", err)
		_, err = i.Overview(ctx)
		read("Overview", err)
		_, err = i.Stats(ctx)
		read("Stats", err)
		_, err = i.Timers(ctx)
		read("Timers", err)
		_, err = i.Rounds(ctx)
		read("Rounds", err)
		_, err = i.ListRound(ctx, "round", "", 0)
		read("ListRound", err)
		for _, s := range DeliveryStates() {
			_, err = i.List(ctx, "jobs", ListOptions{State: s, Search: "p1"})
			read("List "+string(s), err)
			_, err = i.List(ctx, "jobs", ListOptions{State: s, Limit: 1})
			read("List "+string(s), err)
		}
		_, err = i.Delivery(ctx, "jobs", held[1].ID())
		read("Delivery", err)
		_, err = i.Payload(ctx, "jobs", held[0].ID())
		read("Payload", err)
		after := snapshot()
		if !reflect.DeepEqual(before, after) {
			for k, v := range after {
				if before[k] != v {
					t.Errorf("key %s changed or appeared", k)
				}
			}
			for k := range before {
				if _, ok := after[k]; !ok {
					t.Errorf("key %s disappeared", k)
				}
			}
		}
	})
}

// Consumers ack while an Inspector retries, deletes, purges and runs keyed
// items now: at the end every delivery was acked once or deleted (by id or
// by a purge) once, and none is left or lost.
func TestInspectorRaceWithConsumers(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		ns := namespace()
		pub := openT(t, b, "pub", ns)
		work := openT(t, b, "work", ns)
		qp := openQueue(t, pub, "race")
		qw := openQueue(t, work, "race")
		i := newInspectorT(t, b, ns)
		const n = 600
		var mu sync.Mutex
		acked := map[string]int{}
		deleted := map[string]int{}
		var purged int64
		if err := qw.StartConsuming(20, 10*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		for c := 0; c < 3; c++ {
			if _, err := qw.AddConsumerFunc("c", func(d Delivery) {
				time.Sleep(time.Millisecond) // let ready fill a little
				if rand.IntN(4) == 0 {
					_ = d.Reject() // rejected ones get retried or deleted below
					return
				}
				if err := d.Ack(); err == nil {
					mu.Lock()
					acked[d.Payload()]++
					mu.Unlock()
				}
			}); err != nil {
				t.Fatal(err)
			}
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			for n := 0; n < 60; n++ {
				for _, s := range []DeliveryState{StateReady, StateRejected, StateDelayed} {
					p, err := i.List(ctx, "race", ListOptions{State: s, Limit: 20})
					if err != nil {
						t.Error(err)
						return
					}
					for j, d := range p.Items {
						var err error
						if j%2 == 0 {
							err = i.Delete(ctx, "race", d.ID)
							if err == nil {
								mu.Lock()
								deleted[string(d.Payload)]++
								mu.Unlock()
							}
						} else if s != StateReady {
							err = i.Retry(ctx, "race", d.ID)
						}
						_ = err // moved meanwhile is expected; checked below by the totals
					}
				}
				if n%10 == 5 {
					m, err := i.Purge(ctx, "race", StateReady)
					if err != nil {
						t.Error(err)
					}
					mu.Lock()
					purged += m
					mu.Unlock()
				}
			}
		}()
		for k := 0; k < n; k++ {
			var err error
			if k%10 == 0 {
				err = qp.Put(ctx, []byte(fmt.Sprint("m", k)), Delay(time.Duration(rand.IntN(50))*time.Millisecond))
			} else {
				err = qp.Publish(fmt.Sprint("m", k))
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		<-done
		// drain what is left: return the rejected ones until all is acked
		eventually(t, "every delivery acked or deleted", func() bool {
			if _, err := qp.ReturnRejected(1000); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			defer mu.Unlock()
			return int64(len(acked)+len(deleted))+purged >= n
		})
		time.Sleep(50 * time.Millisecond)
		mu.Lock()
		defer mu.Unlock()
		t.Logf("acked %d, deleted by id %d, purged %d", len(acked), len(deleted), purged)
		for p, c := range acked {
			if c != 1 {
				t.Errorf("%s acked %d times", p, c)
			}
			if deleted[p] > 0 {
				t.Errorf("%s acked and deleted", p)
			}
		}
		for p, c := range deleted {
			if c != 1 {
				t.Errorf("%s deleted %d times", p, c)
			}
		}
		if got := int64(len(acked)+len(deleted)) + purged; got != n {
			t.Errorf("acked %d + deleted %d + purged %d = %d, want %d", len(acked), len(deleted), purged, got, n)
		}
		if r, j, u := counts(t, pub, "race"); r+j+u != 0 {
			t.Errorf("left: ready %d rejected %d unacked %d", r, j, u)
		}
	})
}

// Connections reports each connection's state, heartbeat age and part in
// each queue.
func TestInspectorConnections(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		ns := namespace()
		c := openT(t, b, "live", ns)
		q := openQueue(t, c, "jobs")
		_ = q.Publish("a", "b")
		take(t, q, 2)
		stopped := openT(t, b, "gone", ns)
		<-stopped.StopAllConsuming()
		i := newInspectorT(t, b, ns)
		cs, err := i.Connections(ctx)
		if err != nil {
			t.Fatal(err)
		}
		by := map[string]ConnectionInfo{}
		for _, ci := range cs {
			by[ci.Name] = ci
		}
		live := by[c.Name()]
		if live.State != "active" || live.Unacked["jobs"] != 2 || live.HeartbeatAge < 0 || live.HeartbeatAge > time.Minute {
			t.Fatalf("live connection: %+v", live)
		}
		if g := by[stopped.Name()]; g.State != "stopped" || g.HeartbeatAge != -1 {
			t.Fatalf("stopped connection: %+v", g)
		}
		qs, err := i.Queues(ctx)
		if err != nil || len(qs) != 1 || qs[0].Unacked != 2 || qs[0].Published != 2 {
			t.Fatalf("Queues: %+v %v", qs, err)
		}
	})
}
