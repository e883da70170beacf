package nodeid

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/mooring-dev/mooring/internal/evidence"
)

type stubIdentity struct{ url string }

func (s *stubIdentity) Instance(context.Context) (Instance, error) {
	return Instance{ID: "i-1", Name: s.url}, nil
}

func (*stubIdentity) Evidence(context.Context, string) (evidence.Block, error) {
	return evidence.Block{}, ErrNoEvidence
}

func TestRegistry(t *testing.T) {
	Register("test-a", func(c Config) (Identity, error) { return &stubIdentity{c.MetadataURL}, nil })
	Register("test-b", func(Config) (Identity, error) { return nil, nil })
	Register("test-c", func(c Config) (Identity, error) {
		var none *stubIdentity
		return none, errors.New("test-c: bad config")
	})
	if !Known("test-a") || Known("test-d") {
		t.Fatalf("Known: %v", Backends())
	}
	if got := strings.Join(Backends(), ","); got != "test-a,test-b,test-c" {
		t.Fatalf("Backends() = %s", got)
	}
	id, err := New("test-a", Config{MetadataURL: "http://md"})
	if err != nil {
		t.Fatal(err)
	}
	if in, _ := id.Instance(context.Background()); in.Name != "http://md" {
		t.Fatalf("the identity did not get its metadata URL: %+v", in)
	}
	if _, err := New("test-b", Config{}); err == nil || !strings.Contains(err.Error(), "built nothing") {
		t.Fatalf("a factory building nothing: %v", err)
	}
	// A factory's error comes back as it is, without the typed nil the
	// factory returned beside it.
	if id, err := New("test-c", Config{}); id != nil || err == nil || err.Error() != "test-c: bad config" {
		t.Fatalf("a factory refusing its config: %#v, %v", id, err)
	}
	if _, err := New("test-d", Config{}); err == nil || !strings.Contains(err.Error(), "test-a") {
		t.Fatalf("an unknown backend's error should list the known ones: %v", err)
	}
	for name, reg := range map[string]func(){
		"duplicate":  func() { Register("test-a", func(Config) (Identity, error) { return nil, nil }) },
		"no name":    func() { Register("", func(Config) (Identity, error) { return nil, nil }) },
		"no factory": func() { Register("test-e", nil) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: Register did not panic", name)
				}
			}()
			reg()
		}()
	}
}
