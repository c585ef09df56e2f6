package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestPayloadCarriesSeqAndTime(t *testing.T) {
	before := time.Now()
	p := newPayload(12345, 100)
	if len(p) != 100 {
		t.Fatalf("len %d, want 100", len(p))
	}
	seq, at, ok := parsePayload(p)
	if !ok || seq != 12345 || at.Before(before) || at.After(time.Now()) {
		t.Fatalf("parsePayload = %d, %v, %v", seq, at, ok)
	}
	if _, _, ok := parsePayload([]byte("short")); ok {
		t.Error("a short payload parsed")
	}
	if got := len(newPayload(1, 3)); got != payloadHeader {
		t.Errorf("a payload asked for 3 bytes has %d, want the header's %d", got, payloadHeader)
	}
}

// The tally is what makes every bench run a correctness check: it must
// notice a missing, a repeated and a foreign delivery.
func TestTallyFindsWhatIsWrong(t *testing.T) {
	see := func(tl *tally, seqs ...int) {
		for _, s := range seqs {
			tl.see(newPayload(s, 40))
		}
	}
	tl := newTally(3)
	see(tl, 0, 2, 1)
	select {
	case <-tl.Done():
	default:
		t.Fatal("Done not closed after every payload")
	}
	if err := tl.check(); err != nil {
		t.Fatalf("complete tally: %v", err)
	}

	for name, c := range map[string]struct {
		seqs  []int
		extra []byte
		want  string
	}{
		"missing":   {seqs: []int{0, 2}, want: "first missing: 1"},
		"duplicate": {seqs: []int{0, 1, 2, 1}, want: "1 duplicates"},
		"foreign":   {seqs: []int{0, 1, 2}, extra: []byte("not a bench payload at all!!!!!!!"), want: "1 unknown"},
		"beyond":    {seqs: []int{0, 1, 2, 7}, want: "1 unknown"},
	} {
		tl := newTally(3)
		see(tl, c.seqs...)
		if c.extra != nil {
			tl.see(c.extra)
		}
		err := tl.wait(context.Background(), 10*time.Millisecond)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error saying %q", name, err, c.want)
		}
	}

	// expect: a steady run learns at the end how many it published.
	tl = newTally(10)
	see(tl, 0, 1, 2, 3)
	tl.expect(4)
	if err := tl.check(); err != nil {
		t.Errorf("4 of 4 expected: %v", err)
	}
	tl.expect(5)
	if err := tl.check(); err == nil {
		t.Error("4 of 5 expected: no error")
	}
}

func TestPaceStopsAtTheFirstError(t *testing.T) {
	boom := errors.New("boom")
	n, err := pace(context.Background(), 1000, 4, 10*time.Second, func(seq int) error {
		if seq == 20 {
			return boom
		}
		return nil
	})
	if !errors.Is(err, boom) || n > 30 {
		t.Fatalf("pace = %d, %v: want to stop soon after the error, with it", n, err)
	}
	if _, err := pace(context.Background(), 0, 1, time.Second, func(int) error { return nil }); err == nil {
		t.Error("rate 0: no error")
	}
}

// connectionsReceived counts the connections a run opens: each new client
// connection adds one, and commands on open ones add none.
func TestConnectionsReceivedCountsNewConnections(t *testing.T) {
	e := testEnv(t)
	ctx := testContext(t)
	before, err := connectionsReceived(ctx, e.admin)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := e.admin.Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	same, err := connectionsReceived(ctx, e.admin)
	if err != nil {
		t.Fatal(err)
	}
	if same != before {
		t.Errorf("commands on an open connection: %d connections received, then %d", before, same)
	}
	c := e.newClient(3)
	defer c.Close()
	conns := make([]*redis.Conn, 3)
	for i := range conns {
		conns[i] = c.Conn()
		defer conns[i].Close()
		if err := conns[i].Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	after, err := connectionsReceived(ctx, e.admin)
	if err != nil {
		t.Fatal(err)
	}
	if after-same != 3 {
		t.Errorf("three new connections: %d connections received, then %d", same, after)
	}
}
