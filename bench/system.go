package main

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// errNotMeasured is returned by a system for a workload it has no fair way
// to run (for example asynq has no cleaner to call). The table shows "n/a".
var errNotMeasured = errors.New("not measured for this system")

// env is what every run gets: the Redis server, sizes and payload shape.
// A run may create its own clients from opts; it must close them before it
// returns. The harness flushes the database after every run, so a run need
// not delete its keys (it may not FLUSHDB itself).
type env struct {
	opts        *redis.Options // connection options of the Redis under test
	admin       *redis.Client  // a shared client for checks and INFO
	payloadSize int            // payload size in bytes, unless a workload says otherwise
}

// newClient returns a new client for the Redis under test with pool size
// at least poolSize.
func (e *env) newClient(poolSize int) *redis.Client {
	o := *e.opts
	if poolSize > o.PoolSize {
		o.PoolSize = poolSize
	}
	return redis.NewClient(&o)
}

// e2eConfig describes one end-to-end run over a pre-filled queue.
type e2eConfig struct {
	N           int // deliveries published before consuming starts
	Consumers   int // single-delivery consumers (0 when Batch is set)
	Prefetch    int // prefetch limit per queue where the system has one
	Batch       int // batch size of one batch consumer (0: single consumers)
	PayloadSize int // bytes per payload
}

// steadyConfig describes publishing at a fixed rate while consuming.
type steadyConfig struct {
	Rate       int           // deliveries per second offered, over all producers
	Duration   time.Duration // how long producers publish
	Producers  int           // publishing goroutines
	Consumers  int           // consuming goroutines (as in e2eConfig)
	Prefetch   int
	Payload    int
	DrainLimit time.Duration // how long to wait after publishing for the rest to be consumed
}

// steadyResult is what a steady run measured. Latencies are publish→ack
// per delivery, taken from the timestamp in the payload (see newPayload).
type steadyResult struct {
	Published int
	Consumed  int
	Elapsed   time.Duration   // first publish to last ack
	Latencies []time.Duration // one per consumed delivery
}

// The systems are made by newRedq(poll), newAsynq(checkInterval) (0: the
// library's default), newStreams() and newList().
//
// system is one way of running a work queue on Redis. Every method runs
// one measurement and checks its own work: each published delivery must be
// consumed (acked) exactly once, else the method returns an error naming
// what is missing (see tally). A method returns errNotMeasured when the
// system has no fair equivalent. Durations exclude setup (filling a queue,
// starting servers) unless the doc comment says otherwise.
type system interface {
	// Name is the system's column label, e.g. "redq" or "asynq (10ms)".
	Name() string

	// Publish publishes n payloads of e.payloadSize bytes from goroutines
	// goroutines, perCall payloads per call, and returns the elapsed time.
	Publish(ctx context.Context, e *env, n, goroutines, perCall int) (time.Duration, error)

	// EndToEnd fills a queue with cfg.N deliveries, then times consuming
	// and acking all of them.
	EndToEnd(ctx context.Context, e *env, cfg e2eConfig) (time.Duration, error)

	// Steady publishes at cfg.Rate for cfg.Duration while consumers run.
	Steady(ctx context.Context, e *env, cfg steadyConfig) (steadyResult, error)

	// Idle publishes samples deliveries one at a time into an idle queue,
	// gap apart, and returns for each the time from the start of the
	// publish call to the consumer receiving it.
	Idle(ctx context.Context, e *env, samples int, gap time.Duration) ([]time.Duration, error)

	// Queued fills a queue with depth deliveries, then times consuming
	// and acking the first k of them with 10 consumers.
	Queued(ctx context.Context, e *env, depth, k int) (time.Duration, error)

	// Unacked fills a queue with held+k deliveries (payload sequence
	// numbers below held are the "held" ones, published first) and starts
	// 10 consumers. Held deliveries are taken and kept unacked; the others
	// are acked. The clock starts once every held delivery has been taken
	// and stops when the last of the k others is acked; the result is that
	// time divided by the number of others acked in it (per-ack cost with
	// held deliveries outstanding). The held ones are acked afterwards,
	// untimed, and checked like the rest.
	Unacked(ctx context.Context, e *env, held, k int) (time.Duration, error)

	// ManyQueues fills queues queues with perQueue deliveries each, then
	// times consuming and acking all of them (one consumer per queue).
	ManyQueues(ctx context.Context, e *env, queues, perQueue int) (time.Duration, error)

	// Recover leaves n deliveries taken and unacked by a consumer that
	// then dies, and times returning all n to ready (the cleaner's job).
	Recover(ctx context.Context, e *env, n int) (time.Duration, error)

	// Memory fills a queue with n ready deliveries and returns Redis's
	// used_memory growth divided by n.
	Memory(ctx context.Context, e *env, n int) (float64, error)
}
