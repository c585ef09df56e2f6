package redistest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Timings of the Sentinel setup started by [StartSentinel]: a master that
// does not answer for SentinelDownAfter is failed over, and a failover that
// does not finish within SentinelFailoverTimeout is tried again.
const (
	SentinelDownAfter       = time.Second
	SentinelFailoverTimeout = 3 * time.Second

	// SentinelMasterName is the name the sentinels monitor the master under.
	SentinelMasterName = "redq"

	sentinelQuorum   = 2
	sentinelCount    = 3
	sentinelReady    = 20 * time.Second
	sentinelPoll     = 20 * time.Millisecond
	sentinelQueryMax = time.Second
)

// Sentinel is a Redis Sentinel setup owned by a test: one master, one
// replica of it and three sentinels monitoring the master under
// [SentinelMasterName] with a quorum of two, all on free loopback ports.
// Which of the two data servers is the master changes with a failover.
// All methods are safe for concurrent use.
type Sentinel struct {
	data      [2]*Server // the data servers; data[0] started as the master
	sentinels []*Server
}

// StartSentinel starts a master, a replica of it and three sentinels, waits
// until the replica is in sync and every sentinel knows the replica and the
// other two sentinels (so a failover can be agreed on), and registers
// t.Cleanup to stop every process. Like [Start], it skips the test when
// redis-server is not in PATH, or fails it when REDQ_REQUIRE_REDIS=1.
func StartSentinel(t testing.TB) *Sentinel {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a Sentinel setup; skipped with -short")
	}
	// No background save to disk or diskless-sync delay: the replica
	// syncs at once, and after a failover the servers resync at once.
	dataArgs := []string{"--repl-diskless-sync-delay", "0"}
	master := Start(t, WithArgs(dataArgs...))
	replica := Start(t, WithArgs(append(dataArgs, "--replicaof", "127.0.0.1", strconv.Itoa(master.Port()))...))
	s := &Sentinel{data: [2]*Server{master, replica}}
	for i := 0; i < sentinelCount; i++ {
		// The sentinel rewrites its config file (what it learns about the
		// setup), so it gets a writable one of its own.
		conf := filepath.Join(t.TempDir(), "sentinel.conf")
		text := fmt.Sprintf("sentinel monitor %[1]s 127.0.0.1 %[2]d %[3]d\n"+
			"sentinel down-after-milliseconds %[1]s %[4]d\n"+
			"sentinel failover-timeout %[1]s %[5]d\n"+
			"sentinel parallel-syncs %[1]s 1\n",
			SentinelMasterName, master.Port(), sentinelQuorum,
			SentinelDownAfter.Milliseconds(), SentinelFailoverTimeout.Milliseconds())
		if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
			t.Fatalf("redistest: write sentinel config: %v", err)
		}
		s.sentinels = append(s.sentinels, Start(t, withConfigFile(conf), WithArgs("--sentinel")))
	}
	if err := s.waitReady(sentinelReady); err != nil {
		t.Fatal(err)
	}
	return s
}

// withConfigFile names a config file that redis-server reads before its
// arguments (a sentinel needs one, and rewrites it).
func withConfigFile(path string) Option {
	return func(c *config) { c.confFile = path }
}

// SentinelAddrs returns the addresses of the three sentinels, for
// redis.FailoverOptions.SentinelAddrs.
func (s *Sentinel) SentinelAddrs() []string {
	addrs := make([]string, len(s.sentinels))
	for i, sn := range s.sentinels {
		addrs[i] = sn.Addr()
	}
	return addrs
}

// Sentinels returns the sentinel processes (for example to stop one).
func (s *Sentinel) Sentinels() []*Server { return append([]*Server(nil), s.sentinels...) }

// FailoverOptions returns options for a failover client of this setup:
// the master name and the sentinel addresses, nothing else set.
func (s *Sentinel) FailoverOptions() *redis.FailoverOptions {
	return &redis.FailoverOptions{MasterName: SentinelMasterName, SentinelAddrs: s.SentinelAddrs()}
}

