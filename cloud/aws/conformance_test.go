package aws

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mooring-dev/mooring/cloud/aws/agentid"
	"github.com/mooring-dev/mooring/cloud/aws/awstest"
	"github.com/mooring-dev/mooring/cloud/cloudtest"
	"github.com/mooring-dev/mooring/cloud/cloudtest/conformance"
	"github.com/mooring-dev/mooring/cloud/view"
)

// AWS's provider, in its default mode (no upstream load balancers or
// routes) and node name policy (private DNS names), keeps the kit's
// promises (cloud/cloudtest/conformance). Its pages are of 1,000
// (TestSourcePagination); the bed's are of 5, EC2's smallest. Its routes
// (Options.Routes: loadBalancers: upstream) are the upstream provider's
// over awstest's route tables (routes_conformance_test.go); that provider
// names the Node of every instance route, so a route via an instance that
// is no Node fails its ListRoutes (RoutesForeignInstanceIsError).
func TestConformance(t *testing.T) {
	conformance.Run(t, conformance.Backend{Name: ProviderName, EveryNameANode: true, Evidence: []string{agentid.EvidenceType},
		Routes: true, RoutesForeignInstanceIsError: true,
		BadProviderIDs: []string{"aws:///", "aws:///us-east-1a/", "aws:///us-east-1a/x-123", "aws:///us-east-1a/i-1/extra",
			"aws://us-east-1a/i-0123456789abcdef0", "aws:///us east/i-0123"},
		New: newEC2Bed,
		Config: func(t *testing.T, b conformance.Bed) string {
			eb := b.(*ec2Bed)
			isolateSDK(t)
			t.Setenv("AWS_ACCESS_KEY_ID", testUser.AccessKeyID)
			t.Setenv("AWS_SECRET_ACCESS_KEY", testUser.SecretAccessKey)
			return fmt.Sprintf("region: %s\nclusterID: c1\naccount: %q\nnodeRoles: [node]\nec2Endpoint: %s\nstsEndpoint: %s\nminRefreshInterval: 1ms\n",
				awstest.DefaultRegion, eb.aws.Account(), eb.aws.Endpoint(), eb.aws.Endpoint())
		},
	})
}

// ec2Bed is an awstest cloud with a provider over an EC2 client whose
// access key the bed can get wrong.
type ec2Bed struct {
	*env
	p *Cloud

	creds    *aws.CredentialsCache
	pageSize int                 // the client's MaxResults; 0: the backend's
	page     atomic.Int32        // the list's page now being asked
	pages    cloudtest.Hook[int] // BeforePage
	mu       sync.Mutex
	key      awstest.User
	getFails bool

	routes *routesBed // with Options.Routes
}

// pagesOf is the EC2 client asking for pages of size (0: as asked).
type pagesOf struct {
	*ec2.Client
	size int
}

func (p pagesOf) DescribeInstances(ctx context.Context, in *ec2.DescribeInstancesInput, opts ...func(*ec2.Options)) (*ec2.DescribeInstancesOutput, error) {
	if p.size > 0 && in.MaxResults != nil {
		again := *in
		again.MaxResults = aws.Int32(int32(p.size))
		in = &again
	}
	return p.Client.DescribeInstances(ctx, in, opts...)
}

// minPageSize is EC2's smallest MaxResults of DescribeInstances.
const minPageSize = 5

func newEC2Bed(t *testing.T, o conformance.Options) conformance.Bed {
	e := newEnv(t)
	b := &ec2Bed{env: e, key: testUser}
	if o.PageSize > 0 {
		b.pageSize = max(o.PageSize, minPageSize)
	}
	// The SDK's credentials cache, emptied when the secret changes.
	b.creds = aws.NewCredentialsCache(aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
		b.mu.Lock()
		defer b.mu.Unlock()
		return aws.Credentials{AccessKeyID: b.key.AccessKeyID, SecretAccessKey: b.key.SecretAccessKey}, nil
	}))
	target, err := url.Parse(e.aws.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	proxy := httptest.NewServer(b.failGets(httputil.NewSingleHostReverseProxy(target)))
	t.Cleanup(proxy.Close)
	client := ec2.New(ec2.Options{Region: awstest.DefaultRegion, BaseEndpoint: aws.String(proxy.URL), Credentials: b.creds,
		Retryer: aws.NopRetryer{}, HTTPClient: awstest.HTTPClient()})
	cfg := e.config()
	cfg.MinRefreshInterval = metav1.Duration{Duration: time.Millisecond}
	if o.Routes {
		b.routes = upstreamRoutesOn(t, e.aws, &cfg)
	}
	p, err := NewWithClients(cfg, pagesOf{client, b.pageSize}, nil)
	if err != nil {
		t.Fatal(err)
	}
	b.p = p
	if b.routes != nil {
		b.routes.startNodes(t, p)
	}
	return b
}

