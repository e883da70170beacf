package harness

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mooring-dev/mooring/cloud/local/api"
	"github.com/mooring-dev/mooring/test/testbed"
)

// NotifySocket collects sd_notify messages, as systemd would.
type NotifySocket struct {
	Path string
	conn *net.UnixConn
	mu   sync.Mutex
	msgs []string
}

// ListenNotify opens a notify socket at path.
func ListenNotify(path string) (*NotifySocket, error) {
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		return nil, err
	}
	n := &NotifySocket{Path: path, conn: conn}
	go func() {
		buf := make([]byte, 4096)
		for {
			k, err := conn.Read(buf)
			if err != nil {
				return
			}
			n.mu.Lock()
			n.msgs = append(n.msgs, string(buf[:k]))
			n.mu.Unlock()
		}
	}()
	return n, nil
}

// Messages so far.
func (n *NotifySocket) Messages() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]string(nil), n.msgs...)
}

// Close closes the socket.
func (n *NotifySocket) Close() error { return n.conn.Close() }

// Machine is a cloud instance with a kubelet installed (a systemd unit of a
// shared systemd --user) and mooring-agent running as its join.
type Machine struct {
	// Name is the Node name; Instance is the local cloud's record (nil on
	// another cloud).
	Name     string
	Instance *api.Instance
	Node     *testbed.Node
	// Config is the agent's config file; EnvFile the kubelet env it writes.
	Config, EnvFile string
	Agent           *testbed.Process
	Notify          *NotifySocket

	power power
}

// Fleet is the machines and the systemd that runs their kubelets. While it
// runs, each machine follows its instance's power (power.go): stopping or
// terminating the instance stops the machine's kubelet.
type Fleet struct {
	Machines []*Machine
	Systemd  *testbed.UserSystemd

	stopWatch context.CancelFunc
	watchDone chan struct{}
}

// FleetOptions describe the machines.
type FleetOptions struct {
	Names    []string
	Cluster  string
	Dir      string // state of the machines and of systemd
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
}

