package redq

import (
	"context"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

// A pause set through one connection stops the consumers and Take callers
// of another, lets publishes gather in ready, and a resume wakes them at
// once (their poll duration is a minute, longer than the test waits).
func TestPauseAcrossConnections(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		ns := namespace()
		admin := openT(t, b, "admin", ns)
		worker := openT(t, b, "worker", ns)
		qa := openQueue(t, admin, "work")
		qw := openQueue(t, worker, "work")

		if err := qa.Pause(ctx); err != nil {
			t.Fatal(err)
		}
		if err := qa.Pause(ctx); err != nil { // idempotent
			t.Fatal(err)
		}
		if err := qw.StartConsuming(10, time.Minute); err != nil {
			t.Fatal(err)
		}
		got := make(chan string, 100)
		if _, err := qw.AddConsumerFunc("c", func(d Delivery) {
			got <- d.Payload()
			_ = d.Ack()
		}); err != nil {
			t.Fatal(err)
		}
		tq := openQueue(t, worker, "work")
		if _, err := tq.Take(ctx, 300*time.Millisecond); !errors.Is(err, ErrorTimeout) {
			t.Fatalf("Take on a paused queue: %v, want ErrorTimeout", err)
		}
		for _, p := range []string{"a", "b", "c"} {
			if err := qa.Publish(p); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := tq.Take(ctx, 200*time.Millisecond); !errors.Is(err, ErrorTimeout) {
			t.Fatalf("Take on a paused queue with ready deliveries: %v, want ErrorTimeout", err)
		}
		select {
		case p := <-got:
			t.Fatalf("a consumer got %q while the queue was paused", p)
		case <-time.After(200 * time.Millisecond):
		}
		st := mustStats(t, worker, "work").QueueStats["work"]
		if !st.Paused || st.ReadyCount != 3 {
			t.Fatalf("stats while paused: paused %v ready %d, want true 3", st.Paused, st.ReadyCount)
		}

		if err := qa.Resume(ctx); err != nil {
			t.Fatal(err)
		}
		if err := qa.Resume(ctx); err != nil { // idempotent
			t.Fatal(err)
		}
		deadline := time.After(15 * time.Second)
		for n := 0; n < 3; n++ {
			select {
			case <-got:
			case <-deadline:
				t.Fatalf("after Resume the consumer got %d of 3", n)
			}
		}
		if st := mustStats(t, worker, "work").QueueStats["work"]; st.Paused {
			t.Fatal("stats after Resume: still paused")
		}
	})
}

// A Take that waits on a paused queue returns the delivery soon after a
// resume, well before its timeout.
func TestPauseTakeWakesOnResume(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		ns := namespace()
		c := openT(t, b, "c", ns)
		q := openQueue(t, c, "w")
		if err := q.Pause(ctx); err != nil {
			t.Fatal(err)
		}
		if err := q.Publish("x"); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			m, err := q.Take(ctx, time.Minute)
			if err == nil {
				err = m.Ack()
			}
			done <- err
		}()
		time.Sleep(100 * time.Millisecond)
		if err := q.Resume(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(15 * time.Second):
			t.Fatal("Take did not return after Resume")
		}
	})
}

// The test double records the paused state, shows it in its stats, and
// like the real queue accepts publishes, delayed puts and upserts while
// paused; a delivery's Ack and Reject work whatever the state.
func TestTestQueuePause(t *testing.T) {
	conn := NewTestConnection()
	q := conn.GetQueue("q")
	ctx := context.Background()
	if q.Paused() {
		t.Fatal("a new TestQueue is paused")
	}
	if err := q.Pause(ctx); err != nil || !q.Paused() {
		t.Fatalf("after Pause: paused %v, err %v", q.Paused(), err)
	}
	if st := mustStats(t, conn, "q").QueueStats["q"]; !st.Paused {
		t.Fatal("the test double's stats do not show the pause")
	}
	if err := q.Publish("x"); err != nil || len(q.Deliveries()) != 1 {
		t.Fatalf("publish while paused: %v %v", err, q.Deliveries())
	}
	if err := q.Put(ctx, []byte("y"), Delay(time.Hour)); err != nil || len(q.Deliveries()) != 2 {
		t.Fatalf("delayed Put while paused: %v %v", err, q.Deliveries())
	}
	if out, err := q.Upsert(ctx, "k", []byte("z")); err != nil || out != Created {
		t.Fatalf("Upsert while paused: %v %v", out, err)
	}
	if it, err := q.Lookup(ctx, "k"); err != nil || string(it.Payload) != "z" {
		t.Fatalf("Lookup while paused: %+v %v", it, err)
	}
	a, r := NewTestDeliveryString("a"), NewTestDeliveryString("r")
	if err := a.Ack(); err != nil || a.GetState() != Acked {
		t.Fatalf("Ack while paused: %v %v", err, a.GetState())
	}
	if err := r.Reject(); err != nil || r.GetState() != Rejected {
		t.Fatalf("Reject while paused: %v %v", err, r.GetState())
	}
	if err := q.Resume(ctx); err != nil || q.Paused() {
		t.Fatalf("after Resume: paused %v, err %v", q.Paused(), err)
	}
	if st := mustStats(t, conn, "q").QueueStats["q"]; st.Paused || st.ReadyCount != 2 {
		t.Fatalf("the test double's stats after Resume: paused %v ready %d, want false 2", st.Paused, st.ReadyCount)
	}
}

