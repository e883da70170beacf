package evidence

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"strings"
	"testing"
)

const tokenType = "MOORING LOCAL IDENTITY TOKEN"

func newCSR(t testing.TB) ([]byte, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: "system:node:node-1", Organization: []string{"system:nodes"}},
	}, key)
	if err != nil {
		t.Fatal(err)
	}
	return der, key
}

func TestRoundTrip(t *testing.T) {
	der, key := newCSR(t)
	req, err := Encode(der, Block{Type: tokenType, Data: []byte("header.payload.signature")})
	if err != nil {
		t.Fatal(err)
	}
	csr, blocks, err := Decode(req)
	if err != nil {
		t.Fatal(err)
	}
	if csr.Subject.CommonName != "system:node:node-1" || len(blocks) != 1 || blocks[0].Type != tokenType ||
		string(blocks[0].Data) != "header.payload.signature" {
		t.Fatalf("decoded %v, %+v", csr.Subject, blocks)
	}
	// Without evidence: just the CSR.
	plain := pem.EncodeToMemory(&pem.Block{Type: CSRBlockType, Bytes: der})
	if _, blocks, err := Decode(plain); err != nil || len(blocks) != 0 {
		t.Fatalf("plain CSR: %v, %d blocks", err, len(blocks))
	}
	// The binding is the key's, and differs between keys.
	b1, _ := Binding(&key.PublicKey)
	b2, _ := Binding(csr.PublicKey)
	_, other := newCSR(t)
	b3, _ := Binding(&other.PublicKey)
	if b1 != b2 || b1 == b3 || len(b1) != 43 {
		t.Fatalf("bindings %q %q %q", b1, b2, b3)
	}
}

func TestDecodeRefuses(t *testing.T) {
	der, _ := newCSR(t)
	csrPEM := pem.EncodeToMemory(&pem.Block{Type: CSRBlockType, Bytes: der})
	block := func(typ string, data []byte) []byte { return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: data}) }
	tok := block(tokenType, []byte("t"))
	corrupt := bytes.Clone(der)
	corrupt[len(corrupt)-5] ^= 0xff
	cases := []struct {
		name string
		req  []byte
		want error
	}{
		{"empty", nil, ErrMalformed},
		{"garbage", []byte("hello"), ErrMalformed},
		{"1 MiB", append(bytes.Clone(csrPEM), bytes.Repeat([]byte("A"), 1<<20)...), ErrTooLarge},
		{"not a CSR first", append(bytes.Clone(tok), csrPEM...), ErrNoCSR},
		{"text before the CSR", append([]byte("note\n"), csrPEM...), ErrMalformed},
		{"garbage after the CSR", append(bytes.Clone(csrPEM), []byte("trailing")...), ErrMalformed},
		{"garbage between blocks", append(append(bytes.Clone(csrPEM), []byte("x\n")...), tok...), ErrMalformed},
		{"two CSRs", append(bytes.Clone(csrPEM), csrPEM...), ErrMalformed},
		{"duplicate evidence", append(append(bytes.Clone(csrPEM), tok...), tok...), ErrMalformed},
		{"lower-case type", append(bytes.Clone(csrPEM), block("token", []byte("t"))...), ErrMalformed},
		{"empty evidence", append(bytes.Clone(csrPEM), block(tokenType, nil)...), ErrTooLarge},
		{"oversized evidence", append(bytes.Clone(csrPEM), block(tokenType, make([]byte, MaxBlockSize+1))...), ErrTooLarge},
		{"too many blocks", bytes.Join([][]byte{csrPEM, block("A", []byte("1")), block("B", []byte("1")),
			block("C", []byte("1")), block("D", []byte("1")), block("E", []byte("1"))}, nil), ErrTooLarge},
		{"PEM headers", append(bytes.Clone(csrPEM), pem.EncodeToMemory(&pem.Block{Type: tokenType, Headers: map[string]string{"Kid": "x"}, Bytes: []byte("t")})...), ErrMalformed},
		{"bad CSR signature", block(CSRBlockType, corrupt), ErrMalformed},
		{"CSR not DER", block(CSRBlockType, []byte("not der")), ErrMalformed},
		// pem.Decode skips a block whose base64 is broken and returns the
		// next one: the block parsed is not the one that begins the request.
		{"malformed CSR block before the real one", append([]byte("-----BEGIN CERTIFICATE REQUEST-----\n!!!\n-----END CERTIFICATE REQUEST-----\n"), csrPEM...), ErrMalformed},
		{"malformed evidence block before the real one", bytes.Join([][]byte{csrPEM,
			[]byte("-----BEGIN MOORING LOCAL IDENTITY TOKEN-----\n!!!\n-----END MOORING LOCAL IDENTITY TOKEN-----\n"), tok}, nil), ErrMalformed},
		{"unterminated block before the evidence", bytes.Join([][]byte{csrPEM, []byte("-----BEGIN X-----\n"), tok}, nil), ErrMalformed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			csr, blocks, err := Decode(tc.req)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Decode = %v, want %v", err, tc.want)
			}
			if csr != nil || blocks != nil {
				t.Fatal("a refused request returned content")
			}
			// Claimed refuses all Decode refuses but a bad signature,
			// which it does not check.
			claimed, _, err := Claimed(tc.req)
			if strings.HasPrefix(tc.name, "bad CSR signature") {
				if err != nil || claimed == nil {
					t.Fatalf("Claimed of a request signed badly = %v", err)
				}
			} else if !errors.Is(err, tc.want) || claimed != nil {
				t.Fatalf("Claimed = %v; want %v", err, tc.want)
			}
			// Blocks checks the same framing; the CSR itself it leaves
			// to Decode.
			blocks, err = Blocks(tc.req)
			if strings.HasPrefix(tc.name, "CSR not DER") || strings.HasPrefix(tc.name, "bad CSR signature") {
				if err != nil || len(blocks) != 0 {
					t.Fatalf("Blocks of a request framed well = %d blocks, %v", len(blocks), err)
				}
				return
			}
			if !errors.Is(err, tc.want) || blocks != nil {
				t.Fatalf("Blocks = %d blocks, %v; want %v", len(blocks), err, tc.want)
			}
		})
	}
	good := append(bytes.Clone(csrPEM), tok...)
	if blocks, err := Blocks(good); err != nil || len(blocks) != 1 || blocks[0].Type != tokenType || string(blocks[0].Data) != "t" {
		t.Fatalf("Blocks of a good request = %+v, %v", blocks, err)
	}
}

