package conformance

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cloudprovider "k8s.io/cloud-provider"

	"github.com/mooring-dev/mooring/cloud"
	"github.com/mooring-dev/mooring/cloud/kit"
	"github.com/mooring-dev/mooring/cloud/view"
)

// RunInstances runs the instances' contract: the provider's faces,
// InstancesV2 over the view (a Node's instance is gone only when the cloud
// says so; an error is never "absent"), the view's lists (every page, only
// the cluster's instances, never a shorter list on an error or a list that
// changed between pages), states, names and creation times.
func RunInstances(t *testing.T, b Backend) {
	t.Run("Faces", func(t *testing.T) { faces(t, b) })
	t.Run("Metadata", func(t *testing.T) { metadata(t, b) })
	t.Run("States", func(t *testing.T) { states(t, b) })
	t.Run("Deleted", func(t *testing.T) { deleted(t, b) })
	t.Run("Confirmed", func(t *testing.T) { confirmed(t, b) })
	t.Run("OtherCluster", func(t *testing.T) { otherCluster(t, b) })
	t.Run("NotThisCloudsProviderID", func(t *testing.T) { notThisClouds(t, b) })
	t.Run("RegisteredFirst", func(t *testing.T) { registeredFirst(t, b) })
	t.Run("Failures", func(t *testing.T) { failures(t, b) })
	t.Run("Created", func(t *testing.T) { created(t, b) })
	t.Run("Names", func(t *testing.T) { names(t, b) })
	t.Run("Pages", func(t *testing.T) { pages(t, b) })
	t.Run("PageFails", func(t *testing.T) { pageFails(t, b) })
	t.Run("ListChangesBetweenPages", func(t *testing.T) { changesBetweenPages(t, b) })
	t.Run("Registered", func(t *testing.T) { registered(t, b) })
}

// node is a Node as the CCM sees it: its name, and its providerID once set.
func node(name, providerID string) *v1.Node {
	return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1.NodeSpec{ProviderID: providerID}}
}

func ofMade(m Made) *v1.Node { return node(m.NodeName, m.ProviderID) }

func instancesV2(t testing.TB, p Provider) cloudprovider.InstancesV2 {
	t.Helper()
	i, ok := p.InstancesV2()
	if !ok || i == nil {
		t.Fatal("InstancesV2 not implemented")
	}
	return i
}

// exists is InstanceExists, which must answer.
func exists(t testing.TB, p Provider, n *v1.Node) bool {
	t.Helper()
	ok, err := instancesV2(t, p).InstanceExists(context.Background(), n)
	if err != nil {
		t.Fatalf("InstanceExists(%s, %q): %v", n.Name, n.Spec.ProviderID, err)
	}
	return ok
}

func faces(t *testing.T, b Backend) {
	p := b.New(t, Options{}).Provider()
	instancesV2(t, p)
	if _, ok := p.Instances(); ok {
		t.Error("the legacy Instances is implemented (InstancesV2 is the interface)")
	}
	if _, ok := p.Clusters(); ok {
		t.Error("Clusters is implemented")
	}
	if _, ok := p.Zones(); ok != b.Zones {
		t.Errorf("Zones implemented: %v, want %v", ok, b.Zones)
	}
	if _, ok := p.LoadBalancer(); ok != b.LoadBalancer {
		t.Errorf("LoadBalancer implemented: %v, want %v", ok, b.LoadBalancer)
	}
	// A cloud's routes may need configuring (Options.Routes): RunRoutes
	// checks that they answer then.
	if _, ok := p.Routes(); ok && !b.Routes {
		t.Error("Routes implemented: true, want false")
	}
	if p.ProviderName() != b.Name {
		t.Errorf("ProviderName %q, want %q", p.ProviderName(), b.Name)
	}
	if !p.HasClusterID() {
		t.Error("HasClusterID is false: every backend requires a cluster id")
	}
	if p.InstanceView() == nil {
		t.Error("no instance view")
	}
	var types []string
	for _, v := range p.EvidenceVerifiers() {
		types = append(types, v.Type())
	}
	if !slices.Equal(types, b.Evidence) {
		t.Errorf("evidence verifiers %q, want %q", types, b.Evidence)
	}
	if p.ClusterTag() == "" {
		t.Error("no cluster tag for the approver")
	}
}

