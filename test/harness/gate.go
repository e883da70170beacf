package harness

import (
	"io"
	"net"
	"sync"
)

// Gate is a TCP forwarder on loopback that a test opens and closes: open,
// it carries connections to its target; closed, its port refuses
// connections and the connections it carried are cut, as a service the
// machine cannot reach. Programs are pointed at Addr instead of the target.
type Gate struct {
	// Addr is where the gate listens (127.0.0.1:port); it keeps its port
	// across Close and Open.
	Addr   string
	target string

	mu    sync.Mutex
	ln    net.Listener
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// NewGate makes a gate to target (host:port), open when open is true.
func NewGate(target string, open bool) (*Gate, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	g := &Gate{Addr: ln.Addr().String(), target: target, conns: map[net.Conn]struct{}{}}
	if !open {
		if err := ln.Close(); err != nil {
			return nil, err
		}
		return g, nil
	}
	g.serve(ln)
	return g, nil
}

// Open starts carrying connections again (a no-op when open).
func (g *Gate) Open() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ln != nil {
		return nil
	}
	ln, err := net.Listen("tcp", g.Addr)
	if err != nil {
		return err
	}
	g.serveLocked(ln)
	return nil
}

// Close refuses new connections and cuts the open ones (a no-op when
// closed). It returns once the gate's goroutines have ended.
func (g *Gate) Close() {
	g.mu.Lock()
	if g.ln != nil {
		_ = g.ln.Close()
		g.ln = nil
	}
	for c := range g.conns {
		_ = c.Close()
	}
	g.mu.Unlock()
	g.wg.Wait()
}

func (g *Gate) serve(ln net.Listener) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.serveLocked(ln)
}

func (g *Gate) serveLocked(ln net.Listener) {
	g.ln = ln
	g.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			g.forward(c)
		}
	})
}

// forward carries one connection to the target, unless the gate closed
// meanwhile.
func (g *Gate) forward(in net.Conn) {
	out, err := net.Dial("tcp", g.target)
	if err != nil {
		_ = in.Close()
		return
	}
	g.mu.Lock()
	if g.ln == nil {
		g.mu.Unlock()
		_ = in.Close()
		_ = out.Close()
		return
	}
	g.conns[in], g.conns[out] = struct{}{}, struct{}{}
	g.mu.Unlock()
	done := func() {
		g.mu.Lock()
		delete(g.conns, in)
		delete(g.conns, out)
		g.mu.Unlock()
		_ = in.Close()
		_ = out.Close()
	}
	var once sync.Once
	// Either side ending (or being cut) ends both.
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		once.Do(done)
	}
	g.wg.Go(func() { pipe(out, in) })
	g.wg.Go(func() { pipe(in, out) })
}
