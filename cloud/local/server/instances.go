package server

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"time"

	"k8s.io/klog/v2"

	"github.com/mooring-dev/mooring/cloud/local/api"
	"github.com/mooring-dev/mooring/cloud/local/store"
)

var (
	// nameRE is a DNS-1123 label: what instance, load balancer, route and
	// cluster names must be.
	nameRE     = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)
	typeRE     = regexp.MustCompile(`^[a-z0-9][-a-z0-9.]{0,62}$`)
	labelKeyRE = regexp.MustCompile(`^[A-Za-z0-9][-A-Za-z0-9_./]{0,62}$`)
)

const maxLabels = 32

func validName(kind, name string) error {
	if !nameRE.MatchString(name) {
		return invalid("%s name %q must be 1-63 lower-case letters, digits or '-', starting and ending with a letter or digit", kind, name)
	}
	return nil
}

func validLabels(labels map[string]string) error {
	if len(labels) > maxLabels {
		return invalid("at most %d labels, got %d", maxLabels, len(labels))
	}
	for k, v := range labels {
		if !labelKeyRE.MatchString(k) || len(v) > 63 {
			return invalid("label %q=%q: keys are 1-63 of [A-Za-z0-9-_./], values at most 63 characters", k, v)
		}
	}
	return nil
}

func newInstanceID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return "i-" + hex.EncodeToString(b)
}

func (s *Server) listInstances(r *http.Request) (int, any, error) {
	clusters, ids, names, states := filter(r, "cluster"), filter(r, "id"), filter(r, "name"), filter(r, "state")
	stale := s.gate.staleList()
	s.mu.Lock()
	// The records are paged as pointers, under the lock, and only the
	// page is copied.
	matched := make([]*api.Instance, 0, len(s.instances))
	left := 0
	for _, in := range s.instances {
		if match(clusters, in.Cluster) && match(ids, in.ID) && match(names, in.Name) && match(states, string(in.State)) {
			if stale[in.ID] && ids == nil {
				left++
				continue
			}
			matched = append(matched, in)
		}
	}
	page, next, err := paginate(r, matched, func(in *api.Instance) string { return in.ID })
	items := make([]api.Instance, len(page))
	for i, in := range page {
		items[i] = *in
	}
	s.mu.Unlock()
	if left > 0 {
		s.gate.leftOut(left)
	}
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, api.InstanceList{Items: items, NextPageToken: next}, nil
}

func (s *Server) getInstance(r *http.Request) (int, any, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	in, ok := s.instances[r.PathValue("id")]
	if !ok {
		return 0, nil, notFound("instance", r.PathValue("id"))
	}
	return http.StatusOK, *in, nil
}

