package awstest

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// describeQuery is a parsed DescribeInstances call.
type describeQuery struct {
	ids        []string
	filters    []filter
	maxResults int // 0: all
	after      string
}

// ec2Actions are the EC2 actions modelled, with what answers them: the
// answer to write, or an error.
var ec2Actions = map[string]func(c *Cloud, q *queryRequest) (any, *apiError){
	ActionDescribeInstances:         (*Cloud).serveDescribeInstances,
	ActionDescribeAvailabilityZones: (*Cloud).serveDescribeAvailabilityZones,
	ActionDescribeInstanceTopology:  (*Cloud).serveDescribeInstanceTopology,
}

// serveEC2 answers EC2's modelled actions to users; role credentials may
// not call EC2.
func (c *Cloud) serveEC2(w http.ResponseWriter, q *queryRequest, action string) {
	serve, ok := ec2Actions[action]
	switch {
	case action == "":
		writeError(w, ec2Service, q.requestID, &apiError{http.StatusBadRequest, "MissingAction", "The request must contain the parameter Action"})
		return
	case !ok:
		writeError(w, ec2Service, q.requestID, &apiError{http.StatusBadRequest, "InvalidAction", fmt.Sprintf("The action %s is not valid for this web service.", action)})
		return
	}
	if q.caller.user == nil {
		e := &apiError{http.StatusForbidden, "UnauthorizedOperation", "You are not authorized to perform this operation. User: " + q.caller.arn(c.account) + " is not authorized to perform: ec2:" + action}
		c.refuse(e)
		writeError(w, ec2Service, q.requestID, e)
		return
	}
	if !c.begin(w, ec2Service, action, q.requestID) {
		return
	}
	resp, aerr := serve(c, q)
	if aerr != nil {
		writeError(w, ec2Service, q.requestID, aerr)
		return
	}
	writeXML(w, http.StatusOK, resp)
}

// serveDescribeInstances answers DescribeInstances.
func (c *Cloud) serveDescribeInstances(q *queryRequest) (any, *apiError) {
	dq, aerr := parseDescribeInstances(q)
	if aerr != nil {
		return nil, aerr
	}
	c.countDescribe(dq)
	return c.describeInstances(dq, q)
}

// DescribeStats sorts the DescribeInstances calls answered (past
// throttling, faults and parameter checks; a DryRun not) by how they name
// instances: what tells a batched lookup from a lookup per node, and both
// from a listing of the fleet.
type DescribeStats struct {
	// ByID are the calls with InstanceId.N or an instance-id filter; IDs
	// are the ids they named in all, MaxIDs the most one call named.
	ByID, IDs, MaxIDs int
	// ByAddress are the calls without ids that filter on private-dns-name
	// or private-ip-address: a lookup of a node by its name or address.
	ByAddress int
	// Listed are the other calls: lists of the fleet and their pages.
	Listed int
}

// Describes is the DescribeStats so far.
func (c *Cloud) Describes() DescribeStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.describe
}

// ResetDescribes zeroes the DescribeStats.
func (c *Cloud) ResetDescribes() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.describe = DescribeStats{}
}

