// Package redistest starts real redis-server processes for tests.
//
// Each server listens on a free port on 127.0.0.1 (never the default port
// 6379), keeps its data in a private directory and is stopped automatically
// when the test ends. Nothing is ever flushed: every server is a fresh,
// isolated process, so tests can use it freely without affecting a Redis
// instance that may be running on the machine.
//
// Use [Start] from a test or benchmark. It skips the test when redis-server
// is not in PATH, unless the environment variable REDQ_REQUIRE_REDIS is "1",
// in which case a missing redis-server fails the test. From TestMain, where no
// testing.TB is available, use [StartMain] together with [Server.Close],
// [Available] and [Required].
package redistest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	binaryName = "redis-server"

	// RequireEnv is the environment variable that, when set to "1", turns
	// a missing redis-server into a test failure instead of a skip.
	RequireEnv = "REDQ_REQUIRE_REDIS"

	defaultRedisPort = 6379
	startAttempts    = 5
	readyTimeout     = 10 * time.Second
	readyPoll        = 10 * time.Millisecond
	stopGrace        = 5 * time.Second
	logTailBytes     = 4096
	logTailLines     = 30
)

// ErrNotFound is returned by [StartMain] when redis-server is not in PATH.
var ErrNotFound = errors.New("redistest: redis-server not found in PATH")

// Option configures a server started by [Start] or [StartMain].
type Option func(*config)

type config struct {
	appendOnly bool
	args       []string
	confFile   string // a config file named before the arguments (see withConfigFile)
}

// WithAppendOnly enables the append-only file with fsync on every write
// (--appendonly yes --appendfsync always), so that data survives
// [Server.Restart], [Server.Stop] and even [Server.Kill].
func WithAppendOnly() Option {
	return func(c *config) { c.appendOnly = true }
}

// WithArgs passes more command-line arguments to redis-server, for
// example "--cluster-enabled", "yes".
func WithArgs(args ...string) Option {
	return func(c *config) { c.args = append(c.args, args...) }
}

// Available reports whether redis-server can be found in PATH and, if so,
// its path.
func Available() (path string, ok bool) {
	p, err := exec.LookPath(binaryName)
	if err != nil {
		return "", false
	}
	return p, true
}

// Required reports whether tests must fail rather than skip when
// redis-server is not available, i.e. whether REDQ_REQUIRE_REDIS is "1".
func Required() bool {
	return os.Getenv(RequireEnv) == "1"
}

// Server is a running (or stopped) redis-server process owned by a test.
// All methods are safe for concurrent use.
type Server struct {
	bin        string
	dir        string
	ownsDir    bool // dir was created by StartMain and is removed by Close
	appendOnly bool
	args       []string // more arguments (WithArgs)
	confFile   string   // config file given first on the command line, if any

	mu      sync.Mutex
	port    int
	cmd     *exec.Cmd
	done    chan struct{} // closed once cmd has been waited for
	output  *bytes.Buffer // stdout+stderr of cmd; read only after done
	stopped bool          // Stop/Kill/Close has been called since the last launch
}

