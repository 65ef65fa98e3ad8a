package api

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
)

// KVTransferParams is vLLM's kv_transfer_params, the field its disaggregation proxy and
// connectors pass between a prefill replica and a decode replica, with Stockpot's own fields
// (stockpot_*). On a request to a prefill replica DoRemoteDecode is true (the proxy sends the
// remote_* fields null); the prefill's answer carries the params naming where its blocks
// are (DoRemotePrefill true), which the proxy copies into the same request to a decode
// replica. Unknown fields are refused: a params object is read by a peer, and a field one
// side relies on that the other ignores would be a silent wrong answer.
type KVTransferParams struct {
	DoRemoteDecode  bool   `json:"do_remote_decode"`
	DoRemotePrefill bool   `json:"do_remote_prefill"`
	RemoteEngineID  string `json:"remote_engine_id,omitempty"`
	// RemoteBlockIDs are the prompt's blocks on the prefill replica: Stockpot numbers them
	// 0..n-1 in prompt order (its blocks are named by chain hash, which the decode computes).
	RemoteBlockIDs  []int  `json:"remote_block_ids,omitempty"`
	RemoteHost      string `json:"remote_host,omitempty"`
	RemotePort      int    `json:"remote_port,omitempty"`
	RemoteRequestID string `json:"remote_request_id,omitempty"`
	TPSize          int    `json:"tp_size,omitempty"` // vLLM's; 1 for Stockpot

	// FirstToken is the token the prefill sampled after the prompt: the decode outputs it as
	// its first, and decodes on from it.
	FirstToken *int32 `json:"stockpot_first_token,omitempty"`
	// PromptTokens is the length of the prompt the prefill computed, and PromptDigest its
	// PromptDigest: a decode whose prompt is not that one does not take FirstToken.
	PromptTokens int    `json:"stockpot_prompt_tokens,omitempty"`
	PromptDigest string `json:"stockpot_prompt_digest,omitempty"`
	// LeaseMs is how long, from the prefill's answer, the prefill holds the blocks.
	LeaseMs int64 `json:"stockpot_lease_ms,omitempty"`
}

// Bounds of kv_transfer_params.
const (
	maxTransferIDBytes  = 128
	maxTransferBlockIDs = 1 << 20 // a 16M-token prompt at 16 tokens a block
)

// transferID is the shape of remote_engine_id and remote_request_id: printable, no spaces
// or path characters (it is a path segment of the pull).
var transferID = regexp.MustCompile(`^[A-Za-z0-9._:\-]+$`)

// ParseKVTransferParams decodes kv_transfer_params strictly: null is none; an object with an
// unknown field, a field of the wrong type, or values out of range is a 400 naming it.
func ParseKVTransferParams(raw json.RawMessage) (*KVTransferParams, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, nil
	}
	const param = "kv_transfer_params"
	if raw[0] != '{' {
		return nil, Invalid(param, "kv_transfer_params must be an object")
	}
	d := json.NewDecoder(bytes.NewReader(raw))
	d.DisallowUnknownFields()
	var p KVTransferParams
	if err := d.Decode(&p); err != nil {
		return nil, Invalid(param, "kv_transfer_params: %s", jsonProblem(err))
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, Invalid(param, "kv_transfer_params: data after the object")
	}
	switch {
	case p.DoRemoteDecode && p.DoRemotePrefill:
		return nil, Invalid(param, "kv_transfer_params: do_remote_decode and do_remote_prefill are exclusive (a prefill request, or a decode request)")
	case p.RemotePort < 0 || p.RemotePort > 65535:
		return nil, Invalid(param+".remote_port", "kv_transfer_params.remote_port must be a port number, got %d", p.RemotePort)
	case len(p.RemoteHost) > 253:
		return nil, Invalid(param+".remote_host", "kv_transfer_params.remote_host is %d bytes, over 253", len(p.RemoteHost))
	case len(p.RemoteBlockIDs) > maxTransferBlockIDs:
		return nil, Invalid(param+".remote_block_ids", "kv_transfer_params.remote_block_ids has %d ids, at most %d", len(p.RemoteBlockIDs), maxTransferBlockIDs)
	case p.PromptTokens < 0 || p.LeaseMs < 0 || p.TPSize < 0:
		return nil, Invalid(param, "kv_transfer_params: stockpot_prompt_tokens, stockpot_lease_ms and tp_size must not be negative")
	case len(p.PromptDigest) > 64:
		return nil, Invalid(param+".stockpot_prompt_digest", "kv_transfer_params.stockpot_prompt_digest is %d bytes, over 64", len(p.PromptDigest))
	case p.FirstToken != nil && *p.FirstToken < 0:
		return nil, Invalid(param+".stockpot_first_token", "kv_transfer_params.stockpot_first_token must be a token id, got %d", *p.FirstToken)
	}
	for name, id := range map[string]string{"remote_engine_id": p.RemoteEngineID, "remote_request_id": p.RemoteRequestID} {
		if id != "" && (len(id) > maxTransferIDBytes || !transferID.MatchString(id)) {
			return nil, Invalid(param+"."+name, "kv_transfer_params.%s must be up to %d letters, digits and ._:- characters, got %s", name, maxTransferIDBytes, Quote(id))
		}
	}
	for i, b := range p.RemoteBlockIDs {
		if b != i {
			return nil, Invalid(param+".remote_block_ids", "kv_transfer_params.remote_block_ids must be 0..n-1 in order (a Stockpot prefill's blocks), got %d at %d", b, i)
		}
	}
	if p.DoRemotePrefill && (p.RemoteHost == "" || p.RemotePort == 0 || p.RemoteRequestID == "") {
		return nil, Invalid(param, "kv_transfer_params with do_remote_prefill needs remote_host, remote_port and remote_request_id (the prefill replica's answer carries them)")
	}
	return &p, nil
}

// PromptDigest names a prompt's token ids (the first 16 bytes of the SHA-256 of their
// little-endian bytes, hex): a decode takes the prefill's first token only for the very
// prompt the prefill computed.
func PromptDigest(ids []int32) string {
	h := sha256.New()
	var b [4]byte
	for _, id := range ids {
		binary.LittleEndian.PutUint32(b[:], uint32(id))
		h.Write(b[:])
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// jsonProblem is a decoding error as a client reads it.
func jsonProblem(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return fmt.Sprintf("field %s must be %s, got %s", te.Field, te.Type, te.Value)
	}
	return err.Error()
}
