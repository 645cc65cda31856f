#!/usr/bin/env bash
# The duplicate-code figure of issue 29 (item 4: "≤ 20 real-logic pairs, 0
# across crates"), reproducibly: runs the `duplicates` tool over crates/
# (every crate and crates/plugins/*; target/ is git-ignored, so never read)
# and sorts each pair it lists into one class by the rule below, then prints
# the count of pairs in total, of real-logic pairs, and of real-logic pairs
# across crates, with the real ones listed.
#
#   scripts/dup-scan.sh            counts, then the real-logic pairs
#   scripts/dup-scan.sh --all      counts, then every pair with its class
#   CRATES=DIR scripts/dup-scan.sh the same over another copy of crates/ (for
#                                  an older commit: git archive REV crates | tar -x -C /tmp/x;
#                                  CRATES=/tmp/x/crates)
#
# Classification (first rule that applies), judged on the run the row names
# (the longest the two files share):
#   1. boilerplate  the tool marked the row `boilerplate` (a same-shape run
#                   that is mostly punctuation and keywords, or a shape that
#                   recurs across a folder).
#   2. test         either side is test code: a path with a tests/ or
#                   benches/ folder, or lines inside an inline
#                   `#[cfg(test)] mod NAME { … }`. A test spelling out its
#                   inputs and expectations again, rather than calling the
#                   code under test, is deliberate: it is the independent
#                   oracle.
#   3. declarative  both sides are at least 80 % declarations (counted over
#                   the lines the tool counts: not blank, not comments, not
#                   lone punctuation): attributes and their arguments
#                   (`#[arg(…)]`, `long = "x",`), `mod`/`use`, struct, enum,
#                   type, const and static headers, enum variants, struct
#                   literal fields whose value is a path or one call with
#                   path arguments (`pending: g(&self.pending),`: no
#                   operator, no statement, no control flow), and field or
#                   parameter declarations (`name: Type,`) that the other
#                   side does not repeat word for word. Clap argument
#                   structs alike in shape and crate roots' module lists
#                   land here; the same fields, names and types, on both
#                   sides are one type defined twice and stay real.
#   4. real         everything else: logic written twice.
# A pair is "across crates" when its two sides belong to different crates
# (the nearest folder above each file holding a Cargo.toml).
#
# Needs the `duplicates` command (it is not part of this repository: where it
# is missing this script says so and exits 2) and python3.
set -euo pipefail
cd "$(dirname "$0")/.."
ALL=0
[ "${1:-}" = "--all" ] && ALL=1
command -v duplicates >/dev/null || { echo "dup-scan: the duplicates command is not installed here" >&2; exit 2; }
command -v python3 >/dev/null || { echo "dup-scan: python3 not installed" >&2; exit 2; }
CRATES=${CRATES:-crates}
OUT=$(duplicates --repo "$CRATES" --most 200 --seconds 300)
ALL="$ALL" CRATES="$CRATES" python3 - "$OUT" <<'PY'
import os, re, sys

out = sys.argv[1].splitlines()
show_all = os.environ.get("ALL") == "1"
root = os.environ["CRATES"]
head = out[0] if out else ""
m = re.match(r"(\d+) pairs", head)
if not m:
    if head.startswith("no duplicates"):
        print("pairs: 0 total, 0 real, 0 real across crates")
        sys.exit(0)
    sys.exit(f"dup-scan: unexpected first line from duplicates: {head!r}")
total = int(m.group(1))
for line in out:
    if line.startswith("incomplete:"):
        sys.exit(f"dup-scan: the scan is incomplete, no figure: {line}")

ROW = re.compile(r"^D\d+ (\S+):(\d+)-(\d+) ~ (\S+):(\d+)-(\d+)(.*)$")
rows = [ROW.match(l) for l in out[1:]]
rows = [r for r in rows if r]
# The tool lists boilerplate rows last and at most 200 rows: every pair not
# marked boilerplate is listed as long as the last listed row is boilerplate
# (or nothing was left off).
cut = any(l.startswith("(+") and "more pairs" in l for l in out)
if cut and rows and "boilerplate" not in rows[-1].group(7):
    sys.exit("dup-scan: more than 200 pairs are not boilerplate; the listing is cut, no figure")

cache = {}
def lines(path):
    if path not in cache:
        with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
            cache[path] = f.read().split("\n")
    return cache[path]

def crate_of(path):
    d = os.path.dirname(path)
    while d and not os.path.exists(os.path.join(root, d, "Cargo.toml")):
        d = os.path.dirname(d)
    return d or "."