// Start starts a new redis-server on a free loopback port, waits until it
// answers PING and registers t.Cleanup to stop it. The data directory is
// t.TempDir(). If redis-server is not in PATH the test is skipped, or fails
// when REDQ_REQUIRE_REDIS=1. Any other start failure fails the test with the
// tail of the server log.
func Start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	bin, ok := Available()
	if !ok {
		if Required() {
			t.Fatalf("redis-server not found in PATH, but %s=1 requires it; install Redis or unset %s", RequireEnv, RequireEnv)
		}
		t.Skip("redis-server not found in PATH; set REDQ_REQUIRE_REDIS=1 to make this an error")
	}
	// t.TempDir registers its removal before our Stop cleanup is
	// registered, so the server is stopped before its directory goes away.
	s, err := start(bin, t.TempDir(), false, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

// StartMain is like [Start] for use in TestMain, where no testing.TB exists.
// It returns [ErrNotFound] when redis-server is not in
// PATH, and any other start failure as an error that includes the tail of the
// server log. The caller must call [Server.Close] when done, which stops the
// server and removes its data directory.
func StartMain(opts ...Option) (*Server, error) {
	bin, ok := Available()
	if !ok {
		return nil, ErrNotFound
	}
	dir, err := os.MkdirTemp("", "redistest-")
	if err != nil {
		return nil, fmt.Errorf("redistest: create data dir: %w", err)
	}
	s, err := start(bin, dir, true, opts)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

// start picks a free port and launches the server, retrying with a new port
// when the process exits before becoming ready (typically because another
// process grabbed the port in between).
func start(bin, dir string, ownsDir bool, opts []Option) (*Server, error) {
	var cfg config
	for _, o := range opts {
		o(&cfg)
	}
	s := &Server{bin: bin, dir: dir, ownsDir: ownsDir, appendOnly: cfg.appendOnly, args: cfg.args, confFile: cfg.confFile}
	var lastErr error
	for attempt := 0; attempt < startAttempts; attempt++ {
		port, err := freePort()
		if err != nil {
			lastErr = err
			continue
		}
		s.mu.Lock()
		s.port = port
		err = s.launchLocked()
		s.mu.Unlock()
		if err == nil {
			return s, nil
		}
		lastErr = err
		var ee *exitedEarlyError
		if !errors.As(err, &ee) {
			break // not a port clash; retrying will not help
		}
	}
	return nil, lastErr
}

// freePort asks the kernel for a free TCP port on 127.0.0.1.
func freePort() (int, error) {
	for {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("redistest: find free port: %w", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		if err := l.Close(); err != nil {
			return 0, fmt.Errorf("redistest: find free port: %w", err)
		}
		if port != defaultRedisPort {
			return port, nil
		}
	}
}

// exitedEarlyError means redis-server exited before answering PING.
type exitedEarlyError struct{ msg string }

func (e *exitedEarlyError) Error() string { return e.msg }

// launchLocked starts redis-server on s.port and waits until it answers PING.
// On failure the process is killed and an error with the log tail returned.
// s.mu must be held.
func (s *Server) launchLocked() error {
	if s.port == defaultRedisPort {
		return fmt.Errorf("redistest: refusing to use port %d", defaultRedisPort)
	}
	appendOnly := "no"
	if s.appendOnly {
		appendOnly = "yes"
	}
	args := []string{
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", appendOnly,
		"--dir", s.dir,
		"--daemonize", "no",
		"--protected-mode", "no",
		"--logfile", s.logPath(),
	}
	if s.appendOnly {
		args = append(args, "--appendfsync", "always")
	}
	args = append(args, s.args...)
	if s.confFile != "" {
		args = append([]string{s.confFile}, args...)
	}
	cmd := exec.Command(s.bin, args...)
	// Own process group: signals we send never reach the test process.
	// Pdeathsig: a test binary that dies (a timeout, ^C) takes its servers along.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	out := new(bytes.Buffer)
	cmd.Stdout = out
	cmd.Stderr = out
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("redistest: start %s: %w", s.bin, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	s.cmd, s.done, s.output, s.stopped = cmd, done, out, false

	deadline := time.Now().Add(readyTimeout)
	for {
		if ping(s.addr(), time.Second) == nil {
			// Another server started at the same moment may have been
			// given the same free port: then this one failed to bind, and
			// the PONG came from the other. Make sure it is ours.
			pid, err := serverPID(s.addr(), time.Second)
			if err == nil && pid == cmd.Process.Pid {
				return nil
			}
			if err == nil {
				s.killLocked()
				s.stopped = true
				return &exitedEarlyError{msg: fmt.Sprintf(
					"redistest: port %d is taken by another redis-server (pid %d)%s", s.port, pid, s.diagnostics())}
			}
		}
		select {
		case <-done:
			s.stopped = true
			return &exitedEarlyError{msg: fmt.Sprintf(
				"redistest: redis-server on port %d exited before answering PING (%s)%s",
				s.port, cmd.ProcessState, s.diagnostics())}
		default:
		}
		if time.Now().After(deadline) {
			s.killLocked()
			s.stopped = true
			return fmt.Errorf("redistest: redis-server on port %d did not answer PING within %s%s",
				s.port, readyTimeout, s.diagnostics())
		}
		time.Sleep(readyPoll)
	}
}

// ping sends a PING over a raw connection and expects +PONG. Replies such
// as -LOADING count as not ready.
func ping(addr string, timeout time.Duration) error {
	conn, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(timeout)); err != nil {
		return err
	}
	if _, err := io.WriteString(conn, "*1\r\n$4\r\nPING\r\n"); err != nil {
		return err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return err
	}
	if strings.TrimSpace(line) != "+PONG" {
		return fmt.Errorf("unexpected PING reply %q", strings.TrimSpace(line))
	}
	return nil
}

// serverPID asks the server at addr for its process id (INFO server).
func serverPID(addr string, timeout time.Duration) (int, error) {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: timeout, ReadTimeout: timeout})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
			return strconv.Atoi(v)
		}
	}
	return 0, errors.New("redistest: INFO server has no process_id")
}

