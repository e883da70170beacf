package loadbalancer

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/klog/v2"

	"github.com/mooring-dev/mooring/cloud"
)

// Held is a load balancer as the cloud holds it.
type Held[S any] struct {
	// ID is the cloud's id; Name its name.
	ID, Name string
	// Owner is read from its tags; zero when it has none of ours.
	Owner Owner
	// Spec is what it does, in the normal form Cloud.Desired gives, so
	// that the fingerprints of the two compare.
	Spec S
	// Ingress is its address as the Service's status shows it; empty
	// while the cloud has not given it one.
	Ingress []v1.LoadBalancerIngress
	// Pending is the cloud's word for its state while it is still being
	// built ("new"); "" when it is ready.
	Pending string
	// Failed is the cloud's word for a state it will not build it out of
	// ("errored"): an error, not a wait; "" otherwise.
	Failed string
}

// Cloud is a backend's load balancer API. Errors are the API's; Get
// answers false (and no error) when the cloud says there is no such id;
// Delete answers nil for a load balancer already gone.
type Cloud[S any] interface {
	// Name is the name the cloud's own CCM gives svc's load balancer (its
	// name annotation, or its default), so that one it made is found.
	Name(svc *v1.Service) string
	// ID is the load balancer id svc names (an annotation the cloud's CCM
	// writes or a user sets), or "".
	ID(svc *v1.Service) string
	// Desired is the spec svc and nodes call for, in normal form; an error
	// names the annotation or field at fault, and nothing is called.
	Desired(ctx context.Context, svc *v1.Service, nodes []*v1.Node) (S, error)
	// List lists every load balancer that may be the cluster's: all of
	// the account's, or those the API can filter by the cluster's tag
	// plus the untagged.
	List(ctx context.Context) ([]Held[S], error)
	Get(ctx context.Context, id string) (Held[S], bool, error)
	Create(ctx context.Context, name string, o Owner, spec S) (Held[S], error)
	// Update makes h do spec and carry o's tags (adopting it when it had
	// none), keeping its address.
	Update(ctx context.Context, h Held[S], o Owner, spec S) (Held[S], error)
	Delete(ctx context.Context, h Held[S]) error
}

// Options configure Balancers.
type Options struct {
	// Cluster is the value of the cluster's tag on its load balancers
	// (the backend's cluster id); required.
	Cluster string
	// PendingRetry is the longest the controller waits before it asks
	// again about a load balancer the cloud is still building; default
	// 10s. It asks after 1s, then twice as long each time up to it.
	PendingRetry time.Duration
}

// Balancers is cloudprovider.LoadBalancer and cloud.LoadBalancerInventory
// over a Cloud.
type Balancers[S any] struct {
	cloud Cloud[S]
	opts  Options

	mu      sync.Mutex
	ids     map[string]string // Service UID -> load balancer id, last seen
	pending map[string]int    // Service UID -> answers "still building" in a row
}

var _ cloud.LoadBalancerInventory = (*Balancers[int])(nil)

// New makes Balancers over c.
func New[S any](c Cloud[S], o Options) (*Balancers[S], error) {
	if o.Cluster == "" {
		return nil, fmt.Errorf("load balancers: the cluster's id is empty")
	}
	if o.PendingRetry <= 0 {
		o.PendingRetry = 10 * time.Second
	}
	return &Balancers[S]{cloud: c, opts: o, ids: map[string]string{}, pending: map[string]int{}}, nil
}

// GetLoadBalancerName is the name the cloud's own CCM gives it.
func (b *Balancers[S]) GetLoadBalancerName(_ context.Context, _ string, svc *v1.Service) string {
	return b.cloud.Name(svc)
}

// GetLoadBalancer reports svc's load balancer, if the cloud holds one.
func (b *Balancers[S]) GetLoadBalancer(ctx context.Context, _ string, svc *v1.Service) (*v1.LoadBalancerStatus, bool, error) {
	h, ok, err := b.find(ctx, svc)
	if err != nil || !ok {
		return nil, false, err
	}
	if w, worded := b.cloud.(IngressWorder[S]); worded {
		if spec, err := b.cloud.Desired(ctx, svc, nil); err == nil {
			h.Ingress = w.Ingress(h, spec)
		}
	}
	return status(h), true, nil
}

// IngressWorder is a Cloud whose Services choose how their load
// balancer's address is shown (a hostname in place of its IPs, an address
// family left out: Hetzner's hostname and ipv6-disabled annotations):
// Ingress words h's status for spec, what its Service calls for. Balancers
// use it, where a Cloud has it, in place of Held.Ingress.
type IngressWorder[S any] interface {
	Ingress(h Held[S], spec S) []v1.LoadBalancerIngress
}

// EnsureLoadBalancer makes the cloud hold the load balancer svc and nodes
// call for: it creates one when there is none, adopts an untagged one of
// its name, and updates one only when it differs. While the cloud is
// still building it, it answers a *cloud.PendingError and changes it only
// once it is built.
func (b *Balancers[S]) EnsureLoadBalancer(ctx context.Context, _ string, svc *v1.Service, nodes []*v1.Node) (*v1.LoadBalancerStatus, error) {
	st, _, err := b.ensure(ctx, svc, nodes)
	return st, err
}

