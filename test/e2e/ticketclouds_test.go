package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/mooring-dev/mooring/cloud/digitalocean/digitaloceantest"
	"github.com/mooring-dev/mooring/cloud/hetzner/hetznertest"
	"github.com/mooring-dev/mooring/cloud/linode/linodetest"
	"github.com/mooring-dev/mooring/cloud/openstack/openstacktest"
	"github.com/mooring-dev/mooring/cloud/vsphere/vspheretest"
	"github.com/mooring-dev/mooring/internal/csrreason"
	"github.com/mooring-dev/mooring/internal/evidence"
	"github.com/mooring-dev/mooring/internal/ticket"
	"github.com/mooring-dev/mooring/test/harness"
	"github.com/mooring-dev/mooring/test/testbed"
)

// TestTicketClouds: mooring on each cloud that signs no instance identity,
// whose machines join with join tickets (docs/tickets.md), against the
// cloud's compatible endpoint on loopback with the cloud's real client
// library in every binary, one subtest per cloud on one bed: the control
// plane outlives each cloud; the cloud's mooring-ccm, approver, machines
// and Nodes do not. In each, three machines are provisioned as an admin
// would (a join ticket for the name, then the instance, the ticket in its
// user data); each mooring-agent reads the cloud's metadata (or its
// SMBIOS, or its config drive) and presents the ticket; the approver
// (mooring-csr-approver with --ticket-keys-file, or mooring-ccm's own with
// --csr-approver-ticket-keys-file) checks it against the cloud's record of
// the instance (the one instance of that name, in the cluster, running,
// created within the ticket's life, whose node name is the CSR's);
// mooring-ccm initializes the Nodes as the cloud's own CCM would; serving
// certificates are approved. Then attacks on that record are denied, each
// with its reason, and a good ticket passes; and a node's serving
// certificate for another instance's address is denied. Attacks on the ticket itself
// (forged, expired, of another cluster, replayed, spent) are decided
// before any cloud is asked: csrapprover's adversarial suite (its ticket/
// cases) and TestTicketJoinOnLocalCloud hold them.
func TestTicketClouds(t *testing.T) {
	bins := ticketBins{
		agent:    harness.BuildBinary(t, "agent/cmd/mooring-agent"),
		ccm:      harness.BuildBinary(t, "ccm/cmd/mooring-ccm"),
		approver: harness.BuildBinary(t, "csrapprover/cmd/mooring-csr-approver"),
	}
	c := testbed.Start(t, testbed.Options{RBAC: testbed.BootstrapRBAC{MooringApproves: true}})
	for _, tc := range ticketClouds {
		t.Run(tc.name, func(t *testing.T) { runTicketCloud(t, c, bins, tc) })
	}
}

type ticketBins struct{ agent, ccm, approver string }

// ticketCloud is one cloud of TestTicketClouds.
type ticketCloud struct {
	name string
	// machines prefixes the fleet's names (<machines>-1..3).
	machines string
	// noun is the cloud's word for an instance, in the attacks' names.
	noun string
	// ccmApproves: the machines join through mooring-ccm's own approver
	// (--controllers=*,csr-approver), without mooring-csr-approver.
	ccmApproves bool
	// otherCluster says how an instance of another cluster is marked;
	// unmarked, how one of no cluster is ("": the cloud has no such
	// instance apart from one of another cluster).
	otherCluster, unmarked string
	// notRunning are states, in the endpoint's words, in which an
	// instance may not join.
	notRunning []string
	start      func(t *testing.T, tickets *harness.TicketIssuer) *cloudRecord
}

// cloudRecord is a started cloud: its test endpoint, as the driver makes
// and reads instances there.
type cloudRecord struct {
	provisioningCloud
	// add makes an instance in the cloud's record.
	add func(t *testing.T, in recordInstance)
	// checkNode checks a machine's initialized Node as the cloud's CCM
	// makes it, against the cloud's record.
	checkNode func(t *testing.T, m *harness.Machine, node *corev1.Node)
	// calls are the endpoint's call counts, for the log (nil: it counts
	// none).
	calls func() string
	// ccmArgs are mooring-ccm's flags of this cloud.
	ccmArgs []string
	// lb is the cloud's load balancers, where mooring makes them: the
	// driver runs testCloudLB once the machines joined.
	lb *lbFace
	// routes, where mooring-ccm routes the pod ranges, checks it.
	routes func(ctx context.Context, t *testing.T, c *testbed.Cluster, names []string)
	// joined runs once the machines joined, beforeAttacks once the
	// attacks' instances are made, attacked after the attacks (checks of
	// the endpoint, or a change of it); each may be nil.
	joined, beforeAttacks, attacked func(t *testing.T)
}

