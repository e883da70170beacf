package oci_test

// Tests of modes All and Frontend: the security lists' rules, shared
// ports, and a write that loses to another writer.

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/oracle/oci-go-sdk/v65/common"
	v1 "k8s.io/api/core/v1"

	"github.com/mooring-dev/mooring/cloud/oci"
	"github.com/mooring-dev/mooring/cloud/oci/ocitest"
)

func TestSecurityListsModeAll(t *testing.T) {
	b := newRuleBed(t)
	ctx := context.Background()
	rs := b.ruleSet(oci.RuleModeAll)
	if nsg, err := b.rules.Ensure(ctx, rs); err != nil || nsg != "" {
		t.Fatalf("Ensure: %q, %v", nsg, err)
	}
	lb, nodes := "127.85.1.0/24", "127.85.2.0/24"
	b.wantList(t, b.lbList, []string{"127.0.0.0/8:22", "127.85.200.0/24:80"}, []string{"other:127.0.0.0/8", nodes + ":30080", nodes + ":10256"})
	b.wantList(t, b.nodeList, []string{"127.0.0.0/8:22", lb + ":30080", lb + ":10256"}, nil)
	l, _ := b.ep.SecurityList(b.lbList)
	for _, r := range l.Ingress {
		if *r.Protocol != "6" || r.IsStateless == nil || *r.IsStateless {
			t.Errorf("rule %+v: want stateful TCP (protocol 6)", r)
		}
	}

	// Again: nothing to write.
	puts := b.ep.Calls("UpdateSecurityList")
	if _, err := b.rules.Ensure(ctx, rs); err != nil {
		t.Fatal(err)
	}
	if n := b.ep.Calls("UpdateSecurityList") - puts; n != 0 {
		t.Errorf("an unchanged Service wrote %d lists", n)
	}

	// A port, node port and source change, the load balancer holding the
	// old ones: the old rules go, the user's stay.
	held := rs.Ports
	rs.Ports = []oci.RulePort{{Listener: 8080, NodePort: 30081, Protocol: "TCP"}}
	rs.HeldPorts, rs.HeldHealthCheckPort = held, 10256
	rs.SourceCIDRs = []string{"127.85.201.0/24", "127.85.202.0/24"}
	if _, err := b.rules.Ensure(ctx, rs); err != nil {
		t.Fatal(err)
	}
	b.wantList(t, b.lbList, []string{"127.0.0.0/8:22", "127.85.201.0/24:8080", "127.85.202.0/24:8080"},
		[]string{"other:127.0.0.0/8", nodes + ":30081", nodes + ":10256"})
	b.wantList(t, b.nodeList, []string{"127.0.0.0/8:22", lb + ":30081", lb + ":10256"}, nil)

	// Removed while another Service of policy Cluster uses the health
	// check port and another port 8080: those rules stay.
	b.services = []*v1.Service{lbService("uid-1", 8080, false, 0), lbService("uid-2", 8080, false, 0)}
	rs.HeldPorts = nil
	if err := b.rules.Remove(ctx, rs); err != nil {
		t.Fatal(err)
	}
	b.wantList(t, b.lbList, []string{"127.0.0.0/8:22", "127.85.201.0/24:8080", "127.85.202.0/24:8080"},
		[]string{"other:127.0.0.0/8", nodes + ":10256"})
	b.wantList(t, b.nodeList, []string{"127.0.0.0/8:22", lb + ":10256"}, nil)

	// The other Service gone (or of policy Local): everything of this
	// one goes; the user's rules stay.
	b.services = []*v1.Service{lbService("uid-3", 443, true, 31000)}
	if err := b.rules.Remove(ctx, rs); err != nil {
		t.Fatal(err)
	}
	b.wantList(t, b.lbList, []string{"127.0.0.0/8:22"}, []string{"other:127.0.0.0/8"})
	b.wantList(t, b.nodeList, []string{"127.0.0.0/8:22"}, nil)
}

func TestSecurityListsSharedRulesKeptWithoutServices(t *testing.T) {
	b := newRuleBed(t)
	ctx := context.Background()
	rs := b.ruleSet(oci.RuleModeAll)
	if _, err := b.rules.Ensure(ctx, rs); err != nil {
		t.Fatal(err)
	}
	// The lister fails: the listener port's and the health check port's
	// rules may be another Service's, so they stay; the node port's go.
	b.rules.SetServices(func(context.Context) ([]*v1.Service, error) { return nil, errors.New("apiserver down") })
	if err := b.rules.Remove(ctx, rs); err != nil {
		t.Fatal(err)
	}
	b.wantList(t, b.lbList, []string{"127.0.0.0/8:22", "127.85.200.0/24:80"}, []string{"other:127.0.0.0/8", "127.85.2.0/24:10256"})
	b.wantList(t, b.nodeList, []string{"127.0.0.0/8:22", "127.85.1.0/24:10256"}, nil)
}

