//go:build linux

package soak

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redq/redq"
	"github.com/redq/redq/internal/console"
	"github.com/redq/redq/internal/redistest"
)

// Details is the soak's help text beyond its flags.
const Details = `
The soak runs the library as a production user would and checks its
reliability contract. It starts a private redis-server on a free loopback
port (AOF with appendfsync always; it never touches a Redis on 6379),
publishes -n deliveries whose payloads are sequence numbers (Publish of one,
PublishBytes batches, Put with a delay, a priority or a TTR; some under a
short context), and runs -workers consumer processes (this binary, re-run
as a hidden soak-worker command) that consume with AddConsumer,
AddBatchConsumer and TakeBatch and log every delivery they get and ack.
While it publishes it SIGKILLs consumers, SIGSTOPs them past their heartbeat
TTL while its cleaner declares them dead (then SIGCONT: they must find out,
and go on under a fresh registration or stop by themselves), and restarts Redis after SIGTERM and after SIGKILL. A cleaner
and CollectStats run throughout. Then it drains the queue, stops the
workers, cleans once more, and checks:

  - every payload whose Publish returned nil was acked (an ack under way
    when its process was SIGKILLed counts as "acked at kill, unconfirmed",
    accepted only if nothing of the payload is left in Redis);
  - no delivery id was acked twice, and no payload landed under two ids;
  - every Ack that failed saying it did nothing (not found, connection or
    lease lost, unavailable, refused, stopped) was followed by an ack of
    another take of that delivery: otherwise the error was false;
  - publishes that did nothing (unavailable, refused, not sent) were never
    delivered; those of unknown outcome are reported as landed or absent;
  - nothing is left in Redis but counters, registrations and records with
    a TTL (every remaining key is listed);
  - every SIGSTOPped worker that was declared dead went on by itself under
    a fresh registration (without stopping), and how long after SIGCONT.

It prints a progress line every few seconds and ends with a summary (one
line, here wrapped):

  soak: published=19999 acked=19997 acked_at_kill=2 acked_unknown=0 lost=0
  dup_ids=0 double_landed=0 redelivered=24(zombie 24) false_ack_errors=0
  outcome_unknown=0 nothing_done=1 kills=3 sigstops=2 zombies_resumed=2/2
  (max 9.03ms) restart_zombies=4 redis_sigterm=2 redis_sigkill=2
  workers_started=13 rate=950/s elapsed=23s: PASS

redelivered counts takes beyond the first of a delivery, by what ended the
take before: its process was killed (kill), SIGSTOPped and declared dead
(zombie), declared dead otherwise, mostly because its heartbeat lapsed while
Redis was down (restart), its lease ran out (lease), or its Ack's outcome was
unknown (unknown-ack). The exit status is 1 when any check failed; the
workers' logs are then kept and their paths printed. -seed repeats a run's
fault schedule and publish mix.

With -cluster the soak runs on a private Redis Cluster instead (3 masters
and 3 replicas on free loopback ports, cluster-node-timeout 2s; the soak,
its workers and its cleaner use go-redis's cluster client with its default
options). It publishes round the -queues queues, the first in the slot of
the namespace's global keys (heartbeats, registrations) and the others in
other slots, and each worker consumes them all. Instead of restarting
Redis it SIGKILLs masters (the first time the one holding the global
keys; it waits for a replica to be promoted, relaunches the killed node,
which rejoins as a replica, and waits for the cluster to be healthy) and
migrates the slot of the busiest queue to another master two keys at a
time while it is consumed. The checks are the same, plus one: after each
master SIGKILL and resharding, the consumers of every queue it touched
acked again within -resume-limit (a queue with nothing left to consume
counts). The summary adds queues=, master_kills=, reshards=, and as
median/max: failover= (SIGKILL to a replica promoted), kill_to_acks=
(SIGKILL to acks again), reshard= (the migration) and reshard_to_acks=
(slot moved to acks again).

With -schedules N the soak checks schedules instead: N schedules @every 1s
(CatchUpAll) tick into the soak's queue for -duration (30s) while the
-workers processes run the set's loop (Schedules.Run) and the faults hit
them (SIGKILL, SIGSTOP until declared dead) and Redis (SIGTERM, SIGKILL).
Then it pauses the schedules, waits for every fired tick to reach the
queue, takes them all and checks, per schedule, that each tick from its
first to its last fire was delivered exactly once (no gap, no tick under
two delivery ids, none skipped, Fired matching), and that no schedule
stalled. Summary: schedules= ticks= lost= double= skipped= stalled=
redelivered= and the faults.

CI-sized:  redq soak -n 20000
Full run:  redq soak -n 1000000 -rate 2500 -kills 20 -sigstops 10 -redis-sigterms 10 -redis-sigkills 10
Cluster:   redq soak -cluster -n 10000 -rate 400 -master-kills 1 -reshards 1
Full:      redq soak -cluster -n 200000 -rate 1000 -master-kills 5 -reshards 2
Schedules: redq soak -schedules 100 (CI: -duration 20s); full: redq soak -schedules 1000 -duration 2m -kills 6 -sigstops 4`

