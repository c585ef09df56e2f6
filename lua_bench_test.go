package redq

import (
	"context"
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"
)

// BenchmarkValuesThroughLua measures what Redis's CPU pays when a value
// passes through a Lua script, against a command that moves it without
// Lua. A take must record the delivery in the connection's unacked hash in
// the same atomic step that removes it from ready, so the fetch script
// reads each envelope into Lua and writes it out again ("take"); a list
// queue moves it with LMOVE. With 64 KiB values the script's share is what
// keeps the 64 KiB workload behind the list queue (see
// docs/performance.md).
//
//	go test -run XXX -bench ValuesThroughLua -benchtime 2000x
//
// Each sub-benchmark reports redis-µs/op: used_cpu_user + used_cpu_sys of
// redis-server over the run, per operation.
func BenchmarkValuesThroughLua(b *testing.B) {
	forms := []struct {
		name   string
		script *redis.Script // nil: LMOVE
	}{
		{"lmove", nil},
		// RPOP into Lua, nothing else: the cost of reading the value
		{"script-rpop", redis.NewScript(`redis.call('RPOP', KEYS[1]) return 1`)},
		// LMOVE called from Lua: the reply still becomes a Lua string
		{"script-lmove", redis.NewScript(`redis.call('LMOVE', KEYS[1], KEYS[2], 'RIGHT', 'LEFT') return 1`)},
		// what a take does with each envelope: pop, HSET, return it
		{"script-take", redis.NewScript(`local e = redis.call('RPOP', KEYS[1])
redis.call('HSET', KEYS[3], string.sub(e, 2, 17), e)
return e`)},
	}
	for _, size := range []int{100, 16 << 10, 64 << 10} {
		for _, f := range forms {
			b.Run(fmt.Sprintf("%dB/%s", size, f.name), func(b *testing.B) {
				e := newBenchEnv(b)
				ctx := context.Background()
				src, dst, hash := e.ns+":{v}:src", e.ns+":{v}:dst", e.ns+":{v}:hash"
				value := make([]byte, size)
				for i := range value {
					value[i] = byte('a' + i%26)
				}
				// fill in chunks, so that no single command is huge
				for left := b.N; left > 0; {
					k := min(left, max(1, (4<<20)/size))
					args := make([]any, k)
					for i := range args {
						v := append([]byte(nil), value...)
						copy(v[1:], fmt.Sprintf("%016d", left-i)) // distinct ids for the take
						args[i] = v
					}
					if err := e.client.LPush(ctx, src, args...).Err(); err != nil {
						b.Fatal(err)
					}
					left -= k
				}
				if f.script != nil {
					if err := f.script.Load(ctx, e.client).Err(); err != nil {
						b.Fatal(err)
					}
				}
				keys := []string{src, dst, hash}
				before := e.serverCPU()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					var err error
					if f.script == nil {
						err = e.client.LMove(ctx, src, dst, "RIGHT", "LEFT").Err()
					} else {
						err = f.script.EvalSha(ctx, e.client, keys).Err()
					}
					if err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				b.ReportMetric(float64((e.serverCPU()-before).Microseconds())/float64(b.N), "redis-µs/op")
			})
		}
	}
}
