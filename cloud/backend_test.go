package cloud

import (
	"context"
	"io"
	"strings"
	"testing"

	cloudprovider "k8s.io/cloud-provider"

	"github.com/mooring-dev/mooring/cloud/nodeid"
	"github.com/mooring-dev/mooring/internal/evidence"
)

type stubIdentity struct{}

func (stubIdentity) Instance(context.Context) (nodeid.Instance, error) { return nodeid.Instance{}, nil }
func (stubIdentity) Evidence(context.Context, string) (evidence.Block, error) {
	return evidence.Block{}, nil
}

func noProvider(io.Reader) (cloudprovider.Interface, error) { return nil, nil }

func TestRegistry(t *testing.T) {
	Register(Backend{Name: "test-a", Provider: noProvider})
	nodeid.Register("test-a", func(nodeid.Config) (nodeid.Identity, error) { return stubIdentity{}, nil })
	Register(Backend{Name: "test-b", Provider: noProvider})
	nodeid.Register("test-node-only", func(nodeid.Config) (nodeid.Identity, error) { return stubIdentity{}, nil })
	// Both registries, each name once.
	if got := strings.Join(Backends(), ","); got != "test-a,test-b,test-node-only" {
		t.Fatalf("Backends() = %s", got)
	}
	if !Known("test-a") || !Known("test-b") || !Known("test-node-only") || Known("test-c") {
		t.Fatalf("Known: %v", Backends())
	}
	// mooring's registry is its own: an upstream provider registering the
	// same name with k8s.io/cloud-provider does not clash with it.
	if cloudprovider.IsCloudProvider("test-a") {
		t.Fatal("the provider is registered with k8s.io/cloud-provider")
	}
	cloudprovider.RegisterCloudProvider("test-a", noProvider)
	if _, err := NewProvider("test-a", ""); err == nil || !strings.Contains(err.Error(), "built no provider") {
		t.Fatalf("NewProvider of a factory answering nil: %v", err)
	}
	if _, err := NewProvider("test-c", ""); err == nil || !strings.Contains(err.Error(), "test-a") {
		t.Fatalf("NewProvider of an unknown backend: %v", err)
	}
	for name, b := range map[string]Backend{"duplicate": {Name: "test-a", Provider: noProvider}, "no provider": {Name: "test-d"}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: Register did not panic", name)
				}
			}()
			Register(b)
		}()
	}
}
