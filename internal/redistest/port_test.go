package redistest

import (
	"errors"
	"testing"
)

// A server that cannot bind its port, because another redis-server took
// it first, is not mistaken for ready on the other's PONG.
func TestLaunchOnATakenPortFails(t *testing.T) {
	first := Start(t)
	bin, _ := Available()
	s := &Server{bin: bin, dir: t.TempDir(), port: first.Port()}
	s.mu.Lock()
	err := s.launchLocked()
	s.mu.Unlock()
	t.Cleanup(s.Stop)
	var ee *exitedEarlyError
	if !errors.As(err, &ee) {
		t.Fatalf("launch on the port of %s: %v; want an exitedEarlyError", first.Addr(), err)
	}
	if err := first.Client(t).Ping(ctx(t)).Err(); err != nil {
		t.Fatalf("the first server was hurt: %v", err)
	}
}
