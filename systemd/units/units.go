// Package units holds mooring's systemd unit files: mooring-agent.service
// and the kubelet drop-in that orders kubelet after it. cloud-init installs
// them (agent/cloudinit renders them into user-data).
package units

import _ "embed"

// Agent is mooring-agent.service.
//
//go:embed mooring-agent.service
var Agent string

// KubeletDropIn is kubelet.service.d/20-mooring.conf. It sorts after
// kubeadm's 10-kubeadm.conf, so its ExecStart is the one that runs, and it
// keeps kubeadm's variables and $KUBELET_EXTRA_ARGS in it.
//
//go:embed 20-mooring.conf
var KubeletDropIn string

// Paths where the unit files are installed.
const (
	AgentPath         = "/etc/systemd/system/mooring-agent.service"
	KubeletDropInPath = "/etc/systemd/system/kubelet.service.d/20-mooring.conf"
)
