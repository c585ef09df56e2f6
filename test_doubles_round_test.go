package redq

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// The test double refuses what the Redis round refuses, and changes
// nothing then.
func TestTestRoundBadInput(t *testing.T) {
	c := NewTestConnection()
	ctx := context.Background()
	r, err := c.OpenRound("feeds", time.Minute, RoundTTL(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	mustAdd(t, r, "a", "data", true)
	for _, name := range []string{"", "a:b", "{x}"} {
		_, err := c.OpenRound(name, time.Minute)
		wantArgError(t, "OpenRound("+name+")", err)
	}
	_, err = c.OpenRound("x", 0)
	wantArgError(t, "period 0", err)
	_, err = c.OpenRound("x", time.Minute, RoundTTL(-1))
	wantArgError(t, "negative TTL", err)
	_, err = c.OpenRound("feeds", 2*time.Minute)
	wantArgError(t, "another period", err)
	_, err = c.OpenRound("feeds", time.Minute, RoundTTL(time.Minute))
	wantArgError(t, "another TTL", err)
	if c.GetRound("x") != nil {
		t.Fatal("a refused OpenRound made a round")
	}
	for _, id := range []string{"", strings.Repeat("i", MaxRoundIDLength+1)} {
		_, err := r.Add(ctx, id, nil)
		wantArgError(t, "Add bad id", err)
		_, err = r.Get(ctx, id)
		wantArgError(t, "Get bad id", err)
		_, err = r.Remove(ctx, id)
		wantArgError(t, "Remove bad id", err)
		_, err = r.Reissue(ctx, id)
		wantArgError(t, "Reissue bad id", err)
	}
	_, err = r.NextBatch(ctx, 0, 0)
	wantArgError(t, "max 0", err)
	_, err = r.Next(ctx, -1)
	wantArgError(t, "negative timeout", err)
	items := c.GetRound("feeds").Items()
	if len(items) != 1 || items[0].ID != "a" || items[0].Issued != 0 || string(items[0].Data) != "data" {
		t.Fatalf("items after bad input: %+v", items)
	}
}

// Next on the double waits for Add and for the earliest due time, by the
// real clock when no other is set.
func TestTestRoundNextWaits(t *testing.T) {
	c := NewTestConnection()
	ctx := context.Background()
	r, err := c.OpenRound("feeds", 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan RoundItem, 1)
	go func() {
		it, err := r.Next(ctx, 10*time.Second)
		if err != nil {
			t.Error(err)
		}
		done <- it
	}()
	time.Sleep(20 * time.Millisecond)
	mustAdd(t, r, "a", "", true)
	if it := <-done; it.ID != "a" || it.Issued != 1 {
		t.Fatalf("Next woken by Add: %+v", it)
	}
	it, err := r.Next(ctx, 10*time.Second)
	if err != nil || it.ID != "a" || it.Issued != 2 {
		t.Fatalf("Next waiting for a to become due: %+v, %v", it, err)
	}
	if _, err := r.Next(ctx, 10*time.Millisecond); !errors.Is(err, ErrorTimeout) {
		t.Fatalf("Next with nothing due: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := r.Next(cctx, time.Second); !errors.Is(err, context.Canceled) {
		t.Fatalf("Next with a cancelled context: %v", err)
	}
	s, err := c.CollectStats(nil)
	if err != nil {
		t.Fatal(err)
	}
	if st := s.RoundStats["feeds"]; st.ItemCount != 1 || st.IssuedCount != 2 || st.Period != 100*time.Millisecond {
		t.Fatalf("stats %+v", st)
	}
	c.Reset()
	if n, _ := r.Len(ctx); n != 0 {
		t.Fatalf("Len after Reset = %d", n)
	}
}
