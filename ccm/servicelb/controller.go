// Package servicelb is mooring's Service LoadBalancer controller. It does
// what k8s.io/cloud-provider's service controller does (finalizer, ensure,
// update on node changes, delete, status) and what that one does not: it
// serves its own spec.loadBalancerClass, repairs load balancers changed or
// deleted out of band, and collects load balancers whose Service is gone,
// all from one batched listing of the cloud per period.
package servicelb

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
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
	servicehelpers "k8s.io/cloud-provider/service/helpers"
	"k8s.io/klog/v2"

	"github.com/mooring-dev/mooring/cloud"
)

// Name is the controller's name, the same as the stock controller it
// replaces, so --controllers=service selects it.
const Name = "service-lb-controller"

// Finalizer holds a Service until its load balancer is deleted; the same
// finalizer as the stock controller's, so either can clean up after the other.
const Finalizer = "service.kubernetes.io/load-balancer-cleanup"

// Labels and taints that keep a node out of load balancers.
const (
	LabelExcludeFromLB = "node.kubernetes.io/exclude-from-external-load-balancers"
	taintToBeDeleted   = "ToBeDeletedByClusterAutoscaler"
	taintShutdown      = "node.cloudprovider.kubernetes.io/shutdown"
	taintUninitialized = "node.cloudprovider.kubernetes.io/uninitialized"
)

// Options configure the controller.
type Options struct {
	// ClusterName is passed to the cloud (--cluster-name).
	ClusterName string
	// Class is the spec.loadBalancerClass served.
	Class string
	// ServeUnclassed also serves Services without a class: the cluster's
	// default load balancer.
	ServeUnclassed bool
	// DriftPeriod is how often the cloud's load balancers are listed and
	// compared with the Services. Default 1m; negative disables.
	DriftPeriod time.Duration
	// Workers sync Services in parallel. Default 2.
	Workers int
	// NodeBatch is how long changes of the eligible nodes are gathered
	// before every load balancer is updated: a burst of node joins costs one
	// update per load balancer, not one per node. Default 5s; negative
	// updates at once.
	NodeBatch time.Duration
}

// DefaultNodeBatch is Options.NodeBatch's default.
const DefaultNodeBatch = 5 * time.Second

// Controller reconciles LoadBalancer Services with the cloud.
type Controller struct {
	cloud    cloud.LoadBalancerInventory
	client   kubernetes.Interface
	services corelisters.ServiceLister
	nodes    corelisters.NodeLister
	synced   []cache.InformerSynced
	queue    workqueue.TypedRateLimitingInterface[string]
	recorder record.EventRecorder
	events   record.EventBroadcaster
	opts     Options
}

// New builds the controller; Run starts it.
func New(lbs cloud.LoadBalancerInventory, client kubernetes.Interface, services coreinformers.ServiceInformer, nodes coreinformers.NodeInformer, opts Options) (*Controller, error) {
	if opts.Class == "" && !opts.ServeUnclassed {
		return nil, fmt.Errorf("%s: serves nothing: set a class or serve Services without one", Name)
	}
	if opts.DriftPeriod == 0 {
		opts.DriftPeriod = time.Minute
	}
	if opts.Workers <= 0 {
		opts.Workers = 2
	}
	if opts.NodeBatch == 0 {
		opts.NodeBatch = DefaultNodeBatch
	}
	registerMetrics()
	broadcaster := record.NewBroadcaster()
	c := &Controller{
		cloud:    lbs,
		client:   client,
		services: services.Lister(),
		nodes:    nodes.Lister(),
		synced:   []cache.InformerSynced{services.Informer().HasSynced, nodes.Informer().HasSynced},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "service-lb"}),
		events:   broadcaster,
		recorder: broadcaster.NewRecorder(scheme.Scheme, v1.EventSource{Component: Name}),
		opts:     opts,
	}
	_, err := services.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueueService,
		UpdateFunc: func(old, cur any) { c.serviceUpdated(old, cur) },
		DeleteFunc: c.enqueueService,
	})
	if err != nil {
		return nil, err
	}
	_, err = nodes.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if n, ok := obj.(*v1.Node); ok && eligible(n) {
				c.nodesChanged()
			}
		},
		UpdateFunc: func(old, cur any) {
			o, ok1 := old.(*v1.Node)
			n, ok2 := cur.(*v1.Node)
			if ok1 && ok2 && backendChanged(o, n) {
				c.nodesChanged()
			}
		},
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if n, ok := obj.(*v1.Node); !ok || eligible(n) {
				c.nodesChanged()
			}
		},
	})
	return c, err
}

