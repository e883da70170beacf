package testbed

import (
	"fmt"
	"net"
	"strconv"
)

// FreePorts returns n distinct free ports on host.
func FreePorts(host string, n int) ([]int, error) {
	// Hold every listener until all are chosen so no port repeats.
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			return nil, fmt.Errorf("find a free port on %s: %w", host, err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// checkLoopback refuses any address outside 127.0.0.0/8: the test bed never
// gives a node an address that kube-apiserver could reach off this machine.
func checkLoopback(addr string) error {
	ip := net.ParseIP(addr)
	if ip == nil || ip.To4() == nil || !ip.IsLoopback() {
		return fmt.Errorf("address %q is not an IPv4 loopback address (127.0.0.0/8)", addr)
	}
	return nil
}

func hostPort(host string, port int) string { return net.JoinHostPort(host, strconv.Itoa(port)) }
