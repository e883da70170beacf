// Package nodeid is what a cloud backend gives mooring's node agent: a
// machine's cloud identity as the agent sees it (its instance metadata,
// and evidence its cloud signs), and the registry of those identities by
// cloud name.
//
// It is the node's half of the backend seam; package cloud is the other
// (the CCM provider and the approver's verifiers), and imports this one.
// Nothing here, nor in a backend's node part (cloud/<name>/agentid, which
// registers itself here), may import package cloud or a backend's provider:
// mooring-agent links only the node parts (cloud/all/agentid), and none of
// k8s.io/cloud-provider or the clouds' compute SDKs.
package nodeid

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"

	"github.com/mooring-dev/mooring/cloud/tpm/node"
	"github.com/mooring-dev/mooring/internal/evidence"
)

// Config is the node agent's configuration of its backend.
type Config struct {
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

// Instance is what a machine's metadata service says about it.
type Instance struct {
	ID, Name, ProviderID string
	// NodeName is the Node name under the node name policy.
	NodeName string
	// InternalIP is the instance's first internal address, if any.
	InternalIP string
}

// Identity is a machine's cloud identity as the node agent sees it: its
// metadata, and evidence the cloud signs for a binding value (the CSR key's,
// internal/evidence.Binding).
type Identity interface {
	Instance(ctx context.Context) (Instance, error)
	// Evidence returns an error wrapping ErrNoEvidence when the cloud signs
	// no instance identity: its machines join with a join ticket.
	Evidence(ctx context.Context, binding string) (evidence.Block, error)
}

// ErrNoEvidence: the cloud signs no instance identity (DigitalOcean,
// Hetzner, OpenStack, bare metal); a node joins there with a join ticket
// (docs/tickets.md).
var ErrNoEvidence = errors.New("this cloud signs no instance identity")

// TPMKeyer is implemented by the node identity of a cloud whose machines
// can also prove a join with their (virtual) TPM: TPMKey names the
// attestation key the cloud vouches for (node.GCEKey, node.DefaultKey with
// the EK, ...). The agent then adds a TPM quote (cloud/tpm) after the
// cloud's evidence, when its tpm setting and the machine's TPM device allow.
type TPMKeyer interface {
	TPMKey() node.Key
}

// Unsigned is implemented by the node identity of a cloud that signs no
// instance identity, whose Evidence always wraps ErrNoEvidence: its
// machines can join only with a join ticket.
type Unsigned interface {
	Identity
	SignsNoIdentity()
}

// NeedsTicket reports whether a machine of id's cloud needs a join ticket
// to join (its cloud signs no instance identity). `mooring-agent
// user-data` refuses to render user-data without one for such a cloud.
func NeedsTicket(id Identity) bool {
	_, ok := id.(Unsigned)
	return ok
}

// Factory builds a backend's identity from the agent's configuration of
// it. It checks the configuration and calls nothing: the agent validates
// its config, and `mooring-agent user-data` its flags, by building one.
type Factory func(Config) (Identity, error)

var (
	mu        sync.RWMutex
	factories = map[string]Factory{}
)

// Register makes a backend's node identity available by the backend's
// name, from the init of its node part. It panics on a second registration
// of a name, or a missing name or factory: programming errors found at
// start.
func Register(name string, f Factory) {
	mu.Lock()
	defer mu.Unlock()
	if name == "" || f == nil {
		panic("nodeid: a node identity needs a name and a factory")
	}
	if _, dup := factories[name]; dup {
		panic(fmt.Sprintf("nodeid: %q registered twice", name))
	}
	factories[name] = f
}

// New builds the node identity of the named backend.
func New(name string, cfg Config) (Identity, error) {
	mu.RLock()
	f, ok := factories[name]
	mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("cloud %q is not supported here (known: %v)", name, Backends())
	}
	id, err := f(cfg)
	switch {
	case err != nil:
		return nil, err
	case id == nil:
		return nil, fmt.Errorf("cloud %s: its node identity factory built nothing", name)
	}
	return id, nil
}

// Backends lists the names of the backends with a node identity, sorted.
func Backends() []string {
	mu.RLock()
	defer mu.RUnlock()
	names := make([]string, 0, len(factories))
	for n := range factories {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Known reports whether a backend of that name has a node identity.
func Known(name string) bool { return slices.Contains(Backends(), name) }
