package linodetest

import (
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strings"
)

// The checks of NodeBalancer requests, each refusal a 400 naming its
// field.

// invalid is a 400's field and reason.
type invalid struct{ field, reason string }

func (e *invalid) Error() string { return e.field + ": " + e.reason }

func bad(field, format string, args ...any) *invalid {
	return &invalid{field: field, reason: fmt.Sprintf(format, args...)}
}

var labelRE = regexp.MustCompile(`^[A-Za-z0-9](?:[A-Za-z0-9_.-]*[A-Za-z0-9])?$`)

// checkLabel: 3-32 characters, letters, digits, -, _ and ., beginning and
// ending with a letter or digit, no two of -, _ and . in a row.
func checkLabel(field, label string) *invalid {
	if len(label) < 3 || len(label) > 32 {
		return bad(field, "Length must be 3-32 characters")
	}
	if !labelRE.MatchString(label) || strings.Contains(label, "--") || strings.Contains(label, "__") || strings.Contains(label, "..") {
		return bad(field, "Must begin and end with an alphanumeric character, and contain only alphanumeric characters, dashes, underscores and periods, without two of these in a row")
	}
	return nil
}

func checkTags(tags []string) *invalid {
	for i, t := range tags {
		if len(t) < 3 || len(t) > 50 {
			return bad(fmt.Sprintf("tags[%d]", i), "Length must be 3-50 characters")
		}
	}
	return nil
}

func checkThrottle(field string, v *int) *invalid {
	if v != nil && (*v < 0 || *v > 20) {
		return bad(field, "Must be between 0 and 20")
	}
	return nil
}

// checkSettings checks a NodeBalancer's throttles and tags (create and
// update).
func checkSettings(connThrottle, udpThrottle *int, tags []string) *invalid {
	if err := checkThrottle("client_conn_throttle", connThrottle); err != nil {
		return err
	}
	if err := checkThrottle("client_udp_sess_throttle", udpThrottle); err != nil {
		return err
	}
	return checkTags(tags)
}

var (
	tcpAlgorithms  = []string{"roundrobin", "leastconn", "source"}
	udpAlgorithms  = []string{"roundrobin", "leastconn", "ring_hash"}
	tcpStickiness  = []string{"none", "table", "http_cookie"}
	udpStickiness  = []string{"none", "session", "source_ip"}
	checks         = []string{"none", "connection", "http", "http_body"}
	protocols      = []string{"http", "https", "tcp", "udp"}
	proxyProtocols = []string{"none", "v1", "v2"}
	nodeModes      = []string{"accept", "reject", "drain", "backup"}
)

// config checks a config body (prefix names its place in the request:
// "configs[0]." or "") and makes it; the nodes are checked by nodes.
func (c *Cloud) config(prefix string, b configBody, withNodes bool) (NBConfig, *invalid) {
	cf := NBConfig{Port: b.Port, Protocol: cmpOr(b.Protocol, "http"), ProxyProtocol: cmpOr(b.ProxyProtocol, "none"),
		Algorithm: cmpOr(b.Algorithm, "roundrobin"), Check: cmpOr(b.Check, "none"), CheckPath: b.CheckPath, CheckBody: b.CheckBody,
		CheckInterval: b.CheckInterval, CheckTimeout: b.CheckTimeout, CheckAttempts: b.CheckAttempts, CheckPassive: b.Protocol != "udp",
		UDPCheckPort: 80, SSLCert: b.SSLCert, SSLKey: b.SSLKey}
	if cf.CheckInterval == 0 {
		cf.CheckInterval = defaultCheckInterval
	}
	if cf.CheckTimeout == 0 {
		cf.CheckTimeout = min(defaultCheckTimeout, cf.CheckInterval-1)
	}
	if cf.CheckAttempts == 0 {
		cf.CheckAttempts = defaultCheckAttempts
	}
	if b.CheckPassive != nil {
		cf.CheckPassive = *b.CheckPassive
	}
	if b.UDPCheckPort != nil {
		cf.UDPCheckPort = *b.UDPCheckPort
	}
	switch {
	case cf.Port < 1 || cf.Port > 65535:
		return cf, bad(prefix+"port", "Must be between 1 and 65535")
	case !slices.Contains(protocols, cf.Protocol):
		return cf, bad(prefix+"protocol", "Must be one of %s", strings.Join(protocols, ", "))
	case !slices.Contains(proxyProtocols, cf.ProxyProtocol):
		return cf, bad(prefix+"proxy_protocol", "Must be one of %s", strings.Join(proxyProtocols, ", "))
	case cf.ProxyProtocol != "none" && cf.Protocol != "tcp":
		return cf, bad(prefix+"proxy_protocol", "Proxy Protocol is only available for the tcp protocol")
	case !slices.Contains(checks, cf.Check):
		return cf, bad(prefix+"check", "Must be one of %s", strings.Join(checks, ", "))
	case cf.CheckInterval < 2 || cf.CheckInterval > 3600:
		return cf, bad(prefix+"check_interval", "Must be between 2 and 3600")
	case cf.CheckTimeout < 1 || cf.CheckTimeout > 30:
		return cf, bad(prefix+"check_timeout", "Must be between 1 and 30")
	case cf.CheckTimeout >= cf.CheckInterval:
		return cf, bad(prefix+"check_timeout", "Must be less than check_interval")
	case cf.CheckAttempts < 1 || cf.CheckAttempts > 30:
		return cf, bad(prefix+"check_attempts", "Must be between 1 and 30")
	case (cf.Check == "http" || cf.Check == "http_body") && !strings.HasPrefix(cf.CheckPath, "/"):
		return cf, bad(prefix+"check_path", "Must begin with /")
	case cf.Check == "http_body" && cf.CheckBody == "":
		return cf, bad(prefix+"check_body", "Required for check http_body")
	case cf.Protocol == "https" && (cf.SSLCert == "" || cf.SSLKey == ""):
		return cf, bad(prefix+"ssl_cert", "Required for protocol https")
	case cf.Protocol != "https" && (cf.SSLCert != "" || cf.SSLKey != ""):
		return cf, bad(prefix+"ssl_cert", "Only allowed for protocol https")
	case cf.UDPCheckPort < 1 || cf.UDPCheckPort > 65535:
		return cf, bad(prefix+"udp_check_port", "Must be between 1 and 65535")
	case cf.Protocol == "udp" && cf.CheckPassive:
		return cf, bad(prefix+"check_passive", "Must be false for protocol udp")
	case b.CipherSuite != "" && b.CipherSuite != "recommended" && b.CipherSuite != "legacy":
		return cf, bad(prefix+"cipher_suite", "Must be one of recommended, legacy")
	}
	if cf.Protocol == "https" {
		cn, fp, err := checkTLS(prefix, cf.SSLCert, cf.SSLKey)
		if err != nil {
			return cf, err
		}
		cf.SSLCommonName, cf.SSLFingerprint = cn, fp
	}
	if cf.Protocol == "udp" {
		if !slices.Contains(udpAlgorithms, cf.Algorithm) {
			return cf, bad(prefix+"algorithm", "Must be one of %s for protocol udp", strings.Join(udpAlgorithms, ", "))
		}
		cf.Stickiness = cmpOr(b.Stickiness, "session")
		if !slices.Contains(udpStickiness, cf.Stickiness) {
			return cf, bad(prefix+"stickiness", "Must be one of %s for protocol udp", strings.Join(udpStickiness, ", "))
		}
	} else {
		if !slices.Contains(tcpAlgorithms, cf.Algorithm) {
			return cf, bad(prefix+"algorithm", "Must be one of %s", strings.Join(tcpAlgorithms, ", "))
		}
		cf.Stickiness = cmpOr(b.Stickiness, defaultStickiness(cf.Protocol))
		if !slices.Contains(tcpStickiness, cf.Stickiness) || cf.Protocol == "tcp" && cf.Stickiness == "http_cookie" {
			return cf, bad(prefix+"stickiness", "Not valid for protocol %s", cf.Protocol)
		}
	}
	if !withNodes && b.Nodes != nil {
		return cf, bad(prefix+"nodes", "Not allowed here")
	}
	nodes, err := c.nodes(prefix, cf.Protocol, b.Nodes)
	if err != nil {
		return cf, err
	}
	cf.Nodes = nodes
	return cf, nil
}

