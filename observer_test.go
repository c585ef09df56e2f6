package redq

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// recorder is an Observer that keeps every event.
type recorder struct {
	mu     sync.Mutex
	events []Event
}

func (r *recorder) Observe(ev Event) {
	r.mu.Lock()
	r.events = append(r.events, ev)
	r.mu.Unlock()
}

// sum adds up the counts of the events of kind (and op, when not "") for
// queue, and says how many events there were.
func (r *recorder) sum(kind EventKind, queue, op string) (count, events int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, ev := range r.events {
		if ev.Kind == kind && ev.Queue == queue && (op == "" || ev.Op == op) {
			count += ev.Count
			events++
		}
	}
	return count, events
}

func (r *recorder) all() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Event(nil), r.events...)
}

// The observer sees every publish, fetch, settle and heartbeat of the
// connection, with the queue, the verb, the count and a duration.
func TestObserverSeesCalls(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		rec := &recorder{}
		c := openT(t, b, "observed", namespace(), WithObserver(rec), WithHeartbeat(20*time.Millisecond, time.Minute))
		q := openQueue(t, c, "jobs")
		for range 3 {
			mustPut(t, q, "p")
		}
		if err := q.PublishBytes([]byte("a"), []byte("b")); err != nil {
			t.Fatal(err)
		}
		if n, ev := rec.sum(EventPublish, "jobs", ""); n != 5 || ev != 4 {
			t.Fatalf("publish events: %d payloads in %d events, want 5 in 4", n, ev)
		}
		if err := q.StartConsuming(10, 10*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		got := make(chan Delivery, 10)
		if _, err := q.AddConsumerFunc("w", func(d Delivery) { got <- d }); err != nil {
			t.Fatal(err)
		}
		var ds []Delivery
		for range 5 {
			ds = append(ds, <-got)
		}
		if err := ds[0].Ack(); err != nil {
			t.Fatal(err)
		}
		if err := ds[1].Reject(); err != nil {
			t.Fatal(err)
		}
		batch := Deliveries{ds[2].(Message), ds[3].(Message), ds[4].(Message)}
		if errs := batch.Ack(); len(errs) > 0 {
			t.Fatal(errs)
		}
		if n, _ := rec.sum(EventFetch, "jobs", ""); n != 5 {
			t.Fatalf("fetch events moved %d deliveries, want 5", n)
		}
		if n, ev := rec.sum(EventSettle, "jobs", "ack"); n != 4 || ev != 2 {
			t.Fatalf("ack events: %d deliveries in %d events, want 4 in 2 (one alone, one batch)", n, ev)
		}
		if n, ev := rec.sum(EventSettle, "jobs", "reject"); n != 1 || ev != 1 {
			t.Fatalf("reject events: %d in %d, want 1 in 1", n, ev)
		}
		if err := q.Publish("released"); err != nil {
			t.Fatal(err)
		}
		if err := (<-got).(Message).Release(context.Background(), 0); err != nil {
			t.Fatal(err)
		}
		<-got // handed out again
		if n, ev := rec.sum(EventSettle, "jobs", "release"); n != 1 || ev != 1 {
			t.Fatalf("release events: %d in %d, want 1 in 1", n, ev)
		}
		// An ack of a delivery that is gone is Redis's answer, not an error.
		if err := ds[0].Ack(); !errors.Is(err, ErrorNotFound) {
			t.Fatalf("second ack: %v", err)
		}
		eventually(t, "heartbeats observed", func() bool { _, ev := rec.sum(EventHeartbeat, "", ""); return ev >= 2 })
		for _, ev := range rec.all() {
			if ev.Err != nil {
				t.Errorf("%v event with an error: %v", ev.Kind, ev.Err)
			}
			if ev.Duration <= 0 {
				t.Errorf("%v event without a duration", ev.Kind)
			}
			if (ev.Kind == EventHeartbeat) != (ev.Connection == c.Name()) {
				t.Errorf("%v event names connection %q", ev.Kind, ev.Connection)
			}
		}
	})
}

// A failed heartbeat reaches the observer with its error.
func TestObserverSeesHeartbeatErrors(t *testing.T) {
	m := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { client.Close() })
	rec := &recorder{}
	openT(t, backend{client: client, mini: m}, "observed", namespace(), WithObserver(rec), WithHeartbeat(20*time.Millisecond, time.Minute))
	m.Close()
	eventually(t, "a failed heartbeat observed", func() bool {
		for _, ev := range rec.all() {
			if ev.Kind == EventHeartbeat && ev.Err != nil {
				return true
			}
		}
		return false
	})
	if err := m.Restart(); err != nil {
		t.Fatal(err)
	}
}

func TestWithObserverRefusesNil(t *testing.T) {
	var ae *ArgumentError
	if _, err := openConn(realOrMini(t), "t", nil, WithObserver(nil)); !errors.As(err, &ae) {
		t.Fatalf("WithObserver(nil): %v, want an *ArgumentError", err)
	}
	for k, want := range map[EventKind]string{EventFetch: "fetch", EventSettle: "settle", EventHeartbeat: "heartbeat", EventPublish: "publish", 0: "unknown"} {
		if k.String() != want {
			t.Errorf("%d.String() = %q, want %q", k, k.String(), want)
		}
	}
}

// Without an observer the hot paths allocate nothing more (the check is a
// nil test); this benchmark shows the cost with one.
func BenchmarkObserverPublish(b *testing.B) {
	for _, with := range []bool{false, true} {
		name := "without"
		opts := []Option{namespace()}
		if with {
			name = "with"
			opts = append(opts, WithObserver(ObserverFunc(func(Event) {})))
		}
		b.Run(name, func(b *testing.B) {
			c, err := openConn(realOrMini(b), "bench", nil, opts...)
			if err != nil {
				b.Fatal(err)
			}
			defer func() { <-c.StopAllConsuming() }()
			q := openQueue(b, c, "jobs")
			b.ReportAllocs()
			for b.Loop() {
				if err := q.Publish("x"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
