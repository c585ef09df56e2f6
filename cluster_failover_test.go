package redq

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redq/redq/internal/redistest"
)

// traffic publishes to and consumes from a set of queues of one
// connection each, counting what was published (Publish returned nil),
// what may have been (its outcome is unknown) and what was consumed, so a
// test can say what was lost and what came twice.
type traffic struct {
	t        testing.TB
	pub, sub *redisConnection
	queues   []string
	errs     chan error

	mu        sync.Mutex
	published map[string]bool      // payload -> Publish returned nil
	maybe     map[string]bool      // payload -> outcome unknown
	seen      map[string]int       // payload -> times consumed
	started   map[string]time.Time // payload -> when its Publish was called
	// watch and first measure a resumption (see resumedOn): first holds,
	// per queue, the first ack of a delivery published after watch.
	watch   time.Time
	first   map[string]time.Time
	ackErrs int

	stop     chan struct{}
	wg       sync.WaitGroup
	prefetch int64
}

// startTraffic opens a publishing and a consuming connection on client in
// ns and starts publishing (one payload per queue every interval) and
// consuming (acking each delivery).
func startTraffic(t testing.TB, b backend, ns Option, queues []string, interval time.Duration) *traffic {
	t.Helper()
	tr := &traffic{t: t, queues: queues, errs: make(chan error, 10000),
		published: map[string]bool{}, maybe: map[string]bool{}, seen: map[string]int{},
		started: map[string]time.Time{}, first: map[string]time.Time{},
		stop: make(chan struct{}), prefetch: 10}
	var err error
	if tr.pub, err = openConn(b.client, "pub", nil, ns); err != nil {
		t.Fatal(err)
	}
	if tr.sub, err = openConn(b.client, "sub", tr.errs, ns); err != nil {
		t.Fatal(err)
	}
	for _, name := range queues {
		name := name
		sq := openQueue(t, tr.sub, name)
		if err := sq.StartConsuming(tr.prefetch, 100*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		if _, err := sq.AddConsumerFunc("c", func(d Delivery) {
			p := d.Payload()
			err := d.Ack()
			tr.mu.Lock()
			defer tr.mu.Unlock()
			tr.seen[p]++
			if err == nil {
				now := time.Now()
				if _, ok := tr.first[name]; !ok && tr.started[p].After(tr.watch) {
					tr.first[name] = now
				}
			} else {
				tr.ackErrs++
			}
		}); err != nil {
			t.Fatal(err)
		}
		pq := openQueue(t, tr.pub, name)
		tr.wg.Add(1)
		go func() {
			defer tr.wg.Done()
			tick := time.NewTicker(interval)
			defer tick.Stop()
			for i := 0; ; i++ {
				select {
				case <-tr.stop:
					return
				case <-tick.C:
				}
				p := name + ":" + strconv.Itoa(i)
				tr.mu.Lock()
				tr.started[p] = time.Now()
				tr.mu.Unlock()
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				err := pq.PublishContext(ctx, p)
				cancel()
				tr.mu.Lock()
				if err == nil {
					tr.published[p] = true
				} else {
					tr.maybe[p] = true
				}
				tr.mu.Unlock()
			}
		}()
	}
	return tr
}

// watchFrom starts measuring a resumption from since (see resumedOn).
func (tr *traffic) watchFrom(since time.Time) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.watch.Equal(since) {
		return // already watching: keep what came
	}
	tr.watch = since
	tr.first = map[string]time.Time{}
}

// resumed waits until every queue had a delivery published after since
// consumed and acked, and returns how long after since the first of each
// queue came.
func (tr *traffic) resumed(since time.Time, bound time.Duration) (map[string]time.Duration, error) {
	return tr.resumedOn(tr.queues, since, bound)
}

