package harness

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coreos/go-systemd/v22/dbus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/mooring-dev/mooring/agent"
	"github.com/mooring-dev/mooring/agent/cloudinit"
	"github.com/mooring-dev/mooring/cloud/local/api"
	"github.com/mooring-dev/mooring/test/testbed"
)

// Machine is a cloud instance laid out as a real machine that cloud-init
// prepared, under its own root directory: mooring's shipped
// mooring-agent.service and kubelet drop-in 20-mooring.conf run in a shared
// systemd --user, with every path a real machine uses moved under Root.
type Machine struct {
	// Name is the Node name; Instance is the local cloud's record (nil on
	// another cloud).
	Name     string
	Instance *api.Instance
	Node     *testbed.Node
	// Root is the machine's "/": Root/etc/mooring, Root/etc/kubernetes,
	// Root/var/lib/kubelet hold what they hold on a real machine.
	Root string
	// Config is the agent's config file; EnvFile the kubelet env it writes.
	Config, EnvFile string
	// Agent is the machine's mooring-agent unit.
	Agent *AgentUnit

	power  power
	mounts []string // MountTmpfs's mount points, unmounted by Fleet.Stop
}

// DevicePluginDir is the machine's own testbed.DevicePluginDir, which
// its kubelet unit sees in place of the host's (units.go).
func (m *Machine) DevicePluginDir() string { return filepath.Join(m.Root, testbed.DevicePluginDir) }

// MountTmpfs mounts a tmpfs of size bytes on path (under the machine's
// root, made if missing), as a small disk the machine can fill. Call it
// from FleetOptions.Prepare, before systemd starts, so that the machine's
// units see it; the fleet unmounts it when it stops.
func (m *Machine) MountTmpfs(path string, size int) error {
	if rel, err := filepath.Rel(m.Root, path); err != nil || rel == "." || strings.HasPrefix(rel, "..") {
		return fmt.Errorf("machine %s: %s is not under its root %s", m.Name, path, m.Root)
	}
	if err := os.MkdirAll(path, 0o700); err != nil {
		return err
	}
	if err := syscall.Mount("tmpfs", path, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, fmt.Sprintf("size=%d,mode=0700", size)); err != nil {
		return fmt.Errorf("machine %s: mount a tmpfs on %s: %w", m.Name, path, err)
	}
	m.mounts = append(m.mounts, path)
	return nil
}

// Fleet is the machines and the systemd that runs their agents and
// kubelets. While it runs, each machine follows its instance's power
// (power.go): stopping or terminating the instance stops the machine's
// kubelet.
type Fleet struct {
	Machines []*Machine
	Systemd  *testbed.UserSystemd
	// Dir holds the machines' roots, their logs and systemd's state. It is
	// under /var/lib, not a test's temporary directory: the agent's unit
	// has PrivateTmp= and ProtectHome=, so nothing under /tmp or a home
	// is visible to it. Stop removes it.
	Dir string

	stopWatch context.CancelFunc
	watchDone chan struct{}
}

// FleetOptions describe the machines.
type FleetOptions struct {
	Names    []string
	Cluster  string
	AgentBin string
	// PowerPoll is how often the instances' states are read to power
	// machines off and on (default DefaultPowerPoll; negative: never).
	PowerPoll time.Duration
	// PowerLogf, when set, is told each machine powered off or on.
	PowerLogf func(format string, args ...any)
	// Provision, when set, makes each machine's instance on another cloud
	// than the local one (which then is not used, and may be nil; machines
	// do not follow power).
	Provision func(ctx context.Context, name string) (Provisioned, error)
	// Tickets, when set, issues a join ticket for each local cloud machine
	// named in TicketNames (every machine when it is empty) before its
	// instance is created, as an admin's provisioning does; those machines
	// join with it instead of cloud-signed evidence.
	Tickets     *TicketIssuer
	TicketNames []string
	// Prepare, when set, is called for each machine once its root is laid
	// out and before systemd starts: a test can rewrite its agent config
	// (m.Config) or mount a file system into it (MountTmpfs).
	Prepare func(m *Machine) error
	// AgentEnvironment, when set, gives a machine's agent unit extra
	// environment variables ("NAME=value").
	AgentEnvironment func(name string) []string
}

