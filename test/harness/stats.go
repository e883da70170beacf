package harness

import (
	"bufio"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"
)

// CallsString lists cloud API calls by operation, largest first ("none"
// for no calls): for figures in logs and result tables.
func CallsString(m map[string]int64) string {
	ops := make([]string, 0, len(m))
	for op := range m {
		ops = append(ops, op)
	}
	slices.SortFunc(ops, func(a, b string) int {
		if m[a] != m[b] {
			return int(m[b] - m[a])
		}
		return strings.Compare(a, b)
	})
	parts := make([]string, 0, len(ops))
	for _, op := range ops {
		parts = append(parts, fmt.Sprintf("%s %d", op, m[op]))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// ServeLine answers every connection ln accepts with line and a newline,
// then closes it, until ln is closed: the "pod" behind a load balancer in
// the tests.
func ServeLine(ln net.Listener, line string) {
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			fmt.Fprintf(conn, "%s\n", line)
			conn.Close()
		}
	}()
}

// FirstLine is the first line (trimmed) read from a TCP connection to addr,
// or "" when the connection or the read fails within a few seconds.
func FirstLine(addr string) string {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return ""
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
	line, _ := bufio.NewReader(conn).ReadString('\n')
	return strings.TrimSpace(line)
}