// Namespace and queue of the soak's private Redis.
const (
	soakNamespace = "redq"
	soakQueue     = "soak"
)

// soakConfig holds the soak's flags.
type soakConfig struct {
	n, workers, publishers                  int
	rate                                    int
	kills, sigstops, redisTerms, redisKills int
	downMin, downMax, sigstopMax            time.Duration
	hbInterval, hbTTL                       time.Duration
	cleanEvery, progressEvery               time.Duration
	work, drainTimeout                      time.Duration
	seed                                    uint64
	dir                                     string
	keep                                    bool

	// Schedules mode (see schedules.go).
	schedules int
	duration  time.Duration

	// Cluster mode (see cluster.go).
	cluster               bool
	queues                int
	masterKills, reshards int
	resumeLimit           time.Duration
}

// Command declares the flags of redq soak [-n 20000] [-workers 4] [-rate
// 1000] [faults...] on fs and returns the function that runs the soak once
// they are parsed. Bad flags make it return a UsageError.
func Command(fs *flag.FlagSet) func(context.Context, io.Writer, io.Writer) error {
	c := soakFlags(fs)
	return func(ctx context.Context, stdout, stderr io.Writer) error {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		c.modeDefaults(set)
		if err := c.validate(); err != nil {
			return err
		}
		return runSoak(ctx, *c, stdout, stderr)
	}
}

// soakFlags defines the soak's flags on fs and returns the configuration
// they fill in.
func soakFlags(fs *flag.FlagSet) *soakConfig {
	var c soakConfig
	fs.IntVar(&c.n, "n", 20000, "deliveries to publish")
	fs.IntVar(&c.workers, "workers", 4, "consumer processes")
	fs.IntVar(&c.publishers, "publishers", 4, "goroutines that publish")
	fs.IntVar(&c.rate, "rate", 1000, "deliveries published per second (0: as fast as possible); the faults are spread over the publishing")
	fs.IntVar(&c.kills, "kills", 3, "SIGKILLs of consumer processes")
	fs.IntVar(&c.sigstops, "sigstops", 2, "SIGSTOPs of consumer processes past their heartbeat TTL")
	fs.IntVar(&c.redisTerms, "redis-sigterms", 2, "Redis restarts after SIGTERM")
	fs.IntVar(&c.redisKills, "redis-sigkills", 2, "Redis restarts after SIGKILL")
	fs.DurationVar(&c.sigstopMax, "sigstop-max", 4*time.Second, "a SIGSTOP lasts until the worker was declared dead and at least a random time up to this (beyond the client's 3s read timeout, its calls under way are sent again when it resumes)")
	fs.DurationVar(&c.downMin, "down-min", 200*time.Millisecond, "shortest time Redis stays down")
	fs.DurationVar(&c.downMax, "down-max", 2*time.Second, "longest time Redis stays down")
	fs.DurationVar(&c.hbInterval, "hb-interval", 150*time.Millisecond, "heartbeat interval of the consumer processes")
	fs.DurationVar(&c.hbTTL, "hb-ttl", time.Second, "heartbeat TTL of the consumer processes")
	fs.DurationVar(&c.cleanEvery, "clean-every", 500*time.Millisecond, "how often the cleaner runs")
	fs.DurationVar(&c.work, "work", time.Millisecond, "the most time a consumer works on a delivery (random from 0)")
	fs.DurationVar(&c.progressEvery, "progress", 5*time.Second, "how often to print a progress line")
	fs.DurationVar(&c.drainTimeout, "drain-timeout", 2*time.Minute, "how long to wait for the consumers to drain the queue at the end")
	fs.Uint64Var(&c.seed, "seed", 0, "seed of the fault schedule, the publish mix and the work times (0: pick one and print it)")
	fs.StringVar(&c.dir, "dir", "", "directory for the workers' logs (default: a new temporary directory, removed after a run that passed)")
	fs.BoolVar(&c.keep, "keep", false, "keep the logs of a run that passed")
	fs.BoolVar(&c.cluster, "cluster", false, "run on a private Redis Cluster (3 masters, 3 replicas) instead of one redis-server, over -queues queues, with -master-kills and -reshards instead of Redis restarts")
	fs.IntVar(&c.queues, "queues", 3, "with -cluster: queues in different slots, the first in the slot of the namespace's global keys")
	fs.IntVar(&c.masterKills, "master-kills", 2, "with -cluster: SIGKILLs of a master (then relaunched, it rejoins as a replica); the first hits the master of the global keys")
	fs.IntVar(&c.reshards, "reshards", 1, "with -cluster: migrations of a busy queue's slot to another master while it is consumed")
	fs.DurationVar(&c.resumeLimit, "resume-limit", 30*time.Second, "with -cluster: how long after a master SIGKILL or a resharding the consumers of the queues it touched may take to ack again")
	fs.IntVar(&c.schedules, "schedules", 0, "run the schedules mode instead: this many schedules @every 1s, their loops in the -workers processes, for -duration under the faults; every tick must be published exactly once")
	fs.DurationVar(&c.duration, "duration", 30*time.Second, "with -schedules: how long the schedules tick under the faults")
	return &c
}

