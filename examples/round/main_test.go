package main

import (
	"bytes"
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redq/redq/internal/redistest"
)

var feedLine = regexp.MustCompile(`^(feed-\d): polled (\d+) times, at least ([0-9.]+m?s) apart(.*)$`)

// The program's story: every feed polled several times and never twice
// within the period (feed-3's reissue aside), feed-4 and feed-5 forgotten.
func checkOutput(t *testing.T, out string) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 7 {
		t.Fatalf("%d lines, want 7:\n%s", len(lines), out)
	}
	if !strings.HasPrefix(lines[0], "round round-feeds: period 500ms, TTL 1.5s, 3 workers") {
		t.Errorf("line 1 = %q", lines[0])
	}
	for i, want := range []string{"feed-1", "feed-2", "feed-3", "feed-4", "feed-5"} {
		m := feedLine.FindStringSubmatch(lines[i+1])
		if m == nil || m[1] != want {
			t.Fatalf("line %d = %q, want %s's", i+2, lines[i+1], want)
		}
		n, _ := strconv.Atoi(m[2])
		gap, err := time.ParseDuration(m[3])
		if err != nil || n < 2 || gap < period {
			t.Errorf("%s polled %d times at least %s apart: want at least twice, %s apart", want, n, gap, period)
		}
		switch want {
		case "feed-3":
			if m[4] != ", failed once and was reissued" {
				t.Errorf("line %q", lines[i+1])
			}
		case "feed-4", "feed-5":
			if m[4] != ", not renewed: forgotten after its TTL" {
				t.Errorf("line %q", lines[i+1])
			}
		}
	}
	if !regexp.MustCompile(`^stats: 3 items, 2 expired, \d+ handed out$`).MatchString(lines[6]) {
		t.Errorf("last line = %q", lines[6])
	}
}

func TestRunEmbedded(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), "", &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	checkOutput(t, out.String())
}

func TestRunRealRedis(t *testing.T) {
	s := redistest.Start(t)
	var out bytes.Buffer
	if err := run(context.Background(), "redis://"+s.Addr()+"/0", &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	checkOutput(t, out.String())
}
