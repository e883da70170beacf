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

var (
	instanceIDParam  = regexp.MustCompile(`^InstanceId\.([1-9][0-9]*)$`)
	filterNameParam  = regexp.MustCompile(`^Filter\.([1-9][0-9]*)\.Name$`)
	filterValueParam = regexp.MustCompile(`^Filter\.([1-9][0-9]*)\.Value\.([1-9][0-9]*)$`)
)

// describeQuery is a parsed DescribeInstances call.
type describeQuery struct {
	ids        []string
	filters    []filter
	maxResults int // 0: all
	after      string
	dryRun     bool
}

// serveEC2 answers EC2's only modelled action, DescribeInstances, to users;
// role credentials may not call EC2.
func (c *Cloud) serveEC2(w http.ResponseWriter, q *queryRequest, action string) {
	switch action {
	case "":
		writeError(w, ec2Service, q.requestID, &apiError{http.StatusBadRequest, "MissingAction", "The request must contain the parameter Action"})
		return
	case ActionDescribeInstances:
	default:
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
	dq, aerr := parseDescribeInstances(q)
	if aerr == nil && dq.dryRun {
		aerr = &apiError{http.StatusPreconditionFailed, "DryRunOperation", "Request would have succeeded, but DryRun flag is set."}
	}
	if aerr != nil {
		writeError(w, ec2Service, q.requestID, aerr)
		return
	}
	resp, aerr := c.describeInstances(dq, q)
	if aerr != nil {
		writeError(w, ec2Service, q.requestID, aerr)
		return
	}
	writeXML(w, http.StatusOK, resp)
}

func invalidParameter(msg string) *apiError {
	return &apiError{http.StatusBadRequest, "InvalidParameterValue", msg}
}

// parseDescribeInstances reads DescribeInstances' parameters: DryRun,
// MaxResults, NextToken, InstanceId.N, Filter.N.Name and Filter.N.Value.M.
// Any other parameter is refused, as EC2 does.
func parseDescribeInstances(q *queryRequest) (describeQuery, *apiError) {
	var dq describeQuery
	ids := map[int]string{}
	names := map[int]string{}
	values := map[int]map[int]string{}
	for k, vs := range q.params {
		v := vs[0]
		if len(vs) > 1 {
			return dq, &apiError{http.StatusBadRequest, "InvalidParameter", fmt.Sprintf("The parameter %s is given %d times", k, len(vs))}
		}
		switch {
		case k == "Action" || k == "Version":
		case k == "DryRun":
			b, err := strconv.ParseBool(v)
			if err != nil {
				return dq, invalidParameter(fmt.Sprintf("Value (%s) for parameter DryRun is invalid. Expecting true or false.", v))
			}
			dq.dryRun = b
		case k == "MaxResults":
			n, err := strconv.Atoi(v)
			if err != nil || n < 5 || n > 1000 {
				return dq, invalidParameter(fmt.Sprintf("Value ( %s ) for parameter maxResults is invalid. Expecting a value between 5 and 1000.", v))
			}
			dq.maxResults = n
		case k == "NextToken":
			dq.after = v // decoded below, once the query is known
		case instanceIDParam.MatchString(k):
			n, _ := strconv.Atoi(instanceIDParam.FindStringSubmatch(k)[1])
			ids[n] = v
		case filterNameParam.MatchString(k):
			n, _ := strconv.Atoi(filterNameParam.FindStringSubmatch(k)[1])
			names[n] = v
		case filterValueParam.MatchString(k):
			m := filterValueParam.FindStringSubmatch(k)
			n, _ := strconv.Atoi(m[1])
			j, _ := strconv.Atoi(m[2])
			if values[n] == nil {
				values[n] = map[int]string{}
			}
			values[n][j] = v
		default:
			return dq, &apiError{http.StatusBadRequest, "UnknownParameter", fmt.Sprintf("The parameter %s is not recognized", k)}
		}
	}
	for _, n := range slices.Sorted(maps.Keys(ids)) {
		id := ids[n]
		if !instanceIDPattern.MatchString(id) {
			return dq, &apiError{http.StatusBadRequest, "InvalidInstanceID.Malformed", fmt.Sprintf("Invalid id: %q", id)}
		}
		dq.ids = append(dq.ids, id)
	}
	for n := range values {
		if _, ok := names[n]; !ok {
			return dq, &apiError{http.StatusBadRequest, "InvalidParameterCombination", fmt.Sprintf("Filter.%d has values but no Name", n)}
		}
	}
	for _, n := range slices.Sorted(maps.Keys(names)) {
		var vs []string
		for _, j := range slices.Sorted(maps.Keys(values[n])) {
			vs = append(vs, values[n][j])
		}
		f, aerr := newFilter(names[n], vs)
		if aerr != nil {
			return dq, aerr
		}
		dq.filters = append(dq.filters, f)
	}
	if dq.maxResults > 0 && len(dq.ids) > 0 {
		return dq, &apiError{http.StatusBadRequest, "InvalidParameterCombination", "The parameter instancesSet cannot be used with the parameter maxResults"}
	}
	if dq.after != "" {
		after, ok := decodeNextToken(dq.after, dq.digest())
		if !ok {
			return dq, &apiError{http.StatusBadRequest, "InvalidPaginationToken", fmt.Sprintf("The pagination token %q is invalid, or was made for another query.", dq.after)}
		}
		dq.after = after
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
		for id, in := range c.instances {
			if c.visibleLocked(id) {
				selected = append(selected, in)
			}
		}
	}
	slices.SortFunc(selected, func(a, b Instance) int { return strings.Compare(a.ID, b.ID) })

	resp := describeInstancesResponse{RequestID: q.requestID}
	for _, in := range selected {
		if dq.after != "" && in.ID <= dq.after {
			continue
		}
		wire := c.wireInstance(in)
		if !matchesAll(dq.filters, in, wire) {
			continue
		}
		if dq.maxResults > 0 && len(resp.Reservations.Items) == dq.maxResults {
			resp.NextToken = encodeNextToken(resp.Reservations.Items[len(resp.Reservations.Items)-1].Instances.Items[0].InstanceID, dq.digest())
			break
		}
		resp.Reservations.Items = append(resp.Reservations.Items, xmlReservation{
			ReservationID: fakeID("r", in.ID),
			OwnerID:       c.account,
			Instances:     xmlInstanceSet{Items: []xmlInstance{wire}},
		})
	}
	return resp, nil
}
