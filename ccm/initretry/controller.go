// Package initretry is mooring-ccm's node-init-retry controller: when the
// shared instance view sees the cloud answer again after failed Lists, it
// makes the cloud-node controller (ccm/nodeinit, or the library's) try
// every Node that still waits for initialization at once, instead of after
// that controller's per-node exponential backoff (5 ms doubling up to
// 1000 s, which an outage of a few minutes grows to many minutes and which
// the library offers no setting
// for).
//
// The library's work queue is private, but its Node informer handler queues
// a Node on every Update event with a plain Add, which makes the Node
// available at once even while a rate-limited retry is pending. So this
// controller re-queues a Node by writing an annotation on it
// (AnnotationRecoveredAt, a merge patch): Nodes that carry the taint
// node.cloudprovider.kubernetes.io/uninitialized, and only those.
//
// A recovery is only seen when something lists the cloud. Once the Nodes
// waiting for init have failed a few times, nobody may: the library waits
// out its backoff, and the address sweep and the lifecycle controller leave
// tainted and Ready Nodes alone. So while the view is failing and a Node
// waits, the controller probes the cloud through the view every ProbePeriod
// (one List, shared with any other caller of the view).
package initretry

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	cloudproviderapi "k8s.io/cloud-provider/api"
	"k8s.io/klog/v2"
)

// Name is the controller's name in --controllers.
const Name = "node-init-retry"

// AnnotationRecoveredAt is written on each Node that waits for init when the
// cloud answers again: the time of the recovery, RFC 3339 with nanoseconds
// (so that two recoveries never write the same value, which would be a
// no-op patch and no Update event).
const AnnotationRecoveredAt = "mooring.dev/cloud-recovered-at"

// Defaults of Options.
const (
	DefaultProbePeriod = 5 * time.Second
	DefaultWorkers     = 10
)

// probeTimeout bounds one probe of the cloud.
const probeTimeout = 30 * time.Second

// View is what the controller needs of the shared instance view
// (*view.View).
type View interface {
	// OnRecovery registers f, called after a List that succeeds following
	// failed ones; f must not block.
	OnRecovery(f func()) (cancel func())
	// Failing reports whether the newest List failed.
	Failing() bool
	// Refresh lists the cloud unless a snapshot younger than maxAge exists.
	Refresh(ctx context.Context, maxAge time.Duration) error
}

// Options tune the controller.
type Options struct {
	// ProbePeriod is how often, while the view is failing and some Node
	// waits for init, the controller lists the cloud through the view to
	// learn that it answers again. Default DefaultProbePeriod; negative
	// disables probing (then only the view's other callers see a recovery).
	ProbePeriod time.Duration
	// Workers bounds the Node patches in flight. Default DefaultWorkers.
	Workers int
	// Now defaults to time.Now.
	Now func() time.Time
}

// Controller re-queues uninitialized Nodes when the cloud recovers.
type Controller struct {
	client kubernetes.Interface
	nodes  corelisters.NodeLister
	synced cache.InformerSynced
	view   View
	opts   Options
	// kick holds at most one pending recovery.
	kick chan struct{}
	// running guards against a second Run.
	running atomic.Bool
}

// New makes the controller. It takes the Node informer from the shared
// factory (so the factory starts it) and adds no handler to it.
func New(client kubernetes.Interface, nodes coreinformers.NodeInformer, v View, opts Options) *Controller {
	if opts.ProbePeriod == 0 {
		opts.ProbePeriod = DefaultProbePeriod
	}
	if opts.Workers <= 0 {
		opts.Workers = DefaultWorkers
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	registerMetrics()
	return &Controller{
		client: client,
		nodes:  nodes.Lister(),
		synced: nodes.Informer().HasSynced,
		view:   v,
		opts:   opts,
		kick:   make(chan struct{}, 1),
	}
}

// Name is the controller's name (controller.Interface).
func (c *Controller) Name() string { return Name }

// Run watches for recoveries until ctx ends.
func (c *Controller) Run(ctx context.Context) {
	defer utilruntime.HandleCrash()
	if !c.running.CompareAndSwap(false, true) {
		return
	}
	defer c.running.Store(false)
	logger := klog.FromContext(ctx)
	// Registered before the caches sync: a recovery meanwhile is kept in
	// kick and handled once they have.
	cancel := c.view.OnRecovery(func() {
		select {
		case c.kick <- struct{}{}:
		default:
		}
	})
	defer cancel()
	logger.Info("Starting controller", "controller", Name, "probePeriod", c.opts.ProbePeriod, "workers", c.opts.Workers)
	defer logger.Info("Shutting down controller", "controller", Name)
	if !cache.WaitForNamedCacheSync(Name, ctx.Done(), c.synced) {
		return
	}
	var probe <-chan time.Time
	if c.opts.ProbePeriod > 0 {
		t := time.NewTicker(c.opts.ProbePeriod)
		defer t.Stop()
		probe = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.kick:
			c.Requeue(ctx)
		case <-probe:
			c.probe(ctx)
		}
	}
}

