package redq

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/redq/redq/internal/redistest"
)

// On a cluster, an idle consumer's blocked wait is on a connection of the
// key's master whose id is known, so StopConsuming ends it at once: it does
// not wait out the poll duration.
func TestClusterStopConsumingInterruptsWait(t *testing.T) {
	b := clusterBackend(t)
	c := openT(t, b, "stopwait", namespace())
	q := openQueue(t, c, "stopwait-q")
	const poll = 20 * time.Second
	if err := q.StartConsuming(10, poll); err != nil {
		t.Fatal(err)
	}
	if _, err := q.AddConsumerFunc("c", func(d Delivery) { _ = d.Ack() }); err != nil {
		t.Fatal(err)
	}
	waitBlocked(t, q)
	if took := waitStopped(t, "StopConsuming", q.StopConsuming()); took > poll/2 {
		t.Fatalf("StopConsuming took %v: it waited for the idle wait (%v) to time out", took, poll)
	}
}

// waitBlocked waits until q's fetch loop waits on a dedicated connection
// that can be interrupted.
func waitBlocked(t testing.TB, q *redisQueue) {
	t.Helper()
	eventually(t, "the fetch loop to wait", func() bool {
		q.mu.Lock()
		w := q.waiter
		q.mu.Unlock()
		return w != nil && w.target.Load() != nil
	})
	time.Sleep(50 * time.Millisecond) // let the BLMOVE reach Redis
}

// TestStopConsumingTime measures how long StopConsuming of an idle
// consumer takes, on a single node and on a cluster; it reports and
// asserts nothing. Run it with -v to read the medians.
func TestStopConsumingTime(t *testing.T) {
	for _, b := range []backend{{name: "single", client: realClient(t)}, clusterBackend(t)} {
		var took []time.Duration
		for i := 0; i < 5; i++ {
			c := openT(t, b, "stoptime", namespace())
			q := openQueue(t, c, "stoptime-q")
			if err := q.StartConsuming(10, 10*time.Second); err != nil {
				t.Fatal(err)
			}
			waitBlocked(t, q)
			took = append(took, waitStopped(t, "StopConsuming", q.StopConsuming()))
		}
		sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
		t.Logf("StopConsuming of an idle consumer on %s: median %v (min %v, max %v)", b.name, took[2], took[0], took[4])
	}
}

// pickQueue returns a queue name of the form prefix-<i> whose slot is
// served by a master for which ok holds.
func pickQueue(t testing.TB, cl *redistest.Cluster, prefix string, ok func(*redistest.Server) bool) (string, *redistest.Server) {
	t.Helper()
	ctx := context.Background()
	for i := 0; i < 1000; i++ {
		name := fmt.Sprintf("%s-%d", prefix, i)
		m, err := cl.MasterFor(ctx, "{"+name+"}")
		if err != nil {
			t.Fatal(err)
		}
		if ok(m) {
			return name, m
		}
	}
	t.Fatalf("no queue name %s-<i> fits", prefix)
	return "", nil
}

// nsName is the namespace an Option sets.
func nsName(ns Option) string {
	var o options
	_ = ns(&o)
	return o.namespace
}

// With one master down, Clean cleans the queues on the masters that
// answer and names the one it could not clean, with its node, in an error
// that matches ErrorUnavailable; once the master is back, the next Clean
// cleans it. The cluster has no replicas (and keeps serving the slots it
// still covers), so that no failover races the first Clean, and
// appendfsync always, so that the master comes back with its data.
func TestClusterCleanPerNode(t *testing.T) {
	cl := redistest.StartCluster(t, redistest.WithReplicas(0),
		redistest.WithNodeArgs("--cluster-require-full-coverage", "no", "--appendonly", "yes", "--appendfsync", "always"))
	ctx := context.Background()
	b := backend{name: "cluster", client: cl.Client(t)}
	ns := namespace()
	global, err := cl.MasterFor(ctx, "{"+nsName(ns)+"}")
	if err != nil {
		t.Fatal(err)
	}
	down, downNode := pickQueue(t, cl, "clean-down", func(s *redistest.Server) bool { return s != global })
	up, _ := pickQueue(t, cl, "clean-up", func(s *redistest.Server) bool { return s != downNode })

	dead, err := openConn(b.client, "dead", nil, ns)
	if err != nil {
		t.Fatal(err)
	}
	admin := openT(t, b, "admin", ns)
	for _, name := range []string{down, up} {
		q := openQueue(t, dead, name)
		if err := q.Publish("a", "b", "c"); err != nil {
			t.Fatal(err)
		}
		take(t, q, 3)
	}
	pause(t, b, dead)

	downNode.Kill()
	n, err := NewCleaner(admin).Clean()
	var ce *CleanError
	if !errors.As(err, &ce) || !errors.Is(err, ErrorUnavailable) || ce.Global != nil || len(ce.Queues) != 1 || ce.Queues[down] == nil {
		t.Fatalf("clean with %s down: %d, %v; want a CleanError naming %q only, matching ErrorUnavailable", downNode.Addr(), n, err, down)
	}
	if ce.Nodes[down] != downNode.Addr() || !strings.Contains(err.Error(), downNode.Addr()) {
		t.Fatalf("the error names node %q, want %s: %v", ce.Nodes[down], downNode.Addr(), err)
	}
	if n != 3 {
		t.Fatalf("clean with %s down returned %d, want the 3 of %q", downNode.Addr(), n, up)
	}
	wantCounts(t, admin, up, 3, 0, 0)

	if err := downNode.Relaunch(); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := cl.WaitHealthy(wctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a clean with every master back", func() bool {
		n, err = NewCleaner(admin).Clean()
		return err == nil
	})
	if n != 3 {
		t.Fatalf("clean with every master back returned %d, want the 3 of %q", n, down)
	}
	wantCounts(t, admin, down, 3, 0, 0)
}
