// Package server is the local cloud: instances with per-instance metadata
// services and signed identity, load balancers whose VIPs really forward
// traffic, a route table, API rate limiting, fault injection and call
// counters, with its state in one bbolt file. mooring-localcloud serves it;
// tests embed it.
package server

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/mooring-dev/mooring/cloud/local/api"
	"github.com/mooring-dev/mooring/cloud/local/identity"
	"github.com/mooring-dev/mooring/cloud/local/lb"
	"github.com/mooring-dev/mooring/cloud/local/store"
)

// Server is a running local cloud. Serve its Handler on a listener of your
// choice; metadata services and load balancer VIPs listen on their own.
type Server struct {
	cfg     Config
	store   *store.Store
	gate    *gate
	metrics *serverMetrics
	lbs     *lb.Manager
	handler http.Handler

	mu            sync.Mutex
	keys          *identity.KeySet
	instances     map[string]*api.Instance // by ID
	names         map[string]string        // name -> ID, instances not terminated
	loadBalancers map[string]*api.LoadBalancer
	routes        map[string]*api.Route
	internal      *pool
	external      *pool
	vips          *pool
	metadata      map[string]*metadataServer // by instance ID, running instances with the endpoint enabled
	timers        map[string]*time.Timer     // pending -> running, by instance ID

	stop   chan struct{}
	wg     sync.WaitGroup
	closed bool
}

// New opens the state file and brings the cloud to the state it holds:
// metadata services of running instances and load balancers start again.
func New(cfg Config) (s *Server, err error) {
	if cfg, err = cfg.withDefaults(); err != nil {
		return nil, err
	}
	s = &Server{
		cfg:           cfg,
		gate:          newGate(cfg),
		metrics:       newServerMetrics(),
		instances:     map[string]*api.Instance{},
		names:         map[string]string{},
		loadBalancers: map[string]*api.LoadBalancer{},
		routes:        map[string]*api.Route{},
		metadata:      map[string]*metadataServer{},
		timers:        map[string]*time.Timer{},
		stop:          make(chan struct{}),
	}
	if s.internal, err = newPool("internal", cfg.InternalCIDR, cfg.AllowedPrefixes); err != nil {
		return nil, err
	}
	if s.external, err = newPool("external", cfg.ExternalCIDR, cfg.AllowedPrefixes); err != nil {
		return nil, err
	}
	if s.vips, err = newPool("load balancer VIP", cfg.VIPCIDR, cfg.AllowedPrefixes); err != nil {
		return nil, err
	}
	pools := []*pool{s.internal, s.external, s.vips}
	for i, a := range pools {
		for _, b := range pools[i+1:] {
			if a.prefix.Overlaps(b.prefix) {
				return nil, fmt.Errorf("config: the %s and %s pools overlap", a.name, b.name)
			}
		}
	}
	s.lbs = lb.NewManager(lb.Options{
		AllowedPrefixes: cfg.AllowedPrefixes,
		Logf:            func(format string, args ...any) { klog.V(2).Infof("lb: "+format, args...) },
	})
	if s.store, err = store.Open(cfg.StatePath); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			s.Close()
			s = nil
		}
	}()
	if err := s.load(); err != nil {
		return nil, err
	}
	s.handler = s.routesMux()
	s.wg.Add(1)
	go s.housekeeping()
	klog.InfoS("Local cloud started", "state", cfg.StatePath, "instances", len(s.instances),
		"loadBalancers", len(s.loadBalancers), "routes", len(s.routes), "region", cfg.Region)
	return s, nil
}

// Handler serves the API, /metrics and /healthz.
func (s *Server) Handler() http.Handler { return s.handler }

// Close stops metadata services, load balancers and background work and
// closes the state file. State stays on disk for the next New.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.stop)
	for id, t := range s.timers {
		t.Stop()
		delete(s.timers, id)
	}
	var errs []error
	for id, m := range s.metadata {
		errs = append(errs, m.close())
		delete(s.metadata, id)
	}
	s.mu.Unlock()
	s.wg.Wait()
	errs = append(errs, s.lbs.Close())
	if s.store != nil {
		errs = append(errs, s.store.Close())
	}
	return errors.Join(errs...)
}

