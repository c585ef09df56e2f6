package redq

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// The totals count every event over more minutes than the ring holds, and
// History the minutes of the last hour, when the clock steps back too; a
// queue whose counters were kept before the last minute was recorded
// keeps its counts. Runs on miniredis, whose clock a test can set.
func TestCountersTotalsAcrossTheRing(t *testing.T) {
	ctx := context.Background()
	m := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { client.Close() })
	start := time.Date(2026, 1, 1, 0, 0, 30, 0, time.UTC)
	m.SetTime(start)
	ns := namespace()
	c := openT(t, backend{name: "miniredis", client: client, mini: m}, "c", ns)
	q := openQueue(t, c, "jobs")
	i, err := NewInspector(client, ns)
	if err != nil {
		t.Fatal(err)
	}
	published := func() int64 {
		t.Helper()
		qi, err := i.Queue(ctx, "jobs")
		if err != nil {
			t.Fatal(err)
		}
		return qi.Published
	}
	var want int64
	perMinute := map[int]int64{}
	publish := func(minute, n int) {
		t.Helper()
		m.SetTime(start.Add(time.Duration(minute) * time.Minute))
		for range n {
			if err := q.Publish(fmt.Sprint(minute)); err != nil {
				t.Fatal(err)
			}
		}
		want += int64(n)
		perMinute[minute] += int64(n)
		if got := published(); got != want {
			t.Fatalf("minute %d: %d published, want %d", minute, got, want)
		}
	}
	for minute := 0; minute < 2*historySlots+5; minute += 1 + minute%2 {
		publish(minute, minute%3+1)
	}
	last := 2*historySlots + 5
	publish(last, 2)
	publish(last-3, 1) // the clock steps back: counted in the last minute
	perMinute[last-3]--
	perMinute[last]++
	m.SetTime(start.Add(time.Duration(last) * time.Minute))
	h, err := i.History(ctx, "jobs", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range h {
		minute := int(p.Minute.Sub(start.Truncate(time.Minute)) / time.Minute)
		if p.Published != perMinute[minute] {
			t.Errorf("History, minute %d: %d published, want %d", minute, p.Published, perMinute[minute])
		}
	}
	// A publish through Put's script and plain ones through the publish
	// script add up, in the total and in the minute.
	if err := q.Put(ctx, []byte("p"), Priority(1)); err != nil {
		t.Fatal(err)
	}
	want++
	if got := published(); got != want {
		t.Fatalf("with a publish through Put's script: %d published, want %d", got, want)
	}
	if h, err = i.History(ctx, "jobs", time.Minute); err != nil || len(h) != 1 || h[0].Published != perMinute[last]+1 {
		t.Fatalf("History of the last minute: %v, %v; want %d published", h, err, perMinute[last]+1)
	}

	// Counters kept without a last minute: the ring's minutes are added to
	// the totals at the next count.
	old := newQueueKeys(c.opts.namespace, "old")
	now := start.Add(time.Duration(last) * time.Minute)
	minute := now.UnixMilli() / 60000
	slot := func(m int64) string { return fmt.Sprint(m % historySlots) }
	if err := client.HSet(ctx, old.block[5], "np", 10, "m"+slot(minute-2), minute-2, "p"+slot(minute-2), 3,
		"m"+slot(minute), minute, "p"+slot(minute), 4).Err(); err != nil {
		t.Fatal(err)
	}
	oq := openQueue(t, c, "old")
	if err := oq.Publish("x"); err != nil {
		t.Fatal(err)
	}
	qi, err := i.Queue(ctx, "old")
	if err != nil {
		t.Fatal(err)
	}
	if qi.Published != 10+3+4+1 {
		t.Errorf("counters kept without a last minute: %d published, want 18", qi.Published)
	}
}
