package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redq/redq"
)

// The redq side of the keyed and timer workloads (see keyedSystem and
// timerSystem).
var (
	_ keyedSystem = (*redqSystem)(nil)
	_ timerSystem = (*redqSystem)(nil)
)

const (
	// redqKeyedDelay is the delay of every upsert of the keyed workloads:
	// nothing becomes due while they run.
	redqKeyedDelay = 24 * time.Hour
	// redqTimerSet is the timer set of the timer workloads; the throwaway
	// timers of calibratedLead go to redqCalibrateSet.
	redqTimerSet     = "bench"
	redqCalibrateSet = "bench-calibrate"
	// redqTimerFillWorkers set timers in parallel when a run fills (redq
	// coalesces their calls into shared pipelines).
	redqTimerFillWorkers = 8
	// redqKeyedSample bounds how many keys a distinct-key run looks up to
	// check their payloads (all of them for hot keys up to this many).
	redqKeyedSample = 2000
	// redqVictimHeartbeat and redqVictimTTL are the heartbeat of the
	// consumer that dies in a timer run: it is found dead soon after.
	redqVictimHeartbeat = 100 * time.Millisecond
	redqVictimTTL       = 500 * time.Millisecond
	// redqCleanEvery is how often a run with a dead consumer runs the
	// cleaner until the dead consumer's fires are back.
	redqCleanEvery = 100 * time.Millisecond
	// redqSettleLimit bounds the wait, once every timer was handled, for
	// the timer set to show nothing pending and nothing firing.
	redqSettleLimit = 5 * time.Second
)

// refusedLate reports whether err is redq's answer to an upsert (or timer
// Set) whose call reached Redis under an older token than the last call
// of the same call slot: "unexpected reply -1" (see upsert.lua). The
// script did nothing then, so the call may be made again.
//
// It should never reach a caller: it comes from a race in redq's script
// batcher (groupcommit.go, scriptBatcher.flush), which takes a flush's
// token before it takes the call slots, while two flushes may run at once
// (flushSlots): a slot that the newer flush used and gave back can go to
// the older flush's calls. With 8 to 16 goroutines upserting it happens
// about once in 20,000–200,000 upserts on a busy 2-CPU machine. Until it
// is fixed, the bench makes such a call again, counts it, and reports the
// count with the upsert workloads.
func refusedLate(err error) bool {
	return err != nil && strings.Contains(err.Error(), "unexpected reply -1")
}

// refusedTries bounds how often one upsert is made again after
// refusedLate answers.
const refusedTries = 10

// upsertCall is one upsert as a run makes it (a test wraps it to plant a
// lost upsert).
type upsertCall func(ctx context.Context, key string, payload []byte) (redq.UpsertOutcome, error)

// again makes the upsert with call, and again while refusedLate answers
// (at most refusedTries times), counting those answers in refused.
func (call upsertCall) again(ctx context.Context, key string, payload []byte, refused *atomic.Int64) (redq.UpsertOutcome, error) {
	out, err := call(ctx, key, payload)
	for try := 0; refusedLate(err) && try < refusedTries; try++ {
		refused.Add(1)
		out, err = call(ctx, key, payload)
	}
	return out, err
}

// Upserts makes cfg's upserts (see upsertConfig) with Queue.Upsert,
// ReplaceAll and a delay of redqKeyedDelay, from cfg.Goroutines
// goroutines, and times them from the first call to the last answer. It
// then checks the outcomes (one Created per key, Updated for the rest),
// the queue's counts (one pending item per key, all delayed, nothing
// else) and, by Lookup, the payload and update count of every hot key or
// of a sample of distinct keys.
func (s *redqSystem) Upserts(ctx context.Context, e *env, cfg upsertConfig) (upsertResult, error) {
	return s.upserts(ctx, e, cfg, nil)
}

