package azuretest

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/smallstep/pkcs7"

	"github.com/mooring-dev/mooring/cloud/cloudtest"
)

// TestDocumentsLookGenuine: what IMDS serves has the form of the genuine
// documents in cloud/azure/testdata: the signer certificate alone, no
// signed attributes, the digest algorithm stated as
// sha256WithRSAEncryption, timestamps "MM/DD/YY hh:mm:ss -0000" with
// createdOn the request's time and expiresOn six hours after it, and
// IMDS's own nonce when none is given: expiresOn, written
// yyyyMMdd-HHmmss, as in both genuine documents.
func TestDocumentsLookGenuine(t *testing.T) {
	c := Started(t, Options{})
	vm := c.Put(VM{Name: "n", PrivateIP: "127.0.81.250"})
	before := time.Now().Truncate(time.Second)
	_, raw := cloudtest.Send(t, http.MethodGet, c.IMDS(vm.VMID)+"/metadata/attested/document?api-version=2021-02-01",
		map[string]string{"Metadata": "true"})
	var answer struct{ Encoding, Signature string }
	if err := json.Unmarshal(raw, &answer); err != nil || answer.Encoding != "pkcs7" {
		t.Fatalf("%+v %v", answer, err)
	}
	der, err := base64.StdEncoding.DecodeString(answer.Signature)
	if err != nil {
		t.Fatal(err)
	}
	p7, err := pkcs7.Parse(der)
	if err != nil {
		t.Fatal(err)
	}
	if err := p7.Verify(); err != nil {
		t.Fatal(err)
	}
	if len(p7.Certificates) != 1 || len(p7.Signers) != 1 || len(p7.Signers[0].AuthenticatedAttributes) != 0 ||
		!p7.Signers[0].DigestAlgorithm.Algorithm.Equal(pkcs7.OIDEncryptionAlgorithmRSASHA256) ||
		!p7.Signers[0].DigestEncryptionAlgorithm.Algorithm.Equal(pkcs7.OIDEncryptionAlgorithmRSA) {
		t.Fatalf("certificates %d, signers %+v", len(p7.Certificates), p7.Signers)
	}
	var doc struct {
		Nonce     string `json:"nonce"`
		TimeStamp struct{ CreatedOn, ExpiresOn string }
	}
	if err := json.Unmarshal(p7.Content, &doc); err != nil {
		t.Fatal(err)
	}
	layout := regexp.MustCompile(`^\d\d/\d\d/\d\d \d\d:\d\d:\d\d -0000$`)
	created, err1 := time.Parse(TimeLayout, doc.TimeStamp.CreatedOn)
	expires, err2 := time.Parse(TimeLayout, doc.TimeStamp.ExpiresOn)
	if !layout.MatchString(doc.TimeStamp.CreatedOn) || !layout.MatchString(doc.TimeStamp.ExpiresOn) || err1 != nil || err2 != nil ||
		expires.Sub(created) != 6*time.Hour || created.Before(before) || created.After(time.Now()) {
		t.Fatalf("timestamps %+v", doc.TimeStamp)
	}
	if doc.Nonce != expires.Format("20060102-150405") {
		t.Fatalf("default nonce %q, want expiresOn %s", doc.Nonce, doc.TimeStamp.ExpiresOn)
	}
	if got := p7.Certificates[0].IssuingCertificateURL; len(got) != 1 || got[0] != c.Intermediate.URL {
		t.Fatalf("signer's CA Issuers %v, want %s", got, c.Intermediate.URL)
	}
}

// TestIMDSThrottles: the sixth request of a VM within a second is 429.
func TestIMDSThrottles(t *testing.T) {
	c := Started(t, Options{})
	vm := c.Put(VM{Name: "n", PrivateIP: "127.0.81.251"})
	var codes []int
	for i := 0; i < 6; i++ {
		req, _ := http.NewRequest(http.MethodGet, c.IMDS(vm.VMID)+"/metadata/instance?api-version=2021-02-01", nil)
		req.Header.Set("Metadata", "true")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		codes = append(codes, resp.StatusCode)
	}
	if codes[4] != http.StatusOK || codes[5] != http.StatusTooManyRequests {
		t.Fatalf("codes %v, want five 200s then 429", codes)
	}
}
