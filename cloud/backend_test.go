package cloud

import (
	"context"
	"io"
	"strings"
	"testing"

	cloudprovider "k8s.io/cloud-provider"

	"github.com/mooring-dev/mooring/internal/evidence"
)

type stubIdentity struct{ url string }

func (s stubIdentity) Instance(context.Context) (NodeInstance, error) {
	return NodeInstance{ID: "i-1", Name: s.url}, nil
}
func (stubIdentity) Evidence(context.Context, string) (evidence.Block, error) {
	return evidence.Block{}, nil
}

func noProvider(io.Reader) (cloudprovider.Interface, error) { return nil, nil }

func TestRegistry(t *testing.T) {
	Register(Backend{Name: "test-a", Provider: noProvider, NodeIdentity: func(c NodeConfig) (NodeIdentity, error) { return stubIdentity{c.MetadataURL}, nil }})
	Register(Backend{Name: "test-b", Provider: noProvider})
	if !Known("test-a") || Known("test-c") {
		t.Fatalf("Known: %v", Backends())
	}
	id, err := NewNodeIdentity("test-a", NodeConfig{MetadataURL: "http://md"})
	if err != nil {
		t.Fatal(err)
	}
	if in, _ := id.Instance(context.Background()); in.Name != "http://md" {
		t.Fatalf("the identity did not get its metadata URL: %+v", in)
	}
	if _, err := NewNodeIdentity("test-b", NodeConfig{}); err == nil || !strings.Contains(err.Error(), "no node identity") {
		t.Fatalf("a backend without node identity: %v", err)
	}
	if _, err := NewNodeIdentity("test-c", NodeConfig{}); err == nil || !strings.Contains(err.Error(), "test-a") {
		t.Fatalf("an unknown backend's error should list the known ones: %v", err)
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
