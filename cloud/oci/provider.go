package oci

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"

	"github.com/oracle/oci-go-sdk/v65/common"
	"github.com/oracle/oci-go-sdk/v65/common/auth"
	"github.com/oracle/oci-go-sdk/v65/core"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/klog/v2"

	"github.com/mooring-dev/mooring/cloud"
	"github.com/mooring-dev/mooring/cloud/kit"
	kitlb "github.com/mooring-dev/mooring/cloud/kit/loadbalancer"
	"github.com/mooring-dev/mooring/cloud/oci/agentid"
	"github.com/mooring-dev/mooring/cloud/view"
)

// ProviderName is the backend's name, for --cloud-provider and the node
// agent's cloud setting.
const ProviderName = agentid.Name

// Factory builds the provider from its cloud-config; backend.go registers
// it with mooring's backends.
var Factory = kit.Factory(ParseConfig, New)

// Cloud is OCI as Kubernetes and mooring see it: InstancesV2 and Zones over
// the shared view of the cluster's instances, the approver's instance
// principal verifier, and Services' load balancers (loadbalancers.go). It
// has no routes.
type Cloud struct {
	kit.Base          // InstancesV2 and Zones over the view, the Attester
	kit.InstancesOnly // no routes (docs/oci.md); LoadBalancer and Initialize are its own

	cfg     Config
	compute *core.ComputeClient
	network *core.VirtualNetworkClient
	src     Source
	// lbc is the load balancers' cloud (loadbalancers.go), lbs the kit's
	// Balancers over it.
	lbc *lbCloud
	lbs *kitlb.Balancers[lbSpec]
}

// New builds the provider with oci-go-sdk's Core Services clients and a
// client of the auth service (the instance identity roots, unless
// rootCAFile is set), signed as cfg.Auth says. With APIKey it makes no
// call; InstancePrincipal reads the machine's metadata service and
// federates its certificate at once.
func New(cfg Config) (*Cloud, error) {
	cfg.defaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	var (
		provider common.ConfigurationProvider
		err      error
	)
	switch cfg.Auth {
	case AuthAPIKey:
		provider, err = common.ConfigurationProviderFromFileWithProfile(cfg.ConfigFile, cfg.Profile, "")
		if err == nil {
			// Read now, so that a broken file fails the start, not the
			// first call.
			if _, kerr := provider.KeyID(); kerr != nil {
				err = kerr
			} else if _, kerr := provider.PrivateRSAKey(); kerr != nil {
				err = kerr
			}
		}
	case AuthInstancePrincipal:
		provider, err = auth.InstancePrincipalConfigurationProvider()
	}
	if err != nil {
		return nil, fmt.Errorf("oci: %s credentials: %w", cfg.Auth, err)
	}
	compute, err := core.NewComputeClientWithConfigurationProvider(provider)
	if err != nil {
		return nil, fmt.Errorf("oci: the Compute client: %w", err)
	}
	network, err := core.NewVirtualNetworkClientWithConfigurationProvider(provider)
	if err != nil {
		return nil, fmt.Errorf("oci: the Virtual Network client: %w", err)
	}
	var auth *common.BaseClient
	if cfg.RootCAFile == "" {
		if auth, err = NewAuthClient(provider, cfg.Region, cfg.AuthEndpoint, cfg.RequestTimeout.Duration); err != nil {
			return nil, err
		}
	}
	return NewWithClients(cfg, &compute, &network, auth)
}

