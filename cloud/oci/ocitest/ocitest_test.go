package ocitest

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/oracle/oci-go-sdk/v65/common"
	"github.com/oracle/oci-go-sdk/v65/core"
)

// client is the real SDK's Compute client, signing with the endpoint's
// API key from the config file it writes.
func client(t *testing.T, c *Cloud) core.ComputeClient {
	t.Helper()
	path, err := c.WriteAPIConfig(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	p, err := common.ConfigurationProviderFromFileWithProfile(path, "DEFAULT", "")
	if err != nil {
		t.Fatal(err)
	}
	cc, err := core.NewComputeClientWithConfigurationProvider(p)
	if err != nil {
		t.Fatal(err)
	}
	cc.Host = c.Endpoint()
	noRetry := common.NoRetryPolicy()
	cc.SetCustomClientConfiguration(common.CustomClientConfiguration{RetryPolicy: &noRetry})
	return cc
}

func TestPages(t *testing.T) {
	c := NewStarted(t, Options{MaxPageSize: 2})
	for i := range 5 {
		c.Put(Instance{DisplayName: "n" + string(rune('a'+i)), PrivateIP: "127.0.96.10"})
	}
	cc := client(t, c)
	ctx := context.Background()
	var names []string
	var page *string
	for range 10 {
		resp, err := cc.ListInstances(ctx, core.ListInstancesRequest{CompartmentId: common.String(c.Compartment()), Limit: common.Int(100), Page: page})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Items) > 2 {
			t.Fatalf("a page of %d, largest 2", len(resp.Items))
		}
		for _, in := range resp.Items {
			names = append(names, *in.DisplayName)
		}
		if page = resp.OpcNextPage; page == nil {
			break
		}
	}
	sort.Strings(names) // in creation order, then by OCID: the same millisecond here
	if strings.Join(names, ",") != "na,nb,nc,nd,ne" {
		t.Errorf("listed %v", names)
	}
	// A token of another list or compartment, and a limit out of range.
	for _, req := range []core.ListInstancesRequest{
		{CompartmentId: common.String(c.Compartment()), Page: common.String("vnicAttachments:2:" + c.Compartment())},
		{CompartmentId: common.String(c.Compartment()), Page: common.String("instances:2:ocid1.compartment.oc1..other")},
		{CompartmentId: common.String(c.Compartment()), Limit: common.Int(1001)},
	} {
		_, err := cc.ListInstances(ctx, req)
		if se, ok := common.IsServiceError(err); !ok || se.GetHTTPStatusCode() != http.StatusBadRequest {
			t.Errorf("%+v: %v, want 400", req, err)
		}
	}
	c.Fail("ListInstances", 1, http.StatusTooManyRequests)
	_, err := cc.ListInstances(ctx, core.ListInstancesRequest{CompartmentId: common.String(c.Compartment())})
	if se, ok := common.IsServiceError(err); !ok || se.GetHTTPStatusCode() != http.StatusTooManyRequests || se.GetCode() != "TooManyRequests" {
		t.Errorf("injected 429: %v", err)
	}
}

func TestMetadataHeaders(t *testing.T) {
	c := NewStarted(t, Options{})
	in := c.Put(Instance{DisplayName: "n", PrivateIP: "127.0.96.10"})
	md, err := c.MetadataURL(in.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		header map[string]string
		want   int
	}{
		{nil, http.StatusUnauthorized},
		{map[string]string{"Authorization": "Bearer Oracle"}, http.StatusOK},
		{map[string]string{"Authorization": "Bearer Oracle", "X-Forwarded-For": "10.0.0.1"}, http.StatusForbidden},
		{map[string]string{"Authorization": "Bearer Oracle", "Forwarded": "for=10.0.0.1"}, http.StatusForbidden},
	} {
		req, _ := http.NewRequest(http.MethodGet, md+"/opc/v2/identity/cert.pem", nil)
		for k, v := range tc.header {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%v: %s, want %d", tc.header, resp.Status, tc.want)
		}
	}
	if n := c.Calls("identity"); n != 1 {
		t.Errorf("identity calls %d, want the one answered", n)
	}
}