// recordInstance is an instance an attack makes.
type recordInstance struct {
	name string
	// cluster the instance is a member of ("": none).
	cluster string
	// created is its creation time (zero: now), state its state in the
	// endpoint's words ("": running).
	created time.Time
	state   string
}

var ticketClouds = []ticketCloud{
	{name: "DigitalOcean", machines: "droplet", noun: "droplet", start: startDigitalOcean,
		otherCluster: "tagged k8s:another-cluster", unmarked: "without the cluster tag",
		notRunning: []string{digitaloceantest.StatusOff}},
	// The provider's Attester has no evidence verifiers of its own: the
	// CCM adds the ticket verifier as mooring-csr-approver does.
	{name: "DigitalOceanThroughCCM", machines: "ccm", noun: "droplet", start: startDigitalOcean, ccmApproves: true,
		otherCluster: "tagged k8s:another-cluster", unmarked: "without the cluster tag",
		notRunning: []string{digitaloceantest.StatusOff}},
	{name: "Hetzner", machines: "hcloud", noun: "server", start: startHetzner,
		otherCluster: "labelled as another cluster's", unmarked: "without the cluster label",
		notRunning: []string{"off"}},
	{name: "Linode", machines: "linode", noun: "Linode", start: startLinode,
		otherCluster: "tagged k8s:another-cluster", unmarked: "without the cluster tag",
		notRunning: []string{linodetest.StatusOffline, linodetest.StatusProvisioning}},
	{name: "vSphere", machines: "vm", noun: "VM", start: startVSphere,
		otherCluster: "outside the cluster's folder", notRunning: []string{vsphereOff}},
	{name: "OpenStack", machines: "nova", noun: "server", start: startOpenStack,
		otherCluster: "tagged as another cluster's", unmarked: "without the cluster tag",
		notRunning: []string{openstacktest.StatusBuild, openstacktest.StatusShutoff}},
}

