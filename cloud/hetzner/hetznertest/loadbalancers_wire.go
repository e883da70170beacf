package hetznertest

import (
	"encoding/json"
	"errors"
	"maps"
	"slices"
)

// The Cloud API's load balancer object (hcloud-go's schema.LoadBalancer);
// values the endpoint does not model are fixed.
type wireLoadBalancer struct {
	ID               int64              `json:"id"`
	Name             string             `json:"name"`
	PublicNet        wireLBPublicNet    `json:"public_net"`
	PrivateNet       []wireLBPrivateNet `json:"private_net"`
	Location         wireLocation       `json:"location"`
	LoadBalancerType wireLBType         `json:"load_balancer_type"`
	Protection       struct {
		Delete bool `json:"delete"`
	} `json:"protection"`
	Labels    map[string]string `json:"labels"`
	Created   string            `json:"created"`
	Services  []LBService       `json:"services"`
	Targets   []wireLBTarget    `json:"targets"`
	Algorithm struct {
		Type string `json:"type"`
	} `json:"algorithm"`
	IncludedTraffic uint64  `json:"included_traffic"`
	OutgoingTraffic *uint64 `json:"outgoing_traffic"`
	IngoingTraffic  *uint64 `json:"ingoing_traffic"`
}

type wireLBPublicNet struct {
	Enabled bool       `json:"enabled"`
	IPv4    wireLBAddr `json:"ipv4"`
	IPv6    wireLBAddr `json:"ipv6"`
}

type wireLBAddr struct {
	IP     *string `json:"ip"`
	DNSPtr *string `json:"dns_ptr"`
}

type wireLBPrivateNet struct {
	Network int64  `json:"network"`
	IP      string `json:"ip"`
}

type wireLBType struct {
	ID                      int64   `json:"id"`
	Name                    string  `json:"name"`
	Description             string  `json:"description"`
	MaxConnections          int     `json:"max_connections"`
	MaxServices             int     `json:"max_services"`
	MaxTargets              int     `json:"max_targets"`
	MaxAssignedCertificates int     `json:"max_assigned_certificates"`
	Deprecated              *string `json:"deprecated"`
	Prices                  []any   `json:"prices"`
}

type wireLBTarget struct {
	Type   string `json:"type"`
	Server struct {
		ID int64 `json:"id"`
	} `json:"server"`
	HealthStatus []wireLBHealthStatus `json:"health_status"`
	UsePrivateIP bool                 `json:"use_private_ip"`
}

type wireLBHealthStatus struct {
	ListenPort int    `json:"listen_port"`
	Status     string `json:"status"` // healthy, unhealthy, unknown
}

