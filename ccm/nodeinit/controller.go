// Package nodeinit is mooring-ccm's cloud-node controller, in place of
// k8s.io/cloud-provider's (controllers/node). It initializes the Nodes that
// carry the taint node.cloudprovider.kubernetes.io/uninitialized from the
// instance's metadata, exactly as the library's does (providerID, the
// instance-type, zone and region labels under their GA and beta keys, the
// cloud's additional labels, status.addresses, the taint's removal, the
// Synced Event; the library's two histograms under mooring's names), reconciles the beta and GA
// labels of initialized Nodes, and refreshes every initialized Node's
// addresses each --node-status-update-frequency.
//
// What differs is how it writes. The library updates the whole Node it read
// from its informer, with that copy's resourceVersion, and retries on
// conflict from the informer again: with kubelets updating their status at
// the same time, a faster client makes more stale writes (11,463 conflicts
// for 5,000 Nodes in docs/scale.md's run). This controller writes a Node's
// metadata and spec with one JSON patch that carries no resourceVersion
// (initPatch) and its addresses with one status merge patch, so a kubelet's
// writes cannot make it conflict; when what it tested has changed, it
// rebuilds the patch from a fresh read of the apiserver, not from the cache.
package nodeinit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	cloudprovider "k8s.io/cloud-provider"
	cloudproviderapi "k8s.io/cloud-provider/api"
	"k8s.io/klog/v2"

	"github.com/mooring-dev/mooring/cloud/view"
)

// Name is the controller's name in --controllers, the library's
// cloud-node controller's.
const Name = "cloud-node"

// EventComponent is the source of its Events, the library's.
const EventComponent = "cloud-node-controller"

// maxRebuilds bounds the patches rebuilt from fresh reads in one sync; after
// them the Node is retried with the queue's backoff.
const maxRebuilds = 5

// Options configure the controller, from the library's flags.
type Options struct {
	// Workers initialize Nodes (--concurrent-node-syncs).
	Workers int
	// StatusWorkers refresh addresses (--concurrent-node-status-updates).
	StatusWorkers int
	// StatusUpdatePeriod is --node-status-update-frequency.
	StatusUpdatePeriod time.Duration
}

// Controller is the cloud-node controller.
type Controller struct {
	client    kubernetes.Interface
	instances cloudprovider.InstancesV2
	nodes     corelisters.NodeLister
	synced    cache.InformerSynced
	queue     workqueue.TypedRateLimitingInterface[string]
	recorder  record.EventRecorder
	opts      Options
	// untainting holds the Nodes this controller removed the taint from
	// whose cache still shows it: a Node queued again meanwhile (its
	// kubelet's next status update) would be judged from that stale copy
	// and cost a refused patch and a read. Entries go when the cache shows
	// the Node without the taint, and are believed for ownWriteGrace only.
	mu         sync.Mutex
	untainting map[string]untainted
}

// untainted is a Node whose taint this controller removed, and when.
type untainted struct {
	uid types.UID
	at  time.Time
}

// ownWriteGrace bounds how long a Node whose taint this controller removed
// is not judged from a cache that still shows the taint: the watch shows
// the write within it unless it broke, and then the relist does.
const ownWriteGrace = 30 * time.Second

// New builds the controller over the shared Node informer.
func New(client kubernetes.Interface, nodes coreinformers.NodeInformer, instances cloudprovider.InstancesV2, opts Options) (*Controller, error) {
	if instances == nil {
		return nil, errors.New("the cloud provider has no InstancesV2")
	}
	if opts.Workers < 1 {
		opts.Workers = 1
	}
	if opts.StatusWorkers < 1 {
		opts.StatusWorkers = 1
	}
	registerMetrics()
	c := &Controller{
		client:    client,
		instances: instances,
		nodes:     nodes.Lister(),
		synced:    nodes.Informer().HasSynced,
		queue:     newQueue(),
		recorder:  record.NewFakeRecorder(0),
		opts:      opts,

		untainting: map[string]untainted{},
	}
	_, err := nodes.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueue,
		UpdateFunc: func(_, obj any) { c.enqueue(obj) },
	})
	return c, err
}

func newQueue() workqueue.TypedRateLimitingInterface[string] {
	return workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "Nodes"})
}

// enqueue queues a Node that waits for init or whose labels need
// reconciling; the library queues every Node on every update (each
// kubelet's status update), only to find nothing to do for most.
func (c *Controller) enqueue(obj any) {
	node, ok := obj.(*v1.Node)
	if !ok {
		return
	}
	if !tainted(node) {
		c.sawUntainted(node.Name)
		if p, _ := labelsPatch(node); p == nil {
			return
		}
	}
	c.queue.Add(node.Name)
}

