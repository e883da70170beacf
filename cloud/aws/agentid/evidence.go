package agentid

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/mooring-dev/mooring/internal/strictjson"
)

// EvidenceType is the PEM block type of AWS evidence: the header values of
// an sts:GetCallerIdentity request the node signed (SigV4) with its
// instance profile's credentials, the CSR key's binding among the signed
// headers.
const EvidenceType = "MOORING AWS STS REQUEST"

// The one request the evidence may stand for. The approver builds it
// itself; only the signed header values come from the evidence.
const (
	STSMethod      = "POST"
	STSBody        = "Action=GetCallerIdentity&Version=2011-06-15"
	STSContentType = "application/x-www-form-urlencoded; charset=utf-8"
	STSService     = "sts"
	// BindingHeader carries the CSR key's binding (evidence.Binding) in
	// the signed request.
	BindingHeader = "X-Mooring-Binding"
)

// SigV4 facts: a signed request is good for 15 minutes either side of its
// X-Amz-Date at STS; the approver allows less into the future.
const (
	sigv4Algorithm  = "AWS4-HMAC-SHA256"
	sigv4Terminator = "aws4_request"
	AmzDateLayout   = "20060102T150405Z"
	ScopeDateLayout = "20060102"
	// SignatureLifetime is how long after its X-Amz-Date a signed request
	// is accepted.
	SignatureLifetime = 15 * time.Minute
	// MaxFutureSkew is how far ahead of the approver's clock X-Amz-Date may
	// be.
	MaxFutureSkew = 5 * time.Minute
)

// MaxEvidenceSize bounds the evidence's JSON document.
const MaxEvidenceSize = 8 << 10

// Bounds and keys of the wire format.
const (
	maxAuthorization = 1024
	maxSecurityToken = 6 << 10
	maxBinding       = 128
	maxSignedHeaders = 8
	evidenceVersion  = "1"
	keyAuthorization = "authorization"
	keyDate          = "x-amz-date"
	keySecurityToken = "x-amz-security-token"
	keyBinding       = "x-mooring-binding"
)

// Lower-case names of the headers a signature may cover.
const (
	headerHost        = "host"
	headerDate        = "x-amz-date"
	headerToken       = "x-amz-security-token"
	headerBinding     = "x-mooring-binding"
	headerContentType = "content-type"
	headerContentLen  = "content-length"
)

// signableHeaders are the only headers a signature may cover: those the
// approver sends when it rebuilds the request.
var signableHeaders = []string{headerContentLen, headerContentType, headerHost, headerDate, headerToken, headerBinding}

// STSRequest is the evidence: the values of the signed headers of one
// GetCallerIdentity request, nothing the approver makes itself (method,
// URL, host, body).
//
// On the wire it is one JSON object of strings, the keys the lower-case
// header names, plus the format's version:
//
//	{"v":1,"authorization":"AWS4-HMAC-SHA256 Credential=…","x-amz-date":"20261123T101500Z",
//	 "x-amz-security-token":"…","x-mooring-binding":"…"}
//
// x-amz-security-token is absent for long-term credentials; every other key
// is required, and no other key, no duplicate and no nested value is
// accepted.
type STSRequest struct {
	Authorization string `json:"authorization"`
	Date          string `json:"x-amz-date"`
	SecurityToken string `json:"x-amz-security-token,omitempty"`
	Binding       string `json:"x-mooring-binding"`
}

// Encode writes the evidence, after checking it is what DecodeSTSRequest
// accepts.
func (r STSRequest) Encode() ([]byte, error) {
	if err := r.validate(); err != nil {
		return nil, err
	}
	data, err := json.Marshal(struct {
		V json.Number `json:"v"`
		STSRequest
	}{json.Number(evidenceVersion), r})
	if err != nil {
		return nil, err
	}
	if len(data) > MaxEvidenceSize {
		return nil, fmt.Errorf("AWS evidence is %d bytes, limit %d", len(data), MaxEvidenceSize)
	}
	return data, nil
}

