package redq

import (
	"context"
	"errors"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"
)

func newInspectorT(t testing.TB, b backend, ns Option) *Inspector {
	t.Helper()
	i, err := NewInspector(b.client, ns)
	if err != nil {
		t.Fatal(err)
	}
	return i
}

func listAll(t testing.TB, i *Inspector, queue string, o ListOptions) []DeliveryInfo {
	t.Helper()
	var out []DeliveryInfo
	for pages := 0; ; pages++ {
		p, err := i.List(context.Background(), queue, o)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, p.Items...)
		if p.Next == "" {
			return out
		}
		if pages > 1000 {
			t.Fatal("the pages do not end")
		}
		o.Cursor = p.Next
	}
}

func payloads(ds []DeliveryInfo) []string {
	out := make([]string, len(ds))
	for n, d := range ds {
		out[n] = string(d.Payload)
	}
	return out
}

// The Inspector lists every state with the fields a user relies on, pages
// through them, finds a delivery by id and acts on it; by-id actions on
// what moved or what a connection holds change nothing.
func TestInspectorListAndActions(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		ns := namespace()
		c := openT(t, b, "c", ns)
		q := openQueue(t, c, "jobs")
		i := newInspectorT(t, b, ns)

		for _, p := range []string{"r1", "r2", "r3"} {
			if err := q.Publish(p); err != nil {
				t.Fatal(err)
			}
		}
		if err := q.Put(ctx, []byte("high"), Priority(2)); err != nil {
			t.Fatal(err)
		}
		if err := q.Put(ctx, []byte("later"), Delay(time.Hour)); err != nil {
			t.Fatal(err)
		}
		if _, err := q.Upsert(ctx, "k1", []byte("keyed"), Delay(time.Hour)); err != nil {
			t.Fatal(err)
		}
		// ready now: high, r1, r2, r3 (taken in that order); take high and
		// r1, reject r1 with a reason header, hold high
		held := take(t, q, 2)
		if err := q.Put(ctx, []byte("bad"), Header(http.Header{HeaderError: {"boom"}})); err != nil {
			t.Fatal(err)
		}
		// ready: r2, r3, bad
		rej, err := q.Take(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		if rej.Payload() != "r2" {
			t.Fatalf("took %q, want r2", rej.Payload())
		}
		if err := rej.Reject(); err != nil {
			t.Fatal(err)
		}

		ready := listAll(t, i, "jobs", ListOptions{State: StateReady, Limit: 1})
		if got := strings.Join(payloads(ready), ","); got != "r3,bad" {
			t.Fatalf("ready pages: %s, want r3,bad", got)
		}
		if ready[1].Reason != "boom" || ready[1].Header.Get(HeaderError) != "boom" {
			t.Fatalf("reason %q, header %v", ready[1].Reason, ready[1].Header)
		}
		delayed := listAll(t, i, "jobs", ListOptions{State: StateDelayed})
		if len(delayed) != 2 {
			t.Fatalf("delayed: %+v", delayed)
		}
		sort.Slice(delayed, func(a, b int) bool { return delayed[a].Key < delayed[b].Key })
		if string(delayed[0].Payload) != "later" || string(delayed[1].Payload) != "keyed" || delayed[1].Key != "k1" {
			t.Fatalf("delayed: %q %q key %q", delayed[0].Payload, delayed[1].Payload, delayed[1].Key)
		}
		if d := time.Until(delayed[0].DueAt); d < 50*time.Minute || d > 70*time.Minute {
			t.Fatalf("due in %v, want about an hour", d)
		}
		keyed := listAll(t, i, "jobs", ListOptions{State: StateKeyed})
		if len(keyed) != 1 || keyed[0].Key != "k1" || keyed[0].ID != delayed[1].ID {
			t.Fatalf("keyed: %+v", keyed)
		}
		unacked := listAll(t, i, "jobs", ListOptions{State: StateUnacked})
		if len(unacked) != 2 || unacked[0].Connection != c.Name() {
			t.Fatalf("unacked: %+v", unacked)
		}
		rejected := listAll(t, i, "jobs", ListOptions{State: StateRejected})
		if len(rejected) != 1 || string(rejected[0].Payload) != "r2" || rejected[0].ID != rej.ID() {
			t.Fatalf("rejected: %+v", rejected)
		}
		if p, err := i.List(ctx, "jobs", ListOptions{State: StateReady, Search: "ba"}); err != nil || len(p.Items) != 1 || string(p.Items[0].Payload) != "bad" || p.Scanned != 2 {
			t.Fatalf("search: %+v %v", p, err)
		}
		if p, err := i.List(ctx, "jobs", ListOptions{State: StateReady, MaxPayload: 1}); err != nil || p.Total != 2 || !p.Items[0].Truncated || p.Items[0].PayloadSize != 2 || string(p.Items[0].Payload) != "r" {
			t.Fatalf("truncated: %+v %v", p, err)
		}

		// by id
		d, err := i.Delivery(ctx, "jobs", rej.ID())
		if err != nil || d.State != StateRejected || string(d.Payload) != "r2" {
			t.Fatalf("Delivery: %+v %v", d, err)
		}
		if p, err := i.Payload(ctx, "jobs", held[0].ID()); err != nil || string(p) != held[0].Payload() {
			t.Fatalf("Payload: %q %v", p, err)
		}
		if err := i.Delete(ctx, "jobs", held[0].ID()); !errors.Is(err, ErrorHeld) {
			t.Fatalf("Delete of an unacked delivery: %v, want ErrorHeld", err)
		}
		if err := i.Retry(ctx, "jobs", ready[0].ID); !errors.Is(err, ErrorInvalidArgument) {
			t.Fatalf("Retry of a ready delivery: %v, want an *ArgumentError", err)
		}
		if err := i.Retry(ctx, "jobs", rej.ID()); err != nil {
			t.Fatal(err)
		}
		if err := i.Retry(ctx, "jobs", rej.ID()); err == nil {
			t.Fatal("a second Retry of a delivery that is ready now succeeded")
		}
		if err := i.Delete(ctx, "jobs", delayed[0].ID); err != nil {
			t.Fatal(err)
		}
		if err := i.Delete(ctx, "jobs", delayed[0].ID); !errors.Is(err, ErrorNotFound) {
			t.Fatalf("second Delete: %v, want ErrorNotFound", err)
		}
		if err := i.RunNow(ctx, "jobs", "k1"); err != nil {
			t.Fatal(err)
		}
		if err := i.RunNow(ctx, "jobs", "nokey"); !errors.Is(err, ErrorNotFound) {
			t.Fatalf("RunNow of a missing key: %v", err)
		}
		ready = listAll(t, i, "jobs", ListOptions{State: StateReady})
		if got := strings.Join(payloads(ready), ","); got != "r3,bad,r2,keyed" {
			t.Fatalf("ready after the actions: %s", got)
		}
		if ready[3].Key != "k1" {
			t.Fatalf("a keyed item in ready shows as %+v", ready[3])
		}
		if err := i.Cancel(ctx, "jobs", "k1"); err != nil {
			t.Fatal(err)
		}
		if n, err := i.Purge(ctx, "jobs", StateReady); err != nil || n != 3 {
			t.Fatalf("Purge ready: %d %v, want 3", n, err)
		}
		for _, h := range held {
			if err := h.Ack(); err != nil {
				t.Fatal(err)
			}
		}
		qi, err := i.Queue(ctx, "jobs")
		if err != nil {
			t.Fatal(err)
		}
		want := QueueInfo{Name: "jobs", Connections: 1, Published: 7, Acked: 2, Rejects: 1, Retried: 1, GroupConcurrency: DefaultGroupConcurrency}
		if qi != want {
			t.Fatalf("Queue: %+v\nwant   %+v", qi, want)
		}
		hist, err := i.History(ctx, "jobs", 10*time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		var pub int64
		for _, p := range hist {
			pub += p.Published
		}
		if len(hist) != 10 || pub != 7 {
			t.Fatalf("history: %d points, %d published; want 10, 7", len(hist), pub)
		}
	})
}

