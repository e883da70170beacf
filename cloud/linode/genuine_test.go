package linode

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/mooring-dev/mooring/cloud/kit/kittest"
	"github.com/mooring-dev/mooring/cloud/view"
)

// replay is an API endpoint that answers with the real API's answers
// linodego recorded (testdata, sources in testdata/README.md), unchanged:
// the list, one Linode of the cluster's tag, one without it, a Linode that
// does not exist, and a spent rate limit when tooMany is set.
type replay struct {
	t       *testing.T
	tooMany bool
	asked   []string
}

func (r *replay) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r.asked = append(r.asked, req.Method+" "+req.URL.Path+" "+req.Header.Get("X-Filter"))
	file, status := "", http.StatusOK
	switch {
	case req.Header.Get("Authorization") != "Bearer recorded-token":
		http.Error(w, "no token", http.StatusUnauthorized)
		return
	case r.tooMany:
		file, status = "error-too-many-requests.json", http.StatusTooManyRequests
	case req.URL.Path == "/v4/linode/instances":
		file = "instances-list.json"
	case req.URL.Path == "/v4/linode/instances/97190737":
		file = "instance-tagged.json"
	case req.URL.Path == "/v4/linode/instances/82372947":
		file = "instance-get.json"
	default:
		file, status = "error-not-found.json", http.StatusNotFound
	}
	data, err := os.ReadFile(filepath.Join("testdata", file))
	if err != nil {
		r.t.Error(err)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(data)
}

// The provider reads the real API's answers: the list (page 1 of 1, its one
// Linode without the cluster tag left out), a Linode of the cluster's tag
// asked for by its providerID (every field as Linode's CCM maps it: the
// label, the public IPv4 address, the SLAAC address without its /128,
// provisioning as pending, created in UTC), one without the tag (another
// cluster's: left alone), one that does not exist (gone), and a 429 (an
// error, never "gone").
func TestRecordedAnswers(t *testing.T) {
	r := &replay{t: t}
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	tokenFile := kittest.SecretFile(t, "recorded-token")
	none := 0
	cfg := Config{ClusterID: testCluster, ClusterTag: "go-tag-test", APIEndpoint: srv.URL, TokenFile: tokenFile, MaxRetries: &none,
		ListConfig: kittest.Quick(0)}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	all, err := c.InstanceView().Named(ctx, "go-test-ins-wo-disk-jwn61up693k2", 0)
	if !errors.Is(err, view.ErrNotFound) || len(all) != 0 {
		t.Fatalf("the recorded list: %+v %v", all, err)
	}
	if len(r.asked) != 1 || r.asked[0] != `GET /v4/linode/instances {"tags":"go-tag-test"}` {
		t.Fatalf("asked %q", r.asked)
	}

	got, err := c.ConfirmInstance(ctx, "linode://97190737")
	want := view.Instance{
		ProviderID: "linode://97190737", ID: "97190737", Name: "go-ins-test-tag", NodeName: "go-ins-test-tag",
		InstanceType: "g6-nanode-1", Region: "au-mel", Cluster: testCluster, State: view.StatePending,
		Addresses: []v1.NodeAddress{{Type: v1.NodeHostName, Address: "go-ins-test-tag"},
			{Type: v1.NodeExternalIP, Address: "172.237.224.9"}, {Type: v1.NodeExternalIP, Address: "1234::5678"}},
		Labels:  map[string]string{"go-tag-test": "", "go-tag-test-bar": ""},
		Created: time.Date(2018, 1, 2, 3, 4, 5, 0, time.UTC),
	}
	kittest.Same(t, "the recorded Linode", got, err, want)
	kittest.Confirms(t, "a Linode without the tag", c.ConfirmInstance, "linode://82372947", kittest.Foreign, "")
	kittest.Confirms(t, "a Linode that does not exist", c.ConfirmInstance, "linode://888888", kittest.Absent, "")
	r.tooMany = true
	c.InstanceView().Invalidate()
	if _, err := c.InstanceView().Named(ctx, "x", 0); err == nil || !strings.Contains(err.Error(), "Too many requests") {
		t.Fatalf("a spent rate limit: %v", err)
	}
	kittest.Confirms(t, "a spent rate limit on GET", c.ConfirmInstance, "linode://97190737", kittest.NoVerdict, "")
}
