package redq

import (
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/redq/redq/internal/redistest"
)

// The root package's cluster tests share one real Redis Cluster (3 masters
// + 3 replicas), started the first time a test asks for it and stopped by
// TestMain; they isolate themselves by namespace. Tests that kill nodes or
// migrate slots start a private cluster instead (redistest.StartCluster).
var shared struct {
	once    sync.Once
	cluster *redistest.Cluster
	err     error
}

// sharedCluster returns the shared cluster, starting it on first use. It
// skips the test when redis-server is missing, or fails it when
// REDQ_REQUIRE_REDIS=1.
func sharedCluster(t testing.TB) *redistest.Cluster {
	t.Helper()
	skipShort(t, "starts a 6-node Redis Cluster")
	shared.once.Do(func() {
		shared.cluster, shared.err = redistest.StartClusterMain()
	})
	switch {
	case shared.err == nil:
		return shared.cluster
	case redistest.Required():
		t.Fatalf("REDQ_REQUIRE_REDIS=1 but no Redis Cluster: %v", shared.err)
	default:
		t.Skipf("no Redis Cluster (set REDQ_REQUIRE_REDIS=1 to make this an error): %v", shared.err)
	}
	return nil
}

// closeSharedCluster stops the shared cluster if a test started it.
func closeSharedCluster() {
	if shared.cluster != nil {
		if err := shared.cluster.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "closing the shared cluster:", err)
		}
	}
}

// clusterBackend is a backend on the shared cluster, with go-redis's
// default cluster options.
func clusterBackend(t testing.TB) backend {
	t.Helper()
	return backend{name: "cluster", client: sharedCluster(t).Client(t)}
}

// onCluster runs f on the shared cluster, as forEachBackend runs it on a
// single node.
func onCluster(t *testing.T, f func(t *testing.T, b backend)) {
	t.Run("cluster", func(t *testing.T) { f(t, clusterBackend(t)) })
}

// waitStopped waits for a StopConsuming or StopAllConsuming channel,
// bounded, and returns how long it took.
func waitStopped(t testing.TB, what string, done <-chan struct{}) time.Duration {
	t.Helper()
	start := time.Now()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not return within 30s", what)
	}
	return time.Since(start)
}
