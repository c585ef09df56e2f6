package redq

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// roundEnv is one place where the round rules are checked: miniredis with
// its clock moved by the test, a real redis-server with short real
// durations, or the in-memory TestRound with a clock of the test's.
type roundEnv struct {
	name string
	b    *backend // nil for the test double
	conn Connection
	// unit is a duration the scenario can afford to let pass: a minute on
	// a clock the test moves, 150ms on real Redis (the scenarios leave a
	// few units of margin for a busy machine).
	unit time.Duration
	// advance moves the round's clock (Redis's TIME, or the double's) by d.
	advance func(d time.Duration)
	// clock is set for the double, whose rounds read it.
	clock func() time.Time
}

// open opens a round or fails the test.
func (e roundEnv) open(t testing.TB, name string, period time.Duration, opts ...RoundOption) Round {
	t.Helper()
	r, err := e.conn.OpenRound(name, period, opts...)
	if err != nil {
		t.Fatalf("OpenRound(%s, %s): %v", name, period, err)
	}
	if tr, ok := r.(*TestRound); ok {
		tr.SetClock(e.clock)
	}
	return r
}

// forEachRoundEnv runs f on miniredis and real Redis (see forEachBackend)
// and on the test double.
func forEachRoundEnv(t *testing.T, f func(t *testing.T, e roundEnv)) {
	forEachBackend(t, func(t *testing.T, b backend) {
		e := roundEnv{name: b.name, b: &b, conn: openT(t, b, "round", namespace())}
		if b.mini != nil {
			now := time.Now()
			b.mini.SetTime(now)
			e.unit = time.Minute
			e.advance = func(d time.Duration) { now = now.Add(d); b.mini.SetTime(now) }
		} else {
			e.unit = 150 * time.Millisecond
			e.advance = time.Sleep
		}
		f(t, e)
	})
	t.Run("double", func(t *testing.T) {
		var mu sync.Mutex
		now := time.Now()
		e := roundEnv{name: "double", conn: NewTestConnection(), unit: time.Minute}
		e.clock = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
		e.advance = func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
		f(t, e)
	})
}

func mustAdd(t testing.TB, r Round, id, data string, wantNew bool) {
	t.Helper()
	isNew, err := r.Add(context.Background(), id, []byte(data))
	if err != nil {
		t.Fatalf("Add(%s): %v", id, err)
	}
	if isNew != wantNew {
		t.Fatalf("Add(%s) = %v, want %v", id, isNew, wantNew)
	}
}

// mustNext hands out one item at once (timeout 0) and checks its id.
func mustNext(t testing.TB, r Round, wantID string) RoundItem {
	t.Helper()
	it, err := r.Next(context.Background(), 0)
	if err != nil {
		t.Fatalf("Next: %v, want %s", err, wantID)
	}
	if it.ID != wantID {
		t.Fatalf("Next = %s, want %s", it.ID, wantID)
	}
	return it
}

func wantNoneDue(t testing.TB, r Round) {
	t.Helper()
	if it, err := r.Next(context.Background(), 0); !errors.Is(err, ErrorTimeout) {
		t.Fatalf("Next = %+v, %v; want ErrorTimeout (nothing due)", it, err)
	}
}

// nextInOrder hands out items one at a time, letting a millisecond pass
// between them (Redis keeps whole ms) so that their issue times differ.
func nextInOrder(t testing.TB, e roundEnv, r Round, ids ...string) []RoundItem {
	t.Helper()
	out := make([]RoundItem, len(ids))
	for i, id := range ids {
		out[i] = mustNext(t, r, id)
		e.advance(2 * time.Millisecond)
	}
	return out
}

