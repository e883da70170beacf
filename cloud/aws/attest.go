package aws

import (
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"

	"k8s.io/klog/v2"

	"github.com/mooring-dev/mooring/cloud"
	"github.com/mooring-dev/mooring/cloud/aws/agentid"
	"github.com/mooring-dev/mooring/cloud/view"
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
	// An STSEndpoint of AWS's must be one that accepts it: its regional
	// endpoint, or the global one for us-east-1 only.
	Region string
	// Account is the AWS account the instances belong to (required, 12
	// digits).
	Account string
	// NodeRoles are the IAM role names of the instance profiles allowed to
	// join (required).
	NodeRoles []string
	// NodeInstanceProfiles are the names of the node roles' instance
	// profiles: a joining instance must be associated with one of them
	// when the approver judges it (CheckInstance). Empty: the NodeRoles'
	// names.
	NodeInstanceProfiles []string
	// NodeRoleIDs are node roles' unique ids (AROA...), by role name:
	// a session of such a role must carry that id in its UserId. A role
	// without one is trusted by its name.
	NodeRoleIDs map[string]string
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
	profiles []string
	roleIDs  map[string]string // by role name
	client   *http.Client
}

var (
	_ cloud.EvidenceVerifier = (*Verifier)(nil)
	_ cloud.InstanceChecker  = (*Verifier)(nil)
)

var (
	accountRE = regexp.MustCompile(`^[0-9]{12}$`)
	// IAM role names: 1-64 of letters, digits and +=,.@_-.
	roleNameRE = regexp.MustCompile(`^[A-Za-z0-9+=,.@_-]{1,64}$`)
	// IAM instance profile names: 1-128 of the same.
	profileNameRE = regexp.MustCompile(`^[A-Za-z0-9+=,.@_-]{1,128}$`)
	// IAM role ids: AROA, the prefix of roles' unique ids, then word
	// characters up to 16-128 in all (the IAM API's RoleId).
	roleIDRE = regexp.MustCompile(`^AROA[A-Za-z0-9_]{12,124}$`)
	// EC2 instance ids: i- and 8 or 17 hex digits.
	instanceIDRE = regexp.MustCompile(`^i-([0-9a-f]{8}|[0-9a-f]{17})$`)
	partitionRE  = regexp.MustCompile(`^aws(-[a-z]+){0,3}$`)
)

// validRoleID checks a configured role id: a node role's, of a role's
// unique id form. A session's UserId ("AROA...:i-...") or an ARN is
// refused with a hint.
func validRoleID(role, id string, roles []string) error {
	switch {
	case !slices.Contains(roles, role):
		return fmt.Errorf("role id of %q: not a node role", role)
	case strings.Contains(id, ":"):
		return fmt.Errorf("role id of %s: %q holds a colon; want the role's unique id (RoleId in `aws iam get-role`), not an ARN or a session's UserId", role, id)
	case !roleIDRE.MatchString(id):
		return fmt.Errorf("role id of %s: %q is not an IAM role's unique id (AROA and 12-124 letters, digits or _)", role, id)
	}
	return nil
}

