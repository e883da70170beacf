package api

import (
	"encoding/json"
	"fmt"
	"time"
)

// ErrorCode is a machine-readable error class.
type ErrorCode string

// Error codes and the HTTP status each comes with.
const (
	CodeInvalid      ErrorCode = "Invalid"      // 400
	CodeUnauthorized ErrorCode = "Unauthorized" // 401
	CodeNotFound     ErrorCode = "NotFound"     // 404
	CodeConflict     ErrorCode = "Conflict"     // 409: duplicate name, wrong state
	CodeExhausted    ErrorCode = "Exhausted"    // 507: an address pool is empty
	CodeThrottled    ErrorCode = "Throttled"    // 429: rate limit, see Retry-After
	CodeUnavailable  ErrorCode = "Unavailable"  // 503: injected fault or shutdown
	CodeInternal     ErrorCode = "Internal"     // 500
)

// Error is the body of every error response: {"error": {...}}.
type Error struct {
	Code    ErrorCode `json:"code"`
	Message string    `json:"message"`
	// Status is the HTTP status (not serialized; set by the client).
	Status int `json:"-"`
	// RetryAfter is set by the client from a Retry-After header.
	RetryAfter time.Duration `json:"-"`
}

func (e *Error) Error() string {
	return fmt.Sprintf("localcloud: %s: %s", e.Code, e.Message)
}

// ErrorBody wraps an Error on the wire.
type ErrorBody struct {
	Error *Error `json:"error"`
}

// Errorf returns an Error with a formatted message.
func Errorf(code ErrorCode, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Duration is a time.Duration written as a Go duration string ("150ms").
type Duration time.Duration

// MarshalJSON writes the duration as a string.
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

// UnmarshalJSON reads a duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration must be a string such as \"150ms\": %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	if v < 0 {
		return fmt.Errorf("duration %q is negative", s)
	}
	*d = Duration(v)
	return nil
}
