package redq

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"
)

// pause simulates a process that stopped (SIGSTOP, a long GC pause, a
// partition): its heartbeat stops and the key lapses. Everything else of
// the connection keeps running, as it would after the process resumes.
func pause(t testing.TB, b backend, c *redisConnection) {
	t.Helper()
	c.hbCancel()
	<-c.hbDone
	if err := b.client.Del(context.Background(), c.keys.heartbeat(c.Name())).Err(); err != nil {
		t.Fatal(err)
	}
}

// resume ends a pause: the connection's heartbeat loop runs again.
func resume(c *redisConnection) {
	ctx, cancel := context.WithCancel(context.Background())
	c.hbCancel, c.hbDone = cancel, make(chan struct{})
	go c.heartbeatLoop(ctx)
}

func TestCleanerReturnsOnlyDeadConnectionsDeliveries(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ns := namespace()
		errs := make(chan error, 100)
		dead, err := openConn(b.client, "dead", errs, ns)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { <-dead.StopAllConsuming() })
		live := openT(t, b, "live", ns)
		admin := openT(t, b, "admin", ns)

		// The live connection holds two deliveries of the queue and stops
		// fetching (what it holds stays its own); then the dead one takes
		// three and keeps running, as a paused process would.
		ql := openQueue(t, live, "jobs")
		if err := ql.Publish("l1", "l2"); err != nil {
			t.Fatal(err)
		}
		liveHeld := hold(t, ql, 2, 2)
		<-ql.StopConsuming()
		qd := openQueue(t, dead, "jobs")
		if err := qd.Publish("d1", "d2", "d3"); err != nil {
			t.Fatal(err)
		}
		held, later := holdMore(t, qd, 3, 3)
		oldName := dead.Name()

		// Nobody is dead yet: the cleaner touches nothing.
		if n, err := NewCleaner(admin).Clean(); err != nil || n != 0 {
			t.Fatalf("clean with all alive = %d, %v", n, err)
		}
		wantCounts(t, admin, "jobs", 0, 0, 5)

		pause(t, b, dead)
		n, err := NewCleaner(admin).Clean()
		if err != nil || n != 3 {
			t.Fatalf("clean = %d, %v; want 3", n, err)
		}
		st := mustStats(t, admin, "jobs").QueueStats["jobs"]
		if _, ok := st.Connections[dead.Name()]; ok {
			t.Fatalf("dead connection still registered: %+v", st)
		}
		if st.Connections[live.Name()].UnackedCount != 2 || st.ReadyCount != 3 {
			t.Fatalf("after clean: %+v", st)
		}
		for _, d := range liveHeld {
			if err := d.Ack(); err != nil {
				t.Fatalf("live ack: %v", err)
			}
		}
		// The zombie learns it: its acks fail and say why (rmq's Ack with
		// rmq's bare ErrorNotFound, AckContext with the reason).
		for i, d := range held {
			if i%2 == 0 {
				if err := d.Ack(); err != ErrorNotFound {
					t.Fatalf("zombie ack: got %v, want ErrorNotFound itself, as rmq returns it", err)
				}
				continue
			}
			err := d.AckContext(context.Background())
			if !errors.Is(err, ErrorNotFound) || !errors.Is(err, ErrorConnectionLost) {
				t.Fatalf("zombie AckContext: got %v, want ErrorNotFound and ErrorConnectionLost", err)
			}
		}
		// Once its heartbeat runs again, it learns that it was declared dead,
		// says so on its error channel with both names, and goes on under a
		// fresh registration: its consumer gets the returned deliveries
		// again, and settles them.
		resume(dead)
		var lost *ConnectionLostError
		timeout := time.After(15 * time.Second)
		for lost == nil {
			select {
			case err := <-errs:
				if errors.As(err, &lost) && !errors.Is(err, ErrorConnectionLost) {
					t.Fatalf("%v does not match ErrorConnectionLost", err)
				}
			case <-timeout:
				t.Fatal("zombie's error channel did not report a *ConnectionLostError")
			}
		}
		if lost.OldName != oldName || lost.NewName != dead.Name() || lost.NewName == oldName {
			t.Fatalf("lost %+v; names: old %s, now %s", lost, oldName, dead.Name())
		}
		if dead.isStopped() {
			t.Fatal("the zombie stopped")
		}
		for i := 0; i < 3; i++ {
			select {
			case d := <-later:
				if err := d.Ack(); err != nil {
					t.Fatalf("ack under the fresh registration: %v", err)
				}
			case <-time.After(15 * time.Second):
				t.Fatalf("the zombie's consumer got %d of the 3 returned deliveries again", i)
			}
		}
		// A second clean finds nothing: the fresh registration is alive.
		if n, err := NewCleaner(admin).Clean(); err != nil || n != 0 {
			t.Fatalf("second clean = %d, %v", n, err)
		}
		wantCounts(t, admin, "jobs", 0, 0, 0)
		st = mustStats(t, admin, "jobs").QueueStats["jobs"]
		if _, ok := st.Connections[dead.Name()]; !ok {
			t.Fatalf("the fresh registration is not listed for the queue: %+v", st)
		}
	})
}

