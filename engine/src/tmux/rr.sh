# remote-runner session script (bash). Written by remote-runner for one session; do not edit.
# Modes:
#   (no arguments)  the rc file of the session shell (bash --rcfile): the user's login
#                   environment, defaults, traps, ready
#   run DIR         sourced by the session shell: run DIR/cmd.sh in this shell (state persists);
#                   handled first, before the rest of the file is even parsed;
#                   typed as "$__rr_cdir/<id>" (short: readline echoes every character)
#   bg DIR          sourced by the session shell: start DIR/cmd.sh detached (setsid)
#   bgrun DIR       executed (new process group): the detached side of `bg`
#   pane            executed by tmux as the pane process: runs the session shell, and starts a
#                   fresh one (same cwd and exported environment) when a command ends it
# Every command DIR gets: started, pwd, stdout, stderr, then exit (one write, last; non-empty =
# there). A cwd override is read from DIR/cwd, extra environment from DIR/env.sh (the engine's
# export lines), both data, never typed.
# Secrets (docs/security.md, "Marks and end notices"): the pane process holds two files open
# whose names it removed at once: fd 3, the session's mark secret (in every transcript mark),
# and fd 4, the current command's notice secret (in the name or channel that ends it), which the
# control script writes through /proc/<pane>/fd/4 before each start. The session shell never
# has them open (no command inherits them) and reads them through /proc/$PPID/fd/N only while
# it prints a mark or ends a command: no variable, file name or environment holds them while a
# command's own code runs.
# shellcheck disable=SC2034,SC1090,SC1091
__rr_tmux=@TMUX@
__rr_sock=@SOCK@
__rr_sid=@SID@
__rr_sdir=@SDIR@
__rr_cdir=@CDIR@
# Exported so a command that replaces the shell with another bash (`exec bash`) keeps working.
export __rr_sdir __rr_cdir

