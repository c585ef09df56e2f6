package main

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisCPU is the Redis CPU time a workload's timed part cost: the server's
// user and system time (INFO cpu) read when the part starts and when it
// ends. A system marks its timed part with cpuStart and cpuStop; the
// workload carries the meter in the context it gives the system, and
// systems and workloads without one mark nothing.
type redisCPU struct {
	admin *redis.Client

	mu      sync.Mutex
	at      time.Duration // the reading at the start; -1 between parts
	total   time.Duration // the parts measured so far
	parts   int
	readErr error
}

type cpuKey struct{}

// withRedisCPU returns ctx carrying a new meter that reads Redis through
// admin, and the meter.
func withRedisCPU(ctx context.Context, admin *redis.Client) (context.Context, *redisCPU) {
	m := &redisCPU{admin: admin, at: -1}
	return context.WithValue(ctx, cpuKey{}, m), m
}

// cpuStart notes the start of a timed part, when ctx carries a meter.
func cpuStart(ctx context.Context) {
	if m, ok := ctx.Value(cpuKey{}).(*redisCPU); ok {
		m.mark(ctx, true)
	}
}

// cpuStop notes the end of the timed part that cpuStart began.
func cpuStop(ctx context.Context) {
	if m, ok := ctx.Value(cpuKey{}).(*redisCPU); ok {
		m.mark(ctx, false)
	}
}

func (m *redisCPU) mark(ctx context.Context, start bool) {
	used, err := serverCPU(context.WithoutCancel(ctx), m.admin)
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case err != nil:
		m.readErr = err
	case start:
		m.at = used
	case m.at >= 0:
		m.total += used - m.at
		m.parts++
		m.at = -1
	}
}

// per returns the CPU time measured per unit of work, in µs, for n units.
func (m *redisCPU) per(n int) (float64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.readErr != nil {
		return 0, fmt.Errorf("redis cpu: %w", m.readErr)
	}
	if m.parts == 0 {
		return 0, fmt.Errorf("redis cpu: no timed part was marked")
	}
	if n <= 0 {
		return 0, fmt.Errorf("redis cpu: %d units of work, want at least 1", n)
	}
	return micros(m.total) / float64(n), nil
}

// serverCPU returns the Redis server's CPU time so far (used_cpu_user plus
// used_cpu_sys, which INFO gives in seconds with µs precision).
func serverCPU(ctx context.Context, rdb *redis.Client) (time.Duration, error) {
	info, err := rdb.InfoMap(ctx, "cpu").Result()
	if err != nil {
		return 0, fmt.Errorf("INFO cpu: %w", err)
	}
	var sum float64
	for _, f := range []string{"used_cpu_user", "used_cpu_sys"} {
		v, err := strconv.ParseFloat(info["CPU"][f], 64)
		if err != nil {
			return 0, fmt.Errorf("INFO cpu: %s: %w", f, err)
		}
		sum += v
	}
	return time.Duration(sum * float64(time.Second)), nil
}
