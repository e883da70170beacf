// Package harness runs mooring's own programs on the test bed for the e2e
// tests, the benchmarks and the demo: it builds them, and starts the local
// cloud, mooring-ccm, mooring-csr-approver and machines running
// mooring-agent as processes the control plane stops with itself. Each
// Start* function has an error-returning form (Run*) for programs that are
// not tests.
package harness

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mooring-dev/mooring/cloud/local/client"
	"github.com/mooring-dev/mooring/cloud/tpm/tpmtest"
	"github.com/mooring-dev/mooring/test/testbed"
)

// RepoRoot is the checkout this package was built from.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// AgentPkg is mooring-agent's package, relative to the checkout, and
// AgentBuildTags the tags it ships with (the Makefile's AGENT_TAGS,
// hack/release.sh's agent_tags): the tests run the agent as it ships.
const (
	AgentPkg       = "agent/cmd/mooring-agent"
	AgentBuildTags = "grpcnotrace"
)

// Build builds one of mooring's commands (a package path relative to the
// checkout) into dir.
func Build(pkg, dir string) (string, error) { return BuildTagged(pkg, dir, "") }

// BuildTagged is Build with build tags (go build -tags); the binary's
// name carries them, so a tagged and a plain build share a directory.
// mooring-agent gets its AgentBuildTags too.
func BuildTagged(pkg, dir, tags string) (string, error) {
	out := filepath.Join(dir, filepath.Base(pkg))
	args := []string{"build", "-o"}
	if tags != "" {
		out += "-" + strings.ReplaceAll(tags, ",", "-")
	}
	if pkg == AgentPkg {
		tags = strings.Trim(tags+","+AgentBuildTags, ",")
	}
	if tags != "" {
		args = []string{"build", "-tags", tags, "-o"}
	}
	cmd := exec.Command("go", append(args, out, "./"+pkg)...)
	cmd.Dir = RepoRoot()
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %v\n%s", pkg, err, b)
	}
	return out, nil
}

// BuildBinary builds a command into the test's temp dir; the Go build
// cache makes repeats cheaper, but each one still links (mooring-ccm's
// link takes 10 to 25 s on 2 cores). After ShareBuilds, it builds each
// command once for the test process instead.
func BuildBinary(t testing.TB, pkg string) string {
	t.Helper()
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.dir == "" {
		out, err := Build(pkg, t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	if out, ok := shared.bins[pkg]; ok {
		return out
	}
	dir := filepath.Join(shared.dir, strings.ReplaceAll(pkg, "/", "_"))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := Build(pkg, dir)
	if err != nil {
		t.Fatal(err)
	}
	shared.bins[pkg] = out
	return out
}

// shared holds the commands BuildBinary built once, after ShareBuilds.
var shared struct {
	mu   sync.Mutex
	dir  string
	bins map[string]string
}

// ShareBuilds makes BuildBinary build each command once for the test
// process, into a directory of its own that the returned func removes: a
// package's TestMain calls it before its tests run and the func after.
// Tests given one binary must leave it as it is (copy it to change it).
func ShareBuilds() (remove func(), err error) {
	dir, err := os.MkdirTemp("", "mooring-bins-")
	if err != nil {
		return nil, err
	}
	shared.mu.Lock()
	shared.dir, shared.bins = dir, map[string]string{}
	shared.mu.Unlock()
	// The tests' TPM simulator too (booted machines with a TPM).
	tpmtest.ShareBuild(dir)
	return func() {
		shared.mu.Lock()
		defer shared.mu.Unlock()
		shared.dir, shared.bins = "", nil
		tpmtest.ShareBuild("")
		_ = os.RemoveAll(dir)
	}, nil
}

// LocalCloud is a mooring-localcloud process. Its API keeps one address
// (URL) for its whole life, restarts included: Kill and Start (or Restart)
// run the daemon again with the same command line and state file, as an
// operator restarting it would, and the programs configured with URL reach
// it again.
type LocalCloud struct {
	Proc      *testbed.Process
	Client    *client.Client
	URL       string
	TokenFile string

	cp       *testbed.ControlPlane
	bin      string
	args     []string
	addrFile string
}

const cloudToken = "harness-cloud-token"

// errAddrInUse: the daemon could not bind its --listen address.
var errAddrInUse = errors.New("the API address is in use")

// RunLocalCloud runs the daemon with its state in dir and address pools of
// its own: the third octet comes from this process's id, so concurrent test
// processes do not meet. Its API listens on a port of 127.0.0.1 chosen here
// and passed with --listen, so that a restart binds the same address (with
// --listen=127.0.0.1:0 it would get another port, and every client
// configured with the first one would be refused). Extra flags (such as
// --rate-limit) are appended.
func RunLocalCloud(c *testbed.ControlPlane, bin, dir string, extra ...string) (*LocalCloud, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(cloudToken+"\n"), 0o600); err != nil {
		return nil, err
	}
	b := os.Getpid() % 250
	addrFile := filepath.Join(dir, "address")
	// Another process may take the port between the choice and the bind: a
	// few choices.
	for attempt := 1; ; attempt++ {
		port, err := stablePort("127.0.0.1")
		if err != nil {
			return nil, err
		}
		lc := &LocalCloud{
			URL: "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), TokenFile: tokenFile,
			cp: c, bin: bin, addrFile: addrFile,
			args: append([]string{"serve",
				"--listen=" + net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), "--address-file=" + addrFile,
				"--token-file=" + tokenFile, "--state=" + filepath.Join(dir, "state.db"), "--metadata-port=0",
				fmt.Sprintf("--internal-cidr=127.41.%d.0/24", b), fmt.Sprintf("--external-cidr=127.42.%d.0/24", b),
				fmt.Sprintf("--vip-cidr=127.43.%d.0/24", b)}, extra...),
		}
		if lc.Client, err = client.New(lc.URL, cloudToken, nil); err != nil {
			return nil, err
		}
		err = lc.run()
		if err == nil {
			return lc, nil
		}
		if !errors.Is(err, errAddrInUse) || attempt == 5 {
			return nil, err
		}
	}
}