// runTicketCloud joins three machines on the cloud, checks their Nodes
// and runs the attacks on the cloud's record.
func runTicketCloud(t *testing.T, c *testbed.Cluster, bins ticketBins, tc ticketCloud) {
	tickets := harness.NewTicketIssuer(t)
	cloud := tc.start(t, tickets)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	names := []string{tc.machines + "-1", tc.machines + "-2", tc.machines + "-3"}
	// The bed outlives the cloud: once the fleet stopped (cleanups run
	// last-in first-out), the cloud's components stop and their leases
	// go, so that the next cloud's take over at once, and so do its Nodes.
	var procs []*testbed.Process
	t.Cleanup(func() {
		for _, p := range procs {
			if err := p.Stop(10 * time.Second); err != nil {
				t.Error(err)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, lease := range []string{"cloud-controller-manager", "mooring-csr-approver"} {
			if err := c.Client.CoordinationV1().Leases("kube-system").Delete(ctx, lease, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				t.Error(err)
			}
		}
		for _, n := range names {
			if err := c.Client.CoreV1().Nodes().Delete(ctx, n, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				t.Error(err)
			}
		}
	})
	if tc.ccmApproves {
		for _, f := range []string{"deploy/csrapprover/role/clusterrole.yaml", "deploy/base/ccm-csrapprover-binding.yaml"} {
			if err := c.Apply(ctx, filepath.Join(harness.RepoRoot(), f)); err != nil {
				t.Fatal(err)
			}
		}
		procs = append(procs, harness.StartCCM(t, c, bins.ccm, cloud, harness.CCMOptions{Cluster: e2eCluster,
			Args: append([]string{"--controllers=*,csr-approver", "--v=2"}, tickets.CCMArgs()...)}))
	} else {
		procs = append(procs, harness.StartCCM(t, c, bins.ccm, cloud, harness.CCMOptions{Cluster: e2eCluster,
			Args: append(append([]string{"--v=2", "--load-balancer-node-batch=" + lbNodeBatch.String()}, cloud.ccmArgs...), tickets.CCMArgs()...)}))
		procs = append(procs, harness.StartApprover(t, c, bins.approver, cloud, e2eCluster, tickets.ApproverArgs()...).Process)
	}

	start := time.Now()
	fleet := harness.StartFleet(ctx, t, c, nil, harness.FleetOptions{
		Names: names, Cluster: e2eCluster, AgentBin: bins.agent, Provision: cloud.Provisioner(e2eCluster),
	})
	for _, m := range fleet.Machines {
		if code, err := m.Agent.Wait(3 * time.Minute); err != nil || code != 0 {
			t.Fatalf("agent of %s: exit %d, %v\n%s", m.Name, code, err, m.Agent.LogTail(30))
		}
	}
	t.Logf("3 agents joined their %ss and started the kubelets in %v", tc.noun, time.Since(start).Round(time.Millisecond))
	for _, m := range fleet.Machines {
		cloud.checkNode(t, m, waitInitialized(ctx, t, c, m.Name))
		if approval := clientApproval(ctx, t, c, m.Name); !strings.Contains(approval, "join ticket") {
			t.Errorf("%s: client CSR approved with %q", m.Name, approval)
		}
		servingApprovedByMooring(ctx, t, c, m.Name)
	}
	t.Logf("3 nodes Ready, initialized with %s providerIDs, serving certificates approved, %v after the agents started",
		cloud.ProviderName(), time.Since(start).Round(time.Millisecond))
	if cloud.calls != nil {
		t.Logf("cloud calls: %s", cloud.calls())
	}
	if cloud.joined != nil {
		cloud.joined(t)
	}
	if cloud.lb != nil && !tc.ccmApproves {
		testCloudLB(ctx, t, c, names, cloud.lb)
	}
	if cloud.routes != nil {
		cloud.routes(ctx, t, c, names)
	}

	runAttacksAtOnce(ctx, t, c, recordAttacks(t, tc, cloud, tickets))
	servingForAnotherAddress(ctx, t, c, fleet)
	if cloud.calls != nil {
		t.Logf("cloud calls after the attacks: %s", cloud.calls())
	}
	if cloud.attacked != nil {
		cloud.attacked(t)
	}
}

// recordAttacks makes the instances of the attacks on the cloud's record,
// each with a valid ticket of its own, and returns the attacks: each is
// denied with its reason, and the last, a good ticket, passes.
func recordAttacks(t *testing.T, tc ticketCloud, cloud *cloudRecord, tickets *harness.TicketIssuer) []attack {
	t.Helper()
	now := time.Now()
	issue := func(name string, iat time.Time, life time.Duration) string {
		t.Helper()
		tok, err := tickets.IssueAt(name, e2eCluster, iat, life)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	var attacks []attack
	// deny files node's CSR with a ticket for name issued at iat for life,
	// after the instances are made.
	deny := func(what, node, name string, iat time.Time, life time.Duration, want string, ins ...recordInstance) {
		tok := issue(name, iat, life)
		for _, in := range ins {
			cloud.add(t, in)
		}
		attacks = append(attacks, attack{what, node, withTicket(tok), want})
	}
	n := tc.noun
	of := func(name string) recordInstance { return recordInstance{name: name, cluster: e2eCluster} }
	// Made ten minutes before its ticket: an existing instance of the name.
	deny("a "+n+" created before its ticket was issued", "early", "early", now, 0, csrreason.InstanceCreatedOutsideTicket,
		recordInstance{name: "early", cluster: e2eCluster, created: now.Add(-10 * time.Minute)})
	// The cloud says it was made after the ticket expired (its clock ahead).
	deny("a "+n+" created after its ticket expired", "after", "after", now.Add(-5*time.Minute), 10*time.Minute,
		csrreason.InstanceCreatedOutsideTicket, recordInstance{name: "after", cluster: e2eCluster, created: now.Add(15 * time.Minute)})
	// Two of one name (some clouds keep names unique, the approver does not
	// rely on it).
	deny("two "+n+"s of the ticket's name", "twin", "twin", now, 0, csrreason.InstanceNameAmbiguous, of("twin"), of("twin"))
	deny(fmt.Sprintf("a %s of another cluster (%s)", n, tc.otherCluster), "foreign", "foreign", now, 0, csrreason.InstanceNotInCluster,
		recordInstance{name: "foreign", cluster: "another-cluster"})
	if tc.unmarked != "" {
		deny("a "+n+" "+tc.unmarked, "unmarked", "unmarked", now, 0, csrreason.InstanceNotInCluster, recordInstance{name: "unmarked"})
	}
	for _, s := range tc.notRunning {
		name := strings.ToLower(s)
		deny(fmt.Sprintf("a %s in state %s", n, s), name, name, now, 0, csrreason.InstanceNotRunning,
			recordInstance{name: name, cluster: e2eCluster, state: s})
	}
	// Another instance's ticket, for the name the cloud's record gives it.
	deny("another "+n+"'s ticket (victim's, filed as thief)", "thief", "victim", now, 0, csrreason.NodeNameMismatch, of("victim"), of("thief"))
	deny("a good ticket", "good", "good", now, 0, "", of("good"))
	if cloud.beforeAttacks != nil {
		cloud.beforeAttacks(t)
	}
	return attacks
}

// runAttacksAtOnce is runAttacks with the attacks filed one after another
// without waiting, then decided side by side: they are independent (each
// its own instance, ticket and key), and the lookups of names the cloud's
// record lacks share the approver's next List of the cloud, instead of
// each waiting in turn for the spacing of such Lists (cloud/view), 2 s a
// miss. Each decision is checked as runAttacks checks it, in order.
func runAttacksAtOnce(ctx context.Context, t *testing.T, c *testbed.Cluster, attacks []attack) {
	t.Helper()
	type result struct {
		decided *certificatesv1.CertificateSigningRequest
		took    time.Duration
		err     error
	}
	results := make([]result, len(attacks))
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	for i, a := range attacks {
		began := time.Now()
		req, err := harness.JoinWith(ctx, c, a.node, func(binding string) ([]evidence.Block, error) { return a.evidence(binding), nil })
		if err != nil {
			t.Fatalf("%s: %v", a.name, err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			decided, err := harness.WaitForDecision(ctx, c.Client, req.Name)
			results[i] = result{decided, time.Since(began), err}
		}()
	}
	wg.Wait()
	for i, a := range attacks {
		r := results[i]
		if r.err != nil {
			t.Fatalf("%s: %v", a.name, r.err)
		}
		approved := harness.Condition(r.decided, certificatesv1.CertificateApproved)
		denied := harness.Condition(r.decided, certificatesv1.CertificateDenied)
		switch {
		case a.want == "" && approved == nil:
			t.Errorf("%s: not approved: %+v", a.name, r.decided.Status.Conditions)
		case a.want != "" && (denied == nil || denied.Reason != a.want):
			t.Errorf("%s: want denied %s, got %+v", a.name, a.want, r.decided.Status.Conditions)
		default:
			t.Logf("%s: %s in %v: %s", a.name, r.decided.Status.Conditions[0].Reason, r.took.Round(time.Millisecond),
				r.decided.Status.Conditions[0].Message)
		}
	}
}

// servingForAnotherAddress has the first machine's kubelet ask for a
// serving certificate for the second machine's InternalIP beside its own
// name: the approver denies it, the address not being the instance's in
// the cloud's record.
func servingForAnotherAddress(ctx context.Context, t *testing.T, c *testbed.Cluster, fleet *harness.Fleet) {
	t.Helper()
	m, other := fleet.Machines[0], fleet.Machines[1]
	node, err := c.Client.CoreV1().Nodes().Get(ctx, other.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var ip net.IP
	for _, a := range node.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			ip = net.ParseIP(a.Address)
		}
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", m.Node.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	asNode, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	name := "serving-" + m.Name + "-for-" + other.Name
	req := request(t, csrDER(t, newKey(t), csrFields{node: m.Name, dns: []string{m.Name}, ips: []net.IP{ip}}))
	usages := []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth}
	if err := fileCSR(ctx, asNode, name, certificatesv1.KubeletServingSignerName, usages, req); err != nil {
		t.Fatal(err)
	}
	decided, err := decision(ctx, c.Client, name)
	if err != nil {
		t.Fatal(err)
	}
	if cond := harness.Condition(decided, certificatesv1.CertificateDenied); cond == nil || cond.Reason != csrreason.SANNotOfInstance {
		t.Fatalf("%s's serving CSR for %s's address %s: want denied %s, got %+v", m.Name, other.Name, ip, csrreason.SANNotOfInstance, decided.Status.Conditions)
	} else {
		t.Logf("%s's serving CSR for %s's address %s: %s: %s", m.Name, other.Name, ip, cond.Reason, cond.Message)
	}
}

// withTicket is the evidence of a join with the ticket tok.
func withTicket(tok string) func(string) []evidence.Block {
	return func(string) []evidence.Block {
		return []evidence.Block{{Type: ticket.BlockType, Data: []byte(strings.TrimSpace(tok))}}
	}
}

// checkAddresses checks a Node's addresses, in order, and that the cloud's
// record holds the test's loopback addresses.
func checkAddresses(t *testing.T, node *corev1.Node, want []corev1.NodeAddress, prefixes ...string) {
	t.Helper()
	if !sameAddresses(node.Status.Addresses, want) {
		t.Fatalf("%s: addresses %v, want %v", node.Name, node.Status.Addresses, want)
	}
	for i, p := range prefixes {
		if a := want[i+1].Address; !strings.HasPrefix(a, p) {
			t.Fatalf("%s: address %s, want one of %s*", node.Name, a, p)
		}
	}
}

// sameAddresses: the same addresses, in the same order (the kubelet may
// add none: it runs with --cloud-provider=external and no --node-ip here).
func sameAddresses(got, want []corev1.NodeAddress) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if got[i] != want[i] {
			return false
		}
	}
	return true
}

func startDigitalOcean(t *testing.T, tickets *harness.TicketIssuer) *cloudRecord {
	do := harness.StartDigitalOceanCloud(t, tickets)
	return &cloudRecord{provisioningCloud: do,
		add: func(_ *testing.T, in recordInstance) {
			tags := []string{"web"}
			if in.cluster != "" {
				tags = []string{do.ClusterTag(in.cluster)}
			}
			do.AddDroplet(in.name, tags, func(d *digitaloceantest.Droplet) { d.Created, d.Status = in.created, in.state })
		},
		// As DigitalOcean's CCM: the region and size labels, no zone, the
		// private address first.
		checkNode: func(t *testing.T, m *harness.Machine, node *corev1.Node) {
			var d digitaloceantest.Droplet
			for _, dr := range do.Droplets() {
				if dr.Name == m.Name {
					d = dr
				}
			}
			wantPID := "digitalocean://" + strconv.Itoa(d.ID)
			if d.ID == 0 || node.Spec.ProviderID != wantPID || node.Labels[corev1.LabelTopologyRegion] != digitaloceantest.DefaultRegion ||
				node.Labels[corev1.LabelInstanceTypeStable] != digitaloceantest.DefaultSize {
				t.Fatalf("%s: providerID %q (want %s), labels %v", m.Name, node.Spec.ProviderID, wantPID, node.Labels)
			}
			if z, ok := node.Labels[corev1.LabelTopologyZone]; ok {
				t.Fatalf("%s: zone label %q; DigitalOcean's CCM sets none", m.Name, z)
			}
			checkAddresses(t, node, []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: m.Name},
				{Type: corev1.NodeInternalIP, Address: d.PrivateIP}, {Type: corev1.NodeExternalIP, Address: d.PublicIP}},
				"127.0.83.", "127.0.84.")
		},
		lb: doLB(do),
		calls: func() string {
			return fmt.Sprintf("list %d, get %d, metadata %d", do.Calls(digitaloceantest.MethodList),
				do.Calls(digitaloceantest.MethodGet), do.Calls(digitaloceantest.MethodMetadata))
		},
	}
}

