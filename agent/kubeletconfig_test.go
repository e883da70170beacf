package agent

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stesting "k8s.io/client-go/testing"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/mooring-dev/mooring/cloud/nodeid"
)

// fakeCRI is a container runtime on a unix socket that answers Version and
// RuntimeConfig (the rest of the RuntimeService is Unimplemented).
type fakeCRI struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	// driver is the cgroup driver RuntimeConfig reports; noRuntimeConfig:
	// RuntimeConfig is Unimplemented; failures: calls still to fail.
	driver          runtimeapi.CgroupDriver
	noRuntimeConfig bool
	failures        atomic.Int32
	calls           atomic.Int32
	endpoint        string
}

func (f *fakeCRI) Version(context.Context, *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	return &runtimeapi.VersionResponse{Version: "0.1.0", RuntimeName: "fake", RuntimeVersion: "0.1.0", RuntimeApiVersion: "v1"}, nil
}

func (f *fakeCRI) RuntimeConfig(ctx context.Context, req *runtimeapi.RuntimeConfigRequest) (*runtimeapi.RuntimeConfigResponse, error) {
	f.calls.Add(1)
	if f.noRuntimeConfig {
		return f.UnimplementedRuntimeServiceServer.RuntimeConfig(ctx, req)
	}
	if f.failures.Load() > 0 {
		f.failures.Add(-1)
		return nil, status.Error(codes.Unavailable, "runtime is starting")
	}
	return &runtimeapi.RuntimeConfigResponse{Linux: &runtimeapi.LinuxRuntimeConfiguration{CgroupDriver: f.driver}}, nil
}

// startFakeCRI serves f on a unix socket in a temp dir until the test ends.
func startFakeCRI(t *testing.T, f *fakeCRI) *fakeCRI {
	t.Helper()
	dir, err := os.MkdirTemp("", "cri") // t.TempDir may exceed a socket path's 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "cri.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	runtimeapi.RegisterRuntimeServiceServer(srv, f)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { srv.Stop(); os.RemoveAll(dir) })
	f.endpoint = "unix://" + sock
	return f
}

// clusterKubeletConfig is a kubeadm-like kube-system/kubelet-config with
// settings mooring must keep and some it must override.
const clusterKubeletConfig = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  anonymous:
    enabled: false
  webhook:
    cacheTTL: 0s
    enabled: true
  x509:
    clientCAFile: /etc/kubernetes/pki/ca.crt
authorization:
  mode: Webhook
cgroupDriver: cgroupfs
clusterDNS:
- 10.96.0.10
clusterDomain: cluster.local
maxPods: 250
maxOpenFiles: 1000000
evictionHard:
  memory.available: 200Mi
rotateCertificates: false
serverTLSBootstrap: false
featureGates:
  SomeFutureGate: true
