package awstest

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

const (
	sigV4Algorithm = "AWS4-HMAC-SHA256"
	amzDateFormat  = "20060102T150405Z"
	// maxSkew is how far a signature's date may be from Now either way.
	maxSkew = 15 * time.Minute
)

// apiError is an error answer of the Query APIs.
type apiError struct {
	status        int
	code, message string
}

func (e *apiError) Error() string { return fmt.Sprintf("%d %s: %s", e.status, e.code, e.message) }

func signatureMismatch(msg string) *apiError {
	return &apiError{http.StatusForbidden, "SignatureDoesNotMatch", msg}
}

func incompleteSignature(msg string) *apiError {
	return &apiError{http.StatusBadRequest, "IncompleteSignature", msg}
}

// authorization is a parsed SigV4 Authorization header.
type authorization struct {
	accessKeyID, date, region, service string
	signedHeaders                      []string
	signature                          string
}

// parseAuthorization reads "AWS4-HMAC-SHA256 Credential=AKID/DATE/REGION/
// SERVICE/aws4_request, SignedHeaders=a;b, Signature=HEX".
func parseAuthorization(h string) (authorization, *apiError) {
	var a authorization
	rest, ok := strings.CutPrefix(h, sigV4Algorithm+" ")
	if !ok {
		return a, incompleteSignature("Authorization header: want the " + sigV4Algorithm + " algorithm")
	}
	fields := map[string]string{}
	for part := range strings.SplitSeq(rest, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return a, incompleteSignature(fmt.Sprintf("Authorization header: %q is not a key=value pair", strings.TrimSpace(part)))
		}
		if _, dup := fields[k]; dup {
			return a, incompleteSignature("Authorization header: " + k + " given twice")
		}
		fields[k] = v
	}
	for _, k := range []string{"Credential", "SignedHeaders", "Signature"} {
		if fields[k] == "" {
			return a, incompleteSignature("Authorization header requires '" + k + "' parameter")
		}
	}
	scope := strings.Split(fields["Credential"], "/")
	if len(scope) != 5 || scope[4] != "aws4_request" {
		return a, incompleteSignature(fmt.Sprintf("Credential %q: want ACCESS_KEY/YYYYMMDD/REGION/SERVICE/aws4_request", fields["Credential"]))
	}
	a.accessKeyID, a.date, a.region, a.service = scope[0], scope[1], scope[2], scope[3]
	a.signedHeaders = strings.Split(fields["SignedHeaders"], ";")
	a.signature = fields["Signature"]
	return a, nil
}

// authenticate checks a request's SigV4 signature for service in the
// region of the endpoint it was sent to (endpointRegion) by signing the same request again with the SDK's signer,
// and says who signed it. body is the request's whole body.
func (c *Cloud) authenticate(r *http.Request, body []byte, service string) (principal, *apiError) {
	h := r.Header.Get("Authorization")
	if h == "" {
		if r.URL.Query().Has("X-Amz-Signature") {
			return principal{}, &apiError{http.StatusForbidden, "AccessDenied", "presigned requests are not supported by awstest; sign the Authorization header"}
		}
		return principal{}, &apiError{http.StatusForbidden, "MissingAuthenticationToken", "Request is missing Authentication Token"}
	}
	auth, aerr := parseAuthorization(h)
	if aerr != nil {
		return principal{}, aerr
	}
	if auth.service != service {
		return principal{}, signatureMismatch(fmt.Sprintf("Credential should be scoped to correct service: '%s'. ", service))
	}
	region := c.endpointRegion(r.Host, service)
	if auth.region != region {
		return principal{}, signatureMismatch(fmt.Sprintf("Credential should be scoped to a valid region, not '%s'. ", auth.region))
	}
	if !slices.Contains(auth.signedHeaders, "host") {
		return principal{}, incompleteSignature("'Host' or ':authority' must be a 'SignedHeader' in the AWS Authorization.")
	}
	if !slices.Contains(auth.signedHeaders, "x-amz-date") {
		return principal{}, incompleteSignature("'X-Amz-Date' must be a 'SignedHeader' in the AWS Authorization.")
	}
	amzDate := r.Header.Get("X-Amz-Date")
	signedAt, err := time.Parse(amzDateFormat, amzDate)
	if err != nil {
		return principal{}, incompleteSignature(fmt.Sprintf("X-Amz-Date %q: want the ISO 8601 basic format YYYYMMDD'T'HHMMSS'Z'", amzDate))
	}
	if auth.date != signedAt.Format("20060102") {
		return principal{}, signatureMismatch(fmt.Sprintf("Date in Credential scope does not match YYYYMMDD from ISO-8601 version of date from HTTP: '%s' != '%s', from '%s'.", auth.date, signedAt.Format("20060102"), amzDate))
	}
	now := c.now().UTC()
	if signedAt.Before(now.Add(-maxSkew)) {
		return principal{}, signatureMismatch(fmt.Sprintf("Signature expired: %s is now earlier than %s (%s - 15 min.)", amzDate, now.Add(-maxSkew).Format(amzDateFormat), now.Format(amzDateFormat)))
	}
	if signedAt.After(now.Add(maxSkew)) {
		return principal{}, signatureMismatch(fmt.Sprintf("Signature not yet current: %s is still later than %s (%s + 15 min.)", amzDate, now.Add(maxSkew).Format(amzDateFormat), now.Format(amzDateFormat)))
	}

	p, secret, aerr := c.lookupKey(auth.accessKeyID, r.Header.Get("X-Amz-Security-Token"), now)
	if aerr != nil {
		return principal{}, aerr
	}
	want, err := resign(r, body, auth, secret, service, region, signedAt)
	if err != nil {
		return principal{}, signatureMismatch("the request could not be signed again: " + err.Error())
	}
	if strings.Join(want.signedHeaders, ";") != strings.Join(auth.signedHeaders, ";") ||
		subtle.ConstantTimeCompare([]byte(want.signature), []byte(auth.signature)) != 1 {
		return principal{}, signatureMismatch("The request signature we calculated does not match the signature you provided. Check your AWS Secret Access Key and signing method. Consult the service documentation for details.")
	}
	return p, nil
}

