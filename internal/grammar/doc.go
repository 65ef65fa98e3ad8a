// Package grammar constrains generation to a grammar: JSON schemas (response_format
// json_schema), any JSON object (json_object), and the envelopes the API composes for tool
// calls. It owns three nouns: Node (a grammar under construction), Grammar (compiled,
// immutable) and Matcher (one generation's position), plus Vocab (a model's tokens prepared
// for masking). Nothing here knows about the engine; *Matcher satisfies engine.Constraint.
//
// # Why bytes, a pushdown automaton, and a vocabulary trie
//
// A model's tokens are byte strings that ignore the grammar's symbols: one token may close a
// string, write a comma and open the next key (`","`), and a byte-level BPE token may end in
// the middle of a UTF-8 character. So the grammar works on bytes. Character classes are
// compiled into alternatives of UTF-8 byte-range sequences, which also means the output is
// always valid UTF-8 however the tokens split characters; nothing tracks partial characters
// across tokens because the automaton's position already says how many continuation bytes
// are due.
//
// JSON nests, so the language is context-free: a position is a stack of frames (a return
// point per open rule, the top one a byte test), and because anyOf branches and number forms
// can agree on a prefix, a position is a set of such stacks. Stacks are interned as linked
// (frame, parent) nodes, sets of stacks as states, and transitions are cached per byte class
// the first time they are taken: a lazily built DFA over the pushdown automaton's reachable
// configurations. Repeat counters (minLength, maxItems) live in frames, so bounded repeats
// need no unrolling; an unbounded count stops counting once past its minimum.
//
// A mask is one forward scan of the vocabulary trie, laid out flat in preorder: each node
// steps its parent's state by one byte through the DFA table (one load when cached), and a
// dead state skips the node's whole subtree. Masks are memoized per state with counters
// replaced by their distance to their bounds, clamped at the longest token's length: no token
// can tell "room for 500 more characters" from "room for 1500", so every position in a long
// string after the first reuses one mask, and a repeated schema reuses every mask. The tables
// belong to a (Grammar, Vocab) pair, are shared by the matchers of that pair under a mutex,
// and their memo is dropped when it passes 64 MiB.
//
// Compile checks what would otherwise go wrong at run time: alternatives that can never
// complete are removed (so every state the matcher can reach can still finish, given tokens
// for single bytes), a Repeat whose item can match the empty string is refused (counts would
// not mean anything), and left recursion is refused (closure would not end).
//
// # What a grammar may cost
//
// A schema's grammar grows with it, and an anyOf of a few hundred KB is a million ops; so
// JSONSchemaWith first sizes the parsed schema (EstimateSchema: one walk, each $ref target
// priced once, nothing built) and refuses one over Limits.MaxBytes with a *BudgetError, and
// what passes is compiled under Limits: the compiler counts the bytes it allocates and its
// steps and stops at either bound (budget.go). The estimate leans high, so what it admits
// compiles within the bound; the step bound catches analyses that are not linear (a long
// chain of references makes the productivity fixpoint a pass per link). A compiled Grammar is
// immutable and shared: its tables are per vocabulary, under their own locks, and
// Grammar.Bytes says what it holds for caches to bound themselves by.
//
// # Whitespace is bounded
//
// JSON allows any amount of whitespace between tokens, and a weak model (random weights
// included) will happily emit it forever. As llama.cpp's grammars do, whitespace may stand
// only after '{', '[', ',' and ':' and before '}' and ']', and is then nothing, one space, or
// a newline and at most 20 spaces or tabs. That admits compact and pretty-printed JSON alike,
// and it means a schema whose values have a bounded size (strings with maxLength, arrays
// with maxItems, numbers always: at most 15 integer and 15 fraction digits, no exponent)
// always completes within a bounded number of tokens, whatever the model prefers.
//
// # JSON schema support
//
// Supported: type (and type arrays), properties in schema order with required and optional
// ones (optional ones may be skipped), additionalProperties (false; true or a schema when not
// strict; when absent no other keys are written, as llama.cpp does, except that a bare
// "type": "object" is any object unless strict; extra keys come after the listed ones and
// never repeat a listed name), enum and const of any JSON value (written in
// compact form), items, prefixItems, minItems, maxItems, minLength and maxLength (in
// characters; one \u escape is one character, and surrogate escapes are not written),
// minimum, maximum, exclusiveMinimum and exclusiveMaximum (number or draft-4 boolean form)
// with exact digit grammars for integers and for decimals of up to max(6, the bounds'
// decimals) fraction digits, format date, time, date-time and uuid, pattern (Go's
// regexp/syntax dialect, searched unless anchored with ^ and $; see pattern.go), $ref to
// local pointers (#, #/$defs/x, #/definitions/x, any #/ pointer; recursion allowed, its size
// is then not bounded), anyOf, oneOf (as anyOf), allOf with one schema, true / {} as any
// value, and the annotations (title, description, default, examples, $schema, $id,
// $comment, x-*).
//
// Unsupported, as an *UnsupportedError naming the keyword and the JSON pointer of the schema
// that uses it: patternProperties, multipleOf, not, if/then/else, dependencies,
// propertyNames, min/maxProperties, contains, uniqueItems true, unevaluated*, other formats,
// pattern beside format or min/maxLength, lookarounds and \b in patterns, non-local $ref,
// allOf with several schemas, and anyOf/oneOf/$ref next to other constraining keywords. A
// malformed or unsatisfiable schema is a *SchemaError. Either way the request fails: an
// unconstrained answer is never given in place of a constrained one.
package grammar