// run starts the daemon with lc's command line and waits until it
// listens at lc.URL.
func (lc *LocalCloud) run() error {
	_ = os.Remove(lc.addrFile)
	p, err := lc.cp.Run("mooring-localcloud", lc.bin, lc.args...)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if done, err := p.Exited(); done {
			tail := p.LogTail(20)
			if strings.Contains(tail, "address already in use") {
				return fmt.Errorf("mooring-localcloud exited: %w (%s)\n%s", errAddrInUse, lc.URL, tail)
			}
			return fmt.Errorf("mooring-localcloud exited: %v\n%s", err, tail)
		}
		if data, err := os.ReadFile(lc.addrFile); err == nil && strings.TrimSpace(string(data)) != "" {
			if url := strings.TrimSpace(string(data)); url != lc.URL {
				_ = p.Stop(time.Second)
				return fmt.Errorf("mooring-localcloud listens at %s, not at %s", url, lc.URL)
			}
			break
		}
		if time.Now().After(deadline) {
			_ = p.Stop(time.Second)
			return fmt.Errorf("mooring-localcloud did not write its address\n%s", p.LogTail(20))
		}
		time.Sleep(50 * time.Millisecond)
	}
	lc.Proc = p
	return nil
}

// Kill ends the daemon with SIGKILL (by its recorded PID, as kill -9 would)
// and waits until it is gone. Its state file keeps everything it answered.
func (lc *LocalCloud) Kill() error {
	if done, _ := lc.Proc.Exited(); done {
		return nil
	}
	if err := syscall.Kill(lc.Proc.PID(), syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill -9 mooring-localcloud (pid %d): %w", lc.Proc.PID(), err)
	}
	_, err := lc.Proc.Wait(30 * time.Second)
	return err
}

