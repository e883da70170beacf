package linodetest

import (
	"slices"
	"strconv"
)

// The request bodies (the documented fields; linodego's options).
type nbCreateBody struct {
	Label                 *string      `json:"label"`
	Region                string       `json:"region"`
	ClientConnThrottle    *int         `json:"client_conn_throttle"`
	ClientUDPSessThrottle *int         `json:"client_udp_sess_throttle"`
	Configs               []configBody `json:"configs"`
	Tags                  []string     `json:"tags"`
	FirewallID            int          `json:"firewall_id"`
	Type                  string       `json:"type"`
	VPCs                  []vpcBody    `json:"vpcs"`
}

type nbUpdateBody struct {
	Label                 *string   `json:"label"`
	ClientConnThrottle    *int      `json:"client_conn_throttle"`
	ClientUDPSessThrottle *int      `json:"client_udp_sess_throttle"`
	Tags                  *[]string `json:"tags"`
}

type configBody struct {
	Port          int        `json:"port"`
	Protocol      string     `json:"protocol"`
	ProxyProtocol string     `json:"proxy_protocol"`
	Algorithm     string     `json:"algorithm"`
	Stickiness    string     `json:"stickiness"`
	Check         string     `json:"check"`
	CheckInterval int        `json:"check_interval"`
	CheckAttempts int        `json:"check_attempts"`
	CheckPath     string     `json:"check_path"`
	CheckBody     string     `json:"check_body"`
	CheckPassive  *bool      `json:"check_passive"`
	CheckTimeout  int        `json:"check_timeout"`
	UDPCheckPort  *int       `json:"udp_check_port"`
	CipherSuite   string     `json:"cipher_suite"`
	SSLCert       string     `json:"ssl_cert"`
	SSLKey        string     `json:"ssl_key"`
	Nodes         []nodeBody `json:"nodes"`
}

type nodeBody struct {
	ID       int    `json:"id"`
	Address  string `json:"address"`
	Label    string `json:"label"`
	Weight   int    `json:"weight"`
	Mode     string `json:"mode"`
	SubnetID int    `json:"subnet_id"`
}

// The objects as the API shows them.
type wireNB struct {
	ID                    int       `json:"id"`
	Label                 string    `json:"label"`
	Region                string    `json:"region"`
	Hostname              string    `json:"hostname"`
	IPv4                  string    `json:"ipv4"`
	IPv6                  *string   `json:"ipv6"`
	ClientConnThrottle    int       `json:"client_conn_throttle"`
	ClientUDPSessThrottle int       `json:"client_udp_sess_throttle"`
	Transfer              wireXfer  `json:"transfer"`
	Type                  string    `json:"type"`
	Tags                  []string  `json:"tags"`
	Created               string    `json:"created"`
	Updated               string    `json:"updated"`
	LKECluster            *struct{} `json:"lke_cluster"`
	Locks                 []string  `json:"locks"`
	FrontendAddressType   string    `json:"frontend_address_type"`
	FrontendVPCSubnetID   *int      `json:"frontend_vpc_subnet_id"`
}

type wireXfer struct {
	Total *float64 `json:"total"`
	Out   *float64 `json:"out"`
	In    *float64 `json:"in"`
}

func wireNodeBalancer(n NodeBalancer) wireNB {
	tags := slices.Clone(n.Tags)
	if tags == nil {
		tags = []string{}
	}
	created := n.Created.UTC().Format(timeLayout)
	return wireNB{ID: n.ID, Label: n.Label, Region: n.Region, Hostname: n.Hostname, IPv4: n.IPv4,
		ClientConnThrottle: n.Throttle, Type: n.Type, Tags: tags, Created: created, Updated: created, Locks: []string{},
		FrontendAddressType: "public"}
}

type wireConfig struct {
	ID                int        `json:"id"`
	Port              int        `json:"port"`
	Protocol          string     `json:"protocol"`
	ProxyProtocol     string     `json:"proxy_protocol"`
	Algorithm         string     `json:"algorithm"`
	Stickiness        string     `json:"stickiness"`
	Check             string     `json:"check"`
	CheckInterval     int        `json:"check_interval"`
	CheckAttempts     int        `json:"check_attempts"`
	CheckPath         string     `json:"check_path"`
	CheckBody         string     `json:"check_body"`
	CheckPassive      bool       `json:"check_passive"`
	CheckTimeout      int        `json:"check_timeout"`
	UDPCheckPort      int        `json:"udp_check_port"`
	UDPSessionTimeout int        `json:"udp_session_timeout"`
	CipherSuite       string     `json:"cipher_suite"`
	NodeBalancerID    int        `json:"nodebalancer_id"`
	SSLCommonName     string     `json:"ssl_commonname"`
	SSLFingerprint    string     `json:"ssl_fingerprint"`
	SSLCert           *string    `json:"ssl_cert"`
	SSLKey            *string    `json:"ssl_key"`
	NodesStatus       wireUpDown `json:"nodes_status"`
}

type wireUpDown struct {
	Up   int `json:"up"`
	Down int `json:"down"`
}

// wireConfig: ssl_cert and ssl_key show as <REDACTED> when set, as the
// API shows them; nodes_status counts the data plane's healthy nodes
// (under c.mu).
func (c *Cloud) wireConfig(nbID int, cf NBConfig) wireConfig {
	var cert, key *string
	if cf.SSLCert != "" {
		r := "<REDACTED>"
		cert, key = &r, &r
	}
	up := c.nb.plane.Healthy(strconv.Itoa(nbID))[cf.Port]
	cipher := "recommended"
	if cf.Protocol == "udp" {
		cipher = "none"
	}
	return wireConfig{ID: cf.ID, Port: cf.Port, Protocol: cf.Protocol, ProxyProtocol: cf.ProxyProtocol, Algorithm: cf.Algorithm,
		Stickiness: cf.Stickiness, Check: cf.Check, CheckInterval: cf.CheckInterval, CheckAttempts: cf.CheckAttempts,
		CheckPath: cf.CheckPath, CheckBody: cf.CheckBody, CheckPassive: cf.CheckPassive, CheckTimeout: cf.CheckTimeout,
		UDPCheckPort: cf.UDPCheckPort, UDPSessionTimeout: 16, CipherSuite: cipher, NodeBalancerID: nbID,
		SSLCommonName: cf.SSLCommonName, SSLFingerprint: cf.SSLFingerprint,
		SSLCert: cert, SSLKey: key, NodesStatus: wireUpDown{Up: up, Down: len(cf.Nodes) - up}}
}

type wireNode struct {
	ID             int    `json:"id"`
	Address        string `json:"address"`
	Label          string `json:"label"`
	Status         string `json:"status"`
	Weight         int    `json:"weight"`
	Mode           string `json:"mode"`
	ConfigID       int    `json:"config_id"`
	NodeBalancerID int    `json:"nodebalancer_id"`
	VPCConfigID    *int   `json:"vpc_config_id"`
}

func (c *Cloud) wireNode(n NodeBalancer, cf NBConfig, nd NBNode) wireNode {
	nbID := n.ID
	status := "Unknown"
	if cf.Check != "none" {
		status = "DOWN"
		if c.nb.plane.Healthy(strconv.Itoa(nbID))[cf.Port] > 0 {
			// The data plane counts healthy nodes per port, not which.
			status = "UP"
		}
	}
	return wireNode{ID: nd.ID, Address: nd.Address, Label: nd.Label, Status: status, Weight: nd.Weight, Mode: nd.Mode,
		ConfigID: cf.ID, NodeBalancerID: nbID, VPCConfigID: vpcConfigID(n, nd.SubnetID)}
}
