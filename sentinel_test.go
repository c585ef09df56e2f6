package redq

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redq/redq/internal/redistest"
)

// sentinelLedger records what a failover test's publishers and consumers
// were told.
type sentinelLedger struct {
	mu        sync.Mutex
	published map[string]bool  // Publish returned nil
	unknown   map[string]bool  // Publish returned ErrorOutcomeUnknown
	refused   map[string]error // Publish returned another error: nothing was done
	consumed  map[string]int   // times handed to a consumer
	acked     map[string]int   // times Ack returned nil
	ackFailed map[string][]error
	firstAt   map[string]time.Time // when a payload was first consumed
	pubAt     map[string]time.Time // when its Publish returned nil
}

func newSentinelLedger() *sentinelLedger {
	return &sentinelLedger{
		published: map[string]bool{}, unknown: map[string]bool{}, refused: map[string]error{},
		consumed: map[string]int{}, acked: map[string]int{}, ackFailed: map[string][]error{},
		firstAt: map[string]time.Time{}, pubAt: map[string]time.Time{},
	}
}

func (l *sentinelLedger) publishedOne(p string, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case err == nil:
		l.published[p] = true
		l.pubAt[p] = time.Now()
	case errors.Is(err, ErrorOutcomeUnknown):
		l.unknown[p] = true
	default:
		l.refused[p] = err
	}
}

func (l *sentinelLedger) consumedOne(p string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.consumed[p]++
	if _, ok := l.firstAt[p]; !ok {
		l.firstAt[p] = time.Now()
	}
}

func (l *sentinelLedger) ackedOne(p string, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err == nil {
		l.acked[p]++
		return
	}
	l.ackFailed[p] = append(l.ackFailed[p], err)
}

// allAcked reports whether every payload whose Publish returned nil, or
// whose outcome is unknown but that was consumed, has been acked.
func (l *sentinelLedger) allAcked() (bool, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	missing := 0
	for p := range l.published {
		if l.acked[p] == 0 {
			missing++
		}
	}
	for p := range l.unknown {
		if l.consumed[p] > 0 && l.acked[p] == 0 {
			missing++
		}
	}
	return missing == 0, missing
}

// gate holds publishers and consumers while closed, and counts the calls
// they have in flight, so a test can quiesce the writes it counts.
type gate struct {
	mu       sync.Mutex
	cond     *sync.Cond
	closed   bool
	inFlight int
}

func newGate() *gate {
	g := &gate{}
	g.cond = sync.NewCond(&g.mu)
	return g
}

// enter waits while the gate is closed and counts a call in flight.
func (g *gate) enter() {
	g.mu.Lock()
	for g.closed {
		g.cond.Wait()
	}
	g.inFlight++
	g.mu.Unlock()
}

func (g *gate) leave() {
	g.mu.Lock()
	g.inFlight--
	g.cond.Broadcast()
	g.mu.Unlock()
}

// close stops new calls and waits until those in flight have returned.
func (g *gate) close() {
	g.mu.Lock()
	g.closed = true
	for g.inFlight > 0 {
		g.cond.Wait()
	}
	g.mu.Unlock()
}

func (g *gate) open() {
	g.mu.Lock()
	g.closed = false
	g.cond.Broadcast()
	g.mu.Unlock()
}

