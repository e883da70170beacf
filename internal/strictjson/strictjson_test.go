package strictjson

import "testing"

func TestUnmarshal(t *testing.T) {
	type inner struct {
		A string `json:"a"`
	}
	type doc struct {
		X     string `json:"x"`
		Inner inner  `json:"inner"`
	}
	refused := map[string]string{
		"duplicate":                     `{"x":"1","x":"2"}`,
		"duplicate nested":              `{"inner":{"a":"1","a":"2"}}`,
		"duplicate in a skipped member": `{"x":"1","other":{"b":1,"b":2}}`,
		"duplicate in an array":         `{"x":"1","other":[{"b":1,"b":2}]}`,
		"trailing data":                 `{"x":"1"} {}`,
		"two values":                    `{"x":"1"}{"x":"2"}`,
		"not JSON":                      `{"x":`,
	}
	for name, in := range refused {
		var d doc
		if err := Unmarshal([]byte(in), &d); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	var d doc
	if err := Unmarshal([]byte(` {"x":"1","X":"2","other":[1,{"b":1}],"inner":{"a":"z"}} `), &d); err != nil || d.X != "1" || d.Inner.A != "z" {
		t.Fatalf("good document: %+v, %v", d, err)
	}
	if err := UnmarshalKnown([]byte(`{"x":"1","other":1}`), &d); err == nil {
		t.Error("UnmarshalKnown accepted an unknown member")
	}
	if err := UnmarshalKnown([]byte(`{"x":"1","inner":{"a":"b"}}`), &d); err != nil {
		t.Errorf("UnmarshalKnown: %v", err)
	}
}
