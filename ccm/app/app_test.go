package app

import (
	"bytes"
	"strings"
	"testing"
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
