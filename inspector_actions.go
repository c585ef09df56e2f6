package redq

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// errMoved is the error of an action whose delivery moved between the
// lookup and the action.
func errMoved(id string) error {
	return errorf("%w: delivery %s moved meanwhile (taken, acked or deleted); nothing was changed", ErrorNotFound, id)
}

// act finds the delivery id of queue and runs inspect_act.lua on it with
// what ('D' delete, 'T' retry); allowed says which states it may act on.
func (i *Inspector) act(ctx context.Context, verb, queue, id string, what string, allowed ...DeliveryState) error {
	rawID, err := parseID(id)
	if err != nil {
		return err
	}
	if err := i.checkQueue(ctx, queue); err != nil {
		return err
	}
	f, _, err := i.find(ctx, queue, rawID)
	if err != nil {
		return errInspect(verb+" "+id, queue, err)
	}
	if f.state == StateUnacked {
		return errInspect(verb+" "+id, queue, errorf("%w (connection %s)", ErrorHeld, f.e.conn))
	}
	ok := false
	for _, s := range allowed {
		ok = ok || s == f.state
	}
	if !ok {
		return errInspect(verb+" "+id, queue, argError("delivery state", string(f.state), fmt.Sprintf("%s applies to %v deliveries", verb, allowed)))
	}
	k := newQueueKeys(i.opts.namespace, queue)
	where, subject := "j", f.e.env
	switch f.state {
	case StateKeyed:
		// a pending keyed item: by its key, and only while the key's
		// pending item is still this delivery (a take meanwhile, then a new
		// upsert, gives the key another item, which must not be touched)
		where, subject = "k", f.e.key
	case StateDelayed:
		where = "d"
	case StateReady:
		where = "r" + strconv.Itoa(f.e.level)
		if f.e.field != "" {
			// a pending grouped delivery: by its field in its group's line
			where, subject = "g", f.e.field
		}
	}
	// The token makes a resend of this call (its reply lost) answer done
	// from the receipt the first send left, not "no longer there".
	token := i.tokens.Add(1)
	n, err := scripts.inspectAct.Run(ctx, i.client, k.scriptKeys("", nil, k.connKeys(i.name)),
		what, where, subject, rawID, i.name, token).Int64()
	if err != nil {
		return errInspect(verb+" "+id, queue, err)
	}
	if n != 1 {
		return errInspect(verb+" "+id, queue, errMoved(id))
	}
	return nil
}

// Delete removes a ready, delayed, rejected or pending keyed delivery by id
// (a keyed one is cancelled: see Cancel), and a pending grouped one from
// its group's line (the rest of the line keeps its order). It looks the delivery up and
// then removes exactly that envelope in one script, so a delivery that a
// consumer took meanwhile is not touched: the error then matches
// ErrorNotFound and nothing was changed. An unacked delivery is refused
// with ErrorHeld.
func (i *Inspector) Delete(ctx context.Context, queue, id string) error {
	return i.act(ctx, "delete", queue, id, "D", StateReady, StateDelayed, StateRejected, StateKeyed)
}

// Retry moves a rejected or delayed delivery to the back of ready now. A
// rejected one starts over as if published anew (its attempts from 0, as
// ReturnRejected does; a keyed one is upserted by its key) and counts as
// retried (it goes back to ready after a take); a delayed one, or a
// pending keyed item (listed as delayed or keyed), is made due now, as
// RunNow does, and is not counted (it was not taken). Like Delete it acts
// only on the delivery it found: one that moved meanwhile gives an error
// matching ErrorNotFound and changes nothing. Unacked deliveries are
// refused with ErrorHeld, ready ones with an *ArgumentError.
func (i *Inspector) Retry(ctx context.Context, queue, id string) error {
	return i.act(ctx, "retry", queue, id, "T", StateRejected, StateDelayed, StateKeyed)
}

// keyedCall runs a keyed script (keyed_cancel.lua, keyed_run_now.lua) for
// key, once per token, under a call record of the Inspector's own in the
// queue (it expires an hour after the last call; see upsert.lua).
func (i *Inspector) keyedCall(ctx context.Context, script *redis.Script, k queueKeys, key string) (int64, error) {
	token := i.tokens.Add(1)
	v, err := script.Run(ctx, i.client, k.scriptKeys(k.published(i.name, "0"), nil), token, key).Int64()
	if err != nil {
		return 0, err
	}
	return v, nil
}

// inspectorName names an Inspector's call records: inspector-<random>.
func inspectorName() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return "inspector-" + hex.EncodeToString(b)
}

// RunNow makes the pending item of a key due now (a parked successor: as
// soon as the running delivery is settled), as Queue.RunNow does; an error
// matching ErrorNotFound when the key has none.
func (i *Inspector) RunNow(ctx context.Context, queue, key string) error {
	return i.keyed(ctx, "run now", scripts.keyedRunNow, queue, key)
}

// Cancel removes the pending item of a key (or its parked successor),
// never a running delivery, as Queue.Cancel does; an error matching
// ErrorNotFound when the key has none.
func (i *Inspector) Cancel(ctx context.Context, queue, key string) error {
	return i.keyed(ctx, "cancel", scripts.keyedCancel, queue, key)
}

func (i *Inspector) keyed(ctx context.Context, verb string, script *redis.Script, queue, key string) error {
	if err := checkKey(key); err != nil {
		return err
	}
	if err := i.checkQueue(ctx, queue); err != nil {
		return err
	}
	n, err := i.keyedCall(ctx, script, newQueueKeys(i.opts.namespace, queue), key)
	if err != nil {
		return errorf("redq: %s %q in %q: %w", verb, key, queue, err)
	}
	if n != 1 {
		return errorf("redq: %s %q in %q: %w: the key has no pending item", verb, key, queue, ErrorNotFound)
	}
	return nil
}

// Purge deletes every ready, delayed or rejected delivery of a queue in one
// script and returns how many; keyed items waiting there go with them.
// Unacked deliveries stay with their connections (the state unacked is
// refused with ErrorHeld); the state keyed is refused with an
// *ArgumentError (use Cancel).
func (i *Inspector) Purge(ctx context.Context, queue string, state DeliveryState) (int64, error) {
	if !state.valid() {
		return 0, argError("state", string(state), fmt.Sprintf("must be one of %v", DeliveryStates()))
	}
	switch state {
	case StateUnacked:
		return 0, errorf("redq: purge unacked of %q: %w", queue, ErrorHeld)
	case StateKeyed:
		return 0, argError("state", string(state), "purge applies to ready, delayed and rejected")
	}
	if err := i.checkQueue(ctx, queue); err != nil {
		return 0, err
	}
	k := newQueueKeys(i.opts.namespace, queue)
	var n int64
	var err error
	if state == StateDelayed {
		n, err = scripts.inspectPurgeDelayed.Run(ctx, i.client, k.block0()).Int64()
	} else {
		what := map[DeliveryState]string{StateReady: "r", StateRejected: "j"}[state]
		var v []int64
		if v, err = scripts.purge.Run(ctx, i.client, k.block0(), what).Int64Slice(); err == nil {
			n = v[0] + v[1]
		}
	}
	if err != nil {
		return 0, errorf("redq: purge %s of %q: %w", state, queue, err)
	}
	return n, nil
}