// diagnostics returns the process output (if it has exited) and the tail of
// the log file, formatted for appending to an error message.
func (s *Server) diagnostics() string {
	var b strings.Builder
	if s.done != nil && s.output != nil {
		select {
		case <-s.done:
			if o := strings.TrimSpace(s.output.String()); o != "" {
				fmt.Fprintf(&b, "\n--- redis-server output ---\n%s", o)
			}
		default:
		}
	}
	fmt.Fprintf(&b, "\n--- tail of %s ---\n%s", s.logPath(), logTail(s.logPath()))
	return b.String()
}

// logTail returns the last lines of the file at path, or a note explaining
// why it could not be read.
func logTail(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(cannot read log: %v)", err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size() > logTailBytes {
		if _, err := f.Seek(-logTailBytes, io.SeekEnd); err != nil {
			return fmt.Sprintf("(cannot read log: %v)", err)
		}
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return fmt.Sprintf("(cannot read log: %v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > logTailLines {
		lines = lines[len(lines)-logTailLines:]
	}
	if len(lines) == 1 && lines[0] == "" {
		return "(log is empty)"
	}
	return strings.Join(lines, "\n")
}

func (s *Server) logPath() string { return filepath.Join(s.dir, "redis.log") }

func (s *Server) addr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
}

// Addr returns the server address as "127.0.0.1:port".
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addr()
}

// Port returns the TCP port the server listens on. It does not change
// across [Server.Restart].
func (s *Server) Port() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.port
}

// Dir returns the server's data directory (also holding redis.log).
func (s *Server) Dir() string { return s.dir }

// Stop shuts the server down gracefully: it sends SIGTERM, waits for the
// process to exit and sends SIGKILL to its process group if it has not
// exited after 5 seconds. Calling Stop on a stopped server does nothing.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped || s.cmd == nil {
		return
	}
	s.stopped = true
	select {
	case <-s.done:
		return
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
		return
	case <-time.After(stopGrace):
	}
	s.killLocked()
}

// Kill sends SIGKILL to the server's process group immediately and waits for
// the process to exit, simulating a crash. Calling Kill on a stopped server
// does nothing.
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped || s.cmd == nil {
		return
	}
	s.stopped = true
	s.killLocked()
}

// killLocked SIGKILLs the process group (including any fork children such
// as an AOF rewrite) and waits for the process to be reaped. s.mu must be
// held.
func (s *Server) killLocked() {
	select {
	case <-s.done:
		return // already reaped; its pid may have been reused
	default:
	}
	// The process leads its own group (Setpgid), so -pid is that group.
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	_ = s.cmd.Process.Kill()
	<-s.done
}

// Restart stops the server (gracefully, as [Server.Stop]) and starts it again
// on the same port with the same data directory and options, so persisted
// data (see [WithAppendOnly]) is reloaded. It waits until the server answers
// PING and fails t if it does not. Restart also starts a server that was
// stopped or killed.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	if err := s.restart(); err != nil {
		t.Fatal(err)
	}
}

func (s *Server) restart() error {
	s.Stop()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.launchLocked()
}

// Relaunch starts a server that was stopped ([Server.Stop]) or killed
// ([Server.Kill]) again on the same port with the same data directory and
// options, and waits until it answers PING; it is [Server.Restart] without
// the stop and without a testing.TB, for programs that take a server down
// themselves (SIGTERM or SIGKILL) and bring it back later. A server that is
// running is left alone and nil returned. The error carries the tail of the
// server log.
func (s *Server) Relaunch() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil && !s.stopped {
		select {
		case <-s.done:
		default:
			return nil
		}
	}
	return s.launchLocked()
}

// Client returns a new go-redis client connected to the server. The client
// is closed by t.Cleanup.
func (s *Server) Client(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Close stops the server as [Server.Stop] does and, for a server created by
// [StartMain], removes its data directory. It is safe to call more than once
// and always returns nil for servers created by [Start].
func (s *Server) Close() error {
	s.Stop()
	if !s.ownsDir {
		return nil
	}
	if err := os.RemoveAll(s.dir); err != nil {
		return fmt.Errorf("redistest: remove data dir: %w", err)
	}
	return nil
}