// A running instance's metadata, by its Node's name (a Node registered
// without a providerID) and by its providerID.
func metadata(t *testing.T, b Backend) {
	bed := b.New(t, Options{})
	p := bed.Provider()
	ctx := context.Background()
	m := bed.Make(t, Spec{Name: "node-1", N: 1})
	bed.Make(t, Spec{Name: "node-2", N: 2})
	for _, n := range []*v1.Node{node(m.NodeName, ""), ofMade(m)} {
		md, err := instancesV2(t, p).InstanceMetadata(ctx, n)
		if err != nil {
			t.Fatalf("InstanceMetadata(%q, %q): %v", n.Name, n.Spec.ProviderID, err)
		}
		if md.ProviderID != m.ProviderID {
			t.Errorf("providerID %q, want %q", md.ProviderID, m.ProviderID)
		}
		if m.InternalIP != "" && !slices.Contains(md.NodeAddresses, v1.NodeAddress{Type: v1.NodeInternalIP, Address: m.InternalIP}) {
			t.Errorf("addresses %v lack InternalIP %s", md.NodeAddresses, m.InternalIP)
		}
		if md.Region == "" && md.Zone == "" {
			t.Error("neither region nor zone")
		}
	}
	if !exists(t, p, ofMade(m)) {
		t.Error("a running instance does not exist")
	}
	if down, err := instancesV2(t, p).InstanceShutdown(ctx, ofMade(m)); err != nil || down {
		t.Errorf("a running instance: shutdown %v, %v", down, err)
	}
	in, err := p.InstanceView().ByProviderID(ctx, m.ProviderID, 0)
	if err != nil {
		t.Fatal(err)
	}
	if in.ID != m.ID || in.NodeName != m.NodeName || in.State != view.StateRunning || in.Name != m.Name {
		t.Errorf("view: %+v, want id %s, name %s, Node name %s, running", in, m.ID, m.Name, m.NodeName)
	}
}