func (s *Server) createInstance(r *http.Request) (int, any, error) {
	var req api.CreateInstanceRequest
	if err := decode(r, &req); err != nil {
		return 0, nil, err
	}
	if err := validName("instance", req.Name); err != nil {
		return 0, nil, err
	}
	if req.Zone == "" {
		req.Zone = s.cfg.Zones[0]
	}
	if !slices.Contains(s.cfg.Zones, req.Zone) {
		return 0, nil, invalid("zone %q is not one of %v", req.Zone, s.cfg.Zones)
	}
	if req.InstanceType == "" {
		req.InstanceType = s.cfg.InstanceTypes[0]
	}
	if !slices.Contains(s.cfg.InstanceTypes, req.InstanceType) || !typeRE.MatchString(req.InstanceType) {
		return 0, nil, invalid("instance type %q is not one of %v", req.InstanceType, s.cfg.InstanceTypes)
	}
	if req.Cluster != "" {
		if err := validName("cluster", req.Cluster); err != nil {
			return 0, nil, err
		}
	}
	if err := validLabels(req.Labels); err != nil {
		return 0, nil, err
	}
	endpoint, err := metadataEndpoint(req.MetadataEndpoint)
	if err != nil {
		return 0, nil, err
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if id, taken := s.names[req.Name]; taken {
		return 0, nil, conflict("an instance named %q exists already (%s)", req.Name, id)
	}
	internal, err := s.internal.allocate()
	if err != nil {
		return 0, nil, err
	}
	external, err := s.external.allocate()
	if err != nil {
		s.internal.release(internal.String())
		return 0, nil, err
	}
	now := s.cfg.Now().UTC()
	in := &api.Instance{
		ID:           newInstanceID(),
		Name:         req.Name,
		Zone:         req.Zone,
		Region:       s.cfg.Region,
		InstanceType: req.InstanceType,
		Cluster:      req.Cluster,
		Labels:       maps.Clone(req.Labels),
		State:        api.StateRunning,
		// Disabled, the instance has no metadata listener: a fleet of
		// simulated machines that never ask costs no sockets.
		MetadataEndpoint: endpoint,
		Addresses: []api.Address{
			{Type: api.InternalIP, Address: internal.String()},
			{Type: api.ExternalIP, Address: external.String()},
			{Type: api.InternalDNS, Address: fmt.Sprintf("%s.%s.%s", req.Name, s.cfg.Region, s.cfg.DNSDomain)},
			{Type: api.Hostname, Address: req.Name},
		},
		CreatedAt:      now,
		StateChangedAt: now,
	}
	if s.cfg.BootDelay > 0 {
		in.State = api.StatePending
	}
	release := func() {
		s.internal.release(internal.String())
		s.external.release(external.String())
	}
	// The metadata service binds first so that its URL is part of the
	// record; nothing is persisted if it cannot.
	if in.State == api.StateRunning {
		if err := s.startMetadataLocked(in); err != nil {
			release()
			return 0, nil, err
		}
	}
	if err := s.store.Put(store.Instances, in.ID, in); err != nil {
		s.stopMetadataLocked(in.ID)
		release()
		return 0, nil, err
	}
	s.instances[in.ID] = in
	s.names[in.Name] = in.ID
	if in.State == api.StatePending {
		s.schedulePendingLocked(in)
	}
	s.updateGaugesLocked()
	klog.InfoS("Instance created", "instance", in.ID, "name", in.Name, "zone", in.Zone, "cluster", in.Cluster,
		"internalIP", internal, "state", in.State)
	return http.StatusCreated, *in, nil
}

// transition persists a state change of an instance, then applies it.
func (s *Server) transitionLocked(in *api.Instance, to api.InstanceState) error {
	next := *in
	next.State = to
	next.StateChangedAt = s.cfg.Now().UTC()
	if err := s.store.Put(store.Instances, in.ID, &next); err != nil {
		return err
	}
	*in = next
	s.updateGaugesLocked()
	klog.InfoS("Instance state changed", "instance", in.ID, "name", in.Name, "state", to)
	return nil
}

func (s *Server) stopInstance(r *http.Request) (int, any, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	in, ok := s.instances[r.PathValue("id")]
	if !ok {
		return 0, nil, notFound("instance", r.PathValue("id"))
	}
	switch in.State {
	case api.StateStopped:
		return http.StatusOK, *in, nil
	case api.StateTerminated:
		return 0, nil, conflict("instance %s is terminated", in.ID)
	}
	if err := s.transitionLocked(in, api.StateStopped); err != nil {
		return 0, nil, err
	}
	s.cancelPendingLocked(in.ID)
	s.stopMetadataLocked(in.ID)
	return http.StatusOK, *in, nil
}

func (s *Server) startInstance(r *http.Request) (int, any, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	in, ok := s.instances[r.PathValue("id")]
	if !ok {
		return 0, nil, notFound("instance", r.PathValue("id"))
	}
	switch in.State {
	case api.StateRunning, api.StatePending:
		return http.StatusOK, *in, nil
	case api.StateTerminated:
		return 0, nil, conflict("instance %s is terminated", in.ID)
	}
	if s.cfg.BootDelay > 0 {
		if err := s.transitionLocked(in, api.StatePending); err != nil {
			return 0, nil, err
		}
		s.schedulePendingLocked(in)
		return http.StatusOK, *in, nil
	}
	if err := s.runLocked(in); err != nil {
		return 0, nil, err
	}
	return http.StatusOK, *in, nil
}

// runLocked makes an instance running: its metadata service starts, then the
// state is persisted.
func (s *Server) runLocked(in *api.Instance) error {
	if err := s.startMetadataLocked(in); err != nil {
		return err
	}
	if err := s.transitionLocked(in, api.StateRunning); err != nil {
		s.stopMetadataLocked(in.ID)
		return err
	}
	return nil
}

func (s *Server) terminateInstance(r *http.Request) (int, any, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	in, ok := s.instances[r.PathValue("id")]
	if !ok {
		return 0, nil, notFound("instance", r.PathValue("id"))
	}
	if in.State == api.StateTerminated {
		return http.StatusOK, *in, nil
	}
	if err := s.transitionLocked(in, api.StateTerminated); err != nil {
		return 0, nil, err
	}
	s.cancelPendingLocked(in.ID)
	s.stopMetadataLocked(in.ID)
	delete(s.names, in.Name)
	return http.StatusOK, *in, nil
}

// metadataEndpoint checks a requested metadata endpoint setting; empty
// means enabled.
func metadataEndpoint(e api.MetadataEndpoint) (api.MetadataEndpoint, error) {
	switch e {
	case "":
		return api.MetadataEnabled, nil
	case api.MetadataEnabled, api.MetadataDisabled:
		return e, nil
	}
	return "", invalid("metadataEndpoint %q must be %s or %s", e, api.MetadataEnabled, api.MetadataDisabled)
}

// setMetadataEndpoint turns an instance's metadata service on or off. On a
// running instance, enabling starts the listener before the record is
// written, and disabling stops it after.
func (s *Server) setMetadataEndpoint(r *http.Request) (int, any, error) {
	var req api.SetMetadataEndpointRequest
	if err := decode(r, &req); err != nil {
		return 0, nil, err
	}
	if req.Endpoint == "" {
		return 0, nil, invalid("endpoint must be %s or %s", api.MetadataEnabled, api.MetadataDisabled)
	}
	endpoint, err := metadataEndpoint(req.Endpoint)
	if err != nil {
		return 0, nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	in, ok := s.instances[r.PathValue("id")]
	if !ok {
		return 0, nil, notFound("instance", r.PathValue("id"))
	}
	if in.State == api.StateTerminated {
		return 0, nil, conflict("instance %s is terminated", in.ID)
	}
	if metadataEnabled(in) == (endpoint == api.MetadataEnabled) {
		return http.StatusOK, *in, nil
	}
	next := *in
	next.MetadataEndpoint = endpoint
	started := false
	if endpoint == api.MetadataEnabled && next.State == api.StateRunning {
		if err := s.startMetadataLocked(&next); err != nil {
			return 0, nil, err
		}
		started = true
	}
	if err := s.store.Put(store.Instances, next.ID, &next); err != nil {
		if started {
			s.stopMetadataLocked(next.ID)
		}
		return 0, nil, err
	}
	*in = next
	if endpoint == api.MetadataDisabled {
		s.stopMetadataLocked(in.ID)
	}
	klog.InfoS("Instance metadata endpoint set", "instance", in.ID, "name", in.Name, "endpoint", endpoint)
	return http.StatusOK, *in, nil
}

// metadataEnabled says whether an instance's metadata service is served
// while it runs (records written before the setting existed: yes).
func metadataEnabled(in *api.Instance) bool { return in.MetadataEndpoint != api.MetadataDisabled }

// schedulePendingLocked makes a pending instance running once its boot
// delay (counted from its last state change) has passed.
func (s *Server) schedulePendingLocked(in *api.Instance) {
	id := in.ID
	wait := time.Until(in.StateChangedAt.Add(s.cfg.BootDelay))
	s.timers[id] = time.AfterFunc(max(wait, 0), func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		delete(s.timers, id)
		in, ok := s.instances[id]
		if s.closed || !ok || in.State != api.StatePending {
			return
		}
		if err := s.runLocked(in); err != nil {
			klog.ErrorS(err, "Instance failed to boot", "instance", id)
		}
	})
}

func (s *Server) cancelPendingLocked(id string) {
	if t, ok := s.timers[id]; ok {
		t.Stop()
		delete(s.timers, id)
	}
}

// CollectTerminated forgets the instances terminated longer than the
// retention before now, and frees their addresses, as the server's
// housekeeping does every minute: for a process embedding the server that
// needs it at once (a test's "the cloud no longer knows it").
func (s *Server) CollectTerminated(now time.Time) { s.collectTerminated(now) }

// collectTerminated forgets terminated instances older than the retention
// and frees their addresses.
func (s *Server) collectTerminated(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, in := range s.instances {
		if in.State != api.StateTerminated || now.Sub(in.StateChangedAt) < s.cfg.TerminatedRetention {
			continue
		}
		if err := s.store.Delete(store.Instances, id); err != nil {
			klog.ErrorS(err, "Could not remove a terminated instance", "instance", id)
			continue
		}
		delete(s.instances, id)
		s.internal.release(address(in, api.InternalIP))
		s.external.release(address(in, api.ExternalIP))
		klog.V(2).InfoS("Terminated instance removed", "instance", id)
	}
	s.updateGaugesLocked()
}

// address returns an instance's address of the given type, or "".
func address(in *api.Instance, t api.AddressType) string {
	for _, a := range in.Addresses {
		if a.Type == t {
			return a.Address
		}
	}
	return ""
}
