package redq

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// afterHook runs f once, after the first HSCAN whose text contains match
// has been answered.
type afterHook struct {
	match string
	once  sync.Once
	f     func()
}

func (h *afterHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *afterHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if cmd.Name() == "hscan" && strings.Contains(cmd.String(), h.match) {
			h.once.Do(h.f)
		}
		return err
	}
}

func (h *afterHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// hookedInspector is an Inspector on a client of its own whose commands
// run hook (the backend's client is shared with the queue's connection).
func hookedInspector(t testing.TB, b backend, ns Option, hook redis.Hook) *Inspector {
	t.Helper()
	var c *redis.Client
	if b.mini != nil {
		c = redis.NewClient(&redis.Options{Addr: b.mini.Addr()})
		t.Cleanup(func() { c.Close() })
	} else {
		c = realClient(t)
	}
	c.AddHook(hook)
	i, err := NewInspector(c, ns)
	if err != nil {
		t.Fatal(err)
	}
	return i
}

// Delete of a pending keyed item by id removes that item only: when the
// item is taken between the lookup and the action, and the key gets a new
// item (or a parked successor), the action reports the move and leaves the
// key's new item alone.
func TestInspectorKeyedDeleteByID(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		for _, settle := range []bool{true, false} {
			ctx := context.Background()
			ns := namespace()
			c := openT(t, b, "c", ns)
			q := openQueue(t, c, "jobs")
			if _, err := q.Upsert(ctx, "k", []byte("old")); err != nil {
				t.Fatal(err)
			}
			oldID := listAll(t, newInspectorT(t, b, ns), "jobs", ListOptions{State: StateKeyed})[0].ID
			var taken Message
			i := hookedInspector(t, b, ns, &afterHook{match: ":kpend", f: func() {
				taken = mustTake(t, q, time.Second)
				if settle {
					if err := taken.Ack(); err != nil {
						t.Error(err)
					}
				}
				if _, err := q.Upsert(ctx, "k", []byte("new")); err != nil {
					t.Error(err)
				}
			}})
			err := i.Delete(ctx, "jobs", oldID)
			if !errors.Is(err, ErrorNotFound) {
				t.Fatalf("settled=%v: Delete of a keyed item taken meanwhile: %v, want ErrorNotFound", settle, err)
			}
			if !settle {
				if err := taken.Ack(); err != nil {
					t.Fatal(err)
				}
			}
			if item := mustLookup(t, q, "k"); string(item.Payload) != "new" || !item.Pending {
				t.Fatalf("settled=%v: after the Delete the key holds %+v, want its new pending item", settle, item)
			}
		}
	})
}

