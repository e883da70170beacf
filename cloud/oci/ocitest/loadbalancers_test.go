package ocitest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/oracle/oci-go-sdk/v65/common"
	"github.com/oracle/oci-go-sdk/v65/loadbalancer"
	"github.com/oracle/oci-go-sdk/v65/networkloadbalancer"
)

func lbClients(t *testing.T, c *Cloud) (loadbalancer.LoadBalancerClient, networkloadbalancer.NetworkLoadBalancerClient) {
	t.Helper()
	path, err := c.WriteAPIConfig(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	p, err := common.ConfigurationProviderFromFileWithProfile(path, "DEFAULT", "")
	if err != nil {
		t.Fatal(err)
	}
	lc, err := loadbalancer.NewLoadBalancerClientWithConfigurationProvider(p)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := networkloadbalancer.NewNetworkLoadBalancerClientWithConfigurationProvider(p)
	if err != nil {
		t.Fatal(err)
	}
	noRetry := common.NoRetryPolicy()
	lc.Host, nc.Host = c.Endpoint(), c.Endpoint()
	lc.SetCustomClientConfiguration(common.CustomClientConfiguration{RetryPolicy: &noRetry})
	nc.SetCustomClientConfiguration(common.CustomClientConfiguration{RetryPolicy: &noRetry})
	return lc, nc
}

func status(err error) (int, string) {
	var se common.ServiceError
	if errors.As(err, &se) {
		return se.GetHTTPStatusCode(), se.GetCode()
	}
	return 0, ""
}

// A load balancer is made in one signed POST of its whole tree, CREATING
// until its work request succeeds; a write while one runs is 409; a
// failed work request leaves a created one FAILED.
func TestLoadBalancerWorkRequests(t *testing.T) {
	c := NewStarted(t, Options{})
	c.HoldWorkRequests(true)
	lc, _ := lbClients(t, c)
	ctx := context.Background()
	hc := &loadbalancer.HealthCheckerDetails{Protocol: common.String("HTTP"), UrlPath: common.String("/healthz"), Port: common.Int(10256)}
	d := loadbalancer.CreateLoadBalancerDetails{CompartmentId: common.String(c.Compartment()), DisplayName: common.String("uid-1"),
		ShapeName: common.String("flexible"), ShapeDetails: &loadbalancer.ShapeDetails{MinimumBandwidthInMbps: common.Int(10), MaximumBandwidthInMbps: common.Int(100)},
		SubnetIds: []string{"ocid1.subnet.oc1.iad.aaaa"},
		BackendSets: map[string]loadbalancer.BackendSetDetails{"TCP-80": {Policy: common.String("ROUND_ROBIN"), HealthChecker: hc,
			Backends: []loadbalancer.BackendDetails{{IpAddress: common.String("127.0.97.1"), Port: common.Int(30080)}}}},
		Listeners: map[string]loadbalancer.ListenerDetails{"TCP-80": {DefaultBackendSetName: common.String("TCP-80"), Port: common.Int(80), Protocol: common.String("TCP")}}}
	resp, err := lc.CreateLoadBalancer(ctx, loadbalancer.CreateLoadBalancerRequest{CreateLoadBalancerDetails: d})
	if err != nil || resp.OpcWorkRequestId == nil {
		t.Fatalf("create: %v %+v", err, resp)
	}
	wr, err := lc.GetWorkRequest(ctx, loadbalancer.GetWorkRequestRequest{WorkRequestId: resp.OpcWorkRequestId})
	if err != nil || wr.LifecycleState != loadbalancer.WorkRequestLifecycleStateInProgress {
		t.Fatalf("work request: %v %v", err, wr.LifecycleState)
	}
	id := wr.LoadBalancerId
	got, err := lc.GetLoadBalancer(ctx, loadbalancer.GetLoadBalancerRequest{LoadBalancerId: id})
	if err != nil || got.LifecycleState != loadbalancer.LoadBalancerLifecycleStateCreating || len(got.IpAddresses) != 0 {
		t.Fatalf("while creating: %v %+v", err, got.LoadBalancer)
	}
	_, err = lc.UpdateLoadBalancer(ctx, loadbalancer.UpdateLoadBalancerRequest{LoadBalancerId: id,
		UpdateLoadBalancerDetails: loadbalancer.UpdateLoadBalancerDetails{FreeformTags: map[string]string{"a": "b"}}})
	if st, code := status(err); st != http.StatusConflict || code != "IncorrectState" {
		t.Errorf("a write while creating: %v, want 409 IncorrectState", err)
	}
	c.Settle()
	got, err = lc.GetLoadBalancer(ctx, loadbalancer.GetLoadBalancerRequest{LoadBalancerId: id})
	if err != nil || got.LifecycleState != loadbalancer.LoadBalancerLifecycleStateActive || len(got.IpAddresses) != 1 ||
		!strings.HasPrefix(*got.IpAddresses[0].IpAddress, "127.85.") || got.Listeners["TCP-80"].Port == nil {
		t.Fatalf("after settling: %v %+v", err, got.LoadBalancer)
	}
	list, err := lc.ListLoadBalancers(ctx, loadbalancer.ListLoadBalancersRequest{CompartmentId: common.String(c.Compartment()), DisplayName: common.String("uid-1")})
	if err != nil || len(list.Items) != 1 {
		t.Fatalf("list by display name: %v %d", err, len(list.Items))
	}
	// Bad input: 400, nothing made.
	bad := d
	bad.ShapeDetails = &loadbalancer.ShapeDetails{MinimumBandwidthInMbps: common.Int(5), MaximumBandwidthInMbps: common.Int(100)}
	if _, err := lc.CreateLoadBalancer(ctx, loadbalancer.CreateLoadBalancerRequest{CreateLoadBalancerDetails: bad}); !isStatus(err, 400) {
		t.Errorf("flex minimum 5: %v, want 400", err)
	}
	// A failed work request: the load balancer being made is FAILED.
	c.FailWorkRequests(1)
	d.DisplayName = common.String("uid-2")
	resp, err = lc.CreateLoadBalancer(ctx, loadbalancer.CreateLoadBalancerRequest{CreateLoadBalancerDetails: d})
	if err != nil {
		t.Fatal(err)
	}
	c.Settle()
	wr, _ = lc.GetWorkRequest(ctx, loadbalancer.GetWorkRequestRequest{WorkRequestId: resp.OpcWorkRequestId})
	got, _ = lc.GetLoadBalancer(ctx, loadbalancer.GetLoadBalancerRequest{LoadBalancerId: wr.LoadBalancerId})
	if wr.LifecycleState != loadbalancer.WorkRequestLifecycleStateFailed || len(wr.ErrorDetails) != 1 || got.LifecycleState != loadbalancer.LoadBalancerLifecycleStateFailed {
		t.Errorf("failed work request: %v %+v; load balancer %v", wr.LifecycleState, wr.ErrorDetails, got.LifecycleState)
	}
	// Delete: DELETING, then gone (404).
	del, err := lc.DeleteLoadBalancer(ctx, loadbalancer.DeleteLoadBalancerRequest{LoadBalancerId: id})
	if err != nil || del.OpcWorkRequestId == nil {
		t.Fatal(err)
	}
	c.Settle()
	if _, err := lc.GetLoadBalancer(ctx, loadbalancer.GetLoadBalancerRequest{LoadBalancerId: id}); !isStatus(err, 404) {
		t.Errorf("after deletion: %v, want 404", err)
	}
	if n := len(c.Balancers()); n != 1 {
		t.Errorf("load balancers left: %d, want the failed one", n)
	}
}

func isStatus(err error, want int) bool {
	st, _ := status(err)
	return st == want
}

// An NLB: created (its body answered, CREATING), UPDATING while a work
// request runs on it, a second write then 409 Conflict.
func TestNetworkLoadBalancer(t *testing.T) {
	c := NewStarted(t, Options{})
	c.HoldWorkRequests(true)
	_, nc := lbClients(t, c)
	ctx := context.Background()
	hc := &networkloadbalancer.HealthChecker{Protocol: networkloadbalancer.HealthCheckProtocolsHttp, UrlPath: common.String("/healthz"), Port: common.Int(10256)}
	resp, err := nc.CreateNetworkLoadBalancer(ctx, networkloadbalancer.CreateNetworkLoadBalancerRequest{CreateNetworkLoadBalancerDetails: networkloadbalancer.CreateNetworkLoadBalancerDetails{
		CompartmentId: common.String(c.Compartment()), DisplayName: common.String("ns/web/uid"), SubnetId: common.String("ocid1.subnet.oc1.iad.aaaa"),
		BackendSets: map[string]networkloadbalancer.BackendSetDetails{"TCP-80": {HealthChecker: hc, Policy: networkloadbalancer.NetworkLoadBalancingPolicyFiveTuple}},
		Listeners: map[string]networkloadbalancer.ListenerDetails{"TCP-80": {Name: common.String("TCP-80"), DefaultBackendSetName: common.String("TCP-80"),
			Port: common.Int(80), Protocol: networkloadbalancer.ListenerProtocolsTcp}}}})
	if err != nil || resp.Id == nil || resp.LifecycleState != networkloadbalancer.LifecycleStateCreating {
		t.Fatalf("create: %v %+v", err, resp.NetworkLoadBalancer)
	}
	c.Settle()
	id := resp.Id
	_, err = nc.UpdateBackendSet(ctx, networkloadbalancer.UpdateBackendSetRequest{NetworkLoadBalancerId: id, BackendSetName: common.String("TCP-80"),
		UpdateBackendSetDetails: networkloadbalancer.UpdateBackendSetDetails{Backends: []networkloadbalancer.BackendDetails{{IpAddress: common.String("127.0.97.1"), Port: common.Int(30080)}}}})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := nc.GetNetworkLoadBalancer(ctx, networkloadbalancer.GetNetworkLoadBalancerRequest{NetworkLoadBalancerId: id})
	if got.LifecycleState != networkloadbalancer.LifecycleStateUpdating {
		t.Errorf("while updating: %v", got.LifecycleState)
	}
	_, err = nc.DeleteListener(ctx, networkloadbalancer.DeleteListenerRequest{NetworkLoadBalancerId: id, ListenerName: common.String("TCP-80")})
	if st, code := status(err); st != http.StatusConflict || code != "Conflict" {
		t.Errorf("a second write: %v, want 409 Conflict", err)
	}
	c.Settle()
	got, _ = nc.GetNetworkLoadBalancer(ctx, networkloadbalancer.GetNetworkLoadBalancerRequest{NetworkLoadBalancerId: id})
	if got.LifecycleState != networkloadbalancer.LifecycleStateActive || len(got.BackendSets["TCP-80"].Backends) != 1 {
		t.Errorf("after the update: %v %+v", got.LifecycleState, got.BackendSets["TCP-80"])
	}
	list, err := nc.ListNetworkLoadBalancers(ctx, networkloadbalancer.ListNetworkLoadBalancersRequest{CompartmentId: common.String(c.Compartment())})
	if err != nil || len(list.Items) != 1 {
		t.Fatalf("list: %v %+v", err, list)
	}
}

// A body whose hash is not the signed x-content-sha256 is refused (401),
// as is a POST signed with the GET's headers only.
func TestBodySignature(t *testing.T) {
	c := NewStarted(t, Options{})
	path, err := c.WriteAPIConfig(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	p, _ := common.ConfigurationProviderFromFileWithProfile(path, "DEFAULT", "")
	body := []byte(`{"networkSecurityGroupIds":[]}`)
	for name, sign := range map[string]func(*http.Request) error{
		"tampered": func(r *http.Request) error {
			if err := common.DefaultRequestSigner(p).Sign(r); err != nil {
				return err
			}
			r.Body = ioNop(bytes.Replace(body, []byte("[]"), []byte("[ ]"), 1))
			r.ContentLength++
			return nil
		},
		"generic headers": func(r *http.Request) error {
			return common.RequestSigner(p, common.DefaultGenericHeaders(), nil).Sign(r)
		},
	} {
		r, _ := http.NewRequest(http.MethodPut, c.Endpoint()+"/20170115/loadBalancers/ocid1.loadbalancer.oc1.iad.x/networkSecurityGroups", bytes.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Date", time.Now().UTC().Format(http.TimeFormat))
		if err := sign(r); err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s: %d, want 401", name, resp.StatusCode)
		}
	}
}

func ioNop(b []byte) io.ReadCloser { return io.NopCloser(bytes.NewReader(b)) }
