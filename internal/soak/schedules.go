//go:build linux

package soak

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/redq/redq"
)

// The schedules mode (-schedules N): the workers run the loop of one
// schedule set (Schedules.Run) instead of consuming, N schedules tick
// every second into the soak's queue for -duration, and the faults hit the
// loops and Redis. At the end every tick must have been published exactly
// once: no tick lost between a schedule's first tick and its last, none
// published twice, none skipped.

// scheduleSetName is the schedule set of the schedules mode; its ticks go
// to the queue of the same name (soakQueue).
const scheduleSetName = soakQueue

// scheduleTickLimit bounds how long after the schedules were paused the
// ticks already fired may take to reach the queue.
const scheduleTickLimit = 30 * time.Second

// maxSoakSchedules bounds -schedules.
const maxSoakSchedules = 100000

// tickRecord is what the soak found of one tick of one schedule.
type tickRecord struct {
	ids map[string]bool // the delivery ids that carried it
}

// runSchedules is run for the schedules mode, on the soak's connection.
func (s *soak) runSchedules(ctx context.Context, stdout io.Writer) (bool, error) {
	c := s.cfg
	sched, err := s.conn.OpenSchedules(scheduleSetName)
	if err != nil {
		return false, fmt.Errorf("open schedules: %w", err)
	}
	in, err := redq.NewInspector(s.client, redq.WithNamespace(soakNamespace))
	if err != nil {
		return false, err
	}
	ids := make([]string, c.schedules)
	for i := range ids {
		ids[i] = fmt.Sprintf("s%05d", i)
		// every tick that is due is published, whatever the outage
		if err := sched.Upsert(ctx, ids[i], "@every 1s", []byte(ids[i]), redq.ScheduleCatchUp(redq.CatchUpAll(redq.MaxCatchUp))); err != nil {
			return false, fmt.Errorf("upsert schedule %s: %w", ids[i], err)
		}
	}
	first := map[string]time.Time{}
	for _, id := range ids {
		info, err := sched.Lookup(ctx, id)
		if err != nil {
			return false, fmt.Errorf("look up schedule %s: %w", id, err)
		}
		first[id] = info.Next
	}

	runCtx, abort := context.WithCancelCause(ctx)
	defer abort(nil)
	s.abort = abort
	loopCtx, stopLoops := context.WithCancel(runCtx)
	cleanDone := make(chan struct{})
	progressDone := make(chan struct{})
	go func() { defer close(cleanDone); s.cleanLoop(loopCtx) }()
	s.start = time.Now()
	for slot := 0; slot < c.workers; slot++ {
		s.supervisors.Add(1)
		go s.supervise(runCtx)
	}
	// The run (and its faults) begins once every loop runs: the ticks
	// due meanwhile are caught up (CatchUpAll).
	if err := s.waitLoops(runCtx); err != nil {
		abort(err)
	}
	s.start = time.Now()
	go func() { defer close(progressDone); s.scheduleProgress(loopCtx, in) }()
	faultsDone := make(chan error, 1)
	go func() { faultsDone <- s.scheduleFaults(runCtx) }()
	select {
	case <-runCtx.Done():
	case <-time.After(c.duration):
	}
	if err := <-faultsDone; err != nil {
		abort(err)
	}
	// The last fault may end just now (a Redis restart, a loop stopped
	// until declared dead): let the loops come back before the schedules
	// are paused, so that the stall check below judges the loops after
	// the faults, not the last outage itself.
	if runCtx.Err() == nil {
		s.waitLoopsRecovered(runCtx, sched, time.Now(), scheduleRecoverLimit)
	}

	// Stop the schedules (Pause, as an operator would), then wait for
	// every tick fired to reach the queue: a tick staged by a loop that
	// died is moved by a cleaner.
	var paused time.Time
	landed := false
	if runCtx.Err() == nil {
		for _, id := range ids {
			if err := retryFor(runCtx, 10*time.Second, func() error { return sched.Pause(runCtx, id) }); err != nil {
				abort(fmt.Errorf("pause schedule %s: %w", id, err))
				break
			}
		}
		paused = time.Now()
		s.out.Logf("soak %s: paused the %d schedules", s.since(), len(ids))
		landed = s.waitTicksLanded(runCtx, in)
	}
	s.stopWorkers()
	stopLoops()
	<-cleanDone
	<-progressDone
	if err := context.Cause(runCtx); err != nil {
		<-s.conn.StopAllConsuming()
		if errors.Is(err, context.Canceled) && ctx.Err() != nil {
			return false, errors.New("interrupted")
		}
		return false, err
	}
	time.Sleep(c.hbTTL + 100*time.Millisecond)
	s.finalClean(ctx)

	ticks, redelivered, err := s.collectTicks(ctx)
	if err != nil {
		return false, err
	}
	infos := map[string]redq.ScheduleInfo{}
	for _, id := range ids {
		info, err := sched.Lookup(ctx, id)
		if err != nil {
			return false, fmt.Errorf("look up schedule %s: %w", id, err)
		}
		infos[id] = info
	}
	<-s.conn.StopAllConsuming()
	return s.scheduleReport(stdout, ids, first, infos, ticks, redelivered, paused, landed), nil
}

