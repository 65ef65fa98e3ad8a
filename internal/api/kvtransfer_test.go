package api

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// TestKVTransferParams: what vLLM's proxy sends a prefill and what a prefill's answer carries
// parse; every malformed shape is a 400 naming kv_transfer_params or its field.
func TestKVTransferParams(t *testing.T) {
	proxy := `{"do_remote_decode": true, "do_remote_prefill": false, "remote_engine_id": null, "remote_block_ids": null, "remote_host": null, "remote_port": null}`
	p, err := ParseKVTransferParams(json.RawMessage(proxy))
	if err != nil || !p.DoRemoteDecode || p.DoRemotePrefill || p.RemoteHost != "" {
		t.Fatalf("the proxy's params: %+v, %v", p, err)
	}
	answer := `{"do_remote_decode": false, "do_remote_prefill": true, "remote_engine_id": "stockpot-ab12", "remote_block_ids": [0, 1, 2],
		"remote_host": "10.0.0.7", "remote_port": 8100, "remote_request_id": "xfer-9f", "tp_size": 1,
		"stockpot_first_token": 42, "stockpot_prompt_tokens": 53, "stockpot_lease_ms": 30000}`
	p, err = ParseKVTransferParams(json.RawMessage(answer))
	if err != nil || !p.DoRemotePrefill || *p.FirstToken != 42 || len(p.RemoteBlockIDs) != 3 || p.RemotePort != 8100 {
		t.Fatalf("a prefill's answer: %+v, %v", p, err)
	}
	if p, err := ParseKVTransferParams(json.RawMessage("null")); p != nil || err != nil {
		t.Errorf("null: %+v, %v", p, err)
	}
	for name, tc := range map[string]struct{ body, param string }{
		"unknown field":  {`{"do_remote_decode": true, "remote_secret": 1}`, "kv_transfer_params"},
		"wrong type":     {`{"do_remote_decode": "yes"}`, "kv_transfer_params"},
		"not an object":  {`[1, 2]`, "kv_transfer_params"},
		"both":           {`{"do_remote_decode": true, "do_remote_prefill": true}`, "kv_transfer_params"},
		"port":           {strings.Replace(answer, "8100", "70000", 1), "kv_transfer_params.remote_port"},
		"request id":     {strings.Replace(answer, `"xfer-9f"`, `"../../v1/cache"`, 1), "kv_transfer_params.remote_request_id"},
		"engine id":      {strings.Replace(answer, `"stockpot-ab12"`, `"a b"`, 1), "kv_transfer_params.remote_engine_id"},
		"block ids":      {strings.Replace(answer, "[0, 1, 2]", "[0, 7, 2]", 1), "kv_transfer_params.remote_block_ids"},
		"first token":    {strings.Replace(answer, `"stockpot_first_token": 42`, `"stockpot_first_token": -3`, 1), "kv_transfer_params.stockpot_first_token"},
		"no host":        {strings.Replace(answer, `"remote_host": "10.0.0.7", `, ``, 1), "kv_transfer_params"},
		"trailing":       {proxy + "x", "kv_transfer_params"},
		"negative lease": {strings.Replace(answer, "30000", "-1", 1), "kv_transfer_params"},
	} {
		_, err := ParseKVTransferParams(json.RawMessage(tc.body))
		var e *Error
		if !errors.As(err, &e) || e.Status != 400 || e.Param != tc.param {
			t.Errorf("%s: %v, want a 400 naming %s", name, err, tc.param)
		}
	}
}

// FuzzKVTransferParams: any bytes parse or are a 400; what parses keeps its bounds.
func FuzzKVTransferParams(f *testing.F) {
	f.Add([]byte(`{"do_remote_decode": true, "remote_host": null}`))
	f.Add([]byte(`{"do_remote_prefill": true, "remote_host": "h", "remote_port": 1, "remote_request_id": "x", "remote_block_ids": [0, 1]}`))
	f.Add([]byte(`{"stockpot_first_token": 1e99}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := ParseKVTransferParams(b)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || e.Status != 400 {
				t.Fatalf("%q: %v is not a 400", b, err)
			}
			return
		}
		if p == nil {
			return
		}
		if p.DoRemoteDecode && p.DoRemotePrefill || p.RemotePort < 0 || p.RemotePort > 65535 || len(p.RemoteRequestID) > maxTransferIDBytes ||
			strings.ContainsAny(p.RemoteRequestID, "/?#% ") {
			t.Fatalf("%q parsed out of bounds: %+v", b, p)
		}
		for i, id := range p.RemoteBlockIDs {
			if id != i {
				t.Fatalf("%q: block ids %v", b, p.RemoteBlockIDs)
			}
		}
	})
}