// upserts is Upserts with each call made through wrap(the real call)
// when wrap is not nil.
func (s *redqSystem) upserts(ctx context.Context, e *env, cfg upsertConfig, wrap func(upsertCall) upsertCall) (_ upsertResult, err error) {
	g := max(cfg.Goroutines, 1)
	cfg.Goroutines = g
	if cfg.Keys < 1 || cfg.Upserts < 1 {
		return upsertResult{}, fmt.Errorf("upserts: keys %d and upserts %d must be positive", cfg.Keys, cfg.Upserts)
	}
	r := s.open(e, g)
	defer closeRun(r, &err)
	conn, q, err := r.connect(ctx, redqQueue)
	if err != nil {
		return upsertResult{}, fmt.Errorf("upserts: %w", err)
	}
	call := upsertCall(func(ctx context.Context, key string, payload []byte) (redq.UpsertOutcome, error) {
		return q.Upsert(ctx, key, payload, redq.Delay(redqKeyedDelay))
	})
	if wrap != nil {
		call = wrap(call)
	}
	seqs := make([][]int, g)
	for i := range seqs {
		seqs[i] = upsertSeqs(cfg, i)
	}
	var outcomes [int(redq.Queued) + 1]atomic.Int64
	var refused atomic.Int64
	clock := newUpsertClock(cfg)
	err = parallel(ctx, g, g, func(ctx context.Context, w int) error {
		for _, i := range seqs[w] {
			out, err := call.again(ctx, upsertKey(cfg, i), newPayload(i, cfg.PayloadSize), &refused)
			if err != nil {
				return fmt.Errorf("redq: upsert %d: %w", i, err)
			}
			clock.completed()
			if out < redq.Created || out > redq.Queued {
				return fmt.Errorf("redq: upsert %d: outcome %v", i, out)
			}
			outcomes[out].Add(1)
		}
		return nil
	})
	if err != nil {
		return upsertResult{}, fmt.Errorf("upserts: %w", err)
	}
	res, err := clock.result(cfg)
	if err != nil {
		return upsertResult{}, fmt.Errorf("upserts: %w", err)
	}
	res.Refused = int(refused.Load())
	plan := planUpserts(cfg)
	created, updated := outcomes[redq.Created].Load(), outcomes[redq.Updated].Load()
	if want := plan.pending(); created != int64(want) || updated != int64(cfg.Upserts-want) {
		return upsertResult{}, fmt.Errorf("upserts: %d created, %d updated, %d kept, %d queued; want %d created and %d updated",
			created, updated, outcomes[redq.Kept].Load(), outcomes[redq.Queued].Load(), want, cfg.Upserts-want)
	}
	if err := checkUpserts(ctx, conn, q, plan); err != nil {
		return upsertResult{}, fmt.Errorf("upserts: %w", err)
	}
	if err := r.close(); err != nil {
		return upsertResult{}, fmt.Errorf("upserts: %w", err)
	}
	return res, nil
}

