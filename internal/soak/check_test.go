package soak

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redq/redq"
)

// synthID returns a delivery id (hex) for the tests: n makes it unique.
func synthID(n int) string { return fmt.Sprintf("%032x", n+1) }

// synthLog is a worker log written by hand: each line is "kind id# payload
// [kind] attempt" with the id given as a number (see synthID).
func synthLog(lines ...string) string {
	var b strings.Builder
	b.WriteString("start 100 soak-w1-abc 1700000000000000000\n")
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) >= 2 && (f[0] == lineGot || f[0] == lineAcking || f[0] == lineAcked || f[0] == lineAckErr) {
			var n int
			if _, err := fmt.Sscan(f[1], &n); err == nil {
				f[1] = synthID(n)
			}
		}
		b.WriteString(strings.Join(f, " ") + "\n")
	}
	return b.String()
}

// settled is the log lines of one take that was acked.
func settled(id, payload int) []string {
	return []string{
		fmt.Sprintf("got %d %d 1", id, payload),
		fmt.Sprintf("acking %d %d 1", id, payload),
		fmt.Sprintf("acked %d %d 1", id, payload),
	}
}

type synthProc struct {
	fate soakFate
	log  string
}

// judge runs the checker on n payloads published with outcome pub (nil:
// all OK) and the given logs.
func judge(t *testing.T, n int, pub map[int]pubOutcome, leftover map[uint32]int, procs ...synthProc) (soakTally, map[string]soakCheck, *soakChecker) {
	t.Helper()
	outcomes := make([]pubOutcome, n)
	for i := range outcomes {
		outcomes[i] = pubOK
		if o, ok := pub[i]; ok {
			outcomes[i] = o
		}
	}
	c := newSoakChecker(outcomes)
	for _, p := range procs {
		if _, err := c.readLog(strings.NewReader(p.log), p.fate); err != nil {
			t.Fatal(err)
		}
	}
	tally, checks := c.verdict(leftover)
	byName := map[string]soakCheck{}
	for _, ck := range checks {
		byName[ck.name] = ck
	}
	return tally, byName, c
}

const (
	checkAcked    = "every payload whose Publish returned nil was acked"
	checkDupIDs   = "no delivery id acked twice"
	checkLanded   = "no payload landed twice (delivered under two ids)"
	checkFalseAck = "every failed ack really failed (another take acked the delivery)"
	checkPhantom  = "publishes that did nothing were never delivered"
	checkTyped    = "every publish got a typed answer"
	checkLogs     = "the worker logs make sense"
)

// allChecks is every check the verdict reports (see soakChecker.verdict).
var allChecks = []string{checkAcked, checkDupIDs, checkLanded, checkFalseAck, checkPhantom, checkTyped, checkLogs}

// wantOnlyFailing fails the test unless every known check was reported and
// exactly the named checks failed.
func wantOnlyFailing(t *testing.T, checks map[string]soakCheck, names ...string) {
	t.Helper()
	for _, n := range allChecks {
		if _, ok := checks[n]; !ok {
			t.Fatalf("check %q not reported (got %d checks)", n, len(checks))
		}
	}
	want := map[string]bool{}
	for _, n := range names {
		if _, ok := checks[n]; !ok {
			t.Fatalf("no check named %q", n)
		}
		want[n] = true
	}
	for name, ck := range checks {
		if ck.ok == want[name] {
			t.Errorf("check %q: ok=%v, want %v (%s; %v)", name, ck.ok, !want[name], ck.detail, ck.examples)
		}
	}
}

var alive = soakFate{name: "worker 1"}

func TestSoakCheckerCleanRun(t *testing.T) {
	var lines []string
	for p := 0; p < 3; p++ {
		lines = append(lines, settled(p, p)...)
	}
	tally, checks, _ := judge(t, 3, nil, nil, synthProc{alive, synthLog(lines...)})
	wantOnlyFailing(t, checks)
	if tally.published != 3 || tally.acked != 3 || tally.redelivered != 0 {
		t.Errorf("tally %+v", tally)
	}
}

