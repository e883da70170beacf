package cloud

import (
	"context"
	"errors"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	cloudprovider "k8s.io/cloud-provider"
)

// OwnedLoadBalancer is a load balancer this cluster made for a Service.
type OwnedLoadBalancer struct {
	Name string
	// Namespace, Service and UID are those of the Service it was made for.
	Namespace, Service, UID string
	// Fingerprint of the spec the cloud holds, comparable with
	// LoadBalancerInventory.DesiredFingerprint.
	Fingerprint string
}

// LoadBalancerInventory is what mooring's service controller needs beyond
// cloudprovider.LoadBalancer: one batched listing of the cluster's load
// balancers, to repair drift and collect leaks without a call per Service.
type LoadBalancerInventory interface {
	cloudprovider.LoadBalancer
	// ListOwnedLoadBalancers lists the cluster's Service load balancers.
	ListOwnedLoadBalancers(ctx context.Context) ([]OwnedLoadBalancer, error)
	// DesiredFingerprint is the fingerprint of the load balancer that the
	// Service and nodes call for.
	DesiredFingerprint(ctx context.Context, svc *v1.Service, nodes []*v1.Node) (string, error)
}

// PendingError is a load balancer the cloud is still building (or has
// given no address yet): not a failure; the controller asks again After.
type PendingError struct {
	LoadBalancer, State string
	After               time.Duration
}

func (e *PendingError) Error() string {
	return fmt.Sprintf("load balancer %s is %s; asking again in %s", e.LoadBalancer, e.State, e.After)
}

// IsPending reports whether err is (or wraps) a *PendingError.
func IsPending(err error) bool {
	var p *PendingError
	return errors.As(err, &p)
}
