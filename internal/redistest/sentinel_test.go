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

// A failover asked of a sentinel while the master is up promotes the
// replica. (The sentinels turn the old master into a replica only some
// eight seconds later, too long to wait for here.)
func TestSentinelRequestedFailover(t *testing.T) {
	s := StartSentinel(t)
	old := s.Failover(t)
	addr := s.WaitFailover(t, old, 20*time.Second)
	if addr == old {
		t.Fatalf("WaitFailover returned the old master %s", addr)
	}
	s.WaitRole(t, addr, "master", 5*time.Second)
	if role, err := roleOf(ctx(t), old); err != nil || role != "master" {
		t.Fatalf("ROLE of the old master %s right after the failover = %q, %v; want it still up", old, role, err)
	}
}