// The front line first, in the order added (not by id), then the least
// recently issued; each hand-out counts and stamps the item.
func TestRoundOrder(t *testing.T) {
	forEachRoundEnv(t, func(t *testing.T, e roundEnv) {
		period := 4 * e.unit
		r := e.open(t, "feeds", period)
		ctx := context.Background()
		for _, id := range []string{"c", "a", "b"} {
			mustAdd(t, r, id, "data-"+id, true)
		}
		before, err := r.Get(ctx, "a")
		if err != nil {
			t.Fatal(err)
		}
		if !before.LastIssued.IsZero() || before.Issued != 0 || before.Added.IsZero() || string(before.Data) != "data-a" {
			t.Fatalf("Get before any hand-out: %+v", before)
		}
		first := nextInOrder(t, e, r, "c", "a", "b")
		if first[0].Issued != 1 || first[0].LastIssued.Before(first[0].Added) || string(first[0].Data) != "data-c" {
			t.Fatalf("first hand-out: %+v", first[0])
		}
		wantNoneDue(t, r)

		e.advance(period)
		second := mustNext(t, r, "c") // issued longest ago
		if second.Issued != 2 || second.LastIssued.Sub(first[0].LastIssued) < period {
			t.Fatalf("second hand-out of c: %+v after %+v", second, first[0])
		}
		e.advance(period)
		// c was handed out again since: a and b were issued longer ago.
		third := nextInOrder(t, e, r, "a", "b", "c")
		if third[2].Issued != 3 {
			t.Fatalf("third hand-out of c: %+v", third[2])
		}
		wantNoneDue(t, r)
		got, err := r.Get(ctx, "c")
		if err != nil || got.Issued != 3 || !got.LastIssued.Equal(third[2].LastIssued) || !got.Added.Equal(first[0].Added) {
			t.Fatalf("Get(c) = %+v, %v; want what the last hand-out returned, %+v", got, err, third[2])
		}
		if n, err := r.Len(ctx); err != nil || n != 3 {
			t.Fatalf("Len = %d, %v; want 3", n, err)
		}
	})
}

// New items are handed out before issued ones that are due; reissued
// items join the back of that front line and come at once, their period
// notwithstanding.
func TestRoundNeverIssuedFirst(t *testing.T) {
	forEachRoundEnv(t, func(t *testing.T, e roundEnv) {
		period := 3 * e.unit
		r := e.open(t, "feeds", period)
		ctx := context.Background()
		mustAdd(t, r, "a", "", true)
		mustAdd(t, r, "b", "", true)
		nextInOrder(t, e, r, "a", "b")
		e.advance(period)
		mustAdd(t, r, "new1", "", true)
		mustAdd(t, r, "new2", "", true)
		nextInOrder(t, e, r, "new1", "new2", "a", "b")
		wantNoneDue(t, r)

		// Reissue: due at once, behind what waits in the front line.
		mustAdd(t, r, "new3", "", true)
		if ok, err := r.Reissue(ctx, "b"); err != nil || !ok {
			t.Fatalf("Reissue(b) = %v, %v", ok, err)
		}
		if ok, err := r.Reissue(ctx, "a"); err != nil || !ok {
			t.Fatalf("Reissue(a) = %v, %v", ok, err)
		}
		// new3 is in the front line already: it keeps its place.
		if ok, err := r.Reissue(ctx, "new3"); err != nil || !ok {
			t.Fatalf("Reissue(new3) = %v, %v", ok, err)
		}
		it := nextInOrder(t, e, r, "new3", "b", "a")
		if it[1].Issued != 3 {
			t.Fatalf("reissued b: %+v, want its third hand-out", it[1])
		}
		wantNoneDue(t, r)
		if ok, err := r.Reissue(ctx, "nobody"); err != nil || ok {
			t.Fatalf("Reissue(nobody) = %v, %v; want false", ok, err)
		}
	})
}

// Add of an existing id changes its data and keeps its place: it neither
// jumps the line nor becomes due early.
func TestRoundAddKeepsPlace(t *testing.T) {
	forEachRoundEnv(t, func(t *testing.T, e roundEnv) {
		period := 3 * e.unit
		r := e.open(t, "feeds", period)
		ctx := context.Background()
		for _, id := range []string{"a", "b", "c"} {
			mustAdd(t, r, id, "v1", true)
		}
		// Never issued: c added again stays behind a and b.
		mustAdd(t, r, "c", "v2", false)
		nextInOrder(t, e, r, "a")
		mustAdd(t, r, "a", "v2", false) // issued just now: not due again
		nextInOrder(t, e, r, "b", "c")
		wantNoneDue(t, r)

		e.advance(period)
		for range 3 { // a chatty producer renews c over and over
			mustAdd(t, r, "c", "v3", false)
		}
		got := nextInOrder(t, e, r, "a", "b", "c")
		if string(got[0].Data) != "v2" || string(got[2].Data) != "v3" || got[2].Issued != 2 {
			t.Fatalf("hand-outs after renewals: %+v", got)
		}
		if n, err := r.Len(ctx); err != nil || n != 3 {
			t.Fatalf("Len = %d, %v; want 3", n, err)
		}
		if ok, err := r.Remove(ctx, "b"); err != nil || !ok {
			t.Fatalf("Remove(b) = %v, %v", ok, err)
		}
		if ok, err := r.Remove(ctx, "b"); err != nil || ok {
			t.Fatalf("Remove(b) again = %v, %v; want false", ok, err)
		}
		if _, err := r.Get(ctx, "b"); !errors.Is(err, ErrorNotFound) {
			t.Fatalf("Get(b) after Remove: %v, want ErrorNotFound", err)
		}
		e.advance(period)
		nextInOrder(t, e, r, "a", "c")
		wantNoneDue(t, r)
	})
}

