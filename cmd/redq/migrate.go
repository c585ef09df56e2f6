package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redq/redq"
)

const migrateDetails = `
Moves, in the same Redis, each rmq queue's ready list to the back of redq's
ready list of the same name (oldest first), its rejected list to redq's
rejected list, and the unacked lists of dead rmq connections (heartbeat gone)
to the front of ready. Live rmq connections are left alone and listed. rmq
headers become redq headers. Each chunk moves in one atomic script, so an
interrupted run (Ctrl-C, a crash) loses and doubles nothing: run it again to
finish. A second run moves only what rmq programs added since.

Steps: stop the rmq consumers (or keep them running beside redq's), run with
--dry-run and read the counts, run without it, start the redq consumers.
Exit status: 0 done, 1 failed or refused (nothing moved) or interrupted, 2
usage error.`

// migrateCommand: redq migrate-from-rmq --redis URL [--namespace redq]
// [--queues a,b] [--dry-run] [--chunk 1000] [--merge] [--hash-tags auto]
// [--cluster] [--progress 1s]
func migrateCommand(fs *flag.FlagSet) func(context.Context, io.Writer, io.Writer) error {
	rf := addRedisFlags(fs)
	queues := fs.String("queues", "", "comma-separated rmq queues to move (default: every queue in rmq::queues)")
	dryRun := fs.Bool("dry-run", false, "report what would move and change nothing")
	chunk := fs.Int("chunk", redq.DefaultMigrateChunk, fmt.Sprintf("deliveries moved per script call, 1 to %d", redq.MaxMigrateChunk))
	merge := fs.Bool("merge", false, "also move into redq queues that already hold deliveries (rmq's line up behind them)")
	hashTags := fs.String("hash-tags", "auto", "rmq key layout to read: auto (both), on (rmq::queue::{q}::..., rmq's OpenClusterConnection) or off (rmq::queue::[q]::...)")
	cluster := fs.Bool("cluster", false, "--redis names a node of a Redis Cluster")
	every := fs.Duration("progress", time.Second, "how often to print progress on stderr (0: never)")
	return func(ctx context.Context, stdout, stderr io.Writer) error {
		opts := redq.MigrateOptions{Namespace: rf.namespace, DryRun: *dryRun, Merge: *merge, ChunkSize: *chunk}
		if *chunk < 1 || *chunk > redq.MaxMigrateChunk {
			return usagef("--chunk must be 1 to %d, is %d", redq.MaxMigrateChunk, *chunk)
		}
		switch *hashTags {
		case "auto":
			opts.HashTags = redq.RmqHashTagsAuto
		case "on":
			opts.HashTags = redq.RmqHashTagsOn
		case "off":
			opts.HashTags = redq.RmqHashTagsOff
		default:
			return usagef("--hash-tags must be auto, on or off, is %q", *hashTags)
		}
		if *every < 0 {
			return usagef("--progress must not be negative, is %v", *every)
		}
		for _, q := range strings.Split(*queues, ",") {
			if q = strings.TrimSpace(q); q != "" {
				opts.Queues = append(opts.Queues, q)
			}
		}
		if *queues != "" && len(opts.Queues) == 0 {
			return usagef("--queues names no queue")
		}
		client, where, err := migrationClient(rf, *cluster)
		if err != nil {
			return err
		}
		defer func() { _ = client.Close() }() // at exit; the migration reported already
		if err := client.Ping(ctx).Err(); err != nil {
			return fmt.Errorf("connect to Redis at %s: %w", where, err)
		}

		var last time.Time
		if *every > 0 {
			opts.Progress = func(p redq.MigrateProgress) {
				if time.Since(last) < *every {
					return
				}
				last = time.Now()
				fmt.Fprintf(stderr, "redq migrate-from-rmq: moved %d/%d (%.0f%%) at %s/s, queue %s\n", p.Moved, p.Total,
					100*float64(p.Moved)/float64(max(p.Total, 1)), migrateRate(float64(p.Moved)/p.Elapsed.Seconds()), p.Queue)
			}
			last = time.Now()
		}
		report, err := redq.MigrateFromRmq(ctx, client, opts)
		switch {
		case errors.Is(err, redq.ErrorNoRmqData):
			return fmt.Errorf("no rmq data in Redis at %s: %w", where, err)
		case errors.Is(err, redq.ErrorInvalidArgument):
			return usageError{err}
		}
		if report.Queues != nil {
			fmt.Fprint(stdout, report)
		}
		return err
	}
}

// migrationClient connects to the Redis of --redis, a cluster with cluster, and says
// where that is.
func migrationClient(f *redisFlags, cluster bool) (redis.UniversalClient, string, error) {
	if cluster {
		raw, from := f.url, "--redis"
		if raw == "" {
			raw, from = os.Getenv(redisURLEnv), "$"+redisURLEnv
		}
		if raw == "" {
			return nil, "", usagef("--redis is required (or set $%s): redis://host:port?addr=host2:port2 naming nodes of the cluster", redisURLEnv)
		}
		if !strings.Contains(raw, "://") {
			raw = "redis://" + raw
		}
		opts, err := redis.ParseClusterURL(raw)
		if err != nil {
			return nil, "", usagef("invalid %s for a cluster (%v): want redis://host:port?addr=host2:port2", from, err)
		}
		return redis.NewClusterClient(opts), "cluster " + strings.Join(opts.Addrs, ","), nil
	}
	opts, err := f.options()
	if err != nil {
		return nil, "", err
	}
	return redis.NewClient(opts), fmt.Sprintf("%s db %d", opts.Addr, opts.DB), nil
}

// migrateRate formats deliveries per second: 950, 12.3k, 1.05M.
func migrateRate(r float64) string {
	switch {
	case r >= 1e6:
		return fmt.Sprintf("%.2fM", r/1e6)
	case r >= 1e3:
		return fmt.Sprintf("%.1fk", r/1e3)
	}
	return fmt.Sprintf("%.0f", r)
}
