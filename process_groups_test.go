package redq

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redq/redq/internal/redistest"
)

// Per-group K under SIGKILL: two worker processes consume grouped
// deliveries with K=2; one is SIGKILLed while it holds deliveries. A
// sampler reads the in-flight hash from Redis all along: no group ever
// has more than K in flight. The cleaner returns what the dead one held,
// the groups' slots come back, and every delivery is acked once (by the
// survivor, or by the victim's ack that reached Redis before it died).
func TestGroupProcessKill(t *testing.T) {
	t.Parallel() // own redis-server; see docs/testing.md
	const (
		k         = 2
		groups    = 20
		perGroup  = 50
		consumers = 4
		queue     = "tenants"
	)
	srv := redistest.Start(t)
	client := srv.Client(t)
	ns := procNamespace(t)
	admin, err := openConn(client, "admin", nil, WithNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { <-admin.StopAllConsuming() })
	aq, err := admin.OpenQueue(queue, WithGroupConcurrency(k))
	if err != nil {
		t.Fatal(err)
	}
	rq := aq.(*redisQueue)

	// the sampler: the worst in-flight count of any group seen in Redis
	var mu sync.Mutex
	worst, samples := int64(0), 0
	stopSampler := make(chan struct{})
	samplerDone := make(chan struct{})
	go func() {
		defer close(samplerDone)
		for {
			select {
			case <-stopSampler:
				return
			default:
			}
			m, err := client.HGetAll(context.Background(), rq.keys.grun()).Result()
			if err != nil {
				continue
			}
			mu.Lock()
			samples++
			for _, v := range m {
				if n, _ := strconv.ParseInt(v, 10, 64); n > worst {
					worst = n
				}
			}
			mu.Unlock()
			time.Sleep(time.Millisecond)
		}
	}()
	haltSampler := sync.OnceFunc(func() { close(stopSampler); <-samplerDone })
	t.Cleanup(haltSampler)

	dir := t.TempDir()
	start := func(tag string) (*procHelper, string, string) {
		env := procEnv(srv, ns, queue, tag)
		env[procEnvPrefetch] = "10"
		env[procEnvConsumers] = strconv.Itoa(consumers)
		env[procEnvSleep] = "3ms"
		env[procEnvHBInterval] = "100ms"
		env[procEnvHBTTL] = "1s"
		env[procEnvAckFile] = filepath.Join(dir, tag)
		h := startProcHelper(t, "consume", env)
		return h, h.await("READY", 60*time.Second, nil).get("conn"), env[procEnvAckFile]
	}
	victim, victimConn, victimFile := start("victim")
	survivor, _, survivorFile := start("survivor")
	var payloads []string
	for g := 0; g < groups; g++ {
		gq, err := admin.OpenQueue(queue, WithPublishDefaults(Group(fmt.Sprintf("t%02d", g))))
		if err != nil {
			t.Fatal(err)
		}
		ps := procPayloads(fmt.Sprintf("t%02d", g), perGroup)
		procPublish(t, gq, ps)
		payloads = append(payloads, ps...)
	}

	victim.await("PROGRESS", 30*time.Second, func(m procMsg) bool { return m.int("acked") >= 100 })
	victim.kill()
	st := mustStats(t, admin, queue).QueueStats[queue]
	held := st.Connections[victimConn].UnackedCount
	t.Logf("victim killed holding %d", held)

	cl := NewCleaner(admin)
	procWait(t, 60*time.Second, "the survivor to finish everything", func() bool {
		if _, err := cl.Clean(); err != nil {
			t.Logf("clean: %v", err)
		}
		st := mustStats(t, admin, queue).QueueStats[queue]
		_, victimStill := st.Connections[victimConn]
		return !victimStill && st.ReadyCount == 0 && st.UnackedCount() == 0
	}, func() string { return procQueueState(admin, queue) })
	haltSampler()
	mu.Lock()
	if worst > k {
		t.Errorf("a group had %d in flight, K is %d", worst, k)
	}
	if worst < k {
		t.Errorf("no group ever had %d in flight (worst %d in %d samples): the test did not load K", k, worst, samples)
	}
	t.Logf("%d samples of the in-flight hash, worst %d", samples, worst)
	mu.Unlock()

	survivor.send("STOP")
	survivor.await("STOPPED", 30*time.Second, nil)
	if code := survivor.wait(20 * time.Second); code != 0 {
		t.Errorf("survivor exited with %d", code)
	}
	vAcking, vAcked := procAckFile(t, victimFile)
	sAcking, sAcked := procAckFile(t, survivorFile)
	ambiguous := map[string]bool{}
	for p := range vAcking {
		if !vAcked[p] {
			ambiguous[p] = true
		}
	}
	for p := range sAcking {
		if !sAcked[p] {
			t.Errorf("the survivor started acking %s but never finished", p)
		}
	}
	for p := range vAcked {
		if sAcked[p] {
			t.Errorf("%s was acked by the victim and delivered again", p)
		}
	}
	procCoverage(t, payloads, ambiguous, consumers, vAcked, sAcked)
	groupsClean(t, rq)
	wantCounts(t, admin, queue, 0, 0, 0)
}
