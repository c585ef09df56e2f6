package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/redq/redq"
)

// The commands that act on one delivery, keyed item or queue, through the
// Inspector. Each acts once, atomically in Redis, and says what it did; a
// delivery that moved meanwhile (taken, acked, deleted) is an error that
// changed nothing.

// purgeStates are the states purge empties.
var purgeStates = []redq.DeliveryState{redq.StateReady, redq.StateDelayed, redq.StateRejected}

// actionCommand declares a command that takes QUEUE and one more argument
// (a delivery id or a key) and calls act with them.
func actionCommand(act func(ctx context.Context, in *redq.Inspector, queue, arg string) error, subject func(queue, arg string) string, done string) func(fs *flag.FlagSet) func(context.Context, []string, io.Writer, io.Writer) error {
	return func(fs *flag.FlagSet) func(context.Context, []string, io.Writer, io.Writer) error {
		rf := addRedisFlags(fs)
		return func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
			in, closeIn, err := rf.inspector(ctx)
			if err != nil {
				return err
			}
			defer closeIn()
			if err := act(ctx, in, args[0], args[1]); err != nil {
				return queueError(ctx, in, err, args[0], args[1], subject(args[0], args[1]))
			}
			fmt.Fprintf(stdout, done+"\n", args[1], args[0])
			return nil
		}
	}
}

var (
	retryCommand = actionCommand(func(ctx context.Context, in *redq.Inspector, queue, id string) error {
		return in.Retry(ctx, queue, id)
	}, deliverySubject, "delivery %s of queue %q is ready now")
	deleteCommand = actionCommand(func(ctx context.Context, in *redq.Inspector, queue, id string) error {
		return in.Delete(ctx, queue, id)
	}, deliverySubject, "deleted delivery %s of queue %q")
	runNowCommand = actionCommand(func(ctx context.Context, in *redq.Inspector, queue, key string) error {
		return in.RunNow(ctx, queue, key)
	}, keySubject, "keyed item %q of queue %q is due now")
	cancelCommand = actionCommand(func(ctx context.Context, in *redq.Inspector, queue, key string) error {
		return in.Cancel(ctx, queue, key)
	}, keySubject, "cancelled keyed item %q of queue %q")
)

func keySubject(queue, key string) string {
	return fmt.Sprintf("keyed item %q of queue %q", key, queue)
}

// queueActionCommand declares a command that takes QUEUE and calls act.
func queueActionCommand(act func(ctx context.Context, in *redq.Inspector, queue string) error, done string) func(fs *flag.FlagSet) func(context.Context, []string, io.Writer, io.Writer) error {
	return func(fs *flag.FlagSet) func(context.Context, []string, io.Writer, io.Writer) error {
		rf := addRedisFlags(fs)
		return func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
			in, closeIn, err := rf.inspector(ctx)
			if err != nil {
				return err
			}
			defer closeIn()
			if err := act(ctx, in, args[0]); err != nil {
				return queueError(ctx, in, err, args[0], args[0], queueSubject(args[0]))
			}
			fmt.Fprintf(stdout, done+"\n", args[0])
			return nil
		}
	}
}

var (
	pauseCommand = queueActionCommand(func(ctx context.Context, in *redq.Inspector, queue string) error {
		return in.Pause(ctx, queue)
	}, "paused queue %q: no connection fetches from it until redq resume (publishes and acks go on)")
	resumeCommand = queueActionCommand(func(ctx context.Context, in *redq.Inspector, queue string) error {
		return in.Resume(ctx, queue)
	}, "resumed queue %q")
)

// purgeCommand: redq purge QUEUE --state ready|delayed|rejected --yes
func purgeCommand(fs *flag.FlagSet) func(context.Context, []string, io.Writer, io.Writer) error {
	rf := addRedisFlags(fs)
	state := fs.String("state", "", "state to empty (required): "+statesList(purgeStates))
	yes := fs.Bool("yes", false, "really delete (purge asks nothing: without --yes it only says how many it would delete)")
	return func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
		queue := args[0]
		if *state == "" {
			return usagef("--state is required: one of %s", statesList(purgeStates))
		}
		st, err := parseState(*state, purgeStates)
		if err != nil {
			return err
		}
		in, closeIn, err := rf.inspector(ctx)
		if err != nil {
			return err
		}
		defer closeIn()
		if !*yes {
			q, err := in.Queue(ctx, queue)
			if err != nil {
				return queueError(ctx, in, err, queue, queue, queueSubject(queue))
			}
			n := map[redq.DeliveryState]int64{redq.StateReady: q.Ready, redq.StateDelayed: q.Delayed, redq.StateRejected: q.Rejected}[st]
			return usagef("refusing to purge without --yes: it would delete the %d %s deliveries of queue %q", n, st, queue)
		}
		n, err := in.Purge(ctx, queue, st)
		if err != nil {
			return queueError(ctx, in, err, queue, queue, queueSubject(queue))
		}
		fmt.Fprintf(stdout, "purged %d %s deliveries of queue %q\n", n, st, queue)
		return nil
	}
}