// Run syncs until ctx ends.
func (c *Controller) Run(ctx context.Context) {
	defer utilruntime.HandleCrash()
	defer c.queue.ShutDown()
	c.events.StartStructuredLogging(3)
	c.events.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: c.client.CoreV1().Events("")})
	defer c.events.Shutdown()

	logger := klog.FromContext(ctx)
	logger.Info("Starting controller", "controller", Name, "class", c.opts.Class, "serveUnclassed", c.opts.ServeUnclassed, "workers", c.opts.Workers)
	if !cache.WaitForNamedCacheSync(Name, ctx.Done(), c.synced...) {
		return
	}
	var wg sync.WaitGroup
	for range c.opts.Workers {
		wg.Go(func() { wait.UntilWithContext(ctx, c.worker, time.Second) })
	}
	if c.opts.DriftPeriod > 0 {
		wg.Go(func() { wait.UntilWithContext(ctx, c.sweep, c.opts.DriftPeriod) })
	}
	<-ctx.Done()
	c.queue.ShutDown()
	wg.Wait()
}

// Serves reports whether this controller owns the Service's load balancer.
func (c *Controller) Serves(svc *v1.Service) bool {
	if svc.Spec.Type != v1.ServiceTypeLoadBalancer {
		return false
	}
	if svc.Spec.LoadBalancerClass == nil {
		return c.opts.ServeUnclassed
	}
	return c.opts.Class != "" && *svc.Spec.LoadBalancerClass == c.opts.Class
}

func (c *Controller) enqueueService(obj any) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	c.queue.Add(key)
}

func (c *Controller) serviceUpdated(old, cur any) {
	o, ok1 := old.(*v1.Service)
	n, ok2 := cur.(*v1.Service)
	if ok1 && ok2 && !needsSync(o, n) {
		return
	}
	c.enqueueService(cur)
}

// needsSync reports whether a Service update asks for a sync: a change of
// what the load balancer is made from, a deletion, or our finalizer removed
// by someone else. Resyncs and this controller's own finalizer and status
// writes do not (the drift sweep covers the rest).
func needsSync(old, cur *v1.Service) bool {
	if old.ResourceVersion != "" && old.ResourceVersion == cur.ResourceVersion {
		return false
	}
	return !equality.Semantic.DeepEqual(old.Spec, cur.Spec) ||
		!maps.Equal(old.Annotations, cur.Annotations) ||
		(old.DeletionTimestamp == nil) != (cur.DeletionTimestamp == nil) ||
		(slices.Contains(old.Finalizers, Finalizer) && !slices.Contains(cur.Finalizers, Finalizer))
}

// nodesChanged schedules every served Service for an update after the
// node batch delay; the queue merges the keys already waiting, so a burst
// of node changes ends in one update per load balancer. Each event costs a
// look at one node here, not at all of them.
func (c *Controller) nodesChanged() {
	svcs, err := c.services.List(labels.Everything())
	if err != nil {
		// The load balancers must still learn of the change: look again.
		klog.ErrorS(err, "Listing Services after a node change failed; trying again", "after", listRetry)
		time.AfterFunc(listRetry, c.nodesChanged)
		return
	}
	for _, s := range svcs {
		if !c.Serves(s) {
			continue
		}
		key, err := cache.MetaNamespaceKeyFunc(s)
		if err != nil {
			klog.ErrorS(err, "A Service without a usable key; its load balancer is not updated", "service", klog.KObj(s))
			continue
		}
		if c.opts.NodeBatch > 0 {
			c.queue.AddAfter(key, c.opts.NodeBatch)
		} else {
			c.queue.Add(key)
		}
	}
}

// listRetry is how long nodesChanged waits before listing the Services
// again when the lister failed.
const listRetry = time.Second

// backendChanged reports whether an update of a node changes what load
// balancers are given: its eligibility, or the addresses of an eligible node.
func backendChanged(old, cur *v1.Node) bool {
	was, is := eligible(old), eligible(cur)
	if was != is {
		return true
	}
	return is && !slices.Equal(old.Status.Addresses, cur.Status.Addresses)
}

