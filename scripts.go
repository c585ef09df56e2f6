package redq

import (
	"context"
	"embed"
	"errors"
	"strings"

	"github.com/redis/go-redis/v9"
)

// The Lua scripts live in scripts/*.lua, one per atomic move. Each touches
// keys of one hash slot only (the global tag or one queue's tag), except
// settle.lua when pushing to another queue.
//
//go:embed scripts/*.lua
var scriptFiles embed.FS

// scriptSet holds the parsed scripts. It is built once and never changed.
type scriptSet struct {
	register, heartbeat, declareDead     *redis.Script
	fetch, settle                        *redis.Script
	returnUnacked, returnRejected, purge *redis.Script
	setConsumers                         *redis.Script
}

func mustScript(name string) *redis.Script {
	b, err := scriptFiles.ReadFile("scripts/" + name + ".lua")
	if err != nil {
		panic("redq: missing embedded script " + name + ": " + err.Error())
	}
	return redis.NewScript(string(b))
}

var scripts = scriptSet{
	register:       mustScript("register"),
	heartbeat:      mustScript("heartbeat"),
	declareDead:    mustScript("declare_dead"),
	fetch:          mustScript("fetch"),
	settle:         mustScript("settle"),
	returnUnacked:  mustScript("return_unacked"),
	returnRejected: mustScript("return_rejected"),
	purge:          mustScript("purge"),
	setConsumers:   mustScript("set_consumers"),
}

// isNoScript reports whether err says the script cache did not hold the
// script (after a Redis restart, or on a node that never saw it).
func isNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}

// isLost reports whether a script refused because the connection is no
// longer registered for the queue.
func isLost(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "LOST")
}

// evalBatch runs one script per call in a single pipeline (one round trip;
// a cluster client splits it by slot). Calls whose script was not cached are
// run again with EVAL; they did not run the first time.
func evalBatch(ctx context.Context, c redis.UniversalClient, calls []scriptCall) []*redis.Cmd {
	pipe := c.Pipeline()
	cmds := make([]*redis.Cmd, len(calls))
	for i, sc := range calls {
		cmds[i] = sc.script.EvalSha(ctx, pipe, sc.keys, sc.args...)
	}
	_, _ = pipe.Exec(ctx) // errors are read per command below
	for i, cmd := range cmds {
		if isNoScript(cmd.Err()) {
			cmds[i] = calls[i].script.Eval(ctx, c, calls[i].keys, calls[i].args...)
		}
	}
	return cmds
}

type scriptCall struct {
	script *redis.Script
	keys   []string
	args   []any
}

// int64s reads a script's reply of integers.
func int64s(v any) ([]int64, error) {
	list, ok := v.([]any)
	if !ok {
		return nil, errors.New("redq: unexpected script reply")
	}
	out := make([]int64, len(list))
	for i, x := range list {
		n, ok := x.(int64)
		if !ok {
			return nil, errors.New("redq: unexpected script reply element")
		}
		out[i] = n
	}
	return out, nil
}