// waitLoops waits up to a minute for -workers loop processes to have
// opened their connection.
func (s *soak) waitLoops(ctx context.Context) error {
	for began := time.Now(); ctx.Err() == nil; time.Sleep(50 * time.Millisecond) {
		s.mu.Lock()
		up := 0
		for _, p := range s.procs {
			if !p.exited() && logConn(p.log) != "" {
				up++
			}
		}
		s.mu.Unlock()
		if up >= s.cfg.workers {
			return nil
		}
		if time.Since(began) > time.Minute {
			return fmt.Errorf("only %d of %d loop processes started within a minute", up, s.cfg.workers)
		}
	}
	return nil
}

// scheduleProgress prints the ticks fired every -progress.
func (s *soak) scheduleProgress(ctx context.Context, in *redq.Inspector) {
	t := time.NewTicker(s.cfg.progressEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		st, err := in.ScheduleSet(cctx, scheduleSetName)
		cancel()
		what := fmt.Sprintf("fired %d ticks (%.0f/s), skipped %d", st.Fired, float64(st.Fired)/time.Since(s.start).Seconds(), st.Skipped)
		if err != nil {
			what = "Redis down"
			if !s.expectingErrors() {
				what = "counts: " + err.Error()
			}
		}
		live, started := s.workerCounts()
		s.mu.Lock()
		done := s.faults.done()
		s.mu.Unlock()
		s.out.Logf("soak %s: %s; %d loops live, %d started; faults %d/%d", s.since(), what, live, started, done,
			s.cfg.kills+s.cfg.sigstops+s.cfg.redisTerms+s.cfg.redisKills)
	}
}

// scheduleFaults carries out the faults, spread evenly over -duration.
func (s *soak) scheduleFaults(ctx context.Context) error {
	c := s.cfg
	rng := rand.New(rand.NewPCG(c.seed, 7))
	plan := faultPlan(c, rng)
	for i, f := range plan {
		at := s.start.Add(c.duration * time.Duration(i+1) / time.Duration(len(plan)+1))
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Until(at)):
		}
		began := s.since()
		var what string
		var err error
		switch f {
		case faultKill:
			what = s.killLoop(ctx, rng)
		case faultSIGSTOP:
			what = s.pauseLoop(ctx, rng)
		case faultRedisTerm, faultRedisKill:
			what, err = s.restartRedis(ctx, rng, f == faultRedisKill)
		}
		if err != nil {
			return err
		}
		s.out.Logf("soak %s: fault %d/%d (from %s): %s", s.since(), i+1, len(plan), began, what)
	}
	return nil
}

// pickLoop chooses a running loop process that has opened its connection,
// waiting up to 10s for one; nil if there is none.
func (s *soak) pickLoop(ctx context.Context, rng *rand.Rand) *soakProc {
	for began := time.Now(); ctx.Err() == nil && time.Since(began) < 10*time.Second; time.Sleep(50 * time.Millisecond) {
		s.mu.Lock()
		var live []*soakProc
		for _, p := range s.procs {
			if !p.exited() && !p.killed && logConn(p.log) != "" {
				live = append(live, p)
			}
		}
		s.mu.Unlock()
		if len(live) > 0 {
			return live[rng.IntN(len(live))]
		}
	}
	return nil
}

