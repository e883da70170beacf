package server

import (
	"net/http"
	"net/netip"

	"k8s.io/klog/v2"

	"github.com/mooring-dev/mooring/cloud/local/api"
	"github.com/mooring-dev/mooring/cloud/local/store"
)

func (s *Server) listRoutes(r *http.Request) (int, any, error) {
	clusters := filter(r, "cluster")
	s.mu.Lock()
	items := make([]api.Route, 0, len(s.routes))
	for _, rt := range s.routes {
		if match(clusters, rt.Cluster) {
			items = append(items, *rt)
		}
	}
	s.mu.Unlock()
	page, next, err := paginate(r, items, func(rt api.Route) string { return rt.Name })
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, api.RouteList{Items: page, NextPageToken: next}, nil
}

func (s *Server) getRoute(r *http.Request) (int, any, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rt, ok := s.routes[r.PathValue("name")]
	if !ok {
		return 0, nil, notFound("route", r.PathValue("name"))
	}
	return http.StatusOK, *rt, nil
}

// createRoute adds a route: the destination must be a CIDR no other route of
// the same cluster has, and the target an instance that is not terminated.
func (s *Server) createRoute(r *http.Request) (int, any, error) {
	var rt api.Route
	if err := decode(r, &rt); err != nil {
		return 0, nil, err
	}
	if err := validName("route", rt.Name); err != nil {
		return 0, nil, err
	}
	if rt.Cluster != "" {
		if err := validName("cluster", rt.Cluster); err != nil {
			return 0, nil, err
		}
	}
	p, err := netip.ParsePrefix(rt.DestinationCIDR)
	if err != nil {
		return 0, nil, invalid("destinationCIDR %q is not a CIDR", rt.DestinationCIDR)
	}
	rt.DestinationCIDR = p.Masked().String()

	s.mu.Lock()
	defer s.mu.Unlock()
	if _, exists := s.routes[rt.Name]; exists {
		return 0, nil, conflict("a route named %q exists already", rt.Name)
	}
	in, ok := s.instances[rt.InstanceID]
	if !ok {
		return 0, nil, notFound("instance", rt.InstanceID)
	}
	if in.State == api.StateTerminated {
		return 0, nil, conflict("instance %s is terminated", in.ID)
	}
	for _, other := range s.routes {
		if other.Cluster == rt.Cluster && other.DestinationCIDR == rt.DestinationCIDR {
			return 0, nil, conflict("route %s already sends %s to %s", other.Name, other.DestinationCIDR, other.InstanceID)
		}
	}
	rt.CreatedAt = s.cfg.Now().UTC()
	if err := s.store.Put(store.Routes, rt.Name, &rt); err != nil {
		return 0, nil, err
	}
	s.routes[rt.Name] = &rt
	s.updateGaugesLocked()
	klog.InfoS("Route created", "route", rt.Name, "destination", rt.DestinationCIDR, "instance", rt.InstanceID)
	return http.StatusCreated, rt, nil
}

func (s *Server) deleteRoute(r *http.Request) (int, any, error) {
	name := r.PathValue("name")
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.routes[name]; !ok {
		return 0, nil, notFound("route", name)
	}
	if err := s.store.Delete(store.Routes, name); err != nil {
		return 0, nil, err
	}
	delete(s.routes, name)
	s.updateGaugesLocked()
	klog.InfoS("Route deleted", "route", name)
	return http.StatusNoContent, nil, nil
}
