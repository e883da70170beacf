package csrapprover

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
	coreinformers "k8s.io/client-go/informers/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/mooring-dev/mooring/cloud/view"
)

// addressIndex indexes Nodes by the addresses in their status
// (view.AddressKey), for the serving check that no other Node carries a SAN.
const addressIndex = "mooring.dev/node-address"

// informerNodes are the decider's Nodes over the shared Node informer.
type informerNodes struct {
	corelisters.NodeLister
	indexer cache.Indexer
}

// newInformerNodes adds the address index to the Node informer (before it
// starts).
func newInformerNodes(inf coreinformers.NodeInformer) (informerNodes, error) {
	if err := inf.Informer().AddIndexers(cache.Indexers{addressIndex: nodeAddresses}); err != nil {
		return informerNodes{}, fmt.Errorf("index Nodes by address: %w", err)
	}
	return informerNodes{NodeLister: inf.Lister(), indexer: inf.Informer().GetIndexer()}, nil
}

func nodeAddresses(obj any) ([]string, error) {
	n, ok := obj.(*v1.Node)
	if !ok {
		return nil, nil
	}
	out := make([]string, 0, len(n.Status.Addresses))
	for _, a := range n.Status.Addresses {
		if k := view.AddressKey(a.Address); k != "" {
			out = append(out, k)
		}
	}
	return out, nil
}

// WithAddress lists the Nodes whose status carries address.
func (n informerNodes) WithAddress(address string) ([]*v1.Node, error) {
	objs, err := n.indexer.ByIndex(addressIndex, view.AddressKey(address))
	if err != nil {
		return nil, err
	}
	out := make([]*v1.Node, 0, len(objs))
	for _, o := range objs {
		if node, ok := o.(*v1.Node); ok {
			out = append(out, node)
		}
	}
	return out, nil
}
