package linode

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/linode/linodego"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mooring-dev/mooring/cloud/cloudtest"
	"github.com/mooring-dev/mooring/cloud/kit/kittest"
	"github.com/mooring-dev/mooring/cloud/linode/agentid"
	"github.com/mooring-dev/mooring/cloud/linode/linodetest"
	"github.com/mooring-dev/mooring/cloud/nodeid"
	"github.com/mooring-dev/mooring/cloud/nodeid/nodeidtest"
	"github.com/mooring-dev/mooring/cloud/view"
)

const (
	testCluster = "c1"
	testTag     = "k8s:c1"
	// testPrivate holds the tests' private addresses (127.0.97.x) in place
	// of Linode's 192.168.128.0/17.
	testPrivate = "127.0.97.0/24"
)

type world struct {
	ln        *linodetest.Cloud
	cloud     *Cloud
	cfg       Config
	tokenFile string
}

// newWorld starts the endpoint and a provider over it whose token is in a
// file; edit changes the config first.
func newWorld(t *testing.T, opts linodetest.Options, edit func(*Config)) *world {
	t.Helper()
	ln := linodetest.NewStarted(t, opts)
	tokenFile := kittest.SecretFile(t, ln.Token())
	none := 0
	cfg := Config{ClusterID: testCluster, APIEndpoint: ln.Endpoint(), TokenFile: tokenFile,
		PrivateCIDRs: []string{testPrivate}, MaxRetries: &none, ListConfig: kittest.Quick(0)}
	cfg.RetryWait.Duration = time.Millisecond
	cfg.MaxRetryWait.Duration = 50 * time.Millisecond
	if edit != nil {
		edit(&cfg)
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &world{ln: ln, cloud: c, cfg: c.Config(), tokenFile: tokenFile}
}

// add makes a running Linode of the cluster at public 127.0.98.<n>,
// private 127.0.97.<n>.
func (w *world) add(label string, n int, tags ...string) linodetest.Instance {
	if tags == nil {
		tags = []string{testTag}
	}
	return w.ln.Put(linodetest.Instance{Label: label, PublicIP: fmt.Sprintf("127.0.98.%d", n),
		PrivateIP: fmt.Sprintf("127.0.97.%d", n), Tags: tags})
}

func (w *world) source() Source {
	return Source{Client: w.cloud.client, ClusterTag: w.cfg.ClusterTag, ClusterID: w.cfg.ClusterID, PageSize: w.cfg.PageSize,
		Private: w.cfg.privateRanges()}
}

func node(name, providerID string) *v1.Node {
	return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1.NodeSpec{ProviderID: providerID}}
}

// Every field of a Linode maps onto the view as Linode's CCM reads it:
// providerID linode://<id>, region only, type, addresses Hostname, then
// the IPv4 addresses in the API's order by range, then IPv6, and created.
func TestMapping(t *testing.T) {
	w := newWorld(t, linodetest.Options{}, nil)
	created := time.Date(2026, 11, 24, 9, 30, 15, 0, time.UTC)
	in := w.ln.Put(linodetest.Instance{Label: "Web-1", Region: "eu-central", Type: "g6-dedicated-4", PublicIP: "127.0.98.10",
		PrivateIP: "127.0.97.10", IPv6: "::1", Tags: []string{"env:prod", testTag}, Created: created})
	got := kittest.ListedOne(t, w.source().ListInstances)
	id := fmt.Sprint(in.ID)
	want := view.Instance{
		ProviderID: "linode://" + id, ID: id, Name: "Web-1", NodeName: "web-1",
		Region: "eu-central", Zone: "", InstanceType: "g6-dedicated-4", Cluster: testCluster, State: view.StateRunning,
		Addresses: []v1.NodeAddress{
			{Type: v1.NodeHostName, Address: "Web-1"}, {Type: v1.NodeExternalIP, Address: "127.0.98.10"},
			{Type: v1.NodeInternalIP, Address: "127.0.97.10"}, {Type: v1.NodeExternalIP, Address: "::1"},
		},
		Labels:  map[string]string{"env:prod": "", testTag: ""},
		Created: created,
	}
	kittest.Same(t, "the mapped instance", got, nil, want)
	// InstancesV2's metadata is the view's: the region, no zone.
	md, err := w.cloud.InstanceMetadata(context.Background(), node("web-1", ""))
	if err != nil || md.Region != want.Region || md.Zone != "" || md.InstanceType != want.InstanceType ||
		fmt.Sprint(md.NodeAddresses) != fmt.Sprint(want.Addresses) {
		t.Fatalf("metadata %+v, %v", md, err)
	}
	if w.cloud.ClusterTag() != testCluster || w.cloud.ProviderName() != "linode" {
		t.Fatalf("cluster tag %q, name %q", w.cloud.ClusterTag(), w.cloud.ProviderName())
	}
}