// Items are removed once their TTL has passed since they were added or
// last renewed, and never handed out after that.
func TestRoundTTL(t *testing.T) {
	forEachRoundEnv(t, func(t *testing.T, e roundEnv) {
		ttl := 10 * e.unit
		r := e.open(t, "feeds", 100*e.unit, RoundTTL(ttl))
		ctx := context.Background()
		mustAdd(t, r, "a", "", true)
		mustAdd(t, r, "b", "", true)
		e.advance(6 * e.unit)
		mustAdd(t, r, "a", "renewed", false)
		e.advance(6 * e.unit) // b: 12 units old; a: 6 since renewed
		if _, err := r.Get(ctx, "b"); !errors.Is(err, ErrorNotFound) {
			t.Fatalf("Get(b) after its TTL: %v, want ErrorNotFound", err)
		}
		if n, err := r.Len(ctx); err != nil || n != 1 {
			t.Fatalf("Len = %d, %v; want 1", n, err)
		}
		it := mustNext(t, r, "a")
		if string(it.Data) != "renewed" {
			t.Fatalf("a = %+v", it)
		}
		wantNoneDue(t, r) // b was due (never issued) but expired
		e.advance(6 * e.unit)
		if _, err := r.Get(ctx, "a"); !errors.Is(err, ErrorNotFound) {
			t.Fatalf("Get(a) after its TTL: %v, want ErrorNotFound", err)
		}
		// An expired id added again is a new item.
		mustAdd(t, r, "b", "again", true)
		mustNext(t, r, "b")
		st := roundStat(t, e, "feeds")
		if st.ExpiredCount != 2 || st.ItemCount != 1 || st.TTL != ttl {
			t.Fatalf("stats %+v, want 2 expired, 1 item, TTL %s", st, ttl)
		}
	})
}

// roundStat returns the counts CollectStats reports for the named round.
func roundStat(t testing.TB, e roundEnv, name string) RoundStat {
	t.Helper()
	s, err := e.conn.CollectStats(nil)
	if err != nil {
		t.Fatal(err)
	}
	st, ok := s.RoundStats[name]
	if !ok {
		t.Fatalf("no stats for round %s: %+v", name, s.RoundStats)
	}
	return st
}

// The hand-out checks each item's TTL itself: expired items among the due
// ones are removed, never handed out, even before any sweep reached them.
func TestRoundExpiredNeverHandedOut(t *testing.T) {
	forEachRoundEnv(t, func(t *testing.T, e roundEnv) {
		r := e.open(t, "feeds", time.Hour, RoundTTL(3*e.unit))
		for i := range 50 {
			mustAdd(t, r, fmt.Sprintf("old%02d", i), "", true)
		}
		e.advance(4 * e.unit)
		mustAdd(t, r, "fresh", "", true) // behind the 50 in the front line
		mustNext(t, r, "fresh")
		wantNoneDue(t, r)
		if st := roundStat(t, e, "feeds"); st.ExpiredCount != 50 || st.ItemCount != 1 || st.IssuedCount != 1 {
			t.Fatalf("stats %+v, want 50 expired, 1 item, 1 issued", st)
		}
	})
}

