package redq

import (
	"context"
	"errors"
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
