package main

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"testing"

	"github.com/redq/redq/internal/redistest"
)

// The program's story, in order: what the README promises it shows. Lines
// with ids or timings are matched by their stable part.
var wantLines = []*regexp.Regexp{
	regexp.MustCompile(`^published: reminder`),
	regexp.MustCompile(`^took "urgent" +\(attempt 1, id [0-9a-f]{32}\)$`),
	regexp.MustCompile(`^took "normal" +\(attempt 1,`),
	regexp.MustCompile(`^took "low 1" +\(attempt 1,`),
	regexp.MustCompile(`^took "low 2" +\(attempt 1,`),
	regexp.MustCompile(`^published: flash sale`),
	regexp.MustCompile(`^took "reminder \(delayed 800ms\)" about .* after it was published$`),
	regexp.MustCompile(`^nothing else: Take timed out`),
	regexp.MustCompile(`^stats: ready 0, delayed 0, expired 1$`),
	regexp.MustCompile(`^published: flaky, broken`),
	// the handler lines follow, checked below
}

func checkOutput(t *testing.T, out string) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != len(wantLines)+7 {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), len(wantLines)+7, out)
	}
	for i, re := range wantLines {
		if !re.MatchString(lines[i]) {
			t.Errorf("line %d = %q, want %s", i+1, lines[i], re)
		}
	}
	// The handler's lines interleave the two deliveries, but each one's
	// attempts come in order.
	var flaky, broken []string
	for _, l := range lines[len(wantLines) : len(lines)-1] {
		switch {
		case strings.HasPrefix(l, "handler: flaky "):
			flaky = append(flaky, l)
		case strings.HasPrefix(l, "handler: broken "):
			broken = append(broken, l)
		default:
			t.Errorf("unexpected line %q", l)
		}
	}
	wantFlaky := []string{
		"handler: flaky attempt 1 failed: server busy",
		"handler: flaky attempt 2 failed: server busy",
		"handler: flaky attempt 3 done",
	}
	wantBroken := []string{
		"handler: broken attempt 1 failed: mailbox unavailable",
		"handler: broken attempt 2 failed: mailbox unavailable",
		"handler: broken attempt 3 failed: mailbox unavailable",
	}
	if strings.Join(flaky, "\n") != strings.Join(wantFlaky, "\n") || strings.Join(broken, "\n") != strings.Join(wantBroken, "\n") {
		t.Errorf("handler lines:\n%s\n%s\nwant\n%s\n%s", strings.Join(flaky, "\n"), strings.Join(broken, "\n"), strings.Join(wantFlaky, "\n"), strings.Join(wantBroken, "\n"))
	}
	if last := lines[len(lines)-1]; last != `rejected "broken" after 3 attempts: mailbox unavailable` {
		t.Errorf("last line %q", last)
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
