package awstest

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mooring-dev/mooring/cloud/cloudtest"
)

const (
	imdsTokenPath      = "/latest/api/token"
	imdsTokenHeader    = "X-Aws-Ec2-Metadata-Token"
	imdsTTLHeader      = "X-Aws-Ec2-Metadata-Token-Ttl-Seconds"
	imdsMaxTTLSeconds  = 21600
	imdsTimeFormat     = "2006-01-02T15:04:05Z"
	identityDocVersion = "2017-09-30"
)

// imdsServer is one instance's metadata service.
type imdsServer struct {
	id     string
	url    string
	tokens map[string]time.Time // token -> expiry; guarded by Cloud.mu
}

// IMDS returns the base URL ("http://127.0.0.1:PORT") of the instance's
// own IMDSv2, starting it on the first call; give it to imds.Options
// Endpoint. It answers only while the instance is running: otherwise it
// closes connections unanswered, as a stopped machine would.
func (c *Cloud) IMDS(id string) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.instances[id]; !ok {
		return "", fmt.Errorf("awstest: metadata service of %s: no such instance", id)
	}
	s, ok := c.imds[id]
	if !ok {
		s = &imdsServer{id: id, tokens: map[string]time.Time{}}
	}
	addr, err := c.servers.Instance(id, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { c.serveIMDS(s, w, r) }))
	if errors.Is(err, cloudtest.ErrClosed) {
		return "", errors.New("awstest: metadata service: the cloud is closed")
	}
	if err != nil {
		return "", fmt.Errorf("awstest: metadata service of %s: listen: %w", id, err)
	}
	s.url = "http://" + addr
	c.imds[id] = s
	return s.url, nil
}

// forgetTokensLocked invalidates an instance's metadata tokens.
func (c *Cloud) forgetTokensLocked(id string) {
	if s, ok := c.imds[id]; ok {
		clear(s.tokens)
	}
}

