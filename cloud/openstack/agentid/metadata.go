package agentid

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"

	"k8s.io/klog/v2"
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

// errNotThere: the metadata service answered 404 for a path.
var errNotThere = errors.New("not in the metadata service")

// errUnreachable: a request got no HTTP answer (refused, timed out, the
// connection closed).
var errUnreachable = errors.New("no answer")

// get reads one metadata path.
func (n *NodeIdentity) get(ctx context.Context, path string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, n.base+path, nil)
	if err != nil {
		return nil, fmt.Errorf("%s: metadata: %w", Name, err)
	}
	resp, err := n.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s: metadata %s: %w: %w", Name, path, errUnreachable, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxMetadataSize+1))
	switch {
	case err != nil:
		return nil, fmt.Errorf("%s: metadata %s: %w", Name, path, err)
	case resp.StatusCode == http.StatusNotFound:
		return nil, fmt.Errorf("%s: metadata %s: %w", Name, path, errNotThere)
	case resp.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("%s: metadata %s: HTTP %d", Name, path, resp.StatusCode)
	case len(data) > maxMetadataSize:
		return nil, fmt.Errorf("%s: metadata %s: larger than %d bytes", Name, path, maxMetadataSize)
	}
	return data, nil
}

// MetaData reads meta_data.json from the metadata service.
func (n *NodeIdentity) MetaData(ctx context.Context) (MetaData, error) {
	data, err := n.get(ctx, MetaDataPath)
	if err != nil {
		return MetaData{}, err
	}
	var md MetaData
	return md, decodeJSON(data, "metadata "+MetaDataPath, &md)
}

// readService reads the record from the metadata service: meta_data.json,
// then local-ipv4, and network_data.json only when there is no
// local-ipv4 (Nova leaves local-ipv4 out when the server has no fixed
// IPv4 address; a service without network_data.json, before Liberty, is
// no error).
func (n *NodeIdentity) readService(ctx context.Context) (Record, error) {
	rec := Record{Source: "metadata service " + n.base}
	data, err := n.get(ctx, MetaDataPath)
	switch {
	case errors.Is(err, errUnreachable):
		return rec, fmt.Errorf("%w at %s: %w", errNoService, n.base, err)
	case errors.Is(err, errNotThere):
		return rec, fmt.Errorf("%w at %s: %s answers 404", errNoService, n.base, MetaDataPath)
	case err != nil:
		return rec, err
	}
	if err := decodeJSON(data, "metadata "+MetaDataPath, &rec.MetaData); err != nil {
		return rec, err
	}
	data, err = n.get(ctx, LocalIPv4Path)
	switch {
	case errors.Is(err, errNotThere):
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
	data, err = n.get(ctx, NetworkDataPath)
	switch {
	case errors.Is(err, errNotThere):
		return rec, nil
	case err != nil:
		return rec, err
	}
	rec.NetworkData = &NetworkData{}
	return rec, decodeJSON(data, "metadata "+NetworkDataPath, rec.NetworkData)
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

// decodeJSON decodes a metadata document. Its errors name a type or an
// offset, never the document's text (it may hold secrets).
func decodeJSON(data []byte, what string, v any) error {
	err := json.Unmarshal(data, v)
	if err == nil {
		return nil
	}
	var syn *json.SyntaxError
	if errors.As(err, &syn) {
		return fmt.Errorf("%s: %s is not JSON (at byte %d)", Name, what, syn.Offset)
	}
	var typ *json.UnmarshalTypeError
	if errors.As(err, &typ) {
		return fmt.Errorf("%s: %s: field %s is not a %s", Name, what, typ.Field, typ.Type)
	}
	return fmt.Errorf("%s: %s does not decode", Name, what)
}
