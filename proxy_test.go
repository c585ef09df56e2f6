package redq

import (
	"bytes"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// procProxy is a TCP proxy in front of Redis that can lose a reply and can
// play an unreachable Redis.
//
// Once armed with patterns, the first request that contains one is passed
// on to Redis (which runs it), its reply is swallowed, and the client's
// connection is closed, as happens when Redis goes away or the network
// fails between a command and its answer. With armHold, the connection is
// kept open without the reply until release is called: the client is left
// waiting, as when it is paused or its read has not timed out yet, while
// the test changes Redis under it.
//
// down closes the listener and every connection, so that the client's
// dials are refused; up listens again on the same address.
type procProxy struct {
	target string
	addr_  string
	wg     sync.WaitGroup

	mu      sync.Mutex
	ln      net.Listener
	armed   [][]byte
	hold    bool
	holdReq bool   // hold the request itself, not its reply (armHoldRequest)
	held    []byte // the request held by armHoldRequest
	tripped int
	release chan struct{}
	conns   map[net.Conn]bool
	closed  bool
}

func startProcProxy(t testing.TB, target string) *procProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &procProxy{target: target, addr_: ln.Addr().String(), conns: map[net.Conn]bool{}, release: make(chan struct{})}
	p.serveListener(ln)
	t.Cleanup(func() {
		p.mu.Lock()
		p.closed = true
		p.mu.Unlock()
		p.down()
		p.releaseHeld()
		p.wg.Wait()
	})
	return p
}

func (p *procProxy) addr() string { return p.addr_ }

func (p *procProxy) serveListener(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			p.conns[c] = true
			p.mu.Unlock()
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				p.serve(c)
				p.mu.Lock()
				delete(p.conns, c)
				p.mu.Unlock()
			}()
		}
	}()
}

// arm makes the proxy lose the reply of the next request that contains
// any of the patterns, closing the client's connection at once.
func (p *procProxy) arm(patterns ...string) { p.setArmed(false, patterns) }

// armHold is arm, but the client's connection stays open without a reply
// until release.
func (p *procProxy) armHold(patterns ...string) { p.setArmed(true, patterns) }

// armHoldRequest holds the next request that contains any of the patterns
// in transit: Redis does not get it until release, which passes it on to
// the connection to Redis it came for (as a request that waited in a
// socket while Redis was paused) and then closes both sides.
func (p *procProxy) armHoldRequest(patterns ...string) {
	p.setArmed(true, patterns)
	p.mu.Lock()
	p.holdReq = true
	p.mu.Unlock()
}

// heldRequest is the request armHoldRequest held.
func (p *procProxy) heldRequest() []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.held
}

func (p *procProxy) setArmed(hold bool, patterns []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.armed, p.hold, p.holdReq = nil, hold, false
	if hold {
		p.release = make(chan struct{})
	}
	for _, s := range patterns {
		p.armed = append(p.armed, []byte(s))
	}
}

// releaseHeld ends the hold of a held reply: the client's connection is
// closed without it.
func (p *procProxy) releaseHeld() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.release:
	default:
		close(p.release)
	}
}

func (p *procProxy) trips() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.tripped
}

// awaitTrip waits until the proxy has lost (or holds) n replies.
func (p *procProxy) awaitTrip(t testing.TB, n int) {
	t.Helper()
	eventually(t, "the armed request", func() bool { return p.trips() >= n })
}

// down makes Redis unreachable through the proxy: dials are refused and
// open connections are closed.
func (p *procProxy) down() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		c.Close()
	}
}

// up listens again on the proxy's address.
func (p *procProxy) up(t testing.TB) {
	t.Helper()
	var ln net.Listener
	var err error
	for i := 0; i < 100; i++ {
		if ln, err = net.Listen("tcp", p.addr_); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	p.serveListener(ln)
}

// trip reports whether window holds an armed pattern, and disarms; hold
// says whether to hold the reply rather than drop it, holdReq whether to
// hold the request itself.
func (p *procProxy) trip(window []byte) (tripped, hold, holdReq bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, pat := range p.armed {
		if bytes.Contains(window, pat) {
			p.armed = nil
			p.tripped++
			return true, p.hold, p.holdReq
		}
	}
	return false, false, false
}

func (p *procProxy) serve(client net.Conn) {
	defer client.Close()
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	defer server.Close()
	var dropping atomic.Bool
	done := make(chan struct{})
	go func() { // replies
		defer close(done)
		buf := make([]byte, 32<<10)
		for {
			n, err := server.Read(buf)
			if n > 0 && !dropping.Load() {
				if _, werr := client.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				if !dropping.Load() {
					client.Close() // Redis closed the connection (a restart): so does the proxy
				}
				return
			}
		}
	}()
	// The tail of what was sent before, so that a pattern split across
	// reads is seen; short, so that one sent long before arming is not.
	const tailLen = 512
	var tail []byte
	buf := make([]byte, 32<<10)
	for {
		n, err := client.Read(buf)
		if n > 0 {
			window := append(tail, buf[:n]...)
			tail = append([]byte(nil), window[max(0, len(window)-tailLen):]...)
			tripped, hold, holdReq := p.trip(window)
			if tripped {
				dropping.Store(true)
			}
			if holdReq {
				p.mu.Lock()
				p.held = append([]byte(nil), buf[:n]...)
				release := p.release
				p.mu.Unlock()
				<-release
				_, _ = server.Write(buf[:n])
				time.Sleep(100 * time.Millisecond)
				client.Close()
				server.Close()
				<-done
				return
			}
			if _, werr := server.Write(buf[:n]); werr != nil {
				return
			}
			if tripped {
				// Let Redis run the request, then cut the client off
				// without its reply (after the test's say-so, if held).
				time.Sleep(100 * time.Millisecond)
				if hold {
					p.mu.Lock()
					release := p.release
					p.mu.Unlock()
					<-release
				}
				client.Close()
				server.Close()
				<-done
				return
			}
		}
		if err != nil {
			server.Close()
			<-done
			return
		}
	}
}
