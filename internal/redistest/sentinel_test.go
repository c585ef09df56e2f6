package redistest

import (
	"testing"
	"time"
)

// A failover client writes through the master; once the master is killed
// the sentinels promote the replica, and the same client reads the write
// back from the new master.
func TestSentinelFailover(t *testing.T) {
	s := StartSentinel(t)
	old := s.Master(t).Addr()
	c := s.FailoverClient(t)
	if err := c.Set(ctx(t), "survivor", "yes", 0).Err(); err != nil {
		t.Fatal(err)
	}
	s.WaitReplicated(t, 5*time.Second)

	if got := s.KillMaster(t); got != old {
		t.Fatalf("KillMaster killed %s, want the master %s", got, old)
	}
	addr := s.WaitFailover(t, old, 20*time.Second)
	if addr == old {
		t.Fatalf("WaitFailover returned the old master %s", addr)
	}
	if m := s.Master(t).Addr(); m != addr {
		t.Fatalf("Master = %s after failover to %s", m, addr)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, err := c.Get(ctx(t), "survivor").Result()
		if err == nil && got == "yes" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after failover Get = %q, %v; want \"yes\"", got, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if role, err := roleOf(ctx(t), addr); err != nil || role != "master" {
		t.Fatalf("ROLE of %s = %q, %v", addr, role, err)
	}
}