// failGets passes the EC2 client's calls on to awstest (their Host kept,
// as signed), except, while getFails, those of DescribeInstances that name
// instance ids: 503 Unavailable, in EC2's error XML. (awstest's own Fail
// fails every call of an action.)
func (b *ec2Bed) failGets(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		q, _ := url.ParseQuery(string(body))
		byID := q.Get("InstanceId.1") != ""
		for k, v := range q {
			if strings.HasPrefix(k, "Filter.") && strings.HasSuffix(k, ".Name") && slices.Contains(v, "instance-id") {
				byID = true
			}
		}
		if q.Get("Action") == awstest.ActionDescribeInstances && !byID {
			page := 1
			if q.Get("NextToken") != "" {
				page = int(b.page.Add(1))
			} else {
				b.page.Store(1)
			}
			b.pages.Run(page)
		}
		b.mu.Lock()
		fail := b.getFails
		b.mu.Unlock()
		if fail && byID && q.Get("Action") == awstest.ActionDescribeInstances {
			w.Header().Set("Content-Type", "text/xml;charset=UTF-8")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?>`+
				`<Response><Errors><Error><Code>Unavailable</Code><Message>failed by the bed</Message></Error></Errors><RequestID>bed</RequestID></Response>`)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (b *ec2Bed) Provider() conformance.Provider { return b.p }

func (b *ec2Bed) Make(t testing.TB, s conformance.Spec) conformance.Made {
	tags := map[string]string{clusterTag: "owned", "Name": s.Name}
	if s.Foreign {
		tags = map[string]string{"kubernetes.io/cluster/c2": "owned", "Name": s.Name}
	}
	var id string
	if s.First {
		id = fmt.Sprintf("i-%017x", s.N) // the list is in id order; awstest's own ids are hashes
	}
	in := b.aws.Put(awstest.Instance{ID: id, PrivateIP: s.Addr("127.0.87"), PublicIP: s.Addr("127.0.88"),
		Tags: tags, Created: s.Created})
	m := conformance.Made{Spec: s, ProviderID: agentid.ProviderID(in.Zone, in.ID), ID: in.ID,
		NodeName: b.p.policy.NodeName(in.ID, in.PrivateDNSName, tags), InternalIP: in.PrivateIP}
	if b.routes != nil && !s.Foreign {
		b.routes.addNode(t, m)
	}
	return m
}

// Delete deletes the instance after the provider has asked EC2 for it
// (a Node's instance, which the CCM has described): the provider takes
// EC2's miss of an id it was never shown for eventual consistency, not
// an answer, for NewInstanceWindow (TestNodeOfInstanceNotYetVisible).
func (b *ec2Bed) Delete(t testing.TB, m conformance.Made) {
	if b.routes != nil {
		b.routes.terminate(t, m)
		return
	}
	if _, err := b.p.describeByID(context.Background(), m.ID); err != nil {
		t.Logf("describing %s before its deletion: %v", m.ID, err)
	}
	b.aws.Delete(m.ID)
}

func (b *ec2Bed) SetState(t testing.TB, m conformance.Made, s view.State) bool {
	st := map[view.State]string{view.StateStopped: "stopped", view.StatePending: "pending", view.StateTerminated: "terminated"}[s]
	if err := b.aws.SetState(m.ID, st); err != nil {
		t.Fatal(err)
	}
	return true
}

// Fail: an outage is DescribeInstances answering 503 Unavailable; an
// access key EC2 does not know is refused (InvalidClientTokenId); throttled is EC2's
// rate limiting with an empty bucket (RequestLimitExceeded); GetFails
// fails the DescribeInstances calls by id alone (failGets).
func (b *ec2Bed) Fail(t testing.TB, f conformance.Failure) func() {
	if b.routes != nil && f != conformance.GetFails {
		return b.routes.fail(b, f)
	}
	switch f {
	case conformance.Outage:
		b.aws.Fail(awstest.ActionDescribeInstances, 1<<20, 503, "Unavailable")
		return func() { b.aws.Fail(awstest.ActionDescribeInstances, 0, 0, "") }
	case conformance.Unauthorized:
		b.setKey(awstest.User{AccessKeyID: "AKIAMOORINGUNKNOWN01", SecretAccessKey: "not-a-known-secret"})
		return func() { b.setKey(testUser) }
	case conformance.GetFails:
		b.setGetFails(true)
		return func() { b.setGetFails(false) }
	case conformance.Throttled:
		b.aws.Throttle(map[string]awstest.Bucket{awstest.ActionDescribeInstances: {}})
		return b.aws.NoThrottle
	}
	return nil
}

func (b *ec2Bed) setGetFails(on bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.getFails = on
}

// setKey changes the access key the client signs with. (Another key
// ID, not only another secret: the SDK's signer keeps the keys it derived
// from a secret by key ID, date, region and service.)
func (b *ec2Bed) setKey(k awstest.User) {
	b.mu.Lock()
	b.key = k
	b.mu.Unlock()
	b.creds.Invalidate()
}

func (b *ec2Bed) BeforePage(f func(page int)) { b.pages.Set(f) }

func (b *ec2Bed) PageSize() int { return b.pageSize }

// Calls: the lists of the fleet, and the DescribeInstances calls by id.
func (b *ec2Bed) Calls(c conformance.Call) int {
	if a, ok := routeActions[c]; ok {
		return b.aws.Calls(a)
	}
	if c == conformance.List {
		return b.aws.Describes().Listed
	}
	return b.aws.Describes().ByID
}