// eligibleNodes are the load balancers' backends: initialized, Ready nodes
// not excluded by label and not being removed.
func (c *Controller) eligibleNodes() ([]*v1.Node, error) {
	all, err := c.nodes.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	var out []*v1.Node
	for _, n := range all {
		if eligible(n) {
			out = append(out, n)
		}
	}
	slices.SortFunc(out, func(a, b *v1.Node) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

func eligible(n *v1.Node) bool {
	if n.DeletionTimestamp != nil || n.Spec.ProviderID == "" {
		return false
	}
	if _, excluded := n.Labels[LabelExcludeFromLB]; excluded {
		return false
	}
	for _, t := range n.Spec.Taints {
		if t.Key == taintToBeDeleted || t.Key == taintShutdown || t.Key == taintUninitialized {
			return false
		}
	}
	for _, cond := range n.Status.Conditions {
		if cond.Type == v1.NodeReady {
			return cond.Status == v1.ConditionTrue
		}
	}
	return false
}

func (c *Controller) worker(ctx context.Context) {
	for c.next(ctx) {
	}
}

func (c *Controller) next(ctx context.Context) bool {
	key, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(key)
	start := time.Now()
	err := c.sync(ctx, key)
	syncDuration.Observe(time.Since(start).Seconds())
	if err == nil {
		syncs.WithLabelValues("ok").Inc()
		c.queue.Forget(key)
		return true
	}
	var pending *cloud.PendingError
	if errors.As(err, &pending) {
		// Not a failure: the cloud is building it; no backoff.
		syncs.WithLabelValues("pending").Inc()
		klog.FromContext(ctx).V(2).Info("The load balancer is not ready yet", "service", key, "reason", err.Error())
		c.queue.Forget(key)
		c.queue.AddAfter(key, pending.After)
		return true
	}
	syncs.WithLabelValues("error").Inc()
	klog.FromContext(ctx).Error(err, "Syncing the Service's load balancer failed; retrying", "service", key, "retries", c.queue.NumRequeues(key))
	c.queue.AddRateLimited(key)
	return true
}

// sync makes the cloud match one Service.
func (c *Controller) sync(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		// Retrying cannot make a malformed key usable.
		klog.FromContext(ctx).Error(err, "Dropping a malformed queue key", "key", key)
		return nil
	}
	svc, err := c.services.Services(ns).Get(name)
	if apierrors.IsNotFound(err) {
		// Gone without our finalizer (or after it was removed): the sweep
		// collects any load balancer left behind.
		return nil
	}
	if err != nil {
		return err
	}
	if c.Serves(svc) && svc.DeletionTimestamp == nil {
		return c.ensure(ctx, svc)
	}
	if slices.Contains(svc.Finalizers, Finalizer) {
		return c.remove(ctx, svc)
	}
	return nil
}

func (c *Controller) ensure(ctx context.Context, svc *v1.Service) error {
	if !slices.Contains(svc.Finalizers, Finalizer) {
		updated := svc.DeepCopy()
		updated.Finalizers = append(updated.Finalizers, Finalizer)
		var err error
		if svc, err = servicehelpers.PatchService(c.client.CoreV1(), svc, updated); err != nil {
			return fmt.Errorf("add finalizer: %w", err)
		}
	}
	nodes, err := c.eligibleNodes()
	if err != nil {
		return err
	}
	c.recorder.Eventf(svc, v1.EventTypeNormal, "EnsuringLoadBalancer", "Ensuring load balancer with %d nodes", len(nodes))
	status, err := c.cloud.EnsureLoadBalancer(ctx, c.opts.ClusterName, svc, nodes)
	if cloud.IsPending(err) {
		c.recorder.Eventf(svc, v1.EventTypeNormal, "LoadBalancerPending", "%v", err)
		return err
	}
	if err != nil {
		c.recorder.Eventf(svc, v1.EventTypeWarning, "SyncLoadBalancerFailed", "Error syncing load balancer: %v", err)
		return err
	}
	if !servicehelpers.LoadBalancerStatusEqual(&svc.Status.LoadBalancer, status) {
		updated := svc.DeepCopy()
		updated.Status.LoadBalancer = *status
		if _, err := servicehelpers.PatchService(c.client.CoreV1(), svc, updated); err != nil {
			return fmt.Errorf("update status: %w", err)
		}
	}
	c.recorder.Eventf(svc, v1.EventTypeNormal, "EnsuredLoadBalancer", "Ensured load balancer %s", ingressIPs(status))
	return nil
}

func (c *Controller) remove(ctx context.Context, svc *v1.Service) error {
	c.recorder.Event(svc, v1.EventTypeNormal, "DeletingLoadBalancer", "Deleting load balancer")
	if err := c.cloud.EnsureLoadBalancerDeleted(ctx, c.opts.ClusterName, svc); err != nil {
		c.recorder.Eventf(svc, v1.EventTypeWarning, "DeleteLoadBalancerFailed", "Error deleting load balancer: %v", err)
		return err
	}
	updated := svc.DeepCopy()
	updated.Status.LoadBalancer = v1.LoadBalancerStatus{}
	updated.Finalizers = slices.DeleteFunc(updated.Finalizers, func(f string) bool { return f == Finalizer })
	if _, err := servicehelpers.PatchService(c.client.CoreV1(), svc, updated); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("remove finalizer: %w", err)
	}
	c.recorder.Event(svc, v1.EventTypeNormal, "DeletedLoadBalancer", "Deleted load balancer")
	return nil
}

