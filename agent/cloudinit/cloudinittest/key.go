// Package cloudinittest holds what tests of the user-data share: OpenPGP
// keys standing in for a package repository's signing key.
package cloudinittest

import (
	"bytes"
	"testing"
	"time"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/armor"
	"github.com/ProtonMail/go-crypto/openpgp/packet"
)

// ArmoredKey makes a new OpenPGP key created at created and valid for
// lifetime (0: no expiry), and returns it ASCII-armored: its public key, or
// with secret its secret key.
func ArmoredKey(t testing.TB, created time.Time, lifetime time.Duration, secret bool) string {
	t.Helper()
	e, err := openpgp.NewEntity("test", "", "test@example.invalid", &packet.Config{
		Time: func() time.Time { return created }, KeyLifetimeSecs: uint32(lifetime.Seconds()),
	})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	typ := openpgp.PublicKeyType
	if secret {
		typ = openpgp.PrivateKeyType
	}
	w, err := armor.Encode(&b, typ, nil)
	if err != nil {
		t.Fatal(err)
	}
	if secret {
		err = e.SerializePrivate(w, nil)
	} else {
		err = e.Serialize(w)
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.String()
}
