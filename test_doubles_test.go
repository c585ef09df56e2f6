package redq

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A consumer under test, as a user would write one.
type countingConsumer struct{ seen []string }

func (c *countingConsumer) Consume(d Delivery) {
	c.seen = append(c.seen, d.Payload())
	if d.Payload() == "bad" {
		_ = d.Reject()
		return
	}
	_ = d.Ack()
}

func TestTestDoubles(t *testing.T) {
	conn := NewTestConnection()
	q, err := conn.OpenQueue("q")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.OpenQueue("bad name"); !errors.Is(err, ErrorInvalidArgument) {
		t.Fatalf("test connection accepted a bad name: %v", err)
	}
	if err := q.Publish("a", "b"); err != nil {
		t.Fatal(err)
	}
	if got := conn.GetDeliveries("q"); len(got) != 2 || got[1] != "b" {
		t.Fatalf("GetDeliveries = %v", got)
	}
	if n := mustStats(t, conn, "q").QueueStats["q"].ReadyCount; n != 2 {
		t.Fatalf("ready %d", n)
	}
	conn.Reset()
	if got := conn.GetDeliveries("q"); len(got) != 0 {
		t.Fatalf("after Reset: %v", got)
	}

	c := &countingConsumer{}
	good, bad := NewTestDeliveryString("good"), NewTestDeliveryString("bad")
	c.Consume(good)
	c.Consume(bad)
	if good.GetState() != Acked || bad.GetState() != Rejected {
		t.Fatalf("states %v %v", good.State, bad.State)
	}
	if err := good.Ack(); !errors.Is(err, ErrorNotFound) {
		t.Fatalf("double ack of a test delivery: %v", err)
	}
	if d := NewTestDelivery(map[string]int{"n": 1}); d.Payload() != `{"n":1}` {
		t.Fatalf("JSON payload %q", d.Payload())
	}
	if NewTestDeliveryString("x").WithHeader(map[string][]string{"A": {"b"}}).Header().Get("A") != "b" {
		t.Fatal("header")
	}
	if Pushed.String() != "Pushed" {
		t.Fatal(Pushed.String())
	}
}