// Start runs the daemon again, after Kill or after it died, with the same
// command line and state file; it returns once the API answers at the same
// URL. A bind that fails (the address still held) is retried for up to 10 s.
func (lc *LocalCloud) Start() error {
	if done, _ := lc.Proc.Exited(); !done {
		return fmt.Errorf("mooring-localcloud (pid %d) is still running", lc.Proc.PID())
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := lc.run()
		if err == nil {
			return nil
		}
		if !errors.Is(err, errAddrInUse) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Restart is Kill, then Start: a crash of the daemon and its restart by
// whoever supervises it.
func (lc *LocalCloud) Restart() error {
	if err := lc.Kill(); err != nil {
		return err
	}
	return lc.Start()
}

// RestartWith is Restart with flags added to the daemon's command line
// from now on; a flag given again overrides its earlier value, as the
// flag package parses it: an operator changing the daemon's configuration.
func (lc *LocalCloud) RestartWith(flags ...string) error {
	lc.args = append(lc.args, flags...)
	return lc.Restart()
}

// stablePort picks a TCP port on host that is free now and lies below the
// kernel's ephemeral range (net.ipv4.ip_local_port_range): the kernel never
// hands such a port to an outgoing connection, so while the process that
// listens on it is down, nothing but another explicit bind can take it, and
// a restart binds it again.
func stablePort(host string) (int, error) {
	low := 32768
	if data, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(data)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				low = n
			}
		}
	}
	from := max(1024, low-12000)
	if low-from < 100 {
		return 0, fmt.Errorf("the ephemeral port range starts at %d: no room below it for a stable port", low)
	}
	for range 200 {
		port := from + rand.IntN(low-from)
		l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
		if err != nil {
			continue
		}
		l.Close()
		return port, nil
	}
	return 0, fmt.Errorf("no free port on %s in [%d, %d)", host, from, low)
}

// StartLocalCloud is RunLocalCloud for a test.
func StartLocalCloud(t testing.TB, c *testbed.Cluster, bin string, extra ...string) *LocalCloud {
	t.Helper()
	lc, err := RunLocalCloud(c.ControlPlane, bin, t.TempDir(), extra...)
	if err != nil {
		t.Fatal(err)
	}
	return lc
}

// CCMOptions choose how mooring-ccm runs.
type CCMOptions struct {
	// Cluster is the cluster tag and --cluster-name.
	Cluster string
	// CloudConfig lines appended to the provider config.
	CloudConfig string
	// Args are extra flags.
	Args []string
	// Name names the process in logs; default mooring-ccm. Another CCM
	// binary with the library's flags (BenchmarkNodeInitAWS's upstream
	// one) runs the same way under its own name.
	Name string
}

// Provider is a cloud as mooring-ccm and mooring-csr-approver are set up
// for it: the local cloud (*LocalCloud) or an AWS-compatible endpoint
// (*AWSCloud).
type Provider interface {
	// ProviderName is the --cloud-provider.
	ProviderName() string
	// WriteProviderConfig writes the --cloud-config of cluster, with extra
	// lines appended, into dir and returns its path.
	WriteProviderConfig(dir, cluster, extra string) (string, error)
	// ProviderEnv is what the binaries' environment needs (credentials).
	ProviderEnv() []string
}

// ProviderName is "local".
func (lc *LocalCloud) ProviderName() string { return "local" }

// WriteProviderConfig writes the local provider's config.
func (lc *LocalCloud) WriteProviderConfig(dir, cluster, extra string) (string, error) {
	path := filepath.Join(dir, "cloud.yaml")
	return path, os.WriteFile(path, fmt.Appendf(nil, "endpoint: %s\ntokenFile: %s\ncluster: %s\n%s",
		lc.URL, lc.TokenFile, cluster, extra), 0o600)
}

// ProviderEnv is empty: the token is a file the config names.
func (lc *LocalCloud) ProviderEnv() []string { return nil }

// RunCCM runs mooring-ccm as the ServiceAccount of deploy/ccm/rbac.yaml
// (applied here), so a test also proves that RBAC suffices.
func RunCCM(c *testbed.ControlPlane, bin string, cloud Provider, dir string, opts CCMOptions) (*testbed.Process, error) {
	ctx := context.Background()
	// With join tickets, the RBAC as components/join-tickets makes it
	// (the approver records spent tickets in ConfigMaps).
	if acceptsTickets(opts.Args) {
		if err := ApplyRBACWith(ctx, c, "ccm", "components/join-tickets"); err != nil {
			return nil, err
		}
	} else if err := c.Apply(ctx, filepath.Join(RepoRoot(), "deploy", "ccm", "rbac.yaml")); err != nil {
		return nil, err
	}
	// A provider that needs more of the cluster for its config (the GCE
	// upstream's RBAC and ConfigMap) makes it here.
	if s, ok := cloud.(interface {
		CCMSetup(context.Context, *testbed.ControlPlane, string) error
	}); ok {
		if err := s.CCMSetup(ctx, c, opts.CloudConfig); err != nil {
			return nil, err
		}
	}
	kubeconfig, err := c.WriteKubeconfig("ccm", CCMUser, CCMGroups...)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	cloudConfig, err := cloud.WriteProviderConfig(dir, opts.Cluster, opts.CloudConfig)
	if err != nil {
		return nil, err
	}
	ports, err := testbed.FreePorts("127.0.0.1", 1)
	if err != nil {
		return nil, err
	}
	args := append([]string{
		"--kubeconfig=" + kubeconfig, "--authentication-kubeconfig=" + kubeconfig, "--authorization-kubeconfig=" + kubeconfig,
		"--cloud-provider=" + cloud.ProviderName(), "--cloud-config=" + cloudConfig, "--cluster-name=" + opts.Cluster,
		"--bind-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", ports[0]), "--leader-elect=true",
	}, opts.Args...)
	return c.RunEnv(cmp.Or(opts.Name, "mooring-ccm"), cloud.ProviderEnv(), bin, args...)
}

