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
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redq/redq"
)

// WorkerEnv is set in the environment of the soak's worker processes,
// so that a test binary that runs the soak in-process (and is re-executed
// as its workers) knows to run the worker instead of the tests.
const WorkerEnv = "REDQ_SOAK_WORKER"

// workerConfig holds the flags of redq soak-worker.
type workerConfig struct {
	addr           string
	cluster        bool
	namespace      string
	queue          string
	log            string
	tag            string
	hbInterval     time.Duration
	hbTTL          time.Duration
	consumers      int
	batchConsumers int
	takers         int
	prefetch       int64
	work           time.Duration
	seed           uint64
	schedules      string
}

// WorkerCommand declares the flags of redq soak-worker, one consumer
// process of a soak (see soak.go), on fs and returns the function that runs
// it. The command is not listed by "redq help": the soak starts it. It ends
// with an ExitError whose code tells the soak why it stopped.
func WorkerCommand(fs *flag.FlagSet) func(context.Context, io.Writer, io.Writer) error {
	var c workerConfig
	fs.StringVar(&c.addr, "addr", "", "Redis address, host:port (required); with -cluster, the nodes' addresses separated by commas")
	fs.BoolVar(&c.cluster, "cluster", false, "Redis is a cluster: use go-redis's cluster client with its default options")
	fs.StringVar(&c.namespace, "namespace", redq.DefaultNamespace, "namespace (key prefix) of the queue")
	fs.StringVar(&c.queue, "queue", "soak", "queues to consume, separated by commas; the consumers, batch consumers and takers are per queue")
	fs.StringVar(&c.log, "log", "", "file to append one line per event to (required)")
	fs.StringVar(&c.tag, "tag", "soak-worker", "connection tag")
	fs.DurationVar(&c.hbInterval, "hb-interval", 150*time.Millisecond, "heartbeat interval")
	fs.DurationVar(&c.hbTTL, "hb-ttl", time.Second, "heartbeat TTL")
	fs.IntVar(&c.consumers, "consumers", 2, "consumers (AddConsumer)")
	fs.IntVar(&c.batchConsumers, "batch-consumers", 1, "batch consumers (AddBatchConsumer)")
	fs.IntVar(&c.takers, "takers", 1, "goroutines that Take")
	fs.Int64Var(&c.prefetch, "prefetch", 20, "prefetch limit")
	fs.DurationVar(&c.work, "work", time.Millisecond, "the most time spent working on a delivery (random from 0)")
	fs.Uint64Var(&c.seed, "seed", 1, "seed of the work times and Take sizes")
	fs.StringVar(&c.schedules, "schedules", "", "run the loop of this schedule set instead of consuming (the soak's schedules mode)")
	return func(ctx context.Context, stdout, stderr io.Writer) error {
		if c.addr == "" || c.log == "" {
			return usagef("--addr and --log are required")
		}
		return runSoakWorker(ctx, c)
	}
}

// eventLog appends lines to a worker's log, each with one write call, so
// that a SIGKILL never leaves half a line (see log.go).
type eventLog struct {
	mu     sync.Mutex
	f      *os.File
	closed bool
}

// close closes the log: the worker is done, and what goroutines of the
// connection still report (a background error) is dropped.
func (l *eventLog) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	_ = l.f.Close()
}

func (l *eventLog) write(line string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	if _, err := l.f.WriteString(line); err != nil {
		// The log is the soak's evidence: without it the run proves nothing.
		fmt.Fprintf(os.Stderr, "redq soak-worker: write log: %v\n", err)
		os.Exit(workerExitFailed)
	}
}

// take logs an event of one take: kind, id, payload, more, attempt.
func (l *eventLog) take(kind string, d redq.Message, more string) {
	l.write(kind + " " + d.ID() + " " + d.Payload() + " " + more + strconv.Itoa(d.Attempts()) + "\n")
}

func (l *eventLog) event(kind string, fields ...string) {
	line := kind
	for _, f := range fields {
		line += " " + f
	}
	l.write(line + "\n")
}

func nowNano() string { return strconv.FormatInt(time.Now().UnixNano(), 10) }

// soakWorker is the state of one worker process.
type soakWorker struct {
	c      workerConfig
	log    *eventLog
	giveUp chan struct{} // closed when an Ack left a delivery held
	gaveUp sync.Once
}

