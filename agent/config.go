package agent

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/mooring-dev/mooring/cloud/nodeid"
	"github.com/mooring-dev/mooring/cloud/tpm/node"
)

// DefaultConfigPath is where cloud-init writes the agent's config.
const DefaultConfigPath = "/etc/mooring/agent.yaml"

// Config is /etc/mooring/agent.yaml. docs/join.md documents every field.
type Config struct {
	// APIServer is the cluster's kube-apiserver URL (https).
	APIServer string `json:"apiServer"`
	// CAFile is the cluster CA bundle. Either it or CACertHash is required.
	CAFile string `json:"caFile,omitempty"`
	// CACertHash pins the cluster CA ("sha256:<hex of the CA's
	// SubjectPublicKeyInfo>", as kubeadm prints it); the CA is then read
	// from the kube-public/cluster-info ConfigMap and checked against it.
	CACertHash string `json:"caCertHash,omitempty"`
	// BootstrapTokenFile holds a bootstrap token ("id.secret") that can only
	// create CSRs.
	BootstrapTokenFile string `json:"bootstrapTokenFile"`
	// Cloud is the backend whose metadata service attests the machine (a
	// name nodeid.Backends lists).
	Cloud string `json:"cloud"`
	// MetadataURL overrides the instance metadata service's address (the
	// local cloud, which has no well-known one, needs the instance's
	// metadataURL).
	MetadataURL string `json:"metadataURL,omitempty"`
	// NodeNamePolicy derives the node name; each backend has its own
	// policies and default, and the CCM and the approver must use the same.
	NodeNamePolicy string `json:"nodeNamePolicy,omitempty"`
	// CloudSettings are the backend's own settings (docs/<cloud>.md).
	CloudSettings map[string]string `json:"cloudSettings,omitempty"`
	// JoinTicketFile holds a join ticket (docs/tickets.md), as
	// `mooring-csr-approver ticket issue` prints it: the join presents it
	// instead of evidence signed by the cloud, with any cloud.
	JoinTicketFile string `json:"joinTicketFile,omitempty"`
	// TPM says whether the join adds a quote by the machine's TPM after
	// the cloud's evidence (docs/attestation.md, TPM-rooted identity):
	// "auto" (the default) when the backend names a TPM key
	// (nodeid.TPMKeyer) and TPMDevice exists, else the cloud's evidence
	// alone; "required": the agent stops with an error when it cannot;
	// "off": never.
	TPM string `json:"tpm,omitempty"`
	// TPMDevice is the TPM the agent uses: a character device (default
	// /dev/tpmrm0, the kernel's resource manager) or a TPM simulator's
	// Unix socket.
	TPMDevice string `json:"tpmDevice,omitempty"`
	// CertDir holds the kubelet's certificates (kubelet --cert-dir).
	CertDir string `json:"certDir,omitempty"`
	// Kubeconfig is the kubelet's kubeconfig (kubelet --kubeconfig).
	Kubeconfig string `json:"kubeconfig,omitempty"`
	// KubeletEnvFile receives the kubelet flags the agent owns.
	KubeletEnvFile string `json:"kubeletEnvFile,omitempty"`
	// KubeletConfigFile receives the kubelet's configuration (kubelet
	// --config): the cluster's kube-system/kubelet-config, or mooring's
	// defaults, with what mooring needs enforced (docs/join.md).
	KubeletConfigFile string `json:"kubeletConfigFile,omitempty"`
	// ContainerRuntimeEndpoint is the CRI socket (unix://) the agent asks
	// for the cgroup driver and writes into the kubelet's configuration;
	// empty: the cluster's containerRuntimeEndpoint, else containerd's.
	ContainerRuntimeEndpoint string `json:"containerRuntimeEndpoint,omitempty"`
	// KubeletUnit is started once credentials are in place (default
	// kubelet.service; mooring-agent --no-start-kubelet starts none).
	KubeletUnit string `json:"kubeletUnit,omitempty"`
	// WaitTimeout bounds one watch of the CSR; an undecided CSR is then
	// looked at, reported in STATUS and watched again (the agent waits for
	// a decision for as long as it runs).
	WaitTimeout metav1.Duration `json:"waitTimeout,omitempty"`
}

// Defaults.
const (
	DefaultCertDir        = "/var/lib/kubelet/pki"
	DefaultKubeconfig     = "/etc/kubernetes/kubelet.conf"
	DefaultKubeletEnvFile = "/etc/mooring/kubelet.env"
	// DefaultKubeletConfigFile is where the kubelet drop-in's --config
	// points.
	DefaultKubeletConfigFile = "/var/lib/kubelet/config.yaml"
	DefaultKubeletUnit       = "kubelet.service"
	DefaultWaitTimeout       = 10 * time.Minute
	DefaultTPM               = TPMAuto
	DefaultTPMDevice         = node.DefaultDevice
)

// The values of the tpm setting.
const (
	TPMAuto     = "auto"
	TPMOff      = "off"
	TPMRequired = "required"
)

var caHashRE = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// ConfigError is a problem with the agent's configuration or with a file
// it names (the config itself, the bootstrap token, the CA, the join
// ticket), or a config the cloud cannot serve (a cloud that signs nothing,
// without a join ticket). Retrying cannot help: the agent stops at once
// (mooring-agent exits 2, and its unit does not restart) instead of
// retrying. The message names the field or the file.
type ConfigError struct{ Err error }

