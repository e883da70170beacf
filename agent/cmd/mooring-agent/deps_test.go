package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestLinksNoProvider: mooring-agent links the backends' node parts only
// (cloud/all/agentid), none of their CCM providers or approver verifiers,
// nor the SDKs of the clouds' APIs they call: those made the agent a
// 150 MB binary of about 100 MiB peak RSS.
func TestLinksNoProvider(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to list the binary's packages")
	}
	out, err := exec.Command(goBin, "list", "-deps", "-f", "{{.ImportPath}}", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	const mooring = "github.com/mooring-dev/mooring/"
	forbidden := []struct{ path, why string }{
		{"k8s.io/cloud-provider", "k8s.io/cloud-provider and the upstream providers"},
		{"github.com/aws/aws-sdk-go-v2/service/", "an AWS API client (EC2, ELB, STS)"},
		{"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/", "an Azure Resource Manager client"},
		{"github.com/Azure/azure-sdk-for-go/sdk/azidentity", "Azure credentials"},
		{"google.golang.org/api/", "a Google API client"},
		{"github.com/hetznercloud/hcloud-go/v2/hcloud=", "the Hetzner Cloud API client"},
		{"github.com/digitalocean/godo", "the DigitalOcean API client"},
		{"github.com/vmware/govmomi", "the vSphere API client"},
		{"github.com/gophercloud/gophercloud", "the OpenStack API client"},
		{"github.com/linode/linodego", "the Linode API client"},
		{mooring + "cloud=", "package cloud (the providers' seam)"},
		{mooring + "cloud/view", "the instance view"},
		{mooring + "cloud/local/provider", "the local cloud's provider"},
		{mooring + "cloud/local/attest", "the local cloud's verifier"},
		{mooring + "csrapprover", "the approver"},
		{mooring + "ccm", "the CCM"},
		{"github.com/google/go-tpm-tools/simulator", "the TPM simulator (cgo; tests only)"},
		{mooring + "cloud/tpm/tpmtest", "the tests' TPM simulator"},
		{mooring + "cloud/tpm=", "the approver's TPM checks (the agent needs cloud/tpm/wire and cloud/tpm/node)"},
		{"github.com/google/go-attestation", "the quote verifier"},
		{"github.com/google/go-tpm/legacy/tpm2/credactivation", "the approver's credential activation challenge"},
	}
	for _, pkg := range strings.Fields(string(out)) {
		for _, f := range forbidden {
			// "=" ends a path matched exactly; others match as prefixes.
			exact, ok := strings.CutSuffix(f.path, "=")
			if ok && pkg == exact || !ok && strings.HasPrefix(pkg, f.path) {
				t.Errorf("mooring-agent links %s: %s", pkg, f.why)
			}
		}
		// A backend's own package is its provider; only its agentid may be linked.
		if rest, ok := strings.CutPrefix(pkg, mooring+"cloud/"); ok {
			parts := strings.Split(rest, "/")
			switch {
			case parts[0] == "nodeid" || parts[0] == "all" && len(parts) == 2 && parts[1] == "agentid":
			case parts[0] == "tpm" && len(parts) == 2 && (parts[1] == "node" || parts[1] == "wire"):
			case len(parts) >= 2 && parts[1] == "agentid":
			case parts[0] == "local" && len(parts) == 2 && (parts[1] == "api" || parts[1] == "client"):
			default:
				t.Errorf("mooring-agent links %s: only the backends' agentid parts (and what they import) belong in it", pkg)
			}
		}
	}
}
