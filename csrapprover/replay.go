package csrapprover

import (
	"bytes"
	"context"
	"crypto/x509"
	"fmt"

	certificatesv1 "k8s.io/api/certificates/v1"

	"github.com/mooring-dev/mooring/cloud"
	"github.com/mooring-dev/mooring/internal/evidence"
)

const replayIndex = "mooring.dev/replay-key"

// replayKeys indexes a CSR by the replay keys its evidence claims, counting
// only evidence that claims to be bound to the CSR's own key. Nothing here
// is verified: the index only finds candidates, and EarlierHolder verifies
// each before it counts.
func (c *Controller) replayKeys(obj any) ([]string, error) {
	csr, ok := obj.(*certificatesv1.CertificateSigningRequest)
	if !ok || csr.Spec.SignerName != certificatesv1.KubeAPIServerClientKubeletSignerName {
		return nil, nil
	}
	req, blocks, err := evidence.Claimed(csr.Spec.Request)
	if err != nil || len(blocks) == 0 {
		return nil, nil
	}
	binding, err := evidence.Binding(req.PublicKey)
	if err != nil {
		return nil, nil
	}
	var keys []string
	for _, b := range blocks {
		v, ok := c.verifiers[b.Type]
		if !ok {
			continue
		}
		key, claimed, err := v.Peek(b.Data)
		if err == nil && key != "" && (claimed == "" || claimed == binding) {
			keys = append(keys, key)
		}
	}
	return keys, nil
}

// EarlierHolder implements Replays from the CSRs the apiserver holds, so
// single use survives restarts and leader changes: evidence lives minutes,
// and the apiserver keeps decided CSRs for an hour. A CSR holds a replay key
// only when its evidence verifies (as of its creation) bound to its own key:
// an unsigned token that names a victim's token id, or a copy of a token
// onto another key, holds nothing. A copy of the very same request (same
// key) filed in the same second as csr does not count either: the order of
// the two cannot be told, and a certificate for a key is worthless to anyone
// but the key's holder, so a copy must not block its owner. Any error makes
// the answer unknown. A copy onto another key filed in the same second does
// count, both ways: evidence bound to its key cannot verify on another, but a
// join ticket can, and a copy made by watching CSRs under a name that sorts
// first must not take the join; the two requests then block each other.
func (c *Controller) EarlierHolder(ctx context.Context, key string, csr *certificatesv1.CertificateSigningRequest) (string, error) {
	objs, err := c.indexer.ByIndex(replayIndex, key)
	if err != nil {
		return "", fmt.Errorf("replay index: %w", err)
	}
	// This CSR's own key, decoded only once a candidate needs comparing
	// (mostly the index holds this CSR alone).
	var mine *x509.CertificateRequest
	for _, o := range objs {
		other, ok := o.(*certificatesv1.CertificateSigningRequest)
		if !ok {
			return "", fmt.Errorf("replay index holds a %T", o)
		}
		if other.UID == csr.UID {
			continue
		}
		t1, t2 := other.CreationTimestamp.Time, csr.CreationTimestamp.Time
		if t1.After(t2) {
			continue
		}
		req, blocks, err := evidence.Decode(other.Spec.Request)
		if err != nil {
			continue // it cannot carry verified evidence
		}
		if mine == nil {
			if mine, _, err = evidence.Decode(csr.Spec.Request); err != nil {
				return "", fmt.Errorf("replay check of %s: %w", csr.Name, err)
			}
		}
		sameKey := bytes.Equal(req.RawSubjectPublicKeyInfo, mine.RawSubjectPublicKeyInfo)
		if t1.Equal(t2) && sameKey {
			continue
		}
		holds, err := c.holds(ctx, other, req, blocks, key)
		if err != nil {
			return "", err
		}
		if holds {
			return other.Name, nil
		}
	}
	return "", nil
}

// holds reports whether csr's evidence verifies, as of its creation and
// bound to its own key, with replay key key.
func (c *Controller) holds(ctx context.Context, csr *certificatesv1.CertificateSigningRequest, req *x509.CertificateRequest, blocks []evidence.Block, key string) (bool, error) {
	binding, err := evidence.Binding(req.PublicKey)
	if err != nil {
		return false, nil
	}
	for _, b := range blocks {
		v, ok := c.verifiers[b.Type]
		if !ok {
			continue
		}
		att, err := v.Verify(ctx, b.Data, binding, csr.CreationTimestamp.Time)
		if _, rejected := cloud.IsRejection(err); rejected {
			continue
		}
		if err != nil {
			return false, fmt.Errorf("verify the evidence of earlier CSR %s: %w", csr.Name, err)
		}
		if att.ReplayKey == key {
			return true, nil
		}
	}
	return false, nil
}
