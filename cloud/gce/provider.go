package gce

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"

	compute "google.golang.org/api/compute/v1"
	"google.golang.org/api/googleapi"
	"google.golang.org/api/option"
	upstreamgce "k8s.io/cloud-provider-gcp/providers/gce"
	"k8s.io/klog/v2"

	"github.com/mooring-dev/mooring/cloud"
	"github.com/mooring-dev/mooring/cloud/gce/agentid"
	"github.com/mooring-dev/mooring/cloud/kit"
	"github.com/mooring-dev/mooring/cloud/view"
)

// ProviderName is the backend's name, for --cloud-provider and the node
// agent's cloud setting.
const ProviderName = agentid.Name

// Factory builds the provider from its cloud-config; backend.go registers
// it with mooring's backends.
var Factory = kit.Factory(ParseConfig, func(cfg Config) (*Cloud, error) { return New(cfg) })

// Cloud is GCE as Kubernetes and mooring see it: InstancesV2 and Zones over
// the shared view of the cluster's instances, and the approver's identity
// token verifier. With loadBalancers: upstream, its load balancers and
// routes are the upstream GCE provider's (upstream.go); otherwise it has
// none.
type Cloud struct {
	kit.Base          // InstancesV2 and Zones over the view, the Attester
	kit.InstancesOnly // Clusters and the rest; LoadBalancer and Routes are upstream.go's

	cfg     Config
	compute *compute.Service
	view    *view.View
	// upstream is the upstream GCE provider, nil without load balancers.
	upstream *upstreamgce.Cloud
	// tpmCAs verify AK certificates (tpm.go).
	tpmCAs tpmCAs
}

// New builds the provider with the Compute API client of
// google.golang.org/api: Application Default Credentials (or none, with
// withoutAuthentication), the configured endpoint. opts are added last. It
// makes no call.
func New(cfg Config, opts ...option.ClientOption) (*Cloud, error) {
	cfg.defaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	all := []option.ClientOption{option.WithEndpoint(cfg.ComputeEndpoint)}
	if cfg.WithoutAuthentication {
		all = append(all, option.WithoutAuthentication())
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.RequestTimeout.Duration)
	defer cancel()
	svc, err := compute.NewService(ctx, append(all, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("gce: the Compute API client: %w", err)
	}
	return NewWithClients(cfg, svc, &http.Client{Timeout: cfg.RequestTimeout.Duration})
}

// NewWithClients builds the provider over a Compute API client and the
// HTTP client that fetches Google's signing keys (nil: the verifier's
// default). It makes no call.
func NewWithClients(cfg Config, svc *compute.Service, keysClient *http.Client) (*Cloud, error) {
	return newCloud(cfg, svc, keysClient, upstreamOptions{})
}

// newCloud is NewWithClients with the options of the upstream provider.
func newCloud(cfg Config, svc *compute.Service, keysClient *http.Client, uo upstreamOptions) (*Cloud, error) {
	cfg.defaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if svc == nil {
		return nil, errors.New("gce: a Compute API client is required")
	}
	ver, err := NewVerifier(VerifierOptions{
		Issuer: cfg.TokenIssuer, CertsURL: cfg.CertsURL, Projects: cfg.Projects,
		MaxClockSkew: cfg.MaxClockSkew.Duration, HTTPClient: keysClient,
	})
	if err != nil {
		return nil, fmt.Errorf("gce: evidence verifier: %w", err)
	}
	var up *upstreamgce.Cloud
	if cfg.LoadBalancers == LoadBalancersUpstream {
		if up, err = buildUpstream(&cfg, uo); err != nil {
			return nil, err
		}
	}
	cas, err := cfg.TPM.load()
	if err != nil {
		return nil, fmt.Errorf("gce: %w", err)
	}
	src := Source{Compute: svc, Projects: cfg.Projects, ClusterLabel: cfg.ClusterLabel, ClusterID: cfg.ClusterID,
		RequestTimeout: cfg.RequestTimeout.Duration}
	klog.InfoS("GCE cloud provider configured", "projects", cfg.Projects, "clusterLabel", cfg.ClusterLabel, "clusterID", cfg.ClusterID,
		"computeEndpoint", cfg.ComputeEndpoint, "certsURL", cfg.CertsURL, "tokenIssuer", cfg.TokenIssuer, "loadBalancers", cfg.LoadBalancers)
	c := &Cloud{cfg: cfg, compute: svc, upstream: up, tpmCAs: cas, view: view.New(src, view.Options{MinRefreshInterval: cfg.MinRefreshInterval.Duration})}
	c.Base = kit.NewBase(kit.Options{Name: ProviderName, View: c.view, MaxAge: cfg.InstanceMaxAge.Duration,
		ClusterTag: cfg.ClusterID, Finder: c, Zones: true, Verifiers: []cloud.EvidenceVerifier{ver},
		ProviderID: func(id string) (string, error) { _, _, _, err := ParseProviderID(id); return id, err }})
	return c, nil
}

// Config is the provider's effective configuration.
func (c *Cloud) Config() Config { return c.cfg }

// ConfirmInstance asks the Compute API for the instance of a providerID
// itself (instances.get), after FindInstance missed it in the cluster's
// list: a *kit.AbsentError when GCE has no such instance, a
// *kit.ForeignError when it is of a project not configured or lacks the
// cluster label.
func (c *Cloud) ConfirmInstance(ctx context.Context, providerID string) (view.Instance, error) {
	project, zone, name, err := ParseProviderID(providerID)
	if err != nil {
		return view.Instance{}, err
	}
	if !slices.Contains(c.cfg.Projects, project) {
		return view.Instance{}, &kit.ForeignError{ID: providerID, Why: fmt.Sprintf("is of project %s, not one of %v", project, c.cfg.Projects)}
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout.Duration)
	defer cancel()
	in, err := c.compute.Instances.Get(project, zone, name).Context(ctx).Do()
	var gerr *googleapi.Error
	if errors.As(err, &gerr) && gerr.Code == http.StatusNotFound {
		return view.Instance{}, &kit.AbsentError{ID: providerID}
	}
	if err != nil {
		return view.Instance{}, fmt.Errorf("compute instances.get of %s: %w", providerID, err)
	}
	src := Source{ClusterLabel: c.cfg.ClusterLabel, ClusterID: c.cfg.ClusterID}
	if vi, ok := src.toView(project, in); ok && vi.ProviderID == providerID {
		return vi, nil
	}
	return view.Instance{}, &kit.ForeignError{ID: providerID, Why: fmt.Sprintf("does not carry label %s=%s", c.cfg.ClusterLabel, c.cfg.ClusterID)}
}
