package awstest

import (
	"encoding/xml"
	"net/http"
)

// getCallerIdentityResponse is STS's GetCallerIdentity answer.
type getCallerIdentityResponse struct {
	XMLName   xml.Name `xml:"https://sts.amazonaws.com/doc/2011-06-15/ GetCallerIdentityResponse"`
	Arn       string   `xml:"GetCallerIdentityResult>Arn"`
	UserID    string   `xml:"GetCallerIdentityResult>UserId"`
	Account   string   `xml:"GetCallerIdentityResult>Account"`
	RequestID string   `xml:"ResponseMetadata>RequestId"`
}

// serveSTS answers STS's only modelled action, GetCallerIdentity: the
// signer's ARN (a user's, or an instance role session's named for the
// instance), unique id and account.
func (c *Cloud) serveSTS(w http.ResponseWriter, q *queryRequest, action string) {
	if action != ActionGetCallerIdentity {
		msg := "Could not find operation " + action + " for version " + stsVersion
		if action == "" {
			msg = "The request must contain the parameter Action"
		}
		writeError(w, stsService, q.requestID, &apiError{http.StatusBadRequest, "InvalidAction", msg})
		return
	}
	if !c.begin(w, stsService, action, q.requestID) {
		return
	}
	writeXML(w, http.StatusOK, getCallerIdentityResponse{
		Arn:       q.caller.arn(c.account),
		UserID:    q.caller.userID(),
		Account:   c.account,
		RequestID: q.requestID,
	})
}
