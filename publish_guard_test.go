package redq

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// A large publish names the guard by its hash on its first send. When
// Redis's script cache is empty then (a restart, a failover, SCRIPT
// FLUSH), the LPUSH ran without the guard: the call lands once, is
// counted and recorded, and a later send of it (named by the script's
// text) lands nothing.
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
