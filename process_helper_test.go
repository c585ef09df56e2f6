package redq

// The child side of the process-level tests in process_test.go. The test
// binary re-executes itself with REDQ_TEST_HELPER=<name>; TestMain then calls
// runHelper instead of running tests. A helper talks to its parent with
// lines on stdout of the form
//
//	@redq<TAB>KIND<TAB>key="quoted value"<TAB>...
//
// and takes commands, one per line, on stdin. When stdin reaches EOF without
// a command that ends the helper (the parent went away), the helper exits,
// so that no child outlives its test.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// helperEnv, when set, makes the test binary run a helper program instead
// of the tests (see process_test.go).
const helperEnv = "REDQ_TEST_HELPER"

// Environment of a helper process.
const (
	procEnvAddr       = "REDQ_TEST_ADDR"        // Redis address
	procEnvNS         = "REDQ_TEST_NS"          // namespace
	procEnvQueue      = "REDQ_TEST_QUEUE"       // queue name
	procEnvTag        = "REDQ_TEST_TAG"         // connection tag
	procEnvPrefetch   = "REDQ_TEST_PREFETCH"    // prefetch limit
	procEnvConsumers  = "REDQ_TEST_CONSUMERS"   // number of consumers
	procEnvAckLimit   = "REDQ_TEST_ACK_LIMIT"   // consume: ack this many, then hold (-1: ack all)
	procEnvSleep      = "REDQ_TEST_SLEEP"       // consume: work time per delivery
	procEnvHBInterval = "REDQ_TEST_HB_INTERVAL" // heartbeat interval
	procEnvHBTTL      = "REDQ_TEST_HB_TTL"      // heartbeat TTL
	procEnvAckFile    = "REDQ_TEST_ACKFILE"     // consume: file of ACKING/ACKED lines
	procEnvHold       = "REDQ_TEST_HOLD"        // zombie: deliveries to hold
	procEnvLifetime   = "REDQ_TEST_LIFETIME"    // exit on its own after this long
)

// procLinePrefix starts every protocol line a helper writes on stdout.
const procLinePrefix = "@redq"

func runHelper(name string) int {
	life := procEnvDuration(procEnvLifetime, 90*time.Second)
	time.AfterFunc(life, func() {
		procEmit("TIMEOUT", "after", life)
		os.Exit(4)
	})
	switch name {
	case "consume":
		return procChildConsume()
	case "zombie":
		return procChildZombie()
	case "leasehold":
		return procChildLeaseHold() // process_lease_test.go
	case "stagepush":
		return procChildStagePush() // cluster_moves_cluster_test.go
	case "schedules":
		return procChildSchedules() // schedules_process_test.go
	}
	fmt.Fprintln(os.Stderr, "unknown helper", name)
	return 2
}

var procEmitMu sync.Mutex

// procEmit writes one protocol line with a single write call, so that a
// line is either wholly there or missing when the process is killed.
func procEmit(kind string, kv ...any) {
	var b strings.Builder
	b.WriteString(procLinePrefix)
	b.WriteByte('\t')
	b.WriteString(kind)
	for i := 0; i+1 < len(kv); i += 2 {
		fmt.Fprintf(&b, "\t%v=%s", kv[i], strconv.Quote(fmt.Sprint(kv[i+1])))
	}
	b.WriteByte('\n')
	procEmitMu.Lock()
	defer procEmitMu.Unlock()
	_, _ = os.Stdout.WriteString(b.String())
}

func procFail(format string, args ...any) int {
	procEmit("FATAL", "msg", fmt.Sprintf(format, args...))
	return 1
}

func procEnvInt(key string, def int) int {
	s := os.Getenv(key)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		panic(fmt.Sprintf("%s=%q: %v", key, s, err))
	}
	return n
}

func procEnvDuration(key string, def time.Duration) time.Duration {
	s := os.Getenv(key)
	if s == "" {
		return def
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		panic(fmt.Sprintf("%s=%q: %v", key, s, err))
	}
	return d
}

// procCommands reads command lines from stdin. When stdin ends, the parent
// is gone or gave up on us: exit.
func procCommands() <-chan string {
	ch := make(chan string)
	go func() {
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			ch <- strings.TrimSpace(sc.Text())
		}
		procEmit("EXIT", "why", "stdin closed")
		os.Exit(3)
	}()
	return ch
}

