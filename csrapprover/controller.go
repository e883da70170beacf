package csrapprover

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	certinformers "k8s.io/client-go/informers/certificates/v1"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	certlisters "k8s.io/client-go/listers/certificates/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/mooring-dev/mooring/cloud"
	"github.com/mooring-dev/mooring/cloud/tpm"
	"github.com/mooring-dev/mooring/cloud/view"
	"github.com/mooring-dev/mooring/csrapprover/spent"
)

// Defaults of Options, and of the flags (docs/scale.md measured them).
const (
	// DefaultWorkers keeps decisions up with a burst: each worker waits
	// on its one write to the apiserver.
	DefaultWorkers = 64
	// DefaultMaxPendingPerRequester bounds the CSRs of one requester that
	// carry no evidence whose machine can be read (renewals, serving
	// CSRs, joins without evidence); half the workers.
	DefaultMaxPendingPerRequester = 32
	DefaultMaxPending             = 1000
	// DefaultMaxPendingPerInstance: the joins of one claimed machine are
	// decided one at a time (a second is a retry or a copy).
	DefaultMaxPendingPerInstance = 1
)

// Name of the controller (in mooring-ccm's --controllers and in Events).
const Name = "csr-approver"

// Options of the controller.
type Options struct {
	// Workers decide CSRs in parallel. Default DefaultWorkers.
	Workers int
	// DryRun logs and records what would be decided, and decides nothing.
	DryRun bool
	// MaxPendingPerRequester and MaxPending bound the CSRs being decided at
	// once (counting those waiting to retry after a cloud or API error),
	// per requester and in all. Further CSRs wait their turn; none is denied
	// for being many. Defaults DefaultMaxPendingPerRequester and
	// DefaultMaxPending.
	//
	// Attested joins (kubelet client CSRs with one piece of evidence whose
	// claimed machine can be read, cloud.MachinePeeker) are bounded instead
	// per claimed machine (MaxPendingPerInstance) and per requester by
	// MaxPendingAttestedPerRequester: a boot wave's joins all come from
	// one bootstrap token. Defaults DefaultMaxPendingPerInstance and half
	// of MaxPending.
	MaxPendingPerRequester, MaxPending                    int
	MaxPendingPerInstance, MaxPendingAttestedPerRequester int
	// CompetitorCheckPeriod is how often the approver asks whether
	// kube-controller-manager may approve kubelet client CSRs too (at start
	// and then periodically: kubeadm re-creates its grants on upgrade).
	// Default 5m; negative: never.
	CompetitorCheckPeriod time.Duration
	// SpentTickets keeps join tickets spent after the CSRs that spent
	// them are deleted. Required to approve ticket joins: without it they
	// are retried, never approved.
	SpentTickets *spent.Store
	// FailuresBeforeRelease is how many attempts in a row a CSR may fail
	// (a cloud or API error) before it gives its place in the gate back
	// and waits in line again: evidence that keeps failing must not hold
	// the places of its requester's other joins. Default
	// DefaultFailuresBeforeRelease.
	FailuresBeforeRelease int
}

// DefaultFailuresBeforeRelease: three failures in a row (about 1.4 s of
// error backoff) and a CSR gives its place in the gate back.
const DefaultFailuresBeforeRelease = 3

// Controller approves or denies kubelet client and serving CSRs.
type Controller struct {
	client    kubernetes.Interface
	csrs      certlisters.CertificateSigningRequestLister
	indexer   cache.Indexer
	synced    []cache.InformerSynced
	ready     chan struct{}
	decider   *Decider
	verifiers map[string]cloud.EvidenceVerifier
	queue     workqueue.TypedRateLimitingInterface[string]
	// waiting paces CSRs the gate holds back (a freed place wakes the
	// next at once; this is the fallback).
	waiting  workqueue.TypedRateLimiter[string]
	gate     *gate
	events   record.EventBroadcaster
	recorder record.EventRecorder
	opts     Options
}