func TestSoakCheckerCatchesDoubleAck(t *testing.T) {
	// Delivery 7 (payload 0) acked by two takes: the contract is broken.
	a := synthLog(settled(7, 0)...)
	b := synthLog("got 7 0 2", "acking 7 0 2", "acked 7 0 2")
	tally, checks, c := judge(t, 1, nil, nil, synthProc{alive, a}, synthProc{soakFate{name: "worker 2"}, b})
	wantOnlyFailing(t, checks, checkDupIDs)
	if tally.dupIDs != 1 || tally.redelivered != 1 {
		t.Errorf("tally %+v", tally)
	}
	if !c.suspects()["0"] {
		t.Errorf("payload 0 is not named for evidence: %v", c.suspects())
	}
}

func TestSoakCheckerCatchesFalseNotFound(t *testing.T) {
	// The Ack said "not found" but no other take ever acked the delivery:
	// the ack was done and denied.
	a := synthLog("got 1 0 1", "acking 1 0 1", "ackerr 1 0 notfound 1")
	tally, checks, _ := judge(t, 1, nil, nil, synthProc{alive, a})
	wantOnlyFailing(t, checks, checkFalseAck)
	if tally.falseAckErrors != 1 {
		t.Errorf("tally %+v", tally)
	}

	// The same error followed by an ack of another take is true.
	b := synthLog("got 1 0 2", "acking 1 0 2", "acked 1 0 2")
	tally, checks, _ = judge(t, 1, nil, nil, synthProc{alive, a}, synthProc{soakFate{name: "worker 2"}, b})
	wantOnlyFailing(t, checks)
	if tally.falseAckErrors != 0 || tally.ackErrors != 1 || tally.causes[causeOther] != 1 {
		t.Errorf("tally %+v", tally)
	}
}

func TestSoakCheckerCatchesFalseConnLostOfZombie(t *testing.T) {
	zombie := soakFate{name: "worker 1", sigstopped: true}
	a := synthLog("got 1 0 1", "acking 1 0 1", "lost 1700000000100000000", "ackerr 1 0 connlost 1", "stopped self 1700000000200000000")
	_, checks, _ := judge(t, 1, nil, nil, synthProc{zombie, a})
	wantOnlyFailing(t, checks, checkFalseAck)

	b := synthLog("got 1 0 2", "acking 1 0 2", "acked 1 0 2")
	tally, checks, _ := judge(t, 1, nil, nil, synthProc{zombie, a}, synthProc{alive, b})
	wantOnlyFailing(t, checks)
	if tally.causes[causeZombie] != 1 || tally.redelivered != 1 {
		t.Errorf("causes %v, redelivered %d", tally.causes, tally.redelivered)
	}
}

func TestSoakCheckerCatchesLostPayload(t *testing.T) {
	// Payload 1 was published (nil) and never acked; payload 2 was got by
	// a process that was killed, and nobody took it again.
	lines := settled(0, 0)
	lines = append(lines, "got 2 2 1")
	killed := soakFate{name: "worker 1", killed: true}
	tally, checks, c := judge(t, 3, nil, map[uint32]int{1: 1}, synthProc{killed, synthLog(lines...)})
	wantOnlyFailing(t, checks, checkAcked)
	if tally.lost != 2 {
		t.Errorf("lost %d, want 2", tally.lost)
	}
	ex := strings.Join(checks[checkAcked].examples, "\n")
	if !strings.Contains(ex, "payload 1 (delivered 0 times, still in Redis)") || !strings.Contains(ex, "payload 2 (delivered 1 times, gone from Redis)") {
		t.Errorf("examples:\n%s", ex)
	}
	if s := c.suspects(); !s["1"] || !s["2"] {
		t.Errorf("suspects %v", s)
	}
}

