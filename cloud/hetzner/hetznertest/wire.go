package hetznertest

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// The Cloud API's server object, with the fields of the answer the API gave
// in hcloud-go's recording (../testdata/server-get.json); values this
// endpoint does not model are fixed.
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
	OutgoingTraffic uint64            `json:"outgoing_traffic"`
	IngoingTraffic  uint64            `json:"ingoing_traffic"`
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
	ID           int64              `json:"id"`
	Name         string             `json:"name"`
	Description  string             `json:"description"`
	Cores        int                `json:"cores"`
	Memory       float64            `json:"memory"`
	Disk         int                `json:"disk"`
	StorageType  string             `json:"storage_type"`
	CPUType      string             `json:"cpu_type"`
	Architecture string             `json:"architecture"`
	Category     string             `json:"category"`
	Deprecated   bool               `json:"deprecated"`
	Deprecation  *wireDeprecation   `json:"deprecation"`
	Prices       []wirePrice        `json:"prices"`
	Locations    []wireTypeLocation `json:"locations"`
}

// wireDeprecation is when a server type (or its sale in a location) was
// announced to end, and from when it cannot be had.
type wireDeprecation struct {
	Announced        string `json:"announced"`
	UnavailableAfter string `json:"unavailable_after"`
}

// wirePrice is a server type's price in one location.
type wirePrice struct {
	Location          string     `json:"location"`
	PriceHourly       wireAmount `json:"price_hourly"`
	PriceMonthly      wireAmount `json:"price_monthly"`
	IncludedTraffic   uint64     `json:"included_traffic"`
	PricePerTBTraffic wireAmount `json:"price_per_tb_traffic"`
}

// wireAmount is a price with and without VAT, as decimal strings.
type wireAmount struct {
	Gross string `json:"gross"`
	Net   string `json:"net"`
}

// wireTypeLocation is a location a server type is sold in.
type wireTypeLocation struct {
	ID          int64            `json:"id"`
	Name        string           `json:"name"`
	Deprecation *wireDeprecation `json:"deprecation"`
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
	ID           int64             `json:"id"`
	Type         string            `json:"type"`
	Status       string            `json:"status"`
	Name         string            `json:"name"`
	Description  string            `json:"description"`
	OSFlavor     string            `json:"os_flavor"`
	OSVersion    string            `json:"os_version"`
	Architecture string            `json:"architecture"`
	BoundTo      *int64            `json:"bound_to"`
	CreatedFrom  any               `json:"created_from"`
	Deprecated   *string           `json:"deprecated"`
	DiskSize     float64           `json:"disk_size"`
	ImageSize    *float64          `json:"image_size"`
	Labels       map[string]string `json:"labels"`
	Protection   struct {
		Delete bool `json:"delete"`
	} `json:"protection"`
	RapidDeploy bool    `json:"rapid_deploy"`
	Created     string  `json:"created"`
	Deleted     *string `json:"deleted"`
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

// soldIn are the locations every server type is sold in here, with the
// prices of one (those of cx22 in the recorded answer).
var soldIn = []string{"fsn1", "nbg1", "hel1"}

// serverType is a server type as the API shows it inside a server.
func serverType(name string) wireServerType {
	st := wireServerType{ID: 104, Name: name, Description: strings.ToUpper(name), Cores: 2, Memory: 4,
		Disk: 40, StorageType: "local", CPUType: "shared", Architecture: "x86", Category: "cost_optimized",
		Prices: []wirePrice{}, Locations: []wireTypeLocation{}}
	for _, loc := range soldIn {
		st.Prices = append(st.Prices, wirePrice{Location: loc,
			PriceHourly:       wireAmount{Gross: "0.0052000000000000", Net: "0.0052000000"},
			PriceMonthly:      wireAmount{Gross: "3.2900000000000000", Net: "3.2900000000"},
			IncludedTraffic:   21990232555520,
			PricePerTBTraffic: wireAmount{Gross: "1.0000000000000000", Net: "1.0000000000"}})
		st.Locations = append(st.Locations, wireTypeLocation{ID: location(loc).ID, Name: loc})
	}
	return st
}

// image is the system image every server here was created from.
func image() *wireImage {
	return &wireImage{ID: 310554929, Type: "system", Status: "available", Name: "debian-13",
		Description: "Debian 13", OSFlavor: "debian", OSVersion: "13", Architecture: "x86", DiskSize: 5,
		Labels: map[string]string{}, RapidDeploy: true, Created: "2025-08-18T06:15:25Z"}
}

// wire is a server as the API shows it.
func wire(s Server) wireServer {
	out := wireServer{
		ID: s.ID, Name: s.Name, Status: s.Status, Created: s.Created.UTC().Format(createdLayout),
		PublicNet:       wirePublicNet{FloatingIPs: []int64{}, Firewalls: []any{}},
		ServerType:      serverType(s.ServerType),
		Location:        location(s.Location),
		Image:           image(),
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
		out.PublicNet.IPv4 = &wireIPv4{ID: s.ID + 1, IP: s.PublicIPv4, DNSPtr: reverseDNS(s.PublicIPv4)}
	}
	if s.PublicIPv6 != "" {
		out.PublicNet.IPv6 = &wireIPv6{ID: s.ID + 2, IP: s.PublicIPv6, DNSPtr: []map[string]any{}}
	}
	for i, pn := range s.PrivateNets {
		out.PrivateNet = append(out.PrivateNet, wirePrivateNet{Network: pn.Network, IP: pn.IP, AliasIPs: []string{}, MACAddress: mac(s.ID, i)})
	}
	return out
}

// reverseDNS is the reverse DNS name Hetzner gives a public IPv4 address:
// static.<its octets, last first>.clients.your-server.de.
func reverseDNS(ip string) string {
	o := strings.Split(ip, ".")
	slices.Reverse(o)
	return "static." + strings.Join(o, ".") + ".clients.your-server.de"
}

// createdLayout is the form of the times the API answered with in the
// recorded answer (2025-12-15T15:22:19Z, UTC); the reference's examples
// write 2016-01-30T23:55:00+00:00, which hcloud-go reads as well.
const createdLayout = time.RFC3339