func runSoakWorker(ctx context.Context, c workerConfig) error {
	f, err := os.OpenFile(c.log, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return ExitError{workerExitFailed, fmt.Errorf("open log: %w", err)}
	}
	w := &soakWorker{c: c, log: &eventLog{f: f}, giveUp: make(chan struct{})}
	defer w.log.close()

	var client redis.UniversalClient
	if c.cluster {
		client = redis.NewClusterClient(&redis.ClusterOptions{Addrs: strings.Split(c.addr, ",")})
	} else {
		client = redis.NewClient(&redis.Options{Addr: c.addr})
	}
	defer func() { _ = client.Close() }() // at exit; the worker reported its work already
	errs := make(chan error, 1024)
	var conn redq.Connection
	// Redis may be down for a moment (the soak restarts it): keep trying.
	err = retryFor(ctx, 30*time.Second, func() error {
		var err error
		conn, err = redq.Open(ctx, c.tag, client, errs, redq.WithNamespace(c.namespace), redq.WithHeartbeat(c.hbInterval, c.hbTTL))
		return err
	})
	if err != nil {
		return ExitError{workerExitFailed, err}
	}
	w.log.event(lineStart, strconv.Itoa(os.Getpid()), connName(conn), nowNano())
	go w.watchErrors(errs)
	if c.schedules != "" {
		return w.runScheduleLoop(ctx, conn, c.schedules)
	}

	names := strings.Split(c.queue, ",")
	var takeQueues []redq.Queue
	for qi, name := range names {
		var tq redq.Queue
		tq, err = w.startQueue(ctx, conn, name, uint64(qi)*1000)
		if err != nil {
			break
		}
		takeQueues = append(takeQueues, tq)
	}
	if err != nil {
		return w.setupFailed(ctx, conn, err)
	}
	takeCtx, stopTakers := context.WithCancel(context.Background())
	defer stopTakers()
	var takers sync.WaitGroup
	for qi, tq := range takeQueues {
		for i := 0; i < c.takers; i++ {
			takers.Add(1)
			rng := rand.New(rand.NewPCG(c.seed, uint64(qi)*1000+uint64(200+i)))
			go func() {
				defer takers.Done()
				w.takeLoop(takeCtx, tq, rng)
			}()
		}
	}
	endTakers := func() {
		stopTakers()
		takers.Wait()
	}
	queue := names[0] // any of them tells whether the connection stopped

	probe := time.NewTicker(200 * time.Millisecond)
	defer probe.Stop()
	for {
		select {
		case <-ctx.Done(): // SIGTERM: the soak asks us to stop
			endTakers()
			waitClosed(conn.StopAllConsuming(), 30*time.Second)
			w.log.event(lineStopped, stoppedAsked, nowNano())
			return nil
		case <-w.giveUp:
			endTakers()
			waitClosed(conn.StopAllConsuming(), 30*time.Second)
			w.log.event(lineStopped, stoppedGaveUp, nowNano())
			return ExitError{Code: workerExitGaveUp}
		case <-probe.C:
			if !stoppedByItself(conn, queue) {
				continue
			}
			// It stopped without our asking: a connection declared dead
			// goes on under a fresh name, so this is a bug.
			waitClosed(conn.StopAllConsuming(), 30*time.Second)
			endTakers()
			w.log.event(lineStopped, stoppedHB, nowNano())
			return ExitError{Code: workerExitHBErrors}
		}
	}
}

// setupFailed ends a worker whose queues could not all be set up: asked to
// stop meanwhile (SIGTERM), or its connection stopped by itself before it
// was done, or a failure.
func (w *soakWorker) setupFailed(ctx context.Context, conn redq.Connection, err error) error {
	switch {
	case ctx.Err() != nil:
		waitClosed(conn.StopAllConsuming(), 30*time.Second)
		w.log.event(lineStopped, stoppedAsked, nowNano())
		return nil
	case errors.Is(err, redq.ErrorConsumingStopped):
		waitClosed(conn.StopAllConsuming(), 30*time.Second)
		w.log.event(lineStopped, stoppedHB, nowNano())
		return ExitError{Code: workerExitHBErrors}
	}
	<-conn.StopAllConsuming()
	return ExitError{workerExitFailed, err}
}

// startQueue opens a queue, starts consuming it with the worker's
// consumers and batch consumers, and returns a second handle of it for
// Take. seed sets the queue's work times apart from the other queues'.
func (w *soakWorker) startQueue(ctx context.Context, conn redq.Connection, name string, seed uint64) (redq.Queue, error) {
	c := w.c
	var q, tq redq.Queue
	err := retryFor(ctx, 30*time.Second, func() error {
		var err error
		if q == nil {
			if q, err = conn.OpenQueue(name); err != nil {
				return err
			}
		}
		tq, err = conn.OpenQueue(name) // a handle of its own for Take
		return err
	})
	if err == nil {
		err = retryFor(ctx, 30*time.Second, func() error { return q.StartConsuming(c.prefetch, 100*time.Millisecond) })
	}
	for i := 0; err == nil && i < c.consumers; i++ {
		rng := rand.New(rand.NewPCG(c.seed, seed+uint64(i)))
		err = retryFor(ctx, 30*time.Second, func() error {
			_, err := q.AddConsumerFunc("single", func(d redq.Delivery) {
				m := d.(redq.Message)
				w.log.take(lineGot, m, "")
				w.work(rng)
				w.ack(m)
			})
			return err
		})
	}
	for i := 0; err == nil && i < c.batchConsumers; i++ {
		rng := rand.New(rand.NewPCG(c.seed, seed+uint64(100+i)))
		err = retryFor(ctx, 30*time.Second, func() error {
			_, err := q.AddBatchConsumerFunc("batch", 10, 20*time.Millisecond, func(b redq.Deliveries) {
				for _, d := range b {
					w.log.take(lineGot, d, "")
					w.work(rng)
				}
				w.ackBatch(b)
			})
			return err
		})
	}
	if err != nil {
		return nil, fmt.Errorf("queue %s: %w", name, err)
	}
	return tq, nil
}

