package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	criclient "k8s.io/cri-client/pkg"
	"k8s.io/klog/v2"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/mooring-dev/mooring/internal/atomicfile"
)

// The cluster's kubelet settings, where kubeadm publishes them: the
// ConfigMap kube-system/kubelet-config, key "kubelet", readable by
// system:nodes (kubeadm's Role and RoleBinding kubeadm:kubelet-config,
// mooring's deploy/base/kubelet-config-rbac.yaml).
const (
	KubeletConfigMapNamespace = metav1.NamespaceSystem
	KubeletConfigMapName      = "kubelet-config"
	KubeletConfigMapKey       = "kubelet"
)

// DefaultContainerRuntimeEndpoint is the CRI socket asked for the cgroup
// driver when neither the agent's config nor the cluster's names one
// (containerd's).
const DefaultContainerRuntimeEndpoint = "unix:///run/containerd/containerd.sock"

// clusterCAFileName is the file, next to the kubeconfig, that receives a CA
// found by discovery (caCertHash), for the kubelet's clientCAFile.
const clusterCAFileName = "mooring-cluster-ca.crt"

// criTimeout bounds one conversation with the container runtime.
const criTimeout = 10 * time.Second

// defaultKubeletConfig is the kubelet's configuration when the cluster
// publishes none (docs/join.md lists it). The agent then enforces its own
// fields on it as on the cluster's.
func defaultKubeletConfig() map[string]any {
	return map[string]any{
		"apiVersion": kubeletv1beta1.SchemeGroupVersion.String(),
		"kind":       "KubeletConfiguration",
		"authentication": map[string]any{
			"anonymous": map[string]any{"enabled": false},
			"webhook":   map[string]any{"enabled": true},
			"x509":      map[string]any{},
		},
		"authorization": map[string]any{"mode": string(kubeletv1beta1.KubeletAuthorizationModeWebhook)},
		"cgroupDriver":  "systemd",
	}
}

// kubeletConfigInputs is what the kubelet's config is made of.
type kubeletConfigInputs struct {
	// ConfigMap is the cluster's "kubelet" key; nil: there is none.
	ConfigMap *string
	// RuntimeEndpoint, when set, is the agent's choice of CRI endpoint; it
	// wins over the cluster's.
	RuntimeEndpoint string
}

// parsedKubeletConfig is the cluster's (or the default) configuration as a
// JSON object, every field kept, with the endpoint of the runtime to ask.
type parsedKubeletConfig struct {
	obj      map[string]any
	endpoint string
}

// parseKubeletConfig checks the cluster's configuration and returns it as
// an object. It must be a kubelet.config.k8s.io/v1beta1
// KubeletConfiguration whose known fields have their types; fields this
// agent does not know are kept (a newer kubelet may) and logged, as the
// kubelet itself decodes leniently.
func parseKubeletConfig(in kubeletConfigInputs) (*parsedKubeletConfig, error) {
	where := KubeletConfigMapNamespace + "/" + KubeletConfigMapName + " key " + KubeletConfigMapKey
	var obj map[string]any
	if in.ConfigMap == nil {
		obj = defaultKubeletConfig()
	} else {
		js, err := yaml.YAMLToJSONStrict([]byte(*in.ConfigMap))
		if err != nil {
			return nil, fmt.Errorf("ConfigMap %s: not valid YAML: %w", where, err)
		}
		if !bytes.HasPrefix(bytes.TrimSpace(js), []byte("{")) {
			return nil, fmt.Errorf("ConfigMap %s: want a KubeletConfiguration object, got %.40q", where, *in.ConfigMap)
		}
		if err := sigsjson.UnmarshalCaseSensitivePreserveInts(js, &obj); err != nil {
			return nil, fmt.Errorf("ConfigMap %s: %w", where, err)
		}
		if obj == nil {
			return nil, fmt.Errorf("ConfigMap %s: want a KubeletConfiguration object, got null", where)
		}
		apiVersion, _ := obj["apiVersion"].(string)
		kind, _ := obj["kind"].(string)
		if apiVersion != kubeletv1beta1.SchemeGroupVersion.String() || kind != "KubeletConfiguration" {
			return nil, fmt.Errorf("ConfigMap %s: want apiVersion %s, kind KubeletConfiguration, got apiVersion %q, kind %q",
				where, kubeletv1beta1.SchemeGroupVersion, apiVersion, kind)
		}
		var typed kubeletv1beta1.KubeletConfiguration
		strictErrs, err := sigsjson.UnmarshalStrict(js, &typed, sigsjson.DisallowDuplicateFields, sigsjson.DisallowUnknownFields)
		if err != nil {
			return nil, fmt.Errorf("ConfigMap %s: not a valid KubeletConfiguration: %w", where, err)
		}
		if len(strictErrs) > 0 {
			klog.InfoS("The cluster's kubelet configuration has fields this agent does not know; keeping them for the kubelet",
				"configMap", KubeletConfigMapNamespace+"/"+KubeletConfigMapName, "fields", errors.Join(strictErrs...).Error())
		}
	}
	endpoint := in.RuntimeEndpoint
	if endpoint == "" {
		endpoint, _ = obj["containerRuntimeEndpoint"].(string)
	}
	if endpoint == "" {
		endpoint = DefaultContainerRuntimeEndpoint
	}
	obj["containerRuntimeEndpoint"] = endpoint
	return &parsedKubeletConfig{obj: obj, endpoint: endpoint}, nil
}

