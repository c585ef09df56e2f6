package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redq/redq"
)

// cliTag names the connections of every command but demo.
const cliTag = "redq-cli"

// redisFlags are the flags that say which Redis and namespace to work on.
type redisFlags struct {
	url       string
	namespace string
}

func addRedisFlags(fs *flag.FlagSet) *redisFlags {
	f := &redisFlags{}
	fs.StringVar(&f.url, "redis", "", "Redis URL, e.g. redis://localhost:6379/0 or rediss://user:password@host:6380 (required)")
	fs.StringVar(&f.namespace, "namespace", redq.DefaultNamespace, "namespace (key prefix) of the queues")
	return f
}

// open connects to Redis and opens a redq connection tagged tag. close
// stops the connection (deleting its heartbeat) and closes the client.
func (f *redisFlags) open(ctx context.Context, tag string, errChan chan<- error) (conn redq.Connection, close func(), err error) {
	if f.url == "" {
		return nil, nil, usagef("--redis is required")
	}
	opts, err := redis.ParseURL(f.url)
	if err != nil {
		return nil, nil, usagef("invalid --redis URL: %w", err)
	}
	return openClient(ctx, redis.NewClient(opts), tag, f.namespace, errChan)
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
