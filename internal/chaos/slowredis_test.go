package chaos

import (
	"bytes"
	"fmt"
	"math/rand"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// A Redis that answers late. The hubs' Redis client sends a command again
// when its reply does not come within its read timeout (5 s), on another
// connection, and a script is no exception: on a loaded Redis, or one
// failing over, a script that ran but answered late runs a second time,
// and the hub sees only the second answer. The engine's tests send
// scripts twice back to back; this fault has real hub processes meet it,
// with whatever the other hubs and agents do between the two sendings.

// slowHold is how long a slow proxy holds a drawn script's reply: past
// the hubs' read timeout (go-redis' default, 5 s).
const slowHold = 5500 * time.Millisecond

// slowProxy stands between the hubs and the suite's redis-server (url
// mode) and passes bytes both ways. While slow, it holds the reply of one
// script in three (and whatever its connection answers after it) for
// slowHold: the client gives up on that connection and sends the script
// again, while the first sending ran all the same.
type slowProxy struct {
	ln     net.Listener
	target string // the redis-server's socket

	mu   sync.Mutex
	slow bool
	rng  *rand.Rand
	held int // scripts whose reply was held
	// waiting are the chunks whose reply is being held; resent counts
	// those the client sent again on another connection meanwhile
	waiting []heldChunk
	resent  int
	conns   map[net.Conn]bool
}

// heldChunk is a chunk of connection conn whose reply is held until until.
type heldChunk struct {
	conn  net.Conn
	chunk []byte
	until time.Time
}

// startSlowProxy listens on socket and forwards to target.
func startSlowProxy(socket, target string, seed int64) (*slowProxy, error) {
	ln, err := net.Listen("unix", socket)
	if err != nil {
		return nil, err
	}
	p := &slowProxy{ln: ln, target: target, rng: rand.New(rand.NewSource(seed)), conns: map[net.Conn]bool{}}
	go p.accept()
	return p, nil
}

func (p *slowProxy) accept() {
	for {
		cn, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.serve(cn)
	}
}

// setSlow starts or ends the slow period.
func (p *slowProxy) setSlow(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.slow = on
}

// counts returns how many replies were held, and how many of their
// commands the client sent again (the same bytes, on another connection).
func (p *slowProxy) counts() (held, resent int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.held, p.resent
}

// draw says whether the reply to a chunk the client sent is held: a
// chunk holding a script, one in three, while slow.
func (p *slowProxy) draw(cn net.Conn, chunk []byte) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	p.waiting = slices.DeleteFunc(p.waiting, func(h heldChunk) bool { return now.After(h.until) })
	for i, h := range p.waiting {
		if h.conn != cn && bytes.Equal(h.chunk, chunk) {
			p.resent++
			p.waiting = slices.Delete(p.waiting, i, i+1)
			break
		}
	}
	if !p.slow || !bytes.Contains(bytes.ToLower(chunk), []byte("evalsha")) || p.rng.Intn(3) != 0 {
		return false
	}
	p.held++
	p.waiting = append(p.waiting, heldChunk{conn: cn, chunk: bytes.Clone(chunk), until: now.Add(slowHold)})
	return true
}

func (p *slowProxy) track(cn net.Conn, on bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if on && p.conns == nil {
		return false // closed
	}
	if on {
		p.conns[cn] = true
	} else {
		delete(p.conns, cn)
	}
	return true
}

// serve forwards one client connection. The replies pass as they come,
// except while held: the hold is set before the chunk that asks for it
// is forwarded, so its reply cannot slip through.
func (p *slowProxy) serve(cn net.Conn) {
	if !p.track(cn, true) {
		_ = cn.Close()
		return
	}
	defer p.track(cn, false)
	up, err := net.DialTimeout("unix", p.target, time.Second)
	if err != nil {
		_ = cn.Close() // Redis down (a redis-kill fault): the client dials again
		return
	}
	var until atomic.Int64 // no reply passes before this (unix nanoseconds)
	done := make(chan struct{})
	go func() {
		defer close(done)
		copyChunks(cn, up, func([]byte) {
			if d := time.Until(time.Unix(0, until.Load())); d > 0 {
				time.Sleep(d)
			}
		})
	}()
	copyChunks(up, cn, func(chunk []byte) {
		if p.draw(cn, chunk) {
			until.Store(time.Now().Add(slowHold).UnixNano())
		}
	})
	<-done
}

// copyChunks copies src to dst chunk by chunk, calling before with each
// chunk before it is written, until either side fails; it then closes
// both.
func copyChunks(dst, src net.Conn, before func(chunk []byte)) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			before(buf[:n])
			if _, werr := dst.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	_ = dst.Close()
	_ = src.Close()
}

// close stops the proxy and cuts its connections.
func (p *slowProxy) close() {
	_ = p.ln.Close()
	p.mu.Lock()
	conns := p.conns
	p.conns = nil
	p.mu.Unlock()
	for cn := range conns {
		_ = cn.Close()
	}
}

// redisSlow makes the suite's Redis answer late for a few seconds: one
// script in three is answered after the hubs' read timeout, so they send
// it again. Nothing may be lost or run twice for it (the invariants), and
// the fleet goes on once Redis answers in time again (the recovery: the
// first command started after the slow period).
func (c *cluster) redisSlow(f *faultRec) error {
	f.target = "redis (replies late)"
	c.proxy.setSlow(true)
	f.at = time.Now()
	time.Sleep(c.between(4*time.Second, 6*time.Second))
	c.proxy.setSlow(false)
	f.restored = time.Now()
	time.Sleep(slowHold) // the last held replies' commands sent again
	held, resent := c.proxy.counts()
	f.note = fmt.Sprintf("(this run so far: %d script replies held past the read timeout, %d of those scripts sent again)", held, resent)
	if resent == 0 {
		// the fault would test nothing it says: a client whose read
		// timeout outlasts the hold, or that no longer sends again
		return fmt.Errorf("no script sent again after %d replies held %v", held, slowHold)
	}
	return nil
}
