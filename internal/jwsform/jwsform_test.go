package jwsform

import (
	"encoding/base64"
	"strings"
	"testing"
)

func enc(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

func TestParse(t *testing.T) {
	payload, sig := enc(`{"iss":"x"}`), enc("signature")
	good := enc(`{"alg":"ES256","kid":"k","typ":"JWT"}`) + "." + payload + "." + sig
	p, err := Parse(good, 1024, "alg", "kid", "typ")
	if err != nil || string(p.Payload) != `{"iss":"x"}` || string(p.Signature) != "signature" {
		t.Fatalf("good token: %+v, %v", p, err)
	}
	// The last character of "signature" (9 bytes) carries no stray bits;
	// the payload's does: flip one.
	last := payload[len(payload)-1]
	stray := payload[:len(payload)-1] + string(last+1)
	refused := map[string]string{
		"oversized":          good + strings.Repeat("A", 1024),
		"two parts":          enc(`{"alg":"ES256"}`) + "." + payload,
		"four parts":         good + ".x",
		"padded":             enc(`{"alg":"ES256"}`) + "=." + payload + "." + sig,
		"standard base64":    strings.ReplaceAll(good, "-", "+") + "+",
		"stray bits":         enc(`{"alg":"ES256"}`) + "." + stray + "." + sig,
		"jwk":                enc(`{"alg":"ES256","jwk":{}}`) + "." + payload + "." + sig,
		"jku":                enc(`{"alg":"ES256","jku":"https://evil"}`) + "." + payload + "." + sig,
		"x5c":                enc(`{"alg":"ES256","x5c":[]}`) + "." + payload + "." + sig,
		"crit":               enc(`{"alg":"ES256","crit":["b64"],"b64":false}`) + "." + payload + "." + sig,
		"duplicate alg":      enc(`{"alg":"ES256","alg":"none"}`) + "." + payload + "." + sig,
		"header not object":  enc(`["alg"]`) + "." + payload + "." + sig,
		"header null":        enc(`null`) + "." + payload + "." + sig,
		"trailing in header": enc(`{"alg":"ES256"}x`) + "." + payload + "." + sig,
		"case-folded name":   enc(`{"ALG":"ES256"}`) + "." + payload + "." + sig,
	}
	for name, tok := range refused {
		if _, err := Parse(tok, 1024, "alg", "kid", "typ"); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
