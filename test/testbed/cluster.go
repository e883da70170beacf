package testbed

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// Options for Start.
type Options struct {
	// Nodes is how many kubelets to start (node-1 ... node-N).
	Nodes int
	// RBAC chooses the bootstrap bindings.
	RBAC BootstrapRBAC
	// ClusterSigningDuration: see Config.
	ClusterSigningDuration time.Duration
	// ClusterCIDR and NodeMonitorGracePeriod: see Config.
	ClusterCIDR            string
	NodeMonitorGracePeriod time.Duration
	// Controllers: see Config.
	Controllers []string
	// Profiling, APIServerArgs and Scheduler: see Config.
	Profiling     bool
	APIServerArgs []string
	Scheduler     bool
}

// Cluster is a control plane, a bootstrap token and the nodes started with it.
type Cluster struct {
	*ControlPlane
	// Token is a bootstrap token ("id.secret") for joining nodes.
	Token string
	Nodes []*Node
}

// NodeAddress is the loopback address the test bed gives the i-th node
// (from 0): 127.1.x.y.
func NodeAddress(i int) string {
	return fmt.Sprintf("127.1.%d.%d", (i+1)/250, (i+1)%250)
}

// Start starts a control plane with the kubeadm-equivalent bootstrap RBAC,
// creates a bootstrap token and starts opts.Nodes kubelets, all under a
// per-test temporary directory. Everything is stopped when the test ends,
// whether it passed or not, and the test fails if a process, mount or cgroup
// of the test bed is left behind.
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	ctx := context.Background()
	cp, err := StartControlPlane(ctx, Config{
		Dir:                    t.TempDir(),
		Logf:                   t.Logf,
		ClusterSigningDuration: opts.ClusterSigningDuration,
		ClusterCIDR:            opts.ClusterCIDR,
		NodeMonitorGracePeriod: opts.NodeMonitorGracePeriod,
		Controllers:            opts.Controllers,
		Profiling:              opts.Profiling,
		APIServerArgs:          opts.APIServerArgs,
		Scheduler:              opts.Scheduler,
	})
	if err != nil {
		t.Fatalf("start control plane: %v", err)
	}
	c := &Cluster{ControlPlane: cp}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Errorf("test bed teardown: %v", err)
		}
	})
	if err := cp.ApplyBootstrapRBAC(ctx, opts.RBAC); err != nil {
		t.Fatal(err)
	}
	if c.Token, err = cp.CreateBootstrapToken(ctx, time.Hour); err != nil {
		t.Fatal(err)
	}
	for i := range opts.Nodes {
		if _, err := c.AddNode(ctx, fmt.Sprintf("node-%d", i+1)); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// AddNode starts one more kubelet, joining with the cluster's bootstrap token
// at the next node address.
func (c *Cluster) AddNode(ctx context.Context, name string) (*Node, error) {
	n, err := c.StartNode(ctx, NodeConfig{Name: name, Address: NodeAddress(len(c.Nodes)), BootstrapToken: c.Token})
	if err != nil {
		return nil, err
	}
	c.Nodes = append(c.Nodes, n)
	return n, nil
}

// Stop stops every node, then the control plane, and reports anything left.
func (c *Cluster) Stop() error {
	var errs []error
	for _, n := range c.Nodes {
		errs = append(errs, n.Stop())
	}
	errs = append(errs, c.ControlPlane.Stop())
	return errors.Join(errs...)
}
