package redq

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// On a single node the plain acks of several queues in one flush share a
// call of ack_many.lua, and each queue is answered as its own ack.lua call
// would be: per take (acked, not found), per queue (a queue whose
// connection a cleaner unregistered says so, the others do not), a send of
// the same call again answers every queue as the first send did, and a
// late send of an older call does nothing.
func TestMergedAcksAnswerEachQueueAsItsOwnCall(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		c := openT(t, b, "ackmany", namespace())
		qa, qb, qc := openQueue(t, c, "qa"), openQueue(t, c, "qb"), openQueue(t, c, "qc")
		for _, q := range []*redisQueue{qa, qa, qb, qc} {
			if err := q.Publish("x"); err != nil {
				t.Fatal(err)
			}
		}
		da, db, dc := take(t, qa, 2), take(t, qb, 1), take(t, qc, 1)
		ref := func(d Message) string { return d.(*redisDelivery).ref() }
		reg := c.registration()
		// A cleaner emptied qc's storage of the connection and unregistered it.
		if n, err := qc.returnUnacked(ctx, reg.name, 0, true); err != nil || n != 1 {
			t.Fatalf("return qc's unacked: %d, %v", n, err)
		}
		ackCall := func(q *redisQueue, field, token string, ids ...string) (*remembered, *any) {
			args := []any{reg.name, field, token}
			for _, id := range ids {
				args = append(args, id)
			}
			got := new(any)
			return &remembered{scriptCall: scriptCall{script: scripts.ack, keys: q.keys.ackKeys(reg.name), args: args},
				deadline: time.Now().Add(time.Minute),
				done: func(v any, err error) {
					if err != nil {
						t.Fatalf("%s: %v", q.name, err)
					}
					*got = v
				}}, got
		}
		missing := ref(da[1]) + "0" // a take under a fence never drawn
		run := func(token string, want ...string) {
			t.Helper()
			ca, ga := ackCall(qa, "x1", token, ref(da[0]), missing)
			cb, gb := ackCall(qb, "x2", token, ref(db[0]))
			cc, gc := ackCall(qc, "x3", token, ref(dc[0]))
			merged := mergeAcks([]*remembered{ca, cb, cc})
			if len(merged) != 1 || merged[0].script != scripts.ackMany {
				t.Fatalf("three queues' acks went out as %d calls, want one call of ack_many.lua", len(merged))
			}
			m := merged[0]
			m.done(m.script.Run(ctx, b.client, m.keys, m.args...).Result())
			for i, g := range []*any{ga, gb, gc} {
				codes, registered, err := parseCodes(*g, []int{2, 1, 1}[i])
				if err != nil {
					t.Fatal(err)
				}
				if got := fmt.Sprint(registered, codes); got != want[i] {
					t.Errorf("token %s, queue %d: registered and codes %s, want %s", token, i, got, want[i])
				}
			}
		}
		run("10", "true [1 0]", "true [1]", "false [0]")
		run("10", "true [1 0]", "true [1]", "false [0]") // sent again after a lost reply
		wantCounts(t, c, "qa", 0, 0, 1)
		wantCounts(t, c, "qb", 0, 0, 0)
		wantCounts(t, c, "qc", 1, 0, 0)
		// a late send of an older call under the same fields does nothing
		ca, ga := ackCall(qa, "x1", "9", ref(da[1]))
		cb, gb := ackCall(qb, "x2", "9", ref(db[0]))
		m := mergeAcks([]*remembered{ca, cb})[0]
		m.done(m.script.Run(ctx, b.client, m.keys, m.args...).Result())
		for i, g := range []*any{ga, gb} {
			if codes, _, err := parseCodes(*g, 1); err != nil || codes[0] != 0 {
				t.Fatalf("late send, queue %d: %v, %v; want not acked", i, codes, err)
			}
		}
		wantCounts(t, c, "qa", 0, 0, 1)
		if err := da[1].Ack(); err != nil {
			t.Fatalf("Ack after the late send: %v", err)
		}
		wantCounts(t, c, "qa", 0, 0, 0)
	})
}

// Through the committer: the acks of several queues that one flush carries
// (here with a take of one queue acked twice) are each answered for their
// own deliveries.
func TestAFlushOfSeveralQueuesAcksAnswersEachRequest(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		c := openT(t, b, "ackmany", namespace())
		var qs []*redisQueue
		var ds [][]Message
		for i := 0; i < 5; i++ {
			q := openQueue(t, c, fmt.Sprintf("q%d", i))
			for j := 0; j <= i; j++ {
				if err := q.Publish("x"); err != nil {
					t.Fatal(err)
				}
			}
			qs, ds = append(qs, q), append(ds, take(t, q, i+1))
		}
		if err := ds[2][0].Ack(); err != nil { // acked before: not found in the flush
			t.Fatal(err)
		}
		reg := c.registration()
		var batch []*settleRequest
		for i, q := range qs {
			var ids []string
			for _, d := range ds[i] {
				ids = append(ids, d.(*redisDelivery).ref())
			}
			batch = append(batch, &settleRequest{q: q, reg: reg, mode: modeAck, ids: ids,
				deadline: time.Now().Add(time.Minute), done: make(chan settleResult, 1)})
		}
		c.acks.flush(0, batch)
		for i, r := range batch {
			res := <-r.done
			want := make([]int64, i+1)
			for j := range want {
				want[j] = codeDone
			}
			if i == 2 {
				want[0] = codeMissing
			}
			if fmt.Sprint(res.codes) != fmt.Sprint(want) || !res.registered || res.errs != nil {
				t.Errorf("queue %d: codes %v registered %v errs %v, want %v registered", i, res.codes, res.registered, res.errs, want)
			}
			wantCounts(t, c, fmt.Sprintf("q%d", i), 0, 0, 0)
		}
	})
}

// Only a single-node client (a failover client is one) merges the acks of
// several queues: on a cluster a call must stay within one slot.
func TestAcksMergeOnlyOnASingleNode(t *testing.T) {
	single := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}})
	defer single.Close()
	defer cluster.Close()
	defer ring.Close()
	for _, tc := range []struct {
		client redis.UniversalClient
		merge  bool
	}{{single, true}, {cluster, false}, {ring, false}} {
		if got := newCommitter(&redisConnection{client: tc.client}).merge; got != tc.merge {
			t.Errorf("%T: merge %v, want %v", tc.client, got, tc.merge)
		}
	}
}
