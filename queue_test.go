package redq

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
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
		if _, err := q.AddConsumerFunc("w", func(dd Delivery) {
			d := dd.(Message)
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

// An idle consumer waits on Redis, not on a timer: with a poll duration of
// 30s a publish is still picked up at once, and stopping does not wait for
// the poll to run out. (The bounds are generous; speed is measured in the
// benchmarks.)
func TestIdleConsumerWakesOnPublishAndStopsAtOnce(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		c := openT(t, b, "idle", namespace())
		q := openQueue(t, c, "idle")
		if err := q.StartConsuming(10, 30*time.Second); err != nil {
			t.Fatal(err)
		}
		got := make(chan Message, 1)
		if _, err := q.AddConsumerFunc("w", func(dd Delivery) { d := dd.(Message); got <- d }); err != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond) // let the consumer go idle
		start := time.Now()
		if err := q.Publish("wake"); err != nil {
			t.Fatal(err)
		}
		select {
		case d := <-got:
			if err := d.Ack(); err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("publish into an idle queue was not picked up")
		}
		t.Logf("idle pickup took %v", time.Since(start))
		time.Sleep(200 * time.Millisecond)
		start = time.Now()
		select {
		case <-q.StopConsuming():
		case <-time.After(10 * time.Second):
			t.Fatal("StopConsuming waited for the poll duration")
		}
		t.Logf("stop took %v", time.Since(start))
	})
}

// The rmq-style constructors reach the same Redis as Open.
func TestOpenConnectionForms(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		addr := b.client.(*redis.Client).Options().Addr
		ns := namespace()
		a, err := OpenConnection("a", "tcp", addr, 0, nil, ns)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { <-a.StopAllConsuming() }()
		c, err := OpenConnectionWithRedisOptions("c", &redis.Options{Addr: addr}, nil, ns)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { <-c.StopAllConsuming() }()
		qa, _ := a.OpenQueue("shared")
		if err := qa.Publish("hello"); err != nil {
			t.Fatal(err)
		}
		s := mustStats(t, c, "shared")
		if s.QueueStats["shared"].ReadyCount != 1 {
			t.Fatalf("second connection sees %+v", s.QueueStats["shared"])
		}
		if _, err := OpenConnection("x", "tcp", "127.0.0.1:1", 0, nil); err == nil {
			t.Fatal("a connection to a closed port was opened")
		}
	})
	tc, err := OpenConnectionWithTestRedisClient("embedded", nil)
	if err != nil {
		t.Fatal(err)
	}
	<-tc.StopAllConsuming()
}

// Publishes from many goroutines share Redis calls; every payload arrives
// once, and each goroutine's payloads keep their order.
func TestConcurrentPublishes(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		c := openT(t, b, "pub", namespace())
		qs := []Queue{openQueue(t, c, "one"), openQueue(t, c, "two")}
		const goroutines, each = 8, 300
		var wg sync.WaitGroup
		for g := 0; g < goroutines; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < each; i++ {
					if err := qs[i%2].Publish(fmt.Sprintf("%d/%04d", g, i)); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		for qi, q := range qs {
			got, err := q.Drain(goroutines * each)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != goroutines*each/2 {
				t.Fatalf("queue %d holds %d, want %d", qi, len(got), goroutines*each/2)
			}
			last := map[string]string{}
			for _, p := range got {
				g, i, _ := strings.Cut(p, "/")
				if i <= last[g] {
					t.Fatalf("goroutine %s: %s came after %s", g, i, last[g])
				}
				last[g] = i
			}
		}
	})
}

