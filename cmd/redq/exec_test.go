package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
	"testing"
)

// runCommandEnv, set to 1 in the environment of this test binary, makes it
// run its arguments as the redq command instead of the tests: a test starts
// the command as a process of its own this way (to SIGKILL it, say).
const runCommandEnv = "REDQ_TEST_RUN_COMMAND"

func TestMain(m *testing.M) {
	routeRedisLogs() // as main does
	if os.Getenv(runCommandEnv) == "1" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
	os.Exit(m.Run())
}
