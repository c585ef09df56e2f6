package redq

// Process-level tests on real redis-server processes: a consumer process
// killed with SIGKILL while it holds deliveries, a consumer process paused
// with SIGSTOP past its heartbeat (a zombie), Redis itself restarted in the
// middle of a run, and a consumer process killed while another one keeps
// consuming. At the end of each, every published delivery was acked at
// least once and none is left anywhere. A last test makes what a Redis
// restart does by chance happen on purpose: a proxy loses the reply of a
// script that ran.
//
// The helper processes are this test binary, re-executed with
// REDQ_TEST_HELPER set (see process_helper_test.go).

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redq/redq/internal/redistest"
)

// procMsg is one protocol line of a helper.
type procMsg struct {
	kind   string
	fields map[string]string
	raw    string
}

func (m procMsg) get(k string) string { return m.fields[k] }

func (m procMsg) bool(k string) bool { return m.fields[k] == "true" }

func (m procMsg) int(k string) int {
	n, _ := strconv.Atoi(m.fields[k])
	return n
}

func parseProcLine(line string) (procMsg, bool) {
	parts := strings.Split(line, "\t")
	if len(parts) < 2 || parts[0] != procLinePrefix {
		return procMsg{}, false
	}
	m := procMsg{kind: parts[1], fields: map[string]string{}, raw: line}
	for _, p := range parts[2:] {
		k, v, ok := strings.Cut(p, "=")
		if !ok {
			return procMsg{}, false
		}
		s, err := strconv.Unquote(v)
		if err != nil {
			return procMsg{}, false
		}
		m.fields[k] = s
	}
	return m, true
}

// procLockedBuffer collects a helper's stderr.
type procLockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *procLockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *procLockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// procHelper is a running helper process.
type procHelper struct {
	t      testing.TB
	name   string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stderr procLockedBuffer
	done   chan struct{} // closed once the process was waited for

	mu      sync.Mutex
	partial []byte
	raw     []string
	msgs    []procMsg
	changed chan struct{} // closed and replaced on every new message
}

// Write receives the helper's stdout and splits it into lines.
func (h *procHelper) Write(p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.partial = append(h.partial, p...)
	for {
		i := bytes.IndexByte(h.partial, '\n')
		if i < 0 {
			break
		}
		line := string(h.partial[:i])
		h.partial = h.partial[i+1:]
		h.raw = append(h.raw, line)
		if m, ok := parseProcLine(line); ok {
			h.msgs = append(h.msgs, m)
			close(h.changed)
			h.changed = make(chan struct{})
		}
	}
	return len(p), nil
}

// procReadyTimeout bounds how long a helper may take to start and report
// READY: a race-enabled test binary that starts while other process tests
// run beside it (see docs/testing.md) on a machine of 2 cores can take
// many seconds.
const procReadyTimeout = 60 * time.Second

// startProcHelper starts the test binary as helper name with extra
// environment. The helper is killed (and resumed first, should it be
// stopped) when the test ends.
func startProcHelper(t *testing.T, name string, env map[string]string) *procHelper {
	t.Helper()
	skipShort(t, "runs consumers as processes and kills them")
	h := &procHelper{t: t, name: name, done: make(chan struct{}), changed: make(chan struct{})}
	cmd := exec.Command(os.Args[0], "-test.run=^$", "-test.timeout=5m")
	cmd.Env = append(os.Environ(), helperEnv+"="+name, procEnvLifetime+"=90s")
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		cmd.Env = append(cmd.Env, k+"="+env[k])
	}
	cmd.Stdout = h
	cmd.Stderr = &h.stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	h.cmd, h.stdin = cmd, stdin
	if err := cmd.Start(); err != nil {
		t.Fatalf("start helper %s: %v", name, err)
	}
	go func() {
		_ = cmd.Wait()
		close(h.done)
	}()
	t.Cleanup(func() {
		if !h.exited() {
			_ = cmd.Process.Signal(syscall.SIGCONT)
			_ = cmd.Process.Kill()
		}
		_ = h.stdin.Close()
		select {
		case <-h.done:
		case <-time.After(10 * time.Second):
			t.Errorf("helper %s (pid %d) did not go away after SIGKILL", name, cmd.Process.Pid)
		}
		if strings.Contains(h.stderr.String(), "DATA RACE") {
			t.Errorf("helper %s reported a data race:\n%s", name, h.stderr.String())
		}
		if t.Failed() {
			t.Logf("helper %s (pid %d) output:\n%s", name, cmd.Process.Pid, h.output())
		}
	})
	return h
}

func (h *procHelper) exited() bool {
	select {
	case <-h.done:
		return true
	default:
		return false
	}
}

func (h *procHelper) output() string {
	h.mu.Lock()
	out := strings.Join(h.raw, "\n")
	h.mu.Unlock()
	if e := strings.TrimSpace(h.stderr.String()); e != "" {
		if len(e) > 8000 {
			e = "..." + e[len(e)-8000:]
		}
		out += "\n--- stderr ---\n" + e
	}
	return out
}

// all returns the messages of a kind received so far.
func (h *procHelper) all(kind string) []procMsg {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []procMsg
	for _, m := range h.msgs {
		if m.kind == kind {
			out = append(out, m)
		}
	}
	return out
}

// await waits for a message of kind that satisfies pred (nil: any). It
// fails the test when the helper reports FATAL, exits first or the timeout
// passes.
func (h *procHelper) await(kind string, timeout time.Duration, pred func(procMsg) bool) procMsg {
	h.t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		h.mu.Lock()
		for _, m := range h.msgs {
			if m.kind == "FATAL" {
				h.mu.Unlock()
				h.t.Fatalf("helper %s failed: %s", h.name, m.get("msg"))
			}
			if m.kind == kind && (pred == nil || pred(m)) {
				h.mu.Unlock()
				return m
			}
		}
		changed := h.changed
		h.mu.Unlock()
		select {
		case <-changed:
		case <-h.done:
			// Wait has returned, so stdout was read to its end: look once more.
			h.mu.Lock()
			for _, m := range h.msgs {
				if m.kind == kind && (pred == nil || pred(m)) {
					h.mu.Unlock()
					return m
				}
			}
			h.mu.Unlock()
			h.t.Fatalf("helper %s exited (%v) before sending %s", h.name, h.cmd.ProcessState, kind)
		case <-deadline.C:
			h.t.Fatalf("helper %s did not send %s within %s", h.name, kind, timeout)
		}
	}
}

func (h *procHelper) send(cmd string) {
	h.t.Helper()
	if _, err := io.WriteString(h.stdin, cmd+"\n"); err != nil {
		h.t.Fatalf("send %s to helper %s: %v", cmd, h.name, err)
	}
}

