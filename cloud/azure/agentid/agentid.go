// Package agentid is the Azure backend's side of the node agent: the VM's
// record from IMDS (header Metadata: true, a pinned api-version), and an
// attested document whose nonce is derived from the CSR key's binding
// (evidence.go: Nonce) as evidence. It registers the node identity of the
// backend "azure" (cloud/nodeid), and holds what the approver's verifier
// and the provider share with it: the nonce, resource ids and providerIDs,
// Node names (names.go). It imports neither (mooring-agent links it
// without them).
package agentid

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode"

	"github.com/smallstep/pkcs7"
	"k8s.io/klog/v2"

	"github.com/mooring-dev/mooring/cloud/nodeid"
	"github.com/mooring-dev/mooring/cloud/nodeid/linklocal"
	"github.com/mooring-dev/mooring/internal/evidence"
)

// Name is the backend's name, the agent config's cloud: azure.
const Name = "azure"

func init() { nodeid.Register(Name, nodeid.Of(NewNodeIdentity)) }

// IMDS facts.
const (
	// IMDSAPIVersion is the api-version the agent pins for both the
	// instance record and the attested document.
	IMDSAPIVersion = "2021-02-01"
	// maxIMDSAnswer bounds one IMDS answer the agent reads (each
	// request: linklocal's 10s).
	maxIMDSAnswer = 64 << 10
)

// NodeNamePolicyVMName is the only node name policy: the VM's name (a
// scale-set VM's computer name), lower case, as the Azure CCM names Nodes.
const NodeNamePolicyVMName = "VMName"

// NodeIdentity is an Azure VM as its node agent sees it: IMDS's instance
// record and attested documents.
type NodeIdentity struct {
	imds    *linklocal.Client
	backoff time.Duration // first retry's wait; 0 is firstBackoff
}

var _ nodeid.Identity = (*NodeIdentity)(nil)

// NewNodeIdentity reads the agent's configuration of the azure backend:
// cfg.MetadataURL ("" is IMDS's own address), cfg.NodeNamePolicy ("" or
// VMName); no cloudSettings. It calls nothing.
func NewNodeIdentity(cfg nodeid.Config) (*NodeIdentity, error) {
	if err := cfg.CheckPlain(Name, NodeNamePolicyVMName); err != nil {
		return nil, err
	}
	// A path (the tests' IMDS serves each VM under one) and https, as
	// Azure's metadataURL always took.
	imds, err := linklocal.Open(Name, cfg.MetadataURL, linklocal.DefaultURL, linklocal.Options{Prefix: "azure: IMDS", MaxBody: maxIMDSAnswer,
		Header: http.Header{"Metadata": {"true"}}}, linklocal.AllowHTTPS(), linklocal.AllowPath())
	if err != nil {
		return nil, err
	}
	return &NodeIdentity{imds: imds}, nil
}

// imdsInstance is the part of /metadata/instance the agent reads.
type imdsInstance struct {
	Compute struct {
		VMID       string `json:"vmId"`
		Name       string `json:"name"`
		ResourceID string `json:"resourceId"`
		Location   string `json:"location"`
		Zone       string `json:"zone"`
		OSProfile  struct {
			ComputerName string `json:"computerName"`
		} `json:"osProfile"`
	} `json:"compute"`
	Network struct {
		Interface []struct {
			IPv4 struct {
				IPAddress []struct {
					PrivateIPAddress string `json:"privateIpAddress"`
					PublicIPAddress  string `json:"publicIpAddress"`
				} `json:"ipAddress"`
			} `json:"ipv4"`
		} `json:"interface"`
	} `json:"network"`
}

// Instance reads the VM's record from IMDS.
func (n *NodeIdentity) Instance(ctx context.Context) (nodeid.Instance, error) {
	var md imdsInstance
	if err := n.get(ctx, "/metadata/instance", nil, &md); err != nil {
		return nodeid.Instance{}, err
	}
	c := md.Compute
	if !ValidUUID(c.VMID) {
		return nodeid.Instance{}, fmt.Errorf("azure: IMDS compute.vmId %.60q is not a UUID", c.VMID)
	}
	r, err := ParseResourceID(c.ResourceID)
	if err != nil {
		return nodeid.Instance{}, fmt.Errorf("azure: IMDS compute.resourceId: %w", err)
	}
	out := nodeid.Instance{
		ID:         strings.ToLower(c.VMID),
		Name:       c.Name,
		ProviderID: r.ProviderID(),
		NodeName:   NodeName(r, c.OSProfile.ComputerName),
	}
	for _, nic := range md.Network.Interface {
		for _, a := range nic.IPv4.IPAddress {
			if out.InternalIP == "" && a.PrivateIPAddress != "" {
				out.InternalIP = a.PrivateIPAddress
			}
		}
	}
	if out.NodeName == "" || strings.ContainsFunc(out.NodeName, unicode.IsControl) {
		return out, fmt.Errorf("azure: VM %s has no node name (no name, one that is no DNS-1123 subdomain, or a scale-set VM without a computer name)", out.ID)
	}
	return out, nil
}

