package cloud

import "testing"

func TestCheckEndpointLoopback(t *testing.T) {
	for _, ok := range []string{"https://ec2.example.com", "http://127.0.0.1:8080", "http://127.3.4.5", "http://[::1]:80", "http://localhost:1"} {
		if err := CheckEndpoint(ok, false); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"http://169.254.169.254", "ftp://127.0.0.1", "https://", "https:host", "https://h#f", "https://h?", "", "https://u:p@h", "https://h/path"} {
		if err := CheckEndpoint(bad, false); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if err := CheckEndpoint("https://h/path", true); err != nil {
		t.Errorf("a path, allowed: %v", err)
	}
}
