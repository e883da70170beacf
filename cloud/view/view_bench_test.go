package view

import (
	"context"
	"strings"
	"testing"
	"time"
)

// benchFleet is the size of the cluster the benchmarks look up in.
const benchFleet = 5000

// benchItems are benchFleet running instances with node names.
func benchItems() []Instance {
	items := fleet(benchFleet)
	for i := range items {
		items[i].NodeName = strings.ToLower(items[i].Name)
	}
	return items
}

// BenchmarkLookup is one lookup in a ready view of 5,000 instances, as the
// CCM's controllers and the approver make them: a hit in a fresh snapshot,
// which costs no cloud call. "parallel" is the approver's workers looking
// up at once.
func BenchmarkLookup(b *testing.B) {
	items := benchItems()
	src := &countingSource{items: items}
	v := New(src, Options{})
	ctx := context.Background()
	if err := v.Refresh(ctx, time.Hour); err != nil {
		b.Fatal(err)
	}
	lookups := []struct {
		name string
		find func(i int) (Instance, error)
	}{
		{"ByID", func(i int) (Instance, error) { return v.ByID(ctx, items[i].ID, time.Hour) }},
		{"ByProviderID", func(i int) (Instance, error) { return v.ByProviderID(ctx, items[i].ProviderID, time.Hour) }},
		{"ByName", func(i int) (Instance, error) { return v.ByName(ctx, items[i].Name, time.Hour) }},
		{"ByNodeName", func(i int) (Instance, error) { return v.ByNodeName(ctx, items[i].NodeName, time.Hour) }},
	}
	for _, l := range lookups {
		b.Run(l.name, func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if _, err := l.find(i % benchFleet); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
	b.Run("ByID/parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				if _, err := lookups[0].find(i % benchFleet); err != nil {
					b.Error(err)
					return
				}
				i++
			}
		})
	})
	if n := src.calls.Load(); n != 1 {
		b.Errorf("%d Lists, want the one that made the view ready", n)
	}
}

// BenchmarkSnapshot is what each List costs mooring besides the cloud's
// answer: indexing 5,000 instances by id, providerID, name and node name.
func BenchmarkSnapshot(b *testing.B) {
	items := benchItems()
	b.ReportAllocs()
	for b.Loop() {
		newSnapshot(time.Now(), items)
	}
}
