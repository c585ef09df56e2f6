package redq

import (
	"context"
	"sort"
	"testing"
	"time"
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
	_ = context.Background()
}
