package testbed

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/util/retry"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"

	"github.com/mooring-dev/mooring/test/fakecri"
)

// NodeConfig describes a real kubelet to start.
type NodeConfig struct {
	// Name is the node name (--hostname-override).
	Name string
	// Address is the node's own address in 127.0.0.0/8; the kubelet serves
	// on it. It is not registered on the Node: a cloud controller (or a
	// test, with SetNodeAddresses) sets the Node's addresses.
	Address string
	// BootstrapToken is the token in the kubelet's bootstrap kubeconfig.
	BootstrapToken string
	// ClientCertPEM and ClientKeyPEM, when set, are credentials obtained
	// beforehand (as mooring's agent obtains them): the kubelet starts with
	// them, the way the agent leaves them (kubelet-client-current.pem and a
	// kubeconfig that references it), and does not bootstrap.
	ClientCertPEM, ClientKeyPEM []byte
	// ExternalCredentials: someone else (mooring's agent) writes the
	// kubeconfig at Node.Kubeconfig before the kubelet starts.
	ExternalCredentials bool
	// Dir, when set, holds the node's state instead of the cluster's
	// nodes/<name> (it must exist or be creatable); Kubeconfig, when set,
	// is where the kubelet's kubeconfig goes. A machine that lays its
	// files out as a real one does (test/harness's fleet) sets both.
	Dir, Kubeconfig string
	// Containerd makes the node run real pods: a containerd of its own
	// (Debian's containerd and runc) instead of the fake runtime, with a
	// loopback-only network, so pods must use the host network
	// (containerd.go). Import images with Node.ImportImages.
	Containerd bool
}

// Node is a kubelet with its own fake container runtime, root directory,
// ports and cgroup root.
type Node struct {
	Name    string
	Address string
	// Dir holds the node's state; CertDir its certificates (--cert-dir);
	// Kubeconfig the kubeconfig the kubelet writes after bootstrap;
	// RootDir its --root-dir.
	Dir, CertDir, Kubeconfig, RootDir string
	// ConfigDir is a kubelet configuration drop-in directory (--config-dir)
	// holding this node's own settings (addresses, ports, paths, runtime
	// endpoint, cgroup root): with ClusterKubeletConfig as the --config
	// file, it is what the --config that PrepareNode's command line names
	// holds.
	ConfigDir string
	// Port is the kubelet's HTTPS port on Address.
	Port int

	kubelet    *process
	cri        *fakecri.Server
	containerd *containerd
	endpoint   string // the CRI endpoint
	cgroups    []string
	healthz    string
	stopped    bool
}

// StartNode starts a kubelet with --cloud-provider=external, serving
// certificate bootstrap and client certificate rotation, and returns once its
// health endpoint answers. Registration happens after that, asynchronously.
func (cp *ControlPlane) StartNode(ctx context.Context, nc NodeConfig) (n *Node, err error) {
	n, argv, err := cp.PrepareNode(nc)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, n.Stop())
			n = nil
		}
	}()
	if n.kubelet, err = startProcess("kubelet-"+nc.Name, filepath.Join(cp.cfg.Dir, "logs", "kubelet-"+nc.Name+".log"), argv[0], argv[1:]...); err != nil {
		return n, err
	}
	if err := n.WaitHealthy(ctx, startTimeout); err != nil {
		return n, n.kubelet.failure(err)
	}
	if err := n.waitDevicePluginSocket(startTimeout); err != nil {
		return n, n.kubelet.failure(err)
	}
	cp.cfg.Logf("kubelet %s (%s:%d) healthy in %v, RSS %d MiB, pid %d", nc.Name, nc.Address, n.Port,
		time.Since(n.kubelet.started).Round(time.Millisecond), n.kubelet.rssBytes()>>20, n.kubelet.pid())
	return n, nil
}

