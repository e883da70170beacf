package cloud

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"sync"

	cloudprovider "k8s.io/cloud-provider"

	"github.com/mooring-dev/mooring/internal/evidence"
)

// Backend is everything a cloud gives mooring, registered once under its
// name (as k8s.io/cloud-provider's RegisterCloudProvider does for
// providers):
//   - Provider builds the CCM's cloud provider from its cloud-config (see
//     NewProvider); when it also implements Attester it backs the CSR
//     approver;
//   - NodeIdentity builds what the node agent asks about its own machine.
//
// The binaries select a backend by name and import every backend through
// cloud/all; no product package imports a backend directly.
type Backend struct {
	Name         string
	Provider     func(config io.Reader) (cloudprovider.Interface, error)
	NodeIdentity func(NodeConfig) (NodeIdentity, error)
}

// NodeConfig is the node agent's configuration of its backend.
type NodeConfig struct {
	// MetadataURL overrides the address of the instance metadata service
	// ("" is the cloud's own).
	MetadataURL string
	// NodeNamePolicy names the backend's node name policy ("" is the
	// backend's default); it must be the one the CCM and the approver use.
	NodeNamePolicy string
	// Settings are the backend's own settings (the agent config's
	// cloudSettings); a backend refuses keys it does not know.
	Settings map[string]string
}

// NodeInstance is what a machine's metadata service says about it.
type NodeInstance struct {
	ID, Name, ProviderID string
	// NodeName is the Node name under the node name policy.
	NodeName string
	// InternalIP is the instance's first internal address, if any.
	InternalIP string
}

// NodeIdentity is a machine's cloud identity as the node agent sees it: its
// metadata, and evidence the cloud signs for a binding value (the CSR key's,
// internal/evidence.Binding).
type NodeIdentity interface {
	Instance(ctx context.Context) (NodeInstance, error)
	// Evidence returns an error wrapping ErrNoEvidence when the cloud signs
	// no instance identity: its machines join with a join ticket.
	Evidence(ctx context.Context, binding string) (evidence.Block, error)
}

// ErrNoEvidence: the cloud signs no instance identity (DigitalOcean,
// Hetzner, OpenStack, bare metal); a node joins there with a join ticket
// (docs/tickets.md).
var ErrNoEvidence = errors.New("this cloud signs no instance identity")

var (
	backendsMu sync.RWMutex
	backends   = map[string]Backend{}
)

// Register makes a backend available by name. It panics on a second
// registration of a name, or a backend without a provider: both are
// programming errors found at start.
func Register(b Backend) {
	backendsMu.Lock()
	defer backendsMu.Unlock()
	if b.Name == "" || b.Provider == nil {
		panic("cloud: a backend needs a name and a provider")
	}
	if _, dup := backends[b.Name]; dup {
		panic(fmt.Sprintf("cloud: backend %q registered twice", b.Name))
	}
	backends[b.Name] = b
}

// NewProvider builds the named backend's cloud provider from the config
// file at configFile ("" for none). mooring's binaries build providers only
// through it: mooring's registry is not k8s.io/cloud-provider's, so an
// upstream provider package that registers itself there under the same
// name (as k8s.io/cloud-provider-aws does with "aws") can be linked in for
// its load balancers without clashing with the backend.
func NewProvider(name, configFile string) (cloudprovider.Interface, error) {
	backendsMu.RLock()
	b, ok := backends[name]
	backendsMu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("cloud provider %q is not supported here (known: %v)", name, Backends())
	}
	var config io.Reader
	if configFile != "" {
		f, err := os.Open(configFile)
		if err != nil {
			return nil, fmt.Errorf("cloud provider %s: %w", name, err)
		}
		defer f.Close()
		config = f
	}
	cp, err := b.Provider(config)
	if err != nil {
		return nil, fmt.Errorf("cloud provider %s: %w", name, err)
	}
	if cp == nil {
		return nil, fmt.Errorf("cloud provider %s: its factory built no provider", name)
	}
	return cp, nil
}

// Backends lists the registered backends' names, sorted.
func Backends() []string {
	backendsMu.RLock()
	defer backendsMu.RUnlock()
	names := make([]string, 0, len(backends))
	for n := range backends {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// NewNodeIdentity builds the node identity of the named backend.
func NewNodeIdentity(name string, cfg NodeConfig) (NodeIdentity, error) {
	backendsMu.RLock()
	b, ok := backends[name]
	backendsMu.RUnlock()
	switch {
	case !ok:
		return nil, fmt.Errorf("cloud %q is not supported here (known: %v)", name, Backends())
	case b.NodeIdentity == nil:
		return nil, fmt.Errorf("cloud %q has no node identity: mooring-agent cannot attest its machines", name)
	}
	return b.NodeIdentity(cfg)
}

// Known reports whether a backend of that name is registered.
func Known(name string) bool { return slices.Contains(Backends(), name) }
