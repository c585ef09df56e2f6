// Command dashboard mounts redq's dashboard in an application's own server,
// under a path prefix and behind the application's authentication (HTTP
// basic auth here), with actions enabled.
//
//	go run ./examples/dashboard            # then open http://localhost:3334/admin/redq/ (user ops, password ops)
//	go run ./examples/dashboard -redis redis://localhost:6379/0 -duration 0
//
// Set DASHBOARD_USER and DASHBOARD_PASSWORD to change the credentials.
// Without -redis it runs on an embedded miniredis with some traffic.
package main

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redq/redq"
	"github.com/redq/redq/dashboard"
)

// namespace keeps the examples' keys apart from real queues in the same
// Redis (the default namespace is "redq").
const namespace = "redq-examples"

func main() {
	redisURL := flag.String("redis", "", "Redis URL (default: an embedded miniredis, with some traffic)")
	addr := flag.String("addr", "localhost:3334", "address to listen on")
	duration := flag.Duration("duration", 3*time.Second, "stop after this long (0: run until Ctrl-C)")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *duration)
		defer cancel()
	}
	if err := run(ctx, *redisURL, *addr); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, redisURL, addr string) error {
	client, err := newClient(redisURL)
	if err != nil {
		return err
	}
	defer func() { _ = client.Close() }() // at exit, after the server stopped
	if redisURL == "" {
		// An empty embedded Redis makes a dull page: add some traffic.
		stopTraffic, err := startTraffic(ctx, client)
		if err != nil {
			return err
		}
		defer stopTraffic() // before the client closes
	}

	insp, err := redq.NewInspector(client, redq.WithNamespace(namespace))
	if err != nil {
		return err
	}
	dash, err := dashboard.New(insp, dashboard.Options{
		PathPrefix:    "/admin/redq", // where it is mounted below
		EnableActions: true,          // retry, delete, purge, pause... (CSRF-protected)
	})
	if err != nil {
		return err
	}
	user, password := os.Getenv("DASHBOARD_USER"), os.Getenv("DASHBOARD_PASSWORD")
	if user == "" || password == "" {
		user, password = "ops", "ops"
	}
	mux := http.NewServeMux()
	// The dashboard has no login of its own: wrap it in yours.
	mux.Handle("/admin/redq/", basicAuth(user, password, dash))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "the application lives here; the queue dashboard is at /admin/redq/")
	})
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}

	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.ListenAndServe() }()
	log.Printf("dashboard on http://%s/admin/redq/ (user %q)", addr, user)

	select {
	case err := <-serveErr:
		return err // could not listen, for example
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	log.Print("stopped")
	return nil
}

// basicAuth lets a request through to next only with the user and password
// given, compared in constant time.
func basicAuth(user, password string, next http.Handler) http.Handler {
	wantUser, wantPassword := sha256.Sum256([]byte(user)), sha256.Sum256([]byte(password))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, p, ok := r.BasicAuth()
		gotUser, gotPassword := sha256.Sum256([]byte(u)), sha256.Sum256([]byte(p))
		if !ok || subtle.ConstantTimeCompare(gotUser[:], wantUser[:])&subtle.ConstantTimeCompare(gotPassword[:], wantPassword[:]) != 1 {
			w.Header().Set("WWW-Authenticate", `Basic realm="redq", charset="UTF-8"`)
			http.Error(w, "authentication required", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// newClient connects to the Redis at redisURL, or to a fresh embedded
// miniredis when redisURL is empty.
func newClient(redisURL string) (*redis.Client, error) {
	if redisURL == "" {
		m, err := miniredis.Run()
		if err != nil {
			return nil, err
		}
		return redis.NewClient(&redis.Options{Addr: m.Addr()}), nil
	}
	opts, err := redis.ParseURL(redisURL)
	if err != nil {
		return nil, fmt.Errorf("invalid -redis: %w", err)
	}
	return redis.NewClient(opts), nil
}

// startTraffic publishes to two queues now and then, and consumes one of
// them with a handler that fails now and then, so that some deliveries end
// up rejected with their error. stop ends it all.
func startTraffic(ctx context.Context, client *redis.Client) (stop func(), err error) {
	conn, err := redq.Open(ctx, "example-worker", client, nil, redq.WithNamespace(namespace))
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	publisherDone := make(chan struct{})
	stop = func() {
		cancel()
		<-publisherDone
		<-conn.StopAllConsuming()
	}
	fail := func(err error) (func(), error) {
		cancel()
		close(publisherDone)
		<-conn.StopAllConsuming()
		return nil, err
	}
	emails, err := conn.OpenQueue("emails", redq.WithRetryPolicy(redq.RetryPolicy{MaxAttempts: 2, InitialBackoff: time.Second, MaxBackoff: time.Second}))
	if err != nil {
		return fail(err)
	}
	reports, err := conn.OpenQueue("reports") // nobody consumes this one
	if err != nil {
		return fail(err)
	}
	if err := emails.StartConsuming(10, time.Second); err != nil {
		return fail(err)
	}
	if _, err := emails.AddHandler("mailer", func(ctx context.Context, m redq.Message) error {
		time.Sleep(20 * time.Millisecond)
		if rand.IntN(10) == 0 {
			return errors.New("smtp: 451 try again later")
		}
		return nil
	}); err != nil {
		return fail(err)
	}
	go func() {
		defer close(publisherDone)
		ticker := time.NewTicker(100 * time.Millisecond)
		defer ticker.Stop()
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-ticker.C:
			}
			_ = emails.Put(ctx, fmt.Appendf(nil, `{"to":"user%d@example.com","template":"welcome"}`, i))
			if i%5 == 0 {
				_ = reports.Put(ctx, fmt.Appendf(nil, "report-%d", i))
			}
		}
	}()
	return stop, nil
}
