package cloudinit

import (
	"strings"
	"testing"

	// The rendered config names a backend, which must be registered: the
	// binaries import cloud/all, the tests the backends they render for.
	_ "github.com/mooring-dev/mooring/cloud/aws"
	_ "github.com/mooring-dev/mooring/cloud/local"
)

// An EC2 node's user-data needs nothing AWS-specific but cloud: aws (the
// metadata service's address, region and instance come from the instance
// itself), and refuses settings the backend does not know.
func TestRenderForAWS(t *testing.T) {
	p := params()
	p.Agent.Cloud, p.Agent.MetadataURL = "aws", ""
	out, err := Render(p)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "cloud: aws") || strings.Contains(string(out), "metadataURL") {
		t.Fatalf("user-data:\n%s", out)
	}
	p.Agent.CloudSettings = map[string]string{"stsEndpont": "https://sts.eu-west-1.amazonaws.com"}
	if _, err := Render(p); err == nil || !strings.Contains(err.Error(), "stsEndpont") {
		t.Fatalf("a misspelt setting: %v", err)
	}
}
