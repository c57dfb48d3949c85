# remote-runner's Slurm operations (POSIX sh), run on the login node through the control
# script's `sh` verb (parameters arrive as variables, like every verb's). One operation per call,
# named by OP:
#   probe      which Slurm commands answer, and the partitions
#   alloc      start `salloc --no-shell` in the background (DIR, NAME, ARGS); wait up to WAIT s
#              for the grant; "@granted JOB", "@pending JOB", or "@failed STATUS" + salloc's words
#   alloc_wait wait up to WAIT s more for that grant (DIR, JOB); then the same replies, with the
#              job's state and Slurm's reason while it is pending
#   cancel     end a pending salloc (DIR) and the job (JOB): "@cancelled"
#   query      state, reason and exit status of jobs (JOBS, comma separated): one line each,
#              "@job ID|STATE|REASON|EXIT" (squeue: EXIT is the wait status) or
#              "@acct ID|STATE|EXIT" (sacct, when squeue no longer knows the job: EXIT is N:S)
#   submit     write the batch script (stdin) to DIR/job.sh and sbatch it (NAME, CWD, ARGS):
#              "@submitted JOB" or "@failed STATUS" + sbatch's words
# ARGS holds the user's Slurm arguments, one word per line.
# shellcheck disable=SC2154 # parameters are set by the caller
# shellcheck disable=SC2119,SC2120 # the functions take ARGS, not arguments

rr_slurm_job_of() { # the job id salloc printed to DIR/salloc.err
  sed -n 's/.*job allocation \([0-9][0-9]*\).*/\1/p' "$DIR/salloc.err" 2>/dev/null | head -n1
}

rr_slurm_pending_state() { # "STATE REASON" of JOB
  squeue -h -j "$1" -o '%T %r' 2>/dev/null | head -n1
}

# Wait up to WAIT s (in 0.1 s steps) for salloc's grant; print the reply.
rr_slurm_await() {
  rr_pid=
  if [ -r "$DIR/salloc.pid" ]; then read -r rr_pid <"$DIR/salloc.pid"; fi
  rr_steps=$((WAIT * 10))
  rr_i=0
  while :; do
    rr_job=$(rr_slurm_job_of)
    if grep -q 'Granted job allocation' "$DIR/salloc.err" 2>/dev/null; then
      echo "@granted $(rr_slurm_job_of)"
      return 0
    fi
    if [ -z "$rr_pid" ] || ! kill -0 "$rr_pid" 2>/dev/null; then
      # salloc ended without a grant (refused, or cancelled); its status is in salloc.status.
      sleep 0.1
      if grep -q 'Granted job allocation' "$DIR/salloc.err" 2>/dev/null; then
        echo "@granted $(rr_slurm_job_of)"
        return 0
      fi
      rr_st=
      if [ -r "$DIR/salloc.status" ]; then read -r rr_st <"$DIR/salloc.status"; fi
      echo "@failed ${rr_st:-unknown} ${rr_job:-}"
      cat "$DIR/salloc.err" 2>/dev/null
      return 0
    fi
    if [ "$rr_i" -ge "$rr_steps" ]; then
      if [ -n "$rr_job" ]; then
        echo "@pending $rr_job $(rr_slurm_pending_state "$rr_job")"
      else
        echo "@pending -"
      fi
      return 0
    fi
    rr_i=$((rr_i + 1))
    sleep 0.1
  done
}

rr_slurm_alloc() {
  mkdir -p -- "$DIR" || exit 3
  rm -f -- "$DIR/salloc.err" "$DIR/salloc.status" "$DIR/salloc.pid"
  # ARGS, one word a line, as this function's arguments (split on newlines only, no globbing).
  rr_ifs=$IFS IFS='
'
  set -f
  # shellcheck disable=SC2086 # split into words on purpose
  set -- $ARGS
  set +f
  IFS=$rr_ifs
  # Its own session, stdio on files: it outlives this call (and the SSH channel) while pending.
  # SIGTERM to it cancels a pending job.
  (
    # shellcheck disable=SC2016 # expanded by that sh
    setsid sh -c 'salloc "$@"; echo $? >"$0/salloc.status"' "$DIR" \
      --no-shell --job-name="$NAME" "$@" </dev/null >"$DIR/salloc.out" 2>"$DIR/salloc.err" &
    echo $! >"$DIR/salloc.pid"
  )
  rr_slurm_await
}

