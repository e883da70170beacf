// Package app assembles mooring-ccm: k8s.io/cloud-provider's command (its
// flags, leader election, secure serving, healthz and metrics) with the
// stock node, node-lifecycle and route controllers, mooring's service
// controller in place of the stock one, mooring's node-init-retry and
// csr-approver controllers, and the cloud providers mooring registers.
package app

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/client-go/tools/clientcmd"
	cloudprovider "k8s.io/cloud-provider"
	ccmapp "k8s.io/cloud-provider/app"
	cloudcontrollerconfig "k8s.io/cloud-provider/app/config"
	"k8s.io/cloud-provider/names"
	"k8s.io/cloud-provider/options"
	cliflag "k8s.io/component-base/cli/flag"
	genericcontrollermanager "k8s.io/controller-manager/app"
	"k8s.io/controller-manager/controller"
	"k8s.io/klog/v2"

	"github.com/mooring-dev/mooring/ccm/initretry"
	"github.com/mooring-dev/mooring/ccm/nodeinit"
	"github.com/mooring-dev/mooring/ccm/servicelb"
	"github.com/mooring-dev/mooring/cloud"
	"github.com/mooring-dev/mooring/csrapprover"
	"github.com/mooring-dev/mooring/internal/clientlimit"
	"github.com/mooring-dev/mooring/internal/trim"
	"github.com/mooring-dev/mooring/internal/version/component"

	// Cloud providers mooring ships, registered by name.
	_ "github.com/mooring-dev/mooring/cloud/all"
)

// Options are mooring's flags beyond the library's.
type Options struct {
	LoadBalancerClass        string
	ServeDefaultLoadBalancer bool
	LoadBalancerDriftPeriod  time.Duration
	LoadBalancerNodeBatch    time.Duration
	// LoadBalancerController is "mooring" (the batched one, where the
	// provider can list its load balancers) or "library" (the stock one).
	LoadBalancerController string
	// NodeInitController is "mooring" (ccm/nodeinit: conflict-free
	// patches) or "library" (the stock cloud-node controller).
	NodeInitController string
	// Approver configures the csr-approver controller (off by default;
	// enable with --controllers=*,csr-approver).
	Approver csrapprover.Flags
}

// mooring-ccm's defaults for the library's flags --kube-api-qps,
// --kube-api-burst and --concurrent-node-syncs.
const (
	DefaultKubeAPIQPS          = 500
	DefaultKubeAPIBurst        = 1000
	DefaultConcurrentNodeSyncs = 200
)

// DefaultLoadBalancerClass is the spec.loadBalancerClass served by default:
// ProviderPlaceholder stands for the --cloud-provider name (mooring.dev/local
// on the local cloud).
const DefaultLoadBalancerClass = "mooring.dev/" + ProviderPlaceholder

// ProviderPlaceholder in --load-balancer-class is the --cloud-provider name.
const ProviderPlaceholder = "<cloud-provider>"

// LoadBalancerClass is the class served for provider name.
func (o *Options) loadBalancerClass(provider string) string {
	return strings.ReplaceAll(o.LoadBalancerClass, ProviderPlaceholder, provider)
}

