package testbed

import (
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// credentials is what a kubeconfig carries to authenticate: a client
// certificate pair or a bearer token.
type credentials struct {
	certPEM, keyPEM []byte
	token           string
}

// writeKubeconfig writes a kubeconfig for server, trusting caPEM, that
// authenticates with creds, with everything embedded.
func writeKubeconfig(path, server string, caPEM []byte, user string, creds credentials) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["mooring"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{
		ClientCertificateData: creds.certPEM,
		ClientKeyData:         creds.keyPEM,
		Token:                 creds.token,
	}
	cfg.Contexts["mooring"] = &clientcmdapi.Context{Cluster: "mooring", AuthInfo: user}
	cfg.CurrentContext = "mooring"
	return clientcmd.WriteToFile(*cfg, path)
}

func restConfigFromFile(path string) (*rest.Config, error) {
	return clientcmd.BuildConfigFromFlags("", path)
}