// New builds the controller over a CSR and a Node informer. It must be
// called before the informers start (it adds an index). It decides nothing
// until both caches have synced: the checks read Nodes.
func New(client kubernetes.Interface, csrInformer certinformers.CertificateSigningRequestInformer, nodeInformer coreinformers.NodeInformer,
	cfg Config, verifiers []cloud.EvidenceVerifier, instances Instances, opts Options) (*Controller, error) {
	if opts.Workers <= 0 {
		opts.Workers = DefaultWorkers
	}
	if opts.MaxPendingPerRequester <= 0 {
		opts.MaxPendingPerRequester = DefaultMaxPendingPerRequester
	}
	if opts.MaxPending <= 0 {
		opts.MaxPending = DefaultMaxPending
	}
	if opts.MaxPendingPerInstance <= 0 {
		opts.MaxPendingPerInstance = DefaultMaxPendingPerInstance
	}
	if opts.MaxPendingAttestedPerRequester <= 0 {
		opts.MaxPendingAttestedPerRequester = max(1, opts.MaxPending/2)
	}
	if opts.CompetitorCheckPeriod == 0 {
		opts.CompetitorCheckPeriod = 5 * time.Minute
	}
	if opts.FailuresBeforeRelease <= 0 {
		opts.FailuresBeforeRelease = DefaultFailuresBeforeRelease
	}
	registerMetrics()
	c := &Controller{
		client:    client,
		csrs:      csrInformer.Lister(),
		indexer:   csrInformer.Informer().GetIndexer(),
		synced:    []cache.InformerSynced{csrInformer.Informer().HasSynced, nodeInformer.Informer().HasSynced},
		ready:     make(chan struct{}),
		verifiers: map[string]cloud.EvidenceVerifier{},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](200*time.Millisecond, 2*time.Minute),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: Name}),
		waiting: workqueue.NewTypedItemExponentialFailureRateLimiter[string](250*time.Millisecond, 5*time.Second),
		gate: newGate(gateLimits{perRequester: opts.MaxPendingPerRequester, total: opts.MaxPending,
			perMachine: opts.MaxPendingPerInstance, attestedPerRequester: opts.MaxPendingAttestedPerRequester}),
		opts: opts,
	}
	for _, v := range verifiers {
		c.verifiers[v.Type()] = v
	}
	nodes, err := newInformerNodes(nodeInformer)
	if err != nil {
		return nil, err
	}
	c.decider = NewDecider(cfg, verifiers, instances, nodes, c)
	c.events = record.NewBroadcaster()
	c.recorder = c.events.NewRecorder(scheme.Scheme, v1.EventSource{Component: "mooring-" + Name})
	if err := csrInformer.Informer().AddIndexers(cache.Indexers{replayIndex: c.replayKeys}); err != nil {
		return nil, err
	}
	_, err = csrInformer.Informer().AddEventHandler(cache.FilteringResourceEventHandler{
		FilterFunc: func(obj any) bool {
			csr, ok := obj.(*certificatesv1.CertificateSigningRequest)
			return ok && ours(csr) && !decided(csr)
		},
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc: func(obj any) { c.queue.Add(obj.(*certificatesv1.CertificateSigningRequest).Name) },
			UpdateFunc: func(oldObj, obj any) {
				if challengeWritten(oldObj, obj) {
					// The approver's own write, its denial on the way (or
					// the CSR queued again by the error that stopped it).
					return
				}
				c.queue.Add(obj.(*certificatesv1.CertificateSigningRequest).Name)
			},
		},
	})
	if err != nil {
		return nil, err
	}
	_, err = csrInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(oldObj, obj any) {
			old, ok1 := oldObj.(*certificatesv1.CertificateSigningRequest)
			cur, ok2 := obj.(*certificatesv1.CertificateSigningRequest)
			if ok1 && ok2 {
				c.approvedElsewhere(old, cur)
			}
		},
	})
	if err != nil {
		return nil, err
	}
	return c, nil
}

// Ready is closed once every cache the decisions read has synced and the
// workers run: what /readyz reports.
func (c *Controller) Ready() <-chan struct{} { return c.ready }

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

// Run decides CSRs until ctx ends.
func (c *Controller) Run(ctx context.Context) {
	defer utilruntime.HandleCrash()
	defer c.queue.ShutDown()
	c.events.StartStructuredLogging(3)
	c.events.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: c.client.CoreV1().Events("")})
	defer c.events.Shutdown()
	logger := klog.FromContext(ctx)
	logger.Info("Starting controller", "controller", Name, "workers", c.opts.Workers, "dryRun", c.opts.DryRun)
	var wg sync.WaitGroup
	defer wg.Wait()
	if n := c.decider.cfg.APIServerNames; n != nil {
		// Learned while the caches sync. Serving CSRs retrying because the
		// names were unknown are woken once they are known.
		wg.Go(func() { n.Run(ctx, c.wakeHolders) })
	}
	// Every cache a decision reads: a Node missing from an unsynced cache
	// would skip the takeover checks of a join and deny renewals and
	// serving CSRs NodeNotFound for good.
	if !cache.WaitForNamedCacheSync(Name, ctx.Done(), c.synced...) {
		return
	}
	// CSRs retrying after cloud errors are woken when the cloud answers
	// again, rather than each after its own backoff (up to 2 min).
	if r, ok := c.decider.instances.(recoveries); ok {
		defer r.OnRecovery(c.wakeHolders)()
	}
	if c.opts.CompetitorCheckPeriod > 0 {
		wg.Go(func() { c.watchCompetitors(ctx, c.opts.CompetitorCheckPeriod) })
	}
	for range c.opts.Workers {
		wg.Go(func() { wait.UntilWithContext(ctx, c.worker, time.Second) })
	}
	close(c.ready)
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
		if retryIn, ok := view.RetryAfter(err); ok {
			// The CSR's instance is not in the cloud view's last List,
			// which began before the question; the view lists again for
			// it in retryIn. Nothing failed, so no error backoff: that
			// doubled up to minutes while a burst kept the view's Lists
			// young.
			unconfirmed.Inc()
			klog.FromContext(ctx).V(2).Info("Instance not in the cloud's last list; asking again when the view lists again", "csr", name, "in", retryIn, "err", err)
			c.queue.AddAfter(name, retryIn)
		} else if err != nil {
			errorsTotal.Inc()
			failures := c.queue.NumRequeues(name) + 1
			klog.FromContext(ctx).Error(err, "Could not decide CSR; retrying, nothing approved", "csr", name, "retries", failures-1)
			if failures >= c.opts.FailuresBeforeRelease {
				// It waits in line again when it is retried, behind the
				// CSRs its place now lets in.
				if next, ok := c.gate.yield(name); ok {
					yielded.Inc()
					klog.FromContext(ctx).V(2).Info("CSR keeps failing; its place in the gate goes to the next in line", "csr", name, "failures", failures)
					if next != "" {
						c.queue.Add(next)
					}
				}
			}
			c.queue.AddRateLimited(name)
		} else {
			c.queue.Forget(name)
		}
		c.queue.Done(name)
	}
}