func TestConcurrentCleanersReturnEachDeliveryOnce(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ns := namespace()
		const perQueue = 2500
		var total int64
		for _, name := range []string{"a", "b"} {
			dead := openT(t, b, "dead", ns)
			q := openQueue(t, dead, name)
			payloads := make([]string, perQueue)
			for i := range payloads {
				payloads[i] = fmt.Sprintf("%s-%d", name, i)
			}
			if err := q.Publish(payloads...); err != nil {
				t.Fatal(err)
			}
			// Take everything into unacked storage without a consumer.
			if err := scripts.setConsumers.Run(context.Background(), b.client, []string{q.keys.consumers}, dead.Name(), 0, "1").Err(); err != nil {
				t.Fatal(err)
			}
			q.buf = make(chan *redisDelivery, perQueue)
			for len(q.buf) < perQueue {
				if _, _, err := q.fetch(context.Background(), q.conn.registration(), fetchChunk); err != nil {
					t.Fatal(err)
				}
			}
			pause(t, b, dead)
			total += perQueue
		}
		admin := openT(t, b, "admin", ns)
		wantCounts(t, admin, "a", 0, 0, perQueue)

		var wg sync.WaitGroup
		results := make(chan int64, 8)
		for i := 0; i < 8; i++ {
			cl := openT(t, b, "cleaner", ns)
			wg.Add(1)
			go func() {
				defer wg.Done()
				n, err := NewCleaner(cl).Clean()
				if err != nil {
					t.Error(err)
				}
				results <- n
			}()
		}
		wg.Wait()
		close(results)
		var sum int64
		for n := range results {
			sum += n
		}
		if sum != total {
			t.Fatalf("cleaners returned %d in all, want %d", sum, total)
		}
		wantCounts(t, admin, "a", perQueue, 0, 0)
		wantCounts(t, admin, "b", perQueue, 0, 0)
		for _, name := range []string{"a", "b"} {
			got, err := openQueue(t, admin, name).Drain(2 * perQueue)
			if err != nil {
				t.Fatal(err)
			}
			seen := map[string]bool{}
			for _, p := range got {
				if seen[p] {
					t.Fatalf("%s returned twice", p)
				}
				seen[p] = true
			}
			if len(seen) != perQueue {
				t.Fatalf("queue %s: %d distinct deliveries, want %d", name, len(seen), perQueue)
			}
		}
	})
}

func TestStopAllConsumingLetsACleanerReturnAtOnce(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ns := namespace()
		worker := openT(t, b, "worker", ns)
		admin := openT(t, b, "admin", ns)
		q := openQueue(t, worker, "jobs")
		if err := q.Publish("a", "b", "c"); err != nil {
			t.Fatal(err)
		}
		ds := hold(t, q, 1, 1) // one taken by the consumer, the rest stay ready or buffered
		<-worker.StopAllConsuming()
		if _, err := worker.OpenQueue("other"); !errors.Is(err, ErrorConsumingStopped) {
			t.Fatalf("OpenQueue after stop: %v", err)
		}

		// What the consumer took (at least the one it handed us) is still
		// this connection's; everything else went back on stop.
		_, _, held := counts(t, admin, "jobs")
		if held < 1 {
			t.Fatalf("unacked after stop = %d", held)
		}
		// The stopped connection settles nothing more: a cleaner may
		// return what it holds at any moment now.
		if err := ds[0].Ack(); !errors.Is(err, ErrorConsumingStopped) {
			t.Fatalf("ack after stop: %v, want ErrorConsumingStopped", err)
		}
		if _, _, after := counts(t, admin, "jobs"); after != held {
			t.Fatalf("the refused ack changed unacked from %d to %d", held, after)
		}
		n, err := NewCleaner(admin).Clean()
		if err != nil || n != held {
			t.Fatalf("clean = %d, %v; want the %d deliveries the consumer held", n, err, held)
		}
		wantCounts(t, admin, "jobs", 3, 0, 0)
		if err := ds[0].Ack(); !errors.Is(err, ErrorConsumingStopped) {
			t.Fatalf("ack after clean: %v", err)
		}
	})
}

