package redq

import (
	"context"
	"testing"
	"time"
)

// AddConsumer does not wait for its count to reach Redis, but the
// connection's own stats show it at once, and every other reader soon.
func TestConsumerCountReachesRedisAfterAddConsumer(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ns := namespace()
		c := openT(t, b, "counts", ns)
		other := openT(t, b, "reader", ns)
		q := openQueue(t, c, "cq")
		if err := q.StartConsuming(10, time.Second); err != nil {
			t.Fatal(err)
		}
		for i := 1; i <= 3; i++ {
			if _, err := q.AddConsumerFunc("w", func(Delivery) {}); err != nil {
				t.Fatal(err)
			}
			s, err := c.CollectStats([]string{"cq"})
			if err != nil {
				t.Fatal(err)
			}
			if n := s.QueueStats["cq"].ConsumerCount(); n != int64(i) {
				t.Fatalf("the connection's own stats after AddConsumer %d: %d consumers", i, n)
			}
		}
		deadline := time.Now().Add(5 * time.Second)
		for {
			s, err := other.CollectStats([]string{"cq"})
			if err != nil {
				t.Fatal(err)
			}
			if n := s.QueueStats["cq"].ConsumerCount(); n == 3 {
				break
			} else if time.Now().After(deadline) {
				t.Fatalf("another connection sees %d consumers, want 3", n)
			}
			time.Sleep(10 * time.Millisecond)
		}
		<-q.StopConsuming()
	})
}

// A count written in the background never lands after StopConsuming's 0:
// the stop waits for the write under way.
func TestStopConsumingZeroesTheCountAfterABackgroundWrite(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		c := openT(t, b, "counts", namespace())
		q := openQueue(t, c, "cq")
		if err := q.StartConsuming(10, time.Second); err != nil {
			t.Fatal(err)
		}
		stopping := make(chan struct{})
		c.counts.beforeSend = func() { <-stopping }
		if _, err := q.AddConsumerFunc("w", func(Delivery) {}); err != nil {
			t.Fatal(err)
		}
		// the round read the count and waits to send it
		for deadline := time.Now().Add(5 * time.Second); ; {
			c.counts.mu.Lock()
			n := len(c.counts.pending)
			c.counts.mu.Unlock()
			if n == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the count writer did not start its round")
			}
			time.Sleep(time.Millisecond)
		}
		done := q.StopConsuming()
		select { // a stop that does not wait for the round ends meanwhile
		case <-done:
		case <-time.After(300 * time.Millisecond):
		}
		close(stopping)
		<-done
		if err := c.counts.await(context.Background()); err != nil {
			t.Fatal(err)
		}
		v, err := b.client.HGet(context.Background(), q.keys.consumers, c.Name()).Result()
		if err != nil || v != "0" {
			t.Fatalf("consumer count after StopConsuming: %q, %v; want 0", v, err)
		}
	})
}
