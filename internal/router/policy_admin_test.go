package router

import (
	"strings"
	"testing"
)

// TestPolicyAdmin: GET and PUT /policy need the admin key; a malformed body or an unknown
// policy is a 400 and a switch to kv-aware on a router without events a 409, the policy
// staying; a good PUT changes the policy the next request is picked with.
func TestPolicyAdmin(t *testing.T) {
	be := newRecordingBackend(t, "", false)
	rt, front, _ := authRouter(t, func(c *Config) {
		c.APIKeys, c.AdminKeys = []string{clientKey}, []string{adminKey}
	}, be.URL)
	admin := []string{"Authorization", "Bearer " + adminKey}
	for _, m := range []string{"GET", "PUT"} {
		code, body := call(t, m, front+"/policy", `{"policy":"prefix"}`)
		wantAPIError(t, m+" /policy without a key", code, 401, body, "authentication_error")
		code, body = call(t, m, front+"/policy", `{"policy":"prefix"}`, "Authorization", "Bearer "+clientKey)
		wantAPIError(t, m+" /policy with a client key", code, 403, body, "permission_error")
	}
	if rt.policy.Name() != "round-robin" {
		t.Fatalf("a refused PUT changed the policy to %s", rt.policy.Name())
	}
	code, body := call(t, "GET", front+"/policy", "", admin...)
	if code != 200 || !strings.Contains(body, `"policy":"round-robin"`) || !strings.Contains(body, `"events":false`) {
		t.Fatalf("GET /policy: HTTP %d %s", code, body)
	}
	for _, bad := range []string{``, `{`, `{"policy":""}`, `{"policy":7}`, `{"policy":"fastest"}`} {
		code, body := call(t, "PUT", front+"/policy", bad, admin...)
		wantAPIError(t, "PUT /policy "+bad, code, 400, body, "invalid_request_error")
	}
	code, body = call(t, "PUT", front+"/policy", `{"policy":"kv-aware"}`, admin...)
	if code != 409 || !strings.Contains(body, `"events_off"`) {
		t.Fatalf("PUT kv-aware without events: HTTP %d %s, want 409 events_off", code, body)
	}
	if rt.policy.Name() != "round-robin" {
		t.Fatalf("a refused PUT changed the policy to %s", rt.policy.Name())
	}
	code, body = call(t, "PUT", front+"/policy", `{"policy":"prefix"}`, admin...)
	if code != 200 || !strings.Contains(body, `"policy":"prefix"`) || !strings.Contains(body, `"previous":"round-robin"`) {
		t.Fatalf("PUT prefix: HTTP %d %s", code, body)
	}
	if rt.policy.Name() != "prefix" {
		t.Fatalf("policy %s after PUT prefix", rt.policy.Name())
	}
	// The new policy places requests: prefix keeps a session on one backend, and a request
	// through the router still succeeds.
	if code, body := call(t, "POST", front+"/v1/completions", `{"prompt":"hi","max_tokens":1}`,
		"Authorization", "Bearer "+clientKey, "X-Session-ID", "s1"); code != 200 {
		t.Fatalf("a request after the switch: HTTP %d %s", code, body)
	}
	code, body = call(t, "GET", front+"/policy", "", admin...)
	if code != 200 || !strings.Contains(body, `"policy":"prefix"`) {
		t.Fatalf("GET /policy after the switch: HTTP %d %s", code, body)
	}
}

// TestPolicyAdminKVAwareWithEvents: a router that follows events switches to kv-aware and
// back.
func TestPolicyAdminKVAwareWithEvents(t *testing.T) {
	be := newRecordingBackend(t, "", false)
	on := true
	rt, front, _ := authRouter(t, func(c *Config) { c.AdminKeys, c.Events = []string{adminKey}, &on }, be.URL)
	admin := []string{"Authorization", "Bearer " + adminKey}
	for _, p := range []string{"kv-aware", "least-loaded", "kv-aware"} {
		if code, body := call(t, "PUT", front+"/policy", `{"policy":"`+p+`"}`, admin...); code != 200 || !strings.Contains(body, `"events":true`) {
			t.Fatalf("PUT %s: HTTP %d %s", p, code, body)
		}
		if rt.policy.Name() != p {
			t.Fatalf("policy %s, want %s", rt.policy.Name(), p)
		}
	}
}
