package cloudtest

import (
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"strings"
)

// HangUp closes the request's connection unanswered, as a machine that is
// off (or an API that is down) answers nothing; where the connection
// cannot be taken over, it answers 503.
func HangUp(w http.ResponseWriter) {
	if hj, ok := w.(http.Hijacker); ok {
		if conn, _, err := hj.Hijack(); err == nil {
			_ = conn.Close()
			return
		}
	}
	w.WriteHeader(http.StatusServiceUnavailable)
}

// Unserved answers a request to a machine's own service (its metadata
// service) that is not to be served: nothing when the machine is not
// running (HangUp), else the status of an injected fault (0: none) with
// the body "injected fault". It reports whether it answered.
func Unserved(w http.ResponseWriter, running bool, status int) bool {
	switch {
	case !running:
		HangUp(w)
	case status != 0:
		http.Error(w, "injected fault", status)
	default:
		return false
	}
	return true
}

// WriteJSON answers status with v as JSON, under the Content-Type already
// set (a cloud's own, with its charset) or application/json.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	if w.Header().Get("Content-Type") == "" {
		w.Header().Set("Content-Type", "application/json")
	}
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// DecodeStrict decodes a JSON request body into v as a strict API reads
// it: a field v does not have is an error, and field names it (the first
// one); field is "" for any other error (malformed JSON, a value of the
// wrong type).
func DecodeStrict(body io.Reader, v any) (field string, err error) {
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if s, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			return strings.Trim(s, `"`), err
		}
		return "", err
	}
	return "", nil
}

// Bearer reports whether the request carries Authorization: Bearer token
// (compared in constant time).
func Bearer(r *http.Request, token string) bool {
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && subtle.ConstantTimeCompare([]byte(got), []byte(token)) == 1
}

// MustLoopback panics, naming the endpoint, on an address that is not a
// loopback address (with ipv4Only, a 127.0.0.0/8 one); "" is skipped.
// Instances' addresses are where kube-apiserver reaches their Nodes, so a
// test's must stay on this machine.
func MustLoopback(endpoint string, ipv4Only bool, addrs ...string) {
	for _, a := range addrs {
		if a == "" {
			continue
		}
		ip, err := netip.ParseAddr(a)
		switch {
		case err != nil || !ip.IsLoopback():
			panic(fmt.Sprintf("%s: address %q is not a loopback address", endpoint, a))
		case ipv4Only && !ip.Is4():
			panic(fmt.Sprintf("%s: address %q is not an IPv4 loopback address", endpoint, a))
		}
	}
}

// MustIPv6Loopback panics, naming the endpoint, on an IPv6 address other
// than ::1, the only IPv6 loopback address; "" is skipped.
func MustIPv6Loopback(endpoint, addr string) {
	if addr != "" && addr != "::1" {
		panic(fmt.Sprintf("%s: IPv6 address %q: only ::1 is allowed", endpoint, addr))
	}
}

// Page is the arithmetic of page/per_page pagination (pages counted from
// 1): the items [from, to) of total that page holds, and the last page (1
// when there is nothing).
func Page(total, page, perPage int) (from, to, last int) {
	last = max(1, (total+perPage-1)/perPage)
	from = min(max(page-1, 0)*perPage, total)
	to = min(max(page, 0)*perPage, total)
	return from, to, last
}

// GetJSON is a test's GET of url, with Authorization: Bearer token unless
// token is "" and the header pairs given (name, value, ...): the response
// (its body read and closed) and the body decoded as JSON.
func GetJSON(url, token string, header ...string) (*http.Response, any, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return nil, nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp, nil, err
	}
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		return resp, nil, fmt.Errorf("GET %s: %d: %w: %s", url, resp.StatusCode, err, data)
	}
	return resp, v, nil
}