// With the default private range, 192.168.128.0/17 is internal and
// anything else (even 10/8 or another 192.168 address) external, as
// Linode's CCM classifies; the addresses here are never dialled.
func TestDefaultPrivateRange(t *testing.T) {
	var in linodego.Instance
	if err := json.Unmarshal([]byte(`{"id": 5, "label": "x", "tags": ["k8s:c1"], "ipv4": ["192.0.2.7", "192.168.139.4", "192.168.1.4", "10.0.0.1"]}`), &in); err != nil {
		t.Fatal(err)
	}
	vi, ok := Source{ClusterTag: testTag, ClusterID: testCluster}.toView(&in)
	if !ok {
		t.Fatal("left out")
	}
	if got := fmt.Sprint(vi.Addresses); got != "[{Hostname x} {ExternalIP 192.0.2.7} {InternalIP 192.168.139.4} {ExternalIP 192.168.1.4} {ExternalIP 10.0.0.1}]" {
		t.Fatal(got)
	}
	if !vi.Created.IsZero() {
		t.Fatal("a Linode without created has a creation time")
	}
}

// Every status maps to a state (the conformance suite checks what each
// state means to InstancesV2): offline and shutting_down are stopped,
// deleting is gone, the rest and an unknown status pending.
func TestStatuses(t *testing.T) {
	src := Source{ClusterTag: testTag, ClusterID: testCluster}
	for status, want := range map[string]view.State{
		"running": view.StateRunning, "offline": view.StateStopped, "shutting_down": view.StateStopped, "deleting": view.StateTerminated,
		"booting": view.StatePending, "rebooting": view.StatePending, "provisioning": view.StatePending, "migrating": view.StatePending,
		"rebuilding": view.StatePending, "cloning": view.StatePending, "restoring": view.StatePending, "resizing": view.StatePending,
		"levitating": view.StatePending,
	} {
		in, ok := src.toView(&linodego.Instance{ID: 5, Label: "x", Status: linodego.InstanceStatus(status), Tags: []string{testTag}})
		if !ok || in.State != want {
			t.Errorf("%s: %q, want %q", status, in.State, want)
		}
	}
}

// The list asks for pages of page_size (500 by default: one request for
// 60 Linodes, 3 in pages of 25; none at all is one request too), and the
// X-Filter keeps a prefix of the tag out.
func TestPagination(t *testing.T) {
	kittest.PageCalls(t, 60, map[int]int{0: 1, 25: 3}, func(size int) (int, int, error) {
		w := newWorld(t, linodetest.Options{}, func(c *Config) { c.PageSize = size })
		if all, err := w.source().ListInstances(context.Background()); err != nil || len(all) != 0 {
			t.Fatalf("no Linodes: %d instances, %v", len(all), err)
		}
		for i := range 60 {
			w.add(fmt.Sprintf("node-%d", i), 10+i)
		}
		w.add("prefix", 102, "k8s:c1x")
		all, err := w.source().ListInstances(context.Background())
		return len(all), w.ln.Calls(linodetest.MethodList) - 1, err // the empty list's call
	})
}

// The client-side check: a Linode the server returns without the tag is
// not the cluster's; the filter is JSON with the tag escaped as JSON.
func TestTagCheckedClientSide(t *testing.T) {
	src := Source{ClusterTag: testTag, ClusterID: testCluster}
	kittest.ClusterTag(t, testTag, func(tags []string) bool {
		_, ok := src.toView(&linodego.Instance{ID: 5, Label: "x", Tags: tags})
		return ok
	})
	if _, ok := src.toView(&linodego.Instance{ID: 0, Label: "x", Tags: []string{testTag}}); ok {
		t.Error("a Linode without an id was taken")
	}
	if got := Filter(`a"b\c`); got != `{"tags":"a\"b\\c"}` {
		t.Errorf("filter %s", got)
	}
}