func TestEncodeRefuses(t *testing.T) {
	der, _ := newCSR(t)
	for name, b := range map[string]Block{
		"empty":     {Type: tokenType},
		"bad type":  {Type: "lower", Data: []byte("x")},
		"CSR type":  {Type: CSRBlockType, Data: []byte("x")},
		"oversized": {Type: tokenType, Data: make([]byte, MaxBlockSize+1)},
	} {
		if _, err := Encode(der, b); err == nil {
			t.Errorf("%s: encoded", name)
		}
	}
}

// FuzzDecode: no input panics Decode, and whatever it accepts re-encodes
// to a request that decodes to the same content.
func FuzzDecode(f *testing.F) {
	der, _ := newCSR(f)
	good, _ := Encode(der, Block{Type: tokenType, Data: []byte("a.b.c")})
	f.Add(good)
	f.Add(pem.EncodeToMemory(&pem.Block{Type: CSRBlockType, Bytes: der}))
	f.Add([]byte("-----BEGIN CERTIFICATE REQUEST-----\n-----END CERTIFICATE REQUEST-----\n"))
	f.Add(append(bytes.Clone(good), good...))
	f.Add([]byte(strings.Repeat("-----BEGIN A-----\n", 50)))
	f.Fuzz(func(t *testing.T, req []byte) {
		peeked, peekErr := Blocks(req)
		csr, blocks, err := Decode(req)
		if err != nil {
			return
		}
		if peekErr != nil || len(peeked) != len(blocks) {
			t.Fatalf("Decode accepts what Blocks refuses (%v) or reads other blocks (%d, %d)", peekErr, len(peeked), len(blocks))
		}
		again, err := Encode(csr.Raw, blocks...)
		if err != nil {
			t.Fatalf("accepted request does not re-encode: %v", err)
		}
		csr2, blocks2, err := Decode(again)
		if err != nil || !bytes.Equal(csr2.Raw, csr.Raw) || len(blocks2) != len(blocks) {
			t.Fatalf("round trip changed the request: %v", err)
		}
	})
}
