package azure

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/mooring-dev/mooring/cloud/azure/agentid"
)

// TimeLayout is the layout of the attested document's timeStamp values,
// such as "11/19/25 12:53:30 -0000" (month/day/two-digit year, UTC
// written -0000), as Microsoft's examples and genuine documents write
// them. Microsoft documents both values as UTC.
const TimeLayout = "01/02/06 15:04:05 -0700"

// timeRE is the whole of a timeStamp value: TimeLayout with every field
// two digits and the offset UTC's. Go's parser alone would take a
// one-digit hour or another offset.
var timeRE = regexp.MustCompile(`^[0-9]{2}/[0-9]{2}/[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2} [-+]0000$`)

// Document is the signed content of an attested document, the fields
// mooring reads (Azure adds others: plan, licenseType, sku).
type Document struct {
	Nonce          string    `json:"nonce"`
	VMID           string    `json:"vmId"`
	SubscriptionID string    `json:"subscriptionId"`
	TimeStamp      TimeStamp `json:"timeStamp"`
}

// TimeStamp is the document's validity, in TimeLayout: createdOn is when
// IMDS signed it, expiresOn when it expires (Microsoft's words for both:
// "the UTC timestamp for when the signed document was created", "... for
// when the signed document expires").
type TimeStamp struct {
	CreatedOn string `json:"createdOn"`
	ExpiresOn string `json:"expiresOn"`
}

// Times parses both values. A value that is missing or not exactly in
// TimeLayout is an error naming it: a document whose age cannot be read
// is refused, never taken as fresh.
func (ts TimeStamp) Times() (created, expires time.Time, err error) {
	created, err = parseTime("createdOn", ts.CreatedOn)
	if err != nil {
		return time.Time{}, time.Time{}, err
	}
	expires, err = parseTime("expiresOn", ts.ExpiresOn)
	if err != nil {
		return time.Time{}, time.Time{}, err
	}
	return created, expires, nil
}

func parseTime(field, value string) (time.Time, error) {
	if value == "" {
		return time.Time{}, fmt.Errorf("signed content: timeStamp.%s is missing; the document's age cannot be judged", field)
	}
	if !timeRE.MatchString(value) {
		return time.Time{}, fmt.Errorf("signed content: timeStamp.%s %.40q is not a UTC time written MM/dd/yy HH:mm:ss -0000", field, value)
	}
	t, err := time.Parse(TimeLayout, value)
	if err != nil {
		return time.Time{}, fmt.Errorf("signed content: timeStamp.%s %.40q: %w", field, value, err)
	}
	return t.UTC(), nil
}

// nonceRE: a nonce as IMDS signs it: the caller's (mooring's are 32 hex
// digits) or, when none was given, IMDS's own timestamp such as
// "20251119-185330". It is compared exactly with the expected one.
var nonceRE = regexp.MustCompile(`^[0-9A-Za-z-]{1,64}$`)

// maxDocument bounds the signed content.
const maxDocument = 8 << 10

// parseDocument reads signed content: one JSON object whose nonce, vmId
// and subscriptionId are present and well formed. The timestamps are
// read by TimeStamp.Times, which the verifier calls: reading the vmId a
// document claims (PeekMachine) needs no time.
func parseDocument(content []byte) (Document, error) {
	var d Document
	if len(content) == 0 || len(content) > maxDocument {
		return d, fmt.Errorf("signed content is %d bytes, want 1-%d", len(content), maxDocument)
	}
	dec := json.NewDecoder(bytes.NewReader(content))
	if err := dec.Decode(&d); err != nil {
		return d, fmt.Errorf("signed content: %w", err)
	}
	if dec.More() {
		return d, errors.New("signed content: bytes after the JSON object")
	}
	switch {
	case !nonceRE.MatchString(d.Nonce):
		return d, errors.New("signed content: nonce missing or not 1-64 alphanumerics and dashes")
	case !agentid.ValidUUID(d.VMID):
		return d, errors.New("signed content: vmId missing or not a UUID")
	case !agentid.ValidUUID(d.SubscriptionID):
		return d, errors.New("signed content: subscriptionId missing or not a UUID")
	}
	d.VMID = strings.ToLower(d.VMID)
	d.SubscriptionID = strings.ToLower(d.SubscriptionID)
	return d, nil
}
