package awstest

import (
	"encoding/xml"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"time"

	"github.com/google/uuid"
	"github.com/mooring-dev/mooring/cloud/cloudtest"
)

const (
	// maxBody caps API request bodies.
	maxBody = 64 << 10

	ec2Service = "ec2"
	stsService = "sts"
	stsVersion = "2011-06-15"

	// answerDelay holds every API answer back a little. On loopback an
	// answer can reach an aws-sdk-go-v2 client before net/http's write
	// loop has finished with the request body; the SDK then closes that
	// body under it, net/http closes the connection, and an answer larger
	// than the client's read buffer (a DescribeInstances of a few
	// instances) fails mid-body with "use of closed network connection"
	// (1 call in 100 here without the delay, about 1 in 1000 under the race
	// detector with it, none with HTTPClient). Across a real network the
	// round trip is the delay.
	answerDelay = time.Millisecond
)

// queryRequest is an authenticated Query API call.
type queryRequest struct {
	params    url.Values
	requestID string
	caller    principal
}

// serveAPI answers the EC2 and STS Query APIs on one endpoint: a request
// whose Version is STS's (or, without a Version, whose Action is
// GetCallerIdentity) is an STS call, any other an EC2 call. Parameters come
// from the query string and a form-encoded POST body.
func (c *Cloud) serveAPI(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Date", c.now().UTC().Format(http.TimeFormat))
	reqID := uuid.NewString()
	w.Header().Set("X-Amzn-Requestid", reqID)

	body, readErr := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	// Let the client finish its side of the request first: see
	// answerDelay.
	time.Sleep(answerDelay)
	params, queryErr := url.ParseQuery(r.URL.RawQuery)
	var formErr error
	if readErr == nil && queryErr == nil && r.Method == http.MethodPost && len(body) > 0 && len(body) <= maxBody {
		formErr = mergeForm(params, r.Header.Get("Content-Type"), body)
	}
	service := serviceOf(params)
	fail := func(e *apiError) { writeError(w, service, reqID, e) }
	switch {
	case readErr != nil:
		fail(&apiError{http.StatusBadRequest, "IncompleteBody", "reading the request body: " + readErr.Error()})
		return
	case len(body) > maxBody:
		fail(&apiError{http.StatusRequestEntityTooLarge, "RequestEntityTooLarge", fmt.Sprintf("the request body exceeds %d bytes", maxBody)})
		return
	case queryErr != nil:
		fail(&apiError{http.StatusBadRequest, "MalformedQueryString", "query string: " + queryErr.Error()})
		return
	case formErr != nil:
		fail(&apiError{http.StatusBadRequest, "MalformedQueryString", formErr.Error()})
		return
	case r.Method != http.MethodPost && r.Method != http.MethodGet:
		fail(&apiError{http.StatusMethodNotAllowed, "UnsupportedProtocol", "the Query API answers GET and POST, not " + r.Method})
		return
	}

	caller, aerr := c.authenticate(r, body, service)
	if aerr != nil {
		c.refuse(aerr)
		fail(aerr)
		return
	}
	q := &queryRequest{params: params, requestID: reqID, caller: caller}
	action := params.Get("Action")
	if service == stsService {
		c.serveSTS(w, q, action)
		return
	}
	c.serveEC2(w, q, action)
}

// mergeForm adds a form-encoded body's parameters to params.
func mergeForm(params url.Values, contentType string, body []byte) error {
	if mt, _, _ := mime.ParseMediaType(contentType); mt != "application/x-www-form-urlencoded" {
		return fmt.Errorf("Content-Type %q: want application/x-www-form-urlencoded", contentType)
	}
	form, err := url.ParseQuery(string(body))
	if err != nil {
		return fmt.Errorf("form body: %w", err)
	}
	for k, vs := range form {
		params[k] = append(params[k], vs...)
	}
	return nil
}

// serviceOf says which API a call is for.
func serviceOf(params url.Values) string {
	if v := params.Get("Version"); v == stsVersion || (v == "" && params.Get("Action") == ActionGetCallerIdentity) {
		return stsService
	}
	return ec2Service
}

// refuse counts a refusal.
func (c *Cloud) refuse(e *apiError) {
	c.refusals.Add(e.code)
}

// begin counts an authorized call of action and answers its throttling
// (Throttle) or its injected fault, if any; it says whether the action
// should go on.
func (c *Cloud) begin(w http.ResponseWriter, service, action, reqID string) bool {
	c.mu.Lock()
	throttled := !c.takeTokenLocked(action)
	var f *cloudtest.Fault
	if throttled {
		c.calls.Add(action)
	} else {
		f = c.countCall(action)
	}
	c.mu.Unlock()
	if throttled {
		writeError(w, service, reqID, &apiError{http.StatusServiceUnavailable, "RequestLimitExceeded", "Request limit exceeded."})
		return false
	}
	if f != nil {
		writeError(w, service, reqID, &apiError{f.Status, f.Code, "awstest: fault injected by Fail"})
		return false
	}
	return true
}

// ec2ErrorResponse is EC2's error document.
type ec2ErrorResponse struct {
	XMLName   xml.Name `xml:"Response"`
	Code      string   `xml:"Errors>Error>Code"`
	Message   string   `xml:"Errors>Error>Message"`
	RequestID string   `xml:"RequestID"`
}

// stsErrorResponse is STS's (and the other awsquery services') error
// document.
type stsErrorResponse struct {
	XMLName   xml.Name `xml:"https://sts.amazonaws.com/doc/2011-06-15/ ErrorResponse"`
	Type      string   `xml:"Error>Type"`
	Code      string   `xml:"Error>Code"`
	Message   string   `xml:"Error>Message"`
	RequestID string   `xml:"RequestId"`
}

func writeError(w http.ResponseWriter, service, reqID string, e *apiError) {
	if service == stsService {
		kind := "Sender"
		if e.status >= 500 {
			kind = "Receiver"
		}
		writeXML(w, e.status, stsErrorResponse{Type: kind, Code: e.code, Message: e.message, RequestID: reqID})
		return
	}
	writeXML(w, e.status, ec2ErrorResponse{Code: e.code, Message: e.message, RequestID: reqID})
}

func writeXML(w http.ResponseWriter, status int, v any) {
	out, err := xml.Marshal(v)
	if err != nil {
		// Only a programming error in this package's types gets here.
		http.Error(w, "awstest: encoding the answer: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/xml;charset=UTF-8")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, xml.Header)
	_, _ = w.Write(out)
}