// AddFlags registers the flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.LoadBalancerClass, "load-balancer-class", DefaultLoadBalancerClass,
		"spec.loadBalancerClass of the Services whose load balancers this CCM manages ("+ProviderPlaceholder+" is the --cloud-provider name); Services of other classes are left alone. Empty: only Services without a class (with --serve-default-load-balancer). Applies to mooring's service controller; a provider whose load balancers come from an upstream provider runs the library's stock service controller, which serves Services without a class.")
	fs.BoolVar(&o.ServeDefaultLoadBalancer, "serve-default-load-balancer", true,
		"Also manage load balancers of LoadBalancer Services without spec.loadBalancerClass (this CCM is the cluster's default load balancer).")
	fs.DurationVar(&o.LoadBalancerDriftPeriod, "load-balancer-drift-period", time.Minute,
		"How often the cloud's load balancers are listed (one batched call) to recreate those deleted or changed out of band and to delete those whose Service is gone. 0 disables.")
	fs.DurationVar(&o.LoadBalancerNodeBatch, "load-balancer-node-batch", servicelb.DefaultNodeBatch,
		"How long changes of the nodes behind load balancers (joins, removals, readiness, addresses) are gathered before every load balancer is updated once. 0 updates at once, one update per change.")
	fs.StringVar(&o.LoadBalancerController, "load-balancer-controller", "mooring",
		"Which service controller manages load balancers: mooring (batched, with the drift sweep; only where the provider lists its load balancers in one call, else the library's runs) or library (k8s.io/cloud-provider's stock controller, which serves Services without a class and ignores the load-balancer-* flags above).")
	fs.StringVar(&o.NodeInitController, "node-init-controller", "mooring",
		"Which cloud-node controller initializes Nodes: mooring (the library's behaviour, written as patches that carry no resourceVersion, so kubelets' status updates cannot make them conflict; docs/ccm.md) or library (k8s.io/cloud-provider's stock controller, which updates whole Nodes from its cache and retries on conflict). Both honour --concurrent-node-syncs, --concurrent-node-status-updates and --node-status-update-frequency.")
}

// validate checks mooring's flags.
func (o *Options) validate() error {
	if o.LoadBalancerController != "mooring" && o.LoadBalancerController != "library" {
		return fmt.Errorf("--load-balancer-controller=%q: want mooring or library", o.LoadBalancerController)
	}
	if o.NodeInitController != "mooring" && o.NodeInitController != "library" {
		return fmt.Errorf("--node-init-controller=%q: want mooring or library", o.NodeInitController)
	}
	return nil
}