# The hot path first: `run` (in a shell that read this file before, so its functions are there;
# else they are read first) runs the command and ends the reading here, so that bash does not
# parse the rest of this file on every command.
if [ "${1-}" = run ]; then
  \builtin declare -F __rr_fin >/dev/null 2>&1 || \builtin . "$__rr_sdir/rr.sh" defs
  __rr_uf=$-
  \builtin set +euC
  __rr_lock=1
  __rr_keep=1
  __rr_arm
  trap - INT
  # A job started with `&` by an earlier command and ended since is reported ("[1]+  Done ...")
  # by bash at its next chance, which would be inside this command's redirected stderr: report
  # it now, to nowhere (the job table stays, so `wait`, `%1` and `jobs` still work).
  \builtin jobs -n >/dev/null 2>&1
  case $2 in /*) __rr_cur=$2 ;; *) __rr_cur=$__rr_cdir/$2 ;; esac
  __rr_d=$__rr_cur
  __rr_read_cwd "$__rr_cur"
  \builtin set --
  if [ -n "$__rr_cd" ] && ! \builtin cd -- "$__rr_cd" 2>|"$__rr_cur/stderr"; then
    __rr_started "$__rr_cur"
    if [ -t 1 ]; then __rr_show_text "$__rr_cur"; fi
    : >|"$__rr_cur/stdout"
    __rr_fin 1 cd_failed
    __rr_s=1
  else
    __rr_started "$__rr_cur"
    if [ -t 1 ]; then __rr_show_text "$__rr_cur"; fi
    if __rr_parses "$__rr_cur"; then
      if [ -f "$__rr_cur/env.sh" ]; then \builtin . "$__rr_cur/env.sh" 2>/dev/null; fi
      case $__rr_uf in *u*) \builtin set -u ;; esac
      case $__rr_uf in *C*) \builtin set -C ;; esac
      \builtin . "$__rr_cur/cmd.sh" >|"$__rr_cur/stdout" 2>|"$__rr_cur/stderr"
      __rr_s=$?
      __rr_uf=$-
      __rr_fin "$__rr_s" normal
    else
      : >|"$__rr_cur/stdout"
      __rr_fin 2 syntax_error
      __rr_s=2
    fi
  fi
  # (Not when a command replaced the shell with one whose output still goes to its files.)
  if [ -t 1 ]; then __rr_show "$__rr_d" "$__rr_s"; fi
  if [[ $- == *i* ]]; then \builtin set -o emacs; fi
  case $__rr_uf in *u*) \builtin set -u ;; esac
  case $__rr_uf in *C*) \builtin set -C ;; esac
  \builtin return 0 2>/dev/null
fi

# The secret on the pane process's descriptor $1 (3: marks, 4: this command's notice) into
# __rr_k; empty where there is none (a background command, a session shell without a pane
# process of this version). Callers clear __rr_k once they printed it.
__rr_key() {
  __rr_k=
  if [ -n "${__rr_kp-}" ]; then IFS= \builtin read -r __rr_k 2>/dev/null <"/proc/$__rr_kp/fd/$1"; fi
  case $__rr_k in *[!0-9a-f]*) __rr_k= ;; esac
}

__rr_now() {
  __rr_t=${EPOCHREALTIME:-}
  if [ -z "$__rr_t" ]; then __rr_t=$(\command -p date +%s.%N); fi
}

# Signal a command's wait-for channel. Where the session's window-renamed hook is in place
# (ctl.sh rr_fast_wake), naming the window after the channel does it inside the tmux server: an
# escape sequence printed by a builtin, no process on a command's path (a string terminator first
# ends any escape string a program left open). Otherwise, or when stdout is not the pane's
# terminal, one tmux client. (The shell's ready signal at start-up and a background command's
# launch use the client: off the hot path, and the start-up one was seen lost in a loaded test
# run.) An `rq-` name (a command typed through an engine's tmux control client) is only a
# rename: that client sees it, and the hook leaves it alone.
__rr_signal() {
  if [ -t 1 ] && [ -e "$__rr_sdir/wake.esc" ]; then
    \builtin printf '\033\134\033k%s\033\134' "$1"
  else
    case $1 in
    rq-*) "$__rr_tmux" -L "$__rr_sock" rename-window -t "=$__rr_sid:" "$1" >/dev/null 2>&1 ;;
    *) "$__rr_tmux" -L "$__rr_sock" wait-for -S "$1" >/dev/null 2>&1 ;;
    esac
  fi
}

# Wake the command's own channel and every registered waiter's channel (several in one tmux
# call). Safe under the user's failglob/nullglob. $2: the end notice (see __rr_fin); $3: the
# command's notice secret, part of its channel's and its window name's first word (only the
# engine that started it knows it: a name or channel without it ends nothing).
__rr_wake() {
  local w fg=0 k=${3:+-k$3}
  local -a a=(wait-for -S "rr-${1##*/}$k")
  # Typed by an engine's control client (ctl.sh ARMONLY, a non-empty claim): its end is a
  # window rename, which that client sees, with the notice after the name's first word.
  if [ -s "$1/claim" ]; then a=(rename-window -t "=$__rr_sid:" "rq-${1##*/}$k${2:+ $2}"); fi
  if [ -d "$1/waiters" ]; then
    \builtin shopt -q failglob && fg=1
    \builtin shopt -u failglob
    for w in "$1"/waiters/rr-*; do
      if [ -e "$w" ]; then a+=(';' wait-for -S "${w##*/}"); fi
    done
    if [ $fg = 1 ]; then \builtin shopt -s failglob; fi
  fi
  if [ ${#a[@]} = 3 ] || [ ${#a[@]} = 4 ]; then
    __rr_signal "${a[${#a[@]} - 1]}"
  else
    "$__rr_tmux" -L "$__rr_sock" "${a[@]}" >/dev/null 2>&1
  fi
}

# The shell's directory and exported environment, for a fresh shell after `exit`.
__rr_save() {
  \builtin printf '%s' "$PWD" >|"$__rr_sdir/cwd"
  \builtin export -p >|"$__rr_sdir/exports" 2>/dev/null
}

# Record the end of the current command: exit file, wake the waiters, then save the shell state
# and release the lock (off the hot path: a start that finds the lock of an ended owner waits
# for this). The exit file is one line written by one printf, so readers treat it as there once
# it is non-empty (`-s`), and no rename process is needed.
__rr_fin() {
  local c=$1 how=$2 hold=${3-} d=${__rr_cur:-} st='done'
  \builtin set +euC
  __rr_cur=
  if [ -z "$d" ]; then return 0; fi
  __rr_now
  if [ -e "$d/stop_requested" ]; then st=stopped; fi
  \builtin printf 'code=%s how=%s state=%s ended=%s\n' "$c" "$how" "$st" "$__rr_t" >|"$d/exit"
  # The end notice, for an engine's control client (engine/src/tmux/control.rs, EndNotice):
  # what the exit, started and pwd files say, and whether stdout and stderr hold anything, so
  # that it need not read them. Only from this shell's own start of this command.
  local n=
  if [ "${__rr_sd0-}" = "$d" ] && [ -s "$d/claim" ]; then
    n="$c $how $st $__rr_t $__rr_t0 "
    if [ -s "$d/stdout" ]; then n+=1; else n+=0; fi
    if [ -s "$d/stderr" ]; then n+=1; else n+=0; fi
    case $__rr_pwd0 in
    *[!A-Za-z0-9/._+,@%=:~' '-]*) ;;
    *) n+=" $__rr_pwd0" ;;
    esac
  fi
  # The notice secret is for this end only: gone from the pane's file once read (a start that
  # gave none, such as one from an older engine, then finds none).
  __rr_key 4
  if [ -n "$__rr_k" ]; then \builtin printf '' 2>/dev/null >|"/proc/$__rr_kp/fd/4"; fi
  __rr_wake "$d" "$n" "$__rr_k"
  __rr_k=
  if [ -n "${__rr_keep:-}" ]; then __rr_save; fi
  # Held (third argument) when the shell is ending: the next shell releases it once it is up,
  # so a command typed meanwhile can never land in the dying one.
  # With job control off for this one child, `rm` stays in the shell's process group: the
  # terminal is never handed to it, so a next start arriving meanwhile finds the shell at its
  # terminal rather than a foreground program, and does not back off (20 ms) before typing.
  if [ -n "${__rr_lock:-}" ] && [ -z "$hold" ]; then
    case $- in
    *m*)
      \builtin set +m
      \command -p rm -f -- "$__rr_sdir/busy"
      \builtin set -m
      ;;
    *) \command -p rm -f -- "$__rr_sdir/busy" ;;
    esac
  fi
}