func (e *ConfigError) Error() string { return e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

// configErrorf is a ConfigError with a formatted message.
func configErrorf(format string, args ...any) error {
	return &ConfigError{fmt.Errorf(format, args...)}
}

// LoadConfig reads and checks the config; errors name the field, and are
// ConfigErrors.
func LoadConfig(path string) (Config, error) {
	var c Config
	data, err := os.ReadFile(path)
	if err != nil {
		return c, configErrorf("agent config: %w", err)
	}
	if err := yaml.UnmarshalStrict(data, &c); err != nil {
		return c, configErrorf("agent config %s: %w", path, err)
	}
	c.SetDefaults()
	if err := c.Validate(); err != nil {
		return c, configErrorf("agent config %s: %w", path, err)
	}
	return c, nil
}

// SetDefaults fills unset fields.
func (c *Config) SetDefaults() {
	if c.CertDir == "" {
		c.CertDir = DefaultCertDir
	}
	if c.Kubeconfig == "" {
		c.Kubeconfig = DefaultKubeconfig
	}
	if c.KubeletEnvFile == "" {
		c.KubeletEnvFile = DefaultKubeletEnvFile
	}
	if c.KubeletConfigFile == "" {
		c.KubeletConfigFile = DefaultKubeletConfigFile
	}
	if c.KubeletUnit == "" {
		c.KubeletUnit = DefaultKubeletUnit
	}
	if c.WaitTimeout.Duration == 0 {
		c.WaitTimeout.Duration = DefaultWaitTimeout
	}
	if c.TPM == "" {
		c.TPM = DefaultTPM
	}
	if c.TPMDevice == "" {
		c.TPMDevice = DefaultTPMDevice
	}
}

// NodeConfig is the backend's part of the config.
func (c *Config) NodeConfig() nodeid.Config {
	return nodeid.Config{MetadataURL: c.MetadataURL, NodeNamePolicy: c.NodeNamePolicy, Settings: c.CloudSettings}
}

// Validate reports every problem, each naming its field.
func (c *Config) Validate() error {
	var errs []error
	if u, err := url.Parse(c.APIServer); err != nil || u.Scheme != "https" || u.Host == "" {
		errs = append(errs, fmt.Errorf("apiServer: want an https:// URL, got %q", c.APIServer))
	}
	switch {
	case c.CAFile == "" && c.CACertHash == "":
		errs = append(errs, errors.New("caFile or caCertHash: one is required"))
	case c.CACertHash != "" && !caHashRE.MatchString(c.CACertHash):
		errs = append(errs, fmt.Errorf("caCertHash: want sha256:<64 hex digits>, got %q", c.CACertHash))
	}
	if c.BootstrapTokenFile == "" {
		errs = append(errs, errors.New("bootstrapTokenFile: required"))
	}
	urlOK := c.MetadataURL == ""
	if u, err := url.Parse(c.MetadataURL); !urlOK && err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" {
		urlOK = true
	}
	if !urlOK {
		errs = append(errs, fmt.Errorf("metadataURL: want an http(s) URL, got %q", c.MetadataURL))
	}
	switch {
	case !nodeid.Known(c.Cloud):
		errs = append(errs, fmt.Errorf("cloud: %q is not supported here (known: %v)", c.Cloud, nodeid.Backends()))
	case urlOK:
		// The backend judges its own part: building its node identity checks
		// the metadata URL it needs, the node name policy and its settings.
		if _, err := nodeid.New(c.Cloud, c.NodeConfig()); err != nil {
			errs = append(errs, fmt.Errorf("cloud %s: %w", c.Cloud, err))
		}
	}
	if c.JoinTicketFile != "" && !filepath.IsAbs(c.JoinTicketFile) {
		errs = append(errs, fmt.Errorf("joinTicketFile: want an absolute path, got %q", c.JoinTicketFile))
	}
	for field, p := range map[string]string{"certDir": c.CertDir, "kubeconfig": c.Kubeconfig, "kubeletEnvFile": c.KubeletEnvFile,
		"kubeletConfigFile": c.KubeletConfigFile} {
		if !filepath.IsAbs(p) {
			errs = append(errs, fmt.Errorf("%s: want an absolute path, got %q", field, p))
		}
	}
	if c.ContainerRuntimeEndpoint != "" && !isUnixEndpoint(c.ContainerRuntimeEndpoint) {
		errs = append(errs, fmt.Errorf("containerRuntimeEndpoint: want unix:///<absolute path>, got %q", c.ContainerRuntimeEndpoint))
	}
	switch c.TPM {
	case TPMAuto, TPMOff, TPMRequired:
	default:
		errs = append(errs, fmt.Errorf("tpm: want auto, off or required, got %q", c.TPM))
	}
	if !filepath.IsAbs(c.TPMDevice) {
		errs = append(errs, fmt.Errorf("tpmDevice: want an absolute path, got %q", c.TPMDevice))
	}
	if c.WaitTimeout.Duration < 0 {
		errs = append(errs, errors.New("waitTimeout: must not be negative"))
	}
	return errors.Join(errs...)
}