// Stopped is shut down but exists; pending exists; terminated is gone.
func states(t *testing.T, b Backend) {
	bed := b.New(t, Options{})
	p := bed.Provider()
	ctx := context.Background()
	some := false
	for i, s := range []view.State{view.StateStopped, view.StatePending, view.StateTerminated} {
		m := bed.Make(t, Spec{Name: fmt.Sprintf("node-%d", i+1), N: i + 1})
		if !bed.SetState(t, m, s) {
			t.Logf("the cloud has no state that maps to %s", s)
			continue
		}
		some = true
		p.InstanceView().Invalidate()
		in, err := p.InstanceView().ByProviderID(ctx, m.ProviderID, 0)
		if err != nil || in.State != s {
			t.Errorf("%s: view %q, %v", s, in.State, err)
		}
		gone := !exists(t, p, ofMade(m))
		if gone != (s == view.StateTerminated) {
			t.Errorf("%s: exists %v", s, !gone)
		}
		md, err := instancesV2(t, p).InstanceMetadata(ctx, ofMade(m))
		if s == view.StateTerminated {
			if !errors.Is(err, cloudprovider.InstanceNotFound) {
				t.Errorf("terminated: metadata %+v, %v; want InstanceNotFound", md, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: metadata: %v", s, err)
		}
		down, err := instancesV2(t, p).InstanceShutdown(ctx, ofMade(m))
		if err != nil || down != (s == view.StateStopped) {
			t.Errorf("%s: shutdown %v, %v", s, down, err)
		}
	}
	if !some {
		t.Error("the bed put an instance in none of stopped, pending, terminated")
	}
}

// A deleted instance is gone once the cloud itself, asked for its id,
// says so.
func deleted(t *testing.T, b Backend) {
	bed := b.New(t, Options{})
	p := bed.Provider()
	m := bed.Make(t, Spec{Name: "node-1", N: 1})
	bed.Make(t, Spec{Name: "node-2", N: 2})
	if !exists(t, p, ofMade(m)) {
		t.Fatal("a running instance does not exist")
	}
	bed.Delete(t, m)
	p.InstanceView().Invalidate()
	confirms := bed.Calls(Confirm)
	if exists(t, p, ofMade(m)) {
		t.Error("a deleted instance exists")
	}
	if bed.Calls(Confirm) == confirms {
		t.Error("the miss in the list was not confirmed by asking the cloud for the instance")
	}
	if _, err := instancesV2(t, p).InstanceMetadata(context.Background(), ofMade(m)); !errors.Is(err, cloudprovider.InstanceNotFound) {
		t.Errorf("deleted: metadata %v, want InstanceNotFound", err)
	}
	// A Node with no providerID whose name no instance has cannot be tied
	// to an instance: never "gone".
	if ok, err := instancesV2(t, p).InstanceExists(context.Background(), node("stranger", "")); err == nil {
		t.Errorf("a Node with no providerID and no instance of its name: exists %v, no error", ok)
	}
}

// An instance asked of the cloud by itself (kit.InstanceFinder's
// ConfirmInstance, when the view's list may be older than it) is the one
// the list gives: a Node initialized from it gets the same addresses.
func confirmed(t *testing.T, b Backend) {
	bed := b.New(t, Options{})
	p := bed.Provider()
	f, ok := p.(kit.InstanceFinder)
	if !ok {
		t.Fatal("the provider asks the cloud for no instance by itself (kit.InstanceFinder)")
	}
	m := bed.Make(t, Spec{Name: "node-1", N: 1})
	listed, err := p.InstanceView().ByProviderID(context.Background(), m.ProviderID, 0)
	if err != nil {
		t.Fatal(err)
	}
	got, err := f.ConfirmInstance(context.Background(), m.ProviderID)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got.Addresses) != fmt.Sprint(listed.Addresses) || got.NodeName != listed.NodeName || got.ID != listed.ID ||
		got.State != listed.State {
		t.Errorf("confirmed %+v\nlisted    %+v", got, listed)
	}
}

// Another cluster's instance is not this cluster's to delete: its Node is
// left alone, and the view does not list it.
func otherCluster(t *testing.T, b Backend) {
	bed := b.New(t, Options{})
	p := bed.Provider()
	mine := bed.Make(t, Spec{Name: "node-1", N: 1})
	other := bed.Make(t, Spec{Name: "other-1", N: 2, Foreign: true})
	if !exists(t, p, ofMade(other)) {
		t.Error("another cluster's instance: its Node would be deleted")
	}
	all, err := p.InstanceView().List(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if ids := providerIDs(all); !slices.Equal(ids, []string{mine.ProviderID}) {
		t.Errorf("listed %v, want only %s", ids, mine.ProviderID)
	}
}

// A providerID of another cloud, or a malformed one, is an error: never
// "gone", never an instance.
func notThisClouds(t *testing.T, b Backend) {
	p := b.New(t, Options{}).Provider()
	ctx := context.Background()
	var ids []string
	for _, id := range []string{"kind://docker/c1/n1", "gce://p/europe-west1-b/n1", "aws:///us-east-1a/i-0123456789abcdef0",
		"azure:///subscriptions/s/resourceGroups/g/providers/Microsoft.Compute/virtualMachines/n1", "x"} {
		if !strings.HasPrefix(id, b.Name+":") {
			ids = append(ids, id)
		}
	}
	for _, id := range append(ids, b.BadProviderIDs...) {
		n := node("n1", id)
		if ok, err := instancesV2(t, p).InstanceExists(ctx, n); err == nil {
			t.Errorf("InstanceExists(%q) = %v, no error", id, ok)
		}
		if md, err := instancesV2(t, p).InstanceMetadata(ctx, n); err == nil || errors.Is(err, cloudprovider.InstanceNotFound) {
			t.Errorf("InstanceMetadata(%q) = %+v, %v; want an error other than InstanceNotFound", id, md, err)
		}
	}
}

// A Node registered before the view's last list of the cloud (its instance
// is newer than the list): found, by name and by providerID, never "gone".
func registeredFirst(t *testing.T, b Backend) {
	bed := b.New(t, Options{})
	p := bed.Provider()
	ctx := context.Background()
	bed.Make(t, Spec{Name: "node-1", N: 1})
	if _, err := p.InstanceView().List(ctx, 0); err != nil {
		t.Fatal(err)
	}
	m := bed.Make(t, Spec{Name: "node-2", N: 2})
	md, err := patiently(t, func() (*cloudprovider.InstanceMetadata, error) {
		return instancesV2(t, p).InstanceMetadata(ctx, node(m.NodeName, ""))
	})
	if err != nil || md.ProviderID != m.ProviderID {
		t.Fatalf("by name: %+v, %v", md, err)
	}
	m3 := bed.Make(t, Spec{Name: "node-3", N: 3})
	if !exists(t, p, ofMade(m3)) {
		t.Error("by providerID: a Node whose instance is newer than the list is gone")
	}
}

// patiently asks f again while the view answers that it cannot tell yet
// (view.ErrUnconfirmed), after the time it says.
func patiently[T any](t testing.TB, f func() (T, error)) (T, error) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		v, err := f()
		after, unconfirmed := view.RetryAfter(err)
		if !unconfirmed || time.Now().After(deadline) {
			return v, err
		}
		time.Sleep(after + time.Millisecond)
	}
}

