package server

import (
	"net/http"
	"net/netip"
	"slices"
	"time"

	"k8s.io/klog/v2"

	"github.com/mooring-dev/mooring/cloud/local/api"
	"github.com/mooring-dev/mooring/cloud/local/lb"
	"github.com/mooring-dev/mooring/cloud/local/store"
)

// Bounds of a load balancer spec.
const (
	maxListeners    = 64
	maxBackends     = 1000
	maxSourceRanges = 64
)

// validateSpec checks a load balancer spec and normalises it in place
// (source ranges masked, health check defaults).
func (s *Server) validateSpec(spec *api.LoadBalancerSpec) error {
	if spec.Cluster != "" {
		if err := validName("cluster", spec.Cluster); err != nil {
			return err
		}
	}
	if err := validLabels(spec.Tags); err != nil {
		return err
	}
	if len(spec.Listeners) == 0 || len(spec.Listeners) > maxListeners {
		return invalid("a load balancer needs 1-%d listeners, got %d", maxListeners, len(spec.Listeners))
	}
	type key struct {
		port  int
		proto api.Protocol
	}
	seen := map[key]bool{}
	for i := range spec.Listeners {
		l := &spec.Listeners[i]
		if l.Port < 1 || l.Port > 65535 {
			return invalid("listener %d: port %d is not within 1-65535", i, l.Port)
		}
		if l.Protocol != api.TCP && l.Protocol != api.UDP {
			return invalid("listener %d: protocol %q is not TCP or UDP", i, l.Protocol)
		}
		if seen[key{l.Port, l.Protocol}] {
			return invalid("listener %d: %s port %d is listed twice", i, l.Protocol, l.Port)
		}
		seen[key{l.Port, l.Protocol}] = true
		if len(l.Backends) > maxBackends {
			return invalid("listener %d: at most %d backends", i, maxBackends)
		}
		for j := range l.Backends {
			b := &l.Backends[j]
			a, err := netip.ParseAddr(b.Address)
			if err != nil || !a.Is4() {
				return invalid("listener %d backend %d: %q is not an IPv4 address", i, j, b.Address)
			}
			if !s.allowed(a) {
				return invalid("listener %d backend %d: %s is outside the cloud's networks %v", i, j, a, s.cfg.AllowedPrefixes)
			}
			if b.Port < 1 || b.Port > 65535 {
				return invalid("listener %d backend %d: port %d is not within 1-65535", i, j, b.Port)
			}
			b.Healthy = nil
		}
		if hc := l.HealthCheck; hc != nil {
			if hc.Protocol != api.TCP && hc.Protocol != api.HTTP {
				return invalid("listener %d: health check protocol %q is not TCP or HTTP", i, hc.Protocol)
			}
			if hc.Port < 0 || hc.Port > 65535 {
				return invalid("listener %d: health check port %d is not within 0-65535", i, hc.Port)
			}
			if hc.Protocol == api.HTTP && hc.Path == "" {
				hc.Path = "/"
			}
			if hc.Protocol == api.HTTP && hc.Path[0] != '/' {
				return invalid("listener %d: health check path %q must start with /", i, hc.Path)
			}
			if hc.IntervalSeconds < 0 || hc.IntervalSeconds > 300 {
				return invalid("listener %d: health check interval %ds is not within 0-300", i, hc.IntervalSeconds)
			}
		}
	}
	if len(spec.SourceRanges) > maxSourceRanges {
		return invalid("at most %d source ranges", maxSourceRanges)
	}
	for i, r := range spec.SourceRanges {
		p, err := netip.ParsePrefix(r)
		if err != nil {
			return invalid("source range %q is not a CIDR", r)
		}
		spec.SourceRanges[i] = p.Masked().String()
	}
	return nil
}

// dataPlaneConfig turns a load balancer into what the proxy runs.
func (s *Server) dataPlaneConfig(l *api.LoadBalancer) (lb.Config, error) {
	cfg := lb.Config{Name: l.Name, VIP: l.VIP}
	for _, r := range l.SourceRanges {
		p, err := netip.ParsePrefix(r)
		if err != nil {
			return cfg, invalid("source range %q is not a CIDR", r)
		}
		cfg.SourceRanges = append(cfg.SourceRanges, p)
	}
	for _, al := range l.Listeners {
		ll := lb.Listener{Port: al.Port, Protocol: lb.Protocol(al.Protocol)}
		for _, b := range al.Backends {
			ll.Backends = append(ll.Backends, lb.Backend{Address: b.Address, Port: b.Port})
		}
		if hc := al.HealthCheck; hc != nil {
			ll.HealthCheck = &lb.HealthCheck{
				Protocol: lb.Protocol(hc.Protocol),
				Port:     hc.Port,
				Path:     hc.Path,
				Interval: time.Duration(hc.IntervalSeconds) * time.Second,
			}
		}
		cfg.Listeners = append(cfg.Listeners, ll)
	}
	return cfg, nil
}

