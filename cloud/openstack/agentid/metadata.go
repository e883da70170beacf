package agentid

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"

	"k8s.io/klog/v2"

	"github.com/mooring-dev/mooring/cloud/nodeid/linklocal"
)

// MetaData is the part of meta_data.json the agent reads. The document
// holds more (public keys, devices, the server's metadata items, on some
// clouds the admin password); it is decoded into these fields only and
// never logged.
type MetaData struct {
	UUID             string `json:"uuid"`
	Name             string `json:"name"`
	Hostname         string `json:"hostname"`
	AvailabilityZone string `json:"availability_zone"`
	ProjectID        string `json:"project_id"`
}

// errNoService: nothing answers at the metadata service's address, or it
// has no OpenStack metadata (meta_data.json is 404). In auto mode the
// config drive is read instead.
var errNoService = errors.New("no OpenStack metadata service")

// MetaData reads meta_data.json from the metadata service.
func (n *NodeIdentity) MetaData(ctx context.Context) (MetaData, error) {
	var md MetaData
	return md, n.md.GetJSON(ctx, MetaDataPath, &md)
}

// readService reads the record from the metadata service: meta_data.json,
// then local-ipv4, and network_data.json only when there is no
// local-ipv4 (Nova leaves local-ipv4 out when the server has no fixed
// IPv4 address; a service without network_data.json, before Liberty, is
// no error).
func (n *NodeIdentity) readService(ctx context.Context) (Record, error) {
	base := n.md.Base()
	rec := Record{Source: "metadata service " + base}
	err := n.md.GetJSON(ctx, MetaDataPath, &rec.MetaData)
	switch {
	case errors.Is(err, linklocal.ErrUnreachable):
		return rec, fmt.Errorf("%w at %s: %w", errNoService, base, err)
	case linklocal.IsNotFound(err):
		return rec, fmt.Errorf("%w at %s: %s answers 404", errNoService, base, MetaDataPath)
	case err != nil:
		return rec, err
	}
	data, err := n.md.Get(ctx, LocalIPv4Path)
	switch {
	case linklocal.IsNotFound(err):
	case err != nil:
		return rec, err
	default:
		if rec.LocalIPv4, err = parseLocalIPv4(string(data)); err != nil {
			return rec, fmt.Errorf("%s: metadata %s: %w", Name, LocalIPv4Path, err)
		}
	}
	if rec.LocalIPv4 != "" {
		return rec, nil
	}
	nd := &NetworkData{}
	switch err := n.md.GetJSON(ctx, NetworkDataPath, nd); {
	case linklocal.IsNotFound(err):
		return rec, nil
	case err != nil:
		return rec, err
	}
	rec.NetworkData = nd
	return rec, nil
}

// parseLocalIPv4 reads local-ipv4: an IPv4 address, or "" for none. Nova
// writes the server's first fixed IPv4 address or, when it has none, the
// address the request came from (nova/api/metadata/base.py), which on a
// server without IPv4 is an IPv6 address: that is no address of the
// server's to take, and counts as none. Anything else is an error.
func parseLocalIPv4(s string) (string, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return "", nil
	}
	ip := net.ParseIP(s)
	switch {
	case ip == nil:
		return "", fmt.Errorf("local-ipv4 %.80q is not an IP address", s)
	case ip.To4() == nil:
		klog.V(2).InfoS("Nova's local-ipv4 is an IPv6 address (the request's, on a server without a fixed IPv4 address); reading network_data.json", "localIPv4", s)
		return "", nil
	}
	return ip.To4().String(), nil
}

// decodeJSON decodes a config drive's document; its errors name a type
// or an offset, never the document's text (it may hold secrets).
func decodeJSON(data []byte, what string, v any) error {
	return linklocal.DecodeJSON(data, Name+": "+what, v)
}
