package ocitest

import (
	"bytes"
	"crypto"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/oracle/oci-go-sdk/v65/common"
	"github.com/oracle/oci-go-sdk/v65/core"

	"github.com/mooring-dev/mooring/cloud/cloudtest"
)

const apiPrefix = "/20160918/"

// lbPrefix and nlbPrefix are the Load Balancer's and the Network Load
// Balancer's API versions, served on the same listener.
const (
	lbPrefix  = "/20170115/"
	nlbPrefix = "/20200501/"
)

// maxBody is the largest request body read.
const maxBody = 1 << 20

// maxDateSkew is how far a request's date may be from now: OCI refuses
// signed requests whose date is more than 5 minutes off.
const maxDateSkew = 5 * time.Minute

// ociError answers OCI's error JSON.
func ociError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("opc-request-id", "ocitest")
	cloudtest.WriteJSON(w, status, map[string]string{"code": code, "message": msg})
}

// codeOf is OCI's error code of a status, for injected faults.
func codeOf(status int) string {
	switch status {
	case http.StatusTooManyRequests:
		return "TooManyRequests"
	case http.StatusNotFound:
		return "NotAuthorizedOrNotFound"
	case http.StatusUnauthorized:
		return "NotAuthenticated"
	}
	if status >= 500 {
		return "InternalServerError"
	}
	return "InvalidParameter"
}

// rootsPath is the auth service's GET of the region's instance identity
// roots (Oracle's "Retrieving the Instance Identity Root CA Certificate").
const rootsPath = "/v1/instancePrincipalRootCACertificates"

func (c *Cloud) apiHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		lbPath, isLB := strings.CutPrefix(r.URL.Path, lbPrefix)
		nlbPath, isNLB := strings.CutPrefix(r.URL.Path, nlbPrefix)
		path, ok := strings.CutPrefix(r.URL.Path, apiPrefix)
		if !ok && !isLB && !isNLB && r.URL.Path != rootsPath {
			ociError(w, http.StatusNotFound, "NotFound", "unknown API version or path")
			return
		}
		switch {
		case isLB || isNLB:
			switch r.Method {
			case http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete:
			default:
				ociError(w, http.StatusMethodNotAllowed, "MethodNotAllowed", "method not modelled")
				return
			}
		case r.Method != http.MethodGet && !(ok && vcnPath(path)):
			ociError(w, http.StatusMethodNotAllowed, "MethodNotAllowed", "only GET is modelled")
			return
		}
		if err := c.checkSignature(r); err != nil {
			c.Counter.Add("unauthenticated")
			ociError(w, http.StatusUnauthorized, "NotAuthenticated", err.Error())
			return
		}
		switch {
		case isLB:
			c.advance()
			c.serveLB(w, r, lbPath)
		case isNLB:
			c.advance()
			c.serveNLB(w, r, nlbPath)
		case ok && vcnPath(path):
			c.serveVCN(w, r, path)
		case r.URL.Path == rootsPath:
			c.serveRoots(w)
		case path == "instances" || path == "instances/":
			c.listInstances(w, r)
		case strings.HasPrefix(path, "instances/"):
			c.getInstance(w, strings.TrimPrefix(path, "instances/"))
		case path == "vnicAttachments" || path == "vnicAttachments/":
			c.listVnicAttachments(w, r)
		case strings.HasPrefix(path, "vnics/"):
			c.getVnic(w, strings.TrimPrefix(path, "vnics/"))
		default:
			ociError(w, http.StatusNotFound, "NotFound", "path not modelled")
		}
	})
}

// rootsAnswer is the auth service's answer as Teleport's verifier reads it
// (lib/join/oraclejoin): certificates, base64 DER, and refreshIn, an
// RFC 3339 time to fetch them again.
type rootsAnswer struct {
	Certificates []string `json:"certificates"`
	RefreshIn    string   `json:"refreshIn"`
}

