"""Decodes a live replica's KV events as vLLM's dataclasses define them (vllm/distributed/kv_events.py,
events as maps tagged by "type", vLLM 0.26 and later) with Debian's python3-zmq and python3-msgpack,
and fails on any other shape.

Usage: vllm_kv_events_check.py TOPIC REPLAY_ENDPOINT
Binds a SUB on a free loopback port (the replica connects: llm-d's centralized mode), prints
"PORT <n>", then reads until it has seen at least 3 BlockStored events chained to one another,
asks the replay socket for everything from the first sequence number it saw, and prints "OK ...".
"""
import sys

import msgpack
import zmq

FIELDS = {
    "BlockStored": {"type", "block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium", "lora_name"},
    "BlockRemoved": {"type", "block_hashes", "medium"},
    "AllBlocksCleared": {"type"},
}
MEDIUMS = {None, "GPU", "CPU", "DISK", "EXTERNAL"}
END_SEQ = (-1).to_bytes(8, "big", signed=True)


def fail(msg):
    print("FAIL " + msg, flush=True)
    sys.exit(1)


def u64(v, what):
    if type(v) is not int or not 0 <= v < 1 << 64:
        fail(f"{what} {v!r} is not an unsigned 64-bit int")


def check_batch(payload, seen):
    batch = msgpack.unpackb(payload, raw=False, strict_map_key=True)
    if type(batch) is not list or len(batch) != 3:
        fail(f"EventBatch is not [ts, events, data_parallel_rank]: {batch!r:.200}")
    ts, events, dp_rank = batch
    if type(ts) is not float or type(events) is not list or not (dp_rank is None or type(dp_rank) is int):
        fail(f"EventBatch field types: {ts!r} {type(events)} {dp_rank!r}")
    stored = 0
    for ev in events:
        if type(ev) is not dict:
            fail(f"event is not a map tagged by type: {ev!r:.200}")
        kind = ev.get("type")
        if kind not in FIELDS or set(ev) != FIELDS[kind]:
            fail(f"event keys {sorted(ev)} for type {kind!r}")
        if kind == "AllBlocksCleared":
            continue
        if type(ev["block_hashes"]) is not list or not ev["block_hashes"]:
            fail("block_hashes not a non-empty list")
        for h in ev["block_hashes"]:
            u64(h, "block hash")
        if ev["medium"] not in MEDIUMS:
            fail(f"medium {ev['medium']!r}")
        if kind == "BlockRemoved":
            continue
        bs, toks, parent = ev["block_size"], ev["token_ids"], ev["parent_block_hash"]
        if type(bs) is not int or bs <= 0:
            fail(f"block_size {bs!r}")
        if type(toks) is not list or len(toks) != bs * len(ev["block_hashes"]) or any(type(t) is not int or t < 0 for t in toks):
            fail(f"token_ids: {len(toks)} for {len(ev['block_hashes'])} blocks of {bs}")
        if parent is not None:
            u64(parent, "parent_block_hash")
            if parent not in seen:
                fail(f"parent_block_hash {parent} names no block stored before")
        if ev["lora_id"] is not None or ev["lora_name"] is not None:
            fail("lora fields set without an adapter")
        seen.update(ev["block_hashes"])
        stored += 1
    return stored


def main():
    topic, replay = sys.argv[1].encode(), sys.argv[2]
    ctx = zmq.Context.instance()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.setsockopt(zmq.RCVTIMEO, 60000)
    port = sub.bind_to_random_port("tcp://127.0.0.1")
    print(f"PORT {port}", flush=True)
    seen, stored, first, last, batches = set(), 0, None, None, 0
    while stored < 3:
        frames = sub.recv_multipart()
        if len(frames) != 3:
            fail(f"{len(frames)} frames")
        t, seq_b, payload = frames
        if t != topic:
            fail(f"topic {t!r}, want {topic!r}")
        if len(seq_b) != 8:
            fail("sequence frame not 8 bytes")
        seq = int.from_bytes(seq_b, "big")
        if last is not None and seq != last + 1:
            fail(f"sequence {seq} after {last}")
        if first is None:
            first = seq
        last = seq
        # Joined mid-stream: the parents of the first blocks may precede us; take them on trust once.
        if batches == 0:
            b = msgpack.unpackb(payload, raw=False)
            for ev in b[1]:
                if isinstance(ev, dict) and ev.get("parent_block_hash") is not None:
                    seen.add(ev["parent_block_hash"])
        stored += check_batch(payload, seen)
        batches += 1
    dealer = ctx.socket(zmq.DEALER)
    dealer.setsockopt(zmq.RCVTIMEO, 30000)
    dealer.connect(replay)
    dealer.send_multipart([b"", first.to_bytes(8, "big")])
    want, replayed = first, 0
    while True:
        frames = dealer.recv_multipart()
        if len(frames) != 3 or frames[0] != b"":
            fail(f"replay reply frames {frames!r:.200}")
        if frames[1] == END_SEQ:
            if frames[2] != b"":
                fail("end marker with a payload")
            break
        seq = int.from_bytes(frames[1], "big")
        if seq != want:
            fail(f"replayed sequence {seq}, want {want}")
        check_batch(frames[2], set(seen))
        want += 1
        replayed += 1
    if replayed < batches:
        fail(f"replay gave {replayed} batches, {batches} were sent")
    print(f"OK {batches} batches, {stored} BlockStored, {replayed} replayed", flush=True)


main()
