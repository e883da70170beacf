package digitalocean

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

	"github.com/digitalocean/godo"
	v1 "k8s.io/api/core/v1"

	"github.com/mooring-dev/mooring/cloud/digitalocean/agentid"
	"github.com/mooring-dev/mooring/cloud/digitalocean/digitaloceantest"
	"github.com/mooring-dev/mooring/cloud/kit/kittest"
	"github.com/mooring-dev/mooring/cloud/nodeid"
	"github.com/mooring-dev/mooring/cloud/nodeid/nodeidtest"
	"github.com/mooring-dev/mooring/cloud/view"
)

const (
	testCluster = "c1"
	testTag     = "k8s:c1"
)

type world struct {
	do        *digitaloceantest.Cloud
	cloud     *Cloud
	cfg       Config
	tokenFile string
}

// newWorld starts the endpoint and a provider over it whose token is in a
// file; edit changes the config first.
func newWorld(t *testing.T, opts digitaloceantest.Options, edit func(*Config)) *world {
	t.Helper()
	do := digitaloceantest.NewStarted(t, opts)
	tokenFile := kittest.SecretFile(t, do.Token())
	cfg := Config{ClusterID: testCluster, APIEndpoint: do.Endpoint(), TokenFile: tokenFile, ListConfig: kittest.Quick(0)}
	if edit != nil {
		edit(&cfg)
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &world{do: do, cloud: c, cfg: c.Config(), tokenFile: tokenFile}
}

// add makes an active droplet of the cluster at 127.0.83.<n> (public
// 127.0.84.<n>).
func (w *world) add(name string, n int, tags ...string) digitaloceantest.Droplet {
	if tags == nil {
		tags = []string{testTag}
	}
	return w.do.Put(digitaloceantest.Droplet{Name: name, PrivateIP: fmt.Sprintf("127.0.83.%d", n),
		PublicIP: fmt.Sprintf("127.0.84.%d", n), Tags: tags})
}

func (w *world) source() Source {
	return Source{Client: w.cloud.client, ClusterTag: w.cfg.ClusterTag, ClusterID: w.cfg.ClusterID, PageSize: w.cfg.PageSize}
}

// Every field of a droplet maps onto the view as DigitalOcean's CCM reads
// it: providerID digitalocean://<id>, region only, size slug, addresses
// Hostname, InternalIP (VPC), ExternalIP (v4, then v6), and created_at.
func TestMapping(t *testing.T) {
	w := newWorld(t, digitaloceantest.Options{}, nil)
	created := time.Date(2026, 11, 24, 9, 30, 15, 0, time.UTC)
	d := w.do.Put(digitaloceantest.Droplet{Name: "Web-1", Region: "fra1", Size: "c-4", PrivateIP: "127.0.83.10",
		PublicIP: "127.0.84.10", PublicIPv6: "::1", Tags: []string{"env:prod", testTag}, Created: created})
	got := kittest.ListedOne(t, w.source().ListInstances)
	id := fmt.Sprint(d.ID)
	want := view.Instance{
		ProviderID: "digitalocean://" + id, ID: id, Name: "Web-1", NodeName: "web-1",
		Region: "fra1", Zone: "", InstanceType: "c-4", Cluster: testCluster, State: view.StateRunning,
		Addresses: []v1.NodeAddress{
			{Type: v1.NodeHostName, Address: "Web-1"}, {Type: v1.NodeInternalIP, Address: "127.0.83.10"},
			{Type: v1.NodeExternalIP, Address: "127.0.84.10"}, {Type: v1.NodeExternalIP, Address: "::1"},
		},
		Labels:  map[string]string{"env:prod": "", testTag: ""},
		Created: created,
	}
	kittest.Same(t, "the mapped instance", got, nil, want)
}

// Statuses beyond the conformance suite's: an unknown status (migrating)
// is pending, and the tag check keeps another cluster's droplet out.
func TestStatuses(t *testing.T) {
	src := Source{ClusterTag: testTag, ClusterID: testCluster}
	for status, want := range map[string]view.State{"active": view.StateRunning, "off": view.StateStopped,
		"new": view.StatePending, "archive": view.StateTerminated, "migrating": view.StatePending} {
		in, ok := src.toView(godoDroplet(t, digitaloceantest.Droplet{ID: 5, Name: "x", Status: status, Tags: []string{testTag}}))
		if !ok || in.State != want {
			t.Errorf("%s: %q, want %q", status, in.State, want)
		}
	}
}

// The list asks for pages of pageSize (per_page, 200 by default: one
// request for 7 droplets, 4 in pages of 2), and the tag filter is sent.
func TestPagination(t *testing.T) {
	kittest.PageCalls(t, 7, map[int]int{0: 1, 2: 4}, func(size int) (int, int, error) {
		w := newWorld(t, digitaloceantest.Options{}, func(c *Config) { c.PageSize = size })
		for i := range 7 {
			w.add(fmt.Sprintf("node-%d", i), 10+i)
		}
		w.add("prefix", 32, "k8s:c1x")
		all, err := w.source().ListInstances(context.Background())
		return len(all), w.do.Calls(digitaloceantest.MethodList), err
	})
}

// The client-side check: a droplet the server returns without the tag is
// not the cluster's.
func TestTagCheckedClientSide(t *testing.T) {
	src := Source{ClusterTag: testTag, ClusterID: testCluster}
	kittest.ClusterTag(t, testTag, func(tags []string) bool {
		_, ok := src.toView(godoDroplet(t, digitaloceantest.Droplet{ID: 5, Name: "x", Tags: tags}))
		return ok
	})
}

// Failures beyond the conformance suite's: an incomplete page, a token
// file gone, a spent hourly budget; no error holds the token.
func TestListFailures(t *testing.T) {
	w := newWorld(t, digitaloceantest.Options{HourlyLimit: 20}, func(c *Config) { c.PageSize = 2 })
	for i := range 5 {
		w.add(fmt.Sprintf("node-%d", i), 10+i)
	}
	ctx := context.Background()
	check := func(what, want string) {
		t.Helper()
		kittest.ListFails(t, what, w.source().ListInstances, want, w.do.Token())
	}
	w.do.FailPage(2, http.StatusInternalServerError)
	check("page 2 fails", "page 2")
	w.do.FailPage(2, 0)
	w.do.ShortPage(1, true)
	check("page 1 short", "incomplete")
	w.do.ShortPage(1, false)
	if err := os.WriteFile(w.tokenFile, []byte("dop_v1_wrong"), 0o600); err != nil {
		t.Fatal(err)
	}
	check("wrong token", "401")
	if err := os.Remove(w.tokenFile); err != nil {
		t.Fatal(err)
	}
	check("token file gone", "API token")
	if err := os.WriteFile(w.tokenFile, []byte(w.do.Token()), 0o600); err != nil {
		t.Fatal(err)
	}
	for range 20 {
		if _, err := w.source().ListInstances(ctx); err != nil {
			break
		}
	}
	check("rate limit spent", "429")
}

// A list that changes at every attempt gives up after listAttempts, with
// an error that says so (the conformance suite checks that a list is
// whole or an error).
func TestListChangesAtEveryAttempt(t *testing.T) {
	w := newWorld(t, digitaloceantest.Options{}, func(c *Config) { c.PageSize = 2 })
	for i := range 5 {
		w.add(fmt.Sprintf("node-%d", i), 10+i)
	}
	kittest.GivesUpOnChurn(t, w.source().ListInstances, w.do.BeforePage, func(n int) {
		w.do.Put(digitaloceantest.Droplet{Name: fmt.Sprintf("churn-%d", n), PrivateIP: "127.0.83.41", Tags: []string{testTag}})
	}, listAttempts)
}

// ParseProviderID is kit.NumericProviderID with this cloud's prefix, the
// agent's ProviderID's inverse.
func TestProviderIDs(t *testing.T) { kittest.NumericProviderID(t, ParseProviderID, agentid.ProviderID) }

// The config's own fields and defaults; kittest.Config checks that it
// applies kit's checks (endpoint, token, durations, strictness) to them.
func TestConfig(t *testing.T) {
	good := "clusterID: c1\ntokenFile: /etc/mooring/do-token\n"
	kittest.Config(t, ParseConfig, good,
		kittest.Fields{Endpoint: "apiEndpoint", SecretFile: "tokenFile", SecretEnv: "tokenEnv", Durations: []string{"maxFailureBackoff"}})
	kittest.Parses(t, ParseConfig, func(c Config) bool {
		return c.ClusterTag == "k8s:c1" && c.APIEndpoint == DefaultAPIEndpoint && c.PageSize == 200 && c.TokenEnv == "" &&
			c.RequestTimeout.Duration == DefaultRequestTimeout && c.InstanceMaxAge.Duration == DefaultInstanceMaxAge &&
			c.NodeNamePolicy == agentid.PolicyDropletName
	}, good)
	kittest.Parses(t, ParseConfig, func(c Config) bool { return c.TokenEnv == DefaultTokenEnv }, "clusterID: c1\n")
	kittest.Parses(t, ParseConfig, func(c Config) bool { return c.ClusterTag == "k8s:0b1c-uuid" }, "clusterID: c1\nclusterTag: k8s:0b1c-uuid\n")
	kittest.Refuses(t, ParseConfig, "", "tokenFile: /t\n", "clusterID: 'a b'\n", "clusterID: c1\nclusterTag: 'k8s c1'\n",
		"clusterID: c1\nclusterTag: a&b\n", good+"pageSize: 201\n", good+"pageSize: -1\n", good+"nodeNamePolicy: DropletID\n",
		good+"token: dop_v1_x\n")
}

// The token is read from tokenFile or tokenEnv (how, kit's TestSecret
// checks), and New fails without one.
func TestToken(t *testing.T) {
	kittest.Secret(t, "digitalocean API token", func(file, env string) (string, error) {
		c := Config{ClusterID: "c1", TokenFile: file, TokenEnv: env}
		c.defaults()
		return c.token()
	})
	kittest.NeedsSecret(t, func(env string) error {
		_, err := New(Config{ClusterID: "c1", TokenEnv: env})
		return err
	})
}

// The agent's side (nodeidtest.Unsigned): the metadata document gives the
// droplet's id, name, providerID, Node name and VPC address, and agrees
// with the view. Its own: the document's region and public interface, read
// anew at every call.
func TestNodeIdentity(t *testing.T) {
	w := newWorld(t, digitaloceantest.Options{}, nil)
	ids := map[string]*agentid.NodeIdentity{}
	n := 16
	nodeidtest.Unsigned(t, nodeidtest.Bed{
		Put: func(name string, bare bool) (nodeid.Identity, nodeid.Instance) {
			n++
			d := digitaloceantest.Droplet{Name: name, PublicIP: fmt.Sprintf("127.0.84.%d", n), PublicIPv6: "::1", Tags: []string{testTag},
				UserData: "#cloud-config\nwrite_files: [secret ticket]\n"}
			if !bare {
				d.PrivateIP = fmt.Sprintf("127.0.83.%d", n)
			}
			d = w.do.Put(d)
			ids[name] = nodeidtest.Agent(t, agentid.NewNodeIdentity, nil)(w.do.MetadataURL(d.ID))
			return ids[name], nodeid.Instance{ID: fmt.Sprint(d.ID), Name: name, ProviderID: agentid.ProviderID(d.ID),
				NodeName: strings.ToLower(name), InternalIP: d.PrivateIP}
		},
		View:      w.cloud.InstanceView(),
		FailNext:  func() { w.do.Fail(digitaloceantest.MethodMetadata, 1, http.StatusInternalServerError) },
		FailError: "500",
		Stop: func(in nodeid.Instance) error {
			id, _ := strconv.Atoi(in.ID)
			return w.do.SetStatus(id, digitaloceantest.StatusOff)
		},
	})
	md, err := ids["bare"].Metadata(context.Background())
	if err != nil || md.Region != "nyc3" || len(md.Interfaces.Public) != 1 || md.Interfaces.Public[0].IPv4.IPAddress != "127.0.84.18" {
		t.Fatalf("%+v %v", md, err)
	}
	if n := w.do.Calls(digitaloceantest.MethodMetadata); n < 6 {
		t.Fatalf("%d metadata calls", n)
	}
}

// godoDroplet is d as godo decodes it from the API's JSON.
func godoDroplet(t *testing.T, d digitaloceantest.Droplet) *godo.Droplet {
	t.Helper()
	data, err := digitaloceantest.JSON(d)
	if err != nil {
		t.Fatal(err)
	}
	var out godo.Droplet
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatal(err)
	}
	return &out
}