// serveRoots answers the published roots.
func (c *Cloud) serveRoots(w http.ResponseWriter) {
	if st := c.count("roots", 0); st != 0 {
		ociError(w, st, codeOf(st), "injected fault")
		return
	}
	a := rootsAnswer{RefreshIn: c.opts.Now().Add(time.Hour).UTC().Format(time.RFC3339)}
	for _, r := range c.Roots() {
		a.Certificates = append(a.Certificates, base64.StdEncoding.EncodeToString(r.Raw))
	}
	cloudtest.WriteJSON(w, http.StatusOK, a)
}

// authPattern reads the parameters of OCI's Authorization header
// (draft-cavage HTTP signatures): name="value", comma separated.
var authPattern = regexp.MustCompile(`([a-zA-Z]+)="([^"]*)"`)

// checkSignature checks a request's signature: OCI's HTTP signature
// scheme, the keyId of the endpoint's API key, a date within 5 minutes,
// the signed headers those the SDK signs (date (request-target) host;
// on a POST or PUT also content-length content-type x-content-sha256,
// whose values must be the body's length and base64 SHA-256), and the
// signature itself, with the API key's public key. oci-go-sdk has no
// verifier; its signer builds the signing string and hands its SHA-256
// to the key's crypto.Signer, so the request is passed to the SDK's own
// signer with a signer that keeps that digest (digestKey), and crypto/rsa
// checks the request's signature over it: no part of the signature scheme
// is written here. A body read is put back for the handler.
func (c *Cloud) checkSignature(r *http.Request) error {
	got := r.Header.Get("Authorization")
	rest, ok := strings.CutPrefix(got, "Signature ")
	if !ok {
		return fmt.Errorf("the request is not signed (no Authorization: Signature)")
	}
	params := map[string]string{}
	for _, m := range authPattern.FindAllStringSubmatch(rest, -1) {
		params[m[1]] = m[2]
	}
	want := common.DefaultGenericHeaders()
	withBody := r.Method == http.MethodPost || r.Method == http.MethodPut
	if withBody {
		want = append(want, common.DefaultBodyHeaders()...)
	}
	switch {
	case params["keyId"] != c.KeyID():
		return fmt.Errorf("unknown keyId %q", params["keyId"])
	case params["algorithm"] != "rsa-sha256":
		return fmt.Errorf("algorithm %q, want rsa-sha256", params["algorithm"])
	case params["headers"] != strings.Join(want, " "):
		return fmt.Errorf("signed headers %q, want %q", params["headers"], strings.Join(want, " "))
	}
	var body []byte
	if withBody {
		data, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
		if err != nil {
			return fmt.Errorf("body: %v", err)
		}
		if len(data) > maxBody {
			return fmt.Errorf("body larger than %d bytes", maxBody)
		}
		body = data
		r.Body = io.NopCloser(bytes.NewReader(body))
		sum := sha256.Sum256(body)
		if h := r.Header.Get("x-content-sha256"); h != base64.StdEncoding.EncodeToString(sum[:]) {
			return fmt.Errorf("x-content-sha256 %q is not the body's SHA-256", h)
		}
		if h := r.Header.Get("content-length"); h != strconv.Itoa(len(body)) {
			return fmt.Errorf("content-length %q, the body has %d bytes", h, len(body))
		}
	}
	sig, err := base64.StdEncoding.DecodeString(params["signature"])
	if err != nil {
		return fmt.Errorf("signature: %v", err)
	}
	date, err := http.ParseTime(r.Header.Get("Date"))
	if err != nil {
		return fmt.Errorf("date header: %v", err)
	}
	if d := c.opts.Now().Sub(date); d > maxDateSkew || d < -maxDateSkew {
		return fmt.Errorf("date %s is more than %s from now", r.Header.Get("Date"), maxDateSkew)
	}
	again := r.Clone(r.Context())
	again.Header.Del("Authorization")
	again.URL.Host = r.Host
	if withBody {
		// The signer hashes the body it reads: the one received.
		again.Body = io.NopCloser(bytes.NewReader(body))
	}
	key := &digestKey{keyID: c.KeyID(), pub: &c.apiKey.PublicKey}
	if err := common.DefaultRequestSigner(key).Sign(again); err != nil {
		return err
	}
	if key.digest == nil {
		return fmt.Errorf("the SDK's signer handed no digest to the key")
	}
	if err := rsa.VerifyPKCS1v15(key.pub, crypto.SHA256, key.digest, sig); err != nil {
		return fmt.Errorf("the signature does not verify with the API key: %v", err)
	}
	return nil
}