// Retry of a keyed item, found in delayed as List shows it or as keyed,
// runs it now (it was refused as "moved meanwhile"), once: an item taken
// meanwhile, whose key has a new item since, is left alone. Retried counts
// what went back to ready after a take: a rejected delivery, not a
// delayed or keyed one that was never taken.
func TestInspectorRetryKeyedAndCounts(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		ns := namespace()
		c := openT(t, b, "c", ns)
		q := openQueue(t, c, "jobs")
		i := newInspectorT(t, b, ns)
		if _, err := q.Upsert(ctx, "k", []byte("later"), Delay(time.Hour)); err != nil {
			t.Fatal(err)
		}
		delayed := listAll(t, i, "jobs", ListOptions{State: StateDelayed})
		if len(delayed) != 1 || delayed[0].Key != "k" {
			t.Fatalf("delayed = %+v, want the keyed item", delayed)
		}
		if err := i.Retry(ctx, "jobs", delayed[0].ID); err != nil {
			t.Fatalf("Retry of a delayed keyed item: %v", err)
		}
		if item := mustLookup(t, q, "k"); !item.Pending || time.Until(item.Due) > time.Minute {
			t.Fatalf("after Retry the key holds %+v, want its item due now", item)
		}
		m := mustTake(t, q, time.Second)
		if m.Payload() != "later" || m.ID() != delayed[0].ID {
			t.Fatalf("took %q %s, want the retried item %s", m.Payload(), m.ID(), delayed[0].ID)
		}
		if err := m.Reject(); err != nil {
			t.Fatal(err)
		}
		// a plain delayed delivery
		if err := q.Put(ctx, []byte("plain"), Delay(time.Hour)); err != nil {
			t.Fatal(err)
		}
		for _, d := range listAll(t, i, "jobs", ListOptions{State: StateDelayed}) {
			if err := i.Retry(ctx, "jobs", d.ID); err != nil {
				t.Fatal(err)
			}
		}
		info, err := i.Queue(ctx, "jobs")
		if err != nil {
			t.Fatal(err)
		}
		if info.Retried != 0 || info.Ready != 1 {
			t.Fatalf("after Retry of delayed deliveries never taken: retried %d, ready %d; want 0, 1", info.Retried, info.Ready)
		}
		// the rejected keyed delivery went back to ready after a take
		if err := i.Retry(ctx, "jobs", m.ID()); err != nil {
			t.Fatal(err)
		}
		if info, _ = i.Queue(ctx, "jobs"); info.Retried != 1 {
			t.Fatalf("after Retry of a rejected delivery: retried %d, want 1", info.Retried)
		}

		// taken meanwhile, and the key has a new item since
		if _, err := q.Upsert(ctx, "k2", []byte("old"), Delay(time.Hour)); err != nil {
			t.Fatal(err)
		}
		var oldID string
		for _, d := range listAll(t, i, "jobs", ListOptions{State: StateKeyed}) {
			if d.Key == "k2" {
				oldID = d.ID
			}
		}
		hi := hookedInspector(t, b, ns, &afterHook{match: ":kpend", f: func() {
			if _, err := q.RunNow(ctx, "k2"); err != nil {
				t.Error(err)
			}
			for {
				d := mustTake(t, q, time.Second)
				if err := d.Ack(); err != nil {
					t.Error(err)
				}
				if d.ID() == oldID {
					break
				}
			}
			if _, err := q.Upsert(ctx, "k2", []byte("new"), Delay(time.Hour)); err != nil {
				t.Error(err)
			}
		}})
		if err := hi.Retry(ctx, "jobs", oldID); !errors.Is(err, ErrorNotFound) {
			t.Fatalf("Retry of a keyed item taken meanwhile: %v, want ErrorNotFound", err)
		}
		if item := mustLookup(t, q, "k2"); string(item.Payload) != "new" || time.Until(item.Due) < 30*time.Minute {
			t.Fatalf("after the Retry the key holds %+v, want its new item, still delayed", item)
		}
	})
}

// Destroy forgets a pause (the flag and the resume list) and the counters:
// a queue opened again under the same name starts unpaused and from zero,
// and its consumers get what is published.
func TestDestroyClearsPauseAndCounters(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		ns := namespace()
		c := openT(t, b, "c", ns)
		q := openQueue(t, c, "jobs")
		i := newInspectorT(t, b, ns)
		mustPut(t, q, "one")
		if err := q.Pause(ctx); err != nil {
			t.Fatal(err)
		}
		if err := q.Resume(ctx); err != nil { // leaves a resume list behind
			t.Fatal(err)
		}
		if _, _, err := q.DestroyContext(ctx); err != nil {
			t.Fatal(err)
		}
		k := q.keys
		for _, key := range []string{k.meta(), k.resume()} {
			if n := b.client.Exists(ctx, key).Val(); n != 0 {
				m, _ := b.client.HGetAll(ctx, key).Result()
				t.Errorf("after Destroy %s is left, holding %q", key, m)
			}
		}
		q = openQueue(t, c, "jobs")
		mustPut(t, q, "one again")
		if err := q.Pause(ctx); err != nil {
			t.Fatal(err)
		}
		if _, _, err := q.DestroyContext(ctx); err != nil {
			t.Fatal(err)
		}
		q = openQueue(t, c, "jobs")
		info, err := i.Queue(ctx, "jobs")
		if err != nil {
			t.Fatal(err)
		}
		if info.Paused || info.Published != 0 {
			t.Fatalf("reopened after Destroy: paused %v, published %d; want false, 0", info.Paused, info.Published)
		}
		mustPut(t, q, "two")
		if m := mustTake(t, q, 2*time.Second); m.Payload() != "two" {
			t.Fatalf("took %q, want two", m.Payload())
		}
	})
}

