// Command redq runs and operates redq work queues on Redis: a demo with a
// live stats page, the stats page on its own, a cleaner, the operations an
// operator needs after a downstream outage, and a soak that proves the
// library's reliability contract under faults.
//
// Usage:
//
//	redq <command> [flags]
//
// Run "redq help" for the list of commands and "redq help <command>" for a
// command's flags.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/redq/redq/internal/soak"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		// After the first signal, restore the default behaviour so that a
		// second Ctrl-C kills a shutdown that hangs.
		<-ctx.Done()
		stop()
	}()
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// command is one subcommand of redq.
type command struct {
	name    string
	summary string
	// flags declares the command's flags on fs and returns the function
	// that runs the command once they are parsed.
	flags func(fs *flag.FlagSet) func(ctx context.Context, stdout, stderr io.Writer) error
	// details, if any, is printed by "redq help <command>" between the
	// summary and the flags.
	details string
}

// commands are listed by "redq help" in this order.
var commands = []command{
	{name: "demo", summary: "run producers, consumers, a cleaner and the stats page on an embedded or real Redis", flags: demoCommand},
	{name: "serve", summary: "serve the stats page (the dashboard) of a namespace", flags: serveCommand},
	{name: "stats", summary: "print the counts of every open queue", flags: statsCommand},
	{name: "clean", summary: "return the deliveries of dead connections and lost leases to ready, once or periodically", flags: cleanCommand},
	{name: "return-rejected", summary: "move rejected deliveries of a queue back to ready", flags: returnRejectedCommand},
	{name: "purge-rejected", summary: "delete the rejected deliveries of a queue", flags: purgeRejectedCommand},
	{name: "migrate-from-rmq", summary: "move an rmq v5 deployment's deliveries into redq's layout (try --dry-run first)", flags: migrateCommand, details: migrateDetails},
	{name: "soak", summary: "prove the reliability contract under faults (SIGKILL, SIGSTOP, Redis restarts) on a private redis-server",
		flags: soak.Command, details: soak.Details},
}

// hiddenCommands run like commands but are not listed: programs start
// them, people do not.
var hiddenCommands = []command{
	{name: soak.WorkerCommandName, summary: "run one consumer process of a soak (started by redq soak)", flags: soak.WorkerCommand},
}

func lookup(name string) *command {
	for _, table := range [][]command{commands, hiddenCommands} {
		for i := range table {
			if table[i].name == name {
				return &table[i]
			}
		}
	}
	return nil
}

// run runs redq with args (without the program name) and returns the exit
// status: 0 on success, 1 when the command failed, 2 for a usage error.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		printUsage(stderr)
		return 2
	}
	name, args := args[0], args[1:]
	switch name {
	case "help", "-h", "-help", "--help":
		if len(args) == 0 {
			printUsage(stdout)
			return 0
		}
		cmd := lookup(args[0])
		if cmd == nil {
			fmt.Fprintf(stderr, "redq help: unknown command %q\n\n", args[0])
			printUsage(stderr)
			return 2
		}
		fs, _ := newFlagSet(cmd)
		fs.SetOutput(stdout)
		fs.Usage()
		return 0
	}
	cmd := lookup(name)
	if cmd == nil {
		fmt.Fprintf(stderr, "redq: unknown command %q\n\n", name)
		printUsage(stderr)
		return 2
	}
	fs, runCommand := newFlagSet(cmd)
	fs.SetOutput(io.Discard) // we report parse errors ourselves, once
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stdout)
			fs.Usage()
			return 0
		}
		return usageFailure(stderr, cmd, err)
	}
	if fs.NArg() > 0 {
		return usageFailure(stderr, cmd, fmt.Errorf("unexpected argument %q (flags go before arguments; this command takes none)", fs.Arg(0)))
	}
	err := runCommand(ctx, stdout, stderr)
	var ue usageError
	var sue soak.UsageError
	var es exitStatus
	var see soak.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ue), errors.As(err, &sue):
		return usageFailure(stderr, cmd, err)
	case errors.As(err, &es):
		if es.err != nil {
			fmt.Fprintf(stderr, "redq %s: %v\n", cmd.name, es.err)
		}
		return es.code
	case errors.As(err, &see):
		if see.Err != nil {
			fmt.Fprintf(stderr, "redq %s: %v\n", cmd.name, see.Err)
		}
		return see.Code
	default:
		fmt.Fprintf(stderr, "redq %s: %v\n", cmd.name, err)
		return 1
	}
}

// newFlagSet returns the command's flag set, with its usage text, and the
// function that runs the command once the flags are parsed.
func newFlagSet(cmd *command) (*flag.FlagSet, func(ctx context.Context, stdout, stderr io.Writer) error) {
	fs := flag.NewFlagSet("redq "+cmd.name, flag.ContinueOnError)
	runCommand := cmd.flags(fs)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: redq %s [flags]\n\n%s.\n\n", cmd.name, capitalize(cmd.summary))
		if cmd.details != "" {
			fmt.Fprintf(fs.Output(), "%s\n\n", strings.TrimSpace(cmd.details))
		}
		fmt.Fprint(fs.Output(), "flags:\n")
		fs.PrintDefaults()
	}
	return fs, runCommand
}

func usageFailure(stderr io.Writer, cmd *command, err error) int {
	fmt.Fprintf(stderr, "redq %s: %v\nRun 'redq help %s' for usage.\n", cmd.name, err, cmd.name)
	return 2
}

func printUsage(w io.Writer) {
	fmt.Fprint(w, "redq runs and operates redq work queues on Redis.\n\nusage: redq <command> [flags]\n\ncommands:\n")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-16s %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, "  help             show this list, or a command's flags: redq help <command>\n")
	fmt.Fprint(w, "\nExample: redq demo --duration 5s\n")
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// usageError marks an error as the user's: wrong or missing flags. It makes
// the command exit with status 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error {
	return usageError{fmt.Errorf(format, args...)}
}

// exitStatus makes a command exit with a status of its own, after printing
// err if it is not nil.
type exitStatus struct {
	code int
	err  error
}

func (e exitStatus) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

func (e exitStatus) Unwrap() error { return e.err }
