#!/usr/bin/env bash
# Regenerates the reference section of docs/policies.md from `prequal policies --markdown`.
set -euo pipefail
cd "$(dirname "$0")/.."
generated=$(mktemp)
trap 'rm -f "$generated"' EXIT
cargo run -q -p prequal -- policies --markdown > "$generated"
python3 - "$generated" <<'PY'
import sys
path = "docs/policies.md"
doc = open(path).read()
begin = "<!-- BEGIN GENERATED: prequal policies --markdown -->\n"
end = "<!-- END GENERATED -->"
head = doc[: doc.index(begin) + len(begin)]
tail = doc[doc.index(end):]
open(path, "w").write(head + open(sys.argv[1]).read() + tail)
PY