// probe lists the cloud through the view while the view is failing and a
// Node waits for init; a success fires the view's recovery callbacks.
func (c *Controller) probe(ctx context.Context) {
	if !c.view.Failing() {
		return
	}
	waiting, err := c.uninitialized()
	if err != nil || len(waiting) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	probes.Inc()
	if err := c.view.Refresh(ctx, c.opts.ProbePeriod); err != nil {
		klog.FromContext(ctx).V(2).Info("Cloud still not answering; Nodes keep waiting for initialization", "controller", Name, "waiting", len(waiting), "err", err)
	}
}

// uninitialized lists the Nodes that carry the cloud provider's
// uninitialized taint, whatever its effect, as the library's node
// controller judges them.
func (c *Controller) uninitialized() ([]*v1.Node, error) {
	all, err := c.nodes.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	var out []*v1.Node
	for _, n := range all {
		if Uninitialized(n) {
			out = append(out, n)
		}
	}
	return out, nil
}

// Uninitialized reports whether a Node waits for the cloud-node controller.
func Uninitialized(n *v1.Node) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == cloudproviderapi.TaintExternalCloudProvider {
			return true
		}
	}
	return false
}

// Requeue annotates every Node that waits for init, so that the library's
// cloud-node controller tries it at once. It returns how many Nodes it
// re-queued and how many patches failed (a Node deleted meanwhile is
// neither).
func (c *Controller) Requeue(ctx context.Context) (requeuedNodes, failedNodes int) {
	logger := klog.FromContext(ctx)
	waiting, err := c.uninitialized()
	if err != nil {
		logger.Error(err, "Cannot list Nodes to re-queue after the cloud's recovery", "controller", Name)
		return 0, 0
	}
	if len(waiting) == 0 {
		logger.V(2).Info("Cloud answers again; no Node waits for initialization", "controller", Name)
		return 0, 0
	}
	start := c.opts.Now()
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{
			"annotations": map[string]string{AnnotationRecoveredAt: start.UTC().Format(time.RFC3339Nano)},
		},
	})
	if err != nil {
		logger.Error(err, "Cannot encode the re-queue patch", "controller", Name)
		return 0, 0
	}
	var ok, failed atomic.Int32
	workqueue.ParallelizeUntil(ctx, c.opts.Workers, len(waiting), func(i int) {
		n := waiting[i]
		_, err := c.client.CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, patch,
			// A field manager of its own: the annotation's writer is plain to see.
			metav1.PatchOptions{FieldManager: Name})
		switch {
		case err == nil:
			ok.Add(1)
			requeued.Inc()
			logger.V(2).Info("Re-queued Node for initialization", "controller", Name, "node", klog.KObj(n))
		case apierrors.IsNotFound(err):
			// Gone: nothing to initialize.
		default:
			failed.Add(1)
			logger.Error(err, "Cannot re-queue Node for initialization", "controller", Name, "node", klog.KObj(n))
		}
	})
	logger.Info("Cloud answers again; re-queued the Nodes waiting for initialization", "controller", Name,
		"requeued", ok.Load(), "failed", failed.Load(), "duration", c.opts.Now().Sub(start))
	return int(ok.Load()), int(failed.Load())
}
