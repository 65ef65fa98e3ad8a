package handoff

import "stockpot/internal/api"

// apiError is an error in the API's shape.
func apiError(status int, code, msg string) *api.Error {
	typ := api.TypeInvalidRequest
	return &api.Error{Status: status, Type: typ, Code: code, Message: msg}
}