// PrepareNode sets a node up (root dir, fake container runtime, cgroup
// root, ports, kubelet config and credentials) and returns the kubelet's
// command line without starting it, for tests where something else (a
// systemd unit) starts the kubelet. Node.Stop cleans up as for StartNode;
// stop the kubelet first.
func (cp *ControlPlane) PrepareNode(nc NodeConfig) (n *Node, argv []string, err error) {
	if nc.Name == "" || (nc.BootstrapToken == "" && nc.ClientCertPEM == nil && !nc.ExternalCredentials) {
		return nil, nil, errors.New("testbed: NodeConfig needs Name and BootstrapToken, client credentials or ExternalCredentials")
	}
	if err := checkLoopback(nc.Address); err != nil {
		return nil, nil, fmt.Errorf("testbed: node %s: %w", nc.Name, err)
	}
	dir := nc.Dir
	if dir == "" {
		dir = filepath.Join(cp.cfg.Dir, "nodes", nc.Name)
	}
	n = &Node{Name: nc.Name, Address: nc.Address, Dir: dir,
		CertDir: filepath.Join(dir, "pki"), Kubeconfig: filepath.Join(dir, "kubelet.kubeconfig"),
		RootDir: filepath.Join(dir, "root"), ConfigDir: filepath.Join(dir, "kubelet.conf.d")}
	if nc.Kubeconfig != "" {
		n.Kubeconfig = nc.Kubeconfig
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, n.Stop())
			n = nil
		}
	}()
	for _, d := range []string{"root", "pki", "manifests", "pod-logs", "kubelet.conf.d"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o750); err != nil {
			return n, nil, err
		}
	}
	if nc.Containerd {
		if n.containerd, err = startContainerd(context.Background(), "containerd-"+nc.Name, filepath.Join(dir, "containerd"),
			filepath.Join(cp.cfg.Dir, "logs", "containerd-"+nc.Name+".log")); err != nil {
			return n, nil, err
		}
		n.endpoint = n.containerd.Endpoint()
	} else {
		if n.cri, err = fakecri.Start(filepath.Join(dir, "cri.sock"), filepath.Join(dir, "root")); err != nil {
			return n, nil, err
		}
		n.endpoint = n.cri.Endpoint()
	}
	// A cgroup root of its own: kubelets sharing /kubepods delete each
	// other's pod cgroups.
	if n.cgroups, err = createCgroup("mooring-" + cp.id + "-" + nc.Name); err != nil {
		return n, nil, err
	}
	ports, err := FreePorts(nc.Address, 2)
	if err != nil {
		return n, nil, err
	}
	n.Port = ports[0]
	n.healthz = fmt.Sprintf("http://%s/healthz", hostPort(nc.Address, ports[1]))
	var credArgs []string
	if !nc.ExternalCredentials {
		if credArgs, err = cp.kubeletCredentials(n, nc); err != nil {
			return n, nil, err
		}
	}
	configPath := filepath.Join(dir, "kubelet-config.json")
	nodeCfg := nodeKubeletConfig(n, ports[1], "/"+filepath.Base(n.cgroups[0]))
	if err := writeJSON(filepath.Join(n.ConfigDir, "50-testbed-node.conf"), nodeCfg); err != nil {
		return n, nil, err
	}
	cluster := ClusterKubeletConfig()
	cluster.Authentication.X509.ClientCAFile = cp.CAFile
	full, err := withNodeKubeletConfig(cluster, nodeCfg)
	if err != nil {
		return n, nil, err
	}
	if err := writeJSON(configPath, full); err != nil {
		return n, nil, err
	}
	argv = append([]string{cp.cfg.Binaries.Kubelet}, credArgs...)
	argv = append(argv,
		"--config="+configPath,
		"--kubeconfig="+n.Kubeconfig,
		"--cert-dir="+n.CertDir,
		"--root-dir="+n.RootDir,
		"--hostname-override="+nc.Name,
		"--cloud-provider=external",
		"--v=2",
	)
	return n, argv, nil
}