// Failures beyond the conformance suite's: a failed page, an incomplete
// page, a refused or missing token, a spent rate limit; no error holds
// the token.
func TestListFailures(t *testing.T) {
	w := newWorld(t, linodetest.Options{ListLimit: 40}, func(c *Config) { c.PageSize = 25 })
	for i := range 60 {
		w.add(fmt.Sprintf("node-%d", i), 10+i)
	}
	ctx := context.Background()
	check := func(what, want string) {
		t.Helper()
		kittest.ListFails(t, what, w.source().ListInstances, want, w.ln.Token())
	}
	w.ln.FailPage(2, 1, http.StatusInternalServerError)
	check("page 2 fails", "page 2")
	w.ln.ShortPage(1, true)
	check("page 1 short", "incomplete")
	w.ln.ShortPage(1, false)
	w.ln.ShortPage(3, true)
	check("the last page short", "incomplete")
	w.ln.ShortPage(3, false)
	if err := os.WriteFile(w.tokenFile, []byte("wrong-token"), 0o600); err != nil {
		t.Fatal(err)
	}
	check("a refused token", "Invalid Token")
	if err := os.WriteFile(w.tokenFile, []byte(""), 0o600); err != nil {
		t.Fatal(err)
	}
	check("no token", "token")
	if err := os.WriteFile(w.tokenFile, []byte(w.ln.Token()), 0o600); err != nil {
		t.Fatal(err)
	}
	// 40 list requests a minute: the next lists spend them.
	for range 40 {
		if _, err := w.source().ListInstances(ctx); err != nil {
			break
		}
	}
	check("rate limit spent", "429")
}

// A 429 is retried after its Retry-After, within maxRetries; a 503 too.
func TestRetries(t *testing.T) {
	two := 2
	w := newWorld(t, linodetest.Options{}, func(c *Config) { c.MaxRetries = &two })
	w.add("node-1", 10)
	ctx := context.Background()
	w.ln.Fail(linodetest.MethodList, 2, http.StatusServiceUnavailable)
	if all, err := w.source().ListInstances(ctx); err != nil || len(all) != 1 {
		t.Fatalf("after two 503s: %d, %v", len(all), err)
	}
	if n := w.ln.Calls(linodetest.MethodList); n != 3 {
		t.Fatalf("%d list calls, want 3", n)
	}
	w.ln.Fail(linodetest.MethodList, 3, http.StatusServiceUnavailable)
	if _, err := w.source().ListInstances(ctx); err == nil {
		t.Fatal("three 503s with two retries: no error")
	}
	// The rate limit: Retry-After says a minute, capped at maxRetryWait
	// (50ms here); still limited, the list fails after its retries.
	lim := newWorld(t, linodetest.Options{ListLimit: 1}, func(c *Config) { c.MaxRetries = &two })
	lim.add("node-1", 10)
	if _, err := lim.source().ListInstances(ctx); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := lim.source().ListInstances(ctx); err == nil || !strings.Contains(err.Error(), "429") {
		t.Fatalf("rate limited: %v", err)
	}
	if n := lim.ln.Calls(linodetest.MethodThrottled); n != 3 {
		t.Fatalf("%d throttled calls, want 3 (one and two retries)", n)
	}
	if d := time.Since(start); d < 100*time.Millisecond || d > 10*time.Second {
		t.Fatalf("two retries took %v: want the capped Retry-After, twice", d)
	}
}

// A list that changes at every attempt gives up after listAttempts, with
// an error that says so (the conformance suite checks that a list is whole
// or an error).
func TestListChangesAtEveryAttempt(t *testing.T) {
	w := newWorld(t, linodetest.Options{}, func(c *Config) { c.PageSize = 25 })
	for i := range 30 {
		w.add(fmt.Sprintf("node-%02d", i), 10+i)
	}
	kittest.GivesUpOnChurn(t, w.source().ListInstances, w.ln.BeforePage, func(n int) {
		w.ln.Put(linodetest.Instance{Label: fmt.Sprintf("churn-%d", n), PrivateIP: "127.0.97.201", Tags: []string{testTag}})
	}, listAttempts)
}

// ParseProviderID is kit.NumericProviderID with this cloud's prefix, the
// agent's ProviderID's inverse.
func TestProviderIDs(t *testing.T) { kittest.NumericProviderID(t, ParseProviderID, agentid.ProviderID) }

