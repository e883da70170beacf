package kit

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cloudprovider "k8s.io/cloud-provider"

	"github.com/mooring-dev/mooring/cloud"
	"github.com/mooring-dev/mooring/cloud/view"
)

type listed []view.Instance

func (l listed) ListInstances(context.Context) ([]view.Instance, error) { return l, nil }

// testCloud is a backend as small as one can be: Base, InstancesOnly and
// a ConfirmInstance.
type testCloud struct {
	Base
	InstancesOnly
	confirmed int
}

func (c *testCloud) ConfirmInstance(_ context.Context, providerID string) (view.Instance, error) {
	c.confirmed++
	return view.Instance{}, &AbsentError{ID: providerID}
}

var (
	_ cloudprovider.Interface = (*testCloud)(nil)
	_ cloud.Attester          = (*testCloud)(nil)
	_ InstanceFinder          = (*testCloud)(nil)
)

const testPrefix = "test://"

func newTestCloud(zones bool) *testCloud {
	v := view.New(listed{
		{ProviderID: testPrefix + "a", ID: "a", Name: "a", NodeName: "node-a", Zone: "z1", Region: "r", State: view.StateRunning},
		{ProviderID: testPrefix + "b", ID: "b", Name: "b", NodeName: "node-b", Zone: "z2", Region: "r", State: view.StateStopped},
	}, view.Options{})
	c := &testCloud{}
	c.Base = NewBase(Options{Name: "test", View: v, ClusterTag: "c1", Finder: c, Zones: zones,
		ProviderID: func(id string) (string, error) {
			if !strings.HasPrefix(id, testPrefix) {
				return "", errors.New("not a test providerID")
			}
			return id, nil
		}})
	return c
}

func node(name, pid string) *v1.Node {
	return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1.NodeSpec{ProviderID: pid}}
}

func TestBase(t *testing.T) {
	ctx := context.Background()
	c := newTestCloud(false)
	if c.ProviderName() != "test" || c.ClusterTag() != "c1" || !c.HasClusterID() || c.EvidenceVerifiers() != nil {
		t.Fatalf("name %q, tag %q", c.ProviderName(), c.ClusterTag())
	}
	if _, ok := c.Zones(); ok {
		t.Fatal("Zones without Options.Zones")
	}
	iv2, ok := c.InstancesV2()
	if !ok {
		t.Fatal("no InstancesV2")
	}
	md, err := iv2.InstanceMetadata(ctx, node("node-a", ""))
	if err != nil || md.ProviderID != testPrefix+"a" || md.Zone != "z1" || md.Region != "r" {
		t.Fatalf("metadata by name: %+v %v", md, err)
	}
	if down, err := iv2.InstanceShutdown(ctx, node("node-b", testPrefix+"b")); err != nil || !down {
		t.Fatalf("stopped instance: shutdown %v %v", down, err)
	}
	// A providerID of another cloud is an error, never "gone".
	if ok, err := iv2.InstanceExists(ctx, node("x", "other://a")); err == nil || errors.Is(err, view.ErrNotFound) {
		t.Fatalf("foreign providerID: exists %v, %v", ok, err)
	}
	// Missing from the list: the cloud's own answer decides.
	if ok, err := iv2.InstanceExists(ctx, node("node-c", testPrefix+"c")); err != nil || ok || c.confirmed != 1 {
		t.Fatalf("absent instance: exists %v %v, %d confirmations", ok, err, c.confirmed)
	}

	c = newTestCloud(true)
	zones, ok := c.Zones()
	if !ok {
		t.Fatal("no Zones with Options.Zones")
	}
	if z, err := zones.GetZoneByProviderID(ctx, testPrefix+"b"); err != nil || z.FailureDomain != "z2" || z.Region != "r" {
		t.Fatalf("zone by providerID: %+v %v", z, err)
	}
	if _, err := zones.GetZoneByProviderID(ctx, "other://b"); err == nil {
		t.Fatal("zone of a foreign providerID")
	}
	if z, err := zones.GetZoneByNodeName(ctx, "node-a"); err != nil || z.FailureDomain != "z1" {
		t.Fatalf("zone by name: %+v %v", z, err)
	}
}

func TestFactory(t *testing.T) {
	parse := func(r io.Reader) (string, error) {
		b, err := io.ReadAll(r)
		return string(b), err
	}
	f := Factory(parse, func(cfg string) (*testCloud, error) {
		if cfg != "ok" {
			return nil, errors.New("bad config")
		}
		return newTestCloud(false), nil
	})
	if p, err := f(strings.NewReader("ok")); err != nil || p == nil || p.ProviderName() != "test" {
		t.Fatalf("%v %v", p, err)
	}
	// A failed build is a nil interface, not a typed nil.
	if p, err := f(strings.NewReader("bad")); err == nil || p != nil {
		t.Fatalf("bad config: %#v %v", p, err)
	}
}

func TestNewBaseRefusesHalfOptions(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("Zones without ProviderID accepted")
		}
	}()
	c := &testCloud{}
	NewBase(Options{Name: "x", View: view.New(listed{}, view.Options{}), Finder: c, Zones: true})
}