// load reads the state file and restarts what running state needs.
func (s *Server) load() error {
	now := s.cfg.Now()
	err := store.Load(s.store, store.Instances, func(_ string, in *api.Instance) error {
		s.instances[in.ID] = in
		if in.State != api.StateTerminated {
			s.names[in.Name] = in.ID
		}
		for _, a := range in.Addresses {
			switch a.Type {
			case api.InternalIP:
				s.internal.reserve(a.Address)
			case api.ExternalIP:
				s.external.reserve(a.Address)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	if err := store.Load(s.store, store.LoadBalancers, func(_ string, l *api.LoadBalancer) error {
		s.loadBalancers[l.Name] = l
		s.vips.reserve(l.VIP)
		return nil
	}); err != nil {
		return err
	}
	if err := store.Load(s.store, store.Routes, func(_ string, r *api.Route) error {
		s.routes[r.Name] = r
		return nil
	}); err != nil {
		return err
	}
	if err := s.loadKeys(now); err != nil {
		return err
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	for _, in := range s.instances {
		switch in.State {
		case api.StateRunning:
			if err := s.startMetadataLocked(in); err != nil {
				return err
			}
		case api.StatePending:
			s.schedulePendingLocked(in)
		}
	}
	for _, l := range s.loadBalancers {
		cfg, err := s.dataPlaneConfig(l)
		if err == nil {
			err = s.lbs.Apply(cfg)
		}
		if err != nil {
			return fmt.Errorf("restore load balancer %s: %w", l.Name, err)
		}
	}
	s.updateGaugesLocked()
	return nil
}

// housekeeping removes terminated instances past their retention and
// rotates the identity key.
func (s *Server) housekeeping() {
	defer s.wg.Done()
	tick := time.NewTicker(time.Minute)
	defer tick.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-tick.C:
			now := s.cfg.Now()
			s.collectTerminated(now)
			if err := s.maybeRotateKey(now); err != nil {
				klog.ErrorS(err, "Identity key rotation failed")
			}
		}
	}
}

func (s *Server) updateGaugesLocked() {
	counts := map[api.InstanceState]int{}
	for _, in := range s.instances {
		counts[in.State]++
	}
	for _, st := range []api.InstanceState{api.StatePending, api.StateRunning, api.StateStopped, api.StateTerminated} {
		s.metrics.instances.WithLabelValues(string(st)).Set(float64(counts[st]))
	}
	s.metrics.lbs.Set(float64(len(s.loadBalancers)))
	s.metrics.routes.Set(float64(len(s.routes)))
}

// routesMux maps every endpoint to its operation.
func (s *Server) routesMux() http.Handler {
	mux := http.NewServeMux()
	v := "/" + api.Version
	s.route(mux, "GET "+v+"/instances", "ListInstances", cloudOp, s.listInstances)
	s.route(mux, "POST "+v+"/instances", "CreateInstance", cloudOp, s.createInstance)
	s.route(mux, "GET "+v+"/instances/{id}", "GetInstance", cloudOp, s.getInstance)
	s.route(mux, "POST "+v+"/instances/{id}/stop", "StopInstance", cloudOp, s.stopInstance)
	s.route(mux, "POST "+v+"/instances/{id}/start", "StartInstance", cloudOp, s.startInstance)
	s.route(mux, "POST "+v+"/instances/{id}/terminate", "TerminateInstance", cloudOp, s.terminateInstance)
	s.route(mux, "DELETE "+v+"/instances/{id}", "TerminateInstance", cloudOp, s.terminateInstance)
	s.route(mux, "PUT "+v+"/instances/{id}/metadata-endpoint", "SetMetadataEndpoint", cloudOp, s.setMetadataEndpoint)

	s.route(mux, "GET "+v+"/loadbalancers", "ListLoadBalancers", cloudOp, s.listLoadBalancers)
	s.route(mux, "GET "+v+"/loadbalancers/{name}", "GetLoadBalancer", cloudOp, s.getLoadBalancer)
	s.route(mux, "PUT "+v+"/loadbalancers/{name}", "EnsureLoadBalancer", cloudOp, s.ensureLoadBalancer)
	s.route(mux, "DELETE "+v+"/loadbalancers/{name}", "DeleteLoadBalancer", cloudOp, s.deleteLoadBalancer)

	s.route(mux, "GET "+v+"/routes", "ListRoutes", cloudOp, s.listRoutes)
	s.route(mux, "GET "+v+"/routes/{name}", "GetRoute", cloudOp, s.getRoute)
	s.route(mux, "POST "+v+"/routes", "CreateRoute", cloudOp, s.createRoute)
	s.route(mux, "DELETE "+v+"/routes/{name}", "DeleteRoute", cloudOp, s.deleteRoute)

	s.route(mux, "GET "+v+"/identity/jwks", "GetJWKS", publicOp, s.getJWKS)
	s.route(mux, "POST "+v+"/identity/rotate", "RotateIdentityKey", cloudOp, s.rotateKey)

	s.route(mux, "GET "+v+"/stats", "GetStats", adminOp, func(*http.Request) (int, any, error) {
		return http.StatusOK, s.gate.stats(), nil
	})
	s.route(mux, "DELETE "+v+"/stats", "ResetStats", adminOp, func(*http.Request) (int, any, error) {
		s.gate.reset()
		return http.StatusNoContent, nil, nil
	})
	s.route(mux, "GET "+v+"/faults", "GetFaults", adminOp, func(*http.Request) (int, any, error) {
		return http.StatusOK, s.gate.getFaults(), nil
	})
	s.route(mux, "PUT "+v+"/faults", "SetFaults", adminOp, s.setFaults)
	s.route(mux, "DELETE "+v+"/faults", "ClearFaults", adminOp, func(*http.Request) (int, any, error) {
		s.gate.setFaults(api.Faults{})
		return http.StatusNoContent, nil, nil
	})
	s.route(mux, "GET "+v+"/ratelimit", "GetRateLimit", adminOp, func(*http.Request) (int, any, error) {
		return http.StatusOK, s.gate.rateLimit(), nil
	})
	s.route(mux, "PUT "+v+"/ratelimit", "SetRateLimit", adminOp, s.setRateLimit)

	mux.Handle("GET /metrics", s.metrics.handler())
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte("ok"))
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, api.Errorf(api.CodeNotFound, "no endpoint %s %s", r.Method, r.URL.Path))
	})
	return mux
}

