//go:build linux

package main

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redq/redq/internal/redistest"
)

// The command SIGKILLed at random points of a run, three times, then run
// to the end: every payload is in redq once and in order (the dead rmq
// connection's first), and nothing is left in rmq.
func TestMigrateFromRmqKilled(t *testing.T) {
	s := redistest.Start(t)
	tg := newTarget(t, s.Addr())
	ctx := context.Background()
	l := rmqLayout{t: t, c: tg.client, tagged: true}
	const n = 60000
	payloads := make([]string, n)
	args := make([]any, n)
	for i := range payloads {
		payloads[i] = "p" + strconv.Itoa(i) + strings.Repeat("-", 60)
		args[i] = payloads[i]
	}
	l.publish("q")
	l.must(tg.client.LPush(ctx, l.ready("q"), args...).Err())
	l.take("crashed", false, "q", 3000)

	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for kill := range 3 {
		cmd := exec.Command(exe, tg.args("migrate-from-rmq", "--chunk", "100", "--progress", "1ns")...)
		cmd.Env = append(os.Environ(), runCommandEnv+"=1")
		stderr, err := cmd.StderrPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		moving := make(chan struct{})
		go func() {
			sc := bufio.NewScanner(stderr)
			first := true
			for sc.Scan() {
				if first && strings.Contains(sc.Text(), "moved ") {
					close(moving)
					first = false
				}
			}
		}()
		select {
		case <-moving:
		case <-time.After(15 * time.Second):
			t.Fatal("the command printed no progress")
		}
		time.Sleep(time.Duration(kill*7) * time.Millisecond)
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_ = cmd.Wait()
		left := tg.client.LLen(ctx, l.ready("q")).Val() + tg.client.LLen(ctx, l.unacked("crashed", "q")).Val()
		if left == 0 {
			t.Fatalf("kill %d came after the run ended; nothing was left to interrupt", kill)
		}
	}
	out := mustRedq(t, tg.args("migrate-from-rmq")...)
	if strings.Contains(out, "moved 0 deliveries") {
		t.Fatalf("the last run had nothing to do:\n%s", out)
	}
	q, err := tg.open(t, "drain").OpenQueue("q")
	if err != nil {
		t.Fatal(err)
	}
	drained, err := q.Drain(n + 1)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(drained, payloads) {
		dup := map[string]int{}
		for _, p := range drained {
			dup[p]++
		}
		var twice []string
		for p, k := range dup {
			if k > 1 {
				twice = append(twice, p)
			}
		}
		t.Fatalf("redq holds %d deliveries, not the %d published in order (%d doubled)", len(drained), n, len(twice))
	}
	for _, k := range []string{l.ready("q"), l.unacked("crashed", "q")} {
		if tg.client.Exists(ctx, k).Val() != 0 {
			t.Fatalf("%s is left", k)
		}
	}
}
