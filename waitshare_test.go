package redq

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// sharedRig is a connection whose queues beyond the first own ones wait
// together (see sharedWaits), consuming n queues (prefetch 10, a 30s
// poll, so that only a wake picks a delivery up in time) into got.
type sharedRig struct {
	c    *redisConnection
	pub  Connection
	qs   []Queue
	pubq []Queue
	got  chan Delivery
}

func newSharedRig(t *testing.T, b backend, n, own int) *sharedRig {
	t.Helper()
	ns := namespace()
	r := &sharedRig{c: openT(t, b, "shared", ns), pub: openT(t, b, "pub", ns), got: make(chan Delivery, 100)}
	r.c.waits.mu.Lock()
	r.c.waits.ownWaits = own
	r.c.waits.mu.Unlock()
	for i := range n {
		name := fmt.Sprintf("sq%d", i)
		q := openQueue(t, r.c, name)
		if err := q.StartConsuming(10, 30*time.Second); err != nil {
			t.Fatal(err)
		}
		if _, err := q.AddConsumerFunc("c", func(d Delivery) { r.got <- d }); err != nil {
			t.Fatal(err)
		}
		r.qs = append(r.qs, q)
		r.pubq = append(r.pubq, openQueue(t, r.pub, name))
	}
	return r
}

// sharing is how many keys waits are shared on now.
func (r *sharedRig) sharing() int {
	r.c.waits.mu.Lock()
	defer r.c.waits.mu.Unlock()
	return len(r.c.waits.waits)
}

// idle waits until every queue beyond the own ones waits in the shared
// waiter, where the server can share waits (a real Redis), and a moment
// on miniredis, whose waits are each queue's own.
func (r *sharedRig) idle(t *testing.T, b backend, want int) {
	t.Helper()
	if b.mini != nil {
		time.Sleep(200 * time.Millisecond)
		return
	}
	eventually(t, fmt.Sprintf("%d queues waiting together", want), func() bool { return r.sharing() == want })
	// the loop arms what it was asked for right after the last wait came
	time.Sleep(100 * time.Millisecond)
}

func (r *sharedRig) expect(t *testing.T, payload string, within time.Duration) {
	t.Helper()
	select {
	case d := <-r.got:
		if d.Payload() != payload {
			t.Fatalf("got %q, want %q", d.Payload(), payload)
		}
		if err := d.Ack(); err != nil {
			t.Fatal(err)
		}
	case <-time.After(within):
		t.Fatalf("%q was not picked up within %s (the poll is 30s)", payload, within)
	}
}

// A queue that waits together with others is woken by a publish, a
// priority's wake marker, a due delivery and a resume, as one that waits
// on its own connection is.
func TestSharedWaitWakesIdleQueues(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		r := newSharedRig(t, b, 12, 2)
		ctx := context.Background()
		r.idle(t, b, 10)
		if b.mini == nil && !r.c.waits.usable() {
			t.Fatal("a real Redis did not pass the probe of key tracking")
		}
		mustPut(t, r.pubq[5], "plain")
		r.expect(t, "plain", 5*time.Second)
		r.idle(t, b, 10)
		mustPut(t, r.pubq[6], "priority", Priority(5))
		r.expect(t, "priority", 5*time.Second)
		r.idle(t, b, 10)
		start := time.Now()
		mustPut(t, r.pubq[7], "delayed", Delay(300*time.Millisecond))
		r.expect(t, "delayed", 5*time.Second)
		if el := time.Since(start); el < 250*time.Millisecond {
			t.Fatalf("a delivery due in 300ms arrived after %s", el)
		}
		r.idle(t, b, 10)
		if err := r.pubq[8].Pause(ctx); err != nil {
			t.Fatal(err)
		}
		mustPut(t, r.pubq[8], "resumed")
		select {
		case d := <-r.got:
			t.Fatalf("got %q from a paused queue", d.Payload())
		case <-time.After(300 * time.Millisecond):
		}
		r.idle(t, b, 10)
		if err := r.pubq[8].Resume(ctx); err != nil {
			t.Fatal(err)
		}
		r.expect(t, "resumed", 5*time.Second)
		// one of the queues with a waiter of its own, too
		mustPut(t, r.pubq[0], "own")
		r.expect(t, "own", 5*time.Second)
		for i := range r.qs {
			wantCounts(t, r.c, fmt.Sprintf("sq%d", i), 0, 0, 0)
		}
	})
}

// connectedClients returns the server's connected_clients.
func connectedClients(t *testing.T, c redis.UniversalClient) int {
	t.Helper()
	info, err := c.Info(context.Background(), "clients").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "connected_clients:"); ok {
			n, err := strconv.Atoi(v)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("INFO clients has no connected_clients")
	return 0
}

// Forty idle queues of one connection hold a few connections, not forty.
func TestSharedWaitKeepsConnectionsFew(t *testing.T) {
	c := realClient(t)
	before := connectedClients(t, c)
	r := newSharedRig(t, backend{name: "redis", client: c}, 40, 2)
	r.idle(t, backend{name: "redis", client: c}, 38)
	if n := connectedClients(t, c) - before; n > 15 {
		t.Fatalf("40 idle queues hold %d connections", n)
	}
	mustPut(t, r.pubq[30], "late")
	r.expect(t, "late", 5*time.Second)
}

// Stopping ends shared waits at once, long before the poll.
func TestSharedWaitEndsWhenConsumingStops(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		r := newSharedRig(t, b, 12, 2)
		r.idle(t, b, 10)
		start := time.Now()
		select {
		case <-r.c.StopAllConsuming():
		case <-time.After(5 * time.Second):
			t.Fatal("StopAllConsuming did not end the waits")
		}
		if el := time.Since(start); el > 3*time.Second {
			t.Fatalf("StopAllConsuming took %s", el)
		}
	})
}

// When the shared connection dies (a restart, a failover, a kill), its
// queues fetch again and wait on a new one, still woken by a publish.
func TestSharedWaitSurvivesItsConnection(t *testing.T) {
	c := realClient(t)
	b := backend{name: "redis", client: c}
	r := newSharedRig(t, b, 12, 2)
	r.idle(t, b, 10)
	admin := redis.NewClient(&redis.Options{Addr: c.Options().Addr})
	defer admin.Close()
	if err := admin.Do(context.Background(), "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes").Err(); err != nil {
		t.Fatal(err)
	}
	r.idle(t, b, 10)
	time.Sleep(500 * time.Millisecond)
	mustPut(t, r.pubq[9], "after-kill")
	r.expect(t, "after-kill", 5*time.Second)
}
