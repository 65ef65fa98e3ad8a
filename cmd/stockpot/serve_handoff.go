package main

import (
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"net/http"
	"time"

	"stockpot/internal/handoff"
	"stockpot/internal/tier"
)

// handoffOptions are serve's prefill/decode flags (--role, --prefill-peer, --handoff-*,
// --transfer-memory).
type handoffOptions struct {
	role          handoff.Role
	peers         []string
	lease         time.Duration
	transferBytes int64
	streams       int
}

// wire builds the server's Handoff for in: a prefill replica's registry and pull endpoint,
// a decode replica's puller into the transfer buffer. nil for a plain both replica.
func (h handoffOptions) wire(in *instance, peers *handoff.Peers, codec handoff.Codec, stateBytes int, backendKey string, logger *slog.Logger) *handoff.Node {
	role := h.role
	if role == "" {
		role = handoff.RoleBoth
	}
	var id [8]byte
	_, _ = rand.Read(id[:])
	out := &handoff.Node{Role: role, Root: in.engine.Root, BlockSize: codec.Layout.BlockSize, EngineID: "stockpot-" + hex.EncodeToString(id[:]), Logger: logger}
	if role.Prefills() {
		out.Registry = handoff.NewRegistry(h.lease)
		out.Source = &handoff.Source{Registry: out.Registry, Exporter: in.engine, Codec: codec, Now: time.Now,
			Release: func(t *handoff.Transfer) { in.engine.EndLease(t.Salt, t.Prompt) }}
	}
	if role.Decodes() && peers.Len() > 0 && in.tiers.HasTransfer() {
		maxRecord := int(tier.EncodedSizeOf(codec.Layout)) + stateBytes + 4096
		out.Puller = &handoff.Puller{Client: &http.Client{}, Peers: peers, Key: backendKey, Streams: h.streams,
			Put: in.tiers.PutTransfer, MaxRecord: maxRecord, Timeout: h.lease}
		out.Drop = in.tiers.DropTransfer
	}
	return out
}
