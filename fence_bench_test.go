package redq

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"
)

// BenchmarkPublishForms compares, in one process and in alternating
// rounds (this machine's load drifts), the time of a plain publish in its
// fast form (see fence.go) and in its guarded form (publish.lua) with a
// bare go-redis LPUSH of the same 100-byte payloads, one and 100 payloads
// per call, and the fast form's commands sent bare (MULTI, LPUSH, SET,
// HINCRBY, EXEC, with the payloads alone), which is its floor, and the same
// without the count (txnocount: what the guard alone costs, the LPUSH and
// the record). It reports the medians of the per-round ratios over the
// LPUSH's time as fast/lpush, guarded/lpush, tx/lpush and txnocount/lpush.
func BenchmarkPublishForms(b *testing.B) {
	for _, per := range []int{1, 100} {
		b.Run(fmt.Sprintf("%d-per-call", per), func(b *testing.B) {
			e := newBenchEnv(b)
			ctx := context.Background()
			fast := openQueue(b, e.open("fast"), "fast")
			guardedConn := e.open("guarded")
			guardedConn.publisher.fast.off = true
			guarded := openQueue(b, guardedConn, "guarded")
			payloads := benchPayloads(per)
			list := e.ns + ":list"
			args := make([]any, per)
			for i, p := range payloads {
				args[i] = p
			}
			calls := max(1000, 20000/per)
			round := map[string]func() error{
				"lpush": func() error {
					pipe := e.client.Pipeline()
					pipe.LPush(ctx, list, args...)
					_, err := pipe.Exec(ctx)
					return err
				},
				"tx": func() error {
					pipe := e.client.TxPipeline()
					pipe.LPush(ctx, list+"tx", args...)
					pipe.Set(ctx, list+"rec", 1, time.Hour)
					pipe.HIncrBy(ctx, list+"pub", "1", int64(per))
					_, err := pipe.Exec(ctx)
					return err
				},
				"txnocount": func() error {
					pipe := e.client.TxPipeline()
					pipe.LPush(ctx, list+"tx", args...)
					pipe.Set(ctx, list+"rec", 1, time.Hour)
					_, err := pipe.Exec(ctx)
					return err
				},
				"fast":    func() error { return fast.PublishBytes(payloads...) },
				"guarded": func() error { return guarded.PublishBytes(payloads...) },
			}
			ratios := map[string][]float64{}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				took := map[string]time.Duration{}
				for _, name := range []string{"lpush", "tx", "txnocount", "fast", "guarded"} {
					start := time.Now()
					for range calls {
						if err := round[name](); err != nil {
							b.Fatal(err)
						}
					}
					took[name] = time.Since(start)
				}
				b.StopTimer()
				for _, q := range []Queue{fast, guarded} {
					if _, err := q.PurgeReady(); err != nil {
						b.Fatal(err)
					}
				}
				e.client.Del(ctx, list, list+"tx")
				b.StartTimer()
				for _, name := range []string{"tx", "txnocount", "fast", "guarded"} {
					ratios[name] = append(ratios[name], float64(took[name])/float64(took["lpush"]))
				}
			}
			for name, rs := range ratios {
				sort.Float64s(rs)
				b.ReportMetric(rs[len(rs)/2], name+"/lpush")
			}
		})
	}
}
