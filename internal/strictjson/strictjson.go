// Package strictjson decodes JSON that came from outside (tokens, evidence)
// so that every reader sees the same value: no member named twice in any
// object at any depth (parsers disagree on which one wins), nothing after
// the value, member names matched case-sensitively. It is
// sigs.k8s.io/json's UnmarshalStrict, checked twice: once into a generic
// value, which sees every member, then into v.
package strictjson

import (
	"errors"
	"fmt"

	kjson "sigs.k8s.io/json"
)

// Unmarshal decodes data into v, refusing duplicate members at any depth
// and trailing data; members v has no field for are ignored.
func Unmarshal(data []byte, v any) error {
	return decode(data, v, kjson.DisallowDuplicateFields)
}

// UnmarshalKnown is Unmarshal, refusing members v has no field for too.
func UnmarshalKnown(data []byte, v any) error {
	return decode(data, v, kjson.DisallowDuplicateFields, kjson.DisallowUnknownFields)
}

func decode(data []byte, v any, opts ...kjson.StrictOption) error {
	// A generic value keeps every member, so a duplicate is found even in
	// members v would skip.
	var all any
	if err := check(kjson.UnmarshalStrict(data, &all, kjson.DisallowDuplicateFields)); err != nil {
		return err
	}
	return check(kjson.UnmarshalStrict(data, v, opts...))
}

func check(strict []error, err error) error {
	if err != nil {
		return err
	}
	if len(strict) > 0 {
		return fmt.Errorf("strict JSON: %w", errors.Join(strict...))
	}
	return nil
}
