package main

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"testing"

	"github.com/redq/redq/internal/redistest"
)

// The program's story, line by line.
var wantLines = []*regexp.Regexp{
	regexp.MustCompile(`^first three sends: one per tenant: true$`),
	regexp.MustCompile(`^acme: 4 sent, third waited for the window: true$`),
	regexp.MustCompile(`^globex: 2 sent, third waited for the window: -$`),
	regexp.MustCompile(`^initech: 2 sent, third waited for the window: -$`),
	regexp.MustCompile(`^all sent within [2-9]s$`),
	regexp.MustCompile(`^left: 0 ready, 0 groups pending; K 1, rate 2/1s per tenant$`),
}

func checkOutput(t *testing.T, out string) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != len(wantLines) {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), len(wantLines), out)
	}
	for i, re := range wantLines {
		if !re.MatchString(lines[i]) {
			t.Errorf("line %d = %q, want %s", i+1, lines[i], re)
		}
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