// NewCommand builds the mooring-ccm command.
func NewCommand() (*cobra.Command, error) {
	ccmOptions, err := options.NewCloudControllerManagerOptions()
	if err != nil {
		return nil, fmt.Errorf("initialize options: %w", err)
	}
	// --cloud-provider has no default: the library refuses to start without
	// one, and a backend is chosen by name (cloud.Backends).
	// Measured defaults (docs/scale.md): the library's 20 QPS and one node
	// worker took 149 s to initialize 1,000 registering nodes; these take
	// 23 s for 5,000 on two cores.
	ccmOptions.Generic.ClientConnection.QPS = DefaultKubeAPIQPS
	ccmOptions.Generic.ClientConnection.Burst = DefaultKubeAPIBurst
	ccmOptions.NodeController.ConcurrentNodeSyncs = DefaultConcurrentNodeSyncs
	mo := &Options{}
	fss := cliflag.NamedFlagSets{}
	mo.AddFlags(fss.FlagSet("mooring"))
	mo.Approver.AddFlags(fss.FlagSet("CSR approver"), "csr-approver-")

	controllers := map[string]ccmapp.ControllerInitFuncConstructor{}
	for name, c := range ccmapp.DefaultInitFuncConstructors {
		controllers[name] = c
	}
	stockServiceLB := ccmapp.DefaultInitFuncConstructors[names.ServiceLBController]
	controllers[names.ServiceLBController] = ccmapp.ControllerInitFuncConstructor{
		InitContext: ccmapp.ControllerInitContext{ClientName: "service-controller"},
		Constructor: func(initContext ccmapp.ControllerInitContext, completed *cloudcontrollerconfig.CompletedConfig, c cloudprovider.Interface) ccmapp.InitFunc {
			stock := stockServiceLB.Constructor(initContext, completed, c)
			return func(ctx context.Context, cc genericcontrollermanager.ControllerContext) (controller.Interface, bool, error) {
				return startServiceLB(ctx, cc, initContext, completed, c, mo, stock)
			}
		},
	}
	stockCloudNode := ccmapp.DefaultInitFuncConstructors[names.CloudNodeController]
	controllers[names.CloudNodeController] = ccmapp.ControllerInitFuncConstructor{
		InitContext: stockCloudNode.InitContext,
		Constructor: func(initContext ccmapp.ControllerInitContext, completed *cloudcontrollerconfig.CompletedConfig, c cloudprovider.Interface) ccmapp.InitFunc {
			stock := stockCloudNode.Constructor(initContext, completed, c)
			return func(ctx context.Context, cc genericcontrollermanager.ControllerContext) (controller.Interface, bool, error) {
				return startNodeInit(ctx, cc, initContext, completed, c, mo, stock)
			}
		},
	}
	// On by default: re-queues the Nodes waiting for init when the cloud
	// answers again. It patches Nodes as the cloud-node controller does, so
	// it has that controller's client identity.
	controllers[initretry.Name] = ccmapp.ControllerInitFuncConstructor{
		InitContext: ccmapp.ControllerInitContext{ClientName: "node-controller"},
		Constructor: func(initContext ccmapp.ControllerInitContext, completed *cloudcontrollerconfig.CompletedConfig, c cloudprovider.Interface) ccmapp.InitFunc {
			return func(ctx context.Context, cc genericcontrollermanager.ControllerContext) (controller.Interface, bool, error) {
				return startInitRetry(ctx, cc, initContext, completed, c)
			}
		},
	}
	ccmapp.ControllersDisabledByDefault.Insert(csrapprover.Name)
	controllers[csrapprover.Name] = ccmapp.ControllerInitFuncConstructor{
		InitContext: ccmapp.ControllerInitContext{ClientName: "csr-approver"},
		Constructor: func(initContext ccmapp.ControllerInitContext, completed *cloudcontrollerconfig.CompletedConfig, c cloudprovider.Interface) ccmapp.InitFunc {
			return func(ctx context.Context, cc genericcontrollermanager.ControllerContext) (controller.Interface, bool, error) {
				return startApprover(ctx, cc, initContext, completed, c, mo)
			}
		},
	}
	// The provider is built, and its config checked, before the library
	// reads the kubeconfig (see checkCloud); the library's cloud
	// initializer gets that one.
	var provider cloudprovider.Interface
	initCloud := func(c *cloudcontrollerconfig.CompletedConfig) cloudprovider.Interface { return initCloud(c, provider) }
	cmd := ccmapp.NewCloudControllerManagerCommand(ccmOptions, initCloud, controllers, names.CCMControllerAliases(), fss, nil)
	// Routes need pod CIDRs (--allocate-node-cidrs, --cluster-cidr): opt in
	// rather than fail at start-up. The library's flag defaults to true.
	if f := cmd.Flags().Lookup("configure-cloud-routes"); f != nil {
		if err := f.Value.Set("false"); err != nil {
			return nil, err
		}
		f.DefValue = "false"
	}
	if f := cmd.Flags().Lookup("kube-api-qps"); f != nil {
		f.Usage = "Client-side limit of requests per second to the apiserver. Unset: none where the apiserver runs API Priority and Fairness (it names a FlowSchema in its responses), this default where it does not. Negative: none."
	}
	cmd.PreRunE = func(*cobra.Command, []string) error { return mo.validate() }
	cmd.Use = "mooring-ccm"
	cmd.Short = "mooring's cloud-controller-manager"
	cmd.Long = longHelp
	// The library registers --help while its command is still named
	// cloud-controller-manager.
	if f := cmd.Flags().Lookup("help"); f != nil {
		f.Usage = "help for " + cmd.Name()
	}
	// Before the library builds its clients: their rate limit
	// (internal/clientlimit).
	run := cmd.RunE
	cmd.RunE = func(c *cobra.Command, args []string) error {
		cp, err := checkCloud(ccmOptions)
		if err != nil {
			fmt.Fprintln(c.ErrOrStderr(), err) // as the library prints its own
			return err
		}
		// The approver's flags against the backend before leading, as
		// mooring-csr-approver checks them (--csr-approver-tpm=required on
		// a backend that verifies no TPM evidence, say).
		if a, ok := cp.(cloud.Attester); ok {
			if err := mo.Approver.Validate(a); err != nil {
				fmt.Fprintln(c.ErrOrStderr(), err)
				return err
			}
		}
		provider = cp
		limitClients(c, ccmOptions)
		return run(c, args)
	}
	// The library registers component-base's --version; mooring's answers
	// it (mooring_build_info comes with the import).
	component.HandleVersionFlag(cmd)
	return cmd, nil
}

