package linodetest

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/linode/linodego"
)

// The firewall calls as linodego makes them: a create's firewall_id of a
// firewall the account lacks is a 400 and makes nothing; devices are
// listed, attached (one enabled firewall per NodeBalancer, as Linode
// documents) and detached; a NodeBalancer's firewalls are listed; a
// deleted NodeBalancer leaves its firewalls.
func TestFirewallsWithLinodego(t *testing.T) {
	c := NewStarted(t, Options{})
	in := c.Put(Instance{Label: "web-1", PublicIP: "127.0.96.1", PrivateIP: "127.0.95.1"})
	lc := client(t, c, c.Token())
	ctx := context.Background()
	a := c.PutFirewall(Firewall{Label: "fw-a"})
	b := c.PutFirewall(Firewall{Label: "fw-b"})
	cf := config(80, in.PrivateIP+":30080")
	if _, err := lc.CreateNodeBalancer(ctx, linodego.NodeBalancerCreateOptions{Region: "us-east", FirewallID: 99,
		Configs: []*linodego.NodeBalancerConfigCreateOptions{&cf}}); err == nil || len(c.NodeBalancers()) != 0 {
		t.Fatalf("create with an unknown firewall: %v, %d NodeBalancers", err, len(c.NodeBalancers()))
	} else if st, field := apiErr(err); st != 400 || field != "firewall_id" {
		t.Fatalf("create with an unknown firewall: %d %s", st, field)
	}
	nb, err := lc.CreateNodeBalancer(ctx, linodego.NodeBalancerCreateOptions{Region: "us-east", FirewallID: a.ID,
		Configs: []*linodego.NodeBalancerConfigCreateOptions{&cf}})
	if err != nil {
		t.Fatal(err)
	}
	fws, err := lc.ListNodeBalancerFirewalls(ctx, nb.ID, nil)
	if err != nil || len(fws) != 1 || fws[0].ID != a.ID || fws[0].Rules.InboundPolicy != "DROP" {
		t.Fatalf("the NodeBalancer's firewalls: %+v, %v", fws, err)
	}
	if _, err := lc.CreateFirewallDevice(ctx, b.ID, linodego.FirewallDeviceCreateOptions{ID: nb.ID, Type: linodego.FirewallDeviceNodeBalancer}); err == nil {
		t.Fatal("a second enabled firewall was attached")
	} else if st, _ := apiErr(err); st != 400 {
		t.Fatalf("a second enabled firewall: %v", err)
	}
	if _, err := lc.CreateFirewallDevice(ctx, 77, linodego.FirewallDeviceCreateOptions{ID: nb.ID, Type: linodego.FirewallDeviceNodeBalancer}); !linodego.IsNotFound(err) {
		t.Fatalf("an unknown firewall: %v", err)
	}
	devs, err := lc.ListFirewallDevices(ctx, a.ID, nil)
	if err != nil || len(devs) != 1 || devs[0].Entity.ID != nb.ID || devs[0].Entity.Type != linodego.FirewallDeviceNodeBalancer {
		t.Fatalf("devices: %+v, %v", devs, err)
	}
	if err := lc.DeleteFirewallDevice(ctx, a.ID, devs[0].ID); err != nil {
		t.Fatal(err)
	}
	if _, err := lc.CreateFirewallDevice(ctx, b.ID, linodego.FirewallDeviceCreateOptions{ID: nb.ID, Type: linodego.FirewallDeviceNodeBalancer}); err != nil {
		t.Fatal(err)
	}
	if err := lc.DeleteNodeBalancer(ctx, nb.ID); err != nil {
		t.Fatal(err)
	}
	if f, _ := c.Firewall(b.ID); len(f.Devices) != 0 {
		t.Errorf("a deleted NodeBalancer's device stayed: %+v", f.Devices)
	}
	if c.Calls(MethodFWGet) == 0 || c.Calls(MethodFWUpdate) == 0 {
		t.Errorf("calls: fw-get %d, fw-update %d", c.Calls(MethodFWGet), c.Calls(MethodFWUpdate))
	}
}

