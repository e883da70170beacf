package awstest

import (
	"net/http"

	"github.com/mooring-dev/mooring/cloud/cloudtest"
)

// Actions counted by Calls and failed by Fail.
const (
	ActionDescribeInstances         = "DescribeInstances"
	ActionDescribeAvailabilityZones = "DescribeAvailabilityZones"
	ActionDescribeInstanceTopology  = "DescribeInstanceTopology"
	ActionGetCallerIdentity         = "GetCallerIdentity"
	// ActionIMDS is every request a metadata service answers: token PUTs
	// and GETs, of any instance.
	ActionIMDS = "IMDS"
)

// Fail makes the next n calls of action (an EC2 action,
// ActionGetCallerIdentity or ActionIMDS) answer HTTP status with the error
// code (in the API's XML error format; as the plain-text body of a metadata
// service's answer). It applies to calls that were authenticated and
// authorized, so a failed call still counts in Calls. Fail calls queue: a
// second one starts when the first is used up. n <= 0 clears the action's
// queue; status 0 is 500.
func (c *Cloud) Fail(action string, n int, status int, code string) {
	if status == 0 {
		status = http.StatusInternalServerError
	}
	if code == "" {
		code = http.StatusText(status)
	}
	c.faults.Add(action, cloudtest.Fault{Left: n, Status: status, Code: code})
}

// Calls is how many calls of action were answered: for the API actions the
// calls that passed authentication and authorization, whatever they were
// answered (an injected fault, a refused parameter, DryRunOperation); for
// ActionIMDS the requests any metadata service answered while its instance
// was running (401s and 403s included).
func (c *Cloud) Calls(action string) int { return c.calls.Get(action) }

// Refused is how many API calls were refused with the error code before
// reaching their action: authentication (SignatureDoesNotMatch,
// InvalidClientTokenId, ExpiredToken, IncompleteSignature,
// MissingAuthenticationToken) and authorization (UnauthorizedOperation).
func (c *Cloud) Refused(code string) int { return c.refusals.Get(code) }

// countCall counts a call of action and returns the fault it must answer
// with, if any.
func (c *Cloud) countCall(action string) *cloudtest.Fault {
	c.calls.Add(action)
	return c.faults.Take(action, 0)
}