func TestSecurityListsModeFrontend(t *testing.T) {
	b := newRuleBed(t)
	ctx := context.Background()
	rs := b.ruleSet(oci.RuleModeFrontend)
	if _, err := b.rules.Ensure(ctx, rs); err != nil {
		t.Fatal(err)
	}
	b.wantList(t, b.lbList, []string{"127.0.0.0/8:22", "127.85.200.0/24:80"}, []string{"other:127.0.0.0/8"})
	b.wantList(t, b.nodeList, []string{"127.0.0.0/8:22"}, nil)
	// The port and the source change; the node subnets' list and the LB
	// subnets' egress stay as they are.
	rs.HeldPorts, rs.Ports = rs.Ports, []oci.RulePort{{Listener: 8443, NodePort: 30443, Protocol: "TCP"}}
	rs.SourceCIDRs = []string{"127.85.201.0/24"}
	if _, err := b.rules.Ensure(ctx, rs); err != nil {
		t.Fatal(err)
	}
	b.wantList(t, b.lbList, []string{"127.0.0.0/8:22", "127.85.201.0/24:8443"}, []string{"other:127.0.0.0/8"})
	b.wantList(t, b.nodeList, []string{"127.0.0.0/8:22"}, nil)
	rs.HeldPorts = nil
	if err := b.rules.Remove(ctx, rs); err != nil {
		t.Fatal(err)
	}
	b.wantList(t, b.lbList, []string{"127.0.0.0/8:22"}, []string{"other:127.0.0.0/8"})
}

func TestSecurityListsOneListForBoth(t *testing.T) {
	// The LB and the nodes in subnets of one security list, the oldest of
	// two: every rule goes into it, written once.
	b := newRuleBed(t)
	ctx := context.Background()
	old, _ := b.ep.SecurityList(b.lbList)
	newer := b.ep.PutSecurityList(ocitest.SecurityList{DisplayName: "newer", Created: old.Created.Add(time.Second)}).ID
	sub := b.ep.PutSubnet(ocitest.Subnet{CIDR: "127.85.3.0/24", VcnID: b.lbSubnet.VcnID, SecurityLists: []string{newer, b.lbList}})
	rs := b.ruleSet(oci.RuleModeAll)
	rs.LBSubnets, rs.NodeSubnets = []string{b.lbSubnet.ID}, []string{sub.ID}
	puts := b.ep.Calls("UpdateSecurityList")
	if _, err := b.rules.Ensure(ctx, rs); err != nil {
		t.Fatal(err)
	}
	if n := b.ep.Calls("UpdateSecurityList") - puts; n != 1 {
		t.Errorf("%d writes, want 1", n)
	}
	b.wantList(t, b.lbList, []string{"127.0.0.0/8:22", "127.85.200.0/24:80", "127.85.1.0/24:30080", "127.85.1.0/24:10256"},
		[]string{"other:127.0.0.0/8", "127.85.3.0/24:30080", "127.85.3.0/24:10256"})
	b.wantList(t, newer, nil, nil)
}

func TestSecurityListNoEtagMatchRetried(t *testing.T) {
	b := newRuleBed(t)
	ctx := context.Background()
	// Another writer adds a rule between mooring's read and write, once:
	// the write is refused (412), done again on the list as it is, and
	// the other writer's rule stays.
	once := true
	b.ep.BeforeSecurityListUpdate(func(id string) {
		if id == b.lbList && once {
			once = false
			_ = b.ep.EditSecurityList(id, func(l *ocitest.SecurityList) { l.Ingress = append(l.Ingress, tcpIn("127.0.0.0/8", 443)) })
		}
	})
	rs := b.ruleSet(oci.RuleModeFrontend)
	puts := b.ep.Calls("UpdateSecurityList")
	if _, err := b.rules.Ensure(ctx, rs); err != nil {
		t.Fatal(err)
	}
	if n := b.ep.Calls("UpdateSecurityList") - puts; n != 2 {
		t.Errorf("%d writes, want 2 (one refused)", n)
	}
	b.wantList(t, b.lbList, []string{"127.0.0.0/8:22", "127.0.0.0/8:443", "127.85.200.0/24:80"}, []string{"other:127.0.0.0/8"})

	// A writer that always wins: an error after a few attempts, the list
	// as that writer left it.
	b.ep.BeforeSecurityListUpdate(func(id string) {
		_ = b.ep.EditSecurityList(id, func(l *ocitest.SecurityList) { l.DisplayName += "+" })
	})
	rs.SourceCIDRs = []string{"127.85.203.0/24"}
	_, err := b.rules.Ensure(ctx, rs)
	if se, ok := common.IsServiceError(errors.Unwrap(err)); !ok || se.GetHTTPStatusCode() != http.StatusPreconditionFailed || se.GetCode() != "NoEtagMatch" {
		t.Fatalf("Ensure against a writer that always wins: %v, want 412 NoEtagMatch", err)
	}
	b.wantList(t, b.lbList, []string{"127.0.0.0/8:22", "127.0.0.0/8:443", "127.85.200.0/24:80"}, []string{"other:127.0.0.0/8"})
}