// The stats show a paused queue in their text, JSON and page forms.
func TestPauseInStats(t *testing.T) {
	b := backend{name: "miniredis", client: realOrMini(t)}
	ns := namespace()
	c := openT(t, b, "c", ns)
	q := openQueue(t, c, "p")
	if err := q.Pause(context.Background()); err != nil {
		t.Fatal(err)
	}
	s := mustStats(t, c, "p")
	if !strings.Contains(s.String(), "paused") {
		t.Fatalf("text stats without the pause:\n%s", s)
	}
	j, err := json.Marshal(s.QueueStats["p"])
	if err != nil || !strings.Contains(string(j), `"paused":true`) {
		t.Fatalf("JSON stats: %s %v", j, err)
	}
	rec := httptest.NewRecorder()
	NewHandler(c).ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	if !strings.Contains(rec.Body.String(), `data-field="paused"`) {
		t.Fatal("the stats page does not show the pause")
	}
}

// While a queue is paused everything but fetching goes on: keyed upserts
// and delayed puts are accepted and counted, deliveries taken before the
// pause are acked and rejected, and consumers get nothing without a word
// on the error channel. After Resume each delivery published during the
// pause is consumed exactly once.
func TestPauseKeepsEverythingButFetching(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		ns := namespace()
		early := openT(t, b, "early", ns)
		qe := openQueue(t, early, "p")
		if err := qe.Publish("before-ack", "before-reject"); err != nil {
			t.Fatal(err)
		}
		held := take(t, qe, 2)
		if err := qe.Pause(ctx); err != nil {
			t.Fatal(err)
		}

		if err := qe.Publish("plain"); err != nil {
			t.Fatalf("Publish while paused: %v", err)
		}
		if err := qe.Put(ctx, []byte("later"), Delay(150*time.Millisecond)); err != nil {
			t.Fatalf("Put with a delay while paused: %v", err)
		}
		if out, err := qe.Upsert(ctx, "k", []byte("keyed-1")); err != nil || out != Created {
			t.Fatalf("Upsert while paused: %v %v, want Created", out, err)
		}
		if out, err := qe.Upsert(ctx, "k", []byte("keyed-2")); err != nil || out == Created {
			t.Fatalf("second Upsert while paused: %v %v, want an update in place", out, err)
		}
		i := newInspectorT(t, b, ns)
		qi, err := i.Queue(ctx, "p")
		if err != nil {
			t.Fatal(err)
		}
		// plain and the keyed item wait, later is delayed, both held
		// deliveries are still unacked
		if !qi.Paused || qi.Ready+qi.Delayed != 3 || qi.Delayed < 1 || qi.KeyedPending != 1 || qi.Unacked != 2 {
			t.Fatalf("Inspector while paused: %+v, want paused, 3 waiting (1+ delayed), 1 keyed, 2 unacked", qi)
		}

		if err := held[0].Ack(); err != nil {
			t.Fatalf("Ack of a delivery taken before the pause: %v", err)
		}
		if err := held[1].Reject(); err != nil {
			t.Fatalf("Reject of a delivery taken before the pause: %v", err)
		}
		st := mustStats(t, early, "p").QueueStats["p"]
		if !st.Paused || st.UnackedCount() != 0 || st.RejectedCount != 1 {
			t.Fatalf("stats after settling while paused: paused %v unacked %d rejected %d, want true 0 1",
				st.Paused, st.UnackedCount(), st.RejectedCount)
		}

		errs := make(chan error, 100)
		worker, err := openConn(b.client, "worker", errs, ns)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { <-worker.StopAllConsuming() })
		qw := openQueue(t, worker, "p")
		const poll = 20 * time.Millisecond
		if err := qw.StartConsuming(10, poll); err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		got := map[string]int{}
		if _, err := qw.AddConsumerFunc("c", func(d Delivery) {
			if err := d.Ack(); err != nil {
				t.Errorf("ack %q: %v", d.Payload(), err)
				return
			}
			mu.Lock()
			got[d.Payload()]++
			mu.Unlock()
		}); err != nil {
			t.Fatal(err)
		}
		// over many poll intervals, and past the delay of later: nothing
		// consumed and no error for being paused
		time.Sleep(20 * poll)
		mu.Lock()
		if len(got) != 0 {
			t.Errorf("consumed while paused: %v", got)
		}
		mu.Unlock()
		select {
		case err := <-errs:
			t.Fatalf("error channel while paused: %v", err)
		default:
		}

		if err := qe.Resume(ctx); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the three deliveries of the pause consumed", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(got) == 3
		})
		time.Sleep(10 * poll) // room for a double delivery to show
		mu.Lock()
		want := map[string]int{"plain": 1, "later": 1, "keyed-2": 1}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("consumed after Resume: %v, want %v", got, want)
		}
		mu.Unlock()
		wantCounts(t, early, "p", 0, 1, 0)
		select {
		case err := <-errs:
			t.Errorf("error channel after Resume: %v", err)
		default:
		}
	})
}
