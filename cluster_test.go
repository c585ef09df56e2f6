package redq

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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
	t.Parallel() // own redis-server or cluster; see docs/testing.md
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

// BenchmarkClusterThroughput publishes b.N deliveries over three queues
// (in batches of 100) and consumes them with ten consumers per queue, on
// a single redis-server and on the shared cluster (3 masters, the queues
// on different masters), in the same run: compare their deliveries/s.
func BenchmarkClusterThroughput(b *testing.B) {
	for _, be := range []backend{{name: "single", client: realClient(b)}, clusterBackend(b)} {
		b.Run(be.name, func(b *testing.B) {
			ns := namespace()
			c, err := openConn(be.client, "tput", nil, ns)
			if err != nil {
				b.Fatal(err)
			}
			defer func() { <-c.StopAllConsuming() }()
			var names []string
			if be.name == "cluster" {
				cl := sharedCluster(b)
				var used []*redistest.Server
				for i := 0; i < 3; i++ {
					name, m := pickQueue(b, cl, fmt.Sprintf("tput%d", i), func(s *redistest.Server) bool {
						for _, u := range used {
							if u == s {
								return false
							}
						}
						return true
					})
					used = append(used, m)
					names = append(names, name)
				}
			} else {
				names = []string{"tput0", "tput1", "tput2"}
			}
			var consumed atomic.Int64
			queues := make([]Queue, len(names))
			for i, name := range names {
				q, err := c.OpenQueue(name)
				if err != nil {
					b.Fatal(err)
				}
				queues[i] = q
				if err := q.StartConsuming(100, 100*time.Millisecond); err != nil {
					b.Fatal(err)
				}
				for j := 0; j < 10; j++ {
					if _, err := q.AddConsumerFunc("c", func(d Delivery) {
						if d.Ack() == nil {
							consumed.Add(1)
						}
					}); err != nil {
						b.Fatal(err)
					}
				}
			}
			batch := make([]string, 100)
			for i := range batch {
				batch[i] = "payload-" + strconv.Itoa(i)
			}
			b.ResetTimer()
			start := time.Now()
			var wg sync.WaitGroup
			for i, q := range queues {
				n := b.N / len(queues)
				if i == 0 {
					n += b.N % len(queues)
				}
				wg.Add(1)
				go func(q Queue, n int) {
					defer wg.Done()
					for n > 0 {
						k := min(n, len(batch))
						if err := q.Publish(batch[:k]...); err != nil {
							b.Error(err)
							return
						}
						n -= k
					}
				}(q, n)
			}
			wg.Wait()
			deadline := time.Now().Add(2 * time.Minute)
			for consumed.Load() < int64(b.N) {
				if time.Now().After(deadline) {
					b.Fatalf("consumed %d of %d", consumed.Load(), b.N)
				}
				time.Sleep(time.Millisecond)
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "deliveries/s")
		})
	}
}

// Large publishes to queues in different slots, at the same time, share a
// flush; on a cluster each slot gets its own transaction, so none fails
// with CROSSSLOT.
func TestClusterConcurrentLargePublishes(t *testing.T) {
	b := clusterBackend(t)
	c := openT(t, b, "bigpub", namespace())
	cl := sharedCluster(t)
	first, m := pickQueue(t, cl, "bigpub-a", func(*redistest.Server) bool { return true })
	second, _ := pickQueue(t, cl, "bigpub-b", func(s *redistest.Server) bool { return s != m })
	payloads := make([]string, 3*pushScriptMax)
	for i := range payloads {
		payloads[i] = "p" + strconv.Itoa(i)
	}
	const rounds = 30
	var wg sync.WaitGroup
	errs := make(chan error, 2*rounds)
	for _, name := range []string{first, second} {
		q := openQueue(t, c, name)
		for i := 0; i < rounds; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs <- q.Publish(payloads...)
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{first, second} {
		wantCounts(t, c, name, rounds*int64(len(payloads)), 0, 0)
	}
}
