package tpm

import (
	"bytes"
	"encoding/hex"
	"strings"
	"testing"
)

func sample() *Evidence {
	return &Evidence{Version: Version, Time: 1_790_000_000, AKPublic: []byte{1}, Quote: []byte{2}, Signature: []byte{3},
		PCRHash: 0x000B, PCRs: map[uint32][]byte{0: make([]byte, 32), 7: bytes.Repeat([]byte{7}, 32)}}
}

func TestPCRPolicy(t *testing.T) {
	seven := bytes.Repeat([]byte{7}, 32)
	p, err := ParsePCRPolicy("7=" + hex.EncodeToString(seven) + "|" + strings.Repeat("ab", 32) + ", 0=" + strings.Repeat("00", 32))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Allows(0x000B, sample().PCRs); err != nil {
		t.Fatalf("allowed values: %v", err)
	}
	if err := p.Allows(0x000B, map[uint32][]byte{0: make([]byte, 32), 7: make([]byte, 32)}); err == nil || !strings.Contains(err.Error(), "PCR 7") {
		t.Fatalf("PCR 7 outside the policy: %v", err)
	}
	if err := p.Allows(0x000B, map[uint32][]byte{7: seven}); err == nil || !strings.Contains(err.Error(), "does not cover PCR 0") {
		t.Fatalf("PCR 0 not quoted: %v", err)
	}
	if err := p.Allows(0x0004, sample().PCRs); err == nil {
		t.Fatal("a SHA-1 bank passed a SHA-256 policy")
	}
	if p, err := ParsePCRPolicy(" "); p != nil || err != nil {
		t.Fatalf("empty policy: %v %v", p, err)
	}
	for _, bad := range []string{"7", "24=" + strings.Repeat("00", 32), "7=00", "7=zz", "7=" + strings.Repeat("00", 32) + ",7=" + strings.Repeat("00", 32)} {
		if _, err := ParsePCRPolicy(bad); err == nil {
			t.Errorf("ParsePCRPolicy(%q) passed", bad)
		}
	}
}
