package aws

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/mooring-dev/mooring/cloud/kit"
	"gopkg.in/gcfg.v1"
	"k8s.io/client-go/informers"
	cloudprovider "k8s.io/cloud-provider"
	awsv1 "k8s.io/cloud-provider-aws/pkg/providers/v1"
	awsv1config "k8s.io/cloud-provider-aws/pkg/providers/v1/config"
	"k8s.io/klog/v2"
)

// Load balancers and routes come from the upstream AWS cloud provider
// (k8s.io/cloud-provider-aws/pkg/providers/v1) when the config says
// loadBalancers: upstream: this backend keeps InstancesV2 and the approver's
// parts, and hands LoadBalancer() and Routes() to an upstream provider built
// from upstreamConfig, the upstream's own cloud-config file (gcfg), with this
// backend's region and cluster id. No ELB logic lives here.
//
// How it is built, and what that costs:
//   - The upstream package's init registers its own factory with
//     k8s.io/cloud-provider as "aws". mooring's backends are not in that
//     registry (cloud.NewProvider builds them), so the name is free there and
//     the upstream is built through that factory, its public entry point:
//     its SDK wiring (the EC2 pagination adapter, ELB, ELBv2, KMS and IMDS
//     clients, retries, [ServiceOverride] endpoints, RoleARN) is unexported.
//   - That factory calls the instance metadata service while it builds: it
//     logs the instance identity document (a failure is ignored), reads the
//     region from IMDS unless Global.Region is set (this backend sets it),
//     and, unless Global.VPC is set with Global.SubnetID or Global.RoleARN,
//     looks its own instance up (IMDS instance-id, then EC2
//     DescribeInstances), failing without them. So with loadBalancers:
//     upstream the CCM runs on EC2, or upstreamConfig names the VPC and
//     subnet, as for the upstream CCM itself.
//   - It brings the upstream's globals along: its API metrics (legacy
//     registry) and a "fargate" node variant, both used only by its code.
//   - Its load balancers find instances with their own EC2 calls, by the
//     Nodes' providerIDs; its routes by node name through the node informer
//     that SetInformers passes on, else by private DNS name.
//
// Without load balancers (loadBalancers: none) the CCM still runs:
// mooring-ccm's startServiceLB (ccm/app/app.go) starts no service controller
// when LoadBalancer() answers false, and so would k8s.io/cloud-provider's
// own: controllers/service's (*Controller).init fails with "the cloud
// provider does not support external load balancers", which app/core.go's
// startServiceController logs and answers as "not started"; its
// startRouteController skips itself when Routes() answers false.

// upstreamBuilder builds the upstream provider from its cloud-config text.
type upstreamBuilder func(config io.Reader) (cloudprovider.Interface, error)

// registeredUpstream builds the upstream provider with the factory its
// package registered with k8s.io/cloud-provider.
func registeredUpstream(config io.Reader) (cloudprovider.Interface, error) {
	cp, err := cloudprovider.GetCloudProvider(awsv1.ProviderName, config)
	if err != nil {
		return nil, err
	}
	if _, ok := cp.(*awsv1.Cloud); !ok {
		// Someone else holds the name: never build this backend again.
		return nil, fmt.Errorf("k8s.io/cloud-provider's %q provider is a %T, not the upstream AWS provider", awsv1.ProviderName, cp)
	}
	return cp, nil
}

// buildUpstream builds the upstream provider of cfg.UpstreamConfig.
func buildUpstream(cfg *Config, build upstreamBuilder) (cloudprovider.Interface, error) {
	text, err := upstreamCloudConfig(cfg)
	if err != nil {
		return nil, err
	}
	cp, err := build(strings.NewReader(text))
	if err != nil {
		return nil, fmt.Errorf("aws: upstream AWS provider (upstreamConfig %s): %w", cfg.UpstreamConfig, err)
	}
	if _, ok := cp.LoadBalancer(); !ok {
		return nil, fmt.Errorf("aws: the upstream AWS provider (%T) has no load balancers", cp)
	}
	klog.InfoS("Load balancers and routes from the upstream AWS provider", "upstreamConfig", cfg.UpstreamConfig)
	return cp, nil
}

