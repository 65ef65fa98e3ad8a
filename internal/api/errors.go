package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
)

// OpenAI error types.
const (
	TypeInvalidRequest = "invalid_request_error"
	TypeAuthentication = "authentication_error"
	TypeNotFound       = "not_found_error"
	TypeServer         = "server_error"
	TypeUnavailable    = "service_unavailable_error"
)

// Error is an API error in OpenAI shape with its HTTP status.
type Error struct {
	Status  int    // HTTP status
	Message string // for people; names the field and the numbers involved
	Type    string // TypeInvalidRequest, ...
	Code    string // machine-readable: "invalid_value", "model_not_found", ...
	Param   string // the offending request field, if any
}

func (e *Error) Error() string {
	if e.Param != "" {
		return fmt.Sprintf("%d %s (%s): %s", e.Status, e.Type, e.Param, e.Message)
	}
	return fmt.Sprintf("%d %s: %s", e.Status, e.Type, e.Message)
}

// ErrorBody is the JSON body of an error response: {"error": {...}}.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail is the inner OpenAI error object.
type ErrorDetail struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

// Body returns the JSON body for e, its message and param cut to a few KiB at most (see
// Quote: client strings are quoted by prefix where the message is built).
func (e *Error) Body() ErrorBody {
	d := ErrorDetail{Message: cutLong(e.Message, maxErrorMessageBytes), Type: e.Type}
	if e.Param != "" {
		p := cutLong(e.Param, maxErrorParamBytes)
		d.Param = &p
	}
	if e.Code != "" {
		c := e.Code
		d.Code = &c
	}
	return ErrorBody{Error: d}
}

// MarshalJSON writes e as the OpenAI error body.
func (e *Error) MarshalJSON() ([]byte, error) { return json.Marshal(e.Body()) }

// Invalid returns a 400 invalid_request_error about param.
func Invalid(param, format string, args ...any) *Error {
	return &Error{Status: http.StatusBadRequest, Type: TypeInvalidRequest, Code: "invalid_value",
		Param: param, Message: fmt.Sprintf(format, args...)}
}

// Unsupported returns a 400 for a valid OpenAI feature Stockpot does not implement.
func Unsupported(param, format string, args ...any) *Error {
	e := Invalid(param, format, args...)
	e.Code = "unsupported_parameter"
	return e
}

// ModelNotFound returns the 404 OpenAI gives for an unknown model.
func ModelNotFound(model, served string) *Error {
	return &Error{Status: http.StatusNotFound, Type: TypeInvalidRequest, Code: "model_not_found", Param: "model",
		Message: fmt.Sprintf("the model %s does not exist; this server serves %q", Quote(model), served)}
}

// NotFound returns a 404 for an unknown route.
func NotFound(method, path string) *Error {
	return &Error{Status: http.StatusNotFound, Type: TypeNotFound, Code: "not_found",
		Message: fmt.Sprintf("no route for %s %s", cutLong(method, QuotePrefixBytes), Quote(path))}
}

// MethodNotAllowed returns a 405.
func MethodNotAllowed(method, path, allowed string) *Error {
	return &Error{Status: http.StatusMethodNotAllowed, Type: TypeInvalidRequest, Code: "method_not_allowed",
		Message: fmt.Sprintf("method %s is not allowed on %s; use %s", Quote(method), path, allowed)}
}

// Unauthorized returns a 401 for a missing or wrong API key.
func Unauthorized(msg string) *Error {
	return &Error{Status: http.StatusUnauthorized, Type: TypeAuthentication, Code: "invalid_api_key", Message: msg}
}

// TooLarge returns a 413 for a body over the limit.
func TooLarge(limit int64) *Error {
	return &Error{Status: http.StatusRequestEntityTooLarge, Type: TypeInvalidRequest, Code: "request_too_large",
		Message: fmt.Sprintf("request body is over the limit of %d bytes (--max-body-bytes)", limit)}
}

// Internal returns a 500; the message must not leak internals beyond what helps.
func Internal(format string, args ...any) *Error {
	return &Error{Status: http.StatusInternalServerError, Type: TypeServer, Code: "internal_error",
		Message: fmt.Sprintf(format, args...)}
}

// Unavailable returns a 503 (draining, shutting down).
func Unavailable(format string, args ...any) *Error {
	return &Error{Status: http.StatusServiceUnavailable, Type: TypeUnavailable, Code: "unavailable",
		Message: fmt.Sprintf(format, args...)}
}

// AsError returns err as an *Error, wrapping a non-API error as a 500.
func AsError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return Internal("internal error: %v", err)
}