// procReportErrors emits every error the connection sends to errs, and
// closes lost the first time one matches ErrorConnectionLost.
func procReportErrors(errs <-chan error, lost chan<- struct{}) {
	var once sync.Once
	for err := range errs {
		var count int
		var he *HeartbeatError
		var ce *ConsumeError
		var de *DeliveryError
		switch {
		case errors.As(err, &he):
			count = he.Count
		case errors.As(err, &ce):
			count = ce.Count
		case errors.As(err, &de):
			count = de.Count
		}
		isLost := errors.Is(err, ErrorConnectionLost)
		procEmit("ERROR", "type", fmt.Sprintf("%T", err), "count", count, "lost", isLost, "msg", err.Error())
		if isLost && lost != nil {
			once.Do(func() { close(lost) })
		}
	}
}

func procOpen(errs chan<- error) (*redisConnection, *redisQueue, error) {
	client := redis.NewClient(&redis.Options{Addr: os.Getenv(procEnvAddr)})
	c, err := Open(context.Background(), os.Getenv(procEnvTag), client, errs,
		WithNamespace(os.Getenv(procEnvNS)),
		WithHeartbeat(procEnvDuration(procEnvHBInterval, 100*time.Millisecond), procEnvDuration(procEnvHBTTL, time.Second)))
	if err != nil {
		return nil, nil, fmt.Errorf("open: %w", err)
	}
	q, err := c.OpenQueue(os.Getenv(procEnvQueue))
	if err != nil {
		return nil, nil, fmt.Errorf("open queue: %w", err)
	}
	return c.(*redisConnection), q.(*redisQueue), nil
}

// procChildConsume consumes the queue with REDQ_TEST_CONSUMERS consumers.
// Each delivery is worked on for REDQ_TEST_SLEEP and acked; before the ack
// the line "ACKING <payload>" and after a successful ack "ACKED <payload>"
// is appended to REDQ_TEST_ACKFILE (plain write calls: the lines survive a
// SIGKILL of this process). Once REDQ_TEST_ACK_LIMIT acks were made (unless
// it is -1), every consumer keeps the next delivery it gets without
// settling it and blocks forever; when all consumers hold one, it emits
// HELD. Command STOP stops all consuming and exits 0.
func procChildConsume() int {
	consumers := procEnvInt(procEnvConsumers, 1)
	ackLimit := int64(procEnvInt(procEnvAckLimit, -1))
	sleep := procEnvDuration(procEnvSleep, 0)
	cmds := procCommands()

	errs := make(chan error, 1000)
	go procReportErrors(errs, nil)
	c, q, err := procOpen(errs)
	if err != nil {
		return procFail("%v", err)
	}
	f, err := os.OpenFile(os.Getenv(procEnvAckFile), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return procFail("ack file: %v", err)
	}
	var fileMu sync.Mutex
	record := func(verb, payload string) {
		fileMu.Lock()
		defer fileMu.Unlock()
		if _, err := f.WriteString(verb + " " + payload + "\n"); err != nil {
			procEmit("FATAL", "msg", "write ack file: "+err.Error())
			os.Exit(1)
		}
	}

	var reserved, confirmed, held atomic.Int64
	never := make(chan struct{})
	consume := func(dd Delivery) {
		d := dd.(Message)
		if ackLimit >= 0 && reserved.Add(1) > ackLimit {
			// Keep this delivery unsettled for good.
			if held.Add(1) == int64(consumers) {
				procEmit("HELD", "held", consumers, "acked", confirmed.Load())
			}
			<-never
		}
		if sleep > 0 {
			time.Sleep(sleep)
		}
		p := d.Payload()
		record("ACKING", p)
		if err := d.Ack(); err != nil {
			procEmit("ACKERR", "payload", p, "notfound", errors.Is(err, ErrorNotFound),
				"lost", errors.Is(err, ErrorConnectionLost), "msg", err.Error())
			return
		}
		record("ACKED", p)
		if n := confirmed.Add(1); n%50 == 0 {
			procEmit("PROGRESS", "acked", n)
		}
	}
	if err := q.StartConsuming(int64(procEnvInt(procEnvPrefetch, 10)), 20*time.Millisecond); err != nil {
		return procFail("start consuming: %v", err)
	}
	for i := 0; i < consumers; i++ {
		if _, err := q.AddConsumerFunc("w", consume); err != nil {
			return procFail("add consumer: %v", err)
		}
	}
	procEmit("READY", "conn", c.Name(), "pid", os.Getpid())

	for cmd := range cmds {
		switch cmd {
		case "STOP":
			select {
			case <-c.StopAllConsuming():
			case <-time.After(20 * time.Second):
				return procFail("StopAllConsuming did not finish within 20s")
			}
			if err := f.Close(); err != nil {
				return procFail("close ack file: %v", err)
			}
			procEmit("STOPPED", "acked", confirmed.Load())
			return 0
		default:
			procEmit("UNKNOWN", "cmd", cmd)
		}
	}
	return 0
}

