package redq

import (
	"context"
	"errors"
	"runtime"
	"sort"
	"testing"
	"time"
)

// A queue name {group}rest puts the queue in group's slot; braces used any
// other way are refused at open, since they would spread the queue's keys
// over slots or give it another queue's keys.
func TestQueueNameSlotGroups(t *testing.T) {
	c := NewTestConnection()
	for _, bad := range []string{"{}x", "{a", "{a}", "{a}b}c", "{a}{b}c", "a{b}", "{a:b}c", "a}", "{a b}c"} {
		if _, err := c.OpenQueue(bad); !errors.Is(err, ErrorInvalidArgument) {
			t.Errorf("OpenQueue(%q): %v, want ErrorInvalidArgument", bad, err)
		}
	}
	for _, good := range []string{"{orders}retry", "{orders}a.b-c", "orders"} {
		if _, err := c.OpenQueue(good); err != nil {
			t.Errorf("OpenQueue(%q): %v", good, err)
		}
	}
	// every key of a grouped queue is in the group's slot, the plain queue
	// named like the group too, and no two queues share a key
	slot := keySlot("{orders}")
	seen := map[string]string{}
	for _, name := range []string{"orders", "{orders}a", "{orders}ab", "{orders}b", "a"} {
		k := newQueueKeys("ns", name)
		all := append(append([]string{}, k.block...), k.connKeys("c1")...)
		all = append(all, k.published("c1", "p1"))
		for _, key := range all {
			if name != "a" && keySlot(key) != slot {
				t.Errorf("%s: key %s is in slot %d, not the group's %d", name, key, keySlot(key), slot)
			}
			if other, dup := seen[key]; dup {
				t.Errorf("key %s belongs to %s and %s", key, other, name)
			}
			seen[key] = name
		}
	}
}

// SetPushQueueSameSlot takes a push queue in the same slot and refuses one
// in another with ErrorCrossSlot, keeping the push queue it had.
func TestSetPushQueueSameSlot(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		c := openT(t, b, "colo", namespace())
		q := openQueue(t, c, "orders")
		retry := openQueue(t, c, "{orders}retry")
		other := openQueue(t, c, "other")
		if keySlot(q.keys.ready) == keySlot(other.keys.ready) {
			t.Fatal("test queues share a slot")
		}
		if err := q.SetPushQueueSameSlot(retry); err != nil {
			t.Fatal(err)
		}
		if err := q.SetPushQueueSameSlot(other); !errors.Is(err, ErrorCrossSlot) {
			t.Fatalf("cross-slot push queue: %v, want ErrorCrossSlot", err)
		}
		if err := q.Publish("p"); err != nil {
			t.Fatal(err)
		}
		if err := take(t, q, 1)[0].Push(); err != nil {
			t.Fatal(err)
		}
		if got, _ := retry.Drain(10); len(got) != 1 || got[0] != "p" {
			t.Fatalf("the push queue holds %v; want [p] (the refused one must not replace it)", got)
		}
		if got, _ := other.Drain(10); len(got) != 0 {
			t.Fatalf("the refused queue got %v", got)
		}
		if err := q.SetPushQueueSameSlot(nil); err != nil {
			t.Fatal(err)
		}
		tq := NewTestConnection()
		a, b2 := tq.GetQueue("orders"), tq.GetQueue("other")
		if err := a.SetPushQueueSameSlot(b2); !errors.Is(err, ErrorCrossSlot) {
			t.Fatalf("test double: %v, want ErrorCrossSlot", err)
		}
		if err := a.SetPushQueueSameSlot(tq.GetQueue("{orders}x")); err != nil {
			t.Fatalf("test double, same group: %v", err)
		}
	})
}