// StartCCM is RunCCM for a test.
func StartCCM(t testing.TB, c *testbed.Cluster, bin string, cloud Provider, opts CCMOptions) *testbed.Process {
	t.Helper()
	p, err := RunCCM(c.ControlPlane, bin, cloud, t.TempDir(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%s log tail:\n%s", cmp.Or(opts.Name, "mooring-ccm"), p.LogTail(40))
		}
	})
	return p
}

// Approver is a running mooring-csr-approver and where it serves: /metrics
// (HTTPS, delegated authentication and authorization) on MetricsAddr,
// /healthz and /readyz (plain HTTP) on HealthAddr.
type Approver struct {
	*testbed.Process
	MetricsAddr, HealthAddr string
}

// StartApprover runs mooring-csr-approver as the ServiceAccount of
// deploy/csrapprover (its role and rbac.yaml, applied here), with leader
// election.
func StartApprover(t testing.TB, c *testbed.Cluster, bin string, cloud Provider, cluster string, args ...string) *Approver {
	t.Helper()
	for _, f := range []string{"role/clusterrole.yaml", "rbac.yaml"} {
		if err := c.Apply(context.Background(), filepath.Join(RepoRoot(), "deploy", "csrapprover", f)); err != nil {
			t.Fatal(err)
		}
	}
	// With join tickets, the Role as components/join-tickets patches it
	// (the approver records spent tickets in ConfigMaps).
	if acceptsTickets(args) {
		if err := ApplyRBACWith(context.Background(), c.ControlPlane, "csrapprover", "components/join-tickets"); err != nil {
			t.Fatal(err)
		}
	}
	kubeconfig, err := c.WriteKubeconfig("csr-approver", "system:serviceaccount:kube-system:mooring-csr-approver",
		"system:serviceaccounts", "system:serviceaccounts:kube-system")
	if err != nil {
		t.Fatal(err)
	}
	cloudConfig, err := cloud.WriteProviderConfig(t.TempDir(), cluster, "")
	if err != nil {
		t.Fatal(err)
	}
	// /metrics on a secure port behind delegated authentication and
	// authorization, the plain health probes on another.
	ports, err := testbed.FreePorts("127.0.0.1", 2)
	if err != nil {
		t.Fatal(err)
	}
	a := &Approver{MetricsAddr: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0])),
		HealthAddr: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[1]))}
	p, err := c.RunEnv("mooring-csr-approver", cloud.ProviderEnv(), bin, append([]string{
		"--kubeconfig=" + kubeconfig, "--cloud-provider=" + cloud.ProviderName(), "--cloud-config=" + cloudConfig,
		"--authentication-kubeconfig=" + kubeconfig, "--authorization-kubeconfig=" + kubeconfig,
		"--bind-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", ports[0]),
		"--health-probe-bind-address=" + a.HealthAddr, "--leader-elect=true", "--v=2",
	}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	a.Process = p
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("mooring-csr-approver log tail:\n%s", p.LogTail(40))
		}
	})
	return a
}

// acceptsTickets tells whether mooring-ccm's or mooring-csr-approver's
// arguments make the approver accept join tickets.
func acceptsTickets(args []string) bool {
	for _, a := range args {
		if strings.HasPrefix(a, "--ticket-keys-file=") || strings.HasPrefix(a, "--csr-approver-ticket-keys-file=") {
			return true
		}
	}
	return false
}