// serveIMDS answers one metadata request: the token PUT, or a GET with a
// valid token.
func (c *Cloud) serveIMDS(s *imdsServer, w http.ResponseWriter, r *http.Request) {
	c.mu.Lock()
	in, ok := c.instances[s.id]
	if !ok || in.State != stateRunning {
		c.mu.Unlock()
		// The machine is not running: nothing answers.
		panic(http.ErrAbortHandler)
	}
	f := c.countCall(ActionIMDS)
	c.mu.Unlock()
	w.Header().Set("Server", "EC2ws")
	if f != nil {
		http.Error(w, f.Code, f.Status)
		return
	}
	if r.URL.Path == imdsTokenPath {
		c.serveIMDSToken(s, w, r)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "Method Not Allowed", http.StatusMethodNotAllowed)
		return
	}
	now := c.now()
	c.mu.Lock()
	exp, ok := s.tokens[r.Header.Get(imdsTokenHeader)]
	c.mu.Unlock()
	if !ok || !now.Before(exp) {
		http.Error(w, "Unauthorized", http.StatusUnauthorized)
		return
	}
	rel, ok := strings.CutPrefix(r.URL.Path, "/latest/")
	if !ok && r.URL.Path != "/latest" {
		http.Error(w, "Not Found", http.StatusNotFound)
		return
	}
	body, contentType, found := c.metadata(in, strings.TrimSuffix(rel, "/"))
	if !found {
		http.Error(w, "Not Found", http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", contentType)
	_, _ = io.WriteString(w, body)
}

// serveIMDSToken issues a session token: PUT only, with a TTL of 1-21600
// seconds, and never through a proxy (X-Forwarded-For).
func (c *Cloud) serveIMDSToken(s *imdsServer, w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPut {
		w.Header().Set("Allow", "PUT")
		http.Error(w, "Method Not Allowed", http.StatusMethodNotAllowed)
		return
	}
	if r.Header.Get("X-Forwarded-For") != "" {
		http.Error(w, "Forbidden", http.StatusForbidden)
		return
	}
	ttl, err := strconv.Atoi(r.Header.Get(imdsTTLHeader))
	if err != nil || ttl < 1 || ttl > imdsMaxTTLSeconds {
		http.Error(w, "Bad Request", http.StatusBadRequest)
		return
	}
	tok := randomString(base64.RawURLEncoding, 42)
	c.mu.Lock()
	s.tokens[tok] = c.now().Add(time.Duration(ttl) * time.Second)
	c.mu.Unlock()
	w.Header().Set(imdsTTLHeader, strconv.Itoa(ttl))
	w.Header().Set("Content-Type", "text/plain")
	_, _ = io.WriteString(w, tok)
}

// identityDocument is dynamic/instance-identity/document.
type identityDocument struct {
	AccountID               string    `json:"accountId"`
	Architecture            string    `json:"architecture"`
	AvailabilityZone        string    `json:"availabilityZone"`
	BillingProducts         []string  `json:"billingProducts"`
	DevpayProductCodes      []string  `json:"devpayProductCodes"`
	MarketplaceProductCodes []string  `json:"marketplaceProductCodes"`
	ImageID                 string    `json:"imageId"`
	InstanceID              string    `json:"instanceId"`
	InstanceType            string    `json:"instanceType"`
	KernelID                *string   `json:"kernelId"`
	PendingTime             time.Time `json:"pendingTime"`
	PrivateIP               string    `json:"privateIp"`
	RamdiskID               *string   `json:"ramdiskId"`
	Region                  string    `json:"region"`
	Version                 string    `json:"version"`
}

// roleCredentialsDocument is iam/security-credentials/<role>.
type roleCredentialsDocument struct {
	Code            string
	LastUpdated     string
	Type            string
	AccessKeyID     string `json:"AccessKeyId"`
	SecretAccessKey string
	Token           string
	Expiration      string
}

// iamInfoDocument is iam/info.
type iamInfoDocument struct {
	Code               string
	LastUpdated        string
	InstanceProfileArn string
	InstanceProfileID  string `json:"InstanceProfileId"`
}

// metadata is the document at a path under /latest/ (without its trailing
// slash), or found false.
func (c *Cloud) metadata(in Instance, path string) (body, contentType string, found bool) {
	text := func(s string) (string, string, bool) { return s, "text/plain", true }
	list := func(entries ...string) (string, string, bool) { return text(strings.Join(entries, "\n")) }
	asJSON := func(v any) (string, string, bool) {
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return "", "", false
		}
		return string(b), "text/plain", true
	}
	md, isMetadata := strings.CutPrefix(path, "meta-data/")
	if path == "meta-data" {
		entries := []string{"ami-id", "hostname", "instance-id", "instance-type", "local-hostname", "local-ipv4", "placement/"}
		if in.Role != "" {
			entries = append(entries, "iam/")
		}
		if in.PublicIP != "" {
			entries = append(entries, "public-ipv4")
		}
		if in.PublicDNSName != "" {
			entries = append(entries, "public-hostname")
		}
		if in.MetadataTags {
			entries = append(entries, "tags/")
		}
		slices.Sort(entries)
		return list(entries...)
	}
	switch {
	case path == "":
		return list("dynamic", "meta-data")
	case path == "dynamic":
		return list("instance-identity/")
	case path == "dynamic/instance-identity":
		return list("document")
	case path == "dynamic/instance-identity/document":
		return asJSON(identityDocument{
			AccountID:        c.account,
			Architecture:     "x86_64",
			AvailabilityZone: in.Zone,
			ImageID:          in.ImageID,
			InstanceID:       in.ID,
			InstanceType:     in.InstanceType,
			PendingTime:      in.LaunchTime.UTC(),
			PrivateIP:        in.PrivateIP,
			Region:           c.region,
			Version:          identityDocVersion,
		})
	case !isMetadata:
		return "", "", false
	}
	switch md {
	case "ami-id":
		return text(in.ImageID)
	case "hostname", "local-hostname":
		return text(in.PrivateDNSName)
	case "instance-id":
		return text(in.ID)
	case "instance-type":
		return text(in.InstanceType)
	case "local-ipv4":
		return text(in.PrivateIP)
	case "public-ipv4":
		return in.PublicIP, "text/plain", in.PublicIP != ""
	case "public-hostname":
		return in.PublicDNSName, "text/plain", in.PublicDNSName != ""
	case "placement":
		return list("availability-zone", "region")
	case "placement/availability-zone":
		return text(in.Zone)
	case "placement/region":
		return text(c.region)
	}
	if rest, ok := strings.CutPrefix(md, "iam"); ok && in.Role != "" {
		return c.iamMetadata(in, strings.TrimPrefix(rest, "/"))
	}
	if rest, ok := strings.CutPrefix(md, "tags"); ok && in.MetadataTags {
		switch rest = strings.TrimPrefix(rest, "/"); rest {
		case "":
			return list("instance/")
		case "instance":
			return list(slices.Sorted(maps.Keys(in.Tags))...)
		default:
			key, ok := strings.CutPrefix(rest, "instance/")
			v, has := in.Tags[key]
			return v, "text/plain", ok && has
		}
	}
	return "", "", false
}

// iamMetadata serves iam/: info, and the instance profile's credentials.
func (c *Cloud) iamMetadata(in Instance, path string) (string, string, bool) {
	c.mu.Lock()
	rc := c.roleCredsLocked(in)
	c.mu.Unlock()
	asJSON := func(v any) (string, string, bool) {
		b, err := json.MarshalIndent(v, "", "  ")
		return string(b), "text/plain", err == nil
	}
	switch path {
	case "":
		return "info\nsecurity-credentials/", "text/plain", true
	case "info":
		return asJSON(iamInfoDocument{
			Code:               "Success",
			LastUpdated:        rc.issued.Format(imdsTimeFormat),
			InstanceProfileArn: c.profileARN(in.InstanceProfile),
			InstanceProfileID:  profileID(in.InstanceProfile),
		})
	case "security-credentials":
		return in.Role, "text/plain", true
	case "security-credentials/" + in.Role:
		return asJSON(roleCredentialsDocument{
			Code:            "Success",
			LastUpdated:     rc.issued.Format(imdsTimeFormat),
			Type:            "AWS-HMAC",
			AccessKeyID:     rc.creds.AccessKeyID,
			SecretAccessKey: rc.creds.SecretAccessKey,
			Token:           rc.creds.SessionToken,
			Expiration:      rc.creds.Expires.UTC().Format(imdsTimeFormat),
		})
	}
	return "", "", false
}