rr_slurm_cancel() {
  rr_pid=
  if [ -r "$DIR/salloc.pid" ]; then read -r rr_pid <"$DIR/salloc.pid"; fi
  # setsid made it a group leader: TERM the group (the sh and salloc).
  if [ -n "$rr_pid" ]; then kill -TERM -- "-$rr_pid" 2>/dev/null || kill -TERM "$rr_pid" 2>/dev/null; fi
  if [ -n "$JOB" ] && [ "$JOB" != - ]; then scancel "$JOB" 2>/dev/null; fi
  echo "@cancelled"
}

rr_slurm_query() {
  rr_seen=$(squeue -h -t all -j "$JOBS" -O 'JobID:|,State:|,Reason:|,exit_code:|' 2>/dev/null)
  printf '%s\n' "$rr_seen" | while IFS= read -r rr_l; do
    [ -n "$rr_l" ] && echo "@job ${rr_l%|}"
  done
  # Jobs squeue no longer knows (past MinJobAge): ask accounting, where there is one.
  rr_rest=
  rr_ifs=$IFS
  IFS=,
  for rr_j in $JOBS; do
    case "
$rr_seen" in
    *"
$rr_j|"*) ;;
    *) rr_rest=${rr_rest:+$rr_rest,}$rr_j ;;
    esac
  done
  IFS=$rr_ifs
  if [ -n "$rr_rest" ]; then
    sacct -n -X -P -j "$rr_rest" -o JobID,State,ExitCode 2>/dev/null | while IFS= read -r rr_l; do
      [ -n "$rr_l" ] && echo "@acct $rr_l"
    done
  fi
  return 0
}

rr_slurm_submit() {
  mkdir -p -- "$DIR" || exit 3
  cat >"$DIR/job.sh" || exit 3
  # ARGS, one word a line, as this function's arguments (split on newlines only, no globbing).
  rr_ifs=$IFS IFS='
'
  set -f
  # shellcheck disable=SC2086 # split into words on purpose
  set -- $ARGS
  set +f
  IFS=$rr_ifs
  if rr_out=$(sbatch --parsable --job-name="$NAME" --chdir="$CWD" --output="$DIR/stdout" \
    --error="$DIR/stderr" "$@" "$DIR/job.sh" 2>&1); then
    echo "@submitted ${rr_out%%;*}"
  else
    echo "@failed $?"
    printf '%s\n' "$rr_out"
  fi
}

rr_slurm_probe() {
  for rr_c in sinfo salloc srun sbatch squeue sacct scancel scontrol; do
    if rr_p=$(command -v "$rr_c" 2>/dev/null); then echo "@tool $rr_c $rr_p"; else echo "@tool $rr_c -"; fi
  done
  if rr_out=$(sinfo -h -o '%P|%a|%l|%D|%T' 2>&1); then
    printf '%s\n' "$rr_out" | while IFS= read -r rr_l; do echo "@partition $rr_l"; done
  else
    echo "@sinfo_failed"
    printf '%s\n' "$rr_out" | head -n 5
  fi
  if rr_out=$(squeue -h -u "$(id -un)" -o %i 2>&1); then echo "@squeue ok"; else echo "@squeue $rr_out" | head -n1; fi
  if rr_out=$(sacct -n -X -S now -o JobID 2>&1); then echo "@sacct ok"; else echo "@sacct $rr_out" | head -n1; fi
}

case $OP in
probe) rr_slurm_probe ;;
alloc) rr_slurm_alloc ;;
alloc_wait) rr_slurm_await ;;
cancel) rr_slurm_cancel ;;
query) rr_slurm_query ;;
submit) rr_slurm_submit ;;
*)
  echo "remote-runner: unknown Slurm operation '$OP'" >&2
  exit 95
  ;;
esac
