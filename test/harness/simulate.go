package harness

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/mooring-dev/mooring/test/testbed"
)

// Simulated kubelets, for the benchmarks and the reliability scenarios:
// Node objects and CSRs made the way thousands of kubelets would make them,
// without running them.

// UninitializedTaint is the taint a kubelet with --cloud-provider=external
// registers its Node with, until the CCM initializes it.
const UninitializedTaint = "node.cloudprovider.kubernetes.io/uninitialized"

// FastClient is an admin client whose client-side rate limit is high enough
// that it is never the bottleneck of thousands of simulated kubelets.
func FastClient(c *testbed.Cluster) (kubernetes.Interface, error) {
	return fastClient(c.AdminConfig)
}

// UnthrottledClient is an admin client with no client-side rate limit at
// all (QPS -1), speaking protobuf: what the apiserver alone can take.
func UnthrottledClient(c *testbed.Cluster) (kubernetes.Interface, error) {
	return protobufClient(c.AdminConfig, -1, 0)
}

// CCMUser and CCMGroups are the identity StartCCM runs mooring-ccm as: its
// ServiceAccount's, which mooring's FlowSchema (deploy/flowcontrol) maps to
// priority level mooring.
const CCMUser = "system:serviceaccount:kube-system:cloud-controller-manager"

var CCMGroups = []string{"system:serviceaccounts", "system:serviceaccounts:kube-system"}

// UnthrottledClientAs is UnthrottledClient acting as user in groups and
// system:authenticated, as that user's own credentials would make it
// (impersonated), so that API Priority and Fairness classifies its requests
// as that user's, and RBAC allows what it allows that user.
func UnthrottledClientAs(c *testbed.Cluster, user string, groups ...string) (kubernetes.Interface, error) {
	cfg := rest.CopyConfig(c.AdminConfig)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: append(slices.Clone(groups), "system:authenticated")}
	return protobufClient(cfg, -1, 0)
}

func fastClient(cfg *rest.Config) (kubernetes.Interface, error) {
	return protobufClient(cfg, 5000, 5000)
}

// protobufClient is a client of cfg's identity at the given client-side
// limit, speaking protobuf as the kubelet and kube-controller-manager talk:
// JSON would cost kube-apiserver CPU that real nodes do not.
func protobufClient(cfg *rest.Config, qps float32, burst int) (kubernetes.Interface, error) {
	return kubernetes.NewForConfig(protobufConfig(cfg, qps, burst))
}

// protobufConfig is cfg at the given client-side limit, speaking protobuf.
func protobufConfig(cfg *rest.Config, qps float32, burst int) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.QPS, c.Burst = qps, burst
	c.ContentType = runtime.ContentTypeProtobuf
	c.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	return c
}

// Percentile is the p-th percentile of sorted durations (p 100: the
// largest; 0 for none).
func Percentile(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := (len(sorted)*p + 99) / 100
	return sorted[max(0, min(len(sorted)-1, i-1))]
}

// Parallel runs f for 0..n-1 on workers goroutines; the first error stops
// it and is returned.
func Parallel(ctx context.Context, n, workers int, f func(context.Context, int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	next := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := range next {
				if err := f(ctx, i); err != nil {
					cancel(err)
				}
			}
		})
	}
	for i := 0; i < n && ctx.Err() == nil; i++ {
		select {
		case next <- i:
		case <-ctx.Done():
		}
	}
	close(next)
	wg.Wait()
	return context.Cause(ctx)
}

// RegisterOptions tune RegisterNodes.
type RegisterOptions struct {
	// NotReady picks the Nodes whose kubelet reports them not Ready (nil:
	// none).
	NotReady func(name string) bool
	// Created is told when each Node is about to be created (nil: nobody).
	Created func(name string, at time.Time)
}

