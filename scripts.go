package redq

import (
	"context"
	"embed"
	"errors"
	"regexp"
	"strings"

	"github.com/redis/go-redis/v9"
)

// The Lua scripts live in scripts/*.lua, one per atomic move. Each touches
// only the keys it is given in KEYS, and keys of one hash slot only: the
// global tag, or one queue's tag (a push from one queue to another of the
// same slot touches both; between slots a push is staged, see move.go). The
// queue scripts share the helpers of scripts/lib.lua, those each uses put
// in front of it, and take their keys in one layout (scriptKeys in
// keys.go); their first key routes the call to the queue's slot.
//
//go:embed scripts/*.lua
var scriptFiles embed.FS

// scriptSet holds the parsed scripts. It is built once and never changed.
type scriptSet struct {
	register, heartbeat, declareDead     *redis.Script
	stop                                 *redis.Script
	fetch, settle, ack, fireAck          *redis.Script
	ackMany                              *redis.Script
	returnUnacked, returnRejected, purge *redis.Script
	setConsumers                         *redis.Script
	publish, put, release, touch         *redis.Script
	rejectWith                           *redis.Script
	maintain, counts, drain              *redis.Script
	pause                                *redis.Script
	// the Inspector's actions (inspector_actions.go)
	inspectAct, inspectPurgeDelayed  *redis.Script
	upsert, keyedCancel, keyedRunNow *redis.Script
	keyedLookup                      *redis.Script
	// rounds (round.go)
	roundOpen, roundAdd, roundNext, roundRemove, roundReissue *redis.Script
	roundGet, roundLen, roundStats, roundSweep                *redis.Script
	// migrate-from-rmq (migrate.go)
	migrateRmq *redis.Script
	// step 2 of a move between cluster slots (move.go)
	moveApply *redis.Script
	// schedules (schedules.go)
	scheduleUpsert, scheduleFire, scheduleState *redis.Script
	// schedule sets' counts (inspector_schedules.go)
	scheduleCounts *redis.Script
}

func readScript(name string) string {
	b, err := scriptFiles.ReadFile("scripts/" + name + ".lua")
	if err != nil {
		panic("redq: missing embedded script " + name + ": " + err.Error())
	}
	return string(b)
}

// compact drops the comment lines and blank lines of a script: they are
// for the reader of scripts/, and a script sent with EVAL (see
// publish.lua) is hashed by Redis on every call.
func compact(src string) string {
	var b strings.Builder
	for _, line := range strings.Split(src, "\n") {
		if t := strings.TrimSpace(line); t == "" || strings.HasPrefix(t, "--") {
			continue
		}
		b.WriteString(line)
		b.WriteString("\n")
	}
	return b.String()
}

// libDef matches the first line of a top-level definition in lib.lua.
var libDef = regexp.MustCompile(`^local (?:function )?([A-Za-z_][A-Za-z0-9_]*)`)

// withHelpers puts in front of body the definitions of lib that it uses,
// directly or through other definitions, in lib's order. Redis runs a
// script's whole text on every call, and each definition costs time there
// (all of lib.lua costs about 2µs a call), so the hot scripts carry only
// what they need. A definition is a line "local NAME ..." or "local
// function NAME" at the start of a line, with the comment lines above it,
// up to the next definition's comment.
func withHelpers(lib, body string) string {
	type def struct{ name, text string }
	var defs []def
	var pending []string // comment lines waiting for their definition
	for _, line := range strings.Split(lib, "\n") {
		if m := libDef.FindStringSubmatch(line); m != nil {
			defs = append(defs, def{name: m[1]})
			pending = append(pending, line)
			defs[len(defs)-1].text = strings.Join(pending, "\n")
			pending = nil
			continue
		}
		if len(defs) > 0 && !strings.HasPrefix(line, "--") && (len(pending) == 0 || strings.TrimSpace(line) != "") {
			// the body of the current definition
			if len(pending) > 0 {
				defs[len(defs)-1].text += "\n" + strings.Join(pending, "\n")
				pending = nil
			}
			defs[len(defs)-1].text += "\n" + line
			continue
		}
		pending = append(pending, line)
	}
	uses := func(text string) map[string]bool {
		code := luaComment.ReplaceAllString(text, "")
		out := map[string]bool{}
		for _, w := range luaWord.FindAllString(code, -1) {
			out[w] = true
		}
		return out
	}
	need := uses(body)
	for changed := true; changed; {
		changed = false
		for i := len(defs) - 1; i >= 0; i-- {
			d := defs[i]
			if !need[d.name] {
				continue
			}
			for w := range uses(d.text) {
				if w != d.name && !need[w] {
					need[w] = true
					changed = true
				}
			}
		}
	}
	var b strings.Builder
	for _, d := range defs {
		if need[d.name] {
			b.WriteString(d.text)
			b.WriteString("\n")
		}
	}
	b.WriteString(body)
	return b.String()
}

