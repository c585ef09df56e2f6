package redq

import (
	"sync"
	"testing"
	"time"
)

func TestPublishConsumeAck(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ns := namespace()
		c := openT(t, b, "pc", ns)
		q := openQueue(t, c, "things")
		if err := q.Publish("a", "b", "c"); err != nil {
			t.Fatal(err)
		}
		if err := q.StartConsuming(10, 50*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var got []string
		if _, err := q.AddConsumerFunc("w", func(d Delivery) {
			mu.Lock()
			got = append(got, d.Payload())
			mu.Unlock()
			if err := d.Ack(); err != nil {
				t.Error(err)
			}
		}); err != nil {
			t.Fatal(err)
		}
		eventually(t, "3 deliveries", func() bool { mu.Lock(); defer mu.Unlock(); return len(got) == 3 })
		mu.Lock()
		if got[0] != "a" || got[1] != "b" || got[2] != "c" {
			t.Errorf("order: got %v, want [a b c]", got)
		}
		mu.Unlock()
		eventually(t, "nothing unacked", func() bool {
			return mustStats(t, c, "things").QueueStats["things"].UnackedCount() == 0
		})
		// A publish into the now idle queue is picked up.
		if err := q.Publish("d"); err != nil {
			t.Fatal(err)
		}
		eventually(t, "4th delivery", func() bool { mu.Lock(); defer mu.Unlock(); return len(got) == 4 })
		s := mustStats(t, c, "things").QueueStats["things"]
		if s.ReadyCount != 0 || s.ConsumerCount() != 1 || s.ConnectionCount() != 1 {
			t.Errorf("stats: %+v", s)
		}
	})
}
