// Package vllmevents speaks vLLM's KV-event wire format, the one vLLM's
// vllm/distributed/kv_events.py defines and llm-d's kv-cache indexer and Dynamo's kv-router
// consume, so Stockpot replicas can feed those routers and Stockpot's router can front vLLM
// and SGLang replicas. Stockpot's own stream (package kvevents, GET /v1/kv-events) is
// unchanged; this is a second, foreign dialect of the same facts.
//
// # Wire format
//
// A ZeroMQ PUB sends multipart messages [topic, seq, payload]: seq is 8 bytes big-endian,
// from 0 up by one per batch; payload is a msgpack EventBatch, an array [ts, events,
// data_parallel_rank]. Publisher writes vLLM 0.26's event shape, a map tagged by "type":
//
//	{"type": "BlockStored", "block_hashes": [u64...], "parent_block_hash": u64|nil,
//	 "token_ids": [int...], "block_size": int, "lora_id": int|nil, "medium": str|nil,
//	 "lora_name": str|nil}
//	{"type": "BlockRemoved", "block_hashes": [u64...], "medium": str|nil}
//	{"type": "AllBlocksCleared"}
//
// token_ids are the tokens of every block of block_hashes, block after block; parent_block_hash
// is the hash of the block before the first (nil for a block at the start of a prompt).
// DecodeBatch reads that shape and the positional arrays before it (["BlockStored", hashes,
// parent, tokens, block_size, lora_id, medium?, lora_name?, ...]), which SGLang also sends
// with signed hashes; see DecodeBatch for what it refuses.
//
// Endpoints follow vLLM's rule (Binds): bind when the endpoint has "*", "::" or "0.0.0.0" or
// is ipc:// or inproc://, else connect. The optional replay socket is a ROUTER: a DEALER sends
// ["", start_seq] and gets ["", seq, payload] for every batch still buffered from start_seq
// on, then ["", -1 as 8 bytes, ""].
//
// # Hashes and mediums
//
// Stockpot's block hashes are 32-byte chain hashes (package prefix); a published block hash is
// the first 8 bytes of it, big-endian, as an unsigned 64-bit int. Consumers that rehash from
// token_ids (llm-d, Stockpot's router) never need more. Mediums: "GPU" (device), "CPU" (host
// RAM tier), "DISK" (disk tier), "EXTERNAL" (the shared remote tier), as vLLM and SGLang name
// them; TierOf also reads CPU_PINNED, HOST, SSD, REMOTE and others.
//
// # The frame guard
//
// The ZeroMQ library allocates a frame's announced length before reading it, so a bound TCP
// socket would fall to one header announcing 2^62 bytes. Guard (guard.go) listens in its
// place, relays each connection to the socket's own loopback address, and checks every frame
// header a peer sends (CheckFrames): a frame over the bound, or bytes that are not ZMTP 3, cut
// the connection before the library sees them. The router's --kv-events-listen uses it for
// TCP endpoints.
package vllmevents