// fullPathMark is the line of a queue script after which its full path
// begins (see fetch.lua): the text before it is a fast path for the
// common case that returns when it served the call.
const fullPathMark = "-- redq: full path"

// queueScriptText is the text Redis runs for the queue script src: the
// helpers of lib it uses in front of it (see withHelpers). A script with a
// fast path (see fullPathMark) gets its full path put into a function of
// its own, with that path's helpers defined inside it, so that a call the
// fast path serves defines only the few helpers the fast path uses. On an
// idle server the definitions of fetch.lua's helpers cost Redis up to
// about 20µs a call, several times what they cost a busy one.
func queueScriptText(lib, src string) string {
	head, tail, ok := strings.Cut(src, "\n"+fullPathMark+"\n")
	if !ok {
		return compact(withHelpers(lib, src))
	}
	return compact(withHelpers(lib, head) + "\nlocal function full_path()\n" + withHelpers(lib, tail) + "\nend\nreturn full_path()\n")
}

var (
	luaComment = regexp.MustCompile(`--[^\n]*`)
	luaWord    = regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_]*`)
)

// scripts is the set every call runs. It is built once and never changed
// in production; tests may build it again with a prelude (see
// newScriptSet) before any test runs.
var scripts = newScriptSet("")

// newScriptSet parses the scripts, each with prelude (Lua) in front of
// it. The library's own set has none; a test puts a checker there that
// refuses any key a script was not given in KEYS.
func newScriptSet(prelude string) scriptSet {
	mustScript := func(name string) *redis.Script { return redis.NewScript(prelude + compact(readScript(name))) }
	queueScript := func(name string) *redis.Script {
		return redis.NewScript(prelude + queueScriptText(readScript("lib"), readScript(name)))
	}
	roundScript := func(name string) *redis.Script { return redis.NewScript(prelude + roundScriptText(name)) }
	scheduleScript := func(name string) *redis.Script {
		return redis.NewScript(prelude + compact(withHelpers(readScript("lib")+"\n"+readScript("schedule_lib"), readScript(name))))
	}
	return scriptSet{
		register:            mustScript("register"),
		heartbeat:           mustScript("heartbeat"),
		declareDead:         mustScript("declare_dead"),
		stop:                mustScript("stop"),
		setConsumers:        mustScript("set_consumers"),
		fetch:               queueScript("fetch"),
		settle:              queueScript("settle"),
		ack:                 queueScript("ack"),
		ackMany:             queueScript("ack_many"),
		fireAck:             queueScript("fire_ack"),
		returnUnacked:       queueScript("return_unacked"),
		returnRejected:      queueScript("return_rejected"),
		purge:               queueScript("purge"),
		publish:             queueScript("publish"),
		put:                 queueScript("put"),
		release:             queueScript("release"),
		touch:               queueScript("touch"),
		rejectWith:          queueScript("reject_with"),
		maintain:            queueScript("maintain"),
		counts:              queueScript("counts"),
		drain:               queueScript("drain"),
		pause:               mustScript("pause"),
		inspectAct:          queueScript("inspect_act"),
		inspectPurgeDelayed: queueScript("inspect_purge_delayed"),
		upsert:              queueScript("upsert"),
		keyedCancel:         queueScript("keyed_cancel"),
		keyedRunNow:         queueScript("keyed_run_now"),
		keyedLookup:         queueScript("keyed_lookup"),
		roundOpen:           roundScript("round_open"),
		roundAdd:            roundScript("round_add"),
		roundNext:           roundScript("round_next"),
		roundRemove:         roundScript("round_remove"),
		roundReissue:        roundScript("round_reissue"),
		roundGet:            roundScript("round_get"),
		roundLen:            roundScript("round_len"),
		roundStats:          roundScript("round_stats"),
		roundSweep:          roundScript("round_sweep"),
		migrateRmq:          queueScript("migrate_rmq"),
		moveApply:           queueScript("move_apply"),
		scheduleUpsert:      scheduleScript("schedule_upsert"),
		scheduleFire:        scheduleScript("schedule_fire"),
		scheduleState:       scheduleScript("schedule_state"),
		scheduleCounts:      scheduleScript("schedule_counts"),
	}
}

// roundScriptText is a round script with the helpers it uses, of lib.lua
// and of round_lib.lua, in front of it.
func roundScriptText(name string) string {
	return withHelpers(readScript("lib")+"\n"+readScript("round_lib"), readScript(name))
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
//
// A lone call goes in a pipeline too. go-redis sends a lone command again
// itself after a broken connection and returns the last try's error, so a
// call whose first try reached Redis and whose next try met a refused dial
// would read as never sent (ErrorUnavailable) although it may have run. A
// pipeline's commands keep the error of the try that sent them.
func evalBatch(ctx context.Context, c sender, calls []scriptCall) []*redis.Cmd {
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
