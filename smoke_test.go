package redq

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestSmokeScheduling(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		c := openT(t, b, "smoke", namespace())
		q := openQueue(t, c, "s")
		if err := q.Put(ctx, []byte("later"), Delay(300*time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		if err := q.Put(ctx, []byte("low")); err != nil {
			t.Fatal(err)
		}
		if err := q.Put(ctx, []byte("high"), Priority(5)); err != nil {
			t.Fatal(err)
		}
		s := mustStats(t, c, "s").QueueStats["s"]
		if s.ReadyCount != 2 || s.DelayedCount != 1 {
			t.Fatalf("stats %+v", s)
		}
		d, err := q.Take(ctx, time.Second)
		if err != nil || d.Payload() != "high" {
			t.Fatalf("take: %v %v", d, err)
		}
		d2, err := q.Take(ctx, time.Second)
		if err != nil || d2.Payload() != "low" {
			t.Fatalf("take: %v %v", d2, err)
		}
		if b.mini != nil {
			b.mini.SetTime(time.Now().Add(time.Second))
		}
		start := time.Now()
		d3, err := q.Take(ctx, 5*time.Second)
		if err != nil || d3.Payload() != "later" {
			t.Fatalf("take: %v %v", d3, err)
		}
		t.Logf("waited %v", time.Since(start))
		if err := d.Ack(); err != nil {
			t.Fatal(err)
		}
		if err := d2.Release(ctx, 0); err != nil {
			t.Fatal(err)
		}
		d4, err := q.Take(ctx, time.Second)
		if err != nil || d4.Payload() != "low" || d4.Attempts() != 2 || d4.ID() != d2.ID() {
			t.Fatalf("after release: %v %v %d", d4, err, d4.Attempts())
		}
		// TTR
		if err := q.Put(ctx, []byte("lease"), TTR(50*time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		d5, err := q.Take(ctx, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if b.mini != nil {
			b.mini.SetTime(time.Now().Add(2 * time.Second))
		} else {
			time.Sleep(100 * time.Millisecond)
		}
		d6, err := q.Take(ctx, time.Second)
		if err != nil || d6.ID() != d5.ID() || d6.Attempts() != 2 {
			t.Fatalf("lease: %v %v", d6, err)
		}
		if err := d5.Ack(); !errors.Is(err, ErrorLeaseLost) {
			t.Fatalf("late ack: %v", err)
		}
		if err := d6.Ack(); err != nil {
			t.Fatal(err)
		}
		for _, d := range []Delivery{d3, d4} {
			if err := d.Ack(); err != nil {
				t.Fatal(err)
			}
		}
		// TTL
		if err := q.Put(ctx, []byte("ttl"), TTL(10*time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		if b.mini != nil {
			b.mini.SetTime(time.Now().Add(3 * time.Second))
		} else {
			time.Sleep(50 * time.Millisecond)
		}
		if _, err := q.Take(ctx, 0); !errors.Is(err, ErrorTimeout) {
			t.Fatal(err)
		}
		s = mustStats(t, c, "s").QueueStats["s"]
		if s.ExpiredCount != 1 || s.ReadyCount != 0 || s.UnackedCount() != 0 {
			t.Fatalf("stats %+v", s)
		}
	})
}
