#!/bin/sh
# rr-chat: from a turn on this machine to the chat it came from (BotMux outbound_message and
# session_tool). remote-runner installs this file as <state root>/lib/chat-<hash>.sh; a turn's
# command finds it as "$RR_CHAT".
#
#   "$RR_CHAT" send [--auxiliary] [--mention-requester] [--id KEY] TEXT...   (TEXT - : stdin)
#   "$RR_CHAT" tool [--id KEY] JSON            e.g. '{"tool":"history","limit":3}'
#   "$RR_CHAT" history [--limit N] [--scope session|thread|chat|ambient] [--cards]
#   "$RR_CHAT" quoted MESSAGE_ID [--raw]
#   "$RR_CHAT" bots | skills | skill show|resources NAME | skill read NAME PATH
#
# Exit status: send: 0 delivered (the message id on stdout); tool: the tool's own exit code
# (its stdout and stderr as they were); 2 a bad request, nothing sent; 3 rejected (code:
# message on stderr; nothing was posted); 4 unknown (it may have happened: never retried
# automatically; resend with the same --id KEY to get the first result instead of a repeat).
#
# How it works: each call is a directory under $RR_TURN_DIR/chat/ (allocated with mkdir, which
# is atomic): the request's files, then `ready`. The provider sees it, records the operation id
# it uses (`operation`) before it sends anything, and writes `out`, `err` and last `status`.
# The call waits for `status`. `closed` in the chat directory means the turn is over; it lists
# the calls the provider saw, and a call not listed was never sent.
#
# A call is bound to its turn by the process that makes it, not by the path: the helper writes
# its pid (`pid`) and waits with the call's directory as its working directory; the provider
# takes the call only when that process is alive there and is one of the turn's session's own
# (in the session shell's process session, or started by the shell). Knowing another turn's
# directory is not enough: a call left there from elsewhere is refused (3, not_this_turn).
#
# The provider also runs verbs of its own: `__watch` (wait for new requests), `__close` (end
# the turn's chat) and `__sweep` (after a provider restart, settle what the old process left
# waiting).

rr_me=rr-chat

rr_usage() {
  printf '%s: %s\n' "$rr_me" "$1" >&2
  sed -n '6,10p' "$0" | sed 's/^#//' >&2
  exit 2
}

rr_fail() { # exit-status code message
  printf '%s: %s\n' "$2" "$3" >&2
  exit "$1"
}

rr_nap() {
  sleep "$1" 2>/dev/null || sleep 1
}

# $1 as the inside of a JSON string: quotes and backslashes escaped. Names and paths with
# control characters make invalid JSON, which the provider refuses (exit 2, nothing sent).
rr_json_str() {
  printf '%s' "$1" | sed 's/[\\"]/\\&/g'
}

# ------------------------------------------------------------------ calls from the turn

