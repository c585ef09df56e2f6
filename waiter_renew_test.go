package redq

import (
	"context"
	"errors"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// An idle wait runs on a connection of its own. When Redis drops that
// connection (a restart, a failover, a CLIENT KILL), the wait in progress
// may fail, but the next ones work again on a new connection.
func TestWaiterRecoversWhenItsConnectionIsDropped(t *testing.T) {
	c := realClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	w := newWaiter(c, "waiter-renew-"+strconv.FormatInt(nsCounter.Add(1), 10), true)
	defer w.close()
	if err := w.wait(ctx, 5*time.Millisecond, false); err != nil {
		t.Fatal(err)
	}
	idOf := func() int64 {
		if t := w.target.Load(); t != nil {
			return t.id
		}
		return 0
	}
	old := idOf()
	if old == 0 {
		t.Fatal("the waiter did not learn its connection's CLIENT ID")
	}
	if err := c.ClientKillByFilter(ctx, "ID", strconv.FormatInt(old, 10)).Err(); err != nil {
		t.Fatal(err)
	}
	failed := 0
	for i := 0; i < 4; i++ {
		if err := w.wait(ctx, 5*time.Millisecond, false); err != nil {
			failed++
			t.Logf("wait %d after the kill: %v", i, err)
		}
	}
	if failed > 1 {
		t.Fatalf("%d of 4 waits after the connection was dropped failed; want at most the first", failed)
	}
	if id := idOf(); id == 0 || id == old {
		t.Fatalf("CLIENT ID after the kill = %d, want a new one (was %d)", id, old)
	}
}

// losePipelinedFetch is a go-redis hook that makes the last command of a
// pipeline holding a BLMOVE fail as if its reply had been lost, after the
// wait's reply was read.
type losePipelinedFetch struct{}

func (losePipelinedFetch) DialHook(next redis.DialHook) redis.DialHook { return next }

func (losePipelinedFetch) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (losePipelinedFetch) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, c := range cmds {
			if strings.EqualFold(c.Name(), "blmove") {
				cmds[len(cmds)-1].SetErr(io.ErrUnexpectedEOF)
				break
			}
		}
		return err
	}
}

// When the reply of a wait's fetch is lost but the wait's was read, the
// dedicated connection is dropped as after a lost wait: go-redis would not
// use it again.
func TestWaiterDropsItsConnectionWhenTheFetchReplyIsLost(t *testing.T) {
	shared := realClient(t)
	c := redis.NewClient(&redis.Options{Addr: shared.Options().Addr})
	t.Cleanup(func() { c.Close() })
	c.AddHook(losePipelinedFetch{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	w := newWaiter(c, "waiter-lost-fetch-"+strconv.FormatInt(nsCounter.Add(1), 10), true)
	defer w.close()
	if err := w.identify(ctx); err != nil {
		t.Fatal(err)
	}
	before := w.dedicated
	cmd, _, err := w.waitFetch(ctx, w.key, 5*time.Millisecond, false, func(pipe redis.Pipeliner) *redis.Cmd {
		return pipe.Do(ctx, "PING")
	})
	if err != nil || cmd == nil {
		t.Fatalf("waitFetch: %v, %v", cmd, err)
	}
	if !errors.Is(cmd.Err(), io.ErrUnexpectedEOF) {
		t.Fatalf("the fetch's error is %v", cmd.Err())
	}
	if w.dedicated == before || w.target.Load() != nil {
		t.Fatal("the waiter kept the connection whose fetch reply was lost")
	}
}
