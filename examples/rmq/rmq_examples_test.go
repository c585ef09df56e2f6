// Package rmqexamples runs rmq v5's seven example programs, moved over to
// redq by changing their import, against a real Redis.
//
// The programs talk to localhost:6379, database 2, as rmq wrote them, and
// the machine may run a Redis of its own on that port, which must never
// be touched. So everything runs in a private network namespace (unshare
// --net, or with a user namespace where that is not permitted): a
// redis-server of the test's own on port 6379 there, the programs, and
// redis-cli to read what they did. The test skips when redis-server,
// redis-cli, unshare, nsenter or ip is missing or namespaces are not
// permitted, and fails instead when REDQ_REQUIRE_REDIS=1 (as in CI).
package rmqexamples

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redq/redq"
	"github.com/redq/redq/internal/redistest"
)

// helperEnv makes the test binary a helper that runs inside the namespace
// (see TestMain): "fetch" prints the body at $RMQ_EXAMPLES_URL, "reject"
// takes $RMQ_EXAMPLES_N deliveries of queue things and rejects them.
const helperEnv = "RMQ_EXAMPLES_HELPER"

var programs = []string{"producer", "consumer", "batch_consumer", "cleaner", "handler", "returner", "purger"}

func TestMain(m *testing.M) {
	switch os.Getenv(helperEnv) {
	case "":
		os.Exit(m.Run())
	case "fetch":
		os.Exit(fetch(os.Getenv("RMQ_EXAMPLES_URL")))
	case "reject":
		n, _ := strconv.Atoi(os.Getenv("RMQ_EXAMPLES_N"))
		os.Exit(reject(n))
	}
	fmt.Fprintln(os.Stderr, "unknown helper", os.Getenv(helperEnv))
	os.Exit(2)
}

func fetch(url string) int {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintln(os.Stderr, resp.Status)
		return 1
	}
	if _, err := io.Copy(os.Stdout, resp.Body); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// reject rejects n deliveries of things, as a consumer that gives up on
