package lb

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// Tests bind VIPs in 127.31.0.0/16, one address per test, and backends on
// 127.0.0.1 with ephemeral ports.

func vipPort(t *testing.T, vip string) int {
	t.Helper()
	ln, err := net.Listen("tcp", vip+":0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	return port
}

// tcpBackend answers each line with "<name>:<line>".
func tcpBackend(t *testing.T, name string) (Backend, net.Listener) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				sc := bufio.NewScanner(c)
				for sc.Scan() {
					fmt.Fprintf(c, "%s:%s\n", name, sc.Text())
				}
			}()
		}
	}()
	return Backend{Address: "127.0.0.1", Port: ln.Addr().(*net.TCPAddr).Port}, ln
}

func ask(addr, msg string, from string) (string, error) {
	d := net.Dialer{Timeout: time.Second}
	if from != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(from)}
	}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	fmt.Fprintf(c, "%s\n", msg)
	line, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(line), err
}

func newManager(t *testing.T, opts Options) *Manager {
	t.Helper()
	opts.Logf = t.Logf
	m := NewManager(opts)
	t.Cleanup(func() { m.Close() })
	return m
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if cond() {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}

func fastCheck(p Protocol) *HealthCheck {
	return &HealthCheck{Protocol: p, Interval: 30 * time.Millisecond, Timeout: 200 * time.Millisecond, UnhealthyThreshold: 1}
}

func TestValidation(t *testing.T) {
	m := newManager(t, Options{})
	good := Listener{Port: 80, Protocol: TCP, Backends: []Backend{{Address: "127.0.0.1", Port: 8080}}}
	cases := map[string]Config{
		"no name":            {VIP: "127.31.1.1", Listeners: []Listener{good}},
		"VIP not an IP":      {Name: "a", VIP: "lb.example", Listeners: []Listener{good}},
		"VIP off loopback":   {Name: "a", VIP: "10.0.0.1", Listeners: []Listener{good}},
		"port 0":             {Name: "a", VIP: "127.31.1.1", Listeners: []Listener{{Port: 0, Protocol: TCP}}},
		"port too big":       {Name: "a", VIP: "127.31.1.1", Listeners: []Listener{{Port: 70000, Protocol: TCP}}},
		"SCTP":               {Name: "a", VIP: "127.31.1.1", Listeners: []Listener{{Port: 80, Protocol: "SCTP"}}},
		"HTTP listener":      {Name: "a", VIP: "127.31.1.1", Listeners: []Listener{{Port: 80, Protocol: HTTP}}},
		"duplicate listener": {Name: "a", VIP: "127.31.1.1", Listeners: []Listener{good, good}},
		"backend off loopback": {Name: "a", VIP: "127.31.1.1", Listeners: []Listener{{Port: 80, Protocol: TCP,
			Backends: []Backend{{Address: "192.168.1.1", Port: 80}}}}},
		"backend not an IP": {Name: "a", VIP: "127.31.1.1", Listeners: []Listener{{Port: 80, Protocol: TCP,
			Backends: []Backend{{Address: "node-1", Port: 80}}}}},
		"backend port": {Name: "a", VIP: "127.31.1.1", Listeners: []Listener{{Port: 80, Protocol: TCP,
			Backends: []Backend{{Address: "127.0.0.1", Port: 0}}}}},
		"check protocol": {Name: "a", VIP: "127.31.1.1", Listeners: []Listener{{Port: 80, Protocol: TCP,
			HealthCheck: &HealthCheck{Protocol: UDP}}}},
		"negative interval": {Name: "a", VIP: "127.31.1.1", Listeners: []Listener{{Port: 80, Protocol: TCP,
			HealthCheck: &HealthCheck{Protocol: TCP, Interval: -time.Second}}}},
		"bad source range": {Name: "a", VIP: "127.31.1.1", Listeners: []Listener{good}, SourceRanges: []netip.Prefix{{}}},
	}
	for name, cfg := range cases {
		if err := m.Apply(cfg); err == nil {
			t.Errorf("%s: accepted", name)
		} else if !strings.Contains(err.Error(), "lb") {
			t.Errorf("%s: unclear error %v", name, err)
		}
	}
	if _, ok := m.Status("a"); ok {
		t.Fatal("a refused config left a load balancer behind")
	}
}

func TestTCPRoundRobinAndHealthChecks(t *testing.T) {
	const vip = "127.31.2.1"
	m := newManager(t, Options{})
	b1, ln1 := tcpBackend(t, "one")
	b2, _ := tcpBackend(t, "two")
	port := vipPort(t, vip)
	addr := net.JoinHostPort(vip, fmt.Sprint(port))
	cfg := Config{Name: "rr", VIP: vip, Listeners: []Listener{{Port: port, Protocol: TCP, Backends: []Backend{b1, b2}, HealthCheck: fastCheck(TCP)}}}
	if err := m.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	eventually(t, "both backends healthy", func() bool {
		st, _ := m.Status("rr")
		return st.Listeners[0].Backends[0].Healthy && st.Listeners[0].Backends[1].Healthy
	})
	seen := map[string]int{}
	for i := range 6 {
		got, err := ask(addr, fmt.Sprint(i), "")
		if err != nil {
			t.Fatal(err)
		}
		seen[strings.Split(got, ":")[0]]++
	}
	if seen["one"] != 3 || seen["two"] != 3 {
		t.Fatalf("round robin: %v", seen)
	}

	// Backend one dies: its health check fails and it leaves the rotation.
	ln1.Close()
	eventually(t, "backend one unhealthy", func() bool {
		st, _ := m.Status("rr")
		return !st.Listeners[0].Backends[0].Healthy && st.Listeners[0].Backends[0].LastError != ""
	})
	for i := range 4 {
		got, err := ask(addr, fmt.Sprint(i), "")
		if err != nil || !strings.HasPrefix(got, "two:") {
			t.Fatalf("after backend one failed: %q, %v", got, err)
		}
	}
}

func TestHTTPHealthCheck(t *testing.T) {
	const vip = "127.31.3.1"
	m := newManager(t, Options{})
	var healthy atomic.Bool
	hsrv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" && healthy.Load() {
			w.WriteHeader(http.StatusOK)
			return
		}
		w.WriteHeader(http.StatusInternalServerError)
	})}
	hln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go hsrv.Serve(hln)
	t.Cleanup(func() { hsrv.Close() })
	b, _ := tcpBackend(t, "web")
	check := fastCheck(HTTP)
	check.Port, check.Path = hln.Addr().(*net.TCPAddr).Port, "/healthz"
	port := vipPort(t, vip)
	if err := m.Apply(Config{Name: "h", VIP: vip, Listeners: []Listener{{Port: port, Protocol: TCP, Backends: []Backend{b}, HealthCheck: check}}}); err != nil {
		t.Fatal(err)
	}
	status := func() BackendStatus { st, _ := m.Status("h"); return st.Listeners[0].Backends[0] }
	eventually(t, "a 500 marks the backend unhealthy", func() bool { return strings.Contains(status().LastError, "500") })
	if _, err := ask(net.JoinHostPort(vip, fmt.Sprint(port)), "x", ""); err == nil {
		t.Fatal("traffic reached an unhealthy backend")
	}
	healthy.Store(true)
	eventually(t, "a 200 marks it healthy", func() bool { return status().Healthy })
	if got, err := ask(net.JoinHostPort(vip, fmt.Sprint(port)), "x", ""); err != nil || got != "web:x" {
		t.Fatalf("after recovery: %q, %v", got, err)
	}
}