// modeDefaults drops the faults of the other mode that were not asked for
// on the command line: Redis restarts on a Cluster, master SIGKILLs and
// reshardings on a single redis-server. set holds the flags given.
func (c *soakConfig) modeDefaults(set map[string]bool) {
	drop := func(name string, v *int) {
		if !set[name] {
			*v = 0
		}
	}
	if c.cluster {
		drop("redis-sigterms", &c.redisTerms)
		drop("redis-sigkills", &c.redisKills)
	} else {
		drop("master-kills", &c.masterKills)
		drop("reshards", &c.reshards)
		drop("queues", &c.queues)
		if c.queues == 0 {
			c.queues = 1
		}
	}
}

func (c *soakConfig) validate() error {
	switch {
	case c.n < 1 || c.n > 1<<31:
		return usagef("-n must be from 1 to %d, is %d", 1<<31, c.n)
	case c.workers < 1 || c.workers > 64:
		return usagef("-workers must be from 1 to 64, is %d", c.workers)
	case c.publishers < 1 || c.publishers > 64:
		return usagef("-publishers must be from 1 to 64, is %d", c.publishers)
	case c.rate < 0:
		return usagef("-rate must not be negative, is %d", c.rate)
	case c.kills < 0 || c.sigstops < 0 || c.redisTerms < 0 || c.redisKills < 0:
		return usagef("fault counts must not be negative")
	case c.sigstops > 0 && c.workers < 2:
		return usagef("-sigstops needs at least 2 -workers (one must go on consuming)")
	case c.sigstopMax < 0:
		return usagef("-sigstop-max must not be negative, is %v", c.sigstopMax)
	case c.downMin < 0 || c.downMax < c.downMin:
		return usagef("-down-min must not be negative nor above -down-max (%v, %v)", c.downMin, c.downMax)
	case c.hbInterval < time.Millisecond || c.hbTTL <= c.hbInterval:
		return usagef("-hb-interval must be at least 1ms and -hb-ttl longer (%v, %v)", c.hbInterval, c.hbTTL)
	case c.cleanEvery <= 0 || c.progressEvery <= 0 || c.drainTimeout <= 0:
		return usagef("-clean-every, -progress and -drain-timeout must be positive")
	case c.work < 0:
		return usagef("-work must not be negative, is %v", c.work)
	case c.masterKills < 0 || c.reshards < 0:
		return usagef("fault counts must not be negative")
	case c.cluster && (c.redisTerms > 0 || c.redisKills > 0):
		return usagef("-redis-sigterms and -redis-sigkills restart the single redis-server; with -cluster use -master-kills")
	case !c.cluster && (c.masterKills > 0 || c.reshards > 0):
		return usagef("-master-kills and -reshards need -cluster")
	case !c.cluster && c.queues != 1:
		return usagef("-queues needs -cluster (the soak on one redis-server uses one queue)")
	case c.queues < 1 || c.queues > maxSoakQueues:
		return usagef("-queues must be from 1 to %d, is %d", maxSoakQueues, c.queues)
	case c.resumeLimit <= 0:
		return usagef("-resume-limit must be positive")
	case c.schedules < 0 || c.schedules > maxSoakSchedules:
		return usagef("-schedules must be from 0 to %d, is %d", maxSoakSchedules, c.schedules)
	case c.schedules > 0 && c.cluster:
		return usagef("-schedules runs on one redis-server; it does not go with -cluster")
	case c.schedules > 0 && (c.duration < 5*time.Second || c.duration > 24*time.Hour):
		return usagef("-duration must be from 5s to 24h, is %v", c.duration)
	}
	return nil
}

// errNoRedisServer is returned when redis-server is not on PATH.
var errNoRedisServer = errors.New("redis-server not found in PATH: the soak starts a private one; install Redis (for example apt-get install redis-server)")

// soak is one run.
type soak struct {
	cfg     soakConfig
	out     *console.Console
	dir     string
	exe     string
	srv     *redistest.Server  // the single redis-server, nil with -cluster
	cluster *redistest.Cluster // the cluster with -cluster, else nil
	client  redis.UniversalClient
	conn    redq.Connection
	names   []string     // the queues' names
	queues  []redq.Queue // the soak's handles of them, by index in names
	start   time.Time    // when publishing began

	pub      []pubOutcome // by payload number, written once by the publisher that sent it
	pubQueue []uint8      // by payload number: the index of the queue it was published to
	// pubQueueMu guards pubQueue, which the topology faults read while
	// the publishers write it.
	pubQueueMu sync.RWMutex
	published  atomic.Int64 // payloads whose publish call returned
	redisDown  atomic.Bool
	redisUpAt  atomic.Int64 // unix ns when Redis last came back
	cleaned    atomic.Int64
	abort      context.CancelCauseFunc

	mu          sync.Mutex
	procs       []*soakProc
	stopping    bool
	faults      faultStats
	supervisors sync.WaitGroup
}