// The config's own fields and defaults; kittest.Config checks that it
// applies kit's checks (endpoint, token, durations, strictness) to them.
func TestConfig(t *testing.T) {
	good := "clusterID: c1\ntokenFile: /etc/mooring/linode-token\n"
	kittest.Config(t, ParseConfig, good,
		kittest.Fields{Endpoint: "apiEndpoint", SecretFile: "tokenFile", SecretEnv: "tokenEnv", Durations: []string{"maxFailureBackoff", "retryWait", "maxRetryWait"}})
	kittest.Parses(t, ParseConfig, func(c Config) bool {
		return c.ClusterTag == "k8s:c1" && c.APIEndpoint == DefaultAPIEndpoint && c.PageSize == 500 && c.TokenEnv == "" &&
			c.RequestTimeout.Duration == DefaultRequestTimeout && c.InstanceMaxAge.Duration == DefaultInstanceMaxAge &&
			c.NodeNamePolicy == agentid.PolicyLabel && fmt.Sprint(c.PrivateCIDRs) == "[192.168.128.0/17]" &&
			*c.MaxRetries == DefaultMaxRetries && c.RetryWait.Duration == time.Second && c.MaxRetryWait.Duration == 10*time.Second
	}, good)
	kittest.Parses(t, ParseConfig, func(c Config) bool { return c.TokenEnv == DefaultTokenEnv }, "clusterID: c1\n")
	kittest.Parses(t, ParseConfig, func(c Config) bool { return c.ClusterTag == "lke12345" && *c.MaxRetries == 0 && c.PageSize == 25 },
		"clusterID: c1\nclusterTag: lke12345\nmaxRetries: 0\npageSize: 25\n")
	kittest.Refuses(t, ParseConfig, "", "tokenFile: /t\n", "clusterID: 'a b'\n", "clusterID: c1\nclusterTag: 'k8s c1'\n",
		"clusterID: c1\nclusterTag: ab\n", "clusterID: "+strings.Repeat("x", 47)+"\n", good+"apiEndpoint: https://api.linode.com/v4\n",
		good+"pageSize: 501\n", good+"pageSize: 24\n", good+"nodeNamePolicy: LinodeID\n", good+"token: x\n",
		good+"privateCIDRs: []\n", good+"privateCIDRs: [192.168.128.0]\n", good+"privateCIDRs: ['fd00::/8']\n",
		good+"maxRetries: -1\n", good+"maxRetries: 11\n", good+"retryWait: 20s\n")
}

// The token is read from tokenFile or tokenEnv (how, kit's TestSecret
// checks), and New fails without one.
func TestToken(t *testing.T) {
	kittest.Secret(t, "linode API token", func(file, env string) (string, error) {
		c := Config{ClusterID: "c1", TokenFile: file, TokenEnv: env}
		c.defaults()
		return c.token()
	})
	kittest.NeedsSecret(t, func(env string) error {
		_, err := New(Config{ClusterID: "c1", TokenEnv: env})
		return err
	})
}

// The environment linodego reads (LINODE_URL, LINODE_API_VERSION) does not
// redirect the provider: its config decides.
func TestEnvironmentIgnored(t *testing.T) {
	t.Setenv("LINODE_URL", "http://127.0.0.1:1")
	t.Setenv("LINODE_API_VERSION", "v4beta")
	w := newWorld(t, linodetest.Options{}, nil)
	w.add("node-1", 10)
	if all, err := w.source().ListInstances(context.Background()); err != nil || len(all) != 1 {
		t.Fatalf("%d, %v", len(all), err)
	}
}

