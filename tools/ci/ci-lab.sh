#!/usr/bin/env bash
# The steps of the CI workflow (.github/workflows/lab.yml), one command each,
# so that the workflow and this project's own tests run the very same
# commands (the tests on local images, the workflow on official ones):
#
#   tools/ci/ci-lab.sh run                 the lab once; prints "run-dir: DIR" last
#   tools/ci/ci-lab.sh summary RUN_DIR     the report's first screen (heading and
#                                       headline), for a job summary
#   tools/ci/ci-lab.sh compare BASE RUN PCT
#                                       bench compare BASE -> RUN, gated at PCT %
#   tools/ci/ci-lab.sh ab-gate BASE_REF [SERVICE...]
#                                       the pull-request gate: an A/B in one run of
#                                       each touched path, BASE_REF's against this
#                                       checkout's (tools/ci/change_gate.py), after
#                                       AB_GATE_CALIBRATION_RUNS A/As of each
#   tools/ci/ci-lab.sh ab-calibrate SERVICE
#                                       AB_CALIBRATION_RUNS A/As of SERVICE (make
#                                       ab-calibrate): the gate's false alarms
#                                       with their bound; prints "run-dir: DIR"
#
# Environment: LAB_ENV_FILE (default .env; cpus-2.env's pins are layered on
# when the machine has fewer than 4 cores, as the Makefile does), LAB_PROJECT
# (compose project, default gridfs-lab), LAB_RUN_TIMEOUT (seconds, default
# 7200). Any knob exported (BENCH_PROFILE, BENCH_TARGETS...) overrides the env
# file, as Compose lets the shell do.
. "$(dirname "$0")/../lib.sh"
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
# bench for tools/lab/*.py, tools/ci/*.py and `python3 -m bench`: CI runs them
# with the runner's python3, which has no .venv (where tools/install/venv.sh
# installs bench)
export PYTHONPATH="$root/loadgen${PYTHONPATH:+:$PYTHONPATH}"

usage() { die "usage: tools/ci/ci-lab.sh run | summary RUN_DIR | compare BASE_DIR RUN_DIR PCT | ab-gate BASE_REF [SERVICE...] | ab-calibrate SERVICE"; }

compose_args() {
  local env_file=${LAB_ENV_FILE:-.env}
  [ -f "$env_file" ] || die "LAB_ENV_FILE=$env_file: no such file (make local-images writes local.env)"
  local args=(--env-file "$env_file")
  [ "$(nproc)" -lt 4 ] && args+=(--env-file cpus-2.env)  # local.env has them already: the same values
  printf '%s\n' "${args[@]}" -p "${LAB_PROJECT:-gridfs-lab}"
}

results_dir() {
  # where bench writes, as Compose resolves RESULTS_DIR (shell, then env file)
  local dir=${RESULTS_DIR:-$(env_file_value RESULTS_DIR "${LAB_ENV_FILE:-.env}")}
  dir=${dir:-./results}
  case $dir in /*) echo "$dir" ;; *) echo "$root/${dir#./}" ;; esac
}

run() {
  local timeout=${LAB_RUN_TIMEOUT:-7200} code=0 lines run_id
  lines=$(compose_args) || exit 1
  # globals: the EXIT trap reads them after run() has returned
  mapfile -t compose_args <<<"$lines"
  # bench writes the results as this uid:gid (never root)
  RESULTS_OWNER=$(tools/lab/results-owner.sh "${LAB_ENV_FILE:-.env}") || exit 1
  export RESULTS_OWNER
  run_log=$(mktemp)
  # Down whatever happens, so the next run starts from clean volumes.
  trap 'timeout 300 docker compose "${compose_args[@]}" down -v --remove-orphans >/dev/null 2>&1 || true
        rm -f "$run_log"' EXIT
  # the settings check on its own first, so a bad variable's line is in the log
  # (attached within `up`, its exit would end the run)
  # (pipefail, from lib.sh: the pipeline fails when docker compose does)
  if ! timeout 1800 docker compose "${compose_args[@]}" run --rm --build settings 2>&1 | tee "$run_log"; then
    say "no run started: a setting is wrong (the [settings] lines above)"
    exit 2
  fi
  timeout --kill-after=60 "$timeout" docker compose "${compose_args[@]}" up --build --exit-code-from bench bench \
    2>&1 | tee "$run_log" || code=${PIPESTATUS[0]}
  [ "$code" = 124 ] && say "the lab took longer than LAB_RUN_TIMEOUT=$timeout s"
  run_id=$(sed -n 's/.*\[bench\] run \([0-9TZ]*\):.*/\1/p' "$run_log" | tail -n 1)
  if [ -z "$run_id" ]; then
    say "no run started (compose exit code $code): see the output above"
    exit $(( code ? code : 1 ))
  fi
  echo "run-dir: $(results_dir)/$run_id"
  exit "$code"
}

summary() {
  local report=$1/report.md
  [ -f "$report" ] || die "$report: no such file (expected a results/<run-id> directory)"
  # The heading, the headline and its rounds: everything before the details.
  sed '/^## Requests per second/,$d' "$report"
}

compare() {
  local base=$1 run_dir=$2 pct=$3
  timeout 300 python3 -m bench compare "$base" "$run_dir" --fail-above "$pct" >/dev/null
  local code=$?
  cat "$run_dir/compare.md" 2>/dev/null
  return "$code"
}

change_env() {
  # tools/lab/change.py reads AB_ENV_FILE (LAB_ENV_FILE's value) and AB_PROJECT
  export AB_ENV_FILE=${AB_ENV_FILE:-${LAB_ENV_FILE:-.env}} AB_PROJECT=${AB_PROJECT:-${LAB_PROJECT:-gridfs-lab}}
}

change_calibrate() {
  change_env
  local before after code=0
  # (ls fails when there is none yet: pipefail would end the script there;
  # the calibration names its folder by path, date and time)
  # shellcheck disable=SC2012
  before=$(ls -1d "$(results_dir)/calibration-$1-"*/ 2>/dev/null | sort | tail -n 1 || true)
  # each A/A inside is bounded by AB_TIMEOUT (tools/lab/change.py), the whole by the job's
  SERVICE=$1 python3 tools/lab/change_calibrate.py || code=$?
  # shellcheck disable=SC2012
  after=$(ls -1d "$(results_dir)/calibration-$1-"*/ 2>/dev/null | sort | tail -n 1 || true)
  { [ -n "$after" ] && [ "$after" != "$before" ]; } || die "no calibration (tools/lab/change_calibrate.py exited $code)"
  echo "run-dir: ${after%/}"
  return "$code"
}

case ${1:-} in
  run) [ $# -eq 1 ] || usage; run ;;
  # the gate runs the lab's A/B tools as a library: tools/lab too (a script's own folder is on its path already)
  ab-gate) [ $# -ge 2 ] || usage; shift; change_env
    PYTHONPATH="$root/tools/lab:$PYTHONPATH" exec python3 tools/ci/change_gate.py "$@" ;;
  ab-calibrate) [ $# -eq 2 ] || usage; change_calibrate "$2" ;;
  summary) [ $# -eq 2 ] || usage; summary "$2" ;;
  compare) [ $# -eq 4 ] || usage; set +e; compare "$2" "$3" "$4"; exit $? ;;
  *) usage ;;
esac