func startHetzner(t *testing.T, tickets *harness.TicketIssuer) *cloudRecord {
	hz := harness.StartHetznerCloud(t, tickets)
	return &cloudRecord{provisioningCloud: hz,
		add: func(_ *testing.T, in recordInstance) {
			s := hetznertest.Server{Name: in.name, Labels: map[string]string{}, Created: in.created, Status: in.state}
			if in.cluster != "" {
				s.Labels[harness.HetznerLabel] = in.cluster
			}
			// Put replaces a server of the name unless given an id of its own.
			if first, ok := hz.Server(in.name); ok {
				s.ID = first.ID + 1_000_000
			}
			hz.AddServer(s)
		},
		// As Hetzner's CCM: the location's zone and region, the server
		// type, provided-by, the public address before the private one.
		checkNode: func(t *testing.T, m *harness.Machine, node *corev1.Node) {
			srv, ok := hz.Server(m.Name)
			if !ok {
				t.Fatalf("no server %s", m.Name)
			}
			if node.Spec.ProviderID != fmt.Sprintf("hcloud://%d", srv.ID) || node.Labels[corev1.LabelTopologyZone] != "fsn1-dc14" ||
				node.Labels[corev1.LabelTopologyRegion] != hetznertest.DefaultLocation ||
				node.Labels[corev1.LabelInstanceTypeStable] != hetznertest.DefaultServerType ||
				node.Labels["instance.hetzner.cloud/provided-by"] != "cloud" {
				t.Fatalf("%s: providerID %q, labels %v", m.Name, node.Spec.ProviderID, node.Labels)
			}
			checkAddresses(t, node, []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: m.Name},
				{Type: corev1.NodeExternalIP, Address: srv.PublicIPv4}, {Type: corev1.NodeInternalIP, Address: srv.PrivateNets[0].IP}},
				"127.0.86.", "127.0.85.")
		},
		calls: func() string {
			return fmt.Sprintf("list %d, get %d, metadata %d, unauthorized %d",
				hz.Calls("list"), hz.Calls("get"), hz.Calls("metadata"), hz.Calls("unauthorized"))
		},
		ccmArgs: hetznerCCMArgs,
		lb:      hetznerLB(hz),
		joined: func(t *testing.T) {
			if n := hz.Calls("unauthorized"); n != 0 {
				t.Errorf("%d API calls refused for their token", n)
			}
		},
		routes: func(ctx context.Context, t *testing.T, c *testbed.Cluster, names []string) {
			hetznerRoutes(ctx, t, c, hz, names)
		},
	}
}