func runSoak(ctx context.Context, c soakConfig, stdout, stderr io.Writer) error {
	if _, ok := redistest.Available(); !ok {
		return errNoRedisServer
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find this program to run its workers: %w", err)
	}
	if c.seed == 0 {
		c.seed = uint64(time.Now().UnixNano()%1_000_000_000) + 1
	}
	dir := c.dir
	ownDir := dir == ""
	if ownDir {
		if dir, err = os.MkdirTemp("", "redq-soak-"); err != nil {
			return fmt.Errorf("create log directory: %w", err)
		}
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create log directory: %w", err)
	}
	s := &soak{cfg: c, out: console.New(stderr), dir: dir, exe: exe, pub: make([]pubOutcome, c.n), pubQueue: make([]uint8, c.n),
		names: soakQueueNames(soakNamespace, c.queues, c.cluster)}
	// go-redis logs through a logger of its process; the soak's knows
	// when Redis is down on purpose.
	redis.SetLogger(soakRedisLog{s})
	switch {
	case c.schedules > 0:
		s.out.Logf("soak: seed %d: %d schedules @every 1s for %v, their loops in %d processes; faults: %d SIGKILL, %d SIGSTOP, %d Redis SIGTERM, %d Redis SIGKILL; logs in %s",
			c.seed, c.schedules, c.duration, c.workers, c.kills, c.sigstops, c.redisTerms, c.redisKills, dir)
	case c.cluster:
		s.out.Logf("soak: seed %d: %d deliveries at %s over queues %s, %d consumer processes; faults: %d SIGKILL, %d SIGSTOP, %d master SIGKILL, %d resharding; logs in %s",
			c.seed, c.n, rateString(c.rate), strings.Join(s.names, ", "), c.workers, c.kills, c.sigstops, c.masterKills, c.reshards, dir)
	default:
		s.out.Logf("soak: seed %d: %d deliveries at %s, %d consumer processes; faults: %d SIGKILL, %d SIGSTOP, %d Redis SIGTERM, %d Redis SIGKILL; logs in %s",
			c.seed, c.n, rateString(c.rate), c.workers, c.kills, c.sigstops, c.redisTerms, c.redisKills, dir)
	}

	var servers []*redistest.Server
	if c.cluster {
		cl, err := redistest.StartClusterMain()
		if err != nil {
			return fmt.Errorf("start the cluster: %w", err)
		}
		s.cluster, servers = cl, cl.Nodes
		s.out.Logf("soak: Redis Cluster of %d nodes on %s", len(cl.Nodes), strings.Join(cl.Addrs(), " "))
	} else {
		srv, err := redistest.StartMain(redistest.WithAppendOnly())
		if err != nil {
			return fmt.Errorf("start redis-server: %w", err)
		}
		s.srv, servers = srv, []*redistest.Server{srv}
		s.out.Logf("soak: redis-server on %s (AOF appendfsync always, data in %s)", srv.Addr(), srv.Dir())
	}
	passed, err := s.run(ctx, stdout)
	// Keep Redis's own logs with the workers' when the run needs a look.
	if !passed {
		for i, srv := range servers {
			name := "redis.log"
			if c.cluster {
				name = fmt.Sprintf("redis-node%d-%d.log", i, srv.Port())
			}
			if b, rerr := os.ReadFile(filepath.Join(srv.Dir(), "redis.log")); rerr == nil {
				_ = os.WriteFile(filepath.Join(dir, name), b, 0o644)
			}
		}
	}
	var cerr error
	if c.cluster {
		cerr = s.cluster.Close()
	} else {
		cerr = s.srv.Close()
	}
	if cerr != nil && err == nil {
		err = cerr
	}
	switch {
	case passed && ownDir && !c.keep:
		if rerr := os.RemoveAll(dir); rerr != nil {
			s.out.Logf("soak: remove %s: %v", dir, rerr)
		}
	default:
		s.out.Logf("soak: logs kept in %s", dir)
	}
	if err != nil {
		return err
	}
	if !passed {
		return errors.New("the contract was broken or the run went wrong: see the checks above")
	}
	return nil
}