aFieldFromANewerKubelet: kept
`

func kubeletConfigMap(data string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kubelet-config"},
		Data:       map[string]string{"kubelet": data},
	}
}

// kcEnv is an env with a cluster kubelet-config and a fake runtime.
func newKCEnv(t *testing.T, cm *corev1.ConfigMap, cri *fakeCRI) *env {
	t.Helper()
	e := newEnv(t)
	if cm != nil {
		if _, err := e.client.CoreV1().ConfigMaps("kube-system").Create(context.Background(), cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	e.cfg.ContainerRuntimeEndpoint = startFakeCRI(t, cri).endpoint
	return e
}

// written decodes the kubelet config file strictly as the kubelet's typed
// configuration, and as a generic object.
func (e *env) written() (kubeletv1beta1.KubeletConfiguration, map[string]any, []byte) {
	e.t.Helper()
	data, err := os.ReadFile(e.cfg.KubeletConfigFile)
	if err != nil {
		e.t.Fatal(err)
	}
	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		e.t.Fatal(err)
	}
	var kc kubeletv1beta1.KubeletConfiguration
	if _, err := sigsjson.UnmarshalStrict(js, &kc); err != nil {
		e.t.Fatalf("written config: %v\n%s", err, data)
	}
	var obj map[string]any
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(js, &obj); err != nil {
		e.t.Fatal(err)
	}
	if kc.APIVersion != "kubelet.config.k8s.io/v1beta1" || kc.Kind != "KubeletConfiguration" {
		e.t.Fatalf("written config is a %s %s", kc.APIVersion, kc.Kind)
	}
	return kc, obj, data
}

// checkEnforced: what mooring needs, whatever the source.
func (e *env) checkEnforced(kc kubeletv1beta1.KubeletConfiguration, driver string) {
	e.t.Helper()
	if !kc.ServerTLSBootstrap || !kc.RotateCertificates {
		e.t.Errorf("serverTLSBootstrap %v, rotateCertificates %v; want both true", kc.ServerTLSBootstrap, kc.RotateCertificates)
	}
	if kc.Authentication.X509.ClientCAFile != e.cfg.CAFile {
		e.t.Errorf("clientCAFile %q, want the agent's CA %q", kc.Authentication.X509.ClientCAFile, e.cfg.CAFile)
	}
	if kc.CgroupDriver != driver {
		e.t.Errorf("cgroupDriver %q, want %q", kc.CgroupDriver, driver)
	}
	if kc.ContainerRuntimeEndpoint != e.cfg.ContainerRuntimeEndpoint {
		e.t.Errorf("containerRuntimeEndpoint %q, want %q", kc.ContainerRuntimeEndpoint, e.cfg.ContainerRuntimeEndpoint)
	}
	if st, err := os.Stat(e.cfg.KubeletConfigFile); err != nil {
		e.t.Error(err)
	} else if st.Mode().Perm() != 0o644 {
		e.t.Errorf("kubelet config mode %v, want 0644", st.Mode().Perm())
	}
}

// The cluster's ConfigMap: every field it sets is kept (even one this
// agent does not know), mooring's are enforced, the runtime's cgroup
// driver (systemd) replaces the cluster's (cgroupfs).
func TestKubeletConfigFromTheCluster(t *testing.T) {
	e := newKCEnv(t, kubeletConfigMap(clusterKubeletConfig), &fakeCRI{driver: runtimeapi.CgroupDriver_SYSTEMD})
	if err := e.run(); err != nil {
		t.Fatal(err)
	}
	e.checkJoined()
	kc, obj, data := e.written()
	e.checkEnforced(kc, "systemd")
	if len(kc.ClusterDNS) != 1 || kc.ClusterDNS[0] != "10.96.0.10" || kc.ClusterDomain != "cluster.local" || kc.MaxPods != 250 ||
		kc.MaxOpenFiles != 1000000 || kc.EvictionHard["memory.available"] != "200Mi" || !kc.FeatureGates["SomeFutureGate"] ||
		kc.Authorization.Mode != "Webhook" || kc.Authentication.Webhook.Enabled == nil || !*kc.Authentication.Webhook.Enabled {
		t.Errorf("the cluster's settings were not kept:\n%s", data)
	}
	if obj["aFieldFromANewerKubelet"] != "kept" {
		t.Errorf("a field the agent does not know was dropped:\n%s", data)
	}
	if !bytes.Contains(data, []byte("maxOpenFiles: 1000000\n")) {
		t.Errorf("integers must stay integers:\n%s", data)
	}
	if !bytes.HasPrefix(data, []byte("# Written by mooring-agent from the cluster's kube-system/kubelet-config")) {
		t.Errorf("header:\n%s", data)
	}
}

// No ConfigMap: the documented defaults, with mooring's fields; the
// runtime says cgroupfs.
func TestKubeletConfigDefaultsWithoutConfigMap(t *testing.T) {
	e := newKCEnv(t, nil, &fakeCRI{driver: runtimeapi.CgroupDriver_CGROUPFS})
	if err := e.run(); err != nil {
		t.Fatal(err)
	}
	e.checkJoined()
	kc, obj, data := e.written()
	e.checkEnforced(kc, "cgroupfs")
	if kc.Authentication.Anonymous.Enabled == nil || *kc.Authentication.Anonymous.Enabled ||
		kc.Authentication.Webhook.Enabled == nil || !*kc.Authentication.Webhook.Enabled || kc.Authorization.Mode != "Webhook" {
		t.Errorf("defaults must turn anonymous off and webhook authn/authz on:\n%s", data)
	}
	want := []string{"apiVersion", "authentication", "authorization", "cgroupDriver", "containerRuntimeEndpoint", "kind", "rotateCertificates", "serverTLSBootstrap"}
	if len(obj) != len(want) {
		t.Errorf("default keys %v, want %v", keys(obj), want)
	}
	if !bytes.HasPrefix(data, []byte("# Written by mooring-agent from mooring's defaults")) {
		t.Errorf("header:\n%s", data)
	}
}

func keys(m map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// A runtime without RuntimeConfig: the configured driver is kept (the
// cluster's, or the default systemd), and the agent does not wait.
func TestKubeletConfigRuntimeUnimplemented(t *testing.T) {
	for name, cm := range map[string]*corev1.ConfigMap{"cluster": kubeletConfigMap(clusterKubeletConfig), "defaults": nil} {
		t.Run(name, func(t *testing.T) {
			cri := &fakeCRI{noRuntimeConfig: true}
			e := newKCEnv(t, cm, cri)
			if err := e.run(); err != nil {
				t.Fatal(err)
			}
			kc, _, _ := e.written()
			want := map[string]string{"cluster": "cgroupfs", "defaults": "systemd"}[name]
			e.checkEnforced(kc, want)
			if n := cri.calls.Load(); n != 1 {
				t.Errorf("RuntimeConfig asked %d times, want once", n)
			}
		})
	}
}

// A runtime that fails (not Unimplemented) is asked again; the file waits
// for its answer.
func TestKubeletConfigRuntimeErrorRetried(t *testing.T) {
	cri := &fakeCRI{driver: runtimeapi.CgroupDriver_CGROUPFS}
	cri.failures.Store(3)
	e := newKCEnv(t, kubeletConfigMap(clusterKubeletConfig), cri)
	if err := e.run(); err != nil {
		t.Fatal(err)
	}
	kc, _, _ := e.written()
	e.checkEnforced(kc, "cgroupfs")
	if n := cri.calls.Load(); n != 4 {
		t.Errorf("RuntimeConfig asked %d times, want 4", n)
	}
	if !strings.Contains(strings.Join(e.notifier.Sent(), "\n"), "runtime is starting") {
		t.Errorf("no retry status: %q", e.notifier.Sent())
	}
}

// Garbage in the ConfigMap is refused with an error naming it, before the
// kubelet starts; no file is written.
func TestKubeletConfigMalformedRefused(t *testing.T) {
	cases := map[string]struct{ data, want string }{
		"not yaml":       {"a: [", "not valid YAML"},
		"scalar":         {"hello", "want a KubeletConfiguration object"},
		"no apiVersion":  {"kind: KubeletConfiguration\n", "want apiVersion kubelet.config.k8s.io/v1beta1"},
		"other kind":     {"apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeProxyConfiguration\n", `kind "KubeProxyConfiguration"`},
		"old version":    {"apiVersion: kubelet.config.k8s.io/v1alpha1\nkind: KubeletConfiguration\n", `"kubelet.config.k8s.io/v1alpha1"`},
		"wrong type":     {"apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmaxPods: many\n", "not a valid KubeletConfiguration"},
		"duplicate keys": {"apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmaxPods: 1\nmaxPods: 2\n", "not valid YAML"},
		"no kubelet key": {"", `has no key "kubelet"`},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			cm := kubeletConfigMap(c.data)
			if name == "no kubelet key" {
				cm.Data = map[string]string{"other": "x"}
			}
			e := newKCEnv(t, cm, &fakeCRI{driver: runtimeapi.CgroupDriver_SYSTEMD})
			err := e.run()
			if err == nil || !errors.Is(err, errMalformed) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "kube-system/kubelet-config") {
				t.Fatalf("err = %v, want a refusal mentioning %q", err, c.want)
			}
			if _, err := os.Stat(e.cfg.KubeletConfigFile); !os.IsNotExist(err) {
				t.Fatalf("a kubelet config was written: %v", err)
			}
			if len(e.units.StartedUnits()) != 0 {
				t.Fatal("the kubelet was started with a refused configuration")
			}
		})
	}
}

// Forbidden (no RBAC yet) or an apiserver error is retried, never replaced
// by defaults: nothing is written until the read succeeds.
func TestKubeletConfigReadErrorsRetried(t *testing.T) {
	gr := schema.GroupResource{Resource: "configmaps"}
	for name, fail := range map[string]error{
		"forbidden":   apierrors.NewForbidden(gr, "kubelet-config", errors.New(`User "system:node:node-1" cannot get resource "configmaps"`)),
		"unavailable": apierrors.NewServiceUnavailable("etcd is down"),
	} {
		t.Run(name, func(t *testing.T) {
			e := newKCEnv(t, kubeletConfigMap(clusterKubeletConfig), &fakeCRI{driver: runtimeapi.CgroupDriver_SYSTEMD})
			var fails atomic.Int32
			fails.Store(1 << 30)
			e.client.PrependReactor("get", "configmaps", func(k8stesting.Action) (bool, runtime.Object, error) {
				if fails.Load() > 0 {
					fails.Add(-1)
					return true, nil, fail
				}
				return false, nil, nil
			})
			// While it fails: the agent keeps trying, writes nothing and
			// does not start the kubelet.
			a := e.agent()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			err := a.Run(ctx)
			if err == nil || !strings.Contains(err.Error(), "kubelet configuration") {
				t.Fatalf("err = %v", err)
			}
			if _, err := os.Stat(e.cfg.KubeletConfigFile); !os.IsNotExist(err) {
				t.Fatalf("a kubelet config was written while the read failed: %v", err)
			}
			if len(e.units.StartedUnits()) != 0 {
				t.Fatal("the kubelet was started without its configuration")
			}
			if !strings.Contains(strings.Join(e.notifier.Sent(), "\n"), "kubelet configuration failed, retrying") {
				t.Errorf("no retry status: %q", e.notifier.Sent())
			}
			// Once it passes, the cluster's config (not the defaults) is written.
			fails.Store(3)
			if err := e.run(); err != nil {
				t.Fatal(err)
			}
			kc, _, _ := e.written()
			e.checkEnforced(kc, "systemd")
			if kc.MaxPods != 250 {
				t.Fatalf("maxPods %d: the defaults replaced the cluster's config", kc.MaxPods)
			}
		})
	}
}

// The agent reads the ConfigMap with the kubelet's new credentials, not the
// bootstrap token's.
func TestKubeletConfigReadWithTheNodeCredentials(t *testing.T) {
	e := newKCEnv(t, kubeletConfigMap(clusterKubeletConfig), &fakeCRI{driver: runtimeapi.CgroupDriver_SYSTEMD})
	a := e.agent()
	var asked []string
	next := a.NewNodeClient
	a.NewNodeClient = func(kubeconfig string) (Client, error) {
		asked = append(asked, kubeconfig)
		if _, err := os.Stat(filepath.Join(e.cfg.CertDir, "kubelet-client-current.pem")); err != nil {
			t.Errorf("node client made before the credentials are in place: %v", err)
		}
		return next(kubeconfig)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if len(asked) != 1 || asked[0] != e.cfg.Kubeconfig {
		t.Fatalf("node client for %v, want the agent's kubeconfig %s", asked, e.cfg.Kubeconfig)
	}
}

// Re-runs converge: the same input gives a byte-identical file; a changed
// ConfigMap is picked up on the next run.
func TestKubeletConfigIdempotent(t *testing.T) {
	e := newKCEnv(t, kubeletConfigMap(clusterKubeletConfig), &fakeCRI{driver: runtimeapi.CgroupDriver_SYSTEMD})
	if err := e.run(); err != nil {
		t.Fatal(err)
	}
	_, _, first := e.written()
	for range 3 {
		if err := e.run(); err != nil {
			t.Fatal(err)
		}
		if _, _, again := e.written(); !bytes.Equal(first, again) {
			t.Fatalf("a re-run changed the file:\n%s\n---\n%s", first, again)
		}
	}
	cm := kubeletConfigMap(strings.Replace(clusterKubeletConfig, "maxPods: 250", "maxPods: 110", 1))
	if _, err := e.client.CoreV1().ConfigMaps("kube-system").Update(context.Background(), cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := e.run(); err != nil {
		t.Fatal(err)
	}
	if kc, _, _ := e.written(); kc.MaxPods != 110 {
		t.Fatalf("maxPods %d after the ConfigMap changed, want 110", kc.MaxPods)
	}
	// No leftovers of the atomic writes.
	entries, _ := os.ReadDir(filepath.Dir(e.cfg.KubeletConfigFile))
	for _, en := range entries {
		if strings.Contains(en.Name(), ".tmp-") {
			t.Errorf("temp file left: %s", en.Name())
		}
	}
}

// With caCertHash the discovered CA is written next to the kubeconfig and
// is the kubelet's client CA.
func TestKubeletConfigDiscoveredCAFile(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{Kubeconfig: filepath.Join(dir, "kubelet.conf")}
	ca := []byte("-----BEGIN CERTIFICATE-----\nMA==\n-----END CERTIFICATE-----\n")
	for range 2 {
		path, err := clientCAFile(cfg, ca)
		if err != nil {
			t.Fatal(err)
		}
		if path != filepath.Join(dir, "mooring-cluster-ca.crt") {
			t.Fatalf("CA file %s", path)
		}
		got, err := os.ReadFile(path)
		if err != nil || !bytes.Equal(got, ca) {
			t.Fatalf("CA file holds %q, %v", got, err)
		}
	}
}

// The env file names the node: --hostname-override is the cloud's node
// name, and --node-ip stays only for a local address.
func TestKubeletEnvNamesTheNode(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kubelet.env")
	inst := nodeid.Instance{ID: "i-1", NodeName: "node-1", ProviderID: "local://i-1", InternalIP: "127.0.0.1"}
	for local, want := range map[bool]string{
		true:  `KUBELET_MOORING_ARGS="--provider-id=local://i-1 --hostname-override=node-1 --node-ip=127.0.0.1"`,
		false: `KUBELET_MOORING_ARGS="--provider-id=local://i-1 --hostname-override=node-1"`,
	} {
		if err := writeKubeletEnv(path, inst, func(string) bool { return local }); err != nil {
			t.Fatal(err)
		}
		data, _ := os.ReadFile(path)
		if !strings.Contains(string(data), want+"\n") {
			t.Errorf("local=%v: env file %q, want %q", local, data, want)
		}
	}
}

// Config: the kubelet config file's default, an absolute path required,
// and the runtime endpoint must be a unix socket.
func TestKubeletConfigFields(t *testing.T) {
	c := Config{}
	c.SetDefaults()
	if c.KubeletConfigFile != "/var/lib/kubelet/config.yaml" {
		t.Fatalf("default kubeletConfigFile %q", c.KubeletConfigFile)
	}
	path := filepath.Join(t.TempDir(), "agent.yaml")
	base := "apiServer: https://a\ncaFile: /ca\nbootstrapTokenFile: /t\ncloud: local\nmetadataURL: http://x\n"
	for text, want := range map[string]string{
		base + "kubeletConfigFile: relative.yaml\n":                 "kubeletConfigFile",
		base + "containerRuntimeEndpoint: tcp://127.0.0.1:1\n":      "containerRuntimeEndpoint",
		base + "containerRuntimeEndpoint: unix://relative.sock\n":   "containerRuntimeEndpoint",
		base + "containerRuntimeEndpoint: unix:///run/x/cri.sock\n": "",
	} {
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := LoadConfig(path)
		if want == "" && err != nil || want != "" && (err == nil || !strings.Contains(err.Error(), want)) {
			t.Errorf("%q: err = %v, want %q", text, err, want)
		}
	}
}
