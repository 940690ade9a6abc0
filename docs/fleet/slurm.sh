#!/usr/bin/env bash
# headroom on a Slurm cluster: one array task per node, every GPU of it at once (--device all),
# into a shared results folder; then one merge after the last task, whatever became of them.
# Install headroom first (README, "Install"), then, from the repository's root:
#
#   jid=$(sbatch --parsable docs/fleet/slurm.sh)
#   env -u SBATCH_ARRAY_INX sbatch --dependency=afterany:"$jid" --job-name=headroom-merge --output=/dev/null --wrap "docs/fleet/slurm.sh merge $jid"
#
# Each task writes $RESULTS/<array job id>/node-<task id>/ (a node folder: gpu<i>-<uuid>/ per
# GPU, node.json, node.md) and exits with the worst GPU's code (0 ok, 1 an expectation failed,
# 2 could not run). The merge writes fleet.csv (one row per GPU run) and fleet.md (a roll-up per
# GPU model and driver, findings across nodes); a task that was killed leaves folders that
# merge lists as incomplete and skips. Every log goes to $RESULTS/<array job id>/logs/
# (task-<task id>.log, merge.log), none to the folder you submitted from.
#
# Settings (environment, exported by sbatch): RESULTS (a folder every node sees; default
# $HOME/headroom-results), WORKLOAD (default workloads/serving.toml), HEADROOM_DEVICE_ARGS
# (default "--backend cuda --device all"; "--profile 8xh100-80g --device all" runs it on the
# simulator), HEADROOM (the binary; default: headroom on PATH, else $CARGO_HOME/bin/headroom,
# where `cargo install` puts it).
#SBATCH --job-name=headroom-fleet
#SBATCH --array=0-63
#SBATCH --nodes=1
#SBATCH --exclusive
#SBATCH --gpus-per-node=8
#SBATCH --time=00:30:00
#SBATCH --output=/dev/null
set -euo pipefail

RESULTS=${RESULTS:-$HOME/headroom-results}
WORKLOAD=${WORKLOAD:-workloads/serving.toml}
read -r -a DEVICE_ARGS <<<"${HEADROOM_DEVICE_ARGS:---backend cuda --device all}"
if [ -z "${HEADROOM:-}" ]; then
  HEADROOM=$(command -v headroom || echo "${CARGO_HOME:-$HOME/.cargo}/bin/headroom")
fi

if [ "${1:-}" = merge ]; then
  # The final step: every node folder of the array job, incomplete ones listed and skipped.
  job=${2:?usage: slurm.sh merge ARRAY_JOB_ID}
  # A merge submitted as an array (an exported SBATCH_ARRAY_INX makes every sbatch one): only
  # its first task merges, so that one merge writes fleet.csv and fleet.md.
  if [ -n "${SLURM_ARRAY_TASK_ID:-}" ] && [ "$SLURM_ARRAY_TASK_ID" != "${SLURM_ARRAY_TASK_MIN:-$SLURM_ARRAY_TASK_ID}" ]; then
    exit 0
  fi
  dir="$RESULTS/$job"
  mkdir -p "$dir/logs"
  exec 2>>"$dir/logs/merge.log"
  [ -x "$HEADROOM" ] || { echo "slurm.sh: no headroom binary at $HEADROOM (README, \"Install\")" >&2; exit 2; }
  exec "$HEADROOM" merge "$dir" --skip-incomplete --out "$dir/fleet.csv" --force >"$dir/fleet.md"
fi

job=${SLURM_ARRAY_JOB_ID:?run under sbatch (or set SLURM_ARRAY_JOB_ID and SLURM_ARRAY_TASK_ID)}
task=${SLURM_ARRAY_TASK_ID:?run as an array task}
mkdir -p "$RESULTS/$job/logs"
exec >>"$RESULTS/$job/logs/task-$task.log" 2>&1
[ -x "$HEADROOM" ] || { echo "slurm.sh: no headroom binary at $HEADROOM (README, \"Install\")" >&2; exit 2; }
exec "$HEADROOM" run "$WORKLOAD" "${DEVICE_ARGS[@]}" --out "$RESULTS/$job/node-$task" --quiet
