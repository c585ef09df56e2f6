package redq

// A process-level test of TTR leases with a hung consumer: a consumer
// process whose connection stays alive in Redis (its heartbeat TTL is far
// longer than the test) takes deliveries with a lease and is paused with
// SIGSTOP while it holds them. Its leases run out, and another consumer
// gets those deliveries with their attempt counted, while the hung
// connection is never declared dead. When the hung process resumes, its
// late Acks must fail with ErrorLeaseLost and must not touch the deliveries
// that the other consumer now holds. At the end every payload was acked
// exactly once and nothing is left in Redis.
//
// The helper process is this test binary, re-executed with
// REDQ_TEST_HELPER=leasehold (see process_helper_test.go).

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redq/redq/internal/redistest"
)

// procChildLeaseHold consumes with one consumer and a prefetch limit of
// REDQ_TEST_PREFETCH. It keeps the first REDQ_TEST_HOLD deliveries without
// settling them; with the last of them it emits HELD (their payloads,
// comma-separated, and whether all were on their first attempt) and blocks
// the consumer, so that the prefetch buffer refills and stays so. READY
// carries "since", the wall clock (unix ns) before consuming started: no
// lease of this process began earlier.
//
// The parent pauses it (SIGSTOP) until its leases have run out and another
// consumer has the deliveries, resumes it (SIGCONT) and sends ACK. The
// helper then acks every held delivery and reports each result
// (ACKRESULT), unblocks its consumer, waits a little for deliveries handed
// out late (whatever it prefetched has run out its lease too; each is
// reported as LATE, acked and its result reported), stops consuming and
// emits SUMMARY.
func procChildLeaseHold() int {
	want := procEnvInt(procEnvHold, 5)
	prefetch := int64(procEnvInt(procEnvPrefetch, 5))
	cmds := procCommands()

	errs := make(chan error, 1000)
	lost := make(chan struct{})
	go procReportErrors(errs, lost)
	c, q, err := procOpen(errs)
	if err != nil {
		return procFail("%v", err)
	}

	ackResult := func(d Delivery, late bool) {
		err := d.Ack()
		msg := "<nil>"
		if err != nil {
			msg = err.Error()
		}
		procEmit("ACKRESULT", "payload", d.Payload(), "late", late, "ok", err == nil,
			"notfound", errors.Is(err, ErrorNotFound), "leaselost", errors.Is(err, ErrorLeaseLost),
			"connlost", errors.Is(err, ErrorConnectionLost), "msg", msg)
	}

	var mu sync.Mutex
	var held []Message
	late := 0
	release := make(chan struct{})
	consume := func(dd Delivery) {
		d := dd.(Message)
		mu.Lock()
		if len(held) < want {
			held = append(held, d)
			if len(held) < want {
				mu.Unlock()
				return
			}
			payloads := make([]string, len(held))
			first := true
			for i, h := range held {
				payloads[i] = h.Payload()
				first = first && h.Attempts() == 1
			}
			mu.Unlock()
			procEmit("HELD", "held", len(payloads), "payloads", strings.Join(payloads, ","), "first", first)
			<-release
			return
		}
		late++
		mu.Unlock()
		procEmit("LATE", "payload", d.Payload(), "attempts", d.Attempts())
		ackResult(d, true)
	}

	since := time.Now()
	if err := q.StartConsuming(prefetch, 20*time.Millisecond); err != nil {
		return procFail("start consuming: %v", err)
	}
	if _, err := q.AddConsumerFunc("hung", consume); err != nil {
		return procFail("add consumer: %v", err)
	}
	procEmit("READY", "conn", c.Name(), "pid", os.Getpid(), "since", since.UnixNano())

	for cmd := range cmds {
		if cmd != "ACK" {
			procEmit("UNKNOWN", "cmd", cmd)
			continue
		}
		mu.Lock()
		mine := append([]Message(nil), held...)
		mu.Unlock()
		for _, d := range mine {
			ackResult(d, false)
		}
		close(release)
		// Give a consumer that hands out deliveries whose lease ran out in
		// the prefetch buffer the chance to do so.
		time.Sleep(300 * time.Millisecond)
		select {
		case <-c.StopAllConsuming():
		case <-time.After(20 * time.Second):
			return procFail("StopAllConsuming did not finish within 20s")
		}
		lostSeen := false
		select {
		case <-lost:
			lostSeen = true
		default:
		}
		mu.Lock()
		procEmit("SUMMARY", "held", len(held), "late", late, "lostSeen", lostSeen)
		mu.Unlock()
		return 0
	}
	return 0
}