func startLinode(t *testing.T, tickets *harness.TicketIssuer) *cloudRecord {
	ln := harness.StartLinodeCloud(t, tickets)
	return &cloudRecord{provisioningCloud: ln,
		add: func(_ *testing.T, in recordInstance) {
			tags := []string{"web"}
			if in.cluster != "" {
				tags = []string{ln.ClusterTag(in.cluster)}
			}
			ln.AddLinode(in.name, tags, func(l *linodetest.Instance) { l.Created, l.Status = in.created, in.state })
		},
		// As Linode's CCM: the region and type labels, no zone, the
		// addresses in the API's order by range.
		checkNode: func(t *testing.T, m *harness.Machine, node *corev1.Node) {
			var in linodetest.Instance
			for _, l := range ln.Instances() {
				if l.Label == m.Name {
					in = l
				}
			}
			wantPID := "linode://" + strconv.Itoa(in.ID)
			if in.ID == 0 || node.Spec.ProviderID != wantPID || node.Labels[corev1.LabelTopologyRegion] != linodetest.DefaultRegion ||
				node.Labels[corev1.LabelInstanceTypeStable] != linodetest.DefaultType {
				t.Fatalf("%s: providerID %q (want %s), labels %v", m.Name, node.Spec.ProviderID, wantPID, node.Labels)
			}
			if z, ok := node.Labels[corev1.LabelTopologyZone]; ok {
				t.Fatalf("%s: zone label %q; Linode's CCM sets none", m.Name, z)
			}
			checkAddresses(t, node, []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: m.Name},
				{Type: corev1.NodeExternalIP, Address: in.PublicIP}, {Type: corev1.NodeInternalIP, Address: in.PrivateIP}},
				"127.0.98.", "127.0.97.")
		},
		lb: linodeLB(ln),
		calls: func() string {
			return fmt.Sprintf("list %d, get %d, metadata token %d, instance %d, network %d", ln.Calls(linodetest.MethodList),
				ln.Calls(linodetest.MethodGet), ln.Calls(linodetest.MethodToken), ln.Calls(linodetest.MethodInstance),
				ln.Calls(linodetest.MethodNetwork))
		},
	}
}