func strPtr(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// wireLB is a load balancer as the API shows it.
func wireLB(l LoadBalancer) wireLoadBalancer {
	return wireLBHealth(l, nil)
}

// wireLBHealth is wireLB with its targets' health per listen port, from
// the data plane (nil: unknown).
func wireLBHealth(l LoadBalancer, healthy func(server int64, port int) string) wireLoadBalancer {
	t := LBTypes[l.Type]
	out := wireLoadBalancer{ID: l.ID, Name: l.Name, Location: location(l.Location),
		LoadBalancerType: wireLBType{ID: t.ID, Name: l.Type, Description: l.Type, MaxConnections: 10_000 * int(t.ID),
			MaxServices: t.MaxServices, MaxTargets: t.MaxTargets, MaxAssignedCertificates: t.MaxCertificates, Prices: []any{}},
		Labels: maps.Clone(l.Labels), Created: l.Created.UTC().Format(createdLayout),
		Services: slices.Clone(l.Services), PrivateNet: []wireLBPrivateNet{}, Targets: []wireLBTarget{},
		IncludedTraffic: 21990232555520}
	out.Protection.Delete = l.Protected
	out.Algorithm.Type = l.Algorithm
	out.PublicNet = wireLBPublicNet{Enabled: l.Public,
		IPv4: wireLBAddr{IP: strPtr(l.IPv4)}, IPv6: wireLBAddr{IP: strPtr(l.IPv6)}}
	if l.IPv4 != "" {
		out.PublicNet.IPv4.DNSPtr = strPtr(reverseDNS(l.IPv4))
	}
	if out.Labels == nil {
		out.Labels = map[string]string{}
	}
	if out.Services == nil {
		out.Services = []LBService{}
	}
	if l.Network != 0 {
		out.PrivateNet = append(out.PrivateNet, wireLBPrivateNet{Network: l.Network, IP: l.PrivateIP})
	}
	for _, tg := range l.Targets {
		wt := wireLBTarget{Type: "server", UsePrivateIP: tg.UsePrivateIP, HealthStatus: []wireLBHealthStatus{}}
		wt.Server.ID = tg.Server
		for _, s := range l.Services {
			st := "unknown"
			if healthy != nil {
				st = healthy(tg.Server, s.ListenPort)
			}
			wt.HealthStatus = append(wt.HealthStatus, wireLBHealthStatus{ListenPort: s.ListenPort, Status: st})
		}
		out.Targets = append(out.Targets, wt)
	}
	return out
}

// Close stops the API, the metadata services and the load balancers' data
// plane.
func (c *Cloud) Close() error {
	return errors.Join(c.Base.Close(), c.closeLBs())
}

// Request bodies (the fields hcloud-go sends).
type (
	reqHealthCheckHTTP struct {
		Domain      *string   `json:"domain"`
		Path        *string   `json:"path"`
		Response    *string   `json:"response"`
		StatusCodes *[]string `json:"status_codes"`
		TLS         *bool     `json:"tls"`
	}
	reqHealthCheck struct {
		Protocol *string             `json:"protocol"`
		Port     *int                `json:"port"`
		Interval *int                `json:"interval"`
		Timeout  *int                `json:"timeout"`
		Retries  *int                `json:"retries"`
		HTTP     *reqHealthCheckHTTP `json:"http"`
	}
	reqHTTP struct {
		CookieName     *string  `json:"cookie_name"`
		CookieLifetime *int     `json:"cookie_lifetime"`
		Certificates   *[]int64 `json:"certificates"`
		RedirectHTTP   *bool    `json:"redirect_http"`
		StickySessions *bool    `json:"sticky_sessions"`
		TimeoutIdle    *int     `json:"timeout_idle"`
	}
	reqService struct {
		Protocol        *string         `json:"protocol"`
		ListenPort      *int            `json:"listen_port"`
		DestinationPort *int            `json:"destination_port"`
		Proxyprotocol   *bool           `json:"proxyprotocol"`
		HTTP            *reqHTTP        `json:"http"`
		HealthCheck     *reqHealthCheck `json:"health_check"`
	}
	reqTarget struct {
		Type   string `json:"type"`
		Server *struct {
			ID int64 `json:"id"`
		} `json:"server"`
		LabelSelector any   `json:"label_selector"`
		IP            any   `json:"ip"`
		UsePrivateIP  *bool `json:"use_private_ip"`
	}
	reqIDOrName struct {
		ID   *int64  `json:"id"`
		Name *string `json:"name"`
	}
	reqCreate struct {
		Name             string          `json:"name"`
		LoadBalancerType json.RawMessage `json:"load_balancer_type"`
		Algorithm        *struct {
			Type string `json:"type"`
		} `json:"algorithm"`
		Location        *string            `json:"location"`
		NetworkZone     *string            `json:"network_zone"`
		Labels          *map[string]string `json:"labels"`
		Targets         []reqTarget        `json:"targets"`
		Services        []reqService       `json:"services"`
		PublicInterface *bool              `json:"public_interface"`
		Network         *int64             `json:"network"`
		PublicNet       any                `json:"public_net"`
	}
)
