#!/usr/bin/env node
// ref.mjs: llama.cpp (through node-llama-cpp) as Stockpot's numerical reference.
//
// Usage:
//   node tools/llamaref/ref.mjs [request.json]     (no argument or "-": read stdin)
//
// One invocation reads one JSON document, loads the model once, runs every
// request in it in order and writes one JSON document to stdout. Logs go to
// stderr. Exit status 0 when every request succeeded; 1 otherwise, in which case
// stdout still holds {"error": "..."} (fatal) or per-request "error" fields.
//
// Document:
//   {
//     "model": "/abs/path/model.gguf",      // required unless every op is "version"
//     "threads": 2,                          // default for every request (default 2)
//     "log_level": "warn",                   // node-llama-cpp log level
//     "requests": [ {"op": ...}, ... ]
//   }
//
// Ops (fields with defaults):
//   {"op":"version"}
//       -> {"node_llama_cpp":"3.21.1","llama_cpp_release":"v0.4.0"}
//   {"op":"metadata"}
//       -> {"vocab_size","n_ctx_train","n_embd","n_layer","architecture",
//           "bos","eos","eot","add_bos","vocabulary_type","tensor_type"}
//   {"op":"tokenize","texts":[...],"add_special":true,"parse_special":false}
//       -> {"tokens":[[...],...]}
//       add_special: prepend BOS (and append EOS) as the model's metadata says,
//                    like llama_tokenize(add_special=true).
//       parse_special: text like "<s>" becomes the special token, like
//                    llama_tokenize(parse_special=true).
//   {"op":"detokenize","tokens":[[...],...],"special":false}
//       -> {"texts":[...]}   special: render special/control tokens as text.
//   {"op":"evaluate","prompts":[[ids...],...],"n_gen":8,"logprobs":"full",
//    "top_k":0,"positions":"last","context_size":0,"batch_size":512,
//    "kv_type":"F32","threads":2}
//       -> {"results":[{"continuation":[...],"logprobs":"<base64 f32 LE>",
//                       "top":[[id,logprob],...],"all_logprobs":["<b64>",...]}],
//           "context_size":N,"batch_size":B,"threads":T,"kv_type":"F32"}
//       Each prompt runs alone from an empty K/V cache at position 0, with
//       flash attention off and K and V cache tensors of kv_type (F32, F16 or
//       Q8_0; llama.cpp requires flash attention for a quantized V cache, so
//       Q8_0 runs with flash attention on).
//       continuation: n_gen greedy tokens (argmax, lowest id on ties); generation
//                     does not stop at end-of-generation tokens.
//       logprobs: "full" (vector of vocab_size float32, base64), "none".
//       top_k:    also return the K most likely [id, logprob] (prob desc, id asc).
//       positions:"all" also returns all_logprobs, one full vector per prompt
//                 position (the last one equals "logprobs").
//   {"op":"speed","prompt_tokens":512,"gen_tokens":64,"threads":2,
//    "batch_size":512,"kv_type":"F16","repetitions":1}
//       -> {"prompt_tokens_per_s","gen_tokens_per_s","prompt_s","gen_s",...}
//
// How log-probabilities are derived (see README.md): node-llama-cpp exposes no
// raw logits, only probabilities. With temperature 0 its sampler chain is the
// greedy sampler alone, which does not change the logits, and the addon turns
// the full-vocabulary logits l into p_i = expf(l_i - max l) / sum_j expf(l_j - max l)
// in float32. We return log(p_i) computed in float64 and rounded to float32.
// So logprob_i = l_i - max l - log(sum), with absolute error about 1e-7 (plus
// a shift common to all ids from the float32 sum, ~1e-6 or less); values below
// about -87.3 (p under FLT_MIN) lose precision and below about -103.3 become -Inf.

import fs from "node:fs";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { performance } from "node:perf_hooks";