// longHelp is what mooring-ccm --help prints above its flags.
const longHelp = `mooring-ccm is mooring's cloud-controller-manager. It initializes Nodes from
the cloud (providerID, addresses, zone, region and instance-type labels),
deletes or taints Nodes whose instance is gone or stopped, manages the load
balancers of LoadBalancer Services and the routes of pod CIDRs, re-queues the
Nodes waiting for initialization when the cloud answers again after an outage,
and can approve kubelet CSRs against the cloud's record (csr-approver). Every
instance lookup goes through one shared, batched view of the cloud.

Documentation: docs/ccm.md in the mooring repository.`

// limitClients sets the client-side rate limit the library's clients get:
// none where the apiserver runs API Priority and Fairness, unless
// --kube-api-qps was given (internal/clientlimit). A kubeconfig that cannot
// be loaded is left for the library to report.
func limitClients(c *cobra.Command, o *options.CloudControllerManagerOptions) {
	cfg, err := clientcmd.BuildConfigFromFlags(o.Master, o.Generic.ClientConnection.Kubeconfig)
	if err != nil {
		return
	}
	cc := &o.Generic.ClientConnection
	d := clientlimit.Decide(c.Context(), cfg, c.Flags().Changed("kube-api-qps"), cc.QPS, int(cc.Burst))
	cc.QPS = d.QPS
}

// checkCloud builds the provider --cloud-provider names from --cloud-config
// before anything else the command checks or reads (the kubeconfig
// first), so an operator who names a wrong provider, or gives it a config it
// refuses, hears that first. A provider without a cluster id is refused
// (unless --allow-untagged-cloud), since it could not tell its resources
// apart. The library's cloud initializer then gets this same provider:
// it is built once, as before, only earlier.
func checkCloud(o *options.CloudControllerManagerOptions) (cloudprovider.Interface, error) {
	cfg := o.KubeCloudShared.CloudProvider
	known := strings.Join(cloud.Backends(), ", ")
	switch {
	case cfg.Name == "":
		return nil, fmt.Errorf("--cloud-provider is required (one of: %s)", known)
	case !cloud.Known(cfg.Name):
		return nil, fmt.Errorf("--cloud-provider=%s: not a cloud provider of mooring-ccm (one of: %s)", cfg.Name, known)
	}
	cp, err := cloud.NewProvider(cfg.Name, cfg.CloudConfigFile)
	if err != nil {
		return nil, fmt.Errorf("--cloud-provider=%s --cloud-config=%s: %w", cfg.Name, cfg.CloudConfigFile, err)
	}
	if !cp.HasClusterID() && !o.KubeCloudShared.AllowUntaggedCloud {
		return nil, fmt.Errorf("--cloud-provider=%s: no cluster id; set one in its config (--cloud-config=%s)", cfg.Name, cfg.CloudConfigFile)
	}
	return cp, nil
}