// stoppedByItself reports whether the connection stopped consuming: it
// then refuses to open queues (opening the queue that is open already
// changes nothing in Redis).
func stoppedByItself(conn redq.Connection, queue string) bool {
	_, err := conn.OpenQueue(queue)
	return errors.Is(err, redq.ErrorConsumingStopped)
}

func waitClosed(ch <-chan struct{}, limit time.Duration) bool {
	select {
	case <-ch:
		return true
	case <-time.After(limit):
		return false
	}
}

// watchErrors logs the connection's background errors: each
// ErrorConnectionLost (the connection goes on under a fresh name), the
// others at most once per kind and second.
func (w *soakWorker) watchErrors(errs <-chan error) {
	last := map[string]time.Time{}
	for err := range errs {
		var lost *redq.ConnectionLostError
		if errors.As(err, &lost) {
			w.log.event(lineLost, nowNano(), lost.OldName, lost.NewName)
			continue
		}
		kind := fmt.Sprintf("%T", err)
		if time.Since(last[kind]) < time.Second {
			continue
		}
		last[kind] = time.Now()
		w.log.event(lineBgErr, strconv.Quote(err.Error()))
	}
}

func (w *soakWorker) work(rng *rand.Rand) {
	if w.c.work > 0 {
		time.Sleep(time.Duration(rng.Int64N(int64(w.c.work) + 1)))
	}
}

// ack acks one delivery and logs what happened. AckContext, not rmq's
// Ack: its error says why a delivery was not found.
func (w *soakWorker) ack(d redq.Message) {
	w.log.take(lineAcking, d, "")
	w.result(d, d.AckContext(context.Background()))
}

// ackBatch acks a batch in one call and logs what happened to each.
func (w *soakWorker) ackBatch(b redq.Deliveries) {
	for _, d := range b {
		w.log.take(lineAcking, d, "")
	}
	errs := b.AckContext(context.Background())
	for i, d := range b {
		w.result(d, errs[i])
	}
}

func (w *soakWorker) result(d redq.Message, err error) {
	if err == nil {
		w.log.take(lineAcked, d, "")
		return
	}
	kind := ackErrKind(err)
	w.log.take(lineAckErr, d, kind+" ")
	switch kind {
	case ackUnknown, ackUnavailable, ackRefused, ackOther:
		// The delivery may still be this connection's, and nobody would
		// work on it until the connection dies: stop, so that a cleaner
		// hands it to another worker.
		w.log.event(lineBgErr, strconv.Quote("ack: "+err.Error()))
		w.gaveUp.Do(func() { close(w.giveUp) })
	}
}

// takeLoop takes deliveries with TakeBatch until ctx ends or the
// connection stops, and acks them one by one or as a batch.
func (w *soakWorker) takeLoop(ctx context.Context, q redq.Queue, rng *rand.Rand) {
	for ctx.Err() == nil {
		ds, err := q.TakeBatch(ctx, 1+rng.Int64N(4), 200*time.Millisecond)
		switch {
		case err == nil:
		case errors.Is(err, redq.ErrorTimeout):
			continue
		case ctx.Err() != nil, errors.Is(err, redq.ErrorConsumingStopped), errors.Is(err, redq.ErrorConnectionLost):
			return
		default: // Redis is away for a moment
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		for _, d := range ds {
			w.log.take(lineGot, d, "")
			w.work(rng)
		}
		if len(ds) > 1 && rng.IntN(2) == 0 {
			w.ackBatch(ds)
			continue
		}
		for _, d := range ds {
			w.ack(d)
		}
	}
}

// retryFor calls f until it succeeds, ctx ends or limit passes, and
// returns its last error.
func retryFor(ctx context.Context, limit time.Duration, f func() error) error {
	deadline := time.Now().Add(limit)
	for {
		err := f()
		if err == nil || errors.Is(err, redq.ErrorInvalidArgument) || errors.Is(err, redq.ErrorConsumingStopped) || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last error: %w)", ctx.Err(), err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// connName returns the full name of a redq connection, if it tells.
func connName(conn redq.Connection) string {
	if n, ok := conn.(interface{ Name() string }); ok {
		return n.Name()
	}
	return ""
}
