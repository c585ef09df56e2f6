package redq

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// A large publish is an LPUSH and its guard in one transaction. When
// Redis's script cache is empty (a restart, a failover, SCRIPT FLUSH), the
// guard still runs, because it is sent by its text: the call lands once,
// is counted and recorded, and a later send of it lands nothing.
func TestLargePublishWithAnEmptyScriptCacheLandsOnce(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ns := namespace()
		c, err := openConn(b.client, "flush", nil, ns)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { <-c.StopAllConsuming() })
		q := openQueue(t, c, "jobs")
		ctx := context.Background()
		i, err := NewInspector(b.client, ns)
		if err != nil {
			t.Fatal(err)
		}
		envs := make([]any, pushScriptMax+5)
		for n := range envs {
			e, err := encodeEnvelope(c.ids, time.Now(), meta{}, []byte(fmt.Sprintf("big-%d", n)))
			if err != nil {
				t.Fatal(err)
			}
			envs[n] = e
		}
		if err := b.client.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		call := c.publisher.pushCall(q, "pF", "20", envs)
		if n, err := pushBatch(ctx, c.client, []*pushCall{call})[0].Int64(); err != nil || n != int64(len(envs)) {
			t.Fatalf("first send with an empty script cache: %d, %v; want %d, nil", n, err, len(envs))
		}
		if err := b.client.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if n, err := pushBatch(ctx, c.client, []*pushCall{call})[0].Int64(); err != nil || n != 0 {
			t.Fatalf("the call sent again: %d, %v; want 0, nil", n, err)
		}
		wantCounts(t, c, "jobs", int64(len(envs)), 0, 0)
		qi, err := i.Queue(ctx, "jobs")
		if err != nil {
			t.Fatal(err)
		}
		if qi.Published != int64(len(envs)) {
			t.Fatalf("%d counted as published, want %d", qi.Published, len(envs))
		}
		// the public path, with the cache emptied before each call
		for range 3 {
			if err := b.client.ScriptFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			if err := q.PublishBytes(make([][]byte, pushScriptMax+1)...); err != nil {
				t.Fatal(err)
			}
		}
		wantCounts(t, c, "jobs", int64(len(envs)+3*(pushScriptMax+1)), 0, 0)
	})
}

// A large publish whose first send meets an empty script cache and whose
// reply is lost is sent again by redq, and lands once. Had the first send
// named its guard by hash, its LPUSH would have run without a guard to
// record its token, and the send again would have kept its own LPUSH: the
// payloads twice in ready. Both large paths: a call small enough to be
// coalesced with others (it goes alone here), and one sent on its own.
func TestLargePublishLostReplyAfterAnEmptyScriptCacheLandsOnce(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		if b.mini == nil {
			realClient(t)
		}
		for _, n := range []int{coalesceMaxPayloads / 2, coalesceMaxPayloads + 150} {
			t.Run(fmt.Sprint(n), func(t *testing.T) {
				r := newFaultRig(t, b.client, backendAddr(b))
				name := fmt.Sprintf("large%d", n)
				q := openQueue(t, r.worker, name)
				if err := b.client.ScriptFlush(context.Background()).Err(); err != nil {
					t.Fatal(err)
				}
				r.proxy.arm("$4\r\nexec\r\n", "$4\r\nEXEC\r\n")
				if err := q.Publish(procPayloads(name, n)...); err != nil {
					t.Fatalf("publish: %v", err)
				}
				if got := r.proxy.trips(); got != 1 {
					t.Fatalf("the proxy lost %d replies, want 1", got)
				}
				wantCounts(t, r.admin, name, int64(n), 0, 0)
			})
		}
	})
}

// A transaction that Redis refused as it was queued answers each large
// publish with its LPUSH's reason, not with the EXECABORT that go-redis
// gives the guard (a cluster client gives it to every command but the
// refused one), so that the caller learns why.
func TestLargePublishRefusedInATransactionAnswersTheReason(t *testing.T) {
	oom := errors.New("OOM command not allowed when used memory > 'maxmemory'.")
	abort := errors.New("EXECABORT Transaction discarded because of previous errors.")
	wrongType := errors.New("WRONGTYPE Operation against a key holding the wrong kind of value")
	for _, tc := range []struct {
		push, guard, want error
	}{
		{oom, abort, oom},           // the LPUSH refused, the guard aborted with it
		{abort, abort, abort},       // another call's command was refused
		{wrongType, nil, wrongType}, // the LPUSH failed, its guard ran
		{oom, wrongType, wrongType}, // the guard's own error stays
	} {
		if got := txCallErr(tc.push, tc.guard); got != tc.want {
			t.Errorf("txCallErr(%v, %v) = %v, want %v", tc.push, tc.guard, got, tc.want)
		}
	}
}

// On a cluster, a large publish into a node out of memory answers
// ErrorWritesRefused with Redis's OOM error, not a bare EXECABORT. (Out of
// memory, Redis refuses every command queued in a transaction, the guard
// too; the test above covers an LPUSH refused alone.)
func TestLargePublishRefusedOnAClusterIsWritesRefused(t *testing.T) {
	onCluster(t, func(t *testing.T, b backend) {
		c := openT(t, b, "oom", namespace(), WithRetryTimeout(300*time.Millisecond))
		q := openQueue(t, c, "oom")
		ctx := context.Background()
		master, err := sharedCluster(t).MasterFor(ctx, q.keys.ready)
		if err != nil {
			t.Fatal(err)
		}
		node := redis.NewClient(&redis.Options{Addr: master.Addr()})
		t.Cleanup(func() { node.Close() })
		if err := node.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := node.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
				t.Error(err)
			}
		})
		err = q.Publish(procPayloads("oom", coalesceMaxPayloads+1)...)
		if !errors.Is(err, ErrorWritesRefused) || !containsRedisError(err, "OOM") {
			t.Fatalf("publish into a node out of memory: %v, want ErrorWritesRefused with Redis's OOM error", err)
		}
	})
}
