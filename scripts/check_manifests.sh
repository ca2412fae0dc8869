#!/usr/bin/env bash
# Checks deploy/kubernetes/ (docs/scale.md): every manifest against the Kubernetes JSON schemas (strict: unknown
# fields are errors), with PyPI's kubernetes-validate (it bundles the schemas, so this runs offline once installed;
# scripts/setup.sh installs it into $LOADSHAPE_KUBE_VENV), then what the schemas cannot say: the shards' Job is an
# Indexed Job that never reruns a shard into a live test, its --shard count equals its completions, every shard
# gets the same --start-at, and the ConfigMap's scenario is one loadshape accepts (`loadshape link`, which
# validates it). Usage: scripts/check_manifests.sh [LOADSHAPE_BIN]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$LOADSHAPE_ROOT/deploy/kubernetes"
venv="${LOADSHAPE_KUBE_VENV:-$HOME/.cache/loadshape-kube-validate}"
bin="${1:-$CARGO_TARGET_DIR/debug/loadshape}"
[ -x "$venv/bin/kubernetes-validate" ] || { echo "kubernetes-validate missing in $venv: run scripts/setup.sh" >&2; exit 1; }
"$venv/bin/kubernetes-validate" --strict --quiet *.yaml
echo "schemas: $(ls *.yaml | wc -l) files valid against Kubernetes $("$venv/bin/pip" show kubernetes-validate | awk '/^Version/ {print $2}') (strict)"
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
"$venv/bin/python" - "$tmp/scenario.json" <<'PY'
import sys, yaml
def load(name):
    with open(name) as f:
        return [d for d in yaml.safe_load_all(f) if d]
job = load("job.yaml")[0]
spec = job["spec"]
def need(cond, what):
    if not cond:
        sys.exit(f"job.yaml: {what}")
need(spec.get("completionMode") == "Indexed", "completionMode must be Indexed (JOB_COMPLETION_INDEX is the shard)")
need(spec.get("backoffLimitPerIndex") == 0, "backoffLimitPerIndex must be 0: a failed shard is never rerun")
need(spec.get("podReplacementPolicy") == "Failed", "podReplacementPolicy must be Failed: no second pod while one terminates")
need(spec["template"]["spec"].get("restartPolicy") == "Never", "restartPolicy must be Never")
need(spec.get("parallelism") == spec.get("completions"), "parallelism must equal completions: every shard runs at once")
args = spec["template"]["spec"]["containers"][0]["args"]
need(args[0] == "replay", "the container runs `loadshape replay`")
def flag(name):
    need(name in args, f"the replay has no {name}")
    return args[args.index(name) + 1]
need(flag("--shard") == str(spec["completions"]), f"--shard {flag('--shard')} must equal completions {spec['completions']}")
need(flag("--start-at") == "$(START_AT)", "--start-at must come from START_AT (one value for every shard)")
need(flag("--scenario").startswith("/scenario/"), "--scenario must be read from the ConfigMap volume")
cm = load("configmap.yaml")[0]
with open(sys.argv[1], "w") as f:
    f.write(cm["data"]["scenario.json"])
merge = load("merge-job.yaml")[0]["spec"]["template"]["spec"]["containers"][0]["args"]
need(merge[:2] == ["merge", "/results"], "merge-job.yaml must run `loadshape merge /results`")
print("semantics: Indexed Job, backoffLimitPerIndex 0, podReplacementPolicy Failed, --shard == completions == %d" % spec["completions"])
PY
"$bin" link "$tmp/scenario.json" >/dev/null
echo "scenario: the ConfigMap's scenario.json is valid"
