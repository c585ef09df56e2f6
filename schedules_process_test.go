package redq

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redq/redq/internal/redistest"
)

// Schedules under real processes: several processes run one schedule
// set's loop, one is SIGKILLed mid-run, and every tick is published
// exactly once.
//
// By default 100 schedules tick every second for 10 s; with
// REDQ_SCHEDULES_LONG=1 it is the full run, 1,000 schedules for 60 s.

// procChildSchedules runs the loop of schedule set REDQ_TEST_QUEUE until
// it is killed, or told STOP.
func procChildSchedules() int {
	cmds := procCommands()
	errs := make(chan error, 1000)
	go procReportErrors(errs, nil)
	client := redis.NewClient(&redis.Options{Addr: os.Getenv(procEnvAddr)})
	c, err := Open(context.Background(), os.Getenv(procEnvTag), client, errs,
		WithNamespace(os.Getenv(procEnvNS)),
		WithHeartbeat(procEnvDuration(procEnvHBInterval, 100*time.Millisecond), procEnvDuration(procEnvHBTTL, time.Second)))
	if err != nil {
		return procFail("open: %v", err)
	}
	s, err := c.OpenSchedules(os.Getenv(procEnvQueue))
	if err != nil {
		return procFail("open schedules: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	procEmit("READY", "conn", c.(*redisConnection).Name())
	for cmd := range cmds {
		if cmd == "STOP" {
			cancel()
			err := <-done
			<-c.StopAllConsuming()
			procEmit("STOPPED", "err", fmt.Sprint(err))
			return 0
		}
	}
	return 0
}

func TestProcessSchedulesExactlyOnceUnderSIGKILL(t *testing.T) {
	t.Parallel() // own redis-server or cluster; see docs/testing.md
	skipShort(t, "runs schedule loops as processes for 10s or more")
	n, run := 100, 10*time.Second
	if os.Getenv("REDQ_SCHEDULES_LONG") == "1" {
		n, run = 1000, 60*time.Second
	}
	const set = "ticks"
	srv := redistest.Start(t)
	client := srv.Client(t)
	ns := procNamespace(t)
	admin, err := openConn(client, "admin", nil, WithNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { <-admin.StopAllConsuming() })
	s := openSchedules(t, admin, set)
	q := openQueue(t, admin, set)
	ctx := context.Background()

	var children []*procHelper
	for i := 0; i < 3; i++ {
		env := procEnv(srv, ns, set, fmt.Sprintf("loop%d", i))
		env[procEnvHBInterval] = "100ms"
		env[procEnvHBTTL] = "1s"
		h := startProcHelper(t, "schedules", env)
		h.await("READY", procReadyTimeout, nil)
		children = append(children, h)
	}

	// every tick is kept, however late (a killed loop's fires come back
	// after its heartbeat lapses and a cleaner runs)
	first := map[string]time.Time{}
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("s%04d", i)
		mustSchedule(t, s, id, "@every 1s", "tick", ScheduleCatchUp(CatchUpAll(MaxCatchUp)))
		// the loops run already: under load one may have published the
		// first tick before this lookup, whose Next is then a later one
		in := mustScheduleInfo(t, s, id)
		first[id] = in.Next.Add(-time.Duration(in.Fired) * time.Second)
	}
	started := time.Now()

	// collect the deliveries, and clean every 300ms
	var mu sync.Mutex
	count := map[string]map[string]int{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			ds, err := q.TakeBatch(ctx, 1000, 200*time.Millisecond)
			if errors.Is(err, ErrorTimeout) {
				continue
			}
			if err != nil {
				t.Errorf("take: %v", err)
				return
			}
			mu.Lock()
			for _, d := range ds {
				id := d.Header().Get(HeaderSchedule)
				if count[id] == nil {
					count[id] = map[string]int{}
				}
				count[id][d.Header().Get(HeaderScheduleTick)]++
			}
			mu.Unlock()
			for i, err := range ds.AckContext(ctx) {
				t.Errorf("ack %d: %v", i, err)
			}
		}
	}()
	go func() {
		defer wg.Done()
		cl := NewCleaner(admin)
		for {
			select {
			case <-stop:
				return
			case <-time.After(300 * time.Millisecond):
			}
			if _, err := cl.Clean(); err != nil {
				t.Errorf("clean: %v", err)
			}
		}
	}()

	time.Sleep(run / 3)
	children[0].kill()
	t.Logf("killed loop 0 after %v", time.Since(started).Round(time.Millisecond))
	time.Sleep(run - time.Since(started))

	// stop the schedules and let what is under way land
	for i := 0; i < n; i++ {
		if err := s.Pause(ctx, fmt.Sprintf("s%04d", i)); err != nil {
			t.Fatal(err)
		}
	}
	paused := time.Now()
	var fired int64
	var infos []ScheduleInfo
	procWait(t, 20*time.Second, "every published tick to reach the collector", func() bool {
		infos = infos[:0]
		fired = 0
		for cursor := uint64(0); ; {
			page, next, err := s.List(ctx, cursor, 500)
			if err != nil {
				t.Fatal(err)
			}
			infos = append(infos, page...)
			if next == 0 {
				break
			}
			cursor = next
		}
		for _, in := range infos {
			fired += in.Fired
		}
		mu.Lock()
		defer mu.Unlock()
		got := 0
		for _, ticks := range count {
			for _, c := range ticks {
				got += c
			}
		}
		return int64(got) == fired && admin.client.HLen(ctx, s.q.keys.outbox).Val() == 0
	}, nil)
	close(stop)
	wg.Wait()
	for _, h := range children[1:] {
		h.send("STOP")
		h.await("STOPPED", 20*time.Second, nil)
	}

	if len(infos) != n {
		t.Fatalf("List found %d schedules, want %d", len(infos), n)
	}
	var total, skipped int64
	for _, in := range infos {
		ticks := count[in.ID]
		var list []string
		for tick, c := range ticks {
			if c != 1 {
				t.Errorf("%s: tick %s published %d times", in.ID, tick, c)
			}
			list = append(list, tick)
		}
		sort.Strings(list)
		if len(list) == 0 {
			t.Errorf("%s: no tick", in.ID)
			continue
		}
		if list[0] != tickText(first[in.ID]) {
			t.Errorf("%s: first tick delivered %s, want %s", in.ID, list[0], tickText(first[in.ID]))
		}
		for i := 1; i < len(list); i++ {
			a, _ := time.Parse(time.RFC3339, list[i-1])
			z, _ := time.Parse(time.RFC3339, list[i])
			if z.Sub(a) != time.Second {
				t.Errorf("%s: tick %s follows %s: %v lost", in.ID, list[i], list[i-1], z.Sub(a)-time.Second)
			}
		}
		last, _ := time.Parse(time.RFC3339, list[len(list)-1])
		if !last.Equal(in.LastFire) {
			t.Errorf("%s: last tick delivered %v, LastFire %v", in.ID, last, in.LastFire)
		}
		if paused.Sub(last) > 3*time.Second {
			t.Errorf("%s: last tick %v, %v before the pause: it stalled", in.ID, last, paused.Sub(last))
		}
		total += int64(len(list))
		skipped += in.Skipped
	}
	if skipped != 0 {
		t.Errorf("%d ticks skipped, want 0", skipped)
	}
	t.Logf("%d schedules, %d ticks in %v, each once, none lost (3 loops, one SIGKILLed)", n, total, run)
}
