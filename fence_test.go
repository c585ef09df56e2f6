package redq

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// awayFromMinuteEnd waits, when the minute is about to end, for the next
// one: each connection's first plain publish of a minute to a queue goes
// in the guarded form (see fastPath.usable), and a test of the fast path
// wants its publishes to stay in one minute.
func awayFromMinuteEnd() {
	if s := time.Now().Second(); s >= 45 {
		time.Sleep(time.Duration(61-s) * time.Second)
	}
}

// fastConnOf opens the fast path of c for q: the first publish of the
// minute goes guarded, the next opens a dedicated connection. It fails
// the test when the fast path is off.
func fastConnOf(t *testing.T, c *redisConnection, q Queue, payloads ...string) {
	t.Helper()
	for _, p := range payloads {
		if err := q.Publish(p); err != nil {
			t.Fatal(err)
		}
	}
	c.publisher.fast.mu.Lock()
	defer c.publisher.fast.mu.Unlock()
	if c.publisher.fast.off || c.publisher.fast.conns == [flushSlots]*fastConn{} {
		t.Fatal("the fast path is not in use")
	}
}

// The first send of a plain publish, without Lua, waits in a socket while
// the call times out and is sent again; the resend lands the payload, and
// when the first send then reaches Redis it lands nothing, because its
// connection was killed before the resend. Without the kill the payload
// would be in ready twice.
func TestFastPublishHeldFirstSendLandsOnce(t *testing.T) {
	direct := realClient(t)
	ctx := context.Background()
	proxy := startProcProxy(t, direct.Options().Addr)
	proxied := redis.NewClient(&redis.Options{Addr: proxy.addr(), ReadTimeout: 300 * time.Millisecond, MinRetryBackoff: time.Millisecond})
	t.Cleanup(func() { proxied.Close() })
	ns := namespace()
	c, err := openConn(proxied, "fenced", nil, ns, WithRetryTimeout(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		proxy.releaseHeld()
		<-c.StopAllConsuming()
	})
	q := openQueue(t, c, "jobs")
	awayFromMinuteEnd()
	fastConnOf(t, c, q, "warm-1", "warm-2")

	proxy.armHoldRequest("held-payload")
	if err := q.Publish("held-payload"); err != nil {
		t.Fatalf("publish whose first send was held: %v", err)
	}
	if held := proxy.heldRequest(); !bytes.Contains(bytes.ToLower(held), []byte("multi")) || bytes.Contains(held, []byte("evalsha")) {
		t.Fatalf("the held request is not the fast form: %q", held)
	}
	proxy.releaseHeld()
	time.Sleep(300 * time.Millisecond) // Redis would have run it by now

	ready, err := direct.LRange(ctx, q.keys.ready, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ready {
		if strings.HasSuffix(e, "held-payload") {
			n++
		}
	}
	if n != 1 || len(ready) != 3 {
		t.Fatalf("LIBRARY BUG: the payload is in ready %d times (%d envelopes in all), want once (3)", n, len(ready))
	}
	i, err := NewInspector(direct, ns)
	if err != nil {
		t.Fatal(err)
	}
	if qi, err := i.Queue(ctx, "jobs"); err != nil || qi.Published != 3 {
		t.Fatalf("published %d, %v; want 3", qi.Published, err)
	}
	// the later publishes take the fast path again, on a new connection
	fastConnOf(t, c, q, "after")
	wantCounts(t, c, "jobs", 4, 0, 0)
}

// A server that does not let the user kill a client (an ACL without
// +client|kill) makes the connection publish in the guarded form, for
// good: a lost reply is sent again and the payload lands once.
func TestFastPublishOffWithoutClientKill(t *testing.T) {
	direct := realClient(t)
	ctx := context.Background()
	user := fmt.Sprintf("nokill%d", time.Now().UnixNano())
	if err := direct.Do(ctx, "ACL", "SETUSER", user, "on", ">pw", "~*", "&*", "+@all", "-client|kill").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { direct.Do(context.Background(), "ACL", "DELUSER", user) })
	proxy := startProcProxy(t, direct.Options().Addr)
	proxied := redis.NewClient(&redis.Options{Addr: proxy.addr(), Username: user, Password: "pw", MinRetryBackoff: time.Millisecond})
	t.Cleanup(func() { proxied.Close() })
	ns := namespace()
	c, err := openConn(proxied, "nokill", nil, ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { <-c.StopAllConsuming() })
	q := openQueue(t, c, "jobs")
	awayFromMinuteEnd()
	for _, p := range []string{"one", "two", "three"} {
		if err := q.Publish(p); err != nil {
			t.Fatal(err)
		}
	}
	c.publisher.fast.mu.Lock()
	off := c.publisher.fast.off
	c.publisher.fast.mu.Unlock()
	if !off {
		t.Fatal("the fast path is on although the user may not run CLIENT KILL")
	}
	proxy.arm("lost-reply")
	if err := q.Publish("lost-reply"); err != nil {
		t.Fatalf("publish whose reply was lost: %v", err)
	}
	if proxy.trips() != 1 {
		t.Fatalf("the proxy lost %d replies, want 1", proxy.trips())
	}
	wantCounts(t, c, "jobs", 4, 0, 0)
}