// procChildZombie holds REDQ_TEST_HOLD deliveries without settling them and
// emits HELD. The parent then pauses it (SIGSTOP) past its heartbeat TTL,
// has a cleaner return the deliveries, resumes it (SIGCONT) and sends ACK.
// The helper then acks every held delivery and reports each result
// (ACKRESULT), waits for ErrorConnectionLost on its error channel and for
// the connection to go on under a fresh name (it never stops: RESUMED says
// whether it did, its name and whether OpenQueue still works). Deliveries
// that arrive after the first REDQ_TEST_HOLD are acked at once and
// reported as LATE with the ack's result. On EXIT it stops all consuming
// and emits SUMMARY.
func procChildZombie() int {
	want := procEnvInt(procEnvHold, 10)
	cmds := procCommands()

	errs := make(chan error, 1000)
	lost := make(chan struct{})
	go procReportErrors(errs, lost)
	c, q, err := procOpen(errs)
	if err != nil {
		return procFail("%v", err)
	}
	first := c.Name()
	var mu sync.Mutex
	var held []Message
	late := 0
	consume := func(dd Delivery) {
		d := dd.(Message)
		mu.Lock()
		if len(held) < want {
			held = append(held, d)
			if len(held) == want {
				procEmit("HELD", "held", len(held))
			}
			mu.Unlock()
			return
		}
		late++
		mu.Unlock()
		err := d.AckContext(context.Background())
		procEmit("LATE", "payload", d.Payload(), "ok", err == nil, "msg", fmt.Sprint(err))
	}
	if err := q.StartConsuming(int64(want), 20*time.Millisecond); err != nil {
		return procFail("start consuming: %v", err)
	}
	if _, err := q.AddConsumerFunc("zombie", consume); err != nil {
		return procFail("add consumer: %v", err)
	}
	procEmit("READY", "conn", first, "pid", os.Getpid())

	for cmd := range cmds {
		switch cmd {
		case "ACK":
			mu.Lock()
			mine := append([]Message(nil), held...)
			mu.Unlock()
			for _, d := range mine {
				err := d.AckContext(context.Background())
				msg := "<nil>"
				if err != nil {
					msg = err.Error()
				}
				procEmit("ACKRESULT", "payload", d.Payload(), "ok", err == nil,
					"notfound", errors.Is(err, ErrorNotFound), "lost", errors.Is(err, ErrorConnectionLost), "msg", msg)
			}
			lostSeen := false
			select {
			case <-lost:
				lostSeen = true
			case <-time.After(10 * time.Second):
			}
			// The connection goes on under a fresh name, by itself.
			renamed := false
			for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
				if c.Name() != first {
					renamed = true
					break
				}
			}
			_, oerr := c.OpenQueue("zombie-probe")
			procEmit("RESUMED", "lostSeen", lostSeen, "renamed", renamed, "conn", c.Name(),
				"stopped", c.isStopped(), "openErr", fmt.Sprint(oerr))
		case "EXIT":
			<-c.StopAllConsuming()
			mu.Lock()
			procEmit("SUMMARY", "held", len(held), "late", late)
			mu.Unlock()
			return 0
		default:
			procEmit("UNKNOWN", "cmd", cmd)
		}
	}
	return 0
}
