package azure_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/mooring-dev/mooring/cloud"
	"github.com/mooring-dev/mooring/cloud/azure"
	"github.com/mooring-dev/mooring/cloud/azure/azuretest"
)

// retimed is signed content with its timeStamp object replaced by ts
// (nil: no timeStamp at all); every other field as IMDS writes it.
func retimed(t *testing.T, content []byte, ts map[string]any) []byte {
	t.Helper()
	var doc map[string]any
	if err := json.Unmarshal(content, &doc); err != nil {
		t.Fatal(err)
	}
	if ts == nil {
		delete(doc, "timeStamp")
	} else {
		doc["timeStamp"] = ts
	}
	out, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestAttacks: attested documents that whoever can reach a VM's IMDS can
// obtain and keep. Each is signed as IMDS signs (the test's signer under
// the test root, in the genuine form: createdOn and expiresOn six hours
// apart, "MM/dd/yy HH:mm:ss -0000"), carries the nonce of the very CSR key
// it is filed with (the attacker made the key in advance and asked IMDS
// for its document) and the cluster's subscription: signature, chain,
// signer name, nonce and subscription all pass, and only the document's
// timestamps can deny it. With the timestamps unchecked (before this
// test), every case was approved.
func TestAttacks(t *testing.T) {
	c, vm, v, bnd, nonce := verifierFor(t, "127.0.81.215")
	ctx := context.Background()
	now := time.Now().Truncate(time.Second)
	maxAge, skew := azure.DefaultMaxDocumentAge, azure.DefaultMaxClockSkew
	sign := func(content []byte) []byte {
		t.Helper()
		der, err := c.Signer.Sign(content)
		if err != nil {
			t.Fatal(err)
		}
		return der
	}
	content := func(created, expires time.Time) []byte {
		return c.DocumentFor(vm.VMID, c.Subscription(), nonce, created, expires)
	}
	// fetched is the document IMDS signs for a request at at.
	fetched := func(at time.Time) []byte { return sign(content(at, at.Add(6*time.Hour))) }
	stamps := func(created, expires any) []byte {
		ts := map[string]any{}
		if created != nil {
			ts["createdOn"] = created
		}
		if expires != nil {
			ts["expiresOn"] = expires
		}
		return sign(retimed(t, content(now, now.Add(6*time.Hour)), ts))
	}
	good := azuretest.FormatTime(now)
	later := azuretest.FormatTime(now.Add(6 * time.Hour))

	for _, tc := range []struct {
		name, want, says string
		data             []byte
	}{
		{"fetched for a key made in advance, filed an hour later (its Node NotReady by then)",
			cloud.RejectExpired, "before", fetched(now.Add(-time.Hour))},
		{"filed again a day later, after the CSR cleaner deleted the request it was approved on",
			cloud.RejectExpired, "before", fetched(now.Add(-25 * time.Hour))},
		{"kept one second past the maximum age and the clock skew",
			cloud.RejectExpired, "before", fetched(now.Add(-(maxAge + skew + time.Second)))},
		{"dated ahead of the approver's clock by more than the skew",
			cloud.RejectExpired, "ahead", fetched(now.Add(skew + time.Second))},
		{"created within the maximum age but past its own expiresOn",
			cloud.RejectExpired, "expired", sign(content(now.Add(-3*time.Minute), now.Add(-(skew + time.Second))))},
		{"expiresOn not after createdOn",
			cloud.RejectExpired, "not after", sign(content(now, now))},
		{"createdOn not a time", cloud.RejectMalformed, "createdOn", stamps("yesterday", later)},
		{"createdOn in another layout (RFC 3339)", cloud.RejectMalformed, "createdOn", stamps(now.UTC().Format(time.RFC3339), later)},
		{"createdOn with a four-digit year", cloud.RejectMalformed, "createdOn", stamps(now.UTC().Format("01/02/2006 15:04:05")+" -0000", later)},
		{"createdOn in a time zone other than UTC", cloud.RejectMalformed, "createdOn", stamps(now.In(time.FixedZone("", 3600)).Format("01/02/06 15:04:05 -0700"), later)},
		{"createdOn a number", cloud.RejectMalformed, "", stamps(now.Unix(), later)},
		{"expiresOn not a time", cloud.RejectMalformed, "expiresOn", stamps(good, "never")},
		{"no createdOn", cloud.RejectMalformed, "createdOn", stamps(nil, later)},
		{"no expiresOn", cloud.RejectMalformed, "expiresOn", stamps(good, nil)},
		{"no timeStamp", cloud.RejectMalformed, "createdOn", sign(retimed(t, content(now, now.Add(6*time.Hour)), nil))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			att, err := v.Verify(ctx, tc.data, bnd, now)
			r, ok := cloud.IsRejection(err)
			if !ok || r.Reason != tc.want {
				t.Fatalf("want %s, got %+v, %v", tc.want, att, err)
			}
			if !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("the reason %q does not say %q", err, tc.says)
			}
			t.Logf("%v", err)
		})
	}

	// The same verifier takes a document IMDS has just signed, up to the
	// maximum age and the skew after its createdOn, and one dated up to
	// the skew ahead of the approver's clock.
	for name, at := range map[string]time.Time{
		"judged at once": now,
		"judged the maximum age and the skew later": now.Add(-(maxAge + skew)),
		"dated the skew ahead":                      now.Add(skew),
	} {
		att, err := v.Verify(ctx, fetched(at), bnd, now)
		if err != nil || att.InstanceID != vm.VMID {
			t.Errorf("%s: %+v, %v", name, att, err)
		}
	}
}