rr_chat_dir() {
  [ -n "${RR_TURN_DIR:-}" ] || rr_fail 2 not_in_turn "RR_TURN_DIR is not set: run $rr_me from a turn's command, where the provider sets it"
  case $RR_TURN_DIR in
  /*) ;;
  *) rr_fail 2 not_in_turn "RR_TURN_DIR=$RR_TURN_DIR is not an absolute path: run $rr_me from a turn's command, where the provider sets it" ;;
  esac
  rr_dir=$RR_TURN_DIR/chat
  mkdir -p "$rr_dir" 2>/dev/null || rr_fail 2 chat_dir_unwritable "cannot create $rr_dir"
  [ -e "$rr_dir/closed" ] && rr_fail 3 turn_ended "the turn is over; nothing was sent"
  return 0
}

# Allocate the call's directory: $rr_dir/N, the lowest free N from the count of calls so far.
rr_new_call() {
  set -- "$rr_dir"/[0-9]*
  if [ -e "$1" ]; then rr_n=$(($# + 1)); else rr_n=1; fi
  rr_tries=0
  until mkdir "$rr_dir/$rr_n" 2>/dev/null; do
    rr_n=$((rr_n + 1))
    rr_tries=$((rr_tries + 1))
    [ "$rr_tries" -lt 1000 ] || rr_fail 2 chat_dir_unwritable "cannot create a call directory in $rr_dir"
  done
  rr_d=$rr_dir/$rr_n
  [ -z "$rr_key" ] || printf '%s' "$rr_key" >"$rr_d/key"
  # The proof that this call is the turn's own: this process, waiting in the call's directory.
  printf '%s\n' "$$" >"$rr_d/pid"
  cd -P -- "$rr_d" >/dev/null || rr_fail 2 chat_dir_unwritable "cannot enter $rr_d"
}

# Wait for the provider's status (bounded by RR_CHAT_TIMEOUT seconds, default 900), then
# replay out and err and exit with the status.
rr_wait() {
  : >"$rr_d/ready"
  rr_limit=${RR_CHAT_TIMEOUT:-900}
  rr_end=$(($(date +%s) + rr_limit))
  rr_i=0
  while [ ! -s "$rr_d/status" ]; do
    if [ ! -d "$rr_d" ]; then
      rr_fail 4 turn_ended "the session was closed while this request was with the host; it may have been carried out"
    fi
    # `closed` lists the calls the provider saw before it closed the turn: one not listed was
    # never sent.
    if [ -e "$rr_dir/closed" ] && [ ! -s "$rr_d/status" ] && ! grep -qx "$rr_n" "$rr_dir/closed"; then
      rr_fail 3 turn_ended "the turn ended before the provider saw this request; nothing was sent"
    fi
    if [ "$(date +%s)" -ge "$rr_end" ]; then
      : >"$rr_d/abandoned"
      rr_fail 4 chat_timeout "no result within ${rr_limit}s (RR_CHAT_TIMEOUT); the request may have been sent"
    fi
    if [ "$rr_i" -lt 40 ]; then rr_nap 0.05; else rr_nap 0.2; fi
    rr_i=$((rr_i + 1))
  done
  # Read the status first: a session closed right now removes the call's directory.
  rr_status=
  read -r rr_status 2>/dev/null <"$rr_d/status"
  case $rr_status in
  '' | *[!0-9]*) rr_fail 4 turn_ended "the session was closed while this request was with the host; it may have been carried out" ;;
  esac
  [ -f "$rr_d/out" ] && cat "$rr_d/out"
  [ -f "$rr_d/err" ] && cat "$rr_d/err" >&2
  exit "$rr_status"
}

rr_send() {
  rr_kind=progress
  rr_mention=none
  while [ $# -gt 0 ]; do
    case $1 in
    --auxiliary) rr_kind=auxiliary ;;
    --mention-requester) rr_mention=requester ;;
    --id)
      [ $# -ge 2 ] || rr_usage "--id needs a KEY"
      rr_key=$2
      shift
      ;;
    --) shift && break ;;
    -) break ;;
    -*) rr_usage "unknown option $1" ;;
    *) break ;;
    esac
    shift
  done
  [ $# -gt 0 ] || rr_usage "send needs TEXT (or - to read it from stdin)"
  rr_chat_dir
  rr_new_call
  printf 'send\n' >"$rr_d/kind"
  printf '%s %s\n' "$rr_kind" "$rr_mention" >"$rr_d/opts"
  if [ "$*" = - ]; then cat >"$rr_d/content"; else printf '%s' "$*" >"$rr_d/content"; fi
  rr_wait
}

rr_tool() { # JSON
  rr_chat_dir
  rr_new_call
  printf 'tool\n' >"$rr_d/kind"
  printf '%s' "$1" >"$rr_d/request"
  rr_wait
}

rr_tool_cmd() {
  while [ $# -gt 0 ]; do
    case $1 in
    --id)
      [ $# -ge 2 ] || rr_usage "--id needs a KEY"
      rr_key=$2
      shift
      ;;
    *) break ;;
    esac
    shift
  done
  [ $# -eq 1 ] || rr_usage "tool needs one JSON request object"
  rr_tool "$1"
}

rr_history() {
  rr_j='{"tool":"history"'
  while [ $# -gt 0 ]; do
    case $1 in
    --limit)
      case ${2:-} in '' | *[!0-9]*) rr_usage "--limit needs a number (1..100)" ;; esac
      rr_j="$rr_j,\"limit\":$2"
      shift
      ;;
    --scope)
      [ $# -ge 2 ] || rr_usage "--scope needs session, thread, chat or ambient"
      rr_j="$rr_j,\"scope\":\"$(rr_json_str "$2")\""
      shift
      ;;
    --cards) rr_j="$rr_j,\"withCardJson\":true" ;;
    *) rr_usage "unknown history option $1" ;;
    esac
    shift
  done
  rr_tool "$rr_j}"
}

rr_quoted() {
  [ $# -ge 1 ] || rr_usage "quoted needs a message id (om_...)"
  rr_j="{\"tool\":\"quoted\",\"messageId\":\"$(rr_json_str "$1")\""
  [ "${2:-}" = --raw ] && rr_j="$rr_j,\"raw\":true"
  rr_tool "$rr_j}"
}

rr_skill() {
  case ${1:-} in
  show | resources)
    [ $# -eq 2 ] || rr_usage "skill $1 needs NAME"
    rr_tool "{\"tool\":\"skill.$1\",\"name\":\"$(rr_json_str "$2")\"}"
    ;;
  read)
    [ $# -eq 3 ] || rr_usage "skill read needs NAME PATH"
    rr_tool "{\"tool\":\"skill.read\",\"name\":\"$(rr_json_str "$2")\",\"path\":\"$(rr_json_str "$3")\"}"
    ;;
  *) rr_usage "skill needs show, resources or read" ;;
  esac
}

# ------------------------------------------------------------------ verbs of the provider

# __watch CHAT_DIR KNOWN SECS EXIT_FILE SESSION_DIR: wait until more than KNOWN calls are
# ready, the command's exit file is there, or SECS pass; print the ready calls (see
# rr_proven_calls), then @exit if the command has ended.
rr_watch() {
  rr_w_dir=$1 rr_w_known=$2 rr_w_exit=$4 rr_w_sd=$5
  rr_w_end=$(($(date +%s) + $3))
  while :; do
    set -- "$rr_w_dir"/*/ready
    if [ -e "$1" ] && [ $# -gt "$rr_w_known" ]; then break; fi
    if [ -n "$rr_w_exit" ] && [ -s "$rr_w_exit" ]; then break; fi
    if [ "$(date +%s)" -ge "$rr_w_end" ]; then break; fi
    rr_nap 0.1
  done
  rr_ready_calls "$rr_w_dir" | rr_proven_calls "$rr_w_dir" "$rr_w_sd"
  if [ -n "$rr_w_exit" ] && [ -s "$rr_w_exit" ]; then echo @exit; fi
}

# Field N (2 ppid, 4 session id) of /proc/PID/stat after the command name, into rr_field.
rr_stat_field() { # PID N
  rr_field=
  rr_stat=
  read -r rr_stat 2>/dev/null <"/proc/$1/stat" || return 1
  rr_n_=$2
  rr_stat=${rr_stat##*) }
  # shellcheck disable=SC2086 # fields of /proc/PID/stat
  set -- $rr_stat
  [ $# -ge "$rr_n_" ] || return 1
  shift $((rr_n_ - 1))
  rr_field=$1
}

# Whether call directory $1 was made by the turn's own process, for the session whose state
# directory is $2: the pid it wrote is alive with $1 as its working directory, and is in the
# session shell's process session or a descendant of the shell (a process that left the
# session with setsid).
rr_proves() { # CALL_DIR SESSION_DIR
  rr_pid=
  rr_root=
  read -r rr_pid 2>/dev/null <"$1/pid" || [ -n "$rr_pid" ] || return 1
  read -r rr_root 2>/dev/null <"$2/shell.pid" || [ -n "$rr_root" ] || return 1
  case $rr_pid in '' | *[!0-9]*) return 1 ;; esac
  case $rr_root in '' | *[!0-9]*) return 1 ;; esac
  [ "$rr_root" -gt 1 ] || return 1
  rr_cwd=$(cd -P -- "/proc/$rr_pid/cwd" 2>/dev/null && pwd -P) || return 1
  [ "$rr_cwd" = "$(cd -P -- "$1" 2>/dev/null && pwd -P)" ] || return 1
  rr_stat_field "$rr_root" 4 || return 1
  rr_sid=$rr_field
  rr_stat_field "$rr_pid" 4 || return 1
  [ "$rr_field" = "$rr_sid" ] && return 0
  rr_up=0
  while [ "$rr_pid" -gt 1 ] && [ "$rr_up" -lt 256 ]; do
    rr_stat_field "$rr_pid" 2 || return 1
    rr_pid=$rr_field
    [ "$rr_pid" = "$rr_root" ] && return 0
    rr_up=$((rr_up + 1))
  done
  return 1
}

# Call numbers on stdin (chat dir $1, session dir $2): "N" for a call its turn made, "N
# foreign" for one it did not.
rr_proven_calls() { # CHAT_DIR SESSION_DIR
  while IFS= read -r rr_c; do
    if [ -n "$2" ] && rr_proves "$1/$rr_c" "$2"; then
      printf '%s\n' "$rr_c"
    else
      printf '%s foreign\n' "$rr_c"
    fi
  done
}

# The numbers of the ready calls in chat dir $1.
rr_ready_calls() {
  for rr_f in "$1"/*/ready; do
    [ -e "$rr_f" ] || continue
    rr_f=${rr_f%/ready}
    printf '%s\n' "${rr_f##*/}"
  done
}