const WANT_VERSION = "3.21.1";
const here = path.dirname(fileURLToPath(import.meta.url));
const refDir = process.env.STOCKPOT_LLAMAREF_DIR || path.resolve(here, "../../.cache/llamaref");

class UserError extends Error {}

function fail(msg, code = 1) {
  process.stdout.write(JSON.stringify({ error: msg }) + "\n");
  process.stderr.write(`ref.mjs: ${msg}\n`);
  process.exit(code);
}

async function loadNodeLlamaCpp() {
  const pkgDir = path.join(refDir, "node_modules", "node-llama-cpp");
  const pkgFile = path.join(pkgDir, "package.json");
  if (!fs.existsSync(pkgFile)) {
    throw new UserError(`node-llama-cpp is not installed in ${refDir}: run "make deps"`);
  }
  const version = JSON.parse(fs.readFileSync(pkgFile, "utf8")).version;
  if (version !== WANT_VERSION) {
    throw new UserError(`node-llama-cpp ${version} in ${refDir}, want ${WANT_VERSION}: run "make deps"`);
  }
  const mod = await import(pathToFileURL(path.join(pkgDir, "dist", "index.js")).href);
  return { mod, version };
}

function readInput() {
  const arg = process.argv[2];
  const text = !arg || arg === "-" ? fs.readFileSync(0, "utf8") : fs.readFileSync(arg, "utf8");
  try {
    return JSON.parse(text);
  } catch (e) {
    throw new UserError(`bad request JSON: ${e.message}`);
  }
}

function intOpt(obj, key, def, min = 0) {
  const v = obj[key] ?? def;
  if (!Number.isInteger(v) || v < min) throw new UserError(`${key} must be an integer >= ${min}, got ${JSON.stringify(v)}`);
  return v;
}

function kvType(v) {
  const t = String(v ?? "F32").toUpperCase();
  if (t !== "F32" && t !== "F16" && t !== "Q8_0") throw new UserError(`kv_type must be F32, F16 or Q8_0, got ${JSON.stringify(v)}`);
  return t;
}

function tokenArray(a, what, vocab) {
  if (!Array.isArray(a)) throw new UserError(`${what} must be an array of token ids`);
  for (const t of a) {
    if (!Number.isInteger(t) || t < 0 || (vocab > 0 && t >= vocab)) {
      throw new UserError(`${what}: token id ${JSON.stringify(t)} out of range [0, ${vocab})`);
    }
  }
  return a;
}

function b64f32(f32) {
  return Buffer.from(f32.buffer, f32.byteOffset, f32.byteLength).toString("base64");
}

// logprobVector turns node-llama-cpp's probability map into a float32 vector of
// natural-log probabilities indexed by token id; ids missing from the map are -Inf.
function logprobVector(probs, vocab) {
  const out = new Float32Array(vocab).fill(-Infinity);
  for (const [id, p] of probs) out[id] = Math.log(p);
  return out;
}

function topK(lp, k) {
  const idx = Array.from(lp.keys());
  idx.sort((a, b) => lp[b] - lp[a] || a - b);
  return idx.slice(0, k).map((i) => [i, lp[i]]);
}

function vocabSize(model) {
  const md = model.fileInfo.metadata;
  const toks = md?.tokenizer?.ggml?.tokens;
  if (Array.isArray(toks) && toks.length > 0) return toks.length;
  const emb = model.fileInfo.fullTensorInfo?.find((t) => t.name === "token_embd.weight");
  if (emb) return Number(emb.dimensions[1]);
  throw new UserError("cannot find the vocabulary size (no tokenizer.ggml.tokens, no token_embd.weight)");
}

