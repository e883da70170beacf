package harness

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/transport"
	"k8s.io/utils/ptr"

	"github.com/mooring-dev/mooring/test/testbed"
)

// NodeLeaseInterval is how often a kubelet renews its node Lease: a
// quarter of the Lease's 40 s duration (the kubelet's defaults).
const NodeLeaseInterval = 10 * time.Second

// LeaseRenewals are simulated kubelets' node Lease renewals, made as the
// nodes themselves (system:node:NAME in group system:nodes, so that API
// Priority and Fairness puts them where it puts real kubelets' renewals:
// FlowSchema system-node-high), each Lease renewed every interval with the
// renewals spread evenly over it. They measure how long each renewal
// takes while something else loads the apiserver.
type LeaseRenewals struct {
	mu     sync.Mutex
	took   []time.Duration
	errors int
	first  error
	stop   context.CancelFunc
	done   sync.WaitGroup
}

// RenewLeases creates the node Leases of names (in kube-node-lease, as
// each node, before it returns) and renews them until Stop. Renewals are
// made as the kubelet makes them: an Update of the Lease it holds with a
// new renewTime.
func RenewLeases(ctx context.Context, c *testbed.Cluster, names []string, interval time.Duration) (*LeaseRenewals, error) {
	// One connection pool for all of them, each request as its node.
	base, err := rest.TransportFor(protobufConfig(c.AdminConfig, -1, 0))
	if err != nil {
		return nil, err
	}
	clients := make([]kubernetes.Interface, len(names))
	for i, name := range names {
		cfg := protobufConfig(&rest.Config{Host: c.AdminConfig.Host}, -1, 0)
		rt := transport.NewImpersonatingRoundTripper(transport.ImpersonationConfig{
			UserName: "system:node:" + name,
			Groups:   []string{"system:nodes", "system:authenticated"},
		}, base)
		if clients[i], err = kubernetes.NewForConfigAndClient(cfg, &http.Client{Transport: rt}); err != nil {
			return nil, err
		}
	}
	leases := make([]*coordinationv1.Lease, len(names))
	if err := Parallel(ctx, len(names), 32, func(ctx context.Context, i int) error {
		now := metav1.NewMicroTime(time.Now())
		l, err := clients[i].CoordinationV1().Leases(corev1.NamespaceNodeLease).Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: names[i], Namespace: corev1.NamespaceNodeLease},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity:       ptr.To(names[i]),
				LeaseDurationSeconds: ptr.To(int32(4 * interval / time.Second)),
				RenewTime:            &now,
			},
		}, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("node lease %s: %w", names[i], err)
		}
		leases[i] = l
		return nil
	}); err != nil {
		return nil, err
	}
	rctx, stop := context.WithCancel(context.Background())
	r := &LeaseRenewals{stop: stop}
	start := time.Now()
	for i := range names {
		r.done.Go(func() {
			// Lease i renews at its offset within each interval.
			next := start.Add(interval * time.Duration(i) / time.Duration(len(names)))
			api := clients[i].CoordinationV1().Leases(corev1.NamespaceNodeLease)
			l := leases[i]
			for {
				select {
				case <-rctx.Done():
					return
				case <-time.After(time.Until(next)):
				}
				next = next.Add(interval)
				l = r.renew(rctx, api, l)
			}
		})
	}
	return r, nil
}

// renew renews l once and records the time it took; it returns the Lease
// to renew next time.
func (r *LeaseRenewals) renew(ctx context.Context, leases leaseClient, l *coordinationv1.Lease) *coordinationv1.Lease {
	began := time.Now()
	renewed := l.DeepCopy()
	renewed.Spec.RenewTime = ptr.To(metav1.NewMicroTime(began))
	got, err := leases.Update(ctx, renewed, metav1.UpdateOptions{})
	took := time.Since(began)
	if ctx.Err() != nil {
		return l // stopped mid-renewal: not a figure
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.errors++
		if r.first == nil {
			r.first = err
		}
		if apierrors.IsConflict(err) {
			// The kubelet gets the Lease again; so does this.
			if fresh, gerr := leases.Get(ctx, l.Name, metav1.GetOptions{}); gerr == nil {
				return fresh
			}
		}
		return l
	}
	r.took = append(r.took, took)
	return got
}

type leaseClient interface {
	Update(context.Context, *coordinationv1.Lease, metav1.UpdateOptions) (*coordinationv1.Lease, error)
	Get(context.Context, string, metav1.GetOptions) (*coordinationv1.Lease, error)
}

// Stop ends the renewals and waits for them.
func (r *LeaseRenewals) Stop() {
	r.stop()
	r.done.Wait()
}

// Took returns the renewals' times so far, sorted, and how many failed
// (with the first failure).
func (r *LeaseRenewals) Took() (sorted []time.Duration, failed int, first error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	sorted = slices.Clone(r.took)
	slices.Sort(sorted)
	return sorted, r.errors, r.first
}

// Reset forgets the renewals so far: the next Took counts from now.
func (r *LeaseRenewals) Reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.took, r.errors, r.first = nil, 0, nil
}
