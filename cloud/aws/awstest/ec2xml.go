package awstest

import (
	"encoding/xml"
	"maps"
	"slices"
)

// ec2TimeFormat is how EC2's XML writes timestamps.
const ec2TimeFormat = "2006-01-02T15:04:05.000Z"

// describeInstancesResponse is EC2's DescribeInstances answer; each
// instance is in a reservation of its own.
type describeInstancesResponse struct {
	XMLName      xml.Name          `xml:"http://ec2.amazonaws.com/doc/2016-11-15/ DescribeInstancesResponse"`
	RequestID    string            `xml:"requestId"`
	Reservations xmlReservationSet `xml:"reservationSet"`
	NextToken    string            `xml:"nextToken,omitempty"`
}

type xmlReservationSet struct {
	Items []xmlReservation `xml:"item"`
}

type xmlReservation struct {
	ReservationID string         `xml:"reservationId"`
	OwnerID       string         `xml:"ownerId"`
	Groups        struct{}       `xml:"groupSet"`
	Instances     xmlInstanceSet `xml:"instancesSet"`
}

type xmlInstanceSet struct {
	Items []xmlInstance `xml:"item"`
}

type xmlInstance struct {
	InstanceID         string                `xml:"instanceId"`
	ImageID            string                `xml:"imageId"`
	State              xmlState              `xml:"instanceState"`
	PrivateDNSName     string                `xml:"privateDnsName"`
	DNSName            string                `xml:"dnsName"`
	Reason             string                `xml:"reason"`
	AMILaunchIndex     int                   `xml:"amiLaunchIndex"`
	InstanceType       string                `xml:"instanceType"`
	LaunchTime         string                `xml:"launchTime"`
	Placement          xmlPlacement          `xml:"placement"`
	MonitoringState    string                `xml:"monitoring>state"`
	SubnetID           string                `xml:"subnetId,omitempty"`
	VpcID              string                `xml:"vpcId,omitempty"`
	PrivateIP          string                `xml:"privateIpAddress,omitempty"`
	PublicIP           string                `xml:"ipAddress,omitempty"`
	SourceDestCheck    bool                  `xml:"sourceDestCheck"`
	Groups             struct{}              `xml:"groupSet"`
	Architecture       string                `xml:"architecture"`
	RootDeviceType     string                `xml:"rootDeviceType"`
	RootDeviceName     string                `xml:"rootDeviceName"`
	VirtualizationType string                `xml:"virtualizationType"`
	Tags               *xmlTagSet            `xml:"tagSet,omitempty"`
	Hypervisor         string                `xml:"hypervisor"`
	NetworkInterfaces  xmlNetworkInterfaces  `xml:"networkInterfaceSet"`
	IAMInstanceProfile *xmlIAMProfile        `xml:"iamInstanceProfile,omitempty"`
	EbsOptimized       bool                  `xml:"ebsOptimized"`
	EnaSupport         bool                  `xml:"enaSupport"`
	MetadataOptions    xmlMetadataOptions    `xml:"metadataOptions"`
	PrivateDNSOptions  xmlPrivateDNSSettings `xml:"privateDnsNameOptions"`
	TPMSupport         string                `xml:"tpmSupport,omitempty"`
}

type xmlState struct {
	Code int    `xml:"code"`
	Name string `xml:"name"`
}

type xmlPlacement struct {
	AvailabilityZone string `xml:"availabilityZone"`
	GroupName        string `xml:"groupName"`
	Tenancy          string `xml:"tenancy"`
}

type xmlTagSet struct {
	Items []xmlTag `xml:"item"`
}

type xmlTag struct {
	Key   string `xml:"key"`
	Value string `xml:"value"`
}

type xmlIAMProfile struct {
	Arn string `xml:"arn"`
	ID  string `xml:"id"`
}

type xmlMetadataOptions struct {
	State                   string `xml:"state"`
	HTTPTokens              string `xml:"httpTokens"`
	HTTPPutResponseHopLimit int    `xml:"httpPutResponseHopLimit"`
	HTTPEndpoint            string `xml:"httpEndpoint"`
	InstanceMetadataTags    string `xml:"instanceMetadataTags"`
}

type xmlPrivateDNSSettings struct {
	HostnameType string `xml:"hostnameType"`
}

type xmlNetworkInterfaces struct {
	Items []xmlNetworkInterface `xml:"item"`
}

type xmlNetworkInterface struct {
	ID              string          `xml:"networkInterfaceId"`
	SubnetID        string          `xml:"subnetId"`
	VpcID           string          `xml:"vpcId"`
	Description     string          `xml:"description"`
	OwnerID         string          `xml:"ownerId"`
	Status          string          `xml:"status"`
	MacAddress      string          `xml:"macAddress"`
	PrivateIP       string          `xml:"privateIpAddress"`
	PrivateDNSName  string          `xml:"privateDnsName"`
	SourceDestCheck bool            `xml:"sourceDestCheck"`
	Groups          struct{}        `xml:"groupSet"`
	Attachment      xmlAttachment   `xml:"attachment"`
	Association     *xmlAssociation `xml:"association,omitempty"`
	PrivateIPs      xmlPrivateIPSet `xml:"privateIpAddressesSet"`
	InterfaceType   string          `xml:"interfaceType"`
	Ipv6Addresses   struct{}        `xml:"ipv6AddressesSet"`
}

