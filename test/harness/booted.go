package harness

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/mooring-dev/mooring/agent"
	"github.com/mooring-dev/mooring/cloud/local/api"
	"github.com/mooring-dev/mooring/cloud/tpm/tpmtest"
	"github.com/mooring-dev/mooring/test/fakecri"
	"github.com/mooring-dev/mooring/test/harness/boot"
	"github.com/mooring-dev/mooring/test/testbed"
)

// BootOptions describe machines that boot (BootMachines).
type BootOptions struct {
	Names    []string
	Cluster  string
	AgentBin string
	// Provision makes each machine's instance (a cloud's Provisioner);
	// nil: a local cloud instance of Local, with a join ticket from
	// Tickets when that is set.
	Provision func(ctx context.Context, name string) (Provisioned, error)
	Local     *LocalCloud
	Tickets   *TicketIssuer
	// Kubeadm names the machines whose image has kubeadm's kubelet
	// drop-in 10-kubeadm.conf (and the kubeadm-flags.env kubeadm join
	// writes), as the Kubernetes packages install it, beside the one
	// mooring's user-data installs.
	Kubeadm []string
	// Before, when set, is called once the instances exist and before the
	// machines boot (a test takes its cloud down there).
	Before func() error
	// Packages names the machines whose image has no kubelet: their
	// user-data installs it from a package repository (UserDataArgs,
	// e.g. a KubeletRepo's), the image's apt sources are emptied and its
	// containerd.service is a stand-in that loads the configuration the
	// user-data writes (packageImage).
	Packages []string
	// UserDataArgs are more `mooring-agent user-data` flags for a machine,
	// by name (a later flag overrides the same one before it).
	UserDataArgs map[string][]string
	// Release, when set, is a release hack/release.sh made with this
	// machine's platform: it is served on loopback as a release download
	// (<base>/<version>/<file>), its agent renders the user-data with
	// --version, and the machines download that release's agent.
	Release *Release
	// TPM names the machines that have a TPM: a TPM simulator of their
	// own (cloud/tpm/tpmtest, a process per machine), its socket's
	// directory bind-mounted at TPMDir in the machine, and the
	// user-data's --tpm-device naming the socket there (TPMDevice). Booted.TPM
	// is the simulator.
	TPM []string
	// ProvisionTPM, when set, is called for each machine with a TPM once
	// its instance exists and its TPM runs, before the machines boot: a
	// cloud's test endpoint provisions the vTPM there (NV indexes, as GCE
	// writes its AK template and certificate) or records its endorsement
	// key (as EC2 reports it).
	ProvisionTPM func(ctx context.Context, name string, p Provisioned, sim *tpmtest.Sim) error
	// TPMBin is the simulator command (tpmtest.Build); BootMachines builds
	// it when TPM names a machine and it is empty.
	TPMBin string
}

// Where a booted machine finds its TPM (BootOptions.TPM): the directory
// bind-mounted from the host, and the simulator's socket in it, which
// the agent config's tpmDevice names.
const (
	TPMDir    = "/run/mooring-tpm"
	TPMDevice = TPMDir + "/" + tpmtest.SocketName
)

// Release is a release directory and its version.
type Release struct{ Dir, Version string }

// Booted is a machine that boots: cloud-init finds its user-data (what
// `mooring-agent user-data` prints for its cloud) in a NoCloud seed,
// installs and enables mooring's units, and the agent joins and starts
// the kubelet, whose container runtime is a fake one served by the test
// on the machine's /run/containerd/containerd.sock.
type Booted struct {
	*boot.Machine
	// NodeName and Address are the instance's (its Node name and loopback
	// address).
	NodeName, Address string
	Instance          *api.Instance
	// UserData is the user-data the machine was created with.
	UserData []byte
	// TPM is the machine's TPM (BootOptions.TPM), nil without one.
	TPM *tpmtest.Sim

	cri    *fakecri.Server
	criDir string
}

// BootFleet is machines booted for one test, and what serves them.
type BootFleet struct {
	Machines []*Booted
	Dir      string
	// AgentURL serves the agent binary, as a release download would.
	AgentURL, AgentSHA256 string
	// ReleaseURL serves BootOptions.Release as <ReleaseURL>/<version>/<file>.
	ReleaseURL string

	srv, releaseSrv *http.Server
	release         *Release
}

