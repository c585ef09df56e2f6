package redq

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redq/redq/internal/redistest"
)

// outage is a Redis a test can take away and bring back.
type outage struct {
	backend
	down, up func()
}

// forEachOutage runs f on a miniredis and on a private redis-server with
// append-only persistence, both of which the test may stop and restart.
func forEachOutage(t *testing.T, f func(t *testing.T, o outage)) {
	t.Run("miniredis", func(t *testing.T) {
		m := miniredis.RunT(t)
		c := redis.NewClient(&redis.Options{Addr: m.Addr()})
		t.Cleanup(func() { c.Close() })
		// miniredis's blocking commands misbehave after Close and Restart,
		// so its outage is every command refused as Redis refuses them
		// while it loads its data after a restart.
		f(t, outage{backend{"miniredis", c, m}, func() { m.SetError("LOADING simulated outage") }, func() { m.SetError("") }})
	})
	t.Run("redis", func(t *testing.T) {
		srv := redistest.Start(t, redistest.WithAppendOnly())
		// No retries inside go-redis: an outage reaches redq at once
		// instead of being ridden out for a few seconds.
		c := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1, DialerRetries: 1})
		t.Cleanup(func() { c.Close() })
		f(t, outage{backend{"redis", c, nil}, srv.Kill, func() { srv.Restart(t) }})
	})
}

func TestConsumersPauseAndResumeWhenRedisComesAndGoes(t *testing.T) {
	forEachOutage(t, func(t *testing.T, o outage) {
		errs := make(chan error, 10000)
		c, err := openConn(o.client, "resilient", errs, namespace(),
			WithHeartbeat(20*time.Millisecond, 30*time.Second), WithHeartbeatErrorLimit(1000))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { <-c.StopAllConsuming() })
		q := openQueue(t, c, "jobs")
		if err := q.StartConsuming(10, 50*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		acked := ackingConsumer(t, q)
		publishAndWait := func(prefix string) {
			t.Helper()
			for i := 0; i < 10; i++ {
				if err := q.Publish(fmt.Sprintf("%s-%d", prefix, i)); err != nil {
					t.Fatal(err)
				}
			}
			for i := 0; i < 10; i++ {
				select {
				case <-acked:
				case <-time.After(15 * time.Second):
					t.Fatalf("%s: only %d acked", prefix, i)
				}
			}
		}
		publishAndWait("before")

		o.down()
		var sawHeartbeat, sawConsume bool
		deadline := time.After(15 * time.Second)
		for !sawHeartbeat || !sawConsume {
			select {
			case err := <-errs:
				var he *HeartbeatError
				var ce *ConsumeError
				switch {
				case errors.As(err, &he):
					sawHeartbeat = he.Count >= 1 && he.Unwrap() != nil
				case errors.As(err, &ce):
					sawConsume = ce.Count >= 1 && ce.Queue == "jobs"
				}
			case <-deadline:
				t.Fatalf("while Redis was down: heartbeat error %v, consume error %v", sawHeartbeat, sawConsume)
			}
		}
		o.up()
		publishAndWait("after")
		if c.isStopped() {
			t.Fatal("connection stopped although the error limit was not reached")
		}
		eventually(t, "nothing left", func() bool {
			r, j, u := counts(t, c, "jobs")
			return r == 0 && j == 0 && u == 0
		})
	})
}

// Deliveries fetched but not consumed go back to ready on stop even when
// Redis is away at that moment: the hand-back is retried, not dropped on a
// live connection's storage.
func TestStopHandsBackTheBufferAcrossAnOutage(t *testing.T) {
	forEachOutage(t, func(t *testing.T, o outage) {
		c, err := openConn(o.client, "handback", nil, namespace(), WithHeartbeatErrorLimit(1000))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { <-c.StopAllConsuming() })
		q := openQueue(t, c, "jobs")
		payloads := make([]string, 30)
		for i := range payloads {
			payloads[i] = fmt.Sprint(i)
		}
		if err := q.Publish(payloads...); err != nil {
			t.Fatal(err)
		}
		if err := q.StartConsuming(20, 20*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		first, release := make(chan Message, 1), make(chan struct{})
		if _, err := q.AddConsumerFunc("slow", func(dd Delivery) { d := dd.(Message); first <- d; <-release }); err != nil {
			t.Fatal(err)
		}
		held := <-first
		eventually(t, "buffer filled", func() bool { return len(q.buf) >= 10 })
		o.down()
		stopped := q.StopConsuming()
		close(release)
		time.Sleep(300 * time.Millisecond) // the hand-back fails meanwhile
		o.up()
		select {
		case <-stopped:
		case <-time.After(30 * time.Second):
			t.Fatal("stop did not finish after Redis came back")
		}
		_, _, unacked := counts(t, c, "jobs")
		if unacked != 1 {
			t.Fatalf("unacked after stop = %d, want only the delivery the consumer holds", unacked)
		}
		if err := held.Ack(); err != nil {
			t.Fatal(err)
		}
		wantCounts(t, c, "jobs", 29, 0, 0)
	})
}

// ackingConsumer adds a consumer to q that acks every delivery and sends its
// payload to the returned channel; an Ack error fails the test.
func ackingConsumer(t *testing.T, q Queue) <-chan string {
	t.Helper()
	acked := make(chan string, 100)
	if _, err := q.AddConsumerFunc("w", func(dd Delivery) {
		d := dd.(Message)
		if err := d.Ack(); err != nil {
			t.Errorf("ack: %v", err)
		}
		acked <- d.Payload()
	}); err != nil {
		t.Fatal(err)
	}
	return acked
}
