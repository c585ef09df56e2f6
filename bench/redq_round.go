package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redq/redq"
)

// The redq side of the round workloads, through the public API only.
var _ rounder = (*redqSystem)(nil)

// redqRoundName is the round of the round workloads.
const redqRoundName = "bench-round"

// redqRound is a redq Round on a connection of its own run.
type redqRound struct {
	run   *redqRun
	conn  redq.Connection
	round redq.Round
}

// OpenRound opens a run (a client and a namespace of its own) and the
// round in it.
func (s *redqSystem) OpenRound(ctx context.Context, e *env, period, ttl time.Duration) (benchRound, error) {
	r := s.open(e, roundWorkers+roundFillers)
	conn, err := redq.Open(ctx, "bench", r.rdb, r.errs, redq.WithNamespace(r.ns))
	if err != nil {
		_ = r.close() // the open error says what went wrong
		return nil, fmt.Errorf("redq: open connection: %w", err)
	}
	r.conns = append(r.conns, conn)
	round, err := conn.OpenRound(redqRoundName, period, redq.RoundTTL(ttl))
	if err != nil {
		_ = r.close() // the open error says what went wrong
		return nil, fmt.Errorf("redq: open round: %w", err)
	}
	return &redqRound{run: r, conn: conn, round: round}, nil
}

// Fill adds items with Add, from roundFillers goroutines (one call per
// item: Round has no batch add).
func (r *redqRound) Fill(ctx context.Context, from, n, size int) error {
	return parallel(ctx, min(roundFillers, n), n, func(ctx context.Context, i int) error {
		isNew, err := r.round.Add(ctx, roundItemID(from+i), newPayload(from+i, size))
		if err != nil {
			return fmt.Errorf("redq: add: %w", err)
		}
		if !isNew {
			return fmt.Errorf("redq: add %s: it was there already", roundItemID(from+i))
		}
		return nil
	})
}

// Next is Round.Next for one item, NextBatch for more; it waits on Redis
// (no polling) up to wait.
func (r *redqRound) Next(ctx context.Context, max int, wait time.Duration) ([]handout, error) {
	var items []redq.RoundItem
	var err error
	if max == 1 {
		var it redq.RoundItem
		it, err = r.round.Next(ctx, wait)
		items = []redq.RoundItem{it}
	} else {
		items, err = r.round.NextBatch(ctx, int64(max), wait)
	}
	if errors.Is(err, redq.ErrorTimeout) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("redq: next: %w", err)
	}
	out := make([]handout, len(items))
	for i, it := range items {
		n, err := itemNumber(it.ID)
		if err != nil {
			return nil, err
		}
		out[i] = handout{item: n, at: it.LastIssued}
	}
	return out, nil
}

// RemoveExpired runs a cleaner, which removes expired round items 1,000
// per script call, and returns how many the round counted as expired.
func (r *redqRound) RemoveExpired(ctx context.Context) (int, error) {
	before, err := r.stat(ctx)
	if err != nil {
		return 0, err
	}
	if _, err := redq.NewCleaner(r.conn).CleanContext(ctx); err != nil {
		return 0, fmt.Errorf("redq: clean: %w", err)
	}
	after, err := r.stat(ctx)
	if err != nil {
		return 0, err
	}
	return int(after.ExpiredCount - before.ExpiredCount), nil
}

func (r *redqRound) stat(ctx context.Context) (redq.RoundStat, error) {
	s, err := r.conn.CollectStatsContext(ctx, nil)
	if err != nil {
		return redq.RoundStat{}, fmt.Errorf("redq: collect stats: %w", err)
	}
	return s.RoundStats[redqRoundName], nil
}

func (r *redqRound) Len(ctx context.Context) (int, error) {
	n, err := r.round.Len(ctx)
	return int(n), err
}

// Close stops the connection and closes the run's client; it returns the
// run's background failure, if any.
func (r *redqRound) Close() error { return r.run.close() }
