// Package agent will hold mooring-agent, the per-node agent that cloud-init
// installs as a systemd unit: it attests the machine with evidence signed by
// the cloud, obtains the kubelet's client certificate through the CSR API and
// then starts kubelet. Its main will live in agent/cmd/mooring-agent.
package agent