func udpEcho(t *testing.T, name string) Backend {
	t.Helper()
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP("127.0.0.1")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	go func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := c.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			_, _ = c.WriteToUDPAddrPort([]byte(name+":"+string(buf[:n])), from)
		}
	}()
	return Backend{Address: "127.0.0.1", Port: c.LocalAddr().(*net.UDPAddr).Port}
}

func udpAsk(t *testing.T, c *net.UDPConn, msg string) string {
	t.Helper()
	if _, err := c.Write([]byte(msg)); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	buf := make([]byte, 2048)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatalf("UDP reply to %q: %v", msg, err)
	}
	return string(buf[:n])
}

func TestUDPSessions(t *testing.T) {
	const vip = "127.31.4.1"
	m := newManager(t, Options{UDPIdleTimeout: 200 * time.Millisecond})
	b := udpEcho(t, "dns")
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP(vip)})
	if err != nil {
		t.Fatal(err)
	}
	port := c.LocalAddr().(*net.UDPAddr).Port
	c.Close()
	if err := m.Apply(Config{Name: "u", VIP: vip, Listeners: []Listener{{Port: port, Protocol: UDP, Backends: []Backend{b}}}}); err != nil {
		t.Fatal(err)
	}
	target := &net.UDPAddr{IP: net.ParseIP(vip), Port: port}
	c1, err := net.DialUDP("udp", nil, target)
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	c2, err := net.DialUDP("udp", nil, target)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if got := udpAsk(t, c1, "a"); got != "dns:a" {
		t.Fatalf("client 1: %q", got)
	}
	if got := udpAsk(t, c2, "b"); got != "dns:b" {
		t.Fatalf("client 2: %q", got)
	}
	ln := m.lbs["u"].listeners[listenerKey{port, UDP}]
	sessions := func() int { ln.mu.Lock(); defer ln.mu.Unlock(); return len(ln.conns) }
	if n := sessions(); n != 2 {
		t.Fatalf("%d sessions, want 2", n)
	}
	eventually(t, "idle sessions to close", func() bool { return sessions() == 0 })
	if got := udpAsk(t, c1, "again"); got != "dns:again" {
		t.Fatalf("after idle expiry: %q", got)
	}
}

