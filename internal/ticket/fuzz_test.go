package ticket

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
)

// FuzzVerify feeds the decoder arbitrary bytes. It must never panic, Peek
// must accept whatever Verify accepts and read the same claims, and
// nothing but a ticket the key set issued may verify: any bytes that do
// carry exactly the claims of one of the issued tickets.
func FuzzVerify(f *testing.F) {
	s := &KeySet{}
	if _, err := s.AddKey(); err != nil {
		f.Fatal(err)
	}
	issued := map[string]Claims{}
	for _, name := range []string{"web-1", "db.example.internal"} {
		tok, c, err := s.Issue(name, cluster, t0, 0)
		if err != nil {
			f.Fatal(err)
		}
		issued[c.ID] = c
		f.Add([]byte(tok))
		parts := strings.Split(tok, ".")
		f.Add([]byte(parts[0] + "." + parts[1] + "."))
		f.Add([]byte(parts[1] + "." + parts[0] + "." + parts[2]))
	}
	other, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	forger, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: jose.JSONWebKey{Key: other, KeyID: s.SigningKey()}},
		(&jose.SignerOptions{}).WithType(HeaderType))
	if err != nil {
		f.Fatal(err)
	}
	if jws, err := forger.Sign([]byte(`{"jti":"AAAAAAAAAAAAAAAAAAAAAA","sub":"web-1","aud":"c1","iat":1,"exp":3600}`)); err == nil {
		tok, _ := jws.CompactSerialize()
		f.Add([]byte(tok))
	}
	f.Add([]byte("eyJhbGciOiJub25lIn0.e30."))
	f.Add([]byte(""))
	keys := s.PublicKeys()
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Verify(data, keys, Expect{Cluster: cluster, Now: t0.Add(time.Minute), Skew: 30 * time.Second})
		if err != nil {
			return
		}
		want, ok := issued[c.ID]
		if !ok || c != want {
			t.Fatalf("verified claims %+v that the key set never issued", c)
		}
		if peeked, err := Peek(data); err != nil || peeked != c {
			t.Fatalf("Peek of a verified ticket: %+v, %v", peeked, err)
		}
	})
}