// killLoop SIGKILLs a loop process.
func (s *soak) killLoop(ctx context.Context, rng *rand.Rand) string {
	p := s.pickLoop(ctx, rng)
	if p == nil {
		return s.skipFault("no running loop to SIGKILL")
	}
	s.mu.Lock()
	p.killed = true
	s.faults.kills++
	s.mu.Unlock()
	_ = syscall.Kill(p.pid, syscall.SIGKILL)
	return fmt.Sprintf("SIGKILL loop %d (pid %d)", p.index, p.pid)
}

// pauseLoop SIGSTOPs a loop process until its connection was declared dead
// (a cleaner hands the fires it held to the other loops) and at least a
// random time up to -sigstop-max, then SIGCONTs it: it goes on, and what it
// was doing when it stopped must publish nothing twice.
func (s *soak) pauseLoop(ctx context.Context, rng *rand.Rand) string {
	p := s.pickLoop(ctx, rng)
	if p == nil {
		return s.skipFault("no running loop to SIGSTOP")
	}
	conn := logConn(p.log)
	s.mu.Lock()
	p.sigstopped = true
	s.faults.sigstops++
	s.mu.Unlock()
	stopAt := time.Now()
	_ = syscall.Kill(p.pid, syscall.SIGSTOP)
	var least time.Duration
	if s.cfg.sigstopMax > 0 {
		least = time.Duration(rng.Int64N(int64(s.cfg.sigstopMax) + 1))
	}
	dead := false
	for limit := max(10*s.cfg.hbTTL, 10*time.Second, least); time.Since(stopAt) < limit && ctx.Err() == nil; time.Sleep(50 * time.Millisecond) {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		member, err := s.client.SIsMember(cctx, "{"+soakNamespace+"}:connections", conn).Result()
		cancel()
		if err == nil && !member {
			dead = true
			if time.Since(stopAt) >= least {
				break
			}
		}
	}
	paused := time.Since(stopAt)
	s.mu.Lock()
	p.declaredDead, p.contAt = dead, time.Now()
	s.mu.Unlock()
	_ = syscall.Kill(p.pid, syscall.SIGCONT)
	what := fmt.Sprintf("SIGSTOP loop %d (pid %d) for %v", p.index, p.pid, paused.Round(time.Millisecond))
	if !dead {
		return what + ": it was NOT declared dead; SIGCONT"
	}
	return what + " until declared dead; SIGCONT"
}

// waitTicksLanded waits until every tick the schedules fired is in the
// queue (the loops publish a fired tick in a second step).
func (s *soak) waitTicksLanded(ctx context.Context, in *redq.Inspector) bool {
	var fired, queued int64
	for deadline := time.Now().Add(scheduleTickLimit); time.Now().Before(deadline) && ctx.Err() == nil; time.Sleep(100 * time.Millisecond) {
		st, err := in.ScheduleSet(ctx, scheduleSetName)
		if err != nil {
			continue
		}
		q, err := in.Queue(ctx, soakQueue)
		if err != nil {
			continue
		}
		fired, queued = st.Fired, q.Ready+q.Delayed+q.Unacked
		if queued >= fired {
			return true
		}
	}
	s.out.Logf("soak %s: %d ticks fired, %d in the queue after %v", s.since(), fired, queued, scheduleTickLimit)
	return false
}

// collectTicks takes every delivery from the queue and acks it, and
// returns, per schedule and tick, the ids of the deliveries that carried
// it, and how many deliveries were taken more than once.
func (s *soak) collectTicks(ctx context.Context) (map[string]map[string]*tickRecord, int, error) {
	q, err := s.conn.OpenQueue(soakQueue)
	if err != nil {
		return nil, 0, err
	}
	out := map[string]map[string]*tickRecord{}
	taken := map[string]int{}
	redelivered := 0
	for {
		ds, err := q.TakeBatch(ctx, 1000, 0)
		if errors.Is(err, redq.ErrorTimeout) {
			return out, redelivered, nil
		}
		if err != nil {
			return nil, 0, fmt.Errorf("take the ticks: %w", err)
		}
		for _, d := range ds {
			if taken[d.ID()]++; taken[d.ID()] > 1 {
				redelivered++
				continue
			}
			h := d.Header()
			id, tick := h.Get(redq.HeaderSchedule), h.Get(redq.HeaderScheduleTick)
			if out[id] == nil {
				out[id] = map[string]*tickRecord{}
			}
			if out[id][tick] == nil {
				out[id][tick] = &tickRecord{ids: map[string]bool{}}
			}
			out[id][tick].ids[d.ID()] = true
		}
		for i, err := range ds.AckContext(ctx) {
			if err != nil {
				return nil, 0, fmt.Errorf("ack tick %s: %w", ds[i].ID(), err)
			}
		}
	}
}