def is_test(path, start):
    parts = path.split("/")
    if "tests" in parts[:-1] or "benches" in parts[:-1]:
        return True
    ls = lines(path)
    for i, l in enumerate(ls, 1):
        if l.strip() != "#[cfg(test)]" or start < i:
            continue
        # The item the attribute applies to: an inline module runs to its
        # closing brace (rustfmt puts that of a top-level module alone at
        # column 0; one nested deeper closes at the same indentation).
        j = next((k for k in range(i, len(ls)) if ls[k].strip() and not ls[k].strip().startswith("#")), None)
        if j is None or not re.match(r"^\s*" + VIS_ + r"mod " + IDENT + r" \{$", ls[j]):
            continue
        indent = ls[j][: len(ls[j]) - len(ls[j].lstrip())]
        end = next((k + 1 for k in range(j + 1, len(ls)) if ls[k] == indent + "}"), len(ls))
        if start <= end:
            return True
    return False

VIS_ = r"(?:pub(?:\([^)]*\))? )?"
IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
PATH = r"[&*]?" + IDENT + r"(?:(?:\.|::)" + IDENT + r")*(?:\(\))?"
VIS = r"(?:pub(?:\([^)]*\))? )?"
DECL = [re.compile(p) for p in [
    r"^#!?\[",                                        # attribute
    r"^" + IDENT + r" = .*,?$",                       # attribute argument
    r"^" + VIS + r"(?:mod|use|extern crate) ",       # module, import
    r"^" + VIS + r"(?:struct|enum|union|type|trait) ", # type header
    r"^" + VIS + r"(?:const|static) " + IDENT + r": ",  # constant
    r"^" + IDENT + r": " + PATH + r"(?:\((?:" + PATH + r"(?:, )?)*\))?,?$",  # literal field
    r"^" + IDENT + r",$",                             # shorthand field
    r"^[A-Z][A-Za-z0-9_]*(?:\(.*\)|\s*\{.*\})?,$",  # enum variant
    r"^(?:Self|[A-Z][A-Za-z0-9_:]*) \{$",            # struct literal or type opener
]]
# A field or parameter declaration: declarative where the other side does not
# have it word for word (same shape, other names); the same field, name and
# type, on both sides is a type defined twice, which counts as real.
FIELD = re.compile(r"^" + VIS + IDENT + r": [^=;{}]+,?$")
PUNCT = re.compile(r"^[\s{}()\[\];,]*$")

def counted(path, a, b):
    for l in lines(path)[a - 1:b]:
        s = l.strip()
        if not s or s.startswith("//") or PUNCT.match(s):
            continue
        yield s

def declarative(path, a, b, other):
    ls = list(counted(path, a, b))
    if not ls:
        return True
    d = sum(1 for s in ls if any(p.match(s) for p in DECL) or (FIELD.match(s) and s not in other))
    return d >= 0.8 * len(ls)

counts = {"boilerplate": 0, "test": 0, "declarative": 0, "real": 0}
real_across = 0
coarse = coarse_across = 0
listed = []
for r in rows:
    pa, a1, a2, pb, b1, b2, rest = r.groups()
    a1, a2, b1, b2 = int(a1), int(a2), int(b1), int(b2)
    if "boilerplate" in rest:
        cls = "boilerplate"
    elif is_test(pa, a1) or is_test(pb, b1):
        cls = "test"
    elif declarative(pa, a1, a2, set(counted(pb, b1, b2))) and declarative(pb, b1, b2, set(counted(pa, a1, a2))):
        cls = "declarative"
    else:
        cls = "real"
    across = crate_of(pa) != crate_of(pb)
    if "boilerplate" not in rest and not any(
        d in p.split("/")[:-1] for p in (pa, pb) for d in ("tests", "benches")
    ):
        coarse += 1
        coarse_across += across
    counts[cls] += 1
    if cls == "real" and across:
        real_across += 1
    if show_all or cls == "real":
        listed.append(f"  {cls:<11} {'across ' if across else ''}{r.group(0).split(' ', 1)[1]}")
# Rows the listing cut are all boilerplate (checked above).
counts["boilerplate"] += total - len(rows)
print(f"pairs: {total} total, {counts['real']} real, {real_across} real across crates")
print(f"  (boilerplate {counts['boilerplate']}, test {counts['test']}, declarative {counts['declarative']})")
print(f"  coarse count (not boilerplate, no side under tests/ or benches/; no test-module or")
print(f"  declarative rule, as counted by hand before this script): {coarse}, {coarse_across} across crates")
print("\n".join(listed))
PY