// them would, so that the returner has something to return.
func reject(n int) int {
	conn, err := redq.OpenConnection("rejecter", "tcp", "localhost:6379", 2, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { <-conn.StopAllConsuming() }()
	q, err := conn.OpenQueue("things")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	for i := 0; i < n; i++ {
		d, err := q.Take(context.Background(), 5*time.Second)
		if err == nil {
			err = d.Reject()
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	return 0
}

// syncBuffer collects a process's output while it runs.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// netns is a private network namespace with a redis-server on port 6379.
type netns struct {
	t     *testing.T
	enter []string // runs a command in the namespace
	bin   string   // the built programs
	redis *exec.Cmd
	log   *syncBuffer
}

// unavailable skips the test, or fails it when REDQ_REQUIRE_REDIS=1.
func unavailable(t *testing.T, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if redistest.Required() {
		t.Fatalf("%s=1 but %s", redistest.RequireEnv, msg)
	}
	t.Skipf("%s (set %s=1 to make this an error)", msg, redistest.RequireEnv)
}

// newNetns starts redis-server in a new network namespace. Without the
// right to make one (not root), it makes a user namespace too, where that
// is permitted.
func newNetns(t *testing.T) *netns {
	for _, tool := range []string{"redis-server", "redis-cli", "unshare", "nsenter", "ip"} {
		if _, err := exec.LookPath(tool); err != nil {
			unavailable(t, "%s is not in PATH", tool)
		}
	}
	var mode []string
	var tried []string
	for _, m := range [][]string{{"--net"}, {"--user", "--map-root-user", "--net"}} {
		out, err := exec.Command("unshare", append(m, "ip", "link", "set", "lo", "up")...).CombinedOutput()
		if err == nil {
			mode = m
			break
		}
		tried = append(tried, fmt.Sprintf("unshare %s: %v: %s", strings.Join(m, " "), err, bytes.TrimSpace(out)))
	}
	if mode == nil {
		unavailable(t, "a private network namespace is not permitted here (%s)", strings.Join(tried, "; "))
	}

	n := &netns{t: t, log: &syncBuffer{}}
	dir := t.TempDir()
	args := append(mode, "sh", "-c", `ip link set lo up && exec redis-server --port 6379 --save "" --appendonly no --dir "$0"`, dir)
	n.redis = exec.Command("unshare", args...)
	n.redis.Stdout, n.redis.Stderr = n.log, n.log
	n.redis.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := n.redis.Start(); err != nil {
		t.Fatalf("start redis-server in a new namespace: %v", err)
	}
	t.Cleanup(func() {
		_ = n.redis.Process.Kill()
		_ = n.redis.Wait()
	})
	// unshare and sh exec: the process is redis-server, the namespace's
	// first process. Nothing may enter its namespace before it has one of
	// its own: until then it is the machine's, where port 6379 may be a
	// Redis that must not be touched.
	pid := strconv.Itoa(n.redis.Process.Pid)
	own, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatalf("read this process's network namespace: %v", err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		ns, err := os.Readlink("/proc/" + pid + "/ns/net")
		if err == nil && ns != own {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %s did not get a network namespace of its own (%s, %v)\n%s", pid, ns, err, n.log)
		}
		time.Sleep(time.Millisecond)
	}
	n.enter = []string{"nsenter"}
	if mode[0] == "--user" {
		// --preserve-credentials: an unprivileged nsenter may not call
		// setgroups in a user namespace made with --map-root-user.
		n.enter = append(n.enter, "--preserve-credentials", "--user=/proc/"+pid+"/ns/user")
	}
	n.enter = append(n.enter, "--net=/proc/"+pid+"/ns/net", "--")

	deadline := time.Now().Add(10 * time.Second)
	for {
		out, err := n.command("redis-cli", "-p", "6379", "ping").CombinedOutput()
		if err == nil && strings.TrimSpace(string(out)) == "PONG" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis-server in the namespace did not answer: %v %s\n%s", err, out, n.log)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The Redis on port 6379 in the namespace is ours: its process id is
	// the one started here.
	info := n.cli("INFO", "server")
	if !regexp.MustCompile(`(?m)^process_id:` + pid + `\r?$`).MatchString(info) {
		t.Fatalf("the Redis on port 6379 in the namespace is not the one started here (pid %s):\n%s", pid, info)
	}
	t.Logf("redis-server %s on port 6379 in a namespace of its own (unshare %s)", pid, strings.Join(mode, " "))
	return n
}

// command is a command that runs in the namespace.
func (n *netns) command(name string, args ...string) *exec.Cmd {
	c := exec.Command(n.enter[0], append(append(n.enter[1:], name), args...)...)
	c.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return c
}

// cli runs redis-cli on database 2, where the programs work.
func (n *netns) cli(args ...string) string {
	n.t.Helper()
	out, err := n.command("redis-cli", append([]string{"-p", "6379", "-n", "2"}, args...)...).CombinedOutput()
	if err != nil {
		n.t.Fatalf("redis-cli %q: %v: %s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

func (n *netns) int(args ...string) int64 {
	n.t.Helper()
	s := n.cli(args...)
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		n.t.Fatalf("redis-cli %q = %q, want a number", args, s)
	}
	return v
}

// ready and rejected read the lists of redq's layout (namespace redq,
// one hash tag per queue); unacked adds up every connection's unacked
// hash of the queue.
func (n *netns) ready(queue string) int64 { return n.int("LLEN", "redq:{"+queue+"}:ready") }

func (n *netns) rejected(queue string) int64 { return n.int("LLEN", "redq:{"+queue+"}:rejected") }

func (n *netns) unacked(queue string) int64 {
	const sum = `local n = 0 for _, k in ipairs(redis.call('KEYS', ARGV[1])) do n = n + redis.call('HLEN', k) end return n`
	return n.int("EVAL", sum, "0", "redq:{"+queue+"}:unacked:*")
}

// proc is a program running in the namespace.
type proc struct {
	name string
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan struct{}
	err  error
}

func (n *netns) start(name string) *proc {
	n.t.Helper()
	p := &proc{name: name, out: &syncBuffer{}, done: make(chan struct{})}
	p.cmd = n.command(filepath.Join(n.bin, name))
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		n.t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	n.t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
	})
	return p
}

// stop sends sig and waits for the program to end; it returns the exit
// code (-1 when a signal ended it).
func (p *proc) stop(t *testing.T, sig syscall.Signal) int {
	t.Helper()
	_ = p.cmd.Process.Signal(sig)
	return p.wait(t)
}

func (p *proc) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not end within 30s:\n%s", p.name, p.out)
	}
	return p.cmd.ProcessState.ExitCode()
}

// waitFor polls cond until it holds, or fails the test after 20s showing
// the program's output.
func waitFor(t *testing.T, p *proc, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: timed out waiting for %s; its output:\n%s", p.name, what, p.out)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// build builds the seven programs into the namespace's bin directory.
func (n *netns) build() {
	n.t.Helper()
	n.bin = n.t.TempDir()
	args := append([]string{"build", "-o", n.bin + string(filepath.Separator)}, func() []string {
		var pkgs []string
		for _, p := range programs {
			pkgs = append(pkgs, "./"+p)
		}
		return pkgs
	}()...)
	out, err := exec.Command("go", args...).CombinedOutput()
	if err != nil {
		n.t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func TestRmqExamples(t *testing.T) {
	began := time.Now()
	n := newNetns(t)
	n.build()
	t.Logf("built the programs: %s", time.Since(began).Round(time.Millisecond))

	// producer: publishes "delivery N" to things, and "foo" to foobars
	// every 10,000, until it is stopped.
	producer := n.start("producer")
	time.Sleep(2 * time.Second)
	waitFor(t, producer, "1,000 deliveries in things", func() bool { return n.ready("things") >= 1000 })
	producer.stop(t, syscall.SIGINT)
	things, foobars := n.ready("things"), n.ready("foobars")
	if foobars < 1 {
		t.Fatalf("foobars holds %d deliveries, want at least 1; the producer's output:\n%s", foobars, producer.out)
	}
	if !strings.Contains(producer.out.String(), "produced 0 delivery 0 ") {
		t.Errorf("the producer did not log its first delivery:\n%s", producer.out)
	}
	t.Logf("producer: %d in things, %d in foobars", things, foobars)

	// consumer: five consumers take 1ms over each delivery and ack it,
	// until SIGINT; then StopAllConsuming waits for them, and the program
	// ends cleanly.
	consumer := n.start("consumer")
	waitFor(t, consumer, "500 deliveries acked", func() bool { return n.ready("things")+n.unacked("things") <= things-500 })
	if code := consumer.stop(t, syscall.SIGINT); code != 0 {
		t.Fatalf("the consumer ended with %d after SIGINT:\n%s", code, consumer.out)
	}
	left := n.ready("things")
	if u := n.unacked("things"); u != 0 {
		t.Fatalf("%d deliveries of things unacked after the consumer stopped", u)
	}
	if r := n.rejected("things"); r != 0 {
		t.Fatalf("%d deliveries of things rejected", r)
	}
	t.Logf("consumer: acked %d, stopped cleanly", things-left)
	things = left

	// batch_consumer: batches of up to 111 (or what came within a second)
	// from things and from foobars, each acked, until SIGINT.
	batch := n.start("batch_consumer")
	waitFor(t, batch, "batches of things and foobars", func() bool {
		out := batch.out.String()
		return strings.Contains(out, "foobars consumed") && strings.Contains(out, "things consumed 111: [things ")
	})
	if code := batch.stop(t, syscall.SIGINT); code != 0 {
		t.Fatalf("the batch consumer ended with %d after SIGINT:\n%s", code, batch.out)
	}
	left = n.ready("things")
	if left >= things || n.ready("foobars") != 0 || n.unacked("things") != 0 || n.unacked("foobars") != 0 {
		t.Fatalf("after the batch consumer: things ready %d (was %d), unacked %d; foobars ready %d, unacked %d\n%s",
			left, things, n.unacked("things"), n.ready("foobars"), n.unacked("foobars"), batch.out)
	}
	t.Logf("batch_consumer: acked %d of things and all of foobars, stopped cleanly", things-left)

	// The producer again, for a second, so that the programs below have
	// deliveries to work on.
	producer = n.start("producer")
	time.Sleep(time.Second)
	waitFor(t, producer, "1,000 more deliveries in things", func() bool { return n.ready("things") >= left+1000 })
	producer.stop(t, syscall.SIGINT)
	things = n.ready("things")

	// cleaner: a consumer killed with SIGKILL leaves what it prefetched in
	// its unacked storage; once its heartbeat is gone (deleted here rather
	// than waiting out its minute), the cleaner returns it to ready.
	killed := n.start("consumer")
	waitFor(t, killed, "100 deliveries in its hands", func() bool { return n.unacked("things") >= 100 })
	killed.stop(t, syscall.SIGKILL)
	held, readyBefore := n.unacked("things"), n.ready("things")
	n.cli("EVAL", `for _, k in ipairs(redis.call('KEYS', ARGV[1])) do redis.call('DEL', k) end`, "0", "{redq}:hb:consumer-*")
	cleaner := n.start("cleaner")
	waitFor(t, cleaner, fmt.Sprintf("cleaned %d", held), func() bool {
		return strings.Contains(cleaner.out.String(), fmt.Sprintf("cleaned %d\n", held))
	})
	cleaner.stop(t, syscall.SIGINT)
	if u, r := n.unacked("things"), n.ready("things"); u != 0 || r != readyBefore+held {
		t.Fatalf("after the cleaner: things unacked %d, ready %d, want 0, %d\n%s", u, r, readyBefore+held, cleaner.out)
	}
	t.Logf("cleaner: returned the %d deliveries a killed consumer held", held)
	things = readyBefore + held

	// handler: the stats page in rmq's layout on :3333.
	handler := n.start("handler")
	var page string
	waitFor(t, handler, "the page", func() bool {
		out, err := n.helper("fetch", "RMQ_EXAMPLES_URL=http://localhost:3333/overview")
		page = out
		return err == nil
	})
	for _, re := range []string{
		`^<html><body><table style="font-family:monospace"><tr><td>queue</td><td></td><td>ready</td><td></td><td>rejected</td><td></td><td></td><td></td><td>connections</td><td></td><td>unacked</td><td></td><td>consumers</td><td></td></tr>`,
		`<tr><td>foobars</td><td></td><td>` + strconv.FormatInt(n.ready("foobars"), 10) + `</td><td></td><td>0</td><td></td><td></td><td></td><td>\d+</td><td></td><td>0</td><td></td><td>0</td><td></td></tr>`,
		`<tr><td>things</td><td></td><td>` + strconv.FormatInt(things, 10) + `</td><td></td><td>0</td><td></td><td></td><td></td><td>\d+</td><td></td><td>0</td><td></td><td>0</td><td></td></tr>`,
		`<tr><td>-----</td></tr>.*<td>✓</td><td></td><td>handler-\w+</td>`,
		`</table></body></html>$`,
	} {
		if !regexp.MustCompile(re).MatchString(page) {
			t.Errorf("the page does not match %s:\n%s", re, page)
		}
	}
	condensed, err := n.helper("fetch", "RMQ_EXAMPLES_URL=http://localhost:3333/overview?layout=condensed&refresh=3")
	if err != nil || !strings.HasPrefix(condensed, `<html><head><meta http-equiv="refresh" content="3"><body>`) || strings.Contains(condensed, "-----") {
		t.Errorf("the condensed page with refresh (%v):\n%s", err, condensed)
	}
	handler.stop(t, syscall.SIGINT)
	if !strings.Contains(handler.out.String(), "Handler listening on http://localhost:3333/overview") {
		t.Errorf("the handler's output:\n%s", handler.out)
	}
	t.Logf("handler: served the page in rmq's layout")

	// returner: returns the rejected deliveries of things to ready.
	if out, err := n.helper("reject", "RMQ_EXAMPLES_N=5"); err != nil {
		t.Fatalf("rejecting 5 deliveries: %v\n%s", err, out)
	}
	if r := n.rejected("things"); r != 5 {
		t.Fatalf("things rejected = %d, want 5", r)
	}
	readyBefore = n.ready("things")
	returner := n.start("returner")
	if code := returner.wait(t); code != 0 {
		t.Fatalf("the returner ended with %d:\n%s", code, returner.out)
	}
	if !strings.Contains(returner.out.String(), "queue returner returned 5 rejected deliveries") {
		t.Errorf("the returner's output:\n%s", returner.out)
	}
	if r, j := n.ready("things"), n.rejected("things"); r != readyBefore+5 || j != 0 {
		t.Fatalf("after the returner: things ready %d, rejected %d, want %d, 0", r, j, readyBefore+5)
	}
	t.Logf("returner: returned 5 rejected deliveries")

	// purger: deletes the ready deliveries of things.
	readyBefore = n.ready("things")
	purger := n.start("purger")
	if code := purger.wait(t); code != 0 {
		t.Fatalf("the purger ended with %d:\n%s", code, purger.out)
	}
	if !strings.Contains(purger.out.String(), fmt.Sprintf("purged %d\n", readyBefore)) {
		t.Errorf("the purger's output (want purged %d):\n%s", readyBefore, purger.out)
	}
	if r := n.ready("things"); r != 0 {
		t.Fatalf("after the purger: things ready %d, want 0", r)
	}
	t.Logf("purger: purged %d", readyBefore)
	t.Logf("all seven programs ran in %s", time.Since(began).Round(time.Millisecond))
}

// helper runs the test binary as a helper in the namespace (see TestMain)
// and returns its output.
func (n *netns) helper(what string, env ...string) (string, error) {
	c := n.command(os.Args[0])
	c.Env = append(append(os.Environ(), helperEnv+"="+what), env...)
	var out syncBuffer
	c.Stdout, c.Stderr = &out, &out
	err := c.Run()
	return out.String(), err
}