// Every failure of the API is an error for every lookup, never a shorter
// list or "gone"; the provider answers again once the API does, without a
// restart. A failing get of one instance alone (the list answers) is an
// error too: the cloud did not say the instance is gone.
func failures(t *testing.T, b Backend) {
	bed := b.New(t, Options{})
	p := bed.Provider()
	ctx := context.Background()
	m := bed.Make(t, Spec{Name: "node-1", N: 1})
	gone := bed.Make(t, Spec{Name: "node-2", N: 2})
	// Listed once before it is deleted, as a Node's instance is: a
	// provider may doubt a miss of an instance it has never seen (AWS,
	// within its new-instance window).
	if _, err := p.InstanceView().List(ctx, 0); err != nil {
		t.Fatal(err)
	}
	bed.Delete(t, gone)
	for _, f := range []Failure{Outage, Unauthorized, Throttled} {
		undo := bed.Fail(t, f)
		if undo == nil {
			if f == Outage {
				t.Fatal("the bed cannot fail as in an outage")
			}
			t.Logf("the bed cannot fail as %s", f)
			continue
		}
		p.InstanceView().Invalidate()
		if all, err := p.InstanceView().List(ctx, 0); err == nil || all != nil {
			t.Errorf("%s: listed %d instances, error %v", f, len(all), err)
		}
		if named, err := p.InstanceView().Named(ctx, m.Name, 0); err == nil {
			t.Errorf("%s: Named(%q) answered %d instances", f, m.Name, len(named))
		}
		for _, n := range []*v1.Node{ofMade(m), ofMade(gone), node(m.NodeName, "")} {
			if ok, err := instancesV2(t, p).InstanceExists(ctx, n); err == nil {
				t.Errorf("%s: InstanceExists(%s) answered %v", f, n.Name, ok)
			}
			if _, err := instancesV2(t, p).InstanceShutdown(ctx, n); err == nil {
				t.Errorf("%s: InstanceShutdown(%s) answered", f, n.Name)
			}
			if md, err := instancesV2(t, p).InstanceMetadata(ctx, n); err == nil || errors.Is(err, cloudprovider.InstanceNotFound) {
				t.Errorf("%s: InstanceMetadata(%s) = %+v, %v; want an error other than InstanceNotFound", f, n.Name, md, err)
			}
		}
		undo()
		p.InstanceView().Invalidate()
		if !exists(t, p, ofMade(m)) {
			t.Errorf("after %s: the instance does not exist", f)
		}
	}
	undo := bed.Fail(t, GetFails)
	if undo == nil {
		t.Fatal("the bed cannot fail the call that asks for one instance alone")
	}
	p.InstanceView().Invalidate()
	if ok, err := instancesV2(t, p).InstanceExists(ctx, ofMade(gone)); err == nil {
		t.Errorf("%s: InstanceExists of an instance missing from the list answered %v: the cloud was not asked", GetFails, ok)
	}
	undo()
	if exists(t, p, ofMade(gone)) {
		t.Errorf("after %s: a deleted instance exists", GetFails)
	}
}

