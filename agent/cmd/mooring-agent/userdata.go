package main

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/spf13/cobra"
	tokenutil "k8s.io/cluster-bootstrap/token/util"

	"github.com/mooring-dev/mooring/agent"
	"github.com/mooring-dev/mooring/agent/cloudinit"
	"github.com/mooring-dev/mooring/cloud/nodeid"
	"github.com/mooring-dev/mooring/internal/ticket"
)

type userDataOptions struct {
	cloud              string
	apiServer          string
	caCertHash         string
	caFile             string
	bootstrapToken     string
	bootstrapTokenFile string
	agentURL           string
	agentSHA256        string
	metadataURL        string
	nodeNamePolicy     string
	cloudSettings      []string
	packages           []string
	output             string
	joinTicketFile     string
	ticketName         string
	ticketCluster      string
	ticketKeysDir      string
	ticketLifetime     time.Duration
	guestInfo          bool
	tpm, tpmDevice     string
	// The Kubernetes package repository (--kubernetes-version).
	kubernetesVersion, kubernetesRepo, kubernetesRepoKey string
	// release takes the agent's URL and SHA-256 from a release (release.go).
	release releaseOptions
	changed func(flag string) bool
}

// userDataNow is when user-data judges a repository key's expiry: now
// (the tests fix it before the built-in key's expiry).
var userDataNow = time.Now

var (
	caHashRE = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)
	digestRE = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