// ensure is EnsureLoadBalancer; deferred says a change was left for once
// the load balancer is built (or the cloud answered a write "busy").
func (b *Balancers[S]) ensure(ctx context.Context, svc *v1.Service, nodes []*v1.Node) (_ *v1.LoadBalancerStatus, deferred bool, _ error) {
	spec, err := b.cloud.Desired(ctx, svc, nodes)
	if err != nil {
		return nil, false, err
	}
	h, ok, err := b.find(ctx, svc)
	if err != nil {
		return nil, false, err
	}
	owner := OwnerOf(b.opts.Cluster, svc)
	logger := klog.FromContext(ctx).WithValues("service", klog.KObj(svc))
	switch {
	case !ok:
		name := b.cloud.Name(svc)
		if h, err = b.cloud.Create(ctx, name, owner, spec); err != nil {
			return nil, cloud.IsPending(err), fmt.Errorf("create load balancer %s: %w", name, err)
		}
		logger.Info("Created a load balancer", "loadBalancer", h.Name, "id", h.ID)
	case h.Pending != "":
		// Still being built: the cloud takes no change to it (Octavia and
		// OCI answer 409) until it is ready; asked again below.
		deferred = Fingerprint(h.Spec) != Fingerprint(spec) || h.Owner.Zero()
		logger.V(4).Info("Load balancer still being built; changing it later", "loadBalancer", h.Name, "id", h.ID, "state", h.Pending, "changeWaits", deferred)
	case h.Owner.Zero():
		next, err := b.cloud.Update(ctx, h, owner, spec)
		if err != nil {
			return nil, cloud.IsPending(err), fmt.Errorf("adopt load balancer %s (%s): %w", h.Name, h.ID, err)
		}
		h = next
		logger.Info("Adopted a load balancer the cluster did not make", "loadBalancer", h.Name, "id", h.ID)
	case Fingerprint(h.Spec) != Fingerprint(spec):
		next, err := b.cloud.Update(ctx, h, owner, spec)
		if err != nil {
			return nil, cloud.IsPending(err), fmt.Errorf("update load balancer %s (%s): %w", h.Name, h.ID, err)
		}
		h = next
		logger.V(2).Info("Updated a load balancer", "loadBalancer", h.Name, "id", h.ID)
	}
	b.remember(string(svc.UID), h.ID)
	if h.Failed != "" {
		return nil, false, fmt.Errorf("load balancer %s (%s) is %s: the cloud could not build it (delete it to have it made again)", h.Name, h.ID, h.Failed)
	}
	if w, worded := b.cloud.(IngressWorder[S]); worded && h.Pending == "" {
		h.Ingress = w.Ingress(h, spec)
	}
	if h.Pending != "" || len(h.Ingress) == 0 {
		state := h.Pending
		if state == "" {
			state = "without an address"
		}
		return nil, deferred, &cloud.PendingError{LoadBalancer: h.Name, State: state, After: b.wait(string(svc.UID))}
	}
	b.built(string(svc.UID))
	return status(h), false, nil
}

// UpdateLoadBalancer is EnsureLoadBalancer: the fingerprint keeps it from
// writing what the cloud already holds. A load balancer still being built
// is no error here once the change is written; a change left for once it
// is built is (the library's service controller retries a Service whose
// update failed, and forgets one that succeeded).
func (b *Balancers[S]) UpdateLoadBalancer(ctx context.Context, _ string, svc *v1.Service, nodes []*v1.Node) error {
	_, deferred, err := b.ensure(ctx, svc, nodes)
	if cloud.IsPending(err) && !deferred {
		return nil
	}
	return err
}

// EnsureLoadBalancerDeleted deletes svc's load balancer: the one tagged
// with its UID, or an untagged one it names or of its name. One of
// another cluster or Service stays.
func (b *Balancers[S]) EnsureLoadBalancerDeleted(ctx context.Context, _ string, svc *v1.Service) error {
	h, ok, err := b.find(ctx, svc)
	var foreign *ForeignError
	if errors.As(err, &foreign) {
		klog.FromContext(ctx).Info("Not deleting a load balancer that is not this Service's", "service", klog.KObj(svc), "reason", foreign.Error())
		return nil
	}
	if err != nil || !ok {
		return err
	}
	if err := b.cloud.Delete(ctx, h); err != nil {
		return fmt.Errorf("delete load balancer %s (%s): %w", h.Name, h.ID, err)
	}
	b.forget(string(svc.UID))
	klog.FromContext(ctx).Info("Deleted a load balancer", "service", klog.KObj(svc), "loadBalancer", h.Name, "id", h.ID)
	return nil
}