// BootMachines provisions an instance per name, renders its user-data with
// the built mooring-agent's `user-data` subcommand (the test clouds'
// endpoints passed as --metadata-url and --cloud-setting, as a user
// passes theirs), and boots the machines in parallel (test/harness/boot).
// When the test ends, every machine is stopped and removed (before the
// test bed's teardown), even when it failed; a failed test shows each
// machine's journal tail.
func BootMachines(ctx context.Context, t testing.TB, c *testbed.Cluster, opts BootOptions) *BootFleet {
	t.Helper()
	if len(opts.TPM) > 0 && opts.TPMBin == "" {
		opts.TPMBin = tpmtest.Binary(t)
	}
	f, err := RunBootFleet(ctx, c, opts)
	t.Cleanup(func() {
		if f == nil {
			return
		}
		if t.Failed() {
			for _, m := range f.Machines {
				if m.PID() == 0 {
					continue
				}
				t.Logf("%s", m.Diagnose(context.Background()))
				out, _ := m.Exec(context.Background(), "journalctl", "--no-pager", "-n", "20", "-u", "cloud-final", "-u", "cloud-config")
				t.Logf("machine %s cloud-init journal (tail):\n%s", m.Name, out)
			}
		}
		if err := f.Remove(); err != nil {
			t.Errorf("booted machines teardown: %v", err)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// RunBootFleet is BootMachines outside a test (the demo): the caller
// removes the fleet (Remove) before stopping the cluster, also when it
// returns an error with a fleet.
func RunBootFleet(ctx context.Context, c *testbed.Cluster, opts BootOptions) (f *BootFleet, err error) {
	dir, err := os.MkdirTemp("/var/lib", "mooring-boot-")
	if err != nil {
		return nil, err
	}
	f = &BootFleet{Dir: dir}
	if err := f.serveAgent(opts.AgentBin); err != nil {
		return f, err
	}
	if err := f.serveRelease(opts.Release); err != nil {
		return f, err
	}
	if err := c.Apply(ctx, filepath.Join(RepoRoot(), "deploy", "base", "kubelet-config-rbac.yaml")); err != nil {
		return f, err
	}
	if err := publishKubeletConfig(ctx, c); err != nil {
		return f, err
	}
	caFile, tokenFile := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "bootstrap-token")
	if err := os.WriteFile(caFile, c.CA.CertPEM, 0o644); err != nil {
		return f, err
	}
	if err := os.WriteFile(tokenFile, []byte(c.Token+"\n"), 0o600); err != nil {
		return f, err
	}
	var cfgs []boot.Config
	for _, name := range opts.Names {
		var (
			p  Provisioned
			in *api.Instance
		)
		if opts.Provision != nil {
			p, err = opts.Provision(ctx, name)
		} else {
			var tok string
			if opts.Tickets != nil {
				if tok, err = opts.Tickets.Issue(name, opts.Cluster, 0); err != nil {
					return f, err
				}
			}
			p, in, err = provisionLocal(ctx, opts.Local, opts.Cluster, name)
			p.JoinTicket = tok
		}
		if err != nil {
			return f, fmt.Errorf("provision %s: %w", name, err)
		}
		mdir := filepath.Join(dir, "machines", name)
		b := &Booted{NodeName: p.NodeName, Address: p.Address, Instance: in, criDir: filepath.Join(mdir, "containerd")}
		f.Machines = append(f.Machines, b)
		udArgs := opts.UserDataArgs[name]
		var binds []boot.Bind
		if slices.Contains(opts.TPM, name) {
			if b.TPM, err = startTPM(ctx, opts, name, p, filepath.Join(mdir, "tpm")); err != nil {
				return f, fmt.Errorf("machine %s: %w", name, err)
			}
			binds = append(binds, boot.Bind{Source: b.TPM.Dir, Target: TPMDir})
			udArgs = append([]string{"--tpm-device=" + TPMDevice}, udArgs...)
		}
		if b.UserData, err = f.userData(opts.AgentBin, p, mdir, c.URL, caFile, tokenFile, udArgs...); err != nil {
			return f, fmt.Errorf("machine %s: %w", name, err)
		}
		if err := os.MkdirAll(b.criDir, 0o755); err != nil {
			return f, err
		}
		if b.cri, err = fakecri.Start(filepath.Join(b.criDir, "containerd.sock"), "/var/lib/kubelet"); err != nil {
			return f, err
		}
		files, err := kubeletImage(p.Address, slices.Contains(opts.Kubeadm, name))
		if err != nil {
			return f, err
		}
		binds = append([]boot.Bind{
			{Source: c.Binaries().Kubelet, Target: "/usr/bin/kubelet", ReadOnly: true},
			{Source: b.criDir, Target: "/run/containerd"},
		}, binds...)
		if slices.Contains(opts.Packages, name) {
			if files, binds, err = packaged(files, binds); err != nil {
				return f, err
			}
		}
		cfgs = append(cfgs, boot.Config{Name: name, Dir: filepath.Join(mdir, "machine"), InstanceID: "i-" + name,
			UserData: b.UserData, Files: files, Binds: binds})
	}
	if opts.Before != nil {
		if err := opts.Before(); err != nil {
			return f, err
		}
	}
	errs := make([]error, len(cfgs))
	var wg sync.WaitGroup
	for i, cfg := range cfgs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m, err := boot.Boot(ctx, cfg)
			f.Machines[i].Machine = m
			errs[i] = err
		}()
	}
	wg.Wait()
	return f, errors.Join(errs...)
}

// startTPM starts a machine's TPM simulator in dir and lets the cloud's
// test endpoint provision it (BootOptions.ProvisionTPM).
func startTPM(ctx context.Context, opts BootOptions, name string, p Provisioned, dir string) (*tpmtest.Sim, error) {
	if opts.TPMBin == "" {
		return nil, errors.New("a TPM without BootOptions.TPMBin (tpmtest.Build)")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	sim, err := tpmtest.Run(opts.TPMBin, dir)
	if err != nil {
		return nil, err
	}
	if opts.ProvisionTPM != nil {
		if err := opts.ProvisionTPM(ctx, name, p, sim); err != nil {
			return sim, fmt.Errorf("provision its TPM: %w", err)
		}
	}
	return sim, nil
}

// serveAgent serves the agent binary on loopback, for the user-data's
// --agent-url, and takes its digest.
func (f *BootFleet) serveAgent(bin string) error {
	data, err := os.ReadFile(bin)
	if err != nil {
		return err
	}
	sum := sha256.Sum256(data)
	f.AgentSHA256 = hex.EncodeToString(sum[:])
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	f.AgentURL = "http://" + l.Addr().String() + "/mooring-agent"
	mux := http.NewServeMux()
	mux.HandleFunc("GET /mooring-agent", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/octet-stream")
		_, _ = w.Write(data)
	})
	f.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = f.srv.Serve(l) }()
	return nil
}