func (h *procHelper) signal(sig syscall.Signal) {
	h.t.Helper()
	if err := h.cmd.Process.Signal(sig); err != nil {
		h.t.Fatalf("send %v to helper %s: %v", sig, h.name, err)
	}
}

// kill sends SIGKILL and waits until the process is gone.
func (h *procHelper) kill() {
	h.t.Helper()
	h.signal(syscall.SIGKILL)
	h.wait(10 * time.Second)
}

// wait waits for the process to exit and returns its exit code (-1 when a
// signal ended it).
func (h *procHelper) wait(timeout time.Duration) int {
	h.t.Helper()
	select {
	case <-h.done:
	case <-time.After(timeout):
		h.t.Fatalf("helper %s did not exit within %s", h.name, timeout)
	}
	return h.cmd.ProcessState.ExitCode()
}

// procAckFile reads a helper's ACKING/ACKED lines. A last line without its
// newline (cut by a kill) is ignored.
func procAckFile(t testing.TB, path string) (acking, acked map[string]bool) {
	t.Helper()
	acking, acked = map[string]bool{}, map[string]bool{}
	b, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return acking, acked
		}
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	for _, l := range lines[:len(lines)-1] { // the part after the last newline is cut or empty
		verb, payload, ok := strings.Cut(l, " ")
		switch {
		case ok && verb == "ACKING":
			acking[payload] = true
		case ok && verb == "ACKED":
			acked[payload] = true
		default:
			t.Fatalf("%s: bad line %q", path, l)
		}
	}
	return acking, acked
}

func procPayloads(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%05d", prefix, i)
	}
	return out
}

// procPublish publishes payloads in chunks.
func procPublish(t testing.TB, q Queue, payloads []string) {
	t.Helper()
	for len(payloads) > 0 {
		n := min(len(payloads), 500)
		if err := q.Publish(payloads[:n]...); err != nil {
			t.Fatal(err)
		}
		payloads = payloads[n:]
	}
}

