package awstest

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"encoding/base64"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
)

// roleCred is one set of instance-profile credentials: an assumed-role
// session of the instance's role named for the instance.
type roleCred struct {
	creds      aws.Credentials
	role       string
	instanceID string
	issued     time.Time
}

// RoleCredentials returns the credentials the instance's metadata service
// serves now, issuing a new set first when the current one is within a
// third of its lifetime of expiry, as the metadata service does. Unlike the
// metadata service it answers whatever the instance's state.
func (c *Cloud) RoleCredentials(id string) (aws.Credentials, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	in, ok := c.instances[id]
	if !ok {
		return aws.Credentials{}, fmt.Errorf("awstest: role credentials of %s: no such instance", id)
	}
	if in.Role == "" {
		return aws.Credentials{}, fmt.Errorf("awstest: role credentials of %s: the instance has no instance profile", id)
	}
	return c.roleCredsLocked(in).creds, nil
}

// roleCredsLocked is the instance's current set, rotated when due. Sets
// issued before stay valid until they expire.
func (c *Cloud) roleCredsLocked(in Instance) *roleCred {
	now := c.now()
	cur := c.current[in.ID]
	if cur != nil && cur.role == in.Role && cur.creds.Expires.Sub(now) > c.lifetime/3 {
		return cur
	}
	issued := now.UTC().Truncate(time.Second)
	rc := &roleCred{
		creds: aws.Credentials{
			AccessKeyID:     "ASIA" + randomString(base32.StdEncoding, 10)[:16],
			SecretAccessKey: randomString(base64.RawStdEncoding, 30),
			SessionToken:    "IQoJawstest" + randomString(base64.RawStdEncoding, 120),
			Source:          "awstest",
			CanExpire:       true,
			Expires:         issued.Add(c.lifetime),
		},
		role:       in.Role,
		instanceID: in.ID,
		issued:     issued,
	}
	c.roleCreds[rc.creds.AccessKeyID] = rc
	c.current[in.ID] = rc
	return rc
}

// principal is who signed a request: a user or an instance's role session.
type principal struct {
	user *User
	role *roleCred
}

func (p principal) arn(account string) string {
	if p.user != nil {
		return fmt.Sprintf("arn:aws:iam::%s:user/%s", account, p.user.Name)
	}
	return fmt.Sprintf("arn:aws:sts::%s:assumed-role/%s/%s", account, p.role.role, p.role.instanceID)
}

// userID is what GetCallerIdentity calls UserId: the user's unique id, or
// the role's unique id and the session name.
func (p principal) userID() string {
	if p.user != nil {
		return uniqueID("AIDA", "user/"+p.user.Name)
	}
	return uniqueID("AROA", "role/"+p.role.role) + ":" + p.role.instanceID
}

// uniqueID is an IAM unique id (a prefix and 17 base32 characters) derived
// from a seed.
func uniqueID(prefix, seed string) string {
	sum := sha256.Sum256([]byte(seed))
	return prefix + base32.StdEncoding.EncodeToString(sum[:])[:17]
}

func randomString(enc interface{ EncodeToString([]byte) string }, n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return enc.EncodeToString(b)
}
