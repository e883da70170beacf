package csrapprover

import (
	"context"
	"fmt"
	"sync"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	certinformers "k8s.io/client-go/informers/certificates/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	certlisters "k8s.io/client-go/listers/certificates/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/mooring-dev/mooring/cloud"
	"github.com/mooring-dev/mooring/internal/evidence"
)

// Name of the controller (in mooring-ccm's --controllers and in Events).
const Name = "csr-approver"

// Options of the controller.
type Options struct {
	// Workers decide CSRs in parallel. Default 16.
	Workers int
	// DryRun logs and records what would be decided, and decides nothing.
	DryRun bool
	// MaxPendingPerRequester and MaxPending bound undecided CSRs of the two
	// signers; newer ones beyond are denied (TooManyPendingRequests).
	// Defaults 10 and 1000.
	MaxPendingPerRequester, MaxPending int
}

// Controller approves or denies kubelet client and serving CSRs.
type Controller struct {
	client    kubernetes.Interface
	csrs      certlisters.CertificateSigningRequestLister
	indexer   cache.Indexer
	synced    cache.InformerSynced
	decider   *Decider
	verifiers map[string]cloud.EvidenceVerifier
	queue     workqueue.TypedRateLimitingInterface[string]
	events    record.EventBroadcaster
	recorder  record.EventRecorder
	opts      Options
}

const replayIndex = "mooring.dev/replay-key"

// New builds the controller over a CSR informer. It must be called before
// the informer starts (it adds an index).
func New(client kubernetes.Interface, csrInformer certinformers.CertificateSigningRequestInformer, cfg Config,
	verifiers []cloud.EvidenceVerifier, instances Instances, nodes Nodes, opts Options) (*Controller, error) {
	if opts.Workers <= 0 {
		opts.Workers = 16
	}
	if opts.MaxPendingPerRequester <= 0 {
		opts.MaxPendingPerRequester = 10
	}
	if opts.MaxPending <= 0 {
		opts.MaxPending = 1000
	}
	registerMetrics()
	c := &Controller{
		client:    client,
		csrs:      csrInformer.Lister(),
		indexer:   csrInformer.Informer().GetIndexer(),
		synced:    csrInformer.Informer().HasSynced,
		verifiers: map[string]cloud.EvidenceVerifier{},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](200*time.Millisecond, 2*time.Minute),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: Name}),
		opts: opts,
	}
	for _, v := range verifiers {
		c.verifiers[v.Type()] = v
	}
	c.decider = NewDecider(cfg, verifiers, instances, nodes, c)
	if err := csrInformer.Informer().AddIndexers(cache.Indexers{replayIndex: c.replayKeys}); err != nil {
		return nil, err
	}
	_, err := csrInformer.Informer().AddEventHandler(cache.FilteringResourceEventHandler{
		FilterFunc: func(obj any) bool {
			csr, ok := obj.(*certificatesv1.CertificateSigningRequest)
			return ok && ours(csr) && !decided(csr)
		},
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { c.queue.Add(obj.(*certificatesv1.CertificateSigningRequest).Name) },
			UpdateFunc: func(_, obj any) { c.queue.Add(obj.(*certificatesv1.CertificateSigningRequest).Name) },
		},
	})
	if err != nil {
		return nil, err
	}
	c.events = record.NewBroadcaster()
	c.recorder = c.events.NewRecorder(scheme.Scheme, v1.EventSource{Component: "mooring-" + Name})
	return c, nil
}

// ours: the approver acts on these two signers and nothing else.
func ours(csr *certificatesv1.CertificateSigningRequest) bool {
	return csr.Spec.SignerName == certificatesv1.KubeAPIServerClientKubeletSignerName ||
		csr.Spec.SignerName == certificatesv1.KubeletServingSignerName
}

func decided(csr *certificatesv1.CertificateSigningRequest) bool {
	for _, c := range csr.Status.Conditions {
		if c.Type == certificatesv1.CertificateApproved || c.Type == certificatesv1.CertificateDenied || c.Type == certificatesv1.CertificateFailed {
			return true
		}
	}
	return false
}

// replayKeys indexes a CSR by the replay keys of the evidence it carries,
// counting only evidence that claims to be bound to the CSR's own key (a
// copy of someone else's evidence onto another key cannot block them).
func (c *Controller) replayKeys(obj any) ([]string, error) {
	csr, ok := obj.(*certificatesv1.CertificateSigningRequest)
	if !ok || csr.Spec.SignerName != certificatesv1.KubeAPIServerClientKubeletSignerName {
		return nil, nil
	}
	req, blocks, err := evidence.Decode(csr.Spec.Request)
	if err != nil || len(blocks) == 0 {
		return nil, nil
	}
	binding, err := evidence.Binding(req.PublicKey)
	if err != nil {
		return nil, nil
	}
	var keys []string
	for _, b := range blocks {
		v, ok := c.verifiers[b.Type]
		if !ok {
			continue
		}
		key, claimed, err := v.Peek(b.Data)
		if err == nil && key != "" && (claimed == "" || claimed == binding) {
			keys = append(keys, key)
		}
	}
	return keys, nil
}

