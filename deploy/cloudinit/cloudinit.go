// Package cloudinit renders the user-data that joins a machine with
// mooring: cloud-init writes the agent's config, the cluster CA, the
// bootstrap token and the unit files, installs the agent binary (checked
// against its SHA-256), and enables mooring-agent.service without blocking
// cloud-init. docs/join.md shows an example.
package cloudinit

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/mooring-dev/mooring/agent"
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
	// AgentURL and AgentSHA256 are where to fetch mooring-agent and its
	// digest.
	AgentURL, AgentSHA256 string
}

// Paths cloud-init writes.
const (
	CAPath     = "/etc/mooring/ca.crt"
	TokenPath  = "/etc/mooring/bootstrap-token"
	AgentBin   = "/usr/local/bin/mooring-agent"
	configMode = "0600"
)

type file struct {
	Path        string `json:"path"`
	Permissions string `json:"permissions"`
	Content     string `json:"content"`
}

type userData struct {
	WriteFiles []file     `json:"write_files"`
	RunCmd     [][]string `json:"runcmd"`
}

var (
	sha256RE = regexp.MustCompile(`^[0-9a-f]{64}$`)
	tokenRE  = regexp.MustCompile(`^[a-z0-9]{6}\.[a-z0-9]{16}$`)
)

// Render returns the #cloud-config user-data.
func Render(p Params) ([]byte, error) {
	cfg := p.Agent
	cfg.SetDefaults()
	cfg.BootstrapTokenFile = TokenPath
	if p.CACertPEM != "" {
		cfg.CAFile = CAPath
	}
	var errs []error
	if !tokenRE.MatchString(p.BootstrapToken) {
		errs = append(errs, errors.New("bootstrap token: want [a-z0-9]{6}.[a-z0-9]{16}"))
	}
	if !strings.HasPrefix(p.AgentURL, "https://") && !strings.HasPrefix(p.AgentURL, "http://") {
		errs = append(errs, fmt.Errorf("agent URL %q is not http(s)", p.AgentURL))
	}
	if !sha256RE.MatchString(p.AgentSHA256) {
		errs = append(errs, errors.New("agent SHA-256: want 64 lower-case hex digits"))
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
	ud := userData{WriteFiles: []file{
		{Path: agent.DefaultConfigPath, Permissions: configMode, Content: string(agentYAML)},
		{Path: TokenPath, Permissions: "0600", Content: p.BootstrapToken + "\n"},
		{Path: units.AgentPath, Permissions: "0644", Content: units.Agent},
		{Path: units.KubeletDropInPath, Permissions: "0644", Content: units.KubeletDropIn},
	}}
	if p.CACertPEM != "" {
		ud.WriteFiles = append(ud.WriteFiles, file{Path: CAPath, Permissions: "0644", Content: p.CACertPEM})
	}
	install := fmt.Sprintf("set -e; curl -fsSL --retry 5 -o %[1]s.download %[2]q; echo '%[3]s  %[1]s.download' | sha256sum -c -; install -m 0755 %[1]s.download %[1]s; rm -f %[1]s.download",
		AgentBin, p.AgentURL, p.AgentSHA256)
	ud.RunCmd = [][]string{
		{"sh", "-c", install},
		{"systemctl", "daemon-reload"},
		// --no-block: cloud-init must not wait for the join (the agent may
		// wait minutes for approval; cloud-init's own units order before).
		{"systemctl", "enable", "--now", "--no-block", "mooring-agent.service"},
	}
	out, err := yaml.Marshal(ud)
	if err != nil {
		return nil, err
	}
	return append([]byte("#cloud-config\n"), out...), nil
}