// FailoverClient returns a new redis.NewFailoverClient client of this
// setup, closed by t.Cleanup.
func (s *Sentinel) FailoverClient(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewFailoverClient(s.FailoverOptions())
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// MasterAddr returns the master's address as the first sentinel that
// answers reports it.
func (s *Sentinel) MasterAddr(ctx context.Context) (string, error) {
	var errs []error
	for _, sn := range s.sentinels {
		addr, err := askMaster(ctx, sn.Addr())
		if err == nil {
			return addr, nil
		}
		errs = append(errs, err)
	}
	return "", fmt.Errorf("redistest: no sentinel named the master: %w", errors.Join(errs...))
}

// Master returns the data server that the sentinels report as the master.
func (s *Sentinel) Master(t testing.TB) *Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	addr, err := s.MasterAddr(ctx)
	if err != nil {
		t.Fatal(err)
	}
	srv := s.server(addr)
	if srv == nil {
		t.Fatalf("redistest: the sentinels name %s as the master, not one of the data servers", addr)
	}
	return srv
}

// server returns the data server at addr, or nil.
func (s *Sentinel) server(addr string) *Server {
	for _, d := range s.data {
		if d.Addr() == addr {
			return d
		}
	}
	return nil
}

// WaitReplicated waits until the replica has acknowledged every write the
// master took so far (WAIT 1 on the master), so that a failover loses none
// of them. It fails t when the replica did not within timeout.
func (s *Sentinel) WaitReplicated(t testing.TB, timeout time.Duration) {
	t.Helper()
	master := s.Master(t)
	c := redis.NewClient(&redis.Options{Addr: master.Addr(), ReadTimeout: timeout + time.Second})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout+2*time.Second)
	defer cancel()
	n, err := c.Wait(ctx, 1, timeout).Result()
	if err != nil {
		t.Fatalf("redistest: WAIT on master %s: %v", master.Addr(), err)
	}
	if n < 1 {
		t.Fatalf("redistest: the replica did not acknowledge the master's writes within %s", timeout)
	}
}

// KillMaster SIGKILLs the current master and returns its former address.
// The sentinels then notice it down after [SentinelDownAfter] and promote
// the replica: see [Sentinel.WaitFailover].
func (s *Sentinel) KillMaster(t testing.TB) string {
	t.Helper()
	m := s.Master(t)
	addr := m.Addr()
	m.Kill()
	return addr
}

// Failover asks a sentinel for a failover although the master is up
// (SENTINEL FAILOVER) and returns the master's address. The sentinel
// promotes the replica and then turns the old master into a replica of
// the new one, so clients still connected to the old master see their
// connections closed, or READONLY answers. See [Sentinel.WaitFailover]
// and [Sentinel.WaitRole].
func (s *Sentinel) Failover(t testing.TB) string {
	t.Helper()
	old := s.Master(t).Addr()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c := redis.NewSentinelClient(&redis.Options{Addr: s.sentinels[0].Addr()})
	defer c.Close()
	if err := c.Failover(ctx, SentinelMasterName).Err(); err != nil {
		t.Fatalf("redistest: SENTINEL FAILOVER: %v", err)
	}
	return old
}

// WaitRole waits until the data server at addr reports role ("master" or
// "slave") and fails t after timeout.
func (s *Sentinel) WaitRole(t testing.TB, addr, role string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), sentinelQueryMax)
		got, err := roleOf(ctx, addr)
		cancel()
		if err == nil && got == role {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: %s is not a %s within %s: role %q, %v%s", addr, role, timeout, got, err, s.sentinelLogs())
		}
		time.Sleep(sentinelPoll)
	}
}

// WaitFailover waits until every sentinel names a master other than old
// and that server says it is a master, and returns its address. It fails
// t after timeout, with what each sentinel says.
func (s *Sentinel) WaitFailover(t testing.TB, old string, timeout time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last string
	for {
		addr, why := s.newMaster(old)
		if why == "" {
			return addr
		}
		last = why
		if time.Now().After(deadline) {
			t.Fatalf("redistest: no failover away from %s within %s: %s%s", old, timeout, last, s.sentinelLogs())
		}
		time.Sleep(sentinelPoll)
	}
}

