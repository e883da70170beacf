// Package cloudinit renders the user-data that joins a machine with
// mooring: cloud-init writes the agent's config, the cluster CA, the
// bootstrap token and the unit files, installs the agent binary (checked
// against its SHA-256), and enables mooring-agent.service without blocking
// cloud-init; optionally it first installs packages: the kubelet of the
// cluster's version from the Kubernetes package repository with containerd
// (KubernetesPackages), or packages from the image's own repositories. docs/join.md shows an example, and
// mooring-agent user-data renders it from the command line.
package cloudinit

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	tokenutil "k8s.io/cluster-bootstrap/token/util"
	"sigs.k8s.io/yaml"

	"github.com/mooring-dev/mooring/agent"
	"github.com/mooring-dev/mooring/internal/ticket"
	"github.com/mooring-dev/mooring/systemd/units"
)

// Params are what differs between clusters and machines.
type Params struct {
	// Agent is the agent's config; CAFile and BootstrapTokenFile are set
	// by Render to the files it writes.
	Agent agent.Config
	// CACertPEM is the cluster CA, written to /etc/mooring/ca.crt (leave it
	// empty when Agent.CACertHash pins the CA instead).
	CACertPEM string
	// BootstrapToken is written to /etc/mooring/bootstrap-token.
	BootstrapToken string
	// JoinTicket, when set, is the instance's join ticket (docs/tickets.md),
	// written to TicketPath and named by the agent config's joinTicketFile:
	// the machine joins with it instead of cloud-signed evidence.
	JoinTicket string
	// AgentURL and AgentSHA256 are where to fetch mooring-agent and its
	// digest.
	AgentURL, AgentSHA256 string
	// Packages are installed by cloud-init's packages module (the image's
	// package manager and repositories) before the agent is installed;
	// empty installs none. DefaultPackages is the usual choice when the
	// image lacks a container runtime and the kubelet.
	Packages []string
	// Kubernetes, when set, installs the kubelet of the cluster's version
	// from the Kubernetes package repository, and containerd (instead of
	// Packages: give one or neither).
	Kubernetes *KubernetesPackages
	// Now is when the repository key's expiry is judged; zero: the time
	// of rendering. (Tests fix it: the built-in key has an expiry.)
	Now time.Time
}

// DefaultPackages are the packages a node needs besides the agent: a
// container runtime and the kubelet (kubelet.service, which the agent
// starts). The names must exist in the image's configured repositories.
var DefaultPackages = []string{"containerd", "kubelet"}

// Paths cloud-init writes.
const (
	CAPath    = "/etc/mooring/ca.crt"
	TokenPath = "/etc/mooring/bootstrap-token"
	// TicketPath holds the instance's join ticket, when it has one.
	TicketPath = "/etc/mooring/join-ticket"
	AgentBin   = "/usr/local/bin/mooring-agent"
	configMode = "0600"
)

type file struct {
	Path        string `json:"path"`
	Permissions string `json:"permissions"`
	Content     string `json:"content"`
	// Defer writes the file in cloud-init's final stage, after the
	// packages are installed.
	Defer bool `json:"defer,omitempty"`
}

type userData struct {
	Packages   []string   `json:"packages,omitempty"`
	WriteFiles []file     `json:"write_files"`
	RunCmd     [][]string `json:"runcmd"`
}

