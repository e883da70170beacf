package awstest

import (
	"encoding/xml"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
)

// describeAvailabilityZonesResponse is EC2's DescribeAvailabilityZones
// answer.
type describeAvailabilityZonesResponse struct {
	XMLName   xml.Name `xml:"http://ec2.amazonaws.com/doc/2016-11-15/ DescribeAvailabilityZonesResponse"`
	RequestID string   `xml:"requestId"`
	Zones     struct {
		Items []xmlZone `xml:"item"`
	} `xml:"availabilityZoneInfo"`
}

type xmlZone struct {
	ZoneName           string   `xml:"zoneName"`
	State              string   `xml:"zoneState"`
	RegionName         string   `xml:"regionName"`
	Messages           struct{} `xml:"messageSet"`
	ZoneID             string   `xml:"zoneId"`
	ZoneType           string   `xml:"zoneType"`
	OptInStatus        string   `xml:"optInStatus"`
	GroupName          string   `xml:"groupName"`
	NetworkBorderGroup string   `xml:"networkBorderGroup"`
}

// regionCode is the short form of a region in its zone ids: the country
// code, the first letter of each part of the direction (two for
// northeast, southeast, ...; g for gov) and the number: use1 for
// us-east-1, apse2 for ap-southeast-2, usgw1 for us-gov-west-1.
func regionCode(region string) string {
	parts := strings.Split(region, "-")
	var b strings.Builder
	b.WriteString(parts[0])
	for _, p := range parts[1 : len(parts)-1] {
		switch {
		case strings.HasPrefix(p, "north") && len(p) > len("north"), strings.HasPrefix(p, "south") && len(p) > len("south"):
			b.WriteString(p[:1] + p[5:6])
		default:
			b.WriteString(p[:1])
		}
	}
	b.WriteString(parts[len(parts)-1])
	return b.String()
}

// zoneID is a zone's id. AWS maps zone names to zone ids independently for
// each account (us-east-1a need not be use1-az1): here the mapping turns by
// an amount derived from the account.
func (c *Cloud) zoneID(zone string) string {
	i := slices.Index(c.zones, zone)
	if i < 0 {
		return ""
	}
	shift := 0
	for _, d := range c.account {
		shift += int(d - '0')
	}
	return regionCode(c.region) + "-az" + strconv.Itoa((i+shift)%len(c.zones)+1)
}

// wireZone is a zone as DescribeAvailabilityZones shows it: a default
// availability zone, available, in the region's network border group.
func (c *Cloud) wireZone(zone string) xmlZone {
	return xmlZone{
		ZoneName: zone, State: "available", RegionName: c.region, ZoneID: c.zoneID(zone),
		ZoneType: "availability-zone", OptInStatus: "opt-in-not-required",
		GroupName: c.region, NetworkBorderGroup: c.region,
	}
}

// zoneFilters are DescribeAvailabilityZones' filters modelled.
var zoneFilters = map[string]func(xmlZone) string{
	"zone-name":            func(z xmlZone) string { return z.ZoneName },
	"zone-id":              func(z xmlZone) string { return z.ZoneID },
	"zone-type":            func(z xmlZone) string { return z.ZoneType },
	"region-name":          func(z xmlZone) string { return z.RegionName },
	"state":                func(z xmlZone) string { return z.State },
	"group-name":           func(z xmlZone) string { return z.GroupName },
	"opt-in-status":        func(z xmlZone) string { return z.OptInStatus },
	"network-border-group": func(z xmlZone) string { return z.NetworkBorderGroup },
}

// serveDescribeAvailabilityZones answers DescribeAvailabilityZones:
// DryRun, ZoneName.N, ZoneId.N (each unknown one is InvalidParameterValue),
// AllAvailabilityZones and Filter.N (zoneFilters, EC2's wildcards). It has
// no pagination.
func (c *Cloud) serveDescribeAvailabilityZones(q *queryRequest) (any, *apiError) {
	p, aerr := parseEC2Params(q, []string{"ZoneName", "ZoneId"}, []string{"AllAvailabilityZones"})
	if aerr != nil {
		return nil, aerr
	}
	for k, v := range map[string]string{"MaxResults": p.maxResults, "NextToken": p.nextToken} {
		if v != "" {
			return nil, &apiError{http.StatusBadRequest, "UnknownParameter", fmt.Sprintf("The parameter %s is not recognized", k)}
		}
	}
	if v, ok := p.scalars["AllAvailabilityZones"]; ok {
		if _, err := strconv.ParseBool(v); err != nil {
			return nil, invalidParameter(fmt.Sprintf("Value (%s) for parameter AllAvailabilityZones is invalid. Expecting true or false.", v))
		}
	}
	for _, f := range p.filters {
		if zoneFilters[f.name] == nil {
			return nil, invalidParameter(fmt.Sprintf("The filter '%s' is invalid", f.name))
		}
	}
	all := make([]xmlZone, 0, len(c.zones))
	for _, z := range c.zones {
		all = append(all, c.wireZone(z))
	}
	for _, name := range p.lists["ZoneName"] {
		if !slices.ContainsFunc(all, func(z xmlZone) bool { return z.ZoneName == name }) {
			return nil, invalidParameter(fmt.Sprintf("Invalid availability zone: [%s]", name))
		}
	}
	for _, id := range p.lists["ZoneId"] {
		if !slices.ContainsFunc(all, func(z xmlZone) bool { return z.ZoneID == id }) {
			return nil, invalidParameter(fmt.Sprintf("Invalid availability zone ID: [%s]", id))
		}
	}
	if p.dryRun {
		return nil, dryRunOK
	}
	resp := describeAvailabilityZonesResponse{RequestID: q.requestID}
	for _, z := range all {
		named := len(p.lists["ZoneName"])+len(p.lists["ZoneId"]) == 0 ||
			slices.Contains(p.lists["ZoneName"], z.ZoneName) || slices.Contains(p.lists["ZoneId"], z.ZoneID)
		if named && zoneMatches(p.filters, z) {
			resp.Zones.Items = append(resp.Zones.Items, z)
		}
	}
	return resp, nil
}

// zoneMatches: every filter has a value matching the zone's field.
func zoneMatches(filters []rawFilter, z xmlZone) bool {
	for _, f := range filters {
		if !slices.ContainsFunc(f.values, func(v string) bool { return wildcardMatch(v, zoneFilters[f.name](z)) }) {
			return false
		}
	}
	return true
}