// TestSentinelFailoverLosesNothing runs publishers, consumers and a batch
// consumer on a Sentinel failover client while the master
// is SIGKILLed and the sentinels promote the replica. Consuming resumes by
// itself; every publish that returned nil is acked, nothing is acked twice,
// a payload is consumed again only after an ack that did not return nil,
// a publish refused outright is never consumed, and nothing is left in
// Redis. Right before the kill the writes are quiesced and the replica
// made to acknowledge them (WAIT 1): what asynchronous replication may
// lose at a failover is not what this test counts.
//
// It runs with redis.NewFailoverClient and with
// redis.NewFailoverClusterClient (default options: every command to the
// master), each on a Sentinel setup of its own, side by side: the test
// mostly waits for the sentinels.
func TestSentinelFailoverLosesNothing(t *testing.T) {
	skipShort(t, "starts a Sentinel setup and fails its master over")
	t.Run("FailoverClient", func(t *testing.T) {
		t.Parallel()
		s := redistest.StartSentinel(t)
		sentinelFailoverScenario(t, s, s.FailoverClient(t))
	})
	t.Run("FailoverClusterClient", func(t *testing.T) {
		t.Parallel()
		s := redistest.StartSentinel(t)
		c := redis.NewFailoverClusterClient(s.FailoverOptions())
		t.Cleanup(func() { _ = c.Close() })
		sentinelFailoverScenario(t, s, c)
	})
}

