package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// zsetRoundName is the column of the round baseline.
const zsetRoundName = "sorted-set round"

// zsetPoll is how long a baseline worker sleeps when nothing is due
// before it looks again (the design polls; it does not say how often).
const zsetPoll = 10 * time.Millisecond

// zsetRoundSystem is the round queue of the design redq's Round replaces
// (the timestamp round queue, its published description), written from its
// description: a hash of data by id, a sorted set by last issue time (new
// items at score 0, so first) and one by creation time. A hand-out reads
// the head with ZRANGE BYSCORE LIMIT 0 1, checks it against the worker's
// clock, writes the worker's time with ZADD and reads the data with HGET:
// three commands, so two workers can get the same item. A worker that
// finds nothing due sleeps zsetPoll and looks again. Expired items are
// found with one ZRANGE BYSCORE over the creation index (all at once) and
// deleted. Its batched hand-out (not in the design) reads 100 with one
// ZRANGE, writes them with one ZADD and reads them with one HMGET.
//
// It takes part in the round workloads only; every other method reports
// errNotMeasured.
type zsetRoundSystem struct{}

func newZsetRound() system { return zsetRoundSystem{} }

var _ rounder = zsetRoundSystem{}

func (zsetRoundSystem) Name() string { return zsetRoundName }

func (zsetRoundSystem) Publish(context.Context, *env, int, int, int) (time.Duration, error) {
	return 0, errNotMeasured
}

func (zsetRoundSystem) EndToEnd(context.Context, *env, e2eConfig) (time.Duration, error) {
	return 0, errNotMeasured
}

func (zsetRoundSystem) Steady(context.Context, *env, steadyConfig) (steadyResult, error) {
	return steadyResult{}, errNotMeasured
}

func (zsetRoundSystem) Idle(context.Context, *env, int, time.Duration) ([]time.Duration, error) {
	return nil, errNotMeasured
}

func (zsetRoundSystem) Queued(context.Context, *env, int, int) (time.Duration, error) {
	return 0, errNotMeasured
}

func (zsetRoundSystem) Unacked(context.Context, *env, int, int) (time.Duration, error) {
	return 0, errNotMeasured
}

func (zsetRoundSystem) ManyQueues(context.Context, *env, int, int) (time.Duration, error) {
	return 0, errNotMeasured
}

func (zsetRoundSystem) Recover(context.Context, *env, int) (time.Duration, error) {
	return 0, errNotMeasured
}

func (zsetRoundSystem) Memory(context.Context, *env, int) (float64, error) {
	return 0, errNotMeasured
}

// zsetRound is one baseline round.
type zsetRound struct {
	rdb                 *redis.Client
	data, last, created string
	periodMs, ttlMs     int64
}

func (zsetRoundSystem) OpenRound(_ context.Context, e *env, period, ttl time.Duration) (benchRound, error) {
	p := baseKeyPrefix("zsetround")
	return &zsetRound{
		rdb:  e.newClient(roundWorkers + roundFillers + 4),
		data: p + ":data", last: p + ":last", created: p + ":created",
		periodMs: period.Milliseconds(), ttlMs: ttl.Milliseconds(),
	}, nil
}

// nowMs is the worker's clock, which the design judges periods by.
func nowMs() int64 { return time.Now().UnixMilli() }

// Fill adds items as the design does (HSET data, ZADD created now, ZADD
// last 0), 1,000 items per pipeline from 4 goroutines.
func (r *zsetRound) Fill(ctx context.Context, from, n, size int) error {
	const chunk = 1000
	calls := (n + chunk - 1) / chunk
	return parallel(ctx, min(4, calls), calls, func(ctx context.Context, c int) error {
		lo, hi := from+c*chunk, from+min((c+1)*chunk, n)
		now := float64(nowMs())
		fields := make([]any, 0, 2*(hi-lo))
		created := make([]redis.Z, 0, hi-lo)
		last := make([]redis.Z, 0, hi-lo)
		for i := lo; i < hi; i++ {
			id := roundItemID(i)
			fields = append(fields, id, newPayload(i, size))
			created = append(created, redis.Z{Score: now, Member: id})
			last = append(last, redis.Z{Score: 0, Member: id})
		}
		pipe := r.rdb.Pipeline()
		pipe.HSet(ctx, r.data, fields...)
		pipe.ZAdd(ctx, r.created, created...)
		pipe.ZAdd(ctx, r.last, last...)
		if _, err := pipe.Exec(ctx); err != nil {
			return fmt.Errorf("sorted-set round: add items %d..%d: %w", lo, hi-1, err)
		}
		return nil
	})
}