// Provisioned is an instance made for a machine on another cloud.
type Provisioned struct {
	// NodeName is the Node the kubelet registers; Address its InternalIP
	// (loopback).
	NodeName, Address string
	// AgentConfig holds the agent config's cloud lines (cloud:,
	// metadataURL:, nodeNamePolicy:, cloudSettings:).
	AgentConfig string
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

// RunFleet creates an instance per name, prepares its node (kubelet not
// started: its unit is written into a systemd --user that this starts),
// writes the agent's config, and starts the agents. The kubelets start when
// their agents ask systemd to. From then on, until Stop, a machine whose
// instance is stopped or terminated is powered off (its kubelet stopped),
// and powered on again when a stopped instance runs (see power.go). The
// cluster stops the nodes; Stop stops systemd, and with it the kubelets,
// and must come first.
func RunFleet(ctx context.Context, c *testbed.Cluster, lc *LocalCloud, opts FleetOptions) (f *Fleet, err error) {
	dir := opts.Dir
	caFile := filepath.Join(dir, "ca.crt")
	tokenFile := filepath.Join(dir, "bootstrap-token")
	sd := filepath.Join(dir, "systemd")
	unitDir := filepath.Join(sd, "config", "systemd", "user")
	if err := os.MkdirAll(unitDir, 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(caFile, c.CA.CertPEM, 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(tokenFile, []byte(c.Token+"\n"), 0o600); err != nil {
		return nil, err
	}
	// The agents read the cluster's kubelet-config ConfigMap with the nodes'
	// credentials, as deploy/base lets them.
	if err := c.Apply(ctx, filepath.Join(RepoRoot(), "deploy", "base", "kubelet-config-rbac.yaml")); err != nil {
		return nil, err
	}
	f = &Fleet{}
	defer func() {
		if err != nil {
			_ = f.Stop()
		}
	}()
	for _, name := range opts.Names {
		var (
			p  Provisioned
			in *api.Instance
		)
		if opts.Provision != nil {
			p, err = opts.Provision(ctx, name)
		} else {
			p, in, err = provisionLocal(ctx, lc, opts.Cluster, name)
		}
		if err != nil {
			return f, err
		}
		n, argv, err := c.PrepareNode(testbed.NodeConfig{Name: p.NodeName, Address: p.Address, ExternalCredentials: true})
		if err != nil {
			return f, err
		}
		c.AdoptNode(n)
		m := &Machine{Name: p.NodeName, Instance: in, Node: n, Config: filepath.Join(dir, name+"-agent.yaml"), EnvFile: filepath.Join(dir, name+"-kubelet.env")}
		unit := fmt.Sprintf("[Unit]\nDescription=kubelet of machine %s\n\n[Service]\nEnvironmentFile=%s\nExecStart=%s $KUBELET_MOORING_ARGS\nStandardOutput=append:%s\nStandardError=inherit\n",
			name, m.EnvFile, strings.Join(argv, " "), filepath.Join(dir, name+"-kubelet.log"))
		if err := os.WriteFile(filepath.Join(unitDir, "kubelet-"+name+".service"), []byte(unit), 0o644); err != nil {
			return f, err
		}
		cfg := fmt.Sprintf("apiServer: %s\ncaFile: %s\nbootstrapTokenFile: %s\n%scertDir: %s\nkubeconfig: %s\nkubeletEnvFile: %s\nkubeletConfigFile: %s\ncontainerRuntimeEndpoint: unix://%s\nkubeletUnit: kubelet-%s.service\nwaitTimeout: 2m\n",
			c.URL, caFile, tokenFile, p.AgentConfig, n.CertDir, n.Kubeconfig, m.EnvFile, filepath.Join(dir, name+"-kubelet-config.yaml"), filepath.Join(n.Dir, "cri.sock"), name)
		if err := os.WriteFile(m.Config, []byte(cfg), 0o600); err != nil {
			return f, err
		}
		f.Machines = append(f.Machines, m)
	}
	if f.Systemd, err = testbed.StartUserSystemd(sd, fmt.Sprintf("mooring-systemd-%d", os.Getpid())); err != nil {
		return f, err
	}
	for i, m := range f.Machines {
		name := opts.Names[i]
		if m.Notify, err = ListenNotify(filepath.Join(dir, name+"-notify.sock")); err != nil {
			return f, err
		}
		m.Agent, err = c.RunEnv("mooring-agent-"+name, append(f.Systemd.Env(), "NOTIFY_SOCKET="+m.Notify.Path),
			opts.AgentBin, "--config="+m.Config, "--systemd-user", "--v=2")
		if err != nil {
			return f, err
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

// StartFleet is RunFleet for a test: it fails the test on an error and,
// when the test ends, stops the fleet (before the test bed's teardown, so
// systemd stops the kubelets before their nodes are cleaned up), showing the
// tails of the first machine's kubelet log and of systemd's log if the test
// failed.
func StartFleet(ctx context.Context, t testing.TB, c *testbed.Cluster, lc *LocalCloud, opts FleetOptions) *Fleet {
	t.Helper()
	f, err := RunFleet(ctx, c, lc, opts)
	t.Cleanup(func() {
		if t.Failed() && len(opts.Names) > 0 {
			for _, name := range []string{opts.Names[0] + "-kubelet.log", filepath.Join("systemd", "systemd.log")} {
				data, _ := os.ReadFile(filepath.Join(opts.Dir, name))
				lines := strings.Split(string(data), "\n")
				t.Logf("%s (tail):\n%s", name, strings.Join(lines[max(0, len(lines)-25):], "\n"))
			}
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

// Stop stops following the instances' power, then stops systemd (and so
// the kubelets) and closes the notify sockets.
func (f *Fleet) Stop() error {
	var err error
	if f.stopWatch != nil {
		f.stopWatch()
		<-f.watchDone
		f.stopWatch = nil
	}
	if f.Systemd != nil {
		err = f.Systemd.Stop()
		f.Systemd = nil
	}
	for _, m := range f.Machines {
		if m.Notify != nil {
			m.Notify.Close()
		}
	}
	return err
}
