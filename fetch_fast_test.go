package redq

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// fetchPaths are fetch.lua's fast path alone (it answers "fell" where it
// hands the call to the full path) and its full path alone, each as
// Redis runs it, with the test binary's prelude.
func fetchPaths(t *testing.T) (fast, full *redis.Script) {
	t.Helper()
	lib, src := readScript("lib"), readScript("fetch")
	head, tail, ok := strings.Cut(src, "\n"+fullPathMark+"\n")
	if !ok {
		t.Fatal("fetch.lua has no fast path")
	}
	fast = redis.NewScript(testPrelude + compact(withHelpers(lib, head)+"\nreturn 'fell'\n"))
	full = redis.NewScript(testPrelude + compact(withHelpers(lib, tail)))
	return fast, full
}

// keyState is every key under a prefix, each as its type and contents,
// with the connection's name and the times a run writes made comparable.
type keyState map[string]string

var minuteField = regexp.MustCompile(`^([a-z]+)\d+$`)

// keyCopy is one key's type and contents, as restoreKeys writes it back.
type keyCopy struct {
	typ    string
	items  []string      // a list's elements, a set's members, a string
	fields []string      // a hash's fields and values, in pairs
	zs     []redis.Z     // a sorted set's members
	ttl    time.Duration // 0: none
}