// DecodeSTSRequest reads evidence strictly (internal/strictjson): one JSON
// object, version 1, only the known keys, each at most once, string values
// of printable ASCII within their bounds, nothing after the object.
func DecodeSTSRequest(data []byte) (STSRequest, error) {
	var r STSRequest
	if len(data) > MaxEvidenceSize {
		return r, fmt.Errorf("evidence is %d bytes, limit %d", len(data), MaxEvidenceSize)
	}
	// Unknown keys, a key of another case, a key twice, trailing data and
	// values of other types are refused by the strict decode.
	var wire struct {
		V             json.RawMessage `json:"v"`
		Authorization string          `json:"authorization"`
		Date          string          `json:"x-amz-date"`
		SecurityToken *string         `json:"x-amz-security-token"`
		Binding       string          `json:"x-mooring-binding"`
	}
	if err := strictjson.UnmarshalKnown(data, &wire); err != nil {
		return r, fmt.Errorf("evidence JSON: %w", err)
	}
	switch {
	case wire.V == nil:
		return r, errors.New("evidence has no version")
	case string(wire.V) != evidenceVersion:
		return r, fmt.Errorf("evidence version %.10s: want %s", wire.V, evidenceVersion)
	case wire.SecurityToken != nil && *wire.SecurityToken == "":
		return r, errors.New("evidence has an empty x-amz-security-token")
	}
	r = STSRequest{Authorization: wire.Authorization, Date: wire.Date, Binding: wire.Binding}
	if wire.SecurityToken != nil {
		r.SecurityToken = *wire.SecurityToken
	}
	return r, r.validate()
}

// validate bounds each value and checks the Authorization header's form.
func (r STSRequest) validate() error {
	for _, f := range []struct {
		name, value string
		max         int
		required    bool
	}{
		{keyAuthorization, r.Authorization, maxAuthorization, true},
		{keyDate, r.Date, len(AmzDateLayout), true},
		{keySecurityToken, r.SecurityToken, maxSecurityToken, false},
		{keyBinding, r.Binding, maxBinding, true},
	} {
		switch {
		case f.value == "" && f.required:
			return fmt.Errorf("evidence has no %s", f.name)
		case len(f.value) > f.max:
			return fmt.Errorf("evidence %s is %d bytes, limit %d", f.name, len(f.value), f.max)
		case !printable(f.value, f.name == keyAuthorization):
			return fmt.Errorf("evidence %s holds characters other than printable ASCII", f.name)
		}
	}
	if _, err := ParseAmzDate(r.Date); err != nil {
		return err
	}
	auth, err := ParseAuthorization(r.Authorization)
	if err != nil {
		return err
	}
	return checkSignedHeaders(auth.SignedHeaders, r.SecurityToken != "")
}

// printable reports whether s is printable ASCII; spaces only if allowed,
// and never at either end.
func printable(s string, spaces bool) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c > 0x7e || (c == ' ' && (!spaces || i == 0 || i == len(s)-1)) {
			return false
		}
	}
	return true
}

// SigV4Auth is a parsed SigV4 Authorization header.
type SigV4Auth struct {
	AccessKeyID string
	// ScopeDate (yyyymmdd), Region and Service are the credential scope.
	ScopeDate, Region, Service string
	// SignedHeaders are lower case, sorted, without duplicates.
	SignedHeaders []string
	// Signature is 64 lower-case hex digits.
	Signature string
}

var (
	accessKeyIDRE = regexp.MustCompile(`^[A-Za-z0-9]{4,128}$`)
	scopeDateRE   = regexp.MustCompile(`^[0-9]{8}$`)
	scopeNameRE   = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,31}$`)
	headerNameRE  = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,63}$`)
	signatureRE   = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// ParseAuthorization reads a header of exactly the form the SDK's signer