func newUserDataCommand() *cobra.Command {
	o := userDataOptions{}
	backends := strings.Join(nodeid.Backends(), ", ")
	cmd := &cobra.Command{
		Use:   "user-data --cloud=NAME --api-server=URL (--ca-cert-hash=HASH | --ca-file=FILE) (--bootstrap-token=TOKEN | --bootstrap-token-file=FILE) (--version=vX.Y.Z | --agent-url=URL --agent-sha256=HEX) [flags]",
		Short: "Render the cloud-init user-data that installs mooring-agent and joins a machine",
		Long: `user-data prints the #cloud-config user-data that joins a new machine with
mooring: cloud-init writes the agent's config (/etc/mooring/agent.yaml), the
bootstrap token, the cluster CA (with --ca-file) and the unit files,
downloads the agent from --agent-url and installs it only if its SHA-256 is
--agent-sha256, then enables mooring-agent.service without waiting for the
join. Create the machines with it as their user-data.

--version=vX.Y.Z takes both from that release: the agent's binary for
--arch (mooring-agent_<version>_linux_<arch>) and its line in the release's
SHA256SUMS, read from <release-url>/<version>/SHA256SUMS. An air-gapped
operator gives a directory holding the downloaded release as --release-url,
and as --agent-base-url the http(s) URL the machines download its files
from. Without --version, give --agent-url and --agent-sha256 (a build of
your own).

Clouds (--cloud): ` + backends + `. On AWS nothing else is needed about the
cloud; the local cloud needs the instance's --metadata-url.

With --kubernetes-version=vX.Y.Z (Debian and Ubuntu images: apt), cloud-init
first does what kubeadm's install guide does: it adds the Kubernetes package
repository of that minor release (pkgs.k8s.io; --kubernetes-repo for a
mirror), trusting only the repository's signing key written by the
user-data (pkgs.k8s.io's key is built in; --kubernetes-repo-key for
another), installs the kubelet of exactly that version and holds it
(apt-mark hold), installs containerd from the image's repositories and
configures it with the systemd cgroup driver (` + cloudinit.ContainerdConfigPath + `),
then restarts containerd before the agent starts. The boot fails (cloud-init
status: error, the agent not enabled) when the kubelet is not that version.

Or, with --install-packages, cloud-init installs packages with the image's
package manager from its own configured repositories: by default ` + strings.Join(cloudinit.DefaultPackages, " and ") + `
(these must exist there; neither Debian 12's archive nor Ubuntu 24.04's has
a kubelet), or the list given as --install-packages=a,b.

On clouds that sign no instance identity (docs/tickets.md) the machine joins
with a join ticket: give one issued before (--join-ticket-file, from
"mooring-csr-approver ticket issue"), or have one issued here for the
instance's name (--ticket-name, --ticket-cluster and --ticket-keys-dir, a
directory holding the ticket keys Secret's keys.json and signing-kid). Create
the instance with that name within the ticket's lifetime.

On vSphere (--cloud=vsphere), --guestinfo prints the VM's extra config
keys for cloud-init's VMware datasource instead, as key=value lines:
guestinfo.userdata (the user-data, gzip+base64) and guestinfo.metadata
(the VM's name as its host name, and the user-data blanked once read).
The VM's name is --cloud-setting vmName=NAME or the ticket's.

The output holds the bootstrap token (and the ticket): --output writes it
with mode 0600.
Bad flags exit 2, naming the flag. See docs/join.md.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageError(cmd, fmt.Errorf("unexpected argument %q", args[0]))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.changed = cmd.Flags().Changed
			p, err := o.params()
			if err != nil {
				return usageError(cmd, err)
			}
			if o.release.version != "" {
				if p.AgentURL, p.AgentSHA256, err = o.release.resolve(cmd.Context()); err != nil {
					return fmt.Errorf("--version %s: %w", o.release.version, err)
				}
			}
			out, err := cloudinit.Render(p)
			if err != nil {
				return usageError(cmd, err)
			}
			if o.guestInfo {
				if out, err = cloudinit.GuestInfo(out, o.vmName(p)); err != nil {
					return usageError(cmd, fmt.Errorf("--guestinfo: the VM's name: %w", err))
				}
			}
			if o.output == "" || o.output == "-" {
				_, err = cmd.OutOrStdout().Write(out)
				return err
			}
			return writeFile(o.output, out)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&o.cloud, "cloud", "", "the machine's cloud backend (required; one of: "+backends+")")
	fs.StringVar(&o.apiServer, "api-server", "", "https:// URL of the cluster's kube-apiserver (required)")
	fs.StringVar(&o.caCertHash, "ca-cert-hash", "", "pin of the cluster CA, sha256:<hex> as kubeadm prints it; the agent then discovers the CA from kube-public/cluster-info (this or --ca-file)")
	fs.StringVar(&o.caFile, "ca-file", "", "PEM file of the cluster CA, written to the machine (this or --ca-cert-hash)")
	fs.StringVar(&o.bootstrapToken, "bootstrap-token", "", "bootstrap token id.secret (this or --bootstrap-token-file, which keeps it out of the process list)")
	fs.StringVar(&o.bootstrapTokenFile, "bootstrap-token-file", "", "file holding the bootstrap token")
	fs.StringVar(&o.agentURL, "agent-url", "", "http(s) URL of the mooring-agent binary for the machine (a build of your own; or use --version)")
	fs.StringVar(&o.agentSHA256, "agent-sha256", "", "SHA-256 of that binary, 64 hex digits; the machine refuses a download that differs (with --agent-url)")
	fs.StringVar(&o.release.version, "version", "", "take the agent (its URL and SHA-256) from this mooring release, vX.Y.Z, instead of --agent-url and --agent-sha256")
	fs.StringVar(&o.release.releaseURL, "release-url", DefaultReleaseURL, "with --version: where releases are, <release-url>/<version>/SHA256SUMS; or a directory holding the downloaded release (then give --agent-base-url)")
	fs.StringVar(&o.release.arch, "arch", "amd64", "with --version: the machine's architecture, amd64 or arm64")
	fs.StringVar(&o.release.agentBaseURL, "agent-base-url", "", "with --version and a directory as --release-url: the http(s) URL the machines download the release's files from")
	fs.StringVar(&o.metadataURL, "metadata-url", "", "address of the instance metadata service (default: the cloud's own; required by the local cloud)")
	fs.StringVar(&o.nodeNamePolicy, "node-name-policy", "", "how the node is named (default: the cloud's); must match the approver's and the CCM's")
	fs.StringArrayVar(&o.cloudSettings, "cloud-setting", nil, "a setting of the cloud backend, key=value (repeatable; docs/<cloud>.md lists them)")
	fs.StringSliceVar(&o.packages, "install-packages", nil, "install these packages with cloud-init first; without a value: "+strings.Join(cloudinit.DefaultPackages, ","))
	fs.Lookup("install-packages").NoOptDefVal = strings.Join(cloudinit.DefaultPackages, ",")
	fs.StringVar(&o.kubernetesVersion, "kubernetes-version", "", "install the kubelet of this Kubernetes version, vX.Y.Z (the cluster's), from the Kubernetes package repository, hold it, and containerd with the systemd cgroup driver (apt images; not with --install-packages)")
	fs.StringVar(&o.kubernetesRepo, "kubernetes-repo", "", "with --kubernetes-version: the apt repository, a mirror of pkgs.k8s.io's layout (default: https://pkgs.k8s.io/core:/stable:/vX.Y/deb/ of the version)")
	fs.StringVar(&o.kubernetesRepoKey, "kubernetes-repo-key", "", "with --kubernetes-version: file of the ASCII-armored OpenPGP public key that signs the repository (default: pkgs.k8s.io's key, built in, fingerprint "+cloudinit.PkgsK8sIOFingerprint+")")
	fs.StringVar(&o.joinTicketFile, "join-ticket-file", "", "file holding the instance's join ticket, issued by 'mooring-csr-approver ticket issue' (or use --ticket-name)")
	fs.StringVar(&o.ticketName, "ticket-name", "", "issue a join ticket for the instance of this name, with the keys of --ticket-keys-dir")
	fs.StringVar(&o.ticketCluster, "ticket-cluster", "", "the cluster the ticket is for: the approver's cluster tag (with --ticket-name)")
	fs.StringVar(&o.ticketKeysDir, "ticket-keys-dir", "", "directory holding the join ticket keys (keys.json and signing-kid, as the keys Secret holds them; with --ticket-name)")
	fs.DurationVar(&o.ticketLifetime, "ticket-lifetime", ticket.DefaultLifetime, "how long the issued ticket is valid: the instance must be created within it (1m to 24h)")
	fs.StringVar(&o.tpm, "tpm", agent.DefaultTPM, "prove the join with the machine's TPM too: auto (when the cloud's backend names a TPM key and the device exists), required (the agent stops without one), off (docs/attestation.md)")
	fs.StringVar(&o.tpmDevice, "tpm-device", agent.DefaultTPMDevice, "the machine's TPM: a character device, or a TPM simulator's Unix socket (tests)")
	fs.BoolVar(&o.guestInfo, "guestinfo", false, "print a vSphere VM's guestinfo extra config keys (key=value lines) for cloud-init's VMware datasource instead of the #cloud-config")
	fs.StringVarP(&o.output, "output", "o", "", "write the user-data to this file (mode 0600) instead of stdout")
	fs.BoolP("help", "h", false, "show this help and exit")
	return cmd
}

// params checks the flags, each error naming its flag, and builds Render's
// parameters.
func (o *userDataOptions) params() (cloudinit.Params, error) {
	p := cloudinit.Params{
		Agent: agent.Config{
			APIServer: o.apiServer, Cloud: o.cloud, MetadataURL: o.metadataURL, NodeNamePolicy: o.nodeNamePolicy,
			TPM: o.tpm, TPMDevice: o.tpmDevice,
		},
		AgentURL: o.agentURL,
		Packages: o.packages,
	}
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	switch {
	case o.cloud == "":
		bad("--cloud is required (one of: %s)", strings.Join(nodeid.Backends(), ", "))
	case !nodeid.Known(o.cloud):
		bad("--cloud=%s: not a known cloud (one of: %s)", o.cloud, strings.Join(nodeid.Backends(), ", "))
	}
	if !strings.HasPrefix(o.apiServer, "https://") || len(o.apiServer) == len("https://") {
		bad("--api-server: want an https:// URL, got %q", o.apiServer)
	}

	switch {
	case o.caCertHash != "" && o.caFile != "":
		bad("--ca-cert-hash and --ca-file: give one, not both")
	case o.caCertHash != "":
		if !caHashRE.MatchString(o.caCertHash) {
			bad("--ca-cert-hash: want sha256:<64 lower-case hex digits>, got %q", o.caCertHash)
		}
		p.Agent.CACertHash = o.caCertHash
	case o.caFile != "":
		pemData, err := readCA(o.caFile)
		if err != nil {
			bad("--ca-file: %v", err)
		}
		p.CACertPEM = pemData
	default:
		bad("--ca-cert-hash or --ca-file is required")
	}

	switch {
	case o.bootstrapToken != "" && o.bootstrapTokenFile != "":
		bad("--bootstrap-token and --bootstrap-token-file: give one, not both")
	case o.bootstrapToken != "":
		p.BootstrapToken = o.bootstrapToken
		if !tokenutil.IsValidBootstrapToken(p.BootstrapToken) {
			bad("--bootstrap-token: want [a-z0-9]{6}.[a-z0-9]{16}")
		}
	case o.bootstrapTokenFile != "":
		data, err := os.ReadFile(o.bootstrapTokenFile)
		if err != nil {
			bad("--bootstrap-token-file: %v", err)
			break
		}
		p.BootstrapToken = strings.TrimSpace(string(data))
		if !tokenutil.IsValidBootstrapToken(p.BootstrapToken) {
			bad("--bootstrap-token-file %s: want one token [a-z0-9]{6}.[a-z0-9]{16}", o.bootstrapTokenFile)
		}
	default:
		bad("--bootstrap-token or --bootstrap-token-file is required")
	}

	changed := o.changed
	if changed == nil {
		changed = func(string) bool { return false }
	}
	o.release.check(changed, o.agentURL, o.agentSHA256, bad)
	if o.release.version == "" {
		if !strings.HasPrefix(o.agentURL, "https://") && !strings.HasPrefix(o.agentURL, "http://") {
			bad("--agent-url: want an http(s) URL (or --version, the release's agent), got %q", o.agentURL)
		}
		p.AgentSHA256 = strings.ToLower(strings.TrimPrefix(o.agentSHA256, "sha256:"))
		if !digestRE.MatchString(p.AgentSHA256) {
			bad("--agent-sha256: want 64 hex digits, got %q", o.agentSHA256)
		}
	}
	if o.metadataURL != "" && !strings.HasPrefix(o.metadataURL, "http://") && !strings.HasPrefix(o.metadataURL, "https://") {
		bad("--metadata-url: want an http(s) URL, got %q", o.metadataURL)
	}
	for _, kv := range o.cloudSettings {
		k, v, ok := strings.Cut(kv, "=")
		switch {
		case !ok || k == "":
			bad("--cloud-setting %q: want key=value", kv)
			continue
		case p.Agent.CloudSettings[k] != "":
			bad("--cloud-setting: %s given twice", k)
			continue
		}
		if p.Agent.CloudSettings == nil {
			p.Agent.CloudSettings = map[string]string{}
		}
		p.Agent.CloudSettings[k] = v
	}
	switch o.tpm {
	case "", agent.TPMAuto, agent.TPMOff, agent.TPMRequired:
	default:
		bad("--tpm: want auto, off or required, got %q", o.tpm)
	}
	if o.tpmDevice != "" && !strings.HasPrefix(o.tpmDevice, "/") {
		bad("--tpm-device: want an absolute path, got %q", o.tpmDevice)
	}
	o.joinTicket(&p, bad)
	if o.guestInfo && o.vmName(p) == "" {
		bad("--guestinfo: the VM's name is needed (its host name): give --cloud-setting vmName=NAME or a join ticket")
	}
	if o.packages != nil && len(o.packages) == 0 {
		bad("--install-packages: empty list")
	}
	for _, pkg := range o.packages {
		if !cloudinit.ValidPackageName(pkg) {
			bad("--install-packages: %q is not a package name (name or name=version)", pkg)
		}
	}
	o.kubernetesPackages(&p, bad)
	if len(errs) == 0 && nodeid.Known(o.cloud) {
		// The backend judges its own part; blame the flag it objects to.
		nc := p.Agent.NodeConfig()
		if id, err := nodeid.New(o.cloud, nc); err != nil {
			bad("%s: %v", backendFlag(o.cloud, nc), err)
		} else if _, ok := id.(nodeid.TPMKeyer); !ok && o.tpm == agent.TPMRequired {
			bad("--tpm=required: the %s backend proves no join with a TPM (docs/attestation.md)", o.cloud)
		} else if nodeid.NeedsTicket(id) && p.JoinTicket == "" {
			bad("--cloud=%s signs no instance identity: its machine can join only with a join ticket; give --join-ticket-file, or --ticket-name, --ticket-cluster and --ticket-keys-dir to issue one (docs/tickets.md)", o.cloud)
		}
	}
	return p, errors.Join(errs...)
}

// backendFlag names the flag whose value the backend refuses: the first
// one that, changed, makes the backend accept the rest.
func backendFlag(name string, nc nodeid.Config) string {
	accepts := func(c nodeid.Config) bool {
		_, err := nodeid.New(name, c)
		return err == nil
	}
	alt := nc
	if alt.MetadataURL == "" {
		alt.MetadataURL = "http://127.0.0.1:1"
	} else {
		alt.MetadataURL = ""
	}
	if accepts(alt) {
		return "--metadata-url"
	}
	alt = nc
	alt.NodeNamePolicy = ""
	if nc.NodeNamePolicy != "" && accepts(alt) {
		return "--node-name-policy"
	}
	alt = nc
	alt.Settings = nil
	if len(nc.Settings) > 0 && accepts(alt) {
		return "--cloud-setting"
	}
	return "--cloud=" + name
}

// vmName is the VM's name for --guestinfo: the vmName setting, else the
// ticket's instance name.
func (o *userDataOptions) vmName(p cloudinit.Params) string {
	if n := p.Agent.CloudSettings["vmName"]; n != "" {
		return n
	}
	if p.JoinTicket != "" {
		if c, err := ticket.Peek([]byte(p.JoinTicket)); err == nil {
			return c.Name
		}
	}
	return ""
}

// readCA reads a PEM bundle of at least one certificate.
func readCA(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	rest, n := data, 0
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			return "", fmt.Errorf("%s: a %s block; want certificates only", path, block.Type)
		}
		if _, err := x509.ParseCertificate(block.Bytes); err != nil {
			return "", fmt.Errorf("%s: %w", path, err)
		}
		n++
	}
	if n == 0 {
		return "", fmt.Errorf("%s: no PEM certificate", path)
	}
	return string(data), nil
}

// writeFile writes the user-data, which holds the bootstrap token, readable
// by its owner only.
func writeFile(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// joinTicket reads or issues the instance's join ticket into p, if the
// flags ask for one.
func (o *userDataOptions) joinTicket(p *cloudinit.Params, bad func(string, ...any)) {
	issuing := o.ticketName != "" || o.ticketCluster != "" || o.ticketKeysDir != ""
	switch {
	case o.joinTicketFile != "" && issuing:
		bad("--join-ticket-file and --ticket-name: give one, not both")
	case o.joinTicketFile != "":
		data, err := os.ReadFile(o.joinTicketFile)
		if err != nil {
			bad("--join-ticket-file: %v", err)
			return
		}
		p.JoinTicket = strings.TrimSpace(string(data))
		if _, err := ticket.Peek([]byte(p.JoinTicket)); err != nil {
			bad("--join-ticket-file %s: not a join ticket: %v", o.joinTicketFile, err)
		}
	case issuing:
		if o.ticketName == "" || o.ticketCluster == "" || o.ticketKeysDir == "" {
			bad("--ticket-name, --ticket-cluster and --ticket-keys-dir: give all three to issue a ticket")
			return
		}
		keys, err := ticket.ReadDir(o.ticketKeysDir)
		if err != nil {
			bad("--ticket-keys-dir: %v", err)
			return
		}
		tok, _, err := keys.Issue(o.ticketName, o.ticketCluster, time.Now(), o.ticketLifetime)
		if err != nil {
			bad("--ticket-name: %v", err)
			return
		}
		p.JoinTicket = tok
	}
}

// kubernetesPackages checks the --kubernetes-* flags into p.Kubernetes.
func (o *userDataOptions) kubernetesPackages(p *cloudinit.Params, bad func(string, ...any)) {
	if o.kubernetesVersion == "" {
		if o.kubernetesRepo != "" || o.kubernetesRepoKey != "" {
			bad("--kubernetes-repo and --kubernetes-repo-key go with --kubernetes-version")
		}
		return
	}
	if o.packages != nil {
		bad("--install-packages and --kubernetes-version: give one (--kubernetes-version installs containerd and the kubelet)")
	}
	if !cloudinit.ValidKubernetesVersion(o.kubernetesVersion) {
		bad("--kubernetes-version: want vMAJOR.MINOR.PATCH as the cluster's (e.g. v1.36.3), got %q", o.kubernetesVersion)
		return
	}
	k := &cloudinit.KubernetesPackages{Version: o.kubernetesVersion, RepoURL: o.kubernetesRepo}
	if o.kubernetesRepo != "" && !strings.HasPrefix(o.kubernetesRepo, "https://") && !strings.HasPrefix(o.kubernetesRepo, "http://") {
		bad("--kubernetes-repo: want an http(s) URL, got %q", o.kubernetesRepo)
	}
	if o.kubernetesRepoKey != "" {
		data, err := os.ReadFile(o.kubernetesRepoKey)
		if err != nil {
			bad("--kubernetes-repo-key: %v", err)
			return
		}
		k.RepoKey = string(data)
	}
	key, what := k.RepoKey, "--kubernetes-repo-key "+o.kubernetesRepoKey
	if key == "" {
		key, what = cloudinit.PkgsK8sIOKey, "the built-in pkgs.k8s.io key (give the repository's current Release.key as --kubernetes-repo-key)"
	}
	now := userDataNow()
	if _, err := cloudinit.CheckRepoKey(key, now); err != nil {
		bad("%s: %v", what, err)
	}
	p.Kubernetes = k
	p.Now = now
}