func tainted(node *v1.Node) bool {
	for _, t := range node.Spec.Taints {
		if t.Key == cloudproviderapi.TaintExternalCloudProvider {
			return true
		}
	}
	return false
}

// Run runs the workers and the address refresh until ctx ends.
func (c *Controller) Run(ctx context.Context) {
	defer utilruntime.HandleCrash()
	defer c.queue.ShutDown()
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartStructuredLogging(3)
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: c.client.CoreV1().Events("")})
	defer broadcaster.Shutdown()
	c.recorder = broadcaster.NewRecorder(scheme.Scheme, v1.EventSource{Component: EventComponent})

	if !cache.WaitForCacheSync(ctx.Done(), c.synced) {
		klog.ErrorS(nil, "Node cache did not sync; cloud-node controller not started")
		return
	}
	klog.InfoS("Starting mooring's cloud-node controller", "workers", c.opts.Workers, "statusWorkers", c.opts.StatusWorkers, "statusUpdatePeriod", c.opts.StatusUpdatePeriod)
	if c.opts.StatusUpdatePeriod > 0 {
		go wait.UntilWithContext(ctx, c.refreshAddresses, c.opts.StatusUpdatePeriod)
	}
	for range c.opts.Workers {
		go wait.UntilWithContext(ctx, func(ctx context.Context) {
			for c.next(ctx) {
			}
		}, time.Second)
	}
	<-ctx.Done()
}

func (c *Controller) next(ctx context.Context) bool {
	name, shutdown := c.queue.Get()
	if shutdown {
		return false
	}
	defer c.queue.Done(name)
	if err := c.sync(ctx, name); err != nil {
		klog.InfoS("Could not initialize node; retrying with backoff", "node", name, "err", err)
		c.queue.AddRateLimited(name)
		return true
	}
	c.queue.Forget(name)
	return true
}

// ambiguous puts a Warning Event on the Node when err says that more than
// one instance lists under its providerID (view.ErrAmbiguous): neither is
// initialized or refreshed until one remains. The recorder folds repeats.
func (c *Controller) ambiguous(node *v1.Node, err error) {
	if errors.Is(err, view.ErrAmbiguous) {
		c.recorder.Event(node, v1.EventTypeWarning, "InstanceAmbiguous", err.Error())
	}
}

// sync initializes one Node, or reconciles its labels.
func (c *Controller) sync(ctx context.Context, name string) error {
	node, err := c.nodes.Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if !tainted(node) {
		c.sawUntainted(name)
		return c.reconcileLabels(ctx, node)
	}
	if c.untaintedAlready(node) {
		// This controller removed the taint; the cache has not caught up.
		// The update that shows it queues the Node again if it needs more.
		skippedStale.Inc()
		return nil
	}
	klog.InfoS("Initializing node with cloud provider", "node", klog.KObj(node))
	md, err := c.instances.InstanceMetadata(ctx, node)
	if err != nil {
		c.ambiguous(node, err)
		return fmt.Errorf("failed to get instance metadata for node %s: %w", name, err)
	}
	if md == nil {
		klog.InfoS("Skipping node: the cloud provider gave no metadata", "node", klog.KObj(node))
		return nil
	}
	if md.ProviderID == "" {
		if node.Spec.ProviderID == "" {
			return fmt.Errorf("cloud provider does not set node provider ID for node %s", name)
		}
		md.ProviderID = node.Spec.ProviderID
	}
	// A --node-ip that the cloud's addresses do not hold keeps the taint.
	if _, err := withProvidedNodeIP(node, md.NodeAddresses); err != nil {
		return fmt.Errorf("provided node ip for node %q is not valid: %w", name, err)
	}
	initialized, err := c.writeInit(ctx, node, md)
	if err != nil || initialized == nil {
		return err
	}
	c.removedTaint(initialized)
	taintRemovalDelay.Observe(time.Since(initialized.CreationTimestamp.Time).Seconds())
	// The addresses follow the taint, as in the library. Sent together the
	// two writes halved a Node's time to initialized, but both update the
	// same object and the second retried inside the apiserver: on 2 cores a
	// 5,000-Node wave cost kube-apiserver more CPU and took longer
	// (docs/ccm.md).
	if err := c.writeAddresses(ctx, initialized, md); err != nil {
		// The taint is gone: the address refresh writes them later, as the
		// library's controller leaves it after a failed status patch.
		klog.ErrorS(err, "Could not write the node's addresses", "node", klog.KObj(node))
	}
	klog.InfoS("Successfully initialized node with cloud provider", "node", klog.KObj(node))
	c.recorder.Event(node, v1.EventTypeNormal, "Synced", "Node synced successfully")
	initialSyncDelay.Observe(time.Since(node.CreationTimestamp.Time).Seconds())
	return nil
}