// digestKey is the API key as the SDK's signer takes a key that cannot be
// exported (its PrivateKeySigner): its Sign keeps the digest the signer
// hands it, and signs nothing. It holds only the public key.
type digestKey struct {
	keyID  string
	pub    *rsa.PublicKey
	digest []byte
}

func (k *digestKey) KeyID() (string, error) { return k.keyID, nil }
func (k *digestKey) PrivateRSAKey() (*rsa.PrivateKey, error) {
	return nil, errors.New("ocitest holds the API key's public half only")
}
func (k *digestKey) PrivateKeySigner() (crypto.Signer, error) { return k, nil }
func (k *digestKey) Public() crypto.PublicKey                 { return k.pub }

// Sign keeps the digest; the signature it returns is not used.
func (k *digestKey) Sign(_ io.Reader, digest []byte, opts crypto.SignerOpts) ([]byte, error) {
	if opts.HashFunc() != crypto.SHA256 {
		return nil, fmt.Errorf("the SDK signed with %v, want SHA-256 (rsa-sha256)", opts.HashFunc())
	}
	if _, pss := opts.(*rsa.PSSOptions); pss {
		return nil, errors.New("the SDK signed with RSA-PSS, want PKCS #1 v1.5 (rsa-sha256)")
	}
	k.digest = append([]byte(nil), digest...)
	return []byte{0}, nil
}

// page reads limit (1-MaxPageSize, default DefaultPageSize) and page (a
// token of the form kind:offset:scope this endpoint gave); ok false when
// it answered an error.
func (c *Cloud) page(w http.ResponseWriter, r *http.Request, kind, scope string) (offset, limit int, ok bool) {
	limit = DefaultPageSize
	if s := r.URL.Query().Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > MaxPageSize {
			ociError(w, http.StatusBadRequest, "InvalidParameter", fmt.Sprintf("limit %q: want 1-%d", s, MaxPageSize))
			return 0, 0, false
		}
		limit = n
	}
	limit = min(limit, c.opts.MaxPageSize)
	if tok := r.URL.Query().Get("page"); tok != "" {
		parts := strings.Split(tok, ":")
		n, err := strconv.Atoi(parts[min(1, len(parts)-1)])
		if len(parts) != 3 || parts[0] != kind || parts[2] != scope || err != nil || n < 0 {
			ociError(w, http.StatusBadRequest, "InvalidParameter", "invalid page token")
			return 0, 0, false
		}
		offset = n
	}
	return offset, limit, true
}

func nextPage(w http.ResponseWriter, kind, scope string, to, total int) {
	if to < total {
		w.Header().Set("opc-next-page", fmt.Sprintf("%s:%d:%s", kind, to, scope))
	}
}

func (c *Cloud) listInstances(w http.ResponseWriter, r *http.Request) {
	comp := r.URL.Query().Get("compartmentId")
	if comp == "" {
		ociError(w, http.StatusBadRequest, "MissingParameter", "compartmentId is required")
		return
	}
	offset, limit, ok := c.page(w, r, "instances", comp)
	if !ok {
		return
	}
	c.Before.Run(offset/max(limit, 1) + 1)
	if st := c.count("ListInstances", offset/max(limit, 1)+1); st != 0 {
		ociError(w, st, codeOf(st), "injected fault")
		return
	}
	all := c.sorted(comp)
	from, to := min(offset, len(all)), min(offset+limit, len(all))
	items := make([]core.Instance, 0, to-from)
	for _, in := range all[from:to] {
		items = append(items, c.wire(in))
	}
	nextPage(w, "instances", comp, to, len(all))
	cloudtest.WriteJSON(w, http.StatusOK, items)
}

func (c *Cloud) getInstance(w http.ResponseWriter, id string) {
	if st := c.count("GetInstance", 0); st != 0 {
		ociError(w, st, codeOf(st), "injected fault")
		return
	}
	in, ok := c.Get(id)
	if !ok {
		ociError(w, http.StatusNotFound, "NotAuthorizedOrNotFound", "Authorization failed or requested resource not found.")
		return
	}
	cloudtest.WriteJSON(w, http.StatusOK, c.wire(in))
}

