package e2e

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/mooring-dev/mooring/cloud/cloudtest/conformance"
	"github.com/mooring-dev/mooring/cloud/oci"
	"github.com/mooring-dev/mooring/cloud/oci/ocitest"
	"github.com/mooring-dev/mooring/test/harness"
	"github.com/mooring-dev/mooring/test/testbed"
)

// OCI's face of testCloudLB (TestSignedClouds/OCI): flexible Load
// Balancers through ocitest's Load Balancer API, the LB subnet and the
// nodes' subnet each with a security list, which the LBs' default rule
// mode (All) writes through the endpoint's Virtual Network.

// The subnets of the OCI face's load balancers and nodes.
const (
	ociLBSubnet   = "ocid1.subnet.oc1.iad.aaaaaaaae2elbsubnet"
	ociNodeSubnet = "ocid1.subnet.oc1.iad.aaaaaaaae2enodesubnet"
)

// ociLBConfig is the cloud config's load balancer block of the face.
var ociLBConfig = "loadBalancer:\n  subnet1: " + ociLBSubnet + "\n  nodeSubnets: [" + ociNodeSubnet + "]\n  workRequestWait: 20s\n"

// ociLBCCMArgs are mooring-ccm's flags for the face.
var ociLBCCMArgs = []string{"--load-balancer-node-batch=" + lbNodeBatch.String()}

// ociLB is the face over o: the subnets and their security lists made.
// The legacy load balancer of OCI's CCM is named by its Service's UID,
// which exists only once the Service does: it is made under another name,
// its Service created with an ingress-ip-mode mooring refuses (so that
// mooring makes none of its own), then renamed to the UID and the
// annotation dropped, and mooring adopts it by its name.
func ociLB(t *testing.T, o *harness.OCICloud, c *testbed.Cluster) *lbFace {
	lbList := o.PutSecurityList(ocitest.SecurityList{DisplayName: "e2e-lb"})
	nodeList := o.PutSecurityList(ocitest.SecurityList{DisplayName: "e2e-nodes"})
	o.PutSubnet(ocitest.Subnet{ID: ociLBSubnet, CIDR: ocitest.DataPlanePrefix.String(), SecurityLists: []string{lbList.ID}})
	o.PutSubnet(ocitest.Subnet{ID: ociNodeSubnet, CIDR: harness.OCIPrivateNet + "0/24", SecurityLists: []string{nodeList.ID}})
	of := func(b ocitest.Balancer) conformance.LB {
		out := conformance.LB{ID: b.ID, Name: b.DisplayName, IP: b.IP}
		targets := map[string]bool{}
		for _, l := range b.Listeners {
			out.Ports = append(out.Ports, int32(l.Port))
			for _, be := range b.BackendSets[l.BackendSet].Backends {
				targets[be.IP] = true
			}
		}
		slices.Sort(out.Ports)
		out.Targets = len(targets)
		return out
	}
	writes := []string{ocitest.MethodCreateLB, ocitest.MethodUpdateLB, ocitest.MethodUpdateLBShape, ocitest.MethodUpdateLBNSGs,
		ocitest.MethodCreateLBSet, ocitest.MethodUpdateLBSet, ocitest.MethodDeleteLBSet, ocitest.MethodCreateLBListen,
		ocitest.MethodUpdateLBListen, ocitest.MethodDeleteLBListen, ocitest.MethodDeleteLB}
	return &lbFace{
		list: func() []conformance.LB { return lbsOf(o.Balancers(), of) },
		legacy: func(t *testing.T, name string, port, nodePort int32, nodes []*corev1.Node) (conformance.LB, map[string]string) {
			b := ocitest.Balancer{Kind: ocitest.KindLB, DisplayName: "pending-" + name, Shape: "flexible", FlexMin: 10, FlexMax: 100,
				Subnets: []string{ociLBSubnet}, Listeners: map[string]ocitest.Listener{}, BackendSets: map[string]ocitest.BackendSet{}}
			set := ocitest.BackendSet{Name: fmt.Sprintf("TCP-%d", port), Policy: "ROUND_ROBIN", Check: ocitest.HealthCheck{Protocol: "HTTP",
				Path: "/healthz", Port: 10256, ReturnCode: 200, Retries: 3, TimeoutMs: 3000, Interval: 10000}}
			for _, n := range nodes {
				set.Backends = append(set.Backends, ocitest.Backend{IP: nodeInternalIP(n), Port: int(nodePort), Weight: 1})
			}
			b.BackendSets[set.Name] = set
			b.Listeners[set.Name] = ocitest.Listener{Name: set.Name, Protocol: "TCP", BackendSet: set.Name, Port: int(port)}
			made, err := o.PutBalancer(b)
			if err != nil {
				t.Fatal(err)
			}
			go ociRename(t, o, c, name, made.ID)
			return of(made), map[string]string{oci.AnnIPMode: "held-for-the-test"}
		},
		// Checked every second (the data plane's checks come at most every 2 s).
		serviceAnnotations: map[string]string{oci.AnnLBInterval: "1000"},
		annotations:        map[string]string{oci.AnnPolicy: "LEAST_CONNECTIONS"},
		applied: func(_ *testing.T, id string) bool {
			b, ok := o.Balancer(id)
			if !ok {
				return false
			}
			for _, s := range b.BackendSets {
				if s.Policy != "LEAST_CONNECTIONS" {
					return false
				}
			}
			return len(b.BackendSets) > 0
		},
		updates: func() int {
			n := 0
			for _, m := range writes {
				n += o.Calls(m)
			}
			return n
		},
		// A backend set's update per port.
		perBatch: 2,
	}
}

// ociRename waits for the Service name, renames the load balancer id to
// its UID (as OCI's CCM names it) and drops the annotation that held
// mooring back.
func ociRename(t *testing.T, o *harness.OCICloud, c *testbed.Cluster, name, id string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for ctx.Err() == nil {
		svc, err := c.Client.CoreV1().Services("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		b, ok := o.Balancer(id)
		if !ok {
			t.Errorf("the legacy load balancer %s is gone", id)
			return
		}
		b.DisplayName = string(svc.UID)
		if _, err := o.PutBalancer(b); err != nil {
			t.Error(err)
			return
		}
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:null}}}`, oci.AnnIPMode)
		if _, err := c.Client.CoreV1().Services("default").Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Error(err)
		}
		return
	}
	t.Errorf("no Service %s to name the legacy load balancer after", name)
}
