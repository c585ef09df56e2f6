//go:build linux

package soak

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redq/redq/internal/redistest"
)

// The soak's Cluster mode (redq soak -cluster): the same publishers,
// workers and checks, on a private Redis Cluster of 3 masters and 3
// replicas, over several queues in different slots, with two more faults:
// a master SIGKILLed (its replica takes over; the killed node is relaunched
// and rejoins as a replica) and a busy queue's slot migrated to another
// master while it is consumed.

// maxSoakQueues bounds -queues (a payload's queue is kept in a byte).
const maxSoakQueues = 16

// clusterSlots is the number of hash slots of a Redis Cluster.
const clusterSlots = 16384

// crc16 is the CRC16 (XMODEM) Redis Cluster hashes keys with.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// keySlot returns the hash slot of a key: of its hash tag when it has a
// non-empty one.
func keySlot(key string) int {
	if open := strings.IndexByte(key, '{'); open >= 0 {
		if end := strings.IndexByte(key[open+1:], '}'); end > 0 {
			key = key[open+1 : open+1+end]
		}
	}
	return int(crc16(key)) % clusterSlots
}

// queueKey returns a key of the queue name in namespace ns (its ready
// list): every key of the queue is in its slot.
func queueKey(ns, name string) string { return ns + ":{" + name + "}:ready" }

// globalKey returns a key of the namespace's global keys (the set of
// connections): heartbeats and registrations are in its slot.
func globalKey(ns string) string { return "{" + ns + "}:connections" }

// soakQueueNames returns the names of the soak's queues. On one Redis it
// is the one queue "soak". On a cluster, the first of n is in the slot of
// the namespace's global keys, and the others in other slots, spread over
// the thirds of the slot range that a 3-master cluster gives its masters.
func soakQueueNames(ns string, n int, cluster bool) []string {
	if !cluster {
		return []string{soakQueue}
	}
	third := func(slot int) int { return slot * 3 / clusterSlots }
	global := keySlot(globalKey(ns))
	used := map[int]bool{}
	find := func(prefix string, ok func(slot int) bool) string {
		for k := 0; ; k++ {
			name := prefix
			if k > 0 {
				name += "-" + strconv.Itoa(k)
			}
			if slot := keySlot(queueKey(ns, name)); ok(slot) && !used[slot] {
				used[slot] = true
				return name
			}
		}
	}
	names := []string{find("soak-g", func(slot int) bool { return slot == global })}
	for i := 1; i < n; i++ {
		want := (third(global) + i) % 3
		names = append(names, find("soak-"+strconv.Itoa(i), func(slot int) bool { return third(slot) == want }))
	}
	return names
}

// topologyFault is what one master SIGKILL or resharding showed.
type topologyFault struct {
	what   string   // "master SIGKILL" or "resharding"
	queues []string // the queues it touched
	// took is how long the fault lasted: from the SIGKILL until a replica
	// said it is master (polled every 20ms), or from the start of the migration until the slot
	// belonged to the target.
	took time.Duration
	// resumed is how long after the SIGKILL, or after the slot moved,
	// every queue it touched had a delivery acked again; resumedOK is
	// false when one did not within -resume-limit.
	resumed   time.Duration
	resumedOK bool
	// idle holds the queues it touched that had nothing to consume after
	// it: they count as resumed, but not in the figures.
	idle []string
}

// ackWatch watches the workers' logs, from a moment on, for acks of
// deliveries of some queues.
type ackWatch struct {
	s       *soak
	since   time.Time
	want    map[int]bool // queue indices still without an ack
	offsets map[string]int64
	partial map[string][]byte          // a line not yet ended, by log
	acking  map[string]map[string]bool // takes whose acking line came after since, by log
	result  chan ackWatchResult
}

// ackWatchResult is what an ackWatch saw.
type ackWatchResult struct {
	// last is when the last of the queues that had acks had its first.
	last time.Duration
	// ok is false when a queue had neither an ack nor was empty.
	ok bool
	// idle holds the queues that had nothing to ack when looked at.
	idle []int
}