// vsphereOff is a VM's power state when it is off.
const vsphereOff = "poweredOff"

// startVSphere: the machines' guests are harness.DefaultGuests (current
// hardware, older hardware, and SMBIOS 3.1 without a readable serial
// number), whose agents read the BIOS UUID from their SMBIOS.
func startVSphere(t *testing.T, tickets *harness.TicketIssuer) *cloudRecord {
	vs := harness.StartVSphereCloud(t, tickets)
	made := map[string]bool{}
	var pool string
	return &cloudRecord{provisioningCloud: vs,
		add: func(t *testing.T, in recordInstance) {
			t.Helper()
			vm := vspheretest.VM{Name: in.name, Off: in.state == vsphereOff}
			switch {
			case in.cluster != e2eCluster:
				vm.Folder = "/DC0/vm"
			case made[in.name]:
				// vCenter keeps names unique per folder, not per folder tree:
				// the second of a name goes to a folder under the cluster's.
				if pool == "" {
					var err error
					if pool, err = vs.CreateFolder(vs.Folder, "pool-b"); err != nil {
						t.Fatal(err)
					}
				}
				vm.Folder = pool
			}
			made[in.name] = true
			_, ref, err := vs.AddVM(vm)
			if err != nil {
				t.Fatal(err)
			}
			if !in.created.IsZero() {
				vs.SetCreated(ref, in.created)
			}
		},
		// As vSphere's CCM: vsphere://<BIOS UUID>, the zone and region of
		// the hosts' tags, VMware Tools' address as both.
		checkNode: func(t *testing.T, m *harness.Machine, node *corev1.Node) {
			uuid := vs.UUID(m.Name)
			if node.Spec.ProviderID != "vsphere://"+uuid || node.Labels[corev1.LabelTopologyZone] != harness.VSphereClusterZone ||
				node.Labels[corev1.LabelTopologyRegion] != harness.VSphereRegion ||
				node.Labels[corev1.LabelInstanceTypeStable] != "vsphere-vm.cpu-2.mem-4gb.os-ubuntu64" {
				t.Fatalf("%s: providerID %q (BIOS UUID %s), labels %v", m.Name, node.Spec.ProviderID, uuid, node.Labels)
			}
			var ip string
			for _, a := range node.Status.Addresses {
				if a.Type == corev1.NodeInternalIP {
					ip = a.Address
				}
			}
			checkAddresses(t, node, []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: m.Name},
				{Type: corev1.NodeInternalIP, Address: ip}, {Type: corev1.NodeExternalIP, Address: ip}}, "127.0.87.")
		},
		joined:        func(t *testing.T) { checkLoopback(t, vs) },
		beforeAttacks: func(t *testing.T) { checkLoopback(t, vs) },
	}
}