// newMaster returns the new master's address once every sentinel names
// the same master, other than old, and that server has taken the role;
// else why not.
func (s *Sentinel) newMaster(old string) (addr, why string) {
	ctx, cancel := context.WithTimeout(context.Background(), sentinelQueryMax)
	defer cancel()
	for _, sn := range s.sentinels {
		a, err := askMaster(ctx, sn.Addr())
		switch {
		case err != nil:
			return "", fmt.Sprintf("sentinel %s: %v", sn.Addr(), err)
		case a == old:
			return "", fmt.Sprintf("sentinel %s still names %s", sn.Addr(), old)
		case addr != "" && a != addr:
			return "", fmt.Sprintf("sentinels disagree: %s and %s", addr, a)
		}
		addr = a
	}
	role, err := roleOf(ctx, addr)
	if err != nil {
		return "", fmt.Sprintf("new master %s: ROLE: %v", addr, err)
	}
	if role != "master" {
		return "", fmt.Sprintf("new master %s is still a %s", addr, role)
	}
	return addr, ""
}

// waitReady waits until the replica is in sync with the master and every
// sentinel sees the master up, the replica and the other sentinels.
func (s *Sentinel) waitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		why := s.notReady()
		if why == "" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redistest: sentinel setup not ready within %s: %s%s", timeout, why, s.sentinelLogs())
		}
		time.Sleep(sentinelPoll)
	}
}

// notReady says what the setup still lacks, or "".
func (s *Sentinel) notReady() string {
	ctx, cancel := context.WithTimeout(context.Background(), sentinelQueryMax)
	defer cancel()
	rc := redis.NewClient(&redis.Options{Addr: s.data[1].Addr(), MaxRetries: -1})
	defer rc.Close()
	info, err := rc.Info(ctx, "replication").Result()
	if err != nil {
		return fmt.Sprintf("replica: %v", err)
	}
	if !strings.Contains(info, "master_link_status:up") {
		return "replica not in sync yet"
	}
	for _, sn := range s.sentinels {
		c := redis.NewSentinelClient(&redis.Options{Addr: sn.Addr(), MaxRetries: -1})
		m, err := c.Master(ctx, SentinelMasterName).Result()
		_ = c.Close()
		switch {
		case err != nil:
			return fmt.Sprintf("sentinel %s: %v", sn.Addr(), err)
		case m["flags"] != "master":
			return fmt.Sprintf("sentinel %s: master flags %q", sn.Addr(), m["flags"])
		case m["num-slaves"] != "1":
			return fmt.Sprintf("sentinel %s knows %s replicas", sn.Addr(), m["num-slaves"])
		case m["num-other-sentinels"] != strconv.Itoa(sentinelCount-1):
			return fmt.Sprintf("sentinel %s knows %s other sentinels", sn.Addr(), m["num-other-sentinels"])
		}
	}
	return ""
}

// askMaster asks the sentinel at addr for the master's address.
func askMaster(ctx context.Context, addr string) (string, error) {
	c := redis.NewSentinelClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: sentinelQueryMax})
	defer c.Close()
	hp, err := c.GetMasterAddrByName(ctx, SentinelMasterName).Result()
	if err != nil {
		return "", err
	}
	if len(hp) != 2 {
		return "", fmt.Errorf("unexpected reply %q", hp)
	}
	return hp[0] + ":" + hp[1], nil
}

// roleOf returns the first element of ROLE at addr: master, slave or
// sentinel.
func roleOf(ctx context.Context, addr string) (string, error) {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: sentinelQueryMax})
	defer c.Close()
	v, err := c.Do(ctx, "ROLE").Slice()
	if err != nil {
		return "", err
	}
	if len(v) == 0 {
		return "", errors.New("empty ROLE reply")
	}
	role, _ := v[0].(string)
	return role, nil
}

// sentinelLogs returns the log tails of the sentinels, for a failure
// message.
func (s *Sentinel) sentinelLogs() string {
	var b strings.Builder
	for _, sn := range s.sentinels {
		fmt.Fprintf(&b, "\n--- sentinel %s ---\n%s", sn.Addr(), logTail(sn.logPath()))
	}
	return b.String()
}