// snapshotKeys reads every key that starts with prefix, as a state to
// compare (with whether each key expires) and as copies to restore. (miniredis answers DUMP for strings
// only.)
func snapshotKeys(t *testing.T, c redis.UniversalClient, prefix string) (keyState, map[string]keyCopy) {
	t.Helper()
	ctx := context.Background()
	keys, err := c.Keys(ctx, prefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	state, copies := keyState{}, map[string]keyCopy{}
	for _, k := range keys {
		kc := keyCopy{typ: c.Type(ctx, k).Val()}
		var v string
		switch kc.typ {
		case "list":
			kc.items = c.LRange(ctx, k, 0, -1).Val()
			v = fmt.Sprintf("%q", kc.items)
		case "set":
			kc.items = c.SMembers(ctx, k).Val()
			slices.Sort(kc.items)
			v = fmt.Sprintf("%q", kc.items)
		case "hash":
			h := c.HGetAll(ctx, k).Val()
			fields := make([]string, 0, len(h))
			for f, x := range h {
				kc.fields = append(kc.fields, f, x)
				// per-minute counters: the runs may fall in two minutes
				fields = append(fields, fmt.Sprintf("%q=%q", minuteField.ReplaceAllString(f, "$1#"), x))
			}
			slices.Sort(fields)
			v = strings.Join(fields, " ")
		case "zset":
			kc.zs = c.ZRangeWithScores(ctx, k, 0, -1).Val()
			var b strings.Builder
			for _, z := range kc.zs {
				// scores that are Redis times may differ by the runs' gap
				fmt.Fprintf(&b, "%q@%d ", z.Member, int64(math.Round(z.Score/1e4)))
			}
			v = b.String()
		case "string":
			kc.items = []string{c.Get(ctx, k).Val()}
			v = fmt.Sprintf("%q", kc.items[0])
		default:
			t.Fatalf("key %s: type %s", k, kc.typ)
		}
		if ttl := c.PTTL(ctx, k).Val(); ttl > 0 {
			kc.ttl = ttl
			v += " (expires)" // when may differ by the runs' gap
		}
		state[k] = kc.typ + ":" + v
		copies[k] = kc
	}
	return state, copies
}

// restoreKeys puts back what snapshotKeys read under prefix.
func restoreKeys(t *testing.T, c redis.UniversalClient, prefix string, copies map[string]keyCopy) {
	t.Helper()
	ctx := context.Background()
	if keys := c.Keys(ctx, prefix+"*").Val(); len(keys) > 0 {
		c.Del(ctx, keys...)
	}
	for k, kc := range copies {
		var err error
		switch kc.typ {
		case "list":
			err = c.RPush(ctx, k, kc.items).Err()
		case "set":
			err = c.SAdd(ctx, k, kc.items).Err()
		case "hash":
			err = c.HSet(ctx, k, kc.fields).Err()
		case "zset":
			err = c.ZAdd(ctx, k, kc.zs...).Err()
		case "string":
			err = c.Set(ctx, k, kc.items[0], 0).Err()
		}
		if err == nil && kc.ttl > 0 {
			err = c.PExpire(ctx, k, kc.ttl).Err()
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// sameReply compares two fetch replies: the deliveries, the fence and a
// hint of 0 or less exactly, a hint of ms until something is due within
// 100ms.
func sameReply(a, b any) bool {
	x, ok1 := a.([]any)
	y, ok2 := b.([]any)
	if !ok1 || !ok2 || len(x) != len(y) || len(x) < 3 {
		return reflect.DeepEqual(a, b)
	}
	n := len(x)
	hx, okx := x[n-2].(int64)
	hy, oky := y[n-2].(int64)
	if !okx || !oky || (hx != hy && (hx <= 0 || hy <= 0 || math.Abs(float64(hx-hy)) > 100)) {
		return false
	}
	return reflect.DeepEqual(x[:n-2], y[:n-2]) && reflect.DeepEqual(x[n-1], y[n-1])
}

// The fast path of a fetch takes and answers exactly as the full path
// does: for each state of a queue, the full path runs on it, then the fast
// path alone on the same state (restored), which must either answer and
// leave the same state, or hand the call on ("fell") having changed
// nothing; then the script itself. Each state says which of the two the
// fast path must do, so a fast path that served nothing would fail too.
func TestFetchFastPathTakesAsTheFullPathDoes(t *testing.T) {
	type setup struct {
		name   string
		served bool // the fast path serves the call
		n, cap int64
		opts   []QueueOption
		// prepare builds the state; it may change the call's token
		// (default 100) and the fetch's keys
		prepare func(t *testing.T, q *redisQueue, c redis.UniversalClient, call *fetchCall)
	}
	publish := func(t *testing.T, q *redisQueue, payloads ...string) {
		t.Helper()
		if err := q.Publish(payloads...); err != nil {
			t.Fatal(err)
		}
	}
	put := func(t *testing.T, q *redisQueue, payload string, opts ...PublishOption) {
		t.Helper()
		mustPut(t, q, payload, opts...)
	}
	setups := []setup{
		{name: "plain, more ready than asked", served: true, n: 2, prepare: func(t *testing.T, q *redisQueue, _ redis.UniversalClient, _ *fetchCall) {
			publish(t, q, "a", "b", "c")
		}},
		{name: "plain, fewer ready than asked", served: true, n: 5, prepare: func(t *testing.T, q *redisQueue, _ redis.UniversalClient, _ *fetchCall) {
			publish(t, q, "a", "b")
		}},
		{name: "empty", served: true, n: 5},
		// the delay pushed the wake marker (see lib.lua) into ready
		{name: "empty, a delayed delivery due later", n: 5, prepare: func(t *testing.T, q *redisQueue, _ redis.UniversalClient, _ *fetchCall) {
			put(t, q, "later", Delay(time.Hour))
		}},
		{name: "plain, with a delayed delivery due later", served: true, n: 5, prepare: func(t *testing.T, q *redisQueue, c redis.UniversalClient, _ *fetchCall) {
			put(t, q, "later", Delay(20*time.Minute))
			c.Del(context.Background(), q.keys.ready) // the wake marker (see lib.lua)
			publish(t, q, "a")
		}},
		{name: "plain, a lease running", served: true, n: 5, cap: 10, prepare: func(t *testing.T, q *redisQueue, _ redis.UniversalClient, call *fetchCall) {
			put(t, q, "leased", TTR(time.Hour))
			call.run(t, 5)
			publish(t, q, "a", "b")
		}},
		{name: "cap leaves room for some", served: true, n: 5, cap: 3, prepare: func(t *testing.T, q *redisQueue, _ redis.UniversalClient, call *fetchCall) {
			publish(t, q, "held")
			call.run(t, 1)
			publish(t, q, "a", "b", "c", "d")
		}},
		{name: "cap reached", n: 5, cap: 1, prepare: func(t *testing.T, q *redisQueue, _ redis.UniversalClient, call *fetchCall) {
			publish(t, q, "held", "a")
			call.run(t, 1)
		}},
		{name: "a delayed delivery due", n: 5, prepare: func(t *testing.T, q *redisQueue, c redis.UniversalClient, _ *fetchCall) {
			put(t, q, "due", Delay(time.Millisecond))
			c.Del(context.Background(), q.keys.ready) // the wake marker
			publish(t, q, "a")
			time.Sleep(5 * time.Millisecond)
		}},
		{name: "a lease ran out", n: 5, prepare: func(t *testing.T, q *redisQueue, _ redis.UniversalClient, call *fetchCall) {
			put(t, q, "leased", TTR(time.Millisecond))
			call.run(t, 1)
			publish(t, q, "a")
			time.Sleep(5 * time.Millisecond)
		}},
		{name: "priorities in use", n: 5, prepare: func(t *testing.T, q *redisQueue, _ redis.UniversalClient, _ *fetchCall) {
			publish(t, q, "a")
			put(t, q, "urgent", Priority(3))
		}},
		{name: "paused", n: 5, prepare: func(t *testing.T, q *redisQueue, _ redis.UniversalClient, _ *fetchCall) {
			publish(t, q, "a")
			if err := q.Pause(context.Background()); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "rate limit", n: 5, opts: []QueueOption{WithRateLimit(2, time.Minute)}, prepare: func(t *testing.T, q *redisQueue, _ redis.UniversalClient, _ *fetchCall) {
			publish(t, q, "a", "b", "c")
		}},
		{name: "groups", n: 5, prepare: func(t *testing.T, q *redisQueue, _ redis.UniversalClient, _ *fetchCall) {
			put(t, q, "g", Group("one"))
			publish(t, q, "a")
		}},
		{name: "metadata envelope behind a plain one", n: 2, prepare: func(t *testing.T, q *redisQueue, _ redis.UniversalClient, _ *fetchCall) {
			publish(t, q, "first")
			put(t, q, "second", Header(http.Header{"X": {"y"}}))
			publish(t, q, "third")
		}},
		{name: "a payload some other program pushed", n: 3, prepare: func(t *testing.T, q *redisQueue, c redis.UniversalClient, _ *fetchCall) {
			publish(t, q, "first")
			c.LPush(context.Background(), q.keys.ready, "foreign")
		}},
		{name: "one envelope twice", n: 3, prepare: func(t *testing.T, q *redisQueue, c redis.UniversalClient, _ *fetchCall) {
			publish(t, q, "twice")
			ctx := context.Background()
			e := c.LIndex(ctx, q.keys.ready, 0).Val()
			c.LPush(ctx, q.keys.ready, e)
		}},
		{name: "a keyed item", n: 3, prepare: func(t *testing.T, q *redisQueue, _ redis.UniversalClient, _ *fetchCall) {
			publish(t, q, "a")
			if _, err := q.Upsert(context.Background(), "k", []byte("v")); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "keyed items only", n: 3, prepare: func(t *testing.T, q *redisQueue, _ redis.UniversalClient, _ *fetchCall) {
			if _, err := q.Upsert(context.Background(), "k", []byte("v")); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "a resend", n: 2, prepare: func(t *testing.T, q *redisQueue, _ redis.UniversalClient, call *fetchCall) {
			publish(t, q, "a", "b", "c")
			call.runAs(t, "f0", 100, 2) // the call under test, sent before
		}},
		{name: "a late send", n: 2, prepare: func(t *testing.T, q *redisQueue, _ redis.UniversalClient, call *fetchCall) {
			publish(t, q, "a", "b", "c")
			call.runAs(t, "f0", 101, 1) // a later call that reached Redis first
		}},
		{name: "not registered", n: 2, prepare: func(t *testing.T, q *redisQueue, c redis.UniversalClient, _ *fetchCall) {
			publish(t, q, "a")
			c.HDel(context.Background(), q.keys.consumers, q.conn.Name())
		}},
		{name: "another connection's storage declared", n: 2, prepare: func(t *testing.T, q *redisQueue, _ redis.UniversalClient, call *fetchCall) {
			publish(t, q, "a", "b")
			call.keys = q.keys.scriptKeys(q.keys.rate(), nil, q.keys.connKeys(call.conn), q.keys.connKeys("other-1"))
		}},
	}
	fast, full := fetchPaths(t)
	forEachBackend(t, func(t *testing.T, b backend) {
		for _, s := range setups {
			t.Run(s.name, func(t *testing.T) {
				c := openT(t, b, "fast", namespace())
				qi, err := c.OpenQueue("q", s.opts...)
				if err != nil {
					t.Fatal(err)
				}
				q := qi.(*redisQueue)
				ctx := context.Background()
				if err := scripts.setConsumers.Run(ctx, c.client, []string{q.keys.consumers}, c.Name(), 0, "1").Err(); err != nil {
					t.Fatal(err)
				}
				call := &fetchCall{c: b.client, keys: q.fetchKeys(c.registration()), conn: c.Name(), token: 100, field: "f0", cap: s.cap}
				if s.prepare != nil {
					s.prepare(t, q, b.client, call)
				}
				prefix := q.keys.prefix + ":"
				before, dumps := snapshotKeys(t, b.client, prefix)

				want, wantErr := call.with(full).do(s.n)
				after, _ := snapshotKeys(t, b.client, prefix)

				restoreKeys(t, b.client, prefix, dumps)
				got, err := call.with(fast).do(s.n)
				state, _ := snapshotKeys(t, b.client, prefix)
				switch {
				case got == "fell":
					if s.served {
						t.Fatalf("the fast path handed the call on; want it served (full path: %v, %v)", want, wantErr)
					}
					if !reflect.DeepEqual(state, before) {
						t.Fatalf("the fast path handed the call on and changed the state:\n%v\nwant\n%v", state, before)
					}
				case !s.served:
					t.Fatalf("the fast path answered %v, %v; want it to hand the call on", got, err)
				default:
					if !sameReply(got, want) || fmt.Sprint(err) != fmt.Sprint(wantErr) {
						t.Fatalf("fast path: %v, %v; full path: %v, %v", got, err, want, wantErr)
					}
					if !reflect.DeepEqual(state, after) {
						t.Fatalf("fast path left\n%v\nfull path\n%v", state, after)
					}
				}

				restoreKeys(t, b.client, prefix, dumps)
				got, err = call.with(scripts.fetch).do(s.n)
				state, _ = snapshotKeys(t, b.client, prefix)
				if !sameReply(got, want) || fmt.Sprint(err) != fmt.Sprint(wantErr) {
					t.Fatalf("fetch: %v, %v; full path: %v, %v", got, err, want, wantErr)
				}
				if !reflect.DeepEqual(state, after) {
					t.Fatalf("fetch left\n%v\nfull path\n%v", state, after)
				}
			})
		}
	})
}

// fetchCall is one fetch's arguments, sent by a script of the test's choice.
type fetchCall struct {
	c          redis.UniversalClient
	script     *redis.Script
	keys       []string
	conn       string
	token      int64
	field      string
	cap        int64
	setupToken int64
}

func (f *fetchCall) with(s *redis.Script) *fetchCall {
	g := *f
	g.script = s
	return &g
}

// do sends the call for n deliveries and returns Redis's answer.
func (f *fetchCall) do(n int64) (any, error) {
	s := f.script
	if s == nil {
		s = scripts.fetch
	}
	return s.Run(context.Background(), f.c, f.keys, f.conn, n, f.token, f.field, f.cap).Result()
}

// run takes n with the real script under another field (a setup's own
// takes), failing the test on an error.
func (f *fetchCall) run(t *testing.T, n int64) {
	t.Helper()
	f.setupToken++
	f.runAs(t, "setup", f.setupToken, n)
}

// runAs takes n with the real script under field and token.
func (f *fetchCall) runAs(t *testing.T, field string, token, n int64) {
	t.Helper()
	g := *f
	g.field, g.token, g.script = field, token, nil
	if _, err := g.do(n); err != nil {
		t.Fatal(err)
	}
}