// Bad input gets an *ArgumentError naming the field; an unknown queue an
// error matching ErrorNotFound.
func TestInspectorBadInput(t *testing.T) {
	b := backend{name: "miniredis", client: realOrMini(t)}
	ctx := context.Background()
	ns := namespace()
	c := openT(t, b, "c", ns)
	openQueue(t, c, "q")
	i := newInspectorT(t, b, ns)
	arg := func(what string, err error, field string) {
		t.Helper()
		var ae *ArgumentError
		if !errors.As(err, &ae) || ae.Arg != field {
			t.Fatalf("%s: %v, want an *ArgumentError for %s", what, err, field)
		}
	}
	_, err := i.List(ctx, "q", ListOptions{State: "nope"})
	arg("state", err, "state")
	_, err = i.List(ctx, "q", ListOptions{State: StateReady, Limit: 1001})
	arg("limit", err, "limit")
	_, err = i.List(ctx, "q", ListOptions{State: StateReady, Limit: -1})
	arg("limit", err, "limit")
	_, err = i.List(ctx, "q", ListOptions{State: StateReady, Cursor: "zzz"})
	arg("cursor", err, "cursor")
	_, err = i.List(ctx, "bad name", ListOptions{State: StateReady})
	arg("queue", err, "queue name")
	_, err = i.Delivery(ctx, "q", "xyz")
	arg("id", err, "id")
	err = i.Delete(ctx, "q", "00")
	arg("id", err, "id")
	_, err = i.Purge(ctx, "q", "all")
	arg("purge state", err, "state")
	if _, err := i.Queue(ctx, "missing"); !errors.Is(err, ErrorNotFound) {
		t.Fatalf("unknown queue: %v", err)
	}
	if err := i.Pause(ctx, "missing"); !errors.Is(err, ErrorNotFound) {
		t.Fatalf("pause of an unknown queue: %v", err)
	}
	if _, err := NewInspector(nil); !errors.Is(err, ErrorInvalidArgument) {
		t.Fatalf("nil client: %v", err)
	}
}
