package hetznertest

import (
	"fmt"
	"maps"
)

// The Cloud API's server object, as its reference documents it (the fields
// a client may read; values this endpoint does not model are fixed).
type wireServer struct {
	ID              int64             `json:"id"`
	Name            string            `json:"name"`
	Status          string            `json:"status"`
	Created         string            `json:"created"`
	PublicNet       wirePublicNet     `json:"public_net"`
	PrivateNet      []wirePrivateNet  `json:"private_net"`
	ServerType      wireServerType    `json:"server_type"`
	Location        wireLocation      `json:"location"`
	Image           *wireImage        `json:"image"`
	ISO             any               `json:"iso"`
	RescueEnabled   bool              `json:"rescue_enabled"`
	Locked          bool              `json:"locked"`
	BackupWindow    *string           `json:"backup_window"`
	OutgoingTraffic *uint64           `json:"outgoing_traffic"`
	IngoingTraffic  *uint64           `json:"ingoing_traffic"`
	IncludedTraffic uint64            `json:"included_traffic"`
	Protection      wireProtection    `json:"protection"`
	Labels          map[string]string `json:"labels"`
	Volumes         []int64           `json:"volumes"`
	LoadBalancers   []int64           `json:"load_balancers"`
	PrimaryDiskSize int               `json:"primary_disk_size"`
	PlacementGroup  any               `json:"placement_group"`
}

type wirePublicNet struct {
	IPv4        *wireIPv4 `json:"ipv4"`
	IPv6        *wireIPv6 `json:"ipv6"`
	FloatingIPs []int64   `json:"floating_ips"`
	Firewalls   []any     `json:"firewalls"`
}

type wireIPv4 struct {
	ID      int64  `json:"id"`
	IP      string `json:"ip"`
	Blocked bool   `json:"blocked"`
	DNSPtr  string `json:"dns_ptr"`
}

type wireIPv6 struct {
	ID      int64            `json:"id"`
	IP      string           `json:"ip"`
	Blocked bool             `json:"blocked"`
	DNSPtr  []map[string]any `json:"dns_ptr"`
}

type wirePrivateNet struct {
	Network    int64    `json:"network"`
	IP         string   `json:"ip"`
	AliasIPs   []string `json:"alias_ips"`
	MACAddress string   `json:"mac_address"`
}

type wireServerType struct {
	ID           int64   `json:"id"`
	Name         string  `json:"name"`
	Description  string  `json:"description"`
	Cores        int     `json:"cores"`
	Memory       float64 `json:"memory"`
	Disk         int     `json:"disk"`
	StorageType  string  `json:"storage_type"`
	CPUType      string  `json:"cpu_type"`
	Architecture string  `json:"architecture"`
}

type wireLocation struct {
	ID          int64   `json:"id"`
	Name        string  `json:"name"`
	Description string  `json:"description"`
	Country     string  `json:"country"`
	City        string  `json:"city"`
	Latitude    float64 `json:"latitude"`
	Longitude   float64 `json:"longitude"`
	NetworkZone string  `json:"network_zone"`
}

type wireImage struct {
	ID          int64  `json:"id"`
	Type        string `json:"type"`
	Status      string `json:"status"`
	Name        string `json:"name"`
	Description string `json:"description"`
	OSFlavor    string `json:"os_flavor"`
	OSVersion   string `json:"os_version"`
}

type wireProtection struct {
	Delete  bool `json:"delete"`
	Rebuild bool `json:"rebuild"`
}