// awsHostRE matches the host names AWS gives a service's endpoints:
// <service>.amazonaws.com (the global endpoint, served from us-east-1),
// <service>[-fips].<region>.amazonaws.com[.cn].
var awsHostRE = regexp.MustCompile(`^([a-z0-9]+)(?:-fips)?(?:\.([a-z]{2}(?:-[a-z]+)+-[0-9]+))?\.amazonaws\.com(?:\.cn)?$`)

// endpointRegion is the region whose signatures the endpoint a request was
// sent to accepts, as AWS decides it by the endpoint: a request whose Host
// names one of AWS's endpoints of the service is that endpoint's (us-east-1
// for the global one: sts.amazonaws.com accepts nothing else); any other
// Host (127.0.0.1:PORT) is the cloud's own region.
func (c *Cloud) endpointRegion(host, service string) string {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	m := awsHostRE.FindStringSubmatch(strings.ToLower(host))
	switch {
	case m == nil || m[1] != service:
		return c.region
	case m[2] == "":
		return "us-east-1"
	}
	return m[2]
}

// lookupKey finds the secret of an access key id: a user's, or a role
// session's whose session token must come with it and which must not have
// expired.
func (c *Cloud) lookupKey(accessKeyID, token string, now time.Time) (principal, string, *apiError) {
	invalid := &apiError{http.StatusForbidden, "InvalidClientTokenId", "The security token included in the request is invalid."}
	c.mu.Lock()
	defer c.mu.Unlock()
	if u, ok := c.users[accessKeyID]; ok {
		if token != "" {
			return principal{}, "", invalid
		}
		return principal{user: &u}, u.SecretAccessKey, nil
	}
	rc, ok := c.roleCreds[accessKeyID]
	if !ok {
		return principal{}, "", invalid
	}
	if subtle.ConstantTimeCompare([]byte(token), []byte(rc.creds.SessionToken)) != 1 {
		return principal{}, "", invalid
	}
	if !now.Before(rc.creds.Expires) {
		return principal{}, "", &apiError{http.StatusForbidden, "ExpiredToken", "The security token included in the request is expired"}
	}
	return principal{role: rc}, rc.creds.SecretAccessKey, nil
}

// resign signs, with the SDK's signer, a request holding only what the
// client said it signed: the method, path, query, body and the signed
// headers (the Host header and Content-Length as the request has them), and
// returns the Authorization it gets.
func resign(r *http.Request, body []byte, auth authorization, secret, service, region string, signedAt time.Time) (authorization, error) {
	u := &url.URL{Scheme: "http", Host: r.Host, Path: r.URL.Path, RawPath: r.URL.RawPath, RawQuery: r.URL.RawQuery}
	req, err := http.NewRequest(r.Method, u.String(), nil)
	if err != nil {
		return authorization{}, err
	}
	req.URL = u
	req.Host = r.Host
	for _, name := range auth.signedHeaders {
		switch name {
		case "host":
		case "content-length":
			req.ContentLength = int64(len(body))
		default:
			if vs := r.Header.Values(name); len(vs) > 0 {
				req.Header[http.CanonicalHeaderKey(name)] = slices.Clone(vs)
			}
		}
	}
	sum := sha256.Sum256(body)
	creds := aws.Credentials{AccessKeyID: auth.accessKeyID, SecretAccessKey: secret}
	if err := v4.NewSigner().SignHTTP(context.Background(), creds, req, hex.EncodeToString(sum[:]), service, region, signedAt); err != nil {
		return authorization{}, err
	}
	got, aerr := parseAuthorization(req.Header.Get("Authorization"))
	if aerr != nil {
		return authorization{}, aerr
	}
	return got, nil
}