__rr_prompt() {
  local s=${1:-$?}
  if [ -n "${__rr_cur:-}" ]; then __rr_fin "$s" prompt; fi
}

__rr_on_exit() {
  local s=$?
  if [ -n "${__rr_cur:-}" ]; then __rr_fin "$s" shell_exit hold; fi
}

# A failure under `set -e` ends the command (return from the sourced cmd.sh), not the shell.
# (`set -e` lasts for the command that sets it; `set -u` and `set -C` stay set, as typed.)
# PROMPT_COMMAND is exported so that a bash that replaced the session shell (`exec bash`: same
# pid, none of our functions) reports it at its first prompt; any other bash ignores it.
__rr_arm() {
  # shellcheck disable=SC2016,SC2154 # expanded at each prompt
  export PROMPT_COMMAND='__rr_ps=$?; if [ "$$" = "${__rr_shell_pid:-}" ]; then __rr_prompt "$__rr_ps" 2>/dev/null || \builtin . "$__rr_sdir/rr.sh" replaced; fi'
  trap __rr_on_exit EXIT
  trap '__rr_s=$?; if [[ $- == *e* && -n ${__rr_cur:-} ]]; then set +e; return $__rr_s 2>/dev/null; fi' ERR
}

# bash 5.2 can corrupt its own heap when a sourced file ends inside an unterminated command
# or process substitution, and abort at the next prompt, taking the session with it. Text that
# has one is first checked by a separate `bash -n` with the session's shopt settings; a syntax
# error then ends the command with status 2 and bash's message on stderr, as sourcing it would,
# without the session shell ever parsing it.
__rr_parses() {
  local f=$1/cmd.sh o t
  local -a opts=()
  # (A builtin read, not $(<...): no fork on every command.)
  IFS= \builtin read -r -d '' t <"$f"
  # shellcheck disable=SC2016 # literal patterns
  case $t in *'$('* | *'`'* | *'<('* | *'>('*) ;; *) return 0 ;; esac
  while read -r o _; do
    if [ "$o" != login_shell ]; then opts+=(-O "$o"); fi
  done < <(\builtin shopt -s)
  "$BASH" --noprofile --norc "${opts[@]}" -n -- "$f" 2>|"$1/stderr"
}

