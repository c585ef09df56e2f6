package redq

import (
	"context"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// Helpers of the rmq_compat_*_test.go files. Those files port rmq v5's own
// tests (queue_test.go, stats_test.go, cleaner_test.go, header_test.go and
// the test doubles' tests) to redq: each test checks what rmq's test of the
// same name checks, through redq's exported API, with rmq's expectations.
// rmq's tests read counts through unexported queue methods (readyCount,
// unackedCount, rejectedCount); the helpers here read the same numbers
// through CollectStats. Where rmq's test asserts on its unexported
// internals or its key layout, the test says what it left out and why.

// rmqOpen opens a connection as rmq's tests do, with rmq's constructor on
// a go-redis client, in the namespace ns that the test's connections share,
// and stops it at the end of the test.
func rmqOpen(t *testing.T, b backend, tag string, ns Option) Connection {
	t.Helper()
	open := OpenConnectionWithRedisClient
	if b.name == "cluster" {
		open = OpenClusterConnection // as rmq's queue_cluster_test.go does
	}
	c, err := open(tag, b.client, nil, ns)
	if err != nil {
		t.Fatal(err)
	}
	rmqStopAtEnd(t, c)
	return c
}

// forEachRmqPort runs f on miniredis, the real redis-server and the
// shared Redis Cluster: the tests that rmq v5 runs both on a single node
// (queue_test.go) and on a cluster (queue_cluster_test.go) use it. See
// rmq_compat_cluster_test.go.
func forEachRmqPort(t *testing.T, f func(t *testing.T, b backend)) {
	forEachBackend(t, f)
	onCluster(t, f)
}

// rmqStopAtEnd stops c at the end of the test, bounded so that a consumer
// a failed test left blocked cannot hang the run.
func rmqStopAtEnd(t *testing.T, c Connection) {
	t.Cleanup(func() {
		select {
		case <-c.StopAllConsuming():
		case <-time.After(20 * time.Second):
			t.Errorf("StopAllConsuming of %s did not finish", connName(c))
		}
	})
}

// connName is the connection's full name (tag-<random>), as the stats
// show it.
func connName(c Connection) string { return c.(*redisConnection).Name() }

// connTag is the tag of a full connection name: rmq's and redq's names are
// the tag, a dash and a random part.
func connTag(name string) string {
	if i := strings.LastIndexByte(name, '-'); i >= 0 {
		return name[:i]
	}
	return name
}

// stopHeartbeat is rmq's unexported stopHeartbeat, which rmq's tests call
// to make a connection look dead: its heartbeat stops and its key is
// deleted, and nothing else changes (its consumers and fetching go on, and
// it stays listed until a cleaner runs). Like rmq's, it returns
// ErrorNotFound when the heartbeat key was gone already.
func stopHeartbeat(c Connection) error {
	rc := c.(*redisConnection)
	rc.hbCancel()
	<-rc.hbDone
	n, err := rc.client.Del(context.Background(), rc.keys.heartbeat(rc.Name())).Result()
	if err != nil {
		return err
	}
	if n == 0 {
		return ErrorNotFound
	}
	return nil
}

// queueStat reads the stats of one queue.
func queueStat(t *testing.T, c Connection, queue string) QueueStat {
	t.Helper()
	s, err := c.CollectStats([]string{queue})
	if err != nil {
		t.Fatal(err)
	}
	return s.QueueStats[queue]
}

// rmqCount is what rmq's test helpers count: ready and rejected of the
// queue, and the unacked deliveries of this connection (rmq keeps an
// unacked list per connection and queue, and its unackedCount reads the
// queue handle's own).
type rmqCount int

const (
	countReady rmqCount = iota
	countUnacked
	countRejected
)

func (k rmqCount) String() string { return [...]string{"ready", "unacked", "rejected"}[k] }

func readCount(t *testing.T, c Connection, queue string, k rmqCount) int64 {
	t.Helper()
	s := queueStat(t, c, queue)
	switch k {
	case countReady:
		return s.ReadyCount
	case countRejected:
		return s.RejectedCount
	}
	return s.Connections[connName(c)].UnackedCount
}

// eventuallyCount waits until the count is want, as rmq's eventuallyReady,
// eventuallyUnacked and eventuallyRejected do (with a bound of 10s rather
// than 1s: the machine is shared, and -race is slow).
func eventuallyCount(t *testing.T, c Connection, queue string, k rmqCount, want int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := readCount(t, c, queue, k)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s %s = %d, want %d", queue, k, got, want)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func eventuallyReady(t *testing.T, c Connection, queue string, want int64) {
	t.Helper()
	eventuallyCount(t, c, queue, countReady, want)
}

func eventuallyUnacked(t *testing.T, c Connection, queue string, want int64) {
	t.Helper()
	eventuallyCount(t, c, queue, countUnacked, want)
}

func eventuallyRejected(t *testing.T, c Connection, queue string, want int64) {
	t.Helper()
	eventuallyCount(t, c, queue, countRejected, want)
}

// eventuallyReadyUnacked waits until ready and this connection's unacked
// count are both as wanted in one reading, as rmq's TestMulti does.
func eventuallyReadyUnacked(t *testing.T, c Connection, queue string, wantReady, wantUnacked int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s := queueStat(t, c, queue)
		r, u := s.ReadyCount, s.Connections[connName(c)].UnackedCount
		if r == wantReady && u == wantUnacked {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s ready/unacked = %d/%d, want %d/%d", queue, r, u, wantReady, wantUnacked)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// eventuallyTrue waits for cond, as rmq's assert.Eventually does.
func eventuallyTrue(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// consumedN waits until the consumer got n deliveries. rmq's tests read a
// TestConsumer's deliveries right after checking counts that a fetch into
// the buffer already satisfies, which races with the consumer; waiting for
// the consumer makes the same check without the race.
func consumedN(t *testing.T, consumer *TestConsumer, n int) {
	t.Helper()
	eventuallyTrue(t, "the consumer's deliveries", func() bool { return len(consumer.Deliveries()) == n })
}

// finishAllAtEnd returns a function that releases every Consume of a
// consumer made with AutoFinish false, once, and calls it at the end of
// the test if the test did not (StopConsuming waits for Consume to
// return).
func finishAllAtEnd(t *testing.T, consumer *TestConsumer) func() {
	var once sync.Once
	f := func() { once.Do(consumer.FinishAll) }
	t.Cleanup(f)
	return f
}

// consumingQueues lists the queues among those opened that the stats show
// c as consuming, sorted: rmq's test reads them from the connection's
// queues set (unexported getConsumingQueues), and rmq's stats list a
// connection under exactly those queues.
func consumingQueues(t *testing.T, c Connection) []string {
	t.Helper()
	queues, err := c.GetOpenQueues()
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.CollectStats(queues)
	if err != nil {
		t.Fatal(err)
	}
	out := []string{}
	for name, qs := range s.QueueStats {
		if _, ok := qs.Connections[connName(c)]; ok {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// sortedQueues is GetOpenQueues, sorted (a Redis set has no order; rmq's
// tests compare lists of one element).
func sortedQueues(t *testing.T, c Connection) []string {
	t.Helper()
	queues, err := c.GetOpenQueues()
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(queues)
	return queues
}

func mustNil(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// wantErr checks err == want with ==, as rmq's tests compare errors.
func wantErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if err != want {
		t.Fatalf("%s: err = %v, want %v (compared with ==)", what, err, want)
	}
}
