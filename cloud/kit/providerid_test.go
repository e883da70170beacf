package kit

import (
	"errors"
	"strings"
	"testing"
)

func TestNumericProviderID(t *testing.T) {
	notOurs := errors.New("not a test providerID")
	for _, bad := range []string{"", "test://", "test://0", "test://-1", "test://+1", "test://007", "test://1x", "test:// 1",
		"test://1 ", "test:///1", "test://1/x", "test://99999999999999999999", "other://1", "TEST://1"} {
		if id, err := NumericProviderID(bad, "test://", "instance id", notOurs); err == nil || !errors.Is(err, notOurs) ||
			!strings.Contains(err.Error(), "test://<instance id>") {
			t.Errorf("%q: %d %v", bad, id, err)
		}
	}
	for in, want := range map[string]int64{"test://1": 1, "test://3164444": 3164444, "test://9223372036854775807": 1<<63 - 1} {
		if id, err := NumericProviderID(in, "test://", "instance id", notOurs); err != nil || id != want {
			t.Errorf("%q: %d %v, want %d", in, id, err, want)
		}
	}
}
