//go:build linux

package soak

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// soakProc is one worker process of the soak.
type soakProc struct {
	index   int
	log     string
	errPath string // its stdout and stderr
	pid     int
	started time.Time
	done    chan struct{} // closed once it exited and exitCode is set
	// exitCode is its exit status (-1 when a signal ended it) and signal
	// the signal that ended it, if one did; set before done is closed.
	exitCode int
	signal   syscall.Signal

	// Set under soak.mu by the faults and the end of the run.
	asked        bool // sent SIGTERM at the end of the run
	killed       bool // SIGKILLed
	forced       bool // SIGKILLed because it did not stop when it should
	sigstopped   bool
	declaredDead bool      // while SIGSTOPped, a cleaner declared it dead
	contAt       time.Time // when it got SIGCONT
}

func (p *soakProc) fate() soakFate {
	return soakFate{name: fmt.Sprintf("worker %d (pid %d)", p.index, p.pid), killed: p.killed, sigstopped: p.sigstopped}
}

func (p *soakProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stderrTail returns the end of what the process wrote to stderr.
func (p *soakProc) stderrTail() string {
	b, err := os.ReadFile(p.errPath)
	if err != nil {
		return "(no output: " + err.Error() + ")"
	}
	s := strings.TrimSpace(string(b))
	if len(s) > 600 {
		s = "..." + s[len(s)-600:]
	}
	if s == "" {
		return "(no output)"
	}
	return s
}

// startWorker starts a worker process, or returns nil once the soak is
// stopping.
func (s *soak) startWorker() (*soakProc, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopping {
		return nil, nil
	}
	idx := len(s.procs) + 1
	p := &soakProc{
		index:   idx,
		log:     filepath.Join(s.dir, fmt.Sprintf("worker-%03d.log", idx)),
		errPath: filepath.Join(s.dir, fmt.Sprintf("worker-%03d.err", idx)),
		done:    make(chan struct{}),
	}
	errFile, err := os.Create(p.errPath)
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", p.errPath, err)
	}
	defer func() { _ = errFile.Close() }() // the child has its own copy
	c := s.cfg
	addr := ""
	if s.cluster != nil {
		addr = strings.Join(s.cluster.Addrs(), ",")
	} else {
		addr = s.srv.Addr()
	}
	cmd := exec.Command(s.exe, WorkerCommandName,
		"-addr", addr, "-cluster="+strconv.FormatBool(s.cluster != nil),
		"-namespace", soakNamespace, "-queue", strings.Join(s.names, ","),
		"-log", p.log, "-tag", fmt.Sprintf("soak-w%d", idx),
		"-hb-interval", c.hbInterval.String(), "-hb-ttl", c.hbTTL.String(),
		"-work", c.work.String(), "-seed", strconv.FormatUint(c.seed+uint64(idx), 10))
	if c.schedules > 0 {
		cmd.Args = append(cmd.Args, "-schedules", scheduleSetName)
	}
	cmd.Env = append(os.Environ(), WorkerEnv+"=1")
	cmd.Stdout, cmd.Stderr = errFile, errFile
	// Its own process group (a Ctrl-C reaches the soak, which stops its
	// workers), and it dies with the soak.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start worker: %w", err)
	}
	p.pid, p.started = cmd.Process.Pid, time.Now()
	s.procs = append(s.procs, p)
	go func() {
		_ = cmd.Wait() // the exit status is what we want, not an error
		p.exitCode = cmd.ProcessState.ExitCode()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			p.signal = ws.Signal()
		}
		close(p.done)
	}()
	return p, nil
}

// supervise keeps one worker running: it starts a new one whenever the
// last exited, until the soak stops.
func (s *soak) supervise(ctx context.Context) {
	defer s.supervisors.Done()
	quickFailures := 0
	for ctx.Err() == nil {
		p, err := s.startWorker()
		if err != nil {
			s.abort(err)
			return
		}
		if p == nil {
			return
		}
		<-p.done
		s.mu.Lock()
		killed := p.killed
		s.mu.Unlock()
		switch code := p.exitCode; {
		case killed, code == workerExitAsked, code == workerExitLost:
		default:
			s.out.Logf("soak %s: worker %d (pid %d) exited with status %d: %s", s.since(), p.index, p.pid, code, p.stderrTail())
		}
		// A worker that cannot even start must not be restarted forever.
		if !killed && time.Since(p.started) < 2*time.Second && p.exitCode != workerExitLost {
			if quickFailures++; quickFailures >= 5 {
				s.abort(fmt.Errorf("workers keep failing at start; the last said: %s", p.stderrTail()))
				return
			}
			time.Sleep(300 * time.Millisecond)
		} else {
			quickFailures = 0
		}
	}
}

