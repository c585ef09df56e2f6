package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"slices"
	"time"

	"github.com/redq/redq"
)

// statsCommand: redq stats --redis URL [--namespace redq] [--json]. It
// reads through an Inspector: it registers no connection and changes
// nothing in Redis.
func statsCommand(fs *flag.FlagSet) func(context.Context, io.Writer, io.Writer) error {
	rf := addRedisFlags(fs)
	asJSON := fs.Bool("json", false, "print the stats as JSON")
	return func(ctx context.Context, stdout, stderr io.Writer) error {
		in, closeIn, err := rf.inspector(ctx)
		if err != nil {
			return err
		}
		defer closeIn()
		stats, err := in.Stats(ctx)
		if err != nil {
			return err
		}
		if *asJSON {
			return writeJSON(stdout, stats)
		}
		if len(stats.QueueStats) == 0 {
			fmt.Fprintf(stderr, "redq: no open queues in namespace %q\n", rf.namespace)
		}
		_, err = io.WriteString(stdout, stats.String())
		return err
	}
}

// cleanCommand: redq clean --redis URL [--namespace redq] [--interval 0]
func cleanCommand(fs *flag.FlagSet) func(context.Context, io.Writer, io.Writer) error {
	rf := addRedisFlags(fs)
	interval := fs.Duration("interval", 0, "clean every interval until interrupted (0: clean once)")
	return func(ctx context.Context, stdout, stderr io.Writer) error {
		if *interval < 0 {
			return usagef("--interval must not be negative, is %v", *interval)
		}
		conn, closeConn, err := rf.open(ctx, cliTag, nil)
		if err != nil {
			return err
		}
		defer closeConn()
		cleaner := redq.NewCleaner(conn)
		if *interval == 0 {
			n, err := cleaner.CleanContext(ctx)
			if err != nil {
				return err
			}
			fmt.Fprintf(stdout, "returned %d deliveries of dead connections and lost leases to ready\n", n)
			return nil
		}

		fmt.Fprintf(stderr, "redq: cleaning namespace %q every %v (Ctrl-C to stop)\n", rf.namespace, *interval)
		ticker := time.NewTicker(*interval)
		defer ticker.Stop()
		var total int64
		for {
			n, err := cleaner.CleanContext(ctx)
			total += n
			switch {
			case ctx.Err() != nil:
			case err != nil:
				// Keep going: Redis may come back, and a cleaner that
				// gives up on the first error is not much of a cleaner.
				fmt.Fprintf(stderr, "%s clean failed: %v\n", time.Now().Format(time.TimeOnly), err)
			case n > 0:
				fmt.Fprintf(stdout, "%s returned %d deliveries of dead connections and lost leases to ready\n", time.Now().Format(time.TimeOnly), n)
			}
			select {
			case <-ctx.Done():
				fmt.Fprintf(stdout, "returned %d deliveries of dead connections and lost leases to ready in total\n", total)
				return nil
			case <-ticker.C:
			}
		}
	}
}

// returnRejectedCommand: redq return-rejected --redis URL --queue Q [--max N]
func returnRejectedCommand(fs *flag.FlagSet) func(context.Context, io.Writer, io.Writer) error {
	rf := addRedisFlags(fs)
	queue := fs.String("queue", "", "queue whose rejected deliveries go back to ready (required)")
	maxN := fs.Int64("max", 0, "move at most this many (0: all)")
	return func(ctx context.Context, stdout, stderr io.Writer) error {
		if *maxN < 0 {
			return usagef("--max must not be negative, is %d", *maxN)
		}
		limit := *maxN
		if limit == 0 {
			limit = math.MaxInt64
		}
		return withExistingQueue(ctx, rf, *queue, func(q redq.Queue) error {
			n, err := q.ReturnRejectedContext(ctx, limit)
			if err != nil {
				return err
			}
			fmt.Fprintf(stdout, "returned %d rejected deliveries of queue %q to ready\n", n, *queue)
			return nil
		})
	}
}

// purgeRejectedCommand: redq purge-rejected --redis URL --queue Q
func purgeRejectedCommand(fs *flag.FlagSet) func(context.Context, io.Writer, io.Writer) error {
	rf := addRedisFlags(fs)
	queue := fs.String("queue", "", "queue whose rejected deliveries are deleted (required)")
	return func(ctx context.Context, stdout, stderr io.Writer) error {
		return withExistingQueue(ctx, rf, *queue, func(q redq.Queue) error {
			n, err := q.PurgeRejectedContext(ctx)
			if err != nil {
				return err
			}
			fmt.Fprintf(stdout, "purged %d rejected deliveries of queue %q\n", n, *queue)
			return nil
		})
	}
}

// withExistingQueue runs f on the named queue. The queue must be open
// already: opening it here would list a mistyped name as a new queue.
func withExistingQueue(ctx context.Context, rf *redisFlags, name string, f func(redq.Queue) error) error {
	if name == "" {
		return usagef("--queue is required")
	}
	conn, closeConn, err := rf.open(ctx, cliTag, nil)
	if err != nil {
		return err
	}
	defer closeConn()
	queues, err := conn.GetOpenQueuesContext(ctx)
	if err != nil {
		return err
	}
	if !slices.Contains(queues, name) {
		return unknownQueue(name, rf.namespace, queues)
	}
	q, err := conn.OpenQueue(name)
	if err != nil {
		return err
	}
	return f(q)
}
