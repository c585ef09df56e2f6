// Command redq runs and operates redq work queues on Redis: it lists queues,
// deliveries, connections, timers and rounds without changing anything,
// acts on one delivery or queue (retry, delete, purge, pause, resume, run
// now, cancel), runs a demo, the dashboard, a cleaner and a migration from
// rmq, and a soak that proves the library's reliability contract under
// faults.
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
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redq/redq"

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
	routeRedisLogs(os.Args[1:])
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// routeRedisLogs decides what becomes of go-redis's own log lines, which
// it writes for every failed dial, for the command args name. A
// long-running command (see longRunning) sends them through
// redq.RedisLogger: at most one line per kind of problem a minute, at warn,
// on stderr, so that an operator watching it sees Redis come and go. A
// one-shot command drops them: it reports what failed in one line of its
// own, and that line is the only one it writes to stderr.
func routeRedisLogs(args []string) {
	var l *slog.Logger
	if longRunning(args) {
		l = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	redis.SetLogger(redq.RedisLogger(l))
}

// longRunning reports whether args (without the program name) start a
// command that runs until it is stopped: serve, demo, soak (and its
// workers), and clean with a positive --interval.
func longRunning(args []string) bool {
	if len(args) == 0 {
		return false
	}
	switch args[0] {
	case "serve", "demo", "soak", soak.WorkerCommandName:
		return true
	case "clean":
		fs, _ := newFlagSet(lookup("clean"))
		fs.SetOutput(io.Discard)
		if _, err := parseInterspersed(fs, args[1:]); err != nil {
			return false // the command reports the usage error and ends
		}
		interval, ok := fs.Lookup("interval").Value.(flag.Getter).Get().(time.Duration)
		return ok && interval > 0
	}
	return false
}

// command is one subcommand of redq.
type command struct {
	name    string
	summary string
	// group is the heading "redq help" lists the command under.
	group string
	// flags declares the flags of a command that takes no arguments on fs
	// and returns the function that runs the command once they are parsed.
	flags func(fs *flag.FlagSet) func(ctx context.Context, stdout, stderr io.Writer) error
	// argFlags is flags for a command with positional arguments, named by
	// args; the function it returns gets them (exactly as many as args
	// names).
	argFlags func(fs *flag.FlagSet) func(ctx context.Context, args []string, stdout, stderr io.Writer) error
	args     []string
	// varArgs lets a command with argFlags take from none to all of the
	// arguments args names (args then only names them in the usage line):
	// the command checks them itself and returns a usage error.
	varArgs bool
	// argsUsage, if set, is the arguments of the usage line, in place of
	// args.
	argsUsage string
	// details, if any, is printed by "redq help <command>" between the
	// summary and the flags.
	details string
}

// Groups of commands, in the order "redq help" lists them.
const (
	groupInspect     = "inspect (read-only: they register nothing and change nothing in Redis)"
	groupAct         = "act on queues and deliveries"
	groupRun         = "run"
	groupMaintenance = "maintenance"
)

var groups = []string{groupInspect, groupAct, groupRun, groupMaintenance}

// commands are listed by "redq help" in this order, by group.
var commands = []command{
	{name: "queues", group: groupInspect, summary: "list the open queues with their counts, paused state, rate limit and totals", flags: queuesCommand},
	{name: "inspect", group: groupInspect, args: []string{"QUEUE"}, summary: "list a queue's deliveries in one state, a page at a time", argFlags: inspectCommand, details: inspectDetails},
	{name: "delivery", group: groupInspect, args: []string{"QUEUE", "ID"}, summary: "show one delivery: payload, headers, attempts, times and reject reason", argFlags: deliveryCommand},
	{name: "connections", group: groupInspect, summary: "list the connections with their state, heartbeat age and unacked deliveries", flags: connectionsCommand},
	{name: "timers", group: groupInspect, summary: "list the timer sets with their counts", flags: timersCommand},
	{name: "rounds", group: groupInspect, summary: "list the rounds with their counts, or a round's items with --round NAME", flags: roundsCommand},
	{name: "schedules", group: groupInspect, args: []string{"[SET]"}, varArgs: true, argsUsage: "[SET | pause|resume|remove SET ID]",
		summary: "list the schedule sets with their counts, or a set's schedules with their next and last tick", argFlags: schedulesCommand, details: schedulesDetails},
	{name: "stats", group: groupInspect, summary: "print the counts of every open queue", flags: statsCommand},

	{name: "retry", group: groupAct, args: []string{"QUEUE", "ID"}, summary: "move a rejected or delayed delivery to ready now", argFlags: retryCommand},
	{name: "delete", group: groupAct, args: []string{"QUEUE", "ID"}, summary: "delete a ready (plain or grouped), delayed or rejected delivery", argFlags: deleteCommand},
	{name: "purge", group: groupAct, args: []string{"QUEUE"}, summary: "delete every delivery of a queue in one state (ready, delayed or rejected); needs --yes", argFlags: purgeCommand},
	{name: "pause", group: groupAct, args: []string{"QUEUE"}, summary: "stop every connection from fetching from a queue (publishes and acks go on)", argFlags: pauseCommand},
	{name: "resume", group: groupAct, args: []string{"QUEUE"}, summary: "let connections fetch from a paused queue again", argFlags: resumeCommand},
	{name: "run-now", group: groupAct, args: []string{"QUEUE", "KEY"}, summary: "make a keyed item due now", argFlags: runNowCommand},
	{name: "cancel", group: groupAct, args: []string{"QUEUE", "KEY"}, summary: "remove a keyed item that is pending", argFlags: cancelCommand},
	// listed here for "redq help"; lookup finds the entry above, which runs
	// both forms
	{name: "schedules", group: groupAct, args: []string{"VERB", "SET", "ID"}, varArgs: true, argsUsage: "[SET | pause|resume|remove SET ID]",
		summary: "pause, resume or remove (VERB) one schedule of a set", argFlags: schedulesCommand, details: schedulesDetails},
	{name: "return-rejected", group: groupAct, summary: "move rejected deliveries of a queue back to ready", flags: returnRejectedCommand},
	{name: "purge-rejected", group: groupAct, summary: "delete the rejected deliveries of a queue", flags: purgeRejectedCommand},

	{name: "demo", group: groupRun, summary: "run producers, consumers, a cleaner and the stats page on an embedded or real Redis", flags: demoCommand, details: demoDetails},
	{name: "serve", group: groupRun, summary: "serve the dashboard of a namespace: queues, deliveries, connections, and actions with --actions", flags: serveCommand, details: serveDetails},
	{name: "soak", group: groupRun, summary: "prove the reliability contract under faults (SIGKILL, SIGSTOP, Redis restarts) on a private redis-server",
		flags: soak.Command, details: soak.Details},

	{name: "clean", group: groupMaintenance, summary: "return the deliveries of dead connections and lost leases to ready, once or periodically", flags: cleanCommand},
	{name: "migrate-from-rmq", group: groupMaintenance, summary: "move an rmq v5 deployment's deliveries into redq's layout (try --dry-run first)", flags: migrateCommand, details: migrateDetails},
	{name: "version", group: groupMaintenance, summary: "print redq's version and how it was built", flags: versionCommand},
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
	case "-version", "--version":
		name = "version"
	}
	cmd := lookup(name)
	if cmd == nil {
		fmt.Fprintf(stderr, "redq: unknown command %q\n\n", name)
		printUsage(stderr)
		return 2
	}
	fs, runCommand := newFlagSet(cmd)
	fs.SetOutput(io.Discard) // we report parse errors ourselves, once
	positional, err := parseInterspersed(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stdout)
			fs.Usage()
			return 0
		}
		return usageFailure(stderr, cmd, err)
	}
	switch {
	case cmd.varArgs:
	case len(positional) > len(cmd.args) && len(cmd.args) == 0:
		return usageFailure(stderr, cmd, fmt.Errorf("unexpected argument %q (this command takes none)", positional[0]))
	case len(positional) > len(cmd.args):
		return usageFailure(stderr, cmd, fmt.Errorf("unexpected argument %q (this command takes %s)", positional[len(cmd.args)], strings.Join(cmd.args, " ")))
	case len(positional) < len(cmd.args):
		return usageFailure(stderr, cmd, fmt.Errorf("missing %s", strings.Join(cmd.args[len(positional):], " ")))
	}
	err = runCommand(ctx, positional, stdout, stderr)
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
			printError(stderr, cmd, es.err)
		}
		return es.code
	case errors.As(err, &see):
		if see.Err != nil {
			printError(stderr, cmd, see.Err)
		}
		return see.Code
	default:
		printError(stderr, cmd, err)
		return 1
	}
}

