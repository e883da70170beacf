package cloudtest

import (
	"bufio"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"
)

// ServeName listens on addr (host:port; port 0 picks one) as a test's
// backend behind a load balancer: each connection is answered with name
// and a newline, then closed. The listener is closed when the test ends.
func ServeName(t testing.TB, addr, name string) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			fmt.Fprintln(conn, name)
			conn.Close()
		}
	}()
	return ln
}

// Ask is the first line (trimmed of white space) that a connection to addr
// answers, trying again until within has passed (a load balancer sends
// nothing until its health checks pass); the test fails when none came.
func Ask(t testing.TB, addr string, within time.Duration) string {
	t.Helper()
	var last error
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			last = err
			continue
		}
		_ = conn.SetReadDeadline(time.Now().Add(time.Second))
		line, err := bufio.NewReader(conn).ReadString('\n')
		conn.Close()
		if err == nil {
			return strings.TrimSpace(line)
		}
		last = err
	}
	t.Fatalf("no answer through %s: %v", addr, last)
	return ""
}
