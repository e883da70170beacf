package agentid

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/mooring-dev/mooring/cloud/azure/azuretest"
	"github.com/mooring-dev/mooring/cloud/nodeid"
)

func newBinding(t *testing.T) string {
	t.Helper()
	b, err := azuretest.Binding()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func imds(t *testing.T, o azuretest.Options) (*azuretest.Cloud, azuretest.VM) {
	t.Helper()
	c := azuretest.Started(t, o)
	return c, c.Put(azuretest.VM{Name: "n", PrivateIP: "127.0.81.240"})
}

func identity(t *testing.T, c *azuretest.Cloud, vm azuretest.VM) *NodeIdentity {
	t.Helper()
	n, err := NewNodeIdentity(nodeid.Config{MetadataURL: c.IMDS(vm.VMID)})
	if err != nil {
		t.Fatal(err)
	}
	n.backoff = 50 * time.Millisecond
	return n
}

// TestEvidenceRetriesACachedDocument: IMDS answers a second request
// within its cache window with the first document (another key's nonce);
// the agent sees the nonce is not its own and asks again until it gets
// its own. Before the nonce was compared, the agent filed the cached
// document, which the approver denies (EvidenceNotBound).
func TestEvidenceRetriesACachedDocument(t *testing.T) {
	c, vm := imds(t, azuretest.Options{DocumentCacheWindow: 300 * time.Millisecond})
	n := identity(t, c, vm)
	ctx := context.Background()
	if _, err := n.Evidence(ctx, newBinding(t)); err != nil {
		t.Fatal(err)
	}
	bnd := newBinding(t)
	ev, err := n.Evidence(ctx, bnd)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := Nonce(bnd)
	if got, err := signedNonce(ev.Data); err != nil || got != want {
		t.Fatalf("filed a document for nonce %q (%v), want %q", got, err, want)
	}
	if c.Calls("StaleDocument") == 0 {
		t.Fatal("the cache never answered: the test shows nothing")
	}
}

// TestEvidenceGivesUpOnAStuckCache: a cache that never lets go ends in a
// clear error after a bounded number of requests, not in a document.
func TestEvidenceGivesUpOnAStuckCache(t *testing.T) {
	c, vm := imds(t, azuretest.Options{DocumentCacheWindow: time.Hour, IMDSRateLimit: -1})
	n := identity(t, c, vm)
	n.backoff = time.Millisecond
	ctx := context.Background()
	if _, err := n.Evidence(ctx, newBinding(t)); err != nil {
		t.Fatal(err)
	}
	before := c.Calls("AttestedDocument")
	_, err := n.Evidence(ctx, newBinding(t))
	if err == nil || !strings.Contains(err.Error(), "cached document of an earlier request") || !strings.Contains(err.Error(), "after 6 requests") {
		t.Fatalf("stuck cache: %v", err)
	}
	if got := c.Calls("AttestedDocument") - before; got != documentAttempts {
		t.Fatalf("%d requests, want %d", got, documentAttempts)
	}
}

// TestEvidenceWaitsOutThrottling: past 5 requests a second IMDS answers
// 429; the agent backs off and gets its document.
func TestEvidenceWaitsOutThrottling(t *testing.T) {
	c, vm := imds(t, azuretest.Options{DocumentCacheWindow: -1})
	n := identity(t, c, vm)
	n.backoff = 300 * time.Millisecond
	ctx := context.Background()
	for i := 0; i < 5; i++ {
		if _, err := n.Instance(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := n.Evidence(ctx, newBinding(t)); err != nil {
		t.Fatal(err)
	}
	if c.Calls("Throttled") == 0 {
		t.Fatal("never throttled: the test shows nothing")
	}
}