// ListOwnedLoadBalancers lists the load balancers tagged for the cluster.
func (b *Balancers[S]) ListOwnedLoadBalancers(ctx context.Context) ([]cloud.OwnedLoadBalancer, error) {
	all, err := b.cloud.List(ctx)
	if err != nil {
		return nil, err
	}
	var out []cloud.OwnedLoadBalancer
	for _, h := range all {
		if h.Owner.Cluster != b.opts.Cluster || h.Owner.UID == "" {
			continue
		}
		b.remember(h.Owner.UID, h.ID)
		out = append(out, cloud.OwnedLoadBalancer{Name: h.Name, Namespace: h.Owner.Namespace, Service: h.Owner.Service,
			UID: h.Owner.UID, Fingerprint: Fingerprint(h.Spec)})
	}
	return out, nil
}

// DesiredFingerprint is the fingerprint of what svc and nodes call for.
func (b *Balancers[S]) DesiredFingerprint(ctx context.Context, svc *v1.Service, nodes []*v1.Node) (string, error) {
	spec, err := b.cloud.Desired(ctx, svc, nodes)
	if err != nil {
		return "", err
	}
	return Fingerprint(spec), nil
}

// ForeignError: the load balancer found for a Service by its id or name
// belongs to another cluster or Service; it is neither changed nor
// deleted.
type ForeignError struct {
	ID, Name string
	Owner    Owner
}

func (e *ForeignError) Error() string {
	return fmt.Sprintf("load balancer %s (%s) belongs to Service UID %s of cluster %s, not this one", e.Name, e.ID, e.Owner.UID, e.Owner.Cluster)
}

// find finds svc's load balancer: by the id svc names or the id last seen
// for its UID (one Get), else in one List by its UID in the tags, then by
// its name.
func (b *Balancers[S]) find(ctx context.Context, svc *v1.Service) (Held[S], bool, error) {
	uid := string(svc.UID)
	for _, id := range []string{b.cloud.ID(svc), b.known(uid)} {
		if id == "" {
			continue
		}
		h, ok, err := b.cloud.Get(ctx, id)
		if err != nil {
			return h, false, fmt.Errorf("get load balancer %s: %w", id, err)
		}
		if ok {
			return h, true, b.check(h, uid)
		}
		b.forget(uid)
		break
	}
	list, full := b.cloud.List, true
	if ix, ok := b.cloud.(Indexer[S]); ok {
		list, full = ix.Index, false
	}
	all, err := list(ctx)
	if err != nil {
		return Held[S]{}, false, fmt.Errorf("list load balancers: %w", err)
	}
	match := -1
	for i, h := range all {
		if h.Owner.Cluster == b.opts.Cluster && h.Owner.UID == uid {
			match = i
			break
		}
	}
	if match < 0 {
		name := b.cloud.Name(svc)
		for i, h := range all {
			if h.Name == name {
				match = i
				break
			}
		}
	}
	if match < 0 {
		return Held[S]{}, false, nil
	}
	h := all[match]
	if !full {
		// The index holds no spec: read the one found.
		var ok bool
		if h, ok, err = b.cloud.Get(ctx, h.ID); err != nil || !ok {
			if err != nil {
				err = fmt.Errorf("get load balancer %s: %w", all[match].ID, err)
			}
			return h, false, err
		}
	}
	return h, true, b.check(h, uid)
}

// Indexer is a Cloud whose List costs more than a call per page (it reads
// each load balancer's parts: Linode's configs and nodes): Index lists
// every load balancer List would, with its id, name and owner but no
// spec, in one paged call. Finding a Service's load balancer then costs
// the index and one Get, not a whole List (building n load balancers
// would cost n Lists of all of them).
type Indexer[S any] interface {
	Index(ctx context.Context) ([]Held[S], error)
}

// check refuses a load balancer tagged for another cluster or Service.
func (b *Balancers[S]) check(h Held[S], uid string) error {
	if h.Owner.Zero() || h.Owner.Cluster == b.opts.Cluster && h.Owner.UID == uid {
		return nil
	}
	return &ForeignError{ID: h.ID, Name: h.Name, Owner: h.Owner}
}

// wait is how long to wait before asking again about the load balancer of
// uid, still being built: 1s, doubled each time in a row, up to
// PendingRetry.
func (b *Balancers[S]) wait(uid string) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := b.pending[uid]
	b.pending[uid] = n + 1
	return min(time.Second<<min(n, 16), b.opts.PendingRetry)
}

func (b *Balancers[S]) known(uid string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.ids[uid]
}

func (b *Balancers[S]) remember(uid, id string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.ids[uid] = id
}

// forget drops what is known of uid's load balancer: gone.
func (b *Balancers[S]) forget(uid string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.ids, uid)
	delete(b.pending, uid)
}

// built ends uid's wait for its load balancer: a later build waits from 1s.
func (b *Balancers[S]) built(uid string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.pending, uid)
}

func status[S any](h Held[S]) *v1.LoadBalancerStatus {
	return &v1.LoadBalancerStatus{Ingress: h.Ingress}
}

// Fingerprint hashes a spec in normal form.
func Fingerprint(spec any) string {
	data, err := json.Marshal(spec)
	if err != nil {
		panic(fmt.Sprintf("load balancer spec %T: %v", spec, err))
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

var _ cloudprovider.LoadBalancer = (*Balancers[int])(nil)
