package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/server/healthz"
	apiserveroptions "k8s.io/apiserver/pkg/server/options"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/component-base/metrics/legacyregistry"
	cmapp "k8s.io/controller-manager/app"
	"k8s.io/klog/v2"
)

// Default ports: the health probes keep the port the single plain-HTTP
// server had before /metrics moved behind authentication.
const (
	defaultSecurePort    = 10272
	defaultHealthAddress = "127.0.0.1:10271"
)

// serving is the approver's HTTP side, as mooring-ccm's: /metrics (with
// /healthz and /readyz) on the secure port, behind delegated authentication
// (TokenReview, client certificates) and authorization (SubjectAccessReview),
// and plain-HTTP /healthz and /readyz for the kubelet's probes, which carry
// no credentials.
type serving struct {
	secure        *apiserveroptions.SecureServingOptions
	authn         *apiserveroptions.DelegatingAuthenticationOptions
	authz         *apiserveroptions.DelegatingAuthorizationOptions
	healthAddress string
}

func newServing() *serving {
	s := &serving{
		secure:        apiserveroptions.NewSecureServingOptions(),
		authn:         apiserveroptions.NewDelegatingAuthenticationOptions(),
		authz:         apiserveroptions.NewDelegatingAuthorizationOptions(),
		healthAddress: defaultHealthAddress,
	}
	s.secure.BindPort = defaultSecurePort
	s.secure.Required = false
	// Self-signed in memory (the root file system is read-only), unless
	// --tls-cert-file or --cert-dir say otherwise.
	s.secure.ServerCert.CertDirectory = ""
	s.secure.ServerCert.PairName = "mooring-csr-approver"
	// In a cluster the in-cluster config serves; without one, every
	// request but the health paths is refused (fail closed).
	s.authn.RemoteKubeConfigFileOptional = true
	s.authz.RemoteKubeConfigFileOptional = true
	return s
}

func (s *serving) addFlags(fs *pflag.FlagSet) {
	s.secure.AddFlags(fs)
	s.authn.AddFlags(fs)
	s.authz.AddFlags(fs)
	fs.StringVar(&s.healthAddress, "health-probe-bind-address", s.healthAddress,
		"address of /healthz and /readyz in plain HTTP, for kubelet probes; empty disables")
	fs.StringVar(&s.healthAddress, "metrics-bind-address", s.healthAddress,
		"the former name of --health-probe-bind-address")
	_ = fs.MarkDeprecated("metrics-bind-address",
		"use --health-probe-bind-address; /metrics is served on --secure-port with authentication and authorization")
}

func (s *serving) validate() error {
	var errs []error
	errs = append(errs, s.secure.Validate()...)
	errs = append(errs, s.authn.Validate()...)
	errs = append(errs, s.authz.Validate()...)
	return errors.Join(errs...)
}

// health is what /healthz and /readyz report.
type health struct {
	leaderElect bool
	// electing: the leader election loop runs (set just before it starts).
	electing atomic.Bool
	// leading: this process holds the lease.
	leading atomic.Bool
	// synced: the controller's caches synced and its workers run.
	synced   atomic.Bool
	watchdog *leaderelection.HealthzAdaptor
}

// healthChecks: alive, and, when leading, renewing the lease in time.
func (h *health) healthChecks() []healthz.HealthChecker {
	checks := []healthz.HealthChecker{healthz.PingHealthz}
	if h.watchdog != nil {
		checks = append(checks, h.watchdog)
	}
	return checks
}

// readyChecks: ready means able to do the approver's part. Without leader
// election: the CSR and Node caches synced and the workers run. With it: the
// election loop runs, and, once leading, the caches synced and the workers
// run. A standby is ready (it takes over when the lease frees), so that a
// rolling update never waits for a lease it cannot get.
func (h *health) readyChecks() []healthz.HealthChecker {
	return []healthz.HealthChecker{
		healthz.NamedCheck("leader-election", func(*http.Request) error {
			if h.leaderElect && !h.electing.Load() {
				return errors.New("the leader election has not started")
			}
			return nil
		}),
		healthz.NamedCheck("controller", func(*http.Request) error {
			if (!h.leaderElect || h.leading.Load()) && !h.synced.Load() {
				return errors.New("the CSR and Node caches have not synced yet")
			}
			return nil
		}),
	}
}

// start listens on the health address and the secure port (either may be
// off) and serves until ctx ends.
func (s *serving) start(ctx context.Context, h *health) error {
	if s.healthAddress != "" {
		mux := http.NewServeMux()
		healthz.InstallHandler(mux, h.healthChecks()...)
		healthz.InstallReadyzHandler(mux, h.readyChecks()...)
		l, err := net.Listen("tcp", s.healthAddress)
		if err != nil {
			return fmt.Errorf("--health-probe-bind-address: %w", err)
		}
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() {
			if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
				klog.ErrorS(err, "Health probe server stopped")
			}
		}()
		go func() {
			<-ctx.Done()
			_ = srv.Close()
		}()
	}

	if err := s.secure.MaybeDefaultWithSelfSignedCerts("localhost", nil, []net.IP{net.IPv4(127, 0, 0, 1)}); err != nil {
		return fmt.Errorf("self-signed serving certificate: %w", err)
	}
	var info *server.SecureServingInfo
	if err := s.secure.ApplyTo(&info); err != nil {
		return err
	}
	if info == nil {
		klog.InfoS("Secure port off (--secure-port=0): no /metrics")
		return nil
	}
	var authn server.AuthenticationInfo
	if err := s.authn.ApplyTo(&authn, info, nil); err != nil {
		return err
	}
	var authz server.AuthorizationInfo
	if err := s.authz.ApplyTo(&authz); err != nil {
		return err
	}
	mux := http.NewServeMux()
	healthz.InstallHandler(mux, h.healthChecks()...)
	healthz.InstallReadyzHandler(mux, h.readyChecks()...)
	mux.Handle("/metrics", legacyregistry.Handler())
	// The handler chain mooring-ccm's secure port has (k8s.io/controller-manager).
	_, _, err := info.Serve(cmapp.BuildHandlerChain(mux, &authz, &authn), 0, ctx.Done())
	return err
}