// The test double's Destroy ends a pause too.
func TestTestQueueDestroyEndsPause(t *testing.T) {
	q := NewTestQueue("q")
	if err := q.Pause(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, _, err := q.Destroy(); err != nil || q.Paused() {
		t.Fatalf("after Destroy: paused %v, err %v", q.Paused(), err)
	}
}

// A push counts as published on the push queue, same slot or staged, plain,
// batch and keyed, once even when the staged move is applied again: the
// push queue's acked never exceeds its published.
func TestCounterPushPublishedOnTarget(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		for _, staged := range []bool{false, true} {
			ctx := context.Background()
			ns := namespace()
			c := openT(t, b, "c", ns)
			c.forceStaged = staged
			q := openQueue(t, c, "work")
			dst := openQueue(t, c, "failed")
			q.SetPushQueue(dst)
			i := newInspectorT(t, b, ns)
			if err := q.Publish("1", "2", "3"); err != nil {
				t.Fatal(err)
			}
			ds := take(t, q, 3)
			if err := ds[0].Push(); err != nil {
				t.Fatal(err)
			}
			if errs := (Deliveries{ds[1], ds[2]}).Push(); len(errs) > 0 {
				t.Fatal(errs)
			}
			mustUpsert(t, q, "k", "v1", Created)
			if err := mustTake(t, q, time.Second).Push(); err != nil {
				t.Fatal(err)
			}
			want := int64(4)
			if staged {
				// a pusher stopped after step 1; a cleaner finishes the
				// move, and step 2 sent again lands nothing
				if err := q.Publish("5"); err != nil {
					t.Fatal(err)
				}
				d := mustTake(t, q, time.Second)
				c.afterStage = runtime.Goexit
				done := make(chan struct{})
				go func() {
					defer close(done)
					_ = d.Push()
				}()
				<-done
				c.afterStage = nil
				fields := outbox(t, q)
				if len(fields) != 1 {
					t.Fatalf("outbox holds %v", fields)
				}
				v := c.client.HGet(ctx, q.keys.outbox, fields[0]).Val()
				env := v[strings.Index(v[strings.Index(v, "|")+1:], "|")+strings.Index(v, "|")+2:]
				if _, err := q.finishStaged(ctx); err != nil {
					t.Fatal(err)
				}
				n, err := scripts.moveApply.Run(ctx, c.client, dst.keys.block0(), q.name, fields[0], env).Int64()
				if err != nil || n != 0 {
					t.Fatalf("step 2 sent again applied %d, %v; want 0", n, err)
				}
				want = 5
			}
			for n := int64(0); n < want; n++ {
				if err := mustTake(t, dst, time.Second).Ack(); err != nil {
					t.Fatal(err)
				}
			}
			info, err := i.Queue(ctx, "failed")
			if err != nil {
				t.Fatal(err)
			}
			if info.Published != want || info.Acked != want {
				t.Fatalf("staged=%v: push queue published %d, acked %d; want %d, %d", staged, info.Published, info.Acked, want, want)
			}
		}
	})
}

// A delivery that expires into rejected (keep_expired) counts as rejected,
// so that the counters' rejected matches what reached the rejected list.
func TestCounterExpiredIntoRejected(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		clock := newSchedClock(b)
		ns := namespace()
		c := openT(t, b, "keep", ns)
		q, err := c.OpenQueue("q", WithKeepExpired(true))
		if err != nil {
			t.Fatal(err)
		}
		const ttl = 300 * time.Millisecond
		mustPut(t, q, "x", TTL(ttl))
		clock.pass(ttl + 200*time.Millisecond)
		schedNothingReady(t, q, "after the TTL")
		schedWantStats(t, c, "q", schedCounts{expired: 1, rejected: 1})
		info, err := newInspectorT(t, b, ns).Queue(context.Background(), "q")
		if err != nil {
			t.Fatal(err)
		}
		if info.Rejects != 1 {
			t.Fatalf("rejected total %d after an expiry into rejected, want 1", info.Rejects)
		}
	})
}

