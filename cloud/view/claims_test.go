package view

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/component-base/metrics/testutil"
)

// series counts the series of the metric name in the process's registry.
func series(t *testing.T, name string) int {
	t.Helper()
	families, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name {
			return len(f.GetMetric())
		}
	}
	return 0
}

// A clone that kept its original's BIOS UUID lists under the original's
// providerID. The snapshot used to keep whichever came last, so which VM a
// Node mapped to depended on list order and the clone's state decided the
// original's fate. Now no lookup that lands on either is answered: every
// key of both gives an AmbiguousError naming the two, a metric names them,
// and once the clone is gone (or terminated) the original is answered
// again.
func TestTwinsAreAnsweredForNeither(t *testing.T) {
	original := inst("4237-uuid", "web-1", StateRunning)
	original.NodeName = "web-1"
	clone := original
	clone.Name, clone.NodeName, clone.State = "web-1-clone", "web-1-clone", StateStopped
	src := &countingSource{items: []Instance{original, clone, inst("i-2", "other", StateRunning)}}
	v := New(src, Options{MinRefreshInterval: time.Millisecond})
	ctx := context.Background()

	for name, lookup := range map[string]func() error{
		"providerID":       func() error { _, err := v.ByProviderID(ctx, "local://4237-uuid", time.Hour); return err },
		"id":               func() error { _, err := v.ByID(ctx, "4237-uuid", time.Hour); return err },
		"name of original": func() error { _, err := v.ByName(ctx, "web-1", time.Hour); return err },
		"node name clone":  func() error { _, err := v.ByNodeName(ctx, "web-1-clone", time.Hour); return err },
		"named":            func() error { _, err := v.Named(ctx, "web-1-clone", time.Hour); return err },
		"patient":          func() error { _, err := v.Patient().ByProviderID(ctx, "local://4237-uuid", time.Hour); return err },
	} {
		err := lookup()
		var amb *AmbiguousError
		if !errors.As(err, &amb) || !errors.Is(err, ErrAmbiguous) || len(amb.Instances) != 2 {
			t.Errorf("%s: %v, want an AmbiguousError naming both", name, err)
			continue
		}
		if errors.Is(err, ErrNotFound) || errors.Is(err, ErrUnconfirmed) {
			t.Errorf("%s: %v must be neither not found nor unconfirmed", name, err)
		}
		if msg := err.Error(); !strings.Contains(msg, "web-1 (4237-uuid, running)") || !strings.Contains(msg, "web-1-clone (4237-uuid, stopped)") {
			t.Errorf("%s: %q does not name both", name, msg)
		}
	}
	if _, err := v.ByProviderID(ctx, "local://i-2", time.Hour); err != nil {
		t.Errorf("another instance: %v", err)
	}
	got, err := testutil.GetGaugeMetricValue(ambiguousInstances.WithLabelValues("local://4237-uuid", "web-1 (4237-uuid, running), web-1-clone (4237-uuid, stopped)"))
	if err != nil || got != 2 {
		t.Errorf("ambiguous_instances = %v, %v; want 2", got, err)
	}

	// The clone terminated: it no longer counts.
	clone.State = StateTerminated
	src.set([]Instance{original, clone}, nil)
	if in, err := v.ByProviderID(ctx, "local://4237-uuid", 0); err != nil || in.Name != "web-1" {
		t.Errorf("after the clone terminated: %+v, %v", in, err)
	}
	if n := series(t, "mooring_cloud_view_ambiguous_instances"); n != 0 {
		t.Errorf("ambiguous_instances has %d series once the twins are gone", n)
	}
}

func TestWithAddress(t *testing.T) {
	a := inst("i-1", "node-1", StateRunning)
	a.NodeName = "node-1"
	a.Addresses = []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "10.0.0.1"}, {Type: v1.NodeHostName, Address: "Shared.Example."}}
	b := inst("i-2", "node-2", StateRunning)
	b.NodeName = "node-2"
	b.Addresses = []v1.NodeAddress{{Type: v1.NodeExternalIP, Address: "::ffff:10.0.0.1"}, {Type: v1.NodeHostName, Address: "shared.example"}}
	gone := inst("i-3", "node-3", StateTerminated)
	gone.Addresses = []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "10.0.0.1"}}
	v := New(&countingSource{items: []Instance{a, b, gone}}, Options{})
	ctx := context.Background()
	for addr, want := range map[string]string{
		"10.0.0.1": "i-1 i-2", "shared.example": "i-1 i-2", "SHARED.EXAMPLE.": "i-1 i-2",
		"node-2": "i-2", "10.0.0.9": "",
	} {
		ins, err := v.WithAddress(ctx, addr, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, in := range ins {
			ids = append(ids, in.ID)
		}
		if got := strings.Join(ids, " "); got != want {
			t.Errorf("WithAddress(%q) = %q, want %q", addr, got, want)
		}
	}
}