// NewVerifier checks the options and makes a verifier; it calls nothing.
func NewVerifier(o VerifierOptions) (*Verifier, error) {
	u, host, err := agentid.ParseEndpoint(o.STSEndpoint)
	if err != nil {
		return nil, fmt.Errorf("aws verifier: STSEndpoint: %w", err)
	}
	if !agentid.ValidRegion(o.Region) {
		return nil, fmt.Errorf("aws verifier: region %q: want a region name such as us-east-1", o.Region)
	}
	// Requests go to the verifier's own endpoint and must be signed for
	// Region: an endpoint of AWS's that accepts another region's signatures
	// would refuse every join.
	if err := agentid.CheckEndpointRegion(o.STSEndpoint, o.Region); err != nil {
		return nil, fmt.Errorf("aws verifier: %w", err)
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
	profiles := o.NodeInstanceProfiles
	if len(profiles) == 0 {
		profiles = o.NodeRoles
	}
	for _, p := range profiles {
		if !profileNameRE.MatchString(p) {
			return nil, fmt.Errorf("aws verifier: node instance profile %q: want an IAM instance profile name (not an ARN)", p)
		}
	}
	for role, id := range o.NodeRoleIDs {
		if err := validRoleID(role, id, o.NodeRoles); err != nil {
			return nil, fmt.Errorf("aws verifier: %w", err)
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
		roles:    slices.Clone(o.NodeRoles),
		profiles: slices.Clone(profiles),
		roleIDs:  maps.Clone(o.NodeRoleIDs),
		client:   client,
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

// PeekMachine reads the access key id the request was signed with, without
// verifying anything: an instance's credentials are its own role session's,
// so the key id stands for the instance (STS names the instance only once
// it is asked).
func (v *Verifier) PeekMachine(data []byte) (string, error) {
	r, err := agentid.DecodeSTSRequest(data)
	if err != nil {
		return "", err
	}
	auth, err := agentid.ParseAuthorization(r.Authorization)
	if err != nil {
		return "", err
	}
	if auth.AccessKeyID == "" {
		return "", errors.New("authorization names no access key")
	}
	return auth.AccessKeyID, nil
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
	arn, userID, err := v.callerIdentity(ctx, r)
	if err != nil {
		return cloud.Attestation{}, err
	}
	role, id, err := v.instanceOf(arn)
	if err == nil {
		err = v.checkRoleID(arn, role, id, userID)
	}
	if err != nil {
		klog.V(2).InfoS("AWS evidence of a principal that is not a node", "arn", arn, "userID", userID, "err", err)
		return cloud.Attestation{}, err
	}
	klog.V(4).InfoS("AWS evidence verified", "instance", id, "arn", arn, "signedAt", signedAt)
	return cloud.Attestation{
		InstanceID: id,
		ReplayKey:  ReplayKeyPrefix + auth.Signature,
		IssuedAt:   signedAt,
		ExpiresAt:  signedAt.Add(agentid.SignatureLifetime),
		Principal:  arn,
	}, nil
}

// CheckInstance requires the instance's current instance profile, as EC2
// describes it to the view, to be one of the node instance profiles: a
// node role's credentials stay valid for hours after the instance's
// profile is swapped to another role's or removed, and STS vouches for
// them as a node role session all the same. An instance profile ARN that
// cannot be read is an unknown answer: transient.
func (v *Verifier) CheckInstance(att cloud.Attestation, in view.Instance) error {
	if in.Identity == "" {
		return cloud.Reject(cloud.RejectInstanceIdentity,
			fmt.Errorf("instance %s has no instance profile now (the evidence was made as %s); want one of %v", in.ID, att.Principal, v.profiles))
	}
	account, name, err := parseProfileARN(in.Identity)
	if err != nil {
		return fmt.Errorf("EC2's record of instance %s: %w", in.ID, err)
	}
	if account != v.account || !slices.Contains(v.profiles, name) {
		return cloud.Reject(cloud.RejectInstanceIdentity,
			fmt.Errorf("instance %s's instance profile is now %s (the evidence was made as %s); want one of %v of account %s", in.ID, in.Identity, att.Principal, v.profiles, v.account))
	}
	return nil
}

// parseProfileARN reads arn:<partition>:iam::<account>:instance-profile/[<path>/]<name>.
func parseProfileARN(arn string) (account, name string, err error) {
	f := strings.SplitN(arn, ":", 6)
	if len(f) != 6 || f[0] != "arn" || !partitionRE.MatchString(f[1]) || f[2] != "iam" || f[3] != "" || !accountRE.MatchString(f[4]) {
		return "", "", fmt.Errorf("instance profile %q is not an IAM ARN", arn)
	}
	rest, ok := strings.CutPrefix(f[5], "instance-profile/")
	name = rest[strings.LastIndexByte(rest, '/')+1:]
	if !ok || !profileNameRE.MatchString(name) {
		return "", "", fmt.Errorf("instance profile %q: not an instance profile ARN", arn)
	}
	return f[4], name, nil
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
// and returns the role and the instance id.
func (v *Verifier) instanceOf(arn string) (role, id string, err error) {
	reject := func(format string, args ...any) (string, string, error) {
		return "", "", cloud.Reject(cloud.RejectIssuer, fmt.Errorf(format, args...))
	}
	f := strings.SplitN(arn, ":", 6)
	if len(f) != 6 || f[0] != "arn" || !partitionRE.MatchString(f[1]) || f[2] != "sts" || f[3] != "" {
		return reject("caller %q is not an assumed role", arn)
	}
	if f[4] != v.account {
		return reject("caller %q is of account %s, want %s", arn, f[4], v.account)
	}
	res := strings.Split(f[5], "/")
	if len(res) != 3 || res[0] != "assumed-role" {
		return reject("caller %q is not an assumed role", arn)
	}
	if !slices.Contains(v.roles, res[1]) {
		return reject("caller %q: role %q is not a node role", arn, res[1])
	}
	if !instanceIDRE.MatchString(res[2]) {
		return reject("caller %q: session %q is not an EC2 instance id", arn, res[2])
	}
	return res[1], res[2], nil
}

// checkRoleID compares the role's unique id in STS's UserId, which for a
// role session is "<role id>:<session name>", with the id configured for
// the role, if any: a role deleted and created again under its name is a
// new role with a new id. A UserId that is not of that form, for a role
// whose id is configured, is an answer the verifier cannot read:
// transient.
func (v *Verifier) checkRoleID(arn, role, session, userID string) error {
	want, pinned := v.roleIDs[role]
	if !pinned {
		return nil
	}
	got, name, ok := strings.Cut(userID, ":")
	if !ok || name != session || got == "" {
		return fmt.Errorf("STS GetCallerIdentity answer: UserId %q of %s is not <role id>:%s", userID, arn, session)
	}
	if got != want {
		return cloud.Reject(cloud.RejectIssuer, fmt.Errorf("caller %q: role %s has the unique id %s, not the configured %s (the role was deleted and created again under its name?)", arn, role, got, want))
	}
	return nil
}

// callerIdentity rebuilds the request from the evidence's header values,
// sends it to the configured endpoint, and returns the caller's ARN and
// UserId ("" when STS gives none).
func (v *Verifier) callerIdentity(ctx context.Context, r agentid.STSRequest) (arn, userID string, err error) {
	req, err := http.NewRequestWithContext(ctx, agentid.STSMethod, v.endpoint, strings.NewReader(agentid.STSBody))
	if err != nil {
		return "", "", fmt.Errorf("build the STS request: %w", err)
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
		return "", "", fmt.Errorf("STS GetCallerIdentity at %s: %w", v.endpoint, err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxSTSResponse+1))
	switch {
	case err != nil:
		return "", "", fmt.Errorf("STS GetCallerIdentity at %s: reading the answer: %w", v.endpoint, err)
	case len(body) > maxSTSResponse:
		return "", "", fmt.Errorf("STS GetCallerIdentity at %s: answer (HTTP %d) over %d bytes", v.endpoint, resp.StatusCode, maxSTSResponse)
	case resp.StatusCode == http.StatusOK:
		return parseCallerIdentity(body, v.account)
	case resp.StatusCode == http.StatusBadRequest || resp.StatusCode == http.StatusForbidden:
		return "", "", stsError(resp.StatusCode, body)
	}
	return "", "", fmt.Errorf("STS GetCallerIdentity at %s: HTTP %d", v.endpoint, resp.StatusCode)
}

// parseCallerIdentity reads a GetCallerIdentityResponse: exactly one Arn
// and one Account, which must be the ARN's, and at most one UserId.
func parseCallerIdentity(body []byte, account string) (arn, userID string, err error) {
	var out struct {
		XMLName xml.Name `xml:"GetCallerIdentityResponse"`
		Arn     []string `xml:"GetCallerIdentityResult>Arn"`
		UserID  []string `xml:"GetCallerIdentityResult>UserId"`
		Account []string `xml:"GetCallerIdentityResult>Account"`
	}
	if err := xml.Unmarshal(body, &out); err != nil {
		return "", "", fmt.Errorf("STS GetCallerIdentity answer: %w", err)
	}
	if len(out.Arn) != 1 || len(out.Account) != 1 || len(out.UserID) > 1 {
		return "", "", fmt.Errorf("STS GetCallerIdentity answer: %d Arn, %d Account and %d UserId elements, want one each (UserId: at most one)",
			len(out.Arn), len(out.Account), len(out.UserID))
	}
	arn, acct := strings.TrimSpace(out.Arn[0]), strings.TrimSpace(out.Account[0])
	if acct != account {
		return "", "", cloud.Reject(cloud.RejectIssuer, fmt.Errorf("caller %q is of account %s, want %s", arn, acct, account))
	}
	if len(out.UserID) == 1 {
		userID = strings.TrimSpace(out.UserID[0])
	}
	return arn, userID, nil
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