// Provisioned is an instance made for a machine on another cloud.
type Provisioned struct {
	// NodeName is the Node the kubelet registers; Address its InternalIP
	// (loopback).
	NodeName, Address string
	// AgentConfig holds the agent config's cloud lines (cloud:,
	// metadataURL:, nodeNamePolicy:, cloudSettings:).
	AgentConfig string
	// JoinTicket, when set, is written where cloud-init writes it
	// (cloudinit.TicketPath) and named by the agent config's
	// joinTicketFile: the machine joins with it instead of cloud-signed
	// evidence.
	JoinTicket string
}

// provisionLocal makes a local cloud instance.
func provisionLocal(ctx context.Context, lc *LocalCloud, cluster, name string) (Provisioned, *api.Instance, error) {
	in, err := lc.Client.CreateInstance(ctx, api.CreateInstanceRequest{Name: name, Cluster: cluster})
	if err != nil {
		return Provisioned{}, nil, err
	}
	return Provisioned{NodeName: in.Name, Address: in.Addresses[0].Address,
		AgentConfig: fmt.Sprintf("cloud: local\nmetadataURL: %s\n", in.MetadataURL)}, in, nil
}

// RunFleet creates an instance per name and lays its machine out under
// the fleet's directory (see Machine): the cluster CA, bootstrap token and
// agent config where cloud-init writes them, a node prepared by the test
// bed (its fake runtime, cgroup root and own kubelet settings as a
// configuration drop-in), and the units: mooring's shipped
// mooring-agent.service and kubelet drop-in with their paths moved under
// the machine's root (units.go), over a kubelet.service that stands in for
// the distribution's. The cluster's kubelet settings are published in
// kube-system/kubelet-config, as kubeadm publishes them, for the agents
// to read. Then it starts a systemd --user and each machine's agent unit,
// as a booting machine does; the agents start their kubelets. From then
// on, until Stop, a machine whose instance is stopped or terminated is
// powered off, and powered on again when a stopped instance runs (see
// power.go). The cluster stops the nodes; Stop stops systemd, and with it
// the agents and kubelets, and must come first.
func RunFleet(ctx context.Context, c *testbed.Cluster, lc *LocalCloud, opts FleetOptions) (f *Fleet, err error) {
	dir, err := os.MkdirTemp("/var/lib", "mooring-fleet-")
	if err != nil {
		return nil, err
	}
	f = &Fleet{Dir: dir}
	defer func() {
		if err != nil {
			_ = f.Stop()
		}
	}()
	if err := os.Chmod(dir, 0o755); err != nil {
		return f, err
	}
	agentBin := filepath.Join(dir, "bin", "mooring-agent")
	if err := copyExecutable(opts.AgentBin, agentBin); err != nil {
		return f, err
	}
	// The mount point of the machines' own device plugin directories
	// (units.go); a kubelet of the host's would make it too.
	if err := os.MkdirAll(testbed.DevicePluginDir, 0o755); err != nil {
		return f, err
	}
	sd := filepath.Join(dir, "systemd")
	unitDir := filepath.Join(sd, "config", "systemd", "user")
	if err := os.MkdirAll(unitDir, 0o755); err != nil {
		return f, err
	}
	// The agents read the cluster's kubelet-config ConfigMap with the nodes'
	// credentials, as deploy/base lets them.
	if err := c.Apply(ctx, filepath.Join(RepoRoot(), "deploy", "base", "kubelet-config-rbac.yaml")); err != nil {
		return f, err
	}
	if err := publishKubeletConfig(ctx, c); err != nil {
		return f, err
	}
	for _, name := range opts.Names {
		var (
			p  Provisioned
			in *api.Instance
		)
		if opts.Provision != nil {
			p, err = opts.Provision(ctx, name)
		} else {
			var tok string
			if opts.Tickets != nil && (len(opts.TicketNames) == 0 || slices.Contains(opts.TicketNames, name)) {
				if tok, err = opts.Tickets.Issue(name, opts.Cluster, 0); err != nil {
					return f, err
				}
			}
			p, in, err = provisionLocal(ctx, lc, opts.Cluster, name)
			p.JoinTicket = tok
		}
		if err != nil {
			return f, err
		}
		m, err := layOutMachine(c, dir, name, p)
		if err != nil {
			return f, err
		}
		m.Instance = in
		f.Machines = append(f.Machines, m)
		if opts.Prepare != nil {
			if err := opts.Prepare(m); err != nil {
				return f, fmt.Errorf("prepare machine %s: %w", m.Name, err)
			}
		}
		var env []string
		if opts.AgentEnvironment != nil {
			env = opts.AgentEnvironment(m.Name)
		}
		if err := writeMachineUnits(unitDir, m, agentBin, c.Binaries().Kubelet, env); err != nil {
			return f, err
		}
	}
	if f.Systemd, err = testbed.StartUserSystemd(sd, fmt.Sprintf("mooring-systemd-%d", os.Getpid())); err != nil {
		return f, err
	}
	for _, m := range f.Machines {
		m.Agent = &AgentUnit{Unit: agentUnitName(m.Name), LogFile: filepath.Join(m.Root, "agent.log"), fleet: f}
		if err := f.withUnits(ctx, func(ctx context.Context, conn *dbus.Conn) error {
			// Queued, not awaited: the job ends with READY=1, after the join.
			_, err := conn.StartUnitContext(ctx, m.Agent.Unit, "replace", nil)
			return err
		}); err != nil {
			return f, fmt.Errorf("start %s: %w", m.Agent.Unit, err)
		}
	}
	if every := opts.PowerPoll; every >= 0 && opts.Provision == nil {
		if every == 0 {
			every = DefaultPowerPoll
		}
		var wctx context.Context
		wctx, f.stopWatch = context.WithCancel(context.Background())
		f.watchDone = make(chan struct{})
		go f.watchPower(wctx, lc, every, opts.PowerLogf)
	}
	return f, nil
}