// run runs the soak on its Redis and reports whether every check passed.
func (s *soak) run(ctx context.Context, stdout io.Writer) (bool, error) {
	c := s.cfg
	if c.cluster {
		// go-redis's default options, as a user would start.
		s.client = redis.NewClusterClient(&redis.ClusterOptions{Addrs: s.cluster.Addrs()})
	} else {
		s.client = redis.NewClient(&redis.Options{Addr: s.srv.Addr()})
	}
	defer func() { _ = s.client.Close() }() // at exit; the run was judged already
	runCtx, abort := context.WithCancelCause(ctx)
	defer abort(nil)
	s.abort = abort

	errChan := make(chan error, 256)
	conn, err := redq.Open(runCtx, "soak", s.client, errChan, redq.WithNamespace(soakNamespace))
	if err != nil {
		return false, fmt.Errorf("open connection: %w", err)
	}
	s.conn = conn
	go s.watchErrors(errChan)
	for _, name := range s.names {
		q, err := conn.OpenQueue(name)
		if err != nil {
			return false, fmt.Errorf("open queue %s: %w", name, err)
		}
		s.queues = append(s.queues, q)
	}
	if c.schedules > 0 {
		return s.runSchedules(runCtx, stdout)
	}

	loopCtx, stopLoops := context.WithCancel(runCtx)
	var loops sync.WaitGroup
	loops.Add(2)
	go func() { defer loops.Done(); s.cleanLoop(loopCtx) }()
	go func() { defer loops.Done(); s.progressLoop(loopCtx) }()
	s.start = time.Now()
	for slot := 0; slot < c.workers; slot++ {
		s.supervisors.Add(1)
		go s.supervise(runCtx)
	}

	var pubs sync.WaitGroup
	var next atomic.Int64
	for i := 0; i < c.publishers; i++ {
		pubs.Add(1)
		go func() {
			defer pubs.Done()
			s.publishLoop(runCtx, i, &next)
		}()
	}
	faultsDone := make(chan error, 1)
	go func() { faultsDone <- s.runFaults(runCtx) }()
	pubs.Wait()
	if runCtx.Err() == nil {
		s.out.Logf("soak %s: published all %d (%s)", s.since(), c.n, s.pubCounts())
	}
	if err := <-faultsDone; err != nil {
		abort(err)
	}
	drained := false
	if runCtx.Err() == nil {
		drained = s.drain(runCtx)
	}
	workEnd := time.Now()
	s.stopWorkers()
	stopLoops()
	loops.Wait()
	if err := context.Cause(runCtx); err != nil {
		<-conn.StopAllConsuming()
		if errors.Is(err, context.Canceled) && ctx.Err() != nil {
			return false, errors.New("interrupted")
		}
		return false, err
	}

	// The workers' heartbeats are gone or expire within their TTL; the
	// last clean hands back whatever a killed worker left.
	time.Sleep(c.hbTTL + 100*time.Millisecond)
	s.finalClean(ctx)
	<-conn.StopAllConsuming()
	keys, leftover, err := scanSoakKeys(ctx, s.client, soakNamespace, s.names)
	if err != nil {
		return false, err
	}
	return s.report(stdout, drained, keys, leftover, workEnd.Sub(s.start))
}

// redisUp notes that Redis is back after a fault.
func (s *soak) redisUp() {
	s.redisUpAt.Store(time.Now().UnixNano())
	s.redisDown.Store(false)
}

// expectingErrors reports whether Redis is down on purpose, or was until
// a moment ago: errors then are the fault's, not news.
func (s *soak) expectingErrors() bool {
	return s.redisDown.Load() || time.Since(time.Unix(0, s.redisUpAt.Load())) < 2*time.Second
}

// soakRedisLog passes go-redis's log lines to the soak's console, except
// while the soak has taken Redis down on purpose, when every dial fails
// and says so.
type soakRedisLog struct{ s *soak }

// Printf logs one line of go-redis.
func (l soakRedisLog) Printf(_ context.Context, format string, v ...any) {
	if !l.s.expectingErrors() {
		l.s.out.Logf("soak: go-redis: "+format, v...)
	}
}

func (s *soak) since() string { return time.Since(s.start).Round(100 * time.Millisecond).String() }

// shortDuration rounds d for people: to 10µs below 10ms, else to 1ms.
func shortDuration(d time.Duration) time.Duration {
	if d < 10*time.Millisecond {
		return d.Round(10 * time.Microsecond)
	}
	return d.Round(time.Millisecond)
}

func rateString(rate int) string {
	if rate == 0 {
		return "full speed"
	}
	return fmt.Sprintf("%d/s", rate)
}

// watchErrors logs the soak connection's background errors, at most one a
// second.
func (s *soak) watchErrors(errs <-chan error) {
	var last time.Time
	for err := range errs {
		if errors.Is(err, redq.ErrorConnectionLost) {
			s.out.Logf("soak %s: the soak's own connection was declared dead: %v", s.since(), err)
			continue
		}
		if time.Since(last) > time.Second && !s.expectingErrors() {
			last = time.Now()
			s.out.Logf("soak %s: background error: %v", s.since(), err)
		}
	}
}

