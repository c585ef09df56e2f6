package redistest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestClusterFailoverAndMigration(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 6-node cluster")
	}
	c := StartCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl := c.Client(t)
	for i := 0; i < 50; i++ {
		if err := cl.Set(ctx, fmt.Sprintf("{a}:%d", i), i, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	masters, err := c.Masters(ctx)
	if err != nil || len(masters) != 3 {
		t.Fatalf("masters: %v %v", masters, err)
	}

	// Move {a}'s slot to another master, in two steps, reading meanwhile.
	slot, err := c.Slot(ctx, "{a}")
	if err != nil {
		t.Fatal(err)
	}
	from, err := c.MasterFor(ctx, "{a}")
	if err != nil {
		t.Fatal(err)
	}
	to := masters[0]
	if to == from {
		to = masters[1]
	}
	m, err := c.BeginMigration(ctx, slot, to)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := m.MoveKeys(ctx, 10); err != nil || n != 10 {
		t.Fatalf("moved %d: %v", n, err)
	}
	for i := 0; i < 50; i++ { // ASK redirections for the moved keys
		if v, err := cl.Get(ctx, fmt.Sprintf("{a}:%d", i)).Int(); err != nil || v != i {
			t.Fatalf("get %d mid-migration: %v %v", i, v, err)
		}
	}
	if err := m.Finish(ctx); err != nil {
		t.Fatal(err)
	}
	if now, err := c.MasterFor(ctx, "{a}"); err != nil || now != to {
		t.Fatalf("after migration {a} is on %v (%v), want %s", now, err, to.Addr())
	}
	if err := c.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}

	// Kill the master of {a}: its replica takes over with the data, once
	// it has it (replication is asynchronous; a loaded machine lags). WAIT
	// counts the replicas that have this connection's writes, so write
	// first, on the same connection: the stream is ordered, so a replica
	// with the write has the migrated keys too.
	var wait *redis.Cmd
	if _, err := to.Client(t).Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, "{a}:synced", 1, 0)
		wait = p.Do(ctx, "WAIT", 1, 10000)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if n, err := wait.Int(); err != nil || n < 1 {
		t.Fatalf("the replica of %s did not catch up: %d %v", to.Addr(), n, err)
	}
	to.Kill()
	promoted, err := c.WaitFailover(ctx, "{a}")
	if err != nil {
		t.Fatal(err)
	}
	if promoted == to {
		t.Fatal("the killed master still serves the slot")
	}
	// A fresh client: go-redis's default options keep the old slot map
	// for a while, which is the library's business, not the harness's.
	cl = c.Client(t)
	for i := 0; i < 50; i++ {
		if v, err := cl.Get(ctx, fmt.Sprintf("{a}:%d", i)).Int(); err != nil || v != i {
			t.Fatalf("get %d after failover: %v %v", i, v, err)
		}
	}
	// The old master comes back as a replica.
	if err := to.Relaunch(); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
	if now, _ := c.MasterFor(ctx, "{a}"); now != promoted {
		t.Fatalf("{a} moved back to %s after the relaunch", now.Addr())
	}
}
