package chaos

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"slices"
	"sync"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/mooring-dev/mooring/cloud/local/api"
	"github.com/mooring-dev/mooring/cloud/local/client"
	"github.com/mooring-dev/mooring/test/harness"
)

const (
	shutdownTaint = "node.cloudprovider.kubernetes.io/shutdown"
	// goneBound: a terminated instance's Node is deleted, and a stopped
	// one's tainted, within this long of its kubelet going NotReady: the
	// age mooring-ccm allows its record of an instance (instanceMaxAge,
	// 30 s), the lifecycle period (--node-monitor-period, 5 s), and 10 s
	// for the library's work queue and a loaded machine.
	goneBound = 45 * time.Second
	// goneRecordAge: the approver judges a CSR on a record of the cloud
	// at most this old (--instance-max-age, 10 s), plus a second: a request
	// filed later than this after the termination is judged on a record
	// that shows it.
	goneRecordAge = 11 * time.Second
)

// TestInstanceReallyGone (scenario 3): of the initialized, Ready Nodes
// behind a LoadBalancer Service, a third of the instances are terminated
// and a third stopped; their kubelets stop reporting (the Nodes turn
// NotReady, as kube-controller-manager would mark them). Invariants: each
// terminated instance's Node is deleted within goneBound, its serving CSR
// and its client certificate renewal are denied, and its address leaves
// the load balancer's backends; each stopped instance's Node gets the
// shutdown taint and is not deleted; the others are untouched. The same
// power path with real kubelets under systemd is
// test/e2e TestInstancePowerReachesTheMachine.
func TestInstanceReallyGone(t *testing.T) {
	o := report(t, "3. instance really gone (terminated or stopped)")
	ctx, cancel := context.WithTimeout(context.Background(), span(6*time.Minute, 30*time.Minute))
	defer cancel()
	n := size(6, 300)
	w := newWorld(t, ctx)
	ins := w.createInstances(t, ctx, "node", n)
	names := instanceNames(ins)
	w.registerInitialized(t, ctx, names)
	svc := w.webService(t, ctx)
	addr := map[string]string{} // Node name -> its internal address
	for _, in := range ins {
		addr[in.Name] = in.Addresses[0].Address
	}
	harness.WaitUntil(ctx, t, "the load balancer's backends are every Node", func() (bool, error) {
		b, err := goneBackends(ctx, w.lc.Client)
		return err == nil && len(b) == n, err
	})

	var terminated, stopped, kept []*api.Instance
	for i, in := range ins {
		switch i % 3 {
		case 0:
			terminated = append(terminated, in)
		case 1:
			stopped = append(stopped, in)
		default:
			kept = append(kept, in)
		}
	}
	// Deletions and taints are seen by a watch as they happen (stamped by
	// the watch, not by a poll), each against its own instance's
	// termination or stop.
	var mu sync.Mutex
	deletedAt, taintedAt := map[string]time.Time{}, map[string]time.Time{}
	w.watchNodes(t, ctx, func(n *corev1.Node, gone bool) {
		mu.Lock()
		defer mu.Unlock()
		if _, seen := deletedAt[n.Name]; gone && !seen {
			deletedAt[n.Name] = time.Now()
		}
		if _, seen := taintedAt[n.Name]; !seen && slices.ContainsFunc(n.Spec.Taints, func(tn corev1.Taint) bool { return tn.Key == shutdownTaint }) {
			taintedAt[n.Name] = time.Now()
		}
	})
	offAt := map[string]time.Time{}
	powerOff := append(slices.Clone(terminated), stopped...)
	err := harness.Parallel(ctx, len(powerOff), 16, func(ctx context.Context, i int) error {
		in := powerOff[i]
		var err error
		if i < len(terminated) {
			_, err = w.lc.Client.TerminateInstance(ctx, in.ID)
		} else {
			_, err = w.lc.Client.StopInstance(ctx, in.ID)
		}
		mu.Lock()
		offAt[in.Name] = time.Now()
		mu.Unlock()
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	lastOff := time.Now()
	// The machines are off: their kubelets stop reporting.
	if err := harness.Parallel(ctx, len(powerOff), 16, func(ctx context.Context, i int) error {
		return goneNotReady(ctx, w, powerOff[i].Name)
	}); err != nil {
		t.Fatal(err)
	}
	// What a terminated machine's credentials still ask for, before its
	// Node is gone: a serving certificate and a renewal. (Within the
	// approver's record age of the termination, the record from before it
	// may still be used: docs/reliability.md.)
	time.Sleep(time.Until(lastOff.Add(goneRecordAge)))
	asks := make([]string, 2*len(terminated))
	err = harness.Parallel(ctx, len(terminated), 16, func(ctx context.Context, i int) error {
		in := terminated[i]
		// The kubelet's request names the addresses it had.
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: in.Name}}
		for _, a := range in.Addresses {
			node.Status.Addresses = append(node.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeAddressType(a.Type), Address: a.Address})
		}
		r, err := harness.MakeServingCSR(node, node, 0)
		if err != nil {
			return err
		}
		r.CSR.Name = "serving-gone-" + in.Name
		if err := r.Post(ctx, w.fast); err != nil {
			return err
		}
		renewal, err := goneRenewal(ctx, w, in.Name)
		asks[2*i], asks[2*i+1] = r.CSR.Name, renewal
		return err
	})
	if err != nil {
		t.Fatal(err)
	}

	var backendsGone time.Duration
	harness.WaitUntil(ctx, t, "terminated Nodes deleted, stopped ones tainted, backends updated", func() (bool, error) {
		if backendsGone == 0 {
			b, err := goneBackends(ctx, w.lc.Client)
			if err != nil {
				return false, err
			}
			clean := true
			for _, in := range terminated {
				if b[addr[in.Name]] {
					clean = false
				}
			}
			if clean {
				backendsGone = time.Since(lastOff)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		done := backendsGone > 0
		for _, in := range terminated {
			_, ok := deletedAt[in.Name]
			done = done && ok
		}
		for _, in := range stopped {
			_, ok := taintedAt[in.Name]
			done = done && ok
		}
		return done, nil
	})
	mu.Lock()
	deleted, tainted := map[string]time.Duration{}, map[string]time.Duration{}
	for _, in := range terminated {
		deleted[in.Name] = deletedAt[in.Name].Sub(offAt[in.Name])
	}
	for _, in := range stopped {
		tainted[in.Name] = taintedAt[in.Name].Sub(offAt[in.Name])
	}
	mu.Unlock()
	worst := func(m map[string]time.Duration) (d time.Duration) {
		for _, v := range m {
			d = max(d, v)
		}
		return d
	}
	if d := worst(deleted); d > goneBound {
		t.Errorf("terminated instances' Nodes deleted after up to %v, more than %v: %v", d, goneBound, deleted)
	}
	if d := worst(tainted); d > goneBound {
		t.Errorf("stopped instances' Nodes tainted after up to %v, more than %v: %v", d, goneBound, tainted)
	}
	o.check("every terminated instance's Node deleted within %v", goneBound)
	o.check("every stopped instance's Node tainted %s within %v", shutdownTaint, goneBound)
	o.figure(t, "Node deleted after termination", "max %.1f s (%d Nodes)", worst(deleted).Seconds(), len(deleted))
	o.figure(t, "shutdown taint after stop", "max %.1f s (%d Nodes)", worst(tainted).Seconds(), len(tainted))
	o.figure(t, "terminated instances out of the load balancer", "%.1f s after the last termination", backendsGone.Seconds())
	o.check("terminated instances' addresses leave the load balancer's backends")

	harness.WaitUntil(ctx, t, "the terminated machines' requests decided", func() (bool, error) { return w.allDecided(ctx, asks) })
	d, err := w.csrDecisions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range asks {
		if !d[name].denied || d[name].approved {
			t.Errorf("%s of a terminated instance: %+v, want denied", name, d[name])
		}
	}
	o.check("serving CSRs and renewals of terminated instances, filed %v after the termination, denied (%d)", goneRecordAge, len(asks))

	// Another lifecycle period: stopped and kept Nodes are still there,
	// kept ones still behind the load balancer.
	time.Sleep(10 * time.Second)
	var stay []string
	for _, in := range append(slices.Clone(stopped), kept...) {
		stay = append(stay, in.Name)
	}
	if missing, err := w.missingNodes(ctx, stay); err != nil || len(missing) > 0 {
		t.Errorf("Nodes of stopped or running instances deleted: %v (%v)", missing, err)
	}
	b, err := goneBackends(ctx, w.lc.Client)
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range kept {
		if !b[addr[in.Name]] {
			t.Errorf("%s (running) is no longer a backend of %s: %v", in.Name, svc.Name, b)
		}
	}
	o.check("stopped instances' Nodes not deleted; running ones untouched and still backends")
}

// goneBackends is the set of backend addresses of the cluster's load
// balancers.
func goneBackends(ctx context.Context, c *client.Client) (map[string]bool, error) {
	lbs, err := c.ListAllLoadBalancers(ctx, client.ListOptions{Cluster: chaosCluster})
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, lb := range lbs {
		for _, l := range lb.Listeners {
			for _, b := range l.Backends {
				out[b.Address] = true
			}
		}
	}
	return out, nil
}

// goneNotReady marks a Node NotReady, as kube-controller-manager does when
// its kubelet stops reporting.
func goneNotReady(ctx context.Context, w *world, name string) error {
	patch := []byte(`{"status":{"conditions":[{"type":"Ready","status":"Unknown","reason":"NodeStatusUnknown","message":"Kubelet stopped posting node status."}]}}`)
	_, err := w.fast.CoreV1().Nodes().Patch(ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	return err
}

// goneRenewal files a client certificate renewal as the node itself (its
// current credentials, impersonated) and returns the CSR's name.
func goneRenewal(ctx context.Context, w *world, node string) (string, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", err
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: "system:node:" + node, Organization: []string{"system:nodes"}},
	}, key)
	if err != nil {
		return "", err
	}
	name := "renewal-gone-" + node
	csr := &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
			SignerName: certificatesv1.KubeAPIServerClientKubeletSignerName,
			Usages:     []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth},
		},
	}
	err = w.fast.CertificatesV1().RESTClient().Post().Resource("certificatesigningrequests").
		SetHeader("Impersonate-User", "system:node:"+node).
		SetHeader("Impersonate-Group", "system:nodes", "system:authenticated").
		Body(csr).Do(ctx).Error()
	return name, err
}
