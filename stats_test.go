package redq

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestCollectStats(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ns := namespace()
		worker := openT(t, b, "worker", ns)
		publisher := openT(t, b, "publisher", ns)
		q := openQueue(t, worker, "jobs")
		if err := q.Publish("1", "2", "3", "4", "5"); err != nil {
			t.Fatal(err)
		}
		ds := take(t, q, 2)
		if err := ds[0].Reject(); err != nil {
			t.Fatal(err)
		}
		openQueue(t, publisher, "empty")
		queues, err := publisher.GetOpenQueues()
		if err != nil || len(queues) != 2 {
			t.Fatalf("GetOpenQueues = %v, %v", queues, err)
		}
		s := mustStats(t, publisher, queues...)
		jobs := s.QueueStats["jobs"]
		if jobs.ReadyCount != 3 || jobs.RejectedCount != 1 || jobs.UnackedCount() != 1 || jobs.ConnectionCount() != 1 {
			t.Fatalf("jobs: %+v", jobs)
		}
		if cs := jobs.Connections[worker.Name()]; !cs.Active || cs.UnackedCount != 1 {
			t.Fatalf("worker in jobs: %+v", cs)
		}
		if active, ok := s.OtherConnections[publisher.Name()]; !ok || !active {
			t.Fatalf("publisher in other connections: %v", s.OtherConnections)
		}
		if e := s.QueueStats["empty"]; e.ReadyCount != 0 || e.ConnectionCount() != 0 {
			t.Fatalf("empty: %+v", e)
		}
		text := s.String()
		for _, want := range []string{"jobs", "empty", worker.Name(), "active"} {
			if !strings.Contains(text, want) {
				t.Fatalf("String() lacks %q:\n%s", want, text)
			}
		}
		raw, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		var decoded struct {
			Queues map[string]struct {
				Ready, Rejected, Unacked, Consumers, ConnectionCount int64
			}
		}
		if err := json.Unmarshal(raw, &decoded); err != nil {
			t.Fatal(err)
		}
		if j := decoded.Queues["jobs"]; j.Ready != 3 || j.Rejected != 1 || j.Unacked != 1 || j.ConnectionCount != 1 {
			t.Fatalf("JSON: %s", raw)
		}
		var back Stats
		if err := json.Unmarshal(raw, &back); err != nil || back.QueueStats["jobs"].UnackedCount() != 1 {
			t.Fatalf("JSON round trip: %+v, %v", back, err)
		}

		// A dead connection shows as dead until a cleaner returns its part.
		pause(t, b, worker)
		if cs := mustStats(t, publisher, "jobs").QueueStats["jobs"].Connections[worker.Name()]; cs.Active {
			t.Fatalf("paused worker still active: %+v", cs)
		}
	})
}

func TestDrainRemovePurgeDestroy(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		c := openT(t, b, "mgmt", namespace())
		q := openQueue(t, c, "m")
		if err := q.Publish("a", "b", "a", "c", "a", "d"); err != nil {
			t.Fatal(err)
		}
		got, err := q.Drain(2)
		if err != nil || strings.Join(got, "") != "ab" {
			t.Fatalf("Drain(2) = %v, %v", got, err)
		}
		if err := q.Remove("a", 1, false); err != nil {
			t.Fatal(err)
		}
		wantCounts(t, c, "m", 3, 0, 0)
		// Remove takes the most recently published first (as LREM from the
		// head): ready is now, oldest first, a c d.
		ds := take(t, openQueue(t, c, "m"), 1)
		if ds[0].Payload() != "a" {
			t.Fatalf("took %q, want the oldest a", ds[0].Payload())
		}
		if err := ds[0].Reject(); err != nil {
			t.Fatal(err)
		}
		if err := q.Publish("c"); err != nil {
			t.Fatal(err)
		}
		wantCounts(t, c, "m", 3, 1, 0) // ready c d c, rejected a
		if err := q.Remove("a", 0, false); err != nil {
			t.Fatal(err)
		}
		wantCounts(t, c, "m", 3, 1, 0)
		if err := q.Remove("a", 0, true); err != nil {
			t.Fatal(err)
		}
		wantCounts(t, c, "m", 3, 0, 0)
		if err := q.Remove("c", 0, true); err != nil {
			t.Fatal(err)
		}
		if err := q.Remove("zzz", 0, true); err != nil {
			t.Fatal(err)
		}
		got, err = q.Drain(10)
		if err != nil || strings.Join(got, "") != "d" {
			t.Fatalf("Drain(10) = %v, %v", got, err)
		}
		if err := q.Publish("x", "y"); err != nil {
			t.Fatal(err)
		}
		if n, err := q.PurgeReady(); err != nil || n != 2 {
			t.Fatalf("PurgeReady = %d, %v", n, err)
		}
		if err := q.Publish("x", "y", "z"); err != nil {
			t.Fatal(err)
		}
		ds = take(t, openQueue(t, c, "m"), 1)
		if err := ds[0].Reject(); err != nil {
			t.Fatal(err)
		}
		if n, err := q.PurgeRejected(); err != nil || n != 1 {
			t.Fatalf("PurgeRejected = %d, %v", n, err)
		}
		ready, rejected, err := q.Destroy()
		if err != nil || ready != 2 || rejected != 0 {
			t.Fatalf("Destroy = %d, %d, %v", ready, rejected, err)
		}
		queues, _ := c.GetOpenQueues()
		if len(queues) != 0 {
			t.Fatalf("destroyed queue still listed: %v", queues)
		}
		wantCounts(t, c, "m", 0, 0, 0)
	})
}