// watchAcks watches for acks of the queues (indices in s.names) from now
// until each had one, was found empty (nothing to consume), or limit
// passed. Only acks whose acking line the logs show from now on count.
// Its logs are read every 20ms, so the times are that close.
func (s *soak) watchAcks(ctx context.Context, queues []int, limit time.Duration) *ackWatch {
	w := &ackWatch{s: s, since: time.Now(), want: map[int]bool{}, offsets: map[string]int64{},
		partial: map[string][]byte{}, acking: map[string]map[string]bool{}, result: make(chan ackWatchResult, 1)}
	for _, q := range queues {
		w.want[q] = true
	}
	s.mu.Lock()
	procs := slices.Clone(s.procs)
	s.mu.Unlock()
	for _, p := range procs {
		if fi, err := os.Stat(p.log); err == nil {
			w.offsets[p.log] = fi.Size()
		}
	}
	go w.loop(ctx, w.since.Add(limit))
	return w
}

// wait returns what the watch saw, once it is over.
func (w *ackWatch) wait() ackWatchResult { return <-w.result }

func (w *ackWatch) loop(ctx context.Context, deadline time.Time) {
	var r ackWatchResult
	lastLook := time.Now()
	for len(w.want) > 0 {
		w.s.mu.Lock()
		procs := slices.Clone(w.s.procs)
		w.s.mu.Unlock()
		for _, p := range procs {
			if len(w.want) == 0 {
				break
			}
			w.read(p.log, &r.last)
		}
		if len(w.want) > 0 && time.Since(lastLook) > 500*time.Millisecond {
			// A queue with nothing ready, delayed or unacked has nothing
			// to resume: the publishing is over, or not yet under way.
			lastLook = time.Now()
			if _, each, err := w.s.queueCounts(ctx); err == nil {
				for q := range w.want {
					if each[q].total() == 0 {
						delete(w.want, q)
						r.idle = append(r.idle, q)
					}
				}
			}
		}
		if len(w.want) == 0 || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	r.ok = len(w.want) == 0
	w.result <- r
}

// read reads what a log gained since the last read and crosses off the
// queues whose deliveries it shows acked.
func (w *ackWatch) read(path string, last *time.Duration) {
	f, err := os.Open(path)
	if err != nil {
		return
	}
	defer func() { _ = f.Close() }() // read only: closing loses nothing
	if _, err := f.Seek(w.offsets[path], io.SeekStart); err != nil {
		return
	}
	b, err := io.ReadAll(f)
	if err != nil || len(b) == 0 {
		return
	}
	w.offsets[path] += int64(len(b))
	b = append(w.partial[path], b...)
	end := bytes.LastIndexByte(b, '\n')
	w.partial[path] = slices.Clone(b[end+1:])
	if w.acking[path] == nil {
		w.acking[path] = map[string]bool{}
	}
	for _, line := range strings.Split(string(b[:end+1]), "\n") {
		fs := strings.Fields(line)
		if len(fs) != 4 {
			continue
		}
		take := fs[1] + " " + fs[3]
		switch fs[0] {
		case lineAcking:
			w.acking[path][take] = true
		case lineAcked:
			if !w.acking[path][take] {
				continue // its Ack began before the watch
			}
			p, err := strconv.Atoi(fs[2])
			if err != nil {
				continue
			}
			q := w.s.payloadQueue(p)
			if w.want[q] {
				delete(w.want, q)
				*last = time.Since(w.since)
			}
		}
	}
}

// payloadQueue returns the index of the queue payload p was published to.
func (s *soak) payloadQueue(p int) int {
	if p < 0 || p >= len(s.pubQueue) {
		return -1
	}
	s.pubQueueMu.RLock()
	defer s.pubQueueMu.RUnlock()
	return int(s.pubQueue[p])
}

// queuesOn returns the indices of the queues whose slot the master serves.
func (s *soak) queuesOn(ctx context.Context, master *redistest.Server) ([]int, error) {
	var out []int
	for i, name := range s.names {
		m, err := s.cluster.MasterFor(ctx, queueKey(soakNamespace, name))
		if err != nil {
			return nil, err
		}
		if m == master {
			out = append(out, i)
		}
	}
	return out, nil
}

func (s *soak) queueNames(idx []int) []string {
	var out []string
	for _, i := range idx {
		out = append(out, s.names[i])
	}
	return out
}

// killMaster SIGKILLs a master (the one serving the global keys when
// global, else one at random), waits for its replica to take over,
// relaunches the killed node (it rejoins as a replica), waits for the
// cluster to be healthy and for the consumers of the queues it served to
// ack again.
func (s *soak) killMaster(ctx context.Context, rng *rand.Rand, global bool) (string, error) {
	wctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	var target *redistest.Server
	var err error
	probe := globalKey(soakNamespace)
	if global {
		target, err = s.cluster.MasterFor(wctx, probe)
	} else {
		// A master that serves a queue of the soak (reshardings may have
		// left one with none).
		var masters []*redistest.Server
		if masters, err = s.cluster.Masters(wctx); err == nil {
			rng.Shuffle(len(masters), func(i, j int) { masters[i], masters[j] = masters[j], masters[i] })
			for _, m := range masters {
				var on []int
				if on, err = s.queuesOn(wctx, m); err != nil || len(on) > 0 {
					target = m
					break
				}
			}
		}
	}
	if err != nil {
		return "", fmt.Errorf("master SIGKILL: find the master: %w", err)
	}
	if target == nil {
		return s.skipFault("no master serves a queue of the soak"), nil
	}
	affected, err := s.queuesOn(wctx, target)
	if err != nil {
		return "", fmt.Errorf("master SIGKILL: %w", err)
	}
	m, err := s.cluster.MasterFor(wctx, probe)
	if err != nil {
		return "", fmt.Errorf("master SIGKILL: %w", err)
	}
	servesGlobal := m == target
	if !servesGlobal {
		probe = queueKey(soakNamespace, s.names[affected[0]])
	}
	replicas := s.replicasOf(wctx, target)
	watch := s.watchAcks(ctx, affected, s.cfg.resumeLimit)
	s.redisDown.Store(true)
	defer s.redisUp()
	t0 := time.Now()
	target.Kill()
	promotedAt := make(chan time.Duration, 1)
	go func() { promotedAt <- waitPromoted(wctx, replicas, t0) }()
	promoted, err := s.cluster.WaitFailover(wctx, probe)
	if err != nil {
		return "", fmt.Errorf("master SIGKILL of %s: %w", target.Addr(), err)
	}
	// When a replica of the killed master said it is master, or else when
	// the cluster's view named a live master for its slots.
	failover := time.Since(t0)
	if d := <-promotedAt; d > 0 {
		failover = d
	}
	for try := 0; ; try++ {
		if err = target.Relaunch(); err == nil || try == 4 {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if err != nil {
		return "", fmt.Errorf("relaunch %s after its SIGKILL: %w", target.Addr(), err)
	}
	if err := s.cluster.WaitHealthy(wctx); err != nil {
		return "", fmt.Errorf("after the SIGKILL of %s: %w", target.Addr(), err)
	}
	healthy := time.Since(t0)
	s.redisUp()
	r := watch.wait()
	tf := topologyFault{what: "master SIGKILL", queues: s.queueNames(affected), took: failover, resumed: r.last, resumedOK: r.ok, idle: s.queueNames(r.idle)}
	s.mu.Lock()
	s.faults.masterKills++
	s.faults.topology = append(s.faults.topology, tf)
	s.mu.Unlock()
	return fmt.Sprintf("SIGKILL master %s (global keys: %v, queues %s): %s promoted after %v, cluster healthy again after %v; %s",
		target.Addr(), servesGlobal, strings.Join(tf.queues, ", "), promoted.Addr(), shortDuration(failover), shortDuration(healthy), tf.resumedString("the SIGKILL")), nil
}

// replicasOf returns the addresses of the replicas of a master, by what
// the other nodes say of themselves.
func (s *soak) replicasOf(ctx context.Context, master *redistest.Server) []string {
	var out []string
	for _, n := range s.cluster.Nodes {
		if n == master {
			continue
		}
		if info, err := nodeInfo(ctx, n.Addr(), "replication"); err == nil &&
			strings.Contains(info, "role:slave") && strings.Contains(info, "master_port:"+strconv.Itoa(master.Port())+"\r\n") {
			out = append(out, n.Addr())
		}
	}
	return out
}

// waitPromoted polls the replicas every 20ms until one says it is a
// master, and returns how long after t0 that was (0 if none did before
// ctx ended).
func waitPromoted(ctx context.Context, replicas []string, t0 time.Time) time.Duration {
	for len(replicas) > 0 && ctx.Err() == nil {
		for _, addr := range replicas {
			if info, err := nodeInfo(ctx, addr, "replication"); err == nil && strings.Contains(info, "role:master") {
				return time.Since(t0)
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
	return 0
}

// nodeInfo returns a section of INFO of one node.
func nodeInfo(ctx context.Context, addr, section string) (string, error) {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond,
		ReadTimeout: time.Second, WriteTimeout: time.Second})
	defer func() { _ = c.Close() }() // a one-off probe client
	return c.Info(ctx, section).Result()
}

// reshard migrates the slot of the busiest queue (other than the one the
// last resharding moved, if there are others) to another master, a few
// keys at a time so that the queue is consumed while its keys are split
// between the two (commands get ASK and TRYAGAIN), and waits for its
// consumers to ack again.
func (s *soak) reshard(ctx context.Context, rng *rand.Rand, last int) (int, string, error) {
	wctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	var candidates []int
	for i := range s.names {
		if i != last || len(s.names) == 1 {
			candidates = append(candidates, i)
		}
	}
	qi := candidates[rng.IntN(len(candidates))]
	if _, each, err := s.queueCounts(wctx); err == nil {
		busiest := int64(0)
		for _, i := range candidates {
			if n := each[i].ready + each[i].unacked; n > busiest {
				qi, busiest = i, n
			}
		}
	}
	name := s.names[qi]
	slot := keySlot(queueKey(soakNamespace, name))
	from, err := s.cluster.MasterFor(wctx, queueKey(soakNamespace, name))
	if err != nil {
		return qi, "", fmt.Errorf("resharding: %w", err)
	}
	masters, err := s.cluster.Masters(wctx)
	if err != nil {
		return qi, "", fmt.Errorf("resharding: %w", err)
	}
	masters = slices.DeleteFunc(masters, func(m *redistest.Server) bool { return m == from })
	if len(masters) == 0 {
		return qi, s.skipFault("no other master to move a slot to"), nil
	}
	to := masters[rng.IntN(len(masters))]
	t0 := time.Now()
	m, err := s.cluster.BeginMigration(wctx, slot, to)
	if err != nil {
		return qi, "", fmt.Errorf("resharding of slot %d: %w", slot, err)
	}
	moved := 0
	failing := time.Time{}
	for {
		n, err := m.MoveKeys(wctx, 2)
		if err != nil {
			// MIGRATE fails when the target holds a key of the slot that
			// the source holds too (BUSYKEY): something created it there
			// mid-migration. Keep trying a while, then give up loudly.
			if failing.IsZero() {
				failing = time.Now()
				s.out.Logf("soak %s: resharding of slot %d (queue %s): %v", s.since(), slot, name, err)
			}
			if time.Since(failing) > 10*time.Second {
				return qi, "", fmt.Errorf("resharding of slot %d (queue %s) from %s to %s is stuck after %d keys: %w", slot, name, from.Addr(), to.Addr(), moved, err)
			}
			time.Sleep(100 * time.Millisecond)
			continue
		}
		failing = time.Time{}
		if n == 0 {
			break
		}
		moved += n
		time.Sleep(50 * time.Millisecond)
	}
	if err := m.Finish(wctx); err != nil {
		return qi, "", fmt.Errorf("resharding of slot %d (queue %s): finish: %w", slot, name, err)
	}
	took := time.Since(t0)
	r := s.watchAcks(ctx, []int{qi}, s.cfg.resumeLimit).wait()
	tf := topologyFault{what: "resharding", queues: []string{name}, took: took, resumed: r.last, resumedOK: r.ok, idle: s.queueNames(r.idle)}
	s.mu.Lock()
	s.faults.reshards++
	s.faults.topology = append(s.faults.topology, tf)
	s.mu.Unlock()
	return qi, fmt.Sprintf("resharding: slot %d of queue %s from %s to %s, %d keys moved two at a time, in %v; %s",
		slot, name, from.Addr(), to.Addr(), moved, shortDuration(took), tf.resumedString("the slot moved")), nil
}

func (t topologyFault) resumedString(after string) string {
	if !t.resumedOK {
		return "consumers of " + strings.Join(t.queues, ", ") + " did NOT ack again within -resume-limit after " + after
	}
	if len(t.idle) == len(t.queues) {
		return fmt.Sprintf("%s had nothing left to consume after %s", strings.Join(t.queues, ", "), after)
	}
	var busy []string
	for _, q := range t.queues {
		if !slices.Contains(t.idle, q) {
			busy = append(busy, q)
		}
	}
	return fmt.Sprintf("consumers of %s acked again %v after %s", strings.Join(busy, ", "), shortDuration(t.resumed), after)
}

// busy reports whether the fault's queues had deliveries to consume after
// it, so that the time until acks resumed is a figure.
func (t topologyFault) busy() bool { return t.resumedOK && len(t.idle) < len(t.queues) }

// topologyFigures sums up the master SIGKILLs and reshardings for the
// summary line: the median and the longest of their durations and of the
// times until consuming resumed.
func topologyFigures(faults []topologyFault) string {
	var failovers, kills, reshards, reshardResumes []time.Duration
	for _, f := range faults {
		switch f.what {
		case "master SIGKILL":
			failovers = append(failovers, f.took)
			if f.busy() {
				kills = append(kills, f.resumed)
			}
		default:
			reshards = append(reshards, f.took)
			if f.busy() {
				reshardResumes = append(reshardResumes, f.resumed)
			}
		}
	}
	return fmt.Sprintf("failover=%s kill_to_acks=%s reshard=%s reshard_to_acks=%s",
		medianMax(failovers), medianMax(kills), medianMax(reshards), medianMax(reshardResumes))
}

// medianMax renders durations as median/max ("-" for none).
func medianMax(ds []time.Duration) string {
	if len(ds) == 0 {
		return "-"
	}
	ds = slices.Clone(ds)
	slices.Sort(ds)
	return fmt.Sprintf("%v/%v", shortDuration(ds[len(ds)/2]), shortDuration(ds[len(ds)-1]))
}

// topologyCheck judges the master SIGKILLs and reshardings: after each,
// the consumers of every queue it touched acked again within -resume-limit.
func topologyCheck(faults []topologyFault, limit time.Duration) soakCheck {
	var bad, all exampleSet
	for _, f := range faults {
		after := "the SIGKILL"
		if f.what == "resharding" {
			after = "the slot moved"
		}
		line := fmt.Sprintf("%s (took %v): %s", f.what, shortDuration(f.took), f.resumedString(after))
		if !f.resumedOK {
			bad.add("%s", line)
		}
		all.add("%s", line)
	}
	return soakCheck{
		name:     "consuming resumed after every master SIGKILL and resharding",
		ok:       bad.count == 0,
		detail:   fmt.Sprintf("%d of %d within %v", len(faults)-bad.count, len(faults), limit),
		examples: all.examples,
		always:   true,
	}
}