// withHealth returns a copy of the load balancer with each backend's health
// as the data plane sees it now.
func (s *Server) withHealth(l *api.LoadBalancer) api.LoadBalancer {
	out := *l
	out.Listeners = slices.Clone(l.Listeners)
	st, ok := s.lbs.Status(l.Name)
	for i := range out.Listeners {
		al := &out.Listeners[i]
		al.Backends = slices.Clone(al.Backends)
		if !ok {
			continue
		}
		for _, ls := range st.Listeners {
			if ls.Port != al.Port || string(ls.Protocol) != string(al.Protocol) {
				continue
			}
			for j := range al.Backends {
				for _, bs := range ls.Backends {
					if bs.Address == al.Backends[j].Address && bs.Port == al.Backends[j].Port {
						h := bs.Healthy
						al.Backends[j].Healthy = &h
					}
				}
			}
		}
	}
	return out
}

func (s *Server) listLoadBalancers(r *http.Request) (int, any, error) {
	clusters := filter(r, "cluster")
	s.mu.Lock()
	items := make([]api.LoadBalancer, 0, len(s.loadBalancers))
	for _, l := range s.loadBalancers {
		if match(clusters, l.Cluster) {
			items = append(items, s.withHealth(l))
		}
	}
	s.mu.Unlock()
	page, next, err := paginate(r, items, func(l api.LoadBalancer) string { return l.Name })
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, api.LoadBalancerList{Items: page, NextPageToken: next}, nil
}

func (s *Server) getLoadBalancer(r *http.Request) (int, any, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.loadBalancers[r.PathValue("name")]
	if !ok {
		return 0, nil, notFound("load balancer", r.PathValue("name"))
	}
	return http.StatusOK, s.withHealth(l), nil
}

// ensureLoadBalancer creates the load balancer or updates it to the spec.
// The data plane changes first; the record is persisted only if it did, and
// the data plane goes back to the old spec if persisting fails.
func (s *Server) ensureLoadBalancer(r *http.Request) (int, any, error) {
	name := r.PathValue("name")
	if err := validName("load balancer", name); err != nil {
		return 0, nil, err
	}
	var spec api.LoadBalancerSpec
	if err := decode(r, &spec); err != nil {
		return 0, nil, err
	}
	if err := s.validateSpec(&spec); err != nil {
		return 0, nil, err
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.cfg.Now().UTC()
	old, exists := s.loadBalancers[name]
	next := &api.LoadBalancer{Name: name, LoadBalancerSpec: spec, CreatedAt: now, UpdatedAt: now}
	if exists {
		next.VIP, next.CreatedAt = old.VIP, old.CreatedAt
	} else {
		vip, err := s.vips.allocate()
		if err != nil {
			return 0, nil, err
		}
		next.VIP = vip.String()
	}
	undo := func() {
		if !exists {
			s.vips.release(next.VIP)
			_ = s.lbs.Remove(name)
			return
		}
		if cfg, err := s.dataPlaneConfig(old); err == nil {
			_ = s.lbs.Apply(cfg)
		}
	}
	cfg, err := s.dataPlaneConfig(next)
	if err != nil {
		undo()
		return 0, nil, err
	}
	if err := s.lbs.Apply(cfg); err != nil {
		undo()
		return 0, nil, api.Errorf(api.CodeInvalid, "load balancer %s: %v", name, err)
	}
	if err := s.store.Put(store.LoadBalancers, name, next); err != nil {
		undo()
		return 0, nil, err
	}
	s.loadBalancers[name] = next
	s.updateGaugesLocked()
	klog.InfoS("Load balancer ensured", "loadBalancer", name, "vip", next.VIP, "listeners", len(next.Listeners), "created", !exists)
	status := http.StatusOK
	if !exists {
		status = http.StatusCreated
	}
	return status, s.withHealth(next), nil
}

func (s *Server) deleteLoadBalancer(r *http.Request) (int, any, error) {
	name := r.PathValue("name")
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.loadBalancers[name]
	if !ok {
		return 0, nil, notFound("load balancer", name)
	}
	if err := s.store.Delete(store.LoadBalancers, name); err != nil {
		return 0, nil, err
	}
	delete(s.loadBalancers, name)
	if err := s.lbs.Remove(name); err != nil {
		klog.ErrorS(err, "Load balancer data plane did not stop cleanly", "loadBalancer", name)
	}
	s.vips.release(l.VIP)
	s.updateGaugesLocked()
	klog.InfoS("Load balancer deleted", "loadBalancer", name, "vip", l.VIP)
	return http.StatusNoContent, nil, nil
}