// checkUpserts checks that queue redqQueue holds what plan says and
// nothing else: one pending item per key upserted, all delayed, none
// ready, running, parked, rejected or unacked; and, by Lookup, for every
// key (or redqKeyedSample of them, evenly spread, and the last), that its
// item holds the payload of the key's last upsert, due about
// redqKeyedDelay after it, with the key's other upserts merged into it.
func checkUpserts(ctx context.Context, conn redq.Connection, q redq.Queue, plan upsertPlan) error {
	want := plan.pending()
	stats, err := conn.CollectStatsContext(ctx, []string{redqQueue})
	if err != nil {
		return fmt.Errorf("redq: collect stats: %w", err)
	}
	qs := stats.QueueStats[redqQueue]
	if qs.KeyedPending != int64(want) || qs.DelayedCount != int64(want) || qs.ReadyCount != 0 ||
		qs.KeyedRunning != 0 || qs.KeyedParked != 0 || qs.RejectedCount != 0 || qs.UnackedCount() != 0 {
		return fmt.Errorf("queue holds %d keyed pending, %d delayed, %d ready, %d running, %d parked, %d rejected, %d unacked; want %d pending and delayed only",
			qs.KeyedPending, qs.DelayedCount, qs.ReadyCount, qs.KeyedRunning, qs.KeyedParked, qs.RejectedCount, qs.UnackedCount(), want)
	}
	keys := len(plan.count)
	step := max(1, keys/redqKeyedSample)
	var sample []int
	for k := 0; k < keys; k += step {
		sample = append(sample, k)
	}
	if sample[len(sample)-1] != keys-1 {
		sample = append(sample, keys-1)
	}
	earliest := time.Now().Add(redqKeyedDelay - time.Hour)
	return parallel(ctx, redqFillWorkers, len(sample), func(ctx context.Context, j int) error {
		k := sample[j]
		item, err := q.Lookup(ctx, keyName(k))
		if plan.count[k] == 0 {
			if !errors.Is(err, redq.ErrorNotFound) {
				return fmt.Errorf("lookup of %s, never upserted: %+v, %v; want ErrorNotFound", keyName(k), item, err)
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("redq: lookup %s: %w", keyName(k), err)
		}
		seq, _, ok := parsePayload(item.Payload)
		if !ok || seq != plan.last[k] || item.Updates != int64(plan.count[k]-1) || !item.Pending || item.Running || item.Due.Before(earliest) {
			return fmt.Errorf("%s holds payload %d (parsed: %v), %d updates, pending %v, running %v, due %s; want the last upsert's payload %d, %d updates, pending, due in about %s",
				keyName(k), seq, ok, item.Updates, item.Pending, item.Running, item.Due.Format(time.RFC3339), plan.last[k], plan.count[k]-1, redqKeyedDelay)
		}
		return nil
	})
}

// KeyedMemory upserts n distinct keys (key:0 … key:n-1, payloads of
// e.payloadSize bytes, due in redqKeyedDelay) from redqFillWorkers
// goroutines after one warm-up upsert, and returns Redis's used_memory
// growth over them divided by n. The queue must then hold n+1 pending
// items and nothing else.
func (s *redqSystem) KeyedMemory(ctx context.Context, e *env, n int) (_ float64, err error) {
	if n <= 0 {
		return 0, fmt.Errorf("keyed memory: n %d must be positive", n)
	}
	r := s.open(e, redqFillWorkers)
	defer closeRun(r, &err)
	conn, q, err := r.connect(ctx, redqQueue)
	if err != nil {
		return 0, fmt.Errorf("keyed memory: %w", err)
	}
	if err := openConns(ctx, r.rdb, redqFillWorkers+4); err != nil {
		return 0, fmt.Errorf("keyed memory: %w", err)
	}
	var refused atomic.Int64
	call := upsertCall(func(ctx context.Context, key string, payload []byte) (redq.UpsertOutcome, error) {
		return q.Upsert(ctx, key, payload, redq.Delay(redqKeyedDelay))
	})
	upsert := func(ctx context.Context, k int) error {
		out, err := call.again(ctx, keyName(k), newPayload(k, e.payloadSize), &refused)
		if err != nil {
			return fmt.Errorf("redq: upsert %s: %w", keyName(k), err)
		}
		if out != redq.Created {
			return fmt.Errorf("redq: upsert %s: %v, want Created", keyName(k), out)
		}
		return nil
	}
	if err := upsert(ctx, n); err != nil {
		return 0, fmt.Errorf("keyed memory warm-up: %w", err)
	}
	b, err := baseMemory(ctx, e, n, func() error { return parallel(ctx, redqFillWorkers, n, upsert) })
	if err != nil {
		return 0, fmt.Errorf("keyed memory: %w", err)
	}
	plan := upsertPlan{count: make([]int, n+1), last: make([]int, n+1)}
	for k := range plan.count {
		plan.count[k], plan.last[k] = 1, k
	}
	if err := checkUpserts(ctx, conn, q, plan); err != nil {
		return 0, fmt.Errorf("keyed memory: %w", err)
	}
	return b, nil
}

// connectTimers opens a connection of the run on its client and the timer
// set redqTimerSet on it.
func (r *redqRun) connectTimers(ctx context.Context) (redq.Connection, redq.Timers, error) {
	conn, err := redq.Open(ctx, "bench", r.rdb, r.errs, redq.WithNamespace(r.ns))
	if err != nil {
		return nil, nil, fmt.Errorf("redq: open connection: %w", err)
	}
	r.conns = append(r.conns, conn)
	ts, err := conn.OpenTimers(redqTimerSet)
	if err != nil {
		return nil, nil, fmt.Errorf("redq: open timers %s: %w", redqTimerSet, err)
	}
	return conn, ts, nil
}

// setTimers sets timers key:0 … key:n-1, timer i due at due(i), with
// SetAt from redqTimerFillWorkers goroutines (again while refusedLate
// answers: see there).
func setTimers(ctx context.Context, ts redq.Timers, n int, due func(i int) time.Time) error {
	return parallel(ctx, redqTimerFillWorkers, n, func(ctx context.Context, i int) error {
		err := ts.SetAt(ctx, keyName(i), due(i))
		for try := 0; refusedLate(err) && try < refusedTries; try++ {
			err = ts.SetAt(ctx, keyName(i), due(i))
		}
		if err != nil {
			return fmt.Errorf("redq: set timer %s: %w", keyName(i), err)
		}
		return nil
	})
}

// redqLead calibrates the lead of a run setting n timers through conn
// (see calibratedLead), with throwaway timers in redqCalibrateSet.
func redqLead(ctx context.Context, conn redq.Connection, n int) (time.Duration, error) {
	cal, err := conn.OpenTimers(redqCalibrateSet)
	if err != nil {
		return 0, fmt.Errorf("redq: open timers %s: %w", redqCalibrateSet, err)
	}
	far := time.Now().Add(redqKeyedDelay)
	return calibratedLead(ctx, n, func(ctx context.Context, c int) error {
		return setTimers(ctx, cal, c, func(int) time.Time { return far })
	})
}

// fireConsumers starts n consumers on crew, consumer i on sets[i mod
// len(sets)]: each takes a fire with Next, notes the time it received it,
// acks it and records it in tl with its Due time (Redis's clock). With
// batch > 0 each takes up to batch fires with NextBatch and acks them with
// one Fires.Ack. A failed Ack fails the crew.
func fireConsumers(crew *baseCrew, n int, sets []redq.Timers, tl *fireTally, batch int64) {
	crew.run(n, func(ctx context.Context, i int) error {
		ts := sets[i%len(sets)]
		for {
			var fs redq.Fires
			var err error
			if batch > 0 {
				fs, err = ts.NextBatch(ctx, batch, time.Second)
			} else {
				var f redq.Fire
				if f, err = ts.Next(ctx, time.Second); err == nil {
					fs = redq.Fires{f}
				}
			}
			if errors.Is(err, redq.ErrorTimeout) {
				continue
			}
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("redq: next fire: %w", err)
			}
			at := time.Now()
			if len(fs) == 1 {
				if err := fs[0].Ack(ctx); err != nil {
					return fmt.Errorf("redq: ack fire %s: %w", fs[0].Key(), err)
				}
			} else if errs := fs.Ack(ctx); len(errs) > 0 {
				for k, f := range fs {
					if err := errs[k]; err != nil {
						return fmt.Errorf("redq: ack fire %s: %w", f.Key(), err)
					}
				}
			}
			for _, f := range fs {
				tl.fired(f.Key(), at, f.Due())
			}
		}
	})
}

