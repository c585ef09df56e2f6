package redq

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redq/redq/internal/redistest"
)

// refusalVerbs are the verbs that change Redis, each run once with the
// ends given: a context for the call, and held deliveries to settle.
func refusalVerbs(q *redisQueue, held []Message) []struct {
	name string
	run  func(ctx context.Context) error
} {
	return []struct {
		name string
		run  func(ctx context.Context) error
	}{
		{"Publish", func(ctx context.Context) error { return q.PublishContext(ctx, "refused") }},
		{"Publish 200", func(ctx context.Context) error { return q.PublishContext(ctx, procPayloads("refused", 200)...) }},
		{"Put delayed", func(ctx context.Context) error { return q.Put(ctx, []byte("refused"), Delay(time.Minute)) }},
		{"Ack", func(ctx context.Context) error { return held[0].AckContext(ctx) }},
		{"Reject", func(ctx context.Context) error { return held[1].RejectContext(ctx) }},
		{"Release", func(ctx context.Context) error { return held[2].Release(ctx, 0) }},
	}
}

// refusingSetup opens two connections on a private Redis, one with the
// default retry timeout and one with a short one, each with a queue and
// three held deliveries.
type refusingSetup struct {
	srv   *redistest.Server
	admin *redis.Client
	q     [2]*redisQueue
	held  [2][]Message
}

func newRefusingSetup(t *testing.T, clientOpts redis.Options) *refusingSetup {
	t.Helper()
	s := &refusingSetup{srv: redistest.Start(t)}
	s.admin = s.srv.Client(t)
	clientOpts.Addr = s.srv.Addr()
	for i, opts := range [][]Option{nil, {WithRetryTimeout(300 * time.Millisecond)}} {
		client := redis.NewClient(&clientOpts)
		t.Cleanup(func() { client.Close() })
		c, err := openConn(client, "refused", nil, append(opts, namespace(), WithHeartbeat(50*time.Millisecond, 30*time.Second), WithHeartbeatErrorLimit(1000))...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.StopAllConsuming() })
		s.q[i] = openQueue(t, c, "jobs")
		if err := s.q[i].Publish("a", "b", "c"); err != nil {
			t.Fatal(err)
		}
		s.held[i] = take(t, s.q[i], 3)
	}
	return s
}

// wantFinal runs every verb with a short context deadline (on the first
// connection) and with a short retry timeout (on the second), and checks
// each error with want.
func (s *refusingSetup) wantFinal(t *testing.T, want func(verb string, err error) string, only ...string) {
	t.Helper()
	for i, mode := range []string{"context deadline", "retry timeout"} {
		for _, v := range refusalVerbs(s.q[i], s.held[i]) {
			if len(only) > 0 && !slices.Contains(only, v.name) {
				continue
			}
			ctx, cancel := context.Background(), context.CancelFunc(func() {})
			if i == 0 {
				ctx, cancel = context.WithTimeout(ctx, 300*time.Millisecond)
			}
			start := time.Now()
			err := v.run(ctx)
			cancel()
			if why := want(v.name, err); why != "" {
				t.Errorf("%s with a %s, after %v: %v: %s", v.name, mode, time.Since(start).Round(time.Millisecond), err, why)
			}
		}
	}
}

// refused checks for ErrorWritesRefused carrying Redis's refusal. Out of
// memory, Redis still lets settles through: they free memory or move it.
func refused(prefix string) func(verb string, err error) string {
	return func(verb string, err error) string {
		switch {
		case prefix == "OOM" && !strings.HasPrefix(verb, "P"):
			if err != nil {
				return "want nil: Redis lets deletes and moves through when out of memory"
			}
		case !errors.Is(err, ErrorWritesRefused):
			return "want ErrorWritesRefused"
		case errors.Is(err, ErrorOutcomeUnknown):
			return "want no ErrorOutcomeUnknown: every send was refused"
		case !containsRedisError(err, prefix):
			return "want Redis's " + prefix + " error in the chain"
		}
		return ""
	}
}

