package aws

import (
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"

	"k8s.io/klog/v2"

	"github.com/mooring-dev/mooring/cloud"
	"github.com/mooring-dev/mooring/cloud/aws/agentid"
)

// ReplayKeyPrefix starts the replay key of AWS evidence; the rest is the
// request's SigV4 signature (hex), which covers every header the approver
// sends.
const ReplayKeyPrefix = "aws-sts:"

// Limits of the approver's calls to STS.
const (
	defaultSTSTimeout = 10 * time.Second
	maxSTSResponse    = 64 << 10
	maxSTSMessage     = 200
)

// VerifierOptions configure a Verifier.
type VerifierOptions struct {
	// STSEndpoint is the URL the approver itself sends the rebuilt
	// GetCallerIdentity requests to (required; http or https, no path
	// beyond "/", no query). Its host must be the one the nodes sign for
	// (https://sts.<region>.amazonaws.com by default on the agent).
	STSEndpoint string
	// Region is the only region a signature may be scoped to (required).
	Region string
	// Account is the AWS account the instances belong to (required, 12
	// digits).
	Account string
	// NodeRoles are the IAM role names of the instance profiles allowed to
	// join (required).
	NodeRoles []string
	// HTTPClient sends the requests to STS; nil is a client with a 10 s
	// timeout. Redirects are never followed, whatever the client says.
	HTTPClient *http.Client
}

// Verifier is a cloud.EvidenceVerifier for AWS evidence: it checks the
// signed GetCallerIdentity request's form, binding and date, rebuilds the
// request towards its own STS endpoint, and accepts STS's answer only if
// it names an instance profile session of a node role in its account.
type Verifier struct {
	endpoint string // the STS URL requests go to
	host     string // the Host header (the endpoint's, without a default port)
	region   string
	account  string
	roles    []string
	client   *http.Client
}

var _ cloud.EvidenceVerifier = (*Verifier)(nil)

var (
	accountRE = regexp.MustCompile(`^[0-9]{12}$`)
	// IAM role names: 1-64 of letters, digits and +=,.@_-.
	roleNameRE = regexp.MustCompile(`^[A-Za-z0-9+=,.@_-]{1,64}$`)
	// EC2 instance ids: i- and 8 or 17 hex digits.
	instanceIDRE = regexp.MustCompile(`^i-([0-9a-f]{8}|[0-9a-f]{17})$`)
	partitionRE  = regexp.MustCompile(`^aws(-[a-z]+){0,3}$`)
)

// NewVerifier checks the options and makes a verifier; it calls nothing.
func NewVerifier(o VerifierOptions) (*Verifier, error) {
	u, host, err := agentid.ParseEndpoint(o.STSEndpoint)
	if err != nil {
		return nil, fmt.Errorf("aws verifier: STSEndpoint: %w", err)
	}
	if !agentid.ValidRegion(o.Region) {
		return nil, fmt.Errorf("aws verifier: region %q: want a region name such as us-east-1", o.Region)
	}
	if !accountRE.MatchString(o.Account) {
		return nil, fmt.Errorf("aws verifier: account %q: want 12 digits", o.Account)
	}
	if len(o.NodeRoles) == 0 {
		return nil, errors.New("aws verifier: at least one node role is required")
	}
	for _, r := range o.NodeRoles {
		if !roleNameRE.MatchString(r) {
			return nil, fmt.Errorf("aws verifier: node role %q: want an IAM role name (not an ARN)", r)
		}
	}
	client := &http.Client{Timeout: defaultSTSTimeout}
	if o.HTTPClient != nil {
		c := *o.HTTPClient
		client = &c
	}
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	client.Jar = nil
	return &Verifier{
		endpoint: u.String(), host: host,
		region: o.Region, account: o.Account,
		roles:  slices.Clone(o.NodeRoles),
		client: client,
	}, nil
}

// Type is the evidence block type this verifier reads.
func (v *Verifier) Type() string { return agentid.EvidenceType }

// Peek reads the replay key and the binding without verifying anything.
func (v *Verifier) Peek(data []byte) (replayKey, binding string, err error) {
	r, err := agentid.DecodeSTSRequest(data)
	if err != nil {
		return "", "", err
	}
	auth, err := agentid.ParseAuthorization(r.Authorization)
	if err != nil {
		return "", "", err
	}
	return ReplayKeyPrefix + auth.Signature, r.Binding, nil
}

