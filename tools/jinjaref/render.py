"""Render chat templates with Python's Jinja2 set up as transformers' apply_chat_template sets it up.

The second chat-template reference of Stockpot's tests (internal/tokenizer), next to
@huggingface/jinja (render.mjs): transformers renders templates with Jinja2 itself, so where the
JavaScript engine errors or differs this one says what the model's authors meant. Same protocol as
render.mjs: one JSON object on stdin,

    {"cases": [{"template": "...", "context": {...}, "now": "2026-07-26T09:30:00Z"}, ...]}

and {"version": "<jinja2 version>", "results": [{"text": ...} or {"error": ...}, ...]} on stdout.

The environment is the one transformers documents for chat templates: a sandboxed, immutable
environment with trim_blocks and lstrip_blocks, the loopcontrols extension, a {% generation %}
block that renders its body, a tojson filter that is json.dumps (ensure_ascii=False, key order
kept), and the globals raise_exception and strftime_now (formatting "now" when given).
"""

import datetime
import json
import sys

try:
    import jinja2
    import jinja2.ext
    from jinja2 import nodes
    from jinja2.sandbox import ImmutableSandboxedEnvironment
except ImportError as e:  # pragma: no cover
    sys.stdout.write(json.dumps({"error": "jinja2 not installed: %s" % e}))
    sys.exit(2)


class Generation(jinja2.ext.Extension):
    """{% generation %}...{% endgeneration %}: transformers marks assistant text with it."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

    def _body(self, caller):
        return caller()


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def environment(now):
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[Generation, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    if now is None:
        env.globals["strftime_now"] = lambda fmt: datetime.datetime.now().strftime(fmt)
    else:
        env.globals["strftime_now"] = lambda fmt: now.strftime(fmt)
    return env


def main():
    req = json.load(sys.stdin)
    results = []
    compiled = {}  # (template, now) -> Template: cases share templates
    for case in req.get("cases", []):
        now = None
        if case.get("now"):
            now = datetime.datetime.strptime(case["now"], "%Y-%m-%dT%H:%M:%SZ")
        try:
            key = (case["template"], case.get("now"))
            tmpl = compiled.get(key)
            if tmpl is None:
                tmpl = compiled[key] = environment(now).from_string(case["template"])
            results.append({"text": tmpl.render(**case.get("context", {}))})
        except Exception as e:  # every failure is the template's answer for this case
            results.append({"error": "%s: %s" % (type(e).__name__, e)})
    sys.stdout.write(json.dumps({"version": jinja2.__version__, "results": results}))


if __name__ == "__main__":
    main()
