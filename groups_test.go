package redq

import (
	"context"
	"errors"
	"testing"
	"time"
)

// groupsClean fails the test unless q holds no group state: no pending
// grouped delivery, no group in the rotation and none in flight.
func groupsClean(t testing.TB, q *redisQueue) {
	t.Helper()
	ctx := context.Background()
	c := q.conn.client
	for _, k := range []string{q.keys.gitems(), q.keys.gidx(), q.keys.grun()} {
		if n, err := c.HLen(ctx, k).Result(); err != nil || n != 0 {
			all, _ := c.HGetAll(ctx, k).Result()
			t.Fatalf("%s holds %d fields (%v), want none: %v", k, n, all, err)
		}
	}
	ring := q.keys.block[queueBlockLen-groupKeys+2]
	if n, err := c.LLen(ctx, ring).Result(); err != nil || n != 0 {
		t.Fatalf("the ring holds %d groups, want none: %v", n, err)
	}
}

// inFlight reads the in-flight count of group g.
func inFlight(t testing.TB, q *redisQueue, g string) int64 {
	t.Helper()
	n, err := q.conn.client.HGet(context.Background(), q.keys.grun(), g).Int64()
	if err != nil && err.Error() != "redis: nil" {
		t.Fatal(err)
	}
	return n
}

// A group hands out its deliveries in publish order, at most K (1 by
// default) at a time; other groups go on meanwhile, and a settle frees the
// slot.
func TestGroupFIFOAndConcurrencyOne(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		c := openT(t, b, "g", namespace())
		q := openQueue(t, c, "g")
		for _, p := range []string{"a1", "a2", "a3"} {
			mustPut(t, q, p, Group("a"))
		}
		mustPut(t, q, "b1", Group("b"))
		wantCounts(t, c, "g", 4, 0, 0)
		d1 := mustTake(t, q, time.Second)
		d2 := mustTake(t, q, time.Second)
		if d1.Payload() != "a1" || d2.Payload() != "b1" {
			t.Fatalf("took %q, %q; want a1, b1", d1.Payload(), d2.Payload())
		}
		if _, err := q.Take(context.Background(), 50*time.Millisecond); !errors.Is(err, ErrorTimeout) {
			t.Fatalf("take while a's slot is held: %v, want ErrorTimeout", err)
		}
		if n := inFlight(t, q, "a"); n != 1 {
			t.Fatalf("a in flight: %d, want 1", n)
		}
		if err := d1.Ack(); err != nil {
			t.Fatal(err)
		}
		d3 := mustTake(t, q, time.Second)
		if d3.Payload() != "a2" {
			t.Fatalf("after the ack took %q, want a2", d3.Payload())
		}
		if err := d3.Ack(); err != nil {
			t.Fatal(err)
		}
		d4 := mustTake(t, q, time.Second)
		if d4.Payload() != "a3" {
			t.Fatalf("took %q, want a3", d4.Payload())
		}
		for _, d := range []Message{d2, d4} {
			if err := d.Ack(); err != nil {
				t.Fatal(err)
			}
		}
		wantCounts(t, c, "g", 0, 0, 0)
		groupsClean(t, q)
	})
}
