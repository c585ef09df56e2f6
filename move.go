package redq

import (
	"context"
	"errors"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Moves between queues in different Redis Cluster slots (see
// docs/cluster-moves.md). One script cannot touch two slots, so Push to a
// push queue in another slot goes in three steps, each atomic in one slot:
//
//  1. settle.lua in mode 'S' takes the deliveries out of the connection's
//     unacked storage and stages them in the source queue's outbox (hash
//     take -> ms|destination|envelope);
//  2. move_apply.lua puts them into the destination and records each move
//     (source|take) in the destination's moved set, so that a move sent
//     again lands once;
//  3. HDEL takes them out of the outbox.
//
// Push returns once step 1 is done: from then on the delivery lives in
// Redis (in the outbox) and reaches the destination exactly once, by the
// pusher's steps 2 and 3 or, when the pusher died or lost Redis between
// them, by a cleaner (finishStaged).

// modeStage is settle.lua's mode for step 1; the destination queue's name
// follows it.
const modeStage = "S"

// stagedMoveChunk bounds the outbox entries one finishing call carries.
const stagedMoveChunk = 100

// stagesPush reports whether Push from q to p takes the staged path: on a
// cluster client when their keys are in different slots (a single node
// runs any script, and the one-script move is used), or always when a test
// forces it.
func (c *redisConnection) stagesPush(q, p *redisQueue) bool {
	if c.forceStaged {
		return true
	}
	if _, ok := c.client.(*redis.ClusterClient); !ok {
		return false
	}
	return !q.sameSlot(p)
}

// pushStaged runs step 1 for the takes ids and then finishes the moves
// staged by it. A failure to finish is reported on the error channel and
// left to a cleaner: the deliveries are safe in the outbox.
func (q *redisQueue) pushStaged(ctx context.Context, p *redisQueue, reg *registration, ids []string, report *redisDelivery) (settleResult, error) {
	res, err := q.conn.acks.settle(ctx, q, reg, modeStage+p.name, nil, ids, report)
	if err != nil {
		return res, err
	}
	var staged []string
	for i, code := range res.codes {
		if code == codeDone {
			staged = append(staged, ids[i])
		}
	}
	if len(staged) == 0 {
		return res, nil
	}
	if q.conn.afterStage != nil {
		q.conn.afterStage()
	}
	if _, ferr := q.finishMoves(ctx, staged); ferr != nil {
		var d Delivery
		if report != nil {
			d = report
		}
		q.conn.report(&DeliveryError{Delivery: d, RedisErr: errorf("finish the move to %q (a cleaner will): %w", p.name, ferr), Count: 1})
	}
	return res, nil
}

// finishMoves runs steps 2 and 3 for the outbox entries of q named by
// fields (entries gone already were finished by someone else) and reports
// how many moves it applied. With WithWaitReplicas, moves whose
// destination's replicas did not confirm them stay in the outbox for a
// cleaner to apply again, and the error matches ErrorNotReplicated.
func (q *redisQueue) finishMoves(ctx context.Context, fields []string) (int64, error) {
	var applied int64
	var notReplicated error
	for len(fields) > 0 {
		chunk := fields[:min(len(fields), stagedMoveChunk)]
		fields = fields[len(chunk):]
		var vals []any
		err := q.conn.resend(ctx, func(ctx context.Context) error {
			var err error
			vals, err = q.conn.client.HMGet(ctx, q.keys.outbox, chunk...).Result()
			return err
		}, nil)
		if err != nil {
			return applied, errorf("redq: read the outbox of %q: %w", q.name, err)
		}
		byDest := map[string][]any{}
		fieldsOf := map[string][]string{}
		var order []string
		for i, v := range vals {
			s, ok := v.(string)
			if !ok {
				continue // finished meanwhile
			}
			dest, env, ok := parseStaged(s)
			if !ok || validQueueName(dest) != "" {
				// not written by settle.lua: left for a person to look at
				continue
			}
			if _, seen := byDest[dest]; !seen {
				order = append(order, dest)
			}
			byDest[dest] = append(byDest[dest], chunk[i], env)
			fieldsOf[dest] = append(fieldsOf[dest], chunk[i])
		}
		var done []string
		for _, dest := range order {
			keys := newQueueKeys(q.conn.opts.namespace, dest).block0()
			args := append([]any{q.name}, byDest[dest]...)
			var n int64
			var waited error // with WithWaitReplicas: replicas missing
			err := q.conn.resend(ctx, func(ctx context.Context) error {
				v, err := q.conn.runScript(ctx, scriptCall{scripts.moveApply, keys, args})
				if errors.Is(err, ErrorNotReplicated) {
					waited, err = err, nil
				}
				if err != nil {
					return err
				}
				var ok bool
				if n, ok = v.(int64); !ok {
					return errorf("%w: move_apply gave %T", errBadReply, v)
				}
				return nil
			}, nil)
			if err != nil {
				return applied, errorf("redq: apply moves from %q to %q: %w", q.name, dest, err)
			}
			applied += n
			if waited != nil {
				// The destination's replicas may not have the moves: keep
				// them in the outbox (replicated) until a cleaner applies
				// them again, which the moved set makes land once.
				notReplicated = errorf("redq: apply moves from %q to %q: %w", q.name, dest, waited)
				continue
			}
			done = append(done, fieldsOf[dest]...)
		}
		if len(done) > 0 {
			err := q.conn.resend(ctx, func(ctx context.Context) error {
				return q.conn.client.HDel(ctx, q.keys.outbox, done...).Err()
			}, nil)
			if err != nil {
				return applied, errorf("redq: clear the outbox of %q: %w", q.name, err)
			}
		}
	}
	return applied, notReplicated
}

// parseStaged splits an outbox entry, ms|destination|envelope.
func parseStaged(s string) (dest, env string, ok bool) {
	_, rest, ok := strings.Cut(s, "|")
	if !ok {
		return "", "", false
	}
	dest, env, ok = strings.Cut(rest, "|")
	return dest, env, ok
}

// finishStaged finishes every move staged in q's outbox (the cleaner's
// step: a pusher that died between step 1 and step 2 left them) and
// reports how many it applied. Moves that a live pusher is finishing at
// the same time land once all the same.
func (q *redisQueue) finishStaged(ctx context.Context) (int64, error) {
	var applied int64
	var waited error
	cursor := uint64(0)
	for {
		fields, next, err := q.conn.client.HScan(ctx, q.keys.outbox, cursor, "*", stagedMoveChunk).Result()
		if err != nil {
			return applied, errorf("redq: scan the outbox of %q: %w", q.name, err)
		}
		names := make([]string, 0, len(fields)/2)
		for i := 0; i+1 < len(fields); i += 2 {
			names = append(names, fields[i])
		}
		n, err := q.finishMoves(ctx, names)
		applied += n
		switch {
		case errors.Is(err, ErrorNotReplicated):
			waited = err // those stay staged; go on with the rest
		case err != nil:
			return applied, err
		}
		if next == 0 {
			return applied, waited
		}
		cursor = next
	}
}
