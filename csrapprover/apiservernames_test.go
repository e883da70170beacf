package csrapprover

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/mooring-dev/mooring/internal/pki"
)

// apiserver is a TLS server standing for kube-apiserver, whose serving
// certificate the test replaces at will, and the rest.Config of a client
// that trusts it.
type apiserver struct {
	srv  *httptest.Server
	cert atomic.Pointer[tls.Certificate]
	cfg  *rest.Config
	ca   *pki.CA
}

func newAPIServer(t *testing.T, dns []string, ips []string) *apiserver {
	t.Helper()
	ca, err := pki.NewCA("test apiserver CA")
	if err != nil {
		t.Fatal(err)
	}
	a := &apiserver{ca: ca}
	a.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	// Per handshake: httptest's own certificate would answer clients that
	// send no server name (as for an IP), GetCertificate would not.
	a.srv.TLS = &tls.Config{GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
		return &tls.Config{Certificates: []tls.Certificate{*a.cert.Load()}}, nil
	}}
	a.serve(t, dns, ips)
	a.srv.StartTLS()
	t.Cleanup(a.srv.Close)
	a.cfg = &rest.Config{Host: a.srv.URL, TLSClientConfig: rest.TLSClientConfig{CAData: ca.CertPEM}}
	return a
}

// serve makes the server present a new certificate of its CA for dns and
// ips (and 127.0.0.1, which the client dials).
func (a *apiserver) serve(t *testing.T, dns []string, ips []string) {
	t.Helper()
	kp, err := a.ca.Issue(pki.Request{CommonName: "kube-apiserver", Profile: pki.ProfileServer,
		Hosts: append(append([]string{"127.0.0.1"}, ips...), dns...)})
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(kp.CertPEM, kp.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	a.cert.Store(&pair)
}

func learn(t *testing.T, cfg *rest.Config) *APIServerNames {
	t.Helper()
	n, err := NewAPIServerNames(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	return n
}

// claimsAPIServer gives node-1's instance the apiserver's name as its
// hostname and the apiserver's IP as an address: what whoever creates
// instances can do.
func claimsAPIServer(w *world, name, ip string) {
	in := w.instances["local://i-1"]
	in.Addresses = append(in.Addresses, v1.NodeAddress{Type: v1.NodeHostName, Address: name}, v1.NodeAddress{Type: v1.NodeInternalIP, Address: ip})
	w.instances["local://i-1"] = in
	w.nodes["node-1"] = &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}, Spec: v1.NodeSpec{ProviderID: "local://i-1"}}
}

// The attack of issue 28: an instance whose hostname is the apiserver's
// name, or which holds one of its IPs, asks for a serving certificate for it.
func TestAPIServerCertificateNamesAreReserved(t *testing.T) {
	api := newAPIServer(t, []string{"api.example.internal"}, []string{"10.0.0.10"})
	w := newWorld(t)
	claimsAPIServer(w, "api.example.internal", "10.0.0.10")
	w.decider.cfg.APIServerNames = learn(t, api.cfg)
	for name, mutate := range map[string]func(*csrSpec){
		"DNS name":               func(s *csrSpec) { s.dns = []string{"node-1", "api.example.internal"} },
		"DNS name, another case": func(s *csrSpec) { s.dns = []string{"API.Example.Internal."} },
		"IP":                     func(s *csrSpec) { s.ips = []string{"127.10.0.1", "10.0.0.10"} },
		"the IP the client dials": func(s *csrSpec) {
			in := w.instances["local://i-1"]
			in.Addresses = append(in.Addresses, v1.NodeAddress{Type: v1.NodeInternalIP, Address: "127.0.0.1"})
			w.instances["local://i-1"] = in
			s.ips = []string{"127.0.0.1"}
		},
	} {
		t.Run(name, func(t *testing.T) {
			s := servingSpec()
			mutate(&s)
			if d := w.decide(t, w.csr(t, s)); d.Approve || d.Reason != ReasonReservedName {
				t.Fatalf("decision %+v, want denied %s", d, ReasonReservedName)
			}
		})
	}
	// The instance's own names and addresses are still its own.
	if d := w.decide(t, w.csr(t, servingSpec())); !d.Approve {
		t.Fatalf("node-1's own serving request: %+v", d)
	}
}

// --reserved-names takes IPs too (other apiservers' addresses).
func TestReservedNamesFlagTakesIPs(t *testing.T) {
	w := newWorld(t)
	claimsAPIServer(w, "api-2.example.internal", "10.0.0.11")
	w.decider = NewDecider(Config{Cluster: cluster, ReservedNames: []string{"api-2.example.internal", "10.0.0.11"}}, nil, w.instances, w.nodes, w.replays)
	for _, s := range []csrSpec{
		func() csrSpec { s := servingSpec(); s.ips = []string{"10.0.0.11"}; return s }(),
		func() csrSpec { s := servingSpec(); s.dns = []string{"api-2.example.internal"}; return s }(),
	} {
		if d := w.decide(t, w.csr(t, s)); d.Approve || d.Reason != ReasonReservedName {
			t.Fatalf("decision %+v, want denied %s", d, ReasonReservedName)
		}
	}
}

// The cluster's Service names of the apiserver, whatever the cluster
// domain.
func TestClusterServiceNamesAreReserved(t *testing.T) {
	w := newWorld(t)
	for _, name := range []string{"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local",
		"kubernetes.default.svc.corp.example"} {
		claimsAPIServer(w, name, "10.0.0.12")
		s := servingSpec()
		s.dns = []string{name}
		if d := w.decide(t, w.csr(t, s)); d.Approve || d.Reason != ReasonReservedName {
			t.Errorf("%s: decision %+v, want denied %s", name, d, ReasonReservedName)
		}
	}
}