# __close CHAT_DIR SESSION_DIR: the turn is over. Write `closed` listing the calls ready now
# (the provider answers each of them; a call not listed is never sent), and print that list
# (as rr_proven_calls does).
# A turn that made no call has no chat directory yet: an empty `closed` says it all, without
# the list's temp file (a call starting now is not in it, so it is refused either way).
rr_close() {
  if [ ! -d "$1" ]; then
    mkdir -p "$1" && : >"$1/closed" || exit 1
    return 0
  fi
  rr_ready_calls "$1" >"$1/closed.tmp" && mv -f "$1/closed.tmp" "$1/closed" || exit 1
  rr_proven_calls "$1" "${2:-}" <"$1/closed"
}

# Write a call's result: err text, then status, each atomically.
rr_settle() { # call-dir status err
  printf '%s\n' "$3" >"$1/err.tmp" && mv -f "$1/err.tmp" "$1/err"
  printf '%s\n' "$2" >"$1/status.tmp" && mv -f "$1/status.tmp" "$1/status"
}

# __sweep SESSION_DIR: a new provider process took the session over. Every turn's chat is
# closed, and every call still waiting is settled truthfully: one the old process recorded
# (`operation`) may have been sent (4, unknown); one without it was never sent (3).
rr_sweep() {
  for rr_c in "$1"/turns/*/chat; do
    [ -d "$rr_c" ] || continue
    for rr_r in "$rr_c"/*/ready; do
      [ -e "$rr_r" ] || continue
      rr_r=${rr_r%/ready}
      [ -s "$rr_r/status" ] && continue
      if [ -e "$rr_r/operation" ]; then
        rr_settle "$rr_r" 4 "provider_restarted: the provider restarted while this request was with the host; it may have been delivered (never replayed automatically)"
      else
        rr_settle "$rr_r" 3 "provider_restarted: the provider restarted before sending this request; nothing was sent"
      fi
    done
    [ -e "$rr_c/closed" ] || rr_close "$rr_c" >/dev/null
  done
}

rr_key=
case ${1:-} in
send) shift && rr_send "$@" ;;
tool) shift && rr_tool_cmd "$@" ;;
history) shift && rr_history "$@" ;;
quoted) shift && rr_quoted "$@" ;;
bots) rr_tool '{"tool":"bots.list"}' ;;
skills) rr_tool '{"tool":"skill.list"}' ;;
skill) shift && rr_skill "$@" ;;
__watch) shift && rr_watch "$@" ;;
__sweep) shift && rr_sweep "$@" ;;
__close) shift && rr_close "$@" ;;
'' | -h | --help | help) rr_usage "usage" ;;
*) rr_usage "unknown command $1" ;;
esac
