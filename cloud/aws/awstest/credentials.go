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
	creds aws.Credentials
	role  string
	// roleID is the role's unique id when the set was issued.
	roleID     string
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
	roleID := c.roleIDLocked(in.Role)
	if cur != nil && cur.role == in.Role && cur.roleID == roleID && cur.creds.Expires.Sub(now) > c.lifetime/3 {
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
		roleID:     roleID,
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
	return p.role.roleID + ":" + p.role.instanceID
}

// RoleID is the unique id IAM gave the role of that name (AROA and 17
// characters): the part of its sessions' UserId before the colon.
func (c *Cloud) RoleID(role string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.roleIDLocked(role)
}

// RecreateRole deletes the role of that name and creates it again, as an
// IAM administrator can: the role keeps its name and ARN but gets a new
// unique id, which the sessions issued from then on carry in their UserId
// (instances of the role get new credentials at their next ask). Sets
// issued before keep the old id. It returns the new id.
func (c *Cloud) RecreateRole(role string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	id := uniqueID("AROA", "role/"+role+"/after/"+c.roleIDLocked(role))
	c.roleIDs[role] = id
	return id
}

func (c *Cloud) roleIDLocked(role string) string {
	if id, ok := c.roleIDs[role]; ok {
		return id
	}
	return uniqueID("AROA", "role/"+role)
}

// profileARN is the ARN of the account's instance profile of that name (on
// the root path).
func (c *Cloud) profileARN(name string) string {
	return "arn:aws:iam::" + c.account + ":instance-profile/" + name
}

// profileID is the unique id of the instance profile of that name.
func profileID(name string) string { return uniqueID("AIPA", "instance-profile/"+name) }

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