// Publishes counted without Lua show in the totals and in History at once,
// and keep counting the same once the next guarded publish folds them
// into the ring, whatever minute they were counted in.
func TestFastPublishCounts(t *testing.T) {
	direct := realClient(t)
	ctx := context.Background()
	ns := namespace()
	c := openT(t, backend{name: "redis", client: direct}, "counted", ns)
	q := openQueue(t, c, "jobs")
	i, err := NewInspector(direct, ns)
	if err != nil {
		t.Fatal(err)
	}
	awayFromMinuteEnd()
	fastConnOf(t, c, q, "guarded", "fast")
	if err := q.Publish("a", "b", "c"); err != nil {
		t.Fatal(err)
	}
	want := func(what string, total, minute int64) {
		t.Helper()
		qi, err := i.Queue(ctx, "jobs")
		if err != nil || qi.Published != total {
			t.Fatalf("%s: %d published, %v; want %d", what, qi.Published, err, total)
		}
		h, err := i.History(ctx, "jobs", time.Minute)
		if err != nil || len(h) != 1 || h[0].Published != minute {
			t.Fatalf("%s: History %v, %v; want %d published this minute", what, h, err, minute)
		}
	}
	want("fast publishes", 5, 5)
	pub, err := direct.HGetAll(ctx, q.keys.pub()).Result()
	if err != nil || len(pub) != 1 {
		t.Fatalf("pub hash %v, %v: want the fast publishes' minute", pub, err)
	}
	// a count from a minute gone from the ring, as from a process that
	// stopped long ago, and one from a minute ahead of Redis's clock
	now := time.Now().Unix() / 60
	if err := direct.HSet(ctx, q.keys.pub(), fmt.Sprint(now-500), 7, fmt.Sprint(now+3), 2).Err(); err != nil {
		t.Fatal(err)
	}
	want("counts of other minutes", 14, 5)
	// the next guarded publish folds what is due
	c.publisher.fast.mu.Lock()
	c.publisher.fast.fold[q.keys.ready] = 0
	c.publisher.fast.mu.Unlock()
	if err := q.Publish("folds"); err != nil {
		t.Fatal(err)
	}
	want("after the fold", 15, 6)
	pub, err = direct.HGetAll(ctx, q.keys.pub()).Result()
	if err != nil || len(pub) != 1 || pub[fmt.Sprint(now+3)] != "2" {
		t.Fatalf("pub hash after the fold %v, %v: want only the minute ahead", pub, err)
	}
	// Destroy clears them
	if _, _, err := q.Destroy(); err != nil {
		t.Fatal(err)
	}
	if n, err := direct.Exists(ctx, q.keys.pub()).Result(); err != nil || n != 0 {
		t.Fatalf("pub hash after Destroy: %d, %v", n, err)
	}
}

// The fast path is only for a client whose every connection goes to one
// server, and not with WithWaitReplicas.
func TestFastPathOnlyWhereTheFenceIsSound(t *testing.T) {
	single := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	failover := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{"127.0.0.1:1"}})
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}})
	for _, cl := range []io.Closer{single, failover, cluster, ring} {
		t.Cleanup(func() { cl.Close() })
	}
	waiting := defaultOptions()
	waiting.waitReplicas = 1
	for _, tc := range []struct {
		name   string
		client redis.UniversalClient
		opts   options
		want   bool
	}{
		{"single node", single, defaultOptions(), true},
		{"single node, WithWaitReplicas", single, waiting, false},
		{"failover", failover, defaultOptions(), false},
		{"cluster", cluster, defaultOptions(), false},
		{"ring", ring, defaultOptions(), false},
	} {
		if got := newFastPath(tc.client, tc.opts).client != nil; got != tc.want {
			t.Errorf("%s: fast path %v, want %v", tc.name, got, tc.want)
		}
	}
}