// serveRelease serves a release's directory on loopback as a release
// download, <ReleaseURL>/<version>/<file>.
func (f *BootFleet) serveRelease(r *Release) error {
	if r == nil {
		return nil
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	f.release = r
	f.ReleaseURL = "http://" + l.Addr().String() + "/releases/download"
	mux := http.NewServeMux()
	prefix := "/releases/download/" + r.Version + "/"
	mux.Handle("GET "+prefix, http.StripPrefix(prefix, http.FileServer(http.Dir(r.Dir))))
	f.releaseSrv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = f.releaseSrv.Serve(l) }()
	return nil
}

// userData runs `mooring-agent user-data` as a user would for the
// instance: the cloud's part of the agent config becomes its flags. With
// a release, that release's agent renders it with --version.
func (f *BootFleet) userData(agentBin string, p Provisioned, dir, apiServer, caFile, tokenFile string, extra ...string) ([]byte, error) {
	var cloud agent.Config
	if err := yaml.UnmarshalStrict([]byte(p.AgentConfig), &cloud); err != nil {
		return nil, fmt.Errorf("the instance's agent config: %w", err)
	}
	args := []string{"user-data", "--cloud=" + cloud.Cloud, "--api-server=" + apiServer, "--ca-file=" + caFile,
		"--bootstrap-token-file=" + tokenFile, "--agent-url=" + f.AgentURL, "--agent-sha256=" + f.AgentSHA256}
	if r := f.release; r != nil {
		asset := "mooring-agent_" + r.Version + "_linux_" + runtime.GOARCH
		agentBin = filepath.Join(r.Dir, asset)
		args = append(args[:5], "--version="+r.Version, "--release-url="+f.ReleaseURL, "--arch="+runtime.GOARCH)
	}
	if cloud.MetadataURL != "" {
		args = append(args, "--metadata-url="+cloud.MetadataURL)
	}
	if cloud.NodeNamePolicy != "" {
		args = append(args, "--node-name-policy="+cloud.NodeNamePolicy)
	}
	keys := make([]string, 0, len(cloud.CloudSettings))
	for k := range cloud.CloudSettings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		args = append(args, "--cloud-setting="+k+"="+cloud.CloudSettings[k])
	}
	if p.JoinTicket != "" {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, err
		}
		ticketFile := filepath.Join(dir, "join-ticket")
		if err := os.WriteFile(ticketFile, []byte(p.JoinTicket+"\n"), 0o600); err != nil {
			return nil, err
		}
		args = append(args, "--join-ticket-file="+ticketFile)
	}
	args = append(args, extra...)
	out, err := exec.Command(agentBin, args...).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return nil, fmt.Errorf("mooring-agent %s: %w: %s", strings.Join(args, " "), err, ee.Stderr)
		}
		return nil, err
	}
	return out, nil
}