func TestSoakCheckerCatchesDoubleLanding(t *testing.T) {
	// Payload 0 delivered under ids 1 and 2: one publish landed twice.
	lines := append(settled(1, 0), settled(2, 0)...)
	tally, checks, _ := judge(t, 1, nil, nil, synthProc{alive, synthLog(lines...)})
	wantOnlyFailing(t, checks, checkLanded)
	if tally.doubleLanded != 1 || tally.dupIDs != 0 {
		t.Errorf("tally %+v", tally)
	}
}

func TestSoakCheckerAckAtKill(t *testing.T) {
	// The only ack was under way when its process was SIGKILLed: accepted
	// as "acked at kill" while nothing of the payload is left in Redis.
	killed := soakFate{name: "worker 1", killed: true}
	log := synthLog("got 1 0 1", "acking 1 0 1")
	tally, checks, _ := judge(t, 1, nil, nil, synthProc{killed, log})
	wantOnlyFailing(t, checks)
	if tally.ackedAtKill != 1 || tally.acked != 0 {
		t.Errorf("tally %+v", tally)
	}
	_, checks, _ = judge(t, 1, nil, map[uint32]int{0: 1}, synthProc{killed, log})
	wantOnlyFailing(t, checks, checkAcked)

	// An ack at a kill that was not done: the delivery came back and was
	// acked; the kill is the cause of the redelivery.
	again := synthLog("got 1 0 2", "acking 1 0 2", "acked 1 0 2")
	tally, checks, _ = judge(t, 1, nil, nil, synthProc{killed, log}, synthProc{alive, again})
	wantOnlyFailing(t, checks)
	if tally.causes[causeKill] != 1 || tally.redelivered != 1 || tally.acked != 1 {
		t.Errorf("tally %+v", tally)
	}
}

func TestSoakCheckerPublishOutcomes(t *testing.T) {
	// 0: nothing done, yet delivered; 1: unknown and landed; 2: unknown
	// and absent; 3: an untyped error.
	pub := map[int]pubOutcome{0: pubUnavailable, 1: pubUnknown, 2: pubUnknown, 3: pubOther}
	lines := append(settled(1, 0), settled(2, 1)...)
	tally, checks, _ := judge(t, 4, pub, nil, synthProc{alive, synthLog(lines...)})
	wantOnlyFailing(t, checks, checkPhantom, checkTyped)
	if tally.nothingDone != 1 || tally.phantom != 1 || tally.outcomeUnknown != 2 || tally.unknownLanded != 1 || tally.unknownAbsent != 1 {
		t.Errorf("tally %+v", tally)
	}
}

func TestSoakCheckerCatchesNonsense(t *testing.T) {
	for name, lines := range map[string][]string{
		"acked never got":     {"acked 1 0 1"},
		"garbage":             {"hello world"},
		"unknown payload":     {"got 1 99 1"},
		"bad id":              {"got zz 0 1"},
		"handed out twice":    {"got 1 0 1", "got 1 0 1", "acking 1 0 1", "acked 1 0 1"},
		"untyped ack error":   {"got 1 0 1", "acking 1 0 1", "ackerr 1 0 other 1", "got 1 0 2", "acking 1 0 2", "acked 1 0 2"},
		"never settled alive": {"got 1 0 1"},
	} {
		t.Run(name, func(t *testing.T) {
			// Payload 0 is also acked by another process, so that only the
			// nonsense fails.
			_, checks, _ := judge(t, 1, nil, nil, synthProc{alive, synthLog(lines...)}, synthProc{soakFate{name: "worker 2"}, synthLog(settled(5, 0)...)})
			ck, found := checks[checkLogs]
			if !found || ck.ok {
				t.Fatalf("not caught (check reported: %v): %v", found, ck)
			}
		})
	}
}