__rr_started() {
  __rr_now
  \builtin printf 'started=%s\n' "$__rr_t" >|"$1/started"
  \builtin printf '%s' "$PWD" >|"$1/pwd"
  # Kept for the end notice (__rr_fin).
  __rr_sd0=$1 __rr_t0=$__rr_t __rr_pwd0=$PWD
}

# The cwd override of command dir $1 into __rr_cd (empty: none).
__rr_read_cwd() {
  __rr_cd=
  if [ -f "$1/cwd" ]; then IFS= \builtin read -r -d '' __rr_cd <"$1/cwd"; fi
}

# Show a command's text in the terminal as it starts, as a person typing it would have seen it
# (what the terminal echoed before is the engine's own line: `session read` leaves it out).
# Then a mark for `session read` (an OSC string tmux ignores; in the transcript pipe only):
# from here the command's own output, read from its files, goes into the transcript.
__rr_show_text() {
  local t
  IFS= \builtin read -r -d '' -N 4096 t <"$1/cmd.sh"
  __rr_key 3
  \builtin printf '\r\033[K$ %s\n\033]6973;rr-run;%s%s\a' "${t%$'\n'}" "${__rr_k:+$__rr_k;}" "${1##*/}"
  __rr_k=
}

# Show a finished command's output (capped) and how it ended. Builtins only: the terminal
# stays at the shell. The output is framed by marks: `session read` has already put the
# command's output in the transcript as it came, and leaves this copy out.
__rr_show() {
  local d=$1 code=$2 f t n m
  __rr_key 3
  m=${__rr_k:+$__rr_k;}
  __rr_k=
  \builtin printf '\033]6973;rr-end;%s%s\a' "$m" "${d##*/}"
  for f in stdout stderr; do
    [ -s "$d/$f" ] || continue
    IFS= \builtin read -r -d '' -N 65537 t <"$d/$f"
    if [ ${#t} -gt 65536 ]; then
      t=${t:0:65536}
      n=$(($(\command -p wc -c <"$d/$f") - 65536))
    else
      n=0
    fi
    \builtin printf '%s' "$t"
    [ "${t: -1}" = $'\n' ] || \builtin printf '\n'
    if [ "$n" -gt 0 ] 2>/dev/null; then \builtin printf '[... about %s more bytes in the command log]\n' "$n"; fi
  done
  \builtin printf '\033]6973;rr-shown;%s%s\a' "$m" "${d##*/}"
  if [ "$code" != 0 ]; then \builtin printf '[exit %s]\n' "$code"; fi
}

case ${1-} in
replaced)
  # The first prompt of a bash that replaced the session shell: the command that ran `exec` is
  # over; record it, and take this shell as the session shell from now on.
  __rr_kp=$PPID
  __rr_o=
  read -r __rr_o 2>/dev/null <"$__rr_sdir/busy"
  if [ -n "$__rr_o" ] && [ -e "$__rr_cdir/$__rr_o/started" ] && [ ! -s "$__rr_cdir/$__rr_o/exit" ]; then
    __rr_cur=$__rr_cdir/$__rr_o
    __rr_lock=1
    __rr_keep=1
    __rr_fin 0 shell_replaced
  fi
  read -r __rr_comm <"/proc/$$/comm" && \builtin printf '%s\n' "$__rr_comm" >|"$__rr_sdir/shell.comm"
  \builtin mapfile -d '' __rr_argv <"/proc/$$/cmdline" && { \builtin printf '%s ' "${__rr_argv[@]}"; \builtin printf '\n'; } >|"$__rr_sdir/shell.cmdline"
  __rr_arm
  ;;
bg)
  __rr_arm
  if [ -e "$2/window.want" ]; then
    # `--stdin`: a tmux window of its own, whose terminal is its stdin (`session send
    # --command-id` types there). The window gets the shell's directory and exported
    # environment as data (tmux gives a new window the server's environment, not ours).
    [ -f "$2/cwd" ] || \builtin printf '%s' "$PWD" >|"$2/cwd"
    \builtin export -p >|"$2/env.all" 2>/dev/null
    "$__rr_tmux" -L "$__rr_sock" new-window -d -P -F '#{window_id}' -t "=$__rr_sid:" -- \
      "$BASH" --noprofile --norc "$__rr_sdir/rr.sh" bgrun "$2" >|"$2/window" 2>/dev/null
  else
    \command -p setsid -f "$BASH" --noprofile --norc "$__rr_sdir/rr.sh" bgrun "$2" \
      </dev/null >/dev/null 2>&1
  fi
  \command -p rm -f -- "$__rr_sdir/busy"
  "$__rr_tmux" -L "$__rr_sock" wait-for -S "rr-${2##*/}-go" >/dev/null 2>&1
  IFS= \builtin read -r -d '' -N 4096 __rr_t <"$2/cmd.sh"
  \builtin printf '\r\033[K$ %s &\n[background %s]\n' "${__rr_t%$'\n'}" "${2##*/}"
  ;;