// Retries of the attested document: IMDS may answer from its cache a
// document of an earlier request's nonce, and throttles a VM past 5
// requests a second (429).
const (
	// documentAttempts bounds the requests for one document.
	documentAttempts = 6
	// firstBackoff doubles after each retry (1s, 2s, 4s, 8s, 16s).
	firstBackoff = time.Second
)

// staleNonceError: IMDS answered with a document of another nonce.
type staleNonceError struct{ got, want string }

func (e staleNonceError) Error() string {
	return fmt.Sprintf("IMDS answered a document for nonce %.40q, not %q (a cached document of an earlier request)", e.got, e.want)
}

// Evidence asks IMDS for an attested document with the binding's nonce.
// A document whose signed nonce is not the one asked for (IMDS's cache)
// or a 429 is asked for again, at most documentAttempts times with a
// doubling backoff; no other document is ever returned, since the
// approver would deny it.
func (n *NodeIdentity) Evidence(ctx context.Context, binding string) (evidence.Block, error) {
	nonce, err := Nonce(binding)
	if err != nil {
		return evidence.Block{}, fmt.Errorf("azure: %w", err)
	}
	backoff := n.backoff
	if backoff <= 0 {
		backoff = firstBackoff
	}
	var last error
	for attempt := 1; attempt <= documentAttempts; attempt++ {
		if attempt > 1 {
			klog.V(2).InfoS("Asking IMDS for the attested document again", "attempt", attempt, "after", backoff, "err", last)
			select {
			case <-ctx.Done():
				return evidence.Block{}, fmt.Errorf("azure: attested document: %w (last: %v)", ctx.Err(), last)
			case <-time.After(backoff):
			}
			backoff *= 2
		}
		der, err := n.document(ctx, nonce)
		var stale staleNonceError
		switch {
		case err == nil:
			klog.V(2).InfoS("Got an attested document from IMDS", "nonce", nonce, "bytes", len(der), "attempt", attempt)
			return evidence.Block{Type: EvidenceType, Data: der}, nil
		case errors.As(err, &stale), retryable(err):
			last = err
		default:
			return evidence.Block{}, err
		}
	}
	return evidence.Block{}, fmt.Errorf("azure: no attested document with nonce %s after %d requests: %w", nonce, documentAttempts, last)
}

// document is one request for the attested document: its DER PKCS#7,
// whose signed content must hold nonce. The PKCS#7 is only parsed here
// (github.com/smallstep/pkcs7), to read the nonce; the approver verifies.
func (n *NodeIdentity) document(ctx context.Context, nonce string) ([]byte, error) {
	var doc struct {
		Encoding  string `json:"encoding"`
		Signature string `json:"signature"`
	}
	if err := n.get(ctx, "/metadata/attested/document", url.Values{"nonce": {nonce}}, &doc); err != nil {
		return nil, err
	}
	if !strings.EqualFold(doc.Encoding, "pkcs7") {
		return nil, fmt.Errorf("azure: attested document encoding %.20q, want pkcs7", doc.Encoding)
	}
	der, err := base64.StdEncoding.DecodeString(strings.Join(strings.Fields(doc.Signature), ""))
	if err != nil || len(der) == 0 {
		return nil, fmt.Errorf("azure: attested document signature is not base64: %v", err)
	}
	got, err := signedNonce(der)
	if err != nil {
		return nil, fmt.Errorf("azure: attested document: %w", err)
	}
	if got != nonce {
		return nil, staleNonceError{got: got, want: nonce}
	}
	return der, nil
}

// signedNonce reads the nonce of a document's signed content.
func signedNonce(der []byte) (nonce string, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("unparsable PKCS#7 (%v)", r)
		}
	}()
	p7, err := pkcs7.Parse(der)
	if err != nil {
		return "", fmt.Errorf("PKCS#7: %w", err)
	}
	var content struct {
		Nonce string `json:"nonce"`
	}
	if err := json.Unmarshal(p7.Content, &content); err != nil {
		return "", fmt.Errorf("signed content: %w", err)
	}
	return content.Nonce, nil
}

// retryable: an answer of 429 (throttled), or 410 or 500, which IMDS's
// documentation says to retry with backoff.
func retryable(err error) bool {
	var se *linklocal.StatusError
	return errors.As(err, &se) &&
		(se.Code == http.StatusTooManyRequests || se.Code == http.StatusGone || se.Code == http.StatusInternalServerError)
}

// get reads one IMDS JSON answer, with the Metadata header and the pinned
// api-version. An answer other than 200 is a *linklocal.StatusError with
// the start of IMDS's message.
func (n *NodeIdentity) get(ctx context.Context, path string, q url.Values, out any) error {
	if q == nil {
		q = url.Values{}
	}
	q.Set("api-version", IMDSAPIVersion)
	if path == "/metadata/instance" {
		q.Set("format", "json")
	}
	err := n.imds.DoJSON(ctx, linklocal.Request{Path: path, Query: q}, out)
	var se *linklocal.StatusError
	if errors.As(err, &se) {
		msg := strings.TrimSpace(string(se.Body))
		if len(msg) > 200 {
			msg = msg[:200] + "..."
		}
		return fmt.Errorf("%w: %q", se, msg)
	}
	return err
}
