package hetzner

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/hetznercloud/hcloud-go/v2/hcloud"
)

// NetworkRef names a private network as the upstream CCM's HCLOUD_NETWORK
// does: by its ID (a number, or a string of digits) or by its name. In the
// cloud config it is written as either: network: 4711, network: "4711" or
// network: k8s-net.
type NetworkRef struct {
	// ID is the network's ID; 0 when it is named.
	ID int64
	// Name is the network's name; "" when it is given by ID.
	Name string
}

// IsZero reports whether no network is named.
func (n NetworkRef) IsZero() bool { return n.ID == 0 && n.Name == "" }

// String is the ID or the name as configured.
func (n NetworkRef) String() string {
	if n.Name != "" {
		return n.Name
	}
	if n.ID == 0 {
		return ""
	}
	return strconv.FormatInt(n.ID, 10)
}

// UnmarshalJSON reads a number (the ID), a string of digits (the ID) or
// another string (the name); null and "" name no network.
func (n *NetworkRef) UnmarshalJSON(b []byte) error {
	*n = NetworkRef{}
	b = bytes.TrimSpace(b)
	switch {
	case bytes.Equal(b, []byte("null")):
		return nil
	case len(b) > 0 && b[0] == '"':
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		if id, err := strconv.ParseInt(s, 10, 64); err == nil {
			n.ID = id
			return nil
		}
		n.Name = s
		return nil
	}
	id, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		return fmt.Errorf("network %s: want a network ID (a whole number) or a network name (a string)", b)
	}
	n.ID = id
	return nil
}

// MarshalJSON writes the ID as a number, or the name as a string.
func (n NetworkRef) MarshalJSON() ([]byte, error) {
	if n.Name != "" {
		return json.Marshal(n.Name)
	}
	return json.Marshal(n.ID)
}

// check is the config's validation of the field.
func (n NetworkRef) check() error {
	switch {
	case n.ID < 0:
		return fmt.Errorf("network %d: want a network ID or name (or nothing, for every private network)", n.ID)
	case n.Name != "" && strings.TrimSpace(n.Name) != n.Name:
		return fmt.Errorf("network %q: a network name without surrounding white space", n.Name)
	case strings.IndexFunc(n.Name, unicode.IsControl) >= 0:
		return fmt.Errorf("network %q: a network name without control characters", n.Name)
	}
	return nil
}

// networkResolver finds the configured network's ID: the configured ID
// itself, or, for a name, the ID of the project's network of that name,
// asked for (GET /networks?name=...) until it is found once and kept for
// the process's life (a network renamed or recreated under the same name
// later is seen after a restart).
type networkResolver struct {
	ref     NetworkRef
	client  *hcloud.NetworkClient
	timeout time.Duration

	mu sync.Mutex
	id int64
}

// errNoNetwork is wrapped by the error of a network the project lacks.
var errNoNetwork = errors.New("no such network in the project")

// ID is the network's ID; 0 when none is configured.
func (r *networkResolver) ID(ctx context.Context) (int64, error) {
	if r == nil || r.ref.Name == "" {
		if r == nil {
			return 0, nil
		}
		return r.ref.ID, nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.id != 0 {
		return r.id, nil
	}
	if r.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, r.timeout)
		defer cancel()
	}
	n, resp, err := r.client.GetByName(ctx, r.ref.Name)
	noteRateLimit(resp)
	switch {
	case err != nil:
		return 0, fmt.Errorf("hetzner: looking up network %q: %w", r.ref.Name, err)
	case n == nil || n.ID <= 0:
		return 0, fmt.Errorf("hetzner: network %q: %w", r.ref.Name, errNoNetwork)
	}
	r.id = n.ID
	return r.id, nil
}
