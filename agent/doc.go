// Package agent is mooring-agent's job: read /etc/mooring/agent.yaml, check
// the kubelet's credentials (valid ones: skip to the kubelet), else make or
// reuse a key, fetch evidence bound to it from the instance metadata
// service, file the client CSR under a name derived from the key (a retry
// finds it), wait for the decision, store the pair as the kubelet does
// (kubelet-client-current.pem), write the kubeconfig and the kubelet flags
// the agent owns, send READY=1 and start kubelet.service. Every step can be
// killed and resumed. docs/join.md explains it for admins.
package agent
