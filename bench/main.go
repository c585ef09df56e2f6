// Command bench measures redq against asynq, a hand-written Redis Streams
// loop and the classic list queue (LPUSH / RPOPLPUSH / LREM) on the same
// Redis, workload by workload, and redq's round queue against the design it
// replaces (the "sorted-set round", see zsetround.go).
//
// Usage:
//
//	cd bench && go run . [-redis URL] [-n 100000] [-reps 5] [-only e2e,idle] [-systems redq,asynq] [-out results]
//
// Without -redis it starts a private redis-server (persistence off) on a
// free loopback port and stops it at the end. With -redis it uses that
// server's database only if it holds no keys, and flushes it between runs.
//
// Each workload runs for every system in turn, repetition by repetition
// (redq, asynq, streams, list, redq, …), so drift on a noisy machine hits
// all of them alike. The table goes to standard output; results.json,
// results.md and chart.svg/chart.png go to -out. Every run checks that each
// delivery was consumed exactly once; the exit status is 1 if any run
// failed.
package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/schollz/progressbar/v3"

	"github.com/redq/redq/internal/redistest"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// config is the parsed command line.
type config struct {
	redisURL    string
	n           int
	reps        int
	only        []string
	systems     []string
	out         string
	idleSamples int
	steadyRate  int
	runTimeout  time.Duration
	list        bool
	quiet       bool
	cpuProfile  string
	roundRate   int
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var c config
	var only, systems string
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.redisURL, "redis", "", "Redis URL to measure on (its database must be empty); default: start a private redis-server")
	fs.IntVar(&c.n, "n", 100_000, "base workload size; every workload scales with it (1M queued = 10n)")
	fs.IntVar(&c.reps, "reps", 5, "repetitions of every workload and system")
	fs.StringVar(&only, "only", "", "comma-separated workload name prefixes to run (e.g. e2e,idle); default all")
	fs.StringVar(&systems, "systems", "", "comma-separated systems to run (redq,asynq,streams,list,poll-timers); default all")
	fs.StringVar(&c.out, "out", "results", "directory for results.json, results.md and chart.svg/.png")
	fs.IntVar(&c.idleSamples, "idle-samples", 200, "deliveries per idle pickup run")
	fs.IntVar(&c.steadyRate, "rate", 5000, "offered deliveries per second in e2e/steady")
	fs.DurationVar(&c.runTimeout, "run-timeout", 5*time.Minute, "limit for one run of one workload on one system")
	fs.BoolVar(&c.list, "list", false, "list the workloads and exit")
	fs.BoolVar(&c.quiet, "quiet", false, "no progress bar")
	fs.StringVar(&c.cpuProfile, "cpuprofile", "", "write a CPU profile of the bench process (all systems, all runs) to this file")
	fs.IntVar(&c.roundRate, "round-rate", 4000, "hand-outs per second the round steady run asks for (its period is its items / this, at least 1s)")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	switch {
	case c.n < 100:
		return c, fmt.Errorf("-n %d: must be at least 100", c.n)
	case c.reps < 1:
		return c, fmt.Errorf("-reps %d: must be at least 1", c.reps)
	case c.idleSamples < 1:
		return c, fmt.Errorf("-idle-samples %d: must be at least 1", c.idleSamples)
	case c.steadyRate < 1:
		return c, fmt.Errorf("-rate %d: must be positive", c.steadyRate)
	case c.roundRate < 1:
		return c, fmt.Errorf("-round-rate %d: must be positive", c.roundRate)
	}
	c.only = splitList(only)
	c.systems = splitList(systems)
	return c, nil
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// allSystems returns every system in column order; redq comes first.
func allSystems() []system {
	return []system{
		newRedq(time.Second),
		newRedq(30 * time.Second),
		newAsynq(0),
		newAsynq(10 * time.Millisecond),
		newStreams(),
		newList(),
		newZsetRound(),
		newPollTimers(),
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(stderr, "bench:", err)
		return 2
	}
	all := append(workloads(sizes{cfg.n}, cfg.idleSamples, cfg.steadyRate), roundWorkloads(sizes{cfg.n}, cfg.roundRate)...)
	chosen := selectWorkloads(all, cfg.only)
	systems := selectSystems(allSystems(), cfg.systems)
	if cfg.list {
		for _, w := range all {
			fmt.Fprintf(stdout, "%-26s %s\n", w.name, w.about)
		}
		return 0
	}
	if len(chosen) == 0 || len(systems) == 0 {
		fmt.Fprintln(stderr, "bench: -only or -systems selects nothing (see -list)")
		return 2
	}

	e, m, cleanup, err := connect(ctx, cfg)
	if err != nil {
		fmt.Fprintln(stderr, "bench:", err)
		return 1
	}
	defer cleanup()
	m.Command = "cd bench && go run . " + strings.Join(args, " ")
	m.N, m.Reps, m.PayloadSize = cfg.n, cfg.reps, e.payloadSize

	rep := &report{Machine: m}
	for _, s := range systems {
		rep.Systems = append(rep.Systems, s.Name())
	}
	stopProfile, err := startProfile(cfg.cpuProfile)
	if err != nil {
		fmt.Fprintln(stderr, "bench:", err)
		return 1
	}
	failed := measure(ctx, cfg, e, chosen, systems, rep, stderr)
	if err := stopProfile(); err != nil {
		fmt.Fprintln(stderr, "bench:", err)
		return 1
	}

	fmt.Fprintln(stdout)
	for _, w := range chosen {
		fmt.Fprintf(stdout, "%-26s %s\n", w.name, w.about)
	}
	fmt.Fprintln(stdout)
	printTable(stdout, rep)
	if err := writeOutputs(cfg.out, rep); err != nil {
		fmt.Fprintln(stderr, "bench:", err)
		return 1
	}
	fmt.Fprintf(stdout, "\nresults: %s/results.json, %s/results.md, %s/chart.svg\n", cfg.out, cfg.out, cfg.out)
	if failed > 0 {
		fmt.Fprintf(stderr, "bench: %d runs failed (see the table)\n", failed)
		return 1
	}
	if ctx.Err() != nil {
		fmt.Fprintln(stderr, "bench: interrupted")
		return 1
	}
	return 0
}

