// Package handoff hands a prompt's KV from a prefill replica to a decode replica
// (prefill/decode disaggregation, as vLLM's connectors, SGLang, Mooncake and Dynamo do).
//
// Why: on one replica a long prefill shares engine steps with every running decode, and its
// chunks stretch every stream's inter-token latency. Separating the phases buys steady ITL
// (not throughput): the prefill pool computes prompts, the decode pool only decodes.
//
// The protocol is vLLM's, so its proxy and the tools built on it drive a Stockpot pair
// unchanged: a request with kv_transfer_params.do_remote_decode goes to a prefill replica,
// whose answer names the transfer (api.KVTransferParams); the same request with those params
// goes to a decode replica, which pulls the blocks and decodes.
//
// What it owns:
//   - Role: both, prefill or decode (serve --role).
//   - Registry: the transfers a prefill holds, each for a lease (the blocks are pinned in the
//     working pool by a Local pin, never sent down the tiers), released when every block was
//     pulled (Source.Release: the engine's EndLease), or when the lease expires (counted).
//   - The stream: GET TransferPath+ID?from&to answers frames (a 4-byte big-endian length and a
//     tier record, the very format the tiers keep, signed under --tier-key-file), ending with
//     a zero-length frame; it stops at the first block the pool no longer holds (WriteBlocks,
//     ReadFrames). Source serves it; a pull must name the transfer's chain root (HeaderRoot),
//     so a decode gets only the blocks of a prompt it holds under its own tenant's salt.
//   - Peers and Puller: a decode pulls only from its --prefill-peer replicas (never from an
//     address a request names), over several streams of contiguous ranges, into offload's
//     transfer buffer under keys of its own chain. Nothing pulled is trusted: admission
//     restores the records through the same fetch as every tier (kvtier.Transfer), verified
//     (checksum, MAC, identity, parent hash, tokens) and, for a hybrid, only up to the last
//     complete state checkpoint, the tokens after it recomputed. The prefill's first token
//     travels in the params; the decode's engine outputs it (engine.Request.FirstToken) and
//     draws its own sample all the same, so seeded sampling and constraints continue exactly
//     as on one replica: the output is bitwise equal.
//
// Failure is never a wrong answer: a pull that fails, is refused, or stops short leaves the
// decode to compute what is missing (through the remote tier first, when the prefill wrote
// through to it), counted in stockpot_kv_transfer_failures_total.
package handoff