// stopWorkers asks every worker to stop (SIGTERM), SIGKILLs those that do
// not within 30s, and waits for the supervisors.
func (s *soak) stopWorkers() {
	s.mu.Lock()
	s.stopping = true
	var live []*soakProc
	for _, p := range s.procs {
		if !p.exited() {
			p.asked = true
			live = append(live, p)
		}
	}
	s.mu.Unlock()
	for _, p := range live {
		_ = syscall.Kill(p.pid, syscall.SIGTERM)
		_ = syscall.Kill(p.pid, syscall.SIGCONT) // in case a fault left it paused
	}
	for _, p := range live {
		select {
		case <-p.done:
		case <-time.After(30 * time.Second):
			s.mu.Lock()
			p.killed, p.forced = true, true
			s.mu.Unlock()
			s.out.Logf("soak: worker %d (pid %d) did not stop within 30s of SIGTERM: SIGKILL", p.index, p.pid)
			_ = syscall.Kill(p.pid, syscall.SIGKILL)
			<-p.done
		}
	}
	s.supervisors.Wait()
}

// workerCounts returns how many workers run and how many were started.
func (s *soak) workerCounts() (live, started int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.procs {
		if !p.exited() {
			live++
		}
	}
	return live, len(s.procs)
}

// logConn returns the connection name from the start line of a worker's
// log, or "" before the worker wrote it.
func logConn(path string) string {
	conn, _ := logConnSince(path, time.Time{})
	return conn
}

// logConnSince returns the connection name a worker's log names last: the
// one it started with, or the fresh one of its last lost line; and whether
// a lost line at or after since names a fresh one.
func logConnSince(path string, since time.Time) (conn string, renewed bool) {
	f, err := os.Open(path)
	if err != nil {
		return "", false
	}
	defer func() { _ = f.Close() }() // read only: closing loses nothing
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		switch {
		case len(fs) >= 3 && fs[0] == lineStart && conn == "":
			conn = fs[2]
		case len(fs) >= 4 && fs[0] == lineLost:
			conn = fs[3]
			if len(fs) >= 4 && !parseUnixNano([]byte(fs[1])).Before(since) {
				renewed = true
			}
		}
	}
	return conn, renewed
}

// Faults.

type faultKind int

const (
	faultKill faultKind = iota
	faultSIGSTOP
	faultRedisTerm
	faultRedisKill
	faultMasterKill
	faultReshard
)

// faultStats counts the faults that were carried out.
type faultStats struct {
	kills, sigstops, redisTerms, redisKills, skipped int
	masterKills, reshards                            int
	// topology is what the master SIGKILLs and reshardings showed (see
	// cluster.go).
	topology []topologyFault
}

func (f faultStats) done() int {
	return f.kills + f.sigstops + f.redisTerms + f.redisKills + f.masterKills + f.reshards + f.skipped
}

// zombieStopLimit bounds how long a worker may take to go on under a
// fresh registration after SIGCONT once it was declared dead.
const zombieStopLimit = 15 * time.Second

// runFaults carries out the faults one at a time, spread evenly over the
// publishing: fault i of k when i/(k+1) of the deliveries were published.
// It returns an error only when Redis does not come back.
func (s *soak) runFaults(ctx context.Context) error {
	c := s.cfg
	rng := rand.New(rand.NewPCG(c.seed, 7))
	plan := faultPlan(c, rng)
	masterKills, lastReshard := 0, -1
	for i, f := range plan {
		trigger := int64(c.n) * int64(i+1) / int64(len(plan)+1)
		for s.published.Load() < trigger {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(20 * time.Millisecond):
			}
		}
		began := s.since()
		var what string
		var err error
		switch f {
		case faultKill:
			what = s.killWorker(ctx, rng)
		case faultSIGSTOP:
			what = s.pauseWorker(ctx, rng)
		case faultRedisTerm, faultRedisKill:
			what, err = s.restartRedis(ctx, rng, f == faultRedisKill)
		case faultMasterKill:
			what, err = s.killMaster(ctx, rng, masterKills == 0)
			masterKills++
		case faultReshard:
			lastReshard, what, err = s.reshard(ctx, rng, lastReshard)
		}
		if err != nil {
			return err
		}
		s.out.Logf("soak %s: fault %d/%d (from %s): %s", s.since(), i+1, len(plan), began, what)
	}
	return nil
}

