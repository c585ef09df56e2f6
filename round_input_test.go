package redq

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"
)

// fullSnapshot renders every key of the namespace with its type and whole
// contents (heartbeats aside), to show that bad input changed nothing.
func fullSnapshot(t testing.TB, b backend, ns string) string {
	t.Helper()
	ctx := context.Background()
	var keys []string
	for _, pattern := range []string{"{" + ns + "}*", ns + ":*"} {
		ks, err := b.client.Keys(ctx, pattern).Result()
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, ks...)
	}
	sort.Strings(keys)
	var out strings.Builder
	for _, k := range keys {
		if strings.Contains(k, ":hb:") {
			continue
		}
		typ := b.client.Type(ctx, k).Val()
		var v any
		switch typ {
		case "list":
			v = b.client.LRange(ctx, k, 0, -1).Val()
		case "hash":
			v = b.client.HGetAll(ctx, k).Val()
		case "set":
			m := b.client.SMembers(ctx, k).Val()
			sort.Strings(m)
			v = m
		case "zset":
			v = b.client.ZRangeWithScores(ctx, k, 0, -1).Val()
		case "string":
			v = b.client.Get(ctx, k).Val()
		}
		fmt.Fprintf(&out, "%s %s %v\n", k, typ, v)
	}
	return out.String()
}

func TestRoundBadInputIsRefusedAndChangesNothing(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ns := fmt.Sprintf("t-bad-round-%d", nsCounter.Add(1))
		c := openT(t, b, "bad", WithNamespace(ns), WithMaxPayloadSize(16))
		ctx := context.Background()
		r, err := c.OpenRound("feeds", time.Minute, RoundTTL(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		mustAdd(t, r, "a", "data", true)
		mustNext(t, r, "a")
		mustAdd(t, r, "b", "data", true)
		q := openQueue(t, c, "feeds") // a queue of the same name is no round
		if err := q.Publish("p"); err != nil {
			t.Fatal(err)
		}
		before := fullSnapshot(t, b, ns)

		for _, name := range []string{"", "has space", "a:b", "round:feeds", "{tag}", "x}", "ü", strings.Repeat("n", 201)} {
			_, err := c.OpenRound(name, time.Minute)
			wantArgError(t, "OpenRound("+name+")", err)
		}
		for _, p := range []time.Duration{0, -time.Second, 999 * time.Microsecond, MaxRoundPeriod + time.Millisecond} {
			_, err := c.OpenRound("other", p)
			wantArgError(t, fmt.Sprintf("period %s", p), err)
		}
		for _, ttl := range []time.Duration{-time.Nanosecond, -time.Hour, 500 * time.Microsecond, MaxRoundTTL + time.Millisecond} {
			_, err := c.OpenRound("other", time.Minute, RoundTTL(ttl))
			wantArgError(t, fmt.Sprintf("TTL %s", ttl), err)
		}
		// An existing round with another period or TTL is refused, and the
		// error names what is stored.
		_, err = c.OpenRound("feeds", 2*time.Minute)
		wantArgError(t, "another period", err)
		if !strings.Contains(err.Error(), "period 1m0s") {
			t.Errorf("the error does not name the stored period: %v", err)
		}
		_, err = c.OpenRound("feeds", time.Minute, RoundTTL(2*time.Hour))
		wantArgError(t, "another TTL", err)
		_, err = c.OpenRound("feeds", time.Minute, RoundTTL(0))
		wantArgError(t, "no TTL where one is stored", err)

		big := strings.Repeat("i", MaxRoundIDLength+1)
		for _, id := range []string{"", big} {
			_, err := r.Add(ctx, id, nil)
			wantArgError(t, "Add id of "+fmt.Sprint(len(id)), err)
			_, err = r.Remove(ctx, id)
			wantArgError(t, "Remove id of "+fmt.Sprint(len(id)), err)
			_, err = r.Get(ctx, id)
			wantArgError(t, "Get id of "+fmt.Sprint(len(id)), err)
			_, err = r.Reissue(ctx, id)
			wantArgError(t, "Reissue id of "+fmt.Sprint(len(id)), err)
		}
		_, err = r.Add(ctx, "c", make([]byte, 17))
		wantArgError(t, "data over the max payload", err)
		if !errors.Is(err, ErrorPayloadTooLarge) {
			t.Errorf("oversized data: %v, want it to match ErrorPayloadTooLarge too", err)
		}
		_, err = r.Add(ctx, "a", make([]byte, 17)) // not even as a renewal
		wantArgError(t, "renewal with data over the max payload", err)
		for _, max := range []int64{0, -1} {
			_, err := r.NextBatch(ctx, max, 0)
			wantArgError(t, fmt.Sprintf("NextBatch max %d", max), err)
		}
		_, err = r.Next(ctx, -time.Second)
		wantArgError(t, "Next negative timeout", err)
		_, err = r.NextBatch(ctx, 1, -time.Millisecond)
		wantArgError(t, "NextBatch negative timeout", err)

		if after := fullSnapshot(t, b, ns); after != before {
			t.Fatalf("bad input changed Redis:\n%s\n->\n%s", before, after)
		}

		// The largest id and data are fine.
		id := strings.Repeat("i", MaxRoundIDLength)
		mustAdd(t, r, id, "0123456789abcdef", true)
		if it, err := r.Get(ctx, id); err != nil || string(it.Data) != "0123456789abcdef" {
			t.Fatalf("Get of a %d-byte id: %+v, %v", len(id), it, err)
		}
	})
}

