package redq

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// snapshot lists every key of a namespace with its type and size, to show
// that bad input changed nothing.
func snapshot(t testing.TB, b backend, c *redisConnection) map[string]int64 {
	t.Helper()
	ctx := context.Background()
	out := map[string]int64{}
	for _, pattern := range []string{"{" + c.opts.namespace + "}*", c.opts.namespace + ":*"} {
		keys, err := b.client.Keys(ctx, pattern).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			if strings.Contains(k, ":hb:") {
				continue // heartbeats refresh on their own
			}
			typ := b.client.Type(ctx, k).Val()
			var n int64
			switch typ {
			case "list":
				n = b.client.LLen(ctx, k).Val()
			case "hash":
				n = b.client.HLen(ctx, k).Val()
			case "set":
				n = b.client.SCard(ctx, k).Val()
			}
			out[k+" "+typ] = n
		}
	}
	return out
}

func sameSnapshot(t testing.TB, what string, before, after map[string]int64) {
	t.Helper()
	if len(before) != len(after) {
		t.Fatalf("%s changed Redis: %v -> %v", what, before, after)
	}
	for k, v := range before {
		if after[k] != v {
			t.Fatalf("%s changed Redis: %v -> %v", what, before, after)
		}
	}
}

func wantArgError(t testing.TB, what string, err error) {
	t.Helper()
	var ae *ArgumentError
	if !errors.Is(err, ErrorInvalidArgument) || !errors.As(err, &ae) || ae.Reason == "" {
		t.Fatalf("%s: got %v, want an *ArgumentError", what, err)
	}
}

func TestBadInputIsRefusedAndChangesNothing(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ns := namespace()
		c := openT(t, b, "bad", ns, WithMaxPayloadSize(16))
		q := openQueue(t, c, "good")
		if err := q.Publish("ready-1"); err != nil {
			t.Fatal(err)
		}
		before := snapshot(t, b, c)

		for _, name := range []string{"", "has space", "a:b", "{tag}", "x}", "tab\t", "ü", strings.Repeat("n", 201)} {
			_, err := c.OpenQueue(name)
			wantArgError(t, "OpenQueue("+name+")", err)
			_, err = c.CollectStats([]string{name})
			wantArgError(t, "CollectStats("+name+")", err)
		}
		sameSnapshot(t, "refused queue names", before, snapshot(t, b, c))
		if _, err := c.OpenQueue(strings.Repeat("n", 200)); err != nil {
			t.Fatalf("a 200-byte name is valid: %v", err)
		}
		before = snapshot(t, b, c) // the 200-byte queue is listed now

		wantArgError(t, "prefetchLimit 0", q.StartConsuming(0, time.Second))
		wantArgError(t, "prefetchLimit -1", q.StartConsuming(-1, time.Second))
		wantArgError(t, "pollDuration 0", q.StartConsuming(1, 0))
		if _, err := q.AddConsumerFunc("early", func(Delivery) {}); !errors.Is(err, ErrorNotConsuming) {
			t.Fatalf("AddConsumer before StartConsuming: %v", err)
		}
		if _, err := q.AddBatchConsumerFunc("early", 1, time.Second, func(Deliveries) {}); !errors.Is(err, ErrorNotConsuming) {
			t.Fatalf("AddBatchConsumer before StartConsuming: %v", err)
		}
		err := q.Publish("0123456789abcdefX")
		if !errors.Is(err, ErrorPayloadTooLarge) {
			t.Fatalf("oversized payload: %v", err)
		}
		if err := q.PublishBytes([]byte("ok"), make([]byte, 17)); !errors.Is(err, ErrorPayloadTooLarge) {
			t.Fatalf("oversized payload in a batch: %v", err)
		}
		for what, err := range map[string]error{
			"ReturnUnacked(-1)":  second(q.ReturnUnacked(-1)),
			"ReturnRejected(-1)": second(q.ReturnRejected(-1)),
			"Drain(-1)":          second(q.Drain(-1)),
			"Remove(-1)":         q.Remove("x", -1, true),
		} {
			wantArgError(t, what, err)
		}
		sameSnapshot(t, "bad input before consuming", before, snapshot(t, b, c))

		if err := q.StartConsuming(1, 10*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		if err := q.StartConsuming(1, 10*time.Millisecond); !errors.Is(err, ErrorAlreadyConsuming) {
			t.Fatalf("StartConsuming twice: %v", err)
		}
		_, err = q.AddConsumer("nil", nil)
		wantArgError(t, "nil consumer", err)
		_, err = q.AddConsumerFunc("nil", nil)
		wantArgError(t, "nil consumer func", err)
		_, err = q.AddBatchConsumer("nil", 1, time.Second, nil)
		wantArgError(t, "nil batch consumer", err)
		_, err = q.AddBatchConsumerFunc("b", 0, time.Second, func(Deliveries) {})
		wantArgError(t, "batchSize 0", err)
		_, err = q.AddBatchConsumerFunc("b", 1, 0, func(Deliveries) {})
		wantArgError(t, "batch timeout 0", err)
		_, err = q.AddBatchConsumerFunc("b", 1, -time.Second, func(Deliveries) {})
		wantArgError(t, "negative batch timeout", err)
		if n := mustStats(t, c, "good").QueueStats["good"].ConsumerCount(); n != 0 {
			t.Fatalf("refused consumers were counted: %d", n)
		}

		<-c.StopAllConsuming()
		if _, err := c.OpenQueue("later"); !errors.Is(err, ErrorConsumingStopped) {
			t.Fatalf("OpenQueue after StopAllConsuming: %v", err)
		}
		if err := q.StartConsuming(1, time.Second); err != ErrorConsumingStopped {
			t.Fatalf("StartConsuming after StopAllConsuming: %v", err)
		}
		if n, _, _ := counts(t, c, "good"); n != 1 {
			t.Fatalf("ready = %d, want the one good delivery", n)
		}
		// As in rmq, a queue opened before the stop still publishes.
		if err := q.Publish("late"); err != nil {
			t.Fatalf("Publish after StopAllConsuming: %v", err)
		}
		if n, _, _ := counts(t, c, "good"); n != 2 {
			t.Fatalf("ready = %d after a publish on a stopped connection, want 2", n)
		}
	})
}