// publishLoop publishes payloads from next, paced to the rate, with a mix
// of the publishing calls, and records each outcome.
func (s *soak) publishLoop(ctx context.Context, i int, next *atomic.Int64) {
	rng := rand.New(rand.NewPCG(s.cfg.seed, uint64(1000+i)))
	n := int64(s.cfg.n)
	for ctx.Err() == nil {
		k := int64(1)
		kind := rng.IntN(100)
		switch {
		case kind < 45: // Publish of one
		case kind < 70: // a small batch, coalesced with others
			k = 2 + rng.Int64N(39)
		case kind < 75: // a large batch, sent on its own
			k = 101 + rng.Int64N(150)
		}
		first := next.Add(k) - k
		if first >= n {
			return
		}
		last := min(first+k, n)
		// Payloads go round the queues; a batch goes whole to the queue of
		// its first.
		qi := int(first % int64(len(s.queues)))
		queue := s.queues[qi]
		if s.cfg.rate > 0 {
			due := s.start.Add(time.Duration(float64(first) / float64(s.cfg.rate) * float64(time.Second)))
			if d := time.Until(due); d > 0 {
				select {
				case <-ctx.Done():
					return
				case <-time.After(d):
				}
			}
		}
		pctx, cancel := context.Background(), context.CancelFunc(func() {})
		if rng.IntN(10) == 0 {
			// A caller with a deadline: during a Redis outage this is where
			// "unknown", "unavailable" and "not sent" come from.
			pctx, cancel = context.WithTimeout(pctx, 300*time.Millisecond)
		}
		var err error
		switch {
		case k > 1:
			bs := make([][]byte, 0, last-first)
			for p := first; p < last; p++ {
				bs = append(bs, []byte(formatPayload(int(p))))
			}
			err = queue.PublishBytesContext(pctx, bs...)
		case kind < 45:
			err = queue.PublishContext(pctx, formatPayload(int(first)))
		default:
			var opts []redq.PublishOption
			switch r := rng.IntN(10); {
			case r < 5:
				opts = append(opts, redq.Priority(1+rng.IntN(redq.MaxPriority)))
			case r < 8:
				opts = append(opts, redq.Delay(time.Duration(50+rng.IntN(1500))*time.Millisecond))
				if r == 7 {
					opts = append(opts, redq.Priority(1+rng.IntN(redq.MaxPriority)))
				}
			default:
				opts = append(opts, redq.TTR(3*time.Second))
			}
			err = queue.Put(pctx, []byte(formatPayload(int(first))), opts...)
		}
		cancel()
		o := classifyPublish(err)
		if o == pubOther {
			s.out.Logf("soak %s: publish of %d..%d: untyped error: %v", s.since(), first, last-1, err)
		}
		s.pubQueueMu.Lock()
		for p := first; p < last; p++ {
			s.pub[p] = o
			s.pubQueue[p] = uint8(qi)
		}
		s.pubQueueMu.Unlock()
		s.published.Add(last - first)
	}
}

// pubCounts renders the publish outcomes so far. Only call it once the
// publishers are done.
func (s *soak) pubCounts() string {
	var counts [pubOther + 1]int
	for _, o := range s.pub {
		counts[o]++
	}
	var parts []string
	for o, n := range counts {
		if n > 0 {
			parts = append(parts, fmt.Sprintf("%v: %d", pubOutcome(o), n))
		}
	}
	return strings.Join(parts, ", ")
}

// cleanLoop runs the cleaner every cleanEvery; it keeps going while Redis
// is down.
func (s *soak) cleanLoop(ctx context.Context) {
	cleaner := redq.NewCleaner(s.conn)
	failing := false
	t := time.NewTicker(s.cfg.cleanEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		n, err := cleaner.CleanContext(cctx)
		cancel()
		s.cleaned.Add(n)
		switch {
		case err != nil && ctx.Err() == nil && !failing && !s.expectingErrors():
			failing = true
			s.out.Logf("soak %s: clean failed: %v", s.since(), err)
		case err == nil:
			failing = false
		}
	}
}

// soakCounts are the counts of the soak's queues, summed.
type soakCounts struct{ ready, delayed, unacked, rejected int64 }

func (c soakCounts) total() int64 { return c.ready + c.delayed + c.unacked + c.rejected }

func (c soakCounts) String() string {
	return fmt.Sprintf("ready %d, delayed %d, unacked %d, rejected %d", c.ready, c.delayed, c.unacked, c.rejected)
}

func countsOf(qs redq.QueueStat) soakCounts {
	return soakCounts{ready: qs.ReadyCount, delayed: qs.DelayedCount, unacked: qs.UnackedCount(), rejected: qs.RejectedCount}
}

// queueCounts reads the counts of every queue of the soak and returns
// their sum and each queue's, by index in s.names.
func (s *soak) queueCounts(ctx context.Context) (soakCounts, []soakCounts, error) {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	st, err := s.conn.CollectStatsContext(cctx, s.names)
	if err != nil {
		return soakCounts{}, nil, err
	}
	var sum soakCounts
	each := make([]soakCounts, len(s.names))
	for i, name := range s.names {
		c := countsOf(st.QueueStats[name])
		each[i] = c
		sum.ready += c.ready
		sum.delayed += c.delayed
		sum.unacked += c.unacked
		sum.rejected += c.rejected
	}
	return sum, each, nil
}