func TestStopConsumingReturnsBufferedDeliveriesInOrder(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		c := openT(t, b, "buf", namespace())
		q := openQueue(t, c, "buf")
		for i := 0; i < 50; i++ {
			if err := q.Publish(fmt.Sprint(i)); err != nil {
				t.Fatal(err)
			}
		}
		if err := q.StartConsuming(20, 20*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		first, release := make(chan Message, 1), make(chan struct{})
		defer close(release)
		if _, err := q.AddConsumerFunc("slow", func(dd Delivery) { d := dd.(Message); first <- d; <-release }); err != nil {
			t.Fatal(err)
		}
		ds := []Message{<-first}
		eventually(t, "buffer filled", func() bool { return len(q.buf) >= 10 })
		stopped := q.StopConsuming()
		release <- struct{}{} // the consumer finishes its current delivery
		<-stopped
		// Only the delivery the consumer took stays unacked; the buffered
		// ones are ready again, in their order, ahead of the rest.
		wantCounts(t, c, "buf", 49, 0, 1)
		if ds[0].Payload() != "0" {
			t.Fatalf("first delivery %q", ds[0].Payload())
		}
		got, err := q.Drain(49)
		if err != nil {
			t.Fatal(err)
		}
		for i, p := range got {
			if p != fmt.Sprint(i+1) {
				t.Fatalf("after stop, ready order %v", got)
			}
		}
		if err := ds[0].Ack(); err != nil {
			t.Fatalf("ack after StopConsuming: %v", err)
		}
		if err := q.StartConsuming(1, time.Second); !errors.Is(err, ErrorConsumingStopped) {
			t.Fatalf("restart after stop: %v", err)
		}
	})
}

func TestReturnUnacked(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		c := openT(t, b, "ru", namespace())
		q := openQueue(t, c, "ru")
		if err := q.Publish("a", "b", "c", "d"); err != nil {
			t.Fatal(err)
		}
		ds := hold(t, q, 4, 4)
		<-q.StopConsuming()
		wantCounts(t, c, "ru", 0, 0, 4)
		n, err := q.ReturnUnacked(3)
		if err != nil || n != 3 {
			t.Fatalf("ReturnUnacked(3) = %d, %v", n, err)
		}
		wantCounts(t, c, "ru", 3, 0, 1)
		n, err = q.ReturnUnacked(10)
		if err != nil || n != 1 {
			t.Fatalf("ReturnUnacked(10) = %d, %v", n, err)
		}
		wantCounts(t, c, "ru", 4, 0, 0)
		if err := ds[0].Ack(); !errors.Is(err, ErrorNotFound) {
			t.Fatalf("ack of a returned delivery: %v", err)
		}
	})
}

// A live connection keeps its heartbeat fresh: however long it holds its
// deliveries, well past the heartbeat TTL, the cleaner leaves them alone.
func TestHeartbeatKeepsALiveConnectionsDeliveries(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ns := namespace()
		worker := openT(t, b, "worker", ns, WithHeartbeat(20*time.Millisecond, 200*time.Millisecond))
		admin := openT(t, b, "admin", ns)
		q := openQueue(t, worker, "jobs")
		if err := q.Publish("a", "b"); err != nil {
			t.Fatal(err)
		}
		ds := take(t, q, 2)
		for i := 0; i < 10; i++ { // 1s: five TTLs
			time.Sleep(100 * time.Millisecond)
			if b.mini != nil {
				b.mini.FastForward(100 * time.Millisecond) // miniredis moves its clock only when told
			}
			if n, err := NewCleaner(admin).Clean(); err != nil || n != 0 {
				t.Fatalf("clean of a live connection = %d, %v", n, err)
			}
		}
		for _, d := range ds {
			if err := d.Ack(); err != nil {
				t.Fatal(err)
			}
		}
		wantCounts(t, admin, "jobs", 0, 0, 0)
	})
}