// EarlierHolder implements Replays from the CSRs the apiserver holds, so
// single use survives restarts and leader changes: evidence lives minutes,
// and the apiserver keeps decided CSRs for an hour.
func (c *Controller) EarlierHolder(key string, csr *certificatesv1.CertificateSigningRequest) string {
	objs, err := c.indexer.ByIndex(replayIndex, key)
	if err != nil {
		return ""
	}
	for _, o := range objs {
		other := o.(*certificatesv1.CertificateSigningRequest)
		if other.UID == csr.UID {
			continue
		}
		t1, t2 := other.CreationTimestamp.Time, csr.CreationTimestamp.Time
		if t1.Before(t2) || (t1.Equal(t2) && other.Name < csr.Name) {
			return other.Name
		}
	}
	return ""
}

// Run decides CSRs until ctx ends.
func (c *Controller) Run(ctx context.Context) {
	defer utilruntime.HandleCrash()
	defer c.queue.ShutDown()
	c.events.StartStructuredLogging(3)
	c.events.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: c.client.CoreV1().Events("")})
	defer c.events.Shutdown()
	logger := klog.FromContext(ctx)
	logger.Info("Starting controller", "controller", Name, "workers", c.opts.Workers, "dryRun", c.opts.DryRun)
	if !cache.WaitForNamedCacheSync(Name, ctx.Done(), c.synced) {
		return
	}
	var wg sync.WaitGroup
	for range c.opts.Workers {
		wg.Go(func() { wait.UntilWithContext(ctx, c.worker, time.Second) })
	}
	<-ctx.Done()
	c.queue.ShutDown()
	wg.Wait()
}

func (c *Controller) worker(ctx context.Context) {
	for {
		name, quit := c.queue.Get()
		if quit {
			return
		}
		err := c.sync(ctx, name)
		if err != nil {
			errorsTotal.Inc()
			klog.FromContext(ctx).Error(err, "Could not decide CSR; retrying, nothing approved", "csr", name, "retries", c.queue.NumRequeues(name))
			c.queue.AddRateLimited(name)
		} else {
			c.queue.Forget(name)
		}
		c.queue.Done(name)
	}
}

func (c *Controller) sync(ctx context.Context, name string) error {
	csr, err := c.csrs.Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if !ours(csr) || decided(csr) {
		return nil
	}
	d, err := c.floodGuard(csr)
	if err != nil {
		return err
	}
	if d == nil {
		dd, err := c.decider.Decide(ctx, csr)
		if err != nil {
			return err
		}
		d = &dd
	}
	return c.apply(ctx, csr, *d)
}

// floodGuard denies a CSR when too many undecided ones came before it,
// from its requester or in all.
func (c *Controller) floodGuard(csr *certificatesv1.CertificateSigningRequest) (*Decision, error) {
	all, err := c.csrs.List(everything)
	if err != nil {
		return nil, err
	}
	var mine, total int
	for _, o := range all {
		if o.UID == csr.UID || !ours(o) || decided(o) || !o.CreationTimestamp.Before(&csr.CreationTimestamp) {
			continue
		}
		total++
		if o.Spec.Username == csr.Spec.Username {
			mine++
		}
	}
	switch {
	case mine >= c.opts.MaxPendingPerRequester:
		d := deny("flood", ReasonTooManyPending, "%s has %d undecided requests before this one (limit %d)", csr.Spec.Username, mine, c.opts.MaxPendingPerRequester)
		return &d, nil
	case total >= c.opts.MaxPending:
		d := deny("flood", ReasonTooManyPending, "%d undecided requests before this one (limit %d)", total, c.opts.MaxPending)
		return &d, nil
	}
	return nil, nil
}

func (c *Controller) apply(ctx context.Context, csr *certificatesv1.CertificateSigningRequest, d Decision) error {
	logger := klog.FromContext(ctx)
	verdict := "denied"
	if d.Approve {
		verdict = "approved"
	}
	checks.WithLabelValues(d.Check, verdict).Inc()
	if c.opts.DryRun {
		logger.Info("Dry run: would decide CSR", "csr", csr.Name, "signer", csr.Spec.SignerName, "requester", csr.Spec.Username,
			"decision", verdict, "reason", d.Reason, "message", d.Message)
		c.recorder.Eventf(csr, v1.EventTypeNormal, "DryRun", "Would be %s: %s: %s", verdict, d.Reason, d.Message)
		decisions.WithLabelValues(csr.Spec.SignerName, "dry-run-"+verdict, d.Reason).Inc()
		return nil
	}
	cond := certificatesv1.CertificateSigningRequestCondition{
		Type: certificatesv1.CertificateDenied, Status: v1.ConditionTrue, Reason: d.Reason,
		Message: "mooring: " + d.Message, LastUpdateTime: metav1.Now(),
	}
	if d.Approve {
		cond.Type = certificatesv1.CertificateApproved
	}
	updated := csr.DeepCopy()
	updated.Status.Conditions = append(updated.Status.Conditions, cond)
	if _, err := c.client.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, csr.Name, updated, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("record the decision: %w", err)
	}
	decisions.WithLabelValues(csr.Spec.SignerName, verdict, d.Reason).Inc()
	latency.WithLabelValues(csr.Spec.SignerName, verdict).Observe(time.Since(csr.CreationTimestamp.Time).Seconds())
	// A denial is what an operator acts on: it gets an Event. An approval's
	// reason and message are in its condition already; an Event for each
	// would double the approver's writes when thousands of nodes join.
	if !d.Approve {
		c.recorder.Event(csr, v1.EventTypeWarning, d.Reason, d.Message)
	}
	logger.Info("CSR decided", "csr", csr.Name, "signer", csr.Spec.SignerName, "requester", csr.Spec.Username,
		"decision", verdict, "reason", d.Reason, "message", d.Message)
	return nil
}