// countDescribe adds a call to the DescribeStats.
func (c *Cloud) countDescribe(dq describeQuery) {
	ids, address := len(dq.ids), false
	for _, f := range dq.filters {
		switch f.name {
		case "instance-id":
			ids += len(f.values)
		case "private-dns-name", "private-ip-address":
			address = true
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case ids > 0:
		c.describe.ByID++
		c.describe.IDs += ids
		c.describe.MaxIDs = max(c.describe.MaxIDs, ids)
	case address:
		c.describe.ByAddress++
	default:
		c.describe.Listed++
	}
}

var dryRunOK = &apiError{http.StatusPreconditionFailed, "DryRunOperation", "Request would have succeeded, but DryRun flag is set."}

func invalidParameter(msg string) *apiError {
	return &apiError{http.StatusBadRequest, "InvalidParameterValue", msg}
}

// ec2Params are an EC2 Query call's parameters: DryRun, MaxResults,
// NextToken, the lists <Name>.N the action knows, Filter.N.Name with its
// Filter.N.Value.M, and the scalars the action knows. Any other parameter
// is refused, as EC2 does.
type ec2Params struct {
	dryRun     bool
	maxResults string // as given; "" when not
	nextToken  string
	lists      map[string][]string // by list name, in N order
	filters    []rawFilter
	scalars    map[string]string
}

// rawFilter is one Filter.N, its values in M order.
type rawFilter struct {
	name   string
	values []string
}

var (
	listParam        = regexp.MustCompile(`^([A-Za-z]+)\.([1-9][0-9]*)$`)
	filterNameParam  = regexp.MustCompile(`^Filter\.([1-9][0-9]*)\.Name$`)
	filterValueParam = regexp.MustCompile(`^Filter\.([1-9][0-9]*)\.Value\.([1-9][0-9]*)$`)
)

// parseEC2Params reads q's parameters for an action whose lists and
// scalars are those named.
func parseEC2Params(q *queryRequest, lists, scalars []string) (ec2Params, *apiError) {
	p := ec2Params{lists: map[string][]string{}, scalars: map[string]string{}}
	items := map[string]map[int]string{}
	names := map[int]string{}
	values := map[int]map[int]string{}
	for k, vs := range q.params {
		v := vs[0]
		if len(vs) > 1 {
			return p, &apiError{http.StatusBadRequest, "InvalidParameter", fmt.Sprintf("The parameter %s is given %d times", k, len(vs))}
		}
		m := listParam.FindStringSubmatch(k)
		switch {
		case k == "Action" || k == "Version":
		case k == "DryRun":
			b, err := strconv.ParseBool(v)
			if err != nil {
				return p, invalidParameter(fmt.Sprintf("Value (%s) for parameter DryRun is invalid. Expecting true or false.", v))
			}
			p.dryRun = b
		case k == "MaxResults":
			p.maxResults = v
		case k == "NextToken":
			p.nextToken = v
		case slices.Contains(scalars, k):
			p.scalars[k] = v
		case m != nil && slices.Contains(lists, m[1]):
			n, _ := strconv.Atoi(m[2])
			if items[m[1]] == nil {
				items[m[1]] = map[int]string{}
			}
			items[m[1]][n] = v
		case filterNameParam.MatchString(k):
			n, _ := strconv.Atoi(filterNameParam.FindStringSubmatch(k)[1])
			names[n] = v
		case filterValueParam.MatchString(k):
			fm := filterValueParam.FindStringSubmatch(k)
			n, _ := strconv.Atoi(fm[1])
			j, _ := strconv.Atoi(fm[2])
			if values[n] == nil {
				values[n] = map[int]string{}
			}
			values[n][j] = v
		default:
			return p, &apiError{http.StatusBadRequest, "UnknownParameter", fmt.Sprintf("The parameter %s is not recognized", k)}
		}
	}
	for name, byN := range items {
		for _, n := range slices.Sorted(maps.Keys(byN)) {
			p.lists[name] = append(p.lists[name], byN[n])
		}
	}
	for n := range values {
		if _, ok := names[n]; !ok {
			return p, &apiError{http.StatusBadRequest, "InvalidParameterCombination", fmt.Sprintf("Filter.%d has values but no Name", n)}
		}
	}
	for _, n := range slices.Sorted(maps.Keys(names)) {
		f := rawFilter{name: names[n]}
		for _, j := range slices.Sorted(maps.Keys(values[n])) {
			f.values = append(f.values, values[n][j])
		}
		if len(f.values) == 0 {
			return p, invalidParameter(fmt.Sprintf("The filter '%s' has no values", f.name))
		}
		p.filters = append(p.filters, f)
	}
	return p, nil
}

// intParam reads an integer parameter within [lo, hi]; 0 when not given.
func intParam(name, v string, lo, hi int) (int, *apiError) {
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		return 0, invalidParameter(fmt.Sprintf("Value ( %s ) for parameter %s is invalid. Expecting a value between %d and %d.", v, name, lo, hi))
	}
	return n, nil
}

// instanceIDs checks the ids of an InstanceId.N list.
func instanceIDs(ids []string) *apiError {
	for _, id := range ids {
		if !instanceIDPattern.MatchString(id) {
			return &apiError{http.StatusBadRequest, "InvalidInstanceID.Malformed", fmt.Sprintf("Invalid id: %q", id)}
		}
	}
	return nil
}