// Verify checks the evidence against binding at now and asks STS whose
// signature it is. A *cloud.Rejection is a verdict; any other error (STS
// unreachable, throttling, a 5xx, an unreadable answer) is transient.
// Everything that needs no call (form, scope, binding, date) is checked
// before STS is asked, and STS's answers that blame the evidence
// (stsVerdicts) are verdicts, so evidence that can never verify is denied,
// not retried.
func (v *Verifier) Verify(ctx context.Context, data []byte, binding string, now time.Time) (cloud.Attestation, error) {
	r, auth, signedAt, err := v.check(data, binding, now)
	if err != nil {
		return cloud.Attestation{}, err
	}
	arn, err := v.callerIdentity(ctx, r)
	if err != nil {
		return cloud.Attestation{}, err
	}
	id, err := v.instanceOf(arn)
	if err != nil {
		klog.V(2).InfoS("AWS evidence of a principal that is not a node", "arn", arn, "err", err)
		return cloud.Attestation{}, err
	}
	klog.V(4).InfoS("AWS evidence verified", "instance", id, "arn", arn, "signedAt", signedAt)
	return cloud.Attestation{
		InstanceID: id,
		ReplayKey:  ReplayKeyPrefix + auth.Signature,
		IssuedAt:   signedAt,
		ExpiresAt:  signedAt.Add(agentid.SignatureLifetime),
	}, nil
}

// check makes every check that needs no call: the form, the credential
// scope, the signed headers, the binding and the date.
func (v *Verifier) check(data []byte, binding string, now time.Time) (agentid.STSRequest, agentid.SigV4Auth, time.Time, error) {
	var none agentid.SigV4Auth
	r, err := agentid.DecodeSTSRequest(data)
	if err != nil {
		return r, none, time.Time{}, cloud.Reject(cloud.RejectMalformed, err)
	}
	auth, err := agentid.ParseAuthorization(r.Authorization)
	if err != nil {
		return r, none, time.Time{}, cloud.Reject(cloud.RejectMalformed, err)
	}
	if auth.Service != agentid.STSService {
		return r, none, time.Time{}, cloud.Reject(cloud.RejectIssuer, fmt.Errorf("signature is scoped to service %q, want %q", auth.Service, agentid.STSService))
	}
	if auth.Region != v.region {
		return r, none, time.Time{}, cloud.Reject(cloud.RejectIssuer, fmt.Errorf("signature is scoped to region %q, want %q", auth.Region, v.region))
	}
	if r.Binding != binding {
		return r, none, time.Time{}, cloud.Reject(cloud.RejectBinding, fmt.Errorf("the signed %s is not the CSR key's binding", agentid.BindingHeader))
	}
	signedAt, err := agentid.ParseAmzDate(r.Date)
	if err != nil {
		return r, none, time.Time{}, cloud.Reject(cloud.RejectMalformed, err)
	}
	switch {
	case auth.ScopeDate != signedAt.Format(agentid.ScopeDateLayout):
		return r, none, time.Time{}, cloud.Reject(cloud.RejectExpired, fmt.Errorf("credential scope date %s is not the date of x-amz-date %s", auth.ScopeDate, r.Date))
	case now.Sub(signedAt) > agentid.SignatureLifetime:
		return r, none, time.Time{}, cloud.Reject(cloud.RejectExpired, fmt.Errorf("signed at %s, more than %s before %s", r.Date, agentid.SignatureLifetime, now.UTC().Format(agentid.AmzDateLayout)))
	case signedAt.Sub(now) > agentid.MaxFutureSkew:
		return r, none, time.Time{}, cloud.Reject(cloud.RejectExpired, fmt.Errorf("signed at %s, more than %s after %s", r.Date, agentid.MaxFutureSkew, now.UTC().Format(agentid.AmzDateLayout)))
	}
	return r, auth, signedAt, nil
}

// instanceOf accepts only an instance profile's session of a node role in
// the account, arn:<partition>:sts::<account>:assumed-role/<role>/<instance id>,
// and returns the instance id.
func (v *Verifier) instanceOf(arn string) (string, error) {
	f := strings.SplitN(arn, ":", 6)
	if len(f) != 6 || f[0] != "arn" || !partitionRE.MatchString(f[1]) || f[2] != "sts" || f[3] != "" {
		return "", cloud.Reject(cloud.RejectIssuer, fmt.Errorf("caller %q is not an assumed role", arn))
	}
	if f[4] != v.account {
		return "", cloud.Reject(cloud.RejectIssuer, fmt.Errorf("caller %q is of account %s, want %s", arn, f[4], v.account))
	}
	res := strings.Split(f[5], "/")
	if len(res) != 3 || res[0] != "assumed-role" {
		return "", cloud.Reject(cloud.RejectIssuer, fmt.Errorf("caller %q is not an assumed role", arn))
	}
	if !slices.Contains(v.roles, res[1]) {
		return "", cloud.Reject(cloud.RejectIssuer, fmt.Errorf("caller %q: role %q is not a node role", arn, res[1]))
	}
	if !instanceIDRE.MatchString(res[2]) {
		return "", cloud.Reject(cloud.RejectIssuer, fmt.Errorf("caller %q: session %q is not an EC2 instance id", arn, res[2]))
	}
	return res[2], nil
}