// One Add or one hand-out call removes a bounded number of expired items,
// however many there are: 10 on its way, and up to 100 met among the due
// ones (after which Next calls again).
func TestRoundCallsRemoveExpiredInBoundedSteps(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		c := openT(t, b, "round", namespace())
		if b.mini != nil {
			b.mini.SetTime(time.Now())
		}
		r, err := c.openRound(context.Background(), "feeds", time.Hour, RoundTTL(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		// 500 items whose TTL ran out at once (written as Add writes them,
		// but expired already, so that no timing is involved).
		fillRoundLayout(t, b, r, 500, 0)
		if b.mini != nil {
			b.mini.SetTime(time.Now().Add(time.Millisecond))
		}
		expired := func() int64 {
			t.Helper()
			n, err := b.client.HGet(ctx, r.keys.state, "expired").Int64()
			if err != nil && !errors.Is(err, redis.Nil) {
				t.Fatal(err)
			}
			return n
		}
		if _, err := r.Add(ctx, "fresh", nil); err != nil {
			t.Fatal(err)
		}
		if n := expired(); n != 10 {
			t.Fatalf("one Add removed %d expired items, want 10", n)
		}
		items, hint, err := r.handOut(ctx, 1)
		if err != nil || len(items) != 0 || hint != 0 {
			t.Fatalf("hand-out among 490 expired: %v, hint %d, %v; want none and hint 0 (call again)", items, hint, err)
		}
		if n := expired(); n != 10+10+100 {
			t.Fatalf("after one hand-out call %d expired items are removed, want 120", n)
		}
		it, err := r.Next(ctx, 0) // calls again until it reaches fresh
		if err != nil || it.ID != "fresh" {
			t.Fatalf("Next = %+v, %v; want fresh", it, err)
		}
		if n := expired(); n != 500 {
			t.Fatalf("%d expired removed, want 500", n)
		}
	})
}

// fillRound adds items id0..id(n-1) (from from on) with data, in pipelines
// of 1000 Add calls: fast, and each one the real Add script.
func fillRound(t testing.TB, r *redisRound, from, n int, data string) {
	t.Helper()
	ctx := context.Background()
	for lo := from; lo < from+n; lo += 1000 {
		hi := min(lo+1000, from+n)
		pipe := r.conn.client.Pipeline()
		cmds := make([]*redis.Cmd, 0, hi-lo)
		keys := append(append([]string(nil), r.keyArg...), r.keys.record(r.conn.Name(), "fill"))
		for i := lo; i < hi; i++ {
			// one call slot, "fill", with tokens that grow (see recalled)
			token := r.conn.nextToken()
			cmds = append(cmds, scripts.roundAdd.EvalSha(ctx, pipe, keys, fmt.Sprintf("id%d", i), data, r.period, r.ttl, token))
		}
		if err := scripts.roundAdd.Load(ctx, r.conn.client).Err(); err != nil {
			t.Fatal(err)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatalf("fill %d..%d: %v", lo, hi, err)
		}
		for i, cmd := range cmds {
			if v, err := cmd.Int64(); err != nil || v != 1 {
				t.Fatalf("add id%d: %d, %v", lo+i, v, err)
			}
		}
	}
}

// scriptCalls is a go-redis hook that records the replies of the calls of
// one script.
type scriptCalls struct {
	script  *redis.Script
	src     string
	mu      sync.Mutex
	replies []int64
}

func (h *scriptCalls) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *scriptCalls) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		args := cmd.Args()
		if len(args) > 1 && (args[1] == h.script.Hash() || args[1] == h.src) {
			if c, ok := cmd.(*redis.Cmd); ok && c.Err() == nil {
				n, _ := c.Int64()
				h.mu.Lock()
				h.replies = append(h.replies, n)
				h.mu.Unlock()
			}
		}
		return err
	}
}