// resumedOn is resumed for some of the queues. (An ack that was on its way
// when since came does not count: the delivery must be published after
// since.)
func (tr *traffic) resumedOn(queues []string, since time.Time, bound time.Duration) (map[string]time.Duration, error) {
	tr.watchFrom(since)
	out := map[string]time.Duration{}
	deadline := time.Now().Add(bound)
	for len(out) < len(queues) {
		tr.mu.Lock()
		for _, q := range queues {
			if at, ok := tr.first[q]; ok {
				out[q] = at.Sub(since)
			}
		}
		tr.mu.Unlock()
		if len(out) == len(queues) {
			break
		}
		if time.Now().After(deadline) {
			return out, fmt.Errorf("consuming did not resume on every queue within %v: %v", bound, out)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return out, nil
}

// finish stops publishing, waits until every published payload was
// consumed and returns the numbers lost (published, never consumed) and
// duplicated (consumed more than once).
func (tr *traffic) finish(bound time.Duration) (published, lost, dups int) {
	close(tr.stop)
	tr.wg.Wait()
	deadline := time.Now().Add(bound)
	for {
		tr.mu.Lock()
		lost, dups = 0, 0
		for p := range tr.published {
			if tr.seen[p] == 0 {
				lost++
			}
		}
		for _, n := range tr.seen {
			if n > 1 {
				dups += n - 1
			}
		}
		published = len(tr.published)
		tr.mu.Unlock()
		if lost == 0 || time.Now().After(deadline) {
			return published, lost, dups
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// someErrors returns up to n errors of the error channel, for a failure's
// message.
func (tr *traffic) someErrors(n int) []error {
	var out []error
	for len(out) < n {
		select {
		case err := <-tr.errs:
			out = append(out, err)
		default:
			return out
		}
	}
	return out
}

// lostConnection reports whether the consuming connection was declared
// dead or stopped.
func (tr *traffic) lostConnection() error {
	if tr.sub.isStopped() {
		return errors.New("the consuming connection stopped or was declared dead")
	}
	for {
		select {
		case err := <-tr.errs:
			if errors.Is(err, ErrorConnectionLost) {
				return err
			}
		default:
			return nil
		}
	}
}

// failoverRounds is how many masters TestClusterFailover kills one after
// the other: 2, or REDQ_CLUSTER_FAILOVERS to measure more.
func failoverRounds(t testing.TB) int {
	if s := os.Getenv("REDQ_CLUSTER_FAILOVERS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("REDQ_CLUSTER_FAILOVERS=%q: want a positive number", s)
		}
		return n
	}
	return 2
}

// A master of a busy cluster is SIGKILLed (first the one that holds the
// global keys: the connections set and heartbeats, then another), with
// go-redis's default ClusterOptions; publishers and consumers on three
// queues (one in each master's slots, one of them in the global keys'
// slot) go on by themselves once its replica took over: nothing is lost,
// duplicates are at most what consumers held, the connection is never
// declared dead, and nothing is left in Redis at the end. The test logs
// the time from each SIGKILL to consuming resumed on every queue.
func TestClusterFailover(t *testing.T) {
	t.Parallel() // own redis-server or cluster; see docs/testing.md
	cl := redistest.StartCluster(t)
	ctx := context.Background()
	b := backend{name: "cluster", client: cl.Client(t)}
	ns := namespace()
	global, err := cl.MasterFor(ctx, "{"+nsName(ns)+"}")
	if err != nil {
		t.Fatal(err)
	}
	// The first queue shares the global keys' slot (same hash tag); the
	// others are on the two other masters.
	q0 := nsName(ns)
	q1, m1 := pickQueue(t, cl, "fo-a", func(s *redistest.Server) bool { return s != global })
	q2, _ := pickQueue(t, cl, "fo-b", func(s *redistest.Server) bool { return s != global && s != m1 })
	queues := []string{q0, q1, q2}
	tr := startTraffic(t, b, ns, queues, 2*time.Millisecond)
	t.Cleanup(func() { <-tr.pub.StopAllConsuming(); <-tr.sub.StopAllConsuming() })

	// A cleaner runs meanwhile, as in production: it must not declare the
	// consuming connection dead.
	admin := openT(t, b, "admin", ns)
	cleanStop := make(chan struct{})
	cleanDone := make(chan struct{})
	go func() {
		defer close(cleanDone)
		for {
			select {
			case <-cleanStop:
				return
			case <-time.After(500 * time.Millisecond):
			}
			_, _ = NewCleaner(admin).Clean()
		}
	}()

	if _, err := tr.resumed(time.Now(), 15*time.Second); err != nil {
		t.Fatalf("before any failover: %v", err)
	}
	var took []time.Duration
	for round := 0; round < failoverRounds(t); round++ {
		key := "{" + q0 + "}"
		if round%2 == 1 {
			key = "{" + q1 + "}"
		}
		victim, err := cl.MasterFor(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(300 * time.Millisecond) // traffic in flight
		killed := time.Now()
		tr.watchFrom(killed)
		victim.Kill()
		res, err := tr.resumed(killed, 60*time.Second)
		if err != nil {
			t.Fatalf("round %d (killed %s, the master of %s): %v", round, victim.Addr(), key, err)
		}
		slowest := time.Duration(0)
		for _, d := range res {
			slowest = max(slowest, d)
		}
		took = append(took, slowest)
		t.Logf("round %d: killed %s (master of %s); consuming resumed on every queue %v later (%v)", round, victim.Addr(), key, slowest, res)
		if err := tr.lostConnection(); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		// The killed node comes back as a replica of its successor.
		if err := victim.Relaunch(); err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		err = cl.WaitHealthy(wctx)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}
	sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
	t.Logf("SIGKILL of a master to consuming resumed on every queue, %d failovers: p50 %v, max %v", len(took), took[len(took)/2], took[len(took)-1])

	published, lost, dups := tr.finish(60 * time.Second)
	close(cleanStop)
	<-cleanDone
	tr.mu.Lock()
	maybe, ackErrs := len(tr.maybe), tr.ackErrs
	tr.mu.Unlock()
	t.Logf("published %d (and %d with an unknown outcome), lost %d, duplicated %d, failed acks %d", published, maybe, lost, dups, ackErrs)
	if lost != 0 {
		t.Fatalf("%d of %d published deliveries were never consumed", lost, published)
	}
	// In flight at a kill: what the consumers held (prefetch per queue).
	if limit := len(took) * len(queues) * int(tr.prefetch); dups > limit {
		t.Fatalf("%d duplicates, more than the %d deliveries in flight at the kills", dups, limit)
	}
	if err := tr.lostConnection(); err != nil {
		t.Fatal(err)
	}
	<-tr.pub.StopAllConsuming()
	<-tr.sub.StopAllConsuming()
	eventually(t, "the queues to be empty", func() bool {
		if _, err := NewCleaner(admin).Clean(); err != nil {
			return false
		}
		s, err := admin.CollectStats(queues)
		if err != nil {
			return false
		}
		for _, q := range queues {
			st := s.QueueStats[q]
			if st.ReadyCount != 0 || st.RejectedCount != 0 || st.UnackedCount() != 0 {
				return false
			}
		}
		return true
	})
}
