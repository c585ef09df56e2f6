package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redq/redq"
)

// The scheduling workloads exist for redq alone, by the sizes -n gives
// (10k deliveries over 10 s, 1M delayed and 100k leases at the default),
// and any other system given one is not measured rather than failed.
func TestSchedWorkloads(t *testing.T) {
	byName := map[string]workload{}
	for _, w := range workloads(sizes{100_000}, 200, 5000) {
		byName[w.name] = w
	}
	for _, name := range []string{"sched/lateness", "sched/e2e-half-delayed", "sched/prefetch-1M-delayed", "sched/cleaner-100k-leases"} {
		w, found := byName[name]
		if !found {
			t.Errorf("no workload %s at n=100k", name)
			continue
		}
		for _, s := range allSystems() {
			if got, want := w.takesPart(s.Name()), s.Name() == "redq"; got != want {
				t.Errorf("%s: takesPart(%q) = %v, want %v", name, s.Name(), got, want)
			}
		}
		if _, err := w.run(context.Background(), nil, newList()); !errors.Is(err, errNotMeasured) {
			t.Errorf("%s run for the list baseline: %v, want errNotMeasured", name, err)
		}
	}
	for _, c := range []struct {
		n, deliveries int
		spread        time.Duration
	}{{100_000, 10_000, 10 * time.Second}, {2000, 200, time.Second}, {1_000_000, 100_000, 100 * time.Second}} {
		w := schedWorkloads(sizes{c.n})[0]
		if want := fmt.Sprintf("%d deliveries with delays spread evenly over %s,", c.deliveries, c.spread); !strings.HasPrefix(w.about, want) {
			t.Errorf("n=%d: lateness is %q, want %q", c.n, w.about, want)
		}
	}
}

// Delays are spread evenly up to the spread, in whole milliseconds, and
// never 0 (a delay of 0 would publish the delivery as ready).
func TestSpreadDelay(t *testing.T) {
	for _, c := range []struct {
		i, n   int
		spread time.Duration
		want   time.Duration
	}{
		{0, 10_000, 10 * time.Second, time.Millisecond},
		{4999, 10_000, 10 * time.Second, 5 * time.Second},
		{9999, 10_000, 10 * time.Second, 10 * time.Second},
		{0, 200, time.Second, 5 * time.Millisecond},
		{199, 200, time.Second, time.Second},
		{0, 5000, time.Second, time.Millisecond},
	} {
		if got := spreadDelay(c.i, c.n, c.spread); got != c.want {
			t.Errorf("spreadDelay(%d, %d, %s) = %s, want %s", c.i, c.n, c.spread, got, c.want)
		}
	}
}