func TestSourceRanges(t *testing.T) {
	const vip = "127.31.5.1"
	m := newManager(t, Options{})
	b, _ := tcpBackend(t, "s")
	port := vipPort(t, vip)
	addr := net.JoinHostPort(vip, fmt.Sprint(port))
	if err := m.Apply(Config{Name: "s", VIP: vip, Listeners: []Listener{{Port: port, Protocol: TCP, Backends: []Backend{b}}},
		SourceRanges: []netip.Prefix{netip.MustParsePrefix("127.0.0.2/32")}}); err != nil {
		t.Fatal(err)
	}
	if got, err := ask(addr, "no", "127.0.0.1"); err == nil {
		t.Fatalf("a client outside the ranges got %q", got)
	}
	if got, err := ask(addr, "yes", "127.0.0.2"); err != nil || got != "s:yes" {
		t.Fatalf("a client inside the ranges: %q, %v", got, err)
	}
}

func TestUpdateKeepsOpenConnectionsAndRollsBack(t *testing.T) {
	const vip = "127.31.6.1"
	m := newManager(t, Options{})
	b1, _ := tcpBackend(t, "old")
	b2, _ := tcpBackend(t, "new")
	port := vipPort(t, vip)
	addr := net.JoinHostPort(vip, fmt.Sprint(port))
	cfg := Config{Name: "up", VIP: vip, Listeners: []Listener{{Port: port, Protocol: TCP, Backends: []Backend{b1}}}}
	if err := m.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	open, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()
	r := bufio.NewReader(open)
	fmt.Fprintf(open, "1\n")
	if line, _ := r.ReadString('\n'); line != "old:1\n" {
		t.Fatalf("open connection: %q", line)
	}

	cfg.Listeners[0].Backends = []Backend{b2}
	if err := m.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(open, "2\n")
	if line, _ := r.ReadString('\n'); line != "old:2\n" {
		t.Fatalf("open connection after the update: %q", line)
	}
	if got, _ := ask(addr, "3", ""); got != "new:3" {
		t.Fatalf("new connection after the update: %q", got)
	}

	// A new listener whose port is taken: Apply fails and changes nothing.
	busy, err := net.Listen("tcp", vip+":0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	bad := cfg
	bad.Listeners = append([]Listener{}, cfg.Listeners...)
	bad.Listeners[0].Backends = []Backend{b1}
	bad.Listeners = append(bad.Listeners, Listener{Port: busy.Addr().(*net.TCPAddr).Port, Protocol: TCP, Backends: []Backend{b1}})
	if err := m.Apply(bad); err == nil {
		t.Fatal("Apply succeeded on a busy port")
	}
	if got, _ := ask(addr, "4", ""); got != "new:4" {
		t.Fatalf("after a failed update: %q", got)
	}
	if st, _ := m.Status("up"); len(st.Listeners) != 1 {
		t.Fatalf("failed update left %d listeners", len(st.Listeners))
	}
}

func TestRemoveAndCloseLeakNothing(t *testing.T) {
	const vip = "127.31.7.1"
	before := runtime.NumGoroutine()
	m := NewManager(Options{UDPIdleTimeout: time.Minute})
	b, _ := tcpBackend(t, "x")
	u := udpEcho(t, "y")
	port := vipPort(t, vip)
	cfg := Config{Name: "r", VIP: vip, Listeners: []Listener{
		{Port: port, Protocol: TCP, Backends: []Backend{b}, HealthCheck: fastCheck(TCP)},
		{Port: port, Protocol: UDP, Backends: []Backend{u}},
	}}
	if err := m.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort(vip, fmt.Sprint(port))
	eventually(t, "healthy", func() bool { got, _ := ask(addr, "1", ""); return got == "x:1" })
	idle, err := net.Dial("tcp", addr) // an open connection Remove must close
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	uc, _ := net.DialUDP("udp", nil, &net.UDPAddr{IP: net.ParseIP(vip), Port: port})
	defer uc.Close()
	udpAsk(t, uc, "u")

	if err := m.Remove("r"); err != nil {
		t.Fatal(err)
	}
	if _, err := net.DialTimeout("tcp", addr, 200*time.Millisecond); err == nil {
		t.Fatal("VIP still accepts after Remove")
	}
	_ = idle.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := idle.Read(make([]byte, 1)); err == nil {
		t.Fatal("open connection survived Remove")
	}
	if err := m.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	m.Close()
	if _, err := net.DialTimeout("tcp", addr, 200*time.Millisecond); err == nil {
		t.Fatal("VIP still accepts after Close")
	}
	eventually(t, "goroutines to end", func() bool { return runtime.NumGoroutine() <= before+3 })
}
