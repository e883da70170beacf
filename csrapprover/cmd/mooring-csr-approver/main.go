// Command mooring-csr-approver runs mooring's CSR approver on its own, for
// clusters whose cloud-controller-manager is someone else's. The same
// controller runs inside mooring-ccm with --controllers=*,csr-approver.
// docs/csrapprover.md documents its flags.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/component-base/cli"
	"k8s.io/component-base/logs"
	logsapi "k8s.io/component-base/logs/api/v1"
	_ "k8s.io/component-base/logs/json/register" // --logging-format=json
	"k8s.io/klog/v2"

	"github.com/mooring-dev/mooring/cloud"
	"github.com/mooring-dev/mooring/csrapprover"
	"github.com/mooring-dev/mooring/internal/clientlimit"
	"github.com/mooring-dev/mooring/internal/version/component"

	// Cloud providers, registered by name.
	_ "github.com/mooring-dev/mooring/cloud/all"
)

type options struct {
	kubeconfig     string
	cloudProvider  string
	cloudConfig    string
	serving        *serving
	leaderElect    bool
	leaseNamespace string
	leaseName      string
	leaseDuration  time.Duration
	renewDeadline  time.Duration
	retryPeriod    time.Duration
	qps            float32
	qpsSet         bool // --kube-api-qps was given
	contentType    string
	burst          int
	approver       csrapprover.Flags
}

func main() {
	o := &options{serving: newServing()}
	logOpts := logs.NewOptions()
	cmd := &cobra.Command{
		Use:          "mooring-csr-approver",
		Short:        "Approves kubelet client CSRs carrying cloud-signed evidence and kubelet serving CSRs the cloud vouches for",
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := logsapi.ValidateAndApply(logOpts, nil); err != nil {
				return err
			}
			if err := o.serving.validate(); err != nil {
				return err
			}
			o.qpsSet = cmd.Flags().Changed("kube-api-qps")
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			return run(ctx, o)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig of the approver's identity; empty: in-cluster")
	fs.StringVar(&o.cloudProvider, "cloud-provider", "", "cloud whose evidence and instances are checked (required: a backend name, as mooring-ccm's --cloud-provider)")
	fs.StringVar(&o.cloudConfig, "cloud-config", "", "the cloud provider's config file (as mooring-ccm's)")
	o.serving.addFlags(fs)
	fs.BoolVar(&o.leaderElect, "leader-elect", true, "run only while holding the lease, for several replicas")
	fs.StringVar(&o.leaseNamespace, "leader-elect-resource-namespace", "kube-system", "namespace of the lease")
	fs.StringVar(&o.leaseName, "leader-elect-resource-name", "mooring-csr-approver", "name of the lease")
	fs.DurationVar(&o.leaseDuration, "leader-elect-lease-duration", 15*time.Second, "lease duration")
	fs.DurationVar(&o.renewDeadline, "leader-elect-renew-deadline", 10*time.Second, "how long the leader retries renewing before giving up")
	fs.DurationVar(&o.retryPeriod, "leader-elect-retry-period", 2*time.Second, "wait between lease attempts")
	fs.Float32Var(&o.qps, "kube-api-qps", 500, "client-side limit of requests per second to the apiserver; unset: none where the apiserver runs API Priority and Fairness, this default where it does not; negative: none (docs/scale.md)")
	fs.IntVar(&o.burst, "kube-api-burst", 1000, "burst to the apiserver")
	fs.StringVar(&o.contentType, "kube-api-content-type", runtime.ContentTypeProtobuf, "content type of requests to the apiserver, as kube-controller-manager's flag (protobuf costs the apiserver less CPU than JSON)")
	o.approver.AddFlags(fs, "")
	logsapi.AddFlags(logOpts, fs)
	component.AddFlags(fs)
	component.HandleVersionFlag(cmd)
	cmd.AddCommand(newTicketCommand(newKubeClient, time.Now))
	cmd.CompletionOptions.DisableDefaultCmd = true
	os.Exit(cli.Run(cmd))
}

func run(ctx context.Context, o *options) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", o.kubeconfig)
	if err != nil {
		return err
	}
	// No client-side limit where the apiserver runs API Priority and
	// Fairness, unless --kube-api-qps was given (internal/clientlimit).
	clientlimit.Decide(ctx, cfg, o.qpsSet, o.qps, o.burst).Apply(cfg)
	cfg.ContentType = o.contentType
	if o.contentType == runtime.ContentTypeProtobuf {
		// Types without protobuf (none the approver reads) fall back on JSON.
		cfg.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	}
	cfg.UserAgent = "mooring-csr-approver"
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	if o.cloudProvider == "" {
		return fmt.Errorf("--cloud-provider is required (known: %v)", cloud.Backends())
	}
	cp, err := cloud.NewProvider(o.cloudProvider, o.cloudConfig)
	if err != nil {
		return err
	}
	a, ok := cp.(cloud.Attester)
	if !ok {
		return fmt.Errorf("cloud provider %q cannot attest instances", o.cloudProvider)
	}
	// Refused here rather than once leading: every replica would fail.
	if err := o.approver.Validate(a); err != nil {
		return err
	}
	h := &health{leaderElect: o.leaderElect}
	if o.leaderElect {
		h.watchdog = leaderelection.NewLeaderHealthzAdaptor(20 * time.Second)
	}
	if err := o.serving.start(ctx, h); err != nil {
		return err
	}
	start := func(ctx context.Context) {
		h.leading.Store(true)
		factory := informers.NewSharedInformerFactory(client, 0)
		c, err := csrapprover.NewFromCloud(client, cfg, factory, a, o.approver)
		if err != nil {
			klog.ErrorS(err, "Could not build the approver")
			os.Exit(1)
		}
		factory.Start(ctx.Done())
		go func() {
			select {
			case <-c.Ready():
				h.synced.Store(true)
			case <-ctx.Done():
			}
		}()
		c.Run(ctx)
		factory.Shutdown()
	}
	if !o.leaderElect {
		start(ctx)
		return nil
	}
	id, err := os.Hostname()
	if err != nil {
		return err
	}
	id += "_" + uuid.NewString()
	lock, err := resourcelock.New(resourcelock.LeasesResourceLock, o.leaseNamespace, o.leaseName,
		client.CoreV1(), client.CoordinationV1(), resourcelock.ResourceLockConfig{Identity: id})
	if err != nil {
		return err
	}
	h.electing.Store(true)
	leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
		Lock: lock, LeaseDuration: o.leaseDuration, RenewDeadline: o.renewDeadline, RetryPeriod: o.retryPeriod,
		ReleaseOnCancel: true, Name: o.leaseName, WatchDog: h.watchdog,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: start,
			OnStoppedLeading: func() {
				if ctx.Err() == nil {
					klog.InfoS("Lost the lease; exiting so a restart competes again")
					os.Exit(1)
				}
			},
		},
	})
	return nil
}
