"""`mpdoctor rules` and `mpdoctor explain CODE|NAME`, generated from the rule registry."""

from __future__ import annotations

import sys

from mpdoctor.cli.exit_codes import EXIT_ERROR, EXIT_OK


def add_parsers(sub) -> None:
    sub.add_parser("rules", help="list every rule code").set_defaults(handler=run_rules)
    explain = sub.add_parser("explain", help="explain a rule: what, why, bad and good example, fix")
    explain.add_argument("code", metavar="CODE")
    explain.set_defaults(handler=run_explain)


def run_rules(args=None) -> int:
    from mpdoctor.registry import all_rules, implemented_codes

    implemented = implemented_codes()
    rows = [("CODE", "NAME", "SEVERITY", "PASSES", "FIX", "SUMMARY")]
    for r in all_rules():
        summary = r.summary if r.code in implemented else f"(not checked yet) {r.summary}"
        if r.opt_in:
            summary = f"(opt-in: --extend-select {r.code}) {summary}"
        rows.append((r.code, r.name, r.severity.value, ",".join(r.pass_names), "yes" if r.fixable else "no", summary))
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    for row in rows:
        print("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row[:5])) + "  " + row[5])
    return EXIT_OK


def run_explain(args) -> int:
    from mpdoctor.registry import all_rules, get_rule, implemented_codes

    by_name = {r.name: r.code for r in all_rules()}
    code = by_name.get(args.code.strip().lower(), args.code.strip().upper())
    if code not in by_name.values():
        print(f"mpdoctor: error: unknown rule {code!r} (see `mpdoctor rules`)", file=sys.stderr)
        return EXIT_ERROR
    r = get_rule(code)

    def indent(text: str) -> str:
        return "\n".join("    " + line if line else "" for line in text.splitlines())

    print(
        f"{r.code} {r.name} ({r.severity.value}; passes: {', '.join(r.pass_names)}; "
        f"autofix: {'yes' if r.fixable else 'no'})\n"
    )
    print(f"{r.summary}\n")
    if r.opt_in:
        print(
            f"Opt-in: not in the default selection. Select it by its code: `--extend-select {r.code}` or "
            f'`extend-select = ["{r.code}"]` in [tool.mpdoctor].\n'
        )
    if r.code not in implemented_codes():
        print("Not checked yet: this version of mpdoctor defines the code but no pass raises it.\n")
    print(f"What it detects\n{indent(r.what)}\n")
    print(f"Why it breaks\n{indent(r.why)}\n")
    print(f"Bad\n{indent(r.bad)}\n")
    print(f"Good\n{indent(r.good)}\n")
    print(f"Fix\n{indent(r.fix)}")
    return EXIT_OK
