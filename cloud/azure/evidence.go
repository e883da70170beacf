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
// such as "11/28/18 00:16:17 -0000".
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

// nonceRE: a nonce IMDS signs, at most 32 alphanumerics.
var nonceRE = regexp.MustCompile(`^[0-9A-Za-z]{1,32}$`)

// maxDocument bounds the signed content.
const maxDocument = 8 << 10

// parseDocument reads signed content: one JSON object whose nonce, vmId,
// subscriptionId and timeStamp are present and well formed.
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
		return d, time.Time{}, time.Time{}, errors.New("signed content: nonce missing or not 1-32 alphanumerics")
	case !agentid.ValidUUID(d.VMID):
		return d, time.Time{}, time.Time{}, errors.New("signed content: vmId missing or not a UUID")
	case !agentid.ValidUUID(d.SubscriptionID):
		return d, time.Time{}, time.Time{}, errors.New("signed content: subscriptionId missing or not a UUID")
	}
	created, err := time.Parse(TimeLayout, d.TimeStamp.CreatedOn)
	if err != nil {
		return d, time.Time{}, time.Time{}, fmt.Errorf("signed content: timeStamp.createdOn %.40q: want %s", d.TimeStamp.CreatedOn, TimeLayout)
	}
	expires, err := time.Parse(TimeLayout, d.TimeStamp.ExpiresOn)
	if err != nil {
		return d, time.Time{}, time.Time{}, fmt.Errorf("signed content: timeStamp.expiresOn %.40q: want %s", d.TimeStamp.ExpiresOn, TimeLayout)
	}
	d.VMID = strings.ToLower(d.VMID)
	d.SubscriptionID = strings.ToLower(d.SubscriptionID)
	return d, created, expires, nil
}
