#!/usr/bin/env python3
"""The balancing-quality matrix (issue 15): runs every matrix scenario in the simulator with its
peers (the power-of-two and add-steps/beyond-round-robin scenarios with peak EWMA added) and each
prequal variant given as a TOML inline table, and prints each variant's p50 / p99 / p99.9 over
the best peer's ('*' marks a row meeting the target: p50 within 5%, tails at or below), then
geometric means. Usage: python3 scripts/matrix.py '{ name = "prequal" }' ...
Needs target/release/prequal (cargo build --release -p prequal); deterministic for the seeds in
the scenario files (or SEED=n in the environment for another seed). EXTRA='[estimator]\\nstale_half_life = "2s"'
appends TOML to every scenario (for settings outside the policy, such as the replicas' tracker).
ONLY=a,b runs only those matrix scenarios; LEVEL=0.95 sets every load step's level (the
heterogeneous scenarios at overload: ONLY=heterogeneous-70,heterogeneous-70-many,heterogeneous-85,
heterogeneous-85-many LEVEL=0.95). WORKERS=n sets every thread-pool replica's worker count (a check
that a default is not tuned to the matrix's 4 workers). SET=held-out runs the held-out scenarios (scenarios/held-out/, never
used to choose a default) instead of the matrix; ONLY and LEVEL apply to them as well."""
import json, re, subprocess, sys, os
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("BIN", os.path.join(ROOT, "target/release/prequal"))
SC = os.path.join(ROOT, "scenarios")
TMP = os.environ.get("TMPDIR", "/tmp") + "/prequal-matrix"
variants = sys.argv[1:] or ['{ name = "prequal" }']
matrix = ["beyond-round-robin", "add-steps", "power-of-two-none", "power-of-two-moderate",
          "power-of-two-high", "power-of-two-central", "heterogeneous-70", "heterogeneous-70-many",
          "heterogeneous-85", "heterogeneous-85-many", "selection-rules", "prequal-ramp"]
if os.environ.get("SET") == "held-out":
    SC = os.path.join(SC, "held-out")
    matrix = sorted(f[:-5] for f in os.listdir(SC) if f.endswith(".toml"))
elif os.environ.get("SET"):
    sys.exit(f"matrix.py: SET must be held-out (or unset for the matrix), got {os.environ['SET']!r}")
if os.environ.get("ONLY"):
    only = os.environ["ONLY"].split(",")
    unknown = [n for n in only if n not in matrix]
    if unknown:
        sys.exit(f"matrix.py: ONLY names {unknown}, not scenarios of this set: {matrix}")
    matrix = [n for n in matrix if n in only]
os.makedirs(TMP, exist_ok=True)
tot = {}
for name in matrix:
    text = open(f"{SC}/{name}.toml").read()
    m = re.search(r"^contenders = (\[.*?\])\n", text, re.S | re.M)
    body = m.group(1)
    names = re.findall(r'"([a-z0-9-]+)"', body)
    ps = [n for n in names if n not in ("prequal", "name")]
    if name in ("power-of-two-none", "power-of-two-moderate", "power-of-two-high", "power-of-two-central", "add-steps", "beyond-round-robin"):
        if "peak-ewma" not in ps: ps.append("peak-ewma")
    if "least-time" not in ps: ps.append("least-time")
    conts = ", ".join(f'"{p}"' for p in ps) + ", " + ", ".join(variants)
    text = text[:m.start()] + f"contenders = [{conts}]\n" + text[m.end():]
    path = f"{TMP}/{name}.toml"
    if os.environ.get("LEVEL"):
        text = re.sub(r"\blevel = [0-9.]+", "level = " + os.environ["LEVEL"], text)
    if os.environ.get("WORKERS"):
        text = re.sub(r"^workers = [0-9]+", "workers = " + os.environ["WORKERS"], text, flags=re.M)
    if os.environ.get("CLIENTS_EXTRA"):
        text = text.replace("[clients]\n", "[clients]\n" + os.environ["CLIENTS_EXTRA"].replace("\\n", "\n") + "\n", 1)
    if os.environ.get("EXTRA"):
        text += "\n" + os.environ["EXTRA"].replace("\\n", "\n") + "\n"
    open(path, "w").write(text)
    ts = "0.1" if name == "prequal-ramp" else "1"
    seed = ["--seed", os.environ["SEED"]] if os.environ.get("SEED") else []
    out = subprocess.run([BIN, "sim", path, "--no-plots", "--json", "--time-scale", ts, "--out", f"{TMP}/out-{name}"] + seed, capture_output=True, text=True)
    r = json.loads(out.stdout)
    loads = sorted(set(x["load"] for x in r["runs"]))
    for load in loads:
        runs = [x for x in r["runs"] if x["load"] == load]
        peer = [x for x in runs if x["policy"] != "prequal"]
        pre = [x for x in runs if x["policy"] == "prequal"]
        q = lambda x, k: x["summary"]["latency_ms"][k]
        best = {k: min(q(x, k) for x in peer) for k in ("p50", "p99", "p999")}
        bestname = {k: min(peer, key=lambda x: q(x, k))["label"] for k in best}
        line = f"{name[:27]:27} {load:4.2f} best peer p50 {best['p50']:7.1f} p99 {best['p99']:7.1f} p99.9 {best['p999']:7.1f} |"
        for i, x in enumerate(pre):
            rr = [q(x, k) / best[k] for k in ("p50", "p99", "p999")]
            ok = rr[0] <= 1.05 and rr[1] <= 1.0 and rr[2] <= 1.0
            line += " %s%.2f/%.2f/%.2f" % ("*" if ok else " ", *rr)
            tot.setdefault(i, []).append(rr)
        print(line, flush=True)
for i, v in enumerate(variants):
    rs = tot[i]
    import math
    gm = [math.exp(sum(math.log(r[j]) for r in rs) / len(rs)) for j in range(3)]
    ok = sum(1 for r in rs if r[0] <= 1.05 and r[1] <= 1 and r[2] <= 1)
    worst = [max(r[j] for r in rs) for j in range(3)]
    print(f"{i} {v}: geomean ratio p50 {gm[0]:.3f} p99 {gm[1]:.3f} p99.9 {gm[2]:.3f}; worst {worst[0]:.2f}/{worst[1]:.2f}/{worst[2]:.2f}; rows meeting target {ok}/{len(rs)}")
