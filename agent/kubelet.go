package agent

import (
	"fmt"
	"strings"

	"github.com/mooring-dev/mooring/cloud/nodeid"
	"github.com/mooring-dev/mooring/internal/atomicfile"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// writeKubeconfig writes the kubelet's kubeconfig: the cluster, and the
// current certificate pair file for both certificate and key, as the
// kubelet itself writes it after bootstrapping, so it rotates the pair.
func writeKubeconfig(path, server string, caPEM []byte, pairPath string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["default-cluster"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM}
	cfg.AuthInfos["default-auth"] = &clientcmdapi.AuthInfo{ClientCertificate: pairPath, ClientKey: pairPath}
	cfg.Contexts["default-context"] = &clientcmdapi.Context{Cluster: "default-cluster", AuthInfo: "default-auth"}
	cfg.CurrentContext = "default-context"
	data, err := clientcmd.Write(*cfg)
	if err != nil {
		return err
	}
	return atomicfile.Write(path, data, 0o600)
}

// KubeletArgsVar is the environment variable of the kubelet flags the agent
// owns; the kubelet drop-in appends $KUBELET_MOORING_ARGS to its command.
const KubeletArgsVar = "KUBELET_MOORING_ARGS"

// writeKubeletEnv writes --provider-id, --hostname-override (the node name
// the cloud gives, which need not be the machine's hostname) and, when the
// instance's internal address is an address of this machine, --node-ip.
func writeKubeletEnv(path string, inst nodeid.Instance, isLocal func(string) bool) error {
	args := []string{"--provider-id=" + inst.ProviderID, "--hostname-override=" + inst.NodeName}
	if inst.InternalIP != "" && isLocal(inst.InternalIP) {
		args = append(args, "--node-ip="+inst.InternalIP)
	}
	content := fmt.Sprintf("# Written by mooring-agent; do not edit.\n%s=%q\n", KubeletArgsVar, strings.Join(args, " "))
	return atomicfile.Write(path, []byte(content), 0o644)
}