type xmlAttachment struct {
	ID                  string `xml:"attachmentId"`
	DeviceIndex         int    `xml:"deviceIndex"`
	NetworkCardIndex    int    `xml:"networkCardIndex"`
	Status              string `xml:"status"`
	AttachTime          string `xml:"attachTime"`
	DeleteOnTermination bool   `xml:"deleteOnTermination"`
}

type xmlAssociation struct {
	PublicIP      string `xml:"publicIp"`
	PublicDNSName string `xml:"publicDnsName"`
	IPOwnerID     string `xml:"ipOwnerId"`
}

type xmlPrivateIPSet struct {
	Items []xmlPrivateIP `xml:"item"`
}

type xmlPrivateIP struct {
	PrivateIP      string          `xml:"privateIpAddress"`
	PrivateDNSName string          `xml:"privateDnsName"`
	Primary        bool            `xml:"primary"`
	Association    *xmlAssociation `xml:"association,omitempty"`
}

// wireInstance is an instance as DescribeInstances shows it (c.mu held). As on AWS, a
// stopped (or stopping) instance has lost its public address, and a
// terminated (or shutting-down) one its addresses, DNS names and network
// interface.
func (c *Cloud) wireInstance(in Instance) xmlInstance {
	vpc := fakeID("vpc", c.account+"/"+c.region)
	subnet := fakeID("subnet", c.account+"/"+in.Zone)
	x := xmlInstance{
		InstanceID:         in.ID,
		ImageID:            in.ImageID,
		State:              xmlState{Code: stateCodes[in.State], Name: in.State},
		PrivateDNSName:     in.PrivateDNSName,
		DNSName:            in.PublicDNSName,
		InstanceType:       in.InstanceType,
		LaunchTime:         in.LaunchTime.UTC().Format(ec2TimeFormat),
		Placement:          xmlPlacement{AvailabilityZone: in.Zone, Tenancy: "default"},
		MonitoringState:    "disabled",
		SubnetID:           subnet,
		VpcID:              vpc,
		PrivateIP:          in.PrivateIP,
		PublicIP:           in.PublicIP,
		SourceDestCheck:    !c.noSourceDest[in.ID],
		Architecture:       "x86_64",
		RootDeviceType:     "ebs",
		RootDeviceName:     "/dev/xvda",
		VirtualizationType: "hvm",
		Hypervisor:         "xen",
		EnaSupport:         true,
		MetadataOptions: xmlMetadataOptions{
			State:                   "applied",
			HTTPTokens:              "required",
			HTTPPutResponseHopLimit: 1,
			HTTPEndpoint:            "enabled",
			InstanceMetadataTags:    "disabled",
		},
		PrivateDNSOptions: xmlPrivateDNSSettings{HostnameType: "ip-name"},
	}
	if in.MetadataTags {
		x.MetadataOptions.InstanceMetadataTags = "enabled"
	}
	if len(in.Tags) > 0 {
		x.Tags = &xmlTagSet{}
		for _, k := range slices.Sorted(maps.Keys(in.Tags)) {
			x.Tags.Items = append(x.Tags.Items, xmlTag{Key: k, Value: in.Tags[k]})
		}
	}
	if in.InstanceProfile != "" {
		x.IAMInstanceProfile = &xmlIAMProfile{Arn: c.profileARN(in.InstanceProfile), ID: profileID(in.InstanceProfile)}
	}
	if in.NitroTPM != nil {
		x.TPMSupport = TPMSupportV2
	}
	switch in.State {
	case "stopped", "stopping":
		x.PublicIP, x.DNSName = "", ""
	case "terminated", "shutting-down":
		x.PrivateIP, x.PublicIP, x.PrivateDNSName, x.DNSName = "", "", "", ""
		x.SubnetID, x.VpcID = "", ""
		return x
	}
	var assoc *xmlAssociation
	if x.PublicIP != "" {
		assoc = &xmlAssociation{PublicIP: x.PublicIP, PublicDNSName: x.DNSName, IPOwnerID: "amazon"}
	}
	// The primary network interface (network card 0, device index 0),
	// attached when the instance was first launched.
	eni := fakeID("eni", in.ID)
	x.NetworkInterfaces.Items = []xmlNetworkInterface{{
		ID:              eni,
		SubnetID:        subnet,
		VpcID:           vpc,
		OwnerID:         c.account,
		Status:          "in-use",
		MacAddress:      macAddress(in.ID),
		PrivateIP:       x.PrivateIP,
		PrivateDNSName:  x.PrivateDNSName,
		SourceDestCheck: x.SourceDestCheck,
		Attachment: xmlAttachment{
			ID:                  fakeID("eni-attach", in.ID),
			Status:              "attached",
			AttachTime:          in.Created.UTC().Format(ec2TimeFormat),
			DeleteOnTermination: true,
		},
		Association: assoc,
		PrivateIPs: xmlPrivateIPSet{Items: []xmlPrivateIP{{
			PrivateIP:      x.PrivateIP,
			PrivateDNSName: x.PrivateDNSName,
			Primary:        true,
			Association:    assoc,
		}}},
		InterfaceType: "interface",
	}}
	return x
}

// macAddress is a locally administered MAC derived from the instance id.
func macAddress(id string) string {
	h := fakeID("mac", id)[len("mac-0"):]
	return "02:" + h[0:2] + ":" + h[2:4] + ":" + h[4:6] + ":" + h[6:8] + ":" + h[8:10]
}
