package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"reflect"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mooring-dev/mooring/cloud/local/attest"
	"github.com/mooring-dev/mooring/cloud/local/client"
	"github.com/mooring-dev/mooring/internal/evidence"
	"github.com/mooring-dev/mooring/test/harness"
)

// TestLocalCloudKill9 (scenario 5): the local cloud dies by kill -9 while
// it serves a cluster (instances, a load balancer carrying traffic, signing
// keys) and machines hold identity tokens they have not presented yet; it
// is started again with the same command line. Invariants: its instances,
// load balancers and signing keys are as before; the load balancer's VIP
// forwards again; the tokens issued before the crash are accepted after it
// (the joins that carry them are approved); no Node is deleted.
func TestLocalCloudKill9(t *testing.T) {
	o := report(t, "5. local cloud kill -9")
	ctx, cancel := context.WithTimeout(context.Background(), span(6*time.Minute, 30*time.Minute))
	defer cancel()
	n, joiners := size(5, 200), size(3, 20)
	w := newWorld(t, ctx)
	ins := w.createInstances(t, ctx, "node", n)
	names := instanceNames(ins)
	w.registerInitialized(t, ctx, names)
	vip := crashServe(t, ctx, w, ins[0].Addresses[0].Address)

	// Machines that fetched their identity token and have not filed their
	// CSR yet when the cloud dies.
	pending := w.createInstances(t, ctx, "join", joiners)
	var (
		fetched sync.WaitGroup
		release = make(chan struct{})
		joined  = make([]string, joiners)
		errs    = make(chan error, joiners)
		all     sync.WaitGroup
	)
	for i, in := range pending {
		fetched.Add(1)
		all.Go(func() {
			j, err := harness.JoinWith(ctx, w.c, in.Name, func(binding string) ([]evidence.Block, error) {
				tok, err := client.NewMetadata(in.MetadataURL, nil).IdentityToken(ctx, binding)
				fetched.Done()
				if err != nil {
					return nil, err
				}
				<-release
				return []evidence.Block{{Type: attest.Type, Data: []byte(tok)}}, nil
			})
			if err != nil {
				errs <- fmt.Errorf("join of %s: %w", in.Name, err)
				return
			}
			joined[i] = j.Name
		})
	}
	fetched.Wait()

	before := crashState(t, ctx, w.lc.Client)
	killed := time.Now()
	if err := w.lc.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := w.lc.Start(); err != nil {
		t.Fatal(err)
	}
	o.figure(t, "kill -9 to API answering again", "%.2f s", time.Since(killed).Seconds())
	after := crashState(t, ctx, w.lc.Client)
	if !reflect.DeepEqual(before.instances, after.instances) {
		t.Errorf("instances changed across the crash:\nbefore %v\nafter  %v", before.instances, after.instances)
	}
	if !reflect.DeepEqual(before.lbs, after.lbs) {
		t.Errorf("load balancers changed across the crash:\nbefore %v\nafter  %v", before.lbs, after.lbs)
	}
	for _, kid := range before.kids {
		if !slices.Contains(after.kids, kid) {
			t.Errorf("signing key %s lost in the crash (after: %v)", kid, after.kids)
		}
	}
	o.check("instances (%d), load balancers (%d) and signing keys (%d) as before", len(before.instances), len(before.lbs), len(before.kids))
	harness.WaitUntil(ctx, t, "the VIP forwards again", func() (bool, error) {
		return crashThrough(vip) == "served by "+ins[0].Name, nil
	})
	o.figure(t, "kill -9 to the VIP forwarding again", "%.2f s", time.Since(killed).Seconds())
	o.check("the load balancer's VIP forwards again")

	close(release)
	all.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for _, name := range joined {
		csr, err := harness.WaitForDecision(ctx, w.c.Client, name)
		if err != nil {
			t.Fatal(err)
		}
		if c := harness.Condition(csr, "Approved"); c == nil || c.Reason != "MooringApproved" {
			t.Errorf("join %s with a token issued before the crash: %+v", name, csr.Status.Conditions)
		}
	}
	o.figure(t, "kill -9 to the joins with pre-crash tokens approved", "%.2f s (%d joins)", time.Since(killed).Seconds(), len(joined))
	o.check("identity tokens issued before the crash accepted after it (%d joins approved)", len(joined))
	if missing, err := w.missingNodes(ctx, names); err != nil || len(missing) > 0 {
		t.Errorf("Nodes deleted: %v (%v)", missing, err)
	}
	if done, err := w.ccm.Exited(); done {
		t.Errorf("mooring-ccm exited: %v", err)
	}
	o.check("no Node deleted; mooring-ccm kept running")
}

// crashSnapshot is what the cloud holds, comparable across a restart.
type crashSnapshot struct {
	instances []string
	lbs       []string
	kids      []string
}

func crashState(t *testing.T, ctx context.Context, c *client.Client) crashSnapshot {
	t.Helper()
	var s crashSnapshot
	ins, err := c.ListAllInstances(ctx, client.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range ins {
		s.instances = append(s.instances, fmt.Sprintf("%s %s %s %s %v %s", in.ID, in.Name, in.State, in.Zone, in.Addresses, in.MetadataURL))
	}
	lbs, err := c.ListAllLoadBalancers(ctx, client.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, lb := range lbs {
		var ls []string
		for _, l := range lb.Listeners {
			var bs []string
			for _, b := range l.Backends {
				bs = append(bs, net.JoinHostPort(b.Address, strconv.Itoa(b.Port)))
			}
			slices.Sort(bs)
			ls = append(ls, fmt.Sprintf("%d/%s->%v", l.Port, l.Protocol, bs))
		}
		s.lbs = append(s.lbs, fmt.Sprintf("%s %s %v", lb.Name, lb.VIP, ls))
	}
	data, err := c.JWKS(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var set struct {
		Keys []struct {
			Kid string `json:"kid"`
		} `json:"keys"`
	}
	if err := json.Unmarshal(data, &set); err != nil {
		t.Fatalf("the cloud's key set: %v", err)
	}
	for _, k := range set.Keys {
		s.kids = append(s.kids, k.Kid)
	}
	slices.Sort(s.instances)
	slices.Sort(s.lbs)
	return s
}

// crashServe creates a LoadBalancer Service whose "pod" answers on the
// given Node address at the node port, and returns its VIP once traffic
// goes through.
func crashServe(t *testing.T, ctx context.Context, w *world, addr string) string {
	t.Helper()
	svc := w.webService(t, ctx)
	ln, err := net.Listen("tcp", net.JoinHostPort(addr, strconv.Itoa(int(svc.Spec.Ports[0].NodePort))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	node, err := w.c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	name := ""
	for _, n := range node.Items {
		for _, a := range n.Status.Addresses {
			if a.Address == addr {
				name = n.Name
			}
		}
	}
	harness.ServeLine(ln, "served by "+name)
	var vip string
	harness.WaitUntil(ctx, t, "the Service's VIP carries traffic", func() (bool, error) {
		s, err := w.c.Client.CoreV1().Services("default").Get(ctx, "web", metav1.GetOptions{})
		if err != nil || len(s.Status.LoadBalancer.Ingress) == 0 {
			return false, err
		}
		vip = s.Status.LoadBalancer.Ingress[0].IP
		return crashThrough(vip) == "served by "+name, nil
	})
	return vip
}

// crashThrough is the first line a connection to the VIP's port 80 reads.
func crashThrough(vip string) string { return harness.FirstLine(net.JoinHostPort(vip, "80")) }