// The agent's side (nodeidtest.Unsigned): a token first, then the instance
// and network documents give the Linode's id, label, providerID, Node name
// and private address, which agree with the view. Its own: one call each,
// the documents' region, type, public address and tags, and which call
// failed.
func TestNodeIdentity(t *testing.T) {
	w := newWorld(t, linodetest.Options{}, nil)
	ctx := context.Background()
	ids := map[string]*agentid.NodeIdentity{}
	n := 16
	nodeidtest.Unsigned(t, nodeidtest.Bed{
		Put: func(name string, bare bool) (nodeid.Identity, nodeid.Instance) {
			n++
			in := linodetest.Instance{Label: name, PublicIP: fmt.Sprintf("127.0.98.%d", n), IPv6: "::1", Tags: []string{testTag},
				UserData: "#cloud-config\nwrite_files: [secret ticket]\n"}
			if !bare {
				in.PrivateIP = fmt.Sprintf("127.0.97.%d", n)
			}
			in = w.ln.Put(in)
			ids[name] = nodeidtest.Agent(t, agentid.NewNodeIdentity, nil)(w.ln.MetadataURL(in.ID))
			return ids[name], nodeid.Instance{ID: fmt.Sprint(in.ID), Name: name, ProviderID: agentid.ProviderID(in.ID),
				NodeName: strings.ToLower(name), InternalIP: in.PrivateIP}
		},
		View:      w.cloud.InstanceView(),
		FailNext:  func() { w.ln.Fail(linodetest.MethodInstance, 1, http.StatusInternalServerError) },
		FailError: "/v1/instance: HTTP 500",
		Stop: func(in nodeid.Instance) error {
			id, _ := strconv.Atoi(in.ID)
			return w.ln.SetStatus(id, linodetest.StatusOffline)
		},
	})
	before := [3]int{w.ln.Calls(linodetest.MethodToken), w.ln.Calls(linodetest.MethodInstance), w.ln.Calls(linodetest.MethodNetwork)}
	if _, err := ids["bare"].Instance(ctx); err != nil || w.ln.Calls(linodetest.MethodToken) != before[0]+1 ||
		w.ln.Calls(linodetest.MethodInstance) != before[1]+1 || w.ln.Calls(linodetest.MethodNetwork) != before[2]+1 {
		t.Fatalf("not one token, one instance and one network call: %v", err)
	}
	md, nw, err := ids["bare"].Metadata(ctx)
	if err != nil || md.Region != linodetest.DefaultRegion || md.Type != linodetest.DefaultType ||
		fmt.Sprint(nw.IPv4.Public) != "[127.0.98.18/32]" || fmt.Sprint(md.Tags) != "["+testTag+"]" {
		t.Fatalf("%+v %+v %v", md, nw, err)
	}
	w.ln.Fail(linodetest.MethodToken, 1, http.StatusInternalServerError)
	if _, err := ids["bare"].Instance(ctx); err == nil || !strings.Contains(err.Error(), "/v1/token: HTTP 500") {
		t.Fatalf("failing token: %v", err)
	}
}

// The Metadata service wants its token: none, another Linode's or an
// expired one is refused, and the token needs its expiry header.
func TestMetadataToken(t *testing.T) {
	now := time.Now()
	clock := func() time.Time { return now }
	ln := linodetest.NewStarted(t, linodetest.Options{Now: func() time.Time { return clock() }})
	a := ln.Put(linodetest.Instance{Label: "a", Tags: []string{testTag}, UserData: "hello"})
	b := ln.Put(linodetest.Instance{Label: "b", Tags: []string{testTag}})
	ua, _ := ln.MetadataURL(a.ID)
	ub, _ := ln.MetadataURL(b.ID)
	do := func(method, url string, hdr map[string]string) (int, string) {
		t.Helper()
		resp, body := cloudtest.Send(t, method, url, hdr)
		return resp.StatusCode, string(body)
	}
	if st, _ := do("PUT", ua+agentid.TokenPath, nil); st != http.StatusBadRequest {
		t.Fatalf("a token without its expiry: %d", st)
	}
	st, tok := do("PUT", ua+agentid.TokenPath, map[string]string{agentid.TokenExpiryHeader: "60"})
	if st != http.StatusOK || tok == "" {
		t.Fatalf("token: %d %q", st, tok)
	}
	jsonHdr := func(tok string) map[string]string {
		return map[string]string{agentid.TokenHeader: tok, "Accept": "application/json"}
	}
	if st, _ := do("GET", ua+agentid.InstancePath, jsonHdr(tok)); st != http.StatusOK {
		t.Fatalf("instance with its token: %d", st)
	}
	if st, body := do("GET", ua+agentid.UserDataPath, jsonHdr(tok)); st != http.StatusOK || body != "aGVsbG8=" {
		t.Fatalf("user data: %d %q", st, body)
	}
	if st, _ := do("GET", ua+agentid.InstancePath, jsonHdr("")); st != http.StatusUnauthorized {
		t.Fatalf("no token: %d", st)
	}
	if st, _ := do("GET", ub+agentid.InstancePath, jsonHdr(tok)); st != http.StatusUnauthorized {
		t.Fatalf("another Linode's token: %d", st)
	}
	clock = func() time.Time { return now.Add(61 * time.Second) }
	if st, _ := do("GET", ua+agentid.InstancePath, jsonHdr(tok)); st != http.StatusUnauthorized {
		t.Fatalf("an expired token: %d", st)
	}
}