// render enforces what mooring needs and serializes the configuration:
// keys sorted, so the same input gives the same bytes. cgroupDriver is the
// runtime's, or "" to keep the configuration's.
func (p *parsedKubeletConfig) render(clientCAFile, cgroupDriver string, fromCluster bool) ([]byte, error) {
	obj := p.obj
	obj["serverTLSBootstrap"] = true
	obj["rotateCertificates"] = true
	authn := childObject(obj, "authentication")
	childObject(authn, "x509")["clientCAFile"] = clientCAFile
	if cgroupDriver != "" {
		obj["cgroupDriver"] = cgroupDriver
	}
	data, err := yaml.Marshal(obj)
	if err != nil {
		return nil, err
	}
	source := "mooring's defaults (the cluster has no " + KubeletConfigMapNamespace + "/" + KubeletConfigMapName + ")"
	if fromCluster {
		source = "the cluster's " + KubeletConfigMapNamespace + "/" + KubeletConfigMapName
	}
	header := "# Written by mooring-agent from " + source + "; do not edit.\n"
	return append([]byte(header), data...), nil
}

// childObject returns obj[key] as an object, making it when it is absent
// or null.
func childObject(obj map[string]any, key string) map[string]any {
	if m, ok := obj[key].(map[string]any); ok {
		return m
	}
	m := map[string]any{}
	obj[key] = m
	return m
}

// readKubeletConfigMap reads the cluster's kubelet configuration: the
// "kubelet" key, or nil when the ConfigMap does not exist. Any other error
// is returned (and retried by the caller), never replaced by defaults.
func readKubeletConfigMap(ctx context.Context, client Client) (*string, error) {
	cm, err := client.ConfigMaps(KubeletConfigMapNamespace).Get(ctx, KubeletConfigMapName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read ConfigMap %s/%s: %w", KubeletConfigMapNamespace, KubeletConfigMapName, err)
	}
	data, ok := cm.Data[KubeletConfigMapKey]
	if !ok {
		return nil, fmt.Errorf("ConfigMap %s/%s has no key %q: %w", KubeletConfigMapNamespace, KubeletConfigMapName, KubeletConfigMapKey, errMalformed)
	}
	return &data, nil
}

// errMalformed marks a cluster configuration the agent refuses; retrying
// does not help until an admin fixes it.
var errMalformed = errors.New("malformed kubelet configuration")

// errRuntimeUnimplemented: the runtime does not implement RuntimeConfig.
var errRuntimeUnimplemented = errors.New("the container runtime does not implement RuntimeConfig")

// runtimeCgroupDriver asks the container runtime at endpoint for its cgroup
// driver over CRI: "systemd" or "cgroupfs", "" when it gives no Linux
// configuration, errRuntimeUnimplemented when it does not implement
// RuntimeConfig.
func runtimeCgroupDriver(ctx context.Context, endpoint string) (string, error) {
	rs, err := criclient.NewRemoteRuntimeService(ctx, endpoint, criTimeout, nil, false)
	if err != nil {
		return "", fmt.Errorf("container runtime %s: %w", endpoint, err)
	}
	defer func() { _ = rs.Close(ctx) }()
	resp, err := rs.RuntimeConfig(ctx)
	if status.Code(err) == codes.Unimplemented {
		return "", errRuntimeUnimplemented
	}
	if err != nil {
		return "", fmt.Errorf("container runtime %s: RuntimeConfig: %w", endpoint, err)
	}
	if resp.GetLinux() == nil {
		return "", nil
	}
	switch d := resp.GetLinux().GetCgroupDriver(); d {
	case runtimeapi.CgroupDriver_SYSTEMD:
		return "systemd", nil
	case runtimeapi.CgroupDriver_CGROUPFS:
		return "cgroupfs", nil
	default:
		return "", fmt.Errorf("container runtime %s: unknown cgroup driver %v", endpoint, d)
	}
}

