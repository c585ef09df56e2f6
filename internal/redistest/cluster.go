package redistest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Cluster is a Redis Cluster of real redis-server processes on free
// loopback ports: by default 3 masters, each with 1 replica, and a node
// timeout of 2 seconds, so that a killed master's replica is promoted a few
// seconds later. Every node keeps its cluster configuration (nodes.conf) in
// its data directory, so a node that was killed and relaunched
// ([Server.Relaunch]) rejoins the cluster, as a replica of whoever took
// over its slots.
//
// Use [StartCluster] from a test, or [StartClusterMain] from TestMain to
// share one cluster among the tests of a binary (tests then isolate
// themselves by key names).
type Cluster struct {
	// Nodes are the cluster's servers in the order they were created: the
	// masters first, then the replicas. Roles change with failovers: ask
	// [Cluster.Masters] or [Cluster.MasterFor] for the current ones.
	Nodes []*Server
	dirs  []string // data directories to remove on Close (StartClusterMain)
}

// ClusterOption configures a cluster started by [StartCluster] or
// [StartClusterMain].
type ClusterOption func(*clusterConfig)

type clusterConfig struct {
	masters, replicas int
	nodeTimeout       time.Duration
	args              []string
}

// WithMasters sets the number of masters (at least 3, as redis-cli
// requires; default 3).
func WithMasters(n int) ClusterOption { return func(c *clusterConfig) { c.masters = n } }

// WithReplicas sets the number of replicas per master (default 1).
func WithReplicas(n int) ClusterOption { return func(c *clusterConfig) { c.replicas = n } }

// WithNodeTimeout sets cluster-node-timeout: how long a node may be
// unreachable before the others consider it failing (default 2s).
func WithNodeTimeout(d time.Duration) ClusterOption {
	return func(c *clusterConfig) { c.nodeTimeout = d }
}

// WithNodeArgs passes more command-line arguments to every node.
func WithNodeArgs(args ...string) ClusterOption {
	return func(c *clusterConfig) { c.args = append(c.args, args...) }
}

// StartCluster starts a cluster (see [Cluster]), waits until every node
// reports it healthy and registers t.Cleanup to stop it. Like [Start] it
// skips the test when redis-server is not in PATH, or fails it when
// REDQ_REQUIRE_REDIS=1; it also needs redis-cli.
func StartCluster(t testing.TB, opts ...ClusterOption) *Cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a 6-node Redis Cluster; skipped with -short")
	}
	bin, ok := Available()
	if !ok {
		if Required() {
			t.Fatalf("redis-server not found in PATH, but %s=1 requires it", RequireEnv)
		}
		t.Skip("redis-server not found in PATH; set REDQ_REQUIRE_REDIS=1 to make this an error")
	}
	c, err := startCluster(bin, func() (string, error) { return t.TempDir(), nil }, opts)
	if c != nil {
		t.Cleanup(func() { _ = c.Close() })
	}
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// StartClusterMain is [StartCluster] for TestMain: it returns [ErrNotFound]
// when redis-server is not in PATH, and the caller must call
// [Cluster.Close], which also removes the data directories.
func StartClusterMain(opts ...ClusterOption) (*Cluster, error) {
	bin, ok := Available()
	if !ok {
		return nil, ErrNotFound
	}
	var dirs []string
	c, err := startCluster(bin, func() (string, error) {
		d, err := os.MkdirTemp("", "redistest-cluster-")
		if err == nil {
			dirs = append(dirs, d)
		}
		return d, err
	}, opts)
	if c == nil {
		c = &Cluster{}
	}
	c.dirs = dirs
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	return c, nil
}

func startCluster(bin string, tempDir func() (string, error), opts []ClusterOption) (*Cluster, error) {
	cfg := clusterConfig{masters: 3, replicas: 1, nodeTimeout: 2 * time.Second}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.masters < 3 {
		return nil, fmt.Errorf("redistest: a cluster needs at least 3 masters, not %d", cfg.masters)
	}
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		return nil, fmt.Errorf("redistest: redis-cli not found in PATH (it creates the cluster): %w", err)
	}
	c := &Cluster{}
	n := cfg.masters * (1 + cfg.replicas)
	for i := 0; i < n; i++ {
		dir, err := tempDir()
		if err != nil {
			return c, fmt.Errorf("redistest: cluster data dir: %w", err)
		}
		bus, err := freePort()
		if err != nil {
			return c, err
		}
		args := append([]string{
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", strconv.FormatInt(cfg.nodeTimeout.Milliseconds(), 10),
			"--cluster-port", strconv.Itoa(bus),
			// A replica takes over however long it was cut off: tests
			// kill masters on purpose and want the failover.
			"--cluster-replica-validity-factor", "0",
			"--cluster-allow-replica-migration", "no",
		}, cfg.args...)
		s, err := start(bin, dir, false, []Option{WithArgs(args...)})
		if err != nil {
			return c, err
		}
		c.Nodes = append(c.Nodes, s)
	}
	create := []string{"--cluster", "create"}
	for _, s := range c.Nodes {
		create = append(create, s.Addr())
	}
	create = append(create, "--cluster-replicas", strconv.Itoa(cfg.replicas), "--cluster-yes")
	if out, err := exec.Command(cli, create...).CombinedOutput(); err != nil {
		return c, fmt.Errorf("redistest: redis-cli --cluster create: %w\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.WaitHealthy(ctx); err != nil {
		return c, err
	}
	return c, nil
}