// The view carries the cloud's creation time (join tickets compare it with
// their issue time), also in Named's answers.
func created(t *testing.T, b Backend) {
	bed := b.New(t, Options{})
	p := bed.Provider()
	at := time.Now().Add(-90 * time.Minute).UTC().Truncate(time.Second)
	m := bed.Make(t, Spec{Name: "node-1", N: 1, Created: at})
	in, err := p.InstanceView().ByProviderID(context.Background(), m.ProviderID, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !in.Created.Equal(at) {
		t.Errorf("created %v, want %v", in.Created, at)
	}
	named, err := p.InstanceView().Named(context.Background(), m.Name, 0)
	if err != nil || len(named) != 1 || !named[0].Created.Equal(at) {
		t.Errorf("Named(%q): %+v, %v", m.Name, named, err)
	}
}

// An instance whose name gives no Node name is listed, with none.
func names(t *testing.T, b Backend) {
	if b.EveryNameANode {
		t.Skip("every name the cloud allows gives a Node name")
	}
	bed := b.New(t, Options{})
	m := bed.Make(t, Spec{Name: cmp.Or(b.NameWithoutNode, "under_score"), N: 1})
	in, err := bed.Provider().InstanceView().ByProviderID(context.Background(), m.ProviderID, 0)
	if err != nil {
		t.Fatal(err)
	}
	if in.NodeName != "" || in.Name != m.Name {
		t.Errorf("%q: name %q, Node name %q", m.Name, in.Name, in.NodeName)
	}
}

// pager is a Pager bed with pages of 2 instances (or its smallest page),
// and that page size.
func pager(t *testing.T, b Backend) (Pager, Provider, int) {
	bed := b.New(t, Options{PageSize: 2})
	pg, ok := bed.(Pager)
	if !ok {
		t.Skip("the instance list has no pages")
	}
	size := 2
	if s, ok := bed.(PageSizer); ok {
		size = s.PageSize()
	}
	if size < 1 || size > 60 {
		t.Fatalf("pages of %d instances: the suite makes up to 3 pages' worth, numbered 10-199", size)
	}
	return pg, bed.Provider(), size
}

func makeN(t testing.TB, bed Bed, n, from int, foreign bool) []Made {
	var out []Made
	for i := range n {
		prefix := "node"
		if foreign {
			prefix = "other"
		}
		out = append(out, bed.Make(t, Spec{Name: fmt.Sprintf("%s-%d", prefix, i), N: from + i, Foreign: foreign}))
	}
	return out
}

func providerIDs(all []view.Instance) []string {
	var ids []string
	for _, in := range all {
		ids = append(ids, in.ProviderID)
	}
	slices.Sort(ids)
	return ids
}

func madeIDs(ms []Made) []string {
	var ids []string
	for _, m := range ms {
		ids = append(ids, m.ProviderID)
	}
	slices.Sort(ids)
	return ids
}

// The list follows every page and keeps only the cluster's instances.
func pages(t *testing.T, b Backend) {
	bed, p, size := pager(t, b)
	mine := makeN(t, bed, 3*size+1, 10, false)
	makeN(t, bed, 2, 200, true)
	before := bed.Calls(List)
	all, err := p.InstanceView().List(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := providerIDs(all), madeIDs(mine); !slices.Equal(got, want) {
		t.Errorf("listed %v\nwant %v", got, want)
	}
	if n := bed.Calls(List) - before; n < 4 {
		t.Errorf("%d list calls for %d instances in pages of %d", n, len(mine), size)
	}
}

// A page that fails fails the list: never a shorter one.
func pageFails(t *testing.T, b Backend) {
	bed, p, size := pager(t, b)
	mine := makeN(t, bed, 2*size+1, 10, false)
	var undo func()
	bed.BeforePage(func(page int) {
		if page == 2 && undo == nil {
			undo = bed.Fail(t, Outage)
		}
	})
	all, err := p.InstanceView().List(context.Background(), 0)
	bed.BeforePage(nil)
	if undo == nil {
		t.Fatal("the list had no page 2")
	}
	undo()
	if err == nil || all != nil {
		t.Errorf("page 2 failed: listed %d instances, error %v", len(all), err)
	}
	p.InstanceView().Invalidate()
	if all, err := p.InstanceView().List(context.Background(), 0); err != nil || len(all) != len(mine) {
		t.Errorf("after the failure: %d instances, %v", len(all), err)
	}
}

// Instances made or deleted between two pages never make the list miss or
// repeat one that was there throughout: the list is whole, or an error.
func changesBetweenPages(t *testing.T, b Backend) {
	bed, p, size := pager(t, b)
	ctx := context.Background()
	mine := makeN(t, bed, 2*size+1, 10, false)
	check := func(what string, throughout []Made, mayError bool) {
		t.Helper()
		p.InstanceView().Invalidate()
		all, err := p.InstanceView().List(ctx, 0)
		if err != nil {
			if !mayError {
				t.Errorf("%s: %v", what, err)
			}
			return
		}
		got := providerIDs(all)
		if len(slices.Compact(slices.Clone(got))) != len(got) {
			t.Errorf("%s: an instance listed twice: %v", what, got)
		}
		for _, m := range throughout {
			if !slices.Contains(got, m.ProviderID) {
				t.Errorf("%s: %s (there throughout) missed: %v", what, m.ProviderID, got)
			}
		}
	}
	// The first instance deleted as page 2 is asked: an offset list
	// would shift the rest up a page and miss one.
	once := false
	bed.BeforePage(func(page int) {
		if page == 2 && !once {
			once = true
			bed.Delete(t, mine[0])
		}
	})
	check("one deleted between pages", mine[1:], false)
	// One made as page 2 is asked.
	once = false
	bed.BeforePage(func(page int) {
		if page == 2 && !once {
			once = true
			bed.Make(t, Spec{Name: "late-1", N: 240})
		}
	})
	check("one made between pages", mine[1:], false)
	// One made before the rest in the list's order (where the bed can) and
	// the last deleted, as page 2 is asked: as many as before, but an
	// offset list would give one twice.
	once = false
	bed.BeforePage(func(page int) {
		if page == 2 && !once {
			once = true
			bed.Make(t, Spec{Name: "early-1", N: 239, First: true})
			bed.Delete(t, mine[len(mine)-1])
		}
	})
	check("one made first and the last deleted between pages", mine[1:len(mine)-1], false)
	// One made at every page 2: whole, or an error.
	n := 0
	bed.BeforePage(func(page int) {
		if page == 2 && n < 9 {
			n++
			bed.Make(t, Spec{Name: fmt.Sprintf("churn-%d", n), N: 240 + n})
		}
	})
	check("one made at every listing", mine[1:len(mine)-1], true)
	bed.BeforePage(nil)
}

// The registry builds the provider from a config file, as mooring-ccm
// does.
func registered(t *testing.T, b Backend) {
	if b.Config == nil {
		t.Skip("no config for the registry")
	}
	bed := b.New(t, Options{})
	m := bed.Make(t, Spec{Name: "node-1", N: 1})
	if !cloud.Known(b.Name) {
		t.Fatalf("%s is not registered", b.Name)
	}
	path := filepath.Join(t.TempDir(), "cloud.yaml")
	if err := os.WriteFile(path, []byte(b.Config(t, bed)), 0o600); err != nil {
		t.Fatal(err)
	}
	cp, err := cloud.NewProvider(b.Name, path)
	if err != nil {
		t.Fatal(err)
	}
	a, ok := cp.(cloud.Attester)
	if !ok {
		t.Fatal("the registered provider is no Attester")
	}
	all, err := a.InstanceView().List(context.Background(), 0)
	if err != nil || !slices.Equal(providerIDs(all), []string{m.ProviderID}) {
		t.Errorf("the registered provider lists %v, %v", providerIDs(all), err)
	}
}
