package identity

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"time"
)

// Claims is the payload of an identity token.
type Claims struct {
	Issuer    string `json:"iss"`
	Subject   string `json:"sub"` // the instance id
	Audience  string `json:"aud"` // chosen by the caller: the binding slot
	IssuedAt  int64  `json:"iat"`
	NotBefore int64  `json:"nbf"`
	Expiry    int64  `json:"exp"`
	ID        string `json:"jti"` // unique per token, for replay detection

	Instance InstanceClaims `json:"instance"`
}

// InstanceClaims is the cloud's record of the instance at signing time.
type InstanceClaims struct {
	ID           string    `json:"id"`
	Name         string    `json:"name"`
	Zone         string    `json:"zone"`
	Region       string    `json:"region"`
	InstanceType string    `json:"instanceType"`
	Cluster      string    `json:"cluster,omitempty"`
	Addresses    []Address `json:"addresses,omitempty"`
}

// Address is one instance address, typed as Kubernetes node addresses are.
type Address struct {
	Type    string `json:"type"`
	Address string `json:"address"`
}

// NewClaims fills the registered claims for a token about inst, valid from
// now for ttl, with a random token id.
func NewClaims(issuer, audience string, inst InstanceClaims, now time.Time, ttl time.Duration) (Claims, error) {
	switch {
	case issuer == "":
		return Claims{}, errors.New("identity claims: empty issuer")
	case audience == "":
		return Claims{}, errors.New("identity claims: empty audience")
	case inst.ID == "":
		return Claims{}, errors.New("identity claims: empty instance id")
	case ttl < time.Second:
		return Claims{}, errors.New("identity claims: lifetime under a second")
	}
	var jti [16]byte
	if _, err := rand.Read(jti[:]); err != nil {
		return Claims{}, err
	}
	iat := now.Unix()
	return Claims{
		Issuer:    issuer,
		Subject:   inst.ID,
		Audience:  audience,
		IssuedAt:  iat,
		NotBefore: iat,
		Expiry:    now.Add(ttl).Unix(),
		ID:        hex.EncodeToString(jti[:]),
		Instance:  inst,
	}, nil
}
