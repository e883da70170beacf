package awstest

import (
	"encoding/xml"
	"fmt"
	"hash/fnv"
	"net/http"
	"slices"
	"strings"
)

// topologyNodes are the instance types AWS documents as supported by
// DescribeInstanceTopology (EC2 User Guide, "Prerequisites for Amazon EC2
// topology"), with how many network nodes it returns for each. Instances
// of other types are not returned at all.
var topologyNodes = func() map[string]int {
	m := map[string]int{}
	for _, family := range []struct {
		prefix string
		sizes  string
	}{
		{"g6e.", "xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge 24xlarge 48xlarge"},
		{"g7e.", "2xlarge 4xlarge 8xlarge 12xlarge 24xlarge 48xlarge"},
		{"hpc6a.", "48xlarge"},
		{"hpc6id.", "32xlarge"},
		{"hpc7g.", "4xlarge 8xlarge 16xlarge"},
		{"hpc7a.", "12xlarge 24xlarge 48xlarge 96xlarge"},
		{"hpc8a.", "96xlarge"},
		{"p3dn.", "24xlarge"},
		{"p4d.", "24xlarge"},
		{"p4de.", "24xlarge"},
		{"p5.", "48xlarge"},
		{"p5e.", "48xlarge"},
		{"p5en.", "48xlarge"},
		{"p6e-gb200.", "36xlarge"},
		{"trn1.", "2xlarge 32xlarge"},
		{"trn1n.", "32xlarge"},
		{"trn2.", "48xlarge"},
		{"trn2u.", "48xlarge"},
	} {
		for _, size := range strings.Fields(family.sizes) {
			m[family.prefix+size] = 3
		}
	}
	m["p6-b200.48xlarge"] = 4
	m["p6-b300.48xlarge"] = 4
	return m
}()

// describeInstanceTopologyResponse is EC2's DescribeInstanceTopology
// answer.
type describeInstanceTopologyResponse struct {
	XMLName   xml.Name `xml:"http://ec2.amazonaws.com/doc/2016-11-15/ DescribeInstanceTopologyResponse"`
	RequestID string   `xml:"requestId"`
	Instances struct {
		Items []xmlTopology `xml:"item"`
	} `xml:"instanceSet"`
	NextToken string `xml:"nextToken,omitempty"`
}

type xmlTopology struct {
	InstanceID   string `xml:"instanceId"`
	InstanceType string `xml:"instanceType"`
	NetworkNodes struct {
		Items []string `xml:"item"`
	} `xml:"networkNodeSet"`
	AvailabilityZone string `xml:"availabilityZone"`
	ZoneID           string `xml:"zoneId"`
}

// networkNodes is an instance's path from the top of its zone's network
// down to the node above it: the zone's top node, one of two nodes below
// it, and the instance's own (and one more for four-node types), so that
// instances of a zone share the first and some the second.
func (c *Cloud) networkNodes(in Instance, n int) []string {
	h := fnv.New32a()
	_, _ = h.Write([]byte(in.ID))
	half := h.Sum32() % 2
	nodes := []string{
		fakeID("nn", c.account+"/"+in.Zone),
		fakeID("nn", fmt.Sprintf("%s/%s/%d", c.account, in.Zone, half)),
	}
	for i := 2; i < n; i++ {
		nodes = append(nodes, fakeID("nn", fmt.Sprintf("%s/%d", in.ID, i)))
	}
	return nodes
}

// serveDescribeInstanceTopology answers DescribeInstanceTopology: DryRun,
// InstanceId.N (up to 100; ids EC2 does not show are left out),
// GroupName.N (up to 100; placement groups are not modelled, so a group
// matches no instance), Filter.N on availability-zone, instance-type and
// zone-id (EC2's wildcards), MaxResults 1-100 (default 20; not with
// InstanceId.N) and NextToken. Only running instances of the supported
// types (topologyNodes) are returned.
func (c *Cloud) serveDescribeInstanceTopology(q *queryRequest) (any, *apiError) {
	p, aerr := parseEC2Params(q, []string{"InstanceId", "GroupName"}, nil)
	if aerr != nil {
		return nil, aerr
	}
	maxResults, aerr := intParam("MaxResults", p.maxResults, 1, 100)
	if aerr != nil {
		return nil, aerr
	}
	ids, groups := p.lists["InstanceId"], p.lists["GroupName"]
	switch {
	case len(ids) > 100 || len(groups) > 100:
		return nil, invalidParameter("At most 100 instance IDs and 100 placement group names may be given")
	case maxResults > 0 && len(ids) > 0:
		return nil, &apiError{http.StatusBadRequest, "InvalidParameterCombination", "The parameter MaxResults cannot be used with the parameter InstanceIds"}
	}
	if aerr := instanceIDs(ids); aerr != nil {
		return nil, aerr
	}
	get := map[string]func(Instance) string{
		"availability-zone": func(in Instance) string { return in.Zone },
		"instance-type":     func(in Instance) string { return in.InstanceType },
		"zone-id":           func(in Instance) string { return c.zoneID(in.Zone) },
	}
	for _, f := range p.filters {
		if get[f.name] == nil {
			return nil, invalidParameter(fmt.Sprintf("The filter '%s' is invalid", f.name))
		}
	}
	digest := fmt.Sprintf("%q %q %q", ids, groups, p.filters)
	after := ""
	if p.nextToken != "" {
		var ok bool
		if after, ok = decodeNextToken(p.nextToken, fakeID("t", digest)[2:]); !ok {
			return nil, &apiError{http.StatusBadRequest, "InvalidPaginationToken", fmt.Sprintf("The pagination token %q is invalid, or was made for another query.", p.nextToken)}
		}
	}
	if p.dryRun {
		return nil, dryRunOK
	}
	if len(ids) == 0 && maxResults == 0 {
		maxResults = 20
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	var selected []Instance
	for id, in := range c.instances {
		n := topologyNodes[in.InstanceType]
		switch {
		case n == 0, in.State != stateRunning, !c.visibleLocked(id), len(groups) > 0,
			len(ids) > 0 && !slices.Contains(ids, id), after != "" && id <= after:
			continue
		}
		if slices.ContainsFunc(p.filters, func(f rawFilter) bool {
			return !slices.ContainsFunc(f.values, func(v string) bool { return wildcardMatch(v, get[f.name](in)) })
		}) {
			continue
		}
		selected = append(selected, in)
	}
	slices.SortFunc(selected, func(a, b Instance) int { return strings.Compare(a.ID, b.ID) })
	resp := describeInstanceTopologyResponse{RequestID: q.requestID}
	for i, in := range selected {
		if maxResults > 0 && i == maxResults {
			resp.NextToken = encodeNextToken(selected[i-1].ID, fakeID("t", digest)[2:])
			break
		}
		t := xmlTopology{InstanceID: in.ID, InstanceType: in.InstanceType, AvailabilityZone: in.Zone, ZoneID: c.zoneID(in.Zone)}
		t.NetworkNodes.Items = c.networkNodes(in, topologyNodes[in.InstanceType])
		resp.Instances.Items = append(resp.Instances.Items, t)
	}
	return resp, nil
}
