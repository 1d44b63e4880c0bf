#!/usr/bin/env bash
# GPU run of the harness: three back-to-back timing runs of matmul 8192^3 (benchmarks/eval_h100/stability.py), then
# `eval --mode ranked` and `eval --mode profile` at full size for every built-in task.
# Usage: benchmarks/eval_h100/run.sh OUTDIR [BUDGET_S]   (BUDGET_S: timing budget per benchmark case, default 2)
# Writes OUTDIR/<task>-<mode>.{txt,json,command,log}, <task>-profile-case<i>.ncu-rep, eval_stability.json and
# eval_all.json (device, command, script, per-run exit code and wall time), and prints a summary table.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: benchmarks/eval_h100/run.sh OUTDIR [BUDGET_S]}
BUDGET=${2:-2}
PY=${PYTHON:-python}
mkdir -p "$OUT"
RUNS="$OUT/eval_all.runs.tsv"
: > "$RUNS"
# The whole script must end inside the GPU machine's 10-minute command limit: each command gets at most 150 s
# and never more than what is left of DEADLINE_S; a command that no longer fits is skipped (exit code 254).
DEADLINE_S=${DEADLINE_S:-540}
script_start=$(date +%s)
remaining() { echo $(( DEADLINE_S - ($(date +%s) - script_start) )); }
limit_for() { local left; left=$(remaining); echo $(( left < 150 ? left : 150 )); }

# Stability first (about 30 s), so it is never the part that is skipped.
rm -f "$OUT/eval_stability.json"  # never summarise a stale file from an earlier run
stab_cmd=("$PY" benchmarks/eval_h100/stability.py "$OUT" --runs 3 --budget-s 4)
printf '%q ' "${stab_cmd[@]}" > "$OUT/eval_stability.command"; echo >> "$OUT/eval_stability.command"
timeout 120 "${stab_cmd[@]}" 2>&1 | tee "$OUT/eval_stability.log"

TASKS=$($PY -c "from swizzlelab.tasks import builtin_names; print(' '.join(builtin_names()))")
for task in $TASKS; do
  for mode in ranked profile; do
    cmd=("$PY" -m swizzlelab.cli eval "$task" --mode "$mode" --out "$OUT" --budget-s "$BUDGET")
    printf '%q ' "${cmd[@]}" > "$OUT/$task-$mode.command"; echo >> "$OUT/$task-$mode.command"
    rm -f "$OUT/$task-$mode.json" "$OUT/$task-$mode.txt"
    start_ns=$(date +%s%N)
    limit=$(limit_for)
    if (( limit < 20 )); then
      echo "skipped: deadline of ${DEADLINE_S} s reached" > "$OUT/$task-$mode.log"
      rc=254
    else
      timeout "$limit" "${cmd[@]}" > "$OUT/$task-$mode.log" 2>&1
      rc=$?
    fi
    wall_ms=$(( ($(date +%s%N) - start_ns) / 1000000 ))
    wall_s=$(printf '%d.%03d' $((wall_ms / 1000)) $((wall_ms % 1000)))
    printf '%s\t%s\t%s\t%s\n' "$task" "$mode" "$rc" "$wall_s" >> "$RUNS"
    echo "$task $mode: exit $rc (${wall_s} s)"
  done
done
OUT="$OUT" COMMAND="benchmarks/eval_h100/run.sh $*" $PY - <<'EOF'
"""Summary: one row per task and mode from the JSON reports, written to OUTDIR/eval_all.json."""
import json, os
from pathlib import Path
from swizzlelab.harness.sysinfo import system_info
from swizzlelab.io import atomic_write_text

out = Path(os.environ["OUT"])
info = system_info()
rows = []
for line in (out / "eval_all.runs.tsv").read_text().splitlines():
    task, mode, rc, wall = line.split("\t")
    row = {"task": task, "mode": mode, "exit_code": int(rc), "wall_s": float(wall)}
    report = out / f"{task}-{mode}.json"
    if report.exists():
        data = json.loads(report.read_text())
        row["success"] = data["success"]
        row["tests"] = f"{data['tests']['passed']}/{data['tests']['total']}"
        row["score_ms"] = data["ranked"]["score_ms"]
        row["kernels_profiled"] = sum(len(p["kernels"]) for p in data["profiles"])
        row["l2_hit_rate_pct"] = [k["named"]["L2_Cache_Hit_Rate"] for p in data["profiles"] for k in p["kernels"]]
    rows.append(row)
stability = out / "eval_stability.json"
summary = {
    "script": str(Path("benchmarks/eval_h100/run.sh").resolve()),
    "command": os.environ["COMMAND"],
    "device": info.gpu,
    "label": info.measured_label(),
    "system": info.to_dict(),
    "runs": rows,
    "stability": json.loads(stability.read_text()) if stability.exists() else None,
}
atomic_write_text(out / "eval_all.json", json.dumps(summary, indent=2) + "\n")
print(f"\n{'task':<18}{'mode':<9}{'exit':>5}{'wall s':>8}  {'tests':<7}{'score ms':>10}  L2 hit % (ncu)")
for row in rows:
    score = f"{row['score_ms']:.4g}" if row.get("score_ms") else "-"
    hits = ", ".join(f"{h:.1f}" for h in row.get("l2_hit_rate_pct", []) if h is not None) or "-"
    print(f"{row['task']:<18}{row['mode']:<9}{row['exit_code']:>5}{row['wall_s']:>8.1f}  {row.get('tests', '-'):<7}"
          f"{score:>10}  {hits}")
print(f"all figures measured ({info.gpu}); summary in {out / 'eval_all.json'}")
EOF
