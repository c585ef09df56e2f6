package redq

import (
	"context"
	"fmt"
	"testing"
	"time"
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