// TestCleanerReturnsEveryFormWithItsAttempt returns, in one step, plain
// deliveries on their first return next to one returned before, one with
// headers and one with a priority: each goes back once, with its attempt
// counted, its headers and priority kept, ahead of what became ready while
// they were held.
func TestCleanerReturnsEveryFormWithItsAttempt(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		ns := namespace()
		admin := openT(t, b, "admin", ns)
		qa := openQueue(t, admin, "jobs")
		// crash lets a connection take want deliveries, publishes after
		// the take and dies; a cleaner returns what it took.
		crash := func(want int64, after ...string) {
			t.Helper()
			dead, err := openConn(b.client, "dead", make(chan error, 100), ns)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { <-dead.StopAllConsuming() })
			q := openQueue(t, dead, "jobs")
			held, err := q.TakeBatch(ctx, want, time.Second)
			if err != nil || int64(len(held)) != want {
				t.Fatalf("take: %d, %v; want %d", len(held), err, want)
			}
			if len(after) > 0 {
				if err := qa.Publish(after...); err != nil {
					t.Fatal(err)
				}
			}
			pause(t, b, dead)
			if n, err := NewCleaner(admin).Clean(); err != nil || n != want {
				t.Fatalf("clean = %d, %v; want %d", n, err, want)
			}
		}
		if err := qa.Publish("again"); err != nil {
			t.Fatal(err)
		}
		crash(1)
		if err := qa.Publish("p1", "p2", "p3"); err != nil {
			t.Fatal(err)
		}
		mustPut(t, qa, "headed", Header(http.Header{"X-Trace": {"t1"}}))
		mustPut(t, qa, "urgent", Priority(3))
		crash(6, "later")

		got, err := qa.TakeBatch(ctx, 10, time.Second)
		if err != nil || len(got) != 7 {
			t.Fatalf("retake: %d, %v; want 7", len(got), err)
		}
		want := map[string]int{"again": 3, "p1": 2, "p2": 2, "p3": 2, "headed": 2, "urgent": 2, "later": 1}
		for i, d := range got {
			w, ok := want[d.Payload()]
			if !ok {
				t.Fatalf("retake %d: %q, unknown or taken twice", i, d.Payload())
			}
			delete(want, d.Payload())
			if d.Attempts() != w {
				t.Errorf("%q: attempts %d, want %d", d.Payload(), d.Attempts(), w)
			}
			if h := d.Header().Get("X-Trace"); (d.Payload() == "headed") != (h == "t1") {
				t.Errorf("%q: X-Trace %q", d.Payload(), h)
			}
		}
		if got[0].Payload() != "urgent" || got[6].Payload() != "later" {
			t.Errorf("order: first %q, last %q; want urgent (priority 3) first and later (published while they were held) last", got[0].Payload(), got[6].Payload())
		}
		ackAll(t, got)
		wantCounts(t, admin, "jobs", 0, 0, 0)
	})
}

// TestCleanAfterALostReplyReturnsTheRestOnce: a cleaner's call returns a
// chunk and its reply is lost (the cleaner died, or its connection
// broke); the next clean returns the rest. Every delivery is back once,
// with one attempt counted.
func TestCleanAfterALostReplyReturnsTheRestOnce(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		ns := namespace()
		const n = 2500
		dead := openT(t, b, "dead", ns)
		q := openQueue(t, dead, "jobs")
		payloads := make([]string, n)
		for i := range payloads {
			payloads[i] = fmt.Sprintf("p-%d", i)
		}
		if err := q.Publish(payloads...); err != nil {
			t.Fatal(err)
		}
		if err := scripts.setConsumers.Run(ctx, b.client, []string{q.keys.consumers}, dead.Name(), 0, "1").Err(); err != nil {
			t.Fatal(err)
		}
		q.buf = make(chan *redisDelivery, n)
		for len(q.buf) < n {
			if _, _, err := q.fetch(ctx, q.conn.registration(), fetchChunk); err != nil {
				t.Fatal(err)
			}
		}
		pause(t, b, dead)
		admin := openT(t, b, "admin", ns)
		qa := openQueue(t, admin, "jobs")

		// The first call of a clean, whose reply nobody reads.
		keys := q.keys.scriptKeys("", nil, q.keys.connKeys(dead.Name()))
		if err := scripts.returnUnacked.Run(ctx, b.client, keys, dead.Name(), fetchChunk, "0", "1").Err(); err != nil {
			t.Fatal(err)
		}
		wantCounts(t, admin, "jobs", fetchChunk, 0, n-fetchChunk)
		if got, err := NewCleaner(admin).Clean(); err != nil || got != n-fetchChunk {
			t.Fatalf("clean = %d, %v; want %d", got, err, n-fetchChunk)
		}
		wantCounts(t, admin, "jobs", n, 0, 0)
		seen := map[string]bool{}
		for len(seen) < n {
			ds, err := qa.TakeBatch(ctx, fetchChunk, time.Second)
			if err != nil || len(ds) == 0 {
				t.Fatalf("take after %d: %d, %v", len(seen), len(ds), err)
			}
			for _, d := range ds {
				if seen[d.Payload()] {
					t.Fatalf("%s returned twice", d.Payload())
				}
				seen[d.Payload()] = true
				if d.Attempts() != 2 {
					t.Fatalf("%s: attempts %d, want 2", d.Payload(), d.Attempts())
				}
			}
			ackAll(t, ds)
		}
		wantCounts(t, admin, "jobs", 0, 0, 0)
	})
}
