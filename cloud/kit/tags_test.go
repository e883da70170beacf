package kit

import (
	"maps"
	"testing"
)

func TestTagLabels(t *testing.T) {
	if got := TagLabels(nil); got != nil {
		t.Errorf("no tags: %v", got)
	}
	got := TagLabels([]string{"k8s:c1", "web", "web"})
	if want := map[string]string{"k8s:c1": "", "web": ""}; !maps.Equal(got, want) {
		t.Errorf("%v, want %v", got, want)
	}
}