// The three answers of a by-id action that cannot act, as docs/inspector.md
// lists them: held → ErrorHeld only; gone → ErrorNotFound only; a state
// the action does not apply to → *ArgumentError on "delivery state".
func TestInspectorActionErrorKinds(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		ns := namespace()
		c := openT(t, b, "c", ns)
		q := openQueue(t, c, "jobs")
		i := newInspectorT(t, b, ns)
		mustPut(t, q, "held")
		held := mustTake(t, q, time.Second)
		for _, f := range []func(context.Context, string, string) error{i.Delete, i.Retry} {
			if err := f(ctx, "jobs", held.ID()); !errors.Is(err, ErrorHeld) || errors.Is(err, ErrorNotFound) || errors.Is(err, ErrorInvalidArgument) {
				t.Fatalf("action on a held delivery: %v, want ErrorHeld only", err)
			}
		}
		if err := held.Ack(); err != nil {
			t.Fatal(err)
		}
		for _, f := range []func(context.Context, string, string) error{i.Delete, i.Retry} {
			if err := f(ctx, "jobs", held.ID()); !errors.Is(err, ErrorNotFound) || errors.Is(err, ErrorHeld) {
				t.Fatalf("action on an acked delivery: %v, want ErrorNotFound only", err)
			}
		}
		mustPut(t, q, "ready")
		id := listAll(t, i, "jobs", ListOptions{State: StateReady})[0].ID
		var ae *ArgumentError
		if err := i.Retry(ctx, "jobs", id); !errors.As(err, &ae) || ae.Arg != "delivery state" || errors.Is(err, ErrorNotFound) {
			t.Fatalf("Retry of a ready delivery: %v, want an *ArgumentError on delivery state", err)
		}
	})
}

// twiceHook sends every call of one script a second time once the first
// was answered, and gives the caller the second answer: the reply of the
// first send is lost and go-redis (or the caller) sends the same call
// again.
type twiceHook struct{ sha string }

func (h twiceHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h twiceHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if args := cmd.Args(); err == nil && cmd.Name() == "evalsha" && len(args) > 1 && args[1] == h.sha {
			return next(ctx, cmd)
		}
		return err
	}
}

func (h twiceHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// A by-id action whose call is sent again after it ran (its reply lost)
// answers done, from the receipt the first send left, and acts once: a
// retried delivery is in ready once, a deleted one is gone, and neither
// answer is "moved meanwhile".
func TestInspectorActionSentTwiceAnswersDone(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		ns := namespace()
		c := openT(t, b, "c", ns)
		q := openQueue(t, c, "jobs")
		for _, p := range []string{"a", "b"} {
			mustPut(t, q, p)
		}
		for range 2 {
			if err := mustTake(t, q, time.Second).Reject(); err != nil {
				t.Fatal(err)
			}
		}
		i := hookedInspector(t, b, ns, twiceHook{sha: scripts.inspectAct.Hash()})
		// loaded, so that every call is an EVALSHA the hook sends twice
		if err := scripts.inspectAct.Load(ctx, i.client).Err(); err != nil {
			t.Fatal(err)
		}
		dead := listAll(t, i, "jobs", ListOptions{State: StateRejected})
		if len(dead) != 2 {
			t.Fatalf("rejected: %d, want 2", len(dead))
		}
		if err := i.Retry(ctx, "jobs", dead[0].ID); err != nil {
			t.Fatalf("Retry sent twice: %v, want done", err)
		}
		if err := i.Delete(ctx, "jobs", dead[1].ID); err != nil {
			t.Fatalf("Delete sent twice: %v, want done", err)
		}
		wantCounts(t, c, "jobs", 1, 0, 0)
		if d := mustTake(t, q, time.Second); d.Payload() != string(dead[0].Payload) {
			t.Fatalf("ready holds %q, want the retried %q", d.Payload(), dead[0].Payload)
		}
	})
}