// FireTimers sets cfg.N timers with SetAt (see timerDue), then starts
// cfg.Consumers consumers (see fireConsumers) on one connection, or on two
// with cfg.Pairs 2. With cfg.VictimTakes, one more connection on a client
// of its own takes that many fires with Next and dies: its client is
// closed, so its heartbeat lapses; the run then runs the cleaner until it
// has returned those fires, which the live consumers handle. The run ends
// when every timer was handled and the timer set shows nothing pending
// and nothing firing.
func (s *redqSystem) FireTimers(ctx context.Context, e *env, cfg timerConfig) (_ *fireTally, err error) {
	pairs := max(cfg.Pairs, 1)
	r := s.open(e, cfg.Consumers+redqTimerFillWorkers)
	defer closeRun(r, &err)
	conn, ts, err := r.connectTimers(ctx)
	if err != nil {
		return nil, fmt.Errorf("timers: %w", err)
	}
	sets := []redq.Timers{ts}
	for len(sets) < pairs {
		_, other, err := r.connectTimers(ctx)
		if err != nil {
			return nil, fmt.Errorf("timers: %w", err)
		}
		sets = append(sets, other)
	}
	if cfg.Lead, err = redqLead(ctx, conn, cfg.N); err != nil {
		return nil, fmt.Errorf("timers: %w", err)
	}
	base := time.Now()
	if err := setTimers(ctx, ts, cfg.N, func(i int) time.Time { return timerDue(cfg, base, i) }); err != nil {
		return nil, fmt.Errorf("timers fill: %w", err)
	}
	if took := time.Since(base); time.Now().After(timerDue(cfg, base, 0)) {
		return nil, fmt.Errorf("timers fill: setting %d timers took %s, longer than the lead %s", cfg.N, took, cfg.Lead)
	}
	tl := newFireTally(cfg.N)
	crew := newBaseCrew(ctx)
	defer stopCrew(crew, &err)
	fireConsumers(crew, cfg.Consumers, sets, tl, cfg.Batch)
	if cfg.VictimTakes > 0 {
		until := timerDue(cfg, base, cfg.N-1).Add(time.Second)
		if err := s.victim(ctx, e, r, conn, cfg.VictimTakes, until); err != nil {
			return nil, fmt.Errorf("timers: %w (%s)", err, tl.counts())
		}
	}
	limit := time.Until(timerDue(cfg, base, cfg.N-1).Add(cfg.Drain))
	if err := baseAwait(ctx, tl.Done(), crew, limit, func() error { return tl.counts().exact() }); err != nil {
		return nil, fmt.Errorf("timers: %w", err)
	}
	if err := r.timersSettled(ctx, conn); err != nil {
		return nil, fmt.Errorf("timers: %w (%s)", err, tl.counts())
	}
	if err := crew.stop(); err != nil {
		return nil, fmt.Errorf("timers: %w", err)
	}
	if err := r.close(); err != nil {
		return nil, fmt.Errorf("timers: %w", err)
	}
	return tl, nil
}

