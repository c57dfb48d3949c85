# remote-runner session script. Written by remote-runner for one session; do not edit.
# Modes:
#   (no arguments)    the rc file of the session shell (bash --rcfile): defaults, traps, ready
#   run DIR [CWD]     sourced by the session shell: run DIR/cmd.sh in this shell (state persists);
#                     typed as "$__rr_cdir/<id>" (short: readline echoes every character)
#   bg DIR [CWD]      sourced by the session shell: start DIR/cmd.sh detached (setsid)
#   bgrun DIR [CWD]   executed (new process group): the detached side of `bg`
#   pane              executed by tmux as the pane process: the session shell, then `dead`
# Every command DIR gets: started, stdout, stderr, then exit (one write, last; non-empty = there).
__rr_tmux=@TMUX@
__rr_sock=@SOCK@
__rr_sid=@SID@
__rr_sdir=@SDIR@
__rr_cdir=@CDIR@

__rr_now() {
  __rr_t=${EPOCHREALTIME:-}
  if [ -z "$__rr_t" ]; then __rr_t=$(\command -p date +%s.%N); fi
}

# Wake the command's own channel and every registered waiter's channel, in one tmux call.
__rr_wake() {
  local w
  local -a a=(wait-for -S "rr-${1##*/}")
  for w in "$1"/waiters/rr-*; do
    if [ -e "$w" ]; then a+=(';' wait-for -S "${w##*/}"); fi
  done
  "$__rr_tmux" -L "$__rr_sock" "${a[@]}" >/dev/null 2>&1
}

# Record the end of the current command: exit file, wake the waiters, then release the lock
# (off the hot path: a start that finds the lock of an ended owner waits for this). The exit
# file is one line written by one printf (bash flushes per line: one small write), so readers
# treat it as there once it is non-empty (`-s`), and no rename process is needed.
__rr_fin() {
  local c=$1 how=$2 d=${__rr_cur:-} st=done
  set +e
  __rr_cur=
  if [ -z "$d" ]; then return 0; fi
  __rr_now
  if [ -e "$d/stop_requested" ]; then st=stopped; fi
  printf 'code=%s how=%s state=%s ended=%s\n' "$c" "$how" "$st" "$__rr_t" >"$d/exit"
  __rr_wake "$d"
  if [ -n "${__rr_lock:-}" ]; then \command -p rm -f -- "$__rr_sdir/busy"; fi
}

__rr_prompt() {
  local s=$?
  if [ -n "${__rr_cur:-}" ]; then __rr_fin "$s" prompt; fi
}

__rr_on_exit() {
  local s=$?
  if [ -n "${__rr_cur:-}" ]; then __rr_fin "$s" shell_exit; fi
}

# A failure under `set -e` ends the command (return from the sourced cmd.sh), not the shell.
__rr_arm() {
  PROMPT_COMMAND=__rr_prompt
  trap __rr_on_exit EXIT
  trap '__rr_s=$?; if [[ $- == *e* && -n ${__rr_cur:-} ]]; then set +e; return $__rr_s 2>/dev/null; fi' ERR
}

# bash 5.2 can corrupt its own heap when a sourced file ends inside an unterminated command
# or process substitution, and abort at the next prompt, taking the session with it. Text that
# has one is first checked by a separate `bash -n` with the session's shopt settings; a syntax
# error then ends the command with status 2 and bash's message on stderr, as sourcing it would,
# without the session shell ever parsing it.
__rr_parses() {
  local f=$1/cmd.sh o
  local -a opts=()
  case $(<"$f") in *'$('* | *'`'* | *'<('* | *'>('*) ;; *) return 0 ;; esac
  while read -r o _; do
    if [ "$o" != login_shell ]; then opts+=(-O "$o"); fi
  done < <(shopt -s)
  "$BASH" --noprofile --norc "${opts[@]}" -n -- "$f" 2>"$1/stderr"
}

__rr_started() {
  __rr_now
  printf 'started=%s\npwd=%s\n' "$__rr_t" "$PWD" >"$1/started"
}

case ${1-} in
run)
  __rr_lock=1
  __rr_arm
  trap - INT
  set +e
  # A job started with `&` by an earlier command and ended since is reported ("[1]+  Done ...")
  # by bash at its next chance, which would be inside this command's redirected stderr: report
  # it now, to nowhere (the job table stays, so `wait`, `%1` and `jobs` still work).
  jobs -n >/dev/null 2>&1
  case $2 in /*) __rr_cur=$2 ;; *) __rr_cur=$__rr_cdir/$2 ;; esac
  __rr_cd=${3-}
  set --
  if [ -n "$__rr_cd" ] && ! cd -- "$__rr_cd" 2>"$__rr_cur/stderr"; then
    __rr_started "$__rr_cur"
    : >"$__rr_cur/stdout"
    __rr_fin 1 cd_failed
  else
    __rr_started "$__rr_cur"
    if __rr_parses "$__rr_cur"; then
      . "$__rr_cur/cmd.sh" >"$__rr_cur/stdout" 2>"$__rr_cur/stderr"
      __rr_fin $? normal
    else
      : >"$__rr_cur/stdout"
      __rr_fin 2 syntax_error
    fi
  fi
  ;;
bg)
  __rr_arm
  \command -p setsid -f "$BASH" --noprofile --norc "$__rr_sdir/rr.sh" bgrun "$2" "${3-}" \
    </dev/null >/dev/null 2>&1
  \command -p rm -f -- "$__rr_sdir/busy"
  "$__rr_tmux" -L "$__rr_sock" wait-for -S "rr-${2##*/}-go" >/dev/null 2>&1
  ;;
bgrun)
  trap : TERM INT HUP
  __rr_cur=$2
  printf '%s\n' "$$" >"$2/pid.tmp" && \command -p mv -f -- "$2/pid.tmp" "$2/pid"
  if [ -n "${3-}" ] && ! cd -- "$3" 2>"$2/stderr"; then
    __rr_started "$2"
    : >"$2/stdout"
    __rr_fin 1 cd_failed
  else
    __rr_started "$2"
    "$BASH" --noprofile --norc -- "$2/cmd.sh" </dev/null >"$2/stdout" 2>"$2/stderr"
    __rr_fin $? normal
  fi
  ;;
pane)
  "$BASH" --noprofile --rcfile "$__rr_sdir/rr.sh" -i
  __rr_s=$?
  __rr_o=
  read -r __rr_o 2>/dev/null <"$__rr_sdir/busy"
  if [ -n "$__rr_o" ] && [ ! -s "$__rr_cdir/$__rr_o/exit" ]; then
    __rr_cur=$__rr_cdir/$__rr_o
    __rr_lock=1
    __rr_fin "$__rr_s" shell_killed
  fi
  ;;
'')
  set +H
  bind 'set bell-style none' 2>/dev/null
  # Commands that run `tmux` reach the user's own server, not the session's private one.
  unset HISTFILE PROMPT_COMMAND TMUX TMUX_PANE
  HISTCONTROL=ignorespace
  PS1='$ '
  PS2='> '
  export PAGER=cat GIT_PAGER=cat MANPAGER=cat SYSTEMD_PAGER=cat GIT_EDITOR=true
  export GIT_TERMINAL_PROMPT=0 DEBIAN_FRONTEND=noninteractive
  printf '%s\n' "$$" >"$__rr_sdir/shell.pid"
  __rr_arm
  "$__rr_tmux" -L "$__rr_sock" wait-for -S "rr-$__rr_sid-ready" >/dev/null 2>&1
  ;;
esac
