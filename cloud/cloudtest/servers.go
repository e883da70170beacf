package cloudtest

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"
)

// ErrClosed is the answer of a closed Servers.
var ErrClosed = errors.New("closed")

// Servers are an endpoint's HTTP servers on 127.0.0.1: its API, and one
// server per instance of key K (metadata services, each on a listener of
// its own, as each machine has its own). Its methods are safe for
// concurrent use; the zero value is ready.
type Servers[K comparable] struct {
	mu     sync.Mutex
	apiLn  net.Listener
	api    *server
	per    map[K]*instanceServer
	closed bool
}

type instanceServer struct {
	srv  *server
	addr string
}

// Listen takes the API's address now (a free port on 127.0.0.1), for an
// endpoint that must know it before it serves (a URL it signs); Serve
// serves on it. It returns host:port.
func (s *Servers[K]) Listen() (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return "", ErrClosed
	}
	if s.apiLn == nil {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", err
		}
		s.apiLn = ln
	}
	return s.apiLn.Addr().String(), nil
}

// Serve serves the API with h, on the address Listen took or a new one.
func (s *Servers[K]) Serve(h http.Handler) error {
	if _, err := s.Listen(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.api != nil {
		return errors.New("already serving")
	}
	s.api = newServer(h)
	go serve(s.api, s.apiLn)
	return nil
}

// Addr is the API's host:port, "" before Listen or Serve.
func (s *Servers[K]) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.apiLn == nil {
		return ""
	}
	return s.apiLn.Addr().String()
}

// Instance starts the server of key with h on a listener of its own, once:
// later calls return the address of the first (h unused). It returns
// host:port.
func (s *Servers[K]) Instance(key K, h http.Handler) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return "", ErrClosed
	}
	if is, ok := s.per[key]; ok {
		return is.addr, nil
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	if s.per == nil {
		s.per = map[K]*instanceServer{}
	}
	is := &instanceServer{srv: newServer(h), addr: ln.Addr().String()}
	s.per[key] = is
	go serve(is.srv, ln)
	return is.addr, nil
}

// Close stops every server (each is given 5s to finish its requests) and
// the API's listener; later starts fail with ErrClosed.
func (s *Servers[K]) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	var servers []*server
	if s.api != nil {
		servers = append(servers, s.api)
	}
	for _, is := range s.per {
		servers = append(servers, is.srv)
	}
	s.per = nil
	ln, served := s.apiLn, s.api != nil
	s.mu.Unlock()
	var errs []error
	if ln != nil && !served {
		errs = append(errs, ln.Close())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, srv := range servers {
		if err := srv.shutdown(ctx); err != nil {
			errs = append(errs, srv.Close())
		}
	}
	return errors.Join(errs...)
}

// server is an http.Server that knows the connections no request has come
// on yet: Shutdown counts those as busy for 5 s, and a client that sends
// two requests at once may dial a connection it then does not need and
// keep it, unused, among its idle ones (the stock http.Transport does), so
// that closing the endpoint took 5 s.
type server struct {
	*http.Server
	mu    sync.Mutex
	fresh map[net.Conn]struct{}
}

func newServer(h http.Handler) *server {
	s := &server{fresh: map[net.Conn]struct{}{}}
	s.Server = &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ConnState: s.track}
	return s
}

func (s *server) track(c net.Conn, st http.ConnState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st == http.StateNew {
		s.fresh[c] = struct{}{}
	} else {
		delete(s.fresh, c)
	}
}

// shutdown is Shutdown after closing the connections no request came on.
func (s *server) shutdown(ctx context.Context) error {
	s.mu.Lock()
	for c := range s.fresh {
		_ = c.Close()
	}
	s.mu.Unlock()
	return s.Shutdown(ctx)
}

func serve(srv *server, ln net.Listener) { _ = srv.Serve(ln) }

// Endpoint is what Start starts.
type Endpoint interface {
	Start() error
	Close() error
}

// Start starts an endpoint and closes it when the test ends.
func Start(t testing.TB, e Endpoint) {
	t.Helper()
	if err := e.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
}