// kubeletImage is what the machine image holds of the kubelet besides
// its binary: the distribution's kubelet.service (not enabled: the agent
// starts it), the machine's own kubelet settings (its address and ports:
// machines share the host's network) in a configuration drop-in directory
// named through $KUBELET_EXTRA_ARGS in /etc/default/kubelet, as an admin
// sets them, and with kubeadm, its drop-in and flags file.
func kubeletImage(address string, kubeadm bool) ([]boot.File, error) {
	unitDir := filepath.Join(RepoRoot(), "systemd", "units", "testdata")
	service, err := os.ReadFile(filepath.Join(unitDir, "kubelet.service"))
	if err != nil {
		return nil, err
	}
	ports, err := testbed.FreePorts(address, 2)
	if err != nil {
		return nil, err
	}
	settings := fmt.Sprintf(`{"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration", "address": %q, "port": %d, "healthzBindAddress": %q, "healthzPort": %d}`+"\n",
		address, ports[0], address, ports[1])
	files := []boot.File{
		{Path: "/usr/lib/systemd/system/kubelet.service", Content: service},
		{Path: "/usr/lib/systemd/system/kubelet.service.d/05-machine.conf", Content: []byte(
			"# The test machine image: the admin's kubelet flags.\n[Service]\nEnvironmentFile=-/etc/default/kubelet\n")},
		{Path: "/etc/default/kubelet", Content: []byte("KUBELET_EXTRA_ARGS=--config-dir=/etc/kubernetes/kubelet.conf.d --v=2\n")},
		{Path: "/etc/kubernetes/kubelet.conf.d/50-machine.conf", Content: []byte(settings)},
	}
	if kubeadm {
		dropIn, err := os.ReadFile(filepath.Join(unitDir, "10-kubeadm.conf"))
		if err != nil {
			return nil, err
		}
		files = append(files,
			boot.File{Path: "/usr/lib/systemd/system/kubelet.service.d/10-kubeadm.conf", Content: dropIn},
			// What kubeadm join writes.
			boot.File{Path: "/var/lib/kubelet/kubeadm-flags.env", Content: []byte(
				`KUBELET_KUBEADM_ARGS="--container-runtime-endpoint=unix:///run/containerd/containerd.sock"` + "\n")})
	}
	return files, nil
}

// StopBed stops what a program outside a test (the demo, the soak) ran
// on a bed, in the order that leaves nothing behind: the booted machines
// and the fleet (either may be nil), before the cluster whose nodes they
// are.
func StopBed(c *testbed.Cluster, fleet *Fleet, boot *BootFleet) error {
	var errs []error
	if boot != nil {
		errs = append(errs, boot.Remove())
	}
	if fleet != nil {
		errs = append(errs, fleet.Stop())
	}
	return errors.Join(append(errs, c.Stop())...)
}

// Remove stops and removes every machine and their runtimes, then the
// fleet's directory, and reports anything left.
func (f *BootFleet) Remove() error {
	errs := make([]error, len(f.Machines))
	var wg sync.WaitGroup
	for i, m := range f.Machines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if m.Machine != nil {
				errs[i] = m.Machine.Remove()
			}
			if m.cri != nil {
				m.cri.Stop()
			}
			if m.TPM != nil {
				m.TPM.Stop()
			}
		}()
	}
	wg.Wait()
	if f.srv != nil {
		_ = f.srv.Close()
	}
	if f.releaseSrv != nil {
		_ = f.releaseSrv.Close()
	}
	err := errors.Join(errs...)
	if err == nil {
		err = os.RemoveAll(f.Dir)
	}
	return err
}

// WaitReady waits until the machine's Node is Ready, as reported by a
// kubelet of this boot (its heartbeat is from after the container
// started), and returns the time since the container started.
func (b *Booted) WaitReady(ctx context.Context, c *testbed.Cluster, timeout time.Duration) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, b.NodeName, metav1.GetOptions{})
		if err == nil {
			for _, cond := range n.Status.Conditions {
				if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue && !cond.LastHeartbeatTime.Time.Before(b.StartedAt().Truncate(time.Second)) {
					return time.Since(b.StartedAt()), nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("node %s of machine %s not Ready: %w (last: %v)", b.NodeName, b.Name, ctx.Err(), err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// CloudInitStatus is `cloud-init status --long` on the machine, after
// cloud-init has finished (--wait).
func (b *Booted) CloudInitStatus(ctx context.Context) (string, error) {
	return b.Exec(ctx, "cloud-init", "status", "--wait", "--long")
}

// Journal is the machine's journal of a unit (message text only).
func (b *Booted) Journal(ctx context.Context, unit string) (string, error) {
	return b.Exec(ctx, "journalctl", "--no-pager", "-o", "cat", "-u", unit)
}
