package nodeinit

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	cloudprovider "k8s.io/cloud-provider"
	cloudproviderapi "k8s.io/cloud-provider/api"
	cloudnode "k8s.io/cloud-provider/controllers/node"
	fakecloud "k8s.io/cloud-provider/fake"
	controllersmetrics "k8s.io/component-base/metrics/prometheus/controllers"
	"k8s.io/component-base/metrics/testutil"

	"github.com/mooring-dev/mooring/cloud/view"
)

var uninitialized = v1.Taint{Key: cloudproviderapi.TaintExternalCloudProvider, Value: "true", Effect: v1.TaintEffectNoSchedule}

// kubeletNode is a Node as a kubelet with --cloud-provider=external registers
// it, plus what the case adds.
func kubeletNode(name string, edit func(*v1.Node)) *v1.Node {
	n := &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), ResourceVersion: "1",
			CreationTimestamp: metav1.NewTime(time.Now().Add(-time.Second)),
			Labels:            map[string]string{v1.LabelHostname: name, v1.LabelOSStable: "linux", v1.LabelArchStable: "amd64"}},
		Spec:   v1.NodeSpec{Taints: []v1.Taint{uninitialized}},
		Status: v1.NodeStatus{Addresses: []v1.NodeAddress{{Type: v1.NodeHostName, Address: name}}},
	}
	if edit != nil {
		edit(n)
	}
	return n
}

func cloudWith(md *cloudprovider.InstanceMetadata, err error) *fakecloud.Cloud {
	return &fakecloud.Cloud{EnableInstancesV2: true, OverrideInstanceMetadata: func(context.Context, *v1.Node) (*cloudprovider.InstanceMetadata, error) {
		if md == nil {
			return nil, err
		}
		c := *md
		return &c, err
	}}
}

var metadata = &cloudprovider.InstanceMetadata{
	ProviderID:       "local://i-0abc",
	InstanceType:     "m.small",
	Zone:             "zone-a",
	Region:           "region-1",
	NodeAddresses:    []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "127.1.0.7"}, {Type: v1.NodeInternalDNS, Address: "i-0abc.internal"}},
	AdditionalLabels: map[string]string{"cloud.example/pool": "blue", "node.kubernetes.io/evil": "x", "team": "from-cloud"},
}