// measure runs every chosen workload, repetition by repetition, each
// system in turn, and appends the samples to rep. It returns how many runs
// failed.
func measure(ctx context.Context, cfg config, e *env, chosen []workload, systems []system, rep *report, stderr io.Writer) int {
	total := 0
	for _, w := range chosen {
		for _, s := range systems {
			if w.takesPart(s.Name()) {
				total += cfg.reps
			}
		}
	}
	bar := progressbar.NewOptions(total,
		progressbar.OptionSetWriter(stderr),
		progressbar.OptionSetVisibility(!cfg.quiet),
		progressbar.OptionSetWidth(30),
		progressbar.OptionShowCount(),
		progressbar.OptionSetPredictTime(true),
		progressbar.OptionThrottle(200*time.Millisecond),
		progressbar.OptionClearOnFinish(),
	)
	defer func() { _ = bar.Close() }() // the progress bar on the terminal

	failed := 0
	for _, w := range chosen {
		for r := 1; r <= cfg.reps; r++ {
			for _, s := range systems {
				if !w.takesPart(s.Name()) || ctx.Err() != nil {
					continue
				}
				bar.Describe(fmt.Sprintf("%-22s %-18s rep %d/%d", w.name, s.Name(), r, cfg.reps))
				values, err := runOne(ctx, cfg.runTimeout, e, w, s)
				_ = bar.Add(1)
				if errors.Is(err, errNotMeasured) {
					continue
				}
				for i, m := range w.metrics {
					smp := sample{Workload: w.name, Metric: m.name, Unit: m.unit, Better: m.better, System: s.Name(), Rep: r}
					switch {
					case err != nil:
						smp.Error = err.Error()
					case i < len(values):
						smp.Value = values[i]
					default:
						smp.Error = "no value"
					}
					rep.Samples = append(rep.Samples, smp)
				}
				if err != nil {
					failed++
					_ = bar.Clear()
					fmt.Fprintf(stderr, "bench: %s, %s, rep %d: %v\n", w.name, s.Name(), r, err)
				}
			}
		}
	}
	return failed
}