// victim opens a connection on a client of its own with a short
// heartbeat, takes n fires with Next (fewer if until passes first) and
// dies holding them: its client is closed, so its heartbeat lapses. Then
// the cleaner runs through conn every redqCleanEvery until it has
// returned them (a Take cut short by until may have taken one more: the
// cleaner returns that one too).
func (s *redqSystem) victim(ctx context.Context, e *env, r *redqRun, conn redq.Connection, n int, until time.Time) error {
	rdb := e.newClient(4)
	vconn, err := redq.Open(ctx, "bench-victim", rdb, nil, redq.WithNamespace(r.ns),
		redq.WithHeartbeat(redqVictimHeartbeat, redqVictimTTL), redq.WithHeartbeatErrorLimit(1))
	if err != nil {
		_ = rdb.Close()
		return fmt.Errorf("redq: open the victim's connection: %w", err)
	}
	vts, err := vconn.OpenTimers(redqTimerSet)
	if err != nil {
		_ = rdb.Close()
		return fmt.Errorf("redq: open the victim's timers: %w", err)
	}
	// It takes fires until it holds n or the timers should all have
	// fired, whichever is first.
	taken := 0
	tctx, cancel := context.WithDeadline(ctx, until)
	for taken < n {
		if _, err := vts.Next(tctx, time.Until(until)+time.Second); err != nil {
			if (tctx.Err() != nil || errors.Is(err, redq.ErrorTimeout)) && ctx.Err() == nil {
				break
			}
			cancel()
			_ = rdb.Close()
			return fmt.Errorf("redq: the victim's fire %d: %w", taken, err)
		}
		taken++
	}
	cancel()
	// It dies holding them: no Ack, no StopAllConsuming.
	if err := rdb.Close(); err != nil {
		return fmt.Errorf("close the victim's client: %w", err)
	}
	if taken == 0 {
		return fmt.Errorf("the victim took no fire by %s", until.Format(time.StampMilli))
	}
	deadline := time.Now().Add(redqVictimTTL + time.Minute)
	cl := redq.NewCleaner(conn)
	var returned int64
	for returned < int64(taken) {
		if err := sleep(ctx, redqCleanEvery); err != nil {
			return err
		}
		k, err := cl.CleanContext(ctx)
		if err != nil {
			return fmt.Errorf("redq: clean: %w", err)
		}
		returned += k
		if time.Now().After(deadline) {
			return fmt.Errorf("the cleaner returned %d of the dead consumer's %d fires by the deadline", returned, taken)
		}
	}
	return nil
}