// Addrs returns the addresses of every node, for redis.ClusterOptions.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.Nodes))
	for i, s := range c.Nodes {
		addrs[i] = s.Addr()
	}
	return addrs
}

// Client returns a cluster client with go-redis's default options on the
// cluster's nodes; t.Cleanup closes it.
func (c *Cluster) Client(t testing.TB) *redis.ClusterClient {
	t.Helper()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// Close stops every node and removes the data directories that
// [StartClusterMain] created. It is safe to call more than once.
func (c *Cluster) Close() error {
	for _, s := range c.Nodes {
		s.Stop()
	}
	var errs []error
	for _, d := range c.dirs {
		if err := os.RemoveAll(d); err != nil {
			errs = append(errs, err)
		}
	}
	c.dirs = nil
	return errors.Join(errs...)
}

// node is a short-lived client of one node, without cluster redirection.
func node(s *Server) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, DialTimeout: time.Second,
		ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second})
}

// do runs one command on one node.
func do(ctx context.Context, s *Server, args ...any) (any, error) {
	// A quick look first: go-redis logs every failed dial of a node that
	// a test killed on purpose.
	if err := ping(s.Addr(), 200*time.Millisecond); err != nil {
		return nil, err
	}
	cl := node(s)
	defer cl.Close()
	return cl.Do(ctx, args...).Result()
}

// Slot returns the hash slot of key, as the cluster computes it.
func (c *Cluster) Slot(ctx context.Context, key string) (int, error) {
	var last error
	for _, s := range c.Nodes {
		v, err := do(ctx, s, "CLUSTER", "KEYSLOT", key)
		if err == nil {
			return int(v.(int64)), nil
		}
		last = err
	}
	return 0, fmt.Errorf("redistest: CLUSTER KEYSLOT: %w", last)
}

// nodeInfo is one line of CLUSTER NODES as seen by one node.
type nodeInfo struct {
	id, addr, flags, master string
	slots                   [][2]int
}

func clusterNodes(ctx context.Context, s *Server) ([]nodeInfo, error) {
	v, err := do(ctx, s, "CLUSTER", "NODES")
	if err != nil {
		return nil, err
	}
	var out []nodeInfo
	for _, line := range strings.Split(strings.TrimSpace(v.(string)), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		n := nodeInfo{id: f[0], addr: strings.SplitN(f[1], "@", 2)[0], flags: f[2], master: f[3]}
		for _, r := range f[8:] {
			if strings.HasPrefix(r, "[") {
				continue // a slot being imported or migrated
			}
			lo, hi, found := strings.Cut(r, "-")
			a, err1 := strconv.Atoi(lo)
			b := a
			var err2 error
			if found {
				b, err2 = strconv.Atoi(hi)
			}
			if err1 == nil && err2 == nil {
				n.slots = append(n.slots, [2]int{a, b})
			}
		}
		out = append(out, n)
	}
	return out, nil
}

func (c *Cluster) byAddr(addr string) *Server {
	for _, s := range c.Nodes {
		if s.Addr() == addr {
			return s
		}
	}
	return nil
}

// view returns CLUSTER NODES from the first node that answers.
func (c *Cluster) view(ctx context.Context) ([]nodeInfo, error) {
	var last error
	for _, s := range c.Nodes {
		nodes, err := clusterNodes(ctx, s)
		if err == nil {
			return nodes, nil
		}
		last = err
	}
	return nil, fmt.Errorf("redistest: no node answered CLUSTER NODES: %w", last)
}

// Masters returns the nodes that are masters now, as seen by the first node
// that answers (a failed master is left out).
func (c *Cluster) Masters(ctx context.Context) ([]*Server, error) {
	nodes, err := c.view(ctx)
	if err != nil {
		return nil, err
	}
	var out []*Server
	for _, n := range nodes {
		if strings.Contains(n.flags, "master") && !strings.Contains(n.flags, "fail") {
			if s := c.byAddr(n.addr); s != nil {
				out = append(out, s)
			}
		}
	}
	return out, nil
}