// nodes checks a config's nodes: address ip:port, the ip a Linode's
// private address (the endpoint's stand-in for 192.168.128.0/17), label
// 3-32 characters, weight 1-255, mode.
func (c *Cloud) nodes(prefix, protocol string, bs []nodeBody) ([]NBNode, *invalid) {
	out := make([]NBNode, 0, len(bs))
	seen := map[string]bool{}
	for i, b := range bs {
		f := fmt.Sprintf("%snodes[%d].", prefix, i)
		ap, err := netip.ParseAddrPort(b.Address)
		switch {
		case err != nil || !ap.Addr().Is4():
			return nil, bad(f+"address", "Must be a valid IPv4 address and port, such as 192.168.255.255:80")
		case b.SubnetID == 0 && !c.privateAddress(ap.Addr().String()):
			return nil, bad(f+"address", "Must be a private IPv4 address")
		case b.SubnetID != 0 && !c.subnetExists(b.SubnetID):
			return nil, bad(f+"subnet_id", "Subnet not found")
		case b.SubnetID != 0 && !c.inSubnet(ap.Addr().String(), b.SubnetID):
			return nil, bad(f+"address", "Must be an address of a Linode in subnet %d", b.SubnetID)
		case seen[b.Address]:
			return nil, bad(f+"address", "Each node must have a unique address")
		}
		if err := checkLabel(f+"label", b.Label); err != nil {
			return nil, err
		}
		if b.Weight != 0 && (b.Weight < 1 || b.Weight > 255) {
			return nil, bad(f+"weight", "Must be between 1 and 255")
		}
		if b.Mode != "" && !slices.Contains(nodeModes, b.Mode) {
			return nil, bad(f+"mode", "Must be one of %s", strings.Join(nodeModes, ", "))
		}
		mode := b.Mode
		if mode == "" && protocol != "udp" {
			mode = "accept"
		}
		seen[b.Address] = true
		out = append(out, NBNode{ID: b.ID, Address: ap.String(), Label: b.Label, Weight: max(b.Weight, 100), Mode: mode, SubnetID: b.SubnetID})
		if b.Weight != 0 {
			out[len(out)-1].Weight = b.Weight
		}
	}
	return out, nil
}

// privateAddress: a private address of one of the account's Linodes.
func (c *Cloud) privateAddress(ip string) bool {
	found := false
	c.instances.List(func(in *Instance) bool {
		if in.PrivateIP == ip {
			found = true
		}
		return false
	})
	return found
}

// checkNewLabel checks a NodeBalancer's new label: its form, and that no
// other than except has it (under c.mu).
func (c *Cloud) checkNewLabel(label string, except int) *invalid {
	if err := checkLabel("label", label); err != nil {
		return err
	}
	for id, n := range c.nb.byID {
		if id != except && n.Label == label {
			return bad("label", "Label must be unique among your NodeBalancers")
		}
	}
	return nil
}

// portTaken says whether a config other than the one at except uses port.
func portTaken(configs []NBConfig, port, except int) bool {
	for j, o := range configs {
		if j != except && o.Port == port {
			return true
		}
	}
	return false
}
