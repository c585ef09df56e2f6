//go:build !linux

package main

import (
	"context"
	"errors"
	"flag"
	"io"
)

// The soak pauses, kills and re-parents processes with Linux's signals and
// process attributes (SIGSTOP, Pdeathsig); elsewhere it says so.

const soakDetails = "The soak runs on Linux only."

var errSoakLinuxOnly = errors.New("the soak runs on Linux only")

// soakCommand: redq soak, which runs on Linux only.
func soakCommand(fs *flag.FlagSet) func(context.Context, io.Writer, io.Writer) error {
	return func(context.Context, io.Writer, io.Writer) error { return errSoakLinuxOnly }
}

// soakWorkerCommand: redq soak-worker, which runs on Linux only.
func soakWorkerCommand(fs *flag.FlagSet) func(context.Context, io.Writer, io.Writer) error {
	return func(context.Context, io.Writer, io.Writer) error { return errSoakLinuxOnly }
}