// timersSettled waits up to redqSettleLimit for timer set redqTimerSet to
// show nothing pending and nothing firing.
func (r *redqRun) timersSettled(ctx context.Context, conn redq.Connection) error {
	deadline := time.Now().Add(redqSettleLimit)
	for {
		stats, err := conn.CollectStatsContext(ctx, nil)
		if err != nil {
			return fmt.Errorf("redq: collect stats: %w", err)
		}
		st := stats.TimerStats[redqTimerSet]
		if st.Pending == 0 && st.Firing == 0 {
			return r.err()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timer set %s holds %d pending and %d firing %s after every timer was handled", redqTimerSet, st.Pending, st.Firing, redqSettleLimit)
		}
		if err := sleep(ctx, 20*time.Millisecond); err != nil {
			return err
		}
	}
}

// TimerBurst sets n timers all due at one moment (a calibrated lead
// ahead, see calibratedLead), waits until it has passed and
// timerBurstMargin more, then times consumers consumers (see
// fireConsumers) from their start until every fire was handled.
func (s *redqSystem) TimerBurst(ctx context.Context, e *env, n, consumers int, batch int64) (_ time.Duration, err error) {
	r := s.open(e, consumers+redqTimerFillWorkers)
	defer closeRun(r, &err)
	conn, ts, err := r.connectTimers(ctx)
	if err != nil {
		return 0, fmt.Errorf("burst: %w", err)
	}
	lead, err := redqLead(ctx, conn, n)
	if err != nil {
		return 0, fmt.Errorf("burst: %w", err)
	}
	at := time.Now().Add(lead).Truncate(time.Millisecond)
	if err := setTimers(ctx, ts, n, func(int) time.Time { return at }); err != nil {
		return 0, fmt.Errorf("burst fill: %w", err)
	}
	if err := sleep(ctx, time.Until(at.Add(timerBurstMargin))); err != nil {
		return 0, err
	}
	tl := newFireTally(n)
	crew := newBaseCrew(ctx)
	defer stopCrew(crew, &err)
	start := time.Now()
	fireConsumers(crew, consumers, []redq.Timers{ts}, tl, batch)
	if err := baseAwait(ctx, tl.Done(), crew, redqLimit(n), func() error { return tl.counts().exact() }); err != nil {
		return 0, fmt.Errorf("burst: %w", err)
	}
	elapsed := time.Since(start)
	if err := tl.counts().exact(); err != nil {
		return 0, fmt.Errorf("burst: %w", err)
	}
	if err := r.timersSettled(ctx, conn); err != nil {
		return 0, fmt.Errorf("burst: %w", err)
	}
	if err := crew.stop(); err != nil {
		return 0, fmt.Errorf("burst: %w", err)
	}
	if err := r.close(); err != nil {
		return 0, fmt.Errorf("burst: %w", err)
	}
	return elapsed, nil
}