var (
	sha256RE = regexp.MustCompile(`^[0-9a-f]{64}$`)
	// packageRE admits Debian and RPM package names, optionally pinned to a
	// version (apt's name=version).
	packageRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9.+_~:-]*(=[A-Za-z0-9.+_~:-]+)?$`)
)

// ValidPackageName reports whether s may be an entry of Params.Packages: a
// package name, optionally with apt's =version.
func ValidPackageName(s string) bool { return packageRE.MatchString(s) }

// Render returns the #cloud-config user-data.
func Render(p Params) ([]byte, error) {
	cfg := p.Agent
	cfg.SetDefaults()
	cfg.BootstrapTokenFile = TokenPath
	if p.JoinTicket != "" {
		cfg.JoinTicketFile = TicketPath
	}
	if p.CACertPEM != "" {
		cfg.CAFile = CAPath
	}
	var errs []error
	if !tokenutil.IsValidBootstrapToken(p.BootstrapToken) {
		errs = append(errs, errors.New("bootstrap token: want [a-z0-9]{6}.[a-z0-9]{16}"))
	}
	if !strings.HasPrefix(p.AgentURL, "https://") && !strings.HasPrefix(p.AgentURL, "http://") {
		errs = append(errs, fmt.Errorf("agent URL %q is not http(s)", p.AgentURL))
	}
	if !sha256RE.MatchString(p.AgentSHA256) {
		errs = append(errs, errors.New("agent SHA-256: want 64 lower-case hex digits"))
	}
	if p.JoinTicket != "" {
		if _, err := ticket.Peek([]byte(p.JoinTicket)); err != nil {
			errs = append(errs, fmt.Errorf("join ticket: %w", err))
		}
	}
	for _, pkg := range p.Packages {
		if !ValidPackageName(pkg) {
			errs = append(errs, fmt.Errorf("package %q: want a package name, optionally name=version", pkg))
		}
	}
	if p.Kubernetes != nil {
		k := *p.Kubernetes
		now := p.Now
		if now.IsZero() {
			now = time.Now()
		}
		if err := k.check(now); err != nil {
			errs = append(errs, err)
		}
		if len(p.Packages) > 0 {
			errs = append(errs, errors.New("packages and the Kubernetes package repository: give one, not both"))
		}
		p.Kubernetes = &k
	}
	if err := cfg.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("cloud-init: %w", err)
	}
	agentYAML, err := yaml.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	ud := userData{Packages: p.Packages, WriteFiles: []file{
		{Path: agent.DefaultConfigPath, Permissions: configMode, Content: string(agentYAML)},
		{Path: TokenPath, Permissions: "0600", Content: p.BootstrapToken + "\n"},
		{Path: units.AgentPath, Permissions: "0644", Content: units.Agent},
		{Path: units.KubeletDropInPath, Permissions: "0644", Content: units.KubeletDropIn},
	}}
	if p.CACertPEM != "" {
		ud.WriteFiles = append(ud.WriteFiles, file{Path: CAPath, Permissions: "0644", Content: p.CACertPEM})
	}
	if p.JoinTicket != "" {
		ud.WriteFiles = append(ud.WriteFiles, file{Path: TicketPath, Permissions: "0600", Content: p.JoinTicket + "\n"})
	}
	if p.Kubernetes != nil {
		ud.Packages = []string{"containerd", KubeletPackage(p.Kubernetes.Version)}
		ud.WriteFiles = append(ud.WriteFiles, p.Kubernetes.files()...)
	}
	ud.RunCmd = [][]string{{"sh", "-c", installScript(p)}}
	out, err := yaml.Marshal(ud)
	if err != nil {
		return nil, err
	}
	return append([]byte("#cloud-config\n"), out...), nil
}

// installScript is the one runcmd item: cloud-init runs runcmd's items
// as one sh script without -e (a failed item does not stop the next, and
// the script's status is the last item's), so a failed download followed
// by a separate `systemctl enable` would leave the unit restarting on a
// missing binary while cloud-init reports success. Here every step runs
// under set -e in one item: the download is installed only when its
// SHA-256 matches, the unit is enabled only after that, and any failure
// exits non-zero with a line on stderr naming it (cloud-init-output.log,
// cloud-final's journal), so cloud-init's status is error.
func installScript(p Params) string {
	lines := []string{
		"set -eu",
		`fail() { echo "mooring: $*; mooring-agent.service is not enabled" >&2; exit 1; }`,
	}
	if p.Kubernetes != nil {
		lines = append(lines, p.Kubernetes.script())
	}
	lines = append(lines,
		"bin="+AgentBin,
		"url="+shellQuote(p.AgentURL),
		`curl -fsSL --retry 5 -o "$bin.download" "$url" || fail "downloading the agent from $url failed"`,
		`echo "`+p.AgentSHA256+`  $bin.download" | sha256sum -c --status - || {`,
		`  got=$(sha256sum "$bin.download" | cut -d' ' -f1); rm -f "$bin.download"`,
		`  fail "the agent from $url has SHA-256 $got, want `+p.AgentSHA256+`: not installed"`,
		`}`,
		`install -m 0755 "$bin.download" "$bin"`,
		`rm -f "$bin.download"`,
		"systemctl daemon-reload",
		// --no-block: cloud-init must not wait for the join (the agent may
		// wait minutes for approval; cloud-init's own units order before).
		"systemctl enable --now --no-block mooring-agent.service",
	)
	return strings.Join(lines, "\n") + "\n"
}

// shellQuote makes s one sh word that expands to nothing else: single
// quotes, each ' inside closed, escaped and reopened.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