// scheduleReport checks every schedule's ticks and prints the checks and
// the summary line; it reports whether they passed.
func (s *soak) scheduleReport(stdout io.Writer, ids []string, first map[string]time.Time, infos map[string]redq.ScheduleInfo,
	ticks map[string]map[string]*tickRecord, redelivered int, paused time.Time, landed bool) bool {
	var lost, double, skipped, stalled, wrongFirst, wrongLast, total int64
	var lostEx, doubleEx, otherEx exampleSet
	for _, id := range ids {
		info := infos[id]
		skipped += info.Skipped
		var list []time.Time
		for text, r := range ticks[id] {
			t, err := time.Parse(time.RFC3339, text)
			if err != nil {
				otherEx.add("%s: a delivery carries tick %q", id, text)
				continue
			}
			list = append(list, t)
			if len(r.ids) > 1 {
				double += int64(len(r.ids) - 1)
				doubleEx.add("%s: tick %s published %d times (deliveries %s)", id, text, len(r.ids), strings.Join(sortedIDs(r.ids), ", "))
			}
		}
		total += int64(len(list))
		if info.Fired != int64(len(list)) {
			// a tick fired (counted) and not delivered, or delivered
			// and not counted
			lost += max(info.Fired-int64(len(list)), 0)
			lostEx.add("%s: Fired counts %d ticks, %d delivered", id, info.Fired, len(list))
		}
		if len(list) == 0 {
			stalled++
			otherEx.add("%s: no tick delivered before the schedules were paused", id)
			continue
		}
		sort.Slice(list, func(a, b int) bool { return list[a].Before(list[b]) })
		if !list[0].Equal(first[id]) {
			wrongFirst++
			otherEx.add("%s: first tick delivered %s, its first tick was %s", id, tickString(list[0]), tickString(first[id]))
		}
		for i := 1; i < len(list); i++ {
			if gap := list[i].Sub(list[i-1]); gap != time.Second {
				lost += int64(gap/time.Second) - 1
				lostEx.add("%s: tick %s follows %s: %v of ticks lost", id, tickString(list[i]), tickString(list[i-1]), gap-time.Second)
			}
		}
		last := list[len(list)-1]
		if !last.Equal(info.LastFire) {
			wrongLast++
			otherEx.add("%s: last tick delivered %s, LastFire %s", id, tickString(last), tickString(info.LastFire))
		}
		if d := paused.Sub(last); d > 3*time.Second {
			stalled++
			otherEx.add("%s: last tick %s, %v before the schedules were paused: it stalled", id, tickString(last), d.Round(time.Millisecond))
		}
	}
	for id := range ticks {
		if _, ok := infos[id]; !ok {
			otherEx.add("a tick of an unknown schedule %q", id)
			wrongLast++
		}
	}
	s.mu.Lock()
	faults := s.faults
	started := len(s.procs)
	s.mu.Unlock()
	checks := []soakCheck{
		{name: "no tick lost", ok: lost == 0, detail: fmt.Sprintf("%d lost", lost), examples: lostEx.examples},
		{name: "no tick published twice", ok: double == 0, detail: fmt.Sprintf("%d double", double), examples: doubleEx.examples},
		{name: "no tick skipped (CatchUpAll)", ok: skipped == 0, detail: fmt.Sprintf("%d skipped", skipped)},
		{name: "each schedule's ticks run from its first tick to its last fire, to the pause", ok: wrongFirst+wrongLast+stalled == 0,
			detail: fmt.Sprintf("%d wrong first, %d wrong last or count, %d stalled", wrongFirst, wrongLast, stalled), examples: otherEx.examples},
		{name: "every fired tick reached the queue", ok: landed, detail: map[bool]string{true: "yes", false: "not within " + scheduleTickLimit.String()}[landed]},
	}
	passed := true
	fmt.Fprintf(stdout, "soak: the cleaner returned %d fires and deliveries of dead connections to ready\n", s.cleaned.Load())
	fmt.Fprintln(stdout, "soak: checks")
	for _, ck := range checks {
		mark := "ok  "
		if !ck.ok {
			mark, passed = "FAIL", false
		}
		fmt.Fprintf(stdout, "  %s %s: %s\n", mark, ck.name, ck.detail)
		if !ck.ok {
			for _, e := range ck.examples {
				fmt.Fprintf(stdout, "         %s\n", e)
			}
		}
	}
	verdict := "PASS"
	if !passed {
		verdict = "FAIL"
	}
	fmt.Fprintf(stdout, "soak: schedules=%d ticks=%d lost=%d double=%d skipped=%d stalled=%d redelivered=%d kills=%d sigstops=%d redis_sigterm=%d redis_sigkill=%d loops_started=%d elapsed=%s: %s\n",
		len(ids), total, lost, double, skipped, stalled, redelivered, faults.kills, faults.sigstops, faults.redisTerms, faults.redisKills,
		started, time.Since(s.start).Round(time.Second), verdict)
	return passed
}

