//go:build !linux

package soak

import (
	"context"
	"errors"
	"flag"
	"io"
)

// The soak pauses, kills and re-parents processes with Linux's signals and
// process attributes (SIGSTOP, Pdeathsig); elsewhere it says so.

// Details is the soak's help text beyond its flags.
const Details = "The soak runs on Linux only."

var errSoakLinuxOnly = errors.New("the soak runs on Linux only")

// Command declares redq soak, which runs on Linux only.
func Command(fs *flag.FlagSet) func(context.Context, io.Writer, io.Writer) error {
	return func(context.Context, io.Writer, io.Writer) error { return errSoakLinuxOnly }
}

// WorkerCommand declares redq soak-worker, which runs on Linux only.
func WorkerCommand(fs *flag.FlagSet) func(context.Context, io.Writer, io.Writer) error {
	return func(context.Context, io.Writer, io.Writer) error { return errSoakLinuxOnly }
}