// progressLoop reads the queue's stats every second, as a dashboard
// would, and prints a progress line every -progress.
func (s *soak) progressLoop(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	lastPrint := time.Now()
	var counts string
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if qs, _, err := s.queueCounts(ctx); err == nil {
			counts = qs.String()
		} else if s.expectingErrors() {
			counts = "Redis down"
		} else {
			counts = "stats: " + err.Error()
		}
		if time.Since(lastPrint) < s.cfg.progressEvery {
			continue
		}
		lastPrint = time.Now()
		live, started := s.workerCounts()
		s.mu.Lock()
		done, total := s.faults.done(), s.cfg.kills+s.cfg.sigstops+s.cfg.redisTerms+s.cfg.redisKills+s.cfg.masterKills+s.cfg.reshards
		s.mu.Unlock()
		pub := s.published.Load()
		s.out.Logf("soak %s: published %d/%d (%.0f/s); %s; %d workers live, %d started; faults %d/%d",
			s.since(), pub, s.cfg.n, float64(pub)/time.Since(s.start).Seconds(), counts, live, started, done, total)
	}
}

// drain waits until the queue holds nothing: every delivery was acked.
func (s *soak) drain(ctx context.Context) bool {
	deadline := time.Now().Add(s.cfg.drainTimeout)
	zeros := 0
	var last soakCounts
	for ctx.Err() == nil {
		qs, _, err := s.queueCounts(ctx)
		if err == nil {
			last = qs
			if qs.total() == 0 {
				// Twice in a row: the counts are read in two steps.
				if zeros++; zeros >= 2 {
					s.out.Logf("soak %s: drained", s.since())
					return true
				}
			} else {
				zeros = 0
			}
		}
		if time.Now().After(deadline) {
			s.out.Logf("soak %s: not drained after %v: %v", s.since(), s.cfg.drainTimeout, last)
			return false
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
	return false
}

// finalClean runs the cleaner until a clean succeeds (a few tries).
func (s *soak) finalClean(ctx context.Context) {
	cleaner := redq.NewCleaner(s.conn)
	for try := 0; try < 5; try++ {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		n, err := cleaner.CleanContext(cctx)
		cancel()
		if err == nil {
			if n > 0 {
				s.out.Logf("soak: the final clean returned %d deliveries to ready", n)
			}
			return
		}
		s.out.Logf("soak: final clean: %v", err)
		time.Sleep(500 * time.Millisecond)
	}
}

// report reads the logs, judges the run, prints the checks and the
// summary, and reports whether every check passed.
func (s *soak) report(stdout io.Writer, drained bool, keys []soakKey, leftover map[uint32]int, workTime time.Duration) (bool, error) {
	checker := newSoakChecker(s.pub)
	s.mu.Lock()
	procs := append([]*soakProc(nil), s.procs...)
	faults := s.faults
	s.mu.Unlock()
	infos := make([]soakLogInfo, len(procs))
	var logs []string
	for i, p := range procs {
		info, err := checker.readLogFile(p.log, p.fate())
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return false, err
		}
		infos[i] = info
		logs = append(logs, p.log)
	}
	tally, checks := checker.verdict(leftover)
	zombie, zs := zombieCheck(procs, infos)
	checks = append(checks, zombie, workersCheck(procs, infos), keysCheck(keys))
	if s.cfg.cluster {
		checks = append(checks, topologyCheck(faults.topology, s.cfg.resumeLimit))
	}
	if !drained {
		checks = append(checks, soakCheck{name: "the consumers drained the queue", detail: "they did not within -drain-timeout"})
	}

	passed := true
	fmt.Fprintf(stdout, "soak: the cleaner returned %d deliveries of dead connections and lost leases to ready\n", s.cleaned.Load())
	fmt.Fprintln(stdout, "soak: checks")
	for _, ck := range checks {
		mark := "ok  "
		if !ck.ok {
			mark, passed = "FAIL", false
		}
		fmt.Fprintf(stdout, "  %s %s: %s\n", mark, ck.name, ck.detail)
		if !ck.ok || ck.always {
			for _, e := range ck.examples {
				fmt.Fprintf(stdout, "         %s\n", e)
			}
		}
	}
	if suspects := checker.suspects(); len(suspects) > 0 {
		fmt.Fprintln(stdout, "soak: what the logs say about the payloads above")
		for _, line := range evidence(logs, suspects, 60) {
			fmt.Fprintf(stdout, "         %s\n", line)
		}
	}
	verdict := "PASS"
	if !passed {
		verdict = "FAIL"
	}
	rate := float64(tally.acked+tally.ackedAtKill+tally.ackedUnknown) / workTime.Seconds()
	zombies := fmt.Sprintf("%d/%d", zs.resumed, zs.sigstopped)
	if zs.resumed > 0 {
		zombies += fmt.Sprintf(" (max %v)", shortDuration(zs.maxLatency))
	}
	line := fmt.Sprintf("soak: published=%d acked=%d", tally.published, tally.acked)
	if tally.ackedAtKill+tally.ackedUnknown > 0 {
		line += fmt.Sprintf(" acked_at_kill=%d acked_unknown=%d", tally.ackedAtKill, tally.ackedUnknown)
	}
	line += fmt.Sprintf(" lost=%d dup_ids=%d double_landed=%d redelivered=%d", tally.lost, tally.dupIDs, tally.doubleLanded, tally.redelivered)
	if causes := causesString(tally.causes); causes != "" {
		line += "(" + causes + ")"
	}
	line += fmt.Sprintf(" false_ack_errors=%d outcome_unknown=%d nothing_done=%d", tally.falseAckErrors, tally.outcomeUnknown, tally.nothingDone)
	line += fmt.Sprintf(" kills=%d sigstops=%d zombies_resumed=%s restart_zombies=%d redis_sigterm=%d redis_sigkill=%d",
		faults.kills, faults.sigstops, zombies, zs.restartZombies, faults.redisTerms, faults.redisKills)
	if s.cfg.cluster {
		line += fmt.Sprintf(" queues=%d master_kills=%d reshards=%d %s", len(s.names), faults.masterKills, faults.reshards, topologyFigures(faults.topology))
	}
	line += fmt.Sprintf(" workers_started=%d rate=%.0f/s elapsed=%s: %s", len(procs), rate, time.Since(s.start).Round(time.Second), verdict)
	fmt.Fprintln(stdout, line)
	return passed, nil
}

// zombieStats is what the SIGSTOPs showed.
type zombieStats struct {
	sigstopped, resumed int
	maxLatency          time.Duration
	restartZombies      int // workers declared dead without a SIGSTOP (Redis was away) that went on under a fresh name
}

// zombieCheck judges the SIGSTOPped workers: each was declared dead and
// must have gone on under a fresh registration by itself after SIGCONT
// (its log has a lost line after SIGCONT), without stopping.
func zombieCheck(procs []*soakProc, infos []soakLogInfo) (soakCheck, zombieStats) {
	var zs zombieStats
	var bad, latencies exampleSet
	for i, p := range procs {
		info := infos[i]
		if !p.sigstopped {
			if len(info.lost) > 0 {
				zs.restartZombies++
			}
			continue
		}
		zs.sigstopped++
		var resumedAt time.Time
		for _, at := range info.lost {
			if !at.Before(p.contAt) {
				resumedAt = at
				break
			}
		}
		switch {
		case !p.declaredDead:
			bad.add("%s was SIGSTOPped but never declared dead", p.fate().name)
		case p.forced:
			bad.add("%s did not go on under a fresh registration within %v after SIGCONT (SIGKILLed)", p.fate().name, zombieStopLimit)
		case resumedAt.IsZero():
			bad.add("%s exited with status %d without going on under a fresh registration (log says stopped %q)", p.fate().name, p.exitCode, info.stopped)
		default:
			zs.resumed++
			d := resumedAt.Sub(p.contAt)
			zs.maxLatency = max(zs.maxLatency, d)
			latencies.add("%s went on under a fresh registration %v after SIGCONT", p.fate().name, shortDuration(d))
		}
	}
	ck := soakCheck{
		name:   "every SIGSTOPped worker declared dead went on under a fresh registration",
		always: true,
		ok:     bad.count == 0,
		detail: fmt.Sprintf("%d of %d, the slowest %v after SIGCONT", zs.resumed, zs.sigstopped, shortDuration(zs.maxLatency)),
	}
	ck.examples = append(bad.examples, latencies.examples...)
	return ck, zs
}

// workersCheck judges how the worker processes ended.
func workersCheck(procs []*soakProc, infos []soakLogInfo) soakCheck {
	var bad exampleSet
	ends := map[string]int{}
	for i, p := range procs {
		switch {
		case p.killed:
			ends["killed"]++
		case p.exitCode == workerExitAsked:
			ends["asked to stop"]++
		case p.asked && p.signal == syscall.SIGTERM && infos[i].conn == "":
			// SIGTERM came before it had set up its handler (it was
			// just starting): it did nothing yet
			ends["asked to stop while starting"]++
		case p.exitCode == workerExitLost:
			ends["declared dead, stopped by itself"]++
		case p.exitCode == workerExitHBErrors:
			ends["stopped after failed heartbeats"]++
		case p.exitCode == workerExitGaveUp:
			ends["stopped after an Ack that left its delivery held"]++
		case p.exitCode == workerExitFailed && infos[i].conn == "":
			ends["could not start"]++
		default:
			bad.add("%s exited with status %d (log says stopped %q): %s", p.fate().name, p.exitCode, infos[i].stopped, p.stderrTail())
		}
	}
	var parts []string
	for k, n := range ends {
		parts = append(parts, fmt.Sprintf("%s %d", k, n))
	}
	sort.Strings(parts)
	return soakCheck{
		name:     "every worker process ended as a worker may",
		ok:       bad.count == 0,
		detail:   fmt.Sprintf("%d processes: %s", len(procs), strings.Join(parts, ", ")),
		examples: bad.examples,
	}
}
