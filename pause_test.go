package redq

import (
	"context"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"strings"
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

// The test double records the paused state.
func TestTestQueuePause(t *testing.T) {
	q := NewTestQueue("q")
	ctx := context.Background()
	if q.Paused() {
		t.Fatal("a new TestQueue is paused")
	}
	if err := q.Pause(ctx); err != nil || !q.Paused() {
		t.Fatalf("after Pause: paused %v, err %v", q.Paused(), err)
	}
	if err := q.Publish("x"); err != nil || len(q.Deliveries()) != 1 {
		t.Fatalf("publish while paused: %v %v", err, q.Deliveries())
	}
	if err := q.Resume(ctx); err != nil || q.Paused() {
		t.Fatalf("after Resume: paused %v, err %v", q.Paused(), err)
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
