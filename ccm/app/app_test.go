package app

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mooring-dev/mooring/cloud"
)

// A --load-balancer-controller other than mooring or library is refused
// before anything starts.
func TestLoadBalancerControllerFlag(t *testing.T) {
	cmd, err := NewCommand()
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs([]string{"--load-balancer-controller=stock"})
	if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), "want mooring or library") {
		t.Fatalf("got %v", err)
	}
}

// TestCloudProviderIsCheckedFirst: without --kubeconfig (nor an in-cluster
// config), a wrong or missing --cloud-provider, or a cloud config the
// provider refuses, is what the operator hears, not the kubeconfig; with a
// good provider and config, the kubeconfig comes next.
func TestCloudProviderIsCheckedFirst(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("KUBERNETES_SERVICE_PORT", "")
	dir := t.TempDir()
	token := filepath.Join(dir, "token")
	if err := os.WriteFile(token, []byte("tok\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	known := strings.Join(cloud.Backends(), ", ")
	// Only the last case reaches the library's part (which sets up
	// logging, once a process); no serving there (--secure-port=0).
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "--cloud-provider is required (one of: " + known + ")"},
		{[]string{"--cloud-provider=nimbus"}, "--cloud-provider=nimbus: not a cloud provider of mooring-ccm (one of: " + known + ")"},
		{[]string{"--cloud-provider=local"}, "--cloud-provider=local --cloud-config=: cloud provider local: local cloud config: --cloud-config is required"},
		{[]string{"--cloud-provider=local", "--cloud-config=" + filepath.Join(dir, "none.yaml")}, "--cloud-config=" + filepath.Join(dir, "none.yaml") + ": cloud provider local: open"},
		{[]string{"--cloud-provider=local", "--cloud-config=" + cfg("bogus.yaml", "endpoint: http://127.0.0.1:1\ntokenFile: "+token+"\ncluster: c1\nbogus: 1\n")}, "bogus"},
		{[]string{"--cloud-provider=local", "--cloud-config=" + cfg("nocluster.yaml", "endpoint: http://127.0.0.1:1\ntokenFile: "+token+"\n")}, "cluster is required"},
		// The approver's TPM policy is checked against the backend before
		// leading: the local cloud verifies no TPM evidence.
		{[]string{"--cloud-provider=local", "--cloud-config=" + cfg("tpm.yaml", "endpoint: http://127.0.0.1:1\ntokenFile: "+token+"\ncluster: c1\n"), "--csr-approver-tpm=required"}, "verifies no TPM evidence"},
		{[]string{"--cloud-provider=local", "--cloud-config=" + cfg("good.yaml", "endpoint: http://127.0.0.1:1\ntokenFile: "+token+"\ncluster: c1\n")}, "invalid configuration: no configuration has been provided"},
	} {
		cmd, err := NewCommand()
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		cmd.SetArgs(append([]string{"--secure-port=0"}, c.args...))
		err = cmd.Execute()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: err = %v, want %q", c.args, err, c.want)
			continue
		}
		kubeconfig := strings.Contains(err.Error(), "no configuration has been provided")
		if want := strings.Contains(c.want, "no configuration"); kubeconfig != want {
			t.Errorf("%v: err = %v: the kubeconfig reported %v, want %v", c.args, err, kubeconfig, want)
		}
	}
}