bgrun)
  trap : TERM INT HUP
  __rr_cur=$2
  printf '%s\n' "$$" >"$2/pid.tmp" && \command -p mv -f -- "$2/pid.tmp" "$2/pid"
  __rr_read_cwd "$2"
  if [ -n "$__rr_cd" ] && ! cd -- "$__rr_cd" 2>"$2/stderr"; then
    __rr_started "$2"
    : >"$2/stdout"
    __rr_fin 1 cd_failed
  else
    __rr_started "$2"
    if [ -f "$2/env.all" ]; then . "$2/env.all" 2>/dev/null; fi
    if [ -f "$2/env.sh" ]; then . "$2/env.sh" 2>/dev/null; fi
    if [ -e "$2/window.want" ]; then
      # Its own window: stdin is that terminal.
      "$BASH" --noprofile --norc -- "$2/cmd.sh" >"$2/stdout" 2>"$2/stderr"
    else
      "$BASH" --noprofile --norc -- "$2/cmd.sh" </dev/null >"$2/stdout" 2>"$2/stderr"
    fi
    __rr_fin $? normal
  fi
  ;;
pane)
  # Restart the session shell when a command ends it (`exit 4`, `kill -9 $$`), unless the
  # session is being destroyed or the shell keeps dying at once (5 starts within 10 s).
  # Job control: each shell gets the terminal as its own process group, and this loop takes the
  # terminal back when one dies, so the next one can have it.
  set -m
  # The secrets (see the top of this file), open here under no name from now on; no session
  # shell gets these descriptors.
  if [ -f "$__rr_sdir/marks.key" ] && [ -f "$__rr_sdir/notice.key" ] \
    && exec 3<"$__rr_sdir/marks.key" 4<"$__rr_sdir/notice.key"; then
    \command -p rm -f -- "$__rr_sdir/marks.key" "$__rr_sdir/notice.key"
    __rr_kp=$$
    printf '%s\n' "$$" >|"$__rr_sdir/pane.pid"
  fi
  __rr_starts=0
  __rr_since=$SECONDS
  while :; do
    "$BASH" --noprofile --rcfile "$__rr_sdir/rr.sh" -i 3<&- 4<&-
    __rr_s=$?
    __rr_o=
    read -r __rr_o 2>/dev/null <"$__rr_sdir/busy"
    # The lock's owner ended with its shell, unless its exit file holds an exit line (as
    # ctl.sh rr_ended reads one): one the command wrote over itself (garbage, or a line that
    # only starts like one) is replaced by the truth.
    __rr_e=
    if [ -n "$__rr_o" ]; then read -r __rr_e 2>/dev/null <"$__rr_cdir/$__rr_o/exit"; fi
    if [ -n "$__rr_o" ] && ! [[ $__rr_e =~ ^code=[0-9]+\ how=[a-z_]+\ state=[a-z_]+(\ |$) ]]; then
      __rr_cur=$__rr_cdir/$__rr_o
      __rr_lock=1
      if [ ! -e "$__rr_cur/started" ]; then
        __rr_fin 255 not_started hold
      elif [ "$__rr_s" -gt 128 ]; then
        __rr_fin "$__rr_s" shell_killed hold
      else
        __rr_fin "$__rr_s" shell_exit hold
      fi
    fi
    if [ -e "$__rr_sdir/closing" ]; then break; fi
    if [ $((SECONDS - __rr_since)) -gt 10 ]; then
      __rr_starts=0
      __rr_since=$SECONDS
    fi
    __rr_starts=$((__rr_starts + 1))
    if [ "$__rr_starts" -ge 5 ]; then
      printf 'remote-runner: the session shell keeps exiting at once; the session ends\n'
      break
    fi
    printf '[remote-runner: the shell ended (status %s); a fresh shell starts in the same directory]\n' "$__rr_s"
  done
  ;;