// TestRootsEndpoint: GET /v1/instancePrincipalRootCACertificates answers
// the published roots (JSON, base64 DER, as Teleport's verifier reads
// Oracle's answer) to a caller that signs with the API key through the
// SDK; an unsigned request, one altered after its signing, or one whose
// signature is not the key's are 401. Roots rotate on demand.
func TestRootsEndpoint(t *testing.T) {
	c := NewStarted(t, Options{})
	path, err := c.WriteAPIConfig(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	p, err := common.ConfigurationProviderFromFileWithProfile(path, "DEFAULT", "")
	if err != nil {
		t.Fatal(err)
	}
	auth, err := common.NewClientWithConfig(p)
	if err != nil {
		t.Fatal(err)
	}
	auth.Host = c.AuthEndpoint()
	get := func() []string {
		t.Helper()
		req := common.MakeDefaultHTTPRequest(http.MethodGet, rootsPath)
		resp, err := auth.Call(context.Background(), &req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var a rootsAnswer
		if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
			t.Fatal(err)
		}
		if _, err := time.Parse(time.RFC3339, a.RefreshIn); err != nil {
			t.Errorf("refreshIn %q: %v", a.RefreshIn, err)
		}
		return a.Certificates
	}
	rootsB64 := func() []string {
		var out []string
		for _, r := range c.Roots() {
			out = append(out, base64.StdEncoding.EncodeToString(r.Raw))
		}
		return out
	}
	if got := get(); len(got) != 1 || !slices.Equal(got, rootsB64()) {
		t.Fatalf("roots %v", got)
	}
	if _, err := c.RotateRoots(); err != nil {
		t.Fatal(err)
	}
	if got := get(); len(got) != 2 || !slices.Equal(got, rootsB64()) {
		t.Fatalf("after a rotation: %d roots", len(got))
	}
	c.RetireRoots()
	if got := get(); len(got) != 1 || !slices.Equal(got, rootsB64()) {
		t.Fatalf("after the retirement: %d roots", len(got))
	}

	signed := func(edit func(*http.Request)) int {
		t.Helper()
		req := common.MakeDefaultHTTPRequest(http.MethodGet, rootsPath)
		u, _ := url.Parse(c.AuthEndpoint())
		req.URL.Scheme, req.URL.Host = u.Scheme, u.Host
		if err := common.DefaultRequestSigner(p).Sign(&req); err != nil {
			t.Fatal(err)
		}
		edit(&req)
		resp, err := http.DefaultClient.Do(&req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for name, tc := range map[string]struct {
		edit func(*http.Request)
		want int
	}{
		"signed":                       {func(*http.Request) {}, http.StatusOK},
		"unsigned":                     {func(r *http.Request) { r.Header.Del("Authorization") }, http.StatusUnauthorized},
		"another target after signing": {func(r *http.Request) { r.URL.RawQuery = "region=us-phoenix-1" }, http.StatusUnauthorized},
		"another date after signing": {func(r *http.Request) {
			r.Header.Set("Date", time.Now().Add(time.Minute).UTC().Format(http.TimeFormat))
		}, http.StatusUnauthorized},
		"a signature of another key": {func(r *http.Request) {
			other, _ := rsa.GenerateKey(rand.Reader, 2048)
			again := r.Clone(context.Background())
			again.Header.Del("Authorization")
			if err := common.DefaultRequestSigner(otherKey{other, c.KeyID()}).Sign(again); err != nil {
				t.Fatal(err)
			}
			r.Header.Set("Authorization", again.Header.Get("Authorization"))
		}, http.StatusUnauthorized},
	} {
		if got := signed(tc.edit); got != tc.want {
			t.Errorf("%s: %d, want %d", name, got, tc.want)
		}
	}
}

// otherKey signs under the endpoint's keyId with another key.
type otherKey struct {
	k  *rsa.PrivateKey
	id string
}

func (o otherKey) PrivateRSAKey() (*rsa.PrivateKey, error) { return o.k, nil }
func (o otherKey) KeyID() (string, error)                  { return o.id, nil }