// outbox returns the takes staged in q's outbox.
func outbox(t *testing.T, q *redisQueue) []string {
	t.Helper()
	f, err := q.conn.client.HKeys(context.Background(), q.keys.outbox).Result()
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// The staged move (forced on, as between cluster slots): Push lands each
// delivery in the push queue once, plain and keyed, single and batch, and
// leaves nothing staged.
func TestStagedPushLandsOnce(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		c := openT(t, b, "stage", namespace())
		c.forceStaged = true
		q := openQueue(t, c, "work")
		dst := openQueue(t, c, "failed")
		q.SetPushQueue(dst)
		if err := q.Publish("1", "2", "3"); err != nil {
			t.Fatal(err)
		}
		ds := take(t, q, 3)
		if err := ds[0].Push(); err != nil {
			t.Fatal(err)
		}
		if errs := (Deliveries{ds[1], ds[2]}).Push(); len(errs) > 0 {
			t.Fatal(errs)
		}
		// a second Push of a pushed delivery finds nothing
		if err := ds[0].Push(); !errors.Is(err, ErrorNotFound) {
			t.Fatalf("second push: %v, want ErrorNotFound", err)
		}
		got, _ := dst.Drain(10)
		sort.Strings(got)
		if len(got) != 3 || got[0] != "1" || got[1] != "2" || got[2] != "3" {
			t.Fatalf("push queue holds %v, want [1 2 3]", got)
		}
		if left := outbox(t, q); len(left) != 0 {
			t.Fatalf("outbox holds %v", left)
		}
		wantCounts(t, c, "work", 0, 0, 0)

		// a keyed delivery pushed on is upserted into the push queue
		mustUpsert(t, q, "k", "v1", Created)
		d := mustTake(t, q, time.Second)
		if err := d.Push(); err != nil {
			t.Fatal(err)
		}
		item := mustLookup(t, dst, "k")
		if !item.Pending || string(item.Payload) != "v1" {
			t.Fatalf("pushed keyed item: %+v", item)
		}
	})
}

// grouped pushes grouped takes of q (a1 and b1; a2 stays pending) to dst
// by Push and a batch Push, and checks that they arrive once, each in its
// group's line in dst, and that their slots in q are free: q hands out a2.
func groupedPush(t *testing.T, c *redisConnection, insp *Inspector, q, dst *redisQueue) {
	t.Helper()
	ctx := context.Background()
	putGroup(t, c, q.name, "a", "a1", "a2")
	putGroup(t, c, q.name, "b", "b1")
	ds := take(t, q, 2)
	if err := ds[0].Push(); err != nil {
		t.Fatal(err)
	}
	if errs := (Deliveries{ds[1]}).Push(); len(errs) > 0 {
		t.Fatal(errs)
	}
	if err := ds[0].Push(); !errors.Is(err, ErrorNotFound) {
		t.Fatalf("second push: %v, want ErrorNotFound", err)
	}
	if left := outbox(t, q); len(left) != 0 {
		t.Fatalf("outbox holds %v", left)
	}
	for _, g := range []string{"a", "b"} {
		if n := inFlight(t, q, g); n != 0 {
			t.Fatalf("group %s of the source has %d in flight after the push, want 0", g, n)
		}
	}
	p, err := insp.List(ctx, dst.name, ListOptions{State: StateReady})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, d := range p.Items {
		if _, dup := got[string(d.Payload)]; dup {
			t.Fatalf("%s is twice in the push queue", d.Payload)
		}
		got[string(d.Payload)] = d.Group
	}
	if len(got) != 2 || got["a1"] != "a" || got["b1"] != "b" {
		t.Fatalf("the push queue holds %v (payload: group), want a1: a, b1: b", got)
	}
	for _, g := range []string{"a", "b"} {
		if ok, err := c.client.HExists(ctx, dst.keys.gidx(), g).Result(); err != nil || !ok {
			t.Fatalf("group %s has no line in the push queue: %v", g, err)
		}
	}
	// the source's slot of a is free: a2 is handed out
	if d := mustTake(t, q, 5*time.Second); d.Payload() != "a2" {
		t.Fatalf("the source handed out %q, want a2", d.Payload())
	} else if err := d.Ack(); err != nil {
		t.Fatal(err)
	}
	moved := take(t, dst, 2)
	for _, d := range moved {
		if err := d.Ack(); err != nil {
			t.Fatal(err)
		}
	}
	groupsClean(t, q)
	groupsClean(t, dst)
}

// The staged move of grouped takes (forced on, as between cluster slots):
// each lands once in its group's line of the push queue, keeping its
// group, and frees its group's slot in the source.
func TestStagedPushOfGroupedLandsOnce(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ns := namespace()
		c := openT(t, b, "stage", ns)
		c.forceStaged = true
		q := openQueue(t, c, "work")
		dst := openQueue(t, c, "failed")
		q.SetPushQueue(dst)
		if !c.stagesPush(q, dst) {
			t.Fatal("the push does not stage")
		}
		groupedPush(t, c, newInspectorT(t, b, ns), q, dst)
	})
}

