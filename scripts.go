package redq

import (
	"context"
	"embed"
	"errors"
	"strings"

	"github.com/redis/go-redis/v9"
)

// The Lua scripts live in scripts/*.lua, one per atomic move. Each touches
// keys of one hash slot only: the global tag, or one queue's tag (settle.lua
// pushing to another queue is the one exception). The queue scripts share
// the helpers of scripts/lib.lua, which is put in front of each; they get
// the queue's key prefix and derive the keys that depend on data (priority
// levels, other connections' storage) from it, and their first key routes
// the call to the queue's slot.
//
//go:embed scripts/*.lua
var scriptFiles embed.FS

// scriptSet holds the parsed scripts. It is built once and never changed.
type scriptSet struct {
	register, heartbeat, declareDead     *redis.Script
	fetch, settle                        *redis.Script
	returnUnacked, returnRejected, purge *redis.Script
	setConsumers                         *redis.Script
	publish, release, touch, rejectWith  *redis.Script
	maintain, counts, drain              *redis.Script
}

func readScript(name string) string {
	b, err := scriptFiles.ReadFile("scripts/" + name + ".lua")
	if err != nil {
		panic("redq: missing embedded script " + name + ": " + err.Error())
	}
	return string(b)
}

func mustScript(name string) *redis.Script { return redis.NewScript(readScript(name)) }

// queueScript is a script that uses the shared helpers.
func queueScript(name string) *redis.Script {
	return redis.NewScript(readScript("lib") + "\n" + readScript(name))
}

var scripts = scriptSet{
	register:       mustScript("register"),
	heartbeat:      mustScript("heartbeat"),
	declareDead:    mustScript("declare_dead"),
	setConsumers:   mustScript("set_consumers"),
	fetch:          queueScript("fetch"),
	settle:         queueScript("settle"),
	returnUnacked:  queueScript("return_unacked"),
	returnRejected: queueScript("return_rejected"),
	purge:          queueScript("purge"),
	publish:        queueScript("publish"),
	release:        queueScript("release"),
	touch:          queueScript("touch"),
	rejectWith:     queueScript("reject_with"),
	maintain:       queueScript("maintain"),
	counts:         queueScript("counts"),
	drain:          queueScript("drain"),
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