// faultPlan returns the faults of a run in the order they are carried out:
// every fault the flags ask for, shuffled.
func faultPlan(c soakConfig, rng *rand.Rand) []faultKind {
	var plan []faultKind
	for kind, n := range []int{c.kills, c.sigstops, c.redisTerms, c.redisKills, c.masterKills, c.reshards} {
		for i := 0; i < n; i++ {
			plan = append(plan, faultKind(kind))
		}
	}
	rng.Shuffle(len(plan), func(i, j int) { plan[i], plan[j] = plan[j], plan[i] })
	return plan
}

// workerStartWait bounds how long a fault waits for a worker that has
// opened its connection. Race-enabled workers started beside other process
// tests on 2 CPUs were seen to take over 10s to open theirs; a fault that
// found none was skipped.
const workerStartWait = 30 * time.Second

// pickWorker chooses a running worker that has opened its connection,
// preferring one that is in the middle of an Ack (its log has an acking
// line without an outcome), then one that holds deliveries (got lines
// without an outcome), and returns it with how many deliveries it seems to
// hold. It waits up to workerStartWait for a worker, up to 500ms for one
// that acks and up to 2s for one that holds deliveries; nil if there is
// none.
func (s *soak) pickWorker(ctx context.Context, rng *rand.Rand) (*soakProc, int) {
	began := time.Now()
	for ctx.Err() == nil && time.Since(began) < workerStartWait {
		s.mu.Lock()
		var ready []*soakProc
		for _, p := range s.procs {
			if !p.exited() && !p.killed && !p.sigstopped && time.Since(p.started) > 300*time.Millisecond {
				ready = append(ready, p)
			}
		}
		s.mu.Unlock()
		var started, busy, acking []*soakProc
		holds := map[*soakProc]int{}
		for _, p := range ready {
			if logConn(p.log) == "" {
				continue
			}
			started = append(started, p)
			open, ack := openTakes(p.log)
			holds[p] = open
			if ack > 0 {
				acking = append(acking, p)
			}
			if open > 0 {
				busy = append(busy, p)
			}
		}
		waited := time.Since(began)
		for _, c := range []struct {
			procs []*soakProc
			after time.Duration
		}{{acking, 0}, {busy, 500 * time.Millisecond}, {started, 2 * time.Second}} {
			if len(c.procs) > 0 && waited >= c.after {
				p := c.procs[rng.IntN(len(c.procs))]
				return p, holds[p]
			}
		}
		time.Sleep(2 * time.Millisecond)
	}
	return nil, 0
}

// openTakes reads the end of a worker's log and counts the deliveries it
// was handed and has not acked yet (nor failed to), and of those the ones
// whose Ack is under way.
func openTakes(path string) (open, acking int) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0
	}
	defer func() { _ = f.Close() }() // read only: closing loses nothing
	const tail = 16 << 10
	if fi, err := f.Stat(); err == nil && fi.Size() > tail {
		if _, err := f.Seek(-tail, io.SeekEnd); err != nil {
			return 0, 0
		}
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return 0, 0
	}
	state := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		fs := strings.Fields(line)
		if len(fs) < 4 {
			continue
		}
		key := fs[1] + " " + fs[len(fs)-1]
		switch fs[0] {
		case lineGot, lineAcking:
			state[key] = fs[0]
		case lineAcked, lineAckErr:
			delete(state, key)
		}
	}
	for _, st := range state {
		if st == lineAcking {
			acking++
		}
	}
	return len(state), acking
}

func (s *soak) skipFault(why string) string {
	s.mu.Lock()
	s.faults.skipped++
	s.mu.Unlock()
	return "skipped: " + why
}

// killWorker SIGKILLs a worker, preferably in the middle of its work.
func (s *soak) killWorker(ctx context.Context, rng *rand.Rand) string {
	p, open := s.pickWorker(ctx, rng)
	if p == nil {
		return s.skipFault("no running worker to SIGKILL")
	}
	s.mu.Lock()
	p.killed = true
	s.faults.kills++
	s.mu.Unlock()
	_ = syscall.Kill(p.pid, syscall.SIGKILL)
	return fmt.Sprintf("SIGKILL worker %d (pid %d) holding about %d deliveries", p.index, p.pid, open)
}