// WaitHealthy polls the kubelet's healthz until it answers 200.
func (n *Node) WaitHealthy(ctx context.Context, timeout time.Duration) error {
	return waitFor(timeout, 100*time.Millisecond, "kubelet "+n.Name+" health", func() (bool, error) {
		if n.kubelet != nil {
			if done, _ := n.kubelet.exited(); done {
				return false, errExited
			}
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, n.healthz, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, err
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
}

// DevicePluginDir is where every kubelet keeps its device plugin
// registration socket (kubelet.sock) and checkpoint, whatever its
// --root-dir (k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1.DevicePluginPath).
const DevicePluginDir = "/var/lib/kubelet/device-plugins"

// waitDevicePluginSocket waits until the kubelet has made its device
// plugin socket. The kubelets StartNode runs share the host's directory
// (they run real pods, so they stay in the host's mount namespace, where
// containerd sees their volume mounts): each empties it and listens there
// as its container manager starts. Two kubelets doing that at once made
// the second fail with "address already in use" and exit (issue 42), so
// StartNode returns only once its kubelet is past that point. The
// machines of test/harness have directories of their own.
func (n *Node) waitDevicePluginSocket(timeout time.Duration) error {
	return waitFor(timeout, 50*time.Millisecond, "kubelet "+n.Name+" device plugin socket", func() (bool, error) {
		if done, _ := n.kubelet.exited(); done {
			return false, errExited
		}
		st, err := os.Stat(filepath.Join(DevicePluginDir, "kubelet.sock"))
		return err == nil && !st.ModTime().Before(n.kubelet.started), nil
	})
}

// ClusterKubeletConfig is the test bed's kubelet settings that every node
// shares (what a cluster publishes in kube-system/kubelet-config): webhook
// authentication and authorization, serving certificates from the CSR API,
// client certificate rotation, and what a kubelet without real containers
// on a shared machine needs. The client CA is left to the node.
func ClusterKubeletConfig() kubeletv1beta1.KubeletConfiguration {
	return kubeletv1beta1.KubeletConfiguration{
		TypeMeta: metav1.TypeMeta{APIVersion: kubeletv1beta1.SchemeGroupVersion.String(), Kind: "KubeletConfiguration"},

		Authentication: kubeletv1beta1.KubeletAuthentication{
			Webhook:   kubeletv1beta1.KubeletWebhookAuthentication{Enabled: ptr.To(true)},
			Anonymous: kubeletv1beta1.KubeletAnonymousAuthentication{Enabled: ptr.To(false)},
		},
		Authorization: kubeletv1beta1.KubeletAuthorization{Mode: kubeletv1beta1.KubeletAuthorizationModeWebhook},

		ServerTLSBootstrap: true,
		RotateCertificates: true,

		CgroupDriver:           "cgroupfs",
		FailCgroupV1:           ptr.To(false),
		FailSwapOn:             ptr.To(false),
		MakeIPTablesUtilChains: ptr.To(false),
		ResolverConfig:         ptr.To(""),
		// The fake runtime's image filesystem has no real capacity; only
		// memory pressure is worth watching on a shared test machine.
		EvictionHard: map[string]string{"memory.available": "1Mi"},
	}
}

// nodeKubeletConfig is a node's own settings (where it serves, its
// runtime, cgroup root and directories), for a configuration drop-in: only
// these keys, since every key of a drop-in wins over the --config file.
func nodeKubeletConfig(n *Node, healthzPort int, cgroupRoot string) map[string]any {
	return map[string]any{
		"apiVersion":               kubeletv1beta1.SchemeGroupVersion.String(),
		"kind":                     "KubeletConfiguration",
		"address":                  n.Address,
		"port":                     n.Port,
		"healthzBindAddress":       n.Address,
		"healthzPort":              healthzPort,
		"containerRuntimeEndpoint": n.endpoint,
		"cgroupRoot":               cgroupRoot,
		"staticPodPath":            filepath.Join(n.Dir, "manifests"),
		"podLogsDir":               filepath.Join(n.Dir, "pod-logs"),
	}
}

// withNodeKubeletConfig is cfg with a node's own settings.
func withNodeKubeletConfig(cfg kubeletv1beta1.KubeletConfiguration, node map[string]any) (kubeletv1beta1.KubeletConfiguration, error) {
	base, err := json.Marshal(cfg)
	if err != nil {
		return cfg, err
	}
	var merged map[string]any
	if err := json.Unmarshal(base, &merged); err != nil {
		return cfg, err
	}
	maps.Copy(merged, node)
	data, err := json.Marshal(merged)
	if err != nil {
		return cfg, err
	}
	var out kubeletv1beta1.KubeletConfiguration
	return out, json.Unmarshal(data, &out)
}

func writeJSON(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o644)
}

// Stop stops the kubelet and its runtime, unmounts anything mounted under the
// node's directory and removes its cgroups. It reports what it could not
// clean up. Calling it again does nothing.
func (n *Node) Stop() error {
	if n == nil || n.stopped {
		return nil
	}
	n.stopped = true
	var errs []error
	if n.kubelet != nil {
		errs = append(errs, stopAll([]*process{n.kubelet}, nil))
	}
	if n.cri != nil {
		n.cri.Stop()
	}
	if n.containerd != nil {
		errs = append(errs, n.containerd.stop())
		// A container the runtime could not remove: its processes are in
		// the node's cgroups, which this test made.
		errs = append(errs, killCgroupProcs(n.cgroups))
	}
	mounts, err := mountsUnder(n.Dir)
	errs = append(errs, err)
	for _, m := range mounts {
		if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil {
			errs = append(errs, fmt.Errorf("unmount %s: %w", m, err))
		}
	}
	if left, _ := mountsUnder(n.Dir); len(left) > 0 {
		errs = append(errs, fmt.Errorf("mounts left under %s: %v", n.Dir, left))
	}
	errs = append(errs, removeCgroups(n.cgroups))
	return errors.Join(errs...)
}

// SetNodeAddresses replaces a Node's status.addresses, as a cloud controller
// manager does.
func (cp *ControlPlane) SetNodeAddresses(ctx context.Context, name string, addrs []corev1.NodeAddress) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node, err := cp.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		node.Status.Addresses = addrs
		_, err = cp.Client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{})
		return err
	})
}