// upstreamCloudConfig reads the upstream's cloud-config file and makes sure
// it names this backend's region and cluster id: where it names none, they
// are added in a [Global] section of their own after the file's; where it
// names others, that is an error.
func upstreamCloudConfig(cfg *Config) (string, error) {
	f, err := os.Open(cfg.UpstreamConfig)
	if err != nil {
		return "", fmt.Errorf("aws: upstreamConfig: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, kit.MaxConfigSize+1))
	if err != nil {
		return "", fmt.Errorf("aws: upstreamConfig %s: %w", cfg.UpstreamConfig, err)
	}
	if len(data) > kit.MaxConfigSize {
		return "", fmt.Errorf("aws: upstreamConfig %s: larger than %d bytes", cfg.UpstreamConfig, kit.MaxConfigSize)
	}
	var uc awsv1config.CloudConfig
	if err := gcfg.FatalOnly(gcfg.ReadStringInto(&uc, string(data))); err != nil {
		return "", fmt.Errorf("aws: upstreamConfig %s: %w", cfg.UpstreamConfig, err)
	}
	g := uc.Global
	var errs, add []string
	switch g.Region {
	case "":
		add = append(add, "Region = "+strconv.Quote(cfg.Region))
	case cfg.Region:
	default:
		errs = append(errs, fmt.Sprintf("Global.Region %q is not region %q", g.Region, cfg.Region))
	}
	// The upstream takes its region from Global.Zone when one is set.
	if rest, ok := strings.CutPrefix(g.Zone, cfg.Region); g.Zone != "" && (!ok || rest == "" || rest[0] >= '0' && rest[0] <= '9') {
		errs = append(errs, fmt.Sprintf("Global.Zone %q is not a zone of region %q", g.Zone, cfg.Region))
	}
	for name, id := range map[string]string{"KubernetesClusterID": g.KubernetesClusterID, "KubernetesClusterTag": g.KubernetesClusterTag} {
		if id != "" && id != cfg.ClusterID {
			errs = append(errs, fmt.Sprintf("Global.%s %q is not clusterID %q", name, id, cfg.ClusterID))
		}
	}
	if g.KubernetesClusterID == "" && g.KubernetesClusterTag == "" {
		add = append(add, "KubernetesClusterID = "+strconv.Quote(cfg.ClusterID))
	}
	if len(errs) > 0 {
		return "", fmt.Errorf("aws: upstreamConfig %s: %s", cfg.UpstreamConfig, strings.Join(errs, "; "))
	}
	if len(add) == 0 {
		return string(data), nil
	}
	// After the file's own, so that they win over an empty assignment there.
	return string(data) + "\n[Global]\n" + strings.Join(add, "\n") + "\n", nil
}

// errNoUpstreamConfig: loadBalancers: upstream needs the upstream's config.
var errNoUpstreamConfig = errors.New(`loadBalancers "upstream" needs upstreamConfig, the path of the upstream AWS provider's cloud-config file`)

// LoadBalancer is the upstream AWS provider's, with loadBalancers:
// upstream; otherwise there is none and the CCM runs no service controller.
func (c *Cloud) LoadBalancer() (cloudprovider.LoadBalancer, bool) {
	if c.upstream == nil {
		return nil, false
	}
	return c.upstream.LoadBalancer()
}

// Routes are the upstream AWS provider's, with loadBalancers: upstream
// (behind upstreamRoutes' two guards); otherwise there are none and the CCM
// runs no route controller.
func (c *Cloud) Routes() (cloudprovider.Routes, bool) {
	if c.upstream == nil {
		return nil, false
	}
	r, ok := c.upstream.Routes()
	if !ok || r == nil {
		return nil, false
	}
	return upstreamRoutes{r}, true
}

// upstreamRoutes are the upstream's routes with two guards, each a read of
// the routes (the upstream's ListRoutes: DescribeRouteTables and one
// DescribeInstances of the routes' instances) before a change:
//   - CreateRoute of a route the table holds already, to the same Node, is
//     done (EC2's CreateRoute answers RouteAlreadyExists for any route of the
//     destination, and the upstream makes no exception for its own);
//   - DeleteRoute deletes the table's route of the destination only while it
//     is still the one listed: a blackhole, or to the listed Node. EC2's
//     DeleteRoute names the destination alone, so the upstream's deleted a
//     route made since for a moved pod range's new Node, which the route
//     controller creates in the same pass as it deletes the old route (listed
//     as a blackhole). A route already gone, or one the upstream does not list
//     (via a gateway), is left and no error.
//
// A read that fails fails the change. Between the read and the change a
// route may still be written by another hand: EC2 has no conditional write.
type upstreamRoutes struct{ cloudprovider.Routes }

func (u upstreamRoutes) CreateRoute(ctx context.Context, clusterName, nameHint string, route *cloudprovider.Route) error {
	rs, err := u.ListRoutes(ctx, clusterName)
	if err != nil {
		return fmt.Errorf("aws routes: route %s to Node %s: reading the route table: %w", route.DestinationCIDR, route.TargetNode, err)
	}
	for _, r := range rs {
		if r.DestinationCIDR == route.DestinationCIDR && !r.Blackhole && r.TargetNode == route.TargetNode {
			klog.V(2).InfoS("Route exists", "destination", route.DestinationCIDR, "node", route.TargetNode)
			return nil
		}
	}
	return u.Routes.CreateRoute(ctx, clusterName, nameHint, route)
}

func (u upstreamRoutes) DeleteRoute(ctx context.Context, clusterName string, route *cloudprovider.Route) error {
	rs, err := u.ListRoutes(ctx, clusterName)
	if err != nil {
		return fmt.Errorf("aws routes: route %s: reading the route table: %w", route.DestinationCIDR, err)
	}
	for _, r := range rs {
		if r.DestinationCIDR != route.DestinationCIDR {
			continue
		}
		if !r.Blackhole && r.TargetNode != route.TargetNode {
			klog.InfoS("Leaving a route made since for another Node", "destination", r.DestinationCIDR, "node", r.TargetNode,
				"listedNode", route.TargetNode, "listedBlackhole", route.Blackhole)
			return nil
		}
		return u.Routes.DeleteRoute(ctx, clusterName, route)
	}
	klog.V(2).InfoS("Route already gone", "destination", route.DestinationCIDR)
	return nil
}

// SetInformers passes the CCM's informers on to the upstream provider,
// whose routes map node names to instances through them
// (cloudprovider.InformerUser).
func (c *Cloud) SetInformers(f informers.SharedInformerFactory) {
	if u, ok := c.upstream.(cloudprovider.InformerUser); ok {
		u.SetInformers(f)
	}
}