// When no kill can be made before the call's deadline (Redis cannot be
// reached), a fast publish whose first send got no answer ends in
// ErrorOutcomeUnknown, and its publish field is never handed out again:
// its first send may still run, and would write its older token over a
// later call's.
func TestFastPublishUnfencedEndsUnknownAndRetiresItsField(t *testing.T) {
	direct := realClient(t)
	proxy := startProcProxy(t, direct.Options().Addr)
	proxied := redis.NewClient(&redis.Options{Addr: proxy.addr(), ReadTimeout: 300 * time.Millisecond, MinRetryBackoff: time.Millisecond})
	t.Cleanup(func() { proxied.Close() })
	c, err := openConn(proxied, "unfenced", nil, namespace(), WithRetryTimeout(time.Second), WithHeartbeat(time.Minute, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		proxy.releaseHeld()
		<-c.StopAllConsuming()
	})
	q := openQueue(t, c, "jobs")
	awayFromMinuteEnd()
	fastConnOf(t, c, q, "warm-1", "warm-2")
	c.publisher.fields.mu.Lock()
	fields := append([]string(nil), c.publisher.fields.free...)
	c.publisher.fields.mu.Unlock()
	if len(fields) != 1 {
		t.Fatalf("free publish fields %v, want one", fields)
	}

	proxy.armHoldRequest("unfenced-payload")
	go func() {
		proxy.awaitTrip(t, 1)
		proxy.down()
	}()
	err = q.Publish("unfenced-payload")
	if !errors.Is(err, ErrorOutcomeUnknown) {
		t.Fatalf("publish that could not be fenced: %v, want ErrorOutcomeUnknown", err)
	}
	c.publisher.fields.mu.Lock()
	free := append([]string(nil), c.publisher.fields.free...)
	c.publisher.fields.mu.Unlock()
	if len(free) != 0 {
		t.Fatalf("free publish fields %v after the unfenced call, want none (its field %v retired)", free, fields)
	}
}

// When Redis refuses the kill (here the user lost +client|kill after the
// fast path was opened), the call is never sent in the guarded form: it
// ends in ErrorOutcomeUnknown, its held first send lands once when it
// reaches Redis, and the connection publishes in the guarded form from
// then on.
func TestFastPublishKillRefusedSendsNothingMore(t *testing.T) {
	direct := realClient(t)
	ctx := context.Background()
	user := fmt.Sprintf("losekill%d", time.Now().UnixNano())
	if err := direct.Do(ctx, "ACL", "SETUSER", user, "on", ">pw", "~*", "&*", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { direct.Do(context.Background(), "ACL", "DELUSER", user) })
	proxy := startProcProxy(t, direct.Options().Addr)
	proxied := redis.NewClient(&redis.Options{Addr: proxy.addr(), Username: user, Password: "pw",
		ReadTimeout: 300 * time.Millisecond, MinRetryBackoff: time.Millisecond})
	t.Cleanup(func() { proxied.Close() })
	c, err := openConn(proxied, "losekill", nil, namespace(), WithRetryTimeout(time.Second), WithHeartbeat(time.Minute, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		proxy.releaseHeld()
		<-c.StopAllConsuming()
	})
	q := openQueue(t, c, "jobs")
	awayFromMinuteEnd()
	fastConnOf(t, c, q, "warm-1", "warm-2")
	if err := direct.Do(ctx, "ACL", "SETUSER", user, "-client|kill").Err(); err != nil {
		t.Fatal(err)
	}
	proxy.armHoldRequest("refused-kill")
	if err := q.Publish("refused-kill"); !errors.Is(err, ErrorOutcomeUnknown) {
		t.Fatalf("publish whose fence Redis refused: %v, want ErrorOutcomeUnknown", err)
	}
	proxy.releaseHeld()
	time.Sleep(300 * time.Millisecond)
	ready, err := direct.LRange(ctx, q.keys.ready, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ready {
		if strings.HasSuffix(e, "refused-kill") {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("LIBRARY BUG: the payload is in ready %d times, want once (the held first send)", n)
	}
	c.publisher.fast.mu.Lock()
	off := c.publisher.fast.off
	c.publisher.fast.mu.Unlock()
	if !off {
		t.Fatal("the fast path stays on after Redis refused the kill")
	}
	if err := q.Publish("after"); err != nil {
		t.Fatal(err)
	}
	wantCounts(t, c, "jobs", 4, 0, 0)
}