'')
  set +H
  bind 'set bell-style none' 2>/dev/null
  # No bracketed-paste mode switches (ESC[?2004h before every prompt) in the terminal and its
  # transcript; input is pasted by tmux without paste brackets anyway.
  bind 'set enable-bracketed-paste off' 2>/dev/null
  unset HISTFILE PROMPT_COMMAND TMUX TMUX_PANE __rr_shell_pid
  # The environment a login shell of the user's own shell has (PATH, conda, nvm, ...).
  if [ -s "$__rr_sdir/login.env" ]; then
    while IFS= read -r -d '' __rr_kv; do
      __rr_k=${__rr_kv%%=*}
      case $__rr_k in
      PWD | OLDPWD | SHLVL | _ | TMUX | TMUX_PANE | PS1 | PS2 | PS4 | PROMPT_COMMAND | BASH_ENV | ENV | \
        SHELLOPTS | BASHOPTS | HISTFILE | TERM | COLUMNS | LINES | __rr_* | BASH_FUNC_*) continue ;;
      esac
      # shellcheck disable=SC2163 # exports NAME=VALUE
      if [[ $__rr_k =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]]; then export "$__rr_kv" 2>/dev/null; fi
    done <"$__rr_sdir/login.env"
  fi
  if [ ! -e "$__rr_sdir/shell.pid" ] && [ -s "$__rr_sdir/startup.out" ]; then
    \command -p cat -- "$__rr_sdir/startup.out"
  fi
  # bash users get their ~/.bashrc (aliases, functions), unless resolving the login environment
  # timed out (it read the same file: it would hang here too).
  __rr_ls=
  read -r __rr_ls 2>/dev/null <"$__rr_sdir/login.shell"
  if [ "$__rr_ls" = bash ] && [ -s "$__rr_sdir/login.env" ] && [ -r ~/.bashrc ]; then
    . ~/.bashrc
    set +euC
    unset PROMPT_COMMAND
  fi
  # After a command ended the shell: its exported environment.
  if [ -r "$__rr_sdir/exports" ]; then . "$__rr_sdir/exports" 2>/dev/null; fi
  HISTCONTROL=ignorespace
  PS1='$ '
  PS2='> '
  export PAGER=cat GIT_PAGER=cat MANPAGER=cat SYSTEMD_PAGER=cat GIT_EDITOR=true
  export GIT_TERMINAL_PROMPT=0 DEBIAN_FRONTEND=noninteractive
  : @ENV@
  if [ -f "$__rr_sdir/cwd" ]; then
    IFS= read -r -d '' __rr_c <"$__rr_sdir/cwd"
    \builtin cd -- "$__rr_c" 2>/dev/null || \builtin printf 'remote-runner: %q is gone; the shell starts in %s\n' "$__rr_c" "$PWD"
  fi
  \builtin printf '%s\n' "$$" >|"$__rr_sdir/shell.pid"
  export __rr_shell_pid=$$
  # The pane process, which holds the secrets (a shell it did not start has none).
  if [ -s "$__rr_sdir/pane.pid" ]; then __rr_kp=$PPID; fi
  read -r __rr_comm <"/proc/$$/comm" && \builtin printf '%s\n' "$__rr_comm" >|"$__rr_sdir/shell.comm"
  # How this shell was started: a command that replaces it (`exec bash`) changes it.
  \builtin mapfile -d '' __rr_argv <"/proc/$$/cmdline" && { \builtin printf '%s ' "${__rr_argv[@]}"; \builtin printf '\n'; } >|"$__rr_sdir/shell.cmdline"
  __rr_arm
  # A lock the previous shell held as it ended: released now that this one is up.
  __rr_o=
  read -r __rr_o 2>/dev/null <"$__rr_sdir/busy"
  if [ -n "$__rr_o" ] && [ -s "$__rr_cdir/$__rr_o/exit" ]; then \command -p rm -f -- "$__rr_sdir/busy"; fi
  "$__rr_tmux" -L "$__rr_sock" wait-for -S "rr-$__rr_sid-ready" >/dev/null 2>&1
  ;;
esac