func (s *Server) setFaults(r *http.Request) (int, any, error) {
	var f api.Faults
	if err := decode(r, &f); err != nil {
		return 0, nil, err
	}
	check := func(where string, rate float64, status int) error {
		if rate < 0 || rate > 1 {
			return invalid("%s: errorRate %g is not within 0..1", where, rate)
		}
		if status != 0 && (status < 400 || status > 599) {
			return invalid("%s: status %d is not an HTTP error status", where, status)
		}
		return nil
	}
	if err := check("faults", f.ErrorRate, 0); err != nil {
		return 0, nil, err
	}
	for op, of := range f.Operations {
		if err := check("operation "+op, of.ErrorRate, of.Status); err != nil {
			return 0, nil, err
		}
	}
	s.gate.setFaults(f)
	klog.InfoS("Faults set", "latency", time.Duration(f.Latency), "errorRate", f.ErrorRate, "operations", len(f.Operations))
	return http.StatusOK, f, nil
}

func (s *Server) setRateLimit(r *http.Request) (int, any, error) {
	var l api.RateLimit
	if err := decode(r, &l); err != nil {
		return 0, nil, err
	}
	if err := checkRateLimit(l); err != nil {
		return 0, nil, err
	}
	l = s.gate.setRateLimit(l)
	klog.InfoS("Rate limit set", "limit", l.Limit, "burst", l.Burst)
	return http.StatusOK, l, nil
}

// checkRateLimit refuses a rate limit that is not a finite, non-negative
// number of calls per second or has a negative burst.
func checkRateLimit(l api.RateLimit) error {
	if math.IsNaN(l.Limit) || math.IsInf(l.Limit, 0) {
		return invalid("rate limit: limit %g is not a finite number of calls per second", l.Limit)
	}
	if l.Limit < 0 {
		return invalid("rate limit: limit %g must not be negative (0 means unlimited)", l.Limit)
	}
	if l.Burst < 0 {
		return invalid("rate limit: burst %d must not be negative (0 means the limit rounded down, at least 1)", l.Burst)
	}
	return nil
}

// allowed reports whether an address is inside the allowed prefixes.
func (s *Server) allowed(a netip.Addr) bool {
	for _, p := range s.cfg.AllowedPrefixes {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