// Next hands out up to max items: the design's three commands, or their
// batched form; it sleeps zsetPoll while nothing is due, up to wait.
func (r *zsetRound) Next(ctx context.Context, max int, wait time.Duration) ([]handout, error) {
	deadline := time.Now().Add(wait)
	for {
		head, err := r.rdb.ZRangeArgsWithScores(ctx, redis.ZRangeArgs{
			Key: r.last, Start: "-inf", Stop: "+inf", ByScore: true, Count: int64(max),
		}).Result()
		if err != nil {
			return nil, fmt.Errorf("sorted-set round: read the head: %w", err)
		}
		now := nowMs()
		var due []redis.Z
		for _, z := range head {
			if int64(z.Score) > now-r.periodMs {
				break
			}
			due = append(due, redis.Z{Score: float64(now), Member: z.Member})
		}
		if len(due) > 0 {
			return r.issue(ctx, due, now)
		}
		if !time.Now().Before(deadline) {
			return nil, nil
		}
		if err := sleep(ctx, min(zsetPoll, time.Until(deadline))); err != nil {
			return nil, nil
		}
	}
}

// issue writes the issue time of the due items and reads their data.
func (r *zsetRound) issue(ctx context.Context, due []redis.Z, now int64) ([]handout, error) {
	if err := r.rdb.ZAdd(ctx, r.last, due...).Err(); err != nil {
		return nil, fmt.Errorf("sorted-set round: mark issued: %w", err)
	}
	ids := make([]string, len(due))
	for i, z := range due {
		ids[i] = z.Member.(string)
	}
	if len(ids) == 1 {
		if err := r.rdb.HGet(ctx, r.data, ids[0]).Err(); err != nil {
			return nil, fmt.Errorf("sorted-set round: read data: %w", err)
		}
	} else if err := r.rdb.HMGet(ctx, r.data, ids...).Err(); err != nil {
		return nil, fmt.Errorf("sorted-set round: read data: %w", err)
	}
	out := make([]handout, len(ids))
	for i, id := range ids {
		n, err := itemNumber(id)
		if err != nil {
			return nil, err
		}
		out[i] = handout{item: n, at: time.UnixMilli(now)}
	}
	return out, nil
}

// RemoveExpired is the design's cleaner: one ZRANGE BYSCORE 1 (now -
// ttl) over the creation index fetches every expired id at once; they are
// then deleted from the data and both indexes, 1,000 per command, in one
// pipeline.
func (r *zsetRound) RemoveExpired(ctx context.Context) (int, error) {
	if r.ttlMs <= 0 {
		return 0, errors.New("sorted-set round: no TTL")
	}
	ids, err := r.rdb.ZRangeArgs(ctx, redis.ZRangeArgs{
		Key: r.created, Start: "1", Stop: strconv.FormatInt(nowMs()-r.ttlMs, 10), ByScore: true,
	}).Result()
	if err != nil {
		return 0, fmt.Errorf("sorted-set round: find expired: %w", err)
	}
	pipe := r.rdb.Pipeline()
	for lo := 0; lo < len(ids); lo += 1000 {
		chunk := ids[lo:min(lo+1000, len(ids))]
		members := make([]any, len(chunk))
		for i, id := range chunk {
			members[i] = id
		}
		pipe.HDel(ctx, r.data, chunk...)
		pipe.ZRem(ctx, r.last, members...)
		pipe.ZRem(ctx, r.created, members...)
	}
	if len(ids) > 0 {
		if _, err := pipe.Exec(ctx); err != nil {
			return 0, fmt.Errorf("sorted-set round: delete expired: %w", err)
		}
	}
	return len(ids), nil
}

func (r *zsetRound) Len(ctx context.Context) (int, error) {
	n, err := r.rdb.HLen(ctx, r.data).Result()
	return int(n), err
}

func (r *zsetRound) Close() error { return r.rdb.Close() }
