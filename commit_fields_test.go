package redq

import (
	"runtime"
	"strconv"
	"sync"
	"testing"
)

// Each field of a fieldPool is handed out with ever newer tokens: the
// scripts refuse a call whose token is older than the one recorded under
// its field, so a call that drew its token before it got its field could
// be refused although it never ran.
func TestFieldPoolTokensGrowPerField(t *testing.T) {
	const goroutines, each = 8, 5000
	c := &redisConnection{}
	p := &fieldPool{prefix: "f"}
	var mu sync.Mutex
	last := map[string]uint64{}
	var wg sync.WaitGroup
	errs := make(chan string, goroutines)
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				field, token := p.take(c)
				n, err := strconv.ParseUint(token, 10, 64)
				if err != nil {
					errs <- err.Error()
					return
				}
				mu.Lock() // only this goroutine holds field until put
				prev := last[field]
				last[field] = n
				mu.Unlock()
				if n <= prev {
					errs <- "field " + field + " handed out with token " + token + " after token " + strconv.FormatUint(prev, 10)
					return
				}
				runtime.Gosched()
				p.put(field)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatal(e)
	}
	if len(last) > goroutines {
		t.Fatalf("%d fields for %d goroutines: fields given back are not reused", len(last), goroutines)
	}
}
