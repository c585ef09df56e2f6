package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redq/redq"
)

// cliTag names the connections of every command but demo.
const cliTag = "redq-cli"

// redisURLEnv names the environment variable that --redis falls back to.
const redisURLEnv = "REDIS_URL"

// redisURLForm is the hint shown with a --redis value that is not a URL.
const redisURLForm = "redis://[user:pass@]host:port/db, rediss://[user:pass@]host:port/db for TLS, or host:port"

// redisFlags are the flags that say which Redis and namespace to work on.
type redisFlags struct {
	url       string
	namespace string
}

func addRedisFlags(fs *flag.FlagSet) *redisFlags {
	f := &redisFlags{}
	fs.StringVar(&f.url, "redis", "", "Redis URL: "+redisURLForm+" (default: $"+redisURLEnv+")")
	fs.StringVar(&f.namespace, "namespace", redq.DefaultNamespace, "namespace (key prefix) of the queues")
	return f
}

// options returns the client options of --redis, else of $REDIS_URL.
func (f *redisFlags) options() (*redis.Options, error) {
	raw, from := f.url, "--redis"
	if raw == "" {
		raw, from = os.Getenv(redisURLEnv), "$"+redisURLEnv
	}
	if raw == "" {
		return nil, usagef("--redis is required (or set $%s): %s", redisURLEnv, redisURLForm)
	}
	return parseRedisURL(raw, from)
}

// parseRedisURL parses a Redis URL, or host:port (and :port, meaning
// localhost) as redis://host:port. from names where raw came from, for the
// error.
func parseRedisURL(raw, from string) (*redis.Options, error) {
	s := strings.TrimSpace(raw)
	if !strings.Contains(s, "://") {
		host, port, err := net.SplitHostPort(s)
		if err != nil || port == "" || strings.ContainsAny(host, "/@?") {
			return nil, usagef("invalid %s %q: want %s", from, raw, redisURLForm)
		}
		if _, err := strconv.ParseUint(port, 10, 16); err != nil {
			return nil, usagef("invalid %s %q: the port must be a number from 0 to 65535; want %s", from, raw, redisURLForm)
		}
		if host == "" {
			host = "localhost"
		}
		s = "redis://" + net.JoinHostPort(host, port)
	}
	opts, err := redis.ParseURL(s)
	if err != nil {
		return nil, usagef("invalid %s %q (%v): want %s", from, raw, err, redisURLForm)
	}
	return opts, nil
}

// client returns a client for the Redis of --redis; the caller closes it.
func (f *redisFlags) client() (*redis.Client, error) {
	opts, err := f.options()
	if err != nil {
		return nil, err
	}
	return redis.NewClient(opts), nil
}

// inspector returns an Inspector of the namespace and the function that
// closes its client. It registers nothing in Redis and writes nothing.
func (f *redisFlags) inspector(ctx context.Context) (*redq.Inspector, func(), error) {
	client, err := f.client()
	if err != nil {
		return nil, nil, err
	}
	in, err := redq.NewInspector(client, redq.WithNamespace(f.namespace))
	if err != nil {
		_ = client.Close() // the error below is what the user needs
		if errors.Is(err, redq.ErrorInvalidArgument) {
			return nil, nil, usageError{err}
		}
		return nil, nil, err
	}
	// A ping tells "cannot reach Redis" apart from what the command does.
	if err := client.Ping(ctx).Err(); err != nil {
		_ = client.Close() // the error below is what the user needs
		return nil, nil, fmt.Errorf("connect to Redis at %s: %w", client.Options().Addr, err)
	}
	return in, func() { _ = client.Close() }, nil // at exit: nothing was written
}

// open connects to Redis and opens a redq connection tagged tag. close
// stops the connection (deleting its heartbeat) and closes the client.
func (f *redisFlags) open(ctx context.Context, tag string, errChan chan<- error) (conn redq.Connection, close func(), err error) {
	client, err := f.client()
	if err != nil {
		return nil, nil, err
	}
	return openClient(ctx, client, tag, f.namespace, errChan)
}

// openClient opens a redq connection on client; on failure the client is
// closed.
func openClient(ctx context.Context, client *redis.Client, tag, namespace string, errChan chan<- error) (redq.Connection, func(), error) {
	conn, err := redq.Open(ctx, tag, client, errChan, redq.WithNamespace(namespace))
	if err != nil {
		_ = client.Close() // the open error is what the user needs
		if errors.Is(err, redq.ErrorInvalidArgument) {
			return nil, nil, usageError{err}
		}
		return nil, nil, fmt.Errorf("connect to Redis at %s: %w", client.Options().Addr, err)
	}
	return conn, func() {
		<-conn.StopAllConsuming()
		_ = client.Close() // at exit, after the connection stopped
	}, nil
}

// connectionName returns the full name of a redq connection, if it tells.
func connectionName(conn redq.Connection) string {
	if n, ok := conn.(interface{ Name() string }); ok {
		return n.Name()
	}
	return ""
}

// statsServer serves the stats page (redq.NewHandler) at the root path.
type statsServer struct {
	srv  *http.Server
	ln   net.Listener
	done chan error
}

// startStatsServer listens on addr and serves in the background.
func startStatsServer(addr string, conn redq.Connection) (*statsServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("stats page: %w (choose another address with --addr)", err)
	}
	mux := http.NewServeMux()
	// Only the root: a browser's /favicon.ico should not read Redis.
	mux.Handle("/{$}", redq.NewHandler(conn))
	s := &statsServer{
		srv:  &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second},
		ln:   ln,
		done: make(chan error, 1),
	}
	go func() { s.done <- s.srv.Serve(ln) }()
	return s, nil
}

// URL is where a browser finds the page.
func (s *statsServer) URL() string {
	host, port, err := net.SplitHostPort(s.ln.Addr().String())
	if err != nil {
		return "http://" + s.ln.Addr().String() + "/"
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		host = "localhost"
	}
	return "http://" + net.JoinHostPort(host, port) + "/"
}

// Failed receives the error that stopped the server, if it stops on its
// own rather than by Shutdown.
func (s *statsServer) Failed() <-chan error { return s.done }

// Shutdown stops accepting requests and waits (up to 5s) for the ones in
// flight.
func (s *statsServer) Shutdown() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.srv.Shutdown(ctx); err != nil {
		return fmt.Errorf("stats page: shut down: %w", err)
	}
	return nil
}