func sentinelFailoverScenario(t *testing.T, s *redistest.Sentinel, client redis.UniversalClient) {
	errs := make(chan error, 1000)
	bg := &errorLog{}
	stopLog := make(chan struct{})
	logDone := make(chan struct{})
	go func() { defer close(logDone); bg.collect(errs, stopLog) }()
	t.Cleanup(func() { close(stopLog); <-logDone })
	ns := procNamespace(t)
	c, err := openConn(client, "sentinel", errs, WithNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { <-c.StopAllConsuming() })
	const queue = "jobs"
	q := openQueue(t, c, queue)
	const pollDuration = 200 * time.Millisecond
	if err := q.StartConsuming(20, pollDuration); err != nil {
		t.Fatal(err)
	}

	l := newSentinelLedger()
	g := newGate()
	handle := func(d Message) {
		p := d.Payload()
		l.consumedOne(p)
		g.enter()
		l.ackedOne(p, d.Ack())
		g.leave()
	}
	for i := 0; i < 3; i++ {
		if _, err := q.AddConsumerFunc(fmt.Sprintf("w%d", i), func(d Delivery) { handle(d.(Message)) }); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := q.AddBatchConsumerFunc("batch", 5, 20*time.Millisecond, func(ds Deliveries) {
		for _, d := range ds {
			l.consumedOne(d.Payload())
		}
		g.enter()
		errs := ds.Ack()
		g.leave()
		for i, d := range ds {
			l.ackedOne(d.Payload(), errs[i])
		}
	}); err != nil {
		t.Fatal(err)
	}

	var stopPub atomic.Bool
	var pubWG sync.WaitGroup
	for p := 0; p < 2; p++ {
		pubWG.Add(1)
		go func() {
			defer pubWG.Done()
			for i := 0; !stopPub.Load(); i++ {
				payload := fmt.Sprintf("p%d-%d", p, i)
				g.enter()
				err := q.Publish(payload)
				g.leave()
				l.publishedOne(payload, err)
				time.Sleep(2 * time.Millisecond)
			}
		}()
	}
	stopPublishers := sync.OnceFunc(func() { stopPub.Store(true); pubWG.Wait() })
	t.Cleanup(func() { g.open(); stopPublishers() })

	time.Sleep(500 * time.Millisecond)
	// Quiesce the counted writes and have the replica acknowledge them.
	g.close()
	time.Sleep(50 * time.Millisecond) // let the fetch loop fill its buffer and settle
	s.WaitReplicated(t, 5*time.Second)
	old := s.KillMaster(t)
	killedAt := time.Now()
	g.open()
	newMaster := s.WaitFailover(t, old, 20*time.Second)
	promotedAfter := time.Since(killedAt)

	// Publishing and consuming go on through the new master.
	var resumedAfter time.Duration
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				_, missing := l.allAcked()
				t.Fatalf("timed out waiting for %s (%d published deliveries not acked); the error channel said:\n%s",
					what, missing, bg.since(killedAt.Add(-time.Second)))
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
	waitFor("a delivery published after the kill consumed", func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		for p, at := range l.pubAt {
			if at.After(killedAt) && l.consumed[p] > 0 {
				resumedAfter = l.firstAt[p].Sub(killedAt)
				return true
			}
		}
		return false
	})
	time.Sleep(300 * time.Millisecond)
	stopPublishers()
	waitFor("every published delivery acked", func() bool {
		ok, _ := l.allAcked()
		return ok
	})
	t.Logf("failover %s -> %s: promoted %v after the SIGKILL, a delivery published after it consumed %v after it",
		old, newMaster, promotedAfter.Round(time.Millisecond), resumedAfter.Round(time.Millisecond))

	// Once idle after the failover, consuming reports no more errors: the
	// idle wait works on the new master.
	time.Sleep(2 * pollDuration)
	idleFrom := time.Now()
	time.Sleep(5 * pollDuration)
	if late := bg.since(idleFrom); late != "" {
		t.Errorf("errors on the error channel while idle after the failover:\n%s", late)
	}

	l.mu.Lock()
	var lost, twice, dup []string
	for p := range l.published {
		if l.acked[p] == 0 {
			lost = append(lost, p)
		}
	}
	for p, n := range l.acked {
		if n > 1 {
			twice = append(twice, p)
		}
	}
	dups := 0
	for p, n := range l.consumed {
		if n > 1 {
			dups++
			if n-1 > len(l.ackFailed[p]) {
				dup = append(dup, p)
			}
		}
	}
	var consumedRefused []string
	for p, err := range l.refused {
		if !errors.Is(err, ErrorUnavailable) && !errors.Is(err, ErrorWritesRefused) {
			t.Errorf("publish %s: unexpected error %v", p, err)
		}
		if l.consumed[p] > 0 {
			consumedRefused = append(consumedRefused, p)
		}
	}
	ackErrs := 0
	for _, e := range l.ackFailed {
		ackErrs += len(e)
	}
	t.Logf("published %d (+%d unknown, %d refused), consumed %d payloads, %d of them again; %d ack errors",
		len(l.published), len(l.unknown), len(l.refused), len(l.consumed), dups, ackErrs)
	l.mu.Unlock()
	sort.Strings(lost)
	if len(lost) > 0 {
		t.Errorf("%d published deliveries lost, e.g. %v", len(lost), lost[:min(len(lost), 10)])
	}
	if len(twice) > 0 {
		t.Errorf("%d deliveries acked twice, e.g. %v", len(twice), twice[:min(len(twice), 10)])
	}
	if len(dup) > 0 {
		t.Errorf("%d deliveries consumed again although every earlier ack returned nil, e.g. %v", len(dup), dup[:min(len(dup), 10)])
	}
	if len(consumedRefused) > 0 {
		t.Errorf("%d deliveries consumed whose publish said nothing was done, e.g. %v", len(consumedRefused), consumedRefused[:min(len(consumedRefused), 10)])
	}
	if c.isStopped() {
		t.Fatal("the connection stopped during the failover")
	}
	<-c.StopAllConsuming()
	admin, err := openConn(client, "admin", nil, WithNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { <-admin.StopAllConsuming() })
	procWantEmpty(t, client, admin, ns, queue)
}

// errorLog keeps what a connection's error channel said, and when.
type errorLog struct {
	mu   sync.Mutex
	at   []time.Time
	errs []error
}

// collect logs what ch says until stop is closed.
func (e *errorLog) collect(ch <-chan error, stop <-chan struct{}) {
	for {
		select {
		case err := <-ch:
			e.mu.Lock()
			e.at = append(e.at, time.Now())
			e.errs = append(e.errs, err)
			e.mu.Unlock()
		case <-stop:
			return
		}
	}
}

// since returns the errors logged from t on, one a line, or "".
func (e *errorLog) since(t time.Time) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var b strings.Builder
	for i, at := range e.at {
		if !at.Before(t) {
			fmt.Fprintf(&b, "  %s %v\n", at.Format("15:04:05.000"), e.errs[i])
		}
	}
	return b.String()
}
