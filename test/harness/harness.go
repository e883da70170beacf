// Package harness runs mooring's own programs on the test bed for the e2e
// tests and the benchmarks: it builds them, and starts the local cloud and
// mooring-ccm as processes the control plane stops with itself.
package harness

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/mooring-dev/mooring/cloud/local/client"
	"github.com/mooring-dev/mooring/test/testbed"
)

// RepoRoot is the checkout this package was built from.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// BuildBinary builds one of mooring's commands (a package path relative to
// the checkout) into the test's temp dir; the Go build cache makes repeats
// cheap.
func BuildBinary(t testing.TB, pkg string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-o", out, "./"+pkg)
	cmd.Dir = RepoRoot()
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
	return out
}

// LocalCloud is a mooring-localcloud process.
type LocalCloud struct {
	Proc      *testbed.Process
	Client    *client.Client
	URL       string
	TokenFile string
}

const cloudToken = "harness-cloud-token"

// StartLocalCloud runs the daemon with address pools of its own: the third
// octet comes from the test process id, so concurrent test processes do not
// meet. Extra flags (such as --rate-limit) are appended.
func StartLocalCloud(t testing.TB, c *testbed.Cluster, bin string, extra ...string) *LocalCloud {
	t.Helper()
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(cloudToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	b := os.Getpid() % 250
	addrFile := filepath.Join(dir, "address")
	args := append([]string{"serve",
		"--listen=127.0.0.1:0", "--address-file=" + addrFile, "--token-file=" + tokenFile,
		"--state=" + filepath.Join(dir, "state.db"), "--metadata-port=0",
		fmt.Sprintf("--internal-cidr=127.41.%d.0/24", b), fmt.Sprintf("--external-cidr=127.42.%d.0/24", b),
		fmt.Sprintf("--vip-cidr=127.43.%d.0/24", b)}, extra...)
	p, err := c.Run("mooring-localcloud", bin, args...)
	if err != nil {
		t.Fatal(err)
	}
	var url string
	deadline := time.Now().Add(30 * time.Second)
	for {
		if done, err := p.Exited(); done {
			t.Fatalf("mooring-localcloud exited: %v\n%s", err, p.LogTail(20))
		}
		if data, err := os.ReadFile(addrFile); err == nil && strings.TrimSpace(string(data)) != "" {
			url = strings.TrimSpace(string(data))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("mooring-localcloud did not write its address\n%s", p.LogTail(20))
		}
		time.Sleep(50 * time.Millisecond)
	}
	cl, err := client.New(url, cloudToken, nil)
	if err != nil {
		t.Fatal(err)
	}
	return &LocalCloud{Proc: p, Client: cl, URL: url, TokenFile: tokenFile}
}

// CCMOptions choose how mooring-ccm runs.
type CCMOptions struct {
	// Cluster is the cluster tag and --cluster-name.
	Cluster string
	// CloudConfig lines appended to the provider config.
	CloudConfig string
	// Args are extra flags.
	Args []string
}

// StartCCM runs mooring-ccm as the ServiceAccount of deploy/ccm/rbac.yaml
// (applied here), so the test also proves that RBAC suffices.
func StartCCM(t testing.TB, c *testbed.Cluster, bin string, lc *LocalCloud, opts CCMOptions) *testbed.Process {
	t.Helper()
	ctx := context.Background()
	if err := c.Apply(ctx, filepath.Join(RepoRoot(), "deploy", "ccm", "rbac.yaml")); err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := c.WriteKubeconfig("ccm", "system:serviceaccount:kube-system:cloud-controller-manager",
		"system:serviceaccounts", "system:serviceaccounts:kube-system")
	if err != nil {
		t.Fatal(err)
	}
	cloudConfig := writeCloudConfig(t, lc, opts.Cluster, opts.CloudConfig)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	args := append([]string{
		"--kubeconfig=" + kubeconfig, "--authentication-kubeconfig=" + kubeconfig, "--authorization-kubeconfig=" + kubeconfig,
		"--cloud-provider=local", "--cloud-config=" + cloudConfig, "--cluster-name=" + opts.Cluster,
		"--bind-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", port), "--leader-elect=true",
	}, opts.Args...)
	p, err := c.Run("mooring-ccm", bin, args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("mooring-ccm log tail:\n%s", p.LogTail(40))
		}
	})
	return p
}

func writeCloudConfig(t testing.TB, lc *LocalCloud, cluster, extra string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "cloud.yaml")
	if err := os.WriteFile(path, fmt.Appendf(nil, "endpoint: %s\ntokenFile: %s\ncluster: %s\n%s",
		lc.URL, lc.TokenFile, cluster, extra), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// StartApprover runs mooring-csr-approver as the ServiceAccount of
// deploy/csrapprover/rbac.yaml (applied here), with leader election.
func StartApprover(t testing.TB, c *testbed.Cluster, bin string, lc *LocalCloud, cluster string, args ...string) *testbed.Process {
	t.Helper()
	if err := c.Apply(context.Background(), filepath.Join(RepoRoot(), "deploy", "csrapprover", "rbac.yaml")); err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := c.WriteKubeconfig("csr-approver", "system:serviceaccount:kube-system:mooring-csr-approver",
		"system:serviceaccounts", "system:serviceaccounts:kube-system")
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.Run("mooring-csr-approver", bin, append([]string{
		"--kubeconfig=" + kubeconfig, "--cloud-provider=local", "--cloud-config=" + writeCloudConfig(t, lc, cluster, ""),
		"--metrics-bind-address=127.0.0.1:0", "--leader-elect=true", "--v=2",
	}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("mooring-csr-approver log tail:\n%s", p.LogTail(40))
		}
	})
	return p
}