// initCloud gives the library the provider checkCloud built.
func initCloud(c *cloudcontrollerconfig.CompletedConfig, cp cloudprovider.Interface) cloudprovider.Interface {
	if cp == nil {
		klog.Fatalf("Cloud provider %q was not built before the controllers", c.ComponentConfig.KubeCloudShared.CloudProvider.Name)
	}
	// Every controller of the CCM watches Nodes: the shared informer stores
	// trimmed copies (internal/trim). The service controller trims its
	// Services, the approver its CSRs.
	if err := trim.Informer(c.SharedInformers.Core().V1().Nodes().Informer()); err != nil {
		klog.Fatalf("Could not trim the Node informer: %v", err)
	}
	// A provider that can keep its routes to the cluster's pod ranges
	// (Hetzner's) is told them, so that it touches no other route.
	if s, ok := cp.(interface{ SetClusterCIDRs(string) error }); ok && c.ComponentConfig.KubeCloudShared.ConfigureCloudRoutes {
		if err := s.SetClusterCIDRs(c.ComponentConfig.KubeCloudShared.ClusterCIDR); err != nil {
			klog.Fatalf("--cluster-cidr: %v", err)
		}
	}
	return cp
}

// runController runs a controller in its own goroutine until ctx ends, the
// way the library runs its own: recorded as running in the controller
// manager's running_managed_controllers{name} metric meanwhile.
func runController(ctx context.Context, cc genericcontrollermanager.ControllerContext, metricName string, run func(context.Context)) {
	go func() {
		if m := cc.ControllerManagerMetrics; m != nil {
			m.ControllerStarted(metricName)
			defer m.ControllerStopped(metricName)
		}
		run(ctx)
	}()
}

// named is a started controller as the controller manager sees it
// (controller.Interface).
type named string

func (n named) Name() string { return string(n) }

// startServiceLB starts mooring's batched service controller over a
// provider that can list its load balancers (cloud.LoadBalancerInventory),
// the library's stock one (stock) over a provider whose load balancers come
// from elsewhere (AWS's, from the upstream provider), and none over a
// provider without load balancers.
func startServiceLB(ctx context.Context, cc genericcontrollermanager.ControllerContext, initContext ccmapp.ControllerInitContext, completed *cloudcontrollerconfig.CompletedConfig, cp cloudprovider.Interface, mo *Options, stock ccmapp.InitFunc) (controller.Interface, bool, error) {
	lbs, ok := cp.LoadBalancer()
	if !ok {
		klog.InfoS("The cloud provider has no load balancers; service controller not started", "provider", cp.ProviderName())
		return nil, false, nil
	}
	if err := trim.Informer(completed.SharedInformers.Core().V1().Services().Informer()); err != nil {
		return nil, false, err
	}
	if mo.LoadBalancerController == "library" {
		klog.InfoS("Running the library's service controller (--load-balancer-controller=library)", "provider", cp.ProviderName())
		return stock(ctx, cc)
	}
	inv, ok := lbs.(cloud.LoadBalancerInventory)
	if !ok {
		klog.InfoS("The cloud provider's load balancers cannot be listed in one call; running the library's service controller", "provider", cp.ProviderName())
		return stock(ctx, cc)
	}
	drift := mo.LoadBalancerDriftPeriod
	if drift == 0 {
		drift = -1
	}
	c, err := servicelb.New(inv,
		completed.ClientBuilder.ClientOrDie(initContext.ClientName),
		completed.SharedInformers.Core().V1().Services(),
		completed.SharedInformers.Core().V1().Nodes(),
		servicelb.Options{
			ClusterName:    completed.ComponentConfig.KubeCloudShared.ClusterName,
			Class:          mo.loadBalancerClass(cp.ProviderName()),
			ServeUnclassed: mo.ServeDefaultLoadBalancer,
			DriftPeriod:    drift,
			Workers:        int(completed.ComponentConfig.ServiceController.ConcurrentServiceSyncs),
			NodeBatch:      nodeBatch(mo.LoadBalancerNodeBatch),
		})
	if err != nil {
		return nil, false, err
	}
	// "service", as the library's service controller this one replaces
	// reports itself.
	runController(ctx, cc, "service", c.Run)
	return named(servicelb.Name), true, nil
}

