package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"
	"unicode"

	"k8s.io/klog/v2"

	"github.com/mooring-dev/mooring/cloud/local/api"
	"github.com/mooring-dev/mooring/cloud/local/identity"
)

// metadataServer is one instance's metadata service. It listens on the
// instance's own internal IP and only ever answers for that instance: the
// instance is fixed when the listener starts, never taken from the request.
type metadataServer struct {
	srv *http.Server
}

func (m *metadataServer) close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return m.srv.Shutdown(ctx)
}

// startMetadataLocked starts the instance's metadata service and records its
// URL in the instance, unless its endpoint is disabled. It keeps the port of
// an earlier start when it can.
func (s *Server) startMetadataLocked(in *api.Instance) error {
	if _, ok := s.metadata[in.ID]; ok || !metadataEnabled(in) {
		return nil
	}
	ip := address(in, api.InternalIP)
	port := s.cfg.MetadataPort
	if port == 0 && in.MetadataURL != "" {
		if u, err := url.Parse(in.MetadataURL); err == nil {
			port, _ = strconv.Atoi(u.Port())
		}
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(port)))
	if err != nil && s.cfg.MetadataPort == 0 && port != 0 {
		ln, err = net.Listen("tcp", net.JoinHostPort(ip, "0"))
	}
	if err != nil {
		return api.Errorf(api.CodeInternal, "start the metadata service of %s: %v", in.ID, err)
	}
	in.MetadataURL = "http://" + ln.Addr().String()
	mux := http.NewServeMux()
	id := in.ID
	s.route(mux, "GET /"+api.Version+"/instance", "MetadataGetInstance", metadataOp, func(r *http.Request) (int, any, error) {
		return s.metadataInstance(id, r)
	})
	s.route(mux, "GET /"+api.Version+"/identity", "MetadataGetIdentity", metadataOp, func(r *http.Request) (int, any, error) {
		return s.metadataIdentity(id, r)
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, api.Errorf(api.CodeNotFound, "no metadata endpoint %s %s", r.Method, r.URL.Path))
	})
	m := &metadataServer{srv: &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}}
	go func() {
		if err := m.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			klog.ErrorS(err, "Metadata service stopped", "instance", id)
		}
	}()
	s.metadata[id] = m
	klog.V(2).InfoS("Metadata service started", "instance", id, "url", in.MetadataURL)
	return nil
}

func (s *Server) stopMetadataLocked(id string) {
	if m, ok := s.metadata[id]; ok {
		delete(s.metadata, id)
		if err := m.close(); err != nil {
			klog.ErrorS(err, "Metadata service did not stop cleanly", "instance", id)
		}
	}
}

// metadataRequest checks what every metadata request must carry and returns
// the instance, which must be running.
func (s *Server) metadataRequest(id string, r *http.Request) (api.Instance, error) {
	if r.Header.Get(api.MetadataHeader) != "true" {
		return api.Instance{}, invalid("metadata requests must carry the header %s: true", api.MetadataHeader)
	}
	if r.Header.Get("X-Forwarded-For") != "" {
		// A proxy forwarded this request: refuse, as a guard against
		// server-side request forgery through the instance.
		return api.Instance{}, api.Errorf(api.CodeUnauthorized, "forwarded requests are refused")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	in, ok := s.instances[id]
	if !ok || in.State != api.StateRunning {
		return api.Instance{}, api.Errorf(api.CodeUnavailable, "instance %s is not running", id)
	}
	return *in, nil
}

func (s *Server) metadataInstance(id string, r *http.Request) (int, any, error) {
	in, err := s.metadataRequest(id, r)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, api.InstanceIdentity{
		ID: in.ID, Name: in.Name, Zone: in.Zone, Region: in.Region,
		InstanceType: in.InstanceType, Cluster: in.Cluster, Addresses: in.Addresses,
	}, nil
}

// maxAudience bounds the caller-chosen audience of an identity token.
const maxAudience = 256

func (s *Server) metadataIdentity(id string, r *http.Request) (int, any, error) {
	in, err := s.metadataRequest(id, r)
	if err != nil {
		return 0, nil, err
	}
	aud := r.URL.Query().Get("audience")
	if aud == "" || len(aud) > maxAudience {
		return 0, nil, invalid("audience must be 1-%d characters", maxAudience)
	}
	for _, c := range aud {
		if c > unicode.MaxASCII || !unicode.IsPrint(c) {
			return 0, nil, invalid("audience must be printable ASCII")
		}
	}
	claims, err := identity.NewClaims(s.cfg.Issuer, aud, instanceClaims(in), s.cfg.Now(), s.cfg.TokenTTL)
	if err != nil {
		return 0, nil, err
	}
	s.mu.Lock()
	token, err := s.keys.Sign(claims)
	s.mu.Unlock()
	if err != nil {
		return 0, nil, fmt.Errorf("sign identity token: %w", err)
	}
	return http.StatusOK, rawBody{contentType: "application/jwt", data: []byte(token)}, nil
}

func instanceClaims(in api.Instance) identity.InstanceClaims {
	c := identity.InstanceClaims{
		ID: in.ID, Name: in.Name, Zone: in.Zone, Region: in.Region,
		InstanceType: in.InstanceType, Cluster: in.Cluster,
	}
	for _, a := range in.Addresses {
		c.Addresses = append(c.Addresses, identity.Address{Type: string(a.Type), Address: a.Address})
	}
	return c
}
