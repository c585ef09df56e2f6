package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/redq/redq/internal/redistest"
)

// The bench flushes its database between runs, so it must refuse one that
// holds keys, and leave those keys alone.
func TestRefusesADatabaseThatHoldsKeys(t *testing.T) {
	s := redistest.Start(t)
	rdb := s.Client(t)
	ctx := context.Background()
	if err := rdb.Set(ctx, "someone-elses", "data", 0).Err(); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	code := run(ctx, []string{"-redis", "redis://" + s.Addr() + "/0", "-n", "100", "-reps", "1", "-only", "memory", "-quiet", "-out", t.TempDir()}, &stdout, &stderr)
	if code != 1 || !strings.Contains(stderr.String(), "holds 1 keys") {
		t.Fatalf("exit %d, stderr %q: want 1 and a refusal naming the keys", code, stderr.String())
	}
	if v, err := rdb.Get(ctx, "someone-elses").Result(); err != nil || v != "data" {
		t.Fatalf("the key is %q, %v after the refusal: want it untouched", v, err)
	}
}

func TestBadFlagsAreRefused(t *testing.T) {
	for _, args := range [][]string{
		{"-n", "10"},
		{"-reps", "0"},
		{"-rate", "-1"},
		{"-idle-samples", "0"},
		{"-round-rate", "0"},
		{"-only", "no-such-workload"},
		{"-systems", "rmq"},
		{"extra"},
		{"-redis", "not a url"},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(context.Background(), args, &stdout, &stderr); code == 0 || stderr.Len() == 0 {
			t.Errorf("%q: exit %d, stderr %q: want an error", args, code, stderr.String())
		}
	}
}

// A whole run on the smallest sizes writes the table and every output
// file, and every system consumed every delivery (the exit status says so).
func TestRunWritesTheTableAndFiles(t *testing.T) {
	if testing.Short() {
		t.Skip("runs redis-server")
	}
	s := redistest.Start(t)
	out := t.TempDir()
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"-redis", "redis://" + s.Addr() + "/0", "-n", "100", "-reps", "2",
		"-only", "e2e/10,memory", "-systems", "redq,list", "-quiet", "-out", out}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr.String())
	}
	for _, want := range []string{"e2e/10-consumers", "memory/ready", "redq", "list", "redis    Redis"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, stdout.String())
		}
	}
	for _, f := range []string{"results.json", "results.md", "chart.svg", "chart.png"} {
		if fi, err := os.Stat(filepath.Join(out, f)); err != nil || fi.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
}