// layOutMachine makes a machine's root: the files cloud-init writes
// (agent/cloudinit: CA, bootstrap token, agent config) and a node of the
// test bed whose state is the machine's /var/lib/kubelet.
func layOutMachine(c *testbed.Cluster, fleetDir, name string, p Provisioned) (*Machine, error) {
	root := filepath.Join(fleetDir, "machines", name)
	at := func(path string) string { return filepath.Join(root, path) }
	for _, d := range []string{"/etc/mooring", "/etc/kubernetes", "/var/lib/kubelet", testbed.DevicePluginDir} {
		if err := os.MkdirAll(at(d), 0o755); err != nil {
			return nil, err
		}
	}
	if err := os.WriteFile(at(cloudinit.CAPath), c.CA.CertPEM, 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(at(cloudinit.TokenPath), []byte(c.Token+"\n"), 0o600); err != nil {
		return nil, err
	}
	n, _, err := c.PrepareNode(testbed.NodeConfig{Name: p.NodeName, Address: p.Address, ExternalCredentials: true,
		Dir: at("/var/lib/kubelet"), Kubeconfig: at(agent.DefaultKubeconfig)})
	if err != nil {
		return nil, err
	}
	c.AdoptNode(n)
	if n.CertDir != at(agent.DefaultCertDir) {
		return nil, fmt.Errorf("node %s: cert dir %s, want the machine's %s", name, n.CertDir, agent.DefaultCertDir)
	}
	m := &Machine{Name: p.NodeName, Node: n, Root: root, Config: at(agent.DefaultConfigPath), EnvFile: at(agent.DefaultKubeletEnvFile)}
	if p.JoinTicket != "" {
		if err := os.WriteFile(at(cloudinit.TicketPath), []byte(p.JoinTicket+"\n"), 0o600); err != nil {
			return nil, err
		}
		p.AgentConfig += "joinTicketFile: " + at(cloudinit.TicketPath) + "\n"
	}
	// The paths cloud-init's config leaves to the agent's defaults are
	// named here, moved under the machine's root.
	cfg := fmt.Sprintf("apiServer: %s\ncaFile: %s\nbootstrapTokenFile: %s\n%scertDir: %s\nkubeconfig: %s\nkubeletEnvFile: %s\nkubeletConfigFile: %s\ncontainerRuntimeEndpoint: unix://%s\nkubeletUnit: %s\nwaitTimeout: 2m\n",
		c.URL, at(cloudinit.CAPath), at(cloudinit.TokenPath), p.AgentConfig, n.CertDir, n.Kubeconfig, m.EnvFile,
		at(agent.DefaultKubeletConfigFile), filepath.Join(n.Dir, "cri.sock"), kubeletUnitName(p.NodeName))
	if err := os.WriteFile(m.Config, []byte(cfg), 0o600); err != nil {
		return nil, err
	}
	return m, nil
}

// publishKubeletConfig creates kube-system/kubelet-config with the test
// bed's shared kubelet settings, unless the cluster has one.
func publishKubeletConfig(ctx context.Context, c *testbed.Cluster) error {
	data, err := yaml.Marshal(testbed.ClusterKubeletConfig())
	if err != nil {
		return err
	}
	_, err = c.Client.CoreV1().ConfigMaps(agent.KubeletConfigMapNamespace).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: agent.KubeletConfigMapName, Namespace: agent.KubeletConfigMapNamespace},
		Data:       map[string]string{agent.KubeletConfigMapKey: string(data)},
	}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

