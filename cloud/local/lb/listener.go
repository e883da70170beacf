package lb

import (
	"errors"
	"io"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// listener is one port and protocol of a load balancer's VIP.
type listener struct {
	key  listenerKey
	name string // "<lb>/<proto>/<port>", for logs
	m    *Manager

	tcp net.Listener
	udp *net.UDPConn

	mu       sync.Mutex
	backends []*backend
	next     int
	ranges   []netip.Prefix
	conns    map[io.Closer]struct{} // open TCP conns and UDP sessions
	closed   bool

	wg sync.WaitGroup
}

// bind opens the listener's socket; serve starts using it.
func bind(m *Manager, lbName string, vip netip.Addr, l Listener) (*listener, error) {
	ln := &listener{
		key:   listenerKey{l.Port, l.Protocol},
		name:  lbName + "/" + string(l.Protocol) + "/" + strconv.Itoa(l.Port),
		m:     m,
		conns: map[io.Closer]struct{}{},
	}
	addr := netip.AddrPortFrom(vip, uint16(l.Port))
	var err error
	if l.Protocol == TCP {
		ln.tcp, err = net.Listen("tcp", addr.String())
	} else {
		ln.udp, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(addr))
	}
	if err != nil {
		return nil, err
	}
	return ln, nil
}

func (l *listener) serve() {
	l.wg.Add(1)
	if l.tcp != nil {
		go l.acceptTCP()
	} else {
		go l.readUDP()
	}
}

// configure swaps in backends, health checks and source ranges. Backends
// that stay the same keep their health and their checker.
func (l *listener) configure(cfg Listener, ranges []netip.Prefix) {
	l.mu.Lock()
	defer l.mu.Unlock()
	old := l.backends
	fresh := make([]*backend, 0, len(cfg.Backends))
	for _, want := range cfg.Backends {
		var kept *backend
		for i, b := range old {
			if b != nil && b.same(want, cfg.HealthCheck) {
				kept, old[i] = b, nil
				break
			}
		}
		if kept == nil {
			kept = newBackend(want, cfg.HealthCheck)
			if kept.check != nil && !l.closed {
				l.wg.Add(1)
				go func(b *backend) {
					defer l.wg.Done()
					b.probe(l.m.logf, l.name)
				}(kept)
			}
		}
		fresh = append(fresh, kept)
	}
	for _, b := range old {
		if b != nil {
			close(b.stop)
		}
	}
	l.backends = fresh
	l.ranges = ranges
}

// pick returns healthy backends in round-robin order, starting with the
// next one due.
func (l *listener) pick() []*backend {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := len(l.backends)
	out := make([]*backend, 0, n)
	for i := range n {
		b := l.backends[(l.next+i)%n]
		if b.isHealthy() {
			out = append(out, b)
		}
	}
	if n > 0 {
		l.next = (l.next + 1) % n
	}
	return out
}

func (l *listener) admits(a netip.Addr) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return allowedSource(a.Unmap(), l.ranges)
}

// track registers an open connection so stop can close it; false if the
// listener is already stopping.
func (l *listener) track(c io.Closer) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	l.conns[c] = struct{}{}
	return true
}

func (l *listener) untrack(c io.Closer) {
	l.mu.Lock()
	delete(l.conns, c)
	l.mu.Unlock()
}

// stop closes the socket, every open connection and the health checkers,
// and waits for all of the listener's goroutines.
func (l *listener) stop() {
	l.mu.Lock()
	l.closed = true
	for c := range l.conns {
		c.Close()
	}
	for _, b := range l.backends {
		close(b.stop)
	}
	l.backends = nil
	l.mu.Unlock()
	if l.tcp != nil {
		l.tcp.Close()
	}
	if l.udp != nil {
		l.udp.Close()
	}
	l.wg.Wait()
}

func (l *listener) acceptTCP() {
	defer l.wg.Done()
	for {
		c, err := l.tcp.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			l.m.logf("%s: accept: %v", l.name, err)
			time.Sleep(10 * time.Millisecond)
			continue
		}
		src := c.RemoteAddr().(*net.TCPAddr).AddrPort().Addr()
		if !l.admits(src) || !l.track(c) {
			c.Close()
			continue
		}
		l.wg.Add(1)
		go l.proxyTCP(c.(*net.TCPConn))
	}
}

func (l *listener) proxyTCP(client *net.TCPConn) {
	defer l.wg.Done()
	defer l.untrack(client)
	defer client.Close()
	var upstream *net.TCPConn
	for _, b := range l.pick() {
		c, err := net.DialTimeout("tcp", b.addrPort().String(), l.m.opts.DialTimeout)
		if err == nil {
			upstream = c.(*net.TCPConn)
			break
		}
		l.m.logf("%s: dial backend %s: %v", l.name, b.Backend, err)
	}
	if upstream == nil || !l.track(upstream) {
		if upstream != nil {
			upstream.Close()
		}
		return
	}
	defer l.untrack(upstream)
	defer upstream.Close()
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(upstream, client)
		_ = upstream.CloseWrite()
		close(done)
	}()
	_, _ = io.Copy(client, upstream)
	_ = client.CloseWrite()
	<-done
}

// udpSession is one client's flow: its own socket to the backend.
type udpSession struct {
	client   netip.AddrPort
	upstream *net.UDPConn
	last     atomic.Int64 // unix nanos of the last datagram either way
}

func (s *udpSession) Close() error { return s.upstream.Close() }

func (l *listener) readUDP() {
	defer l.wg.Done()
	sessions := map[netip.AddrPort]*udpSession{}
	var smu sync.Mutex
	buf := make([]byte, 64<<10)
	for {
		n, src, err := l.udp.ReadFromUDPAddrPort(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		if !l.admits(src.Addr()) {
			continue
		}
		smu.Lock()
		s := sessions[src]
		smu.Unlock()
		if s == nil {
			s = l.openSession(src, func() {
				smu.Lock()
				delete(sessions, src)
				smu.Unlock()
			})
			if s == nil {
				continue // no healthy backend: drop
			}
			smu.Lock()
			sessions[src] = s
			smu.Unlock()
		}
		s.last.Store(time.Now().UnixNano())
		_, _ = s.upstream.Write(buf[:n])
	}
}

func (l *listener) openSession(client netip.AddrPort, forget func()) *udpSession {
	for _, b := range l.pick() {
		c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(b.addrPort()))
		if err != nil {
			l.m.logf("%s: dial backend %s: %v", l.name, b.Backend, err)
			continue
		}
		s := &udpSession{client: client, upstream: c}
		s.last.Store(time.Now().UnixNano())
		if !l.track(s) {
			c.Close()
			return nil
		}
		l.wg.Add(1)
		go l.relayReplies(s, forget)
		return s
	}
	return nil
}

// relayReplies sends the backend's datagrams back to the client from the
// VIP, until the session idles out or the listener stops.
func (l *listener) relayReplies(s *udpSession, forget func()) {
	defer l.wg.Done()
	defer forget()
	defer l.untrack(s)
	defer s.upstream.Close()
	idle := l.m.opts.UDPIdleTimeout
	buf := make([]byte, 64<<10)
	for {
		_ = s.upstream.SetReadDeadline(time.Now().Add(idle / 4))
		n, err := s.upstream.Read(buf)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				if time.Since(time.Unix(0, s.last.Load())) >= idle {
					return
				}
				continue
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// ICMP port unreachable and the like: keep the session.
			continue
		}
		s.last.Store(time.Now().UnixNano())
		_, _ = l.udp.WriteToUDPAddrPort(buf[:n], s.client)
	}
}
