package cloud

import (
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"sync"

	cloudprovider "k8s.io/cloud-provider"

	"github.com/mooring-dev/mooring/cloud/nodeid"
)

// Backend is what a cloud gives mooring's control plane, registered once
// under its name (as k8s.io/cloud-provider's RegisterCloudProvider does for
// providers): Provider builds the CCM's cloud provider from its
// cloud-config (see NewProvider); when it also implements Attester it backs
// the CSR approver.
//
// What the cloud gives the node agent, its node identity, registers apart
// under the same name (cloud/nodeid), from the backend's node part
// (cloud/<name>/agentid), so that mooring-agent links no provider. The
// binaries select a backend by name and import every backend through
// cloud/all (mooring-agent: cloud/all/agentid); no product package imports
// a backend directly.
type Backend struct {
	Name     string
	Provider func(config io.Reader) (cloudprovider.Interface, error)
}

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

// Backends lists the names of the registered backends, those with a
// provider and those with a node identity (cloud/nodeid), sorted.
func Backends() []string {
	names := nodeid.Backends()
	backendsMu.RLock()
	for n := range backends {
		names = append(names, n)
	}
	backendsMu.RUnlock()
	sort.Strings(names)
	return slices.Compact(names)
}

// Known reports whether a backend of that name is registered, with a
// provider or a node identity.
func Known(name string) bool { return slices.Contains(Backends(), name) }