// callerIdentity rebuilds the request from the evidence's header values,
// sends it to the configured endpoint, and returns the caller's ARN.
func (v *Verifier) callerIdentity(ctx context.Context, r agentid.STSRequest) (string, error) {
	req, err := http.NewRequestWithContext(ctx, agentid.STSMethod, v.endpoint, strings.NewReader(agentid.STSBody))
	if err != nil {
		return "", fmt.Errorf("build the STS request: %w", err)
	}
	req.Host = v.host
	req.Header.Set("Content-Type", agentid.STSContentType)
	req.Header.Set("X-Amz-Date", r.Date)
	if r.SecurityToken != "" {
		req.Header.Set("X-Amz-Security-Token", r.SecurityToken)
	}
	req.Header.Set(agentid.BindingHeader, r.Binding)
	req.Header.Set("Authorization", r.Authorization)

	resp, err := v.client.Do(req)
	if err != nil {
		return "", fmt.Errorf("STS GetCallerIdentity at %s: %w", v.endpoint, err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxSTSResponse+1))
	switch {
	case err != nil:
		return "", fmt.Errorf("STS GetCallerIdentity at %s: reading the answer: %w", v.endpoint, err)
	case len(body) > maxSTSResponse:
		return "", fmt.Errorf("STS GetCallerIdentity at %s: answer (HTTP %d) over %d bytes", v.endpoint, resp.StatusCode, maxSTSResponse)
	case resp.StatusCode == http.StatusOK:
		return parseCallerIdentity(body, v.account)
	case resp.StatusCode == http.StatusBadRequest || resp.StatusCode == http.StatusForbidden:
		return "", stsError(resp.StatusCode, body)
	}
	return "", fmt.Errorf("STS GetCallerIdentity at %s: HTTP %d", v.endpoint, resp.StatusCode)
}

// parseCallerIdentity reads a GetCallerIdentityResponse: exactly one Arn
// and one Account, which must be the ARN's.
func parseCallerIdentity(body []byte, account string) (string, error) {
	var out struct {
		XMLName xml.Name `xml:"GetCallerIdentityResponse"`
		Arn     []string `xml:"GetCallerIdentityResult>Arn"`
		Account []string `xml:"GetCallerIdentityResult>Account"`
	}
	if err := xml.Unmarshal(body, &out); err != nil {
		return "", fmt.Errorf("STS GetCallerIdentity answer: %w", err)
	}
	if len(out.Arn) != 1 || len(out.Account) != 1 {
		return "", fmt.Errorf("STS GetCallerIdentity answer: %d Arn and %d Account elements, want one each", len(out.Arn), len(out.Account))
	}
	arn, acct := strings.TrimSpace(out.Arn[0]), strings.TrimSpace(out.Account[0])
	if acct != account {
		return "", cloud.Reject(cloud.RejectIssuer, fmt.Errorf("caller %q is of account %s, want %s", arn, acct, account))
	}
	return arn, nil
}

// STS error codes (of HTTP 400 or 403) that are verdicts on the evidence:
// its signature, credentials or session token are at fault, and the same
// request would get the same answer for ever. Any other code (Throttling,
// ServiceUnavailable, InternalFailure, RegionDisabledException, ...), any
// other status (5xx) and no answer at all are transient.
var stsVerdicts = map[string]string{
	"SignatureDoesNotMatch":      cloud.RejectSignature,
	"IncompleteSignature":        cloud.RejectSignature,
	"InvalidClientTokenId":       cloud.RejectSignature,
	"MissingAuthenticationToken": cloud.RejectSignature,
	"AccessDenied":               cloud.RejectSignature,
	"ExpiredToken":               cloud.RejectExpired,
	"ExpiredTokenException":      cloud.RejectExpired,
	"RequestExpired":             cloud.RejectExpired,
}

// stsError reads an ErrorResponse of HTTP status 400 or 403.
func stsError(status int, body []byte) error {
	var out struct {
		XMLName xml.Name `xml:"ErrorResponse"`
		Code    string   `xml:"Error>Code"`
		Message string   `xml:"Error>Message"`
	}
	if err := xml.Unmarshal(body, &out); err != nil || out.Code == "" {
		return fmt.Errorf("STS GetCallerIdentity: HTTP %d without a readable error", status)
	}
	msg := out.Message
	if len(msg) > maxSTSMessage {
		msg = msg[:maxSTSMessage] + "..."
	}
	err := fmt.Errorf("STS GetCallerIdentity: HTTP %d %s: %q", status, out.Code, msg)
	if reason, ok := stsVerdicts[out.Code]; ok {
		return cloud.Reject(reason, err)
	}
	return err
}