// parseDescribeInstances reads DescribeInstances' parameters: DryRun,
// MaxResults, NextToken, InstanceId.N, Filter.N.Name and Filter.N.Value.M.
func parseDescribeInstances(q *queryRequest) (describeQuery, *apiError) {
	var dq describeQuery
	p, aerr := parseEC2Params(q, []string{"InstanceId"}, nil)
	if aerr != nil {
		return dq, aerr
	}
	if dq.maxResults, aerr = intParam("maxResults", p.maxResults, 5, 1000); aerr != nil {
		return dq, aerr
	}
	dq.ids = p.lists["InstanceId"]
	if aerr := instanceIDs(dq.ids); aerr != nil {
		return dq, aerr
	}
	for _, rf := range p.filters {
		f, aerr := newFilter(rf.name, rf.values)
		if aerr != nil {
			return dq, aerr
		}
		dq.filters = append(dq.filters, f)
	}
	if dq.maxResults > 0 && len(dq.ids) > 0 {
		return dq, &apiError{http.StatusBadRequest, "InvalidParameterCombination", "The parameter instancesSet cannot be used with the parameter maxResults"}
	}
	if p.nextToken != "" {
		after, ok := decodeNextToken(p.nextToken, dq.digest())
		if !ok {
			return dq, &apiError{http.StatusBadRequest, "InvalidPaginationToken", fmt.Sprintf("The pagination token %q is invalid, or was made for another query.", p.nextToken)}
		}
		dq.after = after
	}
	if p.dryRun {
		return dq, dryRunOK
	}
	return dq, nil
}

// digest names the query a NextToken belongs to: its instance ids and
// filters, not its page size.
func (dq describeQuery) digest() string {
	h := sha256.New()
	for _, id := range dq.ids {
		fmt.Fprintf(h, "id %q\n", id)
	}
	for _, f := range dq.filters {
		fmt.Fprintf(h, "filter %q %q\n", f.name, f.values)
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}

// A NextToken is the last instance id of the page before and the query's
// digest, base64url-encoded: pages follow the instance ids' order, so
// instances added or deleted between pages neither repeat nor shift others.
func encodeNextToken(lastID, digest string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(lastID + "|" + digest))
}

func decodeNextToken(tok, digest string) (string, bool) {
	raw, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		return "", false
	}
	id, d, ok := strings.Cut(string(raw), "|")
	return id, ok && d == digest && instanceIDPattern.MatchString(id)
}

// describeInstances selects the query's instances, in id order, one page.
func (c *Cloud) describeInstances(dq describeQuery, q *queryRequest) (describeInstancesResponse, *apiError) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var selected []Instance
	if len(dq.ids) > 0 {
		var missing []string
		seen := map[string]bool{}
		for _, id := range dq.ids {
			in, ok := c.instances[id]
			switch {
			case !ok || !c.visibleLocked(id):
				missing = append(missing, id)
			case !seen[id]:
				seen[id] = true
				selected = append(selected, in)
			}
		}
		switch len(missing) {
		case 0:
		case 1:
			return describeInstancesResponse{}, &apiError{http.StatusBadRequest, "InvalidInstanceID.NotFound", fmt.Sprintf("The instance ID '%s' does not exist", missing[0])}
		default:
			return describeInstancesResponse{}, &apiError{http.StatusBadRequest, "InvalidInstanceID.NotFound", fmt.Sprintf("The instance IDs '%s' do not exist", strings.Join(missing, ", "))}
		}
	} else {
		// Filters are matched before an instance's wire form is built: a
		// filtered call looks at every instance, as EC2's does, and would
		// otherwise cost the endpoint far more than the caller.
		for _, id := range c.orderLocked() {
			in := c.instances[id]
			if c.visibleLocked(id) && (dq.after == "" || id > dq.after) && matchesAll(dq.filters, in) {
				selected = append(selected, in)
				if dq.maxResults > 0 && len(selected) > dq.maxResults {
					break
				}
			}
		}
	}
	slices.SortFunc(selected, func(a, b Instance) int { return strings.Compare(a.ID, b.ID) })

	resp := describeInstancesResponse{RequestID: q.requestID}
	for _, in := range selected {
		if dq.after != "" && in.ID <= dq.after {
			continue
		}
		if !matchesAll(dq.filters, in) {
			continue
		}
		if dq.maxResults > 0 && len(resp.Reservations.Items) == dq.maxResults {
			resp.NextToken = encodeNextToken(resp.Reservations.Items[len(resp.Reservations.Items)-1].Instances.Items[0].InstanceID, dq.digest())
			break
		}
		wire := c.wireInstance(in)
		resp.Reservations.Items = append(resp.Reservations.Items, xmlReservation{
			ReservationID: fakeID("r", in.ID),
			OwnerID:       c.account,
			Instances:     xmlInstanceSet{Items: []xmlInstance{wire}},
		})
	}
	return resp, nil
}