// procWait polls cond every 10ms until it holds; it fails the test after
// timeout, with what() describing the current state.
func procWait(t testing.TB, timeout time.Duration, what string, cond func() bool, state func() string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			s := ""
			if state != nil {
				s = ": " + state()
			}
			t.Fatalf("timed out after %s waiting for %s%s", timeout, what, s)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// procEnv is the environment every helper needs.
func procEnv(srv *redistest.Server, ns, queue, tag string) map[string]string {
	return map[string]string{
		procEnvAddr:  srv.Addr(),
		procEnvNS:    ns,
		procEnvQueue: queue,
		procEnvTag:   tag,
	}
}

var procNSCounter atomic.Int64

// procNamespace returns a namespace of the test's own.
func procNamespace(t testing.TB) string {
	return fmt.Sprintf("proc%d-%d", os.Getpid(), procNSCounter.Add(1))
}

// procAcker consumes a queue in this process and acks everything,
// recording the payloads.
type procAcker struct {
	conn *redisConnection

	mu     sync.Mutex
	acked  map[string]int
	errors []string
}

func startProcAcker(t testing.TB, client redis.UniversalClient, ns, queue string) *procAcker {
	t.Helper()
	c, err := openConn(client, "rescuer", nil, WithNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	a := &procAcker{conn: c, acked: map[string]int{}}
	t.Cleanup(func() { a.stop(t) })
	q := openQueue(t, c, queue)
	if err := q.StartConsuming(100, 20*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 4; i++ {
		if _, err := q.AddConsumerFunc("rescue", func(dd Delivery) {
			d := dd.(Message)
			err := d.Ack()
			a.mu.Lock()
			defer a.mu.Unlock()
			if err != nil {
				a.errors = append(a.errors, fmt.Sprintf("%s: %v", d.Payload(), err))
				return
			}
			a.acked[d.Payload()]++
		}); err != nil {
			t.Fatal(err)
		}
	}
	return a
}

func (a *procAcker) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.acked)
}

func (a *procAcker) snapshot() (map[string]int, []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	m := make(map[string]int, len(a.acked))
	for k, v := range a.acked {
		m[k] = v
	}
	return m, append([]string(nil), a.errors...)
}

func (a *procAcker) stop(t testing.TB) {
	t.Helper()
	select {
	case <-a.conn.StopAllConsuming():
	case <-time.After(20 * time.Second):
		t.Errorf("StopAllConsuming of %s did not finish within 20s", a.conn.Name())
	}
}

// procQueueState describes a queue for failure messages.
func procQueueState(c Connection, queue string) string {
	s, err := c.CollectStats([]string{queue})
	if err != nil {
		return "stats: " + err.Error()
	}
	return "\n" + s.String()
}

// procWantEmpty asserts that nothing of the queue is left in Redis: no
// ready, rejected or unacked deliveries, no unacked storage of any
// connection, and a cleaner finds nothing to return. What may stay: the
// registrations, the counters (the meta hash, holding nothing but them:
// no pause, no stale keyed stubs; only Destroy deletes them, see
// TestDestroyClearsPauseAndCounters), and the records that answer
// repeated calls of dead connections, which must be on their way out (a
// TTL).
// procCounterField matches the fields of the counters in a queue's meta
// hash (see tally in scripts/lib.lua).
var procCounterField = regexp.MustCompile(`^(n[part]|[mpart][0-9]+|lm|expired)$`)

func procWantEmpty(t testing.TB, client redis.UniversalClient, admin Connection, ns, queue string) {
	t.Helper()
	wantCounts(t, admin, queue, 0, 0, 0)
	if n, err := NewCleaner(admin).Clean(); err != nil || n != 0 {
		t.Errorf("final clean = %d, %v; want 0, nil", n, err)
	}
	k := newQueueKeys(ns, queue)
	keys, err := client.Keys(context.Background(), k.prefix+":*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range keys {
		if key == k.meta() {
			m, _ := client.HGetAll(context.Background(), key).Result()
			for f, v := range m {
				if !procCounterField.MatchString(f) && (f != "kstale" || v != "0") {
					t.Errorf("the meta hash holds %s=%q, not a counter", f, v)
				}
			}
			continue
		}
		if key == k.consumers || key == k.prefix+":seq" || key == k.prefix+":fence" || key == k.prefix+":kver" || key == k.pub() {
			continue
		}
		rest := strings.TrimPrefix(key, k.prefix+":")
		bookkeeping := strings.HasPrefix(rest, "replies:") || strings.HasPrefix(rest, "done:") || strings.HasPrefix(rest, "published:")
		if ttl := client.PTTL(context.Background(), key).Val(); bookkeeping && ttl > 0 {
			continue
		}
		typ, _ := client.Type(context.Background(), key).Result()
		content := ""
		if typ == "hash" {
			m, _ := client.HGetAll(context.Background(), key).Result()
			content = fmt.Sprintf(" holding %q", m)
		}
		t.Errorf("key %s (%s) is left in Redis%s", key, typ, content)
	}
}

// procCoverage checks that every payload was acked: by someone for sure
// (acked sets) or, for at most maxAmbiguous payloads, by a killed process
// whose ack may have reached Redis before it died (its ACKING line is there,
// its ACKED line is not; since Redis ends empty, the ack did reach Redis).
func procCoverage(t testing.TB, payloads []string, ambiguous map[string]bool, maxAmbiguous int, acked ...map[string]bool) {
	t.Helper()
	var missing []string
	usedAmbiguous := 0
	for _, p := range payloads {
		found := false
		for _, set := range acked {
			if set[p] {
				found = true
				break
			}
		}
		if !found && ambiguous[p] {
			found = true
			usedAmbiguous++
		}
		if !found {
			missing = append(missing, p)
		}
	}
	if len(missing) > 0 {
		t.Errorf("%d of %d payloads were never acked (lost), e.g. %v", len(missing), len(payloads), missing[:min(len(missing), 10)])
	}
	if usedAmbiguous > maxAmbiguous {
		t.Errorf("%d payloads are covered only by an unconfirmed ack of the killed process; at most %d may be", usedAmbiguous, maxAmbiguous)
	}
}

func procKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// TestProcessCrashSIGKILL: a consumer process acks some deliveries, holds
// the rest of what it fetched and is killed with SIGKILL. Once its
// heartbeat lapsed, a cleaner returns exactly what it held, and a consumer
// here acks all of it.
func TestProcessCrashSIGKILL(t *testing.T) {
	t.Parallel() // own redis-server or cluster; see docs/testing.md
	const (
		n         = 2000
		ackFirst  = 300
		consumers = 4
		prefetch  = 500
		queue     = "jobs"
	)
	srv := redistest.Start(t)
	client := srv.Client(t)
	ns := procNamespace(t)
	admin, err := openConn(client, "admin", nil, WithNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { <-admin.StopAllConsuming() })
	q := openQueue(t, admin, queue)
	payloads := procPayloads("job", n)
	procPublish(t, q, payloads)

	ackFile := filepath.Join(t.TempDir(), "acks")
	env := procEnv(srv, ns, queue, "crash")
	env[procEnvPrefetch] = strconv.Itoa(prefetch)
	env[procEnvConsumers] = strconv.Itoa(consumers)
	env[procEnvAckLimit] = strconv.Itoa(ackFirst)
	env[procEnvHBInterval] = "100ms"
	env[procEnvHBTTL] = "1s"
	env[procEnvAckFile] = ackFile
	child := startProcHelper(t, "consume", env)
	childConn := child.await("READY", procReadyTimeout, nil).get("conn")
	heldMsg := child.await("HELD", 60*time.Second, nil)
	if got := heldMsg.int("acked"); got != ackFirst {
		t.Fatalf("child acked %d before holding, want %d", got, ackFirst)
	}

	// The child holds one delivery per consumer plus its prefetch buffer,
	// which it fills up and then stops fetching: wait for that to settle.
	var unacked int64
	procWait(t, 20*time.Second, "the child's unacked count to settle", func() bool {
		before := mustStats(t, admin, queue).QueueStats[queue].Connections[childConn].UnackedCount
		time.Sleep(200 * time.Millisecond)
		unacked = mustStats(t, admin, queue).QueueStats[queue].Connections[childConn].UnackedCount
		return unacked > 0 && unacked == before
	}, func() string { return procQueueState(admin, queue) })
	ready, rejected, total := counts(t, admin, queue)
	if total != unacked || rejected != 0 || ready+unacked != n-ackFirst {
		t.Fatalf("before the kill: ready/rejected/unacked = %d/%d/%d, child holds %d; want ready+unacked = %d",
			ready, rejected, total, unacked, n-ackFirst)
	}
	t.Logf("child %s acked %d and holds %d unacked; %d ready", childConn, ackFirst, unacked, ready)

	child.kill()
	killedAt := time.Now()

	// The child's deliveries stay its own until its heartbeat lapses.
	procWait(t, 10*time.Second, "the killed child's heartbeat to lapse", func() bool {
		cs, ok := mustStats(t, admin, queue).QueueStats[queue].Connections[childConn]
		return ok && !cs.Active
	}, func() string { return procQueueState(admin, queue) })
	t.Logf("heartbeat lapsed %v after the kill", time.Since(killedAt).Round(time.Millisecond))
	if got := mustStats(t, admin, queue).QueueStats[queue].Connections[childConn].UnackedCount; got != unacked {
		t.Fatalf("the dead child's unacked count changed from %d to %d", unacked, got)
	}

	returned, err := NewCleaner(admin).Clean()
	if err != nil {
		t.Fatal(err)
	}
	if returned != unacked {
		t.Fatalf("cleaner returned %d, the child held %d", returned, unacked)
	}
	if again, err := NewCleaner(admin).Clean(); err != nil || again != 0 {
		t.Fatalf("second clean = %d, %v; want 0", again, err)
	}
	st := mustStats(t, admin, queue).QueueStats[queue]
	if _, still := st.Connections[childConn]; still || st.ReadyCount != n-ackFirst || st.UnackedCount() != 0 {
		t.Fatalf("after clean: %s", procQueueState(admin, queue))
	}

	acker := startProcAcker(t, client, ns, queue)
	procWait(t, 30*time.Second, "the parent to ack the rest", func() bool { return acker.count() >= n-ackFirst },
		func() string { return fmt.Sprintf("acked %d; %s", acker.count(), procQueueState(admin, queue)) })
	acker.stop(t)

	parentAcked, ackErrs := acker.snapshot()
	if len(ackErrs) > 0 {
		t.Errorf("parent acks failed: %v", ackErrs)
	}
	_, childAcked := procAckFile(t, ackFile)
	if len(childAcked) != ackFirst {
		t.Errorf("child's ack file lists %d acks, want %d", len(childAcked), ackFirst)
	}
	parentSet := map[string]bool{}
	for p, c := range parentAcked {
		parentSet[p] = true
		if c != 1 {
			t.Errorf("parent acked %s %d times", p, c)
		}
		if childAcked[p] {
			t.Errorf("%s was acked by the child before the kill and delivered again", p)
		}
	}
	procCoverage(t, payloads, nil, 0, parentSet, childAcked)
	if len(parentSet)+len(childAcked) != n {
		t.Errorf("parent acked %d, child %d: %d in all, want %d", len(parentSet), len(childAcked), len(parentSet)+len(childAcked), n)
	}
	procWantEmpty(t, client, admin, ns, queue)
}

// TestProcessZombieSIGSTOP: a consumer process that holds deliveries is
// paused (SIGSTOP) past its heartbeat TTL; a cleaner returns its
// deliveries and a consumer here acks them. When it resumes (SIGCONT), its
// acks must say the deliveries are no longer its own and its error channel
// must say the connection was lost; it must not stop, but go on under a
// fresh registration and consume what is published afterwards.
func TestProcessZombieSIGSTOP(t *testing.T) {
	t.Parallel() // own redis-server or cluster; see docs/testing.md
	const (
		m      = 50
		extra  = 20
		queue  = "jobs"
		hbTTL  = 500 * time.Millisecond
		hbTick = 50 * time.Millisecond
	)
	srv := redistest.Start(t)
	client := srv.Client(t)
	ns := procNamespace(t)
	admin, err := openConn(client, "admin", nil, WithNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { <-admin.StopAllConsuming() })
	q := openQueue(t, admin, queue)
	payloads := procPayloads("job", m)
	procPublish(t, q, payloads)

	env := procEnv(srv, ns, queue, "zombie")
	env[procEnvHold] = strconv.Itoa(m)
	env[procEnvHBInterval] = hbTick.String()
	env[procEnvHBTTL] = hbTTL.String()
	child := startProcHelper(t, "zombie", env)
	childConn := child.await("READY", procReadyTimeout, nil).get("conn")
	child.await("HELD", 60*time.Second, nil)
	st := mustStats(t, admin, queue).QueueStats[queue]
	if cs := st.Connections[childConn]; !cs.Active || cs.UnackedCount != m || st.ReadyCount != 0 {
		t.Fatalf("before the pause: %s", procQueueState(admin, queue))
	}

	child.signal(syscall.SIGSTOP)
	t.Cleanup(func() { _ = child.cmd.Process.Signal(syscall.SIGCONT) })
	pausedAt := time.Now()
	procWait(t, 10*time.Second, "the paused child's heartbeat to lapse", func() bool {
		cs, ok := mustStats(t, admin, queue).QueueStats[queue].Connections[childConn]
		return ok && !cs.Active
	}, func() string { return procQueueState(admin, queue) })
	if d := time.Since(pausedAt); d < hbTTL-2*hbTick {
		t.Fatalf("heartbeat lapsed %v after the pause, before its TTL %v", d, hbTTL)
	}
	returned, err := NewCleaner(admin).Clean()
	if err != nil || returned != m {
		t.Fatalf("clean = %d, %v; want %d", returned, err, m)
	}
	st = mustStats(t, admin, queue).QueueStats[queue]
	if _, still := st.Connections[childConn]; still || st.ReadyCount != m {
		t.Fatalf("after clean: %s", procQueueState(admin, queue))
	}

	// Somebody else does the work while the zombie sleeps.
	acker := startProcAcker(t, client, ns, queue)
	procWait(t, 20*time.Second, "the parent to ack the returned deliveries", func() bool { return acker.count() >= m },
		func() string { return procQueueState(admin, queue) })
	acker.stop(t)
	rescued, ackErrs := acker.snapshot()
	if len(ackErrs) > 0 {
		t.Fatalf("parent acks failed: %v", ackErrs)
	}
	wantCounts(t, admin, queue, 0, 0, 0)

	// Wake the zombie and publish more at once: it takes them, under a
	// fresh registration only.
	child.signal(syscall.SIGCONT)
	extras := procPayloads("extra", extra)
	procPublish(t, q, extras)
	child.send("ACK")
	resumed := child.await("RESUMED", 30*time.Second, nil)

	results := child.all("ACKRESULT")
	if len(results) != m {
		t.Errorf("zombie reported %d ack results, want %d", len(results), m)
	}
	for _, r := range results {
		if r.bool("ok") || !r.bool("notfound") || !r.bool("lost") {
			t.Errorf("zombie's ack of %s: %s; want an error matching ErrorNotFound and ErrorConnectionLost", r.get("payload"), r.get("msg"))
		}
	}
	lostErrs := 0
	for _, e := range child.all("ERROR") {
		if e.bool("lost") && strings.Contains(e.get("msg"), childConn) && strings.Contains(e.get("msg"), resumed.get("conn")) {
			lostErrs++
		}
	}
	if lostErrs == 0 || !resumed.bool("lostSeen") {
		t.Errorf("zombie's error channel got no ErrorConnectionLost naming the old and the new name (errors: %v)", child.all("ERROR"))
	}
	if !resumed.bool("renamed") || resumed.get("conn") == childConn || resumed.bool("stopped") || resumed.get("openErr") != "<nil>" {
		t.Errorf("zombie did not go on under a fresh registration: %s", resumed.raw)
	}
	procWait(t, 20*time.Second, "the zombie to consume the extras", func() bool { return len(child.all("LATE")) >= extra },
		func() string { return procQueueState(admin, queue) })
	later := map[string]int{}
	for _, l := range child.all("LATE") {
		if !l.bool("ok") {
			t.Errorf("zombie's ack of %s under its fresh registration: %s", l.get("payload"), l.get("msg"))
		}
		if !strings.HasPrefix(l.get("payload"), "extra") {
			t.Errorf("zombie was handed %s, which it held before it was declared dead", l.get("payload"))
		}
		later[l.get("payload")]++
	}
	child.send("EXIT")
	summary := child.await("SUMMARY", 30*time.Second, nil)
	if code := child.wait(20 * time.Second); code != 0 {
		t.Errorf("zombie exited with %d", code)
	}
	if summary.int("held") != m || summary.int("late") != extra {
		t.Errorf("zombie summary %s; want held %d, late %d", summary.raw, m, extra)
	}
	st = mustStats(t, admin, queue).QueueStats[queue]
	if st.ReadyCount != 0 || st.UnackedCount() != 0 || st.RejectedCount != 0 {
		t.Fatalf("after the zombie exited: %s", procQueueState(admin, queue))
	}
	if _, still := st.Connections[childConn]; still {
		t.Errorf("the zombie's old registration is registered for the queue again: %s", procQueueState(admin, queue))
	}
	all := map[string]bool{}
	for _, set := range []map[string]int{rescued, later} {
		for p, c := range set {
			if c != 1 || all[p] {
				t.Errorf("%s acked more than once", p)
			}
			all[p] = true
		}
	}
	procCoverage(t, append(append([]string(nil), payloads...), extras...), nil, 0, all)
	if len(all) != m+extra {
		t.Errorf("acked %d distinct payloads, want %d", len(all), m+extra)
	}
	procWantEmpty(t, client, admin, ns, queue)
}

// TestProcessRedisRestartMidRun: consumers work through a queue while the
// Redis server goes away and comes back with its append-only file (fsync
// always, so nothing Redis answered is lost):
//   - stop: a graceful shutdown (SIGTERM) and 3s without Redis;
//   - kill: SIGKILL and 3s without Redis;
//   - blips: ten quick graceful restarts, as a failover or an operator's
//     restarts look to a client.
//
// The outages of stop and kill outlast go-redis's own dial and command
// retries (about 2s), so they reach the error channel as HeartbeatErrors
// or ConsumeErrors with a count; the connection is never given up. After
// each, consumers resume and every delivery is acked by them; after the
// connection stopped, a cleaner finds nothing and Redis holds nothing.
func TestProcessRedisRestartMidRun(t *testing.T) {
	t.Parallel() // own redis-server or cluster; see docs/testing.md
	skipShort(t, "restarts Redis under consumer processes")
	for _, how := range []string{"stop", "kill", "blips"} {
		t.Run(how, func(t *testing.T) { procRestartScenario(t, how) })
	}
}

func procRestartScenario(t *testing.T, how string) {
	const (
		consumers = 4
		queue     = "jobs"
		downtime  = 3 * time.Second
		blips     = 10
	)
	n, prefetch := 5000, int64(50)
	if how == "blips" {
		n, prefetch = 8000, 5 // fetch often, so that restarts meet fetches
	}
	srv := redistest.Start(t, redistest.WithAppendOnly())
	t.Cleanup(func() {
		if t.Failed() {
			log, _ := os.ReadFile(filepath.Join(srv.Dir(), "redis.log"))
			t.Logf("redis log (last 3000 bytes):\n%s", log[max(0, len(log)-3000):])
		}
	})
	client := srv.Client(t)
	ns := procNamespace(t)
	admin, err := openConn(client, "admin", nil, WithNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { <-admin.StopAllConsuming() })
	payloads := procPayloads("job", n)
	procPublish(t, openQueue(t, admin, queue), payloads)

	errs := make(chan error, 100000)
	var errMu sync.Mutex
	var seen []error
	errsDone := make(chan struct{})
	go func() {
		defer close(errsDone)
		for err := range errs {
			errMu.Lock()
			seen = append(seen, err)
			errMu.Unlock()
		}
	}()
	// The TTL is far longer than the outage: the connection must survive
	// it, and so must the deliveries it holds.
	conn, err := openConn(client, "worker", errs, WithNamespace(ns),
		WithHeartbeat(200*time.Millisecond, 30*time.Second), WithHeartbeatErrorLimit(1000))
	if err != nil {
		t.Fatal(err)
	}
	stopConn := sync.OnceFunc(func() {
		select {
		case <-conn.StopAllConsuming():
		case <-time.After(20 * time.Second):
			t.Errorf("StopAllConsuming did not finish within 20s")
		}
	})
	t.Cleanup(stopConn)

	var mu sync.Mutex
	handed := map[string]bool{} // given to a consumer
	acked := map[string]int{}
	var ackErrs []string
	lastAck := time.Now()
	q := openQueue(t, conn, queue)
	if err := q.StartConsuming(prefetch, 50*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < consumers; i++ {
		if _, err := q.AddConsumerFunc("w", func(dd Delivery) {
			d := dd.(Message)
			mu.Lock()
			handed[d.Payload()] = true
			mu.Unlock()
			time.Sleep(time.Millisecond)
			err := d.Ack()
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				ackErrs = append(ackErrs, fmt.Sprintf("%s: %v (ErrorNotFound %v, ErrorConnectionLost %v)",
					d.Payload(), err, errors.Is(err, ErrorNotFound), errors.Is(err, ErrorConnectionLost)))
				return
			}
			acked[d.Payload()]++
			lastAck = time.Now()
		}); err != nil {
			t.Fatal(err)
		}
	}
	ackedCount := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(acked)
	}
	settledCount := func() int { // acked, or the Ack returned (an error)
		mu.Lock()
		defer mu.Unlock()
		return len(acked) + len(ackErrs)
	}

	procWait(t, 30*time.Second, "a tenth of the work to be done", func() bool { return ackedCount() >= n/10 }, nil)
	atOutage := ackedCount()
	began := time.Now()
	switch how {
	case "stop":
		srv.Stop()
		time.Sleep(downtime)
		srv.Restart(t)
	case "kill":
		srv.Kill()
		time.Sleep(downtime)
		srv.Restart(t)
	case "blips":
		for i := 0; i < blips; i++ {
			time.Sleep(100 * time.Millisecond)
			srv.Restart(t)
		}
	}
	atRestart := ackedCount()
	t.Logf("Redis %s at %d acked, back at %d acked after %v", how, atOutage, atRestart, time.Since(began).Round(time.Millisecond))
	if atRestart >= n {
		t.Fatalf("all work was done before Redis came back; the outage proves nothing")
	}

	// Wait for all to be acked. Give up once ready is empty and nothing
	// was acked for 2s: consumers are idle, so whatever is not acked by
	// then is stuck.
	stalled := false
	for settledCount() < n {
		mu.Lock()
		idle := time.Since(lastAck)
		mu.Unlock()
		if idle > 2*time.Second {
			// Right after a restart go-redis may still answer with the
			// last dial error for a moment (it redials in the background),
			// so a failed read only means "not yet".
			s, err := admin.CollectStats([]string{queue})
			if err == nil && s.QueueStats[queue].ReadyCount == 0 || idle > 20*time.Second {
				stalled = true
				break
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	var liveUnacked int64
	if stalled {
		liveUnacked = mustStats(t, admin, queue).QueueStats[queue].Connections[conn.Name()].UnackedCount
	}
	finished := settledCount()
	stopConn()

	// Whatever the stopped connection still holds in Redis was fetched but
	// never handed to a consumer (StopAllConsuming returned its buffer).
	stranded, err := client.HVals(context.Background(), newQueueKeys(ns, queue).unacked(conn.Name())).Result()
	if err != nil {
		t.Fatal(err)
	}
	if stalled || len(stranded) > 0 {
		mu.Lock()
		var strandedPayloads []string
		everHanded := 0
		for _, s := range stranded {
			env, _ := decodeEnvelope(s)
			strandedPayloads = append(strandedPayloads, env.payload)
			if handed[env.payload] {
				everHanded++
			}
		}
		mu.Unlock()
		sort.Strings(strandedPayloads)
		t.Errorf("LIBRARY BUG: consumers stalled at %d of %d settled (stalled=%v); the live connection held %d unacked deliveries that no consumer had; "+
			"after StopAllConsuming %d deliveries are still in its unacked hash and %d of them were ever handed to a consumer (e.g. %v). "+
			"A fetch whose reply was lost when Redis went away moved them from ready to the connection's unacked hash; the connection "+
			"never learns of them and nothing returns them while it lives",
			finished, n, stalled, liveUnacked, len(stranded), everHanded, strandedPayloads[:min(len(strandedPayloads), 10)])
	}

	// The outage reached the error channel as counted background errors,
	// and the connection was never given up.
	errMu.Lock()
	var outage, lost int
	kinds := map[string]int{}
	for _, err := range seen {
		kinds[fmt.Sprintf("%T", err)]++
		var he *HeartbeatError
		var ce *ConsumeError
		if (errors.As(err, &he) && he.Count >= 1) || (errors.As(err, &ce) && ce.Count >= 1) {
			outage++
		}
		if errors.Is(err, ErrorConnectionLost) {
			lost++
		}
	}
	errMu.Unlock()
	t.Logf("errors reported: %v", kinds)
	if outage == 0 && how != "blips" { // go-redis's own retries may hide short blips
		t.Errorf("no HeartbeatError or ConsumeError reached the error channel during the outage (got %v)", kinds)
	}
	if lost > 0 {
		t.Errorf("the connection was declared lost %d times during a short outage", lost)
	}

	// The connection stopped: a cleaner returns whatever it still held, and
	// a sweeper acks that, so that no delivery is lost in the end.
	returned, err := NewCleaner(admin).Clean()
	if err != nil {
		t.Fatal(err)
	}
	if returned != int64(len(stranded)) {
		t.Errorf("the cleaner returned %d deliveries of the stopped connection, which held %d", returned, len(stranded))
	}
	swept := map[string]int{}
	if ready, _, _ := counts(t, admin, queue); ready > 0 {
		sweeper := startProcAcker(t, client, ns, queue)
		procWait(t, 20*time.Second, "the sweeper to ack what was left", func() bool {
			r, _, u := counts(t, admin, queue)
			return r == 0 && u == 0
		}, func() string { return procQueueState(admin, queue) })
		sweeper.stop(t)
		var sweepErrs []string
		swept, sweepErrs = sweeper.snapshot()
		if len(sweepErrs) > 0 {
			t.Errorf("sweeper acks failed: %v", sweepErrs)
		}
	}

	mu.Lock()
	workerSet := map[string]bool{}
	dups := 0
	for p, c := range acked {
		workerSet[p] = true
		if c > 1 {
			dups++
		}
	}
	errsCopy := append([]string(nil), ackErrs...)
	mu.Unlock()
	if len(errsCopy) > 0 {
		// The only owner acked a delivery it held; the delivery is gone, so
		// the ack did its work, yet it did not return nil.
		t.Errorf("LIBRARY BUG: %d acks by the delivery's only owner returned an error (the deliveries are gone from Redis), e.g. %v",
			len(errsCopy), errsCopy[:min(len(errsCopy), 5)])
	}
	if dups > 0 {
		t.Logf("%d payloads were acked more than once by the worker", dups)
	}
	sweptSet := map[string]bool{}
	for p := range swept {
		sweptSet[p] = true
	}
	if len(sweptSet) > 0 {
		t.Logf("the sweeper acked %d deliveries the worker never got: %v", len(sweptSet), procKeys(sweptSet)[:min(len(sweptSet), 10)])
	}
	// Acks that returned an error removed their deliveries too (checked by
	// the final emptiness): count them as acked, to tell loss apart.
	errored := map[string]bool{}
	for _, e := range errsCopy {
		p, _, _ := strings.Cut(e, ":")
		errored[p] = true
	}
	procCoverage(t, payloads, errored, len(errored), workerSet, sweptSet)
	close(errs)
	<-errsDone
	procWantEmpty(t, client, admin, ns, queue)
}

// TestProcessKilledWhileAnotherConsumes: two consumer processes share a
// queue; one is killed mid-run while a cleaner runs every 200ms here. The
// survivor finishes everything, including what the killed one held.
func TestProcessKilledWhileAnotherConsumes(t *testing.T) {
	t.Parallel() // own redis-server or cluster; see docs/testing.md
	const (
		n         = 3000
		consumers = 2
		queue     = "jobs"
	)
	srv := redistest.Start(t)
	client := srv.Client(t)
	ns := procNamespace(t)
	admin, err := openConn(client, "admin", nil, WithNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { <-admin.StopAllConsuming() })
	payloads := procPayloads("job", n)

	// A cleaner runs all along, also while both workers are alive: it must
	// never touch a live connection's deliveries.
	var cleanMu sync.Mutex
	var cleaned int64
	var cleanErrs []error
	stopCleaner := make(chan struct{})
	cleanerDone := make(chan struct{})
	go func() {
		defer close(cleanerDone)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		cl := NewCleaner(admin)
		for {
			select {
			case <-stopCleaner:
				return
			case <-tick.C:
			}
			n, err := cl.Clean()
			cleanMu.Lock()
			cleaned += n
			if err != nil {
				cleanErrs = append(cleanErrs, err)
			}
			cleanMu.Unlock()
		}
	}()
	haltCleaner := sync.OnceFunc(func() { close(stopCleaner); <-cleanerDone })
	t.Cleanup(haltCleaner)
	cleanedSoFar := func() int64 {
		cleanMu.Lock()
		defer cleanMu.Unlock()
		return cleaned
	}

	dir := t.TempDir()
	start := func(tag string) (*procHelper, string, string) {
		env := procEnv(srv, ns, queue, tag)
		env[procEnvPrefetch] = "50"
		env[procEnvConsumers] = strconv.Itoa(consumers)
		env[procEnvSleep] = "2ms"
		env[procEnvHBInterval] = "100ms"
		env[procEnvHBTTL] = "2s"
		env[procEnvAckFile] = filepath.Join(dir, tag)
		h := startProcHelper(t, "consume", env)
		return h, h.await("READY", procReadyTimeout, nil).get("conn"), env[procEnvAckFile]
	}
	victim, victimConn, victimFile := start("victim")
	survivor, survivorConn, survivorFile := start("survivor")
	// Published once both consume: published before, the victim could
	// drain all of it while the survivor's process was still starting (a
	// loaded machine takes seconds to start a race-enabled binary).
	procPublish(t, openQueue(t, admin, queue), payloads)

	victim.await("PROGRESS", 30*time.Second, func(m procMsg) bool { return m.int("acked") >= 300 })
	survivor.await("PROGRESS", 30*time.Second, nil)
	victim.kill()
	killedAt := time.Now()
	if got := cleanedSoFar(); got != 0 {
		t.Fatalf("the cleaner returned %d deliveries while both workers were alive", got)
	}
	// Whatever the dead victim held is frozen now (its last commands have
	// long reached Redis, its heartbeat has not lapsed yet).
	time.Sleep(200 * time.Millisecond)
	st := mustStats(t, admin, queue).QueueStats[queue]
	vs, ok := st.Connections[victimConn]
	if !ok || !vs.Active {
		t.Fatalf("victim's connection should still look alive: %s", procQueueState(admin, queue))
	}
	if cleanedSoFar() != 0 {
		t.Fatalf("the cleaner returned deliveries of a connection whose heartbeat is alive")
	}
	victimHeld := vs.UnackedCount
	t.Logf("victim killed holding %d unacked; %d ready", victimHeld, st.ReadyCount)
	if st.ReadyCount == 0 {
		t.Logf("ready was empty at the kill: the survivor had little left to do")
	}

	procWait(t, 45*time.Second, "the survivor to finish everything", func() bool {
		st := mustStats(t, admin, queue).QueueStats[queue]
		_, victimStill := st.Connections[victimConn]
		return !victimStill && st.ReadyCount == 0 && st.UnackedCount() == 0 && st.RejectedCount == 0
	}, func() string { return fmt.Sprintf("cleaned %d; %s", cleanedSoFar(), procQueueState(admin, queue)) })
	t.Logf("the survivor finished everything %v after the kill", time.Since(killedAt).Round(time.Millisecond))
	haltCleaner()
	cleanMu.Lock()
	if len(cleanErrs) > 0 {
		t.Errorf("cleaner errors: %v", cleanErrs)
	}
	if cleaned != victimHeld {
		t.Errorf("the cleaner returned %d deliveries, the victim held %d", cleaned, victimHeld)
	}
	cleanMu.Unlock()

	survivor.send("STOP")
	survivor.await("STOPPED", 30*time.Second, nil)
	if code := survivor.wait(20 * time.Second); code != 0 {
		t.Errorf("survivor exited with %d", code)
	}
	if st := mustStats(t, admin, queue).QueueStats[queue]; st.Connections[survivorConn].UnackedCount != 0 {
		t.Errorf("the survivor still holds deliveries after it stopped: %s", procQueueState(admin, queue))
	}
	if errs := append(victim.all("ACKERR"), survivor.all("ACKERR")...); len(errs) > 0 {
		t.Errorf("acks failed: %v", errs)
	}
	if errs := survivor.all("ERROR"); len(errs) > 0 {
		t.Errorf("the survivor's error channel got %v", errs)
	}

	vAcking, vAcked := procAckFile(t, victimFile)
	sAcking, sAcked := procAckFile(t, survivorFile)
	ambiguous := map[string]bool{}
	for p := range vAcking {
		if !vAcked[p] {
			ambiguous[p] = true
		}
	}
	if len(ambiguous) > consumers {
		t.Errorf("the victim was in the middle of %d acks at the kill, but has only %d consumers: %v", len(ambiguous), consumers, procKeys(ambiguous))
	}
	for p := range sAcking {
		if !sAcked[p] {
			t.Errorf("the survivor started acking %s but never finished", p)
		}
	}
	for p := range vAcked {
		if sAcked[p] {
			t.Errorf("%s was acked by the victim (its Ack returned nil) and delivered again", p)
		}
	}
	t.Logf("victim acked %d (%d unconfirmed at the kill), survivor acked %d, cleaner returned %d",
		len(vAcked), len(ambiguous), len(sAcked), victimHeld)
	procCoverage(t, payloads, ambiguous, consumers, vAcked, sAcked)
	procWantEmpty(t, client, admin, ns, queue)
}

// procScriptPatterns are what a request running the script contains (its
// SHA; procLoadScripts makes sure every call is an EVALSHA).
func procScriptPatterns(sc *redis.Script) []string { return []string{sc.Hash()} }

// procLoadScripts loads every script into Redis, so that a request whose
// reply is lost is one that ran, not one refused with NOSCRIPT.
func procLoadScripts(t testing.TB, client redis.UniversalClient) {
	t.Helper()
	all := []*redis.Script{scripts.register, scripts.heartbeat, scripts.declareDead, scripts.setConsumers,
		scripts.fetch, scripts.settle, scripts.ack, scripts.fireAck, scripts.returnUnacked, scripts.returnRejected, scripts.purge,
		scripts.publish, scripts.put, scripts.release, scripts.touch, scripts.rejectWith, scripts.maintain,
		scripts.counts, scripts.drain, scripts.upsert, scripts.keyedCancel, scripts.keyedRunNow, scripts.keyedLookup,
		scripts.roundAdd, scripts.roundRemove, scripts.roundReissue, scripts.roundNext, scripts.roundOpen}
	for _, sc := range all {
		if err := sc.Load(context.Background(), client).Err(); err != nil {
			t.Fatalf("load script %s: %v", sc.Hash(), err)
		}
	}
}

// TestProcessLostRepliesAreHarmless: Redis runs a script but its reply
// never reaches the client (Redis restarted, a connection broke). The
// restart test above meets this by chance; here a proxy makes it happen on
// purpose. A lost fetch reply must not leave deliveries with a live
// connection that never hands them to a consumer, and an Ack whose reply
// was lost must still return nil: the delivery is gone, and no one but its
// owner could have removed it.
func TestProcessLostRepliesAreHarmless(t *testing.T) {
	srv := redistest.Start(t)
	direct := srv.Client(t)
	procLoadScripts(t, direct)

	setup := func(t *testing.T) (admin, worker *redisConnection, p *procProxy, ns string) {
		ns = procNamespace(t)
		p = startProcProxy(t, srv.Addr())
		proxied := redis.NewClient(&redis.Options{Addr: p.addr()})
		t.Cleanup(func() { proxied.Close() })
		var err error
		admin, err = openConn(direct, "admin", nil, WithNamespace(ns))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { <-admin.StopAllConsuming() })
		worker, err = openConn(proxied, "worker", nil, WithNamespace(ns))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { <-worker.StopAllConsuming() })
		return admin, worker, p, ns
	}

	t.Run("fetch", func(t *testing.T) {
		const n = 10
		admin, worker, p, ns := setup(t)
		procPublish(t, openQueue(t, admin, "jobs"), procPayloads("job", n))
		var mu sync.Mutex
		acked := map[string]bool{}
		q := openQueue(t, worker, "jobs")
		p.arm(procScriptPatterns(scripts.fetch)...)
		if err := q.StartConsuming(n, 50*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		if _, err := q.AddConsumerFunc("w", func(dd Delivery) {
			d := dd.(Message)
			if err := d.Ack(); err != nil {
				t.Errorf("ack %s: %v", d.Payload(), err)
				return
			}
			mu.Lock()
			acked[d.Payload()] = true
			mu.Unlock()
		}); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(5 * time.Second)
		for {
			mu.Lock()
			got := len(acked)
			mu.Unlock()
			if got == n {
				break
			}
			if time.Now().After(deadline) {
				st := mustStats(t, admin, "jobs").QueueStats["jobs"]
				held, _ := direct.HLen(context.Background(), newQueueKeys(ns, "jobs").unacked(worker.Name())).Result()
				t.Fatalf("LIBRARY BUG: the reply of one fetch was lost (proxy trips: %d); after 5s the consumer acked %d of %d, "+
					"ready is %d, and the live connection %s holds %d deliveries in Redis that it never handed to a consumer, "+
					"and nothing returns them while it lives",
					p.trips(), got, n, st.ReadyCount, worker.Name(), held)
			}
			time.Sleep(10 * time.Millisecond)
		}
		if p.trips() != 1 {
			t.Fatalf("the proxy lost %d replies, want 1", p.trips())
		}
		wantCounts(t, admin, "jobs", 0, 0, 0)
	})

	// The reply of the fetch under way when consuming stops is lost: the
	// deliveries it took must go back to ready with the buffered ones, not
	// stay with the stopped connection until a cleaner comes.
	t.Run("fetch at stop", func(t *testing.T) {
		const n = 10
		admin, _, p, ns := setup(t)
		// go-redis does not send the fetch again itself (as after a read
		// timeout): the fetch fails, with consuming stopping.
		proxied := redis.NewClient(&redis.Options{Addr: p.addr(), MaxRetries: -1})
		t.Cleanup(func() { proxied.Close() })
		worker, err := openConn(proxied, "worker", nil, WithNamespace(ns))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { <-worker.StopAllConsuming() })
		procPublish(t, openQueue(t, admin, "jobs"), procPayloads("job", n))
		q := openQueue(t, worker, "jobs")
		p.armHold(procScriptPatterns(scripts.fetch)...)
		if err := q.StartConsuming(n, 50*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		p.awaitTrip(t, 1)
		stopped := q.StopConsuming()
		time.Sleep(50 * time.Millisecond) // the stop is under way
		p.releaseHeld()
		select {
		case <-stopped:
		case <-time.After(10 * time.Second):
			t.Fatal("StopConsuming did not end")
		}
		held, err := direct.HLen(context.Background(), newQueueKeys(ns, "jobs").unacked(worker.Name())).Result()
		if err != nil {
			t.Fatal(err)
		}
		if held != 0 {
			t.Errorf("the connection stopped consuming holds %d deliveries taken by the fetch whose reply was lost", held)
		}
		wantCounts(t, admin, "jobs", n, 0, 0)
	})

	t.Run("take", func(t *testing.T) {
		admin, worker, p, ns := setup(t)
		procPublish(t, openQueue(t, admin, "jobs"), []string{"a", "b"})
		q := openQueue(t, worker, "jobs")
		// Register first (that call is not the one to lose), then lose
		// the reply of the fetch that takes.
		if _, err := q.Take(context.Background(), 0); err != nil {
			t.Fatal(err)
		}
		p.arm(procScriptPatterns(scripts.fetch)...)
		ds, err := q.TakeBatch(context.Background(), 10, 5*time.Second)
		if p.trips() != 1 {
			t.Fatalf("the proxy lost %d replies, want 1", p.trips())
		}
		if err != nil || len(ds) != 1 || ds[0].Payload() != "b" {
			t.Fatalf("TakeBatch whose reply was lost: %v, %v; want the delivery it took", ds, err)
		}
		if n := direct.HLen(context.Background(), newQueueKeys(ns, "jobs").unacked(worker.Name())).Val(); n != 2 {
			t.Fatalf("%d held, want 2 (a and b)", n)
		}
	})

	t.Run("release", func(t *testing.T) {
		admin, worker, p, ns := setup(t)
		procPublish(t, openQueue(t, admin, "jobs"), []string{"only"})
		q := openQueue(t, worker, "jobs")
		d, err := q.Take(context.Background(), time.Second)
		if err != nil {
			t.Fatal(err)
		}
		// Release names the take by its field: lose that reply.
		ref := d.(*redisDelivery).ref()
		p.arm(fmt.Sprintf("$%d\r\n%s\r\n", len(ref), ref))
		err = d.Release(context.Background(), 0)
		if p.trips() != 1 {
			t.Fatalf("the proxy lost %d replies, want 1", p.trips())
		}
		if err != nil {
			t.Errorf("Release whose reply was lost returned %v; it ran, so it must return nil", err)
		}
		if n := direct.HLen(context.Background(), newQueueKeys(ns, "jobs").unacked(worker.Name())).Val(); n != 0 {
			t.Fatalf("%d still held after the Release", n)
		}
		again, err := q.Take(context.Background(), time.Second)
		if err != nil || again.Attempts() != 2 {
			t.Fatalf("after the Release: %v, %v; want it back with attempt 2 (counted once)", again, err)
		}
		if err := again.Ack(); err != nil {
			t.Fatal(err)
		}
		wantCounts(t, admin, "jobs", 0, 0, 0)
	})

	t.Run("ack", func(t *testing.T) {
		admin, worker, p, ns := setup(t)
		procPublish(t, openQueue(t, admin, "jobs"), []string{"only"})
		q := openQueue(t, worker, "jobs")
		ds := hold(t, q, 1, 1)
		// Only a request that settles the delivery names its take (fetches
		// and waits do not): lose the reply of that one.
		ref := ds[0].(*redisDelivery).ref()
		p.arm(fmt.Sprintf("$%d\r\n%s\r\n", len(ref), ref))
		err := ds[0].Ack()
		if p.trips() != 1 {
			t.Fatalf("the proxy lost %d replies, want 1", p.trips())
		}
		left, herr := direct.HLen(context.Background(), newQueueKeys(ns, "jobs").unacked(worker.Name())).Result()
		if herr != nil {
			t.Fatal(herr)
		}
		if left != 0 {
			t.Fatalf("the delivery is still unacked after the Ack whose reply was lost (%d left), Ack said %v", left, err)
		}
		if err != nil {
			t.Errorf("LIBRARY BUG: Ack by the delivery's only owner returned %v (ErrorNotFound %v, ErrorConnectionLost %v) "+
				"although the delivery is gone from Redis: the ack ran in Redis, its reply was lost, go-redis sent it again, "+
				"and the second run found nothing", err, errors.Is(err, ErrorNotFound), errors.Is(err, ErrorConnectionLost))
		}
		wantCounts(t, admin, "jobs", 0, 0, 0)
	})
}