// The apiserver's certificate is rotated onto a new name: once the
// approver has looked again, the new name is reserved, and the old one
// stays reserved (clients may still use it, and another apiserver behind
// the same address may still serve it).
func TestAPIServerCertificateRotation(t *testing.T) {
	api := newAPIServer(t, []string{"api.example.internal"}, nil)
	n := learn(t, api.cfg)
	api.serve(t, []string{"api-new.example.internal"}, []string{"10.0.0.20"})
	changed, err := n.Refresh(context.Background())
	if err != nil || !changed {
		t.Fatalf("refresh after the rotation: changed %v, %v", changed, err)
	}
	w := newWorld(t)
	w.decider.cfg.APIServerNames = n
	for _, name := range []string{"api.example.internal", "api-new.example.internal"} {
		claimsAPIServer(w, name, "10.0.0.20")
		s := servingSpec()
		s.dns = []string{name}
		if d := w.decide(t, w.csr(t, s)); d.Approve || d.Reason != ReasonReservedName {
			t.Errorf("%s: decision %+v, want denied %s", name, d, ReasonReservedName)
		}
	}
	s := servingSpec()
	s.ips = []string{"10.0.0.20"}
	if d := w.decide(t, w.csr(t, s)); d.Approve || d.Reason != ReasonReservedName {
		t.Errorf("the new IP: decision %+v, want denied %s", d, ReasonReservedName)
	}
}

// Run looks again periodically and picks up a rotation by itself; it
// tells once when the names are first known.
func TestAPIServerNamesRunFollowsRotation(t *testing.T) {
	api := newAPIServer(t, []string{"api.example.internal"}, nil)
	n, err := NewAPIServerNames(api.cfg)
	if err != nil {
		t.Fatal(err)
	}
	n.period, n.retry = 20*time.Millisecond, 20*time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	learned := make(chan struct{}, 10)
	go n.Run(ctx, func() { learned <- struct{}{} })
	select {
	case <-learned:
	case <-time.After(10 * time.Second):
		t.Fatal("names never learned")
	}
	api.serve(t, []string{"api-new.example.internal"}, nil)
	deadline := time.Now().Add(10 * time.Second)
	for {
		set, err := n.Reserved()
		if err == nil && set["api-new.example.internal"] {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the rotated name was never learned: %v %v", set, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if len(learned) != 0 {
		t.Errorf("learned told %d more times", len(learned))
	}
}

// Until a handshake with the apiserver has succeeded, no serving CSR is
// decided, not even a valid one; client CSRs are.
func TestServingWaitsForAPIServerNames(t *testing.T) {
	// A server whose certificate the client does not trust: the handshake
	// fails.
	api := newAPIServer(t, []string{"api.example.internal"}, nil)
	other := newAPIServer(t, nil, nil)
	cfg := rest.CopyConfig(api.cfg)
	cfg.CAData = other.ca.CertPEM
	n, err := NewAPIServerNames(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.Refresh(context.Background()); err == nil {
		t.Fatal("a handshake with an untrusted certificate succeeded")
	}
	w := newWorld(t)
	w.nodes["node-1"] = &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}, Spec: v1.NodeSpec{ProviderID: "local://i-1"}}
	w.decider.cfg.APIServerNames = n
	d, err := w.decider.Decide(context.Background(), w.csr(t, servingSpec()))
	if !errors.Is(err, ErrAPIServerNamesUnknown) || d.Approve {
		t.Fatalf("serving before the names are known: %+v, %v; want ErrAPIServerNamesUnknown", d, err)
	}
	delete(w.nodes, "node-1")
	if d := w.decide(t, w.csr(t, w.joinSpec(t))); !d.Approve {
		t.Fatalf("join while the names are unknown: %+v", d)
	}
}

// A failed handshake later keeps the names learned before.
func TestAPIServerNamesKeptWhenHandshakeFails(t *testing.T) {
	api := newAPIServer(t, []string{"api.example.internal"}, nil)
	n := learn(t, api.cfg)
	api.srv.Close()
	if _, err := n.Refresh(context.Background()); err == nil {
		t.Fatal("a handshake with a closed server succeeded")
	}
	set, err := n.Reserved()
	if err != nil || !set["api.example.internal"] || !set["127.0.0.1"] {
		t.Fatalf("after a failed handshake: %v, %v", set, err)
	}
}

// Names not seen for the window are dropped, counted in time of successful
// handshakes: failures alone drop nothing.
func TestAPIServerNamesWindow(t *testing.T) {
	cert := &x509.Certificate{DNSNames: []string{"old.example.internal"}}
	var fail bool
	n := newAPIServerNames("test", func(context.Context) (*x509.Certificate, error) {
		if fail {
			return nil, errors.New("down")
		}
		return cert, nil
	})
	now := time.Unix(1e9, 0)
	n.now = func() time.Time { return now }
	refresh := func() {
		t.Helper()
		if _, err := n.Refresh(context.Background()); err != nil && !fail {
			t.Fatal(err)
		}
	}
	refresh()
	cert = &x509.Certificate{DNSNames: []string{"new.example.internal"}}
	fail = true
	now = now.Add(2 * n.window)
	refresh()
	if set, _ := n.Reserved(); !set["old.example.internal"] {
		t.Fatalf("a failed handshake dropped a name: %v", set)
	}
	fail = false
	refresh()
	if set, _ := n.Reserved(); set["old.example.internal"] || !set["new.example.internal"] {
		t.Fatalf("after the window: %v", set)
	}
}

func TestNewAPIServerNamesNeedsTLS(t *testing.T) {
	if _, err := NewAPIServerNames(&rest.Config{Host: "http://127.0.0.1:8080"}); err == nil {
		t.Fatal("a plain HTTP apiserver was accepted")
	}
}
