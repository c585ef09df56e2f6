package redq

import (
	"context"
	"testing"
	"time"

	"github.com/redq/redq/internal/redistest"
)

// A busy queue's slot is migrated to another master step by step (key by
// key, as redis-cli --cluster reshard does in batches) while publishers
// and consumers work on it and on a queue that stays put: nothing is lost,
// nothing is consumed twice beyond what was in flight, consumers of the
// queue that stays put keep going during the move and those of both after
// it, and the connection is never declared dead.
func TestClusterResharding(t *testing.T) {
	t.Parallel() // own redis-server or cluster; see docs/testing.md
	cl := redistest.StartCluster(t, redistest.WithReplicas(0))
	ctx := context.Background()
	b := backend{name: "cluster", client: cl.Client(t)}
	ns := namespace()
	moved, from := pickQueue(t, cl, "rs-moved", func(*redistest.Server) bool { return true })
	stays, _ := pickQueue(t, cl, "rs-stays", func(s *redistest.Server) bool { return s != from })
	masters, err := cl.Masters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var to *redistest.Server
	for _, m := range masters {
		if m != from {
			to = m
			break
		}
	}
	queues := []string{moved, stays}
	tr := startTraffic(t, b, ns, queues, 2*time.Millisecond)
	t.Cleanup(func() { <-tr.pub.StopAllConsuming(); <-tr.sub.StopAllConsuming() })
	admin := openT(t, b, "admin", ns)
	if _, err := tr.resumed(time.Now(), 15*time.Second); err != nil {
		t.Fatalf("before the migration: %v", err)
	}

	slot, err := cl.Slot(ctx, "{"+moved+"}")
	if err != nil {
		t.Fatal(err)
	}
	m, err := cl.BeginMigration(ctx, slot, to)
	if err != nil {
		t.Fatal(err)
	}
	steps := 0
	for {
		n, err := m.MoveKeys(ctx, 1)
		if err != nil {
			t.Fatalf("step %d: %v", steps, err)
		}
		if n == 0 {
			break
		}
		steps++
		// The queue that stays put keeps being consumed while the slot is
		// split. (The moved queue's scripts get TRYAGAIN meanwhile: Redis
		// refuses a multi-key command whose keys are on both nodes, and
		// redq sends it again until they are on one.)
		if _, err := tr.resumedOn([]string{stays}, time.Now(), 15*time.Second); err != nil {
			t.Fatalf("after moving %d keys: %v; errors: %v", steps, err, tr.someErrors(5))
		}
	}
	if err := m.Finish(ctx); err != nil {
		t.Fatal(err)
	}
	finished := time.Now()
	res, err := tr.resumed(finished, 15*time.Second)
	if err != nil {
		t.Fatalf("after the migration: %v", err)
	}
	t.Logf("moved %s's slot %d from %s to %s key by key (%d keys); first acks after: %v", moved, slot, from.Addr(), to.Addr(), steps, res)
	if err := tr.lostConnection(); err != nil {
		t.Fatal(err)
	}
	published, lost, dups := tr.finish(60 * time.Second)
	tr.mu.Lock()
	maybe, ackErrs := len(tr.maybe), tr.ackErrs
	tr.mu.Unlock()
	t.Logf("published %d (and %d with an unknown outcome), lost %d, duplicated %d, failed acks %d", published, maybe, lost, dups, ackErrs)
	if lost != 0 {
		t.Fatalf("%d of %d published deliveries were never consumed", lost, published)
	}
	if dups > len(queues)*int(tr.prefetch) {
		t.Fatalf("%d duplicates, more than the deliveries in flight", dups)
	}
	<-tr.pub.StopAllConsuming()
	<-tr.sub.StopAllConsuming()
	if _, err := NewCleaner(admin).Clean(); err != nil {
		t.Fatal(err)
	}
	for _, q := range queues {
		wantCounts(t, admin, q, 0, 0, 0)
	}
}
