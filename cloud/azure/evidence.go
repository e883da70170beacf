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
// written -0000).
const TimeLayout = "01/02/06 15:04:05 -0700"

// Document is the signed content of an attested document, the fields
// mooring reads (Azure adds others: plan, licenseType, sku).
type Document struct {
	Nonce          string    `json:"nonce"`
	VMID           string    `json:"vmId"`
	SubscriptionID string    `json:"subscriptionId"`
	TimeStamp      TimeStamp `json:"timeStamp"`
}

// TimeStamp is the document's validity, in TimeLayout.
type TimeStamp struct {
	CreatedOn string `json:"createdOn"`
	ExpiresOn string `json:"expiresOn"`
}

// nonceRE: a nonce as IMDS signs it: the caller's (mooring's are 32 hex
// digits) or, when none was given, IMDS's own timestamp such as
// "20251119-185330". It is compared exactly with the expected one.
var nonceRE = regexp.MustCompile(`^[0-9A-Za-z-]{1,64}$`)

// maxDocument bounds the signed content.
const maxDocument = 8 << 10

// parseDocument reads signed content: one JSON object whose nonce, vmId
// and subscriptionId are present and well formed. The timestamps are
// read when they are in TimeLayout (zero otherwise): they are reported,
// never a reason to refuse a document.
func parseDocument(content []byte) (Document, time.Time, time.Time, error) {
	var d Document
	if len(content) == 0 || len(content) > maxDocument {
		return d, time.Time{}, time.Time{}, fmt.Errorf("signed content is %d bytes, want 1-%d", len(content), maxDocument)
	}
	dec := json.NewDecoder(bytes.NewReader(content))
	if err := dec.Decode(&d); err != nil {
		return d, time.Time{}, time.Time{}, fmt.Errorf("signed content: %w", err)
	}
	if dec.More() {
		return d, time.Time{}, time.Time{}, errors.New("signed content: bytes after the JSON object")
	}
	switch {
	case !nonceRE.MatchString(d.Nonce):
		return d, time.Time{}, time.Time{}, errors.New("signed content: nonce missing or not 1-64 alphanumerics and dashes")
	case !agentid.ValidUUID(d.VMID):
		return d, time.Time{}, time.Time{}, errors.New("signed content: vmId missing or not a UUID")
	case !agentid.ValidUUID(d.SubscriptionID):
		return d, time.Time{}, time.Time{}, errors.New("signed content: subscriptionId missing or not a UUID")
	}
	created, _ := time.Parse(TimeLayout, d.TimeStamp.CreatedOn)
	expires, _ := time.Parse(TimeLayout, d.TimeStamp.ExpiresOn)
	d.VMID = strings.ToLower(d.VMID)
	d.SubscriptionID = strings.ToLower(d.SubscriptionID)
	return d, created, expires, nil
}