// sync decides one CSR. The CSR holds a place in the gate from its first
// attempt until an attempt ends without error; a CSR that finds no place
// waits and is tried again.
func (c *Controller) sync(ctx context.Context, name string) (err error) {
	csr, err := c.csrs.Get(name)
	if apierrors.IsNotFound(err) {
		c.release(name)
		return nil
	}
	if err != nil {
		return err
	}
	if !ours(csr) || decided(csr) {
		c.release(name)
		return nil
	}
	if scope := c.gate.enter(name, c.gateKey(csr)); scope != "" {
		delayed.WithLabelValues(scope).Inc()
		c.queue.AddAfter(name, c.waiting.When(name))
		return nil
	}
	c.waiting.Forget(name)
	defer func() {
		if err == nil {
			c.release(name)
		}
	}()
	d, err := c.decider.Decide(ctx, csr)
	if errors.Is(err, view.ErrAmbiguous) {
		// Decided for neither: say so where the CSR's owner looks.
		c.recorder.Event(csr, v1.EventTypeWarning, "InstanceAmbiguous", err.Error())
	}
	if err != nil {
		return err
	}
	return c.apply(ctx, csr, d)
}

// recoveries is a cloud view that tells when the cloud answers again after
// failures (*view.View).
type recoveries interface {
	OnRecovery(f func()) (cancel func())
}

// wakeHolders queues every CSR that holds a place in the gate (those being
// decided or waiting to retry), and those that gave theirs back after
// failing, at once.
func (c *Controller) wakeHolders() {
	for _, name := range c.gate.names() {
		c.queue.Add(name)
	}
}

// release gives up name's place in the gate and wakes the CSR it fits.
func (c *Controller) release(name string) {
	if next := c.gate.leave(name); next != "" {
		c.queue.Add(next)
	}
	c.waiting.Forget(name)
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
	if len(d.Challenge) > 0 {
		// The challenge goes on the CSR before its denial, which is what
		// the agent waits for. The patch names the resourceVersion the
		// decision read: a CSR decided meanwhile is not written on.
		patched, err := c.writeChallenge(ctx, csr, d.Challenge)
		if err != nil {
			return err
		}
		csr = patched
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
	switch {
	case d.Reason == ReasonTPMChallenge:
		// A step of a join, not a fault.
		c.recorder.Event(csr, v1.EventTypeNormal, d.Reason, d.Message)
	case !d.Approve:
		c.recorder.Event(csr, v1.EventTypeWarning, d.Reason, d.Message)
	}
	logger.Info("CSR decided", "csr", csr.Name, "signer", csr.Spec.SignerName, "requester", csr.Spec.Username,
		"decision", verdict, "reason", d.Reason, "message", d.Message)
	return nil
}

// challengeWritten: the update wrote a TPM challenge on the CSR.
func challengeWritten(oldObj, obj any) bool {
	old, ok1 := oldObj.(*certificatesv1.CertificateSigningRequest)
	cur, ok2 := obj.(*certificatesv1.CertificateSigningRequest)
	return ok1 && ok2 && cur.Annotations[tpm.ChallengeAnnotation] != "" && old.Annotations[tpm.ChallengeAnnotation] != cur.Annotations[tpm.ChallengeAnnotation]
}

// writeChallenge writes a TPM credential activation challenge on the CSR
// (annotation tpm.ChallengeAnnotation, base64) by a merge patch that names
// the CSR's resourceVersion, and returns the CSR as written.
func (c *Controller) writeChallenge(ctx context.Context, csr *certificatesv1.CertificateSigningRequest, challenge []byte) (*certificatesv1.CertificateSigningRequest, error) {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"resourceVersion": csr.ResourceVersion,
		"annotations":     map[string]string{tpm.ChallengeAnnotation: tpm.EncodeAnnotation(challenge)},
	}})
	if err != nil {
		return nil, err
	}
	patched, err := c.client.CertificatesV1().CertificateSigningRequests().Patch(ctx, csr.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return nil, fmt.Errorf("write the TPM credential activation challenge on the CSR: %w", err)
	}
	return patched, nil
}