// The data plane lets through a NodeBalancer's firewall's accepted
// sources: only those, the firewall's rules changed out of band followed;
// without a firewall, all.
func TestFirewallDataPlane(t *testing.T) {
	c := NewStarted(t, Options{})
	in := c.Put(Instance{Label: "web-1", PublicIP: "127.0.96.1", PrivateIP: "127.0.95.1"})
	ln, err := net.Listen("tcp", in.PrivateIP+":0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			fmt.Fprintln(conn, "web-1")
			conn.Close()
		}
	}()
	lc := client(t, c, c.Token())
	fw := c.PutFirewall(Firewall{Inbound: []FirewallRule{{Action: "ACCEPT", Protocol: "TCP", Ports: "8080", IPv4: []string{"127.0.0.2/32"}}}})
	cf := config(8080, ln.Addr().String())
	nb, err := lc.CreateNodeBalancer(context.Background(), linodego.NodeBalancerCreateOptions{Region: "us-east", FirewallID: fw.ID,
		Configs: []*linodego.NodeBalancerConfigCreateOptions{&cf}})
	if err != nil {
		t.Fatal(err)
	}
	vip := net.JoinHostPort(*nb.IPv4, "8080")
	reaches := func(from string) bool {
		d := net.Dialer{Timeout: time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
		conn, err := d.Dial("tcp", vip)
		if err != nil {
			return false
		}
		defer conn.Close()
		_ = conn.SetReadDeadline(time.Now().Add(2 * time.Second))
		line, _ := bufio.NewReader(conn).ReadString('\n')
		return line == "web-1\n"
	}
	eventually := func(from string, want bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			if reaches(from) == want {
				return
			}
		}
		t.Fatalf("from %s: reaches %v, want %v", from, !want, want)
	}
	eventually("127.0.0.2", true)
	eventually("127.0.0.3", false)
	if err := c.ChangeFirewall(fw.ID, func(f *Firewall) { f.Inbound[0].IPv4 = append(f.Inbound[0].IPv4, "127.0.0.3") }); err != nil {
		t.Fatal(err)
	}
	eventually("127.0.0.3", true)
	devs, _ := lc.ListFirewallDevices(context.Background(), fw.ID, nil)
	if err := lc.DeleteFirewallDevice(context.Background(), fw.ID, devs[0].ID); err != nil {
		t.Fatal(err)
	}
	eventually("127.0.0.4", true)
}

// The data plane's ranges fail closed where it cannot say what a
// firewall does: a deny list, rules of some of the ports, no accept rule.
func TestFirewallRanges(t *testing.T) {
	c := NewStarted(t, Options{})
	all := []FirewallRule{{Action: "ACCEPT", Protocol: "TCP", Ports: "80,400-500", IPv4: []string{"127.0.0.2/32"}}}
	for _, tc := range []struct {
		name  string
		fw    Firewall
		ports []int
		want  []string
	}{
		{"accepted", Firewall{Inbound: all}, []int{80, 443}, []string{"127.0.0.2/32"}},
		{"some ports", Firewall{Inbound: all}, []int{80, 8080}, []string{"0.0.0.0/32"}},
		{"no rule", Firewall{}, []int{80}, []string{"0.0.0.0/32"}},
		{"deny list", Firewall{InboundPolicy: "ACCEPT", Inbound: []FirewallRule{{Action: "DROP", Protocol: "TCP", IPv4: []string{"127.0.0.9/32"}}}}, []int{80}, []string{"0.0.0.0/32"}},
		{"accept all", Firewall{InboundPolicy: "ACCEPT"}, []int{80}, nil},
		{"disabled", Firewall{Status: "disabled"}, []int{80}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := c.PutFirewall(tc.fw)
			c.mu.Lock()
			c.nb.fws[f.ID].Devices = []FirewallDevice{{ID: 1, Type: "nodebalancer", EntityID: 424242}}
			got := c.sourceRanges(424242, tc.ports)
			delete(c.nb.fws, f.ID)
			c.mu.Unlock()
			var s []string
			for _, p := range got {
				s = append(s, p.String())
			}
			if !slices.Equal(s, tc.want) {
				t.Errorf("ranges %v, want %v", s, tc.want)
			}
		})
	}
}