// runOne runs w for s once, with a time limit, and flushes the database
// afterwards (it was empty when the bench started, so everything in it is
// the bench's own).
func runOne(ctx context.Context, limit time.Duration, e *env, w workload, s system) ([]float64, error) {
	rctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	values, err := w.run(rctx, e, s)
	fctx, fcancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer fcancel()
	if ferr := e.admin.FlushDB(fctx).Err(); ferr != nil && err == nil {
		err = fmt.Errorf("flush after the run: %w", ferr)
	}
	return values, err
}

func selectWorkloads(all []workload, only []string) []workload {
	if len(only) == 0 {
		return all
	}
	var out []workload
	for _, w := range all {
		for _, p := range only {
			if strings.HasPrefix(w.name, p) {
				out = append(out, w)
				break
			}
		}
	}
	return out
}

// selectSystems keeps the systems whose name starts with one of names
// ("asynq" keeps both asynq variants).
func selectSystems(all []system, names []string) []system {
	if len(names) == 0 {
		return all
	}
	var out []system
	for _, s := range all {
		for _, n := range names {
			if strings.HasPrefix(s.Name(), n) {
				out = append(out, s)
				break
			}
		}
	}
	return out
}

// connect opens the Redis under test: the one -redis names (refusing a
// non-empty database) or a private redis-server. cleanup closes the client
// and stops a private server.
func connect(ctx context.Context, cfg config) (*env, machine, func(), error) {
	m := machine{
		Date: time.Now().UTC(), CPUs: runtime.NumCPU(), CPUModel: cpuModel(),
		OS: runtime.GOOS, Arch: runtime.GOARCH, GoVersion: runtime.Version(),
	}
	var opts *redis.Options
	stopServer := func() {}
	if cfg.redisURL != "" {
		o, err := redis.ParseURL(cfg.redisURL)
		if err != nil {
			return nil, m, nil, fmt.Errorf("-redis %q: %w", cfg.redisURL, err)
		}
		opts = o
	} else {
		srv, err := redistest.StartMain()
		if err != nil {
			return nil, m, nil, fmt.Errorf("start a private redis-server (or pass -redis URL): %w", err)
		}
		opts = &redis.Options{Addr: srv.Addr()}
		m.PrivateRedis = true
		stopServer = func() { _ = srv.Close() }
	}
	opts.PoolSize = max(opts.PoolSize, 64)
	admin := redis.NewClient(opts)
	cleanup := func() { _ = admin.Close(); stopServer() }

	size, err := admin.DBSize(ctx).Result()
	if err != nil {
		cleanup()
		return nil, m, nil, fmt.Errorf("DBSIZE on %s: %w", opts.Addr, err)
	}
	if size != 0 {
		cleanup()
		return nil, m, nil, fmt.Errorf("database %d on %s holds %d keys: the bench flushes its database between runs and refuses one that is not empty", opts.DB, opts.Addr, size)
	}
	info, err := admin.InfoMap(ctx, "server").Result()
	if err != nil {
		cleanup()
		return nil, m, nil, fmt.Errorf("INFO server on %s: %w", opts.Addr, err)
	}
	m.RedisVersion = info["Server"]["redis_version"]
	m.RedisAddr = opts.Addr
	return &env{opts: opts, admin: admin, payloadSize: 100}, m, cleanup, nil
}

// startProfile starts a CPU profile into path ("" for none) and returns
// the function that stops it and closes the file.
func startProfile(path string) (stop func() error, err error) {
	if path == "" {
		return func() error { return nil }, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("-cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close() // the profiler's error is the one to report
		return nil, fmt.Errorf("-cpuprofile: %w", err)
	}
	return func() error {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			return fmt.Errorf("-cpuprofile: %w", err)
		}
		return nil
	}, nil
}

// cpuModel returns the CPU model name from /proc/cpuinfo, or "".
func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	defer func() { _ = f.Close() }() // read only: closing loses nothing
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// writeOutputs writes results.json, results.md and the chart into dir.
func writeOutputs(dir string, rep *report) error {
	if err := writeJSON(dir, rep); err != nil {
		return err
	}
	var md bytes.Buffer
	printMarkdown(&md, rep)
	if err := os.WriteFile(dir+"/results.md", md.Bytes(), 0o644); err != nil {
		return fmt.Errorf("write results.md: %w", err)
	}
	if err := writeChart(dir, rep); err != nil {
		return fmt.Errorf("write chart: %w", err)
	}
	return nil
}
