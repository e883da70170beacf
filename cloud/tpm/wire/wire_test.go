package wire

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"
)

func sample() *Evidence {
	return &Evidence{Version: Version, Time: 1_790_000_000, AKPublic: []byte{1}, Quote: []byte{2}, Signature: []byte{3},
		PCRHash: 0x000B, PCRs: map[uint32][]byte{0: make([]byte, 32), 7: bytes.Repeat([]byte{7}, 32)}}
}

func TestParseRoundTrip(t *testing.T) {
	data, err := sample().Marshal()
	if err != nil {
		t.Fatal(err)
	}
	e, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	if e.Time != 1_790_000_000 || len(e.PCRs) != 2 || !bytes.Equal(e.PCRs[7], bytes.Repeat([]byte{7}, 32)) {
		t.Fatalf("round trip: %+v", e)
	}
}

// TestParseRefuses: Parse is strict on what it lets through to the
// verifier.
func TestParseRefuses(t *testing.T) {
	good, _ := sample().Marshal()
	for name, data := range map[string]string{
		"not JSON":        "quote",
		"unknown field":   strings.Replace(string(good), `"version":1`, `"version":1,"extra":true`, 1),
		"trailing object": string(good) + `{}`,
		"other version":   strings.Replace(string(good), `"version":1`, `"version":2`, 1),
		"no time":         strings.Replace(string(good), `"time":1790000000`, `"time":0`, 1),
		"no quote":        strings.Replace(string(good), `"quote":"Ag=="`, `"quote":""`, 1),
		"PCR 24":          strings.Replace(string(good), `"7":`, `"24":`, 1),
		"no PCRs":         strings.Replace(strings.Replace(string(good), `"0":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",`, ``, 1), `"7":"BwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwc="`, ``, 1),
	} {
		if data == string(good) {
			t.Fatalf("%s: the case did not change the evidence", name)
		}
		if _, err := Parse([]byte(data)); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: Parse = %v, want ErrMalformed", name, err)
		}
	}
}

// TestNonceBindsBindingAndTime: the nonce differs by binding and by
// second, and is SHA-256 sized (a TPM's qualifying data limit).
func TestNonceBindsBindingAndTime(t *testing.T) {
	at := time.Unix(1_790_000_000, 0)
	a := Nonce("a", at)
	if len(a) != 32 || bytes.Equal(a, Nonce("b", at)) || bytes.Equal(a, Nonce("a", at.Add(time.Second))) || !bytes.Equal(a, Nonce("a", at.Add(500*time.Millisecond))) {
		t.Fatal("the nonce does not bind exactly the binding and the second")
	}
}