func second[T any](_ T, err error) error { return err }

func TestBadConnectionOptions(t *testing.T) {
	client := realOrMini(t)
	for what, opts := range map[string][]Option{
		"empty namespace":   {WithNamespace("")},
		"namespace {x}":     {WithNamespace("{x}")},
		"interval 0":        {WithHeartbeat(0, time.Minute)},
		"ttl <= interval":   {WithHeartbeat(time.Second, time.Second)},
		"error limit 0":     {WithHeartbeatErrorLimit(0)},
		"max payload 0":     {WithMaxPayloadSize(0)},
		"max payload below": {WithMaxPayloadSize(-5)},
	} {
		_, err := Open(context.Background(), "tag", client, nil, opts...)
		wantArgError(t, what, err)
	}
	_, err := Open(context.Background(), "bad tag", client, nil)
	wantArgError(t, "tag with a space", err)
	_, err = Open(context.Background(), "tag", nil, nil)
	wantArgError(t, "nil client", err)
}

// Bad group input is an *ArgumentError naming the field, and changes
// nothing in Redis: an empty or oversized group, Group with Priority or
// Upsert, K out of range, a bad per-group rate.
func TestGroupBadInput(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		c := openT(t, b, "bad", namespace())
		q, err := c.OpenQueue("kept", WithGroupConcurrency(2), WithGroupRateLimit(3, time.Second))
		if err != nil {
			t.Fatal(err)
		}
		mustPut(t, q, "x", Group("g"))
		before := snapshot(t, b, c)
		wantArg := func(what, arg string, err error) {
			t.Helper()
			var ae *ArgumentError
			if !errors.As(err, &ae) || ae.Arg != arg {
				t.Fatalf("%s: %v, want an *ArgumentError for %q", what, err, arg)
			}
		}
		long := strings.Repeat("g", MaxKeyLength+1)
		wantArg("Group(\"\")", "group", q.Put(ctx, []byte("p"), Group("")))
		wantArg("Group(long)", "group", q.Put(ctx, []byte("p"), Group(long)))
		wantArg("Group with Priority", "priority", q.Put(ctx, []byte("p"), Group("g"), Priority(3)))
		_, err = q.Upsert(ctx, "k", []byte("p"), Group("g"))
		wantArg("Upsert with Group", "group", err)
		_, err = c.OpenQueue("fresh", WithPublishDefaults(Group("")))
		wantArg("WithPublishDefaults(Group(\"\"))", "group", err)
		for _, k := range []int{0, -1, MaxGroupConcurrency + 1} {
			for _, name := range []string{"fresh", "kept"} {
				_, err := c.OpenQueue(name, WithGroupConcurrency(k))
				wantArg("WithGroupConcurrency", "group concurrency", err)
			}
		}
		for _, tc := range []struct {
			n   int64
			per time.Duration
			arg string
		}{
			{0, time.Second, "group rate limit n"},
			{-1, time.Second, "group rate limit n"},
			{MaxGroupRateLimitN + 1, time.Second, "group rate limit n"},
			{1, 0, "group rate limit per"},
			{1, -time.Second, "group rate limit per"},
			{1, 1500 * time.Microsecond, "group rate limit per"},
			{1, MaxRateLimitPer + time.Millisecond, "group rate limit per"},
		} {
			for _, name := range []string{"fresh", "kept"} {
				_, err := c.OpenQueue(name, WithGroupRateLimit(tc.n, tc.per))
				wantArg("WithGroupRateLimit", tc.arg, err)
			}
		}
		sameSnapshot(t, "bad group input", before, snapshot(t, b, c))
		st := mustStats(t, c, "kept").QueueStats["kept"]
		if st.GroupConcurrency != 2 || st.GroupRateLimit != (RateLimit{N: 3, Per: time.Second}) || st.GroupsPending != 1 || st.ReadyCount != 1 {
			t.Fatalf("stats after bad input: %+v", st)
		}
		// the settings are the queue's: another handle without them keeps
		// them, and WithoutGroupRateLimit removes the rate
		if _, err := c.OpenQueue("kept", WithoutGroupRateLimit()); err != nil {
			t.Fatal(err)
		}
		st = mustStats(t, c, "kept").QueueStats["kept"]
		if st.GroupConcurrency != 2 || !st.GroupRateLimit.IsZero() {
			t.Fatalf("stats after WithoutGroupRateLimit: %+v", st)
		}
	})
}