// sweep lists the cloud's load balancers once, requeues Services whose load
// balancer is missing or differs from what they call for, and deletes load
// balancers whose Service is gone. A failed listing changes nothing.
func (c *Controller) sweep(ctx context.Context) {
	logger := klog.FromContext(ctx)
	owned, err := c.cloud.ListOwnedLoadBalancers(ctx)
	if err != nil {
		sweeps.WithLabelValues("error").Inc()
		logger.Error(err, "Listing the cloud's load balancers failed; no drift repair or collection this round")
		return
	}
	sweeps.WithLabelValues("ok").Inc()
	byUID := make(map[types.UID]cloud.OwnedLoadBalancer, len(owned))
	for _, o := range owned {
		byUID[types.UID(o.UID)] = o
	}
	nodes, err := c.eligibleNodes()
	if err != nil {
		logger.Error(err, "Listing Nodes failed; no drift repair or collection this round")
		return
	}
	svcs, err := c.services.List(labels.Everything())
	if err != nil {
		logger.Error(err, "Listing Services failed; no drift repair or collection this round")
		return
	}
	wanted := map[types.UID]bool{}
	for _, svc := range svcs {
		if !c.Serves(svc) || svc.DeletionTimestamp != nil {
			if slices.Contains(svc.Finalizers, Finalizer) {
				wanted[svc.UID] = true // sync deletes it, with Events
				c.enqueueService(svc)
			}
			continue
		}
		wanted[svc.UID] = true
		want, err := c.cloud.DesiredFingerprint(ctx, svc, nodes)
		if err != nil {
			continue // sync reports it
		}
		have, ok := byUID[svc.UID]
		switch {
		case !ok:
			drift.WithLabelValues("missing").Inc()
			c.recorder.Event(svc, v1.EventTypeWarning, "LoadBalancerMissing", "The cloud has no load balancer for this Service; recreating it")
		case have.Fingerprint != want:
			drift.WithLabelValues("changed").Inc()
			c.recorder.Event(svc, v1.EventTypeWarning, "LoadBalancerDrifted", "The cloud's load balancer differs from the Service; repairing it")
		default:
			continue
		}
		c.enqueueService(svc)
	}
	for _, o := range owned {
		if wanted[types.UID(o.UID)] {
			continue
		}
		orphan := &v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: o.Namespace, Name: o.Service, UID: types.UID(o.UID)}}
		if err := c.cloud.EnsureLoadBalancerDeleted(ctx, c.opts.ClusterName, orphan); err != nil {
			logger.Error(err, "Deleting a load balancer whose Service is gone failed", "loadBalancer", o.Name, "service", klog.KRef(o.Namespace, o.Service))
			continue
		}
		collected.Inc()
		logger.Info("Deleted a load balancer whose Service is gone", "loadBalancer", o.Name, "service", klog.KRef(o.Namespace, o.Service), "uid", o.UID)
	}
}

func ingressIPs(s *v1.LoadBalancerStatus) string {
	var ips []string
	for _, in := range s.Ingress {
		if in.IP != "" {
			ips = append(ips, in.IP)
		} else {
			ips = append(ips, in.Hostname)
		}
	}
	return strings.Join(ips, ",")
}