// parseInterspersed parses args on fs, allowing flags after positional
// arguments ("redq inspect jobs --state rejected"), and returns the
// positional arguments. After "--" everything is positional.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return positional, nil
		}
		// flag stops at the first non-flag, or consumes a "--" before it.
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			return append(positional, rest...), nil
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
}

// newFlagSet returns the command's flag set, with its usage text, and the
// function that runs the command once the flags are parsed.
func newFlagSet(cmd *command) (*flag.FlagSet, func(ctx context.Context, args []string, stdout, stderr io.Writer) error) {
	fs := flag.NewFlagSet("redq "+cmd.name, flag.ContinueOnError)
	var runCommand func(ctx context.Context, args []string, stdout, stderr io.Writer) error
	if cmd.argFlags != nil {
		runCommand = cmd.argFlags(fs)
	} else {
		f := cmd.flags(fs)
		runCommand = func(ctx context.Context, _ []string, stdout, stderr io.Writer) error { return f(ctx, stdout, stderr) }
	}
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: %s\n\n%s.\n\n", usageLine(cmd), capitalize(cmd.summary))
		if cmd.details != "" {
			fmt.Fprintf(fs.Output(), "%s\n\n", strings.TrimSpace(cmd.details))
		}
		fmt.Fprint(fs.Output(), "flags:\n")
		fs.PrintDefaults()
	}
	return fs, runCommand
}