func tickString(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z07:00") }

func sortedIDs(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for id := range m {
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}

// runScheduleLoop is a worker of the schedules mode: it runs the loop of
// schedule set name until asked to stop (SIGTERM).
func (w *soakWorker) runScheduleLoop(ctx context.Context, conn redq.Connection, name string) error {
	var sched redq.Schedules
	err := retryFor(ctx, 30*time.Second, func() error {
		var err error
		sched, err = conn.OpenSchedules(name)
		return err
	})
	if err != nil {
		return w.setupFailed(ctx, conn, err)
	}
	done := make(chan error, 1)
	loopCtx, stop := context.WithCancel(context.Background())
	defer stop()
	go func() { done <- sched.Run(loopCtx) }()
	select {
	case <-ctx.Done(): // SIGTERM: the soak asks us to stop
		stop()
		runErr := <-done
		waitClosed(conn.StopAllConsuming(), 30*time.Second)
		w.log.event(lineStopped, stoppedAsked, nowNano())
		if runErr != nil && !errors.Is(runErr, context.Canceled) {
			return ExitError{Code: workerExitFailed, Err: fmt.Errorf("the schedules loop: %w", runErr)}
		}
		return nil
	case err := <-done:
		// Run ends only when its connection stopped: a connection
		// declared dead goes on under a fresh name, so this is a bug.
		waitClosed(conn.StopAllConsuming(), 30*time.Second)
		w.log.event(lineStopped, stoppedHB, nowNano())
		return ExitError{Code: workerExitHBErrors, Err: fmt.Errorf("the schedules loop ended: %w", err)}
	}
}

// scheduleRecoverLimit bounds how long the soak waits, after its last
// fault, for every schedule to fire again; one that does not counts as
// stalled.
const scheduleRecoverLimit = 20 * time.Second

// waitLoopsRecovered waits until every schedule of sched published a tick
// due after since, or for limit at most.
func (s *soak) waitLoopsRecovered(ctx context.Context, sched redq.Schedules, since time.Time, limit time.Duration) {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		behind, err := schedulesBehind(ctx, sched, since)
		if err == nil && behind == 0 {
			s.out.Logf("soak %s: every schedule fired again after the last fault", s.since())
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(250 * time.Millisecond):
		}
	}
	s.out.Logf("soak %s: not every schedule fired again within %v of the last fault", s.since(), limit)
}

// schedulesBehind counts the schedules of sched whose last tick is not
// after since.
func schedulesBehind(ctx context.Context, sched redq.Schedules, since time.Time) (int, error) {
	behind := 0
	var cursor uint64
	for {
		page, next, err := sched.List(ctx, cursor, 500)
		if err != nil {
			return 0, err
		}
		for _, in := range page {
			if !in.LastFire.After(since) {
				behind++
			}
		}
		if next == 0 {
			return behind, nil
		}
		cursor = next
	}
}
