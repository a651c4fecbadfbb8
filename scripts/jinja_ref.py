#!/usr/bin/env python3
"""Render a chat template with Python's jinja2 the way chat-template renderers set it up
(trim_blocks, lstrip_blocks, loop controls, tojson as json.dumps without sorting or HTML
escaping, raise_exception, strftime_now): the reference tests/test_jinja.c compares
specdec's Jinja engine with.

usage: python3 scripts/jinja_ref.py TEMPLATE VARS.json [NOW]
Prints the rendered text (no newline added) to stdout; on a template error prints
"ERROR: message" and exits 3. NOW (seconds since the epoch) fixes strftime_now's clock.
Exit 77 when jinja2 is not installed.
"""
import json
import sys
import time

try:
    import jinja2
    from jinja2.sandbox import ImmutableSandboxedEnvironment
except ImportError:
    print("jinja_ref: jinja2 is not installed (pip install jinja2)", file=sys.stderr)
    sys.exit(77)


def main():
    tmpl_path, vars_path = sys.argv[1], sys.argv[2]
    now = float(sys.argv[3]) if len(sys.argv) > 3 else time.time()
    with open(tmpl_path, encoding="utf-8") as f:
        src = f.read()
    with open(vars_path, encoding="utf-8") as f:
        variables = json.load(f)

    def raise_exception(msg):
        raise jinja2.exceptions.TemplateError(msg)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(fmt):
        return time.strftime(fmt, time.localtime(now))

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    try:
        out = env.from_string(src).render(**variables)
    except Exception as e:  # the template's own errors, and jinja2's
        print("ERROR: %s" % e)
        sys.exit(3)
    sys.stdout.write(out)


if __name__ == "__main__":
    main()