// RegisterNodes does what kubelets with --cloud-provider=external do when
// they start: create their Node (tainted uninitialized, no addresses, no
// providerID), then report it Ready (or not Ready, as opts say).
func RegisterNodes(ctx context.Context, c kubernetes.Interface, names []string, opts RegisterOptions) error {
	ready := []byte(`{"status":{"conditions":[{"type":"Ready","status":"True","reason":"KubeletReady","message":"simulated kubelet"}]}}`)
	notReady := []byte(`{"status":{"conditions":[{"type":"Ready","status":"False","reason":"KubeletNotReady","message":"simulated kubelet, not ready"}]}}`)
	return Parallel(ctx, len(names), 32, func(ctx context.Context, i int) error {
		node := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: names[i], Labels: map[string]string{corev1.LabelHostname: names[i]}},
			Spec: corev1.NodeSpec{Taints: []corev1.Taint{{
				Key: UninitializedTaint, Value: "true", Effect: corev1.TaintEffectNoSchedule,
			}}},
		}
		if opts.Created != nil {
			opts.Created(node.Name, time.Now())
		}
		if _, err := c.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
			return err
		}
		status := ready
		if opts.NotReady != nil && opts.NotReady(node.Name) {
			status = notReady
		}
		_, err := c.CoreV1().Nodes().Patch(ctx, node.Name, types.StrategicMergePatchType, status, metav1.PatchOptions{}, "status")
		return err
	})
}

// NodeReady reports whether the Node's Ready condition is True.
func NodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// NodeInitialized reports whether the CCM gave the Node its providerID and
// addresses and removed the uninitialized taint.
func NodeInitialized(n *corev1.Node) bool {
	if n.Spec.ProviderID == "" || len(n.Status.Addresses) < 2 {
		return false
	}
	for _, t := range n.Spec.Taints {
		if t.Key == UninitializedTaint {
			return false
		}
	}
	return true
}

// ServingCSR is one simulated kubelet's serving certificate request.
type ServingCSR struct {
	Node, Requester string
	CSR             *certificatesv1.CertificateSigningRequest
	// Valid: mooring should approve it; else Flaw says what is wrong.
	Valid bool
	Flaw  string
}

// MakeServingCSR is node's serving CSR as its kubelet makes it: CN
// system:node:NAME, O system:nodes, its hostname and its internal and
// external addresses as SANs. When i%100 == 50 it is invalid in one of
// three ways (next is another node, whose address it may claim). Its name
// is "serving-NAME".
func MakeServingCSR(node, next *corev1.Node, i int) (ServingCSR, error) {
	r := ServingCSR{Node: node.Name, Requester: "system:node:" + node.Name, Valid: true}
	dns := []string{node.Name}
	var ips []net.IP
	for _, a := range node.Status.Addresses {
		if a.Type == corev1.NodeInternalIP || a.Type == corev1.NodeExternalIP {
			ips = append(ips, net.ParseIP(a.Address))
		}
	}
	if i%100 == 50 {
		r.Valid = false
		switch (i / 100) % 3 {
		case 0:
			r.Flaw = "IP SAN of another machine"
			ips = append(ips, net.ParseIP("127.0.0.1"))
		case 1:
			r.Flaw = "the cluster's own DNS name"
			dns = append(dns, "kubernetes.default.svc")
		case 2:
			// (A CSR for another node's name never gets this far: the
			// apiserver refuses a node's CSR whose CN is not its own.)
			r.Flaw = "an address of another node"
			for _, a := range next.Status.Addresses {
				if a.Type == corev1.NodeInternalIP {
					ips = append(ips, net.ParseIP(a.Address))
				}
			}
		}
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return r, err
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject:     pkix.Name{CommonName: "system:node:" + node.Name, Organization: []string{"system:nodes"}},
		DNSNames:    dns,
		IPAddresses: ips,
	}, key)
	if err != nil {
		return r, err
	}
	r.CSR = &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "serving-" + node.Name},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
			SignerName: certificatesv1.KubeletServingSignerName,
			Usages:     []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth},
		},
	}
	return r, nil
}

// Post creates the CSR as its node (impersonated through an admin client
// such as FastClient): the apiserver fills in spec.username and groups.
func (r ServingCSR) Post(ctx context.Context, admin kubernetes.Interface) error {
	return admin.CertificatesV1().RESTClient().Post().Resource("certificatesigningrequests").
		SetHeader("Impersonate-User", r.Requester).
		SetHeader("Impersonate-Group", "system:nodes", "system:authenticated").
		Body(r.CSR).Do(ctx).Error()
}

// WaitUntil polls cond every 200 ms until it holds, failing t when ctx
// ends first (with cond's last error).
func WaitUntil(ctx context.Context, t testing.TB, what string, cond func() (bool, error)) {
	t.Helper()
	var last error
	for {
		ok, err := cond()
		if ok {
			return
		}
		last = err
		select {
		case <-ctx.Done():
			t.Fatalf("%s: not reached (%v; last error: %v)", what, ctx.Err(), last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}