// The test doubles know the scheduling API: a handler under test can be
// given a TestDelivery and its Release or Touch checked.
func TestTestDoublesScheduling(t *testing.T) {
	conn := NewTestConnection()
	if _, err := conn.OpenQueue("q", WithRetryPolicy(RetryPolicy{})); !errors.Is(err, ErrorInvalidArgument) {
		t.Fatalf("bad queue option accepted: %v", err)
	}
	q, err := conn.OpenQueue("q", WithPublishDefaults(TTR(time.Second)))
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Put(context.Background(), []byte("x"), Priority(MaxPriority+1)); !errors.Is(err, ErrorInvalidArgument) {
		t.Fatalf("bad publish option accepted: %v", err)
	}
	if err := q.Put(context.Background(), []byte("y"), Delay(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if got := conn.GetDeliveries("q"); len(got) != 1 || got[0] != "y" {
		t.Fatalf("recorded %v, want only y", got)
	}
	if _, err := q.Take(context.Background(), 0); !errors.Is(err, ErrorTimeout) {
		t.Fatalf("Take on a test queue: %v", err)
	}

	d := NewTestDeliveryString("job")
	d.Attempt = 3
	if d.Attempts() != 3 {
		t.Fatalf("attempts %d", d.Attempts())
	}
	if err := d.Touch(context.Background()); err != nil || d.Touches != 1 {
		t.Fatalf("touch: %v, %d", err, d.Touches)
	}
	if err := d.Release(context.Background(), -time.Second); !errors.Is(err, ErrorInvalidArgument) {
		t.Fatalf("negative release delay: %v", err)
	}
	if err := d.Release(context.Background(), time.Second); err != nil || d.GetState() != Released || d.ReleaseDelay != time.Second {
		t.Fatalf("release: %v, %v, %v", err, d.GetState(), d.ReleaseDelay)
	}
	if err := d.Ack(); !errors.Is(err, ErrorNotFound) {
		t.Fatalf("ack after release: %v", err)
	}
	if err := d.Touch(context.Background()); !errors.Is(err, ErrorNotFound) {
		t.Fatalf("touch after release: %v", err)
	}
}

// TestQueue's keyed items follow the real queue's rules: the modes, MaxWait
// capping every postponement from the first upsert, Cancel and RunNow, and
// the same refusals.
func TestTestQueueKeyedFollowsTheRules(t *testing.T) {
	ctx := context.Background()
	q, err := NewTestConnection().OpenQueue("q")
	if err != nil {
		t.Fatal(err)
	}
	upsert := func(payload string, want UpsertOutcome, opts ...PublishOption) {
		t.Helper()
		if got, err := q.Upsert(ctx, "k", []byte(payload), opts...); err != nil || got != want {
			t.Fatalf("upsert %s: %v, %v; want %v", payload, got, err, want)
		}
	}
	first := time.Now()
	upsert("v1", Created, Delay(time.Hour), MaxWait(2*time.Hour))
	upsert("v2", Updated, Delay(90*time.Minute))
	upsert("v3", Updated, Delay(3*time.Hour), MaxWait(3*time.Hour)) // still capped at first + 2h
	item, err := q.Lookup(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if limit := first.Add(2 * time.Hour); item.Due.Before(limit.Add(-time.Minute)) || item.Due.After(limit.Add(time.Minute)) {
		t.Fatalf("due %v after postponements, want MaxWait's cap %v", item.Due, limit)
	}
	if string(item.Payload) != "v3" || item.Updates != 2 || !item.Pending {
		t.Fatalf("item %+v", item)
	}
	upsert("v4", Updated, Delay(time.Minute), OnExisting(ReplacePayload))
	upsert("v5", Kept, OnExisting(KeepExisting))
	if again, _ := q.Lookup(ctx, "k"); again.Due != item.Due || string(again.Payload) != "v4" || again.Updates != 4 {
		t.Fatalf("after ReplacePayload and KeepExisting: %+v, want v4 due %v", again, item.Due)
	}
	if ok, err := q.RunNow(ctx, "k"); !ok || err != nil {
		t.Fatalf("run now: %v, %v", ok, err)
	}
	if ok, err := q.Cancel(ctx, "k"); !ok || err != nil {
		t.Fatalf("cancel: %v, %v", ok, err)
	}
	if _, err := q.Lookup(ctx, "k"); !errors.Is(err, ErrorNotFound) {
		t.Fatalf("lookup after cancel: %v", err)
	}
	upsert("v6", Created, Delay(time.Hour)) // a new item: no MaxWait left over
	if item, _ := q.Lookup(ctx, "k"); item.Due.Before(time.Now().Add(59 * time.Minute)) {
		t.Fatalf("a new item after a cancel kept the old MaxWait: due %v", item.Due)
	}
	if _, err := q.Upsert(ctx, "", nil); !errors.Is(err, ErrorInvalidArgument) {
		t.Fatalf("empty key: %v", err)
	}
	if _, err := q.Upsert(ctx, "k", nil, Delay(time.Hour), MaxWait(time.Minute)); !errors.Is(err, ErrorInvalidArgument) {
		t.Fatalf("MaxWait below the delay: %v", err)
	}
}

// The test double's timers wait as Timers.Next does.
func TestTestTimersNextTimeout(t *testing.T) {
	ctx := context.Background()
	ts, err := NewTestConnection().OpenTimers("t")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ts.Next(ctx, 10*time.Millisecond); !errors.Is(err, ErrorTimeout) {
		t.Fatalf("Next on no timers = %v; want ErrorTimeout", err)
	}
	if _, err := ts.Next(ctx, -time.Millisecond); !errors.Is(err, ErrorInvalidArgument) {
		t.Fatalf("Next(-1ms) = %v; want an *ArgumentError", err)
	}
	if err := ts.Set(ctx, "k", 0); err != nil {
		t.Fatal(err)
	}
	if f, err := ts.Next(ctx, 0); err != nil || f.Key() != "k" {
		t.Fatalf("Next(0) on a due timer = %v, %v", f, err)
	}
}