// A pusher that stops between step 1 and step 2 (here its goroutine ends
// there, as a process killed there would) leaves the delivery staged: in
// no queue, but in Redis. A cleaner finishes the move, and the move
// applied again (a pusher or cleaner resending step 2) does not land twice.
func TestStagedPushFinishedByCleanerAfterCrash(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ns := namespace()
		c := openT(t, b, "crash", ns)
		c.forceStaged = true
		c.afterStage = runtime.Goexit
		q := openQueue(t, c, "work")
		dst := openQueue(t, c, "failed")
		q.SetPushQueue(dst)
		if err := q.Publish("a", "b"); err != nil {
			t.Fatal(err)
		}
		ds := take(t, q, 2)
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = ds[0].Push() // ends in afterStage
			t.Error("Push went past step 1")
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("push did not reach step 1's end")
		}
		staged := outbox(t, q)
		if len(staged) != 1 {
			t.Fatalf("outbox holds %v, want the one delivery", staged)
		}
		if n := mustStats(t, c, "failed").QueueStats["failed"].ReadyCount; n != 0 {
			t.Fatalf("push queue has %d before the cleaner", n)
		}
		wantCounts(t, c, "work", 0, 0, 1) // "b" still held, "a" only staged
		c.afterStage = nil

		admin := openT(t, b, "admin", ns)
		if _, err := NewCleaner(admin).Clean(); err != nil {
			t.Fatal(err)
		}
		if left := outbox(t, q); len(left) != 0 {
			t.Fatalf("outbox after clean: %v", left)
		}
		// step 2 sent again for the same take (as a late pusher would)
		n, err := scripts.moveApply.Run(context.Background(), c.client, dst.keys.block0(), q.name, staged[0], "\x01late-resend----x").Int64()
		if err != nil || n != 0 {
			t.Fatalf("step 2 again: applied %d, %v; want 0", n, err)
		}
		got, _ := dst.Drain(10)
		if len(got) != 1 || got[0] != "a" {
			t.Fatalf("push queue holds %v, want [a] once", got)
		}
	})
}

// Destroy finishes the moves staged in the queue's outbox before it
// unlists the queue (no cleaner would finish them after that).
func TestDestroyFinishesStagedMoves(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		c := openT(t, b, "destroy", namespace())
		c.forceStaged = true
		c.afterStage = runtime.Goexit
		q := openQueue(t, c, "work")
		dst := openQueue(t, c, "failed")
		q.SetPushQueue(dst)
		if err := q.Publish("x"); err != nil {
			t.Fatal(err)
		}
		d := take(t, q, 1)[0]
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = d.Push()
		}()
		<-done
		if len(outbox(t, q)) != 1 {
			t.Fatal("nothing staged")
		}
		if _, _, err := q.Destroy(); err != nil {
			t.Fatal(err)
		}
		if got, _ := dst.Drain(10); len(got) != 1 || got[0] != "x" {
			t.Fatalf("push queue holds %v, want [x]", got)
		}
	})
}

// A lease can only be ended by a call that declares its connection's
// storage. With more connections holding expired leases than one call
// declares (maxOthers), one Clean still returns every delivery: it comes
// back for the connections the script names, round after round.
func TestCleanReturnsLeasesOfManyConnections(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ns := namespace()
		clock := &redisClock{b: b}
		clock.freeze()
		ttr := time.Minute
		if b.mini == nil {
			ttr = 200 * time.Millisecond
		}
		const holders = maxOthers + 5
		admin := openT(t, b, "admin", ns)
		q := openQueue(t, admin, "jobs")
		for i := 0; i < holders; i++ {
			mustPut(t, q, "p", TTR(ttr))
		}
		for i := 0; i < holders; i++ {
			hq := openQueue(t, openT(t, b, "holder", ns), "jobs")
			take(t, hq, 1)
		}
		clock.advance(ttr + time.Second)
		n, err := NewCleaner(admin).Clean()
		if err != nil {
			t.Fatal(err)
		}
		if n != holders {
			t.Fatalf("clean returned %d, want %d", n, holders)
		}
		wantCounts(t, admin, "jobs", holders, 0, 0)
	})
}