func usageLine(cmd *command) string {
	line := "redq " + cmd.name
	if cmd.argsUsage != "" {
		line += " " + cmd.argsUsage
	} else if len(cmd.args) > 0 {
		line += " " + strings.Join(cmd.args, " ")
	}
	return line + " [flags]"
}

func usageFailure(stderr io.Writer, cmd *command, err error) int {
	fmt.Fprintf(stderr, "redq %s: %s\nusage: %s\nRun 'redq help %s' for details.\n", cmd.name, message(err), usageLine(cmd), cmd.name)
	return 2
}

// printError prints a command's failure as one line.
func printError(stderr io.Writer, cmd *command, err error) {
	fmt.Fprintf(stderr, "redq %s: %s\n", cmd.name, message(err))
}

// message is err's text as one line with the library's "redq: " prefixes
// taken out: the line already starts with "redq <command>: ".
func message(err error) string {
	msg := strings.ReplaceAll(err.Error(), "redq: ", "")
	msg = strings.Join(strings.Fields(strings.ReplaceAll(msg, "\n", " ")), " ")
	return msg
}

func printUsage(w io.Writer) {
	fmt.Fprint(w, "redq runs and operates redq work queues on Redis.\n\nusage: redq <command> [arguments] [flags]\n")
	for _, g := range groups {
		fmt.Fprintf(w, "\n%s:\n", capitalize(g))
		for _, c := range commands {
			if c.group != g {
				continue
			}
			fmt.Fprintf(w, "  %-28s %s\n", strings.TrimSpace(c.name+" "+strings.Join(c.args, " ")), c.summary)
		}
	}
	fmt.Fprint(w, "\n  help [command]               show this list, or a command's flags\n")
	fmt.Fprint(w, "\nRedis: --redis URL (redis://[user:pass@]host:port/db, rediss://... for TLS, or host:port),\n"+
		"else $REDIS_URL. Namespace: --namespace (default \"redq\").\n")
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