// Opening an existing round without RoundTTL uses the stored TTL; with
// RoundChangeSettings the handle's settings replace the stored ones, for
// every handle.
func TestRoundSettingsAreStored(t *testing.T) {
	forEachRoundEnv(t, func(t *testing.T, e roundEnv) {
		ctx := context.Background()
		first := e.open(t, "feeds", 5*e.unit, RoundTTL(20*e.unit))
		again := e.open(t, "feeds", 5*e.unit) // the stored TTL applies
		mustAdd(t, again, "a", "", true)
		e.advance(21 * e.unit)
		if n, err := first.Len(ctx); err != nil || n != 0 {
			t.Fatalf("Len = %d, %v: an item added through a handle opened without RoundTTL did not expire", n, err)
		}
		st := roundStat(t, e, "feeds")
		if st.Period != 5*e.unit || st.TTL != 20*e.unit {
			t.Fatalf("stored settings %s, %s; want %s, %s", st.Period, st.TTL, 5*e.unit, 20*e.unit)
		}

		// Change the period: every handle follows at once.
		mustAdd(t, first, "b", "", true)
		mustNext(t, first, "b")
		e.advance(2 * e.unit)
		wantNoneDue(t, first)
		e.open(t, "feeds", e.unit, RoundChangeSettings())
		mustNext(t, first, "b") // due after 1 unit now
		st = roundStat(t, e, "feeds")
		if st.Period != e.unit || st.TTL != 20*e.unit {
			t.Fatalf("settings after a change of period %s, %s; want %s, %s (the TTL kept)", st.Period, st.TTL, e.unit, 20*e.unit)
		}
		e.open(t, "feeds", e.unit, RoundTTL(0), RoundChangeSettings())
		if st = roundStat(t, e, "feeds"); st.TTL != 0 {
			t.Fatalf("TTL after a change to none: %s", st.TTL)
		}
		if _, err := e.conn.OpenRound("feeds", 5*e.unit); !errors.Is(err, ErrorInvalidArgument) {
			t.Fatalf("the old period after a change: %v, want refused", err)
		}
	})
}

// A round and a queue of the same name live in separate keys; a round's
// keys all carry its hash tag.
func TestRoundKeysAreItsOwn(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ns := fmt.Sprintf("t-keys-round-%d", nsCounter.Add(1))
		c := openT(t, b, "keys", WithNamespace(ns))
		ctx := context.Background()
		q := openQueue(t, c, "feeds")
		if err := q.Publish("p1", "p2"); err != nil {
			t.Fatal(err)
		}
		r, err := c.openRound(ctx, "feeds", time.Minute, RoundTTL(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		mustAdd(t, r, "a", "", true)
		mustAdd(t, r, "b", "", true)
		mustNext(t, r, "a")
		if _, err := r.Reissue(ctx, "a"); err != nil {
			t.Fatal(err)
		}
		if ready, _, _ := counts(t, c, "feeds"); ready != 2 {
			t.Fatalf("the queue holds %d ready, want its 2", ready)
		}
		if n, err := r.Len(ctx); err != nil || n != 2 {
			t.Fatalf("the round holds %d, %v; want its 2", n, err)
		}
		declared := map[string]bool{"{" + ns + "}:rounds": true}
		for _, k := range r.keys.all() {
			declared[k] = true
			if !strings.Contains(k, "{round:feeds}") {
				t.Errorf("key %s lacks the round's hash tag", k)
			}
		}
		keys, err := b.client.Keys(ctx, ns+":{round:*").Result()
		if err != nil {
			t.Fatal(err)
		}
		if len(keys) < 5 {
			t.Fatalf("found only the round keys %v", keys)
		}
		for _, k := range keys {
			// the records of the connection's call slots (see roundKeys.record)
			isRecord := strings.HasPrefix(k, r.keys.prefix+":rec:"+c.Name()+":")
			if !declared[k] && !isRecord {
				t.Errorf("key %s is not one of the round's declared keys", k)
			}
		}
		if b.client.SIsMember(ctx, "{"+ns+"}:rounds", "feeds").Val() != true || b.client.SIsMember(ctx, "{"+ns+"}:queues", "feeds").Val() != true {
			t.Errorf("feeds is not listed as a round and as a queue")
		}
	})
}

