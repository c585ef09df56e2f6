package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redq/redq"
	"github.com/redq/redq/dashboard"
)

const serveDetails = `The dashboard shows every queue of the namespace (counts, rates, the last
hour), a delivery browser per queue with search, each delivery whole, timers,
rounds and connections. It registers nothing in Redis and only reads, unless
--actions is given: then retry, delete, run now, cancel, purge and
pause/resume are buttons (CSRF-protected POST requests). It has no login of
its own: keep it on localhost or behind an authenticating proxy, or mount
the dashboard package in your own server behind your auth middleware.`

// serveCommand: redq serve --redis URL [--namespace NS] [--addr localhost:8080] [--actions] [--prefix /redq] [--refresh 2s]
func serveCommand(fs *flag.FlagSet) func(context.Context, io.Writer, io.Writer) error {
	rf := addRedisFlags(fs)
	addr := fs.String("addr", "localhost:8080", "address to serve the dashboard on")
	actions := fs.Bool("actions", false, "enable actions (retry, delete, run now, cancel, purge, pause/resume); read-only without")
	prefix := fs.String("prefix", "", `path to serve the dashboard under, e.g. "/redq" ("" is the root)`)
	refresh := fs.Duration("refresh", dashboard.DefaultRefresh, "page refresh interval")
	return func(ctx context.Context, stdout, stderr io.Writer) error {
		opts, err := rf.options()
		if err != nil {
			return err
		}
		client := redis.NewClient(opts)
		defer func() { _ = client.Close() }() // at exit, after the server stopped
		insp, err := redq.NewInspector(client, redq.WithNamespace(rf.namespace))
		if err != nil {
			if errors.Is(err, redq.ErrorInvalidArgument) {
				return usageError{err}
			}
			return err
		}
		h, err := dashboard.New(insp, dashboard.Options{EnableActions: *actions, PathPrefix: *prefix, Refresh: *refresh})
		if err != nil {
			return usagef("%w", err)
		}
		ln, err := net.Listen("tcp", *addr)
		if err != nil {
			return fmt.Errorf("dashboard: %w (choose another address with --addr)", err)
		}
		mux := http.NewServeMux()
		if *prefix != "" {
			mux.Handle(*prefix+"/", h)
			mux.Handle(*prefix, h)
		} else {
			mux.Handle("/", h)
		}
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		failed := make(chan error, 1)
		go func() { failed <- srv.Serve(ln) }()

		mode := "read-only"
		if *actions {
			mode = "actions enabled"
		}
		fmt.Fprintf(stderr, "redq: dashboard of namespace %q (%s) on %s (Ctrl-C to stop)\n", rf.namespace, mode, serveURL(ln, *prefix))
		if err := client.Ping(ctx).Err(); err != nil && ctx.Err() == nil {
			fmt.Fprintf(stderr, "redq: Redis at %s cannot be reached yet (%v); the dashboard says so until it can\n", opts.Addr, err)
		}
		select {
		case err := <-failed:
			return fmt.Errorf("dashboard: %w", err)
		case <-ctx.Done():
		}
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			return fmt.Errorf("dashboard: shut down: %w", err)
		}
		fmt.Fprintln(stderr, "redq: stopped")
		return nil
	}
}

// serveURL is where a browser finds the dashboard listening on ln.
func serveURL(ln net.Listener, prefix string) string {
	host, port, err := net.SplitHostPort(ln.Addr().String())
	if err != nil {
		return "http://" + ln.Addr().String() + prefix + "/"
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		host = "localhost"
	}
	return "http://" + net.JoinHostPort(host, port) + prefix + "/"
}
