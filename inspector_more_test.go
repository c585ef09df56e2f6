package redq

import (
	"context"
	"errors"
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
	t.Parallel()
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

// Keyed consumers run while an Inspector runs keyed items now and cancels
// them: a key whose Cancel succeeded is never processed, every other key
// is processed exactly once, and nothing is left. On a second queue
// consumers reject while the Inspector purges rejected and returns them:
// every delivery is acked once or purged once, never both, never lost.
func TestInspectorKeyedAndPurgeRaceWithConsumers(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		ns := namespace()
		pub := openT(t, b, "pub", ns)
		work := openT(t, b, "work", ns)
		qk := openQueue(t, pub, "keyed")
		qj := openQueue(t, pub, "rj")
		i := newInspectorT(t, b, ns)
		const n = 300
		var mu sync.Mutex
		processed := map[string]int{}
		cancelled := map[string]int{}
		acked := map[string]int{}
		var purged int64

		wk := openQueue(t, work, "keyed")
		wj := openQueue(t, work, "rj")
		for _, q := range []*redisQueue{wk, wj} {
			if err := q.StartConsuming(10, 10*time.Millisecond); err != nil {
				t.Fatal(err)
			}
		}
		for c := 0; c < 3; c++ {
			if _, err := wk.AddConsumerFunc("k", func(d Delivery) {
				time.Sleep(time.Millisecond)
				if err := d.Ack(); err != nil {
					t.Errorf("ack of keyed %q: %v", d.(Message).Key(), err)
					return
				}
				mu.Lock()
				processed[d.(Message).Key()]++
				mu.Unlock()
			}); err != nil {
				t.Fatal(err)
			}
			if _, err := wj.AddConsumerFunc("j", func(d Delivery) {
				if rand.IntN(2) == 0 {
					_ = d.Reject() // purged or returned below
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

		for k := 0; k < n; k++ {
			key := fmt.Sprint("k", k)
			// a third wait an hour, so that only RunNow or Cancel ends them
			delay := time.Duration(50+rand.IntN(250)) * time.Millisecond
			if k%3 == 0 {
				delay = time.Hour
			}
			if _, err := qk.Upsert(ctx, key, []byte(key), Delay(delay)); err != nil {
				t.Fatal(err)
			}
		}
		var runNows int
		done := make(chan struct{})
		go func() { // keyed actions
			defer close(done)
			for m := 0; m < n; m++ {
				key := fmt.Sprint("k", rand.IntN(n))
				if m%3 == 0 {
					err := i.Cancel(ctx, "keyed", key)
					if err == nil {
						mu.Lock()
						cancelled[key]++
						mu.Unlock()
					} else if !errors.Is(err, ErrorNotFound) {
						t.Error(err)
						return
					}
				} else if err := i.RunNow(ctx, "keyed", key); err == nil {
					runNows++
				} else if !errors.Is(err, ErrorNotFound) {
					t.Error(err)
					return
				}
			}
			// run what still waits for its hour
			for k := 0; k < n; k++ {
				if err := i.RunNow(ctx, "keyed", fmt.Sprint("k", k)); err == nil {
					runNows++
				} else if !errors.Is(err, ErrorNotFound) {
					t.Error(err)
					return
				}
			}
		}()
		purging := make(chan struct{})
		go func() { // purge rejected while the consumers reject
			defer close(purging)
			for m := 0; m < 40; m++ {
				got, err := i.Purge(ctx, "rj", StateRejected)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				purged += got
				mu.Unlock()
				if m%4 == 0 {
					if _, err := qj.ReturnRejected(20); err != nil {
						t.Error(err)
						return
					}
				}
				time.Sleep(2 * time.Millisecond)
			}
		}()
		for k := 0; k < n; k++ {
			if err := qj.Publish(fmt.Sprint("j", k)); err != nil {
				t.Fatal(err)
			}
		}
		<-done
		<-purging
		eventually(t, "every key processed or cancelled", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(processed)+len(cancelled) >= n
		})
		eventually(t, "every delivery acked or purged", func() bool {
			got, err := i.Purge(ctx, "rj", StateRejected)
			if err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			defer mu.Unlock()
			purged += got
			return int64(len(acked))+purged >= n
		})
		time.Sleep(50 * time.Millisecond) // room for a double to show
		mu.Lock()
		defer mu.Unlock()
		t.Logf("keyed: processed %d, cancelled %d, run now %d; plain: acked %d, purged %d", len(processed), len(cancelled), runNows, len(acked), purged)
		if len(cancelled) == 0 || runNows == 0 || purged == 0 {
			t.Errorf("the race was not exercised: cancelled %d, run now %d, purged %d", len(cancelled), runNows, purged)
		}
		for k, c := range processed {
			if c != 1 {
				t.Errorf("key %s processed %d times", k, c)
			}
			if cancelled[k] > 0 {
				t.Errorf("key %s cancelled and processed", k)
			}
		}
		for k, c := range cancelled {
			if c != 1 {
				t.Errorf("key %s cancelled %d times", k, c)
			}
		}
		if got := len(processed) + len(cancelled); got != n {
			t.Errorf("keys processed %d + cancelled %d = %d, want %d", len(processed), len(cancelled), got, n)
		}
		for p, c := range acked {
			if c != 1 {
				t.Errorf("%s acked %d times", p, c)
			}
		}
		if got := int64(len(acked)) + purged; got != n {
			t.Errorf("acked %d + purged %d = %d, want %d", len(acked), purged, got, n)
		}
		for _, q := range []string{"keyed", "rj"} {
			qi, err := i.Queue(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			if qi.Ready+qi.Delayed+qi.Unacked+qi.Rejected+qi.KeyedPending != 0 {
				t.Errorf("%s: left %+v", q, qi)
			}
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