// checkHeader rejects files that are not GGUF v2/v3 up front: node-llama-cpp's
// own GGUF reader can spin for minutes on garbage.
function checkHeader(file) {
  const fd = fs.openSync(file, "r");
  const b = Buffer.alloc(24);
  const n = fs.readSync(fd, b, 0, 24, 0);
  const size = fs.fstatSync(fd).size;
  fs.closeSync(fd);
  if (n < 24 || b.toString("latin1", 0, 4) !== "GGUF") throw new UserError(`llama.cpp cannot load ${file}: not a GGUF file (too short or bad magic)`);
  const version = b.readUInt32LE(4);
  if (version !== 2 && version !== 3) throw new UserError(`llama.cpp cannot load ${file}: GGUF version ${version}, want 2 or 3`);
  const tensors = b.readBigUInt64LE(8), kvs = b.readBigUInt64LE(16);
  if (tensors > BigInt(size) || kvs > BigInt(size)) {
    throw new UserError(`llama.cpp cannot load ${file}: header claims ${tensors} tensors and ${kvs} keys in ${size} bytes`);
  }
}

function alignedContext(n) {
  return Math.max(256, Math.ceil(n / 256) * 256);
}

async function makeContext(model, { contextSize, batchSize, threads, kv }) {
  return model.createContext({
    contextSize,
    batchSize,
    sequences: 1,
    threads,
    // llama.cpp refuses a quantized V cache without flash attention.
    flashAttention: kv === "Q8_0",
    experimentalKvCacheKeyType: kv,
    experimentalKvCacheValueType: kv,
    ignoreMemorySafetyChecks: true,
  });
}

const greedy = { temperature: 0 };

async function evaluate(model, req, env) {
  const vocab = env.vocab;
  const prompts = req.prompts;
  if (!Array.isArray(prompts) || prompts.length === 0) throw new UserError("evaluate: prompts must be a non-empty array");
  prompts.forEach((p, i) => {
    tokenArray(p, `prompts[${i}]`, vocab);
    if (p.length === 0) throw new UserError(`evaluate: prompts[${i}] is empty`);
  });
  const nGen = intOpt(req, "n_gen", 0);
  const mode = req.logprobs ?? "full";
  if (mode !== "full" && mode !== "none") throw new UserError(`logprobs must be "full" or "none", got ${JSON.stringify(mode)}`);
  const k = intOpt(req, "top_k", 0);
  const positions = req.positions ?? "last";
  if (positions !== "last" && positions !== "all") throw new UserError(`positions must be "last" or "all"`);
  const threads = intOpt(req, "threads", env.threads, 1);
  const kv = kvType(req.kv_type);
  const longest = Math.max(...prompts.map((p) => p.length)) + nGen;
  const contextSize = intOpt(req, "context_size", 0) || alignedContext(longest);
  const batchSize = intOpt(req, "batch_size", Math.min(512, contextSize), 1);
  const ctx = await makeContext(model, { contextSize, batchSize, threads, kv });
  try {
    if (ctx.contextSize < longest) {
      throw new UserError(`evaluate: prompt plus n_gen needs ${longest} positions, context has ${ctx.contextSize}`);
    }
    const seq = ctx.getSequence();
    const wantProbs = mode === "full" || k > 0;
    const results = [];
    for (const prompt of prompts) {
      await seq.clearHistory();
      const last = prompt.length - 1;
      const input = prompt.map((t, i) => {
        if (i === last) {
          return [t, { generateNext: { token: nGen > 0, probabilities: wantProbs || positions === "all", options: greedy } }];
        }
        if (positions === "all") return [t, { generateNext: { probabilities: true, options: greedy } }];
        return t;
      });
      const out = await seq.controlledEvaluate(input);
      const r = { continuation: [] };
      const lastOut = out[last]?.next;
      if (wantProbs) {
        if (!lastOut?.probabilities) throw new Error("evaluate: no probabilities for the last prompt position");
        const lp = logprobVector(lastOut.probabilities, vocab);
        if (mode === "full") r.logprobs = b64f32(lp);
        if (k > 0) r.top = topK(lp, k);
      }
      if (positions === "all") {
        r.all_logprobs = out.map((o, i) => {
          if (!o?.next?.probabilities) throw new Error(`evaluate: no probabilities at prompt position ${i}`);
          return b64f32(logprobVector(o.next.probabilities, vocab));
        });
      }
      if (nGen > 0) {
        let tok = lastOut?.token;
        for (let g = 0; ; g++) {
          if (tok == null || tok < 0) throw new Error(`evaluate: no token generated at step ${g}`);
          r.continuation.push(tok);
          if (g + 1 >= nGen) break;
          const o = await seq.controlledEvaluate([[tok, { generateNext: { token: true, options: greedy } }]]);
          tok = o[0]?.next?.token;
        }
      }
      results.push(r);
    }
    return { results, context_size: ctx.contextSize, batch_size: ctx.batchSize, threads: seq.context.currentThreads ?? threads, kv_type: kv };
  } finally {
    await ctx.dispose();
  }
}