// initialize runs one controller (the library's or mooring's) over a fake
// apiserver holding node until the Node is untainted or wait passes, and
// returns the Node and the Events recorded.
func initialize(t *testing.T, library bool, node *v1.Node, cloud *fakecloud.Cloud, wait time.Duration) (*v1.Node, []string) {
	t.Helper()
	client := fake.NewClientset(node.DeepCopy())
	factory := informers.NewSharedInformerFactory(client, 0)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	nodes := factory.Core().V1().Nodes()
	if library {
		cnc, err := cloudnode.NewCloudNodeController(nodes, client, cloud, time.Hour, 1, 1)
		if err != nil {
			t.Fatal(err)
		}
		go cnc.RunWithContext(ctx, controllersmetrics.NewControllerManagerMetrics("test"))
	} else {
		c, err := New(client, nodes, cloud, Options{Workers: 1, StatusWorkers: 1, StatusUpdatePeriod: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		go c.Run(ctx)
	}
	factory.Start(ctx.Done())
	deadline := time.Now().Add(wait)
	var got *v1.Node
	for {
		var err error
		if got, err = client.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{}); err != nil {
			t.Fatal(err)
		}
		if (!tainted(got) && len(got.Status.Addresses) > 1) || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // the Event, and any late write
	got, _ = client.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
	events, _ := client.CoreV1().Events("").List(ctx, metav1.ListOptions{})
	var reasons []string
	for _, e := range events.Items {
		reasons = append(reasons, e.Source.Component+"/"+e.Reason)
	}
	return got, reasons
}

func TestInitializesAsTheLibraryDoes(t *testing.T) {
	otherTaint := v1.Taint{Key: "example.com/dedicated", Value: "db", Effect: v1.TaintEffectNoSchedule}
	cases := []struct {
		name  string
		node  *v1.Node
		md    *cloudprovider.InstanceMetadata
		taint bool // the Node keeps the taint
	}{
		{name: "kubelet's node", node: kubeletNode("n1", nil), md: metadata},
		{name: "other taints around ours", node: kubeletNode("n2", func(n *v1.Node) {
			n.Spec.Taints = []v1.Taint{otherTaint, uninitialized, {Key: "z", Effect: v1.TaintEffectNoExecute}}
		}), md: metadata},
		{name: "providerID from the kubelet", node: kubeletNode("n3", func(n *v1.Node) { n.Spec.ProviderID = "local://i-0abc" }),
			md: &cloudprovider.InstanceMetadata{InstanceType: "m.small", NodeAddresses: metadata.NodeAddresses}},
		{name: "label the node has", node: kubeletNode("n4", func(n *v1.Node) { n.Labels["team"] = "own" }), md: metadata},
		{name: "provided node IP", node: kubeletNode("n5", func(n *v1.Node) {
			n.Annotations = map[string]string{cloudproviderapi.AnnotationAlphaProvidedIPAddr: "127.1.0.7"}
		}), md: metadata},
		{name: "provided node IP the cloud has not", node: kubeletNode("n6", func(n *v1.Node) {
			n.Annotations = map[string]string{cloudproviderapi.AnnotationAlphaProvidedIPAddr: "127.9.9.9"}
		}), md: metadata, taint: true},
		{name: "no labels", node: kubeletNode("n7", func(n *v1.Node) { n.Labels = nil }), md: metadata},
		{name: "no addresses from the cloud", node: kubeletNode("n8", nil),
			md: &cloudprovider.InstanceMetadata{ProviderID: "local://i-8", Zone: "zone-b"}},
		{name: "label key with a slash and a tilde", node: kubeletNode("n9", nil),
			md: &cloudprovider.InstanceMetadata{ProviderID: "local://i-9", AdditionalLabels: map[string]string{"a.example/b~c": "v"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			wait := 3 * time.Second
			if tc.taint || len(tc.md.NodeAddresses) == 0 {
				wait = 500 * time.Millisecond
			}
			want, wantEvents := initialize(t, true, tc.node, cloudWith(tc.md, nil), wait)
			got, gotEvents := initialize(t, false, tc.node, cloudWith(tc.md, nil), wait)
			if tainted(got) != tc.taint || tainted(want) != tc.taint {
				t.Fatalf("tainted: mooring %v, library %v, want %v", tainted(got), tainted(want), tc.taint)
			}
			same(t, "spec", got.Spec, want.Spec)
			same(t, "labels", got.Labels, want.Labels)
			same(t, "annotations", got.Annotations, want.Annotations)
			same(t, "addresses", got.Status.Addresses, want.Status.Addresses)
			same(t, "events", strings.Join(gotEvents, ","), strings.Join(wantEvents, ","))
		})
	}
}

func same(t *testing.T, what string, got, want any) {
	t.Helper()
	g, _ := json.Marshal(got)
	w, _ := json.Marshal(want)
	if string(g) != string(w) {
		t.Errorf("%s differ from the library's:\n mooring %s\n library %s", what, g, w)
	}
}

// The init patch carries no resourceVersion: a kubelet's status write
// between the read and the write does not make it fail.
func TestInitPatchCarriesNoResourceVersion(t *testing.T) {
	node := kubeletNode("n", nil)
	patch, err := initPatch(node, metadata)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(patch), "resourceVersion") {
		t.Errorf("patch tests the resourceVersion: %s", patch)
	}
	status, _ := addressesPatch(node, metadata.NodeAddresses)
	if strings.Contains(string(status), "resourceVersion") {
		t.Errorf("status patch carries a resourceVersion: %s", status)
	}
}

// When the apiserver refuses the patch's test (another writer moved the
// taint), the controller reads the Node again from the apiserver, not from
// its cache, and writes a rebuilt patch that keeps the other writer's taint.
func TestRefusedPatchIsRebuiltFromAFreshRead(t *testing.T) {
	registerMetrics()
	before, _ := testutil.GetCounterMetricValue(rebuiltPatches)
	cached := kubeletNode("n", nil)
	// Meanwhile a taint was added in front of ours.
	fresh := cached.DeepCopy()
	fresh.ResourceVersion = "2"
	fresh.Spec.Taints = append([]v1.Taint{{Key: "node.kubernetes.io/not-ready", Effect: v1.TaintEffectNoSchedule}}, fresh.Spec.Taints...)
	client := fake.NewClientset(fresh)
	var patches []string
	gets := 0
	client.PrependReactor("get", "nodes", func(clienttesting.Action) (bool, runtime.Object, error) {
		gets++
		return false, nil, nil
	})
	client.PrependReactor("patch", "nodes", func(a clienttesting.Action) (bool, runtime.Object, error) {
		p := a.(clienttesting.PatchAction)
		if p.GetPatchType() != types.JSONPatchType {
			return false, nil, nil
		}
		patches = append(patches, string(p.GetPatch()))
		// What the apiserver answers to a failed test: 422.
		if strings.Contains(string(p.GetPatch()), `"path":"/spec/taints/0/key"`) {
			return true, nil, apierrors.NewGenericServerResponse(http.StatusUnprocessableEntity, "", schema.GroupResource{}, "", "testing value /spec/taints/0/key failed", 0, false)
		}
		return false, nil, nil
	})
	c := &Controller{client: client}
	written, err := c.writeInit(context.Background(), cached, metadata)
	if err != nil {
		t.Fatal(err)
	}
	if len(patches) != 2 || gets != 1 {
		t.Fatalf("%d patches and %d reads, want 2 and 1: %v", len(patches), gets, patches)
	}
	if !strings.Contains(patches[1], `"path":"/spec/taints/1/key"`) {
		t.Errorf("rebuilt patch does not remove the taint at its new index: %s", patches[1])
	}
	if len(written.Spec.Taints) != 1 || written.Spec.Taints[0].Key != "node.kubernetes.io/not-ready" {
		t.Errorf("taints after init: %v, want only the other writer's", written.Spec.Taints)
	}
	if after, _ := testutil.GetCounterMetricValue(rebuiltPatches); after != before+1 {
		t.Errorf("rebuilt_patches_total went from %v to %v", before, after)
	}
}

// A cloud that fails leaves the Node tainted and untouched.
func TestCloudErrorWritesNothing(t *testing.T) {
	node := kubeletNode("n", nil)
	client := fake.NewClientset(node)
	factory := informers.NewSharedInformerFactory(client, 0)
	c, err := New(client, factory.Core().V1().Nodes(), cloudWith(nil, context.DeadlineExceeded), Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	if err := c.sync(ctx, "n"); err == nil {
		t.Fatal("sync succeeded with the cloud failing")
	}
	for _, a := range client.Actions() {
		if a.GetVerb() != "list" && a.GetVerb() != "watch" {
			t.Errorf("wrote with the cloud failing: %s %s", a.GetVerb(), a.GetResource().Resource)
		}
	}
}

// Initialized Nodes whose labels need nothing are not queued on their
// status updates; tainted ones and those with a beta label alone are.
func TestOnlyNodesWithWorkAreQueued(t *testing.T) {
	c := &Controller{queue: newQueue()}
	done := kubeletNode("done", func(n *v1.Node) { n.Spec.Taints = nil })
	beta := kubeletNode("beta", func(n *v1.Node) { n.Spec.Taints = nil; n.Labels[v1.LabelFailureDomainBetaZone] = "z" })
	waiting := kubeletNode("waiting", nil)
	for _, n := range []*v1.Node{done, beta, waiting} {
		c.enqueue(n)
	}
	if c.queue.Len() != 2 {
		t.Errorf("queued %d Nodes, want 2 (beta, waiting)", c.queue.Len())
	}
}

// Writes are the controller's two writes: applied by another client, they
// leave the Node as the controller leaves it.
func TestWritesAreTheControllersWrites(t *testing.T) {
	node := kubeletNode("n", nil)
	want, _ := initialize(t, false, node, cloudWith(metadata, nil), 5*time.Second)

	meta, status, err := Writes(node, metadata)
	if err != nil || meta == nil || status == nil {
		t.Fatalf("Writes: %v, %s, %s", err, meta, status)
	}
	client := fake.NewClientset(node.DeepCopy())
	ctx := context.Background()
	if _, err := client.CoreV1().Nodes().Patch(ctx, node.Name, types.JSONPatchType, meta, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().Nodes().Patch(ctx, node.Name, types.MergePatchType, status, metav1.PatchOptions{}, "status"); err != nil {
		t.Fatal(err)
	}
	got, err := client.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !equality.Semantic.DeepEqual(got.Spec, want.Spec) || !equality.Semantic.DeepEqual(got.Labels, want.Labels) ||
		!equality.Semantic.DeepEqual(got.Status.Addresses, want.Status.Addresses) {
		t.Errorf("after Writes:\n%+v %v %v\nthe controller's:\n%+v %v %v", got.Spec, got.Labels, got.Status.Addresses,
			want.Spec, want.Labels, want.Status.Addresses)
	}
	// An initialized Node needs nothing more.
	if meta, status, err := Writes(got, metadata); err != nil || meta != nil || status != nil {
		t.Errorf("Writes on an initialized Node: %v, %s, %s", err, meta, status)
	}
}

// A Node queued again before the cache shows the write that removed its
// taint is not judged from that stale copy (which would cost a refused
// patch and a read); a Node of the same name made anew (another UID) is
// initialized again, and so is one whose cache showed the taint gone and
// then back.
func TestStaleCopyAfterOwnWriteIsNotJudgedAgain(t *testing.T) {
	registerMetrics()
	node := kubeletNode("n", func(n *v1.Node) { n.UID = "uid-1" })
	client := fake.NewClientset(node.DeepCopy())
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	if err := indexer.Add(node.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	c := &Controller{client: client, instances: cloudWith(metadata, nil), nodes: corelisters.NewNodeLister(indexer),
		queue: newQueue(), recorder: record.NewFakeRecorder(10), untainting: map[string]untainted{}}
	ctx := context.Background()
	patches := func() (n int) {
		for _, a := range client.Actions() {
			if a.GetVerb() == "patch" && a.GetSubresource() == "" {
				n++
			}
		}
		return n
	}
	if err := c.sync(ctx, "n"); err != nil {
		t.Fatal(err)
	}
	if patches() != 1 {
		t.Fatalf("%d init patches, want 1", patches())
	}
	// The kubelet's status update queues it again; the cache still has the
	// taint.
	if err := c.sync(ctx, "n"); err != nil {
		t.Fatal(err)
	}
	if patches() != 1 {
		t.Errorf("judged again from the stale copy: %d init patches, want 1", patches())
	}

	// The cache shows the write, then the taint comes back (someone put it
	// there): it is initialized again.
	cur, err := client.CoreV1().Nodes().Get(ctx, "n", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c.enqueue(cur)
	cur.Spec.Taints = append(cur.Spec.Taints, uninitialized)
	if _, err := client.CoreV1().Nodes().Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := indexer.Update(cur); err != nil {
		t.Fatal(err)
	}
	if err := c.sync(ctx, "n"); err != nil {
		t.Fatal(err)
	}
	if patches() != 2 {
		t.Errorf("a Node tainted again after the cache showed it untainted: %d init patches, want 2", patches())
	}

	// The Node is deleted and registered anew before the cache catches up
	// with the last write: another UID, initialized again.
	again := kubeletNode("n", func(n *v1.Node) { n.UID = "uid-2" })
	if err := client.CoreV1().Nodes().Delete(ctx, "n", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().Nodes().Create(ctx, again.DeepCopy(), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := indexer.Update(again); err != nil {
		t.Fatal(err)
	}
	if err := c.sync(ctx, "n"); err != nil {
		t.Fatal(err)
	}
	if patches() != 3 {
		t.Errorf("a Node made anew under the name: %d init patches, want 3", patches())
	}
}

// An instance whose providerID another instance lists too (a clone that
// kept its BIOS UUID) is not initialized, and the Node says why.
func TestAmbiguousInstanceIsNotInitialized(t *testing.T) {
	amb := &view.AmbiguousError{ProviderID: "vsphere://4237", Instances: []view.Instance{
		{Name: "db-1", ID: "4237", State: view.StateRunning}, {Name: "db-1-clone", ID: "4237", State: view.StateStopped}}}
	got, events := initialize(t, false, kubeletNode("db-1", nil), cloudWith(nil, amb), time.Second)
	if !tainted(got) || got.Spec.ProviderID != "" {
		t.Errorf("initialized: %+v", got.Spec)
	}
	if !slices.Contains(events, EventComponent+"/InstanceAmbiguous") {
		t.Errorf("events %v, want a Warning InstanceAmbiguous", events)
	}
}

// A 422 that is not a failed test (the cloud's label value refused by
// validation) is returned at once: it used to be taken for a Node that
// changed, and rebuilt five times (6 patches and 5 reads an attempt).
func TestInvalidPatchIsNotRebuilt(t *testing.T) {
	registerMetrics()
	before, _ := testutil.GetCounterMetricValue(rebuiltPatches)
	client := fake.NewClientset(kubeletNode("n", nil))
	patches, gets := 0, 0
	client.PrependReactor("get", "nodes", func(clienttesting.Action) (bool, runtime.Object, error) {
		gets++
		return false, nil, nil
	})
	client.PrependReactor("patch", "nodes", func(clienttesting.Action) (bool, runtime.Object, error) {
		patches++
		return true, nil, apierrors.NewInvalid(schema.GroupKind{Kind: "Node"}, "n", field.ErrorList{
			field.Invalid(field.NewPath("metadata", "labels"), "zone a", "a valid label value must ...")})
	})
	c := &Controller{client: client}
	if _, err := c.writeInit(context.Background(), kubeletNode("n", nil), metadata); !apierrors.IsInvalid(err) {
		t.Fatalf("writeInit: %v, want the Invalid error", err)
	}
	if patches != 1 || gets != 0 {
		t.Errorf("%d patches and %d reads, want 1 and 0", patches, gets)
	}
	if after, _ := testutil.GetCounterMetricValue(rebuiltPatches); after != before {
		t.Errorf("rebuilt_patches_total went from %v to %v", before, after)
	}
	// The failed test the apiserver really answers is still stale.
	if !stale(apierrors.NewGenericServerResponse(http.StatusUnprocessableEntity, "", schema.GroupResource{}, "", "testing value /spec/taints/0/key failed: test failed", 0, false)) {
		t.Error("a failed JSON patch test is not stale")
	}
}

// A Node that registered with the uninitialized taint twice (NoSchedule and
// NoExecute) loses both, as the library removes every taint of the key;
// the init patch used to remove the first only, leaving the Node
// unschedulable for good. Another taint between them stays.
func TestEveryUninitializedTaintIsRemoved(t *testing.T) {
	node := kubeletNode("n", func(n *v1.Node) {
		n.Spec.Taints = []v1.Taint{uninitialized, {Key: "team/gpu", Effect: v1.TaintEffectNoSchedule},
			{Key: uninitialized.Key, Value: "true", Effect: v1.TaintEffectNoExecute}}
	})
	client := fake.NewClientset(node.DeepCopy())
	written, err := (&Controller{client: client}).writeInit(context.Background(), node, metadata)
	if err != nil {
		t.Fatal(err)
	}
	if len(written.Spec.Taints) != 1 || written.Spec.Taints[0].Key != "team/gpu" {
		t.Errorf("taints after init: %v, want only team/gpu", written.Spec.Taints)
	}
}

// The cloud's additional labels never go over a label the Node has, also
// one another client wrote after the controller read the Node: the patch
// tests that the label is still absent. It used to be judged from the
// cached copy alone, and the JSON add overwrote the other client's value.
func TestCloudLabelNeverOverwritesALaterWrite(t *testing.T) {
	cached := kubeletNode("n", nil)
	fresh := cached.DeepCopy()
	fresh.Labels["team"] = "set-by-the-admin"
	client := fake.NewClientset(fresh)
	_, _ = (&Controller{client: client}).writeInit(context.Background(), cached, metadata)
	got, err := client.CoreV1().Nodes().Get(context.Background(), "n", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Labels["team"] != "set-by-the-admin" {
		t.Errorf("label team = %q: the cloud's value went over the admin's", got.Labels["team"])
	}
	// A label absent from both copies is added (the test of absence passes).
	if got2, _ := (&Controller{client: fake.NewClientset(cached.DeepCopy())}).writeInit(context.Background(), cached, metadata); got2 == nil || got2.Labels["team"] != "from-cloud" {
		t.Errorf("the cloud's label on a Node without it: %v", got2)
	}
}