func TestAckErrKind(t *testing.T) {
	wrap := func(errs ...error) error {
		var parts []any
		format := "redq: ack"
		for _, e := range errs {
			format += ": %w"
			parts = append(parts, e)
		}
		return fmt.Errorf(format, parts...)
	}
	for _, tc := range []struct {
		err  error
		want string
	}{
		{wrap(redq.ErrorNotFound), ackNotFound},
		{wrap(redq.ErrorNotFound, redq.ErrorConnectionLost), ackConnLost},
		{wrap(redq.ErrorNotFound, redq.ErrorLeaseLost), ackLeaseLost},
		{wrap(redq.ErrorOutcomeUnknown, context.DeadlineExceeded), ackUnknown},
		{wrap(redq.ErrorUnavailable), ackUnavailable},
		{wrap(redq.ErrorWritesRefused), ackRefused},
		{wrap(redq.ErrorConsumingStopped), ackStopped},
		{fmt.Errorf("boom"), ackOther},
	} {
		if got := ackErrKind(tc.err); got != tc.want {
			t.Errorf("ackErrKind(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
	for _, tc := range []struct {
		err  error
		want pubOutcome
	}{
		{nil, pubOK},
		{wrap(redq.ErrorOutcomeUnknown, context.DeadlineExceeded), pubUnknown},
		{wrap(redq.ErrorUnavailable), pubUnavailable},
		{wrap(redq.ErrorWritesRefused), pubRefused},
		{context.DeadlineExceeded, pubNotSent},
		{wrap(redq.ErrorConsumingStopped), pubNotSent},
		{fmt.Errorf("boom"), pubOther},
	} {
		if got := classifyPublish(tc.err); got != tc.want {
			t.Errorf("classifyPublish(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

func TestEnvelopePayload(t *testing.T) {
	id := strings.Repeat("i", 16)
	for _, tc := range []struct {
		env, want string
		ok        bool
	}{
		{"\x01" + id + "42", "42", true},
		{"\x03" + id + "1,0,0,0,0,0;42", "42", true},
		{"\x03" + id + `2,3,0,0,0,9;{"a":"b"}7`, "7", true},
		{"\x03" + id + "1,0,0", "", false},
		{wakeMarker, "", false},
		{"short", "", false},
	} {
		got, ok := envelopePayload(tc.env)
		if got != tc.want || ok != tc.ok {
			t.Errorf("envelopePayload(%q) = %q, %v; want %q, %v", tc.env, got, ok, tc.want, tc.ok)
		}
	}
}

func TestScanSoakKeys(t *testing.T) {
	m := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer client.Close()
	ctx := context.Background()
	id := strings.Repeat("i", 16)
	p := "redq:{soak}:"
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(client.SAdd(ctx, "{redq}:queues", "soak").Err())
	must(client.Set(ctx, p+"fence", 12, 0).Err())
	must(client.HSet(ctx, p+"replies:w1", "f1", "1|1").Err())
	must(client.PExpire(ctx, p+"replies:w1", time.Hour).Err())
	must(client.HSet(ctx, p+"replies:w2", "f1", "1|1").Err()) // no TTL: a leak
	must(client.LPush(ctx, p+"ready", "\x01"+id+"42", wakeMarker).Err())
	must(client.HSet(ctx, p+"unacked:w2", id+"7", "\x03"+id+"1,0,0,0,0,0;43").Err())
	must(client.RPush(ctx, p+"ready:3", wakeMarker).Err()) // no deliveries, no TTL

	keys, leftover, err := scanSoakKeys(ctx, client, "redq", []string{"soak"})
	if err != nil {
		t.Fatal(err)
	}
	bad := map[string]string{}
	for _, k := range keys {
		if k.bad != "" {
			bad[k.name] = k.bad
		}
	}
	want := map[string]string{
		p + "replies:w2": "has no TTL",
		p + "ready":      "holds 1 deliveries",
		p + "unacked:w2": "holds 1 deliveries",
		p + "ready:3":    "left behind without deliveries and without a TTL",
	}
	if fmt.Sprint(bad) != fmt.Sprint(want) {
		t.Errorf("bad keys:\n%v\nwant:\n%v", bad, want)
	}
	if leftover[42] != 1 || leftover[43] != 1 || len(leftover) != 2 {
		t.Errorf("leftover %v", leftover)
	}
	ck := keysCheck(keys)
	if ck.ok || len(ck.examples) != len(keys) {
		t.Errorf("keysCheck = %+v", ck)
	}
}