// MasterFor returns the master that serves key's slot now.
func (c *Cluster) MasterFor(ctx context.Context, key string) (*Server, error) {
	slot, err := c.Slot(ctx, key)
	if err != nil {
		return nil, err
	}
	return c.masterForSlot(ctx, slot)
}

func (c *Cluster) masterForSlot(ctx context.Context, slot int) (*Server, error) {
	nodes, err := c.view(ctx)
	if err != nil {
		return nil, err
	}
	for _, n := range nodes {
		if !strings.Contains(n.flags, "master") || strings.Contains(n.flags, "fail") {
			continue
		}
		for _, r := range n.slots {
			if slot >= r[0] && slot <= r[1] {
				if s := c.byAddr(n.addr); s != nil {
					return s, nil
				}
			}
		}
	}
	return nil, fmt.Errorf("redistest: no live master serves slot %d", slot)
}

// WaitHealthy waits until every running node reports cluster_state:ok,
// knows every other running node, agrees on which master serves each slot
// and no running replica is still syncing. Nodes that were stopped or
// killed are left out.
func (c *Cluster) WaitHealthy(ctx context.Context) error {
	var why string
	for {
		why = c.unhealthy(ctx)
		if why == "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("redistest: cluster not healthy: %s", why)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (c *Cluster) unhealthy(ctx context.Context) string {
	var live []*Server
	for _, s := range c.Nodes {
		if ping(s.Addr(), 200*time.Millisecond) == nil {
			live = append(live, s)
		}
	}
	var want string
	for _, s := range live {
		v, err := do(ctx, s, "CLUSTER", "INFO")
		if err != nil {
			return s.Addr() + ": " + err.Error()
		}
		if !strings.Contains(v.(string), "cluster_state:ok") {
			return s.Addr() + ": cluster_state not ok"
		}
		nodes, err := clusterNodes(ctx, s)
		if err != nil {
			return s.Addr() + ": " + err.Error()
		}
		var owners []string
		known := 0
		for _, n := range nodes {
			if !c.alive(n.addr, live) {
				continue
			}
			if strings.Contains(n.flags, "handshake") || strings.Contains(n.flags, "fail") {
				return s.Addr() + " sees " + n.addr + " as " + n.flags
			}
			known++
			if strings.Contains(n.flags, "master") && len(n.slots) > 0 {
				owners = append(owners, fmt.Sprintf("%s=%v", n.addr, n.slots))
			}
		}
		if known != len(live) {
			return fmt.Sprintf("%s knows %d of %d live nodes", s.Addr(), known, len(live))
		}
		sort.Strings(owners)
		if view := strings.Join(owners, ";"); want == "" {
			want = view
		} else if view != want {
			return "nodes disagree on the slot map"
		}
		info, err := do(ctx, s, "INFO", "replication")
		if err != nil {
			return s.Addr() + ": " + err.Error()
		}
		if r := info.(string); strings.Contains(r, "role:slave") && !strings.Contains(r, "master_link_status:up") {
			return s.Addr() + ": replica not synced"
		}
	}
	return ""
}

// allSee reports whether every node that answers names owner as the master
// of slot.
func (c *Cluster) allSee(ctx context.Context, slot int, owner *Server) bool {
	for _, s := range c.Nodes {
		if ping(s.Addr(), 200*time.Millisecond) != nil {
			continue
		}
		nodes, err := clusterNodes(ctx, s)
		if err != nil {
			return false
		}
		for _, n := range nodes {
			if !strings.Contains(n.flags, "master") {
				continue
			}
			for _, r := range n.slots {
				if slot >= r[0] && slot <= r[1] && n.addr != owner.Addr() {
					return false
				}
			}
		}
	}
	return true
}

func (c *Cluster) alive(addr string, live []*Server) bool {
	for _, s := range live {
		if s.Addr() == addr {
			return true
		}
	}
	return false
}

// WaitFailover waits until a live master serves key's slot again after
// its master was killed, and every live node says so, and returns it. A
// client that loads its slot map from any node then finds the new master;
// a node whose gossip still lags would send it to the dead one.
func (c *Cluster) WaitFailover(ctx context.Context, key string) (*Server, error) {
	slot, err := c.Slot(ctx, key)
	if err != nil {
		return nil, err
	}
	for {
		s, err := c.masterForSlot(ctx, slot)
		if err == nil && ping(s.Addr(), 200*time.Millisecond) == nil {
			if v, err := do(ctx, s, "INFO", "replication"); err == nil && strings.Contains(v.(string), "role:master") && c.allSee(ctx, slot, s) {
				return s, nil
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("redistest: no failover for %q: %w", key, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Migration moves one slot from one master to another, step by step, as
// redis-cli --cluster reshard does: [Cluster.BeginMigration] marks the slot
// migrating on the source and importing on the target, [Migration.MoveKeys]
// moves keys with MIGRATE, and [Migration.Finish] moves what is left and
// gives the slot to the target on every master. While it is under way,
// commands on keys that moved get ASK redirections, and multi-key commands
// whose keys are split get TRYAGAIN.
type Migration struct {
	c            *Cluster
	Slot         int
	From, To     *Server
	fromID, toID string
	finished     bool
}

// BeginMigration starts moving slot to the master to. It fails when to
// already serves the slot.
func (c *Cluster) BeginMigration(ctx context.Context, slot int, to *Server) (*Migration, error) {
	from, err := c.masterForSlot(ctx, slot)
	if err != nil {
		return nil, err
	}
	if from == to {
		return nil, fmt.Errorf("redistest: %s serves slot %d already", to.Addr(), slot)
	}
	m := &Migration{c: c, Slot: slot, From: from, To: to}
	if m.fromID, err = nodeID(ctx, from); err != nil {
		return nil, err
	}
	if m.toID, err = nodeID(ctx, to); err != nil {
		return nil, err
	}
	if _, err := do(ctx, to, "CLUSTER", "SETSLOT", slot, "IMPORTING", m.fromID); err != nil {
		return nil, fmt.Errorf("redistest: SETSLOT IMPORTING: %w", err)
	}
	if _, err := do(ctx, from, "CLUSTER", "SETSLOT", slot, "MIGRATING", m.toID); err != nil {
		return nil, fmt.Errorf("redistest: SETSLOT MIGRATING: %w", err)
	}
	return m, nil
}

func nodeID(ctx context.Context, s *Server) (string, error) {
	v, err := do(ctx, s, "CLUSTER", "MYID")
	if err != nil {
		return "", fmt.Errorf("redistest: CLUSTER MYID: %w", err)
	}
	return v.(string), nil
}

// migrateTimeout is the timeout MoveKeys gives MIGRATE.
const migrateTimeout = 5 * time.Second

// MoveKeys moves up to n keys of the slot to the target and returns how
// many it moved (0 when none are left in the source).
func (m *Migration) MoveKeys(ctx context.Context, n int) (int, error) {
	v, err := do(ctx, m.From, "CLUSTER", "GETKEYSINSLOT", m.Slot, n)
	if err != nil {
		return 0, fmt.Errorf("redistest: GETKEYSINSLOT: %w", err)
	}
	keys := v.([]any)
	if len(keys) == 0 {
		return 0, nil
	}
	host, port, _ := strings.Cut(m.To.Addr(), ":")
	args := []any{"MIGRATE", host, port, "", 0, migrateTimeout.Milliseconds(), "KEYS"}
	args = append(args, keys...)
	// The reply may take as long as MIGRATE's own timeout, longer than a
	// node client waits for one (a loaded machine runs the nodes slowly).
	cl := redis.NewClient(&redis.Options{Addr: m.From.Addr(), MaxRetries: -1, DialTimeout: time.Second,
		ReadTimeout: migrateTimeout + 2*time.Second, WriteTimeout: 2 * time.Second})
	defer cl.Close()
	if err := cl.Do(ctx, args...).Err(); err != nil {
		return 0, fmt.Errorf("redistest: MIGRATE: %w", err)
	}
	return len(keys), nil
}

// Finish moves the keys left and gives the slot to the target: the
// target first, then the source, then every other master.
func (m *Migration) Finish(ctx context.Context) error {
	for {
		n, err := m.MoveKeys(ctx, 100)
		if err != nil {
			return err
		}
		if n == 0 {
			break
		}
	}
	if _, err := do(ctx, m.To, "CLUSTER", "SETSLOT", m.Slot, "NODE", m.toID); err != nil {
		return fmt.Errorf("redistest: SETSLOT NODE on target: %w", err)
	}
	if _, err := do(ctx, m.From, "CLUSTER", "SETSLOT", m.Slot, "NODE", m.toID); err != nil {
		return fmt.Errorf("redistest: SETSLOT NODE on source: %w", err)
	}
	masters, err := m.c.Masters(ctx)
	if err != nil {
		return err
	}
	for _, s := range masters {
		if s == m.To || s == m.From {
			continue
		}
		_, _ = do(ctx, s, "CLUSTER", "SETSLOT", m.Slot, "NODE", m.toID) // gossip spreads it anyway
	}
	m.finished = true
	return nil
}

// MigrateSlot moves slot to the master to in one go, in batches of 100
// keys.
func (c *Cluster) MigrateSlot(ctx context.Context, slot int, to *Server) error {
	m, err := c.BeginMigration(ctx, slot, to)
	if err != nil {
		return err
	}
	return m.Finish(ctx)
}