// wire is an instance in Compute's JSON (the SDK's own type).
func (c *Cloud) wire(in Instance) core.Instance {
	out := core.Instance{
		Id: common.String(in.ID), DisplayName: common.String(in.DisplayName), CompartmentId: common.String(in.Compartment),
		AvailabilityDomain: common.String(in.AvailabilityDomain), FaultDomain: common.String(in.FaultDomain),
		Region: common.String(c.opts.RegionKey), Shape: common.String(in.Shape),
		LifecycleState: core.InstanceLifecycleStateEnum(in.State), TimeCreated: &common.SDKTime{Time: in.Created},
		FreeformTags: in.FreeformTags,
	}
	if len(in.DefinedTags) > 0 {
		out.DefinedTags = map[string]map[string]interface{}{}
		for ns, kv := range in.DefinedTags {
			out.DefinedTags[ns] = map[string]interface{}{}
			for k, v := range kv {
				out.DefinedTags[ns][k] = v
			}
		}
	}
	return out
}

// attached reports whether the instance's VNIC is attached: not once it
// is terminated.
func attached(in Instance) bool { return in.State != "TERMINATED" && in.State != "TERMINATING" }

func (c *Cloud) listVnicAttachments(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	comp, instance := q.Get("compartmentId"), q.Get("instanceId")
	if comp == "" {
		ociError(w, http.StatusBadRequest, "MissingParameter", "compartmentId is required")
		return
	}
	offset, limit, ok := c.page(w, r, "vnicAttachments", comp)
	if !ok {
		return
	}
	if st := c.count("ListVnicAttachments", offset/max(limit, 1)+1); st != 0 {
		ociError(w, st, codeOf(st), "injected fault")
		return
	}
	var all []Instance
	for _, in := range c.sorted(comp) {
		if attached(in) && (instance == "" || in.ID == instance) {
			all = append(all, in)
		}
	}
	from, to := min(offset, len(all)), min(offset+limit, len(all))
	items := make([]core.VnicAttachment, 0, to-from)
	for _, in := range all[from:to] {
		items = append(items, core.VnicAttachment{
			Id: common.String(strings.Replace(in.VnicID, "ocid1.vnic.", "ocid1.vnicattachment.", 1)), InstanceId: common.String(in.ID),
			VnicId: common.String(in.VnicID), CompartmentId: common.String(in.Compartment), AvailabilityDomain: common.String(in.AvailabilityDomain),
			LifecycleState: core.VnicAttachmentLifecycleStateAttached, NicIndex: common.Int(0), TimeCreated: &common.SDKTime{Time: in.Created},
		})
	}
	nextPage(w, "vnicAttachments", comp, to, len(all))
	cloudtest.WriteJSON(w, http.StatusOK, items)
}

func (c *Cloud) getVnic(w http.ResponseWriter, id string) {
	if st := c.count("GetVnic", 0); st != 0 {
		ociError(w, st, codeOf(st), "injected fault")
		return
	}
	match := c.instances.List(func(in *Instance) bool { return in.VnicID == id && attached(*in) })
	if len(match) == 0 {
		ociError(w, http.StatusNotFound, "NotAuthorizedOrNotFound", "Authorization failed or requested resource not found.")
		return
	}
	found := match[0]
	v := core.Vnic{Id: common.String(id), CompartmentId: common.String(found.Compartment), AvailabilityDomain: common.String(found.AvailabilityDomain),
		LifecycleState: core.VnicLifecycleStateAvailable, TimeCreated: &common.SDKTime{Time: found.Created},
		IsPrimary: common.Bool(true)}
	if found.PrivateIP != "" {
		v.PrivateIp = common.String(found.PrivateIP)
	}
	if found.PublicIP != "" {
		v.PublicIp = common.String(found.PublicIP)
	}
	if found.IPv6 != "" {
		v.Ipv6Addresses = []string{found.IPv6}
	}
	cloudtest.WriteJSON(w, http.StatusOK, v)
}
