package evidence

import (
	"bytes"
	"encoding/pem"
	"fmt"
	"testing"
)

// BenchmarkDecode is the approver's first step on every CSR: a join as the
// agent files it (its CSR, then an identity token of about a kilobyte), a
// renewal or serving CSR (no evidence), and the largest request Decode
// accepts (MaxBlocks blocks filling MaxRequestSize), the most an attacker
// can make it read.
func BenchmarkDecode(b *testing.B) {
	der, _ := newCSR(b)
	token := bytes.Repeat([]byte("eyJhbGciOiJFUzI1NiJ9"), 50) // a token's size and alphabet
	join, err := Encode(der, Block{Type: tokenType, Data: token})
	if err != nil {
		b.Fatal(err)
	}
	// Base64 in PEM takes 4/3 of the data, plus line breaks and armor.
	room := (MaxRequestSize-len(pem.EncodeToMemory(&pem.Block{Type: CSRBlockType, Bytes: der})))*3/4/MaxBlocks - 200
	var blocks []Block
	for i := range MaxBlocks {
		blocks = append(blocks, Block{Type: fmt.Sprintf("EVIDENCE %d", i), Data: bytes.Repeat([]byte{'x'}, room)})
	}
	largest, err := Encode(der, blocks...)
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name    string
		request []byte
		blocks  int
	}{
		{"join", join, 1},
		{"no-evidence", pem.EncodeToMemory(&pem.Block{Type: CSRBlockType, Bytes: der}), 0},
		{"largest", largest, MaxBlocks},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(c.request)))
			b.ReportAllocs()
			for b.Loop() {
				if _, got, err := Decode(c.request); err != nil || len(got) != c.blocks {
					b.Fatalf("%d blocks, %v", len(got), err)
				}
			}
		})
	}
}