// locations are the locations the endpoint knows, with their network
// zones; others are served with network zone eu-central.
var locations = map[string]wireLocation{
	"fsn1": {ID: 1, Name: "fsn1", Description: "Falkenstein DC Park 1", Country: "DE", City: "Falkenstein", Latitude: 50.47612, Longitude: 12.370071, NetworkZone: "eu-central"},
	"nbg1": {ID: 2, Name: "nbg1", Description: "Nuremberg DC Park 1", Country: "DE", City: "Nuremberg", Latitude: 49.452102, Longitude: 11.076665, NetworkZone: "eu-central"},
	"hel1": {ID: 3, Name: "hel1", Description: "Helsinki DC Park 1", Country: "FI", City: "Helsinki", Latitude: 60.169855, Longitude: 24.938379, NetworkZone: "eu-central"},
	"ash":  {ID: 4, Name: "ash", Description: "Ashburn, VA", Country: "US", City: "Ashburn, VA", Latitude: 39.045821, Longitude: -77.487073, NetworkZone: "us-east"},
	"hil":  {ID: 5, Name: "hil", Description: "Hillsboro, OR", Country: "US", City: "Hillsboro, OR", Latitude: 45.54222, Longitude: -122.951924, NetworkZone: "us-west"},
	"sin":  {ID: 6, Name: "sin", Description: "Singapore", Country: "SG", City: "Singapore", Latitude: 1.283333, Longitude: 103.833333, NetworkZone: "ap-southeast"},
}

func location(name string) wireLocation {
	if l, ok := locations[name]; ok {
		return l
	}
	return wireLocation{ID: 99, Name: name, Description: name, NetworkZone: "eu-central"}
}

// datacenters are the locations' former datacenter names (the metadata
// service's availability-zone).
var datacenters = map[string]string{
	"fsn1": "fsn1-dc14", "nbg1": "nbg1-dc3", "hel1": "hel1-dc2", "ash": "ash-dc1", "hil": "hil-dc1", "sin": "sin-dc1",
}

func datacenter(location string) string {
	if dc, ok := datacenters[location]; ok {
		return dc
	}
	return location + "-dc1"
}

// mac is a stable MAC address of a server's private interface.
func mac(id int64, i int) string {
	return fmt.Sprintf("86:00:%02x:%02x:%02x:%02x", byte(id>>16), byte(id>>8), byte(id), byte(i))
}

// wire is a server as the API shows it.
func wire(s Server) wireServer {
	out := wireServer{
		ID: s.ID, Name: s.Name, Status: s.Status, Created: s.Created.UTC().Format(createdLayout),
		PublicNet: wirePublicNet{FloatingIPs: []int64{}, Firewalls: []any{}},
		ServerType: wireServerType{ID: 104, Name: s.ServerType, Description: s.ServerType, Cores: 2, Memory: 4,
			Disk: 40, StorageType: "local", CPUType: "shared", Architecture: "x86"},
		Location: location(s.Location),
		Image: &wireImage{ID: 161547269, Type: "system", Status: "available", Name: "debian-12",
			Description: "Debian 12", OSFlavor: "debian", OSVersion: "12"},
		IncludedTraffic: 21990232555520,
		Labels:          maps.Clone(s.Labels),
		Volumes:         []int64{},
		LoadBalancers:   []int64{},
		PrimaryDiskSize: 40,
		PrivateNet:      []wirePrivateNet{},
	}
	if out.Labels == nil {
		out.Labels = map[string]string{}
	}
	if s.PublicIPv4 != "" {
		out.PublicNet.IPv4 = &wireIPv4{ID: s.ID + 1, IP: s.PublicIPv4, DNSPtr: "static." + s.PublicIPv4 + ".clients.your-server.de"}
	}
	if s.PublicIPv6 != "" {
		out.PublicNet.IPv6 = &wireIPv6{ID: s.ID + 2, IP: s.PublicIPv6, DNSPtr: []map[string]any{}}
	}
	for i, pn := range s.PrivateNets {
		out.PrivateNet = append(out.PrivateNet, wirePrivateNet{Network: pn.Network, IP: pn.IP, AliasIPs: []string{}, MACAddress: mac(s.ID, i)})
	}
	return out
}

// createdLayout is the form of created in the API's examples
// (2016-01-30T23:55:00+00:00).
const createdLayout = "2006-01-02T15:04:05-07:00"