// lcg returns a deterministic stream of token ids in [lo, hi).
function lcg(seed, lo, hi) {
  let s = BigInt(seed) & 0xffffffffffffffffn;
  return () => {
    s = (s * 6364136223846793005n + 1442695040888963407n) & 0xffffffffffffffffn;
    return lo + Number((s >> 33n) % BigInt(hi - lo));
  };
}

async function speed(model, req, env) {
  const P = intOpt(req, "prompt_tokens", 512, 1);
  const G = intOpt(req, "gen_tokens", 64, 1);
  const threads = intOpt(req, "threads", env.threads, 1);
  const reps = intOpt(req, "repetitions", 1, 1);
  const kv = kvType(req.kv_type ?? "F16");
  const contextSize = alignedContext(P + G + 1);
  const batchSize = intOpt(req, "batch_size", Math.min(512, P), 1);
  const ctx = await makeContext(model, { contextSize, batchSize, threads, kv });
  try {
    const seq = ctx.getSequence();
    const next = lcg(42, 0, env.vocab);
    const prompt = Array.from({ length: P }, next);
    // Warm-up: page the weights in and let the thread pool spin up.
    await seq.evaluateWithoutGeneratingNewTokens(prompt.slice(0, Math.min(P, 16)));
    await seq.clearHistory();
    let promptS = 0, genS = 0;
    for (let r = 0; r < reps; r++) {
      await seq.clearHistory();
      let t0 = performance.now();
      const out = await seq.controlledEvaluate(prompt.map((t, i) => (i === P - 1 ? [t, { generateNext: { token: true, options: greedy } }] : t)));
      promptS += (performance.now() - t0) / 1000;
      let tok = out[P - 1].next.token;
      t0 = performance.now();
      for (let g = 0; g < G; g++) {
        const o = await seq.controlledEvaluate([[tok, { generateNext: { token: true, options: greedy } }]]);
        tok = o[0].next.token;
      }
      genS += (performance.now() - t0) / 1000;
    }
    return {
      prompt_tokens: P, gen_tokens: G, threads, repetitions: reps, batch_size: ctx.batchSize, kv_type: kv,
      prompt_s: promptS / reps, gen_s: genS / reps,
      prompt_tokens_per_s: (P * reps) / promptS, gen_tokens_per_s: (G * reps) / genS,
    };
  } finally {
    await ctx.dispose();
  }
}

function metadata(model, env) {
  const md = model.fileInfo.metadata;
  const arch = md?.general?.architecture;
  const archMd = arch ? md[arch] : undefined;
  return {
    architecture: arch ?? null,
    vocab_size: env.vocab,
    n_ctx_train: model.trainContextSize,
    n_embd: model.embeddingVectorSize,
    n_layer: archMd?.block_count ?? null,
    bos: model.tokens.bos, eos: model.tokens.eos, eot: model.tokens.eot,
    add_bos: model.tokens.shouldPrependBosToken,
    vocabulary_type: model.vocabularyType,
    tensor_type: model.fileInsights.dominantTensorType ?? null,
    size_bytes: model.size,
  };
}