func TestParallelCallsEachOnceAndStopsAtTheFirstError(t *testing.T) {
	var mu sync.Mutex
	seen := map[int]int{}
	err := parallel(context.Background(), 4, 1000, func(_ context.Context, i int) error {
		mu.Lock()
		seen[i]++
		mu.Unlock()
		return nil
	})
	if err != nil || len(seen) != 1000 {
		t.Fatalf("parallel = %v with %d distinct calls, want nil and 1000", err, len(seen))
	}
	for i, n := range seen {
		if n != 1 || i < 0 || i >= 1000 {
			t.Fatalf("call %d made %d times", i, n)
		}
	}

	boom := errors.New("boom")
	calls := 0
	err = parallel(context.Background(), 4, 1_000_000, func(ctx context.Context, i int) error {
		mu.Lock()
		calls++
		mu.Unlock()
		if i == 10 {
			return boom
		}
		return nil
	})
	if !errors.Is(err, boom) || calls > 100_000 {
		t.Fatalf("parallel = %v after %d calls, want boom soon after call 10", err, calls)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := parallel(ctx, 2, 10, func(context.Context, int) error { return nil }); !errors.Is(err, context.Canceled) {
		t.Errorf("parallel with a cancelled context = %v, want context.Canceled", err)
	}
}

func TestRedqLateness(t *testing.T) {
	e, ctx := testEnv(t), testContext(t)
	cfg := latenessConfig{N: 100, Spread: 500 * time.Millisecond, Publishers: 4, Consumers: 10, Prefetch: 1000, PayloadSize: 100}
	lat, err := newRedq(time.Second).(*redqSystem).Lateness(ctx, e, cfg)
	if err != nil {
		t.Fatalf("Lateness: %v", err)
	}
	if len(lat) != cfg.N {
		t.Fatalf("Lateness returned %d samples, want %d", len(lat), cfg.N)
	}
	for _, l := range lat {
		// Never handed out before its due time (Redis keeps whole ms, so
		// up to 1 ms early by this process's clock), and not seconds late.
		if l < -2*time.Millisecond || l > 3*time.Second {
			t.Errorf("lateness %s, want in [-2ms, 3s]", l)
		}
	}
	t.Logf("p50 %s, p99 %s", percentile(lat, 0.5), percentile(lat, 0.99))
}

func TestRedqHalfDelayed(t *testing.T) {
	e, ctx := testEnv(t), testContext(t)
	d, err := newRedq(time.Second).(*redqSystem).HalfDelayed(ctx, e, e2eConfig{N: 2050, Consumers: 10, Prefetch: 1000, PayloadSize: 100})
	if err != nil {
		t.Fatalf("HalfDelayed: %v", err)
	}
	redqPlausible(t, "HalfDelayed", d, 20*time.Second)
}

// fillHalfDelayed puts the odd chunks into the delayed set and the even
// ones into ready; it checks that itself, and the counts say so.
func TestFillHalfDelayedSplitsTheQueue(t *testing.T) {
	e, ctx := testEnv(t), testContext(t)
	r := newRedq(time.Second).(*redqSystem).open(e, 4)
	defer func() {
		if err := r.close(); err != nil {
			t.Error(err)
		}
	}()
	conn, q, err := r.connect(ctx, redqQueue)
	if err != nil {
		t.Fatal(err)
	}
	// 5 calls of 100 and one of 50: calls 1, 3 and 5 (250) are delayed.
	if err := fillHalfDelayed(ctx, conn, q, 550, 100); err != nil {
		t.Fatalf("fillHalfDelayed: %v", err)
	}
	if err := expectRedqCounts(ctx, conn, redqCounts{ready: 300, delayed: 250}, redqQueue); err != nil {
		t.Fatal(err)
	}
}

// The end-of-run check notices deliveries left in the delayed set.
func TestExpectRedqCountsSeesDelayed(t *testing.T) {
	e, ctx := testEnv(t), testContext(t)
	r := newRedq(time.Second).(*redqSystem).open(e, 1)
	defer func() {
		if err := r.close(); err != nil {
			t.Error(err)
		}
	}()
	conn, q, err := r.connect(ctx, redqQueue)
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Put(ctx, newPayload(0, 100), redq.Delay(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := expectRedqQueues(ctx, conn, 0, redqQueue); err == nil || !strings.Contains(err.Error(), "1 delayed") {
		t.Errorf("a queue holding a delayed delivery passed as empty: %v", err)
	}
	if err := expectRedqCounts(ctx, conn, redqCounts{delayed: 1}, redqQueue); err != nil {
		t.Errorf("want 1 delayed: %v", err)
	}
}

func TestRedqPrefetchDelayed(t *testing.T) {
	e, ctx := testEnv(t), testContext(t)
	s := newRedq(time.Second).(*redqSystem)
	for _, delayed := range []int{0, 5000} {
		d, err := s.PrefetchDelayed(ctx, e, delayed, 500)
		if err != nil {
			t.Fatalf("PrefetchDelayed(%d delayed): %v", delayed, err)
		}
		redqPlausible(t, "PrefetchDelayed", d, 20*time.Second)
	}
}

func TestRedqExpiredLeases(t *testing.T) {
	e, ctx := testEnv(t), testContext(t)
	d, err := newRedq(time.Second).(*redqSystem).ExpiredLeases(ctx, e, 2000)
	if err != nil {
		t.Fatalf("ExpiredLeases: %v", err)
	}
	redqPlausible(t, "ExpiredLeases", d, 10*time.Second)
}

// A whole run of the scheduling workloads on the smallest sizes passes
// its checks and shows every row, redq only.
func TestRunSchedWorkloads(t *testing.T) {
	if testing.Short() {
		t.Skip("runs redis-server")
	}
	e := testEnv(t)
	var stdout, stderr strings.Builder
	code := run(context.Background(), []string{"-redis", "redis://" + e.opts.Addr + "/0", "-n", "100", "-reps", "1",
		"-only", "sched", "-quiet", "-out", t.TempDir()}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr.String())
	}
	for _, want := range []string{
		"sched/lateness", "p50 lateness", "p99 lateness", "sched/e2e-half-delayed",
		"sched/prefetch-1k-delayed", "cost, 0 delayed", "cost, 1k delayed", "sched/cleaner-100-leases",
	} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, stdout.String())
		}
	}
	for _, peer := range []string{"asynq", "streams", "list"} {
		if strings.Contains(stdout.String(), "  "+peer+"  ") {
			t.Errorf("table has a %s row:\n%s", peer, stdout.String())
		}
	}
}

// The scheduling runs leave no goroutines behind either.
func TestRedqSchedNoLeak(t *testing.T) {
	e, ctx := testEnv(t), testContext(t)
	s := newRedq(time.Second).(*redqSystem)
	noGoroutineLeak(t, func() {
		t.Helper()
		if _, err := s.Lateness(ctx, e, latenessConfig{N: 20, Spread: 50 * time.Millisecond, Publishers: 2, Consumers: 3, Prefetch: 10, PayloadSize: 100}); err != nil {
			t.Fatalf("Lateness: %v", err)
		}
		if _, err := s.HalfDelayed(ctx, e, e2eConfig{N: 300, Consumers: 3, Prefetch: 100, PayloadSize: 100}); err != nil {
			t.Fatalf("HalfDelayed: %v", err)
		}
		if _, err := s.PrefetchDelayed(ctx, e, 1000, 100); err != nil {
			t.Fatalf("PrefetchDelayed: %v", err)
		}
		if _, err := s.ExpiredLeases(ctx, e, 100); err != nil {
			t.Fatalf("ExpiredLeases: %v", err)
		}
	})
}