// kubeletCredentials writes the bootstrap kubeconfig, or the given client
// credentials and a kubeconfig referencing them, and returns the flags.
func (cp *ControlPlane) kubeletCredentials(n *Node, nc NodeConfig) ([]string, error) {
	if nc.ClientCertPEM == nil {
		bootstrap := filepath.Join(n.Dir, "bootstrap.kubeconfig")
		if err := writeKubeconfig(bootstrap, cp.URL, cp.CA.CertPEM, "kubelet-bootstrap",
			credentials{token: nc.BootstrapToken}); err != nil {
			return nil, err
		}
		return []string{"--bootstrap-kubeconfig=" + bootstrap}, nil
	}
	pair := filepath.Join(n.CertDir, "kubelet-client-current.pem")
	if err := os.WriteFile(pair, append(append([]byte{}, nc.ClientCertPEM...), nc.ClientKeyPEM...), 0o600); err != nil {
		return nil, err
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["mooring"] = &clientcmdapi.Cluster{Server: cp.URL, CertificateAuthorityData: cp.CA.CertPEM}
	cfg.AuthInfos["kubelet"] = &clientcmdapi.AuthInfo{ClientCertificate: pair, ClientKey: pair}
	cfg.Contexts["mooring"] = &clientcmdapi.Context{Cluster: "mooring", AuthInfo: "kubelet"}
	cfg.CurrentContext = "mooring"
	return nil, clientcmd.WriteToFile(*cfg, n.Kubeconfig)
}

// ImportImages imports image archives (the oci-archive tars of `make
// images`, or docker-save tars) into the node's containerd, where its pods
// find them without a pull (imagePullPolicy IfNotPresent). Only for nodes
// started with NodeConfig.Containerd.
func (n *Node) ImportImages(ctx context.Context, tars ...string) error {
	if n.containerd == nil {
		return fmt.Errorf("testbed: node %s runs no containerd (NodeConfig.Containerd)", n.Name)
	}
	return n.containerd.importImages(ctx, tars...)
}

// ContainerPID is the host PID of a running container's main process; id
// is the container's ID without its "containerd://" prefix (as a pod's
// status.containerStatuses[].containerID has it). Only for nodes started
// with NodeConfig.Containerd.
func (n *Node) ContainerPID(id string) (int, error) {
	if n.containerd == nil {
		return 0, fmt.Errorf("testbed: node %s runs no containerd (NodeConfig.Containerd)", n.Name)
	}
	return readPID(filepath.Join(n.containerd.taskDir(strings.TrimPrefix(id, "containerd://")), "init.pid"))
}