// pauseWorker SIGSTOPs a worker until a cleaner declared it dead and
// returned its deliveries, then SIGCONTs it and waits for it to go on by
// itself under a fresh registration (its log says so).
func (s *soak) pauseWorker(ctx context.Context, rng *rand.Rand) string {
	p, open := s.pickWorker(ctx, rng)
	if p == nil {
		return s.skipFault("no running worker to SIGSTOP")
	}
	conn := logConn(p.log)
	s.mu.Lock()
	p.sigstopped = true
	s.faults.sigstops++
	s.mu.Unlock()
	stopAt := time.Now()
	_ = syscall.Kill(p.pid, syscall.SIGSTOP)

	// Paused at least until a random time up to -sigstop-max: a pause
	// longer than the client's read timeout (go-redis: 3s) makes the
	// worker's calls under way time out and be sent again when it
	// resumes, after the cleaner declared it dead.
	var least time.Duration
	if s.cfg.sigstopMax > 0 {
		least = time.Duration(rng.Int64N(int64(s.cfg.sigstopMax) + 1))
	}
	// Dead once it left the connections set and a cleaner took back what
	// it held (which unregisters it from the queue).
	dead := false
	limit := max(10*s.cfg.hbTTL, 10*time.Second, least)
	for time.Since(stopAt) < limit && ctx.Err() == nil {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		member, err := s.client.SIsMember(cctx, "{"+soakNamespace+"}:connections", conn).Result()
		registered := false
		for _, name := range s.names {
			if err != nil || registered {
				break
			}
			registered, err = s.client.HExists(cctx, soakNamespace+":{"+name+"}:consumers", conn).Result()
		}
		cancel()
		if err == nil && !member && !registered {
			dead = true
			if time.Since(stopAt) >= least {
				break
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	paused := time.Since(stopAt)
	s.mu.Lock()
	p.declaredDead = dead
	p.contAt = time.Now()
	s.mu.Unlock()
	_ = syscall.Kill(p.pid, syscall.SIGCONT)
	what := fmt.Sprintf("SIGSTOP worker %d (pid %d) holding about %d deliveries for %v", p.index, p.pid, open, paused.Round(time.Millisecond))
	if !dead {
		return what + ": it was NOT declared dead; SIGCONT"
	}
	s.mu.Lock()
	contAt := p.contAt
	s.mu.Unlock()
	for deadline := time.Now().Add(zombieStopLimit); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		select {
		case <-p.done:
			return fmt.Sprintf("%s until declared dead; after SIGCONT it exited with status %d after %v",
				what, p.exitCode, time.Since(contAt).Round(time.Millisecond))
		default:
		}
		if fresh, renewed := logConnSince(p.log, contAt); renewed {
			return fmt.Sprintf("%s until declared dead; %v after SIGCONT it went on as %s",
				what, time.Since(contAt).Round(time.Millisecond), fresh)
		}
	}
	s.mu.Lock()
	p.killed, p.forced = true, true
	s.mu.Unlock()
	_ = syscall.Kill(p.pid, syscall.SIGKILL)
	<-p.done
	return fmt.Sprintf("%s until declared dead; it did NOT go on under a fresh registration within %v of SIGCONT: SIGKILL", what, zombieStopLimit)
}

// restartRedis takes Redis down with SIGTERM or SIGKILL, leaves it down
// for a random time between -down-min and -down-max and starts it again on
// the same port and AOF directory.
func (s *soak) restartRedis(ctx context.Context, rng *rand.Rand, kill bool) (string, error) {
	how := "SIGTERM"
	s.redisDown.Store(true)
	defer s.redisUp()
	t0 := time.Now()
	if kill {
		how = "SIGKILL"
		s.srv.Kill()
	} else {
		s.srv.Stop()
	}
	stopped := time.Since(t0)
	down := s.cfg.downMin
	if span := s.cfg.downMax - s.cfg.downMin; span > 0 {
		down += time.Duration(rng.Int64N(int64(span) + 1))
	}
	select {
	case <-ctx.Done():
	case <-time.After(down):
	}
	t1 := time.Now()
	var err error
	for try := 0; try < 5; try++ {
		if err = s.srv.Relaunch(); err == nil {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if err != nil {
		return "", fmt.Errorf("redis-server did not come back after %s: %w", how, err)
	}
	s.mu.Lock()
	if kill {
		s.faults.redisKills++
	} else {
		s.faults.redisTerms++
	}
	s.mu.Unlock()
	return fmt.Sprintf("Redis %s (it took %v to exit), down %v, back in %v", how,
		stopped.Round(time.Millisecond), down.Round(time.Millisecond), time.Since(t1).Round(time.Millisecond)), nil
}
