package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"
)

// runCommandEnv, set to 1 in the environment of this test binary, makes it
// run its arguments as the redq command instead of the tests: a test starts
// the command as a process of its own this way (to SIGKILL it, say).
const runCommandEnv = "REDQ_TEST_RUN_COMMAND"

func TestMain(m *testing.M) {
	routeRedisLogs(os.Args[1:]) // as main does
	if os.Getenv(runCommandEnv) == "1" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// redqExec runs the command as a process of its own (this test binary,
// re-executed) and returns its exit status and output: what a user sees,
// including whatever the process writes to stderr outside run.
func redqExec(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe, args...)
	cmd.Env = append(os.Environ(), runCommandEnv+"=1")
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee) && ctx.Err() == nil:
		code = ee.ExitCode()
	default:
		t.Fatalf("redq %s: %v\nstderr:\n%s", strings.Join(args, " "), err, errOut.String())
	}
	return code, out.String(), errOut.String()
}