// procLeaseRescuer consumes a queue in this process. Deliveries whose
// payload is in keep (the ones whose lease ran out elsewhere) are kept, and
// their leases extended with Touch, until ackHeld; all others are acked at
// once.
type procLeaseRescuer struct {
	conn *redisConnection
	errs chan error

	mu        sync.Mutex
	got       map[string][]procLeaseReceipt
	acked     map[string]int
	held      []Message
	failures  []string // failed Acks and Touches
	connErrs  []string // from the error channel
	stopTouch chan struct{}
	touchDone chan struct{}
	stopOnce  sync.Once
}

type procLeaseReceipt struct {
	attempts int
	at       time.Time
}

func startProcLeaseRescuer(t *testing.T, client redis.UniversalClient, ns, queue string, ttr time.Duration, keep map[string]bool) *procLeaseRescuer {
	t.Helper()
	r := &procLeaseRescuer{
		errs:      make(chan error, 1000),
		got:       map[string][]procLeaseReceipt{},
		acked:     map[string]int{},
		stopTouch: make(chan struct{}),
		touchDone: make(chan struct{}),
	}
	go func() {
		for err := range r.errs {
			r.mu.Lock()
			r.connErrs = append(r.connErrs, err.Error())
			r.mu.Unlock()
		}
	}()
	c, err := openConn(client, "rescuer", r.errs, WithNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	r.conn = c
	t.Cleanup(func() {
		r.stopTouching()
		r.stop(t)
	})
	q := openQueue(t, c, queue)
	if err := q.StartConsuming(20, 20*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 4; i++ {
		if _, err := q.AddConsumerFunc("rescue", func(dd Delivery) {
			d := dd.(Message)
			r.mu.Lock()
			r.got[d.Payload()] = append(r.got[d.Payload()], procLeaseReceipt{d.Attempts(), time.Now()})
			if keep[d.Payload()] {
				r.held = append(r.held, d)
				r.mu.Unlock()
				return
			}
			r.mu.Unlock()
			err := d.Ack()
			r.mu.Lock()
			defer r.mu.Unlock()
			if err != nil {
				r.failures = append(r.failures, fmt.Sprintf("ack %s: %v", d.Payload(), err))
				return
			}
			r.acked[d.Payload()]++
		}); err != nil {
			t.Fatal(err)
		}
	}
	go func() {
		defer close(r.touchDone)
		tick := time.NewTicker(ttr / 10)
		defer tick.Stop()
		for {
			select {
			case <-r.stopTouch:
				return
			case <-tick.C:
			}
			r.mu.Lock()
			held := append([]Message(nil), r.held...)
			r.mu.Unlock()
			for _, d := range held {
				if err := d.Touch(context.Background()); err != nil {
					r.mu.Lock()
					r.failures = append(r.failures, fmt.Sprintf("touch %s: %v", d.Payload(), err))
					r.mu.Unlock()
				}
			}
		}
	}()
	return r
}

func (r *procLeaseRescuer) counts() (acked, held int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.acked), len(r.held)
}

func (r *procLeaseRescuer) stopTouching() {
	r.stopOnce.Do(func() { close(r.stopTouch) })
	<-r.touchDone
}

// ackHeld stops touching and acks the deliveries kept so far.
func (r *procLeaseRescuer) ackHeld() {
	r.stopTouching()
	r.mu.Lock()
	held := r.held
	r.held = nil
	r.mu.Unlock()
	for _, d := range held {
		err := d.Ack()
		r.mu.Lock()
		if err != nil {
			r.failures = append(r.failures, fmt.Sprintf("ack held %s: %v", d.Payload(), err))
		} else {
			r.acked[d.Payload()]++
		}
		r.mu.Unlock()
	}
}

func (r *procLeaseRescuer) stop(t testing.TB) {
	t.Helper()
	select {
	case <-r.conn.StopAllConsuming():
	case <-time.After(20 * time.Second):
		t.Errorf("StopAllConsuming of %s did not finish within 20s", r.conn.Name())
	}
}

// TestProcessLeaseOfStoppedConsumerGoesToAnother: a consumer process takes
// deliveries with a TTR and hangs (SIGSTOP) while it holds them; its
// heartbeat TTL is a minute, so its connection stays alive in Redis
// throughout. Once the leases ran out, the deliveries go back to ready with
// their attempt counted, and a consumer here gets every one of them, on its
// second attempt and not before the lease could have run out:
//   - fetch: no cleaner runs; the rescuer's own fetches return the leases;
//   - cleaner: a cleaner running every 50ms returns them, to the front of
//     ready, before the rescuer starts, and goes on running while it works.
//
// Neither declares the hung connection dead. When the hung process
// resumes, each of its Acks fails with ErrorLeaseLost (not
// ErrorConnectionLost), nothing it prefetched is handed to its consumer,
// and the rescuer's hold of those deliveries is untouched: its own Acks
// succeed afterwards. Every payload is acked exactly once and nothing is
// left in Redis.
func TestProcessLeaseOfStoppedConsumerGoesToAnother(t *testing.T) {
	t.Parallel() // own redis-server or cluster; see docs/testing.md
	for _, how := range []string{"fetch", "cleaner"} {
		t.Run(how, func(t *testing.T) { procLeaseScenario(t, how == "cleaner") })
	}
}

func procLeaseScenario(t *testing.T, withCleaner bool) {
	const (
		n        = 200
		hold     = 5
		prefetch = 10
		ttr      = time.Second
		queue    = "jobs"
		// Redis counts leases in whole ms of its clock (the same clock as
		// ours: one machine), so a lease may end up to 1ms before its TTR
		// by our reckoning.
		slack = 10 * time.Millisecond
	)
	srv := redistest.Start(t)
	client := srv.Client(t)
	ns := procNamespace(t)
	admin, err := openConn(client, "admin", nil, WithNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { <-admin.StopAllConsuming() })
	pq, err := admin.OpenQueue(queue, WithPublishDefaults(TTR(ttr)))
	if err != nil {
		t.Fatal(err)
	}
	payloads := procPayloads("job", n)
	procPublish(t, pq, payloads)
	keys := newQueueKeys(ns, queue)

	// The hung consumer: its connection stays alive for a minute.
	env := procEnv(srv, ns, queue, "hung")
	env[procEnvHold] = strconv.Itoa(hold)
	env[procEnvPrefetch] = strconv.Itoa(prefetch)
	env[procEnvHBInterval] = "100ms"
	env[procEnvHBTTL] = "60s"
	hung := startProcHelper(t, "leasehold", env)
	ready := hung.await("READY", procReadyTimeout, nil)
	hungConn := ready.get("conn")
	sinceNS, err := strconv.ParseInt(ready.get("since"), 10, 64)
	if err != nil {
		t.Fatalf("READY without since: %s", ready.raw)
	}
	// No lease of the hung process began before since, so none may run out
	// before leaseFloor.
	leaseFloor := time.Unix(0, sinceNS).Add(ttr - slack)
	heldMsg := hung.await("HELD", 60*time.Second, nil)
	heldPayloads := strings.Split(heldMsg.get("payloads"), ",")
	if len(heldPayloads) != hold || !heldMsg.bool("first") {
		t.Fatalf("the hung consumer holds %v (first attempts: %v), want %d on their first attempt", heldPayloads, heldMsg.get("first"), hold)
	}
	// Its consumer is blocked: its fetch loop refills the prefetch buffer
	// until the connection holds its prefetch limit (what its consumer
	// holds counts), and then waits for room that never comes. Hang it
	// once it got there, so that it holds deliveries in both places.
	const buffered = prefetch - hold
	procWait(t, 10*time.Second, "the hung consumer's prefetch buffer to fill", func() bool {
		return mustStats(t, admin, queue).QueueStats[queue].Connections[hungConn].UnackedCount >= hold+buffered
	}, func() string { return procQueueState(admin, queue) })
	hung.signal(syscall.SIGSTOP)

	// What the hung connection took: what it holds plus its prefetch
	// buffer. Anything it sent just before the pause is run by Redis all
	// the same: give it a moment, then read the connection's storage.
	time.Sleep(200 * time.Millisecond)
	stored, err := client.HVals(context.Background(), keys.unacked(hungConn)).Result()
	if err != nil {
		t.Fatal(err)
	}
	took := map[string]bool{}
	for _, s := range stored {
		e, _ := decodeEnvelope(s)
		took[e.payload] = true
	}
	for _, p := range heldPayloads {
		if !took[p] {
			t.Fatalf("%s, held by the hung consumer, is not in its storage (it has %v)", p, procKeys(took))
		}
	}
	k := int64(len(took))
	if k < hold+buffered || k > hold+prefetch {
		t.Fatalf("the hung connection took %d deliveries; with %d held and a prefetch limit of %d, want %d..%d",
			k, hold, prefetch, hold+buffered, hold+prefetch)
	}
	st := mustStats(t, admin, queue).QueueStats[queue]
	if cs := st.Connections[hungConn]; !cs.Active || cs.UnackedCount != k || st.ReadyCount != n-k {
		t.Fatalf("after the pause, with %d taken: %s", k, procQueueState(admin, queue))
	}
	t.Logf("the hung consumer holds %d and prefetched %d; paused", hold, k-hold)

	// The cleaner variant: a cleaner returns the leases, and nobody else
	// could have: the hung process is paused and no one else consumes yet.
	var cleanMu sync.Mutex
	var cleaned int64
	var cleanErrs []error
	var firstReturnEnd time.Time
	haltCleaner := func() {}
	if withCleaner {
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			tick := time.NewTicker(50 * time.Millisecond)
			defer tick.Stop()
			cl := NewCleaner(admin)
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				got, err := cl.Clean()
				end := time.Now()
				cleanMu.Lock()
				cleaned += got
				if got > 0 && firstReturnEnd.IsZero() {
					firstReturnEnd = end
				}
				if err != nil {
					cleanErrs = append(cleanErrs, err)
				}
				cleanMu.Unlock()
			}
		}()
		haltCleaner = sync.OnceFunc(func() { close(stop); <-done })
		t.Cleanup(haltCleaner)
		cleanedSoFar := func() int64 {
			cleanMu.Lock()
			defer cleanMu.Unlock()
			return cleaned
		}

		procWait(t, 20*time.Second, "the cleaner to return the lost leases", func() bool {
			st := mustStats(t, admin, queue).QueueStats[queue]
			return st.Connections[hungConn].UnackedCount == 0 && st.ReadyCount == n
		}, func() string { return fmt.Sprintf("cleaned %d; %s", cleanedSoFar(), procQueueState(admin, queue)) })
		// Redis shows the return before the Clean call that made it has
		// returned its count to the cleaner's goroutine.
		deadline := time.Now().Add(5 * time.Second)
		for cleanedSoFar() < k && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		cleanMu.Lock()
		if cleaned != k {
			t.Errorf("the cleaner returned %d deliveries, the hung connection's leases were on %d", cleaned, k)
		}
		if firstReturnEnd.Before(leaseFloor) {
			t.Errorf("the cleaner returned leases %v after the hung consumer started, before their TTR %v could run out",
				firstReturnEnd.Sub(time.Unix(0, sinceNS)).Round(time.Millisecond), ttr)
		}
		cleanMu.Unlock()
		// They went back to the front of ready: they are taken next.
		front, err := client.LRange(context.Background(), keys.ready, -k, -1).Result()
		if err != nil {
			t.Fatal(err)
		}
		var notFront []string
		for _, s := range front {
			if e, _ := decodeEnvelope(s); !took[e.payload] {
				notFront = append(notFront, e.payload)
			}
		}
		if len(notFront) > 0 {
			t.Errorf("the returned deliveries are not at the front of ready: it starts with %v", notFront)
		}
	}
	if cs, ok := mustStats(t, admin, queue).QueueStats[queue].Connections[hungConn]; !ok || !cs.Active {
		t.Fatalf("the hung connection is no longer registered as alive: %s", procQueueState(admin, queue))
	}

	// The rescuer acks what the hung connection never took and keeps
	// (touching their leases) what it took.
	rescuer := startProcLeaseRescuer(t, client, ns, queue, ttr, took)
	procWait(t, 20*time.Second, "the rescuer to ack the rest and get what the hung consumer took", func() bool {
		acked, held := rescuer.counts()
		return acked >= n-int(k) && held >= int(k)
	}, func() string {
		acked, held := rescuer.counts()
		return fmt.Sprintf("rescuer acked %d and holds %d; %s", acked, held, procQueueState(admin, queue))
	})

	rescuer.mu.Lock()
	for _, p := range payloads {
		rs := rescuer.got[p]
		if len(rs) != 1 {
			t.Errorf("the rescuer got %s %d times, want once", p, len(rs))
			continue
		}
		switch r := rs[0]; {
		case took[p] && r.attempts != 2:
			t.Errorf("%s, whose lease ran out with the hung consumer, came with Attempts() = %d, want 2", p, r.attempts)
		case took[p] && r.at.Before(leaseFloor):
			t.Errorf("%s reached the rescuer %v after the hung consumer started, before its TTR %v could run out",
				p, r.at.Sub(time.Unix(0, sinceNS)).Round(time.Millisecond), ttr)
		case !took[p] && r.attempts != 1:
			t.Errorf("%s, never taken before, came with Attempts() = %d, want 1", p, r.attempts)
		}
	}
	rescuer.mu.Unlock()
	st = mustStats(t, admin, queue).QueueStats[queue]
	if cs, ok := st.Connections[hungConn]; !ok || !cs.Active || cs.UnackedCount != 0 ||
		st.Connections[rescuer.conn.Name()].UnackedCount != k || st.ReadyCount != 0 || st.RejectedCount != 0 {
		t.Fatalf("with the rescuer holding the %d deliveries: %s", k, procQueueState(admin, queue))
	}

	// Wake the hung consumer: its acks come too late.
	hung.signal(syscall.SIGCONT)
	hung.send("ACK")
	summary := hung.await("SUMMARY", 30*time.Second, nil)
	if code := hung.wait(20 * time.Second); code != 0 {
		t.Errorf("the hung consumer exited with %d", code)
	}
	var results, lateResults []procMsg
	for _, r := range hung.all("ACKRESULT") {
		if r.bool("late") {
			lateResults = append(lateResults, r)
		} else {
			results = append(results, r)
		}
	}
	if len(results) != hold {
		t.Errorf("the hung consumer reported %d ack results, want %d", len(results), hold)
	}
	for _, r := range results {
		if r.bool("ok") || !r.bool("notfound") || !r.bool("leaselost") || r.bool("connlost") {
			t.Errorf("the hung consumer's late ack of %s: %s (ErrorNotFound %v, ErrorLeaseLost %v, ErrorConnectionLost %v); "+
				"want an error matching ErrorNotFound and ErrorLeaseLost, not ErrorConnectionLost",
				r.get("payload"), r.get("msg"), r.bool("notfound"), r.bool("leaselost"), r.bool("connlost"))
		}
	}
	if late := hung.all("LATE"); len(late) > 0 || summary.int("late") != 0 || len(lateResults) > 0 {
		t.Errorf("the hung consumer was handed deliveries whose lease ran out in its prefetch buffer: %v, acks %v (summary %s)",
			late, lateResults, summary.raw)
	}
	for _, e := range hung.all("ERROR") {
		if e.bool("lost") {
			t.Errorf("the hung connection was declared dead: %s", e.raw)
		}
	}
	if summary.bool("lostSeen") {
		t.Errorf("the hung connection's error channel got ErrorConnectionLost")
	}
	if errs := hung.all("ERROR"); len(errs) > 0 {
		t.Logf("the hung consumer's error channel got (after the pause): %v", errs)
	}

	// The late acks (and the hung consumer's stop, which hands back its
	// prefetch buffer) left the rescuer's hold alone.
	st = mustStats(t, admin, queue).QueueStats[queue]
	if st.Connections[rescuer.conn.Name()].UnackedCount != k || st.ReadyCount != 0 || st.RejectedCount != 0 {
		t.Fatalf("after the hung consumer's late acks, the rescuer should still hold %d: %s", k, procQueueState(admin, queue))
	}
	rescuer.ackHeld()
	rescuer.stop(t)
	haltCleaner()

	rescuer.mu.Lock()
	if len(rescuer.failures) > 0 {
		t.Errorf("the rescuer's acks or touches failed: %v", rescuer.failures)
	}
	if len(rescuer.connErrs) > 0 {
		t.Errorf("the rescuer's error channel got %v", rescuer.connErrs)
	}
	ackedSet := map[string]bool{}
	for p, c := range rescuer.acked {
		ackedSet[p] = true
		if c != 1 {
			t.Errorf("the rescuer acked %s %d times", p, c)
		}
	}
	rescuer.mu.Unlock()
	if withCleaner {
		cleanMu.Lock()
		if len(cleanErrs) > 0 {
			t.Errorf("cleaner errors: %v", cleanErrs)
		}
		if cleaned != k {
			t.Errorf("in all the cleaner returned %d deliveries, want the %d of the hung consumer", cleaned, k)
		}
		cleanMu.Unlock()
	}
	// The hung consumer acked nothing (all its results are failures, checked
	// above): the rescuer's acks are all there is.
	procCoverage(t, payloads, nil, 0, ackedSet)
	if len(ackedSet) != n {
		t.Errorf("acked %d distinct payloads, want %d", len(ackedSet), n)
	}
	if st := mustStats(t, admin, queue).QueueStats[queue]; st.DelayedCount != 0 || st.ExpiredCount != 0 {
		t.Errorf("delayed %d, expired %d; want none", st.DelayedCount, st.ExpiredCount)
	}
	procWantEmpty(t, client, admin, ns, queue)
}