// When every send of a call is answered with a refusal, the final error is
// ErrorWritesRefused, whether the retry timeout or the caller's deadline
// ended the retries, and nothing was done.
func TestRefusalsEndInWritesRefusedWhateverEndsTheRetries(t *testing.T) {
	cases := []struct {
		name   string
		refuse [][]any
		prefix string
	}{
		// A replica of another server: writes get READONLY, which go-redis
		// also retries by itself before redq sees it.
		{"read-only replica", nil, "READONLY"},
		{"out of memory", [][]any{{"CONFIG", "SET", "maxmemory-policy", "noeviction"}, {"CONFIG", "SET", "maxmemory", "1"}}, "OOM"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newRefusingSetup(t, redis.Options{})
			ctx := context.Background()
			refuse := tc.refuse
			if refuse == nil {
				primary := redistest.Start(t)
				refuse = [][]any{{"REPLICAOF", "127.0.0.1", strconv.Itoa(primary.Port())}}
			}
			for _, cmd := range refuse {
				if err := s.admin.Do(ctx, cmd...).Err(); err != nil {
					t.Fatal(err)
				}
			}
			s.wantFinal(t, refused(tc.prefix))
			// an open, which registers the connection, is refused alike
			_, err := OpenConnectionWithRedisOptions("refused", &redis.Options{Addr: s.srv.Addr()}, nil, namespace(), WithRetryTimeout(100*time.Millisecond))
			if !errors.Is(err, ErrorWritesRefused) || !containsRedisError(err, tc.prefix) {
				t.Errorf("open while Redis refuses writes: %v, want ErrorWritesRefused with %s", err, tc.prefix)
			}
			if t.Failed() || tc.refuse == nil {
				return // a replica's data is its primary's now
			}
			if err := s.admin.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
				t.Fatal(err)
			}
			for i := range s.q {
				// the refused publishes left nothing; the settles went through
				wantCounts(t, s.q[i].conn, "jobs", 1, 1, 0)
			}
		})
	}
}

// A Redis that really does not answer (stopped with SIGSTOP) still gives
// ErrorOutcomeUnknown: a send may have reached it.
func TestUnansweredSendsEndInOutcomeUnknown(t *testing.T) {
	s := newRefusingSetup(t, redis.Options{ReadTimeout: 200 * time.Millisecond, MaxRetries: 1})
	sigstop(t, s.admin)
	s.wantFinal(t, func(_ string, err error) string {
		if !errors.Is(err, ErrorOutcomeUnknown) || errors.Is(err, ErrorWritesRefused) {
			return "want ErrorOutcomeUnknown only"
		}
		return ""
	}, "Publish", "Put delayed", "Ack") // a coalesced call, a call of its own, a settle
}

// fakeRedisError is an answer of Redis, as go-redis reports one.
type fakeRedisError string

func (e fakeRedisError) Error() string { return string(e) }
func (fakeRedisError) RedisError()     {}

// resend's final error, for sends scripted by the test: a send that the
// caller's context cut short is cleared up by one more send, whose answer
// stands, unless an earlier send may have run.
func TestResendClarifiesASendCutShortByTheContext(t *testing.T) {
	c := &redisConnection{opts: defaultOptions()}
	readonly := fakeRedisError("READONLY You can't write against a read only replica.")
	cutShort := func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }
	stalled := make(chan struct{})
	defer close(stalled)
	cases := []struct {
		name  string
		sends []func(ctx context.Context) error
		want  func(err error) bool
	}{
		{"refused, then cut short, then refused", []func(ctx context.Context) error{
			func(context.Context) error { return readonly }, cutShort,
			func(context.Context) error { return readonly },
		}, func(err error) bool {
			return errors.Is(err, ErrorWritesRefused) && !errors.Is(err, ErrorOutcomeUnknown)
		}},
		{"cut short, then done", []func(ctx context.Context) error{
			cutShort, func(context.Context) error { return nil },
		}, func(err error) bool { return err == nil }},
		{"cut short, then no answer either", []func(ctx context.Context) error{
			cutShort, cutShort,
		}, func(err error) bool { return errors.Is(err, ErrorOutcomeUnknown) }},
		// as go-redis by default, whose reads do not end at a context's
		// deadline
		{"cut short, then a send that ignores its context", []func(ctx context.Context) error{
			cutShort, func(context.Context) error { <-stalled; return nil },
		}, func(err error) bool { return errors.Is(err, ErrorOutcomeUnknown) }},
		// an earlier send may have run, and a refusal now would not say
		// whether it did: no clarifying send
		{"unanswered before, then cut short", []func(ctx context.Context) error{
			func(context.Context) error { return context.DeadlineExceeded }, cutShort,
		}, func(err error) bool {
			return errors.Is(err, ErrorOutcomeUnknown) && !errors.Is(err, ErrorWritesRefused)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			var n atomic.Int32 // a clarifying send may outlive resend
			start := time.Now()
			err := c.resend(ctx, func(ctx context.Context) error {
				i := int(n.Add(1))
				if i > len(tc.sends) {
					t.Errorf("send %d: only %d scripted", i, len(tc.sends))
					return nil
				}
				return tc.sends[i-1](ctx)
			}, nil)
			if !tc.want(err) || int(n.Load()) != len(tc.sends) {
				t.Fatalf("after %d sends of %d: %v", n.Load(), len(tc.sends), err)
			}
			if took := time.Since(start); took > 200*time.Millisecond+answerGrace+time.Second {
				t.Fatalf("returned after %v", took)
			}
		})
	}
}