async function main() {
  const doc = readInput();
  if (doc === null || typeof doc !== "object" || !Array.isArray(doc.requests)) {
    throw new UserError('request must be an object with a "requests" array');
  }
  const { mod, version } = await loadNodeLlamaCpp();
  const t0 = performance.now();
  const llama = await mod.getLlama({
    gpu: false,
    build: "never",
    usePrebuiltBinaries: true,
    skipDownload: true,
    progressLogs: false,
    maxThreads: 0, // make a context's "threads" the exact thread count
    logLevel: doc.log_level ?? "warn",
    logger: (level, msg) => process.stderr.write(`[llama ${level}] ${msg}${msg.endsWith("\n") ? "" : "\n"}`),
  });
  const info = { node_llama_cpp: version, llama_cpp_release: llama.llamaCppRelease?.release ?? null, build: llama.buildType };
  const needModel = doc.requests.some((r) => r?.op !== "version");
  let model = null;
  const env = { threads: intOpt(doc, "threads", 2, 1), vocab: 0 };
  if (needModel) {
    if (typeof doc.model !== "string" || doc.model === "") throw new UserError('"model" (path to a GGUF file) is required');
    if (!fs.existsSync(doc.model)) throw new UserError(`model file not found: ${doc.model}`);
    checkHeader(doc.model);
    try {
      model = await llama.loadModel({ modelPath: path.resolve(doc.model), gpuLayers: 0, useMmap: true, defaultContextFlashAttention: false });
    } catch (e) {
      throw new UserError(`llama.cpp cannot load ${doc.model}: ${e.message}`);
    }
    env.vocab = vocabSize(model);
  }
  info.load_ms = performance.now() - t0;
  const results = [];
  let failed = false;
  for (const [i, req] of doc.requests.entries()) {
    try {
      switch (req?.op) {
        case "version":
          results.push({ ...info });
          break;
        case "metadata":
          results.push(metadata(model, env));
          break;
        case "tokenize": {
          if (!Array.isArray(req.texts)) throw new UserError("tokenize: texts must be an array of strings");
          const addSpecial = req.add_special ?? true;
          const parseSpecial = req.parse_special ?? false;
          const tokens = req.texts.map((t) => {
            if (typeof t !== "string") throw new UserError("tokenize: texts must be strings");
            let ids = Array.from(model.tokenize(t, parseSpecial));
            if (addSpecial) {
              // model.tokenize never adds BOS/EOS; do what llama_tokenize(add_special=true) does.
              if (model.tokens.shouldPrependBosToken && model.tokens.bos != null) ids = [model.tokens.bos, ...ids];
              if (model.tokens.shouldAppendEosToken && model.tokens.eos != null) ids = [...ids, model.tokens.eos];
            }
            return ids;
          });
          results.push({ tokens });
          break;
        }
        case "detokenize": {
          if (!Array.isArray(req.tokens)) throw new UserError("detokenize: tokens must be an array of token id arrays");
          const texts = req.tokens.map((ids, j) => model.detokenize(tokenArray(ids, `tokens[${j}]`, env.vocab), req.special ?? false));
          results.push({ texts });
          break;
        }
        case "evaluate":
          results.push(await evaluate(model, req, env));
          break;
        case "speed":
          results.push(await speed(model, req, env));
          break;
        default:
          throw new UserError(`requests[${i}]: unknown op ${JSON.stringify(req?.op)} (want version, metadata, tokenize, detokenize, evaluate, speed)`);
      }
    } catch (e) {
      failed = true;
      const msg = e instanceof UserError ? e.message : `${e.message}\n${e.stack}`;
      results.push({ error: `requests[${i}] (${req?.op}): ${msg}` });
      process.stderr.write(`ref.mjs: requests[${i}] (${req?.op}): ${msg}\n`);
    }
  }
  process.stdout.write(JSON.stringify({ ...info, results }) + "\n");
  if (model) await model.dispose();
  await llama.dispose();
  process.exit(failed ? 1 : 0);
}

main().catch((e) => fail(e instanceof UserError ? e.message : `${e.message}\n${e.stack}`));