// NewWithClients builds the provider over Core Services clients and, when
// cfg has no rootCAFile, a client of the auth service (NewAuthClient)
// whose roots evidence must chain to: it sets the Core Services clients'
// region and endpoints from cfg, no retries (the view's refresh is the
// retry, and an error must stay an error) and no circuit breaker, and an
// HTTP client with the request timeout. It reads the roots file, if any,
// and makes no call.
func NewWithClients(cfg Config, compute *core.ComputeClient, network *core.VirtualNetworkClient, auth *common.BaseClient) (*Cloud, error) {
	cfg.defaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if compute == nil || network == nil {
		return nil, errors.New("oci: Compute and Virtual Network clients are required")
	}
	var (
		roots     Roots
		rootsFrom string
	)
	if cfg.RootCAFile != "" {
		pool, n, err := ReadRoots(cfg.RootCAFile)
		if err != nil {
			return nil, fmt.Errorf("oci cloud config: %w", err)
		}
		roots, rootsFrom = StaticRoots(pool), fmt.Sprintf("%d from %s", n, cfg.RootCAFile)
	} else {
		if auth == nil {
			return nil, errors.New("oci: without rootCAFile, an auth service client is required (the roots are fetched)")
		}
		fetched, err := NewFetchedRoots(RootsOptions{Client: auth})
		if err != nil {
			return nil, err
		}
		roots, rootsFrom = fetched, auth.Host+RootsPath
	}
	ver, err := NewVerifier(VerifierOptions{Roots: roots, Tenancy: cfg.Tenancy, Compartments: cfg.Compartments,
		MaxClockSkew: cfg.MaxClockSkew.Duration, MaxEvidenceAge: cfg.MaxEvidenceAge.Duration, MaxCertificateAge: cfg.MaxCertificateAge.Duration})
	if err != nil {
		return nil, fmt.Errorf("oci: evidence verifier: %w", err)
	}
	noRetry := common.NoRetryPolicy()
	compute.SetRegion(cfg.Region)
	network.SetRegion(cfg.Region)
	for _, c := range []struct {
		base     *common.BaseClient
		endpoint string
	}{{&compute.BaseClient, cfg.ComputeEndpoint}, {&network.BaseClient, cfg.NetworkEndpoint}} {
		if c.endpoint != "" {
			c.base.Host = c.endpoint
		}
		c.base.SetCustomClientConfiguration(common.CustomClientConfiguration{RetryPolicy: &noRetry})
		c.base.HTTPClient = &http.Client{Timeout: cfg.RequestTimeout.Duration}
	}
	src := Source{Compute: compute, Network: network, Compartments: cfg.Compartments, ClusterTag: cfg.ClusterTag,
		ClusterTagNamespace: cfg.ClusterTagNamespace, ClusterID: cfg.ClusterID, RequestTimeout: cfg.RequestTimeout.Duration,
		vnics: newVnicCache()}
	klog.InfoS("OCI cloud provider configured", "tenancy", cfg.Tenancy, "compartments", cfg.Compartments, "region", cfg.Region,
		"clusterTag", cfg.ClusterTag, "clusterTagNamespace", cfg.ClusterTagNamespace, "clusterID", cfg.ClusterID, "auth", cfg.Auth,
		"computeEndpoint", compute.Host, "networkEndpoint", network.Host, "roots", rootsFrom)
	c := &Cloud{cfg: cfg, compute: compute, network: network, src: src}
	c.lbc = newLBCloud(c)
	if c.lbs, err = kitlb.New[lbSpec](c.lbc, kitlb.Options{Cluster: cfg.ClusterID}); err != nil {
		return nil, err
	}
	v := view.New(src, view.Options{MinRefreshInterval: cfg.MinRefreshInterval.Duration})
	c.Base = kit.NewBase(kit.Options{Name: ProviderName, View: v, MaxAge: cfg.InstanceMaxAge.Duration,
		ClusterTag: cfg.ClusterID, Finder: c, Zones: true, Verifiers: []cloud.EvidenceVerifier{ver}, Metadata: metadata,
		ProviderID: kit.CheckedBy(ParseProviderID)})
	return c, nil
}

// Config is the provider's effective configuration.
func (c *Cloud) Config() Config { return c.cfg }

// metadata is kit.Metadata with the fault domain label the upstream OCI
// CCM adds.
func metadata(in view.Instance) *cloudprovider.InstanceMetadata {
	md := kit.Metadata(in)
	if fd := in.Labels[FaultDomainLabel]; fd != "" {
		md.AdditionalLabels = map[string]string{FaultDomainLabel: fd}
	}
	return md
}

// ConfirmInstance asks Compute for the instance of a providerID itself
// (GetInstance), after FindInstance missed it in the cluster's list: a
// *kit.AbsentError when OCI has no such instance or it is terminated, a
// *kit.ForeignError when it is in a compartment not configured or lacks
// the cluster's tag.
func (c *Cloud) ConfirmInstance(ctx context.Context, providerID string) (view.Instance, error) {
	id, err := ParseProviderID(providerID)
	if err != nil {
		return view.Instance{}, err
	}
	cctx, cancel := c.src.withTimeout(ctx)
	resp, err := c.compute.GetInstance(cctx, core.GetInstanceRequest{InstanceId: common.String(id)})
	cancel()
	var se common.ServiceError
	if errors.As(err, &se) && se.GetHTTPStatusCode() == http.StatusNotFound {
		// OCI answers 404 NotAuthorizedOrNotFound for an instance that is
		// not there and for one the caller may not read: the policy lets
		// mooring read every configured compartment, so it is not there
		// for mooring.
		return view.Instance{}, &kit.AbsentError{ID: providerID}
	}
	if err != nil {
		return view.Instance{}, fmt.Errorf("compute GetInstance of %s: %w", providerID, err)
	}
	in := resp.Instance
	switch {
	case in.LifecycleState == core.InstanceLifecycleStateTerminated:
		return view.Instance{}, &kit.AbsentError{ID: providerID}
	case !slices.Contains(c.cfg.Compartments, deref(in.CompartmentId)):
		return view.Instance{}, &kit.ForeignError{ID: providerID, Why: fmt.Sprintf("is in compartment %s, not one of %v", deref(in.CompartmentId), c.cfg.Compartments)}
	case !c.src.isClusters(in):
		return view.Instance{}, &kit.ForeignError{ID: providerID, Why: fmt.Sprintf("does not carry tag %s=%s", c.cfg.ClusterTag, c.cfg.ClusterID)}
	}
	vi, ok := c.src.toView(in)
	if !ok || vi.ProviderID != providerID {
		return view.Instance{}, &kit.ForeignError{ID: providerID, Why: "is not an instance mooring can name"}
	}
	atts, err := c.src.listAttachments(ctx, deref(in.CompartmentId), in.Id)
	if err != nil {
		return view.Instance{}, err
	}
	if vi.Addresses, err = c.src.addresses(ctx, atts[id], map[string]bool{}); err != nil {
		return view.Instance{}, err
	}
	return vi, nil
}
