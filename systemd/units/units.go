// Package units holds mooring's systemd unit files: mooring-agent.service
// and the kubelet drop-in that orders kubelet after it. cloud-init installs
// them (deploy/cloudinit renders them into user-data).
package units

import _ "embed"

// Agent is mooring-agent.service.
//
//go:embed mooring-agent.service
var Agent string

// KubeletDropIn is kubelet.service.d/10-mooring.conf.
//
//go:embed 10-mooring.conf
var KubeletDropIn string

// Paths where the unit files are installed.
const (
	AgentPath         = "/etc/systemd/system/mooring-agent.service"
	KubeletDropInPath = "/etc/systemd/system/kubelet.service.d/10-mooring.conf"
)