// Large payloads are fetched in chunks of about fetchBudget bytes, judged by
// the last fetch, and still all arrive intact and in order.
func TestLargePayloadsAreFetchedInSmallerChunks(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		c := openT(t, b, "large")
		q := openQueue(t, c, "large")
		const n, size = 30, 200 << 10
		payloads := make([]string, n)
		for i := range payloads {
			payloads[i] = fmt.Sprintf("%04d", i) + strings.Repeat("x", size-4)
		}
		if err := q.Publish(payloads...); err != nil {
			t.Fatal(err)
		}
		if got := q.chunk(); got != firstFetch {
			t.Fatalf("chunk before any fetch = %d, want %d", got, firstFetch)
		}
		got := take(t, q, 5)
		if want := int64(fetchBudget / (size + 13)); q.chunk() != want {
			t.Fatalf("chunk after fetching %d-byte payloads = %d, want %d", size, q.chunk(), want)
		}
		for i, d := range got {
			if d.Payload() != payloads[i] {
				t.Fatalf("delivery %d: payload %.8q…, want %.8q…", i, d.Payload(), payloads[i])
			}
			if err := d.Ack(); err != nil {
				t.Fatal(err)
			}
		}

		// The consume loop takes the rest in budget-sized chunks, in order.
		if err := q.StartConsuming(100, 10*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		seen := make(chan string, n)
		if _, err := q.AddConsumerFunc("large", func(dd Delivery) {
			d := dd.(Message)
			if err := d.Ack(); err != nil {
				t.Error(err)
			}
			seen <- d.Payload()
		}); err != nil {
			t.Fatal(err)
		}
		for i := 5; i < n; i++ {
			select {
			case p := <-seen:
				if p != payloads[i] {
					t.Fatalf("delivery %d: payload %.8q…, want %.8q…", i, p, payloads[i])
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("consumed %d of %d", i, n)
			}
		}
		<-c.StopAllConsuming()
		wantCounts(t, c, "large", 0, 0, 0)
	})
}

// Destroy keeps the counter that numbers foreign items: an id made from it
// must not repeat while a delivery with that id is still held (a repeat
// would overwrite the held one in the unacked hash).
func TestDestroyKeepsForeignIDsUnique(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		c := openT(t, b, "c", namespace())
		q := openQueue(t, c, "q")
		ctx := context.Background()
		if err := b.client.LPush(ctx, q.keys.ready, "foreign-1").Err(); err != nil {
			t.Fatal(err)
		}
		d1 := take(t, q, 1)[0]
		if _, _, err := q.Destroy(); err != nil {
			t.Fatal(err)
		}
		q = openQueue(t, c, "q")
		if err := b.client.LPush(ctx, q.keys.ready, "foreign-2").Err(); err != nil {
			t.Fatal(err)
		}
		d2 := take(t, q, 1)[0]
		if d1.ID() == d2.ID() {
			t.Fatalf("two held deliveries share id %s", d1.ID())
		}
		if n := b.client.HLen(ctx, q.unackedKey).Val(); n != 2 {
			t.Fatalf("unacked hash holds %d deliveries, want 2", n)
		}
		for _, d := range []Message{d1, d2} {
			if err := d.Ack(); err != nil {
				t.Fatalf("ack %q: %v", d.Payload(), err)
			}
		}
	})
}

// As in rmq, the prefetch limit bounds what a connection holds of a queue:
// buffered, and handed to consumers but not yet settled; a settle makes
// room for one more at once.
func TestPrefetchLimitBoundsWhatTheConnectionHolds(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		c := openT(t, b, "limited", namespace())
		q := openQueue(t, c, "jobs")
		for i := 0; i < 20; i++ {
			if err := q.Publish(fmt.Sprintf("d%d", i)); err != nil {
				t.Fatal(err)
			}
		}
		if err := q.StartConsuming(10, 10*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		eventually(t, "ten held, ten ready", func() bool {
			r, _, u := counts(t, c, "jobs")
			return r == 10 && u == 10
		})
		consumer := NewTestConsumer("slow")
		consumer.AutoAck, consumer.AutoFinish = false, false
		t.Cleanup(consumer.FinishAll)
		if _, err := q.AddConsumer("slow", consumer); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the consumer to get one", func() bool { return consumer.Last() != nil })
		time.Sleep(50 * time.Millisecond) // a fetch would have come by now
		wantCounts(t, c, "jobs", 10, 0, 10)
		if err := consumer.Last().Ack(); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the ack to make room for one", func() bool {
			r, _, u := counts(t, c, "jobs")
			return r == 9 && u == 10
		})
		time.Sleep(50 * time.Millisecond)
		wantCounts(t, c, "jobs", 9, 0, 10)
	})
}
