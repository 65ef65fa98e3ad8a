// Render chat templates with @huggingface/jinja, the reference for Stockpot's chat-template
// rendering (internal/tokenizer). Reads one JSON object on stdin:
//
//   {"cases": [{"template": "...", "context": {...}, "now": "2026-07-26T09:30:00Z"}, ...]}
//
// and writes {"version": "<@huggingface/jinja version>", "results": [{"text": "..."} or
// {"error": "..."}, ...]} on stdout, one result per case in order. "context" is passed to
// Template.render as is (messages, tools, add_generation_prompt, bos_token, ...); when "now"
// is set, strftime_now formats that instant (UTC) instead of the clock, so both sides render
// the same date. The package is found in $STOCKPOT_JINJAREF_DIR or <repo>/.cache/jinjaref.
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const dir = process.env.STOCKPOT_JINJAREF_DIR || path.join(here, "..", "..", ".cache", "jinjaref");
const require = createRequire(path.join(dir, "package.json"));

let jinja, version;
try {
	const entry = require.resolve("@huggingface/jinja");
	jinja = await import(pathToFileURL(entry).href);
	const pkgDir = path.join(dir, "node_modules", "@huggingface", "jinja");
	version = JSON.parse(readFileSync(path.join(pkgDir, "package.json"), "utf8")).version;
} catch (e) {
	process.stdout.write(JSON.stringify({ error: `@huggingface/jinja not installed in ${dir}: ${e.message}` }));
	process.exit(2);
}

// Template.render declares the globals (strftime_now among them) before the caller's
// variables and refuses to declare a name twice; let the caller's strftime_now replace it.
const origSet = jinja.Environment.prototype.set;
jinja.Environment.prototype.set = function (name, value) {
	if (name === "strftime_now" && this.variables.has(name)) this.variables.delete(name);
	return origSet.call(this, name, value);
};

const MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October", "November", "December"];
const DAYS = ["Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"];
const pad2 = (n) => (n < 10 ? "0" + n : String(n));

// strftime for the directives chat templates use, in UTC, with Python's English names.
function strftime(d, format) {
	return format.replace(/%-d|%[YmdbBaAHMSyIpe%]/g, (tok) => {
		switch (tok) {
			case "%Y": return String(d.getUTCFullYear());
			case "%y": return pad2(d.getUTCFullYear() % 100);
			case "%m": return pad2(d.getUTCMonth() + 1);
			case "%d": return pad2(d.getUTCDate());
			case "%-d": return String(d.getUTCDate());
			case "%e": return String(d.getUTCDate()).padStart(2, " ");
			case "%b": return MONTHS[d.getUTCMonth()].slice(0, 3);
			case "%B": return MONTHS[d.getUTCMonth()];
			case "%a": return DAYS[d.getUTCDay()].slice(0, 3);
			case "%A": return DAYS[d.getUTCDay()];
			case "%H": return pad2(d.getUTCHours());
			case "%I": return pad2(((d.getUTCHours() + 11) % 12) + 1);
			case "%p": return d.getUTCHours() < 12 ? "AM" : "PM";
			case "%M": return pad2(d.getUTCMinutes());
			case "%S": return pad2(d.getUTCSeconds());
			case "%%": return "%";
			default: return tok;
		}
	});
}

const input = JSON.parse(readFileSync(0, "utf8"));
const results = [];
const compiled = new Map(); // template source -> Template: cases share templates
for (const c of input.cases || []) {
	try {
		const ctx = { ...(c.context || {}) };
		if (c.now) {
			const now = new Date(c.now);
			ctx.strftime_now = (fmt) => strftime(now, fmt);
		}
		let t = compiled.get(c.template);
		if (!t) {
			t = new jinja.Template(c.template);
			compiled.set(c.template, t);
		}
		results.push({ text: t.render(ctx) });
	} catch (e) {
		results.push({ error: String(e && e.message ? e.message : e) });
	}
}
process.stdout.write(JSON.stringify({ version, results }));
