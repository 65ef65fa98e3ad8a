# Writes the example logs of `stockpot lint` (run: python3 gen.py). Each session plants one
# cause; agent.jsonl holds them all, clean.jsonl only the clean session.
import json, itertools

def tool(name, desc, props, order=("type", "properties", "required")):
    params = {"type": "object", "properties": {k: {"type": "string", "description": v} for k, v in props.items()}, "required": list(props)[:1]}
    params = {k: params[k] for k in order}
    return {"type": "function", "function": {"name": name, "description": desc, "parameters": params}}

TOOLS = [
    tool("get_order", "Look up an order by its number and return its status, items and shipping.", {"order_id": "The order number, e.g. A-1042", "fields": "Which fields to return"}),
    tool("refund", "Refund an order or part of it to the original payment method.", {"order_id": "The order number", "amount": "Amount in euros; the whole order when absent"}),
    tool("search_docs", "Search the help centre articles and return the best matching passages.", {"query": "What to look for", "locale": "Language of the articles"}),
]

USERS = [
    "Hello, my order A-1042 has not arrived yet. Can you check where it is?",
    "It says delivered but I never got it. What can I do about that?",
    "Please refund the shipping cost then, and tell me how long it takes.",
    "Thanks. Is there an article about missing parcels I can share with my neighbour?",
]
REPLIES = [
    "Let me look that order up for you right away.",
    "I am sorry to hear that. I can open a claim with the carrier or refund the shipping.",
    "Done: the shipping cost is refunded and will reach your card within five working days.",
]

def system(body, stamp=None):
    s = ("You are the support agent of a small online shop that sells kitchen equipment. "
         "Be friendly and brief, never promise what the tools cannot do, and always confirm an order "
         "number before acting on it. " + body)
    if stamp:
        s += " Current date and time: " + stamp + "."
    return s

def turns(sys_text, tools_for_turn, n=4):
    out = []
    for k in range(1, n + 1):
        msgs = [{"role": "system", "content": sys_text(k)}]
        for i in range(k):
            msgs.append({"role": "user", "content": USERS[i]})
            if i < k - 1:
                msgs.append({"role": "assistant", "content": REPLIES[i]})
        out.append({"model": "stockpot", "max_tokens": 64, "messages": msgs, "tools": tools_for_turn(k)})
    return out

lines = []
# Session "clean": everything stable.
for b in turns(lambda k: system("You handle orders from Germany."), lambda k: TOOLS):
    lines.append({"session_id": "clean", "body": b})
# Session "stamp": a timestamp in the system prompt, new each request.
for b in turns(lambda k: system("You handle orders from France.", "2026-11-30T09:%02d:%02dZ" % (10 + k, 7 * k)), lambda k: TOOLS):
    lines.append({"session_id": "stamp", "body": b})
# Session "tools": the same tools, listed in another order each request.
perms = list(itertools.permutations(TOOLS))
for b in turns(lambda k: system("You handle orders from Spain."), lambda k: list(perms[[0, 3, 4, 1][k - 1]])):
    lines.append({"session_id": "tools", "body": b})
# Session "keys": each request serialises the tools' parameter schemas with keys in another order.
orders = [("type", "properties", "required"), ("properties", "required", "type"), ("required", "type", "properties"), ("type", "required", "properties")]
def keyed(k):
    out = []
    for t in TOOLS:
        f = t["function"]
        props = {p: v["description"] for p, v in f["parameters"]["properties"].items()}
        out.append(tool(f["name"], f["description"], props, orders[k - 1]))
    return out
for b in turns(lambda k: system("You handle orders from Italy."), keyed):
    lines.append({"session_id": "keys", "body": b})
# Session "spaces": the system prompt's whitespace changes (a template string with trailing spaces).
spaces = ["", "  ", " \n", "\n\n\n"]
for b in turns(lambda k: system("You handle orders from Portugal." + spaces[k - 1] + " Answer in English."), lambda k: TOOLS):
    lines.append({"session_id": "spaces", "body": b})

with open("agent.jsonl", "w") as f:
    for i, l in enumerate(lines):
        f.write(json.dumps(l) + "\n")
        if i == 9:
            f.write('{"session_id": "broken", "body": {"messages": [\n')  # a truncated line
        if i == 13:
            # an Anthropic Messages body, logged bare
            f.write(json.dumps({"model": "stockpot", "max_tokens": 64, "system": system("You handle orders from Austria."),
                                "messages": [{"role": "user", "content": USERS[0]}]}) + "\n")
with open("clean.jsonl", "w") as f:
    for l in lines[:4]:
        f.write(json.dumps(l) + "\n")