// writes:
//
//	AWS4-HMAC-SHA256 Credential=AKID/yyyymmdd/region/service/aws4_request, SignedHeaders=a;b;c, Signature=<64 hex>
func ParseAuthorization(h string) (SigV4Auth, error) {
	var a SigV4Auth
	rest, ok := strings.CutPrefix(h, sigv4Algorithm+" ")
	if !ok {
		return a, fmt.Errorf("authorization: want algorithm %s", sigv4Algorithm)
	}
	parts := strings.Split(rest, ", ")
	if len(parts) != 3 {
		return a, errors.New("authorization: want Credential, SignedHeaders and Signature, in that order")
	}
	cred, ok1 := strings.CutPrefix(parts[0], "Credential=")
	signed, ok2 := strings.CutPrefix(parts[1], "SignedHeaders=")
	sig, ok3 := strings.CutPrefix(parts[2], "Signature=")
	if !ok1 || !ok2 || !ok3 {
		return a, errors.New("authorization: want Credential, SignedHeaders and Signature, in that order")
	}
	scope := strings.Split(cred, "/")
	if len(scope) != 5 || scope[4] != sigv4Terminator {
		return a, fmt.Errorf("authorization: credential scope: want <key id>/<yyyymmdd>/<region>/<service>/%s", sigv4Terminator)
	}
	a.AccessKeyID, a.ScopeDate, a.Region, a.Service = scope[0], scope[1], scope[2], scope[3]
	switch {
	case !accessKeyIDRE.MatchString(a.AccessKeyID):
		return a, errors.New("authorization: credential scope: malformed access key id")
	case !scopeDateRE.MatchString(a.ScopeDate):
		return a, errors.New("authorization: credential scope: malformed date")
	case !scopeNameRE.MatchString(a.Region) || !scopeNameRE.MatchString(a.Service):
		return a, errors.New("authorization: credential scope: malformed region or service")
	case !signatureRE.MatchString(sig):
		return a, errors.New("authorization: signature: want 64 lower-case hex digits")
	}
	a.Signature = sig
	a.SignedHeaders = strings.Split(signed, ";")
	if len(a.SignedHeaders) > maxSignedHeaders {
		return a, fmt.Errorf("authorization: %d signed headers, limit %d", len(a.SignedHeaders), maxSignedHeaders)
	}
	for i, name := range a.SignedHeaders {
		if !headerNameRE.MatchString(name) {
			return a, errors.New("authorization: signed headers: a name is not a lower-case header name")
		}
		if i > 0 && a.SignedHeaders[i-1] >= name {
			return a, errors.New("authorization: signed headers: not sorted or repeated")
		}
	}
	return a, nil
}

// checkSignedHeaders requires host, x-amz-date and x-mooring-binding among
// the signed headers, x-amz-security-token exactly when a token is sent,
// and nothing the approver would not send.
func checkSignedHeaders(signed []string, token bool) error {
	for _, h := range signed {
		if !slices.Contains(signableHeaders, h) {
			return fmt.Errorf("authorization: signed header %q is not one the approver sends", h)
		}
	}
	for _, h := range []string{headerHost, headerDate, headerBinding} {
		if !slices.Contains(signed, h) {
			return fmt.Errorf("authorization: %s is not among the signed headers", h)
		}
	}
	if slices.Contains(signed, headerToken) != token {
		if token {
			return errors.New("authorization: a security token is sent but not signed")
		}
		return errors.New("authorization: x-amz-security-token is signed but none is sent")
	}
	return nil
}

// ParseAmzDate reads an X-Amz-Date value (basic ISO 8601, UTC).
func ParseAmzDate(s string) (time.Time, error) {
	t, err := time.Parse(AmzDateLayout, s)
	if err != nil || t.Format(AmzDateLayout) != s {
		return time.Time{}, fmt.Errorf("x-amz-date %q: want yyyymmddThhmmssZ", s)
	}
	return t, nil
}

// ParseEndpoint checks an STS URL: http or https, a host, no user, no
// path beyond "/", no query or fragment. It returns the URL to send to (path
// "/") and the Host header SigV4 signs (without a default port).
func ParseEndpoint(s string) (*url.URL, string, error) {
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return nil, "", err
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, "", fmt.Errorf("%q: want an http or https URL", s)
	case u.Host == "" || u.Hostname() == "" || u.User != nil:
		return nil, "", fmt.Errorf("%q: want a host and no user", s)
	case (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || u.Opaque != "":
		return nil, "", fmt.Errorf("%q: want no path, query or fragment", s)
	}
	host := u.Host
	if p := u.Port(); (u.Scheme == "https" && p == "443") || (u.Scheme == "http" && p == "80") {
		host = u.Hostname()
		if strings.Contains(host, ":") {
			host = "[" + host + "]"
		}
	}
	return &url.URL{Scheme: u.Scheme, Host: u.Host, Path: "/"}, host, nil
}

// ValidRegion reports whether region can be the region of a credential
// scope, such as us-east-1.
func ValidRegion(region string) bool { return scopeNameRE.MatchString(region) }