// checkLoopback fails the test when a VM's guest information holds an
// address outside 127.0.0.0/8.
func checkLoopback(t *testing.T, vs *harness.VSphereCloud) {
	t.Helper()
	if err := vs.CheckLoopback(); err != nil {
		t.Fatal(err)
	}
}

// startOpenStack: Nova's list answers two servers a page at most; the
// third machine is a server of a cloud without a metadata service, whose
// agent reads its config drive (Nova's layout, the address only in
// network_data.json). Before the attacks every Keystone token expires (as
// after an hour): the approver's next listing is refused once, and it
// authenticates again.
func startOpenStack(t *testing.T, tickets *harness.TicketIssuer) *cloudRecord {
	const driveOnly = "nova-3"
	osc := harness.StartOpenStackCloud(t, tickets, openstacktest.Options{MaxLimit: 2, LB: openstacktest.LBOptions{PendingFor: openstackLBPending}})
	osc.LBConfig = true
	osc.ConfigDriveOnly(driveOnly)
	osc.UseRouter(openstackForeignRoute)
	calls := func() string {
		return fmt.Sprintf("auth %d, list %d, get %d, metadata %d, unauthorized %d; microversion %s", osc.Calls("auth"), osc.Calls("list"),
			osc.Calls("get"), osc.Calls("metadata"), osc.Calls("unauthorized"), osc.LastMicroversion())
	}
	return &cloudRecord{provisioningCloud: osc,
		add: func(_ *testing.T, in recordInstance) {
			s := openstacktest.Server{Name: in.name, Created: in.created, Status: in.state}
			if in.cluster != "" {
				s.Tags = []string{harness.OpenStackTag(in.cluster)}
			}
			// Put replaces a server of the name unless given an id of its own.
			if first, ok := osc.Server(in.name); ok {
				s.ID = "0f0f0f0f-0000-4000-8000-" + first.ID[24:]
			}
			osc.AddServer(s)
		},
		// As OpenStack's CCM: openstack:///<id>, the availability zone,
		// region and flavor, the fixed address and the floating IP (the
		// Hostname only from a hostname metadata item); the agent gave the
		// kubelet the fixed address, from the metadata service or the drive.
		checkNode: func(t *testing.T, m *harness.Machine, node *corev1.Node) {
			srv, ok := osc.Server(m.Name)
			if !ok {
				t.Fatalf("no server %s", m.Name)
			}
			if node.Spec.ProviderID != "openstack:///"+srv.ID || node.Labels[corev1.LabelTopologyZone] != openstacktest.DefaultZone ||
				node.Labels[corev1.LabelTopologyRegion] != openstacktest.DefaultRegion ||
				node.Labels[corev1.LabelInstanceTypeStable] != openstacktest.DefaultFlavor {
				t.Fatalf("%s: providerID %q, labels %v", m.Name, node.Spec.ProviderID, node.Labels)
			}
			fixed := srv.Addresses[0].Addr
			want := []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: fixed}, {Type: corev1.NodeExternalIP, Address: srv.Addresses[1].Addr}}
			if !sameAddresses(withoutHostname(node.Status.Addresses), want) || !strings.HasPrefix(fixed, "127.0.92.") {
				t.Fatalf("%s: addresses %v, want %v", m.Name, node.Status.Addresses, want)
			}
			env, err := os.ReadFile(m.EnvFile)
			if err != nil || !strings.Contains(string(env), "--node-ip="+fixed+" ") && !strings.Contains(string(env), "--node-ip="+fixed+`"`) {
				t.Errorf("%s: kubelet flags %q %v, want --node-ip=%s", m.Name, env, err, fixed)
			}
			if m.Name == driveOnly && !srv.NoMetadataService {
				t.Errorf("%s was made with a metadata service", m.Name)
			}
		},
		calls: calls,
		// One token for each of the two binaries; Nova served 2.47.
		joined: func(t *testing.T) {
			if osc.Calls("auth") != 2 || osc.Calls("unauthorized") != 0 || osc.LastMicroversion() != "2.47" {
				t.Errorf("cloud calls: %s", calls())
			}
		},
		ccmArgs: openstackCCMArgs,
		lb:      openstackLB(osc),
		routes: func(ctx context.Context, t *testing.T, c *testbed.Cluster, names []string) {
			openstackRoutes(ctx, t, c, osc, names)
		},
		beforeAttacks: func(*testing.T) { osc.ExpireTokens() },
		attacked: func(t *testing.T) {
			if osc.Calls("auth") < 3 || osc.Calls("unauthorized") < 1 || osc.Calls("auth") > osc.Calls("unauthorized")+2 {
				t.Errorf("expired tokens not renewed once each: %s", calls())
			}
		},
	}
}

// withoutHostname is a Node's addresses less the Hostname, which the
// OpenStack CCM gives only from a hostname metadata item.
func withoutHostname(addrs []corev1.NodeAddress) []corev1.NodeAddress {
	var out []corev1.NodeAddress
	for _, a := range addrs {
		if a.Type != corev1.NodeHostName {
			out = append(out, a)
		}
	}
	return out
}
