// Package apierror holds the errors that the HTTP API turns into its
// {"error":{"message","type"}} envelope. Runtimes and model families return
// them so that a client mistake becomes a 4xx with the right type, never a 500.
package apierror

import (
	"errors"
	"fmt"
	"net/http"
)

// Envelope types, as the wire contract names them.
const (
	TypeInvalid   = "invalid_request_error"
	TypeForbidden = "forbidden"
	TypeNotFound  = "not_found"
	TypeBusy      = "server_busy"
	TypeMemory    = "insufficient_memory"
	TypeInternal  = "server_error"
)

// Error is an error with the HTTP status and envelope type it maps to.
type Error struct {
	Status  int
	Type    string
	Message string
	Err     error // optional cause, not shown to clients beyond Message
}

func (e *Error) Error() string { return e.Message }
func (e *Error) Unwrap() error { return e.Err }

func newf(status int, typ, format string, args ...any) *Error {
	err := fmt.Errorf(format, args...)
	return &Error{Status: status, Type: typ, Message: err.Error(), Err: errors.Unwrap(err)}
}

// Invalidf is a 400 invalid_request_error.
func Invalidf(format string, args ...any) *Error {
	return newf(http.StatusBadRequest, TypeInvalid, format, args...)
}

// TooLargef is a 413 invalid_request_error (body or audio over a limit).
func TooLargef(format string, args ...any) *Error {
	return newf(http.StatusRequestEntityTooLarge, TypeInvalid, format, args...)
}

// Forbiddenf is a 403 forbidden (management disabled, path outside roots).
func Forbiddenf(format string, args ...any) *Error {
	return newf(http.StatusForbidden, TypeForbidden, format, args...)
}

// NotFoundf is a 404 not_found.
func NotFoundf(format string, args ...any) *Error {
	return newf(http.StatusNotFound, TypeNotFound, format, args...)
}

// Busyf is a 503 server_busy.
func Busyf(format string, args ...any) *Error {
	return newf(http.StatusServiceUnavailable, TypeBusy, format, args...)
}

// Memoryf is a 503 insufficient_memory.
func Memoryf(format string, args ...any) *Error {
	return newf(http.StatusServiceUnavailable, TypeMemory, format, args...)
}

// Internalf is a 500 server_error: a failure of the server, not of the client.
func Internalf(format string, args ...any) *Error {
	return newf(http.StatusInternalServerError, TypeInternal, format, args...)
}

// From returns err as an *Error, wrapping anything else as a 500 server_error.
func From(err error) *Error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return &Error{Status: http.StatusInternalServerError, Type: TypeInternal, Message: err.Error(), Err: err}
}

// Is reports whether err carries the given envelope type.
func Is(err error, typ string) bool {
	var e *Error
	return errors.As(err, &e) && e.Type == typ
}