// newNodeClient is a client with the kubelet's own credentials: the
// kubeconfig the agent wrote.
func newNodeClient(kubeconfig string) (Client, error) {
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
	}
	rc.UserAgent = "mooring-agent"
	rc.Timeout = 30 * time.Second
	return NewClientForConfig(rc)
}

// clientCAFile returns the cluster CA's file for the kubelet: caFile, or
// the discovered CA written next to the kubeconfig.
func clientCAFile(cfg Config, ca []byte) (string, error) {
	if cfg.CAFile != "" {
		return filepath.Abs(cfg.CAFile)
	}
	path := filepath.Join(filepath.Dir(cfg.Kubeconfig), clusterCAFileName)
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, ca) {
		return path, nil
	}
	return path, atomicfile.Write(path, ca, 0o644)
}

// writeKubeletConfig writes the kubelet's configuration file: the
// cluster's kube-system/kubelet-config (read with the node's credentials)
// or the defaults, with serverTLSBootstrap, rotateCertificates, the
// cluster CA as client CA and the runtime's cgroup driver enforced.
func (a *Agent) writeKubeletConfig(ctx context.Context, ca []byte) error {
	cfg := a.Config
	caFile, err := clientCAFile(cfg, ca)
	if err != nil {
		return err
	}
	client, err := a.NewNodeClient(cfg.Kubeconfig)
	if err != nil {
		return err
	}
	a.status("reading the cluster's kubelet configuration (%s/%s)", KubeletConfigMapNamespace, KubeletConfigMapName)
	var data *string
	err = a.retry(ctx, "kubelet configuration", func() (err error) {
		data, err = readKubeletConfigMap(ctx, client)
		if errors.Is(err, errMalformed) {
			return &permanentError{err}
		}
		return err
	})
	if err != nil {
		return err
	}
	if data == nil {
		klog.InfoS("The cluster publishes no kubelet configuration; using mooring's defaults",
			"configMap", KubeletConfigMapNamespace+"/"+KubeletConfigMapName)
	}
	parsed, err := parseKubeletConfig(kubeletConfigInputs{ConfigMap: data, RuntimeEndpoint: cfg.ContainerRuntimeEndpoint})
	if err != nil {
		return fmt.Errorf("%w: %w", errMalformed, err)
	}
	a.status("asking the container runtime at %s for its cgroup driver", parsed.endpoint)
	var driver string
	err = a.retry(ctx, "container runtime "+parsed.endpoint, func() (err error) {
		driver, err = runtimeCgroupDriver(ctx, parsed.endpoint)
		if errors.Is(err, errRuntimeUnimplemented) {
			return &permanentError{err}
		}
		return err
	})
	switch {
	case errors.Is(err, errRuntimeUnimplemented):
		klog.InfoS("The container runtime does not report its cgroup driver (no RuntimeConfig); keeping the configured one",
			"endpoint", parsed.endpoint, "cgroupDriver", parsed.obj["cgroupDriver"])
	case err != nil:
		return err
	case driver == "":
		klog.InfoS("The container runtime reports no Linux configuration; keeping the configured cgroup driver",
			"endpoint", parsed.endpoint, "cgroupDriver", parsed.obj["cgroupDriver"])
	default:
		klog.InfoS("Cgroup driver from the container runtime", "endpoint", parsed.endpoint, "cgroupDriver", driver)
	}
	out, err := parsed.render(caFile, driver, data != nil)
	if err != nil {
		return err
	}
	if err := a.retry(ctx, "write "+cfg.KubeletConfigFile, func() error { return atomicfile.Write(cfg.KubeletConfigFile, out, 0o644) }); err != nil {
		return err
	}
	klog.InfoS("Kubelet configuration written", "file", cfg.KubeletConfigFile, "fromCluster", data != nil)
	return nil
}

// permanentError ends a retry: retrying cannot help.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// isUnixEndpoint reports whether endpoint is a unix:// socket with an
// absolute path.
func isUnixEndpoint(endpoint string) bool {
	p, ok := strings.CutPrefix(endpoint, "unix://")
	return ok && filepath.IsAbs(p)
}
