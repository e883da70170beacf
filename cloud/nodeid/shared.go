package nodeid

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/mooring-dev/mooring/internal/evidence"
)

// This file holds what the backends' node parts (cloud/<name>/agentid)
// have in common: their factories, the checks of a configuration with one
// node name policy and no cloudSettings, Node names, and the evidence of a
// ticket cloud.

// Of makes a backend's constructor of its own identity type a Factory:
// nodeid.Register(Name, nodeid.Of(NewNodeIdentity)). On an error it gives
// a nil Identity, never a typed nil.
func Of[T Identity](build func(Config) (T, error)) Factory {
	return func(cfg Config) (Identity, error) {
		id, err := build(cfg)
		if err != nil {
			return nil, err
		}
		return id, nil
	}
}

// CheckPolicy checks NodeNamePolicy for a backend whose only node name
// policy is policy: "" (the default) or that one.
func (c Config) CheckPolicy(backend, policy string) error {
	if c.NodeNamePolicy != "" && c.NodeNamePolicy != policy {
		return fmt.Errorf("%s: node name policy %q: the only policy is %s", backend, c.NodeNamePolicy, policy)
	}
	return nil
}

// CheckNoSettings checks Settings for a backend that has no cloudSettings:
// any key is an error naming it (the first in sorted order).
func (c Config) CheckNoSettings(backend string) error {
	if len(c.Settings) == 0 {
		return nil
	}
	keys := make([]string, 0, len(c.Settings))
	for k := range c.Settings {
		keys = append(keys, k)
	}
	return fmt.Errorf("%s: cloudSettings: unknown key %q (the %s backend has none)", backend, slices.Min(keys), backend)
}

// CheckPlain checks the configuration of a backend with one node name
// policy and no cloudSettings (CheckPolicy, then CheckNoSettings); the
// metadata URL is the backend's to check.
func (c Config) CheckPlain(backend, policy string) error {
	if err := c.CheckPolicy(backend, policy); err != nil {
		return err
	}
	return c.CheckNoSettings(backend)
}

// NodeName is the Node name of a machine named name, under a policy that
// names Nodes after machines: the name lower-cased, as Node names are; ""
// when that is not a Node name (a DNS-1123 subdomain: at most 253
// characters of a-z, 0-9, '-' and '.', in labels that start and end with
// a letter or digit). An empty name gives "".
func NodeName(name string) string {
	n := strings.ToLower(name)
	if len(validation.IsDNS1123Subdomain(n)) > 0 {
		return ""
	}
	return n
}

// Ticketed is embedded in the node identity of a cloud that signs no
// instance identity, and makes it Unsigned: Evidence always fails with an
// error wrapping ErrNoEvidence, which says "<Backend>: ...: <Machine>
// joins with a join ticket (docs/tickets.md)".
type Ticketed struct {
	// Backend is the backend's name; Machine names one of its machines
	// with an article ("a droplet").
	Backend, Machine string
}

// SignsNoIdentity marks the backend as a ticket cloud (Unsigned): its
// machines join only with a join ticket.
func (Ticketed) SignsNoIdentity() {}

// Evidence is never given: the agent joins with a join ticket instead
// (joinTicketFile).
func (t Ticketed) Evidence(context.Context, string) (evidence.Block, error) {
	return evidence.Block{}, fmt.Errorf("%s: %w: %s joins with a join ticket (docs/tickets.md)", t.Backend, ErrNoEvidence, t.Machine)
}