// nodeBatch maps the flag's 0 (at once) to the controller's negative.
func nodeBatch(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

func startApprover(ctx context.Context, cc genericcontrollermanager.ControllerContext, initContext ccmapp.ControllerInitContext, completed *cloudcontrollerconfig.CompletedConfig, cp cloudprovider.Interface, mo *Options) (controller.Interface, bool, error) {
	a, ok := cp.(cloud.Attester)
	if !ok {
		return nil, false, fmt.Errorf("%s: provider %s cannot attest instances", csrapprover.Name, cp.ProviderName())
	}
	restCfg, err := completed.ClientBuilder.Config(initContext.ClientName)
	if err != nil {
		return nil, false, err
	}
	c, err := csrapprover.NewFromCloud(completed.ClientBuilder.ClientOrDie(initContext.ClientName), restCfg, completed.SharedInformers, a, mo.Approver)
	if err != nil {
		return nil, false, err
	}
	runController(ctx, cc, csrapprover.Name, c.Run)
	return named(csrapprover.Name), true, nil
}

// startInitRetry starts the node-init-retry controller over the provider's
// shared instance view; a provider without one gets no such controller.
// startNodeInit starts mooring's cloud-node controller (ccm/nodeinit), or
// the library's with --node-init-controller=library or where the provider
// has no InstancesV2.
func startNodeInit(ctx context.Context, cc genericcontrollermanager.ControllerContext, initContext ccmapp.ControllerInitContext, completed *cloudcontrollerconfig.CompletedConfig, cp cloudprovider.Interface, mo *Options, stock ccmapp.InitFunc) (controller.Interface, bool, error) {
	instances, ok := cp.InstancesV2()
	if mo.NodeInitController == "library" || !ok || instances == nil {
		klog.InfoS("Running the library's cloud-node controller", "flag", mo.NodeInitController, "instancesV2", ok)
		return stock(ctx, cc)
	}
	nc := completed.ComponentConfig.NodeController
	c, err := nodeinit.New(completed.ClientBuilder.ClientOrDie(initContext.ClientName),
		completed.SharedInformers.Core().V1().Nodes(), instances, nodeinit.Options{
			Workers:            int(nc.ConcurrentNodeSyncs),
			StatusWorkers:      int(nc.ConcurrentNodeStatusUpdates),
			StatusUpdatePeriod: completed.ComponentConfig.NodeStatusUpdateFrequency.Duration,
		})
	if err != nil {
		return nil, false, err
	}
	primeView(ctx, cp)
	runController(ctx, cc, nodeinit.Name, c.Run)
	return named(nodeinit.Name), true, nil
}

// primeView lists the cloud into the provider's shared instance view while
// the Node cache syncs, so that the Nodes waiting when mooring-ccm starts
// (a restart under a backlog) find their instances listed rather than
// waiting for that List after the sync. A provider without a view is left
// alone; a failed List is the lookups' to retry.
func primeView(ctx context.Context, cp cloudprovider.Interface) {
	a, ok := cp.(cloud.Attester)
	if !ok || a.InstanceView() == nil {
		return
	}
	go func() {
		if err := a.InstanceView().Refresh(ctx, 0); err != nil {
			klog.InfoS("Could not list the cloud's instances at start; node init lists them when it needs them", "err", err)
		}
	}()
}

func startInitRetry(ctx context.Context, cc genericcontrollermanager.ControllerContext, initContext ccmapp.ControllerInitContext, completed *cloudcontrollerconfig.CompletedConfig, cp cloudprovider.Interface) (controller.Interface, bool, error) {
	a, ok := cp.(cloud.Attester)
	if !ok || a.InstanceView() == nil {
		klog.InfoS("The cloud provider has no shared instance view; controller not started", "controller", initretry.Name, "provider", cp.ProviderName())
		return nil, false, nil
	}
	c := initretry.New(completed.ClientBuilder.ClientOrDie(initContext.ClientName),
		completed.SharedInformers.Core().V1().Nodes(), a.InstanceView(), initretry.Options{})
	runController(ctx, cc, initretry.Name, c.Run)
	return c, true, nil
}