// Every Redis call in the round scripts names its key through the table
// round_keys builds from KEYS, so that the scripts touch no key they did
// not declare (Redis Cluster can then route and redirect them).
func TestRoundScriptsTouchOnlyDeclaredKeys(t *testing.T) {
	call := regexp.MustCompile(`redis\.call\('([A-Z]+)'(?:,\s*([^,)]+))?`)
	keyless := map[string]bool{"TIME": true}
	files, err := scriptFiles.ReadDir("scripts")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range files {
		name := strings.TrimSuffix(f.Name(), ".lua")
		if !strings.HasPrefix(name, "round_") {
			continue
		}
		text := luaComment.ReplaceAllString(readScript(name), "")
		for _, m := range call.FindAllStringSubmatch(text, -1) {
			n++
			if keyless[m[1]] {
				continue
			}
			if !regexp.MustCompile(`^K\.(order|data|info|expiry|state|signal)$`).MatchString(m[2]) {
				t.Errorf("%s: redis.call('%s', %s): the key is not one of K's", name, m[1], m[2])
			}
		}
		if strings.Contains(text, "KEYS") && !strings.Contains(text, "round_keys(KEYS)") && name != "round_lib" {
			t.Errorf("%s uses KEYS other than through round_keys", name)
		}
	}
	if n < 30 {
		t.Fatalf("found only %d calls: the pattern no longer matches the scripts", n)
	}
	// round_keys maps KEYS in the order roundKeys.all gives them.
	lib := readScript("round_lib")
	if !strings.Contains(lib, "order = k[1], data = k[2], info = k[3], expiry = k[4], state = k[5], signal = k[6]") {
		t.Fatal("round_keys no longer maps KEYS as roundKeys.all orders them")
	}
	k := newRoundKeys("ns", "r")
	if got := strings.Join(k.all(), " "); got != "ns:{round:r}:order ns:{round:r}:data ns:{round:r}:info ns:{round:r}:expiry ns:{round:r}:state ns:{round:r}:signal" {
		t.Fatalf("roundKeys.all = %s", got)
	}
}

// Every round script gets the helpers it uses, of lib.lua and
// round_lib.lua, and not the others.
func TestRoundScriptsCarryTheHelpersTheyUse(t *testing.T) {
	lib := readScript("lib") + "\n" + readScript("round_lib")
	var names []string
	for _, line := range strings.Split(lib, "\n") {
		if m := libDef.FindStringSubmatch(line); m != nil {
			names = append(names, m[1])
		}
	}
	for _, name := range []string{"round_open", "round_add", "round_next", "round_remove", "round_reissue",
		"round_get", "round_len", "round_stats", "round_sweep"} {
		body := readScript(name)
		full := roundScriptText(name)
		defined := map[string]bool{}
		for _, line := range strings.Split(strings.TrimSuffix(full, body), "\n") {
			if m := libDef.FindStringSubmatch(line); m != nil {
				defined[m[1]] = true
			}
		}
		used := map[string]bool{}
		for _, w := range luaWord.FindAllString(luaComment.ReplaceAllString(full, ""), -1) {
			used[w] = true
		}
		for _, n := range names {
			if used[n] && !defined[n] {
				t.Errorf("%s uses %s but does not define it", name, n)
			}
		}
		if defined["expire_leases"] || defined["MARKER"] {
			t.Errorf("%s carries queue helpers it does not use", name)
		}
	}
}