func (h *scriptCalls) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// The cleaner removes 20k expired items in calls of at most 1,000 (so at
// least 20 calls), so no call holds Redis for long; a concurrent PING is
// answered between them.
func TestRoundCleanerRemovesExpiredInBoundedChunks(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		const n = 20_000
		ns := namespace()
		c := openT(t, b, "round", ns)
		ctx := context.Background()
		if b.mini != nil {
			b.mini.SetTime(time.Now())
		}
		r, err := c.openRound(ctx, "big", time.Hour, RoundTTL(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		keep, err := c.openRound(ctx, "kept", time.Hour) // no TTL: untouched
		if err != nil {
			t.Fatal(err)
		}
		mustAdd(t, keep, "k", "", true)
		// Items written as Add writes them (fillRoundLayout; checked by Get
		// and Len on a few that have not expired), with plain pipelined
		// commands: as many Add scripts take a long time on miniredis.
		// Their TTL ran out as they were written.
		few, err := c.openRound(ctx, "few", time.Hour, RoundTTL(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		fillRoundLayout(t, b, few, 10, time.Hour)
		if got, err := few.Len(ctx); err != nil || got != 10 {
			t.Fatalf("Len of the few = %d, %v; want 10", got, err)
		}
		if it, err := few.Get(ctx, "id7"); err != nil || string(it.Data) != "x" || it.Issued != 0 {
			t.Fatalf("Get(id7) = %+v, %v", it, err)
		}
		mustNext(t, few, "id0")
		start := time.Now()
		fillRoundLayout(t, b, r, n, 0)
		t.Logf("filled %d in %s", n, time.Since(start))
		if b.mini != nil {
			b.mini.SetTime(time.Now().Add(time.Millisecond))
		}
		if got, err := r.Len(ctx); err != nil || got != 0 || b.client.ZCard(ctx, r.keys.order).Val() != n {
			t.Fatalf("Len = %d, %v with %d in the order set; want 0 with all %d still there", got, err, b.client.ZCard(ctx, r.keys.order).Val(), n)
		}

		// The cleaner on a client of its own, whose calls the hook sees.
		var client *redis.Client
		if b.mini != nil {
			client = redis.NewClient(&redis.Options{Addr: b.mini.Addr()})
			t.Cleanup(func() { client.Close() })
		} else {
			client = realClient(t)
		}
		calls := &scriptCalls{script: scripts.roundSweep, src: testPrelude + roundScriptText("round_sweep")}
		client.AddHook(calls)
		cc, err := openConn(client, "cleaner", nil, ns)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { <-cc.StopAllConsuming() }()

		pings := make(chan time.Duration, 1)
		stop := make(chan struct{})
		go func() { // the longest PING while the cleaner runs (logged)
			var worst time.Duration
			for {
				select {
				case <-stop:
					pings <- worst
					return
				default:
				}
				t0 := time.Now()
				_ = b.client.Ping(ctx).Err()
				worst = max(worst, time.Since(t0))
			}
		}()
		start = time.Now()
		if _, err := NewCleaner(cc).Clean(); err != nil {
			t.Fatal(err)
		}
		took := time.Since(start)
		close(stop)
		t.Logf("cleaner removed %d expired items in %s; longest concurrent PING %s", n, took, <-pings)

		calls.mu.Lock()
		replies := append([]int64(nil), calls.replies...)
		calls.mu.Unlock()
		const bound = 1000 // items one call may remove
		var total int64
		for _, x := range replies {
			if x > bound {
				t.Fatalf("one sweep call removed %d items, more than %d", x, bound)
			}
			total += x
		}
		if total != n || len(replies) < n/bound {
			t.Fatalf("%d sweep calls removed %d items, want %d in at least %d calls", len(replies), total, n, n/bound)
		}
		for _, k := range r.keys.all() {
			if b.client.Exists(ctx, k).Val() == 1 && k != r.keys.state {
				t.Errorf("key %s is left after cleaning", k)
			}
		}
		if st := mustStats(t, c).RoundStats; st["big"].ExpiredCount != n || st["big"].ItemCount != 0 || st["kept"].ItemCount != 1 || st["few"].ItemCount != 10 {
			t.Fatalf("stats after cleaning: %+v", st)
		}
	})
}

// fillRoundLayout writes n never-issued items id0..id(n-1) with data "x"
// into r, added now by Redis's clock and expiring ttl later (0: expired at
// once), the way Add writes them (see round_add.lua), with pipelined plain
// commands.
func fillRoundLayout(t testing.TB, b backend, r *redisRound, n int, ttl time.Duration) {
	t.Helper()
	ctx := context.Background()
	now, err := b.client.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	added := now.UnixMilli()
	expireAt := added + ttl.Milliseconds()
	info := fmt.Sprintf("%d,0,0,%d,%d", added, expireAt, added)
	const front = -1 << 52 // ROUND_FRONT
	seq, err := b.client.HIncrBy(ctx, r.keys.state, "seq", int64(n)).Result()
	if err != nil {
		t.Fatal(err)
	}
	first := seq - int64(n) + 1
	for lo := 0; lo < n; lo += 1000 {
		hi := min(lo+1000, n)
		var order, expiry []redis.Z
		var data, infos []any
		for i := lo; i < hi; i++ {
			id := fmt.Sprintf("id%d", i)
			order = append(order, redis.Z{Score: float64(front + first + int64(i)), Member: id})
			expiry = append(expiry, redis.Z{Score: float64(expireAt), Member: id})
			data = append(data, id, "x")
			infos = append(infos, id, info)
		}
		pipe := b.client.Pipeline()
		pipe.ZAdd(ctx, r.keys.order, order...)
		pipe.ZAdd(ctx, r.keys.expiry, expiry...)
		pipe.HSet(ctx, r.keys.data, data...)
		pipe.HSet(ctx, r.keys.info, infos...)
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
