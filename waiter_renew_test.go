package redq

import (
	"context"
	"strconv"
	"testing"
	"time"
)

// An idle wait runs on a connection of its own. When Redis drops that
// connection (a restart, a failover, a CLIENT KILL), the wait in progress
// may fail, but the next ones work again on a new connection.
func TestWaiterRecoversWhenItsConnectionIsDropped(t *testing.T) {
	c := realClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	w := newWaiter(c, "waiter-renew-"+strconv.FormatInt(nsCounter.Add(1), 10), true)
	defer w.close()
	if err := w.wait(ctx, 5*time.Millisecond, false); err != nil {
		t.Fatal(err)
	}
	idOf := func() int64 {
		if t := w.target.Load(); t != nil {
			return t.id
		}
		return 0
	}
	old := idOf()
	if old == 0 {
		t.Fatal("the waiter did not learn its connection's CLIENT ID")
	}
	if err := c.ClientKillByFilter(ctx, "ID", strconv.FormatInt(old, 10)).Err(); err != nil {
		t.Fatal(err)
	}
	failed := 0
	for i := 0; i < 4; i++ {
		if err := w.wait(ctx, 5*time.Millisecond, false); err != nil {
			failed++
			t.Logf("wait %d after the kill: %v", i, err)
		}
	}
	if failed > 1 {
		t.Fatalf("%d of 4 waits after the connection was dropped failed; want at most the first", failed)
	}
	if id := idOf(); id == 0 || id == old {
		t.Fatalf("CLIENT ID after the kill = %d, want a new one (was %d)", id, old)
	}
}