// removedTaint notes that this controller's write took node's taint away.
func (c *Controller) removedTaint(node *v1.Node) {
	if tainted(node) {
		return // another writer's copy of the taint: not ours to skip
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.untainting[node.Name] = untainted{uid: node.UID, at: time.Now()}
}

// sawUntainted: the cache shows name without the taint.
func (c *Controller) sawUntainted(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.untainting, name)
}

// untaintedAlready reports whether the cached, tainted node is a stale copy
// of a Node (the same object: its UID) whose taint this controller removed
// less than ownWriteGrace ago.
func (c *Controller) untaintedAlready(node *v1.Node) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	u, ok := c.untainting[node.Name]
	if !ok {
		return false
	}
	if u.uid != node.UID || time.Since(u.at) > ownWriteGrace {
		delete(c.untainting, node.Name)
		return false
	}
	return true
}

// writeInit writes initPatch, rebuilding it from a fresh read when the
// apiserver refuses what it tested. It returns the Node as written, or nil
// when the Node is gone.
func (c *Controller) writeInit(ctx context.Context, node *v1.Node, md *cloudprovider.InstanceMetadata) (*v1.Node, error) {
	for rebuilds := 0; ; rebuilds++ {
		patch, err := initPatch(node, md)
		if err != nil {
			return nil, err
		}
		if patch == nil {
			return node, nil
		}
		written, err := c.client.CoreV1().Nodes().Patch(ctx, node.Name, types.JSONPatchType, patch, metav1.PatchOptions{})
		if err == nil {
			return written, nil
		}
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		if !stale(err) || rebuilds >= maxRebuilds {
			return nil, fmt.Errorf("initialize node %s: %w", node.Name, err)
		}
		rebuiltPatches.Inc()
		klog.V(2).InfoS("Node changed under the init patch; rebuilding it from a fresh read", "node", klog.KObj(node), "err", err)
		if node, err = c.client.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{}); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, nil
			}
			return nil, err
		}
	}
}

// stale: the apiserver refused the patch because what it tested changed,
// or a resourceVersion it carried was old. A JSON patch that does not apply
// (a failed test) is answered 422 with the generic message and no details
// (k8s.io/apiserver's jsonPatcher: NewGenericServerResponse, which drops the
// patch library's message); a 422 of validation (a label value the cloud gave
// that the apiserver refuses) names the Node and its causes, and is not
// stale: a fresh read would be refused again.
func stale(err error) bool {
	var status apierrors.APIStatus
	if errors.As(err, &status) && status.Status().Code == http.StatusUnprocessableEntity {
		return patchNotApplied(status.Status())
	}
	return apierrors.IsConflict(err)
}

// patchNotApplied: a 422 with no kind and no causes, as the apiserver
// answers a JSON patch it could not apply.
func patchNotApplied(s metav1.Status) bool {
	return s.Details == nil || (s.Details.Kind == "" && s.Details.Name == "" && len(s.Details.Causes) == 0)
}

// writeAddresses writes the Node's addresses when they differ from the
// cloud's.
func (c *Controller) writeAddresses(ctx context.Context, node *v1.Node, md *cloudprovider.InstanceMetadata) error {
	patch, err := statusPatch(node, md)
	if err != nil || patch == nil {
		return err
	}
	_, err = c.client.CoreV1().Nodes().Patch(ctx, node.Name, types.MergePatchType, patch, metav1.PatchOptions{}, "status")
	return err
}

// reconcileLabels makes the GA labels follow the beta ones.
func (c *Controller) reconcileLabels(ctx context.Context, node *v1.Node) error {
	patch, err := labelsPatch(node)
	if err != nil || patch == nil {
		return err
	}
	_, err = c.client.CoreV1().Nodes().Patch(ctx, node.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// refreshAddresses updates the addresses of every initialized Node from the
// cloud, StatusWorkers at a time.
func (c *Controller) refreshAddresses(ctx context.Context) {
	start := time.Now()
	nodes, err := c.nodes.List(labels.Everything())
	if err != nil {
		klog.ErrorS(err, "Could not list nodes to refresh their addresses")
		return
	}
	workqueue.ParallelizeUntil(ctx, c.opts.StatusWorkers, len(nodes), func(i int) {
		node := nodes[i]
		if tainted(node) {
			return
		}
		md, err := c.instances.InstanceMetadata(ctx, node)
		if err != nil {
			c.ambiguous(node, err)
			klog.ErrorS(err, "Could not get instance metadata for node addresses", "node", klog.KObj(node))
			return
		}
		if md == nil {
			return
		}
		if err := c.writeAddresses(ctx, node, md); err != nil {
			klog.ErrorS(err, "Could not write the node's addresses", "node", klog.KObj(node))
		}
	})
	klog.V(2).InfoS("Refreshed node addresses", "nodes", len(nodes), "took", time.Since(start))
}