func copyExecutable(from, to string) error {
	data, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		return err
	}
	return os.WriteFile(to, data, 0o755)
}

// StartFleet is RunFleet for a test: it fails the test on an error and,
// when the test ends, stops the fleet (before the test bed's teardown, so
// systemd stops the kubelets before their nodes are cleaned up), showing,
// if the test failed, what up to three machines whose Node is not Ready
// say (Machine.Diagnose: unit states, log tails, the kubelet's files) and
// the tail of systemd's log.
func StartFleet(ctx context.Context, t testing.TB, c *testbed.Cluster, lc *LocalCloud, opts FleetOptions) *Fleet {
	t.Helper()
	f, err := RunFleet(ctx, c, lc, opts)
	t.Cleanup(func() {
		if t.Failed() && f != nil && len(f.Machines) > 0 {
			for _, m := range f.notReady(c, 3) {
				t.Logf("%s", m.Diagnose(context.Background()))
			}
			path := filepath.Join(f.Dir, "systemd", "systemd.log")
			t.Logf("%s (tail):\n%s", path, tail(path, 25))
		}
		if f != nil {
			if err := f.Stop(); err != nil {
				t.Errorf("systemd --user teardown: %v", err)
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// notReady is up to n machines whose Node is not Ready (or cannot be
// read), or, when every one is, the first n: those a failed test shows.
func (f *Fleet) notReady(c *testbed.Cluster, n int) []*Machine {
	var late []*Machine
	for _, m := range f.Machines {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		node, err := c.Client.CoreV1().Nodes().Get(ctx, m.Name, metav1.GetOptions{})
		cancel()
		if err != nil || !NodeReady(node) {
			late = append(late, m)
		}
	}
	if len(late) == 0 {
		late = f.Machines
	}
	return late[:min(n, len(late))]
}

// Stop stops following the instances' power, then stops systemd (and so
// the agents and kubelets) and removes the fleet's directory.
func (f *Fleet) Stop() error {
	var errs []error
	if f.stopWatch != nil {
		f.stopWatch()
		<-f.watchDone
		f.stopWatch = nil
	}
	if f.Systemd != nil {
		errs = append(errs, f.Systemd.Stop())
		f.Systemd = nil
	}
	// The nodes' mounts, cgroups and runtimes go before their directories
	// (the cluster's teardown stopping them again does nothing).
	for _, m := range f.Machines {
		errs = append(errs, m.Node.Stop())
		for _, p := range m.mounts {
			// EINVAL: no longer a mount point (the node's teardown, which
			// unmounts what is under its directory, came first).
			if err := syscall.Unmount(p, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) {
				errs = append(errs, fmt.Errorf("unmount %s: %w", p, err))
			}
		}
		m.mounts = nil
	}
	if f.Dir != "" {
		errs = append(errs, os.RemoveAll(f.Dir))
	}
	return errors.Join(errs...)
}

// tail is the end of a log, or why it cannot be read.
func tail(path string, lines int) string {
	s, err := testbed.FileTail(path, lines)
	if err != nil {
		return err.Error()
	}
	return s
}
